/* The fd table: two levels of atomic pointers, chunks mmap'ed on first use
 * and never freed.  Readers are lock-free; writers swap single slots. */
#include "lib/sock/sock.h"

#include <sys/mman.h>

_Atomic(struct dsock_sock *) *_Atomic dsock_fdt[DSOCK_FDT_CHUNKS];

static _Atomic(struct dsock_sock *) *chunk_for(unsigned fd, int create)
{
	_Atomic(struct dsock_sock *) *_Atomic *slot = &dsock_fdt[fd >> DSOCK_FDT_CHUNK_BITS];
	_Atomic(struct dsock_sock *) *c = atomic_load_explicit(slot, memory_order_acquire);
	_Atomic(struct dsock_sock *) *expect = NULL;

	if (c || !create)
		return c;
	c = mmap(NULL, DSOCK_FDT_CHUNK * sizeof(*c), PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (c == MAP_FAILED)
		return NULL;
	/* release: the zeroed chunk is visible before its pointer */
	if (!atomic_compare_exchange_strong_explicit(slot, &expect, c, memory_order_acq_rel,
						     memory_order_acquire)) {
		munmap(c, DSOCK_FDT_CHUNK * sizeof(*c));
		c = expect;
	}
	return c;
}

struct dsock_sock *dsock_fdt_get(int fd)
{
	for (;;) {
		struct dsock_sock *s = dsock_fdt_peek(fd);
		int ref;

		if (!s)
			return NULL;
		ref = atomic_load_explicit(&s->ref, memory_order_relaxed);
		/* take a reference only while the object is live */
		while (ref > 0 && !atomic_compare_exchange_weak_explicit(
				&s->ref, &ref, ref + 1, memory_order_acquire, memory_order_relaxed))
			;
		if (ref <= 0)
			continue; /* freed under us: the slot has changed; look again */
		if (dsock_fdt_peek(fd) == s)
			return s;
		dsock_sock_put(s); /* slot changed between peek and hold */
	}
}

struct dsock_sock *dsock_fdt_swap(int fd, struct dsock_sock *s)
{
	_Atomic(struct dsock_sock *) *c;

	if (fd < 0 || (unsigned)fd >= DSOCK_FDT_CHUNKS * DSOCK_FDT_CHUNK)
		return DSOCK_FDT_FAIL;
	c = chunk_for((unsigned)fd, s != NULL);
	if (!c)
		return s ? DSOCK_FDT_FAIL : NULL;
	return atomic_exchange_explicit(&c[(unsigned)fd & (DSOCK_FDT_CHUNK - 1)], s,
					memory_order_acq_rel);
}

void dsock_fdt_walk(void (*fn)(int fd, struct dsock_sock *s, void *arg), void *arg)
{
	for (unsigned i = 0; i < DSOCK_FDT_CHUNKS; i++) {
		_Atomic(struct dsock_sock *) *c = chunk_for(i << DSOCK_FDT_CHUNK_BITS, 0);
		if (!c)
			continue;
		for (unsigned j = 0; j < DSOCK_FDT_CHUNK; j++) {
			struct dsock_sock *s = atomic_load_explicit(&c[j], memory_order_acquire);
			if (s)
				fn((int)(i << DSOCK_FDT_CHUNK_BITS | j), s, arg);
		}
	}
}

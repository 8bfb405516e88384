/* Type-stable allocator for socket objects: 64 KiB slabs from mmap, never
 * returned, a free list under a spin lock (taken only on socket creation and
 * last close, never on the data path). */
#include "lib/sock/sock.h"
#include "lib/sock/solo.h"
#include "lib/ctl/ctl.h"
#include "lib/transport/transport.h"

#include <sched.h>
#include <string.h>
#include <sys/mman.h>

#define SLAB_BYTES (64u << 10)

static atomic_flag alloc_lock = ATOMIC_FLAG_INIT;
static struct dsock_sock *free_list;
static _Atomic uint64_t next_id = 1;

static void lock(void)
{
	while (atomic_flag_test_and_set_explicit(&alloc_lock, memory_order_acquire))
		sched_yield();
}

static void unlock(void)
{
	atomic_flag_clear_explicit(&alloc_lock, memory_order_release);
}

static int grow(void)
{
	struct dsock_sock *slab = mmap(NULL, SLAB_BYTES, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	size_t n = SLAB_BYTES / sizeof(*slab);

	if (slab == MAP_FAILED)
		return -1;
	for (size_t i = 0; i < n; i++) {
		slab[i].next_free = free_list;
		free_list = &slab[i];
	}
	return 0;
}

struct dsock_sock *dsock_sock_new(int domain, int type, int protocol)
{
	struct dsock_sock *s;

	lock();
	if (!free_list && grow()) {
		unlock();
		return NULL;
	}
	s = free_list;
	free_list = s->next_free;
	unlock();
	s->domain = domain;
	s->type = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
	s->protocol = protocol;
	atomic_store_explicit(&s->flags, (type & SOCK_NONBLOCK) ? DSOCK_SF_NONBLOCK : 0,
			      memory_order_relaxed);
	s->state = 1; /* DSOCK_ST_OPEN */
	s->reason = 0;
	s->ev = 0;
	s->id = atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed);
	s->tp = NULL;
	s->tp_priv = NULL;
	s->owner = NULL;
	s->next_free = NULL;
	/* release: the fields above are visible to whoever sees ref > 0 */
	atomic_store_explicit(&s->ref, 1, memory_order_release);
	return s;
}

void dsock_sock_hold(struct dsock_sock *s)
{
	atomic_fetch_add_explicit(&s->ref, 1, memory_order_relaxed);
}

void dsock_sock_put(struct dsock_sock *s)
{
	if (atomic_fetch_sub_explicit(&s->ref, 1, memory_order_acq_rel) != 1)
		return;
	if (dsock_solo_before_release(s))
		return; /* the section a signal handler interrupted releases it */
	if (s->tp && s->tp->waits)
		atomic_fetch_sub(&dsock_waits_socks, 1);
	if (s->owner && s->owner->release)
		s->owner->release(s);
	s->owner = NULL;
	s->tp_priv = NULL;
	if (atomic_load_explicit(&s->flags, memory_order_relaxed) & DSOCK_SF_REPORTED)
		dsock_sock_report(s, 0, DSOCK_EV_CLOSE);
	lock();
	s->next_free = free_list;
	free_list = s;
	unlock();
}

/* fork: hold the allocator lock across the fork so the child never sees a
 * half-updated free list.  Bounded: a fork from a signal handler that
 * interrupted this very thread inside the lock must not hang. */
static int fork_locked;

void dsock_sock_fork_prepare(void)
{
	for (int i = 0; i < 100000; i++) {
		if (!atomic_flag_test_and_set_explicit(&alloc_lock, memory_order_acquire)) {
			fork_locked = 1;
			return;
		}
		sched_yield();
	}
	fork_locked = 0;
}

void dsock_sock_fork_parent(void)
{
	if (fork_locked)
		unlock();
}

void dsock_sock_fork_child(void)
{
	if (atomic_load(&dsock_solo_state) != DSOCK_SOLO_OFF)
		dsock_solo_init(); /* a registration is the address space's */
	/* one thread now: whoever held the lock does not exist here */
	unlock();
}

_Atomic long dsock_waits_socks;

void dsock_sock_attach(struct dsock_sock *s, const struct dsock_transport *t, void *priv)
{
	s->tp_priv = priv;
	s->owner = t;
	__atomic_store_n(&s->tp, t, __ATOMIC_RELEASE);
	if (t->waits) {
		atomic_fetch_add(&dsock_waits_socks, 1);
		dsock_sock_rewatch(s);
	}
}

void dsock_sock_detach(struct dsock_sock *s, unsigned reason)
{
	const struct dsock_transport *t = __atomic_exchange_n(&s->tp, NULL, __ATOMIC_ACQ_REL);

	s->reason = (uint16_t)reason;
	if (t && t->waits) {
		atomic_fetch_sub(&dsock_waits_socks, 1);
		dsock_sock_rewatch(s);
	}
}

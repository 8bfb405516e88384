/* The shm transport's ring helpers and spin constants, shared by its data
 * files (send.c, tokens.c, lease.c, recv.c).  Inline: they sit on every
 * send and receive. */
#ifndef DSOCK_SHM_RING_H
#define DSOCK_SHM_RING_H

#include "lib/transport/shm/shm.h"
#include "lib/base/proc.h"

#include <string.h>
#include <sys/socket.h>

#define SPIN_NS 50000 /* a receiver's lease while in recv (its spin: dsock_spin_ns) */
#define SPIN_WATCH 64 /* pauses between a spinning receiver's full looks */
#define KCHECK_NS 20000 /* a spinning receiver asks the kernel for FIN/RST */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static inline size_t iov_total(const struct msghdr *m)
{
	size_t n = 0;
	for (size_t i = 0; i < m->msg_iovlen; i++)
		n += m->msg_iov[i].iov_len;
	return n;
}

/* Ring r's map, read after the tail it goes with (acquire): the bytes up
 * to that tail were written with it, or with one that puts them at the
 * same places. */
static inline struct ring_map ring_map_of(const struct shm_conn *c, const struct dsock_shm_ring *r)
{
	uint64_t m = __atomic_load_n(&r->map, __ATOMIC_RELAXED);
	struct ring_map rm = { (uint32_t)m, (uint32_t)(m >> 32) };

	if (!rm.w)
		rm.w = DSOCK_RING_MIN;
	if (rm.w < DSOCK_RING_MIN || rm.w > c->size || (rm.w & (rm.w - 1)))
		rm.w = 0;
	return rm;
}

/* Bytes readable in the rx ring, or -1 if the peer broke the rules;
 * *map: where they lie. */
static inline int64_t rx_avail_in(struct shm_conn *c, uint64_t *head, struct ring_map *map)
{
	uint64_t h = __atomic_load_n(&c->rx->head, __ATOMIC_RELAXED);
	uint64_t t = __atomic_load_n(&c->rx->tail, __ATOMIC_ACQUIRE); /* data before tail */

	*head = h;
	*map = ring_map_of(c, c->rx);
	return map->w && t - h <= map->w ? (int64_t)(t - h) : -1;
}

static inline int64_t rx_avail(struct shm_conn *c, uint64_t *head)
{
	struct ring_map m;

	return rx_avail_in(c, head, &m);
}

/* A consumer that learnt of c's data from its link (link.c) will read it
 * and, as a server does, most likely answer: the lines that takes are
 * asked for now, so that their misses overlap instead of coming one
 * after another on the way to the answer (a process holding thousands of
 * connections finds none of them in its caches).  A prefetch never
 * faults, so an index the peer wrote may serve as an address. */
static inline void shm_prefetch_reply(const struct shm_conn *c, uint64_t head)
{
	struct ring_map rm = ring_map_of(c, c->rx), tm = c->tx_rm; /* (unlocked: an address only) */
	__builtin_prefetch(c->rxd + ((head + rm.shift) & (c->size - 1) & (rm.w - 1)), 0);
	__builtin_prefetch(c->tx, 1);             /* tail */
	__builtin_prefetch(&c->tx->tx_lock, 1);
	__builtin_prefetch(&c->tx->lease_until, 0);
	__builtin_prefetch(c->txd + ((c->tx_tail + tm.shift) & (c->size - 1) & (tm.w - 1)), 1);
	__builtin_prefetch(c->sock, 1);
	for (size_t off = DSOCK_CL; off < sizeof(*c); off += DSOCK_CL)
		__builtin_prefetch((const char *)c + off, 1);
}

/* Copies n bytes between the ring at index idx and an iovec at offset off. */
static inline void ring_copy(unsigned char *ring, uint32_t size, uint64_t idx, const struct msghdr *m,
		      size_t off, size_t n, int to_ring)
{
	size_t i = 0;

	while (i < m->msg_iovlen && off >= m->msg_iov[i].iov_len)
		off -= m->msg_iov[i++].iov_len;
	while (n && i < m->msg_iovlen) {
		size_t chunk = m->msg_iov[i].iov_len - off;
		unsigned char *p = (unsigned char *)m->msg_iov[i].iov_base + off;
		if (chunk > n)
			chunk = n;
		for (size_t done = 0; done < chunk;) {
			size_t pos = (size_t)((idx + done) & (size - 1));
			size_t run = size - pos < chunk - done ? size - pos : chunk - done;
			if (to_ring)
				memcpy(ring + pos, p + done, run);
			else
				memcpy(p + done, ring + pos, run);
			done += run;
		}
		idx += chunk;
		n -= chunk;
		off = 0;
		i++;
	}
}

/* ---- ring indices: checked on every read ---- */
/* Bytes writable in the tx ring, or -1 if the peer broke the rules. */
static inline int64_t tx_space(struct shm_conn *c, uint64_t *tail)
{
	uint64_t t = __atomic_load_n(&c->tx->tail, __ATOMIC_RELAXED);
	uint64_t h = __atomic_load_n(&c->tx->head, __ATOMIC_ACQUIRE); /* reads done before head */
	uint32_t w = ring_map_of(c, c->tx).w;

	*tail = t;
	if (!w || t - h > w)
		return -1;
	__atomic_store_n(&c->tx_head, h, __ATOMIC_RELAXED); /* pollers too, unlocked */
	return (int64_t)(w - (t - h));
}

/* This process's connection c as a producer, for tail_writer. */
static inline uint64_t writer_id(const struct shm_conn *c)
{
	return (uint64_t)(uint32_t)dsock_proc.pid << 32 | c->nr;
}

/* A sender (tx lock held) that the ring's width holds back (tail t and
 * head h as just read, map m) widens it, to the ring's size, where no
 * byte in flight moves: with the ring empty, or with those bytes in one
 * stretch of the old width (no wrap), which a new shift puts exactly
 * where they are.  1 if it did. */
static inline int tx_widen(struct shm_conn *c, uint64_t t, uint64_t h, struct ring_map m)
{
	uint32_t shift = m.shift;

	if (m.w >= c->size)
		return 0;
	if (t != h) {
		uint64_t first = h + m.shift, last = t - 1 + m.shift;
		if (first / m.w != last / m.w)
			return 0; /* (they wrap: not now) */
		/* byte i at (i + shift') mod size == (i + shift) mod w */
		shift = (uint32_t)(m.shift - (first - first % m.w));
	}
	__atomic_store_n(&c->tx->map, (uint64_t)(shift & (c->size - 1)) << 32 | c->size,
			 __ATOMIC_RELAXED); /* (the tail that follows publishes it) */
	/* a holder that trusts its own copies (tx_space_for) would miss it */
	if (__atomic_load_n(&c->tx->tail_writer, __ATOMIC_RELAXED) != writer_id(c))
		__atomic_store_n(&c->tx->tail_writer, 0, __ATOMIC_RELAXED);
	return 1;
}

/* The same for a sender (tx lock held) that needs `want` bytes: the
 * consumer's head as last seen is enough while it leaves room, which
 * spares a cache line that the consumer writes on every read.  (A stale
 * head only understates the space.)  And the tail is our own copy when
 * we stored it last: loading it back from its line, which the polling
 * consumer keeps taking, would stall a small send for a large part of its
 * time.  Another
 * holder (a thread shares this copy; a fork child, an exec'd program or
 * a second adoption has its own) stores its id with the tail it stores. */
static inline int64_t tx_space_for(struct shm_conn *c, uint64_t *tail, size_t want)
{
	int mine = c->tx_tail_ok && __atomic_load_n(&c->tx->tail_writer, __ATOMIC_RELAXED) == writer_id(c);
	uint64_t t = mine ? c->tx_tail : __atomic_load_n(&c->tx->tail, __ATOMIC_RELAXED);
	uint64_t h = __atomic_load_n(&c->tx_head, __ATOMIC_RELAXED);
	/* (the map too: it shares the tail's line) */
	struct ring_map m = mine ? c->tx_rm : ring_map_of(c, c->tx);
	int64_t room;

	if (m.w && t - h <= m.w && m.w - (t - h) >= want) {
		*tail = t;
		c->tx_rm = m;
		return (int64_t)(m.w - (t - h));
	}
	room = tx_space(c, tail);
	m = ring_map_of(c, c->tx);
	if (room >= 0 && m.w < c->size) {
		/* a stream: this send does not fit, or we wrote the width's
		 * worth since we last looked and the consumer has not read
		 * it all (a request and answer connection finds its ring
		 * empty each time, and stays narrow) */
		uint64_t hh = __atomic_load_n(&c->tx_head, __ATOMIC_RELAXED);
		if (((size_t)room < want || *tail != hh) && tx_widen(c, *tail, hh, m)) {
			room = tx_space(c, tail);
			m = ring_map_of(c, c->tx);
		}
	}
	c->tx_rm = m;
	return room;
}

/* Where the tx ring's bytes go, as tx_space_for last found (tx lock
 * held since). */
static inline struct ring_map tx_map(const struct shm_conn *c)
{
	return c->tx_rm;
}


#endif

/* The shm transport's locks in shared memory: owner-tagged words, a dead
 * holder's lock taken over, and the producer lock biased to its one sender. */
#include "lib/transport/shm/ring.h"
#include "lib/base/grow.h"
#include "lib/base/proc.h"
#include "lib/base/real.h"
#include "lib/sock/ready.h"
#include "common/log.h"
#include "common/rawsys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <linux/tcp.h> /* the kernel's tcp_info: byte counters */
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The owner id of the shared locks.  Cached per thread, and forgotten in
 * a fork child (shm_forget_tid): its one thread inherits the parent's
 * cache, and with the parent's id it would take the parent's lock for its
 * own (-EDEADLK: a reset) or look dead once the parent is. */
static __thread int tid;

int shm_my_tid(void)
{
	if (!tid)
		tid = (int)dsock_sys(SYS_gettid);
	return tid;
}

void shm_forget_tid(void)
{
	tid = 0;
}

int shm_reap_dead_holder(uint32_t *w)
{
	uint32_t cur = __atomic_load_n(w, __ATOMIC_RELAXED);

	if (!cur || (cur <= (uint32_t)INT_MAX && !(kill((pid_t)cur, 0) < 0 && errno == ESRCH)))
		return 0;
	__atomic_compare_exchange_n(w, &cur, 0, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	return 1;
}

static int revoke_bias(struct dsock_shm_ring *r, uint32_t w, int try);

/* A lock word in shared memory, held by a thread id; a holder that died is
 * detected and its lock taken over.  Bounded: a lock a hostile peer holds
 * forever faults the connection instead of hanging us.  biased: w is that
 * ring's tx_lock, whose bias is revoked (below), not reaped; try: one
 * attempt at a lock someone holds (-EBUSY). */
static int lock_word(uint32_t *w, struct dsock_shm_ring *biased, int try)
{
	uint32_t me = (uint32_t)shm_my_tid(), cur;

	for (long i = 0;; i++) {
		cur = 0;
		if (__atomic_compare_exchange_n(w, &cur, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			return 0;
		if (biased && (cur & DSOCK_LOCK_BIAS)) {
			int e = revoke_bias(biased, cur, try);
			if (e == -EAGAIN)
				continue;
			return e;
		}
		if (cur == me)
			return -EDEADLK; /* a signal handler re-entered us */
		if (try)
			return -EBUSY;
		if ((i & 1023) == 1023) {
			if (shm_reap_dead_holder(w))
				continue;
			if (i > (1L << 24))
				return -EDEADLK;
			sched_yield();
		}
		cpu_relax();
	}
}

int shm_lock(uint32_t *w)
{
	return lock_word(w, NULL, 0);
}

void shm_unlock(uint32_t *w)
{
	__atomic_store_n(w, 0, __ATOMIC_RELEASE);
}

/* ---- the producer lock, biased to its one sender ----------------------------
 * A compare-and-swap on the tx lock, a locked instruction, waits for the
 * previous send's tail store to leave the store buffer: the polling
 * consumer holds the tail's line, so each send would pay a cache-line
 * transfer there, most of a streaming sender's time.  A connection
 * usually has one sending thread, so the word is biased to it:
 * released as DSOCK_LOCK_BIAS | tid, after which that thread enters by
 * storing bias_busy and seeing the word unchanged, with no locked
 * instruction and no fence.  Anyone else (another thread, a fork child, the
 * peer in a hand-over) revokes: it swaps the word to its own tid, makes
 * every registered process run a barrier (membarrier), and waits for
 * bias_busy to clear.  After the barrier the owner's bias_busy store is
 * visible to us, or our word is visible to its check, so one of us always
 * waits.  A revoked ring is never biased again (bias_off): a connection
 * with two senders pays one barrier (tens of microseconds), not one per
 * change of hands.  Only a process registered for the barrier (it must
 * reach us) takes a bias, and only while it is (an exec'd image with our
 * tid that could not register revokes its own). */
static int revoke_bias(struct dsock_shm_ring *r, uint32_t w, int try)
{
	uint32_t me = (uint32_t)shm_my_tid(), owner = w & ~DSOCK_LOCK_BIAS, mine = me;
	int e = 0;

	if (owner == me && __atomic_load_n(&r->bias_busy, __ATOMIC_RELAXED))
		return -EDEADLK; /* a signal handler re-entered our biased send */
	if (!__atomic_compare_exchange_n(&r->tx_lock, &w, me, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
		return -EAGAIN; /* it changed: look again */
	__atomic_store_n(&r->bias_off, 1, __ATOMIC_RELAXED);
	/* orders the owner's bias_busy store before its look at the word,
	 * from here: we hold the word now either way */
	if (dsock_sys(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) < 0) {
		e = -EDEADLK; /* cannot tell: the caller resets the connection */
		goto undo;
	}
	for (long i = 0; __atomic_load_n(&r->bias_busy, __ATOMIC_ACQUIRE); i++) {
		if ((i & 1023) == 1023) {
			if (owner > (uint32_t)INT_MAX || (kill((pid_t)owner, 0) < 0 && errno == ESRCH)) {
				__atomic_store_n(&r->bias_busy, 0, __ATOMIC_RELAXED);
				break; /* the owner died inside */
			}
			/* a try waits ~1 ms for an owner inside (stopped there,
			 * it may stay) */
			if (i > (try ? 1L << 16 : 1L << 24)) {
				e = try ? -EBUSY : -EDEADLK;
				goto undo;
			}
			sched_yield();
		}
		cpu_relax();
	}
	return 0;
undo:
	/* the owner is still inside, by its bias: the word goes back to it,
	 * as if we had never come (else it would be held for good by us) */
	__atomic_compare_exchange_n(&r->tx_lock, &mine, w, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
	return e;
}

/* try: one attempt at a lock held by someone (a bias is revoked all the
 * same: its owner's stay inside is short).  The bias owner enters here
 * with no locked instruction; everyone else goes through lock_word. */
static int tx_acquire(struct shm_conn *c, struct dsock_shm_ring *r, int try)
{
	uint32_t me = (uint32_t)shm_my_tid();

	if (c && shm_membarrier_ok &&
	    __atomic_load_n(&r->tx_lock, __ATOMIC_RELAXED) == (DSOCK_LOCK_BIAS | me)) {
		if (__atomic_load_n(&r->bias_busy, __ATOMIC_RELAXED))
			return -EDEADLK; /* a signal handler re-entered us */
		__atomic_store_n(&r->bias_busy, 1, __ATOMIC_RELAXED);
		/* no fence: a revoker's membarrier stands in for it */
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		if (__atomic_load_n(&r->tx_lock, __ATOMIC_RELAXED) == (DSOCK_LOCK_BIAS | me)) {
			__atomic_signal_fence(__ATOMIC_SEQ_CST);
			c->tx_biased = 1;
			return 0;
		}
		__atomic_store_n(&r->bias_busy, 0, __ATOMIC_RELEASE); /* revoked meanwhile */
	}
	int e = lock_word(&r->tx_lock, r, try);
	if (!e && c)
		c->tx_biased = 0;
	return e;
}

int shm_tx_lock(struct shm_conn *c)
{
	return tx_acquire(c, c->tx, 0);
}

int shm_tx_trylock(struct shm_conn *c)
{
	return tx_acquire(c, c->tx, 1) == 0;
}

void shm_tx_unlock(struct shm_conn *c)
{
	struct dsock_shm_ring *r = c->tx;

	if (c->tx_biased) {
		c->tx_biased = 0;
		/* release: our ring stores before the next holder's loads */
		__atomic_store_n(&r->bias_busy, 0, __ATOMIC_RELEASE);
		return;
	}
	__atomic_store_n(&r->tx_lock,
			 shm_membarrier_ok && !__atomic_load_n(&r->bias_off, __ATOMIC_RELAXED) ?
				 DSOCK_LOCK_BIAS | (uint32_t)shm_my_tid() : 0,
			 __ATOMIC_RELEASE);
}

int shm_peer_tx_trylock(struct shm_conn *c)
{
	return tx_acquire(NULL, c->rx, 1) == 0;
}

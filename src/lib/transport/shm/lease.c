/* Leases on the shm transport: a consumer that polls its ring tells the
 * producers they need not wake it (leases, skippable and lingering). */
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

/* ---- skippable leases ------------------------------------------------------ */
/* A producer publishes its tail, then looks at the consumer's lease, and a
 * consumer ends its lease, then looks at the tail: a full fence on each
 * side between the store and the load (Dekker), or each may miss the
 * other's store and the consumer sleeps with data in its ring.  The
 * producer's fence is most of a small send's cost (it waits for the
 * tail's line, which the polling consumer keeps taking).  A consumer that
 * has read the ring SKIP_AFTER_READS times since it last ended a lease
 * streams: its leases carry bit 0, and it makes every producer's stores
 * visible with membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) after ending
 * one and before it looks at the ring, so the producer needs no fence
 * while such a lease lasts.  The barrier is costly while the producer runs
 * (an interrupt to its CPU) and cheap when it does not; it comes at most
 * once per SKIP_AFTER_READS reads (a sleep that ends many leases makes
 * one).  (A rule on time instead, a lease skippable some milliseconds
 * after the last end, would make a consumer that sleeps that often pay
 * the barrier at every sleep, and a streaming receiver that loses its CPU
 * now and then ends a lease every few milliseconds.)  Both must be
 * registered for it (shm_membarrier_ok). */
int shm_membarrier_ok;
#define SKIP_AFTER_READS 10000u

void shm_membarrier_register(void)
{
	long q = dsock_sys(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);

	shm_membarrier_ok = q > 0 && (q & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
			    dsock_sys(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
}

static void producers_barrier(void)
{
	dsock_sys(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0);
	DSOCK_DBG("a skippable lease ended: membarrier"); /* (tests count these) */
}

/* Ends our lease; 1 if it was skippable, so that producers_barrier() must
 * come before we look at the ring (the caller's: one for many). */
static int lease_end(struct shm_conn *c)
{
	int64_t cur = (int64_t)__atomic_load_n(&c->rx->lease_until, __ATOMIC_RELAXED);
	int skippable = c->lease_skippable;

	if (cur != 0) {
		__atomic_store_n(&c->rx->lease_until, 0, __ATOMIC_RELAXED);
		c->rx_reads = 0;
	}
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	c->lease_skippable = 0;
	return skippable;
}

/* Sets our lease as consumer.  Extending it is written only when less
 * than half of it is left (the producer reads the line on every send);
 * ending it is always followed by a full fence, and by a membarrier if it
 * was skippable (the caller then looks at the ring: Dekker with
 * ring_doorbell, see "skippable leases").  INT64_MAX (closing: no more
 * tokens to us) is never skippable, though its bit 0 is set: a producer
 * that skips its fence for it skips only a token it would not send. */
void shm_lease(struct shm_conn *c, int64_t until)
{
	int64_t cur;

	if (until == 0) {
		/* a skippable lease, live or not: its producers' stores from
		 * before they saw it end may not be visible yet */
		if (lease_end(c))
			producers_barrier();
		return;
	}
	cur = (int64_t)__atomic_load_n(&c->rx->lease_until, __ATOMIC_RELAXED);
	if (until != INT64_MAX) {
		until &= ~(int64_t)1;
		if (shm_membarrier_ok && c->rx_reads >= SKIP_AFTER_READS)
			until |= 1;
	}
	if (until == INT64_MAX || cur < until - SPIN_NS / 2 || ((cur ^ until) & 1)) {
		__atomic_store_n(&c->rx->lease_until, (uint64_t)until, __ATOMIC_SEQ_CST);
		if (until & 1 && until != INT64_MAX)
			c->lease_skippable = 1;
	}
}

/* 1 if a token sits in our kernel socket, so that the kernel shows it
 * readable.  The flag says only that a token was sent, not that it is
 * still there: any earlier drain may have taken the byte of a flag a
 * producer set again after the drain's clear, and the flag then stays set
 * with nothing behind it; a partial read that trusted it would hide the
 * rest from every poller (tests/unit/test_shm_tokens.c).  So the kernel is
 * asked, only when the flag alone says yes. */
static int token_in_kernel(struct shm_conn *c, int fd)
{
	int inq = 0;

	if (!__atomic_load_n(&c->rx->token, __ATOMIC_ACQUIRE))
		return 0;
	return dsock_real.ioctl(fd, SIOCINQ, &inq) == 0 && inq > 0;
}

/* The ring looked empty (on 0) or not: our pollers look at it, or not.
 * A poller of ours that takes an announcement sets the flag for data
 * that came after our look, and our clear must not undo that: so a clear
 * is followed by a second look (the flag's writers take one lock in
 * turn: either the setter ran before our clear, and its data shows to
 * the second look, or after it). */
static void hidden_after_look(struct shm_conn *c, int on)
{
	uint64_t head;

	dsock_hidden_set(c->sock, &c->unbacked, on);
	if (!on && rx_avail(c, &head) != 0)
		dsock_hidden_set(c->sock, &c->unbacked, 1);
}

/* Leaving the consumer side: no longer polling; keep the readiness the
 * kernel shows honest (a token backs every non-empty ring, or we note that
 * none does).  Returns 1 on kernel EOF, -errno on a kernel error, else 0. */
int shm_rx_settle(struct shm_conn *c, int fd)
{
	uint64_t head;
	int64_t avail;
	int k = 0, drained = 0;

	shm_lease(c, 0);
	avail = rx_avail(c, &head);
	if (avail == 0 && __atomic_load_n(&c->me->rx_switched, __ATOMIC_ACQUIRE) && shm_tokens_flagged(c)) {
		k = shm_clear_and_drain(c, fd, 0);
		avail = rx_avail(c, &head);
		drained = 1;
	}
	/* Data with no token behind it is hidden from the kernel's readiness
	 * (data with one the kernel shows) */
	if (avail == 0)
		hidden_after_look(c, 0);
	else
		dsock_hidden_set(c->sock, &c->unbacked, drained || !token_in_kernel(c, fd));
	return k;
}

/* ---- lingering leases (see shm.h) ---------------------------------------- */
unsigned shm_fork_gen;
static pthread_mutex_t linger_mu = PTHREAD_MUTEX_INITIALIZER;
static struct shm_conn **linger;
static size_t nlinger, linger_cap;
#define LINGER_FEW 8u /* lingering receives past which a leased link serves */

/* Tries a shared lock once. */
int shm_trylock(uint32_t *w)
{
	uint32_t cur = 0;
	return __atomic_compare_exchange_n(w, &cur, (uint32_t)shm_my_tid(), 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

/* Leaving recv (rx lock held): keep the lease, or settle as usual.  The
 * lease is kept only while no thread of ours sleeps in the kernel (Dekker
 * with shm_settle_lingering: we publish the lease, then look for sleepers;
 * a sleeper counts itself, then settles the list).  Returns as rx_settle. */
int shm_rx_leave(struct shm_conn *c, int fd)
{
	int64_t now = dsock_fast_ns();

	/* While a poller of ours holds a lease on the link, the producer
	 * announces our data there, and a few lingering receives are still
	 * cheaper (no fence here, no entry to take there: a ping-pong on one
	 * connection takes half as long), but every look walks them all */
	if (c->fork_gen == shm_fork_gen && !c->wr_shut &&
	    (__atomic_load_n(&nlinger, __ATOMIC_RELAXED) < LINGER_FEW || !shm_link_polled(c, now)) &&
	    !__atomic_load_n(&c->peer->closing, __ATOMIC_ACQUIRE)) {
		uint64_t head;
		/* DSOCK_LEASE_US (an event loop that serves many connections
		 * comes back to each later than 50 us), crowded cores or not:
		 * a consumer that lost its core is runnable already, and a
		 * token would only add a system call to each side */
		shm_lease(c, now + shm_lease_ns);
		/* tokens that came while we were away, for data now read: drain
		 * them, or the kernel shows a readable socket with nothing to read
		 * (to pollers we do not see, to a nested epoll, to close: RST) */
		if (shm_tokens_flagged(c) && rx_avail(c, &head) == 0) {
			int k = shm_clear_and_drain(c, fd, 0);
			if (k)
				return k;
		}
		/* pollers of ours look at the ring from now on */
		dsock_hidden_set(c->sock, &c->unbacked, 1);
		if (!c->lingering) {
			pthread_mutex_lock(&linger_mu);
			if (!dsock_grow(&linger, &linger_cap, nlinger, sizeof(*linger), 16)) {
				c->linger_idx = nlinger;
				linger[nlinger++] = c;
				c->lingering = 1;
			}
			pthread_mutex_unlock(&linger_mu);
		}
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (c->lingering && !dsock_anyone_sleeps())
			return 0;
	}
	return shm_rx_settle(c, fd);
}

/* Ends every lease: a producer tokens from now on.  Data that arrived
 * under a lease stays visible to our pollers (unbacked), whatever the token
 * flag says (one may have gone down a drain).  A connection whose rx lock
 * is busy is settled by its holder when it leaves (it sees the sleeper). */
void shm_settle_lingering(void)
{
	size_t kept = 0;
	int barrier = 0;

	pthread_mutex_lock(&linger_mu);
	/* the leases first, then one barrier for all, then the rings (the
	 * ones ended stay locked in between) */
	for (size_t i = 0; i < nlinger; i++) {
		struct shm_conn *c = linger[i];
		c->settling = shm_trylock(&c->rx->rx_lock);
		if (c->settling)
			barrier |= lease_end(c);
	}
	if (barrier)
		producers_barrier();
	for (size_t i = 0; i < nlinger; i++) {
		struct shm_conn *c = linger[i];
		uint64_t head;
		if (!c->settling) {
			c->linger_idx = kept;
			linger[kept++] = c;
			continue;
		}
		hidden_after_look(c, rx_avail(c, &head) != 0);
		c->lingering = 0;
		c->settling = 0;
		shm_unlock(&c->rx->rx_lock);
	}
	nlinger = kept;
	pthread_mutex_unlock(&linger_mu);
}

void shm_linger_forget(struct shm_conn *c)
{
	pthread_mutex_lock(&linger_mu);
	if (c->lingering && c->linger_idx < nlinger && linger[c->linger_idx] == c) {
		/* (by its place: the list may hold every connection) */
		size_t i = c->linger_idx;
		linger[i] = linger[--nlinger];
		linger[i]->linger_idx = i;
	}
	c->lingering = 0;
	pthread_mutex_unlock(&linger_mu);
}

_Atomic long shm_ring_conns;

void shm_count_ring_use(struct shm_conn *c)
{
	/* a reader and a writer thread may get here first at once (TSan) */
	if (!__atomic_load_n(&c->used_ring, __ATOMIC_RELAXED) &&
	    !__atomic_exchange_n(&c->used_ring, 1, __ATOMIC_RELAXED))
		atomic_fetch_add(&shm_ring_conns, 1);
}

/* A spinning receiver's wait for the next look: watches the tail (and the
 * token flag) alone, so that data is seen within a pause of its arrival,
 * not a whole look later (two clock reads and a dozen shared words: a
 * ping-pong message would wait half of such a round on average).
 * Before the peer's switch its data comes by the kernel: a plain pause. */
void shm_spin_watch(struct shm_conn *c, uint64_t head)
{
	if (!__atomic_load_n(&c->me->rx_switched, __ATOMIC_RELAXED)) {
		for (int i = 0; i < 16; i++)
			cpu_relax();
		return;
	}
	for (int i = 0; i < SPIN_WATCH; i++) {
		if (__atomic_load_n(&c->rx->tail, __ATOMIC_RELAXED) != head ||
		    __atomic_load_n(&c->rx->token, __ATOMIC_RELAXED))
			return;
		cpu_relax();
	}
}

int shm_err_is_fatal(int err)
{
	return err && err != -EAGAIN && err != -EINTR;
}

/* Data on the shm transport: the shared locks, the kernel byte counter,
 * the kernel-to-ring switch, wake-up tokens, leases, and sending (the
 * receive is recv.c's). */
#include "lib/transport/shm/ring.h"
#include "lib/core/proc.h"
#include "lib/interpose/real.h"
#include "lib/sock/ready.h"
#include "common/log.h"

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

static int my_tid(void)
{
	if (!tid)
		tid = (int)syscall(SYS_gettid);
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
	uint32_t me = (uint32_t)my_tid(), cur;

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
 * A send took the tx lock with a compare-and-swap, and that locked
 * instruction waited for the previous send's tail store to leave the store
 * buffer: the polling consumer holds the tail's line, so each send paid a
 * cache-line transfer there (perf: most of a streaming sender's time).  A
 * connection usually has one sending thread, so the word is biased to it:
 * released as DSOCK_LOCK_BIAS | tid, after which that thread enters by
 * storing bias_busy and seeing the word unchanged, with no locked
 * instruction and no fence.  Anyone else (another thread, a fork child, the
 * peer in a hand-over) revokes: it swaps the word to its own tid, makes
 * every registered process run a barrier (membarrier), and waits for
 * bias_busy to clear.  After the barrier the owner's bias_busy store is
 * visible to us, or our word is visible to its check, so one of us always
 * waits.  A revoked ring is never biased again (bias_off): a connection
 * with two senders pays one barrier (about 27 us here), not one per
 * change of hands.  Only a process registered for the barrier (it must
 * reach us) takes a bias, and only while it is (an exec'd image with our
 * tid that could not register revokes its own). */
static int revoke_bias(struct dsock_shm_ring *r, uint32_t w, int try)
{
	uint32_t me = (uint32_t)my_tid(), owner = w & ~DSOCK_LOCK_BIAS, mine = me;
	int e = 0;

	if (owner == me && __atomic_load_n(&r->bias_busy, __ATOMIC_RELAXED))
		return -EDEADLK; /* a signal handler re-entered our biased send */
	if (!__atomic_compare_exchange_n(&r->tx_lock, &w, me, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
		return -EAGAIN; /* it changed: look again */
	__atomic_store_n(&r->bias_off, 1, __ATOMIC_RELAXED);
	/* orders the owner's bias_busy store before its look at the word,
	 * from here: we hold the word now either way */
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) < 0) {
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
	uint32_t me = (uint32_t)my_tid();

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
				 DSOCK_LOCK_BIAS | (uint32_t)my_tid() : 0,
			 __ATOMIC_RELEASE);
}

int shm_peer_tx_trylock(struct shm_conn *c)
{
	return tx_acquire(NULL, c->rx, 1) == 0;
}

/* ---- the kernel's sent-byte counter (shared by every process holding it) --
 * Data bytes ever written to the kernel socket (plus the baseline): a
 * counter from TCP_INFO plus the send queue, read on both sides of the
 * counter and retried until they agree, or an ACK landing between the two
 * calls would skew the sum (and with it the switch offset).  Our FIN takes
 * a sequence number: the counter includes it once sent, the queue does not.
 * (The receive side counts for itself, side.kread: once the socket is
 * closed, the kernel's counter cannot say whether the peer's FIN is in it,
 * and one byte of data was lost that way.) */
int64_t shm_kernel_sent(int fd)
{
	for (int i = 0; i < 1000; i++) {
		struct tcp_info ti;
		socklen_t l = sizeof(ti);
		int q1 = 0, q2 = 0;

		if (dsock_real.ioctl(fd, SIOCOUTQ, &q1) < 0 ||
		    dsock_real.getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) < 0 ||
		    dsock_real.ioctl(fd, SIOCOUTQ, &q2) < 0)
			return -1;
		if (q1 != q2)
			continue;
		return (int64_t)ti.tcpi_bytes_acked + q1 - shm_fin_state(ti.tcpi_state);
	}
	return -1;
}

int shm_calibrate(struct shm_conn *c, int fd)
{
	/* the stream's origin: what the kernel counts now, less what we sent
	 * before the offer (no send of ours in between: they hold mu) */
	pthread_mutex_lock(&c->mu);
	c->tx_base = shm_kernel_sent(fd);
	if (c->tx_base >= 0)
		c->tx_base -= atomic_load(&c->early_sent);
	pthread_mutex_unlock(&c->mu);
	return c->tx_base < 0 ? -EINVAL : 0;
}

/* ---- ring indices: checked on every read -------------------------------- */
/* Bytes writable in the tx ring, or -1 if the peer broke the rules. */
static int64_t tx_space(struct shm_conn *c, uint64_t *tail)
{
	uint64_t t = __atomic_load_n(&c->tx->tail, __ATOMIC_RELAXED);
	uint64_t h = __atomic_load_n(&c->tx->head, __ATOMIC_ACQUIRE); /* reads done before head */

	*tail = t;
	if (t - h > c->size)
		return -1;
	__atomic_store_n(&c->tx_head, h, __ATOMIC_RELAXED); /* pollers too, unlocked */
	return (int64_t)(c->size - (t - h));
}

/* This process's connection c as a producer, for tail_writer. */
static uint64_t writer_id(const struct shm_conn *c)
{
	return (uint64_t)(uint32_t)dsock_proc.pid << 32 | c->nr;
}

/* The same for a sender (tx lock held) that needs `want` bytes: the
 * consumer's head as last seen is enough while it leaves room, which
 * spares a cache line that the consumer writes on every read.  (A stale
 * head only understates the space.)  And the tail is our own copy when
 * we stored it last: loading it back from its line, which the polling
 * consumer keeps taking, stalled a 14 B send for about a third of its
 * time (sockperf throughput 14 B 6.4-6.8 M -> 7.8-9.2 M msg/s).  Another
 * holder (a thread shares this copy; a fork child, an exec'd program or
 * a second adoption has its own) stores its id with the tail it stores. */
static int64_t tx_space_for(struct shm_conn *c, uint64_t *tail, size_t want)
{
	uint64_t t = c->tx_tail_ok && __atomic_load_n(&c->tx->tail_writer, __ATOMIC_RELAXED) == writer_id(c) ?
		     c->tx_tail : __atomic_load_n(&c->tx->tail, __ATOMIC_RELAXED);

	uint64_t h = __atomic_load_n(&c->tx_head, __ATOMIC_RELAXED);

	if (t - h <= c->size && c->size - (t - h) >= want) {
		*tail = t;
		return (int64_t)(c->size - (t - h));
	}
	return tx_space(c, tail);
}

/* ---- skippable leases ------------------------------------------------------ */
/* A producer publishes its tail, then looks at the consumer's lease, and a
 * consumer ends its lease, then looks at the tail: a full fence on each
 * side between the store and the load (Dekker), or each may miss the
 * other's store and the consumer sleeps with data in its ring.  The
 * producer's fence was 92 % of a 14 B send's samples once the tail load
 * was gone (it waits for the tail's line, which the polling consumer
 * keeps taking).  A consumer that has read the ring SKIP_AFTER_READS
 * times since it last ended a lease streams: its leases carry bit 0, and
 * it makes every producer's stores visible with
 * membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) after ending one and before
 * it looks at the ring, so the producer needs no fence while such a lease
 * lasts.  The barrier costs 27 us here while the producer runs (0.13 us
 * when it does not), at most once per 10,000 reads (a sleep that ends many
 * leases makes one): under 3 ns a read.  (A rule on time instead, a lease
 * skippable 10 ms after the last end, made a consumer that sleeps every
 * 10 ms pay it at every sleep; sockperf's receiver ends a lease every
 * 1-100 ms while streaming, as it loses its CPU now and then.)  Both must
 * be registered for it (shm_membarrier_ok). */
int shm_membarrier_ok;
#define SKIP_AFTER_READS 10000u

void shm_membarrier_register(void)
{
	long q = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);

	shm_membarrier_ok = q > 0 && (q & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
			    syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
}

/* ---- tokens --------------------------------------------------------------- */
/* A wake-up token on our kernel stream (tx lock held, sending switched). */
static void send_token(struct shm_conn *c, int fd)
{
	char t = 0;

	__atomic_store_n(&c->tx->token, 1, __ATOMIC_SEQ_CST);
	dsock_real.send(fd, &t, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* After publishing data: wake the consumer unless it is polling the ring.
 * Every write gets its token then (not only the first): epoll's edge
 * trigger reports each arrival, as the kernel does; a polling consumer
 * costs nothing, a sleeping one about what a kernel send would. */
static void ring_doorbell(struct shm_conn *c, int fd)
{
	int64_t hu = (int64_t)__atomic_load_n(&c->tx->hot_until, __ATOMIC_RELAXED);

	/* a skippable lease (above): no fence, and the coarse clock (a lease
	 * that ended unseen, its consumer gone to a poller we do not see, is
	 * noticed up to a tick late: its next token comes that much later) */
	if ((hu & 1) && shm_membarrier_ok && hu > shm_coarse_ns())
		return;
	__atomic_thread_fence(__ATOMIC_SEQ_CST); /* orders tail before hot_until */
	if ((int64_t)__atomic_load_n(&c->tx->hot_until, __ATOMIC_RELAXED) > shm_now_ns())
		return;
	send_token(c, fd);
}

/* Consumers asleep at nearly every message.  Then each message costs a
 * token (a kernel send) and its drain on top of the ring, the wake-up
 * (~35 us here) dominates anyway, and the spin before each sleep takes CPU
 * that the other processes of a pipeline wait for: the kernel alone is
 * cheaper.  The consumer tells (note_read, rx lock held): a small read
 * (under ASLEEP_SMALL) that is this thread's first ring read since one of
 * its waits slept in the kernel (dsock_sleep_gen) scores 1; a read with no
 * sleep before it takes 8 off (so the score climbs only while more than 8
 * in 9 reads follow a sleep); a large read after a sleep counts for
 * nothing (there the wake-up is a small part of the cost).  The producer
 * cannot tell: an epoll loop polling 100 rings lets each ring's lease run
 * out, and every message to it takes a token, as for a consumer asleep
 * (a producer-side rule sent bench/conns.c's 100 connections from 376 k
 * to 114 k round trips/s); that loop never sleeps.
 *
 * The score is the service's (shm_asleep_score, per port we connected to
 * or accepted on), not the connection's: a server's many connections, and
 * the ones a proxy opens and closes all the time (nginx renews its
 * upstream connections every 1,000 requests), add up to one verdict, and
 * a new connection to a service whose consumers sleep goes back at its
 * first such read.  A connection adds its part at each read after a sleep
 * (no shared write on the path that did not sleep) and at its release.  At
 * shm_asleep_reads this side asks both directions back onto the kernel
 * (down.c), for good. */
#define ASLEEP_SMALL 4096
#define ASLEEP_FLUSH 256 /* a read without a sleep adds its -8s at this many */
_Atomic int32_t shm_asleep_score[SHM_ASLEEP_SLOTS];
static __thread unsigned seen_sleep_gen; /* this thread's sleeps a read took */

int32_t shm_asleep_flush(struct shm_conn *c)
{
	_Atomic int32_t *w = &shm_asleep_score[c->service % SHM_ASLEEP_SLOTS];
	int32_t top = shm_asleep_reads > (1u << 29) ? 1 << 30 : (int32_t)shm_asleep_reads * 2;

	if (!c->asleep_delta)
		return atomic_load_explicit(w, memory_order_relaxed);
	/* kept within [0, twice the threshold]: a long hot spell must not
	 * hide a sleepy one for long, nor the other way round */
	int32_t v = atomic_fetch_add_explicit(w, c->asleep_delta, memory_order_relaxed) + c->asleep_delta;
	if (v < 0 || v > top)
		atomic_store_explicit(w, v = v < 0 ? 0 : top, memory_order_relaxed);
	c->asleep_delta = 0;
	return v;
}

/* Asks for the kernel (rx lock held). */
static void ask_down(struct shm_conn *c, const char *why)
{
	uint32_t none = 0;

	if (__atomic_load_n(&c->me->closing, __ATOMIC_RELAXED) || shm_shared(c))
		return;
	if (__atomic_compare_exchange_n(&c->me->down_req, &none, DSOCK_DOWN_ASLEEP, 0, __ATOMIC_SEQ_CST,
					__ATOMIC_RELAXED))
		DSOCK_DBG("port %u: %s: asking for the kernel", c->service, why);
}

void shm_note_read(struct shm_conn *c, size_t n)
{
	if (shm_test_down_reads && ++c->test_reads >= shm_test_down_reads)
		ask_down(c, "DSOCK_TEST_DOWN_READS");
	if (!shm_asleep_reads)
		return;
	if (seen_sleep_gen == dsock_sleep_gen) {
		/* added now and then, not only at the next sleep: a service's
		 * many connections would each hold theirs back while the ones
		 * that slept add up (bench/conns.c, 100 connections: 675 of the
		 * server's first 900 reads came after a sleep, next to none of
		 * the following million; the early ones alone reached 1,024) */
		if ((c->asleep_delta -= 8) <= -ASLEEP_FLUSH)
			shm_asleep_flush(c);
		return;
	}
	seen_sleep_gen = dsock_sleep_gen;
	if (n < ASLEEP_SMALL)
		c->asleep_delta++;
	if (shm_asleep_flush(c) >= (int32_t)shm_asleep_reads)
		ask_down(c, "its consumers found asleep");
}

/* Moves our sending from the kernel to the ring (tx lock held, connection
 * active): everything sent so far went by the kernel, from here on the
 * ring; the receiver drains the kernel up to this offset first.  After it,
 * and only after it, a byte we put on the kernel socket is a token. */
static int switch_tx_locked(struct shm_conn *c, int fd, int force)
{
	int64_t sent;

	if (__atomic_load_n(&c->me->switch_off, __ATOMIC_ACQUIRE) != DSOCK_SWITCH_NONE)
		return 0;
	if (__atomic_load_n(&c->me->closing, __ATOMIC_ACQUIRE))
		return -EPIPE; /* shut down before switching: nothing more to send */
	if (shm_down_any(c) && !force)
		return -EAGAIN; /* going back to the kernel: stay there */
	/* switch only when the kernel holds nothing unsent: while the peer's
	 * window is full the kernel's backpressure (blocking, SO_SNDTIMEO,
	 * EAGAIN) stays exactly as it was; the ring adds no capacity.  (Session
	 * 6 tried switching whenever the kernel was writable and reverted it
	 * after a threaded echo hung; the hang's cause was a double attach,
	 * fixed in session 7 in conn.c, and a large download no longer needs
	 * the earlier switch: docs/ARCHITECTURE.md.) */
	int unsent = 0;
	if (dsock_real.ioctl(fd, SIOCOUTQNSD, &unsent) < 0 || unsent > 0)
		return -EAGAIN;
	sent = shm_kernel_sent(fd) - c->tx_base;
	if (sent < 0)
		return -EPROTO;
	/* from now on our kernel stream carries 1-byte tokens only: Nagle
	 * would hold them behind delayed ACKs (40 ms).  The application's own
	 * TCP_NODELAY is kept and answered separately (shm_sockopt). */
	int one = 1, cur = 0;
	socklen_t l = sizeof(cur);
	if (!c->nodelay_saved) {
		dsock_real.getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &cur, &l);
		c->app_nodelay = cur;
		c->nodelay_saved = 1;
	}
	dsock_real.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	__atomic_store_n(&c->me->switch_off, (uint64_t)sent, __ATOMIC_SEQ_CST);
	return 0;
}

int shm_last_token_locked(struct shm_conn *c, int fd)
{
	if (switch_tx_locked(c, fd, 1))
		return -EAGAIN;
	send_token(c, fd);
	return 0;
}

int shm_wake_peer(struct shm_conn *c, int fd)
{
	int e;

	if (shm_tx_lock(c))
		return -EAGAIN;
	/* a token is a token only once our sending has switched */
	e = __atomic_load_n(&c->me->down_sent, __ATOMIC_ACQUIRE) || !shm_active(c) ? -EAGAIN :
	    shm_last_token_locked(c, fd);
	shm_tx_unlock(c);
	return e;
}

/* Wakes a producer waiting for space in our rx ring: a blocked send on the
 * futex, a poller through a token on its kernel socket (which wakes poll,
 * select and epoll; our pollers then look at the ring). */
void shm_space_freed(struct shm_conn *c, int fd)
{
	uint32_t w;

	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&c->rx->tx_waiting, __ATOMIC_RELAXED)) {
		w = __atomic_exchange_n(&c->rx->tx_waiting, 0, __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&c->rx->space_seq, 1, __ATOMIC_SEQ_CST);
		syscall(SYS_futex, &c->rx->space_seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
		/* a sender blocked on the futex needs no token; one it never
		 * reads would stay in its socket and make its close (or its
		 * death) an RST instead of a FIN */
		if (!(w & DSOCK_TXW_POLL))
			return;
		/* a token on our kernel stream is only a token once our own
		 * sending has switched; switch it now if need be, also when a
		 * side asks to go back (switch_tx_locked's "stay there"): else
		 * the poller waits for a token that never comes (the soak's
		 * stall: a fork helper's echo in poll for POLLIN alone, its
		 * ring empty, our sending unswitched and asked back to the
		 * kernel).  Refused only with our own bytes unsent in the
		 * kernel (they wake the peer's poll) or after our FIN (so does
		 * the FIN) */
		if (__atomic_load_n(&c->me->switch_off, __ATOMIC_ACQUIRE) == DSOCK_SWITCH_NONE) {
			if (shm_tx_lock(c))
				return;
			int e = switch_tx_locked(c, fd, 1);
			shm_tx_unlock(c);
			if (e)
				return;
		}
		if (__atomic_load_n(&c->me->down_sent, __ATOMIC_ACQUIRE))
			return; /* our kernel stream carries data now, no tokens */
		__atomic_store_n(&c->rx->space_token, 1, __ATOMIC_SEQ_CST);
		char t = 0;
		dsock_real.send(fd, &t, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	}
}

/* Reads and discards tokens (rx lock held), counting them in side.kread:
 * a downgrade (down.c) names the kernel byte where plain data resumes,
 * and no drain reads past it.  to_end: until the kernel says EAGAIN or
 * EOF; else it stops at a short read (one system call where two were, on
 * every leave of an event loop's receive).  Returns 0, 1 on kernel EOF,
 * or -errno. */
int shm_drain_tokens(struct shm_conn *c, int fd, int to_end)
{
	char buf[64];

	for (;;) {
		size_t want = sizeof(buf);
		uint64_t got = __atomic_load_n(&c->me->kread, __ATOMIC_RELAXED);
		if (__atomic_load_n(&c->peer->down_sent, __ATOMIC_ACQUIRE)) {
			uint64_t left = __atomic_load_n(&c->peer->down_off, __ATOMIC_RELAXED) - got;
			if (left == 0 || left > (1ULL << 62))
				return 0;
			if (want > left)
				want = (size_t)left;
		}
		ssize_t n = dsock_real.recv(fd, buf, want, MSG_DONTWAIT);
		if (n > 0) {
			__atomic_store_n(&c->me->kread, got + (uint64_t)n, __ATOMIC_RELEASE);
			/* A FIN behind the tokens stays unseen after a short
			 * read: only a caller that decides on what it saw needs
			 * to_end (the token filter would drop the edge-triggered
			 * event that is the only news of it; a receive would
			 * say EAGAIN instead of EOF).  A receive leaving with its
			 * bytes does not: the FIN keeps the socket readable and
			 * the next receive peeks it. */
			if (!to_end && (size_t)n < want)
				return 0;
			continue;
		}
		if (n == 0)
			return 1;
		if (errno == EAGAIN)
			return 0;
		shm_stash_err(c, errno);
		return -errno;
	}
}

/* A token may be in our kernel socket: one of the flags says so. */
int shm_tokens_flagged(struct shm_conn *c)
{
	return __atomic_load_n(&c->rx->token, __ATOMIC_RELAXED) ||
	       __atomic_load_n(&c->tx->space_token, __ATOMIC_RELAXED);
}

/* Clears both token flags, then drains (flags first: a producer that sets
 * one again afterwards sends a byte we may or may not see).  Returns as
 * drain_tokens. */
int shm_clear_and_drain(struct shm_conn *c, int fd, int to_end)
{
	__atomic_store_n(&c->rx->token, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&c->tx->space_token, 0, __ATOMIC_SEQ_CST);
	return shm_drain_tokens(c, fd, to_end);
}

static void producers_barrier(void)
{
	syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0);
	DSOCK_DBG("a skippable lease ended: membarrier"); /* (tests count these) */
}

/* Ends our lease; 1 if it was skippable, so that producers_barrier() must
 * come before we look at the ring (the caller's: one for many). */
static int hot_end(struct shm_conn *c)
{
	int64_t cur = (int64_t)__atomic_load_n(&c->rx->hot_until, __ATOMIC_RELAXED);
	int skippable = c->lease_skippable;

	if (cur != 0) {
		__atomic_store_n(&c->rx->hot_until, 0, __ATOMIC_RELAXED);
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
void shm_hot(struct shm_conn *c, int64_t until)
{
	int64_t cur;

	if (until == 0) {
		/* a skippable lease, live or not: its producers' stores from
		 * before they saw it end may not be visible yet */
		if (hot_end(c))
			producers_barrier();
		return;
	}
	cur = (int64_t)__atomic_load_n(&c->rx->hot_until, __ATOMIC_RELAXED);
	if (until != INT64_MAX) {
		until &= ~(int64_t)1;
		if (shm_membarrier_ok && c->rx_reads >= SKIP_AFTER_READS)
			until |= 1;
	}
	if (until == INT64_MAX || cur < until - SPIN_NS / 2 || ((cur ^ until) & 1)) {
		__atomic_store_n(&c->rx->hot_until, (uint64_t)until, __ATOMIC_SEQ_CST);
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

/* Leaving the consumer side: no longer polling; keep the readiness the
 * kernel shows honest (a token backs every non-empty ring, or we note that
 * none does).  Returns 1 on kernel EOF, -errno on a kernel error, else 0. */
int shm_rx_settle(struct shm_conn *c, int fd)
{
	uint64_t head;
	int64_t avail;
	int k = 0, drained = 0;

	shm_hot(c, 0);
	avail = rx_avail(c, &head);
	if (avail == 0 && __atomic_load_n(&c->me->rx_switched, __ATOMIC_ACQUIRE) && shm_tokens_flagged(c)) {
		k = shm_clear_and_drain(c, fd, 0);
		avail = rx_avail(c, &head);
		drained = 1;
	}
	/* Data with no token behind it is hidden from the kernel's readiness. */
	dsock_hidden_set(c->sock, &c->unbacked, avail > 0 && (drained || !token_in_kernel(c, fd)));
	return k;
}

/* ---- lingering leases (see shm.h) ---------------------------------------- */
unsigned dsock_shm_fork_gen;
static pthread_mutex_t linger_mu = PTHREAD_MUTEX_INITIALIZER;
static struct shm_conn **linger;
static size_t nlinger, linger_cap;

/* Tries a shared lock once. */
int shm_trylock(uint32_t *w)
{
	uint32_t cur = 0;
	return __atomic_compare_exchange_n(w, &cur, (uint32_t)my_tid(), 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

/* Leaving recv (rx lock held): keep the lease, or settle as usual.  The
 * lease is kept only while no thread of ours sleeps in the kernel (Dekker
 * with shm_settle_lingering: we publish the lease, then look for sleepers;
 * a sleeper counts itself, then settles the list).  Returns as rx_settle. */
int shm_rx_leave(struct shm_conn *c, int fd)
{
	if (c->fork_gen == dsock_shm_fork_gen && !c->wr_shut &&
	    !__atomic_load_n(&c->peer->closing, __ATOMIC_ACQUIRE)) {
		uint64_t head;
		int64_t now = shm_lease_now_ns();
		/* DSOCK_LEASE_US while this thread has its core (an event loop
		 * that serves many connections comes back to each later than
		 * 50 us); at most 50 us when more threads are runnable than
		 * there are cores: a consumer that lost its core is better woken
		 * by a token (3 ping-pong pairs on 2 cores: p99 27 -> 61 us with
		 * a 1 ms lease) */
		int64_t lease = shm_lease_ns;
		if (lease > SHORT_LEASE_NS && dsock_spin_seen_contention(now))
			lease = SHORT_LEASE_NS;
		shm_hot(c, now + lease);
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
			if (nlinger == linger_cap) {
				size_t ncap = linger_cap ? linger_cap * 2 : 16;
				struct shm_conn **n = realloc(linger, ncap * sizeof(*n));
				if (n) {
					linger = n;
					linger_cap = ncap;
				}
			}
			if (nlinger < linger_cap) {
				linger[nlinger++] = c;
				c->lingering = 1;
			}
			pthread_mutex_unlock(&linger_mu);
		}
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (c->lingering && atomic_load(&dsock_sleepers) == 0)
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
			barrier |= hot_end(c);
	}
	if (barrier)
		producers_barrier();
	for (size_t i = 0; i < nlinger; i++) {
		struct shm_conn *c = linger[i];
		uint64_t head;
		if (!c->settling) {
			linger[kept++] = c;
			continue;
		}
		dsock_hidden_set(c->sock, &c->unbacked, rx_avail(c, &head) != 0);
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
	for (size_t i = 0; i < nlinger; i++) {
		if (linger[i] == c) {
			linger[i] = linger[--nlinger];
			break;
		}
	}
	c->lingering = 0;
	pthread_mutex_unlock(&linger_mu);
}

_Atomic long dsock_shm_ring_conns;

void shm_count_ring_use(struct shm_conn *c)
{
	/* a reader and a writer thread may get here first at once (TSan) */
	if (!__atomic_load_n(&c->used_ring, __ATOMIC_RELAXED) &&
	    !__atomic_exchange_n(&c->used_ring, 1, __ATOMIC_RELAXED))
		atomic_fetch_add(&dsock_shm_ring_conns, 1);
}

/* A spinning receiver's wait for the next look: watches the tail (and the
 * token flag) alone, so that data is seen within a pause (~11 ns here) of
 * its arrival, not a whole look later (two clock reads and a dozen shared
 * words: a ping-pong message waited half of such a round on average).
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

/* ---- send ----------------------------------------------------------------- */
int shm_nonblocking(struct dsock_sock *s, int fd, int flags)
{
	if (flags & MSG_DONTWAIT)
		return 1;
	/* O_NONBLOCK as set through us (fcntl, FIONBIO, accept4, socket, or
	 * read at adoption), while no other process holds or held the socket;
	 * otherwise another process may have set it on the file we share: the
	 * kernel's file flags are the truth.  (A system call on the way to
	 * every blocking wait cost a ping-pong round trip ~0.1 us here.) */
	if (!shm_shared(shm_conn(s)))
		return (atomic_load_explicit(&s->flags, memory_order_relaxed) & DSOCK_SF_NONBLOCK) != 0;
	return (dsock_real.fcntl(fd, F_GETFL) & O_NONBLOCK) != 0;
}

/* A writer waiting for ring space asks the kernel socket whether the
 * consumer is gone: it may never say so in the ring (a holder that ended
 * with _exit or a signal: docs/ARCHITECTURE.md, known limits).  1 after an
 * error or hang-up.  After the consumer's FIN a token probes, under the tx
 * lock (a downgrade counts our kernel bytes there; `locked`: the caller
 * holds it): a living half-closed peer just drains it, a dead one answers
 * with the RST that the next look sees.  0 otherwise. */
static int consumer_gone(struct shm_conn *c, int fd, int locked)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };

	if (dsock_real.poll(&p, 1, 0) <= 0)
		return 0;
	if (p.revents & (POLLERR | POLLHUP))
		return 1;
	if ((p.revents & POLLRDHUP) && (locked || shm_tx_trylock(c))) {
		char t = 0;
		if (!__atomic_load_n(&c->me->down_sent, __ATOMIC_ACQUIRE))
			dsock_real.send(fd, &t, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (!locked)
			shm_tx_unlock(c);
	}
	return 0;
}

/* Blocks until the tx ring has space or the connection ends.  Returns 0 to
 * retry, or -errno. */
static int wait_space(struct shm_conn *c, int fd)
{
	uint32_t seq = __atomic_load_n(&c->tx->space_seq, __ATOMIC_ACQUIRE);
	struct timespec slice = { 0, 5 * 1000 * 1000 };
	uint64_t tail;

	__atomic_fetch_or(&c->tx->tx_waiting, DSOCK_TXW_FUTEX, __ATOMIC_SEQ_CST);
	/* (a move back whose turn comes only with both rings empty waits for
	 * room like any send: returning at once would spin) */
	if (tx_space(c, &tail) != 0 || shm_down_now(c))
		return 0;
	/* not FUTEX_PRIVATE: the word is shared with the other process */
	if (syscall(SYS_futex, &c->tx->space_seq, FUTEX_WAIT, seq, &slice, NULL, 0) < 0 && errno == EINTR)
		return -EINTR;
	/* the consumer may be gone (a peer killed with an empty receive queue
	 * sent a FIN, not an RST, and only the probe draws the RST) */
	return consumer_gone(c, fd, 0) ? -EPIPE : 0;
}

/* The kernel's verdict for a send on a connection whose peer is closing:
 * the token probes the peer, exactly as a kernel send would (SIGPIPE and
 * EPIPE included, MSG_NOSIGNAL respected). */
static int peer_closed_probe(int fd, int flags)
{
	char t = 0;
	ssize_t r = dsock_real.send(fd, &t, 1, MSG_DONTWAIT | (flags & MSG_NOSIGNAL));
	return r < 0 && errno != EAGAIN ? -errno : 0;
}

/* Makes ring bytes up to tail visible to the consumer (tx lock held) and
 * wakes it if it sleeps. */
static void publish(struct shm_conn *c, int fd, uint64_t tail, size_t n)
{
	/* our id first: a holder that dies between the two leaves the others
	 * loading the line, never trusting a stale copy */
	uint64_t me = writer_id(c);
	if (__atomic_load_n(&c->tx->tail_writer, __ATOMIC_RELAXED) != me)
		__atomic_store_n(&c->tx->tail_writer, me, __ATOMIC_RELAXED);
	/* release: the bytes are in the ring before the index says so */
	__atomic_store_n(&c->tx->tail, tail, __ATOMIC_RELEASE);
	c->tx_tail = tail;
	c->tx_tail_ok = 1;
	shm_count_ring_use(c);
	ring_doorbell(c, fd);
	uint32_t cpu = (uint32_t)sched_getcpu() + 1;
	if (__atomic_load_n(&c->me->cpu, __ATOMIC_RELAXED) != cpu)
		__atomic_store_n(&c->me->cpu, cpu, __ATOMIC_RELAXED);
}

static ssize_t sendmsg_in(struct dsock_sock *s, int fd, const struct msghdr *m, int flags);
#define FOLLOW_TRIES 100 /* sendmsg_in: tries to follow a peer gone back */

/* A call holds a reference on the socket (the fd table's own is the
 * other): the close sees it and makes the private dup that the call then
 * uses (shm_before_close; a receive picks it up in its loop).  No counter
 * of our own: it cost two more locked instructions per call. */
ssize_t shm_sendmsg(struct dsock_sock *s, int fd, const struct msghdr *m, int flags)
{
	struct shm_conn *c = shm_conn(s);
	int k = atomic_load_explicit(&c->kfd, memory_order_acquire);

	return sendmsg_in(s, k >= 0 ? k : fd, m, flags);
}

/* The rest of m from byte off on the kernel (our sending is plain now),
 * as the kernel's send takes it: blocking, SO_SNDTIMEO and signals its
 * own.  Returns off plus what the kernel took, or off alone when it
 * failed after some of this call's bytes went by the ring (the next call
 * sees the error, as after a kernel send that copied part of its bytes). */
static ssize_t send_rest_plain(int fd, const struct msghdr *m, size_t off, int flags)
{
	struct iovec iov[m->msg_iovlen ? m->msg_iovlen : 1];
	struct msghdr km = *m;
	size_t n = 0, skip = off;
	ssize_t r;

	if (off) {
		for (size_t i = 0; i < m->msg_iovlen; i++) {
			if (skip >= m->msg_iov[i].iov_len) {
				skip -= m->msg_iov[i].iov_len;
				continue;
			}
			iov[n].iov_base = (char *)m->msg_iov[i].iov_base + skip;
			iov[n++].iov_len = m->msg_iov[i].iov_len - skip;
			skip = 0;
		}
		km.msg_iov = iov;
		km.msg_iovlen = n;
		km.msg_control = NULL; /* it went with the first byte */
		km.msg_controllen = 0;
	}
	r = dsock_real.sendmsg(fd, &km, flags);
	if (r < 0)
		return off ? (ssize_t)off : -errno;
	return (ssize_t)off + r;
}

/* Our wait for ring space was interrupted by a signal before this call
 * sent a byte: would the kernel's send have been restarted?  It is when
 * the handler has SA_RESTART (a timed futex wait, ours, never is).  Which
 * signal came is not known, so only when every handled signal has it: a
 * program with a handler that lacks it expects EINTR from a send.  Rare:
 * one look at the handlers per interrupted wait. */
static int signals_restart(void)
{
	for (int sig = 1; sig < _NSIG; sig++) {
		struct sigaction sa;
		if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) < 0)
			continue;
		if (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN && !(sa.sa_flags & SA_RESTART))
			return 0;
	}
	return 1;
}

static ssize_t sendmsg_in(struct dsock_sock *s, int fd, const struct msghdr *m, int flags)
{
	struct shm_conn *c = shm_conn(s);
	size_t total = iov_total(m), done = 0;
	int64_t deadline = 0;
	ssize_t r;
	int err = 0, announced = 0, follow = 0, nb = -1;

	if ((flags & MSG_OOB) && shm_go_back(s, fd, DSOCK_DOWN_URGENT) < 0)
		return -ECONNRESET;
	if (!shm_progress(s, fd) || c->state != SC_ATTACHED) {
		/* PENDING (or gone to the kernel): the kernel carries it; the
		 * mutex keeps an attach (and so a switch) out meanwhile */
		pthread_mutex_lock(&c->mu);
		r = dsock_real.sendmsg(fd, m, flags);
		err = errno;
		if (r > 0 && c->state == SC_OFFER_DUE)
			atomic_fetch_add(&c->early_sent, r);
		pthread_mutex_unlock(&c->mu);
		return r < 0 ? -err : r;
	}
	/* an address on a connected TCP socket is ignored, as Linux does */
	if (m->msg_iovlen > IOV_MAX)
		return -EMSGSIZE;
again:
	if (shm_down_any(c)) {
		/* back to the kernel (down.c): once our sending is there, the
		 * kernel answers every send, exactly as for a plain socket; a
		 * blocking send that filled the ring goes on there with the rest */
		int d = shm_down_step(s, fd);
		if (d < 0)
			return done ? (ssize_t)done : d;
		if (__atomic_load_n(&c->me->down_sent, __ATOMIC_ACQUIRE))
			return send_rest_plain(fd, m, done, flags);
	}
	if (shm_tx_lock(c))
		return done ? (ssize_t)done : shm_fault(s, fd, "lock held forever");
	if (__atomic_load_n(&c->me->down_sent, __ATOMIC_ACQUIRE)) {
		/* the peer moved our sending back (a hand-over it makes without
		 * us, handover.c) while we waited for the lock */
		shm_tx_unlock(c);
		return send_rest_plain(fd, m, done, flags);
	}
	if (__atomic_load_n(&c->peer->down_sent, __ATOMIC_ACQUIRE) &&
	    !__atomic_load_n(&c->me->closing, __ATOMIC_ACQUIRE) && follow++ < FOLLOW_TRIES) {
		/* the peer's sending went back while we waited for the lock
		 * (down.c, tx_down): ours follows before a byte enters the ring
		 * (a few tries: a lock may be busy for a moment; a peer that
		 * holds it for ever gets the ring as before) */
		shm_tx_unlock(c);
		if (follow > 1)
			sched_yield();
		goto again;
	}
	/* attached but the peer not yet (-EAGAIN here), or not switched now
	 * (kernel backpressure, or shut down): the kernel answers, under the
	 * lock a switch takes, blocking, EPIPE and SIGPIPE included */
	err = shm_active(c) ? switch_tx_locked(c, fd, 0) : -EAGAIN;
	if (err == -EAGAIN || err == -EPIPE) {
		r = send_rest_plain(fd, m, done, flags);
		shm_tx_unlock(c);
		return r;
	}
	if (err)
		goto out;
	if (__atomic_load_n(&c->peer->closing, __ATOMIC_ACQUIRE) && (err = peer_closed_probe(fd, flags)))
		goto out;
	/* after our own SHUT_WR, or once the peer closed: the kernel decides
	 * (EPIPE, SIGPIPE unless MSG_NOSIGNAL), probed with a token */
	if (__atomic_load_n(&c->me->closing, __ATOMIC_ACQUIRE) && (err = peer_closed_probe(fd, flags)))
		goto out;
	while (done < total) {
		uint64_t tail;
		int64_t space = tx_space_for(c, &tail, total - done);

		if (space < 0) {
			shm_tx_unlock(c);
			return done ? (ssize_t)done : shm_fault(s, fd, "tx indices out of range");
		}
		if (space == 0) {
			if (__atomic_load_n(&c->peer->down_sent, __ATOMIC_ACQUIRE) && follow++ < FOLLOW_TRIES) {
				/* the peer's sending is plain: no space token will
				 * come (an edge-triggered writer would wait for ever);
				 * ours goes back now (down.c), unless a lock is busy
				 * for a moment */
				shm_tx_unlock(c);
				sched_yield();
				goto again;
			}
			if (nb < 0)
				nb = shm_nonblocking(s, fd, flags);
			if (nb) {
				if (!announced && (!done || shm_nonblocking(s, fd, 0))) {
					/* a poller will wait for space: ask for a token, then
					 * look again (seq_cst both sides): space freed in
					 * between would otherwise wake nobody.  After a short
					 * write too (a nonblocking socket): an edge-triggered
					 * writer (nginx: IN|OUT|ET) then waits for an edge that
					 * only this token gives (tests/unit/test_shm_tokens.c) */
					__atomic_fetch_or(&c->tx->tx_waiting, DSOCK_TXW_POLL, __ATOMIC_SEQ_CST);
					announced = 1;
					continue;
				}
				/* (the ring is full: is its consumer still there?
				 * Without this a writer whose peer ended with _exit
				 * waited forever: the soak's stuck helper) */
				if (!done)
					err = consumer_gone(c, fd, 1) ? peer_closed_probe(fd, flags) ?: -EPIPE
								      : -EAGAIN;
				break;
			}
			/* blocking: wait for space until all of it is in, as the
			 * kernel's send does; a signal or SO_SNDTIMEO ends the wait
			 * with what went in (or EINTR, EAGAIN when nothing did) */
			shm_tx_unlock(c);
			if (!deadline) {
				struct timeval tv = { 0, 0 };
				socklen_t tl = sizeof(tv);
				dsock_real.getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &tl);
				deadline = tv.tv_sec || tv.tv_usec ?
					shm_now_ns() + tv.tv_sec * 1000000000LL + tv.tv_usec * 1000LL : INT64_MAX;
			}
			err = shm_now_ns() >= deadline ? -EAGAIN : wait_space(c, fd);
			if (err == -EINTR && !done && signals_restart())
				err = 0;
			if (err == -EPIPE)
				err = peer_closed_probe(fd, flags) ?: -EPIPE;
			if (shm_tx_lock(c))
				return done ? (ssize_t)done : shm_fault(s, fd, "lock held forever");
			if (err)
				break;
			if (shm_down_any(c)) {
				/* back to the kernel: what the ring holds goes there
				 * first, then the rest of this send */
				shm_tx_unlock(c);
				goto again;
			}
			continue;
		}
		size_t n = total - done < (size_t)space ? total - done : (size_t)space;
		ring_copy(c->txd, c->size, tail, m, done, n, 1);
		publish(c, fd, tail + n, n);
		done += n;
	}
out:
	shm_tx_unlock(c);
	return done ? (ssize_t)done : err;
}

/* The solo thread's send (no reference on s: nothing here may block or
 * wait).  Only the plain case: attached, reported, switched, nobody
 * closing or going back to the kernel, and room for all of it; anything
 * else is DSOCK_ESLOW before a byte moves, and shm_sendmsg does it. */
ssize_t shm_sendmsg_solo(struct dsock_sock *s, int fd, const struct msghdr *m, int flags)
{
	struct shm_conn *c = shm_conn(s);
	uint64_t tail;
	size_t total;

	if (c->state != SC_ATTACHED || !__atomic_load_n(&c->reported, __ATOMIC_RELAXED) || (flags & MSG_OOB) ||
	    atomic_load_explicit(&c->kfd, memory_order_relaxed) >= 0 || m->msg_iovlen > IOV_MAX ||
	    __atomic_load_n(&c->me->switch_off, __ATOMIC_ACQUIRE) == DSOCK_SWITCH_NONE ||
	    shm_down_any(c) || __atomic_load_n(&c->peer->closing, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&c->me->closing, __ATOMIC_ACQUIRE) || !shm_active(c))
		return DSOCK_ESLOW;
	total = iov_total(m);
	if (!total || shm_tx_lock(c))
		return DSOCK_ESLOW;
	if (__atomic_load_n(&c->peer->down_sent, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&c->me->down_sent, __ATOMIC_ACQUIRE)) {
		shm_tx_unlock(c); /* it went back meanwhile: ours follows (down.c) */
		return DSOCK_ESLOW;
	}
	if (tx_space_for(c, &tail, total) < (int64_t)total) {
		shm_tx_unlock(c);
		return DSOCK_ESLOW;
	}
	ring_copy(c->txd, c->size, tail, m, 0, total, 1);
	publish(c, fd, tail + total, total);
	shm_tx_unlock(c);
	return (ssize_t)total;
}

int shm_shutdown(struct dsock_sock *s, int fd, int how)
{
	struct shm_conn *c = shm_conn(s);
	int wr = how == SHUT_WR || how == SHUT_RDWR, was = 0, r;

	/* closing before the FIN: a peer that sees our FIN with `closing`
	 * clear takes us for dead (recv.c, peer_died_unread).  An attach
	 * racing with us sees wr_shut, or we see its mapping (seq_cst both
	 * sides, conn.c attach).  The kernel FIN travels after every token,
	 * so the peer reads the ring dry before it sees EOF. */
	if (c && wr) {
		__atomic_store_n(&c->wr_shut, 1, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&c->h, __ATOMIC_SEQ_CST))
			was = __atomic_exchange_n(&c->me->closing, 1, __ATOMIC_SEQ_CST) + 1;
	}
	r = dsock_real.shutdown(fd, how);
	if (r < 0) {
		r = -errno;
		if (was == 1)
			__atomic_store_n(&c->me->closing, 0, __ATOMIC_SEQ_CST);
		return r;
	}
	return r;
}

long shm_readable(struct dsock_sock *s, int fd)
{
	struct shm_conn *c = shm_conn(s);
	uint64_t head, sw;
	int64_t avail;

	if (!c || c->state != SC_ATTACHED)
		return -ENOTSUP; /* pending: the kernel holds every byte; ask it */
	if (__atomic_load_n(&c->peer->down_sent, __ATOMIC_ACQUIRE))
		return shm_readable_down(c, fd);
	for (int i = 0;; i++) {
		/* the peer's offset on both sides of the ring read: a switch in
		 * between would make kernel bytes tokens and ring bytes data */
		sw = __atomic_load_n(&c->peer->switch_off, __ATOMIC_ACQUIRE);
		avail = rx_avail(c, &head);
		if (avail < 0)
			return -EPROTO;
		if (__atomic_load_n(&c->peer->switch_off, __ATOMIC_ACQUIRE) == sw || i > 100)
			break;
	}
	if (!__atomic_load_n(&c->me->rx_switched, __ATOMIC_ACQUIRE) && fd >= 0) {
		/* kernel data the peer sent before its switch comes first */
		int inq = 0;
		dsock_real.ioctl(fd, SIOCINQ, &inq);
		if (sw == DSOCK_SWITCH_NONE)
			return inq + avail;
		uint64_t consumed = __atomic_load_n(&c->me->kread, __ATOMIC_ACQUIRE);
		int64_t pre = consumed < sw ? (int64_t)(sw - consumed) : 0;
		return (pre < inq ? pre : inq) + avail;
	}
	return avail;
}

/* The last fd of this process is about to close.  With unread data the
 * kernel would reset the connection: so do we.  Otherwise stop taking
 * tokens and drain those there, so that the kernel close is a clean FIN. */
void shm_closing(struct dsock_sock *s, int fd)
{
	struct shm_conn *c = shm_conn(s);
	uint64_t head;

	if (c && c->state == SC_PENDING)
		shm_wait_offer_done(s);
	if (!c || c->state != SC_ATTACHED)
		return;
	/* another process (fork, spawn) still holds the socket: it carries
	 * on, its tokens must keep coming, the kernel socket stays open */
	if (!shm_let_go(c))
		return;
	/* the peer asked to go back to the kernel: what our ring holds goes
	 * there before the FIN (a failure resets) */
	if (shm_down_any(c) && shm_down_answer(s, fd) < 0)
		return;
	__atomic_store_n(&c->me->closing, 1, __ATOMIC_SEQ_CST);
	if (!shm_active(c))
		return;
	shm_linger_forget(c); /* no settle may end the lease set below */
	if (__atomic_load_n(&c->peer->down_sent, __ATOMIC_ACQUIRE)) {
		/* the ring is closed: the kernel decides FIN or RST by what is
		 * unread, once the tokens are out of the way */
		shm_down_discard(c, fd);
		return;
	}
	if (rx_avail(c, &head) != 0) {
		struct linger lg = { 1, 0 };
		dsock_real.setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		return;
	}
	shm_hot(c, INT64_MAX); /* no more tokens to us */
	if (__atomic_load_n(&c->me->rx_switched, __ATOMIC_ACQUIRE))
		shm_drain_tokens(c, fd, 1);
}

int shm_writable(struct dsock_sock *s)
{
	struct shm_conn *c = shm_conn(s);
	uint64_t tail;

	/* once the peer's sending is plain it sends no space token: the next
	 * send moves ours back too (down.c, tx_down) instead of waiting */
	if (!c || !shm_active(c) || __atomic_load_n(&c->me->down_sent, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&c->peer->down_sent, __ATOMIC_ACQUIRE))
		return 1;
	return tx_space(c, &tail) != 0;
}

void shm_want_space(struct dsock_sock *s)
{
	struct shm_conn *c = shm_conn(s);
	uint64_t tail;

	if (c && shm_active(c) && !__atomic_load_n(&c->me->down_sent, __ATOMIC_ACQUIRE)) {
		__atomic_fetch_or(&c->tx->tx_waiting, DSOCK_TXW_POLL, __ATOMIC_SEQ_CST);
		if (tx_space(c, &tail) != 0) /* freed meanwhile: no token will come */
			__atomic_fetch_and(&c->tx->tx_waiting, ~(uint32_t)DSOCK_TXW_POLL, __ATOMIC_RELAXED);
	}
}

/* Socket options the transport answers itself; -ENOPROTOOPT means "ask
 * the kernel". */
int shm_sockopt(struct dsock_sock *s, int fd, int set, int level, int opt, void *val, socklen_t *len)
{
	struct shm_conn *c = shm_conn(s);

	if (c && set && level == SOL_SOCKET && opt == SO_RCVLOWAT) {
		/* the kernel applies it to every byte it holds, and would not
		 * wake a poller for a 1-byte token: back to the kernel, both
		 * directions, before it takes effect (a failure has reset the
		 * connection: the next call says so) */
		if (dsock_real.setsockopt(fd, level, opt, val, *len) < 0)
			return -errno;
		if (*len >= (socklen_t)sizeof(int) && *(int *)val > 1)
			shm_go_back(s, fd, DSOCK_DOWN_RCVLOWAT);
		return 0;
	}
	if (!c || !c->nodelay_saved || level != IPPROTO_TCP || opt != TCP_NODELAY)
		return -ENOPROTOOPT;
	if (set) {
		if (*len < (socklen_t)sizeof(int))
			return -EINVAL;
		c->app_nodelay = *(int *)val != 0;
		return 0;
	}
	if (*len < (socklen_t)sizeof(int)) {
		if (*len > 0)
			*(char *)val = (char)c->app_nodelay;
		return 0;
	}
	*(int *)val = c->app_nodelay;
	*len = sizeof(int);
	return 0;
}

int shm_spurious_in(struct dsock_sock *s, int fd)
{
	struct shm_conn *c = shm_conn(s);
	char buf[64];
	uint64_t head;
	ssize_t n;

	if (c && c->state == SC_ATTACHED && shm_down_any(c)) {
		if (shm_down_step(s, fd) < 0)
			return 0; /* reset: the application reads the error */
		if (__atomic_load_n(&c->peer->down_sent, __ATOMIC_ACQUIRE))
			return shm_spurious_down(c, fd);
	}
	if (c && c->state == SC_ATTACHED && !__atomic_load_n(&c->me->rx_switched, __ATOMIC_ACQUIRE) &&
	    !shm_lock(&c->rx->rx_lock)) {
		/* A side that only writes (nginx sending a file) never receives,
		 * so its receive side never learned that the peer switched: the
		 * peer's space tokens then piled up unread (148 in one stall), its
		 * delayed ACKs let the peer's 1-byte tokens fill the congestion
		 * window, and the next space token waited in the peer's send
		 * queue for a 40 ms ACK: a 64 MiB download from nginx took 0.8 s
		 * instead of 0.1.  Once the kernel holds no more of the peer's
		 * data, every byte there is a token. */
		shm_rx_switch_if_read(c);
		shm_unlock(&c->rx->rx_lock);
	}
	if (!c || c->state != SC_ATTACHED || !__atomic_load_n(&c->me->rx_switched, __ATOMIC_ACQUIRE) ||
	    rx_avail(c, &head) != 0 || shm_lock(&c->rx->rx_lock))
		return 0;
	/* only tokens: every byte here is one, and no FIN or error follows */
	n = dsock_real.recv(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
	if (n > 0) {
		int k = shm_clear_and_drain(c, fd, 1);
		int64_t avail = rx_avail(c, &head);
		n = k == 0 && avail == 0 ? 1 : 0;
		/* data came in meanwhile, and its token may have gone down the
		 * drain: the kernel no longer shows it, our pollers must */
		if (avail > 0)
			dsock_hidden_set(c->sock, &c->unbacked, 1);
	} else if (n < 0 && errno == EAGAIN) {
		/* nothing at all: another thread of ours drained the tokens
		 * the kernel reported (tokens are not data: natively nothing
		 * was there) */
		n = 1;
	} else {
		if (n < 0)
			shm_stash_err(c, errno); /* the receive reports it */
		n = 0; /* EOF or error: real */
	}
	shm_unlock(&c->rx->rx_lock);
	return (int)n;
}

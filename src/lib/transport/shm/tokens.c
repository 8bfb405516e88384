/* Wake-ups on the shm transport: the kernel's sent-byte counter, the
 * switch of a direction from the kernel to its ring, wake-up tokens on the
 * kernel stream and the consumer-asleep score that decides when a
 * direction goes back to the kernel. */
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

/* ---- the kernel's sent-byte counter (shared by every process holding it) --
 * Data bytes ever written to the kernel socket (plus the baseline): a
 * counter from TCP_INFO plus the send queue, read on both sides of the
 * counter and retried until they agree, or an ACK landing between the two
 * calls would skew the sum (and with it the switch offset).  Our FIN takes
 * a sequence number: the counter includes it once sent, the queue does not.
 * (The receive side counts for itself, side.kread: once the socket is
 * closed, the kernel's counter cannot say whether the peer's FIN is in it,
 * and a count off by that one byte loses a byte of data.) */
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
	 * before the offer (no send of ours in between: they hold mu).  A
	 * send in flight holds mu and may be blocked in the kernel until our
	 * own reader drains the peer: waiting for it here, in that reader,
	 * would close a cycle and hang both, so the offer waits for a call
	 * that finds mu free */
	if (pthread_mutex_trylock(&c->mu))
		return -EBUSY;
	c->tx_base = shm_kernel_sent(fd);
	if (c->tx_base >= 0)
		c->tx_base -= atomic_load(c->sent_cnt);
	pthread_mutex_unlock(&c->mu);
	return c->tx_base < 0 ? -EINVAL : 0;
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
void shm_ring_doorbell(struct shm_conn *c, int fd)
{
	int64_t hu = (int64_t)__atomic_load_n(&c->tx->lease_until, __ATOMIC_RELAXED);

	/* a skippable lease (above): no fence, and the coarse clock (a lease
	 * that ended unseen, its consumer gone to a poller we do not see, is
	 * noticed up to a tick late: its next token comes that much later) */
	if ((hu & 1) && shm_membarrier_ok && hu > dsock_coarse_ns())
		return;
	__atomic_thread_fence(__ATOMIC_SEQ_CST); /* orders tail before lease_until */
	int64_t now = dsock_mono_ns();
	if ((int64_t)__atomic_load_n(&c->tx->lease_until, __ATOMIC_RELAXED) > now)
		return;
	/* a poller of the consumer looks at our link's queue: an entry there
	 * instead of a system call (link.c) */
	if (shm_link_notify(c, now))
		return;
	send_token(c, fd);
}

/* Consumers asleep at nearly every message.  Then each message costs a
 * token (a kernel send) and its drain on top of the ring, the cross-core
 * wake-up dominates anyway, and the spin before each sleep takes CPU
 * that the other processes of a pipeline wait for: the kernel alone is
 * cheaper.  The consumer tells (note_read, rx lock held): a small read
 * (under ASLEEP_SMALL) that is this thread's first ring read since one of
 * its waits slept in the kernel (dsock_sleep_gen) scores 1; a read with no
 * sleep before it takes 8 off (so the score climbs only while more than 8
 * in 9 reads follow a sleep); a large read after a sleep counts for
 * nothing (there the wake-up is a small part of the cost).  The producer
 * cannot tell: an epoll loop polling 100 rings lets each ring's lease run
 * out, and every message to it takes a token, as for a consumer asleep
 * (a producer-side rule would send such connections back to the kernel,
 * several times slower); that loop never sleeps.
 *
 * The score is the service's (shm_asleep_score, per port we connected to
 * or accepted on), not the connection's: a server's many connections, and
 * the ones a proxy opens and closes all the time (nginx renews its
 * upstream connections every 1,000 requests), add up to one verdict, and
 * a new connection to a service whose consumers sleep goes back at its
 * first such read.  A connection adds its part at each read after a sleep
 * (no shared write on the path that did not sleep) and at its release.  At
 * shm_asleep_reads this side asks both directions back onto the kernel
 * (back.c), for good. */
#define ASLEEP_SMALL 4096
#define ASLEEP_FLUSH 256 /* a read without a sleep adds its -8s at this many */
_Atomic int32_t shm_asleep_score[SHM_ASLEEP_SLOTS];
_Atomic int32_t shm_asleep_conns[SHM_ASLEEP_SLOTS];
static __thread unsigned seen_sleep_gen; /* this thread's sleeps a read took */

/* The verdict's threshold for c's service: shm_asleep_reads, or 8 reads
 * per connection of the service if that is more.  While many connections
 * are being set up, each one's first ring reads follow sleeps (the
 * process waits for the others, still on the kernel): 10,000 connections
 * moving at once would reach any fixed threshold and send them all back,
 * for good, though none of them sleeps once they are all on the rings. */
static int32_t asleep_threshold(const struct shm_conn *c)
{
	int64_t t = (int64_t)atomic_load_explicit(&shm_asleep_conns[c->service % SHM_ASLEEP_SLOTS],
						  memory_order_relaxed) * 8;

	if (t < (int64_t)shm_asleep_reads)
		t = shm_asleep_reads;
	return t > (1 << 30) ? 1 << 30 : (int32_t)t;
}

void shm_asleep_count(struct shm_conn *c, int on)
{
	if (c->asleep_counted == on)
		return;
	c->asleep_counted = on;
	atomic_fetch_add(&shm_asleep_conns[c->service % SHM_ASLEEP_SLOTS], on ? 1 : -1);
}

int32_t shm_asleep_flush(struct shm_conn *c)
{
	_Atomic int32_t *w = &shm_asleep_score[c->service % SHM_ASLEEP_SLOTS];
	int32_t th = asleep_threshold(c), top = th > (1 << 29) ? 1 << 30 : th * 2;

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
static void ask_back(struct shm_conn *c, const char *why)
{
	uint32_t none = 0;

	if (__atomic_load_n(&c->me->closing, __ATOMIC_RELAXED) || shm_shared(c))
		return;
	if (__atomic_compare_exchange_n(&c->me->back_req, &none, DSOCK_BACK_ASLEEP, 0, __ATOMIC_SEQ_CST,
					__ATOMIC_RELAXED))
		DSOCK_DBG("port %u: %s: asking for the kernel", c->service, why);
}

void shm_note_read(struct shm_conn *c, size_t n)
{
	if (shm_test_back_reads && ++c->test_reads >= shm_test_back_reads)
		ask_back(c, "DSOCK_TEST_BACK_READS");
	if (!shm_asleep_reads)
		return;
	if (seen_sleep_gen == dsock_sleep_gen) {
		/* added now and then, not only at the next sleep: a service's
		 * many connections would each hold theirs back while the ones
		 * that slept add up (a server's first reads on many new
		 * connections follow a sleep, and those alone could reach the
		 * threshold) */
		if ((c->asleep_delta -= 8) <= -ASLEEP_FLUSH)
			shm_asleep_flush(c);
		return;
	}
	seen_sleep_gen = dsock_sleep_gen;
	if (n < ASLEEP_SMALL)
		c->asleep_delta++;
	if (shm_asleep_flush(c) >= asleep_threshold(c))
		ask_back(c, "its consumers found asleep");
}

/* Moves our sending from the kernel to the ring (tx lock held, connection
 * active): everything sent so far went by the kernel, from here on the
 * ring; the receiver drains the kernel up to this offset first.  After it,
 * and only after it, a byte we put on the kernel socket is a token. */
int shm_switch_tx_locked(struct shm_conn *c, int fd, int force)
{
	int64_t sent;

	if (__atomic_load_n(&c->me->switch_off, __ATOMIC_ACQUIRE) != DSOCK_SWITCH_NONE)
		return 0;
	if (__atomic_load_n(&c->me->closing, __ATOMIC_ACQUIRE))
		return -EPIPE; /* shut down before switching: nothing more to send */
	if (shm_back_any(c) && !force)
		return -EAGAIN; /* going back to the kernel: stay there */
	/* switch only when the kernel holds nothing unsent: while the peer's
	 * window is full the kernel's backpressure (blocking, SO_SNDTIMEO,
	 * EAGAIN) stays exactly as it was; the ring adds no capacity */
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
	if (shm_switch_tx_locked(c, fd, 1))
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
	e = __atomic_load_n(&c->me->back_sent, __ATOMIC_ACQUIRE) || !shm_active(c) ? -EAGAIN :
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
		dsock_sys(SYS_futex, &c->rx->space_seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
		/* a sender blocked on the futex needs no token; one it never
		 * reads would stay in its socket and make its close (or its
		 * death) an RST instead of a FIN */
		if (!(w & DSOCK_TXW_POLL))
			return;
		/* a token on our kernel stream is only a token once our own
		 * sending has switched; switch it now if need be, also when a
		 * side asks to go back (switch_tx_locked's "stay there"):
		 * else the poller waits for a token that never comes (one in
		 * poll for POLLIN alone, its ring empty, our sending
		 * unswitched and asked back to the kernel).  Refused only
		 * with our own bytes unsent in the kernel (they wake the
		 * peer's poll) or after our FIN (so does the FIN) */
		if (__atomic_load_n(&c->me->switch_off, __ATOMIC_ACQUIRE) == DSOCK_SWITCH_NONE) {
			if (shm_tx_lock(c))
				return;
			int e = shm_switch_tx_locked(c, fd, 1);
			shm_tx_unlock(c);
			if (e)
				return;
		}
		if (__atomic_load_n(&c->me->back_sent, __ATOMIC_ACQUIRE))
			return; /* our kernel stream carries data now, no tokens */
		__atomic_store_n(&c->rx->space_token, 1, __ATOMIC_SEQ_CST);
		char t = 0;
		dsock_real.send(fd, &t, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	}
}

/* A writer waiting for ring space asks the kernel socket whether the
 * consumer is gone: it may never say so in the ring (a holder that ended
 * with _exit or a signal: docs/ARCHITECTURE.md, known limits).  The
 * kernel's POLLERR and POLLHUP after an error or hang-up.  After the
 * consumer's FIN a token probes, under the tx lock (a downgrade counts our
 * kernel bytes there; `locked`: the caller holds it): a living half-closed
 * peer just drains it, a dead one answers with the RST that the next look
 * sees.  0 otherwise. */
short shm_consumer_gone(struct shm_conn *c, int fd, int locked)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };

	if (dsock_real.poll(&p, 1, 0) <= 0)
		return 0;
	if (p.revents & (POLLERR | POLLHUP))
		return (short)(p.revents & (POLLERR | POLLHUP));
	if ((p.revents & POLLRDHUP) && (locked || shm_tx_trylock(c))) {
		char t = 0;
		/* (a token only once our sending has switched: before, the
		 * peer reads our kernel stream as data) */
		if (!__atomic_load_n(&c->me->back_sent, __ATOMIC_ACQUIRE) &&
		    __atomic_load_n(&c->me->switch_off, __ATOMIC_ACQUIRE) != DSOCK_SWITCH_NONE)
			dsock_real.send(fd, &t, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (!locked)
			shm_tx_unlock(c);
	}
	return 0;
}

/* Reads and discards tokens (rx lock held), counting them in side.kread:
 * a move back (back.c) names the kernel byte where plain data resumes,
 * and no drain reads past it.  to_end: until the kernel says EAGAIN or
 * EOF; else it stops at a short read (one system call instead of two, on
 * every leave of an event loop's receive).  Returns 0, 1 on kernel EOF,
 * or -errno. */
int shm_drain_tokens(struct shm_conn *c, int fd, int to_end)
{
	char buf[64];

	for (;;) {
		size_t want = sizeof(buf);
		uint64_t got = __atomic_load_n(&c->me->kread, __ATOMIC_RELAXED);
		if (__atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE)) {
			uint64_t left = __atomic_load_n(&c->peer->back_off, __ATOMIC_RELAXED) - got;
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

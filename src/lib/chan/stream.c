/* The channel's waits and its streams' calls (chan.h). */
#include "lib/chan/chan_int.h"
#include "lib/base/clock.h"
#include "lib/base/real.h"
#include "common/rawsys.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

/* A waiter looks again this often: a pumper that died is replaced, and
 * frames queued while the pumper slept without asking for room go out. */
#define WAIT_SLICE_NS 50000000

int ch_tx_pending(const struct ch *c)
{
	return __atomic_load_n(&c->sh->tx_tail, __ATOMIC_ACQUIRE) != __atomic_load_n(&c->sh->tx_head, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&c->sh->owing, __ATOMIC_RELAXED);
}

/* Leaves the pumper's place (rx_mu held): a waiter on the futex may
 * read the socket now.  Only a waiter is told (a bump when nobody waits
 * would end the caller's own next wait at once); one that counts itself
 * in after this look finds the place free as it tries again (ch_wait). */
static void leave(struct ch *c)
{
	pthread_mutex_unlock(&c->sh->rx_mu);
	if (__atomic_load_n(&c->sh->waiters, __ATOMIC_SEQ_CST))
		ch_bump(c);
}

static void flush(struct ch *c)
{
	int short_ = 0;

	for (unsigned st = 0; st < c->nstreams && !short_; st++)
		short_ = ch_credit_short(c, st);
	if ((short_ || ch_tx_pending(c)) && ch_lock(c, &c->sh->tx_mu, 1) == 0) {
		for (unsigned st = 0; short_ && st < c->nstreams; st++)
			if (ch_credit_short(c, st))
				ch_credit_now(c, st);
		ch_tx_flush(c);
		/* (room in the frame ring moves the OUT levels) */
		for (unsigned st = 0; c->lvl && st < c->nstreams; st++)
			ch_level_out(c, st);
		pthread_mutex_unlock(&c->sh->tx_mu);
	}
}

int ch_progress(struct ch *c)
{
	int dead;

	if (ch_lock(c, &c->sh->rx_mu, 1) == 0) {
		ch_pump_locked(c);
		leave(c);
	}
	flush(c);
	dead = __atomic_load_n(&c->sh->dead, __ATOMIC_ACQUIRE);
	return dead ? -dead : 0;
}

/* ms for poll: at most slice ns, and no further than the deadline. */
static int poll_ms(int64_t deadline, int64_t slice)
{
	int64_t left = deadline == INT64_MAX ? slice : deadline - dsock_mono_ns();

	if (slice >= 0 && (left < 0 || left > slice))
		left = slice;
	if (left < 0)
		return -1;
	return (int)((left + 999999) / 1000000);
}

/* Waits for something to happen on the channel after the caller saw seq0
 * (a filing, a credit, room, a pumper's leaving, its end): as the pumper,
 * asleep in poll on the socket (for room too while frames wait to go
 * out), or on the futex.  The caller has checked for the channel's end
 * and death.  0, -EINTR, or -EAGAIN past the deadline. */
static int ch_wait(struct ch *c, uint32_t seq0, int64_t deadline)
{
	struct ch_shared *sh = c->sh;

	if (deadline != INT64_MAX && deadline <= dsock_mono_ns())
		return -EAGAIN;
	if (ch_lock(c, &sh->rx_mu, 1) == 0) {
		int r = 0;
		if (ch_pump_locked(c) == 0 && __atomic_load_n(&sh->seq, __ATOMIC_SEQ_CST) == seq0) {
			struct pollfd p[2] = { { .fd = c->fd, .events = POLLIN }, { .fd = c->nudge, .events = POLLIN } };
			/* (asleep before the last look: a bump after it nudges) */
			__atomic_store_n(&sh->asleep, 1, __ATOMIC_SEQ_CST);
			if (ch_tx_pending(c))
				p[0].events |= POLLOUT;
			if (__atomic_load_n(&sh->seq, __ATOMIC_SEQ_CST) == seq0 &&
			    dsock_real.poll(p, 2, poll_ms(deadline, -1)) < 0 && errno == EINTR)
				r = -EINTR;
			__atomic_store_n(&sh->asleep, 0, __ATOMIC_SEQ_CST);
			if (p[1].revents & POLLIN) {
				uint64_t n;
				if (dsock_real.read(c->nudge, &n, sizeof(n)) < 0) {
					/* (nothing: another holder's pumper drained it) */
				}
			}
			ch_pump_locked(c);
		}
		leave(c);
		flush(c);
		return r;
	}
	if (ch_tx_pending(c)) {
		/* frames wait and the pumper may not be asking for room */
		struct pollfd p = { .fd = c->fd, .events = POLLOUT };
		int r = dsock_real.poll(&p, 1, poll_ms(deadline, 5000000));
		flush(c);
		return r < 0 && errno == EINTR ? -EINTR : 0;
	}
	int64_t left = deadline == INT64_MAX ? WAIT_SLICE_NS : deadline - dsock_mono_ns();
	struct timespec ts = { 0, left > 0 && left < WAIT_SLICE_NS ? left : WAIT_SLICE_NS };
	__atomic_add_fetch(&sh->waiters, 1, __ATOMIC_SEQ_CST);
	if (ch_lock(c, &sh->rx_mu, 1) == 0) {
		/* (the pumper left before it could see us: the place is ours,
		 * and the caller's next wait takes it) */
		__atomic_sub_fetch(&sh->waiters, 1, __ATOMIC_SEQ_CST);
		pthread_mutex_unlock(&sh->rx_mu);
		return 0;
	}
	long r = dsock_sys(SYS_futex, &sh->seq, FUTEX_WAIT, seq0, &ts, NULL, 0);
	int e = errno;
	__atomic_sub_fetch(&sh->waiters, 1, __ATOMIC_SEQ_CST);
	return r < 0 && e == EINTR ? -EINTR : 0;
}

static int ended(const struct ch *c)
{
	return __atomic_load_n(&c->sh->dead, __ATOMIC_ACQUIRE) || __atomic_load_n(&c->sh->eof, __ATOMIC_ACQUIRE);
}

/* Until the frame ring is written up to byte end (a blocking send's own
 * frame), the channel ends or the deadline passes; a signal ends it too
 * (the frame stays queued: the send has happened). */
static void tx_drain(struct ch *c, uint64_t end, int64_t deadline)
{
	while ((int64_t)(end - __atomic_load_n(&c->sh->tx_head, __ATOMIC_ACQUIRE)) > 0 && !ended(c)) {
		uint32_t seq0 = __atomic_load_n(&c->sh->seq, __ATOMIC_SEQ_CST);

		flush(c);
		if ((int64_t)(end - __atomic_load_n(&c->sh->tx_head, __ATOMIC_ACQUIRE)) <= 0)
			return;
		if (ch_wait(c, seq0, deadline))
			return;
	}
}

/* ---- streams --------------------------------------------------------------- */

static size_t iov_total(const struct iovec *iov, int n)
{
	size_t t = 0;

	for (int i = 0; i < n; i++)
		t += iov[i].iov_len;
	return t;
}

/* Copies n bytes from the ring at byte offset off (of the stream) into
 * iov from byte skip on. */
static void ring_out(struct ch *c, unsigned st, uint64_t off, const struct iovec *iov, int niov, size_t skip, size_t n)
{
	const unsigned char *r = ch_ring(c, st);

	for (int i = 0; i < niov && n; i++) {
		if (skip >= iov[i].iov_len) {
			skip -= iov[i].iov_len;
			continue;
		}
		size_t k = iov[i].iov_len - skip < n ? iov[i].iov_len - skip : n;
		unsigned char *d = (unsigned char *)iov[i].iov_base + skip;
		for (size_t done = 0; done < k;) {
			size_t at = (size_t)((off + done) % CH_RING), m = CH_RING - at < k - done ? CH_RING - at : k - done;
			memcpy(d + done, r + at, m);
			done += m;
		}
		off += k;
		n -= k;
		skip = 0;
	}
}

static ssize_t recv_deferred(struct ch *c, unsigned st, const struct iovec *iov, int n, int flags,
			     int64_t deadline);

ssize_t ch_recv(struct ch *c, unsigned st, const struct iovec *iov, int n, int flags, int64_t deadline)
{
	ssize_t r;

	if (st >= c->nstreams)
		return -EINVAL;
	struct ch_defer prev = ch_rx_defer(c, st);
	r = recv_deferred(c, st, iov, n, flags, deadline);
	int left = ch_rx_deferred();
	ch_rx_defer_end(prev);
	/* (an arrival left to this receive that it did not move the level
	 * for: moved now) */
	if (left && ch_lock(c, &c->sh->rd_mu, 0) == 0) {
		ch_level_in(c, st, 1);
		pthread_mutex_unlock(&c->sh->rd_mu);
	}
	return r;
}

static ssize_t recv_deferred(struct ch *c, unsigned st, const struct iovec *iov, int n, int flags,
			     int64_t deadline)
{
	struct ch_stream *s;
	size_t want = iov_total(iov, n), done = 0;

	s = ch_stream_at(c, st);
	for (;;) {
		uint32_t seq0 = __atomic_load_n(&c->sh->seq, __ATOMIC_SEQ_CST);
		int r, peek = !!(flags & MSG_PEEK), end;

		ch_progress(c);
		if ((r = ch_lock(c, &c->sh->rd_mu, 0)))
			return done ? (ssize_t)done : r;
		/* (the ends before the tail: a tail read after them holds all
		 * that came before them) */
		int stopped = __atomic_load_n(&s->rx_discard, __ATOMIC_ACQUIRE);
		int err = __atomic_load_n(&s->rx_err, __ATOMIC_ACQUIRE);
		int eof = __atomic_load_n(&s->rx_eof, __ATOMIC_ACQUIRE) || __atomic_load_n(&c->sh->eof, __ATOMIC_ACQUIRE);
		uint64_t head = __atomic_load_n(&s->rx_head, __ATOMIC_ACQUIRE), from = head + (peek ? done : 0);
		uint64_t have = __atomic_load_n(&s->rx_tail, __ATOMIC_ACQUIRE) - from;
		size_t k = 0;
		if (have > CH_RING) { /* (a holder scribbled on the counts) */
			pthread_mutex_unlock(&c->sh->rd_mu);
			ch_kill(c, ECONNRESET);
			ch_levels_all(c, 0);
			return done ? (ssize_t)done : -ECONNRESET;
		}
		if (!stopped) {
			k = have < want - done ? (size_t)have : want - done;
			if (k && !(flags & MSG_TRUNC))
				ring_out(c, st, from, iov, n, done, k);
			if (k && !peek)
				__atomic_store_n(&s->rx_head, head + k, __ATOMIC_RELEASE);
			done += k;
		}
		/* the peer's reset, once, after the bytes before it */
		if (!stopped && !done && have == 0 && err && !peek &&
		    __atomic_compare_exchange_n(&s->rx_err, &err, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			ch_level_in(c, st, 0);
			pthread_mutex_unlock(&c->sh->rd_mu);
			return -ECONNRESET;
		}
		end = stopped || ((eof || __atomic_load_n(&s->rx_nowait, __ATOMIC_ACQUIRE)) && have == k);
		int arrived = ch_rx_deferred();
		if ((k && !peek) || arrived)
			ch_level_in(c, st, arrived);
		pthread_mutex_unlock(&c->sh->rd_mu);
		if (k && !peek)
			ch_credit(c, st);
		if (done == want || (done && !(flags & MSG_WAITALL)) || end)
			return (ssize_t)done;
		int dead = __atomic_load_n(&c->sh->dead, __ATOMIC_ACQUIRE);
		if (dead)
			return done ? (ssize_t)done : -dead;
		if (flags & MSG_DONTWAIT)
			return done ? (ssize_t)done : -EAGAIN;
		if ((r = ch_wait(c, seq0, deadline)))
			return done ? (ssize_t)done : r;
	}
}

ssize_t ch_send(struct ch *c, unsigned st, const struct iovec *iov, int n, int flags, int64_t deadline)
{
	struct ch_stream *s;
	size_t want = iov_total(iov, n);

	if (st >= c->nstreams)
		return -EINVAL;
	if (!want)
		return 0; /* (a DATA frame is never empty) */
	s = ch_stream_at(c, st);
	for (int pumped = 0;;) {
		uint32_t seq0 = __atomic_load_n(&c->sh->seq, __ATOMIC_SEQ_CST);
		int r, dead = __atomic_load_n(&c->sh->dead, __ATOMIC_ACQUIRE);

		/* (a stream the peer stopped ended before the channel did) */
		if (__atomic_load_n(&s->tx_stopped, __ATOMIC_ACQUIRE))
			return -EPIPE;
		if (dead)
			return -dead;
		if ((r = ch_lock(c, &c->sh->tx_mu, 0)))
			return r;
		/* (under tx_mu: no DATA after our EOF) */
		if (__atomic_load_n(&s->tx_stopped, __ATOMIC_ACQUIRE) || __atomic_load_n(&s->tx_eof, __ATOMIC_ACQUIRE) ||
		    __atomic_load_n(&c->sh->eof, __ATOMIC_ACQUIRE)) {
			pthread_mutex_unlock(&c->sh->tx_mu);
			return -EPIPE;
		}
		uint64_t sent = __atomic_load_n(&s->tx_sent, __ATOMIC_RELAXED);
		uint64_t cred = CH_RING - (sent - __atomic_load_n(&s->tx_acked, __ATOMIC_ACQUIRE));
		uint64_t room = ch_tx_room(c), k = want < cred ? want : cred;
		if (cred > CH_RING)
			k = 0; /* (counts out of bounds: only a holder's scribbling) */
		if (room <= CH_HDR)
			k = 0;
		else if (k > room - CH_HDR)
			k = room - CH_HDR;
		/* a drained ring's credit rides on the DATA: one write for both
		 * (a part of a full ring read is not told: a TCP window opens
		 * by a sizeable step, or the reader's quarter, ch_credit) */
		uint64_t rh = __atomic_load_n(&s->rx_head, __ATOMIC_ACQUIRE);
		if (k && rh != __atomic_load_n(&s->credited, __ATOMIC_RELAXED) &&
		    rh == __atomic_load_n(&s->rx_tail, __ATOMIC_ACQUIRE) && room >= 2 * CH_HDR + k)
			ch_credit_now(c, st);
		if (k) {
			ch_tx_frame(c, st, CH_DATA, k);
			for (int i = 0, skip = 0; i < n && (uint64_t)skip < k; i++) {
				size_t m = iov[i].iov_len < k - (uint64_t)skip ? iov[i].iov_len : (size_t)(k - (uint64_t)skip);
				ch_tx_put(c, iov[i].iov_base, m);
				skip += (int)m;
			}
			__atomic_store_n(&s->tx_sent, sent + k, __ATOMIC_RELEASE);
			ch_tx_flush(c);
			ch_level_out(c, st);
			uint64_t end = __atomic_load_n(&c->sh->tx_tail, __ATOMIC_RELAXED);
			pthread_mutex_unlock(&c->sh->tx_mu);
			if (!(flags & MSG_DONTWAIT))
				tx_drain(c, end, deadline);
			return (ssize_t)k;
		}
		ch_tx_flush(c);
		ch_level_out(c, st);
		pthread_mutex_unlock(&c->sh->tx_mu);
		/* the credit may be in the socket, unread: a sender that only
		 * retries (and never polls or receives) must read it, as the
		 * kernel takes a TCP window's update without the application */
		if ((flags & MSG_DONTWAIT) && !pumped++) {
			ch_progress(c);
			continue;
		}
		if (flags & MSG_DONTWAIT)
			return -EAGAIN;
		if ((r = ch_wait(c, seq0, deadline)))
			return r;
	}
}

size_t ch_readable(struct ch *c, unsigned st)
{
	struct ch_stream *s;
	uint64_t head, tail;

	if (st >= c->nstreams)
		return 0;
	s = ch_stream_at(c, st);
	/* (head first: a tail read after it is never behind it) */
	head = __atomic_load_n(&s->rx_head, __ATOMIC_ACQUIRE);
	tail = __atomic_load_n(&s->rx_tail, __ATOMIC_ACQUIRE);
	return __atomic_load_n(&s->rx_discard, __ATOMIC_ACQUIRE) || tail - head > CH_RING ? 0 : (size_t)(tail - head);
}

int ch_ended(struct ch *c, unsigned st)
{
	struct ch_stream *s;

	if (st >= c->nstreams)
		return 1;
	s = ch_stream_at(c, st);
	return __atomic_load_n(&s->rx_eof, __ATOMIC_ACQUIRE) || __atomic_load_n(&s->rx_discard, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&c->sh->eof, __ATOMIC_ACQUIRE) || __atomic_load_n(&c->sh->dead, __ATOMIC_ACQUIRE);
}

short ch_poll(struct ch *c, unsigned st, short events)
{
	struct ch_stream *s;
	short rev = 0;

	if (st >= c->nstreams)
		return POLLNVAL;
	s = ch_stream_at(c, st);
	ch_progress(c);
	int dead = __atomic_load_n(&c->sh->dead, __ATOMIC_ACQUIRE), eof = __atomic_load_n(&c->sh->eof, __ATOMIC_ACQUIRE);
	int in_end = eof || __atomic_load_n(&s->rx_eof, __ATOMIC_ACQUIRE) || __atomic_load_n(&s->rx_discard, __ATOMIC_ACQUIRE) ||
		     __atomic_load_n(&s->rx_nowait, __ATOMIC_ACQUIRE);
	/* a stream whose two ends the peer ended before the channel died
	 * (both its frames filed) keeps its own state */
	if (dead && (__atomic_load_n(&s->rx_eof, __ATOMIC_ACQUIRE) || __atomic_load_n(&s->rx_discard, __ATOMIC_ACQUIRE)) &&
	    __atomic_load_n(&s->tx_stopped, __ATOMIC_ACQUIRE))
		dead = 0;
	int err = __atomic_load_n(&s->rx_err, __ATOMIC_ACQUIRE);
	if (ch_readable(c, st) || in_end || dead || err)
		rev |= POLLIN;
	if (in_end)
		rev |= POLLRDHUP;
	if (dead || err)
		rev |= POLLERR;
	if (dead)
		rev |= POLLHUP;
	else if (eof || (in_end && (__atomic_load_n(&s->tx_eof, __ATOMIC_ACQUIRE) ||
				    __atomic_load_n(&s->tx_stopped, __ATOMIC_ACQUIRE))))
		rev |= POLLHUP;
	uint64_t cred = CH_RING - (__atomic_load_n(&s->tx_sent, __ATOMIC_ACQUIRE) -
				   __atomic_load_n(&s->tx_acked, __ATOMIC_ACQUIRE));
	uint64_t used = __atomic_load_n(&c->sh->tx_tail, __ATOMIC_ACQUIRE) - __atomic_load_n(&c->sh->tx_head, __ATOMIC_ACQUIRE);
	if ((cred && cred <= CH_RING && used + CH_HDR < CH_TXRING) || dead || eof ||
	    __atomic_load_n(&s->tx_stopped, __ATOMIC_ACQUIRE))
		rev |= POLLOUT;
	return rev & (events | POLLERR | POLLHUP | POLLNVAL);
}

/* The channel's waits and its streams' calls (chan.h). */
#include "lib/transport/channel/chan_int.h"
#include "lib/base/clock.h"
#include "lib/base/real.h"
#include "common/rawsys.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#define WAIT_SLICE_NS 50000000 /* a waiter looks again this often (a pumper that died) */

/* Waits for something to happen on the channel after the caller saw seq0
 * (a filing, a credit, room in the socket, a pumper's leaving): as the
 * pumper, asleep in poll on the socket, or on the futex.  0, -EINTR, or
 * -EAGAIN past the deadline. */
static int ch_wait(struct ch *c, uint32_t seq0, int64_t deadline)
{
	struct ch_shared *sh = c->sh;
	int64_t now = dsock_mono_ns(), left = deadline == INT64_MAX ? -1 : deadline - now;

	if (deadline != INT64_MAX && left <= 0)
		return -EAGAIN;
	if (ch_lock(c, &sh->rx_mu, 1) == 0) {
		int r = 0;
		if (ch_pump_locked(c) == 0 && __atomic_load_n(&sh->seq, __ATOMIC_SEQ_CST) == seq0 &&
		    !__atomic_load_n(&sh->eof, __ATOMIC_ACQUIRE) && !__atomic_load_n(&sh->dead, __ATOMIC_ACQUIRE)) {
			struct pollfd p = { .fd = c->fd, .events = POLLIN };
			if (ch_tx_pending(c))
				p.events |= POLLOUT;
			int ms = left < 0 ? -1 : (int)((left + 999999) / 1000000);
			if (dsock_real.poll(&p, 1, ms) < 0 && errno == EINTR)
				r = -EINTR;
			ch_pump_locked(c);
			if ((p.revents & POLLOUT) && ch_lock(c, &sh->tx_mu, 0) == 0) {
				ch_tx_flush(c);
				pthread_mutex_unlock(&sh->tx_mu);
			}
		}
		pthread_mutex_unlock(&sh->rx_mu);
		ch_bump(c); /* (a waiter on the futex may read the socket now) */
		return r;
	}
	struct timespec ts = { 0, WAIT_SLICE_NS };
	if (left >= 0 && left < WAIT_SLICE_NS)
		ts.tv_nsec = left;
	__atomic_add_fetch(&sh->waiters, 1, __ATOMIC_SEQ_CST);
	long r = dsock_sys(SYS_futex, &sh->seq, FUTEX_WAIT, seq0, &ts, NULL, 0);
	int e = errno;
	__atomic_sub_fetch(&sh->waiters, 1, __ATOMIC_SEQ_CST);
	return r < 0 && e == EINTR ? -EINTR : 0;
}

/* Until the frame ring is written up to byte end (a blocking send's own
 * frame), the channel dies or the deadline passes; a signal ends it too
 * (the frame stays queued: the send has happened). */
static void tx_drain(struct ch *c, uint64_t end, int64_t deadline)
{
	struct ch_shared *sh = c->sh;

	while ((int64_t)(end - __atomic_load_n(&sh->tx_head, __ATOMIC_ACQUIRE)) > 0 &&
	       !__atomic_load_n(&sh->dead, __ATOMIC_ACQUIRE)) {
		uint32_t seq0 = __atomic_load_n(&sh->seq, __ATOMIC_SEQ_CST);
		int64_t left = deadline == INT64_MAX ? WAIT_SLICE_NS : deadline - dsock_mono_ns();
		struct pollfd p = { .fd = c->fd, .events = POLLOUT };

		if (left <= 0)
			return;
		if (ch_lock(c, &sh->rx_mu, 1) == 0) {
			/* (as the pumper: it reads while it waits for room) */
			pthread_mutex_unlock(&sh->rx_mu);
			if (ch_wait(c, seq0, deadline) == -EINTR)
				return;
			continue;
		}
		/* a pumper reads meanwhile, so room comes */
		if (dsock_real.poll(&p, 1, (int)((left < WAIT_SLICE_NS ? left : WAIT_SLICE_NS) / 1000000) + 1) < 0 &&
		    errno == EINTR)
			return;
		if (ch_lock(c, &sh->tx_mu, 0) == 0) {
			ch_tx_flush(c);
			pthread_mutex_unlock(&sh->tx_mu);
		}
	}
}

int ch_tx_pending(const struct ch *c)
{
	return __atomic_load_n(&c->sh->tx_tail, __ATOMIC_ACQUIRE) != __atomic_load_n(&c->sh->tx_head, __ATOMIC_ACQUIRE);
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

ssize_t ch_recv(struct ch *c, unsigned st, const struct iovec *iov, int n, int flags, int64_t deadline)
{
	struct ch_stream *s;
	size_t want = iov_total(iov, n), done = 0;

	if (st >= c->sh->nstreams)
		return -EINVAL;
	s = ch_stream_at(c, st);
	for (;;) {
		uint32_t seq0 = __atomic_load_n(&c->sh->seq, __ATOMIC_SEQ_CST);
		int r, peek = !!(flags & MSG_PEEK), end;

		ch_progress(c);
		if ((r = ch_lock(c, &c->sh->rd_mu, 0)))
			return done ? (ssize_t)done : r;
		/* (the EOF before the tail: a tail read after it holds all) */
		int eof = __atomic_load_n(&s->rx_eof, __ATOMIC_ACQUIRE);
		uint64_t head = __atomic_load_n(&s->rx_head, __ATOMIC_RELAXED), from = head + (peek ? done : 0);
		uint64_t have = __atomic_load_n(&s->rx_tail, __ATOMIC_ACQUIRE) - from;
		size_t k = have < want - done ? (size_t)have : want - done;
		if (k && !(flags & MSG_TRUNC))
			ring_out(c, st, from, iov, n, done, k);
		if (k && !peek)
			__atomic_store_n(&s->rx_head, head + k, __ATOMIC_RELEASE);
		done += k;
		end = eof && have == k;
		pthread_mutex_unlock(&c->sh->rd_mu);
		if (k && !peek)
			ch_credit(c, st);
		if (done == want || (done && !(flags & MSG_WAITALL)) || end)
			return (ssize_t)done;
		int dead = __atomic_load_n(&c->sh->dead, __ATOMIC_ACQUIRE);
		if (dead)
			return done ? (ssize_t)done : -dead;
		if (__atomic_load_n(&c->sh->eof, __ATOMIC_ACQUIRE) && !ch_readable(c, st))
			return (ssize_t)done; /* the peer's whole end is gone: EOF */
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

	if (st >= c->sh->nstreams)
		return -EINVAL;
	if (!want)
		return 0; /* (a DATA frame is never empty) */
	s = ch_stream_at(c, st);
	for (;;) {
		uint32_t seq0 = __atomic_load_n(&c->sh->seq, __ATOMIC_SEQ_CST);
		int r, dead = __atomic_load_n(&c->sh->dead, __ATOMIC_ACQUIRE);

		if (dead)
			return -dead;
		if (__atomic_load_n(&s->tx_stopped, __ATOMIC_ACQUIRE) || __atomic_load_n(&s->tx_eof, __ATOMIC_ACQUIRE) ||
		    __atomic_load_n(&c->sh->eof, __ATOMIC_ACQUIRE))
			return -EPIPE;
		if ((r = ch_lock(c, &c->sh->tx_mu, 0)))
			return r;
		uint64_t sent = __atomic_load_n(&s->tx_sent, __ATOMIC_RELAXED), cred = CH_RING - (sent - __atomic_load_n(&s->tx_acked, __ATOMIC_ACQUIRE));
		uint64_t room = ch_tx_room(c), k = want < cred ? want : cred;
		if (room <= CH_HDR)
			k = 0;
		else if (k > room - CH_HDR)
			k = room - CH_HDR;
		if (k) {
			ch_tx_frame(c, st, CH_DATA, k);
			for (int i = 0, skip = 0; i < n && (uint64_t)skip < k; i++) {
				size_t m = iov[i].iov_len < k - (uint64_t)skip ? iov[i].iov_len : (size_t)(k - (uint64_t)skip);
				ch_tx_put(c, iov[i].iov_base, m);
				skip += (int)m;
			}
			__atomic_store_n(&s->tx_sent, sent + k, __ATOMIC_RELEASE);
			ch_tx_flush(c);
			uint64_t end = __atomic_load_n(&c->sh->tx_tail, __ATOMIC_RELAXED);
			pthread_mutex_unlock(&c->sh->tx_mu);
			if (!(flags & MSG_DONTWAIT))
				tx_drain(c, end, deadline);
			return (ssize_t)k;
		}
		ch_tx_flush(c);
		pthread_mutex_unlock(&c->sh->tx_mu);
		if (flags & MSG_DONTWAIT)
			return -EAGAIN;
		if ((r = ch_wait(c, seq0, deadline)))
			return r;
	}
}

int ch_shutdown(struct ch *c, unsigned st, int how)
{
	struct ch_stream *s;
	int r;

	if (st >= c->sh->nstreams)
		return -EINVAL;
	s = ch_stream_at(c, st);
	if ((r = ch_lock(c, &c->sh->tx_mu, 0)))
		return r;
	/* (control frames fit: the ring keeps room for them, see ch_send) */
	if ((how == SHUT_WR || how == SHUT_RDWR) && !__atomic_load_n(&s->tx_eof, __ATOMIC_RELAXED) &&
	    ch_tx_room(c) >= CH_HDR) {
		ch_tx_frame(c, st, CH_EOF, __atomic_load_n(&s->tx_sent, __ATOMIC_RELAXED));
		__atomic_store_n(&s->tx_eof, 1, __ATOMIC_RELEASE);
	}
	if ((how == SHUT_RD || how == SHUT_RDWR) && !__atomic_load_n(&s->rx_stopped, __ATOMIC_RELAXED) &&
	    ch_tx_room(c) >= CH_HDR) {
		ch_tx_frame(c, st, CH_STOP, 0);
		__atomic_store_n(&s->rx_stopped, 1, __ATOMIC_RELEASE);
	}
	ch_tx_flush(c);
	pthread_mutex_unlock(&c->sh->tx_mu);
	return 0;
}

size_t ch_readable(struct ch *c, unsigned st)
{
	struct ch_stream *s = ch_stream_at(c, st);

	return (size_t)(__atomic_load_n(&s->rx_tail, __ATOMIC_ACQUIRE) - __atomic_load_n(&s->rx_head, __ATOMIC_ACQUIRE));
}

short ch_poll(struct ch *c, unsigned st, short events)
{
	struct ch_stream *s;
	short rev = 0;

	if (st >= c->sh->nstreams)
		return POLLNVAL;
	s = ch_stream_at(c, st);
	ch_progress(c);
	int dead = __atomic_load_n(&c->sh->dead, __ATOMIC_ACQUIRE), eof = __atomic_load_n(&c->sh->eof, __ATOMIC_ACQUIRE);
	int in_end = eof || __atomic_load_n(&s->rx_eof, __ATOMIC_ACQUIRE);
	if (ch_readable(c, st) || in_end || dead)
		rev |= POLLIN;
	if (in_end)
		rev |= POLLRDHUP;
	if (dead)
		rev |= POLLERR | POLLHUP;
	else if (eof || (in_end && (__atomic_load_n(&s->tx_eof, __ATOMIC_ACQUIRE) ||
				    __atomic_load_n(&s->tx_stopped, __ATOMIC_ACQUIRE))))
		rev |= POLLHUP;
	uint64_t cred = CH_RING - (__atomic_load_n(&s->tx_sent, __ATOMIC_ACQUIRE) -
				   __atomic_load_n(&s->tx_acked, __ATOMIC_ACQUIRE));
	if ((cred && ch_tx_room(c) > CH_HDR) || dead || eof || __atomic_load_n(&s->tx_stopped, __ATOMIC_ACQUIRE))
		rev |= POLLOUT;
	return rev & (events | POLLERR | POLLHUP | POLLNVAL);
}

/* The socketpair transport's pipe over a stream of a channel
 * (lib/chan/chan.h): pf is the channel's socket, c->ch the channel and
 * c->st the stream.  The stream has a pipe's semantics (sp.h) but one:
 * it is asynchronous, so after a receiver shuts its end for reading the
 * peer's sends go on arriving until the peer has read the STOP, and the
 * peer's EOF (its answer) ends them; a receiver reads up to that EOF, as
 * the protocol's going back does anyway.  The application's timeouts are
 * read at each call (sh->rcvtimeo, sndtimeo). */
#include "lib/transport/socketpair/sp.h"
#include "lib/chan/chan.h"
#include "lib/base/clock.h"
#include "lib/base/real.h"

#include <errno.h>
#include <limits.h>

static int64_t deadline_of(const struct timeval *t, int flags)
{
	if ((flags & MSG_DONTWAIT) || (!t->tv_sec && !t->tv_usec))
		return INT64_MAX;
	return dsock_mono_ns() + (int64_t)t->tv_sec * 1000000000 + (int64_t)t->tv_usec * 1000;
}

/* A blocking send sends all, as a pipe's does, unless the deadline, a
 * signal or the peer's STOP ends it (what it sent, or the error). */
static ssize_t chan_sendmsg(struct sp_conn *c, int pf, const struct msghdr *m, int flags)
{
	int64_t deadline = deadline_of(&c->sh->sndtimeo, flags);
	size_t total = sp_iov_total(m), done = 0;

	if (pf < 0)
		return -EBADF;
	while (done < total) {
		struct iovec v[IOV_MAX];
		int n = (int)sp_iov_part(m, done, total - done, v);
		ssize_t r = ch_send(c->ch, c->st, v, n, flags & MSG_DONTWAIT, deadline);
		if (r < 0)
			return done ? (ssize_t)done : r;
		done += (size_t)r;
		if (flags & MSG_DONTWAIT)
			break;
	}
	return (ssize_t)done;
}

static ssize_t chan_recvmsg(struct sp_conn *c, int pf, struct msghdr *m, int flags)
{
	if (pf < 0)
		return -EBADF;
	return ch_recv(c->ch, c->st, m->msg_iov, (int)m->msg_iovlen, flags & (MSG_PEEK | MSG_WAITALL | MSG_DONTWAIT),
		       deadline_of(&c->sh->rcvtimeo, flags));
}

static int chan_shutdown(struct sp_conn *c, int pf, int how)
{
	return pf < 0 ? -EBADF : ch_shutdown(c->ch, c->st, how);
}

static int chan_inq(struct sp_conn *c, int pf)
{
	size_t n;

	if (pf < 0)
		return -EBADF;
	ch_progress(c->ch); /* (what the socket holds counts too) */
	n = ch_readable(c->ch, c->st);
	return n > INT_MAX ? INT_MAX : (int)n;
}

static short chan_poll(struct sp_conn *c, int pf, short events)
{
	return pf < 0 ? POLLNVAL : ch_poll(c->ch, c->st, events);
}

/* The channel's socket: what arrives (data, credits, the peer's ends),
 * and room while frames wait to go out.  A thread that reads the socket
 * for another reason (a blocked receive, a send waiting for credit) may
 * file what a poller sleeping here waits for: such a poller is woken
 * only by what arrives next, so this serves one channel per connection
 * with no other reader, as the tests use it, and not a channel shared by
 * many streams (docs/ARCHITECTURE.md, "Channels", readiness). */
static int chan_waits(struct sp_conn *c, int pf, short events, struct pollfd *w)
{
	(void)events;
	*w = (struct pollfd){ .fd = pf, .events = (short)(POLLIN | (ch_tx_pending(c->ch) ? POLLOUT : 0)) };
	return 1;
}

static void chan_timeouts(struct sp_conn *c, int pf)
{
	(void)c;
	(void)pf;
}

/* Our end lets go of the stream (the peer's receive reports a reset
 * where its bytes are unread here, as a socketpair's does) and of the
 * channel, which is this connection's alone.  Frames still queued go out
 * first (a second at most), as the kernel sends what a closed socket's
 * buffer holds.  The stream ends with this close although another
 * process may hold the connection too (a fork): a socketpair's end lives
 * on until its last holder closes it, and a channel shared by holders
 * needs their count (docs/ARCHITECTURE.md, "Channels"). */
static void chan_close(struct sp_conn *c, int pf)
{
	if (pf < 0 || !c->ch)
		return;
	ch_close_stream(c->ch, c->st);
	for (int i = 0; i < 200 && ch_tx_pending(c->ch) && ch_progress(c->ch) == 0; i++) {
		struct pollfd p = { .fd = pf, .events = POLLOUT };
		dsock_real.poll(&p, 1, 5);
	}
	ch_close(c->ch);
}

const struct sp_pipe_ops sp_pipe_chan = {
	.sendmsg = chan_sendmsg,
	.recvmsg = chan_recvmsg,
	.shutdown = chan_shutdown,
	.inq = chan_inq,
	.poll = chan_poll,
	.waits = chan_waits,
	.timeouts = chan_timeouts,
	.close = chan_close,
};

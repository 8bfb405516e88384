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
#include "lib/base/signals.h"

#include <errno.h>
#include <limits.h>

static int64_t deadline_of(const struct timeval *t, int flags)
{
	if ((flags & MSG_DONTWAIT) || (!t->tv_sec && !t->tv_usec))
		return INT64_MAX;
	return dsock_mono_ns() + (int64_t)t->tv_sec * 1000000000 + (int64_t)t->tv_usec * 1000;
}

/* A wait a signal interrupted before anything moved: restarted where the
 * kernel would restart the socket call (SA_RESTART, no timeout set). */
static int restart(const struct timeval *t, ssize_t r)
{
	return r == -EINTR && !t->tv_sec && !t->tv_usec && dsock_signals_restart();
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
		if (r < 0 && !done && restart(&c->sh->sndtimeo, r))
			continue;
		if (r < 0)
			return done ? (ssize_t)done : r;
		done += (size_t)r;
		if (flags & MSG_DONTWAIT)
			break;
	}
	return (ssize_t)done;
}

/* After the application shut its reading, a receive that finds nothing
 * returns 0 at once, as a socketpair's does (ended() tells it from the
 * EOF). */
static ssize_t chan_recvmsg(struct sp_conn *c, int pf, struct msghdr *m, int flags)
{
	int shut = atomic_load(&c->sh->app_shut_rd);
	int fl = (flags & (MSG_PEEK | MSG_WAITALL | MSG_DONTWAIT)) | (shut ? MSG_DONTWAIT : 0);
	ssize_t r;

	if (pf < 0)
		return -EBADF;
	do
		r = ch_recv(c->ch, c->st, m->msg_iov, (int)m->msg_iovlen, fl, deadline_of(&c->sh->rcvtimeo, flags));
	while (restart(&c->sh->rcvtimeo, r));
	return shut && r == -EAGAIN ? 0 : r;
}

static void chan_lowat(struct sp_conn *c, int pf)
{
	int n = atomic_load(&c->sh->lowat);

	if (pf >= 0)
		ch_set_lowat(c->ch, c->st, n > 1 ? (unsigned)n : 0);
}

static int chan_ended(struct sp_conn *c, int pf)
{
	return pf < 0 || ch_ended(c->ch, c->st);
}

/* The application's SHUT_RD makes receives that find nothing return 0 at
 * once, as a socketpair's do; the protocol's own (going back) waits for
 * the peer's EOF. */
static int chan_shutdown(struct sp_conn *c, int pf, int how)
{
	if (pf < 0)
		return -EBADF;
	if ((how == SHUT_RD || how == SHUT_RDWR) && atomic_load(&c->sh->app_shut_rd))
		how |= CH_SHUT_RD_NOW;
	return ch_shutdown(c->ch, c->st, how);
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

/* The channel's socket, which somebody must read (what arrives: data,
 * credits, the peer's ends; room while frames wait to go out), and the
 * stream's level eventfds (ch_levels): a thread that reads the socket for
 * another reason (a receive, a send waiting for credit) files what a
 * poller waits for, and the levels show it.  The socket in every
 * registration serves a channel per connection, as the tests use it; a
 * channel shared by many streams needs it once per poller
 * (docs/ARCHITECTURE.md, "Channels", readiness). */
static int chan_waits(struct sp_conn *c, int pf, short events, struct pollfd *w)
{
	int lv[2], n = 0;

	/* (frames waiting unread in the socket, a peer's credits, would make
	 * a new registration readable for nothing: taken first) */
	ch_progress(c->ch);
	w[n++] = (struct pollfd){ .fd = pf, .events = (short)(POLLIN | (ch_tx_pending(c->ch) ? POLLOUT : 0)) };
	if (ch_levels(c->ch, c->st, lv) == 0) {
		if (events & (POLLIN | POLLRDNORM))
			w[n++] = (struct pollfd){ .fd = lv[0], .events = POLLIN };
		if (events & (POLLOUT | POLLWRNORM))
			w[n++] = (struct pollfd){ .fd = lv[1], .events = POLLIN };
	}
	return n;
}

static void chan_timeouts(struct sp_conn *c, int pf)
{
	(void)c;
	(void)pf;
}

/* This process lets go of the channel, which is this connection's alone;
 * the last holder (sh->holders: a fork's processes) lets go of the stream
 * too (the peer's receive reports a reset where its bytes are unread
 * here, as a socketpair's does).  Frames still queued go out first (a
 * second at most), as the kernel sends what a closed socket's buffer
 * holds. */
static void chan_close(struct sp_conn *c, int pf)
{
	if (pf < 0 || !c->ch)
		return;
	if (atomic_fetch_sub(&c->sh->holders, 1) <= 1)
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
	.ended = chan_ended,
	.lowat = chan_lowat,
	.close = chan_close,
};

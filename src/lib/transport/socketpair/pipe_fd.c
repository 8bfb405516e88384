/* The socketpair transport's pipe as the daemon made it: an AF_UNIX stream
 * socketpair, whose semantics are the pipe's (sp.h).  The application's
 * timeouts are the pair's own (SO_RCVTIMEO, SO_SNDTIMEO). */
#include "lib/transport/socketpair/sp.h"
#include "lib/base/real.h"

#include <errno.h>
#include <sys/ioctl.h>

static ssize_t fd_sendmsg(struct sp_conn *c, int pf, const struct msghdr *m, int flags)
{
	ssize_t r = dsock_real.sendmsg(pf, m, MSG_NOSIGNAL | (flags & (MSG_DONTWAIT | MSG_MORE)));

	(void)c;
	return r < 0 ? -errno : r;
}

static ssize_t fd_recvmsg(struct sp_conn *c, int pf, struct msghdr *m, int flags)
{
	ssize_t r = dsock_real.recvmsg(pf, m, flags & (MSG_PEEK | MSG_WAITALL | MSG_DONTWAIT));

	(void)c;
	return r < 0 ? -errno : r;
}

static int fd_shutdown(struct sp_conn *c, int pf, int how)
{
	(void)c;
	return dsock_real.shutdown(pf, how) < 0 ? -errno : 0;
}

static int fd_inq(struct sp_conn *c, int pf)
{
	int n = 0;

	(void)c;
	return dsock_real.ioctl(pf, FIONREAD, &n) < 0 ? -errno : n;
}

static short fd_poll(struct sp_conn *c, int pf, short events)
{
	struct pollfd p = { .fd = pf, .events = events };

	(void)c;
	return dsock_real.poll(&p, 1, 0) == 1 ? p.revents : 0;
}

static int fd_waits(struct sp_conn *c, int pf, short events, struct pollfd *w)
{
	(void)c;
	*w = (struct pollfd){ .fd = pf, .events = events };
	return 1;
}

static void fd_timeouts(struct sp_conn *c, int pf)
{
	struct sp_shared *sh = c->sh;

	dsock_real.setsockopt(pf, SOL_SOCKET, SO_RCVTIMEO, &sh->rcvtimeo, sizeof(sh->rcvtimeo));
	dsock_real.setsockopt(pf, SOL_SOCKET, SO_SNDTIMEO, &sh->sndtimeo, sizeof(sh->sndtimeo));
}

/* (the pair is shut for reading by then: its bytes are only those sent
 * before, and none come after them) */
static void fd_lowat(struct sp_conn *c, int pf)
{
	(void)c;
	(void)pf;
}

static int fd_ended(struct sp_conn *c, int pf)
{
	(void)c;
	(void)pf;
	return 1;
}

static void fd_close(struct sp_conn *c, int pf)
{
	(void)c;
	dsock_real.close(pf);
}

const struct sp_pipe_ops sp_pipe_fd = {
	.sendmsg = fd_sendmsg,
	.recvmsg = fd_recvmsg,
	.shutdown = fd_shutdown,
	.inq = fd_inq,
	.poll = fd_poll,
	.waits = fd_waits,
	.timeouts = fd_timeouts,
	.ended = fd_ended,
	.lowat = fd_lowat,
	.close = fd_close,
};

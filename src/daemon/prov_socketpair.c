/* Provisioning for the transport "socketpair", which exists for the tests
 * (a second transport proves that offers, results and provisioning go by
 * transport id, and that readiness works without the application's socket
 * as the doorbell): a proven pair of ends gets the two ends of one
 * AF_UNIX stream socketpair, side 0 the first (or of a loopback TCP
 * connection: below).  The daemon lets go of them
 * once delivered: each end's close must reach the other (its EOF is part
 * of the transport's protocol, lib/transport/socketpair/sp.h), so a
 * FETCH finds none; an exec hands the end over itself.  With
 * DSOCK_SP_PIPE=channel in the daemon's environment the two ends frame
 * the pair as a channel of one stream (lib/chan/chan.h): the RESULT says
 * so (ring_size 1), so both ends take the same word.  Between hosts, its
 * ends run over a channel the daemons set up (hostchan.h). */
#include "daemon/provision.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static unsigned long n_conns;
/* DSOCK_SP_PIPE: unset, plain; "channel", framed over the AF_UNIX pair;
 * "tcp", framed over a loopback TCP connection, as a channel between
 * hosts is (so the TCP scenarios test that path on one host) */
static int framed = -1;
enum { PLAIN, FRAMED, FRAMED_TCP };

/* Two ends of one loopback TCP connection, as blocking as a socketpair's. */
static int tcp_pair(int sv[2])
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, e;

	sv[0] = sv[1] = -1;
	if (l < 0)
		return -errno;
	if (bind(l, (struct sockaddr *)&a, al) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0 ||
	    (sv[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    connect(sv[0], (struct sockaddr *)&a, al) < 0 || (sv[1] = accept4(l, NULL, NULL, SOCK_CLOEXEC)) < 0) {
		e = -errno;
		close(l);
		if (sv[0] >= 0)
			close(sv[0]);
		sv[0] = -1;
		return e;
	}
	close(l);
	/* (anyone on the host may connect to the listener first: the end
	 * accepted must be ours) */
	struct sockaddr_in mine, theirs;
	socklen_t ml = sizeof(mine), tl = sizeof(theirs);
	if (getsockname(sv[0], (struct sockaddr *)&mine, &ml) < 0 ||
	    getpeername(sv[1], (struct sockaddr *)&theirs, &tl) < 0 || mine.sin_port != theirs.sin_port ||
	    mine.sin_addr.s_addr != theirs.sin_addr.s_addr) {
		close(sv[0]);
		close(sv[1]);
		sv[0] = sv[1] = -1;
		return -EAGAIN;
	}
	for (int i = 0; i < 2; i++)
		setsockopt(sv[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return 0;
}

static int sp_make(struct dd_pair *x, const struct dd_reply_to *to[2], struct dsock_msg_result r[2])
{
	int sv[2], e;

	(void)to;
	if (framed < 0) {
		const char *p = getenv("DSOCK_SP_PIPE");
		framed = !p ? PLAIN : !strcmp(p, "channel") ? FRAMED : !strcmp(p, "tcp") ? FRAMED_TCP : PLAIN;
	}
	if (framed == FRAMED_TCP)
		e = tcp_pair(sv);
	else
		e = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 ? -errno : 0;
	if (e)
		return e;
	r[0].ring_size = r[1].ring_size = framed != PLAIN;
	x->fd[0] = sv[0];
	x->fd[1] = sv[1];
	n_conns++;
	return 0;
}

static void sp_sent(struct dd_pair *x)
{
	for (int i = 0; i < 2; i++) {
		if (x->fd[i] >= 0)
			close(x->fd[i]);
		x->fd[i] = -1;
	}
}

static void sp_release(struct dd_pair *x)
{
	sp_sent(x);
	n_conns--;
}

static void sp_stat(char *buf, size_t n)
{
	size_t l = strlen(buf);

	snprintf(buf + l, n - l, " socketpair_conns=%lu socketpair_framed=%d socketpair_pipe=%s", n_conns, framed > 0,
		 framed == FRAMED_TCP ? "tcp" : "unix");
}

const struct dd_provision dd_prov_socketpair = {
	.transport = DSOCK_PATH_SOCKETPAIR,
	.name = "socketpair",
	.channel = 1,
	.make = sp_make,
	.sent = sp_sent,
	.release = sp_release,
	.stat = sp_stat,
};

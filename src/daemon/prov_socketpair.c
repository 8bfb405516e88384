/* Provisioning for the transport "socketpair", which exists for the tests
 * (a second transport proves that offers, results and provisioning go by
 * transport id, and that readiness works without the application's socket
 * as the doorbell): a proven pair of ends gets the two ends of one
 * AF_UNIX stream socketpair, side 0 the first.  The daemon lets go of them
 * once delivered: each end's close must reach the other (its EOF is part
 * of the transport's protocol, lib/transport/socketpair/sp.h), so a
 * FETCH finds none; an exec hands the end over itself.  With
 * DSOCK_SP_PIPE=channel in the daemon's environment the two ends frame
 * the pair as a channel of one stream (lib/chan/chan.h): the RESULT says
 * so (ring_size 1), so both ends take the same word. */
#include "daemon/provision.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static unsigned long n_conns;
static int framed = -1;

static int sp_make(struct dd_pair *x, const struct dd_reply_to *to[2], struct dsock_msg_result r[2])
{
	int sv[2];

	(void)to;
	if (framed < 0) {
		const char *p = getenv("DSOCK_SP_PIPE");
		framed = p && !strcmp(p, "channel");
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	r[0].ring_size = r[1].ring_size = (uint32_t)framed;
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

	snprintf(buf + l, n - l, " socketpair_conns=%lu socketpair_framed=%d", n_conns, framed > 0);
}

const struct dd_provision dd_prov_socketpair = {
	.transport = DSOCK_PATH_SOCKETPAIR,
	.name = "socketpair",
	.make = sp_make,
	.sent = sp_sent,
	.release = sp_release,
	.stat = sp_stat,
};

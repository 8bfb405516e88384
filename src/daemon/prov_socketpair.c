/* Provisioning for the transport "socketpair", which exists for the tests
 * (a second transport proves that offers, results and provisioning go by
 * transport id, and that readiness works without the application's socket
 * as the doorbell): a proven pair of ends gets the two ends of one
 * AF_UNIX stream socketpair, side 0 the first.  The daemon lets go of them
 * once delivered: each end's close must reach the other (its EOF is part
 * of the transport's protocol, lib/transport/socketpair/sp.h), so a
 * FETCH finds none; an exec hands the end over itself. */
#include "daemon/provision.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static unsigned long n_conns;

static int sp_make(struct dd_pair *x, const struct dd_reply_to *to[2], struct dsock_msg_result r[2])
{
	int sv[2];

	(void)to;
	(void)r;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
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

	snprintf(buf + l, n - l, " socketpair_conns=%lu", n_conns);
}

const struct dd_provision dd_prov_socketpair = {
	.transport = DSOCK_PATH_SOCKETPAIR,
	.name = "socketpair",
	.make = sp_make,
	.sent = sp_sent,
	.release = sp_release,
	.stat = sp_stat,
};

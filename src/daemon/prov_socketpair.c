/* Provisioning for the transport "socketpair", which exists for the tests
 * (issue 20: a second transport proves that offers, results, fetches and
 * provisioning go by transport id): a proven pair of ends gets the two
 * ends of one AF_UNIX stream socketpair, side 0 the first.  The daemon
 * keeps both ends while the pair lives (a FETCH gives a side its end
 * again), so nothing here reads what the ends write; a pair ends with its
 * ends' CLOSE events or their processes. */
#include "daemon/provision.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static unsigned long n_conns;

static int sp_make(struct dd_pair *x, struct dsock_msg_result *r)
{
	int sv[2];

	(void)r;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	x->fd[0] = sv[0];
	x->fd[1] = sv[1];
	n_conns++;
	return 0;
}

static void sp_release(struct dd_pair *x)
{
	close(x->fd[0]);
	close(x->fd[1]);
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
	.release = sp_release,
	.stat = sp_stat,
};

#include "lib/transport/transport.h"
#include "lib/sock/sock.h"
#include "common/reason.h"

#include <errno.h>

static const struct dsock_transport *transports[DSOCK_TRANSPORTS_MAX];
static int ntransports;

int dsock_transport_register(const struct dsock_transport *t)
{
	if (ntransports >= DSOCK_TRANSPORTS_MAX)
		return -ENOSPC;
	transports[ntransports++] = t;
	return 0;
}

int dsock_transport_offer(struct dsock_sock *s, int fd, int role, unsigned *reason)
{
	*reason = DSOCK_R_NO_TRANSPORT;
	for (int i = 0; i < ntransports; i++) {
		*reason = DSOCK_R_NONE;
		if (transports[i]->offer(s, fd, role, reason) == 0) {
			s->owner = transports[i];
			/* release: readers that see tp also see the state the
			 * transport set up in offer() */
			__atomic_store_n(&s->tp, transports[i], __ATOMIC_RELEASE);
			return 0;
		}
		if (*reason == DSOCK_R_NONE)
			*reason = DSOCK_R_NO_TRANSPORT;
	}
	return -ENOTSUP;
}

int dsock_transports_any(void)
{
	return ntransports > 0;
}

void dsock_transports_before_sleep(void)
{
	for (int i = 0; i < ntransports; i++)
		if (transports[i]->before_sleep)
			transports[i]->before_sleep();
}

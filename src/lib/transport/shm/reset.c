/* Ending a connection of the shm transport as the kernel ends one on an
 * RST: a reset of ours (a fault of the peer's memory, a move back that
 * failed) and the application's connect(AF_UNSPEC).  Either side says
 * `closing` before its RST, so the peer does not take the RST for the
 * death of a process (recv.c). */
#include "lib/transport/shm/shm.h"
#include "lib/base/real.h"
#include "common/log.h"
#include "common/reason.h"

#include <errno.h>
#include <sys/socket.h>

int shm_reset(struct dsock_sock *s, int fd, unsigned reason)
{
	struct sockaddr sa = { .sa_family = AF_UNSPEC };
	struct shm_conn *c = shm_conn(s);

	/* this side closes, and says so before its RST: the peer must not
	 * take the RST for the death of a process (recv.c) */
	if (c && c->h)
		__atomic_store_n(&c->me->closing, 1, __ATOMIC_SEQ_CST);

	/* connect(AF_UNSPEC) aborts the connection as the kernel does on an
	 * RST: it sends one, empties the receive queue (whose wake-up tokens
	 * nobody must read as data) and leaves ECONNRESET for the next call;
	 * the shutdown then makes later reads end (0) and poll say readable
	 * and hung up, as after a received RST, rather than ENOTCONN */
	if (dsock_real.connect(fd, &sa, sizeof(sa)) < 0) {
		struct linger lg = { 1, 0 };
		dsock_real.setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	}
	dsock_real.shutdown(fd, SHUT_RDWR);
	shm_detach(s, reason);
	return -ECONNRESET;
}

int shm_disconnect(struct dsock_sock *s, int fd)
{
	struct sockaddr sa = { .sa_family = AF_UNSPEC };
	struct shm_conn *c = shm_conn(s);
	int r;

	/* closing first, as every reset of ours: the peer must not take the
	 * RST for the death of a process (recv.c) */
	if (c && c->h)
		__atomic_store_n(&c->me->closing, 1, __ATOMIC_SEQ_CST);
	r = dsock_real.connect(fd, &sa, sizeof(sa)) < 0 ? -errno : 0;
	shm_detach(s, DSOCK_R_NOT_ESTABLISHED);
	return r;
}

int shm_fault(struct dsock_sock *s, int fd, const char *what)
{
	DSOCK_WARN("connection on fd %d reset: shared memory %s (a corrupt or hostile peer)", fd, what);
	return shm_reset(s, fd, DSOCK_R_FAULT);
}

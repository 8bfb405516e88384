/* A transport carries the data of connections the kernel has established.
 * The kernel itself is the default and is represented by "no transport"
 * (dsock_sock.tp == NULL), so a passthrough socket costs one table load.
 *
 * Adding a transport (shared memory, fabric) is adding a folder that fills
 * this table and registers it with dsock_transport_register().  When a
 * connection is established (connect or accept), the socket layer offers it
 * to each registered transport in order; the first whose offer() returns 0
 * owns its data from then on.
 *
 * All functions return 0, a count, or -errno. */
#ifndef DSOCK_TRANSPORT_H
#define DSOCK_TRANSPORT_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

struct dsock_sock;

enum dsock_role { DSOCK_ROLE_CONNECT = 1, DSOCK_ROLE_ACCEPT = 2 };

struct dsock_transport {
	const char *name;
	/* Take over the established connection on fd, or return -errno and the
	 * kernel keeps it (*reason gets an enum dsock_reason). */
	int (*offer)(struct dsock_sock *s, int fd, int role, unsigned *reason);
	ssize_t (*sendmsg)(struct dsock_sock *s, int fd, const struct msghdr *m, int flags);
	/* The same for the solo thread, which holds no reference on s
	 * (lib/sock/solo.h): it must not block or wait, and returns
	 * DSOCK_ESLOW, having changed nothing, where sendmsg would have to
	 * (the caller then calls sendmsg with a reference).  May be NULL. */
	ssize_t (*sendmsg_solo)(struct dsock_sock *s, int fd, const struct msghdr *m, int flags);
	ssize_t (*recvmsg)(struct dsock_sock *s, int fd, struct msghdr *m, int flags);
	int (*shutdown)(struct dsock_sock *s, int fd, int how);
	/* connect(AF_UNSPEC) on the connection: the kernel resets it, and the
	 * transport lets go of it; returns the connect's result.  May be NULL. */
	int (*disconnect)(struct dsock_sock *s, int fd);
	/* Bytes readable now (FIONREAD), or -errno. */
	long (*readable)(struct dsock_sock *s, int fd);
	/* 1 when data is readable that the kernel socket does not show (our
	 * pollers then report it); 0 when the kernel's readiness is right. */
	int (*hidden_readable)(struct dsock_sock *s);
	/* A count that grows with every arrival (for edge-triggered pollers:
	 * hidden data is reported once per arrival). */
	uint64_t (*rx_mark)(struct dsock_sock *s);
	/* The kernel says readable: 1 if that is only wake-up tokens (they
	 * are drained, and the poller must not report it), else 0. */
	int (*spurious_in)(struct dsock_sock *s, int fd);
	/* The process's last fd of the socket is about to close. */
	void (*closing)(struct dsock_sock *s, int fd);
	/* Any fd of the socket is about to close (calls may be in flight). */
	void (*before_close)(struct dsock_sock *s, int fd);
	/* 1 if a send would not block; want_space asks for a wake-up (a
	 * readable kernel socket) when space frees. */
	int (*writable)(struct dsock_sock *s);
	/* Options the transport answers; -ENOPROTOOPT: the kernel's answer. */
	int (*sockopt)(struct dsock_sock *s, int fd, int set, int level, int opt, void *val, socklen_t *len);
	void (*want_space)(struct dsock_sock *s);
	/* fd is about to be handed to a holder that may not run dsock
	 * (SCM_RIGHTS): the kernel must carry the connection from now on, in
	 * this process too.  0, or -errno (the connection was reset). */
	int (*handover)(struct dsock_sock *s, int fd);
	/* The last fd referring to the socket is gone. */
	void (*release)(struct dsock_sock *s);
	/* Process-wide: a thread of ours is about to sleep in the kernel
	 * waiting on sockets (counted in dsock_sleepers): from now on every
	 * arrival must show in the kernel's readiness. */
	void (*before_sleep)(void);
};

/* Not an errno (those end at 4095): "take the path with a reference". */
#define DSOCK_ESLOW (-5000)

#define DSOCK_TRANSPORTS_MAX 4

/* Returns 0 or -ENOSPC.  Not thread-safe: call at start-up. */
int dsock_transport_register(const struct dsock_transport *t);
/* Offers s to each transport; returns 0 when one took it. */
int dsock_transport_offer(struct dsock_sock *s, int fd, int role, unsigned *reason);
/* 1 if any transport is registered (the fast path is on). */
int dsock_transports_any(void);
/* Calls each transport's before_sleep. */
void dsock_transports_before_sleep(void);

#endif

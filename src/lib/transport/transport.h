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

#include "common/proto.h"

#include <poll.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

struct dsock_sock;
struct dsock_exec_target;

/* The same values as an OFFER's role: the role goes to the daemon as is. */
enum dsock_role { DSOCK_ROLE_CONNECT = DSOCK_OFFER_CONNECT, DSOCK_ROLE_ACCEPT = DSOCK_OFFER_ACCEPT };

struct dsock_transport {
	const char *name;
	unsigned id; /* enum dsock_path: its name to the daemon and in stat */
	/* 1: offered connections only when DSOCK_TRANSPORTS names it (a
	 * transport for the tests).  DSOCK_TRANSPORTS (names, comma-separated)
	 * limits the offers to the transports it names. */
	int on_request;
	/* Take over the established connection on fd (0, with *priv its
	 * state, which the socket layer attaches), or return -errno and the
	 * kernel keeps it (*reason gets an enum dsock_reason). */
	int (*offer)(struct dsock_sock *s, int fd, int role, void **priv, unsigned *reason);
	ssize_t (*sendmsg)(struct dsock_sock *s, int fd, const struct msghdr *m, int flags);
	/* The same for the solo thread, which holds no reference on s
	 * (lib/sock/solo.h): it must not block or wait, and returns
	 * DSOCK_ESLOW, having changed nothing, where sendmsg would have to
	 * (the caller then calls sendmsg with a reference).  May be NULL. */
	ssize_t (*sendmsg_solo)(struct dsock_sock *s, int fd, const struct msghdr *m, int flags);
	ssize_t (*recvmsg)(struct dsock_sock *s, int fd, struct msghdr *m, int flags);
	/* sendfile(2) onto the connection: up to n bytes of file from pos
	 * on (the file's own position is the caller's business), sent as
	 * sendmsg sends.  May be NULL: the socket layer reads the file and
	 * calls sendmsg. */
	ssize_t (*sendfile)(struct dsock_sock *s, int fd, int file, off_t pos, size_t n);
	int (*shutdown)(struct dsock_sock *s, int fd, int how);
	/* connect(AF_UNSPEC) on the connection: the kernel resets it, and the
	 * transport lets go of it; returns the connect's result.  May be NULL. */
	int (*disconnect)(struct dsock_sock *s, int fd);
	/* ioctl req on the socket answered into *val (FIONREAD: bytes
	 * readable now; SIOCATMARK): 0, or -ENOTSUP when the kernel's answer
	 * is right.  May be NULL. */
	int (*ioctl)(struct dsock_sock *s, int fd, unsigned long req, int *val);
	/* 1 when data is readable that the kernel socket does not show (our
	 * pollers then report it); 0 when the kernel's readiness is right. */
	int (*hidden_readable)(struct dsock_sock *s);
	/* 1 when a look of the transport's own at the kernel socket took an
	 * error (the kernel reports it once) that it keeps for the
	 * application's next call: our pollers add the POLLERR the kernel's
	 * no longer shows.  May be NULL. */
	int (*kept_error)(struct dsock_sock *s);
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
	/* 0 if a send would block, else POLLOUT, with POLLERR and POLLHUP
	 * where the kernel says a send fails at once (a reset connection);
	 * want_space asks for a wake-up (a readable kernel socket) when space
	 * frees. */
	int (*writable)(struct dsock_sock *s, int fd);
	/* Options the transport answers; -ENOPROTOOPT: the kernel's answer. */
	int (*sockopt)(struct dsock_sock *s, int fd, int set, int level, int opt, void *val, socklen_t *len);
	void (*want_space)(struct dsock_sock *s);
	/* fd is about to be handed to a holder that may not run dsock
	 * (SCM_RIGHTS): the kernel must carry the connection from now on, in
	 * this process too.  0, or -errno (the connection was reset). */
	int (*handover)(struct dsock_sock *s, int fd);
	/* The last fd referring to the socket is gone. */
	void (*release)(struct dsock_sock *s);
	/* ---- readiness of a transport whose wake-ups do not all come
	 * through the application's kernel socket (a socket of its own, a
	 * completion channel shared by many connections).  Both NULL: the
	 * application's socket is the doorbell (the ops above refine what the
	 * kernel says of it; lib/sock/ready.h). ---- */
	/* The kernel fds a poller sleeps on for s's events (POLL* bits):
	 * fills w[] (at most DSOCK_WAITS_MAX; fd itself among them with the
	 * events the kernel is asked of it, other fds with theirs) and
	 * returns how many.  An fd may serve many sockets.  When the answer
	 * changes, the transport calls dsock_sock_rewatch(s). */
	int (*waits)(struct dsock_sock *s, int fd, short events, struct pollfd *w);
	/* s's events now (of `events`, plus POLLERR and POLLHUP), without
	 * waiting: what poll(2) would say of fd. */
	short (*poll)(struct dsock_sock *s, int fd, short events);

	/* Process-wide: a thread of ours is about to sleep in the kernel
	 * waiting on sockets.  bell 0 (counted in dsock_sleepers): from now on
	 * every arrival must show in the kernel's readiness.  bell 1 (counted
	 * in dsock_bell_sleepers; the set it sleeps on holds this transport's
	 * bell, below): an arrival may ring the bell instead, once per burst,
	 * while no thread sleeps counted in dsock_sleepers.  Either way what
	 * producers announced before is taken (as collect does) first.
	 * Returns 1 if, with bell 1, it drained a ring of the bell: another
	 * thread asleep on the bell may have been waiting for that ring (and
	 * for what it took), 0 otherwise. */
	int (*before_sleep)(int bell);
	/* Process-wide: the fd that this transport's producers make readable
	 * when they announce to a poller asleep with bell 1, or -1; *gen
	 * changes whenever the fd number names another file.  The socket
	 * layer registers it, edge-triggered, with DSOCK_BELL_DATA, in the
	 * sets its pollers sleep on (light.h) and hides its events. */
	int (*bell)(unsigned *gen);
	/* Process-wide: the last thread asleep with bell 1 is up (and does
	 * not count on the bell any more): the bell ends, arrivals wake as
	 * they did before any such sleep. */
	void (*bells_off)(void);
	/* Process-wide: an epoll_wait of ours looks for events now: take what
	 * producers announced in shared memory, marking those sockets hidden
	 * readable (dsock_hidden_set), so that the look finds them without
	 * looking at every socket.  now != 0: the caller spins (now is the
	 * time), and it or another poller of ours looks again before any
	 * thread of ours sleeps: producers may announce instead of waking. */
	void (*collect)(int64_t now);

	/* ---- process-wide hooks, called through the registry (each may be
	 * NULL) ---- */
	/* Start-up: 0 takes part, 1 is configured off (it is offered no
	 * connection, but still gets these hooks: an exec may hand it some),
	 * -errno: cannot (left out). */
	int (*init)(void);
	/* After start-up: take back the connections an exec handed over. */
	void (*adopt)(void);
	/* Around fork (pthread_atfork order: prepare, then parent or child). */
	void (*fork_prepare)(void);
	void (*fork_parent)(void);
	void (*fork_child)(void);
	/* An exec is about to start t (spawn: in another process): writes
	 * one "DSOCK_EXEC_<NAME>=value" for the new program into buf (n bytes
	 * at most, no terminating NUL) and returns its length, or 0.  Runs
	 * in a vfork child too: no allocation.  DSOCK_EXEC_* entries are
	 * never inherited further than one exec. */
	size_t (*exec_env)(char *buf, size_t n, int spawn, const struct dsock_exec_target *t);
	/* After exec_env: the exec failed, or the spawn did (started 0: this
	 * program goes on holding its connections alone), or a spawn's child
	 * started (1: it holds what exec_env handed it). */
	void (*exec_done)(int started);
	/* Normal exit. */
	void (*exit)(void);
	/* Connections whose bytes this transport carried in this process, and
	 * how many of them went back to the kernel afterwards. */
	void (*counts)(long *carried, long *back);
};

/* Not an errno (those end at 4095): "take the path with a reference". */
#define DSOCK_ESLOW (-5000)

#define DSOCK_TRANSPORTS_MAX 4
#define DSOCK_WAITS_MAX 4

/* Calls init of each transport the library is built with (registry.c)
 * and registers those that take part.  Start-up only. */
void dsock_transports_init(void);
/* Returns 0 or -ENOSPC.  Not thread-safe: call at start-up. */
int dsock_transport_register(const struct dsock_transport *t);
/* Offers s to each transport; returns 0 when one took it. */
int dsock_transport_offer(struct dsock_sock *s, int fd, int role, unsigned *reason);
/* 1 if any registered transport takes offers (the fast path is on). */
int dsock_transports_any(void);
/* Each calls the hook of the same name of every registered transport. */
int dsock_transports_before_sleep(int bell);
void dsock_transports_bells_off(void);
/* The one bell of the transports (at most one has one), or -1. */
int dsock_transports_bell(unsigned *gen);
void dsock_transports_collect(int64_t now);
void dsock_transports_adopt(void);
void dsock_transports_fork_prepare(void);
void dsock_transports_fork_parent(void);
void dsock_transports_fork_child(void);
void dsock_transports_exec_done(int started);
void dsock_transports_exit(void);
/* The transports' exec_env entries as a list in buf: each entry ends
 * with a NUL, the list with an empty entry.  Returns 0 (nothing to add:
 * buf is not a list) or the list's length. */
size_t dsock_transports_exec_env(char *buf, size_t n, int spawn, const struct dsock_exec_target *t);
void dsock_transports_counts(long *carried, long *back);

#endif

/* Sending to clients: one message (with an fd or none), and the results
 * waiting for room in a library's control socket.  A library
 * that opens hundreds of connections at once is sent two results for
 * each (HELD, then PAIRED with its memory) faster than it reads them, and
 * the daemon never blocks on a library: what does not fit now waits here,
 * in order (a LINK result must reach the library before the PAIRED that
 * names it), and goes when the socket has room again.  A result dropped
 * instead would leave its connection waiting for the library's give-up
 * (5 s), then on the kernel, while its other end had moved. */
#ifndef DSOCKD_OUTBOX_H
#define DSOCKD_OUTBOX_H

#include "common/proto.h"

#include <stddef.h>
#include <stdint.h>

struct dd_out {
	struct dsock_msg_result r;
	int fd; /* ours (a duplicate), or -1 */
};

struct dd_outbox {
	struct dd_out *q; /* a ring of cap entries (a power of two) */
	size_t head, n, cap;
};

/* Past this many, a result is dropped as when there was no outbox (the
 * library reads nothing: its connections give up on their own). */
#define DD_OUTBOX_MAX 65536

/* Sends one message, with pass_fd attached when >= 0: 0 or -errno.
 * flags: 0 blocks up to SO_SNDTIMEO (a CLI that stops reading costs at
 * most that, then is dropped); MSG_DONTWAIT for libraries, which must
 * never stall the daemon. */
int dd_send_msg_fd(int fd, uint16_t type, const void *payload, size_t len, int pass_fd, int flags);
/* 1 for a refusal that passes once the library reads: its socket is full
 * (EAGAIN), or the fds in flight to this user's unread sockets reach its
 * fd limit (ETOOMANYREFS: the kernel counts them against RLIMIT_NOFILE). */
int dd_send_transient(int rc);

/* Queues r with a duplicate of fd (>= 0) or none: 0, -ENOBUFS (full),
 * -ENOMEM, or dup's -errno. */
int dd_outbox_push(struct dd_outbox *o, const struct dsock_msg_result *r, int fd);
/* The oldest waiting result (n > 0). */
const struct dd_out *dd_outbox_peek(const struct dd_outbox *o);
/* Forgets the oldest one and closes its fd. */
void dd_outbox_pop(struct dd_outbox *o);
/* Sends what waits on fd, oldest first, while the socket takes it: 0 when
 * all went, else the refusal that stopped it (what is left stays).
 * *sent: how many went. */
int dd_outbox_flush(struct dd_outbox *o, int fd, unsigned *sent);
/* Empties it (closing every fd) and frees its memory. */
void dd_outbox_clear(struct dd_outbox *o);

#endif

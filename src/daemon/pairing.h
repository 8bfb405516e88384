/* Pairing: proving that two offered kernel sockets are the two ends of one
 * TCP connection (proof.h), and giving both, and only them, their
 * transport's resources (provision.h). */
#ifndef DSOCKD_PAIRING_H
#define DSOCKD_PAIRING_H

#include "common/proto.h"

#include <stdint.h>
#include <sys/types.h>

struct dd_proc;

/* Who to answer: the client slot, checked against its generation. */
struct dd_reply_to {
	uint32_t slot;
	uint64_t gen;
	struct dd_proc *proc;
};

/* Sends a RESULT (with fd when >= 0) to the offer's owner; provided by
 * the server.  Returns 0 or -errno. */
int dd_send_result(const struct dd_reply_to *to, const struct dsock_msg_result *r, int fd);
/* Reads the events process p wrote so far (its sockets' records);
 * provided by the server. */
void dd_server_drain(struct dd_proc *p);

/* A paired socket was closed: its memory may be gone. */
void dd_pairing_closed(const struct dd_proc *p, uint64_t sock_id);
/* Handles an OFFER with its socket fd (always closed here). */
void dd_pairing_offer(const struct dd_reply_to *to, const struct dsock_msg_offer *m, int fd);
/* Handles a FETCH with its socket fd (always closed here): answers with
 * the transport's resource if the socket is one end of a live pair of
 * that transport. */
void dd_pairing_fetch(const struct dd_reply_to *to, const struct dsock_msg_fetch *m, int fd);
/* The other end of the live pairing whose socket fd is (by SO_COOKIE):
 * who paired it, its id there, its cookie and inode.  0, -ENOENT (not a
 * live pairing) or -ENOTSOCK. */
struct dd_peer_id {
	const struct dd_proc *proc; /* NULL once that process left */
	uint64_t sock_id;
	uint64_t cookie;
	ino_t ino;
	struct dsock_addr local, peer; /* its address, and its peer's */
};
int dd_pairing_peer_of(int fd, struct dd_peer_id *out);
/* Forgets the offers of a process that left. */
void dd_pairing_forget(const struct dd_proc *p);
/* Expires offers (behind: the daemon's last look found messages waiting,
 * and likely offers get a grace); returns ms until the next expiry, or -1
 * when none. */
int dd_pairing_tick(int behind);
/* Counters for stat (remote: connections proven to end on another host). */
void dd_pairing_stats(unsigned long *paired, unsigned long *kernel, unsigned long *pending,
		      unsigned long *live, unsigned long *stale, unsigned long *remote);

#endif

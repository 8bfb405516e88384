/* Lending the other end of a paired socket to the hander of a hand-over
 * (PEER_REQ in common/proto.h). */
#ifndef DSOCKD_PEERFD_H
#define DSOCKD_PEERFD_H

#include <sys/types.h>

/* The peer's kernel socket of the live pairing that fd (the asker's end)
 * belongs to, taken from a process that holds it, or -1 with *err set:
 * ENOENT (no live pairing, or no process found holding the peer's
 * socket), EPERM (the daemon may not take it from there, or the asker,
 * neither root nor that process's user, may not have it). */
int dd_peer_socket(int fd, uid_t asker, int *err);

struct dd_proc;
/* For a listing: the local addresses of p's connections that the daemon
 * was not told (a connection's event comes without it, the offer fills it
 * in), read from copies of their fds, each checked against the peer
 * address on record.  One the daemon may not take stays unknown. */
void dd_peer_fill_local(struct dd_proc *p);

#endif

/* The kernel-recorded proof of identity, the daemon's side: it loads the
 * BPF programs of daemon/bpf/ident.bpf.c at the cgroup-v2 root and reads
 * a socket's record by the socket fd an offer brought (docs/ARCHITECTURE.md,
 * "Proof across namespaces"). */
#ifndef DSOCKD_IDENT_H
#define DSOCKD_IDENT_H

#include "common/ident.h"

/* Loads and attaches the programs (root, or CAP_BPF + CAP_NET_ADMIN) when
 * DSOCK_BPF_PROOF=1, or by default for the host's daemon (socket_path
 * DSOCK_HOST_SOCKET; DSOCK_BPF_PROOF=0: never).  0, or -errno (then the
 * proof is off and pairing keeps to one network namespace); logged
 * either way. */
int dd_ident_start(const char *socket_path);
/* 1 while the programs are attached by this daemon. */
int dd_ident_on(void);
/* The record of socket fd: 0, -ENOENT (none), -ENOSYS (the proof is off). */
int dd_ident_read(int fd, struct dsock_ident_rec *out);
/* Looks, every DSOCK_BPF_WATCH_MS (2000; 0: never) or at once when
 * `now`, whether a link of the programs was detached under the daemon,
 * and makes all three again if so (or turns the proof off when it
 * cannot, logged).  The ms until the next look, or -1 for none. */
int dd_ident_watch(int now);
/* Detaches (the links go with this process too). */
void dd_ident_stop(void);

#endif

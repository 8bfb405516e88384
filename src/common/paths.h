/* Where the daemon's control socket lives.
 *   DSOCK_SOCKET set        -> that path
 *   running as root         -> /run/dsock/dsockd.sock (one daemon per host)
 *   otherwise               -> $XDG_RUNTIME_DIR/dsock/dsockd.sock, else
 *                              /tmp/dsock-<uid>/dsockd.sock (one per user)  */
#ifndef DSOCK_PATHS_H
#define DSOCK_PATHS_H

#include <stddef.h>

/* The host's daemon's socket (root's default): the one containers reach
 * bind-mounted, and the daemon that proves by BPF unless told not to. */
#define DSOCK_HOST_SOCKET "/run/dsock/dsockd.sock"

/* Returns 0 or -ENAMETOOLONG. */
int dsock_socket_path(char *buf, size_t n);

#endif

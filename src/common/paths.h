/* Where the daemon's control socket lives.
 *   DSOCK_SOCKET set        -> that path
 *   running as root         -> /run/dsock/dsockd.sock (one daemon per host)
 *   otherwise               -> $XDG_RUNTIME_DIR/dsock/dsockd.sock, else
 *                              /tmp/dsock-<uid>/dsockd.sock (one per user)  */
#ifndef DSOCK_PATHS_H
#define DSOCK_PATHS_H

#include <stddef.h>

/* Returns 0 or -ENAMETOOLONG. */
int dsock_socket_path(char *buf, size_t n);

#endif

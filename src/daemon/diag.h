/* The kernel's own answer to "is this socket still the one that holds
 * these addresses": an exact sock_diag look-up by 4-tuple and cookie. */
#ifndef DSOCKD_DIAG_H
#define DSOCKD_DIAG_H

#include "common/proto.h"

#include <stdint.h>
#include <sys/types.h>

/* 1 if the socket with this cookie and inode is, right now, the full TCP
 * socket the kernel finds for local -> peer in the network namespace of
 * fd (any socket there) and has not reached TIME_WAIT or CLOSE; 0 if it is
 * gone, another socket holds the addresses, or the kernel cannot say. */
int dd_diag_holds(int fd, uint64_t netns, uint64_t cookie, ino_t ino, const struct dsock_addr *local,
		  const struct dsock_addr *peer);

#endif

/* Passing one fd with a message over an AF_UNIX socket (SCM_RIGHTS), for
 * the daemon and the library alike. */
#ifndef DSOCK_FDPASS_H
#define DSOCK_FDPASS_H

#include <sys/socket.h>

union dsock_cmsg_one {
	struct cmsghdr c;
	char b[CMSG_SPACE(4 * sizeof(int))];
};

/* Attaches fd (when >= 0) to m, using buf for the control data. */
void dsock_cmsg_put_fd(struct msghdr *m, union dsock_cmsg_one *buf, int fd);
/* After recvmsg: the first fd received, or -1; every other fd is closed
 * (with close_fn, so the library can use the real close).  Returns -2 when
 * more than one fd came or the control data was truncated (all closed). */
int dsock_cmsg_take_fd(struct msghdr *m, int (*close_fn)(int));

#endif

#include "common/fdpass.h"

#include <string.h>

void dsock_cmsg_put_fd(struct msghdr *m, union dsock_cmsg_one *buf, int fd)
{
	if (fd < 0)
		return;
	memset(buf, 0, sizeof(*buf));
	m->msg_control = buf->b;
	m->msg_controllen = CMSG_SPACE(sizeof(int));
	buf->c.cmsg_level = SOL_SOCKET;
	buf->c.cmsg_type = SCM_RIGHTS;
	buf->c.cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(&buf->c), &fd, sizeof(int));
}

int dsock_cmsg_take_fd(struct msghdr *m, int (*close_fn)(int))
{
	int got = -1, extra = 0;

	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t k = 0; k < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++) {
			int x;
			memcpy(&x, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
			if (got < 0) {
				got = x;
			} else {
				close_fn(x);
				extra = 1;
			}
		}
	}
	if (extra || (m->msg_flags & MSG_CTRUNC)) {
		if (got >= 0)
			close_fn(got);
		return -2;
	}
	return got;
}

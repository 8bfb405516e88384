/* The daemon client's one-off request for a peer's kernel socket (a
 * hand-over that cannot wait for the peer: PEER_REQ in common/proto.h),
 * on a connection of its own: the caller may be a vfork child sharing its
 * parent's memory and control socket, or a program that closed every fd
 * before its exec.  Nothing here allocates or takes a lock of ours. */
#include "lib/ctl/ctl.h"
#include "lib/base/guard.h"
#include "lib/base/real.h"
#include "common/fdpass.h"
#include "common/paths.h"
#include "common/proto.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

static long long ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A PEER answer for sock_id: the socket (>= 0), or -errno. */
static int peer_answer(const char *b, ssize_t n, int got, unsigned long long sock_id, int *out)
{
	const struct dsock_msg_hdr *h = (const void *)b;
	struct dsock_msg_result r;

	if (got == -2 || dsock_msg_check(b, (size_t)n) || h->type != DSOCK_MSG_RESULT)
		return 0;
	memcpy(&r, b + sizeof(*h), sizeof(r));
	if (r.result != DSOCK_RES_PEER || r.sock_id != sock_id)
		return 0;
	*out = got >= 0 ? got : -(int)(r.reason ? r.reason : ENOENT);
	return 1;
}

int dsock_ctl_fetch_peer(unsigned long long sock_id, int sock_fd, int timeout_ms)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct dsock_msg_peer_req q = { .sock_id = sock_id };
	union { struct dsock_msg_hdr h; char b[DSOCK_MSG_MAX + 1]; } m;
	union dsock_cmsg_one cm;
	long long end = ms_now() + timeout_ms;
	int fd, r = -ETIMEDOUT;

	if (dsock_socket_path(sa.sun_path, sizeof(sa.sun_path)))
		return -ENAMETOOLONG;
	DSOCK_GUARD_ENTER();
	fd = dsock_real.socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		r = -errno;
		goto out;
	}
	if (dsock_real.connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		goto out;
	}
	struct iovec v = { m.b, sizeof(struct dsock_msg_hdr) + sizeof(q) };
	struct msghdr mh = { .msg_iov = &v, .msg_iovlen = 1 };
	dsock_msg_init(&m.h, DSOCK_MSG_PEER_REQ, sizeof(q), 1);
	memcpy(m.b + sizeof(struct dsock_msg_hdr), &q, sizeof(q));
	dsock_cmsg_put_fd(&mh, &cm, sock_fd);
	if (dsock_real.sendmsg(fd, &mh, MSG_NOSIGNAL) < 0) {
		r = -errno;
		goto out;
	}
	for (long long left; (left = end - ms_now()) > 0;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		struct iovec rv = { m.b, sizeof(m.b) };
		struct msghdr rh = { .msg_iov = &rv, .msg_iovlen = 1, .msg_control = cm.b,
				     .msg_controllen = sizeof(cm.b) };
		if (dsock_real.poll(&p, 1, (int)left) <= 0)
			continue; /* (EINTR: the deadline decides) */
		ssize_t n = dsock_real.recvmsg(fd, &rh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n <= 0) {
			r = n == 0 ? -ENOTCONN : errno == EAGAIN || errno == EINTR ? r : -errno;
			if (n == 0 || r != -ETIMEDOUT)
				break;
			continue;
		}
		int got = dsock_cmsg_take_fd(&rh, dsock_real.close), ans;
		if (peer_answer(m.b, n, got, sock_id, &ans)) {
			r = ans;
			break;
		}
		if (got >= 0)
			dsock_real.close(got);
	}
out:
	if (fd >= 0)
		dsock_real.close(fd);
	DSOCK_GUARD_EXIT();
	return r;
}

#include "lib/sock/io.h"
#include "lib/sock/kspin.h"
#include "lib/sock/sock.h"
#include "lib/sock/solo.h"
#include "lib/sock/ready.h"
#include "lib/sock/epset.h"
#include "lib/base/real.h"
#include "lib/transport/transport.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <limits.h>

#include "lib/base/sysret.h"

/* The hot-path test: one lock-free load for a socket the kernel carries.
 * The socket (no reference) if a transport may own it, else NULL. */
static inline struct dsock_sock *ours(int fd)
{
	struct dsock_sock *s = dsock_fdt_peek(fd);

	if (!s)
		return NULL;
	/* (every send of a tracked socket comes here: a wait after it may
	 * spin, kspin.h) */
	dsock_kspin_sent = 1;
	if (__builtin_expect(!__atomic_load_n(&s->tp, __ATOMIC_ACQUIRE), 1))
		return NULL;
	return s;
}

/* The socket with a reference when a transport owns it, else NULL. */
static inline struct dsock_sock *owned(int fd)
{
	const struct dsock_transport *tp;

	return dsock_sock_carried(fd, &tp);
}

/* A socket that owned() found may leave its transport (tp = NULL) at any
 * moment, another thread's call or this one's own taking it back to the
 * kernel: calls go to s->owner, which stays, and whose functions see that
 * state and pass the call to the kernel. */
static ssize_t tp_recv(struct dsock_sock *s, int fd, struct msghdr *m, int flags)
{
	dsock_poller_busy();
	ssize_t r = s->owner->recvmsg(s, fd, m, flags);
	dsock_sock_put(s);
	return r;
}

static ssize_t tp_send(struct dsock_sock *s, int fd, const struct msghdr *m, int flags)
{
	ssize_t r = s->owner->sendmsg(s, fd, m, flags);
	dsock_sock_put(s);
	return r;
}

/* The send family on s, which ours(fd) found: the solo thread goes
 * without a reference where the transport can (lib/sock/solo.h), any
 * other call with one.  DSOCK_ESLOW: the kernel carries fd after all. */
static ssize_t send_ours(struct dsock_sock *s, int fd, const struct msghdr *m, int flags)
{
	const struct dsock_transport *tp = __atomic_load_n(&s->tp, __ATOMIC_ACQUIRE);

	dsock_poller_busy();
	if (tp && tp->sendmsg_solo && dsock_solo_enter(s, fd)) {
		ssize_t r = __atomic_load_n(&s->tp, __ATOMIC_ACQUIRE) == tp ?
			    tp->sendmsg_solo(s, fd, m, flags) : DSOCK_ESLOW;
		dsock_solo_exit(s);
		if (r != DSOCK_ESLOW)
			return r;
	}
	s = owned(fd);
	return s ? tp_send(s, fd, m, flags) : DSOCK_ESLOW;
}

#define ONE_IOV(buf, n) \
	struct iovec v_ = { .iov_base = (void *)(buf), .iov_len = (n) }; \
	struct msghdr m_ = { .msg_iov = &v_, .msg_iovlen = 1 }

/* A receive on a socket the kernel carries: one that would sleep spins
 * first (kspin.h). */
static inline void kernel_spin(int fd, int flags)
{
	const struct dsock_sock *s = dsock_fdt_peek(fd);

	if (s)
		dsock_kspin_recv(s, fd, flags);
}

ssize_t dsock_io_read(int fd, void *buf, size_t n)
{
	/* read of 0 bytes returns 0 at once (recv of 0 would wait for data) */
	struct dsock_sock *s = n ? owned(fd) : NULL;
	if (s) {
		ONE_IOV(buf, n);
		return tp_recv(s, fd, &m_, 0);
	}
	if (n)
		kernel_spin(fd, 0);
	return SYSRET(dsock_real.read(fd, buf, n));
}

static int iov_empty(const struct iovec *iov, int cnt)
{
	for (int i = 0; i < cnt; i++)
		if (iov[i].iov_len)
			return 0;
	return 1;
}

ssize_t dsock_io_readv(int fd, const struct iovec *iov, int cnt)
{
	int some = cnt > 0 && cnt <= IOV_MAX && !iov_empty(iov, cnt);
	struct dsock_sock *s = some ? owned(fd) : NULL;
	if (s) {
		struct msghdr m = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)cnt };
		return tp_recv(s, fd, &m, 0);
	}
	if (some)
		kernel_spin(fd, 0);
	return SYSRET(dsock_real.readv(fd, iov, cnt));
}

ssize_t dsock_io_write(int fd, const void *buf, size_t n)
{
	struct dsock_sock *s = ours(fd);
	if (s) {
		ONE_IOV(buf, n);
		ssize_t r = send_ours(s, fd, &m_, 0);
		if (r != DSOCK_ESLOW)
			return r;
	}
	return SYSRET(dsock_real.write(fd, buf, n));
}

ssize_t dsock_io_writev(int fd, const struct iovec *iov, int cnt)
{
	/* the kernel's checks (EINVAL for a bad count) come first */
	struct dsock_sock *s = cnt >= 0 && cnt <= IOV_MAX ? ours(fd) : NULL;
	if (s) {
		struct msghdr m = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)cnt };
		ssize_t r = send_ours(s, fd, &m, 0);
		if (r != DSOCK_ESLOW)
			return r;
	}
	return SYSRET(dsock_real.writev(fd, iov, cnt));
}

ssize_t dsock_io_recv(int fd, void *buf, size_t n, int flags)
{
	struct dsock_sock *s = owned(fd);
	if (s) {
		ONE_IOV(buf, n);
		return tp_recv(s, fd, &m_, flags);
	}
	kernel_spin(fd, flags);
	return SYSRET(dsock_real.recv(fd, buf, n, flags));
}

ssize_t dsock_io_recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *a, socklen_t *al)
{
	struct dsock_sock *s = owned(fd);
	if (s) {
		ONE_IOV(buf, n);
		ssize_t r;
		m_.msg_name = a;
		m_.msg_namelen = al ? *al : 0;
		r = tp_recv(s, fd, &m_, flags);
		if (r >= 0 && al)
			*al = m_.msg_namelen;
		return r;
	}
	kernel_spin(fd, flags);
	return SYSRET(dsock_real.recvfrom(fd, buf, n, flags, a, al));
}

ssize_t dsock_io_recvmsg(int fd, struct msghdr *m, int flags)
{
	struct dsock_sock *s = owned(fd);
	if (s)
		return tp_recv(s, fd, m, flags);
	kernel_spin(fd, flags);
	return SYSRET(dsock_real.recvmsg(fd, m, flags));
}

int dsock_io_recvmmsg(int fd, struct mmsghdr *v, unsigned n, int flags, struct timespec *t)
{
	/* transports carry streams; a batch is a loop of recvmsg there */
	struct dsock_sock *s = owned(fd);
	if (s) {
		unsigned i;
		for (i = 0; i < n; i++) {
			ssize_t r;
			dsock_sock_hold(s);
			r = tp_recv(s, fd, &v[i].msg_hdr, i ? flags | MSG_DONTWAIT : flags);
			if (r < 0) {
				dsock_sock_put(s);
				return i ? (int)i : (int)r;
			}
			v[i].msg_len = (unsigned)r;
		}
		dsock_sock_put(s);
		return (int)i;
	}
	return SYSRET(dsock_real.recvmmsg(fd, v, n, flags, t));
}

ssize_t dsock_io_send(int fd, const void *buf, size_t n, int flags)
{
	struct dsock_sock *s = ours(fd);
	if (s) {
		ONE_IOV(buf, n);
		ssize_t r = send_ours(s, fd, &m_, flags);
		if (r != DSOCK_ESLOW)
			return r;
	}
	return SYSRET(dsock_real.send(fd, buf, n, flags));
}

ssize_t dsock_io_sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *a, socklen_t al)
{
	struct dsock_sock *s = ours(fd);
	if (s) {
		ONE_IOV(buf, n);
		m_.msg_name = (void *)a;
		m_.msg_namelen = al;
		ssize_t r = send_ours(s, fd, &m_, flags);
		if (r != DSOCK_ESLOW)
			return r;
	}
	ssize_t r = SYSRET(dsock_real.sendto(fd, buf, n, flags, a, al));
	if ((flags & MSG_FASTOPEN) && a && (r >= 0 || r == -EINPROGRESS))
		dsock_sock_fastopen(fd, a, r >= 0);
	return r;
}

void dsock_io_hand_over(int fd)
{
	struct dsock_sock *s = owned(fd);

	if (s) {
		if (s->owner->handover)
			s->owner->handover(s, fd);
		dsock_sock_put(s);
	}
}

/* fds passed with SCM_RIGHTS may reach a process without dsock: each
 * connection goes back to the kernel first (the message still goes after
 * a reset, as natively). */
static void hand_over_rights(const struct msghdr *m)
{
	if (!m || !m->msg_control || m->msg_controllen < sizeof(struct cmsghdr))
		return;
	for (struct cmsghdr *c = CMSG_FIRSTHDR((struct msghdr *)m); c;
	     c = CMSG_NXTHDR((struct msghdr *)m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0))
			continue;
		size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int pfd;
			memcpy(&pfd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			dsock_epset_passed(pfd); /* (if an epoll set) */
			dsock_io_hand_over(pfd);
		}
	}
}

ssize_t dsock_io_sendmsg(int fd, const struct msghdr *m, int flags)
{
	struct dsock_sock *s;

	if (m && m->msg_controllen)
		hand_over_rights(m);
	s = ours(fd);
	if (s && m && !m->msg_controllen) {
		ssize_t r = send_ours(s, fd, m, flags);
		if (r != DSOCK_ESLOW)
			return r;
	} else if (s && (s = owned(fd))) {
		return tp_send(s, fd, m, flags); /* (with control data: never solo) */
	}
	ssize_t r = SYSRET(dsock_real.sendmsg(fd, m, flags));
	if ((flags & MSG_FASTOPEN) && m && m->msg_name && (r >= 0 || r == -EINPROGRESS))
		dsock_sock_fastopen(fd, m->msg_name, r >= 0);
	return r;
}

int dsock_io_sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags)
{
	struct dsock_sock *s;

	for (unsigned i = 0; v && i < n; i++)
		if (v[i].msg_hdr.msg_controllen)
			hand_over_rights(&v[i].msg_hdr);
	if (dsock_fdt_peek(fd))
		dsock_kspin_sent = 1;
	s = owned(fd);
	if (s) {
		unsigned i;
		for (i = 0; i < n; i++) {
			ssize_t r;
			dsock_sock_hold(s);
			r = tp_send(s, fd, &v[i].msg_hdr, flags);
			if (r < 0) {
				dsock_sock_put(s);
				return i ? (int)i : (int)r;
			}
			v[i].msg_len = (unsigned)r;
		}
		dsock_sock_put(s);
		return (int)i;
	}
	return SYSRET(dsock_real.sendmmsg(fd, v, n, flags));
}

ssize_t dsock_sendfile_by_reads(int file, off_t pos, size_t n, ssize_t (*send)(void *arg, const struct msghdr *m),
				void *arg)
{
	char buf[65536];
	size_t done = 0;
	ssize_t r = 0;

	while (done < n) {
		ssize_t got = pread(file, buf, n - done < sizeof(buf) ? n - done : sizeof(buf), pos + (off_t)done);
		if (got <= 0) {
			r = got < 0 ? -errno : 0;
			break;
		}
		ONE_IOV(buf, (size_t)got);
		r = send(arg, &m_);
		if (r <= 0)
			break;
		done += (size_t)r;
		if (r < got)
			break;
	}
	return done ? (ssize_t)done : r;
}

struct owner_send {
	struct dsock_sock *s;
	int fd;
};

static ssize_t owner_send(void *arg, const struct msghdr *m)
{
	struct owner_send *o = arg;
	return o->s->owner->sendmsg(o->s, o->fd, m, 0);
}

/* sendfile onto a transport's socket: the transport's own, or by reads
 * sent through the transport (a blocking socket waits for room: the
 * kernel's sendfile sends all of it).  The file offset moves by exactly
 * what was sent, as the kernel's would (the explicit *off, or the file
 * position). */
ssize_t dsock_io_sendfile(int out, int in, off_t *off, size_t n)
{
	struct dsock_sock *s = owned(out);
	struct owner_send o = { s, out };

	if (dsock_fdt_peek(out))
		dsock_kspin_sent = 1;
	off_t pos;
	ssize_t r;

	if (!s)
		return SYSRET(dsock_real.sendfile(out, in, off, n));
	pos = off ? *off : lseek(in, 0, SEEK_CUR);
	if (pos < 0) {
		r = -errno;
		dsock_sock_put(s);
		return r == -ESPIPE ? -EINVAL : r;
	}
	r = s->owner->sendfile ? s->owner->sendfile(s, out, in, pos, n) : dsock_sendfile_by_reads(in, pos, n, owner_send, &o);
	dsock_sock_put(s);
	if (r > 0)
		pos += r;
	if (off)
		*off = pos;
	else if (r > 0)
		lseek(in, pos, SEEK_SET);
	return r;
}

int dsock_io_shutdown(int fd, int how)
{
	struct dsock_sock *s = owned(fd);
	if (s) {
		int r = s->owner->shutdown(s, fd, how);
		dsock_sock_put(s);
		return r;
	}
	return SYSRET(dsock_real.shutdown(fd, how));
}

int dsock_io_ioctl(int fd, unsigned long req, int *val)
{
	const struct dsock_transport *tp;
	struct dsock_sock *s = dsock_sock_carried(fd, &tp);
	int r = -ENOTSUP;

	if (!s)
		return r;
	if (tp->ioctl)
		r = tp->ioctl(s, fd, req, val);
	dsock_sock_put(s);
	return r < 0 ? -ENOTSUP : 0;
}

int dsock_io_sockopt(int fd, int set, int level, int opt, void *val, socklen_t *len)
{
	const struct dsock_transport *tp;
	struct dsock_sock *s = dsock_sock_carried(fd, &tp);
	int r = -ENOPROTOOPT;

	if (!s)
		return r;
	if (tp->sockopt)
		r = tp->sockopt(s, fd, set, level, opt, val, len);
	dsock_sock_put(s);
	return r;
}

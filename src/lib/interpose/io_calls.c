/* Data calls. */
#include "lib/interpose/api.h"
#include "lib/sock/io.h"

#include <sys/sendfile.h>

DSOCK_API ssize_t read(int fd, void *buf, size_t n)
{
	if (DSOCK_GUARDED())
		return dsock_real.read(fd, buf, n);
	return dsock_ret(dsock_io_read(fd, buf, n));
}

DSOCK_API ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
	if (DSOCK_GUARDED())
		return dsock_real.readv(fd, iov, cnt);
	return dsock_ret(dsock_io_readv(fd, iov, cnt));
}

DSOCK_API ssize_t write(int fd, const void *buf, size_t n)
{
	if (DSOCK_GUARDED())
		return dsock_real.write(fd, buf, n);
	return dsock_ret(dsock_io_write(fd, buf, n));
}

DSOCK_API ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	if (DSOCK_GUARDED())
		return dsock_real.writev(fd, iov, cnt);
	return dsock_ret(dsock_io_writev(fd, iov, cnt));
}

DSOCK_API ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	if (DSOCK_GUARDED())
		return dsock_real.recv(fd, buf, n, flags);
	return dsock_ret(dsock_io_recv(fd, buf, n, flags));
}

DSOCK_API ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *a, socklen_t *al)
{
	if (DSOCK_GUARDED())
		return dsock_real.recvfrom(fd, buf, n, flags, a, al);
	return dsock_ret(dsock_io_recvfrom(fd, buf, n, flags, a, al));
}

DSOCK_API ssize_t recvmsg(int fd, struct msghdr *m, int flags)
{
	if (DSOCK_GUARDED())
		return dsock_real.recvmsg(fd, m, flags);
	return dsock_ret(dsock_io_recvmsg(fd, m, flags));
}

DSOCK_API int recvmmsg(int fd, struct mmsghdr *v, unsigned n, int flags, struct timespec *t)
{
	if (DSOCK_GUARDED())
		return dsock_real.recvmmsg(fd, v, n, flags, t);
	return (int)dsock_ret(dsock_io_recvmmsg(fd, v, n, flags, t));
}

DSOCK_API ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	if (DSOCK_GUARDED())
		return dsock_real.send(fd, buf, n, flags);
	return dsock_ret(dsock_io_send(fd, buf, n, flags));
}

DSOCK_API ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *a, socklen_t al)
{
	if (DSOCK_GUARDED())
		return dsock_real.sendto(fd, buf, n, flags, a, al);
	return dsock_ret(dsock_io_sendto(fd, buf, n, flags, a, al));
}

DSOCK_API ssize_t sendmsg(int fd, const struct msghdr *m, int flags)
{
	if (DSOCK_GUARDED())
		return dsock_real.sendmsg(fd, m, flags);
	return dsock_ret(dsock_io_sendmsg(fd, m, flags));
}

DSOCK_API int sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags)
{
	if (DSOCK_GUARDED())
		return dsock_real.sendmmsg(fd, v, n, flags);
	return (int)dsock_ret(dsock_io_sendmmsg(fd, v, n, flags));
}

DSOCK_API ssize_t sendfile(int out, int in, off_t *off, size_t n)
{
	if (DSOCK_GUARDED())
		return dsock_real.sendfile(out, in, off, n);
	return dsock_ret(dsock_io_sendfile(out, in, off, n));
}

/* off_t is 64 bits on every target dsock supports (LP64). */
_Static_assert(sizeof(off_t) == 8, "sendfile64 alias needs a 64-bit off_t");
DSOCK_API ssize_t sendfile64(int out, int in, off_t *off, size_t n)
{
	return sendfile(out, in, off, n);
}

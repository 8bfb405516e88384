/* Calls that close, copy or change fds. */
#include "lib/interpose/api.h"
#include "lib/sock/sock.h"
#include "lib/sock/epset.h"
#include "lib/sock/io.h"

#include <fcntl.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <unistd.h>

DSOCK_API int close(int fd)
{
	if (DSOCK_GUARDED())
		return dsock_real.close(fd);
	return (int)dsock_ret(dsock_sock_close(fd));
}

DSOCK_API int close_range(unsigned first, unsigned last, int flags)
{
	return (int)dsock_ret(dsock_sock_close_range(first, last, flags));
}

DSOCK_API void closefrom(int low)
{
	int e = errno;

	if (low >= 0)
		dsock_sock_close_range((unsigned)low, ~0u, 0);
	errno = e; /* closefrom reports nothing */
}

DSOCK_API int dup(int fd)
{
	return (int)dsock_ret(dsock_sock_dup(fd, -1, 0, DSOCK_DUP_ANY));
}

DSOCK_API int dup2(int oldfd, int newfd)
{
	return (int)dsock_ret(dsock_sock_dup(oldfd, newfd, 0, DSOCK_DUP2));
}

DSOCK_API int dup3(int oldfd, int newfd, int flags)
{
	return (int)dsock_ret(dsock_sock_dup(oldfd, newfd, flags, DSOCK_DUP3));
}

/* Every fcntl argument is an int or a pointer; both travel in one register
 * (glibc's own fcntl reads it as void * the same way). */
static int do_fcntl(int fd, int cmd, void *arg)
{
	switch (cmd) {
	case F_DUPFD:
		return (int)dsock_ret(dsock_sock_dup(fd, (int)(long)arg, 0, DSOCK_DUP_FCNTL));
	case F_DUPFD_CLOEXEC:
		return (int)dsock_ret(dsock_sock_dup(fd, (int)(long)arg, 0, DSOCK_DUP_FCNTL_CLOEXEC));
	case F_SETFL:
		return (int)dsock_ret(dsock_sock_setfl(fd, (int)(long)arg));
	case F_SETFD:
		return (int)dsock_ret(dsock_epset_cloexec(fd, ((long)arg & FD_CLOEXEC) != 0, 1, (long)arg));
	default:
		return (int)dsock_ret(SYSRET(dsock_real.fcntl(fd, cmd, arg)));
	}
}

DSOCK_API int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (DSOCK_GUARDED())
		return dsock_real.fcntl(fd, cmd, arg);
	return do_fcntl(fd, cmd, arg);
}

/* the same function under glibc's 64-bit-offset name */
DSOCK_API int fcntl64(int fd, int cmd, ...) __attribute__((alias("fcntl")));

DSOCK_API int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	void *arg;
	int r;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	if ((req == FIONREAD || req == SIOCATMARK) && arg && !DSOCK_GUARDED() && dsock_io_ioctl(fd, req, arg) == 0)
		return 0; /* the transport's answer: it holds bytes for fd */
	if ((req == FIOCLEX || req == FIONCLEX) && !DSOCK_GUARDED())
		return (int)dsock_ret(dsock_epset_cloexec(fd, req == FIOCLEX, 0, 0));
	r = dsock_real.ioctl(fd, req, arg);
	if (r < 0 || DSOCK_GUARDED())
		return (int)dsock_ret(SYSRET(r));
	if (req == FIONBIO && arg)
		dsock_sock_set_nonblock(fd, *(int *)arg != 0);
	return r;
}

DSOCK_API int pipe(int fds[2])
{
	return (int)dsock_ret(SYSRET(dsock_real.pipe(fds)));
}

DSOCK_API int pipe2(int fds[2], int flags)
{
	return (int)dsock_ret(SYSRET(dsock_real.pipe2(fds, flags)));
}

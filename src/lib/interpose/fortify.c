/* The _FORTIFY_SOURCE entry points that hardened binaries call instead of
 * read, recv, recvfrom, poll and ppoll.  Same checks as glibc, then the
 * ordinary path. */
#include "lib/interpose/api.h"
#include "lib/sock/io.h"

#include <poll.h>

void __chk_fail(void) __attribute__((noreturn));
ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
		       struct sockaddr *a, socklen_t *al);
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);
int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *m,
		size_t fdslen);

DSOCK_API ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	if (n > buflen)
		__chk_fail();
	return read(fd, buf, n);
}

DSOCK_API ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
	if (n > buflen)
		__chk_fail();
	return recv(fd, buf, n, flags);
}

DSOCK_API ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
				 struct sockaddr *a, socklen_t *al)
{
	if (n > buflen)
		__chk_fail();
	return recvfrom(fd, buf, n, flags, a, al);
}

DSOCK_API int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return poll(fds, n, timeout);
}

DSOCK_API int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *m,
			  size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return ppoll(fds, n, t, m);
}

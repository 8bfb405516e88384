/* Readiness calls.  While the kernel carries every connection, the kernel's
 * answer is the answer.  The shared-memory transport will merge its own
 * readiness in here (see docs/ARCHITECTURE.md, "Readiness"). */
#include "lib/interpose/api.h"

DSOCK_API int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	return (int)dsock_ret(SYSRET(dsock_real.poll(fds, n, timeout)));
}

DSOCK_API int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *m)
{
	return (int)dsock_ret(SYSRET(dsock_real.ppoll(fds, n, t, m)));
}

DSOCK_API int select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *t)
{
	return (int)dsock_ret(SYSRET(dsock_real.select(n, r, w, e, t)));
}

DSOCK_API int pselect(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *t,
		      const sigset_t *m)
{
	return (int)dsock_ret(SYSRET(dsock_real.pselect(n, r, w, e, t, m)));
}

DSOCK_API int epoll_create(int size)
{
	return (int)dsock_ret(SYSRET(dsock_real.epoll_create(size)));
}

DSOCK_API int epoll_create1(int flags)
{
	return (int)dsock_ret(SYSRET(dsock_real.epoll_create1(flags)));
}

DSOCK_API int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	return (int)dsock_ret(SYSRET(dsock_real.epoll_ctl(epfd, op, fd, ev)));
}

DSOCK_API int epoll_wait(int epfd, struct epoll_event *ev, int n, int timeout)
{
	return (int)dsock_ret(SYSRET(dsock_real.epoll_wait(epfd, ev, n, timeout)));
}

DSOCK_API int epoll_pwait(int epfd, struct epoll_event *ev, int n, int timeout, const sigset_t *m)
{
	return (int)dsock_ret(SYSRET(dsock_real.epoll_pwait(epfd, ev, n, timeout, m)));
}

DSOCK_API int epoll_pwait2(int epfd, struct epoll_event *ev, int n, const struct timespec *t,
			   const sigset_t *m)
{
	return (int)dsock_ret(SYSRET(dsock_real.epoll_pwait2(epfd, ev, n, t, m)));
}

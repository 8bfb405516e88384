/* Readiness calls: the kernel's answer, plus fast-path data the kernel
 * socket does not show (lib/sock/ready.c). */
#include "lib/interpose/api.h"
#include "lib/sock/light.h"
#include "lib/sock/ready.h"

DSOCK_API int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	return (int)dsock_ret(dsock_ready_poll(fds, n, NULL, NULL, 0, timeout));
}

DSOCK_API int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *m)
{
	return (int)dsock_ret(dsock_ready_poll(fds, n, t, m, 1, 0));
}

DSOCK_API int select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *t)
{
	return (int)dsock_ret(dsock_ready_select(n, r, w, e, NULL, NULL, t, 0));
}

DSOCK_API int pselect(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *t,
		      const sigset_t *m)
{
	return (int)dsock_ret(dsock_ready_select(n, r, w, e, t, m, NULL, 1));
}

DSOCK_API int epoll_create(int size)
{
	long r = SYSRET(dsock_real.epoll_create(size));

	if (r >= 0 && !DSOCK_GUARDED())
		dsock_light_born((int)r, 0);
	return (int)dsock_ret(r);
}

DSOCK_API int epoll_create1(int flags)
{
	long r = SYSRET(dsock_real.epoll_create1(flags));

	if (r >= 0 && !DSOCK_GUARDED())
		dsock_light_born((int)r, (flags & EPOLL_CLOEXEC) != 0);
	return (int)dsock_ret(r);
}

DSOCK_API int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	if (DSOCK_GUARDED())
		return dsock_real.epoll_ctl(epfd, op, fd, ev);
	return (int)dsock_ret(dsock_epoll_ctl(epfd, op, fd, ev));
}

DSOCK_API int epoll_wait(int epfd, struct epoll_event *ev, int n, int timeout)
{
	return (int)dsock_ret(dsock_ready_epoll(epfd, ev, n, timeout, NULL, NULL, DSOCK_EPW_WAIT));
}

DSOCK_API int epoll_pwait(int epfd, struct epoll_event *ev, int n, int timeout, const sigset_t *m)
{
	return (int)dsock_ret(dsock_ready_epoll(epfd, ev, n, timeout, NULL, m, DSOCK_EPW_PWAIT));
}

DSOCK_API int epoll_pwait2(int epfd, struct epoll_event *ev, int n, const struct timespec *t,
			   const sigset_t *m)
{
	return (int)dsock_ret(dsock_ready_epoll(epfd, ev, n, 0, t, m, DSOCK_EPW_PWAIT2));
}

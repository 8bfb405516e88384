/* syscall(): a program's raw system calls on the fds dsock tracks.
 *
 * A read, send, close, dup or epoll_ctl made with syscall() instead of its
 * libc function would pass the socket layer by: bytes on the rings never
 * seen, a wake-up token read as data, an epoll set's records wrong.  So
 * each call the library interposes goes to its wrapper here, with the
 * kernel's argument conventions (a signal mask's size, a timeout the
 * kernel rewrites with the time left).  io_uring_setup first makes the
 * kernel carry every connection of the process (lib/sock/uring.c).
 * fork, vfork and clone stay raw: a child returning from a function frame
 * its parent still owns cannot be wrapped.  Every other number goes to the
 * kernel as it is. */
#include "lib/interpose/api.h"
#include "lib/sock/sock.h"
#include "common/rawsys.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SIGSET_BYTES (_NSIG / 8) /* the size libc passes, the one the wrappers take */

static long now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000L + t.tv_nsec;
}

/* the kernel's rewrite of a wait's timeout after a wait that returned r
 * (a count, or -1 with errno): the time it had left, errno kept */
static void time_left(struct timespec *t, long start, int r)
{
	int e = errno;
	long left = t->tv_sec * 1000000000L + t->tv_nsec - (now_ns() - start);

	if (r < 0 && e != EINTR)
		return; /* (refused: the kernel leaves it) */
	if (left < 0)
		left = 0;
	t->tv_sec = left / 1000000000L;
	t->tv_nsec = left % 1000000000L;
	errno = e;
}

static long routed_ppoll(long a[6])
{
	struct pollfd *fds = (struct pollfd *)a[0];
	struct timespec *t = (struct timespec *)a[2];
	const sigset_t *m = (const sigset_t *)a[3];
	long start = t ? now_ns() : 0;

	if (m && a[4] != SIGSET_BYTES)
		return dsock_sys(SYS_ppoll, a[0], a[1], a[2], a[3], a[4]);
	int r = ppoll(fds, (nfds_t)a[1], t, m);
	if (t)
		time_left(t, start, r);
	return r;
}

/* pselect6's sixth argument: the mask and its size, in memory */
struct mask_arg {
	const sigset_t *set;
	size_t size;
};

static long routed_pselect(long a[6])
{
	struct timespec *t = (struct timespec *)a[4];
	const struct mask_arg *ma = (const struct mask_arg *)a[5];
	const sigset_t *m = ma ? ma->set : NULL;
	long start = t ? now_ns() : 0;

	if (m && ma->size != SIGSET_BYTES)
		return dsock_sys(SYS_pselect6, a[0], a[1], a[2], a[3], a[4], a[5]);
	int r = pselect((int)a[0], (fd_set *)a[1], (fd_set *)a[2], (fd_set *)a[3], t, m);
	if (t)
		time_left(t, start, r);
	return r;
}

#ifdef SYS_select
static long routed_select(long a[6])
{
	struct timeval *tv = (struct timeval *)a[4];
	struct timespec t;
	long start = tv ? now_ns() : 0;
	int r = select((int)a[0], (fd_set *)a[1], (fd_set *)a[2], (fd_set *)a[3], tv);

	if (tv) {
		t.tv_sec = tv->tv_sec;
		t.tv_nsec = tv->tv_usec * 1000L;
		time_left(&t, start, r);
		tv->tv_sec = t.tv_sec;
		tv->tv_usec = t.tv_nsec / 1000L;
	}
	return r;
}
#endif

/* a wait with a signal mask the wrappers take (libc's size) */
static long routed_epoll_pwait(long n, long a[6])
{
	const sigset_t *m = (const sigset_t *)a[4];

	if (m && a[5] != SIGSET_BYTES)
		return dsock_sys(n, a[0], a[1], a[2], a[3], a[4], a[5]);
	if (n == SYS_epoll_pwait)
		return epoll_pwait((int)a[0], (struct epoll_event *)a[1], (int)a[2], (int)a[3], m);
	return epoll_pwait2((int)a[0], (struct epoll_event *)a[1], (int)a[2], (const struct timespec *)a[3], m);
}

static long route(long n, long a[6])
{
	switch (n) {
	case SYS_read: return read((int)a[0], (void *)a[1], (size_t)a[2]);
	case SYS_write: return write((int)a[0], (const void *)a[1], (size_t)a[2]);
	case SYS_readv: return readv((int)a[0], (const struct iovec *)a[1], (int)a[2]);
	case SYS_writev: return writev((int)a[0], (const struct iovec *)a[1], (int)a[2]);
	case SYS_recvfrom:
		return recvfrom((int)a[0], (void *)a[1], (size_t)a[2], (int)a[3], (struct sockaddr *)a[4],
				(socklen_t *)a[5]);
	case SYS_sendto:
		return sendto((int)a[0], (const void *)a[1], (size_t)a[2], (int)a[3], (const struct sockaddr *)a[4],
			      (socklen_t)a[5]);
	case SYS_recvmsg: return recvmsg((int)a[0], (struct msghdr *)a[1], (int)a[2]);
	case SYS_sendmsg: return sendmsg((int)a[0], (const struct msghdr *)a[1], (int)a[2]);
	case SYS_recvmmsg:
		return recvmmsg((int)a[0], (struct mmsghdr *)a[1], (unsigned)a[2], (int)a[3], (struct timespec *)a[4]);
	case SYS_sendmmsg: return sendmmsg((int)a[0], (struct mmsghdr *)a[1], (unsigned)a[2], (int)a[3]);
	case SYS_sendfile: return sendfile((int)a[0], (int)a[1], (off_t *)a[2], (size_t)a[3]);
	case SYS_socket: return socket((int)a[0], (int)a[1], (int)a[2]);
	case SYS_socketpair: return socketpair((int)a[0], (int)a[1], (int)a[2], (int *)a[3]);
	case SYS_bind: return bind((int)a[0], (const struct sockaddr *)a[1], (socklen_t)a[2]);
	case SYS_listen: return listen((int)a[0], (int)a[1]);
#ifdef SYS_accept
	case SYS_accept: return accept((int)a[0], (struct sockaddr *)a[1], (socklen_t *)a[2]);
#endif
	case SYS_accept4: return accept4((int)a[0], (struct sockaddr *)a[1], (socklen_t *)a[2], (int)a[3]);
	case SYS_connect: return connect((int)a[0], (const struct sockaddr *)a[1], (socklen_t)a[2]);
	case SYS_shutdown: return shutdown((int)a[0], (int)a[1]);
	case SYS_getsockopt:
		return getsockopt((int)a[0], (int)a[1], (int)a[2], (void *)a[3], (socklen_t *)a[4]);
	case SYS_setsockopt:
		return setsockopt((int)a[0], (int)a[1], (int)a[2], (const void *)a[3], (socklen_t)a[4]);
	case SYS_getsockname: return getsockname((int)a[0], (struct sockaddr *)a[1], (socklen_t *)a[2]);
	case SYS_getpeername: return getpeername((int)a[0], (struct sockaddr *)a[1], (socklen_t *)a[2]);
	case SYS_close: return close((int)a[0]);
#ifdef SYS_close_range
	case SYS_close_range: return close_range((unsigned)a[0], (unsigned)a[1], (int)a[2]);
#endif
	case SYS_dup: return dup((int)a[0]);
#ifdef SYS_dup2
	case SYS_dup2: return dup2((int)a[0], (int)a[1]);
#endif
	case SYS_dup3: return dup3((int)a[0], (int)a[1], (int)a[2]);
	case SYS_fcntl: return fcntl((int)a[0], (int)a[1], (void *)a[2]);
	case SYS_ioctl: return ioctl((int)a[0], (unsigned long)a[1], (void *)a[2]);
#ifdef SYS_poll
	case SYS_poll: return poll((struct pollfd *)a[0], (nfds_t)a[1], (int)a[2]);
#endif
	case SYS_ppoll: return routed_ppoll(a);
#ifdef SYS_select
	case SYS_select: return routed_select(a);
#endif
	case SYS_pselect6: return routed_pselect(a);
#ifdef SYS_epoll_create
	case SYS_epoll_create: return epoll_create((int)a[0]);
#endif
	case SYS_epoll_create1: return epoll_create1((int)a[0]);
	case SYS_epoll_ctl: return epoll_ctl((int)a[0], (int)a[1], (int)a[2], (struct epoll_event *)a[3]);
#ifdef SYS_epoll_wait
	case SYS_epoll_wait: return epoll_wait((int)a[0], (struct epoll_event *)a[1], (int)a[2], (int)a[3]);
#endif
	case SYS_epoll_pwait: return routed_epoll_pwait(n, a);
#ifdef SYS_epoll_pwait2
	case SYS_epoll_pwait2: return routed_epoll_pwait(n, a);
#endif
	case SYS_execve: return execve((const char *)a[0], (char *const *)a[1], (char *const *)a[2]);
	case SYS_execveat:
		return execveat((int)a[0], (const char *)a[1], (char *const *)a[2], (char *const *)a[3], (int)a[4]);
#ifdef SYS_io_uring_setup
	case SYS_io_uring_setup:
		dsock_sock_uring();
		break;
#endif
	}
	return dsock_sys(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}

/* Six arguments are read whatever the number, as libc's own syscall()
 * does: the ones a call does not take are never used.  (The sixth comes
 * from the caller's stack, past what a shorter call passed: no sanitizer
 * looks at these reads.) */
__attribute__((no_sanitize("address"))) DSOCK_API long syscall(long n, ...)
{
	va_list ap;
	long a[6];

	va_start(ap, n);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if (DSOCK_GUARDED())
		return dsock_sys(n, a[0], a[1], a[2], a[3], a[4], a[5]);
	return route(n, a);
}

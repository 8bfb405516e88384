#include "lib/base/real.h"
#include "common/rawsys.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- defaults used before resolution: raw system calls ---------------- */
/* dsock_sys() returns -1 and sets errno exactly like the libc wrappers do. */
#define RAW(name, ret, params, ...) \
	static ret raw_##name params { return (ret)dsock_sys(__VA_ARGS__); }

RAW(socket, int, (int d, int t, int p), SYS_socket, d, t, p)
RAW(socketpair, int, (int d, int t, int p, int *sv), SYS_socketpair, d, t, p, sv)
RAW(bind, int, (int fd, const struct sockaddr *a, socklen_t l), SYS_bind, fd, a, l)
RAW(listen, int, (int fd, int b), SYS_listen, fd, b)
RAW(accept, int, (int fd, struct sockaddr *a, socklen_t *l), SYS_accept4, fd, a, l, 0)
RAW(accept4, int, (int fd, struct sockaddr *a, socklen_t *l, int f), SYS_accept4, fd, a, l, f)
RAW(connect, int, (int fd, const struct sockaddr *a, socklen_t l), SYS_connect, fd, a, l)
RAW(shutdown, int, (int fd, int how), SYS_shutdown, fd, how)
RAW(close, int, (int fd), SYS_close, fd)
RAW(close_range, int, (unsigned a, unsigned b, int f), SYS_close_range, a, b, f)
RAW(read, ssize_t, (int fd, void *b, size_t n), SYS_read, fd, b, n)
RAW(readv, ssize_t, (int fd, const struct iovec *v, int c), SYS_readv, fd, v, c)
RAW(write, ssize_t, (int fd, const void *b, size_t n), SYS_write, fd, b, n)
RAW(writev, ssize_t, (int fd, const struct iovec *v, int c), SYS_writev, fd, v, c)
RAW(recv, ssize_t, (int fd, void *b, size_t n, int f), SYS_recvfrom, fd, b, n, f, NULL, NULL)
RAW(recvfrom, ssize_t, (int fd, void *b, size_t n, int f, struct sockaddr *a, socklen_t *l),
    SYS_recvfrom, fd, b, n, f, a, l)
RAW(recvmsg, ssize_t, (int fd, struct msghdr *m, int f), SYS_recvmsg, fd, m, f)
RAW(recvmmsg, int, (int fd, struct mmsghdr *v, unsigned n, int f, struct timespec *t),
    SYS_recvmmsg, fd, v, n, f, t)
RAW(send, ssize_t, (int fd, const void *b, size_t n, int f), SYS_sendto, fd, b, n, f, NULL, 0)
RAW(sendto, ssize_t, (int fd, const void *b, size_t n, int f, const struct sockaddr *a, socklen_t l),
    SYS_sendto, fd, b, n, f, a, l)
RAW(sendmsg, ssize_t, (int fd, const struct msghdr *m, int f), SYS_sendmsg, fd, m, f)
RAW(sendmmsg, int, (int fd, struct mmsghdr *v, unsigned n, int f), SYS_sendmmsg, fd, v, n, f)
RAW(sendfile, ssize_t, (int o, int i, off_t *off, size_t n), SYS_sendfile, o, i, off, n)
RAW(epoll_create1, int, (int f), SYS_epoll_create1, f)
RAW(epoll_ctl, int, (int e, int op, int fd, struct epoll_event *ev), SYS_epoll_ctl, e, op, fd, ev)
RAW(epoll_wait, int, (int e, struct epoll_event *ev, int n, int t), SYS_epoll_pwait, e, ev, n, t, NULL, 8)
RAW(dup, int, (int fd), SYS_dup, fd)
RAW(dup3, int, (int a, int b, int f), SYS_dup3, a, b, f)
RAW(getsockopt, int, (int fd, int l, int o, void *v, socklen_t *n), SYS_getsockopt, fd, l, o, v, n)
RAW(setsockopt, int, (int fd, int l, int o, const void *v, socklen_t n), SYS_setsockopt, fd, l, o, v, n)
RAW(getsockname, int, (int fd, struct sockaddr *a, socklen_t *l), SYS_getsockname, fd, a, l)
RAW(getpeername, int, (int fd, struct sockaddr *a, socklen_t *l), SYS_getpeername, fd, a, l)
RAW(pipe2, int, (int *p, int f), SYS_pipe2, p, f)
RAW(pipe, int, (int *p), SYS_pipe2, p, 0)
RAW(execve, int, (const char *p, char *const *a, char *const *e), SYS_execve, p, a, e)
RAW(execveat, int, (int d, const char *p, char *const *a, char *const *e, int f),
    SYS_execveat, d, p, a, e, f)

static int raw_epoll_create(int size)
{
	if (size <= 0) {
		errno = EINVAL;
		return -1;
	}
	return raw_epoll_create1(0);
}

static int raw_dup2(int a, int b)
{
	if (a == b)
		return (int)dsock_sys(SYS_fcntl, a, F_GETFD) < 0 ? -1 : b;
	return raw_dup3(a, b, 0);
}

static int raw_fcntl(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	return (int)dsock_sys(SYS_fcntl, fd, cmd, arg);
}

static int raw_ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	return (int)dsock_sys(SYS_ioctl, fd, req, arg);
}

/* ---- defaults for library-level functions: resolve, then call --------- */
#define LAZY(name, ret, params, args) \
	static ret lazy_##name params \
	{ \
		dsock_real_init(); \
		if (dsock_real.name == lazy_##name) { \
			errno = ENOSYS; \
			return (ret)-1; \
		} \
		return dsock_real.name args; \
	}

LAZY(poll, int, (struct pollfd *f, nfds_t n, int t), (f, n, t))
LAZY(ppoll, int, (struct pollfd *f, nfds_t n, const struct timespec *t, const sigset_t *m), (f, n, t, m))
LAZY(select, int, (int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *t), (n, r, w, e, t))
LAZY(pselect, int, (int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *t,
		    const sigset_t *m), (n, r, w, e, t, m))
LAZY(epoll_pwait, int, (int e, struct epoll_event *ev, int n, int t, const sigset_t *m), (e, ev, n, t, m))
LAZY(epoll_pwait2, int, (int e, struct epoll_event *ev, int n, const struct timespec *t,
			 const sigset_t *m), (e, ev, n, t, m))
LAZY(fork, pid_t, (void), ())
LAZY(execvpe, int, (const char *f, char *const *a, char *const *e), (f, a, e))
LAZY(fexecve, int, (int fd, char *const *a, char *const *e), (fd, a, e))
LAZY(posix_spawn, int, (pid_t *p, const char *f, const posix_spawn_file_actions_t *fa,
			const posix_spawnattr_t *at, char *const *a, char *const *e),
     (p, f, fa, at, a, e))
LAZY(posix_spawnp, int, (pid_t *p, const char *f, const posix_spawn_file_actions_t *fa,
			 const posix_spawnattr_t *at, char *const *a, char *const *e),
     (p, f, fa, at, a, e))

struct dsock_real dsock_real = {
#define RAW_OR_LAZY(name) .name = raw_##name,
	RAW_OR_LAZY(socket) RAW_OR_LAZY(socketpair) RAW_OR_LAZY(bind) RAW_OR_LAZY(listen)
	RAW_OR_LAZY(accept) RAW_OR_LAZY(accept4) RAW_OR_LAZY(connect) RAW_OR_LAZY(shutdown)
	RAW_OR_LAZY(close) RAW_OR_LAZY(close_range) RAW_OR_LAZY(read) RAW_OR_LAZY(readv)
	RAW_OR_LAZY(write) RAW_OR_LAZY(writev) RAW_OR_LAZY(recv) RAW_OR_LAZY(recvfrom)
	RAW_OR_LAZY(recvmsg) RAW_OR_LAZY(recvmmsg) RAW_OR_LAZY(send) RAW_OR_LAZY(sendto)
	RAW_OR_LAZY(sendmsg) RAW_OR_LAZY(sendmmsg) RAW_OR_LAZY(sendfile)
	RAW_OR_LAZY(epoll_create) RAW_OR_LAZY(epoll_create1) RAW_OR_LAZY(epoll_ctl)
	RAW_OR_LAZY(epoll_wait) RAW_OR_LAZY(dup) RAW_OR_LAZY(dup2) RAW_OR_LAZY(dup3)
	RAW_OR_LAZY(fcntl) RAW_OR_LAZY(ioctl) RAW_OR_LAZY(getsockopt) RAW_OR_LAZY(setsockopt)
	RAW_OR_LAZY(getsockname) RAW_OR_LAZY(getpeername) RAW_OR_LAZY(pipe) RAW_OR_LAZY(pipe2)
	RAW_OR_LAZY(execve) RAW_OR_LAZY(execveat)
#undef RAW_OR_LAZY
	.poll = lazy_poll, .ppoll = lazy_ppoll, .select = lazy_select, .pselect = lazy_pselect,
	.epoll_pwait = lazy_epoll_pwait, .epoll_pwait2 = lazy_epoll_pwait2, .fork = lazy_fork,
	.execvpe = lazy_execvpe, .fexecve = lazy_fexecve, .posix_spawn = lazy_posix_spawn,
	.posix_spawnp = lazy_posix_spawnp,
};

enum { INIT_NONE, INIT_RUNNING, INIT_DONE };
static _Atomic int init_state;
static __thread int init_on_this_thread;

void dsock_real_init(void)
{
	int expect = INIT_NONE;

	if (atomic_load_explicit(&init_state, memory_order_acquire) == INIT_DONE ||
	    init_on_this_thread)
		return; /* done, or recursion from inside dlsym: keep defaults */
	if (!atomic_compare_exchange_strong(&init_state, &expect, INIT_RUNNING)) {
		while (atomic_load_explicit(&init_state, memory_order_acquire) != INIT_DONE)
			sched_yield();
		return;
	}
	init_on_this_thread = 1;
	/* Each store replaces a working default with the libc version; a racing
	 * caller sees one or the other, both correct. */
#define RESOLVE(name, ret, params) \
	{ void *p = dlsym(RTLD_NEXT, #name); if (p) dsock_real.name = (ret (*) params)p; }
	DSOCK_REAL_LIST(RESOLVE)
#undef RESOLVE
	init_on_this_thread = 0;
	atomic_store_explicit(&init_state, INIT_DONE, memory_order_release);
}

/* The real (next-in-chain, normally glibc) versions of every interposed
 * function.
 *
 * Every pointer starts at a default that works before resolution: a raw
 * system call for the syscall-backed functions, or a "lazy" stub that
 * resolves first for library-level ones (fork, exec*, posix_spawn*, poll,
 * select).  So a call that reaches us before our constructor ran, or from
 * inside dlsym itself (jemalloc's first malloc does reads and closes), never
 * recurses and never allocates.  dsock_real_init() replaces the defaults
 * with dlsym(RTLD_NEXT) results once; it is idempotent and thread-safe. */
#ifndef DSOCK_REAL_H
#define DSOCK_REAL_H

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#define DSOCK_REAL_LIST(X) \
	X(socket, int, (int, int, int)) \
	X(socketpair, int, (int, int, int, int *)) \
	X(bind, int, (int, const struct sockaddr *, socklen_t)) \
	X(listen, int, (int, int)) \
	X(accept, int, (int, struct sockaddr *, socklen_t *)) \
	X(accept4, int, (int, struct sockaddr *, socklen_t *, int)) \
	X(connect, int, (int, const struct sockaddr *, socklen_t)) \
	X(shutdown, int, (int, int)) \
	X(close, int, (int)) \
	X(close_range, int, (unsigned, unsigned, int)) \
	X(read, ssize_t, (int, void *, size_t)) \
	X(readv, ssize_t, (int, const struct iovec *, int)) \
	X(write, ssize_t, (int, const void *, size_t)) \
	X(writev, ssize_t, (int, const struct iovec *, int)) \
	X(recv, ssize_t, (int, void *, size_t, int)) \
	X(recvfrom, ssize_t, (int, void *, size_t, int, struct sockaddr *, socklen_t *)) \
	X(recvmsg, ssize_t, (int, struct msghdr *, int)) \
	X(recvmmsg, int, (int, struct mmsghdr *, unsigned, int, struct timespec *)) \
	X(send, ssize_t, (int, const void *, size_t, int)) \
	X(sendto, ssize_t, (int, const void *, size_t, int, const struct sockaddr *, socklen_t)) \
	X(sendmsg, ssize_t, (int, const struct msghdr *, int)) \
	X(sendmmsg, int, (int, struct mmsghdr *, unsigned, int)) \
	X(sendfile, ssize_t, (int, int, off_t *, size_t)) \
	X(poll, int, (struct pollfd *, nfds_t, int)) \
	X(ppoll, int, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *)) \
	X(select, int, (int, fd_set *, fd_set *, fd_set *, struct timeval *)) \
	X(pselect, int, (int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *)) \
	X(epoll_create, int, (int)) \
	X(epoll_create1, int, (int)) \
	X(epoll_ctl, int, (int, int, int, struct epoll_event *)) \
	X(epoll_wait, int, (int, struct epoll_event *, int, int)) \
	X(epoll_pwait, int, (int, struct epoll_event *, int, int, const sigset_t *)) \
	X(epoll_pwait2, int, (int, struct epoll_event *, int, const struct timespec *, const sigset_t *)) \
	X(dup, int, (int)) \
	X(dup2, int, (int, int)) \
	X(dup3, int, (int, int, int)) \
	X(fcntl, int, (int, int, ...)) \
	X(ioctl, int, (int, unsigned long, ...)) \
	X(getsockopt, int, (int, int, int, void *, socklen_t *)) \
	X(setsockopt, int, (int, int, int, const void *, socklen_t)) \
	X(getsockname, int, (int, struct sockaddr *, socklen_t *)) \
	X(getpeername, int, (int, struct sockaddr *, socklen_t *)) \
	X(pipe, int, (int *)) \
	X(pipe2, int, (int *, int)) \
	X(fork, pid_t, (void)) \
	X(execve, int, (const char *, char *const *, char *const *)) \
	X(execvpe, int, (const char *, char *const *, char *const *)) \
	X(execveat, int, (int, const char *, char *const *, char *const *, int)) \
	X(fexecve, int, (int, char *const *, char *const *)) \
	X(posix_spawn, int, (pid_t *, const char *, const posix_spawn_file_actions_t *, \
			     const posix_spawnattr_t *, char *const *, char *const *)) \
	X(posix_spawnp, int, (pid_t *, const char *, const posix_spawn_file_actions_t *, \
			      const posix_spawnattr_t *, char *const *, char *const *))

struct dsock_real {
#define DSOCK_REAL_FIELD(name, ret, params) ret (*name) params;
	DSOCK_REAL_LIST(DSOCK_REAL_FIELD)
#undef DSOCK_REAL_FIELD
};

extern struct dsock_real dsock_real;

void dsock_real_init(void);

#endif

/* Lending the other end of a paired socket to the hander of a hand-over
 * (PEER_REQ in common/proto.h).  A connection on a transport that goes to a
 * holder without dsock goes back to the kernel in both directions first;
 * the peer's direction needs the peer's kernel socket, and a peer that is
 * asleep, computing or stopped cannot lend it in time.  The daemon finds
 * a process holding that socket (the one that paired it, then every
 * registered process that told it of a socket with the same addresses:
 * fork children, an exec'd program), takes a copy with pidfd_getfd and
 * checks it is that very socket (SO_COOKIE, never reused).  pidfd_getfd needs ptrace access to the
 * holder: root's CAP_SYS_PTRACE, or the holder's user with a dumpable
 * process and no stricter Yama policy.  Without it the answer is EPERM and
 * the hander waits for the peer's own answer instead (handover.c). */
#include "daemon/peerfd.h"
#include "daemon/pairing.h"
#include "daemon/proof.h"
#include "daemon/registry.h"
#include "common/log.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

/* Fd n of the process is the socket with this inode and cookie: a copy of
 * it, or -1 (*err EPERM when taking it was refused). */
static int try_fd(int pidfd, pid_t pid, int n, ino_t ino, uint64_t cookie, int *err)
{
	char path[64], link[64], want[48];
	uint64_t got = 0;
	socklen_t kl = sizeof(got);
	ssize_t l;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, n);
	snprintf(want, sizeof(want), "socket:[%llu]", (unsigned long long)ino);
	l = readlink(path, link, sizeof(link) - 1);
	if (l < 0 && (errno == EACCES || errno == EPERM))
		*err = EPERM;
	if (l < 0 || (size_t)l != strlen(want) || memcmp(link, want, (size_t)l))
		return -1;
	fd = (int)syscall(SYS_pidfd_getfd, pidfd, n, 0);
	if (fd < 0) {
		if (errno == EPERM || errno == EACCES)
			*err = EPERM;
		return -1;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_COOKIE, &got, &kl) < 0 || got != cookie) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The socket from process pid: fd `guess` first, then (scan) every fd. */
static int from_proc(pid_t pid, int guess, int scan, const struct dd_peer_id *id, uid_t asker, int *err)
{
	char dir[32];
	struct stat st;
	int pidfd, fd = -1;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d", (int)pid);
	if (stat(dir, &st) < 0)
		return -1;
	if (asker != 0 && st.st_uid != asker) {
		*err = EPERM; /* another user's socket: never lent */
		return -1;
	}
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0)
		return -1;
	if (guess >= 0)
		fd = try_fd(pidfd, pid, guess, id->ino, id->cookie, err);
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	if (fd < 0 && scan && *err != EPERM && (d = opendir(dir))) {
		for (struct dirent *e; fd < 0 && *err != EPERM && (e = readdir(d));) {
			char *end;
			long n = strtol(e->d_name, &end, 10);
			if (*end || end == e->d_name || n == guess)
				continue;
			fd = try_fd(pidfd, pid, (int)n, id->ino, id->cookie, err);
		}
		closedir(d);
	}
	close(pidfd);
	return fd;
}

/* The fd the process last told us for a socket with the peer's addresses
 * (not its id: ids are numbered per process, and an exec'd program that
 * adopted it numbers it anew), or -1.  Another namespace's socket with the
 * same addresses fails the cookie check. */
static int told_fd(const struct dd_proc *p, const struct dd_peer_id *id)
{
	for (size_t i = 0; i < p->nsocks; i++)
		if (p->socks[i].fd >= 0 && dd_addr_same(&p->socks[i].local, &id->local) &&
		    dd_addr_same(&p->socks[i].peer, &id->peer))
			return p->socks[i].fd;
	return -1;
}

int dd_peer_socket(int fd, uid_t asker, int *err)
{
	struct dd_peer_id id;
	int r, found_eperm = 0;

	*err = ENOENT;
	if ((r = dd_pairing_peer_of(fd, &id)) < 0) {
		*err = -r;
		return -1;
	}
	/* the process that paired it: its told fd, else each of its fds */
	if (id.proc) {
		int e = 0, pfd = from_proc(id.proc->pid, told_fd(id.proc, &id), 1, &id, asker, &e);
		if (pfd >= 0)
			return pfd;
		found_eperm |= e == EPERM;
	}
	/* others that know it (fork children): their told fd only, so that
	 * the daemon, one thread, never reads every fd of every process */
	for (const struct dd_proc *p = dd_proc_first(); p; p = p->next) {
		int e = 0, guess;
		if (p == id.proc || (guess = told_fd(p, &id)) < 0)
			continue;
		int pfd = from_proc(p->pid, guess, 0, &id, asker, &e);
		if (pfd >= 0)
			return pfd;
		found_eperm |= e == EPERM;
	}
	*err = found_eperm ? EPERM : ENOENT;
	return -1;
}

void dd_peer_fill_local(struct dd_proc *p)
{
	int pidfd = -1;

	for (size_t i = 0; i < p->nsocks; i++) {
		struct dd_sock *s = &p->socks[i];
		struct sockaddr_storage l, r;
		socklen_t ll = sizeof(l), rl = sizeof(r);
		struct dsock_addr local, peer;
		int fd;

		if (s->fd < 0 || s->local.family || !s->peer.family || s->type != SOCK_STREAM)
			continue;
		if (pidfd < 0 && (pidfd = (int)syscall(SYS_pidfd_open, p->pid, 0)) < 0)
			return;
		if ((fd = (int)syscall(SYS_pidfd_getfd, pidfd, s->fd, 0)) < 0) {
			if (errno == EPERM)
				break; /* (nor any other of that process's) */
			continue;
		}
		if (getpeername(fd, (struct sockaddr *)&r, &rl) == 0 &&
		    getsockname(fd, (struct sockaddr *)&l, &ll) == 0) {
			dsock_addr_from(&peer, (const struct sockaddr *)&r);
			dsock_addr_from(&local, (const struct sockaddr *)&l);
			if (dd_addr_same(&peer, &s->peer)) /* (else the fd was reused) */
				dd_proc_learn(p, s->id, &local, &peer);
		}
		close(fd);
	}
	if (pidfd >= 0)
		close(pidfd);
}

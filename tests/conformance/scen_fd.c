/* fds: dup, fcntl, ioctl, close, fork and exec with live sockets, and the
 * errors for fds that are not sockets. */
#include "conf.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

STREAM_SCEN(dup_keeps_socket_alive)
{
	char b[16];
	int c, s, d;

	fam_pair(f, &c, &s);
	d = dup(c);
	out("dup ok: %s", d >= 0 ? "yes" : "no");
	R("send via dup", send(d, "one", 3, 0));
	R("close original", close(c));
	R("send via dup after close", send(d, "two", 3, 0));
	R("recv", recv(s, b, 6, MSG_WAITALL));
	out("data: %.6s", b);
	R("close dup", close(d));
	R("recv eof", recv(s, b, 6, 0));
}

STREAM_SCEN(dup2_over_live_socket)
{
	char b[8];
	int c1, s1, c2, s2;

	fam_pair(f, &c1, &s1);
	fam_pair(f, &c2, &s2);
	out("dup2 returns newfd: %s", dup2(c1, c2) == c2 ? "yes" : "no");
	R("send via replaced fd", send(c2, "to1", 3, 0));
	R("recv on first pair", recv(s1, b, 3, MSG_WAITALL));
	out("second pair peer sees: %s", pollname((unsigned)wait_fd(s2, POLLIN | POLLRDHUP, 1000)));
	R("recv on second pair", recv(s2, b, 3, 0));
	out("dup2 same fd returns it: %s", dup2(c1, c1) == c1 ? "yes" : "no");
	R("dup2 bad oldfd", dup2(9999, c1));
	R("send still works", send(c1, "x", 1, 0));
}

STREAM_SCEN(dup3_and_fcntl_dupfd)
{
	int c, s, d;

	fam_pair(f, &c, &s);
	d = fam_socket(f, 0);
	out("dup3 cloexec returns newfd: %s", dup3(c, d, O_CLOEXEC) == d ? "yes" : "no");
	out("FD_CLOEXEC: %s", fcntl(d, F_GETFD) & FD_CLOEXEC ? "yes" : "no");
	R("dup3 same fd", dup3(c, c, 0));
	R("dup3 bad flags", dup3(c, d, 12345));
	d = fcntl(c, F_DUPFD, 200);
	out("F_DUPFD >= 200: %s", d >= 200 ? "yes" : "no");
	R("send via F_DUPFD copy", send(d, "x", 1, 0));
	d = fcntl(c, F_DUPFD_CLOEXEC, 300);
	out("F_DUPFD_CLOEXEC >= 300 and cloexec: %s", d >= 300 && (fcntl(d, F_GETFD) & FD_CLOEXEC) ? "yes" : "no");
	R("F_DUPFD bad fd", fcntl(9999, F_DUPFD, 0));
}

STREAM_SCEN(fcntl_flags)
{
	int c, s;

	fam_pair(f, &c, &s);
	R("F_GETFD", fcntl(c, F_GETFD));
	R("F_SETFD cloexec", fcntl(c, F_SETFD, FD_CLOEXEC));
	R("F_GETFD", fcntl(c, F_GETFD));
	R("F_GETFL accmode", fcntl(c, F_GETFL) & O_ACCMODE);
	R("F_SETFL nonblock", fcntl(c, F_SETFL, O_NONBLOCK));
	out("nonblock: %s", fcntl(c, F_GETFL) & O_NONBLOCK ? "yes" : "no");
	R("F_GETOWN", fcntl(c, F_GETOWN));
	R("bad cmd", fcntl(c, 99999));
	R("bad fd", fcntl(9999, F_GETFL));
}

STREAM_SCEN(ioctl_fionbio)
{
	char b[4];
	int c, s, on = 1, off = 0;

	fam_pair(f, &c, &s);
	R("FIONBIO on", ioctl(s, FIONBIO, &on));
	out("O_NONBLOCK: %s", fcntl(s, F_GETFL) & O_NONBLOCK ? "yes" : "no");
	R("recv", recv(s, b, 4, 0));
	R("FIONBIO off", ioctl(s, FIONBIO, &off));
	out("O_NONBLOCK: %s", fcntl(s, F_GETFL) & O_NONBLOCK ? "yes" : "no");
	R("bad request", ioctl(s, 0x12345678, &on));
	R("FIONREAD bad fd", ioctl(9999, FIONREAD, &on));
}

STREAM_SCEN(close_twice_and_closed_fd)
{
	struct pollfd p;
	char b[4];
	int c, s;

	fam_pair(f, &c, &s);
	R("close", close(c));
	R("close again", close(c));
	R("recv closed", recv(c, b, 4, 0));
	R("send closed", send(c, b, 4, 0));
	R("read closed", read(c, b, 4));
	R("getsockopt closed", getsockopt(c, SOL_SOCKET, SO_TYPE, b, &(socklen_t){ 4 }));
	p = (struct pollfd){ .fd = c, .events = POLLIN };
	R("poll closed", poll(&p, 1, 0));
	out("revents %s", pollname(p.revents));
}

STREAM_SCEN(fork_parent_and_child_write)
{
	char b[16] = { 0 };
	int c, s, st;
	pid_t pid;

	fam_pair(f, &c, &s);
	pid = fork();
	if (pid == 0) {
		send(c, "child.", 6, 0);
		_exit(0);
	}
	waitpid(pid, &st, 0);
	R("parent send", send(c, "parent", 6, 0));
	R("recv", recv(s, b, 12, MSG_WAITALL));
	out("data: %.12s", b);
	close(c);
	R("recv eof after parent close (child gone)", recv(s, b, 12, 0));
}

STREAM_SCEN(fork_child_reads_parent_writes)
{
	int c, s, p[2], st;
	char b[64];
	pid_t pid;

	fam_pair(f, &c, &s);
	pipe(p);
	pid = fork();
	if (pid == 0) {
		long n = read_all(s, b, 10);
		char msg[32];
		int len = snprintf(msg, sizeof(msg), "child read %ld: %.10s", n, b);
		write(p[1], msg, (size_t)len);
		_exit(0);
	}
	R("parent send", send(c, "0123456789", 10, 0));
	waitpid(pid, &st, 0);
	R("pipe read", read(p[0], b, sizeof(b) - 1));
	out("%.25s", b);
	out("child exit %d", WEXITSTATUS(st));
}

STREAM_SCEN(fork_both_hold_then_close)
{
	char b[4];
	int c, s, st;
	pid_t pid;

	fam_pair(f, &c, &s);
	pid = fork();
	if (pid == 0) {
		close(c);
		_exit(0);
	}
	waitpid(pid, &st, 0);
	R("parent still sends after child closed its copy", send(c, "x", 1, 0));
	R("recv", recv(s, b, 1, 0));
	close(c);
	R("eof now", recv(s, b, 1, 0));
}

/* A child that shares our memory but has its own fd table (vfork, clone
 * with CLONE_VM) closes its copy: ours, and the connection, go on. */
static void after_child_closed(int c, int s)
{
	char b[8] = { 0 };

	R("parent send after the child closed its copy", send(c, "parent", 6, 0));
	R("recv", recv(s, b, 6, MSG_WAITALL));
	out("data: %.6s", b);
	R("reply", send(s, "reply", 5, 0));
	R("parent recv", recv(c, b, 5, MSG_WAITALL));
	out("data: %.5s", b);
	close(c);
	R("eof after the parent's close", recv(s, b, 6, 0));
}

STREAM_SCEN(vfork_child_closes_its_copy)
{
	int c, s, st;
	pid_t pid;

	fam_pair(f, &c, &s);
	pid = vfork();
	if (pid == 0) {
		close(c);
		_exit(0);
	}
	waitpid(pid, &st, 0);
	after_child_closed(c, s);
}

static int close_fd_child(void *arg)
{
	close(*(int *)arg);
	return 0;
}

STREAM_SCEN(clone_vm_child_closes_its_copy)
{
	static char stack[64 * 1024] __attribute__((aligned(16)));
	int c, s, st;
	pid_t pid;

	fam_pair(f, &c, &s);
	pid = clone(close_fd_child, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, &c);
	waitpid(pid, &st, 0);
	after_child_closed(c, s);
}

/* A vfork child that closes every fd above stderr (as a spawning library
 * does) before it would exec: the parent's epoll set, in the memory the
 * child shared, still reports its socket with its data. */
STREAM_SCEN(vfork_child_closes_all_epoll_goes_on)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0x1234 }, out_ev[4];
	char b[4];
	int c, s, ep, st, n;
	pid_t pid;

	fam_pair(f, &c, &s);
	ep = epoll_create1(0);
	epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
	for (int round = 0; round < 2; round++) {
		pid = vfork();
		if (pid == 0) {
			if (round == 0)
				close_range(3, ~0u, 0);
			else
				for (int fd = 3; fd < 64; fd++)
					close(fd);
			_exit(0);
		}
		waitpid(pid, &st, 0);
		R("send", send(c, "abc", 3, 0));
		n = epoll_wait(ep, out_ev, 4, 2000);
		out("epoll_wait %d: data %#llx", n, n > 0 ? (unsigned long long)out_ev[0].data.u64 : 0ULL);
		R("recv", recv(s, b, 3, 0));
		n = epoll_wait(ep, out_ev, 4, 0);
		out("then epoll_wait %d", n);
	}
	close(ep);
}

/* exec-child FD MODE: run after exec by exec scenarios */
int exec_child_main(int argc, char **argv)
{
	int fd = argc > 1 ? atoi(argv[1]) : -1;
	const char *mode = argc > 2 ? argv[2] : "write";
	char b[16];

	if (!strcmp(mode, "write"))
		return send(fd, "from-exec", 9, 0) == 9 ? 0 : 1;
	if (!strcmp(mode, "check")) {
		int r = fcntl(fd, F_GETFD);
		printf("fd after exec: %s\n", r < 0 ? ename(errno) : "open");
		return 0;
	}
	if (!strcmp(mode, "epwait")) {
		struct epoll_event ev = { 0 };
		int n = epoll_wait(fd, &ev, 1, 100);
		printf("exec child epoll_wait = %d data 0x%llx\n", n, n > 0 ? (unsigned long long)ev.data.u64 : 0ULL);
		return 0;
	}
	if (!strcmp(mode, "read")) {
		long n = read_all(fd, b, 5);
		printf("exec child read %ld: %.5s\n", n, b);
		return 0;
	}
	return 2;
}

static int run_exec(int fd, const char *mode, int use_execl)
{
	char fds[16];
	int st;
	pid_t pid;

	fflush(stdout);
	snprintf(fds, sizeof(fds), "%d", fd);
	pid = fork();
	if (pid == 0) {
		if (use_execl)
			execl(self_exe(), "conf-scen", "exec-child", fds, mode, (char *)NULL);
		else {
			char *argv[] = { "conf-scen", "exec-child", fds, (char *)mode, NULL };
			char *envp[] = { "PATH=/usr/bin:/bin", NULL }; /* a rebuilt environment */
			execve(self_exe(), argv, envp);
		}
		_exit(127);
	}
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

STREAM_SCEN(exec_inherits_socket)
{
	char b[16];
	int c, s;

	fam_pair(f, &c, &s);
	out("exec child exit: %d", run_exec(c, "write", 1));
	R("recv", recv(s, b, 9, MSG_WAITALL));
	out("data: %.9s", b);
	send(s, "abcde", 5, 0);
	out("exec child (rebuilt env) exit: %d", run_exec(c, "read", 0));
}

STREAM_SCEN(exec_closes_cloexec_socket)
{
	int c, s;

	fam_pair(f, &c, &s);
	fcntl(c, F_SETFD, FD_CLOEXEC);
	out("exec child exit: %d", run_exec(c, "check", 1));
	out("peer sees: %s", pollname((unsigned)wait_fd(s, POLLIN | POLLRDHUP, 1000)));
}

SCEN(not_a_socket)
{
	int p[2], v;
	socklen_t vl = sizeof(v);
	char b[4];

	pipe(p);
	R("recv on pipe", recv(p[0], b, 4, MSG_DONTWAIT));
	R("send on pipe", send(p[1], "x", 1, 0));
	R("getsockopt on pipe", getsockopt(p[0], SOL_SOCKET, SO_TYPE, &v, &vl));
	R("accept on pipe", accept(p[0], NULL, NULL));
	R("shutdown on pipe", shutdown(p[0], SHUT_RD));
	R("listen on pipe", listen(p[0], 1));
	R("write pipe", write(p[1], "abc", 3));
	R("read pipe", read(p[0], b, 4));
}

SCEN(pipe2_flags)
{
	int p[2];

	R("pipe2", pipe2(p, O_NONBLOCK | O_CLOEXEC));
	out("nonblock %s cloexec %s", fcntl(p[0], F_GETFL) & O_NONBLOCK ? "yes" : "no",
	    fcntl(p[1], F_GETFD) & FD_CLOEXEC ? "yes" : "no");
	R("read empty", read(p[0], p, 1));
	R("pipe2 bad flags", pipe2(p, 0x7fffffff));
}

SCEN(socket_creation_errors)
{
	R("bad family", socket(12345, SOCK_STREAM, 0));
	R("bad type", socket(AF_INET, 12345, 0));
	R("bad protocol", socket(AF_INET, SOCK_STREAM, 17));
	R("socketpair inet", socketpair(AF_INET, SOCK_STREAM, 0, (int[2]){ 0, 0 }));
}

SCEN(socketpair_stream_and_dgram)
{
	int sv[2], dv[2];
	char b[16];

	R("socketpair stream", socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	R("send", send(sv[0], "pair", 4, 0));
	R("recv", recv(sv[1], b, 16, 0));
	R("socketpair dgram", socketpair(AF_UNIX, SOCK_DGRAM, 0, dv));
	R("send 3", send(dv[0], "abc", 3, 0));
	R("send 2", send(dv[0], "de", 2, 0));
	R("recv", recv(dv[1], b, 16, 0));
	R("recv", recv(dv[1], b, 16, 0));
	close(sv[0]);
	R("recv eof", recv(sv[1], b, 16, 0));
}

SCEN(udp_listen_and_sendto_connected)
{
	struct fam u = { "udp4", AF_INET, SOCK_DGRAM, 0 };
	struct sockaddr_storage a;
	socklen_t al;
	int s = fam_server(&u, &a, &al), c = fam_socket(&u, 0);

	R("listen on udp", listen(s, 5));
	R("accept on udp", accept(s, NULL, NULL));
	connect(c, (struct sockaddr *)&a, al);
	R("sendto on connected udp", sendto(c, "x", 1, 0, (struct sockaddr *)&a, al));
	R("shutdown udp", shutdown(c, SHUT_WR));
}

/* ---- scenarios that must fail: they show the harness can fail ---------- */
SELFTEST_SCEN(wrong_expectation)
{
	struct fam t = { "tcp4", AF_INET, SOCK_STREAM, 0 };
	char b[4];
	int c, s;

	fam_pair(&t, &c, &s);
	/* deliberately wrong: an empty nonblocking recv is EAGAIN, not data */
	CHECK(recv(s, b, 4, MSG_DONTWAIT) == 4);
}

SELFTEST_SCEN(peek_then_read)
{
	struct fam t = { "tcp4", AF_INET, SOCK_STREAM, 0 };
	char b[8];
	int c, s;

	fam_pair(&t, &c, &s);
	send(c, "12345678", 8, 0);
	wait_fd(s, POLLIN, 1000);
	R("peek", recv(s, b, 8, MSG_PEEK));
	R("read", read(s, b, 8));
}

/* Connections up to a low fd limit: a program that fits natively fits under
 * dsock (the fast path must not hold an fd per connection of its own: with
 * each connection's memfd kept, 20 warm pairs run out of fds half way). */
STREAM_SCEN(many_connections_low_fd_limit)
{
	enum { PAIRS = 20 };
	struct rlimit old, rl;
	int c[PAIRS], s[PAIRS], lowest = dup(0), made = 0;
	char x = 'x';

	close(lowest);
	getrlimit(RLIMIT_NOFILE, &old);
	rl = old;
	/* room for the pairs, a listener at a time, and a little slack */
	rl.rlim_cur = (rlim_t)lowest + 2 * PAIRS + 4;
	R("setrlimit", setrlimit(RLIMIT_NOFILE, &rl));
	for (int i = 0; i < PAIRS; i++) {
		fam_pair(f, &c[i], &s[i]);
		if (send(c[i], &x, 1, 0) != 1 || recv(s[i], &x, 1, 0) != 1 || send(s[i], &x, 1, 0) != 1 ||
		    recv(c[i], &x, 1, 0) != 1)
			break;
		made++;
	}
	out("pairs made and used: %d", made);
	int one = fam_socket(f, 0);
	out("one more socket: %s", one >= 0 ? "yes" : ename(errno));
	if (one >= 0)
		close(one);
	for (int i = 0; i < made; i++) {
		close(c[i]);
		close(s[i]);
	}
	R("restore the limit", setrlimit(RLIMIT_NOFILE, &old));
}

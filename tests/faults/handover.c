/* A connection on the rings handed to a program without dsock, with data
 * in flight both ways (tests/faults/test_handover.py runs it).
 *
 *   handover exec HELPER ARGV0   the server execs HELPER (argv[0] ARGV0)
 *                                 with the connection as fd
 *   handover pass HELPER         the server passes the connection over
 *                                 SCM_RIGHTS to HELPER, started before
 *   handover helper FD           (the helper) the server's part from there
 *   handover recvfd UNIXFD       (the helper) receives the fd first
 *   handover same vfork|spawn HELPER
 *                                 one process holds both ends (A, from
 *                                 connect, and B, from accept); A sends X
 *                                 B never reads, B sends Y A has not read,
 *                                 then B goes to HELPER through vfork+exec
 *                                 or posix_spawn (fd inherited) while this
 *                                 process waits for it; HELPER must read X
 *                                 and send Z2; afterwards this process
 *                                 closes B and A must read Y, Z2, EOF
 *   handover child FD            (HELPER of same) reads X, sends Z2
 *
 * The client (a fork child) and the server ping-pong until the connection
 * is on the rings; then the client sends X bytes the server never reads
 * and the server sends Y bytes the client has not read yet, and the
 * server hands the connection over.  The helper must read exactly X, send
 * Z; the client must read exactly Y then Z, send W; the helper reads W and
 * closes; the client sees EOF.  Each prints "<role> ok" or why not.
 *
 * HANDOVER_PEER says what the client (the peer of the connection handed
 * over) is doing at the moment of the hand-over:
 *   recv        (default) reading the connection: blocked in recv
 *   sleep       in nanosleep for 3 s (HANDOVER_STALL=1 is the same)
 *   busy        computing for 3 s, no system call
 *   stop        blocked in a read of a pipe that ends at the server's
 *               exec; the server prints "t peer PID" and waits until the
 *               test has stopped it with SIGSTOP (and continues it later)
 *   epoll-in    blocked in epoll_wait on the connection (EPOLLIN|EPOLLET:
 *               Y is unread, so a level-triggered wait would not block)
 *   epoll-other blocked in epoll_wait for 3 s on an unrelated pipe
 * For all but recv the client says when it is about to, and the server
 * hands over once the client is in that state ("t peer-state C": the
 * state /proc showed then).  Lines "t LABEL SECONDS" are CLOCK_MONOTONIC
 * time stamps for the test: "t handover" just before the fd leaves,
 * "t got-x" when the new holder's read of X ended (all of it or not). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Z2: what the child of "same" sends back while its parent waits for it
 * (no one reads it before the child exits: it must fit in the kernel) */
enum { X = 100000, Y = 60000, Z = 200000, W = 30000, Z2 = 10000, ROUNDS = 200 };
enum { SA, SB, SC, SD }; /* streams: client->server X, server->client Y, Z, client->helper W */

static unsigned char pat(long i, int s)
{
	return (unsigned char)(i * 7 + s * 13 + (i >> 8));
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void stamp(const char *label)
{
	printf("t %s %.6f\n", label, now());
	fflush(stdout);
}

/* exit, not _exit: a process under dsock writes its DSOCK_FASTPATH_REPORT
 * line at exit, and the test wants it from a failed client too */
static void die(const char *who, const char *what)
{
	printf("%s FAIL: %s (%s)\n", who, what, strerror(errno));
	fflush(stdout);
	exit(1);
}

static void send_stream(int fd, int s, long n, const char *who)
{
	unsigned char buf[8192];
	for (long off = 0; off < n;) {
		long k = n - off < (long)sizeof(buf) ? n - off : (long)sizeof(buf);
		for (long i = 0; i < k; i++)
			buf[i] = pat(off + i, s);
		ssize_t w = send(fd, buf, (size_t)k, MSG_NOSIGNAL);
		if (w <= 0)
			die(who, "send");
		off += w;
	}
}

/* label: a time stamp "t LABEL" when the stream ends, read or not */
static void recv_stream_at(int fd, int s, long n, const char *who, const char *label)
{
	unsigned char buf[7000]; /* not a divisor of anything above */
	for (long off = 0; off < n;) {
		long k = n - off < (long)sizeof(buf) ? n - off : (long)sizeof(buf);
		ssize_t r = recv(fd, buf, (size_t)k, 0);
		if (r <= 0) {
			int e = errno;
			if (label)
				stamp(label);
			printf("%s FAIL: stream %d ends at %ld of %ld (%s)\n", who, s, off, n,
			       r ? strerror(e) : "EOF");
			fflush(stdout);
			exit(1);
		}
		for (long i = 0; i < r; i++)
			if (buf[i] != pat(off + i, s)) {
				if (label)
					stamp(label);
				printf("%s FAIL: stream %d byte %ld is %u, not %u\n", who, s, off + i, buf[i],
				       pat(off + i, s));
				fflush(stdout);
				exit(1);
			}
		off += r;
	}
	if (label)
		stamp(label);
}

static void recv_stream(int fd, int s, long n, const char *who)
{
	recv_stream_at(fd, s, n, who, NULL);
}

static void helper(int fd)
{
	recv_stream_at(fd, SA, X, "helper", "got-x");
	send_stream(fd, SC, Z, "helper");
	recv_stream(fd, SD, W, "helper");
	printf("helper ok\n");
	fflush(stdout);
	close(fd);
}

static int recv_fd(int u)
{
	char c, ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &c, 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	struct cmsghdr *h;
	int fd;

	if (recvmsg(u, &m, 0) != 1 || !(h = CMSG_FIRSTHDR(&m)) || h->cmsg_type != SCM_RIGHTS)
		die("helper", "recvmsg SCM_RIGHTS");
	memcpy(&fd, CMSG_DATA(h), sizeof(fd));
	return fd;
}

static void send_fd(int u, int fd)
{
	char c = 'F', ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &c, 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);

	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(h), &fd, sizeof(fd));
	if (sendmsg(u, &m, 0) != 1)
		die("server", "sendmsg SCM_RIGHTS");
}

static const char *peer_mode(void)
{
	const char *p = getenv("HANDOVER_PEER");

	if (p && *p)
		return p;
	return getenv("HANDOVER_STALL") ? "sleep" : "recv";
}

/* 3 s without a system call (the vDSO's clock is no system call) */
static void busy(double secs)
{
	volatile unsigned long spin = 0;
	double end = now() + secs;

	while (now() < end)
		for (int i = 0; i < 10000; i++)
			spin++;
}

static void client(struct sockaddr_in *a, int sent, int go)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	const char *peer = peer_mode();
	char buf[128], tail;
	int ep = -1, q[2];
	struct epoll_event ev = { .events = EPOLLIN };

	if (fd < 0 || connect(fd, (struct sockaddr *)a, sizeof(*a)) < 0)
		die("client", "connect");
	for (int i = 0; i < ROUNDS; i++) {
		size_t n = 1 + (size_t)i % 100;
		/* the pairing is asynchronous: let it land early (each end
		 * offers at its fourth call, in round 1), so that the rest goes
		 * through the rings (a client whose sending never left the
		 * kernel needs to answer nothing, so a hand-over while it
		 * sleeps, case 5, would rightly succeed and test nothing) */
		if (i == 2)
			usleep(50000);
		memset(buf, i, n);
		if (send(fd, buf, n, 0) != (ssize_t)n)
			die("client", "ping");
		for (size_t got = 0; got < n;) {
			ssize_t r = recv(fd, buf + got, n - got, 0);
			if (r <= 0)
				die("client", "pong");
			got += (size_t)r;
		}
	}
	send_stream(fd, SA, X, "client");
	if (write(sent, "s", 1) != 1 || read(go, buf, 1) != 1)
		die("client", "sync");
	if (strcmp(peer, "recv")) {
		/* away from the socket when the hand-over comes: no call of
		 * ours can answer it (but epoll-in: our epoll_wait) */
		if (!strcmp(peer, "epoll-in")) {
			ep = epoll_create1(EPOLL_CLOEXEC);
			ev.events = EPOLLIN | EPOLLET;
			ev.data.fd = fd;
			if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
				die("client", "epoll set-up");
			/* the edge of Y, unread: the next wait blocks until more */
			if (epoll_wait(ep, &ev, 1, 5000) != 1 || !(ev.events & EPOLLIN))
				die("client", "first epoll_wait did not see Y");
		} else if (!strcmp(peer, "epoll-other")) {
			ep = epoll_create1(EPOLL_CLOEXEC);
			ev.data.fd = -1;
			if (ep < 0 || pipe2(q, O_CLOEXEC) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, q[0], &ev) < 0)
				die("client", "epoll set-up");
		}
		if (write(sent, "b", 1) != 1)
			die("client", "sync");
		if (!strcmp(peer, "sleep")) {
			struct timespec t = { 3, 0 };
			while (nanosleep(&t, &t) < 0 && errno == EINTR)
				;
		} else if (!strcmp(peer, "busy")) {
			busy(3.0);
		} else if (!strcmp(peer, "stop")) {
			/* the server's exec closes the pipe; the test stops us
			 * before that and continues us 10 s later */
			while (read(go, buf, 1) > 0)
				;
		} else if (!strcmp(peer, "epoll-in")) {
			int n = epoll_wait(ep, &ev, 1, 30000);
			stamp("peer-epoll-returned");
			if (n != 1 || !(ev.events & EPOLLIN))
				die("client", "epoll_wait on the connection: no EPOLLIN within 30 s");
		} else if (!strcmp(peer, "epoll-other")) {
			int n = epoll_wait(ep, &ev, 1, 3000);
			if (n != 0)
				die("client", "epoll_wait on an unrelated pipe returned an event");
		} else {
			die("client", "unknown HANDOVER_PEER");
		}
		stamp("peer-resumed");
	}
	recv_stream(fd, SB, Y, "client");
	recv_stream(fd, SC, Z, "client");
	send_stream(fd, SD, W, "client");
	if (recv(fd, &tail, 1, 0) != 0)
		die("client", "no EOF after the helper's last byte");
	printf("client ok\n");
	fflush(stdout);
	close(fd);
	exit(0);
}

/* The state letter of process pid in /proc (R, S, T, ...), or '?'. */
static char proc_state(pid_t pid)
{
	char path[64], text[512], *p;
	ssize_t n;
	int f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = open(path, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return '?';
	n = read(f, text, sizeof(text) - 1);
	close(f);
	if (n <= 0)
		return '?';
	text[n] = '\0';
	p = strrchr(text, ')');
	return p && p[1] == ' ' ? p[2] : '?';
}

/* The server, once the client said it goes away from its socket: waits
 * until it is there (asleep in the kernel, running, or stopped by the
 * test), and says what it saw. */
static void await_peer(pid_t kid, int sent_rd)
{
	const char *peer = peer_mode();
	char c, st = '?', label[32];

	if (!strcmp(peer, "recv"))
		return;
	if (read(sent_rd, &c, 1) != 1)
		die("server", "sync (peer away)");
	if (!strcmp(peer, "stop")) {
		int w;
		printf("t peer %d\n", (int)kid);
		fflush(stdout);
		if (waitpid(kid, &w, WUNTRACED) != kid || !WIFSTOPPED(w))
			die("server", "the peer did not stop");
		st = proc_state(kid);
	} else if (!strcmp(peer, "busy")) {
		struct timespec t = { 0, 20 * 1000 * 1000 };
		nanosleep(&t, NULL);
		st = proc_state(kid);
	} else {
		/* in nanosleep or epoll_wait: asleep twice, 10 ms apart */
		for (int i = 0, seen = 0; i < 200 && seen < 2; i++) {
			struct timespec t = { 0, 10 * 1000 * 1000 };
			nanosleep(&t, NULL);
			st = proc_state(kid);
			seen = st == 'S' ? seen + 1 : 0;
		}
	}
	snprintf(label, sizeof(label), "peer-state %c", st);
	stamp(label);
}

static void child(int fd)
{
	recv_stream_at(fd, SA, X, "child", "got-x");
	send_stream(fd, SC, Z2, "child");
	printf("child ok\n");
	fflush(stdout);
	close(fd);
}

/* Both ends in this process; B goes to helper while we wait for it. */
static int same(const char *how, const char *helper_path)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	char buf[128], fdarg[16];
	int l, ca, cb, st;
	pid_t pid;

	l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ca = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); /* A stays here */
	if (l < 0 || ca < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0 ||
	    connect(ca, (struct sockaddr *)&a, sizeof(a)) < 0)
		die("parent", "setup");
	cb = accept(l, NULL, NULL); /* B, inherited by the helper */
	if (cb < 0)
		die("parent", "accept");
	close(l);
	for (int i = 0; i < ROUNDS; i++) {
		size_t n = 1 + (size_t)i % 100;
		if (i == 2)
			usleep(50000); /* the pairing lands (see client()) */
		memset(buf, i, n);
		if (send(ca, buf, n, 0) != (ssize_t)n)
			die("parent", "ping");
		for (size_t got = 0; got < n;) {
			ssize_t r = recv(cb, buf + got, n - got, 0);
			if (r <= 0)
				die("parent", "ping recv");
			got += (size_t)r;
		}
		if (send(cb, buf, n, 0) != (ssize_t)n)
			die("parent", "pong");
		for (size_t got = 0; got < n;) {
			ssize_t r = recv(ca, buf + got, n - got, 0);
			if (r <= 0)
				die("parent", "pong recv");
			got += (size_t)r;
		}
	}
	send_stream(ca, SA, X, "parent"); /* X: B never reads it */
	send_stream(cb, SB, Y, "parent"); /* Y: A has not read it yet */
	snprintf(fdarg, sizeof(fdarg), "%d", cb);
	stamp("handover");
	if (!strcmp(how, "vfork")) {
		pid = vfork();
		if (pid == 0) {
			execl(helper_path, helper_path, "child", fdarg, (char *)NULL);
			_exit(127);
		}
		if (pid < 0)
			die("parent", "vfork");
	} else {
		char *args[] = { (char *)helper_path, (char *)"child", fdarg, NULL };
		int e = posix_spawn(&pid, helper_path, NULL, NULL, args, environ);
		if (e) {
			errno = e;
			die("parent", "posix_spawn");
		}
	}
	stamp("spawned");
	if (waitpid(pid, &st, 0) != pid)
		die("parent", "waitpid");
	stamp("child-exited");
	close(cb);
	recv_stream(ca, SB, Y, "parent");
	recv_stream(ca, SC, Z2, "parent");
	if (recv(ca, buf, 1, 0) != 0)
		die("parent", "no EOF after the child's last byte");
	printf("parent %s\n", WIFEXITED(st) && !WEXITSTATUS(st) ? "ok" : "FAIL: the child failed");
	close(ca);
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	int l, fd, p1[2], p2[2], u[2] = { -1, -1 };
	char buf[128], fdarg[16];
	pid_t kid, help = -1;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "helper")) {
		helper(atoi(argv[2]));
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "recvfd")) {
		helper(recv_fd(atoi(argv[2])));
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "child")) {
		child(atoi(argv[2]));
		return 0;
	}
	if (argc == 4 && !strcmp(argv[1], "same") && (!strcmp(argv[2], "vfork") || !strcmp(argv[2], "spawn")))
		return same(argv[2], argv[3]);
	if (argc < 3 || (strcmp(argv[1], "exec") && strcmp(argv[1], "pass"))) {
		fprintf(stderr, "usage: handover exec HELPER ARGV0 | pass HELPER | same vfork|spawn HELPER\n");
		return 2;
	}
	if (!strcmp(argv[1], "pass")) {
		/* the helper first: a process that never had the connection */
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, u) < 0)
			die("server", "socketpair");
		if ((help = fork()) == 0) {
			close(u[0]);
			snprintf(fdarg, sizeof(fdarg), "%d", u[1]);
			execl(argv[2], argv[2], "recvfd", fdarg, (char *)NULL);
			die("server", "exec helper");
		}
		close(u[1]);
	}
	l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0 || pipe2(p1, O_CLOEXEC) < 0 ||
	    pipe2(p2, O_CLOEXEC) < 0)
		die("server", "setup");
	if ((kid = fork()) == 0) {
		close(l);
		close(p1[0]);
		close(p2[1]); /* the read of p2 ends when the server's copy goes */
		client(&a, p1[1], p2[0]);
	}
	close(p1[1]);
	close(p2[0]);
	fd = accept(l, NULL, NULL);
	if (fd < 0)
		die("server", "accept");
	close(l);
	for (int i = 0; i < ROUNDS; i++) {
		size_t n = 1 + (size_t)i % 100;
		for (size_t got = 0; got < n;) {
			ssize_t r = recv(fd, buf + got, n - got, 0);
			if (r <= 0)
				die("server", "ping");
			got += (size_t)r;
		}
		if (send(fd, buf, n, 0) != (ssize_t)n)
			die("server", "pong");
	}
	if (read(p1[0], buf, 1) != 1) /* the client's X is sent, unread */
		die("server", "sync");
	send_stream(fd, SB, Y, "server"); /* Y: not read yet */
	if (write(p2[1], "g", 1) != 1) /* the client starts reading now */
		die("server", "sync");
	await_peer(kid, p1[0]);
	stamp("handover");
	if (!strcmp(argv[1], "exec")) {
		snprintf(fdarg, sizeof(fdarg), "%d", fd);
		execl(argv[2], argc > 3 ? argv[3] : argv[2], "helper", fdarg, (char *)NULL);
		die("server", "exec");
	}
	send_fd(u[0], fd);
	close(fd);
	int st1, st2;
	waitpid(help, &st1, 0);
	waitpid(kid, &st2, 0);
	printf("server %s\n", WIFEXITED(st1) && !WEXITSTATUS(st1) && WIFEXITED(st2) && !WEXITSTATUS(st2) ?
	       "ok" : "FAIL: a child failed");
	return 0;
}

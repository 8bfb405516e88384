/* A connection on the rings handed to a program without dsock, with data
 * in flight both ways (tests/faults/test_handover.py runs it).
 *
 *   handover exec HELPER ARGV0   the server execs HELPER (argv[0] ARGV0)
 *                                 with the connection as fd
 *   handover pass HELPER         the server passes the connection over
 *                                 SCM_RIGHTS to HELPER, started before
 *   handover helper FD           (the helper) the server's part from there
 *   handover recvfd UNIXFD       (the helper) receives the fd first
 *
 * The client (a fork child) and the server ping-pong until the connection
 * is on the rings; then the client sends X bytes the server never reads
 * and the server sends Y bytes the client has not read yet, and the
 * server hands the connection over.  The helper must read exactly X, send
 * Z; the client must read exactly Y then Z, send W; the helper reads W and
 * closes; the client sees EOF.  Each prints "<role> ok" or why not.
 * HANDOVER_STALL=1: the client stays away from its socket for 3 s after
 * the hand-over starts. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum { X = 100000, Y = 60000, Z = 200000, W = 30000, ROUNDS = 200 };
enum { SA, SB, SC, SD }; /* streams: client->server X, server->client Y, Z, client->helper W */

static unsigned char pat(long i, int s)
{
	return (unsigned char)(i * 7 + s * 13 + (i >> 8));
}

static void die(const char *who, const char *what)
{
	printf("%s FAIL: %s (%s)\n", who, what, strerror(errno));
	fflush(stdout);
	_exit(1);
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

static void recv_stream(int fd, int s, long n, const char *who)
{
	unsigned char buf[7000]; /* not a divisor of anything above */
	for (long off = 0; off < n;) {
		long k = n - off < (long)sizeof(buf) ? n - off : (long)sizeof(buf);
		ssize_t r = recv(fd, buf, (size_t)k, 0);
		if (r <= 0) {
			printf("%s FAIL: stream %d ends at %ld of %ld (%s)\n", who, s, off, n,
			       r ? strerror(errno) : "EOF");
			fflush(stdout);
			_exit(1);
		}
		for (long i = 0; i < r; i++)
			if (buf[i] != pat(off + i, s)) {
				printf("%s FAIL: stream %d byte %ld is %u, not %u\n", who, s, off + i, buf[i],
				       pat(off + i, s));
				fflush(stdout);
				_exit(1);
			}
		off += r;
	}
}

static void helper(int fd)
{
	recv_stream(fd, SA, X, "helper");
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

static void client(struct sockaddr_in *a, int sent, int go)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	char buf[128], tail;

	if (fd < 0 || connect(fd, (struct sockaddr *)a, sizeof(*a)) < 0)
		die("client", "connect");
	for (int i = 0; i < ROUNDS; i++) {
		size_t n = 1 + (size_t)i % 100;
		/* the pairing is asynchronous: let it land early (each end
		 * offers at its fourth call, in round 1), so that the rest goes
		 * through the rings (with HANDOVER_STALL a client whose sending
		 * never left the kernel needs to answer nothing, and the
		 * hand-over rightly succeeded: one CI run of case 5) */
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
	if (getenv("HANDOVER_STALL"))
		sleep(3); /* busy elsewhere: no call of ours can answer the hand-over */
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
	if (argc < 3 || (strcmp(argv[1], "exec") && strcmp(argv[1], "pass"))) {
		fprintf(stderr, "usage: handover exec HELPER ARGV0 | pass HELPER\n");
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
	    getsockname(l, (struct sockaddr *)&a, &al) < 0 || pipe(p1) < 0 || pipe(p2) < 0)
		die("server", "setup");
	if ((kid = fork()) == 0) {
		close(l);
		client(&a, p1[1], p2[0]);
	}
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

/* An epoll echo server goes idle after its client's last message and close
 * land together: its idle epoll_wait must cost no CPU.
 *
 *   idle_bell ROUNDS [poll]
 *
 * With "poll" the server waits in poll(2) on the listener and the
 * connection instead (a poll sleeps on the bell too).
 *
 * Each round a fork child (made before the server's epoll set) connects,
 * makes 20 round trips (pausing 20 ms in
 * the middle, so the server sleeps in epoll_wait), pauses 20 ms, sends a
 * last message and closes at once, so one wake of the server finds both
 * the message and the FIN.  The server (one epoll set: the listener and
 * the connection) echoes and closes at EOF, then measures its own CPU
 * during an idle epoll_wait of 300 ms.  Prints the worst round's CPU in
 * ms.  Exit 0, or 1 on a failed call. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void nap_ms(int ms)
{
	struct timespec t = { 0, ms * 1000000L };
	nanosleep(&t, NULL);
}

static long cpu_ms(void)
{
	struct rusage u;
	getrusage(RUSAGE_SELF, &u);
	return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000L + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1000;
}

static int client(const struct sockaddr_in *sa)
{
	int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	char b[4];

	if (s < 0 || connect(s, (const struct sockaddr *)sa, sizeof(*sa)) < 0)
		return 1;
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	for (int i = 0; i < 20; i++) {
		if (write(s, "ping", 4) != 4 || recv(s, b, 4, MSG_WAITALL) != 4)
			return 1;
		if (i == 10)
			nap_ms(20);
	}
	nap_ms(20);
	if (write(s, "last", 4) != 4)
		return 1;
	close(s);
	return 0;
}

/* Echoes one connection until its EOF (or reset), waiting in poll. */
static int serve_poll(int l)
{
	struct pollfd p[2] = { { .fd = l, .events = POLLIN }, { .fd = -1, .events = POLLIN } };
	char b[4096];

	for (;;) {
		if (poll(p, 2, 5000) <= 0)
			return -1;
		if (p[0].revents & POLLIN) {
			int one = 1;
			if ((p[1].fd = accept(l, NULL, NULL)) < 0)
				return -1;
			setsockopt(p[1].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		}
		if (p[1].fd < 0 || !p[1].revents)
			continue;
		ssize_t r = read(p[1].fd, b, sizeof(b));
		if (r > 0 && write(p[1].fd, b, (size_t)r) != r && errno != EPIPE && errno != ECONNRESET)
			return -1;
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
			close(p[1].fd);
			return 0;
		}
	}
}

/* Echoes one connection until its EOF (or reset). */
static int serve(int ep, int l)
{
	struct epoll_event ev[16];
	char b[4096];

	for (;;) {
		int n = epoll_wait(ep, ev, 16, 5000);
		if (n <= 0)
			return -1;
		for (int i = 0; i < n; i++) {
			int fd = ev[i].data.fd, one = 1;
			if (fd == l) {
				int c = accept(l, NULL, NULL);
				struct epoll_event ce = { .events = EPOLLIN, .data.fd = c };
				if (c < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce) < 0)
					return -1;
				setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
				continue;
			}
			ssize_t r = read(fd, b, sizeof(b));
			if (r > 0 && write(fd, b, (size_t)r) != r && errno != EPIPE && errno != ECONNRESET)
				return -1;
			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
				epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
				close(fd);
				return 0;
			}
		}
	}
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 5, one = 1, use_poll = argc > 2 && !strcmp(argv[2], "poll");
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	int l = socket(AF_INET, SOCK_STREAM, 0);
	long worst = 0;

	signal(SIGPIPE, SIG_IGN);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 16) < 0 ||
	    getsockname(l, (struct sockaddr *)&sa, &sl) < 0)
		return 1;
	/* the client first: the set is made after the fork, so that nothing
	 * else can reach it (a set shared by fork holds no bell) */
	int go[2];
	char c = 'g';
	if (pipe(go) < 0)
		return 1;
	pid_t pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		close(l);
		close(go[1]);
		for (int r = 0; r < rounds; r++)
			if (read(go[0], &c, 1) != 1 || client(&sa))
				_exit(1);
		_exit(0);
	}
	close(go[0]);
	int ep = epoll_create1(EPOLL_CLOEXEC), st;
	struct epoll_event le = { .events = EPOLLIN, .data.fd = l };
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, l, &le) < 0)
		return 1;
	for (int r = 0; r < rounds; r++) {
		if (write(go[1], &c, 1) != 1 || (use_poll ? serve_poll(l) : serve(ep, l)) < 0)
			return 1;
		struct epoll_event e;
		struct pollfd pl = { .fd = l, .events = POLLIN };
		if (use_poll)
			poll(&pl, 1, 50);
		else
			epoll_wait(ep, &e, 1, 50);
		long t0 = cpu_ms();
		if (use_poll ? poll(&pl, 1, 300) : epoll_wait(ep, &e, 1, 300))
			return 1;
		long t = cpu_ms() - t0;
		if (t > worst)
			worst = t;
	}
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		return 1;
	printf("%ld\n", worst);
	return 0;
}

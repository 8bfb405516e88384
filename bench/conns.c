/* Connection benchmarks for the suite (bench/run.py), plain sockets only, so
 * the same binary runs natively and under `dsock run`.
 *
 *   conns rate SECS          connect/accept/close loop on loopback (client and
 *                            server in one thread): prints "conn_per_sec"
 *   conns req SECS           one 100 B request and its 100 B answer per
 *                            connection: a client that connects, asks, reads
 *                            and closes, one connection at a time, and an
 *                            epoll server (a fork child) that echoes and
 *                            closes at EOF: prints "requests_per_sec"
 *   conns scale N SECS [PAIRS]  N connections between two processes (a parent
 *                            that accepts and echoes with epoll, a child that
 *                            connects); the child makes WARM round trips on
 *                            each (the set-up: connecting, and under dsock
 *                            the move of each connection, which happens at
 *                            its first data calls), then sends 14 B round
 *                            trips round-robin over all N for SECS seconds.
 *                            Prints "round_trips_per_sec rss_kib_both
 *                            shm_kib_both setup_s".  With PAIRS, the N
 *                            connections are spread over that many such
 *                            pairs of processes (for an fd limit below N),
 *                            their timed runs started together: the sums,
 *                            and the longest set-up
 *   conns burst N SECS       N connections between two processes, both
 *                            waiting with epoll: the child sends 14 B on
 *                            each of the N, then waits for the N echoes,
 *                            for SECS seconds.  Prints "bursts_per_sec
 *                            messages_per_sec" (with DSOCK_SPIN_US=0 both
 *                            sides sleep at each burst: how a sleeper is
 *                            woken, once per burst or once per message)
 *   conns one N SECS         N connections within one process, every
 *                            accepted end in one epoll set; then, for SECS
 *                            seconds, a byte sent on a random connection,
 *                            epoll_wait (one ready member among N) and the
 *                            byte read: prints "ns_per_event"
 *
 * CONNS_PIN=1 pins scale's and burst's two processes to CPUs 0 and 1.
 * CONNS_NETNS=PATH and CONNS_ADDR=IPV4 put rate's and req's listener in
 * that network namespace, bound to that address.
 *
 * Past 25,000 connections the connects go to 127.0.0.2, .3, ... (the
 * listeners take any address): one destination has some 28,000 ephemeral
 * ports.
 */
#define _GNU_SOURCE /* sched_setaffinity, setns */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* The listener of rate and req: on loopback, or with CONNS_NETNS set (a
 * namespace's path) made in that network namespace and bound to
 * CONNS_ADDR, so that every connection crosses to it (bench/places.py). */
static int rate_listener(struct sockaddr_in *sa, int backlog)
{
	const char *ns = getenv("CONNS_NETNS"), *addr = getenv("CONNS_ADDR");
	socklen_t len = sizeof(*sa);
	int self, there, fd, one = 1;

	if (!ns || !addr)
		return loopback_listener(sa, backlog);
	self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	there = open(ns, O_RDONLY | O_CLOEXEC);
	if (self < 0 || there < 0 || setns(there, CLONE_NEWNET) < 0)
		die("CONNS_NETNS");
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (setns(self, CLONE_NEWNET) < 0 || fd < 0)
		die("listener socket");
	close(self);
	close(there);
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	if (inet_pton(AF_INET, addr, &sa->sin_addr) != 1)
		die("CONNS_ADDR");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)sa, sizeof(*sa)) < 0 || listen(fd, backlog) < 0 ||
	    getsockname(fd, (struct sockaddr *)sa, &len) < 0)
		die("listen");
	return fd;
}

static int rate(double secs)
{
	struct sockaddr_in sa;
	int l = rate_listener(&sa, 128);
	long n = 0;
	double t0 = now_s(), t;
	struct linger lg = { 1, 0 }; /* RST on close: no TIME_WAIT pile-up */

	do {
		int c = socket(AF_INET, SOCK_STREAM, 0);
		if (c < 0 || connect(c, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			die("connect");
		int a = accept(l, NULL, NULL);
		if (a < 0)
			die("accept");
		setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		close(c);
		close(a);
		n++;
	} while ((t = now_s()) - t0 < secs);
	printf("%.0f\n", n / (t - t0));
	return 0;
}

/* The server of req: accepts and echoes until killed. */
static void req_server(int l)
{
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = l }, evs[64];
	char b[512];

	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev) < 0)
		die("epoll");
	for (;;) {
		int k = epoll_wait(ep, evs, 64, -1);
		for (int i = 0; i < k; i++) {
			int fd = evs[i].data.fd;
			if (fd == l) {
				int a = accept(l, NULL, NULL);
				struct epoll_event e = { .events = EPOLLIN, .data.fd = a };
				if (a < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, a, &e) < 0)
					die("accept");
				continue;
			}
			ssize_t m = recv(fd, b, sizeof(b), 0);
			if (m > 0 && send(fd, b, (size_t)m, 0) != m)
				die("echo");
			if (m <= 0) {
				epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
				close(fd);
			}
		}
	}
}

static int req(double secs)
{
	struct sockaddr_in sa;
	int l = rate_listener(&sa, 1024);
	struct linger lg = { 1, 0 }; /* RST on close: no TIME_WAIT pile-up */
	char b[100];
	long n = 0;
	double t0, t;
	pid_t child = fork();

	if (child < 0)
		die("fork");
	if (child == 0)
		req_server(l);
	close(l);
	memset(b, 'q', sizeof(b));
	t0 = now_s();
	do {
		int c = socket(AF_INET, SOCK_STREAM, 0);
		if (c < 0 || connect(c, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			die("connect");
		if (send(c, b, sizeof(b), 0) != (ssize_t)sizeof(b) ||
		    recv(c, b, sizeof(b), MSG_WAITALL) != (ssize_t)sizeof(b))
			die("request");
		setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		close(c);
		n++;
	} while ((t = now_s()) - t0 < secs);
	printf("%.0f\n", n / (t - t0));
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	return 0;
}

/* Resident and shared-memory KiB of a process (from /proc/PID/status). */
static void mem_of(pid_t pid, long *rss, long *shm)
{
	char path[64], line[256];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	*rss = *shm = 0;
	if (!(f = fopen(path, "r"))) { /* out of fds: unknown */
		*rss = *shm = -1000000000L;
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		sscanf(line, "VmRSS: %ld", rss);
		sscanf(line, "RssShmem: %ld", shm);
	}
	fclose(f);
}

#define WARM 4 /* round trips per connection before the timed run */
#define PER_DEST 25000 /* connections per destination address */

/* A listener on any address and a free port (*sa: 127.0.0.1 and it). */
static int any_listener(struct sockaddr_in *sa, int backlog)
{
	struct sockaddr_in any = { .sin_family = AF_INET };
	socklen_t l = sizeof(any);
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, (struct sockaddr *)&any, sizeof(any)) < 0 || listen(fd, backlog) < 0 ||
	    getsockname(fd, (struct sockaddr *)&any, &l) < 0)
		die("listen");
	*sa = any;
	sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return fd;
}

/* Connection i's client end, connected (TCP_NODELAY). */
static int connect_nr(const struct sockaddr_in *sa, int i)
{
	struct sockaddr_in to = *sa;
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK + (uint32_t)(i / PER_DEST));
	if (fd < 0 || connect(fd, (struct sockaddr *)&to, sizeof(to)) < 0)
		die("connect");
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static void raise_fd_limit(long n)
{
	struct rlimit rl = { (rlim_t)n, (rlim_t)n };

	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) /* best effort: as root it is raised */
		perror("setrlimit");
}

static int one_ready(int n, double secs)
{
	struct sockaddr_in sa;
	int l, ep, *cfd, *sfd;
	long events = 0;
	unsigned r = 12345;
	double t0, t;
	char b[4];

	raise_fd_limit(2L * n + 256);
	l = any_listener(&sa, 4096);
	ep = epoll_create1(0);
	cfd = calloc((size_t)n, sizeof(int));
	sfd = calloc((size_t)n, sizeof(int));
	if (!cfd || !sfd || ep < 0)
		die("one");
	for (int i = 0; i < n; i++) {
		cfd[i] = connect_nr(&sa, i);
		if ((sfd[i] = accept(l, NULL, NULL)) < 0)
			die("accept");
		struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)i };
		if (epoll_ctl(ep, EPOLL_CTL_ADD, sfd[i], &ev) < 0)
			die("epoll_ctl");
	}
	/* each connection's first bytes both ways (under dsock they move to
	 * the rings at their first data calls) */
	for (int w = 0; w < WARM; w++)
		for (int i = 0; i < n; i++)
			if (send(cfd[i], "x", 1, 0) != 1 || recv(sfd[i], b, 1, 0) != 1 || send(sfd[i], "y", 1, 0) != 1 ||
			    recv(cfd[i], b, 1, 0) != 1)
				die("warm-up");
	t0 = now_s();
	do {
		for (int k = 0; k < 64; k++, events++) {
			struct epoll_event ev;
			r = r * 1103515245u + 12345u;
			int i = (int)((r >> 8) % (unsigned)n);
			if (send(cfd[i], "x", 1, 0) != 1)
				die("send");
			int got = epoll_wait(ep, &ev, 1, 1000);
			if (got != 1 || recv(sfd[ev.data.u32], b, 1, 0) != 1) {
				fprintf(stderr, "epoll_wait: %d events\n", got);
				_exit(1);
			}
		}
	} while ((t = now_s()) - t0 < secs);
	printf("%.0f\n", (t - t0) * 1e9 / (double)events);
	return 0;
}

static int ready_w = -1, go_r = -1; /* several pairs: their timed runs start together */

/* The echo side of scale and burst: accepts n connections on l, echoes
 * with epoll until the child writes its figures to sync_r, then prints
 * them (with both processes' memory, when mem) and ends the child. */
static int echo_serve(int l, int n, int sync_r, pid_t child, int mem)
{
	struct epoll_event evs[256];
	struct epoll_event pev = { .events = EPOLLIN, .data.fd = sync_r };
	int ep = epoll_create1(0);
	char b[64];

	for (int i = 0; i < n; i++) {
		int a = accept(l, NULL, NULL), one = 1;
		struct epoll_event ev = { .events = EPOLLIN };
		if (a < 0)
			die("accept");
		setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		ev.data.fd = a;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, a, &ev) < 0)
			die("epoll_ctl");
	}
	epoll_ctl(ep, EPOLL_CTL_ADD, sync_r, &pev);
	for (;;) {
		int k = epoll_wait(ep, evs, 256, -1);
		for (int i = 0; i < k; i++) {
			int fd = evs[i].data.fd;
			if (fd == sync_r) {
				char out[128] = "";
				long rss, shm, crss, cshm;
				double r, setup;
				ssize_t m = read(sync_r, out, sizeof(out) - 1);
				out[m > 0 ? m : 0] = 0;
				kill(child, SIGKILL);
				waitpid(child, NULL, 0);
				if (!mem) {
					fputs(out, stdout);
					return m > 0 ? 0 : 1;
				}
				if (sscanf(out, "%lf %ld %ld %lf", &r, &crss, &cshm, &setup) != 4) {
					fprintf(stderr, "child failed\n");
					return 1;
				}
				mem_of(getpid(), &rss, &shm);
				printf("%.0f %ld %ld %.3f\n", r, rss + crss, shm + cshm, setup);
				return 0;
			}
			ssize_t m = recv(fd, b, sizeof(b), 0);
			if (m > 0 && send(fd, b, (size_t)m, 0) != m)
				die("echo");
			if (m == 0)
				epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
		}
	}
}

/* CONNS_PIN=1: the echo side on CPU 0, the other on CPU 1, so that two
 * builds compare without the scheduler's placement between them. */
static void pin_by_env(int other)
{
	const char *e = getenv("CONNS_PIN");
	cpu_set_t set;

	if (!e || strcmp(e, "1"))
		return;
	CPU_ZERO(&set);
	CPU_SET(other, &set);
	if (sched_setaffinity(0, sizeof(set), &set) < 0)
		perror("sched_setaffinity");
}

/* The set-up of scale and burst: a listener for n connections (the same
 * fd limit natively and under dsock, which holds no fd per connection in
 * the application), the pipe the child reports on, and the fork.  The
 * child's *l is closed. */
static pid_t echo_pair(int n, struct sockaddr_in *sa, int *l, int sync[2])
{
	pid_t child;

	raise_fd_limit((long)n + 256);
	*l = any_listener(sa, 4096);
	if (pipe(sync) < 0)
		die("pipe");
	if ((child = fork()) < 0)
		die("fork");
	if (child == 0)
		close(*l);
	pin_by_env(child == 0);
	return child;
}

/* The child's n connections to sa, each with WARM round trips (a
 * connection moves to the rings at its first data calls). */
static int *connect_warm(const struct sockaddr_in *sa, int n)
{
	int *fds = calloc((size_t)n, sizeof(int));
	char b[14];

	if (!fds)
		die("calloc");
	for (int i = 0; i < n; i++)
		fds[i] = connect_nr(sa, i);
	for (int w = 0; w < WARM; w++)
		for (int i = 0; i < n; i++)
			if (send(fds[i], "ping-ping-ping", 14, 0) != 14 || recv(fds[i], b, 14, MSG_WAITALL) != 14)
				die("warm-up");
	return fds;
}

static int burst(int n, double secs)
{
	struct sockaddr_in sa;
	int l, sync[2];
	pid_t child = echo_pair(n, &sa, &l, sync);
	char b[64];

	if (child == 0) {
		int *fds = connect_warm(&sa, n), ep = epoll_create1(0);
		struct epoll_event evs[256];
		long bursts = 0;
		double t0, t;
		for (int i = 0; i < n; i++) {
			struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)i };
			if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) < 0)
				die("epoll_ctl");
		}
		t0 = now_s();
		do {
			for (int i = 0; i < n; i++)
				if (send(fds[i], "ping-ping-ping", 14, 0) != 14)
					die("send");
			for (int left = n; left > 0;) {
				int k = epoll_wait(ep, evs, 256, 5000);
				if (k <= 0)
					die("a burst's echoes did not come");
				for (int i = 0; i < k; i++, left--)
					if (recv(fds[evs[i].data.u32], b, 14, MSG_WAITALL) != 14)
						die("echo");
			}
			bursts++;
		} while ((t = now_s()) - t0 < secs);
		dprintf(sync[1], "%.0f %.0f\n", bursts / (t - t0), bursts * (double)n / (t - t0));
		pause();
		_exit(0);
	}
	close(sync[1]);
	return echo_serve(l, n, sync[0], child, 0);
}

static int scale(int n, double secs)
{
	struct sockaddr_in sa;
	int l, sync[2];
	pid_t child = echo_pair(n, &sa, &l, sync);
	char b[64];

	if (child == 0) {
		long rt = 0;
		double t0, t, setup = now_s();
		int *fds = connect_warm(&sa, n); /* (then the timed run) */
		setup = now_s() - setup;
		if (ready_w >= 0 && (write(ready_w, "r", 1) != 1 || read(go_r, b, 1) != 1))
			die("start");
		t0 = now_s();
		do {
			for (int i = 0; i < n && (i & 63 || now_s() - t0 < secs); i++, rt++)
				if (send(fds[i], "ping-ping-ping", 14, 0) != 14 || recv(fds[i], b, 14, MSG_WAITALL) != 14)
					die("round trip");
		} while ((t = now_s()) - t0 < secs);
		long rss, shm;
		mem_of(getpid(), &rss, &shm);
		dprintf(sync[1], "%.0f %ld %ld %.3f\n", rt / (t - t0), rss, shm, setup);
		pause(); /* the parent measures itself, then kills us */
		_exit(0);
	}
	close(sync[1]);
	return echo_serve(l, n, sync[0], child, 1);
}

/* N connections over `pairs` pairs of processes (a process's fd limit
 * may hold fewer than N), their timed runs together: the sum of their
 * round trips/s and memory, the longest set-up. */
static int scale_pairs(int n, double secs, int pairs)
{
	int ready[2], go[2], out[2], failed = 0;
	double rt = 0, setup = 0;
	long rss = 0, shm = 0;
	char b[256];

	if (pairs <= 1)
		return scale(n, secs);
	if (pipe(ready) || pipe(go) || pipe(out))
		die("pipe");
	for (int p = 0; p < pairs; p++)
		if (fork() == 0) {
			ready_w = ready[1];
			go_r = go[0];
			dup2(out[1], 1);
			int r = scale(n / pairs + (p < n % pairs), secs);
			fflush(stdout);
			_exit(r);
		}
	close(ready[1]);
	close(go[0]);
	close(out[1]);
	for (int p = 0; p < pairs; p++)
		if (read(ready[0], b, 1) != 1)
			die("a pair failed to set up");
	for (int p = 0; p < pairs; p++)
		if (write(go[1], "g", 1) != 1)
			die("start");
	FILE *f = fdopen(out[0], "r");
	for (int p = 0; p < pairs; p++) {
		double r, su;
		long a, c;
		if (!f || !fgets(b, sizeof(b), f) || sscanf(b, "%lf %ld %ld %lf", &r, &a, &c, &su) != 4) {
			failed = 1;
			break;
		}
		rt += r;
		rss += a;
		shm += c;
		setup = su > setup ? su : setup;
	}
	while (wait(NULL) > 0)
		;
	if (failed) {
		fprintf(stderr, "a pair failed\n");
		return 1;
	}
	printf("%.0f %ld %ld %.3f\n", rt, rss, shm, setup);
	return 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc == 3 && !strcmp(argv[1], "rate"))
		return rate(atof(argv[2]));
	if (argc == 3 && !strcmp(argv[1], "req"))
		return req(atof(argv[2]));
	if ((argc == 4 || argc == 5) && !strcmp(argv[1], "scale"))
		return scale_pairs(atoi(argv[2]), atof(argv[3]), argc == 5 ? atoi(argv[4]) : 1);
	if (argc == 4 && !strcmp(argv[1], "one"))
		return one_ready(atoi(argv[2]), atof(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "burst"))
		return burst(atoi(argv[2]), atof(argv[3]));
	fprintf(stderr, "usage: conns rate SECS | conns req SECS | conns scale N SECS [PAIRS] | conns one N SECS | "
			"conns burst N SECS\n");
	return 2;
}

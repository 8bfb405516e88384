/* Many connections at once: N (default 100,000) TCP connections, spread
 * over P pairs of processes (default 1), are open together; each carries
 * ROUNDS round trips of a 32-byte message that names the connection and
 * the round (every byte checked on both sides), and all close cleanly:
 * each server reads every connection's EOF and nothing else (no reset, no
 * stray byte).
 *
 *   many [N] [ROUNDS] [P]   (ROUNDS default 12: under dsock a connection
 *                            is offered at its fourth data call, and the
 *                            rounds after that run on whatever the
 *                            pairing gave it)
 *
 * Each pair: a server (one epoll set over every connection it accepts,
 * echoing) and its client, a fork child (blocking calls, round robin over
 * its N / P).  Once every client has finished its rounds, with all N
 * connections open, the command in MANY_AT_PEAK (if set) runs, and only
 * then do the clients close.  A process's fd limit is raised as far as it
 * may (without CAP_SYS_RESOURCE a hard limit of 20,000 allows some 19,700
 * connections per process: then P > 1).  Past 25,000 connections of one
 * server the connects go to 127.0.0.2, .3, ... (the listener takes any
 * address).  Exit status 0 only if every byte matched and every connection
 * ended with a clean EOF; the last line is
 *   "many: N connections in P pairs, R round trips each, E errors, ...". */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

#define MSG 32
#define PER_DEST 25000

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void fill(unsigned char *m, uint32_t conn, uint32_t round)
{
	for (int k = 0; k < MSG; k++)
		m[k] = (unsigned char)(conn * 131u + round * 17u + (unsigned)k * 7u);
	memcpy(m, &conn, 4);
	memcpy(m + 4, &round, 4);
}

static int full_io(int fd, unsigned char *b, size_t n, int wr)
{
	for (size_t d = 0; d < n;) {
		ssize_t r = wr ? send(fd, b + d, n - d, MSG_NOSIGNAL) : recv(fd, b + d, n - d, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		d += (size_t)r;
	}
	return 0;
}

static int ready_w = -1, go_r = -1; /* the barrier before the clients close */

static int client(struct sockaddr_in sa, int n, int rounds)
{
	int *fd = calloc((size_t)n, sizeof(int)), errors = 0, one = 1;
	unsigned char m[MSG], back[MSG];
	double t0 = now_s(), t1;

	for (int i = 0; i < n; i++) {
		struct sockaddr_in to = sa;
		to.sin_addr.s_addr = htonl(INADDR_LOOPBACK + (uint32_t)(i / PER_DEST));
		fd[i] = socket(AF_INET, SOCK_STREAM, 0);
		if (fd[i] < 0 || connect(fd[i], (struct sockaddr *)&to, sizeof(to)) < 0) {
			fprintf(stderr, "many: connect %d: %s\n", i, strerror(errno));
			return 1;
		}
		setsockopt(fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	for (int r = 0; r < rounds; r++)
		for (int i = 0; i < n; i++) {
			fill(m, (uint32_t)i, (uint32_t)r);
			if (full_io(fd[i], m, MSG, 1) || full_io(fd[i], back, MSG, 0)) {
				fprintf(stderr, "many: connection %d round %d: %s\n", i, r, strerror(errno));
				return 1;
			}
			if (memcmp(m, back, MSG) && errors++ < 5)
				fprintf(stderr, "many: connection %d round %d: wrong bytes back\n", i, r);
		}
	t1 = now_s();
	char b = 0;
	if (write(ready_w, &b, 1) != 1 || read(go_r, &b, 1) != 1)
		return 1;
	for (int i = 0; i < n; i++)
		close(fd[i]);
	printf("client: %d errors, set-up and rounds %.2f s\n", errors, t1 - t0);
	return errors ? 1 : 0;
}

static int server(int n, int rounds)
{
	struct rlimit rl = { (rlim_t)n + 256, (rlim_t)n + 256 };
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	int l, ep, one = 1, errors = 0, open_conns = 0, eofs = 0, status;
	uint32_t *round;
	pid_t pid;
	double t0 = now_s(), t_rounds = 0;

	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		getrlimit(RLIMIT_NOFILE, &rl);
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	l = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 4096) < 0 ||
	    getsockname(l, (struct sockaddr *)&sa, &sl) < 0) {
		perror("many: listen");
		return 1;
	}
	if ((pid = fork()) == 0) {
		close(l);
		exit(client(sa, n, rounds));
	}
	ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = ~0ull };
	epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
	round = calloc((size_t)n, sizeof(*round));
	unsigned char *part = malloc((size_t)n * MSG), *fill_at = calloc((size_t)n, 1);
	int *fdof = malloc((size_t)n * sizeof(int));
	struct epoll_event *evs = malloc(1024 * sizeof(*evs));
	int accepted = 0;
	while (eofs < n) {
		int k = epoll_wait(ep, evs, 1024, 120000);
		if (k == 0) {
			fprintf(stderr, "many: stalled: %d accepted, %d closed\n", accepted, eofs);
			errors++;
			break;
		}
		for (int j = 0; j < k; j++) {
			if (evs[j].data.u64 == ~0ull) {
				for (int c; accepted < n && (c = accept4(l, NULL, NULL, SOCK_NONBLOCK)) >= 0;) {
					struct epoll_event e = { .events = EPOLLIN, .data.u64 = (uint64_t)accepted };
					setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
					fdof[accepted++] = c;
					open_conns++;
					epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
				}
				continue;
			}
			uint64_t i = evs[j].data.u64;
			unsigned char m[MSG * 4], want[MSG];
			ssize_t r = recv(fdof[i], m, sizeof(m), 0);
			if (r < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (r == 0 || r < 0) {
				if (r < 0 || round[i] != (uint32_t)rounds) {
					if (errors++ < 5)
						fprintf(stderr, "many: accepted %llu ended after %u rounds: %s\n",
							(unsigned long long)i, round[i], r < 0 ? strerror(errno) : "EOF");
				}
				if (++eofs == 1)
					t_rounds = now_s();
				epoll_ctl(ep, EPOLL_CTL_DEL, fdof[i], NULL);
				close(fdof[i]);
				open_conns--;
				continue;
			}
			/* a whole message, or a part of one: the client waits for
			 * the echo before its next, so parts stay in order */
			for (ssize_t d = 0; d < r;) {
				ssize_t w = send(fdof[i], m + d, (size_t)(r - d), MSG_NOSIGNAL);
				if (w < 0 && (errno == EAGAIN || errno == EINTR))
					continue;
				if (w <= 0) {
					errors++;
					break;
				}
				d += w;
			}
			/* the accept order is not the connect order: each message
			 * names its connection; parts are gathered, whole ones
			 * checked */
			for (ssize_t d = 0; d < r; d++) {
				part[i * MSG + fill_at[i]++] = m[d];
				if (fill_at[i] < MSG)
					continue;
				uint32_t conn, rd;
				memcpy(&conn, part + i * MSG, 4);
				memcpy(&rd, part + i * MSG + 4, 4);
				fill(want, conn, rd);
				if ((memcmp(part + i * MSG, want, MSG) || rd != round[i]) && errors++ < 5)
					fprintf(stderr, "many: wrong message on accepted %llu\n", (unsigned long long)i);
				round[i]++;
				fill_at[i] = 0;
			}
		}
	}
	double t_end = now_s();
	waitpid(pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		errors++;
	printf("server: %d connections, %d errors, set-up and rounds %.1f s, close %.1f s\n", n, errors,
	       t_rounds - t0, t_end - t_rounds);
	return errors ? 1 : 0;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100000, rounds = argc > 2 ? atoi(argv[2]) : 12;
	int pairs = argc > 3 ? atoi(argv[3]) : 1, ready[2], go[2], failed = 0, status;
	const char *peak = getenv("MANY_AT_PEAK");
	double t0 = now_s(), t_peak;
	char b;

	if (n < 1 || rounds < 1 || pairs < 1 || pairs > n || pipe(ready) || pipe(go)) {
		fprintf(stderr, "usage: many [N] [ROUNDS] [PAIRS]\n");
		return 2;
	}
	ready_w = ready[1];
	go_r = go[0];
	for (int p = 0; p < pairs; p++)
		if (fork() == 0) {
			close(ready[0]);
			close(go[1]);
			exit(server(n / pairs + (p < n % pairs), rounds));
		}
	close(ready[1]);
	close(go[0]);
	for (int p = 0; p < pairs; p++)
		if (read(ready[0], &b, 1) != 1) {
			fprintf(stderr, "many: a client failed before the peak\n");
			failed = 1;
			break;
		}
	t_peak = now_s();
	if (!failed && peak && system(peak) != 0) {
		fprintf(stderr, "many: MANY_AT_PEAK failed\n");
		failed = 1;
	}
	for (int p = 0; p < pairs; p++)
		if (write(go[1], &b, 1) != 1)
			failed = 1;
	close(go[1]);
	while (wait(&status) > 0)
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			failed = 1;
	printf("many: %d connections in %d pairs, %d round trips each, %s, peak after %.1f s, all closed %.1f s later\n",
	       n, pairs, rounds, failed ? "errors" : "0 errors", t_peak - t0, now_s() - t_peak);
	return failed;
}

/* The built-in example programs `dsock demo` runs: a TCP echo server and a
 * ping-pong client (hidden commands _echo-server and _echo-client). */
#include "cli/cli.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int cmd_echo_server(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	char buf[65536];
	int lfd = socket(AF_INET, SOCK_STREAM, 0), fd, one = 1;
	ssize_t n;

	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 8) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &len) < 0) {
		perror("echo server");
		return 1;
	}
	printf("port %d\n", ntohs(sa.sin_port));
	fflush(stdout);
	fd = accept(lfd, NULL, NULL);
	if (fd < 0) {
		perror("accept");
		return 1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(fd, buf + off, (size_t)(n - off));
			if (w <= 0)
				return 1;
			off += w;
		}
	return n < 0;
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static int full(int fd, char *buf, size_t n, int rd)
{
	for (size_t off = 0; off < n;) {
		ssize_t r = rd ? read(fd, buf + off, n - off) : write(fd, buf + off, n - off);
		if (r <= 0)
			return -1;
		off += (size_t)r;
	}
	return 0;
}

/* _echo-client PORT COUNT SIZE: prints "result P50_NS P99_NS TOTAL_NS",
 * then holds the connection open until stdin closes (so `dsock demo` can
 * ask the daemon which path it took). */
int cmd_echo_client(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int count, size, fd, one = 1;
	char out[65536], in[65536], c;
	int64_t *rtt, t0;

	if (argc < 4 || (count = atoi(argv[2])) < 1 || (size = atoi(argv[3])) < 1 || size > 65536)
		return 2;
	sa.sin_port = htons((uint16_t)atoi(argv[1]));
	rtt = calloc((size_t)count, sizeof(*rtt));
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (!rtt || fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("echo client");
		return 1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	for (int i = 0; i < size; i++)
		out[i] = (char)('a' + i % 26);
	for (int i = 0; i < count / 10 + 100; i++) /* warm-up */
		if (full(fd, out, (size_t)size, 0) || full(fd, in, (size_t)size, 1))
			return 1;
	t0 = now_ns();
	for (int i = 0; i < count; i++) {
		int64_t s = now_ns();
		if (full(fd, out, (size_t)size, 0) || full(fd, in, (size_t)size, 1) ||
		    memcmp(in, out, (size_t)size)) {
			fprintf(stderr, "echo client: bad echo at message %d\n", i);
			return 1;
		}
		rtt[i] = now_ns() - s;
	}
	t0 = now_ns() - t0;
	qsort(rtt, (size_t)count, sizeof(*rtt), cmp64);
	printf("result %lld %lld %lld\n", (long long)rtt[count / 2],
	       (long long)rtt[(size_t)count * 99 / 100], (long long)t0);
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	close(fd);
	return 0;
}

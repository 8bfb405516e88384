/* What the channel tests share (test_chan.c, test_chan_ends.c): a
 * connected pair of TCP sockets on loopback, and a channel over each. */
#ifndef CHAN_PAIR_H
#define CHAN_PAIR_H

#include "unit.h"
#include "lib/chan/chan_int.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#define FOREVER INT64_MAX

static int64_t mono_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void tcp_pair_sized(int fd[2], int buf);

static void tcp_pair(int fd[2])
{
	tcp_pair_sized(fd, 0);
}

/* buf: the sockets' buffers (0: the kernel's) */
static void tcp_pair_sized(int fd[2], int buf)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&a, &al)) {
		perror("listener");
		exit(1);
	}
	fd[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (buf) {
		setsockopt(l, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
		setsockopt(fd[0], SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
		setsockopt(fd[0], SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	}
	if (connect(fd[0], (struct sockaddr *)&a, sizeof(a)) || (fd[1] = accept4(l, NULL, NULL, SOCK_CLOEXEC)) < 0) {
		perror("connect");
		exit(1);
	}
	if (buf)
		setsockopt(fd[1], SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	setsockopt(fd[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	close(l);
}

static void chans(struct ch a[2], unsigned n)
{
	int fd[2];

	tcp_pair(fd);
	if (ch_create(&a[0], fd[0], n) || ch_create(&a[1], fd[1], n)) {
		fprintf(stderr, "ch_create failed\n");
		exit(1);
	}
}


#endif

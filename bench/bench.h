/* Small helpers shared by the benchmark programs (each is built alone with
 * `cc -O2 -o X bench/X.c`; this header is found next to them). */
#ifndef DSOCK_BENCH_H
#define DSOCK_BENCH_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static inline double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* perror and _exit: also safe in a forked child */
static inline void die(const char *what)
{
	perror(what);
	_exit(1);
}

/* A TCP listener on 127.0.0.1 and a free port, its address in *sa. */
static inline int loopback_listener(struct sockaddr_in *sa, int backlog)
{
	socklen_t l = sizeof(*sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, (struct sockaddr *)sa, sizeof(*sa)) < 0 || listen(fd, backlog) < 0 ||
	    getsockname(fd, (struct sockaddr *)sa, &l) < 0)
		die("listen");
	return fd;
}

#endif

/* A DEL racing with a dup of its set: one thread deletes a socket's
 * registration while the main thread dups the set.  A dup'd set must
 * never keep a registration the application deleted: after both calls the
 * kernel's own epoll_ctl (the instruction itself, past any wrapper and
 * past the syscall() dsock interposes) must be able to ADD the socket
 * again.  Under dsock the DEL may leave the
 * kernel's registration in place (a ghost, src/lib/sock/eghost.c) only in
 * sets nothing else reaches, so the dup must end it whichever call comes
 * first.  Prints "trials N kept K"; K must be 0.
 * Usage: ghost-dup-race TRIALS */
#include "common/rawsys.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static int ep, sock;
static _Atomic int go, started;

static void *deleter(void *arg)
{
	(void)arg;
	for (;;) {
		int g;
		while ((g = atomic_load(&go)) == 0)
			;
		if (g < 0)
			return NULL;
		atomic_store(&started, 1);
		epoll_ctl(ep, EPOLL_CTL_DEL, sock, NULL);
		atomic_store(&go, 0);
	}
}

int main(int argc, char **argv)
{
	int trials = argc > 1 ? atoi(argv[1]) : 100000, kept = 0;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0);
	pthread_t t;

	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || getsockname(l, (struct sockaddr *)&a, &al) ||
	    listen(l, 4) || (sock = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
	    connect(sock, (struct sockaddr *)&a, sizeof(a)) || accept(l, NULL, NULL) < 0) {
		perror("ghost-dup-race: set-up");
		return 2;
	}
	pthread_create(&t, NULL, deleter, NULL);
	for (int i = 0; i < trials; i++) {
		struct epoll_event e = { .events = EPOLLIN, .data.u64 = 9 };
		ep = epoll_create1(EPOLL_CLOEXEC);
		epoll_ctl(ep, EPOLL_CTL_ADD, sock, &e);
		atomic_store(&started, 0);
		atomic_store(&go, 1);
		while (!atomic_load(&started))
			;
		for (volatile int k = 0; k < i % 200; k++) /* (a spread of orders) */
			;
		int d = dup(ep);
		while (atomic_load(&go) == 1)
			;
		if (dsock_sys(SYS_epoll_ctl, ep, EPOLL_CTL_ADD, sock, &e) < 0 && errno == EEXIST)
			kept++;
		close(d);
		close(ep);
	}
	atomic_store(&go, -1);
	pthread_join(t, NULL);
	printf("trials %d kept %d\n", trials, kept);
	return 0;
}

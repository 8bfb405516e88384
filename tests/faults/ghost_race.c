/* Deleted epoll registrations under threads: one thread registers a
 * readable socket with a new data value, deletes it, and every fourth
 * round does so through a dup that it then closes; another thread waits
 * on the set all along.  No wait may report a data value deleted before
 * that wait began.  Under dsock a DEL may leave the kernel's registration
 * in place (a ghost, src/lib/sock/eghost.c) and the ghost may end
 * (revived with other data, closed) between a wait's kernel call and its
 * filter.  Prints "ghosts G cycles C events E deleted-reported B": G is 1
 * when a DEL left the kernel's registration (the set's fdinfo still lists
 * the socket), as it does under dsock only.
 * Usage: ghost-race SECONDS */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int ep;
static _Atomic unsigned long deleted_upto, stop;
static unsigned long bad, seen;

static void *waiter(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		unsigned long d0 = atomic_load(&deleted_upto);
		struct epoll_event ev[4];
		int n = epoll_wait(ep, ev, 4, 1);
		for (int i = 0; i < n; i++) {
			seen++;
			if (ev[i].data.u64 <= d0)
				bad++;
		}
	}
	return NULL;
}

/* 1 if the kernel's set lists fd (its fdinfo has "tfd: FD") */
static int kernel_holds(int fd)
{
	char path[64], line[256], want[32];
	int found = 0;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", ep);
	snprintf(want, sizeof(want), "tfd: %8d", fd);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		found |= strncmp(line, want, strlen(want)) == 0;
	fclose(f);
	return found;
}

int main(int argc, char **argv)
{
	int secs = argc > 1 ? atoi(argv[1]) : 2, ghosts;
	int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0), s;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	unsigned long k = 1, cycles = 0;
	pthread_t t;

	if (bind(l, (void *)&a, sizeof(a)) || listen(l, 1) || getsockname(l, (void *)&a, &al) ||
	    connect(c, (void *)&a, sizeof(a)) || (s = accept(l, NULL, NULL)) < 0 || send(c, "x", 1, 0) != 1) {
		perror("ghost-race: set-up");
		return 2;
	}
	ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event e = { .events = EPOLLIN, .data.u64 = 0 };
	if (epoll_ctl(ep, EPOLL_CTL_ADD, s, &e) || epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL)) {
		perror("ghost-race: epoll_ctl");
		return 2;
	}
	ghosts = kernel_holds(s);
	pthread_create(&t, NULL, waiter, NULL);
	for (time_t end = time(NULL) + secs; time(NULL) < end; k++, cycles++) {
		int fd = k % 4 ? s : dup(s);
		e.data.u64 = k;
		if (fd < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) < 0) {
			perror("ghost-race: ADD");
			return 2;
		}
		for (volatile int i = 0; i < 200; i++)
			;
		if (epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL) < 0) {
			perror("ghost-race: DEL");
			return 2;
		}
		if (fd != s)
			close(fd);
		atomic_store(&deleted_upto, k);
	}
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	printf("ghosts %d cycles %lu events %lu deleted-reported %lu\n", ghosts, cycles, seen, bad);
	return 0;
}

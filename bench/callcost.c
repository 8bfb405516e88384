/* Cost of one intercepted call that the kernel answers at once: a
 * nonblocking recv on an empty socket (EAGAIN), a write+read of 1 byte on a
 * socketpair, fcntl(F_GETFL), an epoll_ctl ADD or DEL (a pair, halved), a
 * MOD (EPOLLIN and EPOLLOUT in turn) and an epoll_wait that returns at
 * once.  Run natively and with libdsock.so
 * preloaded; the difference is what passthrough interposition adds.
 * Prints "NAME NS_PER_CALL" lines (median of 7 runs). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define N 200000

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(void)
{
	int sv[2];
	char c = 'x';
	double runs[7];
	const char *names[] = { "recv_eagain", "write_read_1B", "fcntl_getfl", "epoll_add_or_del", "epoll_mod",
				"epoll_wait_0" };
	struct epoll_event ev = { .events = EPOLLIN }, out[4];
	int ep = epoll_create1(0);

	socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
	for (int which = 0; which < 6; which++) {
		if (which == 4)
			epoll_ctl(ep, EPOLL_CTL_ADD, sv[0], &ev);
		for (int r = 0; r < 7; r++) {
			double t0 = now();
			for (int i = 0; i < N; i++) {
				if (which == 0)
					recv(sv[0], &c, 1, MSG_DONTWAIT);
				else if (which == 1) {
					if (write(sv[0], &c, 1) != 1 || read(sv[1], &c, 1) != 1)
						return 1;
				} else if (which == 2) {
					fcntl(sv[0], F_GETFL);
				} else if (which == 3) {
					epoll_ctl(ep, EPOLL_CTL_ADD, sv[0], &ev);
					epoll_ctl(ep, EPOLL_CTL_DEL, sv[0], NULL);
				} else if (which == 4) {
					ev.events = i & 1 ? EPOLLIN : EPOLLOUT;
					epoll_ctl(ep, EPOLL_CTL_MOD, sv[0], &ev);
				} else {
					epoll_wait(ep, out, 4, 0);
				}
			}
			runs[r] = (now() - t0) / N / (which == 3 ? 2 : 1);
		}
		qsort(runs, 7, sizeof(double), cmp);
		printf("%s %.1f\n", names[which], runs[3]);
	}
	return 0;
}

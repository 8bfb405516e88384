/* Cost of one intercepted call that the kernel answers at once: a
 * nonblocking recv on an empty socket (EAGAIN), a write+read of 1 byte on a
 * socketpair, and fcntl(F_GETFL).  Run natively and with libdsock.so
 * preloaded; the difference is what passthrough interposition adds.
 * Prints "NAME NS_PER_CALL" lines (median of 7 runs). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
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
	const char *names[] = { "recv_eagain", "write_read_1B", "fcntl_getfl" };

	socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
	for (int which = 0; which < 3; which++) {
		for (int r = 0; r < 7; r++) {
			double t0 = now();
			for (int i = 0; i < N; i++) {
				if (which == 0)
					recv(sv[0], &c, 1, MSG_DONTWAIT);
				else if (which == 1) {
					if (write(sv[0], &c, 1) != 1 || read(sv[1], &c, 1) != 1)
						return 1;
				} else
					fcntl(sv[0], F_GETFL);
			}
			runs[r] = (now() - t0) / N;
		}
		qsort(runs, 7, sizeof(double), cmp);
		printf("%s %.1f\n", names[which], runs[3]);
	}
	return 0;
}

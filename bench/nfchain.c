/* A network-function pipeline (SocksDirect's NF chain, seed 001): a source,
 * N forwarders and a sink, each its own process, joined by TCP connections
 * on loopback.  The source writes 64 B packets as fast as it can for SECS
 * seconds; each forwarder reads and passes on what it got; the sink counts.
 *
 *   nfchain N SECS     prints "packets_per_sec"
 *
 * Each process makes its own connections after the fork (a listener per
 * link is made first and inherited), as independent programs would. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define PKT 64

static int link_to(const struct sockaddr_in *sa)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (fd < 0 || connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0)
		die("connect");
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static ssize_t write_all(int fd, const char *p, size_t n)
{
	size_t done = 0;

	while (done < n) {
		ssize_t w = write(fd, p + done, n - done);
		if (w <= 0)
			return -1;
		done += (size_t)w;
	}
	return (ssize_t)done;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 2, report[2];
	double secs = argc > 2 ? atof(argv[2]) : 2;
	struct sockaddr_in sa[64];
	int lfd[64];
	static char buf[1 << 16];

	if (n < 0 || n > 60 || pipe(report) < 0)
		return 2;
	signal(SIGPIPE, SIG_IGN);
	/* link j joins process j to process j + 1; process j + 1 listens */
	for (int j = 0; j <= n; j++)
		lfd[j] = loopback_listener(&sa[j], 4);
	for (int p = 0; p <= n + 1; p++) {
		if (fork() != 0)
			continue;
		int in = -1, out = -1;
		if (p > 0)
			in = accept(lfd[p - 1], NULL, NULL);
		if (p <= n)
			out = link_to(&sa[p]);
		for (int j = 0; j <= n; j++)
			close(lfd[j]);
		if (p == 0) { /* the source */
			double t0 = now_s();
			memset(buf, 'p', sizeof(buf));
			while (now_s() - t0 < secs)
				for (int k = 0; k < 256; k++)
					if (write_all(out, buf, PKT) < 0)
						die("source");
			close(out);
		} else if (p <= n) { /* a forwarder */
			ssize_t r;
			while ((r = read(in, buf, sizeof(buf))) > 0)
				if (write_all(out, buf, (size_t)r) < 0)
					die("forward");
			close(out);
		} else { /* the sink */
			long long bytes = 0;
			ssize_t r;
			double t0 = 0;
			while ((r = read(in, buf, sizeof(buf))) > 0) {
				if (!t0)
					t0 = now_s();
				bytes += r;
			}
			dprintf(report[1], "%.0f\n", bytes / PKT / (now_s() - t0));
		}
		_exit(0);
	}
	close(report[1]);
	for (int j = 0; j <= n; j++)
		close(lfd[j]);
	char out[64] = "";
	ssize_t r = read(report[0], out, sizeof(out) - 1);
	while (wait(NULL) > 0)
		;
	if (r <= 0)
		return 1;
	out[r] = 0;
	fputs(out, stdout);
	return 0;
}

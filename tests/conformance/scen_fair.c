/* Fairness of a wait that has room for fewer events than there are ready
 * members: the kernel's epoll reports ready members in turn, so a member
 * that is ready again at once (a busy connection) cannot keep another
 * from being reported.  Under dsock the readiness of bytes on the rings
 * comes from a list of its own (src/lib/sock/hidden.c), which must serve
 * its members in turn too. */
#include "conf.h"

#include <stdio.h>
#include <sys/epoll.h>
#include <unistd.h>

/* 64 connections with a byte each, a wait with room for 8: each member
 * reported is read and sent its next byte at once; every member must be
 * reported within 16 waits (the kernel takes 8; a list served from its
 * start while removals move its last entry forward took 31 here). */
STREAM_SCEN(epoll_busy_members_all_reported)
{
	enum { N = 64, MAX = 8, BOUND = 2 * N / MAX };
	int c[N], s[N], seen[N] = { 0 }, nseen = 0, waits = 0, ep = epoll_create1(EPOLL_CLOEXEC);
	char b[8];

	for (int i = 0; i < N; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)i };
		fam_pair(f, &c[i], &s[i]);
		epoll_ctl(ep, EPOLL_CTL_ADD, s[i], &ev);
	}
	for (int i = 0; i < N; i++)
		send(c[i], "x", 1, 0);
	while (nseen < N && waits < 10 * BOUND) {
		struct epoll_event ev[MAX];
		int n = epoll_wait(ep, ev, MAX, 1000);
		waits++;
		for (int j = 0; j < n; j++) {
			int k = (int)ev[j].data.u32;
			recv(s[k], b, sizeof(b), 0);
			nseen += !seen[k];
			seen[k] = 1;
			send(c[k], "x", 1, 0); /* busy: ready again at once */
		}
	}
	out("every member reported within %d waits: %s", BOUND, nseen == N && waits <= BOUND ? "yes" : "no");
	for (int i = 0; i < N; i++) {
		close(c[i]);
		close(s[i]);
	}
	close(ep);
}

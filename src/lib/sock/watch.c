/* Epoll registrations of sockets whose transport wakes them through fds
 * of its own (watch.h). */
#include "lib/sock/watch.h"
#include "lib/sock/ready.h"
#include "lib/sock/sock.h"
#include "lib/base/real.h"

#include <stdatomic.h>
#include <sys/epoll.h>

_Atomic long dsock_epoll_watched;

/* Flags of the application's registration that every part keeps. */
#define KEEP_FLAGS (EPOLLET | EPOLLONESHOT | EPOLLWAKEUP)

static void ctl(int epfd, int op, int fd, unsigned events, uint64_t data)
{
	struct epoll_event e = { .events = events, .data.u64 = data };

	if (dsock_real.epoll_ctl(epfd, op, fd, &e) < 0 && op == EPOLL_CTL_MOD)
		dsock_real.epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &e);
}

void dsock_watch_drop(struct dsock_watch *w, int epfd)
{
	for (int i = 0; i < w->n; i++)
		dsock_real.epoll_ctl(epfd, EPOLL_CTL_DEL, w->fd[i], NULL);
	w->n = 0;
}

int dsock_watch_apply(struct dsock_watch *w, int epfd, int fd, uint64_t data, unsigned events, int disarmed,
		      struct dsock_sock *s)
{
	const struct dsock_transport *tp = s ? __atomic_load_n(&s->tp, __ATOMIC_ACQUIRE) : NULL;
	struct pollfd want[DSOCK_WAITS_MAX];
	unsigned keep = events & KEEP_FLAGS, own = 0;
	int n = 0;

	if (tp && tp->waits && dsock_fdt_peek(fd) == s)
		n = tp->waits(s, fd, (short)(events & 0xffffu & ~KEEP_FLAGS), want);
	if (n <= 0) {
		dsock_watch_drop(w, epfd);
		if (!disarmed)
			ctl(epfd, EPOLL_CTL_MOD, fd, dsock_epoll_kernel_events(fd, events), data);
		return 0;
	}
	/* a one-shot already reported: nothing is armed until the
	 * application's MOD (which comes back here) */
	if (disarmed) {
		dsock_watch_drop(w, epfd);
		return 1;
	}
	/* the others: gone ones out, new ones in or changed */
	int old[DSOCK_WAITS_MAX], had = w->n;
	for (int i = 0; i < had; i++) {
		int still = 0;
		old[i] = w->fd[i];
		for (int j = 0; j < n; j++)
			still |= want[j].fd == w->fd[i];
		if (!still)
			dsock_real.epoll_ctl(epfd, EPOLL_CTL_DEL, w->fd[i], NULL);
	}
	w->n = 0;
	for (int j = 0; j < n; j++) {
		unsigned ev = (unsigned)(unsigned short)want[j].events | keep;
		int known = 0;

		if (want[j].fd == fd) {
			own = 1;
			ctl(epfd, EPOLL_CTL_MOD, fd, ev, data);
			continue;
		}
		for (int i = 0; i < had; i++)
			known |= old[i] == want[j].fd;
		ctl(epfd, known ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, want[j].fd, ev, data);
		w->fd[w->n++] = want[j].fd;
	}
	/* the application's fd stays registered (its errors, its hang-up) */
	if (!own)
		ctl(epfd, EPOLL_CTL_MOD, fd, keep, data);
	return 1;
}

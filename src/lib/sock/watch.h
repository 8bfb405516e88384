/* The kernel's part of an epoll registration of a socket whose transport
 * has waits (transport.h): its wake-ups come through fds other than the
 * application's socket, so the registration (epoll set, fd, data) stands
 * for several in the kernel: the application's fd with the events the
 * transport asks of it, and each other wait fd with the same data.  Our
 * epoll_wait then asks the transport what the events mean (ready.c). */
#ifndef DSOCK_WATCH_H
#define DSOCK_WATCH_H

#include "lib/transport/transport.h"

#include <stdint.h>

struct dsock_sock;

/* The other fds registered for one registration. */
struct dsock_watch {
	int n;
	int fd[DSOCK_WAITS_MAX];
};

/* Registrations whose socket's transport has waits: while > 0 our
 * epoll_wait looks at every event. */
extern _Atomic long dsock_epoll_watched;

/* Makes the kernel's part of registration (epfd, fd, data, events) follow
 * s's transport's waits now, or the application's events when s is not
 * (or no longer) at fd or its transport has none.  disarmed: a one-shot
 * already reported (nothing is armed).  Returns 1 when the registration
 * is watched (its events need the transport's view), else 0.  Called
 * under the registrations' lock. */
int dsock_watch_apply(struct dsock_watch *w, int epfd, int fd, uint64_t data, unsigned events, int disarmed,
		      struct dsock_sock *s);
/* Takes the other fds out of the kernel's set (the registration is gone). */
void dsock_watch_drop(struct dsock_watch *w, int epfd);

#endif

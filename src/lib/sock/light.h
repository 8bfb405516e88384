/* Light sleepers: threads asleep in epoll_wait on a set that holds no
 * member a transport may ever carry (listeners, pipes, eventfds, timers:
 * the acceptor thread of memcached and of many servers).  No data of a
 * transport can be due to them, so they neither spin nor count in
 * dsock_sleepers: the pollers of the process keep their leases, and
 * producers go on announcing to them instead of sending tokens
 * (docs/ARCHITECTURE.md, "Light sleepers").
 *
 * A set may be slept on light only if dsock saw its creation in this
 * process image (a set inherited across exec may hold connections we do
 * not know of) and no member a transport may carry joined it since: an
 * Internet stream socket that does not listen, or another epoll set
 * (what that one holds may change).  Such a member joining a set first
 * promotes the set's light sleepers (all of them, when the set is nested
 * in another): they count in dsock_sleepers from then on, as if they had
 * counted when they went to sleep, and the leases end before the kernel
 * takes the member, so that every later arrival comes with a token.
 *
 * The registry holds every thread asleep in our epoll_wait, counted ones
 * too: a socket with hidden data given to a set someone sleeps on pokes
 * it (poke.h). */
#ifndef DSOCK_LIGHT_H
#define DSOCK_LIGHT_H

struct dsock_light {
	int epfd;
	int light;    /* 0: counted in dsock_sleepers by itself */
	int promoted; /* counted in dsock_sleepers on our behalf */
	struct dsock_light *next, **pprev;
};

/* epoll_create made epfd, empty; cloexec: with EPOLL_CLOEXEC. */
void dsock_light_born(int epfd, int cloexec);
/* Ghosts (eghost.c) may stay in set epfd: dsock saw its creation in this
 * process image, after the last fork, with close-on-exec (no other
 * process, no program run by exec or spawn, can reach it), and it was
 * never dup'd, given close-on-exec back, polled as a whole or nested in
 * another set since. */
int dsock_light_ghostable(int epfd);
/* Set epfd (-1: every set) may hold no ghosts from now on (1 if it could
 * until now). */
int dsock_light_unghost(int epfd);
/* fcntl(F_SETFD) or ioctl(FIOCLEX/FIONCLEX) set epfd's close-on-exec. */
void dsock_light_cloexec(int epfd, int on);
/* 1 if epoll_create made any set in this image that is still open. */
int dsock_light_any(void);
/* 1 if epoll_create made fd in this image (a set we know). */
int dsock_light_known(int fd);
/* Set from is known as set to from now on (ealias.c). */
void dsock_light_rekey(int from, int to);
/* fds first..last are closed: sets among them are forgotten. */
void dsock_light_forget(unsigned first, unsigned last);
/* A member that a transport may carry joins epfd (+1: before the kernel
 * has it, promoting the sleepers; nested: epfd is a member of another
 * set, and every light sleeper is promoted) or left it (-1). */
void dsock_light_member(int epfd, int delta, int nested);
/* 1 if a thread about to sleep on epfd may sleep light: then me is
 * registered until dsock_light_leave. */
int dsock_light_enter(int epfd, struct dsock_light *me);
/* A thread that counted itself (dsock_sleep_begin) registers before its
 * last look at epfd: a socket with hidden data given to the set after that
 * look pokes it (poke.h). */
void dsock_light_enter_counted(int epfd, struct dsock_light *me);
/* 1 if a thread is registered asleep on epfd (nested: epfd is a member of
 * another set, and any sleeper counts). */
int dsock_light_sleeping(int epfd, int nested);
/* me woke: unregistered, and uncounted if it was promoted. */
void dsock_light_leave(struct dsock_light *me);
/* A fork child: no thread but the forking one, and it is not asleep. */
void dsock_light_fork_child(void);

#endif

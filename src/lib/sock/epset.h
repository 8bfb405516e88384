/* Epoll registrations dsock knows of, indexed (epset.c), and the sockets
 * whose data the kernel's readiness does not show. */
#ifndef DSOCK_EPSET_H
#define DSOCK_EPSET_H

#include <stdint.h>
#include <sys/epoll.h>

/* The fd a registration of epfd with this data names; -1 when none, or
 * when two registrations of the set share the data (we cannot tell). */
int dsock_epset_member_fd(int epfd, uint64_t data);
/* The registration of epfd with this data: its fd (also returned: -1 when
 * none, or when two share the data), the application's events, whether
 * EPOLLIN was added for the kernel to them (dsock_epoll_kernel_events, or
 * parked), and whether it is parked. */
struct dsock_epmember {
	int fd;
	unsigned events;
	int in_added, parked;
	int watched;  /* its transport has waits: ask it what events mean */
	int disarmed; /* a one-shot reported by us, not re-armed yet */
	int set;      /* the member is an epoll set (nested) */
};
int dsock_epset_lookup(int epfd, uint64_t data, struct dsock_epmember *out);
/* An edge-triggered registration whose socket's transport has waits found
 * readable with arrival count mark (dsock_ready_rx_mark): 1 if that is an
 * arrival since its last report (recorded as reported), 0 if not (a
 * wake-up of the transport's own).  mark 0 (unknown): 1. */
int dsock_epset_arrived(int epfd, uint64_t data, uint64_t mark);
/* A one-shot registration whose socket's transport has waits fired:
 * reported (1: disarmed until the application's next MOD) or not (0: its
 * parts are armed again). */
void dsock_epset_oneshot(int epfd, uint64_t data, int reported);
/* A level-triggered registration for EPOLLOUT of a socket whose transport
 * has no room: EPOLLOUT leaves the kernel's registration (EPOLLIN joins it,
 * for the space token) until unparked.  1 if parked (not edge-triggered,
 * not one-shot, and the kernel took the change). */
int dsock_epset_park(int epfd, uint64_t data);
/* Gives the kernel the registration's events back. */
void dsock_epset_unpark(int epfd, uint64_t data);
/* Parked members of epfd whose socket now has room (or left its
 * transport): unparked, and reported as their EPOLLOUT.  Returns how many
 * (at most max). */
int dsock_epset_parked_ready(int epfd, struct epoll_event *out, int max);
/* Members of epfd whose socket is hidden readable (and epoll sets nested
 * in it, one level, that hold one), as EPOLLIN events; ONESHOT members are
 * disarmed, EPOLLET ones reported once per arrival.  *wants_kernel: one of
 * them needs the kernel's look too (it asked for EPOLLOUT or the like, or
 * is edge-triggered or one-shot: the kernel's edge must be used up). */
int dsock_epset_hidden(int epfd, struct epoll_event *out, int max, int *wants_kernel);
/* 1 if epoll set epfd (or a set nested in it, one level) holds a member
 * with hidden readable data that its epoll_wait would report: the set's
 * own readiness for poll, select or an outer epoll.  Changes nothing. */
int dsock_epset_readable(int epfd);
/* Set epfd, polled as a whole, is readable by the kernel's word: 1 if that
 * stands once the parts of its members (and of the sets nested in it, one
 * level) that are ready for nothing are settled (a transport's headers
 * read, stale tokens drained), 0 if not.  A walk of the members: only for
 * the kernel's readiness of a set itself, which no data path polls. */
int dsock_epset_confirm(int epfd);
/* The number dsock's records know epoll set fd by (ealias.c): fd itself
 * unless fd is a dup of a set first known by another number. */
int dsock_epset_key(int fd);
/* newfd is a dup of oldfd: if an epoll set, an alias of oldfd's key. */
void dsock_epset_dup(int oldfd, int newfd);
/* Around the close or dup of a number that may be a set
 * (dsock_setbit_maybe): one at a time, so that a dup in one thread and
 * the close of its original in another never lose the set's records.
 * enter returns what leave takes. */
int dsock_epset_serial_enter(void);
void dsock_epset_serial_leave(int entered);
/* The alias table across a fork (from the epset's fork hooks, after
 * dsock_epset_mu). */
void dsock_epset_alias_fork_prepare(void);
void dsock_epset_alias_fork_parent(void);
void dsock_epset_alias_fork_child(void);
/* 1 if fd is an epoll set with members dsock knows of. */
int dsock_epset_is_set(int fd);
void dsock_epset_fork_prepare(void);
void dsock_epset_fork_parent(void);
void dsock_epset_fork_child(void);

/* Ghosts: registrations the application deleted while the kernel's set
 * keeps them (eghost.c), so that an event loop that takes a socket out and
 * puts it back for every message makes no system call for it.  How many
 * there are; 1 if the kernel's event (epfd, data), from a kernel call made
 * when the tombstones stood at since, is a ghost's (taken out of the
 * kernel's set now) or was one meanwhile: not reported. */
extern _Atomic long dsock_epoll_ghosts;
/* Ghosts are made unless DSOCK_EPOLL_GHOSTS=0 (eghost.c for what they
 * cost in exactness). */
extern int dsock_epoll_ghosts_on;
/* What may reach a set is watched (dup, nesting, poll or select of the
 * set, SCM_RIGHTS, spawn, close-on-exec: light.h) while ghosts or bells
 * are on: both live only in sets nothing else reaches. */
extern int dsock_bells_on;
static inline int dsock_sets_watched(void)
{
	return dsock_epoll_ghosts_on || dsock_bells_on;
}
/* 2: the tombstones cannot tell (more ghosts ended since than they keep)
 * and one level-triggered registration holds the data: *fd and *events
 * are its own, and the event stands only for what that fd is ready for
 * now. */
#define DSOCK_GHOST_UNSURE 2
/* DSOCK_TEST_GHOST_UNSURE=1: the tombstones never tell (tests of the
 * readiness that decides then) */
extern int dsock_ghost_test_unsure;
int dsock_epset_ghost_event(int epfd, uint64_t data, uint64_t since, int *fd, unsigned *events);
/* How many registrations of set epfd that the records hold have this data
 * (with ghosts on, a set born here: every registration). */
int dsock_epset_data_holders(int epfd, uint64_t data);
/* Where the ghosts' tombstones stand: read before a wait's kernel call,
 * for dsock_epset_ghost_event. */
uint64_t dsock_ghost_since(void);
/* Sets fd's close-on-exec (on) or clears it: fcntl(fd, F_SETFD, arg) if
 * fcntl, else ioctl FIOCLEX/FIONCLEX; 0 or -errno.  An epoll set that
 * loses it loses its ghosts first (a program run by exec could reach
 * them); one that gains it may hold them. */
int dsock_epset_cloexec(int fd, int on, int fcntl, long arg);
/* A spawn with file actions, whose dup2 may hand any set to the program:
 * every set holds no ghosts from now on.  An fd passed with SCM_RIGHTS:
 * if a set, it holds none from now on. */
void dsock_epset_spawn_actions(void);
void dsock_epset_passed(int fd);
/* Set epfd is polled as a whole (poll, select, another set): its ghosts
 * leave the kernel's set now, and it holds none from now on (the kernel's
 * readiness of the set would count them). */
void dsock_epset_no_ghosts(int epfd);
/* No set holds ghosts from now on, until an exec (io_uring: uring.c). */
void dsock_epset_ghosts_end(void);

#endif

/* Readiness for the pollers (poll, ppoll, select, pselect: poll.c; epoll:
 * ready.c).
 *
 * A transport without waits (transport.h) makes the application's kernel
 * socket its doorbell, so the kernel's readiness is right except in one
 * case: data left in the transport's buffer after a partial read while no
 * wake-up backs it ("hidden readable").  Such sockets are counted
 * process-wide; while the count is zero every poller passes straight to
 * the kernel.  Otherwise the poller asks the kernel without waiting and
 * adds the hidden ones.  A
 * transport with waits has its wake-ups on fds of its own: the pollers
 * wait on those too and ask it what they mean (poll.c, watch.c).  epoll
 * needs to know which fds an epoll set holds: epoll_ctl on tracked
 * sockets is recorded for that. */
#ifndef DSOCK_READY_H
#define DSOCK_READY_H

#include "lib/base/clock.h"
#include "lib/sock/spin.h"

#include <poll.h>
#include <stdatomic.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>

extern _Atomic long dsock_hidden_readable;
/* Connections a transport carries now: pollers look closer while > 0. */
extern _Atomic long dsock_fastpath_conns;

/* Threads of this process asleep (or about to sleep) in the kernel while
 * waiting on sockets: while > 0 no receiver keeps a lingering lease and
 * no transport keeps a lease or a bell (before_sleep). */
extern _Atomic int dsock_sleepers;
/* Threads asleep (or about to sleep) in epoll_wait on a set that holds
 * the transports' bells (light.h): counted here, not in dsock_sleepers;
 * while > 0 no receiver lingers and no transport keeps a lease, but the
 * transports' bells stand (before_sleep with bell 1). */
extern _Atomic int dsock_bell_sleepers;
static inline int dsock_anyone_sleeps(void)
{
	return atomic_load(&dsock_sleepers) > 0 || atomic_load(&dsock_bell_sleepers) > 0;
}

/* This thread's sleeps: bumped when one of our waits in the kernel (a
 * poller's, a receiver's) took DSOCK_SLEPT_NS or more, so it slept and was
 * woken.  A transport's receiver tells by it whether its read came after
 * a wake-up.  dsock_wait_end: the wait that started at t0_ns (mono) is
 * over. */
extern __thread unsigned dsock_sleep_gen;
#define DSOCK_SLEPT_NS 5000LL
static inline void dsock_wait_end(long long t0_ns)
{
	if (dsock_mono_ns() - t0_ns >= DSOCK_SLEPT_NS)
		dsock_sleep_gen++;
}

/* A thread whose epoll_wait looked without sleeping renews, from its data
 * calls on the fast path, the leases that look published (the transports'
 * collect op), until it sleeps: an event loop that serves hundreds of
 * connections per look comes back to epoll_wait milliseconds later, past
 * the leases, and its producers would send a token per message meanwhile
 * (redis-benchmark with 1,000 clients: nearly one per reply).  Its data
 * calls show that it still runs our code, which is what the leases
 * promise (ready.c). */
extern __thread int64_t dsock_renew_at;
void dsock_poller_renew(void);
/* This thread is about to sleep in the kernel, waiting on sockets:
 * counted in dsock_sleepers, it renews nothing, and the transports end
 * their leases (before_sleep) before its last look. */
void dsock_sleep_begin(void);
static inline void dsock_poller_busy(void)
{
	if (__builtin_expect(dsock_renew_at != 0, 0))
		dsock_poller_renew();
}

struct dsock_sock;
void dsock_hidden_set(struct dsock_sock *s, int *flag, int on);
/* 1 if s's data is readable but the kernel may not say so.  For an
 * edge-triggered member (*mark not NULL) only once per arrival: *mark is
 * the arrival count last reported. */
int dsock_hidden_sock(struct dsock_sock *s, uint64_t *mark);
/* Calls fn for each hidden-readable socket, under the list's lock (fn must
 * not change the list), until fn returns non-zero; returns that.  Each
 * walk starts where the last one that stopped early stopped: a wait with
 * room for fewer than the list holds reports the others next (a removal
 * moves the list's last entry into its place, so a walk always from the
 * start would serve the newest arrivals and starve the middle). */
int dsock_hidden_each(int (*fn)(struct dsock_sock *s, void *arg), void *arg);
/* The list's lock around fork: 0 prepare (taken, after the epoll sets'),
 * 1 parent (released), 2 child (made anew). */
void dsock_hidden_fork(int phase);

/* The events to register with the kernel for the application's events on
 * fd.  A writer waiting edge-triggered for EPOLLOUT alone on a connection a
 * transport may carry is told of room by a byte arriving on its
 * socket (an EPOLLIN edge), so EPOLLIN is added for the kernel and taken
 * out again, made EPOLLOUT if there is room, by our epoll_wait. */
unsigned dsock_epoll_kernel_events(int fd, unsigned events);
/* Members registered so: while > 0, our epoll_wait looks at every event. */
extern _Atomic long dsock_epoll_in_added;
/* Registrations parked while their transport has no room (epset.c): while
 * > 0, our
 * epoll_wait looks at them before it sleeps and every PARK_SLICE_NS. */
extern _Atomic long dsock_epoll_parked;
/* epoll_ctl: the kernel's call (with dsock_epoll_kernel_events) and our
 * record of it, together.  0 or -errno. */
int dsock_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);
/* fd (or fds first..last) closed: forget it as a member and as a set. */
void dsock_epoll_forget_fd(int fd);
void dsock_epoll_forget_range(unsigned first, unsigned last);

/* 1 if the kernel's IN on fd is only a transport's wake-up tokens (now
 * drained): not to be reported. */
int dsock_ready_spurious_in(int fd);

/* fd's events (poll bits, of events plus POLLERR and POLLHUP) as the
 * transport with waits that carries it says, or as the kernel does once
 * the kernel carries it (poll.c). */
short dsock_ready_poll_fd(int fd, short events);
/* A count that grows with every arrival on fd, a socket whose transport
 * has waits: the kernel's bytes received (its FIN among them) and the
 * transport's own (rx_mark).  0 when it cannot tell. */
uint64_t dsock_ready_rx_mark(int fd);

/* s, which tp carries: POLLOUT (with POLLERR, POLLHUP: the send fails at
 * once) if a send would not block, 0 if it would (a wake-up for room is
 * then asked for: want_space), -1 if tp does not say. */
struct dsock_transport;
int dsock_tp_writable(struct dsock_sock *s, int fd, const struct dsock_transport *tp);

/* Each returns a count or -errno, like the call it serves. */
int dsock_ready_poll(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *m, int is_ppoll,
		     int timeout_ms);
int dsock_ready_select(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *t,
		       const sigset_t *m, struct timeval *tv, int is_pselect);
int dsock_ready_epoll(int epfd, struct epoll_event *ev, int max, int timeout_ms,
		      const struct timespec *t, const sigset_t *m, int kind);

enum { DSOCK_EPW_WAIT, DSOCK_EPW_PWAIT, DSOCK_EPW_PWAIT2 };

#endif

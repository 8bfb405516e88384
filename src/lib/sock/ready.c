#include "lib/sock/ready.h"
#include "lib/sock/epset.h"
#include "lib/sock/kspin.h"
#include "lib/sock/light.h"
#include "lib/sock/poke.h"
#include "lib/sock/sock.h"
#include "lib/sock/watch.h"
#include "lib/base/real.h"
#include "lib/base/sysret.h"
#include "lib/transport/transport.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sched.h>

_Atomic long dsock_hidden_readable;
_Atomic long dsock_fastpath_conns;
_Atomic int dsock_sleepers;
_Atomic int dsock_bell_sleepers;
__thread unsigned dsock_sleep_gen;

#define KERNEL_LOOK_NS 1000LL       /* a spinning epoll asks the kernel this often, */
#define KERNEL_LOOK_MAX_NS 8000LL   /* or up to this while its looks find nothing */
#define SKIP_LOOKS 4                /* hidden data found without it, in a row at most */
#define PARK_SLICE_NS 5000000LL     /* a sleeping epoll looks at parked writers this often */

int dsock_ready_spurious_in(int fd)
{
	const struct dsock_transport *tp;
	struct dsock_sock *s = dsock_sock_carried(fd, &tp);
	int r;

	if (!s)
		return 0;
	r = tp->spurious_in && tp->spurious_in(s, fd);
	dsock_sock_put(s);
	return r;
}

int dsock_tp_writable(struct dsock_sock *s, int fd, const struct dsock_transport *tp)
{
	if (!tp->writable)
		return -1;
	int w = tp->writable(s, fd);
	if (w)
		return w;
	if (tp->want_space)
		tp->want_space(s);
	return 0;
}

/* A transport's socket: dsock_tp_writable, or -1 if the kernel carries fd. */
static int writable_view(int fd)
{
	const struct dsock_transport *tp;
	struct dsock_sock *s = dsock_sock_carried(fd, &tp);
	int w;

	if (!s)
		return -1;
	w = dsock_tp_writable(s, fd, tp);
	dsock_sock_put(s);
	return w;
}

/* An event of a writer whose kernel registration has our EPOLLIN in it:
 * one that waits for EPOLLOUT alone, edge-triggered (ready.h), or one
 * parked while its transport has no room (epset.c).  The IN is taken out again
 * unless the application asked for it and it is more than tokens (a
 * space token, drained); EPOLLOUT says whether the transport has room, and a
 * parked registration goes back to the kernel as it was once it has (or
 * once the kernel carries the socket: then the kernel's EPOLLOUT, which
 * it did not watch meanwhile, is reported for the send to tell). */
static unsigned writer_view(int epfd, uint64_t data, int fd, const struct dsock_epmember *mb, unsigned events)
{
	int w;

	if ((events & EPOLLIN) && (dsock_ready_spurious_in(fd) || !(mb->events & EPOLLIN)))
		events &= ~(unsigned)(EPOLLIN | EPOLLRDNORM);
	w = writable_view(fd);
	if (w) {
		if (mb->parked)
			dsock_epset_unpark(epfd, data);
		if (w > 0 || mb->parked)
			events |= mb->events & (EPOLLOUT | EPOLLWRNORM);
		if (w > 0)
			events |= (unsigned)w & (EPOLLERR | EPOLLHUP);
	} else {
		events &= ~(unsigned)(EPOLLOUT | EPOLLWRNORM);
	}
	return events;
}

/* The events of a registration whose socket's transport has waits: the
 * transport's view now (the kernel's events were only wake-ups). */
static unsigned watched_view(int epfd, uint64_t data, const struct dsock_epmember *mb)
{
	unsigned want = mb->events & ~(unsigned)(EPOLLET | EPOLLONESHOT | EPOLLWAKEUP | EPOLLEXCLUSIVE), ev;

	if (mb->disarmed)
		return 0;
	ev = (unsigned short)dsock_ready_poll_fd(mb->fd, (short)want);
	ev &= want | EPOLLERR | EPOLLHUP;
	/* edge-triggered: readable once per arrival, as the kernel reports
	 * it (a wake-up of the transport's own, a header of its protocol or
	 * a registration moved between its fds, brings no data) */
	if ((mb->events & EPOLLET) && (ev & EPOLLIN) && !(ev & (EPOLLERR | EPOLLHUP)) &&
	    !dsock_epset_arrived(epfd, data, dsock_ready_rx_mark(mb->fd)))
		ev &= ~(unsigned)(EPOLLIN | EPOLLRDNORM);
	/* a one-shot part the kernel disarmed for a wake-up that meant
	 * nothing is armed again; one reported disarms them all */
	if (mb->events & EPOLLONESHOT)
		dsock_epset_oneshot(epfd, data, ev != 0);
	return ev;
}

/* The tombstones when this thread's last kernel call on a set began
 * (eghost.c), and whether its filter dropped a ghost's event since. */
static __thread uint64_t ghost_since;
static __thread int ghost_dropped;

/* The events of registration (fd, events) that fd is ready for now: an
 * event the ghosts' tombstones could not place stands for these only. */
static unsigned ready_now(int fd, unsigned events)
{
	struct pollfd p = { .fd = fd, .events = (short)(events & (EPOLLIN | EPOLLOUT | EPOLLPRI | EPOLLRDHUP)) };

	if (dsock_ready_poll(&p, 1, NULL, NULL, 0, 0) <= 0)
		return 0;
	/* (poll's bits are epoll's) */
	return (unsigned)p.revents & (events | EPOLLERR | EPOLLHUP);
}

/* Drops the events of ghosts, the IN of events that are only stale tokens,
 * and the IN we added, and a level-triggered OUT while there is no room
 * (parking it); returns how many events remain. */
static int filter_spurious(int epfd, struct epoll_event *ev, int n)
{
	int kept = 0, added = atomic_load_explicit(&dsock_epoll_in_added, memory_order_relaxed) > 0 ||
				   atomic_load_explicit(&dsock_epoll_watched, memory_order_relaxed) > 0;
	int ghosts = atomic_load_explicit(&dsock_epoll_ghosts, memory_order_relaxed) > 0 ||
		     dsock_ghost_since() != ghost_since;

	for (int i = 0; i < n; i++) {
		struct dsock_epmember mb = { .fd = -1 };
		uint64_t data = ev[i].data.u64;
		unsigned held = 0;
		int g = ghosts ? dsock_epset_ghost_event(epfd, data, ghost_since, &mb.fd, &held) : 0;
		if (g == DSOCK_GHOST_UNSURE)
			g = !(ev[i].events = ready_now(mb.fd, held));
		if (g) {
			ghost_dropped = 1;
			continue; /* deleted by the application (not kept) */
		}
		if ((ev[i].events & (EPOLLIN | EPOLLOUT)) || added)
			dsock_epset_lookup(epfd, data, &mb);
		if (mb.watched) {
			/* its parts in the kernel share the data: one report */
			int dup = 0;
			for (int j = 0; j < kept && !dup; j++)
				dup = ev[j].data.u64 == data;
			ev[i].events = dup ? 0 : watched_view(epfd, data, &mb);
		} else if (mb.in_added || mb.parked) {
			ev[i].events = writer_view(epfd, data, mb.fd, &mb, ev[i].events);
		} else {
			/* (a nested set's hidden data joins as the hidden events) */
			if ((ev[i].events & EPOLLIN) &&
			    (mb.set ? !dsock_epset_confirm(mb.fd) : dsock_ready_spurious_in(mb.fd)))
				ev[i].events &= ~(unsigned)(EPOLLIN | EPOLLRDNORM);
			/* park first, then ask for room and look again: room
			 * freed in between still sends its token */
			if ((ev[i].events & EPOLLOUT) && !(mb.events & (EPOLLET | EPOLLONESHOT)) &&
			    writable_view(mb.fd) == 0 && dsock_epset_park(epfd, data)) {
				if (writable_view(mb.fd) == 0)
					ev[i].events &= ~(unsigned)(EPOLLOUT | EPOLLWRNORM);
				else
					dsock_epset_unpark(epfd, data);
			}
		}
		if (ev[i].events)
			ev[kept++] = ev[i];
	}
	return kept;
}

/* Events need a look: tokens may be among them, or IN we added, or a
 * ghost's (one that ended since the kernel's call began too). */
static int needs_filter(void)
{
	return atomic_load_explicit(&dsock_fastpath_conns, memory_order_relaxed) ||
	       atomic_load_explicit(&dsock_epoll_in_added, memory_order_relaxed) ||
	       atomic_load_explicit(&dsock_epoll_watched, memory_order_relaxed) ||
	       atomic_load_explicit(&dsock_epoll_ghosts, memory_order_relaxed) || dsock_ghost_since() != ghost_since;
}

/* This thread's last look at the kernel's readiness of an epoll set: which
 * set, when (ns, 0 unknown), and how many looks at hidden data alone since. */
static __thread int looked_epfd = -1;
static __thread long long looked_ns, look_every = KERNEL_LOOK_NS;
static __thread unsigned looks_skipped;

/* Whether hidden data found now may go back without the kernel's events: a
 * subset of the ready events, as epoll may return, while this thread asked
 * the kernel about this set less than KERNEL_LOOK_NS ago (a spinning
 * caller knows the time: now), or skipped it fewer than SKIP_LOOKS times
 * in a row (a caller that does not: no clock read).  A kernel epoll_wait
 * after every find would lengthen each ping-pong round trip. */
static int kernel_look_skippable(int epfd, long long now)
{
	if (epfd != looked_epfd)
		return 0;
	if (now ? now - looked_ns >= look_every : looks_skipped >= SKIP_LOOKS)
		return 0;
	looks_skipped++;
	return 1;
}

/* ---- leases renewed between looks (ready.h) ------------------------------ */
__thread int64_t dsock_renew_at; /* 0: this thread made no look since it slept */
#define RENEW_NS 20000LL /* under half the shortest lease (50 us) */

void dsock_poller_renew(void)
{
	int64_t now = dsock_fast_ns();

	if (now < dsock_renew_at)
		return;
	dsock_renew_at = now + RENEW_NS;
	dsock_transports_collect(now);
}

void dsock_sleep_begin(void)
{
	atomic_fetch_add(&dsock_sleepers, 1);
	dsock_renew_at = 0;
	dsock_transports_before_sleep(0);
}

/* A bell sleeper (*bell) whose set no longer holds the bell: the links
 * stay armed for a bell nobody here waits on, rung perhaps and never rung
 * again, so it sleeps on tokens from now on (the bells end, the queues
 * taken).  1 if so. */
static int bell_lost(int epfd, int *bell)
{
	if (!*bell || dsock_light_belled(epfd))
		return 0;
	dsock_sleep_end(1);
	dsock_sleep_begin();
	*bell = 0;
	return 1;
}

/* The signal mask of the epoll_pwait whose spin looks now (NULL: none). */
static __thread const sigset_t *look_mask;

static int kernel_look(int epfd, int kfd, struct epoll_event *ev, int max, long long now)
{
	ghost_since = dsock_ghost_since();
	int n = look_mask ? dsock_real.epoll_pwait(kfd, ev, max, 0, look_mask) : dsock_real.epoll_wait(kfd, ev, max, 0),
	    poked;
	/* (a poke's hidden data is what our caller adds anyway; a ring's
	 * entries are taken at this look or the next, before any sleep) */
	if (n > 0 && atomic_load_explicit(&dsock_pokes, memory_order_relaxed))
		n = dsock_poke_take(epfd, ev, n, &poked, 0);
	if (n > 0 && atomic_load_explicit(&dsock_belled_sets, memory_order_relaxed))
		n = dsock_bell_take(ev, n);
	looked_epfd = epfd;
	looked_ns = now;
	if (n > 0)
		look_every = KERNEL_LOOK_NS;
	else if (n == 0 && look_every < KERNEL_LOOK_MAX_NS)
		look_every *= 2;
	looks_skipped = 0;
	return n;
}

/* Filters the n events of a kernel call that filled max; when ghosts'
 * events took room, the kernel is asked again at once (each such ghost
 * left its set), as its one call would have filled it: events that the
 * first call gave already are left out. */
static int filter_full(int epfd, int kfd, struct epoll_event *ev, int n, int max)
{
	int full = n == max;

	ghost_dropped = 0;
	n = filter_spurious(epfd, ev, n);
	/* (each round takes at least one ghost out of the kernel's set) */
	while (full && ghost_dropped && n < max) {
		int poked, got;
		ghost_dropped = 0;
		ghost_since = dsock_ghost_since();
		got = dsock_real.epoll_wait(kfd, ev + n, max - n, 0);
		if (got <= 0)
			break;
		full = got == max - n;
		if (atomic_load_explicit(&dsock_pokes, memory_order_relaxed))
			got = dsock_poke_take(epfd, ev + n, got, &poked, 0);
		if (atomic_load_explicit(&dsock_belled_sets, memory_order_relaxed))
			got = dsock_bell_take(ev + n, got);
		got = filter_spurious(epfd, ev + n, got);
		/* a registration reported already: its events join that report
		 * (an edge taken now is reported, not lost); registrations that
		 * share the data are reported once each */
		for (int i = n; i < n + got;) {
			int j = 0, same = 0;
			for (int k = 0; k < i; k++)
				if (ev[k].data.u64 == ev[i].data.u64 && !same++)
					j = k;
			if (same && same >= dsock_epset_data_holders(epfd, ev[i].data.u64)) {
				ev[j].events |= ev[i].events;
				ev[i] = ev[n + --got];
			} else {
				i++;
			}
		}
		n += got;
	}
	return n;
}

/* The kernel's events now (no waiting), with the hidden ones added.
 * kernel_anyway 0: when nothing hidden is readable, 0 without asking the
 * kernel (a caller that waits in the kernel next hears it there, and a
 * look before each sleep would be an extra system call per sleep).  The
 * hidden ones are looked at once: an edge-triggered
 * member's edge is used up by the look.  now: the time when the caller
 * spins (0: it does not know it); poller 0: the caller is about to sleep
 * (no transport may count on it to look again). */
static int epoll_now(int epfd, int kfd, struct epoll_event *ev, int max, int kernel_anyway, long long now, int poller)
{
	struct epoll_event hid[64];
	int n, extra = 0, wants_kernel = 0;
	int64_t at = poller ? (now ? now : dsock_fast_ns()) : 0;

	/* what producers announced: their sockets join the hidden ones (a
	 * poller, one not about to sleep, lets them announce on, and renews
	 * that from its data calls until its next look) */
	dsock_transports_collect(at);
	dsock_renew_at = at ? at + RENEW_NS : 0;
	if (atomic_load_explicit(&dsock_hidden_readable, memory_order_relaxed) > 0)
		extra = dsock_epset_hidden(epfd, hid, max < 64 ? max : 64, &wants_kernel);
	if (!extra && !kernel_anyway)
		return 0;
	if (extra && !kernel_anyway && !wants_kernel && kernel_look_skippable(epfd, now)) {
		memcpy(ev, hid, (size_t)extra * sizeof(*ev));
		return extra;
	}
	n = kernel_look(epfd, kfd, ev, max, now);
	if (n < 0)
		return -errno;
	if (needs_filter())
		n = filter_full(epfd, kfd, ev, n, max);
	for (int i = 0; i < extra; i++) {
		int j;
		for (j = 0; j < n && ev[j].data.u64 != hid[i].data.u64; j++)
			;
		if (j < n)
			ev[j].events |= EPOLLIN;
		else if (n < max)
			ev[n++] = hid[i];
	}
	return n;
}

struct epoll_args {
	int epfd, kfd, max;
	struct epoll_event *ev;
};

/* A look at the set without waiting, for the spin on kernel sockets
 * (kspin.h). */
static int epoll_look(void *arg)
{
	struct epoll_args *a = arg;

	return epoll_now(a->epfd, a->kfd, a->ev, a->max, 1, 0, 0);
}

int dsock_ready_epoll(int epfd, struct epoll_event *ev, int max, int timeout_ms,
		      const struct timespec *t, const sigset_t *m, int kind)
{
	/* a dup of the set: the records know it by its key (ealias.c); the
	 * kernel is asked by the application's number (the key may be closed
	 * meanwhile, its records handed to another number) */
	int n, kfd = epfd;

	epfd = dsock_epset_key(epfd);
	int blocking = kind == DSOCK_EPW_PWAIT2 ? !t || t->tv_sec || t->tv_nsec : timeout_ms != 0;

	if (max > 0 && atomic_load_explicit(&dsock_hidden_readable, memory_order_relaxed) > 0 &&
	    ((n = epoll_now(epfd, kfd, ev, max, !blocking, 0, 1)) != 0 || !blocking))
		return n;
	/* With fast-path connections, poll the kernel's readiness (and the
	 * buffers of lingering receivers) for a moment before sleeping: a token
	 * then lands on an awake core instead of paying a cross-core wake-up.
	 * The kernel's epoll does all the work, so every epoll
	 * semantic stays its own. */
	/* no connection on a transport: a set holding connections spins on
	 * the kernel first (kspin.h); an epoll_pwait's or epoll_pwait2's
	 * looks hold its signal mask, as its own call does (a signal it lets
	 * in ends the wait with EINTR), and its sleep gets the time left */
	struct timespec t_left;
	int spin_ms = kind == DSOCK_EPW_PWAIT2 ? (t ? (int)(t->tv_sec * 1000 + t->tv_nsec / 1000000) : -1) : timeout_ms;
	if (blocking && max > 0 && spin_ms != 0 &&
	    !atomic_load_explicit(&dsock_fastpath_conns, memory_order_relaxed) && dsock_kspin_on &&
	    dsock_light_capable(epfd)) {
		long long t0 = dsock_mono_ns();
		look_mask = kind == DSOCK_EPW_WAIT ? NULL : m;
		n = dsock_kspin_looks(epoll_look, &(struct epoll_args){ epfd, kfd, max, ev }, &spin_ms);
		look_mask = NULL;
		if (n != 0)
			return n;
		if (kind != DSOCK_EPW_PWAIT2) {
			timeout_ms = spin_ms;
		} else if (t) {
			t = dsock_ts_left(t, t0, &t_left);
		}
	}
	struct dsock_light light;
	/* no connection on a transport yet: a cold sleep, promoted by the
	 * first attach (light.h) */
	int cold = blocking && max > 0 && atomic_load(&dsock_fastpath_conns) == 0 &&
		   dsock_light_enter_cold(epfd, &light);
	int fast = !cold && max > 0 && atomic_load_explicit(&dsock_fastpath_conns, memory_order_relaxed) > 0;
	/* a set that holds nothing a transport may carry: no spin, and a
	 * sleep that ends no lease (light.h) */
	int is_light = blocking && fast && dsock_light_enter(epfd, &light);
	int heavy = blocking && fast && !is_light;
	if (is_light)
		dsock_renew_at = 0;
	if (heavy) {
		long long t0 = dsock_mono_ns(), tn = t0;
		long long kernel_at = epfd == looked_epfd && looked_ns ? looked_ns + look_every : t0;
		long long budget = dsock_spin_ns ? dsock_spin_ns : -1;
		int spins = 0;
		/* (no spin: the look after the settle below is the only one).
		 * The buffers of lingering receivers are looked at on every round,
		 * the kernel's readiness (tokens, plain fds) once per
		 * KERNEL_LOOK_NS: an epoll_wait each round would make every
		 * round a system call long, and hidden data waits half a round
		 * on average. */
		for (; tn - t0 <= budget; spins++) {
			int kernel = tn >= kernel_at;
			if (kernel)
				kernel_at = tn + look_every;
			if ((n = epoll_now(epfd, kfd, ev, max, kernel, tn, 1)) != 0) {
				if (spins)
					dsock_spin_outcome(1);
				return n;
			}
			if (!spins) {
				/* a wait that will sleep at once owes nobody a yield */
				if (!dsock_spin_worth())
					break;
				if (dsock_spin_ns)
					dsock_spin_courtesy(tn);
			}
			tn = dsock_mono_ns();
			if (timeout_ms > 0 && tn - t0 >= timeout_ms * 1000000LL)
				break;
			/* past the pure spin every round yields, and every round
			 * does while the peer awaited last ran on this CPU: with
			 * more runnable threads than cores the others run in
			 * it, and the wait goes on (spin.h) */
			if (tn - t0 >= DSOCK_PURE_SPIN_NS || dsock_spin_awaited_here())
				sched_yield();
		}
		if (spins)
			dsock_spin_outcome(0);
	}
	/* a sleep on a set that holds the bell: producers ring it once per
	 * burst instead of a token per message (light.h) */
	int bell = heavy && dsock_light_bell(epfd);
	if (heavy) {
		/* about to sleep: end the leases (or arm the bell), register
		 * (poke.h), then look once more */
		if (bell)
			dsock_bell_sleep_begin(epfd);
		else
			dsock_sleep_begin();
		dsock_light_enter_counted(epfd, &light);
		/* the set lost the bell before we were registered (a dup, a
		 * nesting in another thread): a plain sleep (one after we
		 * were is poked: light.c) */
		bell_lost(epfd, &bell);
		if ((n = epoll_now(epfd, kfd, ev, max, 0, 0, 0)) != 0 || (n = dsock_epset_parked_ready(epfd, ev, max)) != 0) {
			dsock_light_leave(&light);
			dsock_sleep_end(bell);
			return n;
		}
	}
	/* the deadline, in ns (-1: none) */
	long long deadline = kind == DSOCK_EPW_PWAIT2 ? (t ? dsock_mono_ns() + t->tv_sec * 1000000000LL + t->tv_nsec : -1)
						     : timeout_ms < 0 ? -1 : dsock_mono_ns() + timeout_ms * 1000000LL;
	struct timespec left_ts;
	long long wait_start = heavy ? dsock_mono_ns() : 0;
	for (;;) {
		/* the set lost the bell while we slept (a dup, a nesting: it
		 * pokes us): a look before the sleep on tokens */
		if (bell_lost(epfd, &bell) && (n = epoll_now(epfd, kfd, ev, max, 0, 0, 0)) != 0)
			break;
		/* writers parked while there is no room: a slice at a time
		 * (their space token may have gone down another thread's drain) */
		int sliced = blocking && atomic_load_explicit(&dsock_epoll_parked, memory_order_relaxed) > 0 &&
			     (deadline < 0 || deadline - dsock_mono_ns() > PARK_SLICE_NS);
		ghost_since = dsock_ghost_since();
		if (sliced) {
			struct timespec sl = { 0, PARK_SLICE_NS };
			n = dsock_real.epoll_pwait2(kfd, ev, max, &sl, kind == DSOCK_EPW_WAIT ? NULL : m);
			if (n == 0 && (n = dsock_epset_parked_ready(epfd, ev, max)) == 0)
				goto again; /* (what is left of the timeout) */
		} else if (kind == DSOCK_EPW_PWAIT2) {
			n = dsock_real.epoll_pwait2(kfd, ev, max, t, m);
		} else if (kind == DSOCK_EPW_PWAIT) {
			n = dsock_real.epoll_pwait(kfd, ev, max, timeout_ms, m);
		} else {
			n = dsock_real.epoll_wait(kfd, ev, max, timeout_ms);
		}
		if (n <= 0)
			break; /* (the timeout, or an error) */
		/* (the records' key may have closed meanwhile, handing them to
		 * another number of the set: ealias.c) */
		epfd = dsock_epset_key(kfd);
		if (atomic_load_explicit(&dsock_pokes, memory_order_relaxed)) {
			/* poked: what it stands for is hidden data */
			int poked;
			n = dsock_poke_take(epfd, ev, n, &poked, blocking);
			if (poked && n == 0) {
				if ((n = epoll_now(epfd, kfd, ev, max, 0, 0, 0)) != 0 || !blocking)
					break;
				goto again;
			}
		}
		int rang = 0;
		if (n > 0 && atomic_load_explicit(&dsock_belled_sets, memory_order_relaxed))
			n = dsock_events_take(ev, n, DSOCK_BELL_DATA, &rang);
		/* a token that outlived its data must not be reported */
		if (n > 0 && needs_filter())
			n = filter_full(epfd, kfd, ev, n, max);
		if (rang && n > 0 && bell)
			dsock_bell_pass_on(max, max); /* (its announcements wait for our next look) */
		if (rang && n == 0) {
			/* rung: what producers announced is in the queues;
			 * with nothing else to report, armed again (taking
			 * them) and a look, as before the first sleep.  Other
			 * events: the next look takes them.  (Never back to
			 * sleep without: a ring left unanswered stays rung,
			 * and nothing rings it again.) */
			if (bell)
				dsock_bell_arm(epfd);
			else
				dsock_bell_unclaimed();
			if ((n = epoll_now(epfd, kfd, ev, max, 0, 0, 0)) != 0 || !blocking) {
				if (bell)
					dsock_bell_pass_on(n, max);
				break;
			}
			goto again;
		}
		if (n != 0 || !blocking)
			break;
	again:
		/* all spurious: wait again for what is left of the timeout (a
		 * peer sending tokens without data must not keep us forever) */
		if (deadline >= 0) {
			long long rest = deadline - dsock_mono_ns();
			if (rest <= 0)
				break;
			timeout_ms = (int)((rest + 999999) / 1000000);
			left_ts.tv_sec = rest / 1000000000LL;
			left_ts.tv_nsec = rest % 1000000000LL;
			t = &left_ts;
		}
	}
	int e = errno;
	if (heavy || is_light || cold)
		dsock_light_leave(&light);
	if (heavy) {
		dsock_sleep_end(bell);
		/* (a sleep the bell ends: "Going back when the consumer
		 * sleeps" does not count it) */
		if (!bell)
			dsock_wait_end(wait_start);
	}
	return n < 0 ? -e : n;
}

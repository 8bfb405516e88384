/* poll, ppoll, select and pselect on sockets a transport carries
 * (ready.h): the kernel's answer, with what the transports know added. */
#include "lib/sock/ready.h"
#include "lib/sock/epset.h"
#include "lib/sock/kspin.h"
#include "lib/base/clock.h"
#include "lib/sock/light.h"
#include "lib/sock/sock.h"
#include "lib/base/real.h"
#include "lib/base/sysret.h"
#include "lib/transport/transport.h"

#include <errno.h>
#include <limits.h>
#include <linux/tcp.h> /* the kernel's tcp_info: byte counters */
#include <netinet/in.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

#define WAITS_SLICE_MS 10 /* a sleeping poll asks the transports' waits again this often */

/* k, fd's entry: the kernel's part of its transport's waits (k's events
 * for fd itself, the other fds appended at more); returns how many were
 * appended. */
static int add_waits(struct pollfd *k, struct pollfd *more, short events)
{
	const struct dsock_transport *tp;
	struct dsock_sock *s = dsock_sock_carried(k->fd, &tp);
	struct pollfd w[DSOCK_WAITS_MAX];
	int nw, added = 0;

	if (!s)
		return 0;
	nw = tp->waits ? tp->waits(s, k->fd, events, w) : 0;
	dsock_sock_put(s);
	if (nw <= 0)
		return 0;
	k->events = 0;
	for (int j = 0; j < nw; j++) {
		if (w[j].fd == k->fd)
			k->events = w[j].events;
		else
			more[added++] = (struct pollfd){ .fd = w[j].fd, .events = w[j].events };
	}
	return added;
}

short dsock_ready_poll_fd(int fd, short events)
{
	const struct dsock_transport *tp;
	struct dsock_sock *s = dsock_sock_carried(fd, &tp);
	struct pollfd p = { .fd = fd, .events = events };
	short ev;

	if (s && tp->poll) {
		ev = tp->poll(s, fd, events);
		dsock_sock_put(s);
		return (short)(ev & (events | POLLERR | POLLHUP));
	}
	if (s)
		dsock_sock_put(s);
	/* gone back to the kernel meanwhile: its word */
	return dsock_real.poll(&p, 1, 0) == 1 ? p.revents : 0;
}

uint64_t dsock_ready_rx_mark(int fd)
{
	const struct dsock_transport *tp;
	struct dsock_sock *s = dsock_sock_carried(fd, &tp);
	struct tcp_info ti;
	socklen_t tl = sizeof(ti);
	uint64_t mark = 0;

	if (!s)
		return 0;
	if (dsock_real.getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 &&
	    tl >= offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti.tcpi_bytes_received))
		mark = ti.tcpi_bytes_received + (tp->rx_mark ? tp->rx_mark(s) : 0);
	dsock_sock_put(s);
	return mark;
}

/* What a transport says about fd: 1 hidden readable, 2 not writable, 4 its
 * waits stand for it (add_waits, dsock_ready_poll_fd), 8 an error kept.  An
 * epoll set is readable when a member's data is hidden (the kernel shows
 * the set's readiness from its members' kernel readiness only). */
static int transport_view(int fd, short events)
{
	const struct dsock_transport *tp;
	struct dsock_sock *s;
	int v = 0;

	if (!dsock_fdt_peek(fd))
		return (events & (POLLIN | POLLRDNORM)) && dsock_epset_readable(fd);
	if (!(s = dsock_sock_carried(fd, &tp)))
		return 0;
	if (tp->waits) {
		dsock_sock_put(s);
		return 4;
	}
	if ((events & (POLLIN | POLLRDNORM)) && tp->hidden_readable && tp->hidden_readable(s))
		v |= 1;
	if ((events & (POLLOUT | POLLWRNORM)) && dsock_tp_writable(s, fd, tp) == 0)
		v |= 2;
	if (tp->kept_error && tp->kept_error(s))
		v |= 8;
	dsock_sock_put(s);
	return v;
}

/* 1 if a socket reported readable went onto a transport during the
 * kernel's poll (the pairing's answer came meanwhile). */
static int moved_meanwhile(const struct pollfd *fds, nfds_t n)
{
	for (nfds_t i = 0; i < n; i++) {
		struct dsock_sock *s = fds[i].fd >= 0 && (fds[i].revents & (POLLIN | POLLRDNORM)) ?
					       dsock_fdt_peek(fds[i].fd) : NULL;
		if (s && __atomic_load_n(&s->tp, __ATOMIC_ACQUIRE))
			return 1;
	}
	return 0;
}

/* 1 if an fd of fds is a socket a transport carries (or may: pending),
 * or an epoll set. */
static int carried(const struct pollfd *fds, nfds_t n)
{
	for (nfds_t i = 0; i < n; i++) {
		struct dsock_sock *s = fds[i].fd >= 0 ? dsock_fdt_peek(fds[i].fd) : NULL;
		if (s ? __atomic_load_n(&s->tp, __ATOMIC_ACQUIRE) != NULL : fds[i].fd >= 0 && dsock_epset_is_set(fds[i].fd))
			return 1;
	}
	return 0;
}

static int64_t mono_ms(void)
{
	return dsock_mono_ns() / 1000000;
}

int dsock_ready_poll(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *m, int is_ppoll,
		     int timeout_ms)
{
	int any = 0;
	int64_t end;

	int waits = atomic_load_explicit(&dsock_waits_socks, memory_order_relaxed) > 0;
	/* an epoll set polled as a whole holds no ghosts (epset.h) */
	if (dsock_sets_watched() && dsock_light_any())
		for (nfds_t i = 0; i < n; i++)
			if (fds[i].fd >= 0 && !dsock_fdt_peek(fds[i].fd))
				dsock_epset_no_ghosts(fds[i].fd);

	if (atomic_load_explicit(&dsock_fastpath_conns, memory_order_relaxed) > 0 ||
	    atomic_load_explicit(&dsock_hidden_readable, memory_order_relaxed) > 0 || waits)
		any = carried(fds, n);
	if (is_ppoll)
		timeout_ms = t ? (int)(t->tv_sec * 1000 + t->tv_nsec / 1000000) : -1;
	/* only sockets the kernel carries: spun on first (kspin.h); a ppoll's
	 * (and pselect's) looks are ppolls with its mask, which holds during
	 * each of them as during its own call, and its sleep gets the time
	 * left */
	struct timespec t_left;
	if (!any) {
		long long t0 = is_ppoll && t && timeout_ms > 0 ? dsock_mono_ns() : 0;
		int r = dsock_kspin_poll(fds, n, is_ppoll, m, &timeout_ms);
		if (r != 0)
			return r;
		if (t0)
			t = dsock_ts_left(t, t0, &t_left);
	}
	/* (read only where a time left may be asked: a poll that does not
	 * wait, or waits for ever, reads no clock before the kernel's) */
	int64_t start = timeout_ms > 0 ? mono_ms() : 0;
	/* no connection on a transport yet: a cold sleep, promoted by the
	 * first attach before its producer may announce (light.h).  One
	 * attached since the look above (during the spin, say): that look
	 * is asked again, as one of these fds may be on a transport now */
	struct dsock_light light;
	int cold = 0;
	if (!any && timeout_ms != 0 &&
	    !(atomic_load(&dsock_fastpath_conns) == 0 && (cold = dsock_light_enter_cold(-1, &light))))
		any = carried(fds, n);
	if (!any) {
		int r = (int)SYSRET(is_ppoll ? dsock_real.ppoll(fds, n, t, m) : dsock_real.poll(fds, n, timeout_ms));
		if (cold)
			dsock_light_leave(&light);
		if (r <= 0 || atomic_load_explicit(&dsock_fastpath_conns, memory_order_relaxed) == 0 ||
		    !moved_meanwhile(fds, n))
			return r;
		/* a socket went onto a transport while this slept: its kernel
		 * readiness may be a wake-up token, judged below for the time
		 * left */
	}
	end = timeout_ms < 0 ? INT64_MAX : (start ? start : mono_ms()) + timeout_ms;
	for (;;) {
		struct pollfd k[n + (waits ? n * (DSOCK_WAITS_MAX - 1) : 0) + 2]; /* (each: its own, and the others of its waits) */
		int view[n ? n : 1], hidden_in = 0, r, ready = 0, e, waited = 0;
		nfds_t nk = n;
		int64_t left;

		/* we may sleep: arm the bell, or end the leases, before
		 * looking (ready.h, light.h) */
		int sleeping = timeout_ms != 0, bell = 0, bell_fd = -1, poke_fd = -1;
		if (sleeping && !(bell = dsock_poll_bell_begin(&bell_fd, &poke_fd)))
			dsock_sleep_begin();
		for (nfds_t i = 0; i < n; i++) {
			k[i] = fds[i];
			view[i] = fds[i].fd >= 0 ? transport_view(fds[i].fd, fds[i].events) : 0;
			if (view[i] & 4) {
				/* its transport's wait fds stand for it */
				nk += add_waits(&k[i], &k[nk], fds[i].events);
				waited = 1;
				continue;
			}
			hidden_in |= view[i] & 1;
			/* waiting for space: the consumer's token makes it readable;
			 * a consumer that is gone shows as the kernel's FIN or error */
			if (view[i] & 2)
				k[i].events = (short)((k[i].events & ~(POLLOUT | POLLWRNORM)) | POLLIN | POLLRDHUP);
		}
		left = hidden_in ? 0 : end == INT64_MAX ? -1 : end - mono_ms();
		if (left < 0 && end != INT64_MAX)
			left = 0; /* past the deadline: -1 waits forever */
		/* a transport's waits may change while we sleep (epoll
		 * registrations follow at once, dsock_sock_rewatch): looked at
		 * again every WAITS_SLICE_MS */
		if (waited && (left < 0 || left > WAITS_SLICE_MS))
			left = WAITS_SLICE_MS;
		long long wait_start = sleeping && left ? dsock_mono_ns() : 0;
		/* (after the callers' fds: their revents stay where they were) */
		nfds_t nb = nk;
		if (bell) {
			k[nk++] = (struct pollfd){ .fd = bell_fd, .events = POLLIN };
			k[nk++] = (struct pollfd){ .fd = poke_fd, .events = POLLIN };
		}
		if (is_ppoll) {
			struct timespec ts = { left / 1000, (left % 1000) * 1000000 };
			r = dsock_real.ppoll(k, nk, left < 0 ? NULL : &ts, m);
		} else {
			r = dsock_real.poll(k, nk, (int)left);
		}
		e = errno;
		int rang = 0;
		if (bell) {
			/* (a sleep the bell ends is no sleepy read: ready.c) */
			rang = r > 0 && ((k[nb].revents | k[nb + 1].revents) & POLLIN);
			dsock_poll_bell_end(bell, r > 0 && (k[nb + 1].revents & POLLIN));
		} else if (sleeping) {
			atomic_fetch_sub(&dsock_sleepers, 1);
			if (left)
				dsock_wait_end(wait_start);
		}
		if (r < 0)
			return -e;
		/* rung or poked: the views are older than what woke us; the
		 * next round arms the bell again (taking the queues) and looks */
		if (rang)
			continue;
		for (nfds_t i = 0; i < n; i++) {
			/* (a call that did not sleep, or that a bell woke just
			 * before, may catch a reset half-way) */
			dsock_kspin_settle(&k[i]);
			short ev = k[i].revents;
			if (view[i] & 4) {
				ev = (short)((ev & POLLNVAL) | (ev & POLLNVAL ? 0 : dsock_ready_poll_fd(fds[i].fd, fds[i].events)));
				fds[i].revents = ev;
				ready += ev != 0;
				continue;
			}
			if (view[i] & 2) {
				/* our own IN and RDHUP; keep them only if asked for */
				if (!(fds[i].events & POLLIN))
					ev &= (short)~POLLIN;
				if (!(fds[i].events & POLLRDHUP))
					ev &= (short)~POLLRDHUP;
				/* writable once there is space, or once the peer is
				 * gone (the send then says how, as the kernel's would) */
				if ((k[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) ||
				    !(transport_view(fds[i].fd, fds[i].events & (POLLOUT | POLLWRNORM)) & 2))
					ev |= (short)(fds[i].events & (POLLOUT | POLLWRNORM));
			}
			if (view[i] & 8)
				ev |= POLLERR;
			if (view[i] & 1)
				ev |= (short)(fds[i].events & (POLLIN | POLLRDNORM));
			else if ((ev & (POLLIN | POLLRDNORM)) && !(ev & (POLLHUP | POLLERR)) &&
				 (dsock_fdt_peek(fds[i].fd) ? dsock_ready_spurious_in(fds[i].fd) :
				  dsock_epset_is_set(fds[i].fd) && !dsock_epset_confirm(fds[i].fd)))
				ev &= (short)~(POLLIN | POLLRDNORM);
			fds[i].revents = ev;
			ready += ev != 0;
		}
		if (ready || (end != INT64_MAX && mono_ms() >= end) || hidden_in)
			return ready;
	}
}

int dsock_ready_select(int n, fd_set *rd, fd_set *w, fd_set *e, const struct timespec *t,
		       const sigset_t *m, struct timeval *tv, int is_pselect)
{
	struct pollfd p[FD_SETSIZE];
	int np = 0, r, count = 0;

	/* an epoll set selected as a whole holds no ghosts (epset.h) */
	if (dsock_sets_watched() && dsock_light_any() && n > 0 && n <= FD_SETSIZE)
		for (int fd = 0; fd < n; fd++)
			if (((rd && FD_ISSET(fd, rd)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e))) &&
			    !dsock_fdt_peek(fd))
				dsock_epset_no_ghosts(fd);
	/* (a select that waits goes the poll way even before any connection
	 * is on a transport: it spins there, and sleeps cold, so that an
	 * attach meanwhile counts it as a sleeper: light.h) */
	int blocks = is_pselect ? !t || t->tv_sec || t->tv_nsec : !tv || tv->tv_sec || tv->tv_usec;
	/* (select takes microseconds past a second, as whole seconds more;
	 * pselect's timespec must be normalized) */
	int bad = is_pselect ? t && (t->tv_sec < 0 || t->tv_nsec < 0 || t->tv_nsec >= 1000000000L)
			     : tv && (tv->tv_sec < 0 || tv->tv_usec < 0);
	if (n < 0 || n > FD_SETSIZE || bad ||
	    (!blocks && atomic_load_explicit(&dsock_fastpath_conns, memory_order_relaxed) == 0 &&
	     atomic_load_explicit(&dsock_hidden_readable, memory_order_relaxed) == 0 &&
	     atomic_load_explicit(&dsock_waits_socks, memory_order_relaxed) == 0))
		return (int)SYSRET(is_pselect ? dsock_real.pselect(n, rd, w, e, t, m)
					      : dsock_real.select(n, rd, w, e, tv));
	/* select as poll, so both share the readiness logic; same results,
	 * same errors */
	for (int fd = 0; fd < n; fd++) {
		short ev = (short)((rd && FD_ISSET(fd, rd) ? POLLIN : 0) |
				   (w && FD_ISSET(fd, w) ? POLLOUT : 0) | (e && FD_ISSET(fd, e) ? POLLPRI : 0));
		if (ev)
			p[np++] = (struct pollfd){ .fd = fd, .events = ev };
	}
	if (is_pselect) {
		r = dsock_ready_poll(p, (nfds_t)np, t, m, 1, 0);
	} else {
		long long lms = tv ? (long long)tv->tv_sec * 1000 + (tv->tv_usec + 999) / 1000 : -1;
		int ms = lms > INT_MAX ? INT_MAX : (int)lms;
		r = dsock_ready_poll(p, (nfds_t)np, NULL, NULL, 0, ms);
		if (r >= 0 && tv && r == 0)
			tv->tv_sec = tv->tv_usec = 0; /* Linux reports the time left */
	}
	if (r < 0)
		return r;
	for (int i = 0; i < np; i++)
		if (p[i].revents & POLLNVAL)
			return -EBADF;
	if (rd) FD_ZERO(rd);
	if (w) FD_ZERO(w);
	if (e) FD_ZERO(e);
	for (int i = 0; i < np; i++) {
		short ev = p[i].revents;
		if (rd && (p[i].events & POLLIN) && (ev & (POLLIN | POLLHUP | POLLERR))) {
			FD_SET(p[i].fd, rd);
			count++;
		}
		if (w && (p[i].events & POLLOUT) && (ev & (POLLOUT | POLLERR))) {
			FD_SET(p[i].fd, w);
			count++;
		}
		if (e && (p[i].events & POLLPRI) && (ev & POLLPRI)) {
			FD_SET(p[i].fd, e);
			count++;
		}
	}
	return count;
}

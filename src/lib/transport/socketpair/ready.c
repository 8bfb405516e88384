/* Readiness on the socketpair transport: the peer's bytes arrive on the
 * pair, not on the application's socket, so a poller waits on both
 * (waits) and asks what they mean (poll). */
#include "lib/transport/socketpair/sp.h"
#include "lib/sock/sock.h"
#include "lib/base/real.h"
#include "lib/base/clock.h"

#include <errno.h>
#include <sched.h>
#include <time.h>
#include <poll.h>
#include <sys/socket.h>

#define IN_BITS (POLLIN | POLLRDNORM)
#define OUT_BITS (POLLOUT | POLLWRNORM | POLLWRBAND)

int sp_waits(struct dsock_sock *s, int fd, short events, struct pollfd *w)
{
	struct sp_conn *c = sp_conn(s);
	struct sp_shared *sh = c->sh;
	int pf = __atomic_load_n(&c->pairfd, __ATOMIC_ACQUIRE), n = 0;
	int paired = atomic_load(&sh->state) == SP_PAIRED && pf >= 0;
	int tx = atomic_load(&sh->tx), rx = atomic_load(&sh->rx);
	short pev = 0;

	/* the kernel's socket: its own events (our bytes before the switch,
	 * the peer's after its move back, FIN, RST, urgent data), except
	 * room to send while we send through the pair, and what the peer
	 * sends while we read the pair: its bytes there come after the
	 * pair's EOF (which wakes us), and an asynchronous pipe's EOF may
	 * come after them */
	short kev = events;
	if (paired && tx == SPTX_PAIR)
		kev &= (short)~OUT_BITS;
	if (paired && rx == SPRX_PAIR)
		kev &= (short)~(IN_BITS | POLLRDHUP);
	w[n++] = (struct pollfd){ .fd = fd, .events = kev };
	if (!paired)
		return n;
	/* the pair: the peer's headers and bytes until its EOF (which comes
	 * before the kernel's FIN: a wait for RDHUP alone wakes there too),
	 * and room */
	if ((events & (IN_BITS | POLLRDHUP)) && rx != SPRX_BACK)
		pev |= POLLIN;
	if ((events & OUT_BITS) && tx == SPTX_PAIR)
		pev |= POLLOUT;
	if (pev)
		n += c->pipe->waits(c, pf, pev, &w[n]);
	return n;
}

/* 1 if the pair has bytes to read (or reads 0 now: the application shut
 * its reading); 0 if not; -1 at its EOF or reset. */
static int pair_readable(struct sp_conn *c, int pf)
{
	char b;
	struct iovec v = { &b, 1 };
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1 };
	ssize_t r = c->pipe->recvmsg(c, pf, &m, MSG_PEEK | MSG_DONTWAIT);

	if (r > 0 || (r == 0 && !c->pipe->ended(c, pf)))
		return 1;
	return r == -EAGAIN ? 0 : -1;
}

/* The kernel's events for k.  An error or a hang-up seen without the
 * read hang-up a reset ends with may be a reset half-processed on another
 * CPU (the kernel sets the error, then the state, then the shutdown, and
 * wakes its pollers after): we are woken by the pair, which the peer
 * closed first, so its whole state is asked again a moment later.  While
 * this end reads the pair (settled: it has not reset the connection
 * itself), the half-processed state is the peer's reset, whose other CPU
 * may be preempted for milliseconds, so it is asked again for up to
 * SETTLE_NS; otherwise a few times only, since a connection this end reset
 * by connect(AF_UNSPEC) stays so.  An error that is no reset (a queued
 * timestamp, a soft ICMP error) shows the same way and stays: the long
 * asking is spent once until the state has changed (*spent). */
#define SETTLE_NS 20000000LL

static void kernel_events(struct pollfd *k, int settled, int *spent)
{
	short asked = k->events;
	int64_t until = 0;

	k->events |= POLLRDHUP;
	for (int i = 0;; i++) {
		if (dsock_real.poll(k, 1, 0) < 0)
			k->revents = 0;
		if (!(k->revents & (POLLERR | POLLHUP)) || (k->revents & POLLRDHUP)) {
			*spent = 0;
			break;
		}
		if (i >= 4 && (!settled || *spent))
			break;
		if (i < 4) {
			sched_yield();
			continue;
		}
		if (!until) {
			until = dsock_mono_ns() + SETTLE_NS;
		} else if (dsock_mono_ns() > until) {
			*spent = 1;
			break;
		}
		struct timespec ts = { 0, 50000 };
		nanosleep(&ts, NULL);
	}
	k->events = asked;
	k->revents &= (short)(asked | POLLERR | POLLHUP | POLLNVAL);
}

/* (data bytes taken, then the bytes waiting: the sum never goes back.
 * Waiting bytes count once the peer's headers are read, as they are data
 * then; a read between the two looks is looked at again) */
uint64_t sp_rx_mark(struct dsock_sock *s)
{
	struct sp_conn *c = sp_conn(s);
	int pf = c ? sp_pairfd(c) : -1;

	if (!c)
		return 0;
	for (int i = 0; i < 4; i++) {
		uint64_t got = atomic_load(&c->sh->pair_got);
		int rx = atomic_load(&c->sh->rx), n = 0;
		if (pf >= 0 && atomic_load(&c->sh->state) == SP_PAIRED && (rx == SPRX_KERNEL || rx == SPRX_PAIR))
			n = c->pipe->inq(c, pf);
		if (atomic_load(&c->sh->pair_got) == got)
			return got + (uint64_t)(n > 0 ? n : 0);
	}
	return 0; /* (unknown: reported) */
}

short sp_poll(struct dsock_sock *s, int fd, short events)
{
	struct sp_conn *c = sp_conn(s);
	struct sp_shared *sh = c->sh;
	struct pollfd k = { .fd = fd, .events = events };
	int pf, tx, rx;
	short out;

	sp_progress(c);
	pf = __atomic_load_n(&c->pairfd, __ATOMIC_ACQUIRE);
	if (atomic_load(&sh->state) != SP_PAIRED || pf < 0) {
		if (dsock_real.poll(&k, 1, 0) < 0)
			k.revents = 0;
		return k.revents;
	}
	if (pthread_mutex_trylock(&sh->rx_mu) != EBUSY) {
		sp_read_headers(c);
		if (atomic_load(&sh->rx) == SPRX_KERNEL && sh->kernel_got == sh->until)
			atomic_store(&sh->rx, SPRX_PAIR);
		sp_unlock(&sh->rx_mu);
	}
	tx = atomic_load(&sh->tx);
	rx = atomic_load(&sh->rx);
	/* the peer ends the pair before its kernel socket: an end seen in
	 * the kernel is in the pair by then */
	int r = 0;
	kernel_events(&k, rx == SPRX_PAIR, &c->settle_spent);
	if (rx == SPRX_PAIR && (events & (IN_BITS | POLLRDHUP)))
		r = pair_readable(c, pf);
	out = (short)(k.revents & ~(IN_BITS | OUT_BITS));
	/* SO_RCVLOWAT over the pipe's bytes and the kernel's after them */
	if (rx == SPRX_PAIR && (events & IN_BITS) && r > 0 && sp_lowat_met(c, fd, SIZE_MAX) == 0)
		r = 0;
	if (rx == SPRX_PAIR && (events & (IN_BITS | POLLRDHUP))) {
		if (r < 0) {
			/* the peer went back: what the kernel holds is next */
			int pair = SPRX_PAIR;
			if (atomic_compare_exchange_strong(&sh->rx, &pair, SPRX_BACK))
				dsock_sock_rewatch(s);
			sp_maybe_detach(c);
			out |= (short)(k.revents & IN_BITS);
		} else if (r > 0 && (events & IN_BITS)) {
			out |= (short)(events & IN_BITS);
		}
	} else {
		/* before the switch and up to it, and after the move back,
		 * the peer's next bytes are the kernel's */
		out |= (short)(k.revents & IN_BITS);
	}
	if (tx == SPTX_PAIR) {
		if (c->pipe->poll(c, pf, POLLOUT))
			out |= (short)(events & OUT_BITS); /* room, or a send that will say what happened */
	} else {
		out |= (short)(k.revents & OUT_BITS);
	}
	return out;
}

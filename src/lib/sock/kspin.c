/* Spinning on sockets the kernel carries (kspin.h). */
#include "lib/sock/kspin.h"
#include "lib/sock/sock.h"
#include "lib/sock/spin.h"
#include "lib/base/clock.h"
#include "lib/base/real.h"
#include "lib/transport/transport.h"

#include <errno.h>
#include <sched.h>

int dsock_kspin_on = 1;
__thread int dsock_kspin_sent;

/* An Internet socket we track that never listened: one a peer (plain, on
 * another host, or not paired yet) sends to.  (The callers ask only of
 * sockets whose data the kernel carries.) */
static int spinnable(const struct dsock_sock *s)
{
	return s && (s->domain == AF_INET || s->domain == AF_INET6) &&
	       !(atomic_load_explicit(&s->flags, memory_order_relaxed) & DSOCK_SF_LISTENED);
}

/* A look of a wait found nothing: 1 to look again (the first such call
 * starts the spin, with a courtesy yield where one is due; past the pure
 * spin every round yields), 0 when the budget (or deadline_ns, if >= 0)
 * is spent, the outcome recorded. */
static int again(long long *t0, long long deadline_ns)
{
	long long t = dsock_mono_ns();

	/* the first look found nothing: the spin starts, with a courtesy
	 * yield (spin.h) where one is due */
	if (!*t0) {
		*t0 = t;
		dsock_spin_courtesy(t);
		return 1;
	}

	if (t - *t0 >= dsock_spin_ns || (deadline_ns >= 0 && t >= deadline_ns)) {
		dsock_spin_outcome(0);
		return 0;
	}
	/* (past the pure spin every round yields: with more runnable threads
	 * than cores, the one we wait for may need this core: spin.h) */
	if (t - *t0 >= DSOCK_PURE_SPIN_NS)
		sched_yield();
	return 1;
}

int dsock_kspin_looks(int (*look)(void *arg), void *arg, int *timeout_ms)
{
	long long t0 = 0, deadline = -1;

	int sent = dsock_kspin_sent;

	/* (this wait takes the send: the next spins only after another) */
	dsock_kspin_sent = 0;
	if (!sent || !dsock_kspin_on || dsock_spin_ns <= 0 || !dsock_spin_worth())
		return 0;
	if (*timeout_ms > 0)
		deadline = dsock_mono_ns() + *timeout_ms * 1000000LL;
	for (int round = 0;; round++) {
		int r = look(arg);
		if (r != 0) {
			/* (the first look is no spin: it had something at once) */
			if (round && r > 0)
				dsock_spin_outcome(1);
			return r;
		}
		if (!again(&t0, deadline))
			break;
	}
	if (*timeout_ms > 0) {
		long long left = deadline - dsock_mono_ns();
		*timeout_ms = left > 0 ? (int)((left + 999999) / 1000000) : 0;
	}
	return 0;
}

/* A receive's look: 1 once the socket is readable (or the look fails:
 * the receive then tells). */
static int readable_look(void *arg)
{
	return dsock_real.poll(arg, 1, 0) != 0;
}

void dsock_kspin_recv(const struct dsock_sock *s, int fd, int flags)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int forever = -1;

	/* (a receive that returns at once anyway: nothing to spin for) */
	if ((flags & (MSG_DONTWAIT | MSG_ERRQUEUE | MSG_OOB)) || !spinnable(s) ||
	    (atomic_load_explicit(&s->flags, memory_order_relaxed) & DSOCK_SF_NONBLOCK))
		return;
	/* readable as the kernel's receive sees it (SO_RCVLOWAT, EOF, an
	 * error): the call that follows returns without sleeping, and it,
	 * not a look of ours, takes the data or the error */
	dsock_kspin_looks(readable_look, &p, &forever);
}

/* How long a look that caught a TCP reset half-way waits for the rest. */
#define SETTLE_NS 20000LL

void dsock_kspin_settle(struct pollfd *p)
{
	struct dsock_sock *s;

	if (!(p->revents & POLLERR) || !(s = dsock_fdt_peek(p->fd)) || s->type != SOCK_STREAM)
		return;
	/* the kernel reports a reset's error before it closes the socket,
	 * and closes it (hang-up) before it shuts both directions (input,
	 * RDHUP); a sleeper the error woke finds all of it done, a look made
	 * in between does not */
	long long t0 = dsock_mono_ns();
	do {
		struct pollfd q = { .fd = p->fd, .events = POLLIN | POLLRDHUP };
		if (dsock_real.poll(&q, 1, 0) == 1 && (q.revents & (POLLHUP | POLLRDHUP)) == (POLLHUP | POLLRDHUP)) {
			p->revents |= (short)(q.revents & (p->events | POLLERR | POLLHUP));
			return;
		}
	} while (dsock_mono_ns() - t0 < SETTLE_NS);
}

struct poll_args {
	struct pollfd *fds;
	nfds_t n;
	int masked;
	const sigset_t *mask;
};

static int poll_look(void *arg)
{
	static const struct timespec zero;
	struct poll_args *a = arg;
	int r = a->masked ? dsock_real.ppoll(a->fds, a->n, &zero, a->mask) : dsock_real.poll(a->fds, a->n, 0);

	if (r < 0)
		return -errno;
	for (nfds_t i = 0; r > 0 && i < a->n; i++)
		dsock_kspin_settle(&a->fds[i]);
	return r;
}

int dsock_kspin_poll(struct pollfd *fds, nfds_t n, int masked, const sigset_t *mask, int *timeout_ms)
{
	struct poll_args a = { fds, n, masked, mask };
	int any = 0;

	if (!dsock_kspin_on || !*timeout_ms)
		return 0;
	for (nfds_t i = 0; i < n && !any; i++)
		any = fds[i].fd >= 0 && spinnable(dsock_fdt_peek(fds[i].fd));
	return any ? dsock_kspin_looks(poll_look, &a, timeout_ms) : 0;
}

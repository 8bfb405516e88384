/* Receiving on the socketpair transport: the kernel's bytes up to the
 * peer's switch, then the pair's up to its EOF, then the kernel's (sp.h). */
#include "lib/transport/socketpair/sp.h"
#include "lib/sock/sock.h"
#include "lib/sock/kspin.h"
#include "lib/base/clock.h"
#include "lib/base/real.h"
#include "lib/base/signals.h"
#include "common/log.h"
#include "common/reason.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/sockios.h>
#include <unistd.h>

static void rewatch_if(struct sp_conn *c, int before)
{
	if (atomic_load(&c->sh->rx) != before)
		dsock_sock_rewatch(c->sock);
}

/* ---- receive --------------------------------------------------------------- */
/* Waits until the kernel's socket or the pair may have something (the
 * peer's header), the deadline (SO_RCVTIMEO: -EAGAIN) or a signal
 * (-EINTR).  A pending answer is looked for every 10 ms. */
/* How long a wait of at most ms (-1: none) may take before the receive's
 * deadline (SO_RCVTIMEO, read once into *deadline); -EAGAIN: past it. */
static int wait_ms(int fd, long long *deadline, int ms)
{
	if (!*deadline)
		*deadline = dsock_timeo_deadline(fd, SO_RCVTIMEO);
	if (*deadline != INT64_MAX) {
		long long left = *deadline - dsock_mono_ns();
		if (left <= 0)
			return -EAGAIN;
		if (ms < 0 || left / 1000000 < ms)
			ms = (int)((left + 999999) / 1000000);
	}
	return ms;
}

static int wait_either(struct sp_conn *c, int fd, long long *deadline)
{
	struct pollfd p[2] = { { .fd = fd, .events = POLLIN } };
	int ms = wait_ms(fd, deadline, atomic_load(&c->sh->state) == SP_PENDING ? 10 : -1), n = 1, pf = sp_pairfd(c);

	if (ms == -EAGAIN)
		return ms;
	if (pf >= 0)
		n += c->pipe->waits(c, pf, POLLIN, &p[1]);
	if (dsock_real.poll(p, (nfds_t)n, ms) < 0)
		return -errno;
	return 0;
}

/* Before the peer's switch is known: the kernel's bytes, no further than
 * its switch.  A byte found in the kernel past the switch was sent after
 * the SWITCH header went into the pair, so the look at the pair after
 * the peek finds it.  Returns the count, 0 (EOF), -EAGAIN (nothing yet),
 * -errno; 1 in *again when the state moved (call again). */
static ssize_t recv_early(struct sp_conn *c, int fd, const struct msghdr *m, size_t skip, int flags, int *again)
{
	struct sp_shared *sh = c->sh;
	struct iovec v[IOV_MAX];
	size_t want = sp_iov_total(m) - skip, lim;
	struct msghdr km = { .msg_iov = v };
	int rx = atomic_load(&sh->rx);
	char scratch[4096];
	ssize_t r;

	if (sp_lock(&sh->rx_mu))
		return -EAGAIN;
	sp_read_headers(c);
	if (atomic_load(&sh->rx) != rx) {
		sp_unlock(&sh->rx_mu);
		*again = 1;
		return 0;
	}
	/* MSG_TRUNC leaves the buffer alone (it may be NULL) */
	if (flags & MSG_TRUNC) {
		v[0] = (struct iovec){ scratch, want < sizeof(scratch) ? want : sizeof(scratch) };
		km.msg_iovlen = 1;
	} else {
		km.msg_iovlen = sp_iov_part(m, skip, want, v);
	}
	r = dsock_real.recvmsg(fd, &km, MSG_PEEK | MSG_DONTWAIT);
	if (r < 0) {
		r = -errno;
		sp_unlock(&sh->rx_mu);
		return r;
	}
	sp_read_headers(c);
	lim = (size_t)r;
	if (atomic_load(&sh->rx) == SPRX_KERNEL || atomic_load(&sh->rx) == SPRX_PAIR) {
		uint64_t left = sh->until - sh->kernel_got;
		if (left < lim)
			lim = (size_t)left;
		*again = lim == 0;
	}
	if (lim && !(flags & MSG_PEEK)) {
		if (flags & MSG_TRUNC)
			v[0].iov_len = lim < v[0].iov_len ? lim : v[0].iov_len;
		else
			km.msg_iovlen = sp_iov_part(m, skip, lim, v);
		r = dsock_real.recvmsg(fd, &km, MSG_DONTWAIT | (flags & MSG_TRUNC));
		if (r > 0)
			sh->kernel_got += (uint64_t)r;
	} else {
		r = (ssize_t)lim;
	}
	if (atomic_load(&sh->rx) == SPRX_KERNEL && sh->kernel_got == sh->until)
		atomic_store(&sh->rx, SPRX_PAIR);
	sp_unlock(&sh->rx_mu);
	return r < 0 ? -errno : r;
}

/* The kernel's bytes up to the peer's switch (RX_KERNEL): they are sent,
 * so a blocking receive may wait for them. */
static ssize_t recv_until(struct sp_conn *c, int fd, const struct msghdr *m, size_t skip, int flags, int *again)
{
	struct sp_shared *sh = c->sh;
	struct iovec v[IOV_MAX];
	struct msghdr km = { .msg_iov = v };
	uint64_t left;
	ssize_t r;

	if (sp_lock(&sh->rx_mu))
		return -EAGAIN;
	left = sh->until - sh->kernel_got;
	if (atomic_load(&sh->rx) != SPRX_KERNEL || !left) {
		if (atomic_load(&sh->rx) == SPRX_KERNEL)
			atomic_store(&sh->rx, SPRX_PAIR);
		sp_unlock(&sh->rx_mu);
		*again = 1;
		return 0;
	}
	km.msg_iovlen = sp_iov_part(m, skip, left < SIZE_MAX ? (size_t)left : SIZE_MAX, v);
	r = dsock_real.recvmsg(fd, &km, flags & (MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT));
	if (r < 0) {
		r = -errno;
	} else if (r > 0 && !(flags & MSG_PEEK)) {
		sh->kernel_got += (uint64_t)r;
		if (sh->kernel_got == sh->until)
			atomic_store(&sh->rx, SPRX_PAIR);
	}
	sp_unlock(&sh->rx_mu);
	return r;
}

/* The pair (RX_PAIR).  MSG_TRUNC discards, as TCP's does. */
static ssize_t recv_pair(struct sp_conn *c, const struct msghdr *m, size_t skip, int flags)
{
	struct iovec v[IOV_MAX];
	struct msghdr pm = { .msg_iov = v };
	size_t want = sp_iov_total(m) - skip;
	char scratch[65536];
	ssize_t r;

	if (flags & MSG_TRUNC) {
		v[0].iov_base = scratch;
		v[0].iov_len = want < sizeof(scratch) ? want : sizeof(scratch);
		pm.msg_iovlen = 1;
	} else {
		pm.msg_iovlen = sp_iov_part(m, skip, want, v);
	}
	r = c->pipe->recvmsg(c, sp_pairfd(c), &pm, flags & (MSG_PEEK | MSG_WAITALL | MSG_DONTWAIT));
	if (r > 0)
		sp_count_carried(c);
	if (r > 0 && !(flags & MSG_PEEK))
		atomic_fetch_add(&c->sh->pair_got, (uint64_t)r);
	return r;
}

/* The pair reached its EOF (or the peer's reset): the kernel from here. */
static void rx_back(struct sp_conn *c)
{
	int pair = SPRX_PAIR;

	if (atomic_compare_exchange_strong(&c->sh->rx, &pair, SPRX_BACK))
		dsock_sock_rewatch(c->sock);
	sp_maybe_detach(c);
}

/* MSG_PEEK|MSG_WAITALL before the kernel carries the receive again: the
 * pair's peek does not wait for more than it holds, and a peek stops where
 * the kernel's part ends, so this peeks without waiting and waits (1 ms at
 * a time) until all of it is there, an EOF, the deadline or a signal;
 * then it returns what there is (-EAGAIN, -EINTR when nothing). */
static ssize_t peek_all(struct dsock_sock *s, int fd, struct msghdr *m, int flags, size_t want, int nb)
{
	long long deadline = 0;

	for (;;) {
		ssize_t r = sp_recvmsg(s, fd, m, (flags & ~MSG_WAITALL) | MSG_DONTWAIT);
		int ms;

		if (nb || r == 0 || (r < 0 && r != -EAGAIN) || (r > 0 && (size_t)r >= want))
			return r;
		if ((ms = wait_ms(fd, &deadline, 1)) == -EAGAIN)
			return r;
		if (dsock_real.poll(NULL, 0, ms) < 0 && errno == EINTR && (r > 0 || !dsock_signals_restart()))
			return r > 0 ? r : -EINTR;
	}
}

int sp_lowat_met(struct sp_conn *c, int fd, size_t want)
{
	int lowat = atomic_load(&c->sh->lowat), pf = sp_pairfd(c), p, k = 0;

	if (lowat <= 1 || atomic_load(&c->sh->rx) != SPRX_PAIR || atomic_load(&c->sh->state) != SP_PAIRED || pf < 0)
		return -1;
	if ((p = c->pipe->inq(c, pf)) < 0)
		return -1;
	/* (the kernel's bytes come after the pipe's EOF, and count then; at
	 * the kernel's end no mark holds) */
	if (c->pipe->ended(c, pf)) {
		struct pollfd e = { .fd = fd, .events = POLLRDHUP };
		if (!p || (dsock_real.poll(&e, 1, 0) == 1 && (e.revents & (POLLRDHUP | POLLERR | POLLHUP))))
			return -1; /* (the kernel's alone: its own mark) */
		if (dsock_real.ioctl(fd, SIOCINQ, &k) < 0)
			k = 0;
	}
	return (size_t)p + (size_t)k >= (want < (size_t)lowat ? want : (size_t)lowat);
}

/* A blocking receive while sp_lowat_met applies: waits until it is met,
 * the deadline (-EAGAIN) or a signal (-EINTR); 0 to go on. */
static int lowat_wait(struct sp_conn *c, int fd, size_t want, long long *deadline)
{
	int met;

	while ((met = sp_lowat_met(c, fd, want)) == 0) {
		struct pollfd p[DSOCK_WAITS_MAX] = { { .fd = fd, .events = POLLIN } };
		int n = 1, pf = sp_pairfd(c), ms = wait_ms(fd, deadline, 10);
		if (ms == -EAGAIN)
			return ms;
		if (pf >= 0)
			n += c->pipe->waits(c, pf, POLLIN, &p[1]);
		if (dsock_real.poll(p, (nfds_t)n, ms) < 0 && errno == EINTR && !dsock_signals_restart())
			return -EINTR;
	}
	return 0;
}

/* A blocking receive from the pair looks without waiting first, for the
 * spin budget, as one on a kernel socket does (kspin.h): a reply that
 * comes within it lands on an awake thread. */
struct pair_look {
	struct sp_conn *c;
	const struct msghdr *m;
	size_t done;
	int flags;
	ssize_t r;
};

static int pair_look(void *arg)
{
	struct pair_look *l = arg;

	l->r = recv_pair(l->c, l->m, l->done, l->flags | MSG_DONTWAIT);
	return l->r != -EAGAIN;
}

static ssize_t recv_pair_spun(struct sp_conn *c, const struct msghdr *m, size_t done, int flags)
{
	struct pair_look l = { c, m, done, flags, -EAGAIN };
	int forever = -1;

	/* (not MSG_WAITALL: a short count from its blocking receive means
	 * its timeout or a signal) */
	if (!(flags & (MSG_DONTWAIT | MSG_WAITALL)) && dsock_kspin_looks(pair_look, &l, &forever))
		return l.r;
	return recv_pair(c, m, done, flags);
}

ssize_t sp_recvmsg(struct dsock_sock *s, int fd, struct msghdr *m, int flags)
{
	struct sp_conn *c = sp_conn(s);
	struct sp_shared *sh = c->sh;
	size_t want = sp_iov_total(m), done = 0;
	long long deadline = 0;
	int nb = sp_dontwait(c, fd, flags), top_up = 0;

	sp_progress(c);
	if ((flags & (MSG_OOB | MSG_ERRQUEUE)) || !want) {
		ssize_t r = dsock_real.recvmsg(fd, m, flags);
		return r < 0 ? -errno : r;
	}
	if ((flags & (MSG_PEEK | MSG_WAITALL)) == (MSG_PEEK | MSG_WAITALL) && atomic_load(&sh->rx) != SPRX_BACK &&
	    atomic_load(&sh->state) != SP_REFUSED)
		return peek_all(s, fd, m, flags, want, nb);
	if (!nb && !(flags & MSG_WAITALL)) {
		int w = lowat_wait(c, fd, want, &deadline);
		if (w)
			return w;
	}
	for (;;) {
		int rx = atomic_load(&sh->rx), again = 0, state = atomic_load(&sh->state);
		int one = (flags & ~MSG_WAITALL) | nb;
		ssize_t r;

		if (rx == SPRX_BACK || state == SP_REFUSED) {
			struct iovec v[IOV_MAX];
			struct msghdr km = *m;
			if (done) {
				km.msg_iov = v;
				km.msg_iovlen = sp_iov_part(m, done, want - done, v);
			}
			sp_maybe_detach(c);
			r = dsock_real.recvmsg(fd, &km, flags | (top_up ? MSG_DONTWAIT : 0));
			if (r < 0)
				return done ? (ssize_t)done : -errno;
			if (!done) {
				m->msg_flags = km.msg_flags;
				m->msg_namelen = km.msg_namelen;
				m->msg_controllen = km.msg_controllen;
			}
			return (ssize_t)done + r;
		}
		if (rx == SPRX_PAIR && state == SP_PAIRED) {
			r = recv_pair_spun(c, m, done, flags | nb);
			if (r == 0 && !c->pipe->ended(c, sp_pairfd(c)))
				return (ssize_t)done; /* shut by the application, nothing there now */
			if (r == 0 || r == -ECONNRESET) {
				/* its EOF or the peer's reset: the kernel's word now
				 * (on a reset, once its RST is there) */
				struct pollfd k = { .fd = fd, .events = POLLRDHUP };
				if (r)
					dsock_real.poll(&k, 1, RESET_WAIT_MS);
				rx_back(c);
				continue;
			}
			if (r > 0 && !(flags & MSG_PEEK) && done + (size_t)r < want) {
				char b;
				/* short: at the pair's EOF the kernel's bytes come
				 * next, and a receive takes what is there (up to an
				 * urgent mark), as one on the kernel would */
				int mark = 0;
				struct iovec bv = { &b, 1 };
				struct msghdr bm = { .msg_iov = &bv, .msg_iovlen = 1 };
				if (c->pipe->recvmsg(c, sp_pairfd(c), &bm, MSG_PEEK | MSG_DONTWAIT) == 0 &&
				    c->pipe->ended(c, sp_pairfd(c))) {
					done += (size_t)r;
					rx_back(c);
					int inq = 0;
					/* (not at the urgent mark, and not an error
					 * the next call must see) */
					if (!(flags & MSG_WAITALL) &&
					    (dsock_real.ioctl(fd, SIOCATMARK, &mark) < 0 || mark ||
					     dsock_real.ioctl(fd, SIOCINQ, &inq) < 0 || inq <= 0))
						return (ssize_t)done;
					top_up = !(flags & MSG_WAITALL);
					continue;
				}
				if (flags & MSG_WAITALL) /* a signal or the timeout ended it */
					return (ssize_t)done + r;
			}
		} else if (rx == SPRX_KERNEL) {
			r = recv_until(c, fd, m, done, one, &again);
		} else {
			r = recv_early(c, fd, m, done, one, &again);
			if (again || atomic_load(&sh->rx) != rx)
				rewatch_if(c, rx);
		}
		if (again)
			continue;
		if (r == -EAGAIN && (!done || (flags & MSG_WAITALL)) && !nb && rx != SPRX_PAIR) {
			/* before the switch: the peer's bytes may come either way */
			int w = wait_either(c, fd, &deadline);
			sp_progress(c);
			if ((w == -EINTR && (done || !dsock_signals_restart())) || w == -EAGAIN)
				return done ? (ssize_t)done : w;
			continue;
		}
		if (r < 0)
			return done ? (ssize_t)done : r;
		if (r == 0)
			return (ssize_t)done; /* the kernel's EOF before the switch */
		done += (size_t)r;
		if (done == want || !(flags & MSG_WAITALL) || (flags & MSG_PEEK))
			break;
	}
	m->msg_flags = 0;
	m->msg_namelen = 0;
	m->msg_controllen = 0;
	return (ssize_t)done;
}


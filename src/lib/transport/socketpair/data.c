/* Bytes on the socketpair transport: the peer's headers, send, and the
 * moves between the kernel and the pair (the protocol is sp.h's; the
 * receive is recv.c's). */
#include "lib/transport/socketpair/sp.h"
#include "lib/sock/sock.h"
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

size_t sp_iov_total(const struct msghdr *m)
{
	size_t t = 0;

	for (size_t i = 0; i < m->msg_iovlen; i++)
		t += m->msg_iov[i].iov_len;
	return t;
}

size_t sp_iov_part(const struct msghdr *m, size_t skip, size_t cap, struct iovec *v)
{
	size_t n = 0;

	for (size_t i = 0; i < m->msg_iovlen && cap && n < IOV_MAX; i++) {
		size_t l = m->msg_iov[i].iov_len;
		if (skip >= l) {
			skip -= l;
			continue;
		}
		v[n].iov_base = (char *)m->msg_iov[i].iov_base + skip;
		v[n].iov_len = l - skip < cap ? l - skip : cap;
		cap -= v[n++].iov_len;
		skip = 0;
	}
	return n;
}

int sp_dontwait(const struct sp_conn *c, int fd, int flags)
{
	int fl;

	if (flags & MSG_DONTWAIT)
		return MSG_DONTWAIT;
	/* O_NONBLOCK as set through us while no other process holds or held
	 * the framed pair (it counts its holders); otherwise another process
	 * may have set it on the file we share: the kernel's file flags are
	 * the truth (a system call more on every send and receive) */
	if (c->ch && !atomic_load_explicit(&c->sh->shared, memory_order_relaxed))
		return (atomic_load_explicit(&c->sock->flags, memory_order_relaxed) & DSOCK_SF_NONBLOCK) ? MSG_DONTWAIT : 0;
	fl = dsock_real.fcntl(fd, F_GETFL);
	return fl >= 0 && (fl & O_NONBLOCK) ? MSG_DONTWAIT : 0;
}

/* ---- the peer's headers -------------------------------------------------- */
void sp_read_headers(struct sp_conn *c)
{
	struct sp_shared *sh = c->sh;
	int pf = sp_pairfd(c), rx;

	if (atomic_load(&sh->state) != SP_PAIRED || pf < 0)
		return;
	while ((rx = atomic_load(&sh->rx)) == SPRX_HELLO || rx == SPRX_SWITCH) {
		struct iovec iv = { sh->hdr + sh->hdr_len, sizeof(sh->hdr) - sh->hdr_len };
		struct msghdr hm = { .msg_iov = &iv, .msg_iovlen = 1 };
		ssize_t n = c->pipe->recvmsg(c, pf, &hm, MSG_DONTWAIT);
		uint64_t v;

		if (n == -EAGAIN)
			return;
		if (n == 0 && !c->pipe->ended(c, pf))
			return; /* (shut by the application: its header may come yet) */
		if (n <= 0) { /* the peer went back before switching: all its bytes are the kernel's */
			atomic_store(&sh->rx, SPRX_BACK);
			return;
		}
		sh->hdr_len += (unsigned)n;
		if (sh->hdr_len < sizeof(sh->hdr))
			continue;
		sh->hdr_len = 0;
		memcpy(&v, sh->hdr, sizeof(v));
		if (rx == SPRX_HELLO && v != SP_HELLO) {
			/* not our protocol: the pair is not used for this direction */
			DSOCK_WARN("sock %llu: the peer's pair header is wrong; the kernel carries it",
				   (unsigned long long)c->sock->id);
			c->pipe->shutdown(c, pf, SHUT_RD);
			atomic_store(&sh->rx, SPRX_BACK);
			return;
		}
		if (rx == SPRX_HELLO) {
			atomic_store(&sh->rx, SPRX_SWITCH);
			continue;
		}
		if (v < sh->kernel_got) { /* we already read past it: impossible from an honest peer */
			DSOCK_WARN("sock %llu: the peer's switch offset is behind what we read",
				   (unsigned long long)c->sock->id);
			c->pipe->shutdown(c, pf, SHUT_RD);
			atomic_store(&sh->rx, SPRX_BACK);
			return;
		}
		sh->until = v;
		atomic_store(&sh->rx, v == sh->kernel_got ? SPRX_PAIR : SPRX_KERNEL);
	}
}

/* ---- send ------------------------------------------------------------------ */
/* Our sending leaves the pair: its EOF tells the peer (tx_mu held). */
static void tx_back(struct sp_conn *c)
{
	int pf = sp_pairfd(c);

	if (pf >= 0 && atomic_load(&c->sh->state) == SP_PAIRED)
		c->pipe->shutdown(c, pf, SHUT_WR);
	atomic_store(&c->sh->tx, SPTX_BACK);
}

/* Our sending leaves the pair, from any call (takes tx_mu), and the
 * pollers follow. */
static void tx_leave(struct sp_conn *c)
{
	if (sp_lock(&c->sh->tx_mu) == 0) {
		tx_back(c);
		sp_unlock(&c->sh->tx_mu);
	}
	dsock_sock_rewatch(c->sock);
}

/* The pair is broken: if the peer closed it with our bytes unread (the
 * pair's error), its kernel socket closes next, with an RST: the kernel's
 * word on the connection is waited for (briefly), so that our next call
 * there says what the peer's close did. */
static void await_reset(struct sp_conn *c, int fd, int err)
{
	struct pollfd k = { .fd = fd, .events = POLLRDHUP };

	/* (a send that failed on it has taken the error: err says) */
	if (err == ECONNRESET || (c->pipe->poll(c, sp_pairfd(c), 0) & POLLERR))
		dsock_real.poll(&k, 1, RESET_WAIT_MS);
}

/* 1 if the peer's HELLO was read (it reads the pair from now on). */
static int peer_ready(struct sp_conn *c)
{
	struct sp_shared *sh = c->sh;
	int rx = atomic_load(&sh->rx);

	if (rx == SPRX_HELLO && pthread_mutex_trylock(&sh->rx_mu) != EBUSY) {
		sp_read_headers(c);
		sp_unlock(&sh->rx_mu);
		rx = atomic_load(&sh->rx);
	}
	return rx != SPRX_HELLO;
}

ssize_t sp_sendmsg(struct dsock_sock *s, int fd, const struct msghdr *m, int flags)
{
	struct sp_conn *c = sp_conn(s);
	struct sp_shared *sh = c->sh;
	int tx, switched = 0;
	ssize_t r;

	sp_progress(c);
	if (flags & MSG_OOB)
		sp_go_back(c, DSOCK_R_URGENT);
	tx = atomic_load(&sh->tx);
	if (tx == SPTX_KERNEL) {
		/* the kernel's bytes are counted, and the switch waits for
		 * the sends in flight */
		int e;
		if (sp_lock(&sh->tx_mu))
			return -EAGAIN;
		tx = atomic_load(&sh->tx);
		/* the switch waits until the kernel has sent all of ours: a
		 * peer that does not read keeps one buffer's worth, as the
		 * kernel alone would */
		int outq = 1;
		if (tx == SPTX_KERNEL && atomic_load(&sh->state) == SP_PAIRED && peer_ready(c) &&
		    dsock_real.ioctl(fd, SIOCOUTQ, &outq) == 0 && outq == 0) {
			uint64_t n = sh->kernel_sent;
			struct iovec iv = { &n, sizeof(n) };
			struct msghdr hm = { .msg_iov = &iv, .msg_iovlen = 1 };
			if (c->pipe->sendmsg(c, sp_pairfd(c), &hm, MSG_DONTWAIT) == (ssize_t)sizeof(n))
				atomic_store(&sh->tx, SPTX_PAIR);
			else
				tx_back(c);
			tx = atomic_load(&sh->tx);
			switched = 1;
		}
		if (tx == SPTX_KERNEL) {
			r = dsock_real.sendmsg(fd, m, flags);
			e = errno;
			if (r > 0)
				sh->kernel_sent += (uint64_t)r;
			sp_unlock(&sh->tx_mu);
			return r < 0 ? -e : r;
		}
		sp_unlock(&sh->tx_mu);
		if (switched)
			dsock_sock_rewatch(s);
	}
	if (tx == SPTX_PAIR) {
		/* (an address or control data means nothing to a connected TCP
		 * socket's data) */
		struct msghdr pm = { .msg_iov = m->msg_iov, .msg_iovlen = m->msg_iovlen };
		size_t total = sp_iov_total(m);
		int nb = sp_dontwait(c, fd, flags);
		r = c->pipe->sendmsg(c, sp_pairfd(c), &pm, nb | (flags & MSG_MORE));
		if (r > 0)
			sp_count_carried(c);
		if (r >= 0 && ((size_t)r == total || nb))
			return r;
		if (r >= 0) {
			/* short, blocking: a signal or the timeout, or the
			 * peer stopped reading the pair midway */
			struct iovec v[IOV_MAX];
			struct msghdr rest = { .msg_iov = v, .msg_iovlen = sp_iov_part(m, (size_t)r, total - (size_t)r, v) };
			ssize_t more = c->pipe->sendmsg(c, sp_pairfd(c), &rest, MSG_DONTWAIT);
			if (more >= 0 || (more != -EPIPE && more != -ECONNRESET))
				return r + (more > 0 ? more : 0);
			/* (the pair's error, if any, went to the first part) */
			await_reset(c, fd, ECONNRESET);
			tx_leave(c);
			more = dsock_real.sendmsg(fd, &rest, flags);
			/* a reset: the bytes in the pair are lost with the
			 * peer, as those in the kernel's queue would be */
			if (more < 0)
				return errno == ECONNRESET || errno == EPIPE ? -errno : r;
			return r + more;
		}
		if (r != -EPIPE && r != -ECONNRESET)
			return r;
		await_reset(c, fd, (int)-r);
		/* the peer stopped reading the pair (it went back, or closed):
		 * the kernel carries our bytes, and says what became of it */
		tx_leave(c);
		sp_maybe_detach(c);
	}
	r = dsock_real.sendmsg(fd, m, flags);
	return r < 0 ? -errno : r;
}

/* ---- the rest of the calls -------------------------------------------------- */
void sp_go_back(struct sp_conn *c, unsigned reason)
{
	struct sp_shared *sh = c->sh;
	int none = 0, pf = sp_pairfd(c);

	atomic_compare_exchange_strong(&sh->back_reason, &none, (int)reason);
	if (atomic_load(&sh->state) != SP_PAIRED) {
		atomic_store(&sh->refuse, (int)reason); /* an answer to come must not attach */
		atomic_store(&sh->rx, SPRX_BACK);
	} else if (pf >= 0) {
		c->pipe->shutdown(c, pf, SHUT_RD); /* the peer's next send through it fails */
	}
	tx_leave(c);
	sp_maybe_detach(c);
}

int sp_shutdown(struct dsock_sock *s, int fd, int how)
{
	struct sp_conn *c = sp_conn(s);
	int pf = sp_pairfd(c);

	if (how == SHUT_RD || how == SHUT_RDWR)
		atomic_store(&c->sh->app_shut_rd, 1);
	if ((how == SHUT_RD || how == SHUT_RDWR) && pf >= 0)
		c->pipe->shutdown(c, pf, SHUT_RD);
	if (how == SHUT_WR || how == SHUT_RDWR)
		tx_leave(c);
	return dsock_real.shutdown(fd, how) < 0 ? -errno : 0;
}

int sp_ioctl(struct dsock_sock *s, int fd, unsigned long req, int *val)
{
	struct sp_conn *c = sp_conn(s);
	struct sp_shared *sh = c->sh;
	int k = 0, p = 0, rx;

	if (pthread_mutex_trylock(&sh->rx_mu) != EBUSY) {
		sp_read_headers(c);
		sp_unlock(&sh->rx_mu);
	}
	rx = atomic_load(&sh->rx);
	if (atomic_load(&sh->state) != SP_PAIRED || rx == SPRX_BACK || rx == SPRX_HELLO || rx == SPRX_SWITCH)
		return -ENOTSUP; /* the kernel holds what is next */
	if (dsock_real.ioctl(fd, SIOCINQ, &k) < 0 || (p = c->pipe->inq(c, sp_pairfd(c))) < 0)
		return -ENOTSUP;
	if (req == SIOCATMARK) {
		/* urgent data comes through the kernel, after what the pair
		 * holds: not at the mark while the pair has bytes */
		if (rx != SPRX_PAIR || !p)
			return -ENOTSUP;
		*val = 0;
		return 0;
	}
	if (req != FIONREAD)
		return -ENOTSUP;
	if (rx == SPRX_KERNEL && (uint64_t)k < sh->until - sh->kernel_got)
		*val = k; /* the rest of the kernel's part is still on its way */
	else
		*val = k + p;
	return 0;
}

int sp_sockopt(struct dsock_sock *s, int fd, int set, int level, int opt, void *val, socklen_t *len)
{
	struct sp_conn *c = sp_conn(s);

	if (!set || level != SOL_SOCKET)
		return -ENOPROTOOPT;
	if (opt == SO_RCVLOWAT) {
		/* the kernel applies it to the bytes it holds: it carries them */
		if (dsock_real.setsockopt(fd, level, opt, val, *len) < 0)
			return -errno;
		if (*len >= (socklen_t)sizeof(int)) {
			atomic_store(&c->sh->lowat, *(int *)val > 1 ? *(int *)val : 0);
			if (sp_pairfd(c) >= 0)
				c->pipe->lowat(c, sp_pairfd(c));
			if (*(int *)val > 1)
				sp_go_back(c, DSOCK_R_RCVLOWAT);
		}
		return 0;
	}
	if ((opt == SO_RCVTIMEO || opt == SO_SNDTIMEO) && *len >= (socklen_t)sizeof(struct timeval)) {
		/* the waits on the pair keep the application's timeouts */
		struct timeval *t = opt == SO_RCVTIMEO ? &c->sh->rcvtimeo : &c->sh->sndtimeo;
		int pf = sp_pairfd(c);
		memcpy(t, val, sizeof(*t));
		if (pf >= 0)
			c->pipe->timeouts(c, pf);
	}
	return -ENOPROTOOPT; /* and the kernel's too */
}

#define HANDOVER_WAIT_NS (200 * 1000000LL)

int sp_handover(struct dsock_sock *s, int fd)
{
	struct sp_conn *c = sp_conn(s);
	struct sp_shared *sh = c->sh;
	int left = 0, rx;

	sp_go_back(c, DSOCK_R_HANDED_OVER);
	if (atomic_load(&sh->state) != SP_PAIRED)
		return 0;
	/* a holder without dsock reads the kernel alone: the pair must hold
	 * nothing for it, and no more may come.  Nothing comes after the
	 * pipe's EOF, which is there at once on a socketpair shut for
	 * reading; on a channel's stream it is the peer's answer to our STOP
	 * (what it sent before it read the STOP still arrives).  A peer that
	 * does not answer in time: a reset, as bytes left unread make it. */
	int64_t until = dsock_mono_ns() + HANDOVER_WAIT_NS;
	for (;;) {
		int pf = sp_pairfd(c);
		char b;
		struct iovec v = { &b, 1 };
		struct msghdr pm = { .msg_iov = &v, .msg_iovlen = 1 };
		if (sp_lock(&sh->rx_mu) == 0) {
			sp_read_headers(c);
			sp_unlock(&sh->rx_mu);
		}
		if ((rx = atomic_load(&sh->rx)) == SPRX_BACK)
			break;
		if ((left = c->pipe->inq(c, pf)) != 0)
			return sp_reset(s, fd, DSOCK_R_HANDOVER_RESET);
		ssize_t r = c->pipe->recvmsg(c, pf, &pm, MSG_PEEK | MSG_DONTWAIT);
		if (r > 0 || (r == -EAGAIN && dsock_mono_ns() > until))
			return sp_reset(s, fd, DSOCK_R_HANDOVER_RESET);
		if (r != -EAGAIN && (r != 0 || c->pipe->ended(c, pf)))
			break; /* its EOF (or its end) */
		c->pipe->poll(c, pf, POLLIN); /* (a channel's reader takes what came) */
		dsock_real.poll(NULL, 0, 1);
	}
	if (rx == SPRX_KERNEL || rx == SPRX_PAIR || rx == SPRX_HELLO || rx == SPRX_SWITCH)
		atomic_store(&sh->rx, SPRX_BACK);
	dsock_sock_rewatch(s);
	sp_maybe_detach(c);
	return 0;
}

/* Receiving on the shm transport: the peer's kernel bytes up to its
 * switch, then the ring; spinning, then sleeping in the kernel. */
#include "lib/transport/shm/ring.h"
#include "lib/base/real.h"
#include "lib/sock/ready.h"
#include "common/log.h"
#include "common/reason.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

/* ---- receive -------------------------------------------------------------- */
/* The peer has switched and we have read every kernel byte it sent before:
 * the ring is ours to read from now on (rx lock held). */
void shm_rx_switch_if_read(struct shm_conn *c)
{
	uint64_t sw = __atomic_load_n(&c->peer->switch_off, __ATOMIC_SEQ_CST);

	if (sw != DSOCK_SWITCH_NONE && __atomic_load_n(&c->me->kread, __ATOMIC_ACQUIRE) >= sw)
		__atomic_store_n(&c->me->rx_switched, 1, __ATOMIC_SEQ_CST);
}

/* Pre-switch kernel data for a receiver: at most up to the peer's switch
 * offset, so no token is ever taken for data.  The caller is hot (set
 * before this reads switch_off: the peer sends tokens only after its switch
 * and only to a consumer that is not hot).  Returns bytes, 0 on kernel EOF,
 * -EAGAIN when there is none (rx_switched may have become 1), -errno. */
ssize_t shm_rx_kernel(struct shm_conn *c, int fd, struct msghdr *m, size_t off, size_t want, int flags)
{
	uint64_t sw = __atomic_load_n(&c->peer->switch_off, __ATOMIC_SEQ_CST);
	struct msghdr km = *m;
	struct iovec iov[64];
	size_t i = 0, cnt = 0, skip = off;
	ssize_t r;

	uint64_t got = __atomic_load_n(&c->me->kread, __ATOMIC_ACQUIRE);

	if (sw != DSOCK_SWITCH_NONE) {
		if (got >= sw) {
			__atomic_store_n(&c->me->rx_switched, 1, __ATOMIC_SEQ_CST);
			return -EAGAIN;
		}
		if (want > sw - got)
			want = (size_t)(sw - got);
	}
	/* the caller's iovec from off, at most want bytes */
	while (i < m->msg_iovlen && skip >= m->msg_iov[i].iov_len)
		skip -= m->msg_iov[i++].iov_len;
	for (; i < m->msg_iovlen && cnt < 64 && want; i++, skip = 0) {
		size_t len = m->msg_iov[i].iov_len - skip;
		if (len > want)
			len = want;
		iov[cnt].iov_base = (char *)m->msg_iov[i].iov_base + skip;
		iov[cnt++].iov_len = len;
		want -= len;
	}
	km.msg_iov = iov;
	km.msg_iovlen = cnt;
	km.msg_name = NULL;
	km.msg_namelen = 0;
	km.msg_control = NULL;
	km.msg_controllen = 0;
	r = dsock_real.recvmsg(fd, &km, (flags & (MSG_PEEK | MSG_TRUNC)) | MSG_DONTWAIT);
	if (r < 0)
		return -errno;
	if (r > 0 && !(flags & MSG_PEEK))
		__atomic_store_n(&c->me->kread, got + (uint64_t)r, __ATOMIC_RELEASE);
	if (r > 0 && sw == DSOCK_SWITCH_NONE &&
	    (sw = __atomic_load_n(&c->peer->switch_off, __ATOMIC_SEQ_CST)) != DSOCK_SWITCH_NONE) {
		/* the peer switched during the read: bytes past its offset are tokens */
		uint64_t after = got + (uint64_t)r;
		if (after > sw)
			r -= after - sw < (uint64_t)r ? (ssize_t)(after - sw) : r;
		if (r == 0)
			return -EAGAIN;
	}
	return r;
}

/* A kernel error (ECONNRESET, ETIMEDOUT...) that one of our own looks at
 * the socket took (the kernel reports it once): kept for the next receive
 * that finds the ring dry, as the kernel reports it after the data it
 * holds. */
void shm_stash_err(struct shm_conn *c, int e)
{
	int none = 0;

	if (e > 0 && e != EAGAIN && e != EINTR)
		__atomic_compare_exchange_n(&c->pend_err, &none, e, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

int shm_take_err(struct shm_conn *c)
{
	return __atomic_load_n(&c->pend_err, __ATOMIC_RELAXED) ? -__atomic_exchange_n(&c->pend_err, 0, __ATOMIC_RELAXED)
							       : 0;
}

/* Kernel EOF from a peer that never closed through dsock (killed, _exit,
 * a crash) while our ring held bytes it had not read: its kernel socket
 * closed with nothing unread, a FIN, where the kernel's close of a socket
 * with unread data sends an RST.  (A peer that shut down its sending
 * first says so, `closing`: then EOF is what the kernel gives too.) */
static int peer_died_unread(struct shm_conn *c)
{
	return !__atomic_load_n(&c->peer->closing, __ATOMIC_ACQUIRE) &&
	       __atomic_load_n(&c->me->switch_off, __ATOMIC_ACQUIRE) != DSOCK_SWITCH_NONE &&
	       !__atomic_load_n(&c->me->down_sent, __ATOMIC_ACQUIRE) &&
	       !__atomic_load_n(&c->peer->down_sent, __ATOMIC_ACQUIRE) &&
	       __atomic_load_n(&c->tx->tail, __ATOMIC_ACQUIRE) != __atomic_load_n(&c->tx->head, __ATOMIC_ACQUIRE);
}

/* The reverse: an RST from a peer that never closed through dsock, which
 * had read every byte we sent (its tokens aside): its kernel socket closed
 * with wake-up tokens unread (one can land after its last drain), where
 * the kernel's close of a socket with nothing unread sends a FIN. */
static int peer_died_tokens_only(struct shm_conn *c)
{
	uint64_t sw = __atomic_load_n(&c->me->switch_off, __ATOMIC_ACQUIRE);

	return !__atomic_load_n(&c->peer->closing, __ATOMIC_ACQUIRE) && sw != DSOCK_SWITCH_NONE &&
	       __atomic_load_n(&c->peer->kread, __ATOMIC_ACQUIRE) >= sw &&
	       !__atomic_load_n(&c->me->down_sent, __ATOMIC_ACQUIRE) &&
	       !__atomic_load_n(&c->peer->down_sent, __ATOMIC_ACQUIRE) &&
	       __atomic_load_n(&c->tx->tail, __ATOMIC_ACQUIRE) == __atomic_load_n(&c->tx->head, __ATOMIC_ACQUIRE);
}

/* Bytes a MSG_PEEK could take now without a gap: the peer's pre-switch
 * bytes in the kernel, and the ring's after them once all of those are
 * there (rx lock held). */
static size_t peek_ready(struct shm_conn *c, int fd)
{
	uint64_t sw = __atomic_load_n(&c->peer->switch_off, __ATOMIC_SEQ_CST), head;
	uint64_t kr = __atomic_load_n(&c->me->kread, __ATOMIC_ACQUIRE);
	int64_t avail = rx_avail(c, &head);
	int inq = 0;

	if (avail < 0)
		avail = 0;
	if (__atomic_load_n(&c->me->rx_switched, __ATOMIC_ACQUIRE))
		return (size_t)avail;
	dsock_real.ioctl(fd, SIOCINQ, &inq);
	if (sw == DSOCK_SWITCH_NONE)
		return (size_t)inq;
	if (kr + (uint64_t)inq < sw)
		return (size_t)inq;
	return (size_t)(sw - kr) + (size_t)avail;
}

/* The sleep of a MSG_WAITALL receive that has bytes already: a signal
 * ends it with them, SA_RESTART or not (the kernel returns what it copied
 * rather than restart), and so does SO_RCVTIMEO; a plain receive's sleep
 * would be restarted.  poll is never restarted once a handler ran.  1 when
 * the kernel shows something, or -1 with errno EINTR or EAGAIN. */
static ssize_t sleep_partial(int fd, int64_t *deadline)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int ms = -1, r;

	if (!*deadline) {
		struct timeval tv = { 0, 0 };
		socklen_t tl = sizeof(tv);
		dsock_real.getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &tl);
		*deadline = tv.tv_sec || tv.tv_usec ? dsock_mono_ns() + tv.tv_sec * 1000000000LL + tv.tv_usec * 1000LL
						    : INT64_MAX;
	}
	if (*deadline != INT64_MAX) {
		int64_t left = *deadline - dsock_mono_ns();
		ms = left <= 0 ? 0 : (int)((left + 999999) / 1000000);
	}
	r = dsock_real.poll(&p, 1, ms);
	if (r == 0)
		errno = EAGAIN;
	return r > 0 ? 1 : -1;
}

/* Something to take now (rx lock held): ring bytes, or for a MSG_PEEK |
 * MSG_WAITALL still waiting, all of its bytes. */
static int ready_now(struct shm_conn *c, int fd, int peek_now, size_t total)
{
	uint64_t head;

	return peek_now ? rx_avail(c, &head) > 0 : peek_ready(c, fd) >= total;
}

/* ---- shm_recvmsg, in pieces ------------------------------------------------
 * One receive's state, and what each piece of its loop says to do next. */
struct rx_call {
	struct dsock_sock *s;
	struct shm_conn *c;
	struct msghdr *m;
	int fd, flags;
	size_t total, got;
	int peek, waitall;
	/* peek_now: take what is there (0 for a MSG_PEEK | MSG_WAITALL still
	 * waiting for all of it); kpeeked: a peek took every byte before the
	 * peer's switch, and goes on in the ring */
	int peek_now, kpeeked;
	int err, eof, nb, spun, leased, late_err;
	int64_t spin_end, spin_start, next_check, rcv_deadline;
	uint64_t head;
	ssize_t ret; /* RX_RETURN: the call's result */
};

enum rx_next {
	RX_ON,     /* the loop's next piece */
	RX_LOOP,   /* round the loop again (rx lock held) */
	RX_DONE,   /* out of the loop, to finish (rx lock held) */
	RX_AGAIN,  /* from the top (rx lock released) */
	RX_RETURN, /* return ret (rx lock released) */
};

/* Before the attach (PENDING) the kernel carries the call: 0 with *r its
 * result, or 1 once the connection is on the rings. */
static int recv_unattached(struct rx_call *x, ssize_t *r)
{
	struct shm_conn *c = x->c;

	while (!shm_progress(x->s, x->fd) || c->state != SC_ATTACHED) {
		/* count ourselves, then make sure no attach is deciding (it
		 * would not see us); an attach that sees us waits for the next
		 * call */
		int err;

		atomic_fetch_add(&c->kernel_rx_inflight, 1);
		if (atomic_load(&c->attaching) ||
		    (c->state == SC_ATTACHED && __atomic_load_n(&x->s->tp, __ATOMIC_ACQUIRE))) {
			atomic_fetch_sub(&c->kernel_rx_inflight, 1);
			while (atomic_load(&c->attaching))
				sched_yield();
			continue;
		}
		*r = dsock_real.recvmsg(x->fd, x->m, x->flags);
		err = errno;
		if (*r > 0 && !(x->flags & MSG_PEEK))
			atomic_fetch_add(&c->pending_read, *r);
		atomic_fetch_sub(&c->kernel_rx_inflight, 1);
		if (*r < 0)
			*r = -err;
		return 0;
	}
	return 1;
}

/* A side asked to go back to the kernel (down.c): answered first.  1 with
 * *r the call's result when the kernel carries the call from here. */
static int recv_down_first(struct rx_call *x, ssize_t *r)
{
	int d;

	if (!shm_down_any(x->c))
		return 0;
	d = shm_down_step(x->s, x->fd);
	if (d < 0) {
		*r = d;
		return 1;
	}
	if (!__atomic_load_n(&x->c->peer->down_sent, __ATOMIC_ACQUIRE))
		return 0;
	/* (nothing read yet here); MSG_WAITALL goes on past the peer's switch
	 * offset, where shm_recv_down stops short */
	*r = shm_recv_down(x->s, x->fd, x->m, x->flags);
	if (x->waitall && *r > 0 && (size_t)*r < x->total)
		*r = shm_recv_down_rest(x->s, x->fd, x->m, (size_t)*r, x->flags);
	return 1;
}

/* The peer went back to the kernel: the ring is closed for good, and what
 * it held comes by the kernel (the rest of a MSG_WAITALL too: it must not
 * return a short count here). */
static enum rx_next peer_gone_down(struct rx_call *x)
{
	struct shm_conn *c = x->c;

	if (!__atomic_load_n(&c->peer->down_sent, __ATOMIC_ACQUIRE))
		return RX_ON;
	if (x->got && !x->waitall)
		return RX_DONE;
	shm_hot(c, 0);
	shm_unlock(&c->rx->rx_lock);
	if (!x->got)
		return RX_AGAIN;
	x->ret = shm_recv_down_rest(x->s, x->fd, x->m, x->got, x->flags);
	return RX_RETURN;
}

/* The peer's bytes from before its switch, in the kernel. */
static enum rx_next take_kernel(struct rx_call *x)
{
	struct shm_conn *c = x->c;
	ssize_t r;

	if (!x->peek_now || x->kpeeked || __atomic_load_n(&c->me->rx_switched, __ATOMIC_SEQ_CST))
		return RX_ON;
	r = x->total ? shm_rx_kernel(c, x->fd, x->m, x->got, x->total - x->got, x->flags) : -EAGAIN;
	if (r > 0) {
		x->got += (size_t)r;
		/* a receive that took every byte before the peer's switch goes
		 * on in the ring (a peek, which consumes nothing, from its
		 * head): it returns what is there, as the kernel's does */
		uint64_t sw = __atomic_load_n(&c->peer->switch_off, __ATOMIC_SEQ_CST);
		uint64_t kr = __atomic_load_n(&c->me->kread, __ATOMIC_ACQUIRE);
		if (x->got < x->total && sw != DSOCK_SWITCH_NONE && (x->peek ? kr + x->got : kr) == sw)
			x->kpeeked = x->peek;
		else if (!x->waitall || x->got == x->total)
			return RX_DONE;
		return RX_LOOP;
	}
	if (r == 0) {
		x->eof = 1;
		return RX_DONE;
	}
	if (r != -EAGAIN) {
		x->err = (int)r;
		if (x->got)
			shm_stash_err(c, (int)-r); /* for the next call */
		return RX_DONE;
	}
	return RX_ON;
}

/* The ring's bytes. */
static enum rx_next take_ring(struct rx_call *x)
{
	struct shm_conn *c = x->c;
	int64_t avail = rx_avail(c, &x->head);
	size_t n;

	if (avail < 0) {
		shm_unlock(&c->rx->rx_lock);
		x->ret = shm_fault(x->s, x->fd, "rx indices out of range");
		return RX_RETURN;
	}
	if (x->total == 0 && avail > 0)
		return RX_DONE; /* a zero-length recv returns 0 once data is there */
	if (!x->peek_now || avail <= 0 ||
	    !(x->kpeeked || __atomic_load_n(&c->me->rx_switched, __ATOMIC_ACQUIRE)))
		return RX_ON;
	n = x->total - x->got < (size_t)avail ? x->total - x->got : (size_t)avail;
	if (x->spun) {
		dsock_spin_outcome(1);
		x->spun = 0;
	}
	/* MSG_TRUNC: the bytes go, uncopied (a stream socket's discard, as the
	 * kernel's) */
	if (!(x->flags & MSG_TRUNC))
		ring_copy(c->rxd, c->size, x->head, x->m, x->got, n, 0);
	x->got += n;
	shm_count_ring_use(c);
	c->rx_reads++;
	if (!x->peek) {
		shm_note_read(c, n);
		/* release: we are done reading before the space is reused */
		__atomic_store_n(&c->rx->head, x->head + n, __ATOMIC_RELEASE);
		shm_space_freed(c, x->fd);
	}
	return !x->waitall || x->got == x->total || x->peek ? RX_DONE : RX_LOOP;
}

/* Nothing now: has the peer finished, or failed?  Asked of the kernel when
 * a token is there, when the peer says it is closing, at once for a
 * nonblocking call (it returns now), else every KCHECK_NS while spinning:
 * not on the way into every wait (a system call there would lengthen every
 * ping-pong round trip); a peer that dies without closing is seen within
 * KCHECK_NS, or by the kernel sleep. */
static enum rx_next ask_kernel(struct rx_call *x, int64_t t_now)
{
	struct shm_conn *c = x->c;
	ssize_t pk;
	char t;
	int k;

	if (x->nb < 0)
		x->nb = shm_nonblocking(x->s, x->fd, x->flags);
	if (x->next_check < 0)
		x->next_check = x->nb ? 0 : t_now + KCHECK_NS;
	if (!__atomic_load_n(&c->me->rx_switched, __ATOMIC_ACQUIRE) ||
	    !(__atomic_load_n(&c->rx->token, __ATOMIC_RELAXED) || t_now >= x->next_check ||
	      __atomic_load_n(&c->peer->closing, __ATOMIC_ACQUIRE)))
		return RX_ON;
	x->next_check = t_now + KCHECK_NS;
	pk = dsock_real.recv(x->fd, &t, 1, MSG_PEEK | MSG_DONTWAIT);
	if (pk > 0) {
		/* after the switch every kernel byte is a token, whatever the
		 * flag says (a token can land after its flag was cleared):
		 * drain them, or the sleep never sleeps */
		k = shm_clear_and_drain(c, x->fd, 1);
	} else {
		k = pk == 0 ? 1 : errno != EAGAIN ? -errno : 0;
		if (k < 0)
			shm_stash_err(c, -k);
	}
	if (k == 1 || k < 0) {
		if (!x->peek_now) {
			x->peek_now = 1; /* a peek waits no longer */
			return RX_LOOP;
		}
		if (rx_avail(c, &x->head) > 0)
			return RX_LOOP; /* data came just before the FIN */
		if (k == 1)
			x->eof = 1;
		return RX_DONE;
	}
	return ready_now(c, x->fd, x->peek_now, x->total) ? RX_LOOP : RX_ON;
}

/* The peer asks us to go back to the kernel: answered before any sleep,
 * as its token is gone (mid MSG_WAITALL too: the peer may wait for the
 * answer before it sends the rest). */
static enum rx_next answer_down(struct rx_call *x)
{
	struct shm_conn *c = x->c;

	if (!shm_down_asked(c))
		return RX_ON;
	if (x->got && !x->waitall)
		return RX_DONE;
	shm_hot(c, 0);
	shm_unlock(&c->rx->rx_lock);
	if (!x->got)
		return RX_AGAIN;
	if (shm_down_step(x->s, x->fd) < 0 || shm_lock(&c->rx->rx_lock)) {
		x->ret = (ssize_t)x->got;
		return RX_RETURN;
	}
	return RX_LOOP;
}

/* Spinning: a few microseconds of pure spinning, then a yield on every
 * round (with more runnable threads than cores the peer we wait for may
 * need this very core; at once when the peer shares our CPU); a yield that
 * let others run means more runnable threads than CPUs: then we sleep
 * instead (see ready.h). */
static enum rx_next spin(struct rx_call *x, int64_t t_now)
{
	if (!x->spin_end) {
		/* (no probe when there is no spin to shorten) */
		int64_t budget = dsock_spin_worth() ? dsock_spin_ns : 0;

		if (budget > SPIN_PURE_NS && dsock_spin_contended(t_now))
			budget = SPIN_PURE_NS;
		x->spin_start = t_now;
		x->spin_end = t_now + budget;
	}
	if (t_now < x->spin_end) {
		if (t_now - x->spin_start >= SPIN_PURE_NS ||
		    __atomic_load_n(&x->c->peer->cpu, __ATOMIC_RELAXED) == (uint32_t)sched_getcpu() + 1) {
			if (dsock_spin_yield(t_now))
				x->spin_end = t_now;
		} else {
			shm_spin_watch(x->c, x->head);
		}
		x->spun = 1;
		return RX_LOOP;
	}
	if (x->spun) {
		dsock_spin_outcome(0); /* ran out: the sleep was not spared */
		x->spun = 0;
	}
	return RX_ON;
}

/* Sleeping in the kernel: a token, FIN or RST wakes us; the kernel
 * applies SO_RCVTIMEO and the signal restart rules exactly as for a plain
 * recv, because this is one. */
static enum rx_next sleep_kernel(struct rx_call *x)
{
	struct shm_conn *c = x->c;
	int64_t wait_start;
	int inq = 0, e;
	ssize_t r;
	char t;

	atomic_fetch_add(&dsock_sleepers, 1);
	shm_rx_settle(c, x->fd);
	if (ready_now(c, x->fd, x->peek_now, x->total) || shm_down_asked(c)) {
		/* (the settle's drain may have taken a hand-over's token: the
		 * loop answers it instead of sleeping) */
		atomic_fetch_sub(&dsock_sleepers, 1);
		x->spin_end = 0;
		return RX_LOOP;
	}
	shm_unlock(&c->rx->rx_lock);
	wait_start = dsock_mono_ns();
	/* a peek waiting for all of its bytes while the peer's pre-switch
	 * bytes sit in the kernel: for one more byte there (data or a token),
	 * uncopied; while only ring bytes are there, as a receive that has
	 * some (a signal or SO_RCVTIMEO ends it with them) */
	if (!x->peek_now)
		dsock_real.ioctl(x->fd, SIOCINQ, &inq);
	if (x->got || (!x->peek_now && !inq && rx_avail(c, &x->head) > 0))
		r = sleep_partial(x->fd, &x->rcv_deadline); /* (MSG_WAITALL) */
	else
		r = dsock_real.recv(x->fd, &t, (size_t)inq + 1, inq ? MSG_PEEK | MSG_WAITALL | MSG_TRUNC : MSG_PEEK);
	x->next_check = 0;
	e = errno;
	if (r < 0)
		shm_stash_err(c, e);
	else if (!x->peek_now && (size_t)r <= (size_t)inq)
		x->peek_now = 1; /* EOF came first: what is there */
	atomic_fetch_sub(&dsock_sleepers, 1);
	dsock_wait_end(wait_start);
	if (!x->got && shm_down_any(c) && !(r < 0 && (e == EAGAIN || e == EINTR)))
		return RX_AGAIN; /* a side asks to go back to the kernel */
	if (shm_lock(&c->rx->rx_lock)) {
		x->ret = shm_fault(x->s, x->fd, "lock held forever");
		return RX_RETURN;
	}
	x->spin_end = 0;
	if (r < 0 && (e == EAGAIN || e == EINTR)) {
		if (!x->peek_now && !x->got) {
			x->peek_now = 1; /* what is there, or the error */
			x->late_err = -e;
			return RX_LOOP;
		}
		x->err = -e;
		return RX_DONE;
	}
	/* data, token, EOF or error (kept: the loop reports it once the ring
	 * is dry): look again */
	return RX_LOOP;
}

/* The loop (rx lock held on entry): kernel bytes, ring bytes, then the
 * checks, the spin and the sleep, until there is something to return. */
static enum rx_next rx_loop(struct rx_call *x)
{
	struct shm_conn *c = x->c;
	enum rx_next n;

	for (;;) {
		int64_t t_now;

		if (atomic_load(&c->kfd) >= 0)
			x->fd = atomic_load(&c->kfd);
		if ((n = peer_gone_down(x)) != RX_ON)
			return n;
		/* the lease: before waiting (or reading the kernel), not for
		 * data already there (rx_leave's lease follows the read) */
		if (x->leased || !__atomic_load_n(&c->me->rx_switched, __ATOMIC_RELAXED))
			shm_hot(c, dsock_mono_ns() + SPIN_NS);
		if (!x->peek_now && peek_ready(c, x->fd) >= x->total)
			x->peek_now = 1;
		if ((n = take_kernel(x)) != RX_ON || (n = take_ring(x)) != RX_ON) {
			if (n == RX_LOOP)
				continue;
			return n;
		}
		if ((x->got && !x->waitall) || x->kpeeked)
			return RX_DONE; /* (kpeeked: nothing in the ring after the kernel's) */
		if (!x->got && __atomic_load_n(&c->pend_err, __ATOMIC_RELAXED))
			return RX_DONE; /* an error one of our looks took: reported at the end */
		if (!x->leased) {
			x->leased = 1; /* published, then the ring looked at again */
			continue;
		}
		t_now = dsock_mono_ns();
		if ((n = ask_kernel(x, t_now)) != RX_ON || (n = answer_down(x)) != RX_ON) {
			if (n == RX_LOOP)
				continue;
			return n;
		}
		if (x->nb || x->late_err) {
			x->err = x->late_err ? x->late_err : -EAGAIN;
			return RX_DONE;
		}
		if ((n = spin(x, t_now)) == RX_ON)
			n = sleep_kernel(x);
		if (n != RX_LOOP)
			return n;
	}
}

/* After the loop (rx lock held): the lease ended or left lingering, the
 * lock released, and what to return. */
static ssize_t recv_finish(struct rx_call *x)
{
	struct shm_conn *c = x->c;
	int err = x->err, eof = x->eof, pe;

	if (c->state == SC_ATTACHED && !__atomic_load_n(&c->me->rx_switched, __ATOMIC_ACQUIRE)) {
		/* The peer may have switched while we were hot: its first ring
		 * bytes then came with no token, and once its last kernel byte is
		 * read the kernel shows nothing.  End the lease, then look (seq_cst
		 * both sides: it publishes switch_off before any ring byte and
		 * looks at our lease after each): switched and its kernel bytes
		 * all read means the ring is ours, to settle as usual (else
		 * a receiver that read exactly up to the peer's switch offset
		 * leaves the ring's data unseen by every poller). */
		shm_hot(c, 0);
		shm_rx_switch_if_read(c);
	}
	if (c->state == SC_ATTACHED && __atomic_load_n(&c->me->rx_switched, __ATOMIC_ACQUIRE)) {
		int k = !eof && !shm_err_is_fatal(err) ? shm_rx_leave(c, x->fd) : shm_rx_settle(c, x->fd);
		if (k < 0 && !x->got && !eof && !err)
			err = k;
	} else {
		shm_hot(c, 0);
	}
	shm_unlock(&c->rx->rx_lock);
	if (x->got)
		return (ssize_t)x->got;
	pe = shm_take_err(c);
	if (pe) {
		eof = 0; /* the error came before the EOF the socket shows now */
		err = pe;
	}
	if (err == -ECONNRESET && c->state == SC_ATTACHED && peer_died_tokens_only(c)) {
		err = 0;
		eof = 1;
	}
	if (eof && peer_died_unread(c)) {
		DSOCK_DBG("recv on fd %d: the peer ended without closing, our bytes unread: a reset", x->fd);
		return shm_reset(x->s, x->fd, DSOCK_R_PEER_DIED);
	}
	if (eof || (err && err != -EAGAIN))
		DSOCK_DBG("recv on fd %d: %s (switched %u, peer switch_off %llu, active %d)", x->fd,
			  eof ? "EOF" : strerror(-err), c->me->rx_switched,
			  (unsigned long long)c->peer->switch_off, shm_active(c));
	return eof ? 0 : err;
}

ssize_t shm_recvmsg(struct dsock_sock *s, int fd, struct msghdr *m, int flags)
{
	struct rx_call x = { .s = s, .m = m, .fd = fd, .flags = flags, .total = iov_total(m),
			     .peek = flags & MSG_PEEK, .nb = -1, .next_check = -1 };
	ssize_t r;

	if (flags & MSG_OOB) {
		/* urgent data never enters a ring (a sender goes back to the
		 * kernel first: shm_go_back), so only the kernel has any */
		r = dsock_real.recvmsg(fd, m, flags);
		return r < 0 ? -errno : r;
	}
	x.c = shm_conn(s);
	x.waitall = (flags & MSG_WAITALL) && !x.peek;
	/* MSG_PEEK | MSG_WAITALL waits until it can peek all of it (or EOF, an
	 * error, a timeout or a signal: then what is there), as the kernel's */
	x.peek_now = !(x.peek && (flags & MSG_WAITALL) && x.total);
	if (!recv_unattached(&x, &r))
		return r;
	if (m->msg_iovlen > IOV_MAX)
		return -EMSGSIZE;
	if (!x.peek_now && shm_nonblocking(s, fd, flags))
		x.peek_now = 1; /* nothing to wait for: what is there */
	for (;;) {
		if (recv_down_first(&x, &r))
			return r;
		if (shm_lock(&x.c->rx->rx_lock))
			return shm_fault(s, x.fd, "lock held forever");
		m->msg_flags = 0;
		m->msg_namelen = 0;
		m->msg_controllen = 0;
		switch (rx_loop(&x)) {
		case RX_AGAIN:
			continue;
		case RX_RETURN:
			return x.ret;
		default:
			return recv_finish(&x);
		}
	}
}

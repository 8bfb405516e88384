/* Receiving on the shm transport: the peer's kernel bytes up to its
 * switch, then the ring; spinning, then sleeping in the kernel. */
#include "lib/transport/shm/ring.h"
#include "lib/base/real.h"
#include "lib/sock/kspin.h"
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
 * offset, so no token is ever taken for data.  The caller holds a lease (set
 * before this reads switch_off: the peer sends tokens only after its switch
 * and only to a consumer without a lease).  Returns bytes, 0 on kernel EOF,
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
	       !__atomic_load_n(&c->me->back_sent, __ATOMIC_ACQUIRE) &&
	       !__atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE) &&
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
	       !__atomic_load_n(&c->me->back_sent, __ATOMIC_ACQUIRE) &&
	       !__atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE) &&
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

	if (!*deadline)
		*deadline = dsock_timeo_deadline(fd, SO_RCVTIMEO);
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

/* PENDING (or gone back): the kernel carries the receive.  We count
 * ourselves, then make sure no attach is deciding (it would not see us);
 * an attach that sees us waits for the next call.  Returns the kernel's
 * result, or sets *on_ring when the connection is on the ring after all. */
static ssize_t recv_pending(struct dsock_sock *s, struct shm_conn *c, int fd, struct msghdr *m, int flags,
			    int *on_ring)
{
	do {
		ssize_t r;
		int err;

		atomic_fetch_add(&c->kernel_rx_inflight, 1);
		if (atomic_load(&c->attaching) || (c->state == SC_ATTACHED && __atomic_load_n(&s->tp, __ATOMIC_ACQUIRE))) {
			atomic_fetch_sub(&c->kernel_rx_inflight, 1);
			while (atomic_load(&c->attaching))
				sched_yield();
			continue;
		}
		/* (not paired yet: its wait spins as one on a kernel socket) */
		dsock_kspin_recv(s, fd, flags);
		r = dsock_real.recvmsg(fd, m, flags);
		err = errno;
		if (r > 0 && !(flags & MSG_PEEK))
			atomic_fetch_add(c->read_cnt, r);
		atomic_fetch_sub(&c->kernel_rx_inflight, 1);
		return r < 0 ? -err : r;
	} while (!shm_progress(s, fd) || c->state != SC_ATTACHED);
	*on_ring = 1;
	return 0;
}

/* Nothing to read and the spin is over: sleep in the kernel (rx lock held
 * on entry).  A token, FIN or RST wakes us; the kernel applies SO_RCVTIMEO
 * and the signal restart rules exactly as for a plain recv, because this
 * is one.  Returns SLEPT_LOOK (look again, the lock held), SLEPT_DONE
 * (*err says why, the lock held), SLEPT_AGAIN (a side asks to go back to
 * the kernel: start over, the lock not held) or SLEPT_FAULT (the lock is
 * broken: the connection was reset, *err the result). */
enum { SLEPT_LOOK, SLEPT_DONE, SLEPT_AGAIN, SLEPT_FAULT };
static int sleep_in_kernel(struct dsock_sock *s, struct shm_conn *c, int fd, size_t got, size_t total,
			   int *peek_now, int64_t *rcv_deadline, int64_t *next_check, int *late_err, int *err)
{
	uint64_t head;
	char t;
	int inq = 0;
	ssize_t r;

	/* as every sleeper: counted, renewing nothing (ready.h), then no
	 * link lease of ours stands and the queues are taken (an entry for
	 * this ring then shows in the look below; one taken by a poller
	 * after we slept would wake nobody).  Other rings' lingering leases
	 * are their receivers' to settle: this thread waits for its own. */
	atomic_fetch_add(&dsock_sleepers, 1);
	dsock_renew_at = 0;
	shm_link_end_leases();
	shm_rx_settle(c, fd);
	if (ready_now(c, fd, *peek_now, total) || shm_back_asked(c)) {
		/* (the settle's drain may have taken a hand-over's token:
		 * the loop answers it instead of sleeping) */
		atomic_fetch_sub(&dsock_sleepers, 1);
		return SLEPT_LOOK;
	}
	shm_unlock(&c->rx->rx_lock);
	int64_t wait_start = dsock_mono_ns();
	/* a peek waiting for all of its bytes while the peer's pre-switch
	 * bytes sit in the kernel: for one more byte there (data or a
	 * token), uncopied; while only ring bytes are there, as a receive
	 * that has some (a signal or SO_RCVTIMEO ends it with them) */
	if (!*peek_now)
		dsock_real.ioctl(fd, SIOCINQ, &inq);
	if (got || (!*peek_now && !inq && rx_avail(c, &head) > 0))
		r = sleep_partial(fd, rcv_deadline); /* (MSG_WAITALL) */
	else
		r = dsock_real.recv(fd, &t, (size_t)inq + 1, inq ? MSG_PEEK | MSG_WAITALL | MSG_TRUNC : MSG_PEEK);
	*next_check = 0;
	int e = errno;
	if (r < 0)
		shm_stash_err(c, e);
	else if (!*peek_now && (size_t)r <= (size_t)inq)
		*peek_now = 1; /* EOF came first: what is there */
	atomic_fetch_sub(&dsock_sleepers, 1);
	dsock_wait_end(wait_start);
	if (!got && shm_back_any(c) && !(r < 0 && (e == EAGAIN || e == EINTR)))
		return SLEPT_AGAIN;
	if (shm_lock(&c->rx->rx_lock)) {
		*err = shm_fault(s, fd, "lock held forever");
		return SLEPT_FAULT;
	}
	if (r < 0 && (e == EAGAIN || e == EINTR)) {
		if (!*peek_now && !got) {
			*peek_now = 1; /* what is there, or the error */
			*late_err = -e;
			return SLEPT_LOOK;
		}
		*err = -e;
		return SLEPT_DONE;
	}
	/* data, token, EOF or error (kept: the loop reports it once the
	 * ring is dry): look again */
	return SLEPT_LOOK;
}

/* After the loop (rx lock held): settle the ring's wake-up state and say
 * what the receive returns. */
static ssize_t recv_finish(struct dsock_sock *s, struct shm_conn *c, int fd, size_t got, int err, int eof)
{
	if (c->state == SC_ATTACHED && !__atomic_load_n(&c->me->rx_switched, __ATOMIC_ACQUIRE)) {
		/* The peer may have switched while we held a lease: its first ring
		 * bytes then came with no token, and once its last kernel byte is
		 * read the kernel shows nothing.  End the lease, then look (seq_cst
		 * both sides: it publishes switch_off before any ring byte and
		 * looks at our lease after each): switched and its kernel bytes
		 * all read means the ring is ours, to settle as usual (else
		 * a receiver that read exactly up to the peer's switch offset
		 * leaves the ring's data unseen by every poller). */
		shm_lease(c, 0);
		shm_rx_switch_if_read(c);
	}
	if (c->state == SC_ATTACHED && __atomic_load_n(&c->me->rx_switched, __ATOMIC_ACQUIRE)) {
		int k = !eof && !shm_err_is_fatal(err) ? shm_rx_leave(c, fd) : shm_rx_settle(c, fd);
		if (k < 0 && !got && !eof && !err)
			err = k;
	} else {
		shm_lease(c, 0);
	}
	shm_unlock(&c->rx->rx_lock);
	if (got)
		return (ssize_t)got;
	int pe = shm_take_err(c);
	if (pe) {
		eof = 0; /* the error came before the EOF the socket shows now */
		err = pe;
	}
	if (err == -ECONNRESET && c->state == SC_ATTACHED && peer_died_tokens_only(c)) {
		err = 0;
		eof = 1;
	}
	if (eof && peer_died_unread(c)) {
		DSOCK_DBG("recv on fd %d: the peer ended without closing, our bytes unread: a reset", fd);
		return shm_reset(s, fd, DSOCK_R_PEER_DIED);
	}
	if (eof || (err && err != -EAGAIN))
		DSOCK_DBG("recv on fd %d: %s (switched %u, peer switch_off %llu, active %d)", fd,
			  eof ? "EOF" : strerror(-err), c->me->rx_switched,
			  (unsigned long long)c->peer->switch_off, shm_active(c));
	return eof ? 0 : err;
}

ssize_t shm_recvmsg(struct dsock_sock *s, int fd, struct msghdr *m, int flags)
{
	struct shm_conn *c;
	size_t total = iov_total(m), got = 0;
	int peek = flags & MSG_PEEK, waitall = (flags & MSG_WAITALL) && !peek;
	/* MSG_PEEK | MSG_WAITALL waits until it can peek all of it (or EOF, an
	 * error, a timeout or a signal: then what is there), as the kernel's */
	int peekall = peek && (flags & MSG_WAITALL) && total, peek_now = !peekall, kpeeked = 0;
	int err = 0, eof = 0, nb = -1, spun = 0, leased = 0, late_err = 0;
	struct ring_map win = { 0, 0 };
	int64_t spin_end = 0, spin_start = 0, next_check = -1, rcv_deadline = 0;

	if (flags & MSG_OOB) {
		/* urgent data never enters a ring (a sender goes back to the
		 * kernel first: shm_go_back), so only the kernel has any */
		ssize_t r = dsock_real.recvmsg(fd, m, flags);
		return r < 0 ? -errno : r;
	}
	c = shm_conn(s);
	if (!shm_progress(s, fd) || c->state != SC_ATTACHED) {
		int on_ring = 0;
		ssize_t r = recv_pending(s, c, fd, m, flags, &on_ring);
		if (!on_ring)
			return r;
	}
	if (m->msg_iovlen > IOV_MAX)
		return -EMSGSIZE;
	if (peekall && shm_nonblocking(s, fd, flags))
		peek_now = 1; /* nothing to wait for: what is there */
again:
	if (shm_back_any(c)) {
		/* back to the kernel (back.c) */
		int d = shm_back_step(s, fd);
		if (d < 0)
			return d;
		if (__atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE)) {
			/* (nothing read yet here); MSG_WAITALL goes on past the
			 * peer's switch offset, where shm_recv_back stops short */
			ssize_t r = shm_recv_back(s, fd, m, flags);
			if (waitall && r > 0 && (size_t)r < total)
				return shm_recv_back_rest(s, fd, m, (size_t)r, flags);
			return r;
		}
	}
	if (shm_lock(&c->rx->rx_lock))
		return shm_fault(s, fd, "lock held forever");
	m->msg_flags = 0;
	m->msg_namelen = 0;
	m->msg_controllen = 0;
	for (;;) {
		uint64_t head;
		int64_t avail;

		if (atomic_load(&c->kfd) >= 0)
			fd = atomic_load(&c->kfd);
		if (__atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE)) {
			/* the ring is closed for good: what it held comes by the
			 * kernel (the rest of a MSG_WAITALL too: it must not
			 * return a short count here) */
			if (got && !waitall)
				break;
			shm_lease(c, 0);
			shm_unlock(&c->rx->rx_lock);
			if (got)
				return shm_recv_back_rest(s, fd, m, got, flags);
			goto again;
		}
		/* the lease: before waiting (or reading the kernel), not for data
		 * already there (rx_leave's lease follows the read anyway) */
		if (leased || !__atomic_load_n(&c->me->rx_switched, __ATOMIC_RELAXED))
			shm_lease(c, dsock_mono_ns() + SPIN_NS);
		if (!peek_now && peek_ready(c, fd) >= total)
			peek_now = 1;
		if (peek_now && !kpeeked && !__atomic_load_n(&c->me->rx_switched, __ATOMIC_SEQ_CST)) {
			ssize_t r = total ? shm_rx_kernel(c, fd, m, got, total - got, flags) : -EAGAIN;
			if (r > 0) {
				got += (size_t)r;
				/* a receive that took every byte before the peer's
				 * switch goes on in the ring (a peek, which consumes
				 * nothing, from its head): it returns what is there,
				 * as the kernel's does */
				uint64_t sw = __atomic_load_n(&c->peer->switch_off, __ATOMIC_SEQ_CST);
				uint64_t kr = __atomic_load_n(&c->me->kread, __ATOMIC_ACQUIRE);
				if (got < total && sw != DSOCK_SWITCH_NONE && (peek ? kr + got : kr) == sw)
					kpeeked = peek;
				else if (!waitall || got == total)
					break;
				continue;
			}
			if (r == 0) {
				eof = 1;
				break;
			}
			if (r != -EAGAIN) {
				err = (int)r;
				if (got)
					shm_stash_err(c, (int)-r); /* for the next call */
				break;
			}
		}
		avail = rx_avail_in(c, &head, &win);
		if (avail < 0) {
			shm_unlock(&c->rx->rx_lock);
			return shm_fault(s, fd, "rx indices out of range");
		}
		if (total == 0 && avail > 0)
			break; /* a zero-length recv returns 0 once data is there */
		if (peek_now && avail > 0 && (kpeeked || __atomic_load_n(&c->me->rx_switched, __ATOMIC_ACQUIRE))) {
			size_t n = total - got < (size_t)avail ? total - got : (size_t)avail;
			if (spun) {
				dsock_spin_outcome(1);
				spun = 0;
			}
			/* MSG_TRUNC: the bytes go, uncopied (a stream socket's
			 * discard, as the kernel's) */
			if (!(flags & MSG_TRUNC))
				ring_copy(c->rxd, win.w, head + win.shift, m, got, n, 0);
			got += n;
			shm_count_ring_use(c);
			c->rx_reads++;
			if (!peek) {
				shm_note_read(c, n);
				/* release: we are done reading before the space is reused */
				__atomic_store_n(&c->rx->head, head + n, __ATOMIC_RELEASE);
				shm_space_freed(c, fd);
			}
			if (!waitall || got == total || peek)
				break;
			continue;
		}
		if (got && !waitall)
			break;
		if (kpeeked)
			break; /* (a peek with nothing in the ring after the kernel's) */
		if (!got && __atomic_load_n(&c->pend_err, __ATOMIC_RELAXED))
			break; /* an error one of our looks took: reported below */
		if (!leased) {
			leased = 1; /* published, then the ring looked at again */
			continue;
		}
		/* nothing now: has the peer finished, or failed?  Asked of the
		 * kernel when a token is there, when the peer says it is closing,
		 * at once for a nonblocking call (it returns now), else every
		 * 20 us while spinning: not on the way into every wait (a
		 * system call there would lengthen every ping-pong round
		 * trip); a peer that dies without closing is seen within
		 * 20 us, or by the kernel sleep below */
		int64_t t_now = dsock_mono_ns();
		if (nb < 0)
			nb = shm_nonblocking(s, fd, flags);
		if (next_check < 0)
			next_check = nb ? 0 : t_now + KCHECK_NS;
		if (__atomic_load_n(&c->me->rx_switched, __ATOMIC_ACQUIRE) &&
		    (__atomic_load_n(&c->rx->token, __ATOMIC_RELAXED) || t_now >= next_check ||
		     __atomic_load_n(&c->peer->closing, __ATOMIC_ACQUIRE))) {
			next_check = t_now + KCHECK_NS;
			char t;
			ssize_t pk = dsock_real.recv(fd, &t, 1, MSG_PEEK | MSG_DONTWAIT);
			int k;
			if (pk > 0) {
				/* after the switch every kernel byte is a token, whatever
				 * the flag says (a token can land after its flag was
				 * cleared): drain them, or the sleep below never sleeps */
				k = shm_clear_and_drain(c, fd, 1);
			} else {
				k = pk == 0 ? 1 : errno != EAGAIN ? -errno : 0;
				if (k < 0)
					shm_stash_err(c, -k);
			}
			if (k == 1 || k < 0) {
				if (!peek_now) {
					peek_now = 1; /* a peek waits no longer */
					continue;
				}
				if (rx_avail(c, &head) > 0)
					continue; /* data came just before the FIN */
				if (k == 1)
					eof = 1;
				break;
			}
			if (ready_now(c, fd, peek_now, total))
				continue;
		}
		if (shm_back_asked(c)) {
			/* answered before any sleep: its token is gone (mid
			 * MSG_WAITALL too: the peer may wait for the answer before
			 * it sends the rest) */
			if (got && !waitall)
				break;
			shm_lease(c, 0);
			shm_unlock(&c->rx->rx_lock);
			if (!got)
				goto again;
			if (shm_back_step(s, fd) < 0 || shm_lock(&c->rx->rx_lock))
				return (ssize_t)got;
			continue;
		}
		if (nb || late_err) {
			err = late_err ? late_err : -EAGAIN;
			break;
		}
		if (!spin_end) {
			int64_t budget = dsock_spin_worth() ? dsock_spin_ns : 0;
			if (budget)
				dsock_spin_courtesy(t_now);
			spin_start = t_now;
			spin_end = t_now + budget;
		}
		if (t_now < spin_end) {
			/* a few microseconds of pure spinning, then yield on
			 * every round (at once when the peer shares our CPU):
			 * with more runnable threads than cores the peer we
			 * wait for may need this very core, and runs in our
			 * yields (spin.h) */
			if (t_now - spin_start >= DSOCK_PURE_SPIN_NS ||
			    dsock_spin_here(__atomic_load_n(&c->peer->cpu, __ATOMIC_RELAXED))) {
				sched_yield();
			} else {
				shm_spin_watch(c, head);
			}
			spun = 1;
			continue;
		}
		if (spun) {
			dsock_spin_outcome(0); /* ran out: the sleep was not spared */
			spun = 0;
		}
		int slept = sleep_in_kernel(s, c, fd, got, total, &peek_now, &rcv_deadline, &next_check,
					    &late_err, &err);
		if (slept == SLEPT_AGAIN)
			goto again;
		if (slept == SLEPT_FAULT)
			return err;
		spin_end = 0;
		if (slept == SLEPT_DONE)
			break;
	}
	return recv_finish(s, c, fd, got, err, eof);
}


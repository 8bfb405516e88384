/* Sending on the shm transport (the receive is recv.c's). */
#include "lib/transport/shm/ring.h"
#include "lib/base/grow.h"
#include "lib/base/signals.h"
#include "lib/base/proc.h"
#include "lib/base/real.h"
#include "lib/sock/io.h"
#include "lib/sock/ready.h"
#include "common/log.h"
#include "common/rawsys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <linux/tcp.h> /* the kernel's tcp_info: byte counters */
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- send ----------------------------------------------------------------- */
int shm_nonblocking(struct dsock_sock *s, int fd, int flags)
{
	if (flags & MSG_DONTWAIT)
		return 1;
	/* O_NONBLOCK as set through us (fcntl, FIONBIO, accept4, socket, or
	 * read at adoption), while no other process holds or held the socket;
	 * otherwise another process may have set it on the file we share: the
	 * kernel's file flags are the truth.  (A system call on the way to
	 * every blocking wait would lengthen every ping-pong round trip.) */
	if (!shm_shared(shm_conn(s)))
		return (atomic_load_explicit(&s->flags, memory_order_relaxed) & DSOCK_SF_NONBLOCK) != 0;
	return (dsock_real.fcntl(fd, F_GETFL) & O_NONBLOCK) != 0;
}

/* Blocks until the tx ring has space or the connection ends.  Returns 0 to
 * retry, or -errno. */
static int wait_space(struct shm_conn *c, int fd)
{
	uint32_t seq = __atomic_load_n(&c->tx->space_seq, __ATOMIC_ACQUIRE);
	struct timespec slice = { 0, 5 * 1000 * 1000 };
	uint64_t tail;

	__atomic_fetch_or(&c->tx->tx_waiting, DSOCK_TXW_FUTEX, __ATOMIC_SEQ_CST);
	/* (a move back whose turn comes only with both rings empty waits for
	 * room like any send: returning at once would spin) */
	if (tx_space(c, &tail) != 0 || shm_back_now(c))
		return 0;
	/* not FUTEX_PRIVATE: the word is shared with the other process */
	if (dsock_sys(SYS_futex, &c->tx->space_seq, FUTEX_WAIT, seq, &slice, NULL, 0) < 0 && errno == EINTR)
		return -EINTR;
	/* the consumer may be gone (a peer killed with an empty receive queue
	 * sent a FIN, not an RST, and only the probe draws the RST) */
	return shm_consumer_gone(c, fd, 0) ? -EPIPE : 0;
}

/* The kernel's verdict for a send on a connection whose peer is closing:
 * the token probes the peer, exactly as a kernel send would (SIGPIPE and
 * EPIPE included, MSG_NOSIGNAL respected). */
static int peer_closed_probe(int fd, int flags)
{
	char t = 0;
	ssize_t r = dsock_real.send(fd, &t, 1, MSG_DONTWAIT | (flags & MSG_NOSIGNAL));
	return r < 0 && errno != EAGAIN ? -errno : 0;
}

/* Makes ring bytes up to tail visible to the consumer (tx lock held) and
 * wakes it if it sleeps. */
static void publish(struct shm_conn *c, int fd, uint64_t tail, size_t n)
{
	/* our id first: a holder that dies between the two leaves the others
	 * loading the line, never trusting a stale copy */
	uint64_t me = writer_id(c);
	if (__atomic_load_n(&c->tx->tail_writer, __ATOMIC_RELAXED) != me)
		__atomic_store_n(&c->tx->tail_writer, me, __ATOMIC_RELAXED);
	/* release: the bytes are in the ring before the index says so */
	__atomic_store_n(&c->tx->tail, tail, __ATOMIC_RELEASE);
	c->tx_tail = tail;
	c->tx_tail_ok = 1;
	shm_count_ring_use(c);
	shm_ring_doorbell(c, fd);
	uint32_t cpu = (uint32_t)sched_getcpu() + 1;
	if (__atomic_load_n(&c->me->cpu, __ATOMIC_RELAXED) != cpu)
		__atomic_store_n(&c->me->cpu, cpu, __ATOMIC_RELAXED);
	dsock_spin_sent_to(__atomic_load_n(&c->peer->cpu, __ATOMIC_RELAXED));
}

/* What a send takes its bytes from: an iovec (m), or a file (m NULL:
 * file from pos on, sendfile's source).  total: the bytes it asks to send. */
struct send_src {
	const struct msghdr *m;
	int file;
	off_t pos;
	size_t total;
};

static ssize_t sendmsg_in(struct dsock_sock *s, int fd, const struct send_src *src, int flags);
#define FOLLOW_TRIES 100 /* sendmsg_in: tries to follow a peer gone back */
#define FILE_CHUNK (64 << 10) /* a file's bytes are published this often */

/* A call holds a reference on the socket (the fd table's own is the
 * other): the close sees it and makes the private dup that the call then
 * uses (shm_before_close; a receive picks it up in its loop).  No counter
 * of our own: it would cost two more locked instructions per call. */
ssize_t shm_sendmsg(struct dsock_sock *s, int fd, const struct msghdr *m, int flags)
{
	struct shm_conn *c = shm_conn(s);
	int k = atomic_load_explicit(&c->kfd, memory_order_acquire);
	struct send_src src = { m, -1, 0, iov_total(m) };

	return sendmsg_in(s, k >= 0 ? k : fd, &src, flags);
}

/* sendfile onto the connection: the file's bytes are read straight into
 * the ring (one copy, as the kernel's receive makes one), FILE_CHUNK at a
 * time so that the consumer copies one chunk out while the next is read. */
ssize_t shm_sendfile(struct dsock_sock *s, int fd, int file, off_t pos, size_t n)
{
	struct shm_conn *c = shm_conn(s);
	int k = atomic_load_explicit(&c->kfd, memory_order_acquire);
	struct send_src src = { NULL, file, pos, n };

	return sendmsg_in(s, k >= 0 ? k : fd, &src, 0);
}

struct plain_send {
	int fd, flags;
};

static ssize_t plain_send(void *arg, const struct msghdr *m)
{
	struct plain_send *p = arg;
	ssize_t r = dsock_real.sendmsg(p->fd, m, p->flags);
	return r < 0 ? -errno : r;
}

/* The rest of m from byte off on the kernel (our sending is plain now),
 * as the kernel's send takes it: blocking, SO_SNDTIMEO and signals its
 * own.  Returns off plus what the kernel took, or off alone when it
 * failed after some of this call's bytes went by the ring (the next call
 * sees the error, as after a kernel send that copied part of its bytes). */
static ssize_t send_rest_plain(int fd, const struct send_src *src, size_t off, int flags)
{
	const struct msghdr *m = src->m;

	if (!m) {
		/* by reads and the kernel's send, as for a plain socket: on
		 * loopback that outruns the kernel's sendfile */
		struct plain_send p = { fd, flags };
		ssize_t r = dsock_sendfile_by_reads(src->file, src->pos + (off_t)off, src->total - off, plain_send, &p);
		if (r < 0)
			return off ? (ssize_t)off : r;
		return (ssize_t)off + r;
	}
	struct iovec iov[m->msg_iovlen ? m->msg_iovlen : 1];
	struct msghdr km = *m;
	size_t n = 0, skip = off;
	ssize_t r;

	if (off) {
		for (size_t i = 0; i < m->msg_iovlen; i++) {
			if (skip >= m->msg_iov[i].iov_len) {
				skip -= m->msg_iov[i].iov_len;
				continue;
			}
			iov[n].iov_base = (char *)m->msg_iov[i].iov_base + skip;
			iov[n++].iov_len = m->msg_iov[i].iov_len - skip;
			skip = 0;
		}
		km.msg_iov = iov;
		km.msg_iovlen = n;
		km.msg_control = NULL; /* it went with the first byte */
		km.msg_controllen = 0;
	}
	r = dsock_real.sendmsg(fd, &km, flags);
	if (r < 0)
		return off ? (ssize_t)off : -errno;
	return (ssize_t)off + r;
}

/* Copies n bytes of src from byte off into the ring at tail: n, fewer
 * (a file that ends), or -errno (nothing read). */
static ssize_t src_copy(struct shm_conn *c, uint64_t tail, const struct send_src *src, size_t off, size_t n)
{
	struct ring_map rm = tx_map(c);
	uint32_t w = rm.w;

	if (src->m) {
		ring_copy(c->txd, w, tail + rm.shift, src->m, off, n, 1);
		return (ssize_t)n;
	}
	size_t at = (size_t)((tail + rm.shift) & (w - 1));
	struct iovec v[2];
	int k = 1;
	ssize_t r;

	v[0].iov_base = c->txd + at;
	v[0].iov_len = w - at < n ? w - at : n;
	if (v[0].iov_len < n) {
		v[1].iov_base = c->txd;
		v[1].iov_len = n - v[0].iov_len;
		k = 2;
	}
	r = preadv(src->file, v, k, src->pos + (off_t)off);
	return r < 0 ? -errno : r;
}

static ssize_t sendmsg_in(struct dsock_sock *s, int fd, const struct send_src *src, int flags)
{
	struct shm_conn *c = shm_conn(s);
	const struct msghdr *m = src->m;
	size_t total = src->total, done = 0;
	int64_t deadline = 0;
	ssize_t r;
	int err = 0, announced = 0, follow = 0, nb = -1;

	if ((flags & MSG_OOB) && shm_go_back(s, fd, DSOCK_BACK_URGENT) < 0)
		return -ECONNRESET;
	if (!shm_progress(s, fd) || c->state != SC_ATTACHED) {
		/* PENDING (or gone to the kernel): the kernel carries it; the
		 * mutex keeps an attach (and so a switch) out meanwhile */
		pthread_mutex_lock(&c->mu);
		r = send_rest_plain(fd, src, 0, flags);
		if (r > 0 && c->state == SC_OFFER_DUE)
			atomic_fetch_add(c->sent_cnt, r);
		pthread_mutex_unlock(&c->mu);
		return r;
	}
	/* an address on a connected TCP socket is ignored, as Linux does */
	if (m && m->msg_iovlen > IOV_MAX)
		return -EMSGSIZE;
again:
	if (shm_back_any(c)) {
		/* back to the kernel (back.c): once our sending is there, the
		 * kernel answers every send, exactly as for a plain socket; a
		 * blocking send that filled the ring goes on there with the rest */
		int d = shm_back_step(s, fd);
		if (d < 0)
			return done ? (ssize_t)done : d;
		if (__atomic_load_n(&c->me->back_sent, __ATOMIC_ACQUIRE))
			return send_rest_plain(fd, src, done, flags);
	}
	if (shm_tx_lock(c))
		return done ? (ssize_t)done : shm_fault(s, fd, "lock held forever");
	if (__atomic_load_n(&c->me->back_sent, __ATOMIC_ACQUIRE)) {
		/* the peer moved our sending back (a hand-over it makes without
		 * us, handover.c) while we waited for the lock */
		shm_tx_unlock(c);
		return send_rest_plain(fd, src, done, flags);
	}
	if (__atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE) &&
	    !__atomic_load_n(&c->me->closing, __ATOMIC_ACQUIRE) && follow++ < FOLLOW_TRIES) {
		/* the peer's sending went back while we waited for the lock
		 * (back.c, tx_back): ours follows before a byte enters the ring
		 * (a few tries: a lock may be busy for a moment; a peer that
		 * holds it for ever gets the ring as before) */
		shm_tx_unlock(c);
		if (follow > 1)
			sched_yield();
		goto again;
	}
	/* attached but the peer not yet (-EAGAIN here), or not switched now
	 * (kernel backpressure, or shut down): the kernel answers, under the
	 * lock a switch takes, blocking, EPIPE and SIGPIPE included */
	err = shm_active(c) ? shm_switch_tx_locked(c, fd, 0) : -EAGAIN;
	if (err == -EAGAIN || err == -EPIPE) {
		r = send_rest_plain(fd, src, done, flags);
		shm_tx_unlock(c);
		return r;
	}
	if (err)
		goto out;
	/* an error a look of ours took from the kernel comes first, as the
	 * kernel's send reports its own */
	if ((err = shm_take_err(c)))
		goto out;
	if (__atomic_load_n(&c->peer->closing, __ATOMIC_ACQUIRE) && (err = peer_closed_probe(fd, flags)))
		goto out;
	/* after our own SHUT_WR, or once the peer closed: the kernel decides
	 * (EPIPE, SIGPIPE unless MSG_NOSIGNAL), probed with a token */
	if (__atomic_load_n(&c->me->closing, __ATOMIC_ACQUIRE) && (err = peer_closed_probe(fd, flags)))
		goto out;
	while (done < total) {
		uint64_t tail;
		int64_t space = tx_space_for(c, &tail, total - done);

		if (space < 0) {
			shm_tx_unlock(c);
			return done ? (ssize_t)done : shm_fault(s, fd, "tx indices out of range");
		}
		if (space == 0) {
			if (__atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE) && follow++ < FOLLOW_TRIES) {
				/* the peer's sending is plain: no space token will
				 * come (an edge-triggered writer would wait for ever);
				 * ours goes back now (back.c), unless a lock is busy
				 * for a moment */
				shm_tx_unlock(c);
				sched_yield();
				goto again;
			}
			if (nb < 0)
				nb = shm_nonblocking(s, fd, flags);
			if (nb) {
				if (!announced && (!done || shm_nonblocking(s, fd, 0))) {
					/* a poller will wait for space: ask for a token, then
					 * look again (seq_cst both sides): space freed in
					 * between would otherwise wake nobody.  After a short
					 * write too (a nonblocking socket): an edge-triggered
					 * writer (nginx: IN|OUT|ET) then waits for an edge that
					 * only this token gives (tests/unit/test_shm_tokens.c) */
					__atomic_fetch_or(&c->tx->tx_waiting, DSOCK_TXW_POLL, __ATOMIC_SEQ_CST);
					announced = 1;
					continue;
				}
				/* (the ring is full: is its consumer still there?
				 * Without this a writer whose peer ended with _exit
				 * would wait forever) */
				if (!done)
					err = shm_consumer_gone(c, fd, 1) ? peer_closed_probe(fd, flags) ?: -EPIPE
									  : -EAGAIN;
				break;
			}
			/* blocking: wait for space until all of it is in, as the
			 * kernel's send does; a signal or SO_SNDTIMEO ends the wait
			 * with what went in (or EINTR, EAGAIN when nothing did) */
			shm_tx_unlock(c);
			if (!deadline)
				deadline = dsock_timeo_deadline(fd, SO_SNDTIMEO);
			err = dsock_mono_ns() >= deadline ? -EAGAIN : wait_space(c, fd);
			if (err == -EINTR && !done && dsock_signals_restart())
				err = 0;
			if (err == -EPIPE)
				err = peer_closed_probe(fd, flags) ?: -EPIPE;
			if (shm_tx_lock(c))
				return done ? (ssize_t)done : shm_fault(s, fd, "lock held forever");
			if (err)
				break;
			if (shm_back_any(c)) {
				/* back to the kernel: what the ring holds goes there
				 * first, then the rest of this send */
				shm_tx_unlock(c);
				goto again;
			}
			continue;
		}
		size_t n = total - done < (size_t)space ? total - done : (size_t)space;
		if (!m && n > FILE_CHUNK)
			n = FILE_CHUNK;
		ssize_t got = src_copy(c, tail, src, done, n);
		if (got <= 0) { /* a file that ends or fails */
			err = (int)got;
			break;
		}
		publish(c, fd, tail + (size_t)got, (size_t)got);
		done += (size_t)got;
		if ((size_t)got < n)
			break; /* the file ended */
	}
out:
	shm_tx_unlock(c);
	return done ? (ssize_t)done : err;
}

/* The solo thread's send (no reference on s: nothing here may block or
 * wait).  Only the plain case: attached, reported, switched, nobody
 * closing or going back to the kernel, and room for all of it; anything
 * else is DSOCK_ESLOW before a byte moves, and shm_sendmsg does it. */
ssize_t shm_sendmsg_solo(struct dsock_sock *s, int fd, const struct msghdr *m, int flags)
{
	struct shm_conn *c = shm_conn(s);
	uint64_t tail;
	size_t total;

	if (c->state != SC_ATTACHED || !__atomic_load_n(&c->reported, __ATOMIC_RELAXED) || (flags & MSG_OOB) ||
	    atomic_load_explicit(&c->kfd, memory_order_relaxed) >= 0 || m->msg_iovlen > IOV_MAX ||
	    __atomic_load_n(&c->me->switch_off, __ATOMIC_ACQUIRE) == DSOCK_SWITCH_NONE ||
	    shm_back_any(c) || __atomic_load_n(&c->peer->closing, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&c->me->closing, __ATOMIC_ACQUIRE) || !shm_active(c))
		return DSOCK_ESLOW;
	total = iov_total(m);
	if (!total || shm_tx_lock(c))
		return DSOCK_ESLOW;
	if (__atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&c->me->back_sent, __ATOMIC_ACQUIRE)) {
		shm_tx_unlock(c); /* it went back meanwhile: ours follows (back.c) */
		return DSOCK_ESLOW;
	}
	if (tx_space_for(c, &tail, total) < (int64_t)total) {
		shm_tx_unlock(c);
		return DSOCK_ESLOW;
	}
	struct ring_map rm = tx_map(c);
	ring_copy(c->txd, rm.w, tail + rm.shift, m, 0, total, 1);
	publish(c, fd, tail + total, total);
	shm_tx_unlock(c);
	return (ssize_t)total;
}

int shm_shutdown(struct dsock_sock *s, int fd, int how)
{
	struct shm_conn *c = shm_conn(s);
	int wr = how == SHUT_WR || how == SHUT_RDWR, was = 0, r;

	/* closing before the FIN: a peer that sees our FIN with `closing`
	 * clear takes us for dead (recv.c, peer_died_unread).  An attach
	 * racing with us sees wr_shut, or we see its mapping (seq_cst both
	 * sides, conn.c attach).  The kernel FIN travels after every token,
	 * so the peer reads the ring dry before it sees EOF. */
	if (c && wr) {
		__atomic_store_n(&c->wr_shut, 1, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&c->h, __ATOMIC_SEQ_CST))
			was = __atomic_exchange_n(&c->me->closing, 1, __ATOMIC_SEQ_CST) + 1;
	}
	r = dsock_real.shutdown(fd, how);
	if (r < 0) {
		r = -errno;
		if (was == 1)
			__atomic_store_n(&c->me->closing, 0, __ATOMIC_SEQ_CST);
		return r;
	}
	return r;
}

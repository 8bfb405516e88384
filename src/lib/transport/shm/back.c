/* Handing a connection over to a holder without dsock (an exec'ed static
 * or setuid program, a program the rules exclude, any receiver of
 * SCM_RIGHTS): both directions go back to the kernel, each at an exact
 * byte offset of its kernel stream, before the fd leaves.
 *
 * A side's kernel stream, once it has gone back, reads: data sent before
 * its switch, tokens up to side.back_off, then plain data, starting with
 * the ring bytes its consumer had not read (re-sent from the ring).  The
 * side going back holds the three locks that keep any other byte out of
 * that count: its tx lock (sends, data tokens), its rx lock (space tokens)
 * and the peer's rx lock (the peer's drains, which stop at back_off).
 * See docs/ARCHITECTURE.md ("Handing a connection over"). */
#include "lib/transport/shm/ring.h"
#include "lib/base/real.h"
#include "lib/sock/ready.h"
#include "common/log.h"
#include "common/reason.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>

void shm_nap(long ns)
{
	struct timespec ts = { 0, ns };
	nanosleep(&ts, NULL);
}

/* A lock of the peer's, tried (two sides going back at once would each
 * hold their own and wait for the other's); a dead holder's is taken. */
int shm_trylock_peer(uint32_t *w, int round)
{
	if (shm_trylock(w))
		return 1;
	if (round % 64 == 63)
		shm_reap_dead_holder(w);
	return 0;
}

/* Sends n bytes on the kernel socket fd without blocking (we hold locks
 * the peer may need to read them): from the ring `ring` at index head, or
 * from buf when ring is NULL.  The socket has carried only tokens, so its
 * buffer is nearly empty; it is grown once for a large ring.  0, or
 * -errno (a short send leaves the stream broken: the caller resets). */
int shm_send_backlog(struct shm_conn *c, int fd, const unsigned char *ring, uint32_t win, uint32_t shift,
		     const unsigned char *buf, uint64_t head, uint64_t n)
{
	int grown = 0;

	while (n) {
		size_t pos = ring ? (size_t)((head + shift) & (win - 1)) : 0;
		size_t run = ring ? (win - pos < n ? win - pos : (size_t)n) : (size_t)n;
		const unsigned char *p = ring ? ring + pos : buf;
		ssize_t r = dsock_real.send(fd, p, run, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r > 0) {
			head += (uint64_t)r;
			if (!ring)
				buf += r;
			n -= (uint64_t)r;
			continue;
		}
		if (r < 0 && errno == EAGAIN && !grown) {
			int cur = 0;
			socklen_t l = sizeof(cur);
			dsock_real.getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &cur, &l);
			int want = cur + (int)n; /* the kernel doubles it */
			if (dsock_real.setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &want, sizeof(want)) < 0)
				dsock_real.setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof(want));
			grown = 1;
			continue;
		}
		return r < 0 ? -errno : -EIO;
	}
	return 0;
}

/* Moves our sending back to the kernel for good.  0, -EAGAIN (not now:
 * try again), or -errno.  A hand-over (its fd must leave) waits for the
 * peer's lock and re-sends what the ring holds.  A connection whose
 * consumers sleep (asleep) has no hurry: one try.  Once our sending is
 * plain we can send no more tokens, so a peer still writing to its ring
 * could wait for a space token that never comes.  So the first side to
 * move that way moves only while both rings are empty, holding the
 * peer's tx lock too (no byte enters its ring meanwhile), and wakes the
 * peer with a last token; the peer's writers look for our move under
 * their tx lock (sendmsg_in, shm_sendmsg_solo) and move theirs, with
 * their ring still empty, before they write again. */
int shm_tx_back(struct shm_conn *c, int fd, int asleep)
{
	int r = 0, first = 0;

	for (int round = 0;; round++) {
		if (shm_lock(&c->rx->rx_lock))
			return -EAGAIN;
		if (shm_tx_lock(c)) {
			shm_unlock(&c->rx->rx_lock);
			return -EAGAIN;
		}
		if (shm_trylock_peer(&c->tx->rx_lock, round)) {
			/* (the peer moves under the lock we now hold) */
			first = asleep && !__atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE);
			if (!first || (!shm_shared(c) && shm_peer_tx_trylock(c)))
				break;
			first = 0;
			shm_unlock(&c->tx->rx_lock); /* the peer is writing: later */
		}
		shm_tx_unlock(c);
		shm_unlock(&c->rx->rx_lock);
		if (asleep)
			return -EAGAIN;
		if (round > 20000)
			return -ETIMEDOUT;
		if (round < 64)
			sched_yield();
		else
			shm_nap(20000);
	}
	if (!__atomic_load_n(&c->me->back_sent, __ATOMIC_ACQUIRE)) {
		uint64_t head = __atomic_load_n(&c->tx->head, __ATOMIC_ACQUIRE);
		uint64_t tail = __atomic_load_n(&c->tx->tail, __ATOMIC_RELAXED);
		uint64_t n = __atomic_load_n(&c->me->switch_off, __ATOMIC_ACQUIRE) == DSOCK_SWITCH_NONE ?
			     0 : tail - head;
		int64_t k;

		/* the first side: both rings empty, and the last token (counted
		 * in back_off below); not now (-EAGAIN) if a consumer has ring
		 * bytes to read first, or our kernel stream cannot switch yet */
		if (first && (r = n || __atomic_load_n(&c->rx->tail, __ATOMIC_ACQUIRE) !=
					       __atomic_load_n(&c->rx->head, __ATOMIC_RELAXED) ?
					  -EAGAIN : shm_last_token_locked(c, fd)))
			goto out;
		k = shm_kernel_sent(fd) - c->tx_base;
		struct ring_map rm = ring_map_of(c, c->tx);
		if (!rm.w || n > rm.w || k < 0)
			r = -EPROTO;
		else if (n && __atomic_load_n(&c->me->closing, __ATOMIC_ACQUIRE))
			r = -EPIPE; /* our FIN is out: no byte can follow it */
		else if (n)
			r = shm_send_backlog(c, fd, c->txd, rm.w, rm.shift, NULL, head, n);
		if (!r) {
			__atomic_store_n(&c->me->back_off, (uint64_t)k, __ATOMIC_RELAXED);
			__atomic_store_n(&c->me->back_sent, 1, __ATOMIC_SEQ_CST);
			DSOCK_DBG("fd %d: sending back on the kernel at byte %lld, %llu ring bytes re-sent", fd,
				  (long long)k, (unsigned long long)n);
		}
	}
out:
	if (first)
		shm_unlock(&c->rx->tx_lock);
	shm_unlock(&c->tx->rx_lock);
	shm_tx_unlock(c);
	shm_unlock(&c->rx->rx_lock);
	return r;
}

/* The peer's stream, for us: data before its switch, tokens up to its
 * back_off, then plain.  Its offsets as we use them (a switch offset past
 * back_off breaks the rules and is cut to it). */
void shm_peer_offsets(struct shm_conn *c, uint64_t *sw, uint64_t *dn, uint64_t *kr)
{
	*dn = __atomic_load_n(&c->peer->back_off, __ATOMIC_RELAXED);
	*sw = __atomic_load_n(&c->peer->switch_off, __ATOMIC_ACQUIRE);
	if (*sw > *dn)
		*sw = *dn;
	*kr = __atomic_load_n(&c->me->kread, __ATOMIC_ACQUIRE);
}

/* 1 once every byte the peer sends from our next kernel byte on is plain
 * data (final: nothing counts kread afterwards). */
static int rx_plain(struct shm_conn *c)
{
	uint64_t sw, dn, kr;

	if (!__atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE))
		return 0;
	if (__atomic_load_n(&c->peer->switch_off, __ATOMIC_ACQUIRE) == DSOCK_SWITCH_NONE)
		return 1; /* it never sent a token */
	shm_peer_offsets(c, &sw, &dn, &kr);
	return kr >= dn;
}

/* Discards the peer's tokens that are in the kernel now (rx lock held,
 * past its switch offset, its back_off published: the drain stops there).
 * Returns 1 when none is left, 2 at EOF (the stream ends here), 0 if some
 * are still to come, or -errno. */
int shm_discard_tokens(struct shm_conn *c, int fd)
{
	uint64_t sw, dn, kr;
	int r = shm_drain_tokens(c, fd, 1);

	shm_peer_offsets(c, &sw, &dn, &kr);
	return r < 0 ? r : kr >= dn ? 1 : r == 1 ? 2 : 0;
}

/* Why the connection goes back, for `dsock stat`: a hand-over if either
 * side asks for one (or asks in a way we do not know), else urgent data,
 * else SO_RCVLOWAT, else its consumers sleep. */
static unsigned back_reason(struct shm_conn *c)
{
	uint32_t a = __atomic_load_n(&c->me->back_req, __ATOMIC_ACQUIRE);
	uint32_t b = __atomic_load_n(&c->peer->back_req, __ATOMIC_ACQUIRE);
	static const unsigned rank[] = { [DSOCK_BACK_ASLEEP] = 1, [DSOCK_BACK_RCVLOWAT] = 2,
					 [DSOCK_BACK_URGENT] = 3, [DSOCK_BACK_HANDOVER] = 4 };
	static const unsigned why[] = { DSOCK_R_HANDED_OVER, DSOCK_R_ASLEEP, DSOCK_R_RCVLOWAT, DSOCK_R_URGENT,
					DSOCK_R_HANDED_OVER };
	unsigned ra = a < sizeof(rank) / sizeof(rank[0]) ? rank[a] : 4;
	unsigned rb = b < sizeof(rank) / sizeof(rank[0]) ? rank[b] : 4;

	/* (neither asks: the peer went back unasked, as a hand-over does) */
	return why[ra > rb ? ra : rb];
}

int shm_back_answer(struct dsock_sock *s, int fd)
{
	struct shm_conn *c = shm_conn(s);
	int r;

	/* the peer's request, or our own when its consumer sleeps (a
	 * hand-over's own thread moves ours too: tx_back runs once) */
	if ((!__atomic_load_n(&c->peer->back_req, __ATOMIC_ACQUIRE) &&
	     !__atomic_load_n(&c->me->back_req, __ATOMIC_ACQUIRE) &&
	     !__atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE)) ||
	    __atomic_load_n(&c->me->back_sent, __ATOMIC_ACQUIRE))
		return 0;
	unsigned why = back_reason(c);
	/* after our FIN nothing follows on the kernel: our ring ends the
	 * stream, and a peer whose consumers sleep needs no answer */
	if (why == DSOCK_R_ASLEEP && __atomic_load_n(&c->me->closing, __ATOMIC_ACQUIRE))
		return 0;
	r = shm_tx_back(c, fd, why == DSOCK_R_ASLEEP);
	if (r == -EAGAIN)
		return 0; /* busy: the next call answers */
	if (r) {
		DSOCK_WARN("connection on fd %d reset: %s, and our ring could not move back to the kernel (%s)",
			   fd, why == DSOCK_R_ASLEEP ? "it goes back to the kernel (its consumers sleep)" :
			   "its peer hands it to a program without dsock", strerror(-r));
		return shm_reset(s, fd, DSOCK_R_HANDOVER_RESET);
	}
	return 0;
}

_Atomic long shm_back_conns;

int shm_back_step(struct dsock_sock *s, int fd)
{
	struct shm_conn *c = shm_conn(s);
	int r = shm_back_answer(s, fd);

	if (r < 0)
		return r;
	if (__atomic_load_n(&c->me->back_sent, __ATOMIC_ACQUIRE) && rx_plain(c) &&
	    __atomic_load_n(&s->tp, __ATOMIC_ACQUIRE) == &dsock_shm_transport) {
		/* both directions plain: this process leaves the transport */
		shm_linger_forget(c);
		dsock_hidden_set(c->sock, &c->unbacked, 0);
		if (c->used_ring)
			atomic_fetch_add(&shm_back_conns, 1);
		shm_detach(s, back_reason(c));
	}
	return 0;
}

ssize_t shm_recv_back(struct dsock_sock *s, int fd, struct msghdr *m, int flags)
{
	struct shm_conn *c = shm_conn(s);
	int nb = -1;

	for (;;) {
		uint64_t sw, dn, kr;
		ssize_t r;

		if (shm_lock(&c->rx->rx_lock))
			return shm_fault(s, fd, "lock held forever");
		dsock_hidden_set(c->sock, &c->unbacked, 0);
		if (rx_plain(c)) {
			shm_unlock(&c->rx->rx_lock);
			shm_back_step(s, fd);
			r = dsock_real.recvmsg(fd, m, flags);
			return r < 0 ? -errno : r;
		}
		m->msg_flags = 0;
		shm_peer_offsets(c, &sw, &dn, &kr);
		if (kr < sw) {
			/* data the peer sent before its switch (a short count at
			 * this one boundary: a MSG_WAITALL caller goes on with
			 * shm_recv_back_rest) */
			size_t total = 0;
			for (size_t i = 0; i < m->msg_iovlen; i++)
				total += m->msg_iov[i].iov_len;
			r = shm_rx_kernel(c, fd, m, 0, total, flags);
			shm_unlock(&c->rx->rx_lock);
			if (r != -EAGAIN)
				return r;
		} else {
			r = shm_discard_tokens(c, fd);
			shm_unlock(&c->rx->rx_lock);
			if (r < 0)
				return r;
			if (r == 2)
				return 0; /* EOF */
			if (r)
				continue;
		}
		/* an error one of our looks took comes first */
		if ((r = shm_take_err(c)))
			return r;
		/* nothing readable now: sleep as a plain receive would
		 * (SO_RCVTIMEO, signals) until the kernel has something */
		if (nb < 0)
			nb = shm_nonblocking(s, fd, flags);
		if (nb)
			return -EAGAIN;
		char t;
		r = dsock_real.recv(fd, &t, 1, MSG_PEEK);
		if (r < 0)
			return -errno; /* (an error too: this receive reports it) */
	}
}

ssize_t shm_recv_back_rest(struct dsock_sock *s, int fd, struct msghdr *m, size_t got, int flags)
{
	size_t off = got;

	for (size_t i = 0; i < m->msg_iovlen; i++) {
		size_t len = m->msg_iov[i].iov_len;
		if (off >= len) {
			off -= len; /* filled already */
			continue;
		}
		while (off < len) {
			struct iovec v = { (char *)m->msg_iov[i].iov_base + off, len - off };
			struct msghdr one = { .msg_iov = &v, .msg_iovlen = 1 };
			ssize_t r = shm_recv_back(s, fd, &one, flags);
			if (r <= 0)
				return (ssize_t)got; /* EOF, error, timeout, signal */
			got += (size_t)r;
			off += (size_t)r;
		}
		off = 0;
	}
	return (ssize_t)got;
}

long shm_readable_back(struct shm_conn *c, int fd)
{
	uint64_t sw, dn, kr;
	int inq = 0;

	if (fd < 0 || dsock_real.ioctl(fd, SIOCINQ, &inq) < 0)
		return 0;
	if (rx_plain(c))
		return inq;
	shm_peer_offsets(c, &sw, &dn, &kr);
	if (kr < sw)
		return sw - kr < (uint64_t)inq ? (long)(sw - kr) : inq;
	return (uint64_t)inq > dn - kr ? (long)((uint64_t)inq - (dn - kr)) : 0;
}

/* The peer's tokens in our kernel queue, discarded once every byte it sent
 * before its switch is read (rx lock held). */
static void discard_if_read(struct shm_conn *c, int fd)
{
	uint64_t sw, dn, kr;

	if (rx_plain(c))
		return;
	shm_peer_offsets(c, &sw, &dn, &kr);
	if (kr >= sw)
		shm_discard_tokens(c, fd);
}

void shm_back_discard(struct shm_conn *c, int fd)
{
	if (shm_lock(&c->rx->rx_lock))
		return;
	discard_if_read(c, fd);
	shm_unlock(&c->rx->rx_lock);
}

int shm_spurious_back(struct shm_conn *c, int fd)
{
	char t;
	ssize_t n;

	if (shm_lock(&c->rx->rx_lock))
		return 0;
	discard_if_read(c, fd);
	n = dsock_real.recv(fd, &t, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n < 0)
		shm_stash_err(c, errno); /* the receive reports it */
	shm_unlock(&c->rx->rx_lock);
	return n < 0 && errno == EAGAIN; /* tokens only: nothing to read */
}

/* Handing a connection over to a holder without dsock (an exec'ed static
 * or setuid program, a program the rules exclude, any receiver of
 * SCM_RIGHTS): both directions go back to the kernel, each at an exact
 * byte offset of its kernel stream (back.c), before the fd leaves.
 *
 * Our own direction we move ourselves.  The peer's needs the peer's
 * kernel socket: the bytes it wrote into our ring must follow, on its
 * stream, what that stream already carries.  A peer that is asleep,
 * computing, stopped, or blocked until we are done (our own parent, in
 * vfork; a parent waiting for the child it passes the connection to)
 * cannot do it in time, so where the daemon may take the peer's socket
 * from its process (PEER_REQ in common/proto.h) we move the peer's
 * direction ourselves (peer_back), and otherwise wait for the peer's
 * answer, 2 s at most.  See docs/ARCHITECTURE.md ("Handing a connection
 * over"). */
#include "lib/transport/shm/ring.h"
#include "lib/ctl/ctl.h"
#include "lib/base/real.h"
#include "lib/sock/ready.h"
#include "common/log.h"
#include "common/reason.h"

#include <errno.h>
#include <linux/sockios.h>
#include <poll.h>
#include <netinet/in.h>
#include <linux/tcp.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define BACK_WAIT_NS 2000000000LL /* the peer answers within this, or we reset */
#define PEER_REQ_MS 1000          /* the daemon lends the peer's socket within this */
/* peer_back holds the peer's locks while bytes still in flight arrive:
 * at most this long (a peer thread waits for a lock ~0.2 s, then resets) */
#define PEER_HOLD_NS 100000000LL
/* shm_go_back's try at the peer's direction (else it follows by itself) */
#define GO_BACK_PEER_NS 50000000LL
/* pre-switch bytes of the peer's that we had not read: read out and sent
 * again (the tokens behind them must go), at most this many */
#define PEER_UNREAD_MAX (64u << 20)

/* 1 if nothing can follow on fd's stream any more: its FIN is out, or it
 * is closed (then its byte count is uncertain too). */
static int stream_ended(int fd)
{
	struct tcp_info ti;
	socklen_t l = sizeof(ti);

	return dsock_real.getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) < 0 || shm_fin_state(ti.tcpi_state) ||
	       ti.tcpi_state == 7 /* TCP_CLOSE */;
}

/* Waits until our kernel socket holds the peer's bytes up to k (read to
 * kread, or queued), consuming none: 0, or -EAGAIN at end. */
static int arrived(struct shm_conn *c, int fd, uint64_t k, int64_t end)
{
	for (;;) {
		int inq = 0;
		if (dsock_real.ioctl(fd, SIOCINQ, &inq) == 0 &&
		    __atomic_load_n(&c->me->kread, __ATOMIC_ACQUIRE) + (uint64_t)inq >= k)
			return 0;
		if (dsock_mono_ns() > end)
			return -EAGAIN;
		shm_nap(20000);
	}
}

/* Takes exactly n bytes from our kernel socket (rx lock held), into buf or
 * discarded (buf NULL), counting them in side.kread; waits for bytes still
 * in flight until end.  0, or -errno (-ETIMEDOUT). */
static int take_exact(struct shm_conn *c, int fd, unsigned char *buf, uint64_t n, int64_t end)
{
	char junk[4096];

	while (n) {
		uint64_t cap = buf ? 1u << 30 : sizeof(junk);
		size_t want = (size_t)(n < cap ? n : cap);
		ssize_t r = dsock_real.recv(fd, buf ? (void *)buf : junk, want, MSG_DONTWAIT);
		if (r > 0) {
			uint64_t kr = __atomic_load_n(&c->me->kread, __ATOMIC_RELAXED);
			__atomic_store_n(&c->me->kread, kr + (uint64_t)r, __ATOMIC_RELEASE);
			n -= (uint64_t)r;
			if (buf)
				buf += r;
			continue;
		}
		if (r == 0)
			return -EPIPE; /* EOF before the bytes its counter names */
		if (errno != EAGAIN)
			return -errno;
		if (dsock_mono_ns() > end)
			return -ETIMEDOUT;
		shm_nap(20000);
	}
	return 0;
}

/* ---- moving the peer's sending without it -----------------------------------
 * With the peer's kernel socket (pfd, lent by the daemon) we do what its
 * own tx_back would, under the three locks that keep every other byte out
 * of its kernel stream: its tx lock (its sends, data tokens, switch), its
 * rx lock (its space tokens) and our rx lock (our drains).  That stream,
 * as we read it, then is: data sent before its switch (switch_off), tokens
 * up to its byte count now (k: its socket's counter less the baseline it
 * published at attach), then what we send on it and mark as plain from
 * k (its back_off): first any pre-switch data we had not read yet (read
 * out here: the tokens behind it must go), then the ring bytes we had not
 * read; then whatever it sends itself (its writers look for back_sent
 * under their tx lock, sendmsg_in).  Returns 0 (done, or the peer did it
 * meanwhile), 1 (its sending never switched, and never will: our request
 * is up), -EAGAIN (a lock is busy: again later) or -errno (the caller
 * resets: a byte may be gone). */
static int peer_back(struct shm_conn *c, int fd, int pfd, int round, int64_t end)
{
	uint64_t sw, k, kr, head, tail, d = 0;
	struct ring_map rm = { 0, 0 };
	unsigned char *dbuf = NULL;
	int64_t base, sent;
	int r = 0;

	if (shm_lock(&c->rx->rx_lock))
		return -EAGAIN;
	if (!shm_trylock_peer(&c->tx->rx_lock, round)) {
		shm_unlock(&c->rx->rx_lock);
		return -EAGAIN;
	}
	if (!shm_peer_tx_trylock(c)) {
		shm_unlock(&c->tx->rx_lock);
		shm_unlock(&c->rx->rx_lock);
		return -EAGAIN;
	}
	if (__atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE))
		goto out;
	sw = __atomic_load_n(&c->peer->switch_off, __ATOMIC_ACQUIRE);
	if (sw == DSOCK_SWITCH_NONE) {
		r = 1;
		goto out;
	}
	base = __atomic_load_n(&c->peer->tx_base, __ATOMIC_RELAXED);
	sent = shm_kernel_sent(pfd);
	head = __atomic_load_n(&c->rx->head, __ATOMIC_RELAXED);
	tail = __atomic_load_n(&c->rx->tail, __ATOMIC_ACQUIRE);
	kr = __atomic_load_n(&c->me->kread, __ATOMIC_ACQUIRE);
	k = (uint64_t)(sent - base);
	if (sent < 0 || base < 0 || sent < base || k < sw || k - sw > (1ULL << 40) || kr > k ||
	    !(rm = ring_map_of(c, c->rx)).w || tail - head > rm.w) {
		r = -EPROTO;
		goto out;
	}
	if (stream_ended(pfd)) {
		r = -EPIPE; /* nothing can follow its FIN */
		goto out;
	}
	/* bytes still in flight arrive within microseconds (loopback),
	 * unless our receive buffer is full of its pre-switch data: then they
	 * come as that is read (below), else we let go of its locks and come
	 * back */
	if (end > dsock_mono_ns() + PEER_HOLD_NS)
		end = dsock_mono_ns() + PEER_HOLD_NS;
	if (kr >= sw && (r = arrived(c, fd, k, end)))
		goto out;
	if (kr < sw) {
		d = sw - kr;
		dbuf = d > PEER_UNREAD_MAX ? MAP_FAILED :
		       mmap(NULL, d, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (dbuf == MAP_FAILED) {
			dbuf = NULL;
			r = -ENOMEM;
			goto out;
		}
		if ((r = take_exact(c, fd, dbuf, d, end)))
			goto out;
	}
	/* its tokens: every byte from its switch to k */
	kr = __atomic_load_n(&c->me->kread, __ATOMIC_ACQUIRE);
	if ((r = take_exact(c, fd, NULL, k - kr, end)))
		goto out;
	if (d)
		r = shm_send_backlog(c, pfd, NULL, 0, 0, dbuf, 0, d);
	if (!r && tail != head)
		r = shm_send_backlog(c, pfd, c->rxd, rm.w, rm.shift, NULL, head, tail - head);
	if (!r) {
		__atomic_store_n(&c->peer->back_off, k, __ATOMIC_RELAXED);
		__atomic_store_n(&c->peer->back_sent, 1, __ATOMIC_SEQ_CST);
		DSOCK_DBG("fd %d: moved the peer's sending back to the kernel at its byte %llu: %llu unread bytes "
			  "and %llu ring bytes sent again", fd, (unsigned long long)k, (unsigned long long)d,
			  (unsigned long long)(tail - head));
	}
out:
	shm_unlock(&c->rx->tx_lock);
	shm_unlock(&c->tx->rx_lock);
	shm_unlock(&c->rx->rx_lock);
	if (dbuf)
		munmap(dbuf, d);
	return r;
}

/* peer_back until it is done: 0 (*never set when the peer's sending never
 * switched), -EAGAIN (its locks stayed busy until end) or -errno. */
static int peer_move(struct shm_conn *c, int fd, int pfd, int64_t end, int *never)
{
	for (int i = 0; !__atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE); i++) {
		int r = peer_back(c, fd, pfd, i, end);
		if (r >= 0) {
			*never = r == 1;
			return 0;
		}
		if (r != -EAGAIN)
			return r;
		if (dsock_mono_ns() > end)
			return -EAGAIN;
		if (i < 100)
			sched_yield();
		else
			shm_nap(100000);
	}
	return 0;
}

/* The peer's socket from the daemon, when the peer's sending is on the
 * ring (else it needs no move), or -1. */
static int lend_peer(struct dsock_sock *s, struct shm_conn *c, int fd)
{
	int pfd;

	if (__atomic_load_n(&c->peer->switch_off, __ATOMIC_ACQUIRE) == DSOCK_SWITCH_NONE ||
	    __atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE))
		return -1;
	pfd = dsock_ctl_fetch_peer(s->id, fd, PEER_REQ_MS);
	if (pfd < 0)
		DSOCK_DBG("fd %d: no peer socket from the daemon (%s): the peer moves its own sending", fd,
			  strerror(-pfd));
	return pfd;
}

/* The peer's stream ended (its FIN is in our socket) while its sending
 * was on the ring: it never answers.  With nothing of it left in our ring
 * and its pre-switch data read, the rest of its stream is tokens then the
 * FIN: they are read and dropped, and the new holder reads EOF (1).  Bytes
 * of it in our ring cannot follow its FIN (-EPIPE).  0: it has not ended.
 * (rx lock taken here.) */
static int peer_ended(struct shm_conn *c, int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };
	uint64_t sw = __atomic_load_n(&c->peer->switch_off, __ATOMIC_ACQUIRE);
	char junk[4096];
	int r = 0;

	if (sw == DSOCK_SWITCH_NONE || dsock_real.poll(&p, 1, 0) <= 0 || !(p.revents & (POLLRDHUP | POLLHUP)))
		return 0;
	if (shm_lock(&c->rx->rx_lock))
		return -EDEADLK;
	if (__atomic_load_n(&c->rx->tail, __ATOMIC_ACQUIRE) != __atomic_load_n(&c->rx->head, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&c->me->kread, __ATOMIC_ACQUIRE) < sw) {
		r = -EPIPE;
	} else {
		for (ssize_t n; (n = dsock_real.recv(fd, junk, sizeof(junk), MSG_DONTWAIT)) > 0;)
			__atomic_add_fetch(&c->me->kread, (uint64_t)n, __ATOMIC_RELEASE);
		r = 1;
	}
	shm_unlock(&c->rx->rx_lock);
	return r;
}

static int go_back_failed(struct dsock_sock *s, int fd, int pfd, unsigned reason, const char *what,
			  const char *why)
{
	if (pfd >= 0)
		dsock_real.close(pfd);
	DSOCK_WARN("connection on fd %d reset: %s, and %s", fd, what, why);
	return shm_reset(s, fd, reason);
}

/* SO_RCVLOWAT above 1, set before the connection existed or inherited
 * from its listener (setsockopt on it afterwards is shm_sockopt's): the
 * kernel would not wake a poller for a 1-byte token, so it stays there. */
int shm_rcvlowat_set(int fd)
{
	int v = 1;
	socklen_t l = sizeof(v);

	return dsock_real.getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, &l) == 0 && v > 1;
}

int shm_go_back(struct dsock_sock *s, int fd, uint32_t why)
{
	struct shm_conn *c = shm_conn(s);
	int64_t end = dsock_mono_ns() + BACK_WAIT_NS;
	uint32_t none = 0;
	int r, never = 0, pfd;
	const char *what = why == DSOCK_BACK_URGENT ? "it carries urgent data" : "it sets SO_RCVLOWAT";

	if (!c || c->state != SC_ATTACHED) {
		if (c && c->state != SC_ATTACHED)
			shm_refuse(c, why == DSOCK_BACK_URGENT ? DSOCK_R_URGENT : DSOCK_R_RCVLOWAT);
		return 0;
	}
	__atomic_compare_exchange_n(&c->me->back_req, &none, why, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
	if (__atomic_load_n(&c->peer->switch_off, __ATOMIC_ACQUIRE) != DSOCK_SWITCH_NONE)
		shm_wake_peer(c, fd); /* (its token must go before our sending is plain) */
	while ((r = shm_tx_back(c, fd, 0)) == -EAGAIN && dsock_mono_ns() < end)
		shm_nap(20000);
	if (r)
		return go_back_failed(s, fd, -1, DSOCK_R_HANDOVER_RESET, what,
				      "our ring could not move back to the kernel");
	if ((pfd = lend_peer(s, c, fd)) >= 0) {
		/* a short try: a peer busy inside its own call follows later */
		r = peer_move(c, fd, pfd, dsock_mono_ns() + GO_BACK_PEER_NS, &never);
		dsock_real.close(pfd);
		if (r < 0 && r != -EAGAIN)
			return go_back_failed(s, fd, -1, DSOCK_R_HANDOVER_RESET, what,
					      "its peer's ring could not move back to the kernel");
	}
	/* otherwise the peer follows at its next call (it looks for our
	 * request before every ring byte; the token above wakes one asleep in
	 * a receive or a poller) */
	return shm_back_step(s, fd);
}

int shm_handover(struct dsock_sock *s, int fd)
{
	struct shm_conn *c = shm_conn(s);
	int64_t end = dsock_mono_ns() + BACK_WAIT_NS;
	int r, never = 0, pfd;
	const char *what = "it goes to a program without dsock";

	if (!c)
		return 0;
	if (c->state != SC_ATTACHED) {
		shm_refuse(c, DSOCK_R_HANDED_OVER); /* a pairing still to come is refused */
		return 0;
	}
	__atomic_store_n(&c->me->back_req, DSOCK_BACK_HANDOVER, __ATOMIC_SEQ_CST);
	pfd = lend_peer(s, c, fd);
	/* without its socket, a peer asleep in a receive or a poller wakes
	 * and answers; with it, no token: a peer that moved itself first
	 * could leave our unread pre-switch data ahead of its tokens */
	if (pfd < 0)
		shm_wake_peer(c, fd);
	while ((r = shm_tx_back(c, fd, 0)) == -EAGAIN && dsock_mono_ns() < end)
		shm_nap(20000);
	if (r)
		return go_back_failed(s, fd, pfd, DSOCK_R_HANDOVER_RESET, what,
				      "our ring could not move back to the kernel");
	if (pfd >= 0) {
		r = peer_move(c, fd, pfd, end, &never);
		dsock_real.close(pfd);
		if (r)
			return go_back_failed(s, fd, -1, DSOCK_R_HANDOVER_RESET, what,
					      r == -EAGAIN ? "its peer's locks stayed busy for 2 s" :
					      "its peer's ring could not move back to the kernel");
	}
	for (int i = 0; !never && !__atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE); i++) {
		/* a peer that never switched never will (it looks for our
		 * request under its tx lock): its stream is plain already */
		if (__atomic_load_n(&c->peer->switch_off, __ATOMIC_ACQUIRE) == DSOCK_SWITCH_NONE &&
		    shm_peer_tx_trylock(c)) {
			never = __atomic_load_n(&c->peer->switch_off, __ATOMIC_ACQUIRE) == DSOCK_SWITCH_NONE;
			shm_unlock(&c->rx->tx_lock);
			if (never)
				break;
		}
		if ((r = peer_ended(c, fd)) > 0) {
			dsock_hidden_set(c->sock, &c->unbacked, 0);
			return 0; /* (its tokens are gone, its FIN stays) */
		}
		if (r < 0)
			return go_back_failed(s, fd, -1, DSOCK_R_HANDOVER_RESET, what,
					      "its peer ended its stream with bytes unread in our ring");
		if (dsock_mono_ns() > end)
			return go_back_failed(s, fd, -1, DSOCK_R_HANDOVER_RESET, what,
					      "its peer did not answer within 2 s");
		if (i < 100)
			sched_yield();
		else
			shm_nap(100000);
	}
	if (never)
		return 0;
	/* the peer's tokens must not reach the new holder */
	if (shm_lock(&c->rx->rx_lock))
		return go_back_failed(s, fd, -1, DSOCK_R_HANDOVER_RESET, what, "our receive lock is held");
	for (;;) {
		uint64_t sw, dn, kr;
		shm_peer_offsets(c, &sw, &dn, &kr);
		if (kr < sw && dn > sw) {
			shm_unlock(&c->rx->rx_lock);
			return go_back_failed(s, fd, -1, DSOCK_R_HANDOVER_RESET, what,
					      "unread data lies ahead of wake-up tokens");
		}
		r = kr < sw ? 1 : shm_discard_tokens(c, fd);
		if (r)
			break;
		shm_unlock(&c->rx->rx_lock);
		if (dsock_mono_ns() > end)
			return go_back_failed(s, fd, -1, DSOCK_R_HANDOVER_RESET, what,
					      "its peer's wake-up tokens did not arrive");
		shm_nap(20000);
		if (shm_lock(&c->rx->rx_lock))
			return go_back_failed(s, fd, -1, DSOCK_R_HANDOVER_RESET, what, "our receive lock is held");
	}
	shm_unlock(&c->rx->rx_lock);
	if (r < 0)
		return go_back_failed(s, fd, -1, DSOCK_R_HANDOVER_RESET, what, strerror(-r));
	dsock_hidden_set(c->sock, &c->unbacked, 0);
	return 0;
}

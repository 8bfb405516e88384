/* The shm transport's entry in the transport table, and the calls that
 * answer about a connection: readiness, FIONREAD, options, closing. */
#include "lib/transport/shm/ring.h"
#include "lib/base/real.h"
#include "common/proto.h"
#include "lib/sock/ready.h"
#include "lib/sock/solo.h"
#include "lib/ctl/ctl.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <sys/ioctl.h>
#include <unistd.h>


/* A thread of ours is about to sleep: every lease of ours ends, on rings
 * and on links (where the bells may stand instead), and what they let
 * through is marked for our pollers. */
static int shm_before_sleep(int bell)
{
	shm_settle_lingering();
	if (bell)
		return shm_link_arm_bells();
	shm_link_end_leases();
	return 0;
}

int shm_hidden_readable(struct dsock_sock *s)
{
	struct shm_conn *c = shm_conn(s);

	/* a ring that broke its rules counts as readable: the read resets it */
	return c && c->state == SC_ATTACHED && __atomic_load_n(&c->unbacked, __ATOMIC_RELAXED) &&
	       shm_readable(s, -1) != 0;
}

static int shm_kept_error(struct dsock_sock *s)
{
	struct shm_conn *c = shm_conn(s);

	return c && __atomic_load_n(&c->pend_err, __ATOMIC_RELAXED) != 0;
}

long shm_readable(struct dsock_sock *s, int fd)
{
	struct shm_conn *c = shm_conn(s);
	uint64_t head, sw;
	int64_t avail;

	if (!c || c->state != SC_ATTACHED)
		return -ENOTSUP; /* pending: the kernel holds every byte; ask it */
	if (__atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE))
		return shm_readable_back(c, fd);
	for (int i = 0;; i++) {
		/* the peer's offset on both sides of the ring read: a switch in
		 * between would make kernel bytes tokens and ring bytes data */
		sw = __atomic_load_n(&c->peer->switch_off, __ATOMIC_ACQUIRE);
		avail = rx_avail(c, &head);
		if (avail < 0)
			return -EPROTO;
		if (__atomic_load_n(&c->peer->switch_off, __ATOMIC_ACQUIRE) == sw || i > 100)
			break;
	}
	if (!__atomic_load_n(&c->me->rx_switched, __ATOMIC_ACQUIRE) && fd >= 0) {
		/* kernel data the peer sent before its switch comes first */
		int inq = 0;
		dsock_real.ioctl(fd, SIOCINQ, &inq);
		if (sw == DSOCK_SWITCH_NONE)
			return inq + avail;
		uint64_t consumed = __atomic_load_n(&c->me->kread, __ATOMIC_ACQUIRE);
		int64_t pre = consumed < sw ? (int64_t)(sw - consumed) : 0;
		return (pre < inq ? pre : inq) + avail;
	}
	return avail;
}

/* Called before the kernel close of a PENDING socket: wait (briefly) until
 * the daemon has let go of its copy, so the close is the last reference. */
static int offer_done(void *arg)
{
	struct shm_conn *c = arg;

	return c->state != SC_PENDING || c->offer_done;
}

void shm_wait_offer_done(struct dsock_sock *s)
{
	dsock_ctl_mail_until(offer_done, shm_conn(s), 200);
}

void shm_before_close(struct dsock_sock *s, int fd)
{
	struct shm_conn *c = shm_conn(s);

	/* a reference besides the fd table's: a call in flight (or a dup of
	 * the fd; the copy then only outlives this fd) */
	if (c && (atomic_load(&s->ref) > 1 || dsock_solo_inside(s)) && c->kfd < 0)
		atomic_store(&c->kfd, dsock_real.fcntl(fd, F_DUPFD_CLOEXEC, 3));
}

/* The last fd of this process is about to close.  With unread data the
 * kernel would reset the connection: so do we.  Otherwise stop taking
 * tokens and drain those there, so that the kernel close is a clean FIN. */
void shm_closing(struct dsock_sock *s, int fd)
{
	struct shm_conn *c = shm_conn(s);
	uint64_t head;

	if (c && c->state == SC_PENDING)
		shm_wait_offer_done(s);
	if (!c || c->state != SC_ATTACHED)
		return;
	/* another process (fork, spawn) still holds the socket: it carries
	 * on, its tokens must keep coming, the kernel socket stays open */
	if (!shm_let_go(c))
		return;
	/* the peer asked to go back to the kernel: what our ring holds goes
	 * there before the FIN (a failure resets) */
	if (shm_back_any(c) && shm_back_answer(s, fd) < 0)
		return;
	__atomic_store_n(&c->me->closing, 1, __ATOMIC_SEQ_CST);
	if (!shm_active(c))
		return;
	shm_linger_forget(c); /* no settle may end the lease set below */
	if (__atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE)) {
		/* the ring is closed: the kernel decides FIN or RST by what is
		 * unread, once the tokens are out of the way */
		shm_back_discard(c, fd);
		return;
	}
	if (rx_avail(c, &head) != 0) {
		struct linger lg = { 1, 0 };
		dsock_real.setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		return;
	}
	shm_lease(c, INT64_MAX); /* no more tokens to us */
	if (__atomic_load_n(&c->me->rx_switched, __ATOMIC_ACQUIRE))
		shm_drain_tokens(c, fd, 1);
}

int shm_writable(struct dsock_sock *s, int fd)
{
	struct shm_conn *c = shm_conn(s);
	uint64_t tail;

	/* once the peer's sending is plain it sends no space token: the next
	 * send moves ours back too (back.c, tx_back) instead of waiting */
	if (!c || !shm_active(c) || __atomic_load_n(&c->me->back_sent, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE))
		return POLLOUT;
	if (tx_space(c, &tail) != 0)
		return POLLOUT;
	/* a full ring whose sends the kernel answers at once, as its poll
	 * says writable: after our own SHUT_WR (EPIPE), and once the
	 * consumer is gone and the kernel socket reset or shut both ways (a
	 * peer that closed with our bytes unread reset it; one that closed
	 * or died with none did so at a probe): no space token ever comes
	 * then, and a writer waiting for room would wait for ever.  An error
	 * that a drain of ours took from the kernel is the kernel's POLLERR. */
	if (__atomic_load_n(&c->me->closing, __ATOMIC_ACQUIRE))
		return POLLOUT;
	short gone = fd >= 0 ? shm_consumer_gone(c, fd, 0) : 0;
	if (__atomic_load_n(&c->pend_err, __ATOMIC_RELAXED))
		gone |= POLLERR;
	return gone ? POLLOUT | gone : 0;
}

void shm_want_space(struct dsock_sock *s)
{
	struct shm_conn *c = shm_conn(s);
	uint64_t tail;

	if (c && shm_active(c) && !__atomic_load_n(&c->me->back_sent, __ATOMIC_ACQUIRE)) {
		__atomic_fetch_or(&c->tx->tx_waiting, DSOCK_TXW_POLL, __ATOMIC_SEQ_CST);
		if (tx_space(c, &tail) != 0) /* freed meanwhile: no token will come */
			__atomic_fetch_and(&c->tx->tx_waiting, ~(uint32_t)DSOCK_TXW_POLL, __ATOMIC_RELAXED);
	}
}

/* Socket options the transport answers itself; -ENOPROTOOPT means "ask
 * the kernel". */
int shm_sockopt(struct dsock_sock *s, int fd, int set, int level, int opt, void *val, socklen_t *len)
{
	struct shm_conn *c = shm_conn(s);

	if (c && set && level == SOL_SOCKET && opt == SO_RCVLOWAT) {
		/* the kernel applies it to every byte it holds, and would not
		 * wake a poller for a 1-byte token: back to the kernel, both
		 * directions, before it takes effect (a failure has reset the
		 * connection: the next call says so) */
		if (dsock_real.setsockopt(fd, level, opt, val, *len) < 0)
			return -errno;
		if (*len >= (socklen_t)sizeof(int) && *(int *)val > 1)
			shm_go_back(s, fd, DSOCK_BACK_RCVLOWAT);
		return 0;
	}
	if (c && !set && level == SOL_SOCKET && opt == SO_ERROR && *len >= (socklen_t)sizeof(int) &&
	    __atomic_load_n(&c->pend_err, __ATOMIC_RELAXED)) {
		/* an error a look of ours took from the kernel: the kernel's
		 * SO_ERROR would report it (and clear it) */
		*(int *)val = -shm_take_err(c);
		*len = sizeof(int);
		return 0;
	}
	if (!c || !c->nodelay_saved || level != IPPROTO_TCP || opt != TCP_NODELAY)
		return -ENOPROTOOPT;
	if (set) {
		if (*len < (socklen_t)sizeof(int))
			return -EINVAL;
		c->app_nodelay = *(int *)val != 0;
		return 0;
	}
	if (*len < (socklen_t)sizeof(int)) {
		if (*len > 0)
			*(char *)val = (char)c->app_nodelay;
		return 0;
	}
	*(int *)val = c->app_nodelay;
	*len = sizeof(int);
	return 0;
}

static int shm_ioctl(struct dsock_sock *s, int fd, unsigned long req, int *val)
{
	long n;

	if (req != FIONREAD || (n = shm_readable(s, fd)) < 0)
		return -ENOTSUP;
	*val = (int)n;
	return 0;
}

int shm_spurious_in(struct dsock_sock *s, int fd)
{
	struct shm_conn *c = shm_conn(s);
	char buf[64];
	uint64_t head;
	ssize_t n;

	if (c && c->state == SC_ATTACHED && shm_back_any(c)) {
		if (shm_back_step(s, fd) < 0)
			return 0; /* reset: the application reads the error */
		if (__atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE))
			return shm_spurious_back(c, fd);
	}
	if (c && c->state == SC_ATTACHED && !__atomic_load_n(&c->me->rx_switched, __ATOMIC_ACQUIRE) &&
	    !shm_lock(&c->rx->rx_lock)) {
		/* A side that only writes (nginx sending a file) never
		 * receives, so its receive side never learns that the peer
		 * switched: the peer's space tokens would pile up unread, its
		 * delayed ACKs let the peer's 1-byte tokens fill the
		 * congestion window, and the next space token would wait in
		 * the peer's send queue for a 40 ms ACK.  Once the kernel
		 * holds no more of the peer's data, every byte there is a
		 * token. */
		shm_rx_switch_if_read(c);
		shm_unlock(&c->rx->rx_lock);
	}
	if (!c || c->state != SC_ATTACHED || !__atomic_load_n(&c->me->rx_switched, __ATOMIC_ACQUIRE) ||
	    rx_avail(c, &head) != 0 || shm_lock(&c->rx->rx_lock))
		return 0;
	/* only tokens: every byte here is one, and no FIN or error follows */
	n = dsock_real.recv(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
	if (n > 0) {
		int k = shm_clear_and_drain(c, fd, 1);
		int64_t avail = rx_avail(c, &head);
		n = k == 0 && avail == 0 ? 1 : 0;
		/* data came in meanwhile, and its token may have gone down the
		 * drain: the kernel no longer shows it, our pollers must */
		if (avail > 0)
			dsock_hidden_set(c->sock, &c->unbacked, 1);
	} else if (n < 0 && errno == EAGAIN) {
		/* nothing at all: another thread of ours drained the tokens
		 * the kernel reported (tokens are not data: natively nothing
		 * was there) */
		n = 1;
	} else {
		if (n < 0)
			shm_stash_err(c, errno); /* the receive reports it */
		n = 0; /* EOF or error: real */
	}
	shm_unlock(&c->rx->rx_lock);
	return (int)n;
}

static uint64_t shm_rx_mark(struct dsock_sock *s)
{
	struct shm_conn *c = shm_conn(s);

	return c && c->state == SC_ATTACHED ? __atomic_load_n(&c->rx->tail, __ATOMIC_ACQUIRE) : 0;
}

/* SCM_RIGHTS: back to the kernel, and out of the transport here too.  A
 * connection still pairing has no rings to move: its pairing is refused. */
static int shm_handover_op(struct dsock_sock *s, int fd)
{
	struct shm_conn *c = shm_conn(s);
	int attached = c && c->state == SC_ATTACHED;
	int r = shm_handover(s, fd);

	return r || !attached ? r : shm_back_step(s, fd);
}

static void shm_counts(long *carried, long *back)
{
	*carried = atomic_load(&shm_ring_conns);
	*back = atomic_load(&shm_back_conns);
}

const struct dsock_transport dsock_shm_transport = {
	.name = "shm",
	.id = DSOCK_PATH_SHM,
	.offer = shm_offer,
	.sendmsg = shm_sendmsg,
	.sendmsg_solo = shm_sendmsg_solo,
	.sendfile = shm_sendfile,
	.recvmsg = shm_recvmsg,
	.shutdown = shm_shutdown,
	.disconnect = shm_disconnect,
	.ioctl = shm_ioctl,
	.hidden_readable = shm_hidden_readable,
	.kept_error = shm_kept_error,
	.rx_mark = shm_rx_mark,
	.spurious_in = shm_spurious_in,
	.closing = shm_closing,
	.before_close = shm_before_close,
	.writable = shm_writable,
	.sockopt = shm_sockopt,
	.want_space = shm_want_space,
	.handover = shm_handover_op,
	.release = shm_release,
	.before_sleep = shm_before_sleep,
	.bell = shm_link_bell,
	.bells_off = shm_link_disarm_bells,
	.collect = shm_link_collect,
	.init = shm_init,
	.adopt = shm_adopt,
	.fork_prepare = shm_fork_prepare,
	.fork_parent = shm_fork_parent,
	.fork_child = shm_fork_child,
	.exec_env = shm_exec_env,
	.exec_done = shm_exec_done,
	.exit = shm_exit,
	.counts = shm_counts,
};

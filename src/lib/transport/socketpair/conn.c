/* Connection life of the socketpair transport (sp.h): offer, the
 * daemon's answer, the shared state page, going back, reset, fork,
 * release (exec: exec.c). */
#include "lib/transport/socketpair/sp.h"
#include "lib/chan/chan.h"
#include "lib/base/pmutex.h"
#include "lib/ctl/ctl.h"
#include "lib/sock/sock.h"
#include "lib/base/clock.h"
#include "lib/base/exec_target.h"
#include "lib/base/proc.h"
#include "lib/base/real.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/reason.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#define PAGE 4096
#define FDS_NEEDED 1024 /* below this fd limit it declines */
#define PENDING_GIVE_UP_NS (2000 * 1000000LL) /* no answer: the kernel keeps it */

static pthread_mutex_t pending_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sp_conn *pending;
static _Atomic long n_carried, n_back;

int sp_lock(pthread_mutex_t *m)
{
	int r = pthread_mutex_lock(m);

	if (r == EOWNERDEAD) /* a holder died inside: the state is whole (no
			      * section leaves it half-written) */
		r = pthread_mutex_consistent(m);
	return -r;
}

void sp_unlock(pthread_mutex_t *m)
{
	pthread_mutex_unlock(m);
}

/* A connection on the page in memfd (ours from now on), or NULL. */
struct sp_conn *sp_map_conn(struct dsock_sock *s, int memfd)
{
	struct sp_conn *c = calloc(1, sizeof(*c));
	void *p = MAP_FAILED;

	if (c)
		p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (p == MAP_FAILED) {
		free(c);
		return NULL;
	}
	c->sock = s;
	c->sh = p;
	c->memfd = memfd;
	c->pairfd = -1;
	c->pipe = &sp_pipe_fd;
	return c;
}

static void unlink_pending(struct sp_conn *c)
{
	pthread_mutex_lock(&pending_mu);
	for (struct sp_conn **p = &pending; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	c->listed = 0;
	pthread_mutex_unlock(&pending_mu);
}

static int sp_offer(struct dsock_sock *s, int fd, int role, void **priv, unsigned *reason)
{
	struct sp_conn *c;
	struct rlimit rl;
	int memfd, r, lowat = 0;
	socklen_t ll = sizeof(lowat);

	/* the protocol counts the kernel's bytes from the connection's start:
	 * one dsock did not see from there is left to the kernel */
	if (atomic_load(&s->flags) & DSOCK_SF_INHERITED) {
		*reason = DSOCK_R_INHERITED;
		return -ENOTSUP;
	}
	/* SO_RCVLOWAT (inherited from a listener) is the kernel's to apply */
	if (dsock_real.getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, &ll) == 0 && lowat > 1) {
		*reason = DSOCK_R_RCVLOWAT;
		return -ENOTSUP;
	}
	/* the pair and the page take two fds the application may need */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < FDS_NEEDED) {
		*reason = DSOCK_R_RESOURCE;
		return -EMFILE;
	}
	memfd = memfd_create("dsock-sp", MFD_CLOEXEC);
	if (memfd < 0 || ftruncate(memfd, PAGE) < 0 || !(c = sp_map_conn(s, memfd))) {
		if (memfd >= 0)
			dsock_real.close(memfd);
		*reason = DSOCK_R_RESOURCE;
		return -ENOMEM;
	}
	if (dsock_pmutex_init(&c->sh->tx_mu) || dsock_pmutex_init(&c->sh->rx_mu)) {
		munmap(c->sh, PAGE);
		dsock_real.close(memfd);
		free(c);
		*reason = DSOCK_R_RESOURCE;
		return -ENOMEM;
	}
	c->role = role;
	c->pending_since = dsock_mono_ns();
	/* the application's timeouts (a listener's are inherited) */
	ll = sizeof(c->sh->rcvtimeo);
	dsock_real.getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &c->sh->rcvtimeo, &ll);
	ll = sizeof(c->sh->sndtimeo);
	dsock_real.getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &c->sh->sndtimeo, &ll);
	pthread_mutex_lock(&pending_mu);
	c->next = pending;
	pending = c;
	c->listed = 1;
	pthread_mutex_unlock(&pending_mu);
	r = dsock_ctl_offer(s->id, fd, (unsigned)role, DSOCK_PATH_SOCKETPAIR, DSOCK_PROOF_NETNS);
	if (r < 0) {
		unlink_pending(c);
		munmap(c->sh, PAGE);
		dsock_real.close(memfd);
		free(c);
		*reason = DSOCK_R_NO_DAEMON;
		return r;
	}
	*priv = c;
	*reason = DSOCK_R_PENDING;
	return 0;
}

void sp_count_carried(struct sp_conn *c)
{
	if (!c->carried) {
		c->carried = 1;
		atomic_fetch_add(&n_carried, 1);
	}
}

void sp_maybe_detach(struct sp_conn *c)
{
	struct sp_shared *sh = c->sh;

	if (atomic_load(&sh->tx) != SPTX_BACK || atomic_load(&sh->rx) != SPRX_BACK ||
	    __atomic_load_n(&c->sock->tp, __ATOMIC_ACQUIRE) != &dsock_socketpair_transport)
		return;
	if (c->carried && !c->counted_back) {
		c->counted_back = 1;
		atomic_fetch_add(&n_back, 1);
	}
	dsock_sock_detach(c->sock, (unsigned)atomic_load(&sh->back_reason));
	if (__atomic_load_n(&c->reported, __ATOMIC_RELAXED))
		dsock_sock_report(c->sock, -1 /* fd unknown here: as told before */,
				  c->sock->ev ? c->sock->ev : DSOCK_EV_CONNECT);
}

/* The answer will not be used (refused, gone): the kernel keeps it. */
static void refuse(struct sp_conn *c, unsigned reason)
{
	int none = 0;

	atomic_compare_exchange_strong(&c->sh->back_reason, &none, (int)reason);
	atomic_store(&c->sh->state, SP_REFUSED);
	atomic_store(&c->sh->tx, SPTX_BACK);
	atomic_store(&c->sh->rx, SPRX_BACK);
	sp_maybe_detach(c);
}

static void on_result(const struct dsock_msg_result *r, int fd)
{
	struct sp_conn *c = NULL, **p;
	struct sp_shared *sh;
	uint64_t hello = SP_HELLO;

	pthread_mutex_lock(&pending_mu);
	for (c = pending; c && c->sock->id != r->sock_id; c = c->next)
		;
	if (c)
		atomic_store(&c->offer_done, 1);
	c = NULL;
	if (r->result == DSOCK_RES_HELD) { /* the offer waits for the other end's */
		pthread_mutex_unlock(&pending_mu);
		if (fd >= 0)
			dsock_real.close(fd);
		return;
	}
	for (p = &pending; *p; p = &(*p)->next)
		if ((*p)->sock->id == r->sock_id) {
			c = *p;
			*p = c->next;
			c->listed = 0;
			break;
		}
	pthread_mutex_unlock(&pending_mu);
	DSOCK_DBG("result for sock %llu: %s (reason %s)%s", (unsigned long long)r->sock_id,
		  r->result == DSOCK_RES_PAIRED ? "paired" : "kernel", dsock_reason_name(r->reason),
		  c ? "" : ", no longer pending");
	if (!c || r->result != DSOCK_RES_PAIRED || fd < 0 || atomic_load(&c->sh->refuse)) {
		if (fd >= 0)
			dsock_real.close(fd);
		if (c)
			refuse(c, atomic_load(&c->sh->refuse) ? (unsigned)atomic_load(&c->sh->refuse)
							     : r->result == DSOCK_RES_PAIRED ? DSOCK_R_RESOURCE : r->reason);
		return;
	}
	sh = c->sh;
	dsock_real.fcntl(fd, F_SETFD, FD_CLOEXEC);
	if (r->ring_size == 1) {
		/* the daemon framed the pair as a channel of one stream */
		struct ch *ch = malloc(sizeof(*ch));
		if (!ch || ch_create(ch, fd, 1)) {
			free(ch);
			dsock_real.close(fd);
			refuse(c, DSOCK_R_RESOURCE);
			return;
		}
		c->ch = ch;
		c->st = 0;
		c->pipe = &sp_pipe_chan;
		atomic_store(&sh->holders, 1);
		int lv[2];
		ch_levels(ch, 0, lv); /* (now: a fork's processes share them) */
	}
	/* the application's timeouts hold for the waits on the pair too */
	if (sh->rcvtimeo.tv_sec || sh->rcvtimeo.tv_usec || sh->sndtimeo.tv_sec || sh->sndtimeo.tv_usec)
		c->pipe->timeouts(c, fd);
	__atomic_store_n(&c->pairfd, fd, __ATOMIC_RELEASE);
	/* HELLO before PAIRED: a sender's SWITCH, which needs PAIRED, comes
	 * after it in the pair (no lock: a sender may be blocked in the
	 * kernel holding tx_mu, waiting for the reader this may be) */
	struct iovec hv = { &hello, sizeof(hello) };
	struct msghdr hm = { .msg_iov = &hv, .msg_iovlen = 1 };
	if (c->pipe->sendmsg(c, fd, &hm, MSG_DONTWAIT) != (ssize_t)sizeof(hello))
		atomic_store(&sh->tx, SPTX_BACK); /* it cannot switch: the kernel carries our bytes */
	atomic_store(&sh->state, SP_PAIRED);
	DSOCK_DBG("sock %llu paired through a socketpair (side %u)%s", (unsigned long long)r->sock_id, r->side,
		  c->ch ? ", framed as a channel" : "");
	dsock_sock_rewatch(c->sock);
}

void sp_progress(struct sp_conn *c)
{
	int st = atomic_load_explicit(&c->sh->state, memory_order_acquire);

	/* (`dsock stat` shows the path from the daemon's record) */
	if (st == SP_PAIRED && !__atomic_load_n(&c->reported, __ATOMIC_RELAXED) &&
	    !__atomic_exchange_n(&c->reported, 1, __ATOMIC_RELAXED) && c->sock->tp == &dsock_socketpair_transport) {
		c->sock->reason = DSOCK_R_NONE;
		dsock_sock_report(c->sock, -1, c->sock->ev ? c->sock->ev : DSOCK_EV_CONNECT);
	}
	if (st != SP_PENDING || !c->pending_since)
		return;
	dsock_ctl_poll_mail();
	if (atomic_load(&c->sh->state) == SP_PENDING && dsock_mono_ns() - c->pending_since > PENDING_GIVE_UP_NS) {
		dsock_ctl_read_mail();
		if (atomic_load(&c->sh->state) == SP_PENDING) {
			unlink_pending(c);
			c->pending_since = 0;
			atomic_store(&c->sh->refuse, DSOCK_R_PEER_TIMEOUT);
			refuse(c, DSOCK_R_PEER_TIMEOUT);
		}
	}
}

int sp_reset(struct dsock_sock *s, int fd, unsigned reason)
{
	struct sp_conn *c = sp_conn(s);
	struct sockaddr sa = { .sa_family = AF_UNSPEC };

	/* the pair first: the peer then reads the kernel, where the RST is */
	if (c) {
		int pf = __atomic_load_n(&c->pairfd, __ATOMIC_ACQUIRE);
		if (pf >= 0)
			c->pipe->shutdown(c, pf, SHUT_RDWR);
	}
	/* as on an RST: ECONNRESET for the next call, then EOF (conn.c of
	 * shm says why both calls) */
	if (dsock_real.connect(fd, &sa, sizeof(sa)) < 0) {
		struct linger lg = { 1, 0 };
		dsock_real.setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	}
	dsock_real.shutdown(fd, SHUT_RDWR);
	if (c) {
		atomic_store(&c->sh->back_reason, (int)reason);
		atomic_store(&c->sh->tx, SPTX_BACK);
		atomic_store(&c->sh->rx, SPRX_BACK);
		sp_maybe_detach(c);
	}
	return -ECONNRESET;
}

static int sp_disconnect(struct dsock_sock *s, int fd)
{
	struct sp_conn *c = sp_conn(s);
	struct sockaddr sa = { .sa_family = AF_UNSPEC };
	int r;

	if (c)
		sp_go_back(c, DSOCK_R_NOT_ESTABLISHED);
	r = dsock_real.connect(fd, &sa, sizeof(sa)) < 0 ? -errno : 0;
	if (c) {
		atomic_store(&c->sh->rx, SPRX_BACK);
		dsock_sock_rewatch(s);
		sp_maybe_detach(c);
	}
	return r;
}

/* The process's last fd of the socket is about to close: bytes of the
 * peer's unread in the pair make it a reset, as unread bytes in the
 * kernel's queue would; our end of the pair closes first, so the peer
 * finds the kernel's FIN or RST where its EOF sends it. */
static int offer_done(void *arg)
{
	struct sp_conn *c = arg;

	return atomic_load(&c->offer_done) || atomic_load(&c->sh->state) != SP_PENDING;
}

static void sp_closing(struct dsock_sock *s, int fd)
{
	struct sp_conn *c = sp_conn(s);
	int pf, n = 0, rx;

	/* the daemon holds a copy of a socket it has not answered for: the
	 * close is the last reference (epoll forgets it, a FIN goes) only
	 * once it let go */
	if (c && c->pending_since && atomic_load(&c->sh->state) == SP_PENDING)
		dsock_ctl_mail_until(offer_done, c, 200);

	if (!c || __atomic_load_n(&c->pairfd, __ATOMIC_ACQUIRE) < 0)
		return;
	/* (the peer's headers first: what follows them is its data) */
	if (sp_lock(&c->sh->rx_mu) == 0) {
		sp_read_headers(c);
		sp_unlock(&c->sh->rx_mu);
	}
	pf = __atomic_exchange_n(&c->pairfd, -1, __ATOMIC_ACQ_REL);
	rx = atomic_load(&c->sh->rx);
	if ((rx == SPRX_PAIR || rx == SPRX_KERNEL) && (n = c->pipe->inq(c, pf)) > 0) {
		struct linger lg = { 1, 0 };
		dsock_real.setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	}
	c->pipe->close(c, pf);
}

/* The last reference. */
static void sp_release(struct dsock_sock *s)
{
	struct sp_conn *c = sp_conn(s);

	if (!c)
		return;
	/* (by this process's own word, not the shared state's: a fork's
	 * child refuses an answer pending at the fork in the page both map,
	 * while this process's list still holds the connection; and not a
	 * lock on every close) */
	if (c->listed)
		unlink_pending(c);
	if (c->pairfd >= 0)
		c->pipe->close(c, c->pairfd);
	free(c->ch);
	munmap(c->sh, PAGE);
	dsock_real.close(c->memfd);
	free(c);
}

/* ---- fork and exec ------------------------------------------------------ */
/* An answer still pending reaches only this process: the child could not
 * read the pair its parent would, so such a connection stays on the kernel
 * in both. */
static unsigned fork_gen;

/* A framed pair gains a holder, the child (counted before the fork, so
 * that neither process's close can miss it; a fork that fails leaves one
 * too many, and the stream then ends with the channel's socket). */
static void count_child(int fd, struct dsock_sock *s, void *arg)
{
	struct sp_conn *c;

	(void)fd;
	(void)arg;
	if (__atomic_load_n(&s->tp, __ATOMIC_ACQUIRE) != &dsock_socketpair_transport || !(c = sp_conn(s)) || !c->ch ||
	    c->fork_gen == fork_gen)
		return;
	c->fork_gen = fork_gen;
	atomic_store(&c->sh->shared, 1);
	atomic_fetch_add(&c->sh->holders, 1);
}

static void sp_fork_prepare(void)
{
	fork_gen++;
	dsock_fdt_walk(count_child, NULL);
	pthread_mutex_lock(&pending_mu);
	for (struct sp_conn *c = pending; c; c = c->next)
		atomic_store(&c->sh->refuse, DSOCK_R_FORKED);
}

static void sp_fork_parent(void)
{
	pthread_mutex_unlock(&pending_mu);
}

static void sp_fork_child(void)
{
	struct sp_conn *c = pending;

	pending = NULL;
	pthread_mutex_init(&pending_mu, NULL);
	for (struct sp_conn *n; c; c = n) {
		n = c->next;
		c->pending_since = 0;
		c->listed = 0;
		refuse(c, DSOCK_R_FORKED);
	}
}

static void exit_one(int fd, struct dsock_sock *s, void *arg)
{
	if (__atomic_load_n(&s->tp, __ATOMIC_ACQUIRE) == &dsock_socketpair_transport)
		sp_closing(s, fd);
}

static void sp_exit(void)
{
	dsock_fdt_walk(exit_one, NULL);
}

static void sp_counts(long *carried, long *back)
{
	*carried = atomic_load(&n_carried);
	*back = atomic_load(&n_back);
}

static int sp_init(void)
{
	const char *on = getenv("DSOCK_FASTPATH");

	if (on && !strcmp(on, "0"))
		return 1;
	dsock_ctl_set_result_handler(DSOCK_PATH_SOCKETPAIR, on_result);
	return 0;
}

const struct dsock_transport dsock_socketpair_transport = {
	.name = "socketpair",
	.id = DSOCK_PATH_SOCKETPAIR,
	.on_request = 1,
	.offer = sp_offer,
	.sendmsg = sp_sendmsg,
	.recvmsg = sp_recvmsg,
	.shutdown = sp_shutdown,
	.disconnect = sp_disconnect,
	.ioctl = sp_ioctl,
	.closing = sp_closing,
	.sockopt = sp_sockopt,
	.handover = sp_handover,
	.release = sp_release,
	.waits = sp_waits,
	.poll = sp_poll,
	.rx_mark = sp_rx_mark,
	.init = sp_init,
	.adopt = sp_adopt,
	.fork_prepare = sp_fork_prepare,
	.fork_parent = sp_fork_parent,
	.fork_child = sp_fork_child,
	.exec_env = sp_exec_env,
	.exec_done = sp_exec_done,
	.exit = sp_exit,
	.counts = sp_counts,
};

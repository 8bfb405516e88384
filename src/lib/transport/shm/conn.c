/* Connection life of the shm transport: offer, pairing result, attach,
 * release (fork: forked.c; exec: exec.c). */
#include "lib/transport/shm/shm.h"
#include "lib/ctl/ctl.h"
#include "lib/base/exec_target.h"
#include "lib/base/proc.h"
#include "lib/base/real.h"
#include "lib/sock/light.h"
#include "lib/sock/ready.h"
#include "lib/sock/solo.h"
#include "common/hmap.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/reason.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PENDING_GIVE_UP_MS 10000 /* the daemon always answers well before */

/* Connections due to offer or offered and waiting for a RESULT (a fork
 * refuses the offered ones in both processes and shares the others:
 * forked.c), and the offered ones by socket id, for the RESULT to
 * find: O(1) each, however many connections are being set up at once. */
pthread_mutex_t shm_pending_mu = PTHREAD_MUTEX_INITIALIZER;
struct shm_conn *shm_pending;
static struct dsock_hmap offered; /* sock id -> its shm_conn */
/* The connections whose memory this process maps and counts in maps:
 * a fork counts each again for the child, which releases each once
 * (shm_held_mu after shm_pending_mu).  A connection is on the pending
 * list or on this one, never on both, and moves between them under both
 * locks: a fork in between would leave a child that releases a count
 * nobody added, and the daemon could give the slot to a new connection
 * while a process still uses it. */
pthread_mutex_t shm_held_mu = PTHREAD_MUTEX_INITIALIZER;
struct shm_conn *shm_held;

void shm_held_add(struct shm_conn *c, int add_map)
{
	pthread_mutex_lock(&shm_held_mu);
	if (add_map)
		__atomic_add_fetch(&c->h->maps[c->side], 1, __ATOMIC_SEQ_CST);
	c->mapped = 1;
	c->hprev = NULL;
	c->hnext = shm_held;
	if (shm_held)
		shm_held->hprev = c;
	shm_held = c;
	c->on_held = 1;
	pthread_mutex_unlock(&shm_held_mu);
}

static void held_remove(struct shm_conn *c)
{
	if (!c->on_held)
		return;
	pthread_mutex_lock(&shm_held_mu);
	if (c->hprev)
		c->hprev->hnext = c->hnext;
	else
		shm_held = c->hnext;
	if (c->hnext)
		c->hnext->hprev = c->hprev;
	c->on_held = 0;
	pthread_mutex_unlock(&shm_held_mu);
}

int shm_active(const struct shm_conn *c)
{
	return c->state == SC_ATTACHED &&
	       __atomic_load_n(&c->peer->attached, __ATOMIC_ACQUIRE) == DSOCK_ATT_ATTACHED;
}

/* Found by its socket id, for the RESULT (shm_pending_mu held): 0 or -ENOMEM. */
static int list_offered_locked(struct shm_conn *c)
{
	return dsock_hmap_put(&offered, c->sock->id, (uint64_t)(uintptr_t)c) < 0 ? -ENOMEM : 0;
}

/* On the pending list (shm_pending_mu held); offered: found by its id too
 * (0, or -ENOMEM with c not listed). */
int shm_list_pending_locked(struct shm_conn *c, int offered_too)
{
	if (offered_too && list_offered_locked(c))
		return -ENOMEM;
	c->prev = NULL;
	c->next = shm_pending;
	if (shm_pending)
		shm_pending->prev = c;
	shm_pending = c;
	c->listed = 1;
	return 0;
}

static void unlink_pending_locked(struct shm_conn *c)
{
	if (!c->listed)
		return;
	if (c->prev)
		c->prev->next = c->next;
	else
		shm_pending = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->next = c->prev = NULL;
	c->listed = 0;
	uint64_t v;
	if (dsock_hmap_get(&offered, c->sock->id, &v) && v == (uint64_t)(uintptr_t)c)
		dsock_hmap_del(&offered, c->sock->id);
}

static void unlink_pending(struct shm_conn *c)
{
	pthread_mutex_lock(&shm_pending_mu);
	unlink_pending_locked(c);
	pthread_mutex_unlock(&shm_pending_mu);
}

/* dsock_fastpath_conns counts attached connections still on the
 * transport (our pollers spin only while there are some): a connection
 * counts from its attach until it leaves the transport or is released. */
void shm_fast_count(struct shm_conn *c)
{
	__atomic_store_n(&c->fast_counted, 1, __ATOMIC_RELAXED);
	atomic_fetch_add(&dsock_fastpath_conns, 1);
}

static void fast_uncount(struct shm_conn *c)
{
	if (__atomic_exchange_n(&c->fast_counted, 0, __ATOMIC_RELAXED))
		atomic_fetch_sub(&dsock_fastpath_conns, 1);
}

void shm_detach(struct dsock_sock *s, unsigned reason)
{
	struct shm_conn *c = shm_conn(s);

	/* the state stays allocated until release: a racing caller that
	 * still sees tp may read it; it now says "kernel" through tp == NULL */
	dsock_sock_detach(s, reason);
	if (c && (c->state == SC_PENDING || c->state == SC_OFFER_DUE))
		unlink_pending(c);
	if (c) {
		dsock_hidden_set(c->sock, &c->unbacked, 0);
		fast_uncount(c);
	}
	dsock_sock_report(s, -1 /* fd unknown here: as told before */, s->ev ? s->ev : DSOCK_EV_CONNECT);
}

/* Attaches a PAIRED result.  Must not run while a thread of ours is in a
 * kernel read of this socket (it could read a token as data once the peer
 * switches): then the result waits for the next call.  One attach at a
 * time per connection: the result comes once, and a delayed one is
 * claimed by one thread (shm_progress). */
static void attach(struct dsock_sock *s, const struct shm_given *g)
{
	struct shm_conn *c = shm_conn(s);
	int r;

	/* Dekker with the readers (recv.c): we announce, then look; a reader
	 * counts itself, then looks.  seq_cst: one of us sees the other. */
	atomic_store(&c->attaching, 1);
	/* nor while a PENDING-state send is in flight (it holds mu).  Wait for
	 * it a little, not forever: it may be blocked in the kernel until our
	 * own reader drains the peer, and waiting here could close that cycle
	 * and hang both; a streaming sender releases mu between sends, so a
	 * short wait usually gets it */
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_nsec += 2 * 1000 * 1000;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	if (atomic_load(&c->kernel_rx_inflight) > 0 || pthread_mutex_timedlock(&c->mu, &until) != 0) {
		atomic_store(&c->attaching, 0);
		c->delayed = *g;
		/* listed again while it waits: a fork before the claim refuses
		 * it in both processes (a child that found it unlisted would
		 * claim the result too, and attach the same connection) */
		pthread_mutex_lock(&shm_pending_mu);
		if (!c->listed)
			shm_list_pending_locked(c, 0);
		pthread_mutex_unlock(&shm_pending_mu);
		/* release: a claimer (shm_progress) sees what was given */
		__atomic_store_n(&c->delayed_set, 1, __ATOMIC_RELEASE);
		return;
	}
	r = shm_map_given(c, g);
	if (r) {
		pthread_mutex_unlock(&c->mu);
		if (g->memfd >= 0)
			dsock_real.close(g->memfd);
		DSOCK_WARN("unusable connection memory from the daemon (%s)", strerror(-r));
		atomic_store(&c->attaching, 0);
		shm_detach(s, DSOCK_R_FAULT);
		return;
	}
	/* off the pending list and onto the held one, attached, at once: a
	 * fork refuses it, or counts it for the child as attached (a child
	 * that found it neither pending nor attached would take it to the
	 * kernel while its parent uses the ring).  Counted in maps before
	 * anything else touches the slot: the daemon gives it to no other
	 * connection while we count.  A refused one stays mapped and counted
	 * until its release (a racing shutdown may still write its closing
	 * flag), never counted among the holders. */
	pthread_mutex_lock(&shm_pending_mu);
	unsigned refuse = shm_refused(c);
	unlink_pending_locked(c);
	if (refuse) {
		c->let_go = 1;
		shm_held_add(c, 1);
	} else {
		/* no kernel read is in flight: the count is exact (side.kread) */
		__atomic_store_n(&c->me->kread, (uint64_t)atomic_load(c->read_cnt), __ATOMIC_RELEASE);
		shm_forked_attached(c);
		__atomic_store_n(&c->me->tx_base, c->tx_base, __ATOMIC_RELAXED); /* (a peer's hand-over) */
		/* (before a fork can count the child in) */
		__atomic_store_n(&c->me->holders, 1, __ATOMIC_RELEASE);
		shm_held_add(c, 1);
		/* shut down while pending: never switch to the ring (seq_cst:
		 * a shutdown racing with us sees our mapping, or we its
		 * wr_shut) */
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (__atomic_load_n(&c->wr_shut, __ATOMIC_SEQ_CST))
			__atomic_store_n(&c->me->closing, 1, __ATOMIC_SEQ_CST);
		/* seq_cst: the peer switches only after it sees this */
		__atomic_store_n(&c->me->attached, DSOCK_ATT_ATTACHED, __ATOMIC_SEQ_CST);
		c->state = SC_ATTACHED;
		/* (exact: a fork bumps it again under shm_pending_mu) */
		c->fork_gen = shm_fork_gen;
	}
	pthread_mutex_unlock(&shm_pending_mu);
	if (refuse) {
		__atomic_store_n(&c->me->attached, DSOCK_ATT_REFUSED, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&c->mu);
		atomic_store(&c->attaching, 0);
		shm_detach(s, refuse);
		return;
	}
	DSOCK_DBG("sock %llu attached as side %d, ring %u bytes", (unsigned long long)s->id, g->side, g->size);
	/* counted, and cold sleepers promoted, before the link can carry
	 * an announcement of ours (light.h) */
	shm_fast_count(c);
	dsock_light_attached();
	shm_link_join(c, g->link, g->link_side, g->gen);
	shm_asleep_count(c, 1);
	atomic_store(&c->attaching, 0);
	pthread_mutex_unlock(&c->mu);
}

void shm_on_result(const struct dsock_msg_result *r, int memfd)
{
	struct shm_conn *c;

	if (r->result == DSOCK_RES_LINK) {
		shm_link_result(r, memfd);
		return;
	}
	if (r->result == DSOCK_RES_POOL) {
		shm_pool_result(r, memfd);
		return;
	}
	if (r->result == DSOCK_RES_BELL) {
		shm_link_bell_result(r, memfd);
		return;
	}
	uint64_t v = 0;
	pthread_mutex_lock(&shm_pending_mu);
	/* (ids 0 and ~0 are no socket's, and no key of the table) */
	c = r->sock_id && ~r->sock_id && dsock_hmap_get(&offered, r->sock_id, &v) ? (struct shm_conn *)(uintptr_t)v
									    : NULL;
	if (c)
		c->offer_done = 1;
	if (c && r->result == DSOCK_RES_HELD) {
		pthread_mutex_unlock(&shm_pending_mu);
		return; /* still pending; only the close waits for this */
	}
	if (c) {
		/* no second result finds it; a PAIRED one stays listed until
		 * attach moves it to the held list (a fork in between refuses
		 * it), a KERNEL one leaves the list now */
		dsock_hmap_del(&offered, c->sock->id);
		if (r->result != DSOCK_RES_PAIRED)
			unlink_pending_locked(c);
		dsock_sock_hold(c->sock);
	}
	pthread_mutex_unlock(&shm_pending_mu);
	DSOCK_DBG("result for sock %llu: %s (side %u, reason %s)%s", (unsigned long long)r->sock_id,
		  r->result == DSOCK_RES_PAIRED ? "paired" : "kernel", r->side, dsock_reason_name(r->reason),
		  c ? "" : " - no such pending socket");
	if (!c) { /* closed meanwhile: nothing to attach */
		if (memfd >= 0)
			dsock_real.close(memfd);
		return;
	}
	if (r->result == DSOCK_RES_PAIRED) {
		struct shm_given g = { .memfd = memfd, .pool = r->pool, .page = r->pool_page, .side = (int)r->side,
				       .size = r->ring_size, .link = r->link, .link_side = r->link_side,
				       .gen = dsock_ctl_gen() };
		attach(c->sock, &g);
	} else {
		shm_detach(c->sock, r->reason);
	}
	dsock_sock_put(c->sock);
}

#define OFFER_BYTES 65536 /* offered once this much moved (offer_due) */
#define OFFER_BUSY_TRIES 8 /* offers a busy daemon may refuse before the kernel keeps it */

static _Atomic uint32_t conn_nr; /* numbers this process's connections (tail_writer) */

struct shm_conn *shm_new_conn(struct dsock_sock *s)
{
	struct shm_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->nr = atomic_fetch_add(&conn_nr, 1) + 1;
	c->exec_memfd = -1;
	c->kfd = -1;
	c->sock = s;
	c->read_cnt = &c->pending_read;
	c->sent_cnt = &c->early_sent;
	pthread_mutex_init(&c->mu, NULL);
	return c;
}

static int send_offer(struct dsock_sock *s, int fd, int role, unsigned *reason)
{
	struct shm_conn *c = shm_conn(s);
	int r = 0;

	/* listed all along, from OFFER_DUE through PENDING: a fork in
	 * between must find it (it refuses an offered one in both processes,
	 * and shares one due to offer) */
	pthread_mutex_lock(&shm_pending_mu);
	if (!shm_forked_alone(c)) {
		/* a fork shared it meanwhile (it holds shm_pending_mu to count) */
		pthread_mutex_unlock(&shm_pending_mu);
		*reason = DSOCK_R_PENDING;
		return 0;
	}
	c->state = SC_PENDING;
	c->pending_since_ms = dsock_mono_ns() / 1000000;
	r = c->listed ? list_offered_locked(c) : shm_list_pending_locked(c, 1);
	pthread_mutex_unlock(&shm_pending_mu);
	if (r) {
		*reason = DSOCK_R_NO_DAEMON;
		return r;
	}
	r = dsock_ctl_offer(s->id, fd, (unsigned)role, DSOCK_PATH_SHM, DSOCK_PROOF_NETNS);
	DSOCK_DBG("sock %llu offered (role %d): %d", (unsigned long long)s->id, role, r);
	if (r == -EAGAIN && ++c->offer_busy < OFFER_BUSY_TRIES) {
		/* the daemon's queue is full (an offer storm): offered again
		 * at the next call, not never; it stays listed */
		pthread_mutex_lock(&shm_pending_mu);
		dsock_hmap_del(&offered, c->sock->id);
		c->state = SC_OFFER_DUE;
		c->calls = shm_offer_calls - 1;
		pthread_mutex_unlock(&shm_pending_mu);
		*reason = DSOCK_R_PENDING;
		return 0;
	}
	if (r) {
		unlink_pending(c);
		*reason = DSOCK_R_NO_DAEMON;
		return r;
	}
	*reason = DSOCK_R_PENDING;
	return 0;
}

int shm_offer(struct dsock_sock *s, int fd, int role, void **priv, unsigned *reason)
{
	struct shm_conn *c;

	if (!dsock_proc.enabled)
		return -ENOTSUP;
	c = shm_new_conn(s);
	if (!c) {
		*reason = DSOCK_R_RESOURCE;
		return -ENOMEM;
	}
	*priv = c;
	/* A data call offers (the fourth: offer_due), not connect or accept
	 * themselves: a connection closed before it carries a byte never costs
	 * a round trip to the daemon (which would dominate a connect/accept/
	 * close loop), and a nonblocking connect offers only once it has
	 * completed. */
	c->state = SC_OFFER_DUE;
	c->role = role;
	pthread_mutex_lock(&shm_pending_mu);
	shm_list_pending_locked(c, 0);
	pthread_mutex_unlock(&shm_pending_mu);
	*reason = DSOCK_R_PENDING;
	(void)fd;
	return 0;
}

/* The port that names the service a connection belongs to: the one we
 * connected to, or the one we accepted on (0 if unknown). */
static uint16_t service_port(int fd, int role)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof(ss);
	int r = role == DSOCK_ROLE_CONNECT ? dsock_real.getpeername(fd, (struct sockaddr *)&ss, &l)
					   : dsock_real.getsockname(fd, (struct sockaddr *)&ss, &l);

	if (r < 0)
		return 0;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return 0;
}

/* OFFER_DUE: counts the call, and offers the connection when its turn
 * has come and it is established.  One thread does it (a reader and a
 * writer thread may both make a fresh connection's first calls, and two
 * offers of one connection would loop the pending list on itself); the
 * others wait for it, so that no byte moves while the offer reads its
 * baseline. */
static void offer_due(struct dsock_sock *s, struct shm_conn *c, int fd)
{
	unsigned reason;

	if (atomic_exchange(&c->offering, 1)) {
		while (atomic_load(&c->offering))
			sched_yield(); /* a system call and a message: short */
		return;
	}
	/* the shm_offer_calls-th data call offers, or an earlier one once 64
	 * KiB moved (a bulk transfer should not wait for calls): a connection
	 * that lives for one small exchange (a request, its answer, the
	 * close) never costs a pairing, nor a system call of ours */
	if (c->state == SC_OFFER_DUE && (++c->calls >= shm_offer_calls ||
	    atomic_load(c->read_cnt) + atomic_load(c->sent_cnt) >= OFFER_BYTES)) {
		/* (shared by a fork: offered once the other holders closed it) */
		if (!shm_forked_alone(c) && !shm_refused(c)) {
			c->calls = shm_offer_calls;
			atomic_store(&c->offering, 0);
			return;
		}
		/* the state, not SO_ERROR: reading that would consume a pending
		 * error (a reset) that the application must still see */
		struct tcp_info ti;
		socklen_t l = sizeof(ti);
		if (dsock_real.getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) < 0 ||
		    (ti.tcpi_state != TCP_ESTABLISHED && ti.tcpi_state != TCP_SYN_SENT &&
		     ti.tcpi_state != TCP_SYN_RECV)) {
			shm_detach(s, DSOCK_R_NOT_ESTABLISHED);
		} else if (ti.tcpi_state == TCP_ESTABLISHED && shm_rcvlowat_set(fd)) {
			shm_detach(s, DSOCK_R_RCVLOWAT);
		} else if (ti.tcpi_state == TCP_ESTABLISHED) {
			s->state = DSOCK_ST_CONNECTED;
			c->service = service_port(fd, c->role);
			unsigned refuse = shm_refused(c);
			int cal = refuse ? 0 : shm_calibrate(c, fd);
			/* (-EBUSY: a send of ours in flight; a later call offers) */
			if (cal != -EBUSY && (refuse || cal || send_offer(s, fd, c->role, &reason)))
				shm_detach(s, refuse ? refuse : DSOCK_R_NO_DAEMON);
		} /* else still connecting: a later call looks again */
	}
	atomic_store(&c->offering, 0);
}

int shm_progress(struct dsock_sock *s, int fd)
{
	struct shm_conn *c = shm_conn(s);

	if (c->state == SC_OFFER_DUE) {
		offer_due(s, c, fd);
		if (c->state == SC_OFFER_DUE || !__atomic_load_n(&s->tp, __ATOMIC_ACQUIRE))
			return 0;
	}
	if (c->state == SC_PENDING) {
		dsock_ctl_poll_mail();
		if (c->state == SC_PENDING &&
		    dsock_mono_ns() / 1000000 - c->pending_since_ms > PENDING_GIVE_UP_MS) {
			dsock_ctl_read_mail();
			if (c->state == SC_PENDING)
				shm_detach(s, DSOCK_R_PEER_TIMEOUT);
		}
	}
	if (__atomic_load_n(&c->delayed_set, __ATOMIC_RELAXED) && atomic_load(&c->kernel_rx_inflight) == 0) {
		/* claimed by one thread: two threads' calls may both find it,
		 * and the attach that maps it closes the memfd; a second
		 * attach would fail on a closed (or reused) fd number and
		 * send back to the kernel a connection the peer already uses
		 * (a hang: the peer on its ring, our reader in a plain kernel
		 * read) */
		if (__atomic_exchange_n(&c->delayed_set, 0, __ATOMIC_ACQUIRE)) {
			struct shm_given g = c->delayed;
			attach(s, &g); /* (which unlists it) */
		}
	}
	if (c->state == SC_ATTACHED && !__atomic_load_n(&c->reported, __ATOMIC_RELAXED) &&
	    shm_active(c) && !__atomic_exchange_n(&c->reported, 1, __ATOMIC_RELAXED)) {
		s->reason = DSOCK_R_NONE;
		dsock_sock_report(s, fd, s->ev ? s->ev : DSOCK_EV_CONNECT);
	}
	return c->state == SC_ATTACHED && __atomic_load_n(&s->tp, __ATOMIC_ACQUIRE);
}

void shm_release(struct dsock_sock *s)
{
	struct shm_conn *c = shm_conn(s);

	if (!c)
		return;
	unlink_pending(c); /* whatever its state: freed, it must be on no list */
	shm_forked_release(c);
	shm_link_leave(c); /* before the unmap: a poller of ours may look at the ring */
	if (c->state == SC_ATTACHED) {
		shm_linger_forget(c);
		shm_asleep_flush(c);
	}
	shm_asleep_count(c, 0);
	fast_uncount(c);
	dsock_hidden_set(c->sock, &c->unbacked, 0);
	held_remove(c); /* before the unmap: a fork may be counting */
	if (c->h) {
		if (c->me->attached != DSOCK_ATT_ATTACHED)
			__atomic_store_n(&c->me->attached, DSOCK_ATT_REFUSED, __ATOMIC_RELEASE);
		/* the last touch: the daemon may give the slot out again */
		if (c->mapped)
			__atomic_sub_fetch(&c->h->maps[c->side], 1, __ATOMIC_SEQ_CST);
		shm_unmap(c);
	}
	shm_drop_exec_memfd(c);
	if (c->kfd >= 0)
		dsock_real.close(c->kfd); /* the socket's last reference: FIN now */
	if (c->delayed_set && c->delayed.memfd >= 0)
		dsock_real.close(c->delayed.memfd);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

void shm_offered_forget(void)
{
	dsock_hmap_free(&offered);
}

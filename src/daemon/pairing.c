#include "daemon/pairing.h"
#include "daemon/registry.h"
#include "common/log.h"
#include "common/reason.h"
#include "common/shm_layout.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71
#endif

/* An offer waiting for its other end.  The socket itself is not kept: the
 * daemon must never hold a connection open after its owner closes it. */
struct dd_offer {
	struct dd_reply_to to;
	uint64_t sock_id;
	uint32_t role;
	uint64_t netns;
	uint64_t cookie; /* SO_COOKIE: never reused, unlike an inode number */
	ino_t ino;
	struct dsock_addr local, peer;
	int64_t expire_ms;
	struct dd_offer *next;
};

static struct dd_offer *offers;
static uint32_t ring_size = DSOCK_RING_DEFAULT;
static uint64_t shm_limit; /* bytes of connection memory; 0: no limit */
static unsigned long n_paired, n_kernel, n_pending, n_limited;

/* Connection memory in use: a pairing counts until both of its ends have
 * closed (CLOSE events) or their processes left, or its header says that
 * no process holds either end any more (sweep_some).  A fork child that
 * keeps a connection after its parent left is not counted (an estimate, on
 * the low side, of what the limit bounds).  The daemon keeps the memfd
 * meanwhile, for an exec that hands the connection to a new program (the
 * endpoints close theirs once mapped: MEMFD_REQ in proto.h). */
struct dd_live {
	const struct dd_proc *proc[2];
	uint64_t sid[2];
	uint64_t cookie[2];
	ino_t ino[2];
	struct dsock_addr local[2]; /* each socket's own address */
	int memfd;
	struct dd_live *next;
};
static struct dd_live *live;
static struct dd_live **sweep_pp; /* the link to the record sweep_some looks at next */
static unsigned long n_live;

static void live_free(struct dd_live **pp)
{
	struct dd_live *x = *pp;

	if (sweep_pp == &x->next)
		sweep_pp = pp;
	*pp = x->next;
	close(x->memfd);
	free(x);
	n_live--;
}

static size_t conn_bytes(void)
{
	return DSOCK_SHM_HDR + 2 * (size_t)ring_size;
}

/* Clears the ends that match; frees the records with no end left. */
static void live_drop(const struct dd_proc *p, int any_sid, uint64_t sid)
{
	for (struct dd_live **pp = &live; *pp;) {
		struct dd_live *x = *pp;
		for (int i = 0; i < 2; i++)
			if (x->proc[i] == p && (any_sid || x->sid[i] == sid))
				x->proc[i] = NULL;
		if (!x->proc[0] && !x->proc[1])
			live_free(pp);
		else
			pp = &x->next;
	}
}

/* 1 if no process holds either end of x: each side attached and then let
 * go by its last holder, or refused.  Read from the connection's header,
 * which the endpoints write: a lie only ends the daemon's copy early (an
 * exec then takes the kernel) or keeps it until the processes leave. */
static int live_is_dead(const struct dd_live *x)
{
	struct dsock_shm_side side[2];

	if (pread(x->memfd, side, sizeof(side), offsetof(struct dsock_shm_hdr, side)) != (ssize_t)sizeof(side))
		return 0;
	for (int i = 0; i < 2; i++) {
		uint32_t att = side[i].attached;
		if (!(att == DSOCK_ATT_REFUSED || (att == DSOCK_ATT_ATTACHED && side[i].holders == 0)))
			return 0;
	}
	return 1;
}

/* Looks at a few records, round robin, and drops those nobody holds: the
 * CLOSE event that ends a record may have been dropped by a busy process
 * (ctl.c never waits), and a record that outlives its connection keeps the
 * memory allocated.  Called per new pairing, so an idle daemon does nothing. */
static void sweep_some(int n)
{
	for (int i = 0; i < n && live; i++) {
		if (!sweep_pp || !*sweep_pp)
			sweep_pp = &live;
		if (live_is_dead(*sweep_pp))
			live_free(sweep_pp); /* the link now names the next record */
		else
			sweep_pp = &(*sweep_pp)->next;
	}
}

void dd_pairing_closed(const struct dd_proc *p, uint64_t sock_id)
{
	live_drop(p, 0, sock_id);
}

/* Each side offers at its first data call, so either may come first, and
 * the gap is the application's (sockperf's client waits 2 s before its
 * first send).  Held below the library's own give-up (5 s), so a late
 * answer never reaches a socket that already went to the kernel. */
#define ACCEPT_WAIT_MS  4000
#define CONNECT_WAIT_MS 4000
#define UNLIKELY_WAIT_MS 300

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void dd_pairing_config(uint32_t size, uint64_t limit)
{
	ring_size = size;
	shm_limit = limit;
}

static void to_addr(const struct sockaddr_storage *ss, struct dsock_addr *a)
{
	memset(a, 0, sizeof(*a));
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)ss;
		a->family = AF_INET6; /* compare in one (v4-mapped) form */
		a->port = ntohs(in->sin_port);
		a->addr[10] = a->addr[11] = 0xff;
		memcpy(a->addr + 12, &in->sin_addr, 4);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)ss;
		a->family = AF_INET6;
		a->port = ntohs(in6->sin6_port);
		memcpy(a->addr, &in6->sin6_addr, 16);
	}
}

static int same_addr(const struct dsock_addr *a, const struct dsock_addr *b)
{
	return a->port == b->port && !memcmp(a->addr, b->addr, 16);
}

/* Everything the daemon learns from the socket itself, not from a message. */
static int inspect(int fd, struct dd_offer *o)
{
	struct sockaddr_storage l, p;
	socklen_t ll = sizeof(l), pl = sizeof(p), il = sizeof(int), cl = sizeof(o->netns), kl = sizeof(o->cookie);
	struct tcp_info ti;
	socklen_t tl = sizeof(ti);
	struct stat st;
	int type, proto;

	if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return DSOCK_R_NOT_ESTABLISHED;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &il) < 0 || type != SOCK_STREAM ||
	    getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &il) < 0 || proto != IPPROTO_TCP)
		return DSOCK_R_NOT_TCP;
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) < 0 || ti.tcpi_state != TCP_ESTABLISHED)
		return DSOCK_R_NOT_ESTABLISHED;
	if (getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &o->netns, &cl) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_COOKIE, &o->cookie, &kl) < 0)
		return DSOCK_R_NOT_ESTABLISHED;
	if (getsockname(fd, (struct sockaddr *)&l, &ll) < 0 ||
	    getpeername(fd, (struct sockaddr *)&p, &pl) < 0)
		return DSOCK_R_NOT_ESTABLISHED;
	o->ino = st.st_ino;
	to_addr(&l, &o->local);
	to_addr(&p, &o->peer);
	return DSOCK_R_NONE;
}

static void answer_kernel(const struct dd_reply_to *to, uint64_t sock_id, unsigned reason)
{
	struct dsock_msg_result r = { .sock_id = sock_id, .result = DSOCK_RES_KERNEL, .reason = reason };

	n_kernel++;
	dd_send_result(to, &r, -1);
}

/* One memfd for the connection: header initialised, size sealed so neither
 * end can shrink it under the other (which would be SIGBUS on access). */
static int make_memfd(void)
{
	size_t len = DSOCK_SHM_HDR + 2 * (size_t)ring_size;
	struct dsock_shm_hdr *h;
	int fd = memfd_create("dsock-conn", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) < 0)
		goto fail;
	h = mmap(NULL, DSOCK_SHM_HDR, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		goto fail;
	h->magic = DSOCK_SHM_MAGIC;
	h->version = DSOCK_SHM_VERSION;
	h->ring_size = ring_size;
	h->data_off = DSOCK_SHM_HDR;
	for (int i = 0; i < 2; i++)
		h->side[i].switch_off = DSOCK_SWITCH_NONE;
	munmap(h, DSOCK_SHM_HDR);
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		goto fail;
	return fd;
fail:
	close(fd);
	return -errno;
}

static void pair(struct dd_offer *a, struct dd_offer *b)
{
	/* side 0 is the connecting end (a stable choice both can compute) */
	struct dd_offer *s0 = a->role == 1 ? a : b, *s1 = s0 == a ? b : a;
	struct dsock_msg_result r = { .result = DSOCK_RES_PAIRED, .ring_size = ring_size };
	struct dd_live *rec = calloc(1, sizeof(*rec));
	int memfd;

	if (!rec || (shm_limit && (n_live + 1) * conn_bytes() > shm_limit)) {
		if (rec && n_limited++ % 1000 == 0)
			DSOCK_WARN("connection memory limit (%llu bytes, %lu connections) reached: "
				   "new connections stay on the kernel", (unsigned long long)shm_limit, n_live);
		free(rec);
		answer_kernel(&a->to, a->sock_id, DSOCK_R_RESOURCE);
		answer_kernel(&b->to, b->sock_id, DSOCK_R_RESOURCE);
		return;
	}
	memfd = make_memfd();
	if (memfd < 0) {
		free(rec);
		DSOCK_WARN("cannot create connection memory: %s", strerror(-memfd));
		answer_kernel(&a->to, a->sock_id, DSOCK_R_RESOURCE);
		answer_kernel(&b->to, b->sock_id, DSOCK_R_RESOURCE);
		return;
	}
	r.sock_id = s0->sock_id;
	r.side = 0;
	dd_send_result(&s0->to, &r, memfd);
	r.sock_id = s1->sock_id;
	r.side = 1;
	dd_send_result(&s1->to, &r, memfd);
	n_paired++;
	sweep_some(2);
	rec->proc[0] = s0->to.proc;
	rec->sid[0] = s0->sock_id;
	rec->cookie[0] = s0->cookie;
	rec->ino[0] = s0->ino;
	rec->local[0] = s0->local;
	rec->proc[1] = s1->to.proc;
	rec->sid[1] = s1->sock_id;
	rec->cookie[1] = s1->cookie;
	rec->ino[1] = s1->ino;
	rec->local[1] = s1->local;
	rec->memfd = memfd;
	rec->next = live;
	live = rec;
	n_live++;
	DSOCK_INFO("paired pid %d sock %llu with pid %d sock %llu",
		   s0->to.proc ? s0->to.proc->pid : -1, (unsigned long long)s0->sock_id,
		   s1->to.proc ? s1->to.proc->pid : -1, (unsigned long long)s1->sock_id);
}

/* Could a registered, enabled dsock process accept connections to a? */
static int dsock_listener_for(const struct dsock_addr *a)
{
	static const uint8_t any6[16], any4[16] = { [10] = 0xff, [11] = 0xff };

	for (struct dd_proc *p = dd_proc_first(); p; p = p->next) {
		if (p->flags & DSOCK_HELLO_DISABLED)
			continue;
		for (size_t i = 0; i < p->nsocks; i++) {
			const struct dd_sock *s = &p->socks[i];
			struct dsock_addr l = s->local;
			if (s->state != DSOCK_ST_LISTENING || s->type != SOCK_STREAM || l.port != a->port)
				continue;
			if (l.family == AF_INET6 || l.family == AF_INET) {
				/* stored addresses are v4-mapped already */
				if (!memcmp(l.addr, a->addr, 16) || !memcmp(l.addr, any6, 16) ||
				    !memcmp(l.addr, any4, 16))
					return 1;
			}
		}
	}
	return 0;
}

/* Has a registered dsock process reported the other end of o (its
 * accepted socket, with the mirrored addresses)? */
static int dsock_socket_for(const struct dd_offer *o)
{
	for (struct dd_proc *p = dd_proc_first(); p; p = p->next) {
		if (p->flags & DSOCK_HELLO_DISABLED)
			continue;
		for (size_t i = 0; i < p->nsocks; i++)
			if (p->socks[i].type == SOCK_STREAM && same_addr(&p->socks[i].local, &o->peer) &&
			    same_addr(&p->socks[i].peer, &o->local))
				return 1;
	}
	return 0;
}

void dd_pairing_offer(const struct dd_reply_to *to, const struct dsock_msg_offer *m, int fd)
{
	struct dd_offer o = { .to = *to, .sock_id = m->sock_id, .role = m->role };
	unsigned reason = inspect(fd, &o);

	close(fd);
	if (reason != DSOCK_R_NONE) {
		answer_kernel(to, m->sock_id, reason);
		return;
	}
	for (struct dd_offer **pp = &offers; *pp; pp = &(*pp)->next) {
		struct dd_offer *x = *pp;
		if (x->netns == o.netns && x->ino != o.ino && same_addr(&x->local, &o.peer) &&
		    same_addr(&x->peer, &o.local)) {
			*pp = x->next;
			n_pending--;
			pair(x, &o);
			free(x);
			return;
		}
	}
	/* a connect end whose peer is no known dsock listener (a plain server,
	 * or a listener closed or not yet reported) is held only briefly */
	int likely = m->role != 1 || dsock_listener_for(&o.peer) || dsock_socket_for(&o);
	struct dd_offer *n = malloc(sizeof(*n));
	if (!n) {
		answer_kernel(to, m->sock_id, DSOCK_R_RESOURCE);
		return;
	}
	*n = o;
	n->expire_ms = now_ms() + (!likely ? UNLIKELY_WAIT_MS : m->role == 1 ? CONNECT_WAIT_MS : ACCEPT_WAIT_MS);
	n->next = offers;
	offers = n;
	n_pending++;
	struct dsock_msg_result held = { .sock_id = m->sock_id, .result = DSOCK_RES_HELD };
	dd_send_result(to, &held, -1);
}

void dd_pairing_memfd(const struct dd_reply_to *to, const struct dsock_msg_memfd_req *m, int fd)
{
	struct dsock_msg_result r = { .sock_id = m->sock_id, .result = DSOCK_RES_MEMFD };
	uint64_t cookie = 0;
	socklen_t kl = sizeof(cookie);
	int found = -1;

	if (getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &kl) == 0 && cookie)
		for (struct dd_live *x = live; x && found < 0; x = x->next)
			for (int i = 0; i < 2; i++)
				if (x->cookie[i] == cookie) {
					found = x->memfd;
					r.side = (uint32_t)i;
					r.ring_size = ring_size;
					break;
				}
	close(fd);
	dd_send_result(to, &r, found);
}

int dd_pairing_peer_of(int fd, struct dd_peer_id *out)
{
	uint64_t cookie = 0;
	socklen_t kl = sizeof(cookie);

	if (getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &kl) < 0 || !cookie)
		return -ENOTSOCK;
	for (struct dd_live *x = live; x; x = x->next)
		for (int i = 0; i < 2; i++)
			if (x->cookie[i] == cookie) {
				out->proc = x->proc[1 - i];
				out->sock_id = x->sid[1 - i];
				out->cookie = x->cookie[1 - i];
				out->ino = x->ino[1 - i];
				out->local = x->local[1 - i];
				out->peer = x->local[i];
				return 0;
			}
	return -ENOENT;
}

void dd_pairing_forget(const struct dd_proc *p)
{
	live_drop(p, 1, 0);
	for (struct dd_offer **pp = &offers; *pp;) {
		struct dd_offer *x = *pp;
		if (x->to.proc == p) {
			*pp = x->next;
			free(x);
			n_pending--;
		} else {
			pp = &x->next;
		}
	}
}

int dd_pairing_tick(void)
{
	int64_t now = now_ms(), next = -1;

	for (struct dd_offer **pp = &offers; *pp;) {
		struct dd_offer *x = *pp;
		if (x->expire_ms <= now) {
			*pp = x->next;
			n_pending--;
			answer_kernel(&x->to, x->sock_id,
				      x->role == 1 ? DSOCK_R_PEER_TIMEOUT : DSOCK_R_PEER_PLAIN);
			free(x);
			continue;
		}
		if (next < 0 || x->expire_ms - now < next)
			next = x->expire_ms - now;
		pp = &x->next;
	}
	return (int)next;
}

void dd_pairing_stats(unsigned long *paired, unsigned long *kernel, unsigned long *pending,
		      unsigned long *live_conns, uint64_t *live_bytes, unsigned long *limited)
{
	*paired = n_paired;
	*kernel = n_kernel;
	*pending = n_pending;
	*live_conns = n_live;
	*live_bytes = (uint64_t)n_live * conn_bytes();
	*limited = n_limited;
}

/* Channels between hosts (hostchan.h): the ends waiting for their
 * channel, and the channel sockets in the making (dialled by the
 * claimant's daemon, or accepted here and reading their first bytes). */
#include "daemon/hostchan.h"
#include "daemon/pairing.h"
#include "daemon/registry.h"
#include "common/hmap.h"
#include "common/log.h"
#include "common/reason.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* the channel's first bytes: magic, the claim's id, the token */
#define HELLO_LEN (8 + 8 + DD_CHAN_TOKEN)
static const char magic[8] = "dsockch1";
/* an end waits this long for its channel (a round trip between the
 * daemons, a connect and TAKEN); a RESULT that comes after the library
 * gave up on the offer (10 s: a busy daemon's offer wait and grace come
 * before this) is ignored there, and the kernel carries the connection */
#define END_WAIT_MS 3000
/* a connection accepted has this long to present its first bytes and be
 * matched (its token may come over the link after it) */
#define ACCEPT_WAIT_MS 3000
/* accepted connections waiting at once: from one address, and in all
 * (the rest of the slots are the dials') */
#define ACCEPT_PER_ADDR 128
#define ACCEPT_MAX (DD_CHAN_SLOTS - 256)

/* a slot: a dial connecting (P_DIAL) or waiting for TAKEN with its first
 * bytes sent (P_SENT), or a connection accepted (P_ACCEPTED) */
enum { P_FREE, P_DIAL, P_SENT, P_ACCEPTED };

struct end {
	struct dd_reply_to to;
	uint64_t sock_id, gen, id;
	unsigned transport;
	int claimant, has_token, slot; /* slot: the claimant's dial (-1: none) */
	uint8_t token[DD_CHAN_TOKEN];
	int64_t deadline;
	struct end *prev, *next; /* every end, for the walks */
	struct end *idnext;      /* same id */
};

struct pend {
	int fd, state;
	int64_t deadline;
	struct end *e;          /* a dial's end */
	struct sockaddr_storage from; /* an accepted one's source */
	unsigned char in[HELLO_LEN];
	size_t nin;
};

static struct pend pends[DD_CHAN_SLOTS];
static struct end *ends;
static struct dsock_hmap by_id;  /* claim id -> ends with it (a chain) */
static struct dsock_hmap by_end; /* (process, socket) -> its end */
static int ep = -1, lfd = -1, port_out;
static uint64_t id_seed; /* (ids are the other host's choice: keyed) */
static uint32_t base;
static int n_waiting; /* accepted connections in pends */
static unsigned long n_dialled, n_accepted, n_refused, n_failed;

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t end_key(const struct dd_proc *p, uint64_t sock_id)
{
	uint64_t k[2] = { (uint64_t)(uintptr_t)p, sock_id };

	return dsock_hash(k, sizeof(k), 0x3c);
}

static uint64_t id_key(uint64_t id)
{
	return dsock_hash(&id, sizeof(id), id_seed);
}

static void pend_close(struct pend *p)
{
	if (p->fd >= 0) {
		epoll_ctl(ep, EPOLL_CTL_DEL, p->fd, NULL);
		close(p->fd);
	}
	n_waiting -= p->state == P_ACCEPTED;
	memset(p, 0, sizeof(*p));
	p->fd = -1;
}

static struct pend *pend_free(void)
{
	for (int i = 0; i < DD_CHAN_SLOTS; i++)
		if (pends[i].state == P_FREE)
			return &pends[i];
	return NULL;
}

static int pend_watch(struct pend *p, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.u32 = base + (uint32_t)(p - pends) };

	return epoll_ctl(ep, EPOLL_CTL_ADD, p->fd, &ev);
}

static void end_unlink(struct end *e)
{
	uint64_t v;
	struct end *head, **pp;

	if (e->prev)
		e->prev->next = e->next;
	else
		ends = e->next;
	if (e->next)
		e->next->prev = e->prev;
	if (dsock_hmap_get(&by_id, id_key(e->id), &v)) {
		head = (struct end *)(uintptr_t)v;
		for (pp = &head; *pp && *pp != e; pp = &(*pp)->idnext)
			;
		if (*pp)
			*pp = e->idnext;
		if (head)
			dsock_hmap_put(&by_id, id_key(e->id), (uint64_t)(uintptr_t)head);
		else
			dsock_hmap_del(&by_id, id_key(e->id));
	}
	if (dsock_hmap_get(&by_end, end_key(e->to.proc, e->sock_id), &v) && v == (uint64_t)(uintptr_t)e)
		dsock_hmap_del(&by_end, end_key(e->to.proc, e->sock_id));
	if (e->slot >= 0)
		pend_close(&pends[e->slot]);
}

/* The outcome of an end no longer in the tables: its channel (fd >= 0,
 * PAIRED) or the kernel; then it is freed. */
static void answer(struct end *e, int fd, unsigned reason)
{
	struct dsock_msg_result r = { .sock_id = e->sock_id, .transport = (uint16_t)e->transport };

	if (fd >= 0) {
		/* (the process gets what an AF_UNIX pair would be: blocking) */
		int fl = fcntl(fd, F_GETFL);
		if (fl >= 0)
			fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
		r.result = DSOCK_RES_PAIRED;
		r.side = e->claimant ? 0 : 1;
		r.ring_size = 1; /* framed as a channel */
		DSOCK_INFO("pid %d sock %llu: on a channel to the other host (%s)",
			   e->to.proc ? e->to.proc->pid : -1, (unsigned long long)e->sock_id,
			   e->claimant ? "dialled" : "accepted");
	} else {
		r.result = DSOCK_RES_KERNEL;
		r.reason = reason;
		n_failed++;
		DSOCK_INFO("pid %d sock %llu: no channel to the other host: %s", e->to.proc ? e->to.proc->pid : -1,
			   (unsigned long long)e->sock_id, dsock_reason_name(reason));
	}
	dd_send_result(&e->to, &r, fd);
	free(e);
}

static void end_done(struct end *e, int fd, unsigned reason)
{
	end_unlink(e);
	answer(e, fd, reason);
}

static int end_add(struct end *e)
{
	uint64_t v = 0;

	if (dsock_hmap_put(&by_end, end_key(e->to.proc, e->sock_id), (uint64_t)(uintptr_t)e))
		return -ENOMEM;
	dsock_hmap_get(&by_id, id_key(e->id), &v);
	e->idnext = (struct end *)(uintptr_t)v;
	if (dsock_hmap_put(&by_id, id_key(e->id), (uint64_t)(uintptr_t)e)) {
		dsock_hmap_del(&by_end, end_key(e->to.proc, e->sock_id));
		return -ENOMEM;
	}
	e->prev = NULL;
	e->next = ends;
	if (ends)
		ends->prev = e;
	ends = e;
	return 0;
}

static int same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	struct dsock_addr x, y;

	dsock_addr_from(&x, (const struct sockaddr *)a);
	dsock_addr_from(&y, (const struct sockaddr *)b);
	return x.family && !memcmp(x.addr, y.addr, 16);
}

/* (compared in constant time: how much of a token matched is not told) */
static int same_token(const uint8_t *a, const uint8_t *b)
{
	uint8_t d = 0;

	for (int i = 0; i < DD_CHAN_TOKEN; i++)
		d |= a[i] ^ b[i];
	return d == 0;
}

/* An accepted connection that presented its first bytes: its end, if
 * one waits whose token, link and source all match (*forged stays 0
 * while the token may still be on its way; 1: an end of that id has its
 * token, and this connection is not its channel). */
static struct end *match(const struct pend *p, int *forged)
{
	uint64_t id, v;

	*forged = 0;
	memcpy(&id, p->in + 8, 8);
	id = le64toh(id);
	if (!dsock_hmap_get(&by_id, id_key(id), &v))
		return NULL;
	for (struct end *e = (struct end *)(uintptr_t)v; e; e = e->idnext) {
		struct sockaddr_storage local, peer;
		if (e->claimant || e->id != id || !e->has_token)
			continue;
		*forged = 1;
		if (same_token(e->token, p->in + 16) && dd_hosts_link_addrs(e->gen, &local, &peer) == 0 &&
		    same_addr(&peer, &p->from)) {
			*forged = 0;
			return e;
		}
	}
	return NULL;
}

/* An accepted connection reads its first bytes; matched, it goes to its
 * end's process. */
static void accepted_read(struct pend *p)
{
	struct end *e;
	int forged;

	while (p->nin < HELLO_LEN) {
		ssize_t r = recv(p->fd, p->in + p->nin, HELLO_LEN - p->nin, MSG_DONTWAIT);
		if (r > 0) {
			p->nin += (size_t)r;
			continue;
		}
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		n_refused++;
		pend_close(p); /* closed, or failed, before its first bytes */
		return;
	}
	if (memcmp(p->in, magic, 8)) {
		n_refused++;
		pend_close(p);
		return;
	}
	if (!(e = match(p, &forged))) {
		if (forged) {
			char a[64];
			struct dsock_addr from;
			dsock_addr_from(&from, (struct sockaddr *)&p->from);
			dsock_addr_format(&from, a, sizeof(a));
			DSOCK_WARN("a channel from %s refused: its token or address is not its claim's", a);
			n_refused++;
			pend_close(p);
			return;
		}
		/* its token may still be on its way: it waits, unwatched (what
		 * follows is the channel's, and stays unread) */
		epoll_ctl(ep, EPOLL_CTL_DEL, p->fd, NULL);
		return;
	}
	int fd = p->fd;
	epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
	p->fd = -1;
	pend_close(p);
	/* (out of the tables first: a link that fails as TAKEN is written
	 * ends its ends) */
	end_unlink(e);
	if (dd_hosts_taken(e->gen, e->id)) {
		n_accepted++;
		answer(e, fd, 0);
	} else {
		answer(e, -1, DSOCK_R_HOST_UNREACHABLE);
	}
	close(fd);
}

static void on_listener(void)
{
	struct sockaddr_storage sa;
	socklen_t sl = sizeof(sa);
	int fd, one = 1;

	while ((fd = accept4(lfd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		struct pend *p = NULL;
		int same = 0;
		sl = sizeof(sa);
		/* only a host with a link up may hold a slot, a few at most */
		if (n_waiting < ACCEPT_MAX && dd_hosts_linked(&sa)) {
			for (int i = 0; i < DD_CHAN_SLOTS; i++)
				same += pends[i].state == P_ACCEPTED && same_addr(&pends[i].from, &sa);
			if (same < ACCEPT_PER_ADDR)
				p = pend_free();
		}
		if (!p) {
			n_refused++;
			close(fd);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		p->fd = fd;
		p->from = sa;
		p->nin = 0;
		p->e = NULL;
		p->deadline = now_ms() + ACCEPT_WAIT_MS;
		p->state = P_ACCEPTED;
		n_waiting++;
		if (pend_watch(p, EPOLLIN)) {
			pend_close(p);
			continue;
		}
		accepted_read(p);
	}
}

/* A dial completed (or failed): the first bytes go, and the channel waits
 * for the other daemon's TAKEN, unwatched (what follows on it is the
 * processes'). */
static void dialled(struct pend *p)
{
	struct end *e = p->e;
	unsigned char hello[HELLO_LEN];
	uint64_t id = htole64(e->id);
	int err = 0;
	socklen_t el = sizeof(err);
	struct pollfd q = { .fd = p->fd, .events = POLLOUT };

	/* (an event of the slot's last user, reused within one batch) */
	if (poll(&q, 1, 0) == 0)
		return;
	if (getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err) {
		DSOCK_WARN("channel dial failed: %s", strerror(err ? err : errno));
		end_done(e, -1, DSOCK_R_HOST_UNREACHABLE);
		return;
	}
	memcpy(hello, magic, 8);
	memcpy(hello + 8, &id, 8);
	memcpy(hello + 16, e->token, DD_CHAN_TOKEN);
	/* (a new connection's buffer takes them whole) */
	if (send(p->fd, hello, sizeof(hello), MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(hello)) {
		end_done(e, -1, DSOCK_R_HOST_UNREACHABLE);
		return;
	}
	epoll_ctl(ep, EPOLL_CTL_DEL, p->fd, NULL);
	p->state = P_SENT;
}

void dd_chan_taken(uint64_t gen, uint64_t id)
{
	uint64_t v;
	struct end *e;

	if (!dsock_hmap_get(&by_id, id_key(id), &v))
		return;
	for (e = (struct end *)(uintptr_t)v; e; e = e->idnext)
		if (e->claimant && e->gen == gen && e->id == id && e->slot >= 0 && pends[e->slot].state == P_SENT)
			break;
	if (!e)
		return;
	struct pend *p = &pends[e->slot];
	int fd = p->fd;
	p->fd = -1;
	e->slot = -1;
	pend_close(p);
	n_dialled++;
	end_done(e, fd, 0);
	close(fd);
}

/* The claimant's dial: from the link's own address to the other
 * daemon's channel port at the link's peer address. */
static int dial(struct end *e)
{
	struct sockaddr_storage local, peer;
	struct pend *p = pend_free();
	int fd, one = 1;

	if (!p)
		return -DSOCK_R_RESOURCE;
	if (dd_hosts_link_addrs(e->gen, &local, &peer))
		return -DSOCK_R_HOST_UNREACHABLE;
	if (local.ss_family == AF_INET)
		((struct sockaddr_in *)&local)->sin_port = 0;
	else
		((struct sockaddr_in6 *)&local)->sin6_port = 0;
	if (peer.ss_family == AF_INET)
		((struct sockaddr_in *)&peer)->sin_port = htons((uint16_t)port_out);
	else
		((struct sockaddr_in6 *)&peer)->sin6_port = htons((uint16_t)port_out);
	fd = socket(peer.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -DSOCK_R_RESOURCE;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* (the port is chosen at the connect, per destination: a bind to
	 * port 0 would take one of the host's ephemeral ports for good) */
	setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
	socklen_t sl = peer.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	if (bind(fd, (struct sockaddr *)&local, sl) < 0 ||
	    (connect(fd, (struct sockaddr *)&peer, sl) < 0 && errno != EINPROGRESS)) {
		DSOCK_WARN("channel dial: %s", strerror(errno));
		close(fd);
		return -DSOCK_R_HOST_UNREACHABLE;
	}
	p->fd = fd;
	p->e = e;
	p->state = P_DIAL;
	p->deadline = e->deadline;
	if (pend_watch(p, EPOLLOUT)) {
		pend_close(p);
		return -DSOCK_R_RESOURCE;
	}
	e->slot = (int)(p - pends);
	return 0;
}

int dd_chan_begin(const struct dd_reply_to *to, uint64_t sock_id, unsigned transport, int claimant,
		  uint64_t gen, uint64_t id)
{
	struct end *e;
	int r;

	if (lfd < 0)
		return -DSOCK_R_HOST_NO_TRANSPORT;
	if (!(e = calloc(1, sizeof(*e))))
		return -DSOCK_R_RESOURCE;
	e->to = *to;
	e->sock_id = sock_id;
	e->transport = transport;
	e->claimant = claimant;
	e->gen = gen;
	e->id = id;
	e->slot = -1;
	e->deadline = now_ms() + END_WAIT_MS;
	/* the token goes over the link before the dial, so it is usually
	 * there first (a connection that comes first waits for it); sent
	 * before the end is in the tables, since a link that fails as it is
	 * written ends that link's ends */
	if (claimant && getrandom(e->token, sizeof(e->token), 0) != sizeof(e->token))
		r = -DSOCK_R_RESOURCE;
	else if (claimant && !dd_hosts_channel(gen, id, e->token))
		r = -DSOCK_R_HOST_UNREACHABLE;
	else
		r = end_add(e) ? -DSOCK_R_RESOURCE : 0;
	if (r) {
		free(e);
		return r;
	}
	if (!claimant) {
		/* a connection that came before this end waits for it */
		for (int i = 0; i < DD_CHAN_SLOTS && n_waiting; i++)
			if (pends[i].state == P_ACCEPTED && pends[i].nin == HELLO_LEN)
				accepted_read(&pends[i]);
		return 0;
	}
	if ((r = dial(e))) {
		end_unlink(e);
		free(e);
	}
	return r;
}

void dd_chan_token(uint64_t gen, uint64_t id, const uint8_t token[DD_CHAN_TOKEN])
{
	uint64_t v;

	if (!dsock_hmap_get(&by_id, id_key(id), &v))
		return;
	for (struct end *e = (struct end *)(uintptr_t)v; e; e = e->idnext)
		if (!e->claimant && e->gen == gen && e->id == id && !e->has_token) {
			memcpy(e->token, token, DD_CHAN_TOKEN);
			e->has_token = 1;
			for (int i = 0; i < DD_CHAN_SLOTS && n_waiting; i++)
				if (pends[i].state == P_ACCEPTED && pends[i].nin == HELLO_LEN)
					accepted_read(&pends[i]);
			return;
		}
}

void dd_chan_closed(const struct dd_proc *p, uint64_t sock_id)
{
	uint64_t v;
	struct end *e;

	if (dsock_hmap_get(&by_end, end_key(p, sock_id), &v) && (e = (struct end *)(uintptr_t)v) &&
	    e->to.proc == p && e->sock_id == sock_id) {
		end_unlink(e);
		free(e);
	}
}

void dd_chan_forget(const struct dd_proc *p)
{
	for (struct end *e = ends, *next; e; e = next) {
		next = e->next;
		if (e->to.proc == p) {
			end_unlink(e);
			free(e);
		}
	}
}

void dd_chan_link_down(uint64_t gen)
{
	for (struct end *e = ends, *next; e; e = next) {
		next = e->next;
		if (e->gen == gen)
			end_done(e, -1, DSOCK_R_HOST_UNREACHABLE);
	}
}

void dd_chan_event(uint32_t slot, uint32_t events)
{
	struct pend *p;

	(void)events;
	if (slot - base == DD_CHAN_SLOTS) {
		on_listener();
		return;
	}
	if (slot - base >= DD_CHAN_SLOTS || (p = &pends[slot - base])->state == P_FREE)
		return;
	if (p->state == P_DIAL)
		dialled(p);
	else if (p->state == P_ACCEPTED)
		accepted_read(p);
}

int dd_chan_tick(void)
{
	int64_t now = now_ms(), next = -1;

	for (struct end *e = ends, *nx; e; e = nx) {
		nx = e->next;
		if (e->deadline <= now)
			end_done(e, -1, DSOCK_R_HOST_UNREACHABLE);
		else if (next < 0 || e->deadline - now < next)
			next = e->deadline - now;
	}
	for (int i = 0; i < DD_CHAN_SLOTS && n_waiting; i++) {
		struct pend *p = &pends[i];
		if (p->state != P_ACCEPTED)
			continue;
		if (p->deadline <= now) {
			n_refused++;
			pend_close(p);
		} else if (next < 0 || p->deadline - now < next) {
			next = p->deadline - now;
		}
	}
	return (int)next;
}

void dd_chan_stat(char *buf, size_t n)
{
	size_t l = strlen(buf);

	if (lfd >= 0)
		snprintf(buf + l, n - l, " channels_dialled=%lu channels_accepted=%lu channels_refused=%lu "
			 "channels_failed=%lu", n_dialled, n_accepted, n_refused, n_failed);
}

int dd_chan_start(int epfd, uint32_t slot_base, const struct sockaddr_storage *link_listen, int dial_port,
		  char *why, size_t n)
{
	struct sockaddr_storage sa = *link_listen;
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = slot_base + DD_CHAN_SLOTS };
	int one = 1, zero = 0, port;
	socklen_t sl = sa.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);

	ep = epfd;
	base = slot_base;
	port_out = dial_port + 1;
	if (getrandom(&id_seed, sizeof(id_seed), 0) != sizeof(id_seed) || port_out > 65535) {
		snprintf(why, n, "the channel port would be %d", port_out);
		return -1;
	}
	for (int i = 0; i < DD_CHAN_SLOTS; i++)
		pends[i].fd = -1;
	if (sa.ss_family == AF_INET) {
		port = ntohs(((struct sockaddr_in *)&sa)->sin_port) + 1;
		((struct sockaddr_in *)&sa)->sin_port = htons((uint16_t)port);
	} else {
		port = ntohs(((struct sockaddr_in6 *)&sa)->sin6_port) + 1;
		((struct sockaddr_in6 *)&sa)->sin6_port = htons((uint16_t)port);
	}
	lfd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (lfd >= 0) {
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (sa.ss_family == AF_INET6)
			setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	}
	if (port > 65535 || lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sl) < 0 || listen(lfd, 256) < 0 ||
	    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0) {
		snprintf(why, n, "channel port %d: %s", port, strerror(errno));
		dd_chan_stop();
		return -1;
	}
	return 0;
}

void dd_chan_stop(void)
{
	while (ends) {
		struct end *e = ends;
		end_unlink(e);
		free(e);
	}
	for (int i = 0; i < DD_CHAN_SLOTS; i++)
		if (pends[i].state != P_FREE)
			pend_close(&pends[i]);
	if (lfd >= 0)
		close(lfd);
	lfd = -1;
	dsock_hmap_free(&by_id);
	dsock_hmap_free(&by_end);
}

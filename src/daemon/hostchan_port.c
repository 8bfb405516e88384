/* Channels between hosts (hostchan.h): the channel sockets in the making,
 * in a table of slots of the daemon's epoll set: the claimant's dials
 * (connecting, then waiting for TAKEN with their first bytes sent) and
 * the connections accepted at the channel port (reading their first
 * bytes, then waiting for their end).  The ends are hostchan.c's. */
#include "daemon/hostchan_int.h"
#include "common/log.h"
#include "common/reason.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

static const char magic[8] = "dsockch1";
struct pend hc_pends[DD_CHAN_SLOTS];
static int ep = -1, lfd = -1, port_out;
static uint32_t base;
static int n_waiting; /* accepted connections in hc_pends */

int hc_port_on(void)
{
	return lfd >= 0;
}

void hc_pend_close(struct pend *p)
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
		if (hc_pends[i].state == P_FREE)
			return &hc_pends[i];
	return NULL;
}

static int pend_watch(struct pend *p, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.u32 = base + (uint32_t)(p - hc_pends) };

	return epoll_ctl(ep, EPOLL_CTL_ADD, p->fd, &ev);
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
	uint64_t id;

	*forged = 0;
	memcpy(&id, p->in + 8, 8);
	id = le64toh(id);
	for (struct end *e = hc_ends_with(id); e; e = e->idnext) {
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
		hc_n_refused++;
		hc_pend_close(p); /* closed, or failed, before its first bytes */
		return;
	}
	if (memcmp(p->in, magic, 8)) {
		hc_n_refused++;
		hc_pend_close(p);
		return;
	}
	if (!(e = match(p, &forged))) {
		if (forged) {
			char a[64];
			struct dsock_addr from;
			dsock_addr_from(&from, (struct sockaddr *)&p->from);
			dsock_addr_format(&from, a, sizeof(a));
			DSOCK_WARN("a channel from %s refused: its token or address is not its claim's", a);
			hc_n_refused++;
			hc_pend_close(p);
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
	hc_pend_close(p);
	/* (out of the tables first: a link that fails as TAKEN is written
	 * ends its ends) */
	hc_end_unlink(e);
	if (dd_hosts_taken(e->gen, e->id)) {
		hc_n_accepted++;
		hc_answer(e, fd, 0);
	} else {
		hc_answer(e, -1, DSOCK_R_HOST_UNREACHABLE);
	}
	close(fd);
}

void hc_retry_waiting(void)
{
	for (int i = 0; i < DD_CHAN_SLOTS && n_waiting; i++)
		if (hc_pends[i].state == P_ACCEPTED && hc_pends[i].nin == HELLO_LEN)
			accepted_read(&hc_pends[i]);
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
				same += hc_pends[i].state == P_ACCEPTED && same_addr(&hc_pends[i].from, &sa);
			if (same < ACCEPT_PER_ADDR)
				p = pend_free();
		}
		if (!p) {
			hc_n_refused++;
			close(fd);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		p->fd = fd;
		p->from = sa;
		p->nin = 0;
		p->e = NULL;
		p->deadline = hc_now_ms() + ACCEPT_WAIT_MS;
		p->state = P_ACCEPTED;
		n_waiting++;
		if (pend_watch(p, EPOLLIN)) {
			hc_pend_close(p);
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
		hc_end_done(e, -1, DSOCK_R_HOST_UNREACHABLE);
		return;
	}
	memcpy(hello, magic, 8);
	memcpy(hello + 8, &id, 8);
	memcpy(hello + 16, e->token, DD_CHAN_TOKEN);
	/* (a new connection's buffer takes them whole) */
	if (send(p->fd, hello, sizeof(hello), MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(hello)) {
		hc_end_done(e, -1, DSOCK_R_HOST_UNREACHABLE);
		return;
	}
	epoll_ctl(ep, EPOLL_CTL_DEL, p->fd, NULL);
	p->state = P_SENT;
}

/* The claimant's dial: from the link's own address to the other
 * daemon's channel port at the link's peer address. */
int hc_dial(struct end *e)
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
		hc_pend_close(p);
		return -DSOCK_R_RESOURCE;
	}
	e->slot = (int)(p - hc_pends);
	return 0;
}

void dd_chan_event(uint32_t slot, uint32_t events)
{
	struct pend *p;

	(void)events;
	if (slot - base == DD_CHAN_SLOTS) {
		on_listener();
		return;
	}
	if (slot - base >= DD_CHAN_SLOTS || (p = &hc_pends[slot - base])->state == P_FREE)
		return;
	if (p->state == P_DIAL)
		dialled(p);
	else if (p->state == P_ACCEPTED)
		accepted_read(p);
}

int hc_port_tick(int64_t now)
{
	int64_t next = -1;

	for (int i = 0; i < DD_CHAN_SLOTS && n_waiting; i++) {
		struct pend *p = &hc_pends[i];
		if (p->state != P_ACCEPTED)
			continue;
		if (p->deadline <= now) {
			hc_n_refused++;
			hc_pend_close(p);
		} else if (next < 0 || p->deadline - now < next) {
			next = p->deadline - now;
		}
	}
	return (int)next;
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
	if (hc_ends_start() || port_out > 65535) {
		snprintf(why, n, "the channel port would be %d", port_out);
		return -1;
	}
	for (int i = 0; i < DD_CHAN_SLOTS; i++)
		hc_pends[i].fd = -1;
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

void hc_port_stop(void)
{
	for (int i = 0; i < DD_CHAN_SLOTS; i++)
		if (hc_pends[i].state != P_FREE)
			hc_pend_close(&hc_pends[i]);
	if (lfd >= 0)
		close(lfd);
	lfd = -1;
}

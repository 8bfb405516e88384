/* A peer that does not read: the writer is not writable for any poller
 * (epoll level-triggered EPOLLOUT, poll, select) until the peer drains;
 * and the queue ioctls (SIOCINQ/FIONREAD, SIOCOUTQ, SIOCOUTQNSD) on such
 * a connection, in forms that do not depend on buffer sizes. */
#include "conf.h"

#include <fcntl.h>
#include <linux/sockios.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

/* epoll_wait waits up to ms, poll and select a quarter of it */
static void show_writable(const char *label, int fd, int ep, int ms)
{
	struct epoll_event ev = { 0 };
	struct timeval tv = { ms / 4000, (ms / 4 % 1000) * 1000 };
	fd_set w;
	int n;

	n = epoll_wait(ep, &ev, 1, ms);
	out("%s: epoll_wait = %d %s", label, n, n > 0 ? epollname(ev.events) : "");
	out("%s: poll %s", label, pollname((unsigned)wait_fd(fd, POLLOUT, ms / 4)));
	FD_ZERO(&w);
	FD_SET(fd, &w);
	n = select(fd + 1, NULL, &w, NULL, &tv);
	out("%s: select = %d", label, n);
}

/* Reads exactly n bytes, whatever they are; returns the count. */
static long drain(int fd, long n)
{
	char *b = malloc(65536);
	long got = 0;

	while (got < n) {
		ssize_t k = read(fd, b, n - got < 65536 ? (size_t)(n - got) : 65536);
		if (k <= 0)
			break;
		got += k;
	}
	free(b);
	return got;
}

STREAM_SCEN(epollout_level_full_peer)
{
	struct epoll_event ev = { .events = EPOLLOUT, .data.u64 = 0xf1 };
	int c, s, ep = epoll_create1(0);
	long filled;

	fam_pair(f, &c, &s);
	R("epoll_ctl ADD EPOLLOUT", epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	show_writable("idle", c, ep, 200);
	filled = fill_full(c);
	out("filled: %s", filled > 0 ? "yes" : "no");
	show_writable("peer full", c, ep, 200);
	/* room the kernel finds later (a receiver that collapses its queue
	 * reopens its window by a few bytes, later across a bridge than on
	 * loopback) is taken first, so that the send meets a full peer */
	long more = fill_full(c);
	if (more > 0)
		filled += more;
	R("send dontwait", send(c, "x", 1, MSG_DONTWAIT));
	out("drained all: %s", drain(s, filled) == filled ? "yes" : "no");
	show_writable("peer drained", c, ep, 4000);
	R("recv dontwait: nothing more", recv(s, &ev, 1, MSG_DONTWAIT));
}

/* The same with the writer nonblocking and EPOLLIN|EPOLLOUT registered:
 * a full peer that sends something back is readable, not writable. */
STREAM_SCEN(epollout_level_full_peer_in_and_out)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.u64 = 0xf2 };
	int c, s, ep = epoll_create1(0);
	char b[8];
	long filled;

	fam_pair(f, &c, &s);
	epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
	filled = fill_full(c);
	show_writable("peer full", c, ep, 100);
	R("peer sends back", send(s, "back", 4, 0));
	wait_fd(c, POLLIN, 2000);
	show_writable("peer full, reply waiting", c, ep, 200);
	R("recv reply", recv(c, b, sizeof(b), 0));
	out("drained all: %s", drain(s, filled) == filled ? "yes" : "no");
	show_writable("peer drained", c, ep, 4000);
}

static int ioc(int fd, unsigned long req)
{
	int v = -1;

	return ioctl(fd, req, &v) < 0 ? -errno - 1000 : v;
}

/* Waits up to 2 s for the sender's queue to be empty (TCP: everything
 * acknowledged, read or not). */
static int outq_empties(int fd)
{
	for (int i = 0; i < 200; i++) {
		if (ioc(fd, SIOCOUTQ) == 0)
			return 1;
		msleep(10);
	}
	return 0;
}

STREAM_SCEN(queue_ioctls)
{
	char a[123] = { 0 }, b[200];
	int c, s;
	long filled;

	fam_pair(f, &c, &s);
	out("SIOCINQ idle: %d, FIONREAD: %d", ioc(s, SIOCINQ), ioc(s, FIONREAD));
	R("send 123", send(c, a, sizeof(a), 0));
	wait_fd(s, POLLIN, 2000);
	msleep(10);
	out("SIOCINQ: %d, FIONREAD: %d", ioc(s, SIOCINQ), ioc(s, FIONREAD));
	if (is_inet(f)) {
		/* acknowledged though unread */
		out("sender's SIOCOUTQ reaches 0: %s", outq_empties(c) ? "yes" : "no");
		out("sender's SIOCOUTQNSD: %d", ioc(c, SIOCOUTQNSD));
	} else {
		/* a unix socket counts what its peer has not read, in memory */
		out("sender's SIOCOUTQ > 0 while unread: %s", ioc(c, SIOCOUTQ) > 0 ? "yes" : "no");
	}
	R("recv 23", recv(s, b, 23, 0));
	out("SIOCINQ after reading 23: %d", ioc(s, SIOCINQ));
	R("recv 200", recv(s, b, sizeof(b), 0));
	out("SIOCINQ drained: %d", ioc(s, SIOCINQ));
	if (!is_inet(f))
		out("sender's SIOCOUTQ once read: %d", ioc(c, SIOCOUTQ));
	filled = fill_full(c);
	/* TCP: how a full peer's bytes split between its queue and the
	 * sender's is where the stack keeps them (the kernel in two queues,
	 * dsock's rings in one that the receiver reads from, as its receive
	 * queue); what holds either way is their sum */
	out("peer full: SIOCINQ > 0: %s", ioc(s, SIOCINQ) > 0 ? "yes" : "no");
	if (is_inet(f))
		out("sender's queue plus peer's = what was sent: %s",
		    ioc(c, SIOCOUTQ) + ioc(s, SIOCINQ) == filled ? "yes" : "no");
	else
		out("sender's SIOCOUTQ > 0: %s", ioc(c, SIOCOUTQ) > 0 ? "yes" : "no");
	out("drained all: %s", drain(s, filled) == filled ? "yes" : "no");
	out("SIOCINQ drained: %d", ioc(s, SIOCINQ));
	if (is_inet(f))
		out("sender's SIOCOUTQ reaches 0: %s", outq_empties(c) ? "yes" : "no");
	else
		out("sender's SIOCOUTQ once read: %d", ioc(c, SIOCOUTQ));
}

/* A level-triggered EPOLLOUT writer whose process also has a thread
 * blocked in recv on the same socket (the one that drains what wakes a
 * writer, under dsock), against a peer that reads slowly: every wait for
 * room ends, and every byte arrives. */
struct slow_drain {
	int fd;
	long want, got;
};

static void *slow_drainer(void *arg)
{
	struct slow_drain *d = arg;
	char *b = malloc(65536);

	while (d->got < d->want) {
		ssize_t r = recv(d->fd, b, 65536, 0);
		if (r <= 0)
			break;
		d->got += r;
		msleep(1);
	}
	free(b);
	return NULL;
}

static void *blocked_reader(void *arg)
{
	char b[16];

	wait_fd(*(int *)arg, POLLIN, 20000); /* (the socket is nonblocking) */
	return (void *)(long)recv(*(int *)arg, b, sizeof(b), 0);
}

STREAM_SCEN(epollout_level_writer_beside_reader)
{
	const long total = 8L << 20;
	struct epoll_event ev = { .events = EPOLLOUT, .data.u64 = 0xf3 };
	struct slow_drain d = { .want = total };
	char *buf = calloc(1, 65536);
	pthread_t td, tr;
	long sent = 0;
	int c, s, ep = epoll_create1(0), stalled = 0;
	void *rr;

	fam_pair(f, &c, &s);
	d.fd = s;
	fcntl(c, F_SETFL, O_NONBLOCK);
	epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
	pthread_create(&tr, NULL, blocked_reader, &c);
	pthread_create(&td, NULL, slow_drainer, &d);
	while (sent < total && !stalled) {
		ssize_t w = send(c, buf, (size_t)(total - sent < 65536 ? total - sent : 65536), 0);
		if (w > 0) {
			sent += w;
			continue;
		}
		if (epoll_wait(ep, &ev, 1, 3000) != 1)
			stalled = 1;
	}
	pthread_join(td, NULL);
	R("peer sends 1 (for the reader thread)", send(s, "x", 1, 0));
	pthread_join(tr, &rr);
	out("sent all: %s, a wait for room stalled: %s, peer got all: %s, reader thread's recv = %ld",
	    sent == total ? "yes" : "no", stalled ? "yes" : "no", d.got == total ? "yes" : "no", (long)rr);
	free(buf);
}

/* The same writer with bytes from its peer unread: waiting for room on a
 * full peer reports nothing (it asked for EPOLLOUT alone), and takes no CPU
 * meanwhile (printed as yes/no against a generous bound). */
STREAM_SCEN(epollout_level_full_peer_with_unread)
{
	struct epoll_event ev = { .events = EPOLLOUT, .data.u64 = 0xf4 };
	int c, s, ep = epoll_create1(0), n;
	clock_t cpu0;
	long filled;

	fam_pair(f, &c, &s);
	epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
	filled = fill_full(c);
	R("peer sends 100", send(s, (char[100]){ 0 }, 100, 0));
	wait_fd(c, POLLIN, 2000);
	cpu0 = clock();
	n = epoll_wait(ep, &ev, 1, 500);
	out("peer full, 100 unread: epoll_wait = %d, spun: %s", n, clock() - cpu0 > CLOCKS_PER_SEC / 5 ? "yes" : "no");
	out("drained all: %s", drain(s, filled) == filled ? "yes" : "no");
	n = epoll_wait(ep, &ev, 1, 4000);
	out("peer drained: epoll_wait = %d %s", n, n == 1 ? epollname(ev.events) : "");
}

/* A full peer that closes with the writer's bytes unread (a reset): the
 * writer waiting for room is woken and writable for every poller (its
 * send fails at once), level- or edge-triggered; the reset's error is
 * reported once, by the send or by SO_ERROR. */
static void full_peer_closes(const struct fam *f, unsigned et)
{
	struct epoll_event ev = { .events = EPOLLOUT | et, .data.u64 = 0xf5 };
	int c, s, ep = epoll_create1(0), n;

	fam_pair(f, &c, &s);
	epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
	out("filled: %s", fill_full(c) > 0 ? "yes" : "no");
	n = epoll_wait(ep, &ev, 1, 100);
	out("peer full: epoll_wait = %d %s", n, n == 1 ? epollname(ev.events) : "");
	close(s);
	show_writable("peer closed", c, ep, 4000);
	if (et) { /* the error once, by SO_ERROR instead of the send */
		int e = -1;
		socklen_t l = sizeof(e);
		R("getsockopt SO_ERROR", getsockopt(c, SOL_SOCKET, SO_ERROR, &e, &l));
		out("SO_ERROR: %s", e ? strerror(e) : "0");
	}
	R("send", send(c, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL));
	R("send again", send(c, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL));
	close(ep);
	close(c);
}

STREAM_SCEN(epollout_level_full_peer_closes)
{
	full_peer_closes(f, 0);
}

STREAM_SCEN(epollout_edge_full_peer_closes)
{
	full_peer_closes(f, EPOLLET);
}

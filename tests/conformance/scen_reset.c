/* Resets (and the unix family's closes) delivered to a thread that is
 * blocked: in recv, in send on a full peer, in poll, in epoll_wait; and
 * what the calls after it return.  TCP: the blocked call gets ECONNRESET,
 * then reads see EOF and sends EPIPE.  A unix stream peer's close is a
 * plain EOF unless it left data unread (then ECONNRESET too); SO_LINGER
 * changes nothing there. */
#include "conf.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <unistd.h>

struct blocked {
	int fd, err, ep;
	long r;
	unsigned events;
};

static void *blocked_recv(void *arg)
{
	struct blocked *b = arg;
	char buf[64];

	b->r = recv(b->fd, buf, sizeof(buf), 0);
	b->err = errno;
	return NULL;
}

static void *blocked_send(void *arg)
{
	struct blocked *b = arg;
	static char buf[1000];

	b->r = send(b->fd, buf, sizeof(buf), MSG_NOSIGNAL);
	b->err = errno;
	return NULL;
}

static void *blocked_poll(void *arg)
{
	struct blocked *b = arg;
	struct pollfd p = { .fd = b->fd, .events = POLLIN | POLLRDHUP };

	b->r = poll(&p, 1, 5000);
	b->err = errno;
	b->events = (unsigned)p.revents;
	return NULL;
}

static void *blocked_epoll(void *arg)
{
	struct blocked *b = arg;
	struct epoll_event ev = { 0 };

	b->r = epoll_wait(b->ep, &ev, 1, 5000);
	b->err = errno;
	b->events = ev.events;
	return NULL;
}

static void close_linger0(int fd)
{
	struct linger lg = { 1, 0 };

	R("peer SO_LINGER {1,0}", setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)));
	R("peer close", close(fd));
}

/* The closing peer c has unread data (sent by s): its close resets. */
static void close_unread(int c, int s)
{
	R("send to the peer, which never reads it", send(s, "unread", 6, 0));
	wait_fd(c, POLLIN, 2000);
	R("peer close", close(c));
}

/* What s says after the blocked call returned. */
static void after(int s)
{
	char b[16];
	int err = -1;
	socklen_t el = sizeof(err);

	R("recv", recv(s, b, sizeof(b), MSG_DONTWAIT));
	R("recv again", recv(s, b, sizeof(b), 0));
	R("send", send(s, "x", 1, MSG_NOSIGNAL));
	out("poll: %s", pollname((unsigned)wait_fd(s, POLLIN | POLLOUT | POLLRDHUP, 0)));
	R("SO_ERROR", getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el));
	out("error %s", err ? ename(err) : "0");
}

static void reader_reset(const struct fam *f, int unread)
{
	struct blocked b = { 0 };
	pthread_t t;
	int c, s;

	fam_pair(f, &c, &s);
	b.fd = s;
	pthread_create(&t, NULL, blocked_recv, &b);
	msleep(30);
	if (unread)
		close_unread(c, s);
	else
		close_linger0(c);
	pthread_join(t, NULL);
	rec("blocked recv", b.r, b.err);
	after(s);
}

STREAM_SCEN(reset_blocked_reader_linger0) { reader_reset(f, 0); }
STREAM_SCEN(reset_blocked_reader_unread) { reader_reset(f, 1); }

/* A writer blocked on a peer that is full for good (it has copied
 * nothing) when the peer goes away with unread data. */
static void writer_reset(const struct fam *f, int linger0)
{
	struct blocked b = { 0 };
	pthread_t t;
	int c, s;

	fam_pair(f, &c, &s);
	out("filled the peer: %s", fill_full(c) > 0 ? "yes" : "no");
	b.fd = c;
	pthread_create(&t, NULL, blocked_send, &b);
	msleep(30);
	if (linger0)
		close_linger0(s);
	else
		R("peer close, its data unread", close(s));
	pthread_join(t, NULL);
	rec("blocked send", b.r, b.err);
	after(c);
}

STREAM_SCEN(reset_blocked_writer_linger0) { writer_reset(f, 1); }
STREAM_SCEN(reset_blocked_writer_unread) { writer_reset(f, 0); }

static void poller_reset(const struct fam *f, int use_epoll, int unread)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.u64 = 0xe1 };
	struct blocked b = { 0 };
	pthread_t t;
	int c, s;

	fam_pair(f, &c, &s);
	b.fd = s;
	if (use_epoll) {
		b.ep = epoll_create1(0);
		epoll_ctl(b.ep, EPOLL_CTL_ADD, s, &ev);
	}
	pthread_create(&t, NULL, use_epoll ? blocked_epoll : blocked_poll, &b);
	msleep(30);
	if (unread)
		close_unread(c, s);
	else
		close_linger0(c);
	pthread_join(t, NULL);
	if (use_epoll) {
		rec("blocked epoll_wait", b.r, b.err);
		out("events %s", epollname(b.events));
	} else {
		rec("blocked poll", b.r, b.err);
		out("revents %s", pollname(b.events));
	}
	after(s);
}

STREAM_SCEN(reset_blocked_poll_linger0) { poller_reset(f, 0, 0); }
STREAM_SCEN(reset_blocked_poll_unread) { poller_reset(f, 0, 1); }
STREAM_SCEN(reset_blocked_epoll_linger0) { poller_reset(f, 1, 0); }
STREAM_SCEN(reset_blocked_epoll_unread) { poller_reset(f, 1, 1); }

/* Data that had arrived before the reset is still read first, then the
 * reset, then EOF. */
STREAM_SCEN(reset_with_data_queued)
{
	char b[64];
	int c, s;

	fam_pair(f, &c, &s);
	R("send to s", send(c, "read later", 10, 0));
	wait_fd(s, POLLIN, 2000);
	close_linger0(c);
	msleep(20);
	R("recv", recv(s, b, sizeof(b), MSG_DONTWAIT));
	out("data: %.10s", b);
	R("recv again", recv(s, b, sizeof(b), MSG_DONTWAIT));
	R("recv a third time", recv(s, b, sizeof(b), MSG_DONTWAIT));
}

/* The application resets the connection itself: connect(AF_UNSPEC) with
 * bytes of the peer's unread; the peer's receive sees the reset. */
STREAM_SCEN(reset_by_connect_unspec)
{
	struct sockaddr sa = { .sa_family = AF_UNSPEC };
	char b[16];
	int c, s;

	if (!tcp_only(f))
		return;
	fam_pair(f, &c, &s);
	R("peer sends 10", send(s, "0123456789", 10, 0));
	wait_fd(c, POLLIN, 2000);
	R("connect AF_UNSPEC", connect(c, &sa, sizeof(sa)));
	wait_fd(s, POLLIN, 2000);
	R("peer recv", recv(s, b, sizeof(b), 0));
	R("peer recv again", recv(s, b, sizeof(b), 0));
}

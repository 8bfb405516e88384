/* SO_RCVLOWAT and SO_SNDLOWAT.  On TCP a receive low-water mark holds
 * back readiness (poll, select, epoll) and makes a blocking receive wait
 * for that many bytes; a unix stream socket's receive waits the same way
 * but its readiness ignores the mark.  Linux does not let SO_SNDLOWAT be
 * set. */
#include "conf.h"

#include <pthread.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

static void show_ready(const char *label, int fd, int ep, int ms)
{
	struct epoll_event ev;
	struct timeval tv = { 0, ms * 1000 };
	fd_set r;
	int n;

	out("%s: poll %s", label, pollname((unsigned)wait_fd(fd, POLLIN, ms)));
	FD_ZERO(&r);
	FD_SET(fd, &r);
	n = select(fd + 1, &r, NULL, NULL, &tv);
	out("%s: select %d", label, n);
	n = epoll_wait(ep, &ev, 1, ms);
	out("%s: epoll %d %s", label, n, n > 0 ? epollname(ev.events) : "");
}

STREAM_SCEN(rcvlowat_readiness)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 1 };
	char a[200], b[200];
	int c, s, v = 100, got = -1, ep = epoll_create1(0);
	socklen_t gl = sizeof(got);

	fam_pair(f, &c, &s);
	epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
	R("SO_RCVLOWAT 100", setsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)));
	R("SO_RCVLOWAT get", getsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &got, &gl));
	out("rcvlowat %d", got);
	fill(a, sizeof(a), 11);
	R("send 50", send(c, a, 50, 0));
	msleep(20);
	show_ready("50 of 100", s, ep, 50);
	R("send 60", send(c, a + 50, 60, 0));
	show_ready("110 of 100", s, ep, 2000);
	R("recv 200", recv(s, b, sizeof(b), 0));
	out("same bytes: %s", memcmp(a, b, 110) ? "no" : "yes");
	show_ready("drained", s, ep, 0);
}

/* A nonblocking receive below the mark returns what is there. */
STREAM_SCEN(rcvlowat_nonblocking_recv)
{
	char a[64] = { 0 }, b[200];
	int c, s, v = 100;

	fam_pair(f, &c, &s);
	setsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v));
	R("send 50", send(c, a, 50, 0));
	msleep(20);
	R("recv dontwait 200", recv(s, b, sizeof(b), MSG_DONTWAIT));
	R("recv dontwait, empty", recv(s, b, sizeof(b), MSG_DONTWAIT));
}

struct two_writes {
	int fd;
	const char *buf;
};

static void *write_50_then_60(void *arg)
{
	struct two_writes *w = arg;

	msleep(30); /* the receive is blocked by now */
	send(w->fd, w->buf, 50, 0);
	msleep(50);
	send(w->fd, w->buf + 50, 60, 0);
	return NULL;
}

/* A blocking receive with a large buffer waits for the mark: 50 bytes
 * then, 50 ms later, 60 more; it returns both.  (The receive must be
 * waiting before the first 50 come: a TCP receive that has taken them
 * waits on for its mark, but the kernel wakes it only when the bytes
 * still queued reach the mark, so 60 more do not: it would hang.) */
STREAM_SCEN(rcvlowat_blocking_recv)
{
	char a[110], b[1000];
	struct two_writes w;
	pthread_t t;
	int c, s, v = 100;

	fam_pair(f, &c, &s);
	fill(a, sizeof(a), 12);
	R("SO_RCVLOWAT 100", setsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)));
	w = (struct two_writes){ c, a };
	pthread_create(&t, NULL, write_50_then_60, &w);
	R("recv 1000", recv(s, b, sizeof(b), 0));
	pthread_join(t, NULL);
	out("same bytes: %s", memcmp(a, b, 110) ? "no" : "yes");
	/* a buffer smaller than the mark: the buffer is the target */
	R("send 30", send(c, a, 30, 0));
	R("recv 20 below the mark", recv(s, b, 20, 0));
	R("recv 1000 dontwait", recv(s, b, sizeof(b), MSG_DONTWAIT));
}

/* Below the mark, the end of the stream makes the data readable. */
STREAM_SCEN(rcvlowat_then_eof)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.u64 = 2 }, got;
	char a[50] = { 0 }, b[200];
	int c, s, v = 100, ep = epoll_create1(0);

	fam_pair(f, &c, &s);
	epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
	setsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v));
	R("send 50", send(c, a, 50, 0));
	R("shutdown WR", shutdown(c, SHUT_WR));
	out("poll: %s", pollname((unsigned)wait_fd(s, POLLIN | POLLRDHUP, 2000)));
	R("epoll_wait", epoll_wait(ep, &got, 1, 2000));
	out("events %s", epollname(got.events));
	R("recv 200", recv(s, b, sizeof(b), 0));
	R("recv eof", recv(s, b, sizeof(b), 0));
}

/* What the kernel does with odd marks and with SO_SNDLOWAT. */
STREAM_SCEN(lowat_options)
{
	int c, s, v, got;
	socklen_t gl = sizeof(got);

	fam_pair(f, &c, &s);
	got = -1;
	R("SO_RCVLOWAT default", getsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &got, &gl));
	out("rcvlowat %d", got);
	v = 0;
	R("SO_RCVLOWAT 0", setsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)));
	got = -1;
	getsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &got, &gl);
	out("rcvlowat %d", got);
	v = 7;
	R("SO_RCVLOWAT 7", setsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)));
	got = -1;
	getsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &got, &gl);
	out("rcvlowat %d", got);
	R("SO_RCVLOWAT short optlen", setsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, 2));
	got = -1;
	R("SO_SNDLOWAT default", getsockopt(c, SOL_SOCKET, SO_SNDLOWAT, &got, &gl));
	out("sndlowat %d", got);
	v = 1000;
	R("SO_SNDLOWAT 1000", setsockopt(c, SOL_SOCKET, SO_SNDLOWAT, &v, sizeof(v)));
	got = -1;
	getsockopt(c, SOL_SOCKET, SO_SNDLOWAT, &got, &gl);
	out("sndlowat %d", got);
	/* the mark still works for data after all this */
	char b[8];
	R("send 3", send(c, "abc", 3, 0));
	msleep(20);
	out("poll, 3 of 7: %s", pollname((unsigned)wait_fd(s, POLLIN, 0)));
	R("recv dontwait 8", recv(s, b, sizeof(b), MSG_DONTWAIT));
}

/* SO_RCVLOWAT set on the listener before the connection exists: the
 * accepted socket inherits it; poll and a blocking recv honour it. */
STREAM_SCEN(rcvlowat_inherited_from_listener)
{
	struct sockaddr_storage a;
	socklen_t al = sizeof(a);
	int lowat = 10, v = 0, c, s, l;
	socklen_t vl = sizeof(v);
	char b[64];

	if (!tcp_only(f))
		return;
	l = fam_server(f, &a, &al);
	R("listener SO_RCVLOWAT 10", setsockopt(l, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat)));
	c = fam_socket(f, 0);
	R("connect", connect(c, (struct sockaddr *)&a, al));
	s = accept(l, NULL, NULL);
	getsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, &vl);
	out("accepted socket's SO_RCVLOWAT: %d", v);
	fam_warm(f, c, s);
	R("send 5", send(c, "01234", 5, 0));
	out("5 of 10: poll %s", pollname((unsigned)wait_fd(s, POLLIN, 200)));
	R("send 7", send(c, "5678901", 7, 0));
	out("12 of 10: poll %s", pollname((unsigned)wait_fd(s, POLLIN, 2000)));
	R("recv", recv(s, b, sizeof(b), 0));
}

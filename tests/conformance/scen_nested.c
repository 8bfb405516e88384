/* An epoll set nested in poll, in select and in another epoll set, its
 * member a connection whose next message comes right after each receive:
 * the reader takes a message with recv and cues the writer through a
 * pipe, the writer sends at once (within a millisecond of the receive),
 * and the outer wait, already under way or about to start, must say
 * readable.  Under dsock a receiver that leaves recv keeps polling its
 * ring for a while (a lingering lease), so such a message may come with
 * no wake-up byte on the kernel socket: a poller of the nested set must
 * still hear of it. */
#include "conf.h"

#include <pthread.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

#define ROUNDS 8

struct cued {
	int fd, cue;
};

static void *send_on_cue(void *arg)
{
	struct cued *w = arg;
	char cue, msg[8];

	for (int i = 0; i < ROUNDS; i++) {
		if (read(w->cue, &cue, 1) != 1)
			break;
		snprintf(msg, sizeof(msg), "msg%d", i);
		send(w->fd, msg, 4, 0);
	}
	return NULL;
}

enum outer { O_POLL, O_SELECT, O_EPOLL };

/* The outer wait, 2 s at most; prints what it says and returns whether it
 * said readable. */
static int outer_wait(enum outer how, int inner, int outer)
{
	if (how == O_POLL) {
		struct pollfd p = { .fd = inner, .events = POLLIN };
		int n = poll(&p, 1, 2000);
		out("  poll on the inner set = %d %s", n, pollname(p.revents));
		return n == 1;
	}
	if (how == O_SELECT) {
		struct timeval tv = { 2, 0 };
		fd_set r;
		FD_ZERO(&r);
		FD_SET(inner, &r);
		int n = select(inner + 1, &r, NULL, NULL, &tv);
		out("  select on the inner set = %d, readable %d", n, FD_ISSET(inner, &r) ? 1 : 0);
		return n == 1;
	}
	struct epoll_event ev = { 0 };
	int n = epoll_wait(outer, &ev, 1, 2000);
	out("  outer epoll_wait = %d %s data 0x%llx", n, epollname(ev.events), (unsigned long long)ev.data.u64);
	return n == 1;
}

static void nested_next_message(const struct fam *f, enum outer how)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0xd1 }, got;
	int c, s, p[2], inner = epoll_create1(0), outer = -1;
	struct cued w;
	pthread_t t;
	char b[16];

	fam_pair(f, &c, &s);
	R("inner ADD the connection", epoll_ctl(inner, EPOLL_CTL_ADD, s, &ev));
	if (how == O_EPOLL) {
		outer = epoll_create1(0);
		ev.data.u64 = 0xd2;
		R("outer ADD the inner set", epoll_ctl(outer, EPOLL_CTL_ADD, inner, &ev));
	}
	if (pipe(p) < 0)
		return;
	w = (struct cued){ c, p[0] };
	pthread_create(&t, NULL, send_on_cue, &w);
	R("cue the first message", write(p[1], "x", 1));
	for (int i = 0; i < ROUNDS; i++) {
		out("round %d", i);
		if (!outer_wait(how, inner, outer)) {
			out("  the outer wait missed the message: stopping");
			break;
		}
		int n = epoll_wait(inner, &got, 1, 0);
		out("  inner epoll_wait = %d %s data 0x%llx", n, n > 0 ? epollname(got.events) : "-",
		    n > 0 ? (unsigned long long)got.data.u64 : 0ULL);
		ssize_t r = recv(s, b, sizeof(b), 0);
		out("  recv = %zd %.*s", r, r > 0 ? (int)r : 0, b);
		if (i + 1 < ROUNDS && write(p[1], "x", 1) != 1) /* the next one, at once */
			break;
	}
	close(p[1]);
	pthread_join(t, NULL);
	R("recv dontwait: nothing more", recv(s, b, sizeof(b), MSG_DONTWAIT));
}

STREAM_SCEN(epoll_nested_in_poll_next_message) { nested_next_message(f, O_POLL); }
STREAM_SCEN(epoll_nested_in_select_next_message) { nested_next_message(f, O_SELECT); }
STREAM_SCEN(epoll_nested_in_epoll_next_message) { nested_next_message(f, O_EPOLL); }

/* An epoll set of an idle connection, polled as a whole, says nothing
 * until a byte comes: under dsock a pairing may write its own headers
 * where the set's waits look (a transport's wait fd), which are no data;
 * the other end's receive that finds nothing, a moment after the
 * connection is made, is where a pairing may write them. */
static void nested_idle(const struct fam *f, enum outer how)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0xd1 }, got;
	int c, s, inner = epoll_create1(0), outer = epoll_create1(0), n;
	char b[4];

	fam_pair(f, &c, &s);
	R("inner ADD the connection", epoll_ctl(inner, EPOLL_CTL_ADD, s, &ev));
	ev.data.u64 = 0xd2;
	R("outer ADD the inner set", epoll_ctl(outer, EPOLL_CTL_ADD, inner, &ev));
	usleep(50000);
	R("recv dontwait at the other end", recv(c, b, sizeof(b), MSG_DONTWAIT));
	for (int round = 0; round < 2; round++) {
		if (how == O_POLL) {
			struct pollfd p = { .fd = inner, .events = POLLIN };
			n = poll(&p, 1, 150);
			out("poll on the inner set = %d %s", n, pollname(p.revents));
		} else if (how == O_SELECT) {
			struct timeval tv = { 0, 150000 };
			fd_set r;
			FD_ZERO(&r);
			FD_SET(inner, &r);
			n = select(inner + 1, &r, NULL, NULL, &tv);
			out("select on the inner set = %d, readable %d", n, FD_ISSET(inner, &r) ? 1 : 0);
		} else {
			n = epoll_wait(outer, &got, 1, 150);
			out("outer epoll_wait = %d %s", n, n > 0 ? epollname(got.events) : "-");
		}
		n = epoll_wait(inner, &got, 1, 0);
		out("inner epoll_wait = %d %s", n, n > 0 ? epollname(got.events) : "-");
		if (round == 0)
			R("send one byte", send(c, "x", 1, 0));
	}
	R("recv", recv(s, b, sizeof(b), 0));
}

STREAM_SCEN(epoll_nested_idle_in_poll) { nested_idle(f, O_POLL); }
STREAM_SCEN(epoll_nested_idle_in_select) { nested_idle(f, O_SELECT); }
STREAM_SCEN(epoll_nested_idle_in_epoll) { nested_idle(f, O_EPOLL); }

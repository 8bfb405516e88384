/* Waiting: poll, ppoll, select, pselect, epoll, and threads blocked in a
 * call woken by data, signals (with and without SA_RESTART) and close. */
#include "conf.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

STREAM_SCEN(poll_states)
{
	struct pollfd p[2];
	int c, s;

	fam_pair(f, &c, &s);
	p[0] = (struct pollfd){ .fd = s, .events = POLLIN | POLLOUT | POLLRDHUP };
	p[1] = (struct pollfd){ .fd = 9999, .events = POLLIN };
	R("poll idle", poll(p, 2, 0));
	out("s: %s, bad: %s", pollname(p[0].revents), pollname(p[1].revents));
	send(c, "x", 1, 0);
	wait_fd(s, POLLIN, 2000);
	R("poll data", poll(p, 1, 0));
	out("s: %s", pollname(p[0].revents));
	shutdown(c, SHUT_WR);
	wait_fd(s, POLLRDHUP, 2000);
	R("poll after peer SHUT_WR", poll(p, 1, 0));
	out("s: %s", pollname(p[0].revents));
	close(c);
	shutdown(s, SHUT_WR);
	msleep(10);
	R("poll after both closed", poll(p, 1, 100));
	out("s: %s", pollname(p[0].revents & ~POLLOUT));
	p[0].events = 0;
	R("poll no events", poll(p, 1, 0));
	out("s: %s", pollname(p[0].revents & ~POLLOUT));
}

STREAM_SCEN(poll_timeout_and_negative_fd)
{
	struct pollfd p[2];
	struct timespec t0;
	int c, s;

	fam_pair(f, &c, &s);
	p[0] = (struct pollfd){ .fd = s, .events = POLLIN };
	p[1] = (struct pollfd){ .fd = -1, .events = POLLIN };
	now(&t0);
	R("poll 30ms", poll(p, 2, 30));
	out("waited >= 25ms: %s, revents %s %s", ms_since(&t0) >= 25 ? "yes" : "no",
	    pollname(p[0].revents), pollname(p[1].revents));
}

SCEN(ppoll_sigmask)
{
	sigset_t block, empty;
	struct pollfd p;
	int c, s;
	struct fam tcp = { "tcp4", AF_INET, SOCK_STREAM, 0 };

	fam_pair(&tcp, &c, &s);
	handle_usr1(0);
	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	sigprocmask(SIG_BLOCK, &block, NULL);
	raise(SIGUSR1);
	out("pending, handler ran: %d", (int)got_usr1);
	p = (struct pollfd){ .fd = s, .events = POLLIN };
	sigemptyset(&empty);
	R("ppoll with empty mask", ppoll(&p, 1, &(struct timespec){ 5, 0 }, &empty));
	out("handler ran: %d", (int)got_usr1);
	R("ppoll 10ms", ppoll(&p, 1, &(struct timespec){ 0, 10000000 }, NULL));
}

/* select takes microseconds past a second (whole seconds more); a
 * negative time is EINVAL.  A message read partly leaves the rest for the
 * wait to find. */
STREAM_SCEN(select_usec_past_a_second)
{
	fd_set r;
	struct timeval tv = { 0, 1500000 };
	char b[8];
	int c, s;

	fam_pair(f, &c, &s);
	send(c, "abcd", 4, 0);
	wait_fd(s, POLLIN, 2000);
	R("recv 1", recv(s, b, 1, 0));
	FD_ZERO(&r);
	FD_SET(s, &r);
	R("select, 1,500,000 us", select(s + 1, &r, NULL, NULL, &tv));
	out("r %d", FD_ISSET(s, &r));
	R("recv the rest", recv(s, b, sizeof(b), 0));
	FD_ZERO(&r);
	FD_SET(s, &r);
	tv = (struct timeval){ 0, 1100000 };
	send(c, "e", 1, 0);
	R("select, 1,100,000 us, data on its way", select(s + 1, &r, NULL, NULL, &tv));
	out("r %d", FD_ISSET(s, &r));
	tv = (struct timeval){ 0, -1 };
	R("select, negative", select(s + 1, &r, NULL, NULL, &tv));
}

STREAM_SCEN(select_sets)
{
	fd_set r, w;
	struct timeval tv = { 0, 0 };
	int c, s;

	fam_pair(f, &c, &s);
	FD_ZERO(&r);
	FD_ZERO(&w);
	FD_SET(s, &r);
	FD_SET(s, &w);
	R("select idle", select(s + 1, &r, &w, NULL, &tv));
	out("r %d w %d", FD_ISSET(s, &r), FD_ISSET(s, &w));
	send(c, "x", 1, 0);
	wait_fd(s, POLLIN, 2000);
	FD_ZERO(&r);
	FD_SET(s, &r);
	tv = (struct timeval){ 0, 0 };
	R("select data", select(s + 1, &r, NULL, NULL, &tv));
	out("r %d", FD_ISSET(s, &r));
	recv(s, &tv, 1, 0);
	FD_ZERO(&r);
	FD_SET(s, &r);
	tv = (struct timeval){ 0, 20000 };
	R("select timeout", select(s + 1, &r, NULL, NULL, &tv));
	out("r %d, timeval zeroed: %s", FD_ISSET(s, &r), tv.tv_sec == 0 && tv.tv_usec == 0 ? "yes" : "no");
	FD_ZERO(&r);
	FD_SET(s, &r);
	R("select negative nfds", select(-1, &r, NULL, NULL, &tv));
}

STREAM_SCEN(pselect_sets)
{
	fd_set r;
	sigset_t none;
	int c, s;

	fam_pair(f, &c, &s);
	sigemptyset(&none);
	send(c, "x", 1, 0);
	wait_fd(s, POLLIN, 2000);
	FD_ZERO(&r);
	FD_SET(s, &r);
	R("pselect", pselect(s + 1, &r, NULL, NULL, &(struct timespec){ 0, 0 }, &none));
	out("r %d", FD_ISSET(s, &r));
	FD_ZERO(&r);
	FD_SET(c, &r);
	R("pselect timeout", pselect(c + 1, &r, NULL, NULL, &(struct timespec){ 0, 10000000 }, NULL));
}

/* ---- epoll -------------------------------------------------------------- */
static void ep_add(int ep, int fd, unsigned events, uint64_t data)
{
	struct epoll_event ev = { .events = events, .data.u64 = data };

	R("epoll_ctl ADD", epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
}

static void ep_show(const char *label, int ep, int timeout)
{
	struct epoll_event evs[8];
	int n = epoll_wait(ep, evs, 8, timeout);

	if (n < 0) {
		out("%s: -1 %s", label, ename(errno));
		return;
	}
	/* several ready fds may come in any order: sort by data */
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			if (evs[j].data.u64 < evs[i].data.u64) {
				struct epoll_event t = evs[i];
				evs[i] = evs[j];
				evs[j] = t;
			}
	out("%s: %d", label, n);
	for (int i = 0; i < n; i++)
		out("  data 0x%llx events %s", (unsigned long long)evs[i].data.u64, epollname(evs[i].events));
}

STREAM_SCEN(epoll_level_triggered)
{
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC);
	char b[4];

	fam_pair(f, &c, &s);
	ep_add(ep, s, EPOLLIN, 0x1111);
	ep_show("idle", ep, 0);
	send(c, "ab", 2, 0);
	ep_show("data", ep, 1000);
	ep_show("still", ep, 0);
	recv(s, b, 1, 0);
	ep_show("one byte left", ep, 0);
	recv(s, b, 1, 0);
	ep_show("drained", ep, 0);
}

STREAM_SCEN(epoll_edge_triggered)
{
	int c, s, ep = epoll_create1(0);

	fam_pair(f, &c, &s);
	ep_add(ep, s, EPOLLIN | EPOLLET, 0x2222);
	send(c, "a", 1, 0);
	ep_show("first", ep, 1000);
	ep_show("again without new data", ep, 0);
	send(c, "b", 1, 0);
	ep_show("new data", ep, 1000);
	ep_show("again", ep, 0);
}

/* A writer that also waits for the peer's end (EPOLLOUT|EPOLLRDHUP, edge-
 * triggered: asleep once the first edge is taken) wakes at the peer's
 * shutdown of its writing, though it never asked for EPOLLIN.  (Whether
 * an edge comes between is not the question here.) */
STREAM_SCEN(epoll_out_rdhup_wakes_at_peer_shutdown)
{
	struct epoll_event ev;
	int c, s, ep = epoll_create1(0), rdhup = 0;

	fam_pair(f, &c, &s);
	ep_add(ep, s, EPOLLOUT | EPOLLRDHUP | EPOLLET, 0x2323);
	ep_show("first", ep, 1000);
	R("peer shuts its writing", shutdown(c, SHUT_WR));
	for (int i = 0; i < 3 && !rdhup; i++)
		rdhup = epoll_wait(ep, &ev, 1, 2000) == 1 && (ev.events & EPOLLRDHUP);
	out("the peer's end woke the writer: %s", rdhup ? "yes" : "no");
}

STREAM_SCEN(epoll_oneshot)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.u64 = 0x3333 };
	int c, s, ep = epoll_create1(0);

	fam_pair(f, &c, &s);
	ep_add(ep, s, EPOLLIN | EPOLLONESHOT, 0x3333);
	send(c, "a", 1, 0);
	ep_show("first", ep, 1000);
	send(c, "b", 1, 0);
	ep_show("disarmed", ep, 50);
	R("MOD rearm", epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
	ep_show("rearmed", ep, 1000);
}

STREAM_SCEN(epoll_rdhup_and_hup)
{
	int c, s, ep = epoll_create1(0);

	fam_pair(f, &c, &s);
	ep_add(ep, s, EPOLLIN | EPOLLRDHUP, 0x4444);
	shutdown(c, SHUT_WR);
	ep_show("peer SHUT_WR", ep, 1000);
	close(c);
	shutdown(s, SHUT_WR);
	msleep(10);
	ep_show("both sides shut", ep, 1000);
}

STREAM_SCEN(epoll_out_and_mod)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0x5556 };
	int c, s, ep = epoll_create1(0);

	fam_pair(f, &c, &s);
	ep_add(ep, s, EPOLLOUT, 0x5555);
	ep_show("writable", ep, 1000);
	R("MOD to IN", epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
	ep_show("IN only, idle", ep, 0);
	send(c, "a", 1, 0);
	ep_show("IN with new data", ep, 1000);
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	ep_show("after DEL", ep, 0);
}

STREAM_SCEN(epoll_two_sets)
{
	int c, s, e1 = epoll_create1(0), e2 = epoll_create1(0);

	fam_pair(f, &c, &s);
	ep_add(e1, s, EPOLLIN, 0xa1);
	ep_add(e2, s, EPOLLIN | EPOLLET, 0xa2);
	send(c, "a", 1, 0);
	ep_show("set 1", e1, 1000);
	ep_show("set 2", e2, 1000);
	ep_show("set 2 again", e2, 0);
	ep_show("set 1 again", e1, 0);
}

STREAM_SCEN(epoll_nested_and_in_poll)
{
	int c, s, inner = epoll_create1(0), outer = epoll_create1(0);

	fam_pair(f, &c, &s);
	ep_add(inner, s, EPOLLIN, 0xb1);
	ep_add(outer, inner, EPOLLIN, 0xb2);
	out("poll on inner, idle: %s", pollname((unsigned)wait_fd(inner, POLLIN, 0)));
	ep_show("outer idle", outer, 0);
	send(c, "a", 1, 0);
	out("poll on inner: %s", pollname((unsigned)wait_fd(inner, POLLIN, 1000)));
	ep_show("outer", outer, 1000);
	ep_show("inner", inner, 0);
}

/* An epoll set is closed and its number reused for a socket that joins
 * another set: nothing of the old set may leak into the new one (such as
 * the old set's unread data, reported for the new socket). */
STREAM_SCEN(epoll_set_number_reused)
{
	int c1, s1, c2, s2, old = epoll_create1(0), ep = epoll_create1(0);
	char b[4];

	fam_pair(f, &c1, &s1);
	fam_pair(f, &c2, &s2);
	ep_add(old, s1, EPOLLIN, 0xc1);
	send(c1, "ab", 2, 0);
	msleep(10);
	R("recv one of two", recv(s1, b, 1, 0));
	ep_show("old set, one byte left", old, 0);
	R("close old set", close(old));
	R("dup2 onto its number", dup2(s2, old) == old ? 0 : -1);
	ep_add(ep, old, EPOLLIN, 0xc2);
	ep_show("new set, idle", ep, 0);
	send(c2, "z", 1, 0);
	ep_show("new set, data", ep, 1000);
}

STREAM_SCEN(epoll_ctl_errors)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int c, s, ep = epoll_create1(0), fd;

	fam_pair(f, &c, &s);
	ep_add(ep, s, EPOLLIN, 1);
	R("ADD twice", epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	R("MOD unknown", epoll_ctl(ep, EPOLL_CTL_MOD, c, &ev));
	R("DEL unknown", epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));
	R("ADD self", epoll_ctl(ep, EPOLL_CTL_ADD, ep, &ev));
	R("bad op", epoll_ctl(ep, 99, s, &ev));
	R("bad epfd", epoll_ctl(s, EPOLL_CTL_ADD, c, &ev));
	ev.events = EPOLLIN | EPOLLEXCLUSIVE;
	R("ADD exclusive", epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	R("MOD exclusive", epoll_ctl(ep, EPOLL_CTL_MOD, c, &ev));
	R("epoll_create 0", epoll_create(0));
	fd = epoll_create(1);
	out("epoll_create 1 ok: %s", fd >= 0 ? "yes" : "no");
	R("epoll_create1 bad flags", epoll_create1(12345));
	R("wait maxevents 0", epoll_wait(ep, &ev, 0, 0));
}

STREAM_SCEN(epoll_data_pointer_kept)
{
	static int marker;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &marker }, got;
	int c, s, ep = epoll_create1(0);

	fam_pair(f, &c, &s);
	epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
	send(c, "a", 1, 0);
	R("wait", epoll_wait(ep, &got, 1, 1000));
	out("ptr kept: %s", got.data.ptr == &marker ? "yes" : "no");
	ev.data.u64 = 0xfedcba9876543210ull;
	epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev);
	R("wait", epoll_pwait(ep, &got, 1, 1000, NULL));
	out("u64 kept: 0x%llx", (unsigned long long)got.data.u64);
	R("pwait2", epoll_pwait2(ep, &got, 1, &(struct timespec){ 1, 0 }, NULL));
}

STREAM_SCEN(epoll_exclusive_listener)
{
	struct sockaddr_storage a;
	socklen_t al;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLEXCLUSIVE }, got;
	int l, e1 = epoll_create1(0), e2 = epoll_create1(0), c, n1, n2;

	l = fam_server(f, &a, &al);
	ev.data.u64 = 1;
	R("ADD exclusive 1", epoll_ctl(e1, EPOLL_CTL_ADD, l, &ev));
	ev.data.u64 = 2;
	R("ADD exclusive 2", epoll_ctl(e2, EPOLL_CTL_ADD, l, &ev));
	c = fam_socket(f, 0);
	connect(c, (struct sockaddr *)&a, al);
	n1 = epoll_wait(e1, &got, 1, 1000);
	n2 = epoll_wait(e2, &got, 1, 0);
	out("someone saw the connection: %s", n1 + n2 >= 1 ? "yes" : "no");
	int s = accept(l, NULL, NULL);
	out("accept: %s", s >= 0 ? "yes" : ename(errno));
	fam_warm(f, c, s);
	/* the accepted socket's readiness is its own: the listener's sets say nothing */
	send(c, "x", 1, 0);
	wait_fd(s, POLLIN, 2000);
	n1 = epoll_wait(e1, &got, 1, 0);
	n2 = epoll_wait(e2, &got, 1, 0);
	out("listener sets after data on the connection: %d %d", n1, n2);
}

STREAM_SCEN(epoll_closed_fd_leaves_set)
{
	int c, s, ep = epoll_create1(0);

	fam_pair(f, &c, &s);
	ep_add(ep, s, EPOLLIN, 7);
	send(c, "a", 1, 0);
	close(s);
	ep_show("after close", ep, 50);
}

struct shared_ep { int ep; int got; };
static void *ep_waiter(void *arg)
{
	struct shared_ep *sh = arg;
	struct epoll_event ev;

	if (epoll_wait(sh->ep, &ev, 1, 5000) == 1)
		__atomic_fetch_or(&sh->got, (int)ev.data.u64, __ATOMIC_SEQ_CST);
	return NULL;
}

STREAM_SCEN(epoll_shared_by_threads)
{
	struct shared_ep sh = { .ep = epoll_create1(0) };
	int c1, s1, c2, s2;
	pthread_t t1, t2;

	fam_pair(f, &c1, &s1);
	fam_pair(f, &c2, &s2);
	ep_add(sh.ep, s1, EPOLLIN | EPOLLONESHOT, 1);
	ep_add(sh.ep, s2, EPOLLIN | EPOLLONESHOT, 2);
	pthread_create(&t1, NULL, ep_waiter, &sh);
	pthread_create(&t2, NULL, ep_waiter, &sh);
	msleep(20);
	send(c1, "a", 1, 0);
	send(c2, "b", 1, 0);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	out("events seen by the two threads: %d", sh.got);
}

/* ---- threads blocked in a call ------------------------------------------- */
/* Sends SIGUSR1 to t every 10 ms until *r (99 while blocked) changes: a
 * signal that lands before the call blocks is simply handled, the next one
 * interrupts it. */
static void signal_until_returned(pthread_t t, long *r)
{
	for (int i = 0; i < 200 && __atomic_load_n(r, __ATOMIC_SEQ_CST) == 99; i++) {
		msleep(10);
		pthread_kill(t, SIGUSR1);
	}
}

struct blocked { int fd; long r; int err; };

static void *blocked_recv(void *arg)
{
	struct blocked *b = arg;
	char buf[16];

	b->r = recv(b->fd, buf, sizeof(buf), 0);
	b->err = errno;
	return NULL;
}

STREAM_SCEN(thread_recv_woken_by_data)
{
	struct blocked b = { 0 };
	pthread_t t;
	int c, s;

	fam_pair(f, &c, &s);
	b.fd = s;
	pthread_create(&t, NULL, blocked_recv, &b);
	msleep(30);
	send(c, "hello", 5, 0);
	pthread_join(t, NULL);
	rec("blocked recv", b.r, b.err);
}

STREAM_SCEN(thread_recv_signal_eintr)
{
	struct blocked b = { .r = 99 };
	pthread_t t;
	int c, s;

	handle_usr1(0);
	fam_pair(f, &c, &s);
	b.fd = s;
	pthread_create(&t, NULL, blocked_recv, &b);
	signal_until_returned(t, &b.r);
	pthread_join(t, NULL);
	rec("blocked recv", b.r, b.err);
	out("handler ran: %s", got_usr1 > 0 ? "yes" : "no");
}

STREAM_SCEN(thread_recv_signal_restart)
{
	struct blocked b = { 0 };
	pthread_t t;
	int c, s;

	handle_usr1(1);
	fam_pair(f, &c, &s);
	b.fd = s;
	pthread_create(&t, NULL, blocked_recv, &b);
	msleep(30);
	pthread_kill(t, SIGUSR1);
	msleep(30);
	send(c, "after", 5, 0);
	pthread_join(t, NULL);
	rec("blocked recv", b.r, b.err);
	out("handler ran: %s", got_usr1 > 0 ? "yes" : "no");
}

STREAM_SCEN(thread_recv_woken_by_shutdown)
{
	struct blocked b = { 0 };
	pthread_t t;
	int c, s;

	fam_pair(f, &c, &s);
	b.fd = s;
	pthread_create(&t, NULL, blocked_recv, &b);
	msleep(30);
	R("shutdown RDWR from other thread", shutdown(s, SHUT_RDWR));
	pthread_join(t, NULL);
	rec("blocked recv", b.r, b.err);
}

STREAM_SCEN(thread_recv_fd_closed_meanwhile)
{
	struct blocked b = { 0 };
	pthread_t t;
	char buf[4];
	int c, s;

	fam_pair(f, &c, &s);
	b.fd = s;
	pthread_create(&t, NULL, blocked_recv, &b);
	msleep(30);
	R("close from other thread", close(s));
	R("recv on closed fd", recv(s, buf, 4, MSG_DONTWAIT));
	send(c, "late", 4, 0); /* the blocked call still holds the socket */
	pthread_join(t, NULL);
	rec("blocked recv", b.r, b.err);
}

static void *blocked_accept_b(void *arg)
{
	struct blocked *b = arg;

	b->r = accept(b->fd, NULL, NULL);
	b->err = errno;
	return NULL;
}

STREAM_NOCONN_SCEN(thread_accept_signal_eintr)
{
	struct sockaddr_storage a;
	socklen_t al;
	struct blocked b = { .r = 99 };
	pthread_t t;

	handle_usr1(0);
	b.fd = fam_server(f, &a, &al);
	pthread_create(&t, NULL, blocked_accept_b, &b);
	signal_until_returned(t, &b.r);
	pthread_join(t, NULL);
	rec("blocked accept", b.r, b.err);
}

struct blocked_ep { int ep; long r; int err; };
static void *blocked_epoll(void *arg)
{
	struct blocked_ep *b = arg;
	struct epoll_event ev;

	b->r = epoll_wait(b->ep, &ev, 1, -1);
	b->err = errno;
	return NULL;
}

STREAM_SCEN(thread_epoll_wait_woken)
{
	struct blocked_ep b = { .ep = epoll_create1(0), .r = 99 };
	pthread_t t;
	int c, s;

	fam_pair(f, &c, &s);
	ep_add(b.ep, s, EPOLLIN, 1);
	pthread_create(&t, NULL, blocked_epoll, &b);
	msleep(30);
	send(c, "x", 1, 0);
	pthread_join(t, NULL);
	rec("blocked epoll_wait (data)", b.r, b.err);
	handle_usr1(1); /* epoll_wait is never restarted, SA_RESTART or not */
	recv(s, &c, 1, 0);
	b.r = 99;
	pthread_create(&t, NULL, blocked_epoll, &b);
	signal_until_returned(t, &b.r);
	pthread_join(t, NULL);
	rec("blocked epoll_wait (signal)", b.r, b.err);
}

/* A writer waiting for room with an edge-triggered registration for
 * EPOLLOUT alone (no EPOLLIN), as a write-only event loop does: the
 * reader draining in another thread must give it an edge.  Under dsock the
 * room is announced by a byte arriving on the writer's socket (EPOLLIN),
 * which such a registration does not ask for. */
static void *slow_drain(void *arg)
{
	msleep(100);
	return (void *)read_to_eof(*(int *)arg);
}

STREAM_SCEN(epoll_out_only_edge_writer)
{
	int c, s, ep = epoll_create1(0), rounds = 0, woken = 0;
	struct epoll_event ev = { .events = EPOLLOUT | EPOLLET, .data.u64 = 7 }, got;
	pthread_t t;
	void *drained;
	long sent;

	fam_pair(f, &c, &s);
	fcntl(c, F_SETFL, O_NONBLOCK);
	sent = fill_until_eagain(c);
	epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
	/* (the registration's own edge, if the kernel gives one now) */
	epoll_wait(ep, &got, 1, 0);
	pthread_create(&t, NULL, slow_drain, &s);
	/* three rounds: fill to EAGAIN, then wait for the edge of room */
	for (rounds = 0; rounds < 3; rounds++) {
		int n = epoll_wait(ep, &got, 1, 5000);
		if (n == 1 && (got.events & EPOLLOUT) && got.data.u64 == 7)
			woken++;
		long more = fill_until_eagain(c);
		if (more > 0)
			sent += more;
	}
	if (fam_on_wire(f))
		out("edges of room for an EPOLLOUT-only edge-triggered writer: %s", woken ? "some" : "none");
	else
		out("edges of room for an EPOLLOUT-only edge-triggered writer: %d of 3", woken);
	shutdown(c, SHUT_WR);
	pthread_join(t, &drained);
	out("all drained: %s", (long)drained == sent ? "yes" : "no");
	close(ep);
}

/* One thread asleep in epoll_wait on a set, reading what it reports,
 * while another thread asks the same set with a zero timeout in a loop
 * (and reads nothing) for the first ten messages: the sleeper gets every
 * message, during and after. */
struct beside_poller { int ep, fd; _Atomic int got, stop; };

static void *beside_sleeper(void *arg)
{
	struct beside_poller *b = arg;
	struct epoll_event ev[8];

	while (atomic_load(&b->got) < 20) {
		int n = epoll_wait(b->ep, ev, 8, 3000);
		char buf[64];
		if (n <= 0)
			break;
		ssize_t r = recv(b->fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (r > 0)
			atomic_fetch_add(&b->got, (int)r);
	}
	return NULL;
}

static void *beside_looker(void *arg)
{
	struct beside_poller *b = arg;
	struct epoll_event ev[8];

	while (!atomic_load(&b->stop))
		epoll_wait(b->ep, ev, 8, 0);
	return NULL;
}

STREAM_SCEN(epoll_sleeper_beside_nonblocking_poller)
{
	struct beside_poller b = { .ep = epoll_create1(EPOLL_CLOEXEC) };
	int c, s;
	pthread_t ts, tl;

	fam_pair(f, &c, &s);
	b.fd = s;
	ep_add(b.ep, s, EPOLLIN, 5);
	pthread_create(&ts, NULL, beside_sleeper, &b);
	msleep(50);
	pthread_create(&tl, NULL, beside_looker, &b);
	for (int i = 0; i < 20; i++) {
		send(c, "x", 1, 0);
		msleep(30);
		if (i == 9) {
			atomic_store(&b.stop, 1);
			pthread_join(tl, NULL);
			msleep(100);
			out("the sleeper got the first 10: %s", atomic_load(&b.got) == 10 ? "yes" : "no");
		}
	}
	pthread_join(ts, NULL);
	out("the sleeper got all 20: %s", atomic_load(&b.got) == 20 ? "yes" : "no");
}

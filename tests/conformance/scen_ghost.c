/* Registrations an epoll set no longer holds: an event loop that takes a
 * connection out and puts it back around every message (redis's ae: DEL,
 * ADD for EPOLLOUT, DEL, ADD for EPOLLIN), and what a deleted
 * registration must never do afterwards: be reported (data arriving, the
 * fd closed while a dup keeps the socket, its data given to another
 * registration), answer a MOD or a second DEL, or make the set readable to
 * poll or to an outer set.  Under dsock such a DEL may leave the kernel's
 * registration in place (src/lib/sock/eghost.c). */
#include "conf.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

static int ctl(int ep, int op, int fd, unsigned events, uint64_t data)
{
	struct epoll_event ev = { .events = events, .data.u64 = data };
	return epoll_ctl(ep, op, fd, &ev);
}

static void wait_print(const char *what, int ep, int ms)
{
	struct epoll_event ev[4];
	int n = epoll_wait(ep, ev, 4, ms);

	out("  %s: epoll_wait = %d", what, n);
	for (int i = 0; i < n; i++)
		out("    %s data 0x%llx", epollname(ev[i].events), (unsigned long long)ev[i].data.u64);
}

/* A request and its answer per round, the server's registration switched
 * between EPOLLIN and EPOLLOUT as redis's event loop does. */
STREAM_SCEN(epoll_del_add_every_message)
{
	int c, s, ep = epoll_create1(0);
	char b[32];

	fam_pair(f, &c, &s);
	R("ADD IN", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0x51));
	for (int i = 0; i < 40; i++) {
		int quiet = i > 2 && i < 38; /* the rounds in between print only a difference */
		ssize_t w = send(c, "request-abcdef", 14, 0), r;
		struct epoll_event ev = { 0 };
		int n = epoll_wait(ep, &ev, 1, 2000);
		if (!quiet || n != 1 || ev.events != EPOLLIN || w != 14)
			out("round %d: send %zd, epoll_wait = %d %s", i, w, n, epollname(ev.events));
		r = recv(s, b, sizeof(b), 0);
		int m1 = ctl(ep, EPOLL_CTL_MOD, s, EPOLLIN, 0x51), d1 = epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL);
		int a1 = ctl(ep, EPOLL_CTL_ADD, s, EPOLLOUT, 0x51);
		ev.events = 0;
		n = epoll_wait(ep, &ev, 1, 2000);
		ssize_t w2 = send(s, b, r > 0 ? (size_t)r : 1, 0);
		int d2 = epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL), a2 = ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0x51);
		ssize_t r2 = recv(c, b, sizeof(b), 0);
		if (!quiet || r != 14 || m1 || d1 || a1 || n != 1 || ev.events != EPOLLOUT || w2 != 14 || d2 || a2 ||
		    r2 != 14)
			out("  recv %zd, MOD %d DEL %d ADD %d, epoll_wait = %d %s, send %zd, DEL %d ADD %d, answer %zd", r,
			    m1, d1, a1, n, epollname(ev.events), w2, d2, a2, r2);
	}
	wait_print("nothing left", ep, 0);
}

/* Deleted: data that comes is not reported, the set is not readable, MOD
 * and DEL find nothing, an ADD with other data reports that data. */
STREAM_SCEN(epoll_deleted_stays_deleted)
{
	int c, s, c2, s2, ep = epoll_create1(0);
	char b[32];

	fam_pair(f, &c, &s);
	fam_pair(f, &c2, &s2);
	R("ADD the first", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0x61));
	R("ADD the second", ctl(ep, EPOLL_CTL_ADD, s2, EPOLLIN, 0x62));
	R("send to the first", send(c, "one", 3, 0));
	wait_print("the first readable", ep, 2000);
	R("DEL the first", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	wait_print("its data still unread", ep, 50);
	R("send to the first again", send(c, "two", 3, 0));
	wait_print("after more data", ep, 50);
	struct pollfd p = { .fd = ep, .events = POLLIN };
	R("poll on the set", poll(&p, 1, 0));
	out("  revents %s", pollname(p.revents));
	R("send to the second", send(c2, "three", 5, 0));
	wait_print("the second only", ep, 2000);
	R("recv the second", recv(s2, b, sizeof(b), 0));
	R("MOD the deleted", ctl(ep, EPOLL_CTL_MOD, s, EPOLLIN, 0x61));
	R("DEL the deleted", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	R("ADD it back with other data", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLOUT, 0x63));
	wait_print("back", ep, 2000);
	R("ADD it again", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0x63));
	R("recv the first", recv(s, b, 6, MSG_WAITALL));
}

/* Deleted, then its fd closed while a dup keeps the socket: data sent to
 * it is not reported, neither with the old data nor at all. */
STREAM_SCEN(epoll_deleted_then_closed_dup_alive)
{
	int c, s, ep = epoll_create1(0);
	char b[8];

	fam_pair(f, &c, &s);
	R("ADD", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0x71));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	int d = dup(s);
	R("close the registered fd", close(s));
	R("send", send(c, "data", 4, 0));
	wait_print("the dup's socket has data", ep, 100);
	R("recv from the dup", recv(d, b, sizeof(b), 0));
	close(d);
}

/* Deleted, and its data given to another registration: one event for the
 * new one, none for the old. */
STREAM_SCEN(epoll_deleted_data_reused)
{
	int c, s, c2, s2, ep = epoll_create1(0);
	char b[8];

	fam_pair(f, &c, &s);
	fam_pair(f, &c2, &s2);
	R("ADD the first", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0x81));
	R("DEL the first", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	R("ADD the second, same data", ctl(ep, EPOLL_CTL_ADD, s2, EPOLLIN, 0x81));
	R("send to the first", send(c, "old", 3, 0));
	wait_print("only the first has data", ep, 100);
	R("send to the second", send(c2, "new", 3, 0));
	wait_print("the second has data", ep, 2000);
	R("recv the second", recv(s2, b, sizeof(b), 0));
	wait_print("then nothing", ep, 50);
	R("recv the first", recv(s, b, sizeof(b), 0));
}

/* Deleted from a set that is then put in another set: the outer set does
 * not hear of the deleted one's data. */
STREAM_SCEN(epoll_deleted_inner_set)
{
	int c, s, inner = epoll_create1(0), outer = epoll_create1(0);
	char b[8];

	fam_pair(f, &c, &s);
	R("inner ADD", ctl(inner, EPOLL_CTL_ADD, s, EPOLLIN, 0x91));
	R("inner DEL", epoll_ctl(inner, EPOLL_CTL_DEL, s, NULL));
	R("outer ADD the inner set", ctl(outer, EPOLL_CTL_ADD, inner, EPOLLIN, 0x92));
	R("send", send(c, "data", 4, 0));
	wait_print("outer", outer, 100);
	wait_print("inner", inner, 0);
	R("recv", recv(s, b, sizeof(b), 0));
}

/* Deleted, then the process forks, and the parent puts the connection
 * back as it was: the set is the child's too, and its wait reports the
 * parent's registration (the child must not take it for the deleted one,
 * nor take it out of the set). */
STREAM_SCEN(epoll_deleted_then_fork)
{
	int c, s, ep = epoll_create1(0), go[2], res[2];
	char b[8];

	fam_pair(f, &c, &s);
	if (pipe(go) < 0 || pipe(res) < 0)
		return;
	R("ADD", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0xa1));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	pid_t pid = fork();
	if (pid == 0) {
		struct epoll_event ev = { 0 };
		char x, r[2];
		if (read(go[0], &x, 1) != 1)
			_exit(1);
		int n = epoll_wait(ep, &ev, 1, 2000);
		r[0] = (char)n;
		r[1] = (char)(n == 1 && ev.data.u64 == 0xa1);
		_exit(write(res[1], r, 2) == 2 ? 0 : 1);
	}
	R("parent ADD back", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0xa1));
	R("send", send(c, "data", 4, 0));
	R("cue the child", write(go[1], "x", 1));
	char r[2] = { -1, -1 };
	R("the child's answer", read(res[0], r, 2));
	out("  child: epoll_wait = %d, the parent's data %d", r[0], r[1]);
	R("reap", waitpid(pid, NULL, 0) == pid);
	wait_print("the parent", ep, 2000);
	R("recv", recv(s, b, sizeof(b), 0));
}

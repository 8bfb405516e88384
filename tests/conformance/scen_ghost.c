/* Registrations an epoll set no longer holds: an event loop that takes a
 * connection out and puts it back around every message (redis's ae: DEL,
 * ADD for EPOLLOUT, DEL, ADD for EPOLLIN), and what a deleted
 * registration must never do afterwards: be reported (data arriving, the
 * fd closed while a dup keeps the socket, its data given to another
 * registration), answer a MOD or a second DEL, or make the set readable to
 * poll or to an outer set.  Under dsock such a DEL may leave the kernel's
 * registration in place (src/lib/sock/eghost.c), in close-on-exec sets
 * only (the scenarios make them so), so the set is reached here every way
 * that could show such a registration: a dup of the set, an fd that takes
 * its data, a wait with little room, a fork, a poll asleep on the set, a
 * program spawned after the set loses close-on-exec. */
#include "conf.h"
#include "common/rawsys.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
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
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC);
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
	int c, s, c2, s2, ep = epoll_create1(EPOLL_CLOEXEC);
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
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC);
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
	int c, s, c2, s2, ep = epoll_create1(EPOLL_CLOEXEC);
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
	int c, s, inner = epoll_create1(EPOLL_CLOEXEC), outer = epoll_create1(EPOLL_CLOEXEC);
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
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC), go[2], res[2];
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

/* Deleted, then the set dup'd: the copy reaches the same set, and neither
 * number reports the deleted one or finds it. */
STREAM_SCEN(epoll_deleted_set_dup)
{
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC), ep2;
	char b[8];

	fam_pair(f, &c, &s);
	R("ADD", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0xb1));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	R("dup the set", (ep2 = dup(ep)) >= 0);
	R("send", send(c, "data", 4, 0));
	wait_print("the copy", ep2, 100);
	R("DEL through the copy", epoll_ctl(ep2, EPOLL_CTL_DEL, s, NULL));
	R("ADD back through the first", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0xb2));
	wait_print("the copy", ep2, 2000);
	R("DEL through the copy", epoll_ctl(ep2, EPOLL_CTL_DEL, s, NULL));
	R("DEL again", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	R("ADD back", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0xb3));
	wait_print("the first", ep, 2000);
	R("recv", recv(s, b, sizeof(b), 0));
}

/* Deleted, and its data given to an eventfd (edge-triggered): the
 * eventfd's event is the one reported, once. */
STREAM_SCEN(epoll_deleted_data_to_eventfd)
{
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC), e = eventfd(0, EFD_NONBLOCK);
	uint64_t one = 1;
	char b[8];

	fam_pair(f, &c, &s);
	R("ADD", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0xc1));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	R("ADD an eventfd, same data, edge-triggered", ctl(ep, EPOLL_CTL_ADD, e, EPOLLIN | EPOLLET, 0xc1));
	R("send", send(c, "data", 4, 0));
	R("write the eventfd", write(e, &one, 8));
	wait_print("the eventfd", ep, 2000);
	wait_print("then nothing", ep, 50);
	R("recv", recv(s, b, sizeof(b), 0));
	close(e);
}

/* Two connections with data, the first deleted: a wait with room for one
 * event and no timeout reports the second. */
STREAM_SCEN(epoll_deleted_first_maxevents_one)
{
	int c, s, c2, s2, ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { 0 };
	char b[8];

	fam_pair(f, &c, &s);
	fam_pair(f, &c2, &s2);
	R("ADD the first", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0xd1));
	R("ADD the second", ctl(ep, EPOLL_CTL_ADD, s2, EPOLLIN, 0xd2));
	R("send to the first", send(c, "one", 3, 0));
	R("send to the second", send(c2, "two", 3, 0));
	R("wait for both", wait_fd(s, POLLIN, 2000) && wait_fd(s2, POLLIN, 2000));
	wait_print("both", ep, 2000);
	R("DEL the first", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	int n = epoll_wait(ep, &ev, 1, 0);
	out("  room for one, no timeout: epoll_wait = %d data 0x%llx", n, n > 0 ? (unsigned long long)ev.data.u64 : 0ULL);
	R("recv the first", recv(s, b, sizeof(b), 0));
	R("recv the second", recv(s2, b, sizeof(b), 0));
}

/* An empty set, then a fork: the parent adds and deletes a connection that
 * then gets data; the child's wait on the set (the same set) hears
 * nothing. */
STREAM_SCEN(epoll_empty_set_fork_then_deleted)
{
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC), go[2], res[2];
	char b[8];

	fam_pair(f, &c, &s);
	if (pipe(go) < 0 || pipe(res) < 0)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		struct epoll_event ev = { 0 };
		char x, r;
		if (read(go[0], &x, 1) != 1)
			_exit(1);
		r = (char)epoll_wait(ep, &ev, 1, 200);
		_exit(write(res[1], &r, 1) == 1 ? 0 : 1);
	}
	R("parent ADD", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0xe1));
	R("parent DEL", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	R("send", send(c, "data", 4, 0));
	R("cue the child", write(go[1], "x", 1));
	char r = -1;
	R("the child's answer", read(res[0], &r, 1));
	out("  child: epoll_wait = %d", r);
	R("reap", waitpid(pid, NULL, 0) == pid);
	wait_print("the parent", ep, 50);
	R("recv", recv(s, b, sizeof(b), 0));
}

/* MOD of a deleted registration: its arguments are checked first. */
STREAM_SCEN(epoll_deleted_mod_errors)
{
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC);

	fam_pair(f, &c, &s);
	R("ADD", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0xf1));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	R("MOD with EPOLLEXCLUSIVE", ctl(ep, EPOLL_CTL_MOD, s, EPOLLIN | EPOLLEXCLUSIVE, 0xf1));
	R("MOD without an event", epoll_ctl(ep, EPOLL_CTL_MOD, s, NULL));
	R("MOD", ctl(ep, EPOLL_CTL_MOD, s, EPOLLIN, 0xf1));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	R("ADD with EPOLLEXCLUSIVE", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLEXCLUSIVE, 0xf2));
}

struct asleep {
	int ep, n;
	short revents;
};

static void *poll_set(void *arg)
{
	struct asleep *a = arg;
	struct pollfd p = { .fd = a->ep, .events = POLLIN };

	a->n = poll(&p, 1, 300);
	a->revents = p.revents;
	return NULL;
}

/* A thread asleep in poll on the set; a connection added and deleted
 * meanwhile gets data: the poll times out. */
STREAM_SCEN(epoll_deleted_while_set_polled)
{
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC);
	struct asleep a = { .ep = ep };
	pthread_t t;
	char b[8];

	fam_pair(f, &c, &s);
	pthread_create(&t, NULL, poll_set, &a);
	usleep(50000);
	R("ADD", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0x1a1));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	R("send", send(c, "data", 4, 0));
	pthread_join(t, NULL);
	out("  the poll asleep on the set: %d %s", a.n, pollname((unsigned short)a.revents));
	R("recv", recv(s, b, sizeof(b), 0));
}

/* Spawns this program to wait on the inherited set ep. */
static int spawn_epwait(int ep)
{
	extern char **environ;
	char fds[16];
	char *argv[] = { "conf-scen", "exec-child", fds, "epwait", NULL };
	pid_t pid;
	int st;

	fflush(stdout);
	snprintf(fds, sizeof(fds), "%d", ep);
	if (posix_spawn(&pid, self_exe(), NULL, NULL, argv, environ))
		return -1;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Deleted, then the set loses close-on-exec (fcntl or ioctl) and a
 * program is spawned on it: the program's wait hears nothing; the same
 * for a set made without close-on-exec. */
STREAM_SCEN(epoll_deleted_then_spawned)
{
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC), ep2 = epoll_create(8), ep3 = epoll_create1(EPOLL_CLOEXEC);
	char b[8];

	fam_pair(f, &c, &s);
	R("ADD", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0x1b1));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	R("ADD to a set made without close-on-exec", ctl(ep2, EPOLL_CTL_ADD, s, EPOLLIN, 0x1b2));
	R("DEL", epoll_ctl(ep2, EPOLL_CTL_DEL, s, NULL));
	R("ADD to a third", ctl(ep3, EPOLL_CTL_ADD, s, EPOLLIN, 0x1b3));
	R("DEL", epoll_ctl(ep3, EPOLL_CTL_DEL, s, NULL));
	R("send", send(c, "data", 4, 0));
	R("wait for it", wait_fd(s, POLLIN, 2000));
	R("F_SETFD 0", fcntl(ep, F_SETFD, 0));
	R("FIONCLEX on the third", ioctl(ep3, FIONCLEX));
	out("spawned on the first: exit %d", spawn_epwait(ep));
	out("spawned on the second: exit %d", spawn_epwait(ep2));
	out("spawned on the third: exit %d", spawn_epwait(ep3));
	R("recv", recv(s, b, sizeof(b), 0));
}

/* A deleted registration whose fd is closed where no wrapper sees it
 * (fclose of an fdopen'd socket: libc's own close), its number then given
 * to another socket (F_DUPFD): an ADD with the same events and data
 * reports the new socket's data, and a third socket's ADD after a DEL its
 * own events. */
STREAM_SCEN(epoll_deleted_closed_unseen_number_reused)
{
	int c, s, c2, s2, ep = epoll_create1(EPOLL_CLOEXEC);
	char b[8];

	fam_pair(f, &c2, &s);
	c = dup2(c2, 500); /* (a number nothing else takes meanwhile) */
	close(c2);
	R("ADD IN", ctl(ep, EPOLL_CTL_ADD, c, EPOLLIN, 0x71));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));
	FILE *fp = fdopen(c, "r+");
	R("fclose of the fdopen'd socket", fp ? fclose(fp) : -1);
	fam_pair(f, &c2, &s2);
	R("another socket dup'd to that number", fcntl(c2, F_DUPFD, 500) == 500);
	close(c2);
	c = 500;
	R("ADD IN, the same data", ctl(ep, EPOLL_CTL_ADD, c, EPOLLIN, 0x71));
	R("send to it", send(s2, "x", 1, 0));
	wait_print("the new socket's data", ep, 2000);
	R("recv", recv(c, b, sizeof(b), 0));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));
	close(c);
	fam_pair(f, &c, &s);
	R("ADD IN|OUT, the same data", ctl(ep, EPOLL_CTL_ADD, c, EPOLLIN | EPOLLOUT, 0x71));
	wait_print("a third socket, writable", ep, 2000);
}

/* An op epoll_ctl does not know, on a deleted registration: the kernel's
 * EINVAL (EFAULT without an event), as for any registration. */
STREAM_SCEN(epoll_deleted_unknown_op)
{
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC), ops[] = { 0, 4, 99 };
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 3 };
	char label[48];

	fam_pair(f, &c, &s);
	R("ADD IN", epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));
	for (int i = 0; i < 3; i++) {
		snprintf(label, sizeof(label), "op %d with an event", ops[i]);
		R(label, epoll_ctl(ep, ops[i], c, &ev));
		snprintf(label, sizeof(label), "op %d without", ops[i]);
		R(label, epoll_ctl(ep, ops[i], c, NULL));
	}
	R("ADD IN again", epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
}

/* A pipe in the set, closed where no wrapper sees it (the system call
 * instruction itself, as libc's own close in pclose is: the kernel drops
 * its registration with the file), its number then given to a socket
 * (F_DUPFD) that joins the set: every message to the socket is reported. */
STREAM_SCEN(epoll_closed_unseen_pipe_number_to_socket)
{
	int c, s, p[2], ep = epoll_create1(EPOLL_CLOEXEC), seen = 0;
	char b[8];

	R("pipe", pipe(p));
	R("its reader at 501", dup2(p[0], 501));
	close(p[0]);
	R("ADD the pipe", ctl(ep, EPOLL_CTL_ADD, 501, EPOLLIN, 0x81));
	R("close it unseen", dsock_sys(SYS_close, 501)); /* (past the syscall() dsock interposes) */
	int c2;
	fam_pair(f, &c2, &s);
	R("a socket dup'd to that number", fcntl(c2, F_DUPFD, 501));
	close(c2);
	c = 501;
	R("ADD it", ctl(ep, EPOLL_CTL_ADD, c, EPOLLIN, 0x82));
	for (int i = 0; i < 20; i++) {
		struct epoll_event ev = { 0 };
		send(s, "x", 1, 0);
		seen += epoll_wait(ep, &ev, 1, 200) == 1 && ev.data.u64 == 0x82;
		recv(c, b, sizeof(b), 0);
	}
	out("messages reported: %d of 20", seen);
	close(p[1]);
}

/* A child made by clone without CLONE_VM (no fork handlers run) shares
 * the set: its wait, then the parent's ADD and wait after a DEL. */
static int ep_of_clone;
static int clone_child(void *arg)
{
	struct epoll_event ev[4];
	(void)arg;
	return epoll_wait(ep_of_clone, ev, 4, 100) < 0;
}

STREAM_SCEN(epoll_deleted_then_clone)
{
	int c, s, st = -1;
	char *stack = malloc(1 << 16);

	ep_of_clone = epoll_create1(EPOLL_CLOEXEC);
	fam_pair(f, &c, &s);
	R("ADD IN", ctl(ep_of_clone, EPOLL_CTL_ADD, c, EPOLLIN, 0x91));
	R("DEL", epoll_ctl(ep_of_clone, EPOLL_CTL_DEL, c, NULL));
	R("send to it", send(s, "x", 1, 0));
	usleep(10000);
	pid_t pid = clone(clone_child, stack + (1 << 16), SIGCHLD, NULL);
	R("child waited", pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	R("ADD IN", ctl(ep_of_clone, EPOLL_CTL_ADD, c, EPOLLIN, 0x91));
	wait_print("the data sent before", ep_of_clone, 2000);
	free(stack);
}

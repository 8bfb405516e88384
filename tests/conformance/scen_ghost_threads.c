/* Deleted registrations and epoll sets reached by more than one number,
 * against threads, spawned programs and descriptor passing: a wait under
 * way while a deleted registration's number is reused, an fd that shares
 * data with a registration later deleted, a spawn whose file actions dup
 * the set, a set's first number closed while a thread waits on a copy,
 * select on a set, waits with little room, a set sent over SCM_RIGHTS,
 * vfork + dup2 + exec.  Under dsock a DEL may leave the kernel's
 * registration in place (src/lib/sock/eghost.c; DSOCK_EPOLL_GHOSTS=0 turns
 * that off) and
 * a copy of a set is an alias of its key (src/lib/sock/ealias.c). */
#include "conf.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>

static int ctl(int ep, int op, int fd, unsigned events, uint64_t data)
{
	struct epoll_event ev = { .events = events, .data.u64 = data };
	return epoll_ctl(ep, op, fd, &ev);
}

static void wait_print(const char *what, int ep, int max, int ms)
{
	struct epoll_event ev[8];
	int n = epoll_wait(ep, ev, max, ms);

	out("  %s: epoll_wait = %d%s", what, n, n < 0 ? ename(errno) : "");
	for (int i = 0; i < n; i++)
		out("    %s data 0x%llx", epollname(ev[i].events), (unsigned long long)ev[i].data.u64);
}

struct waiter {
	int ep, ms, n, err;
	unsigned events;
	uint64_t data;
};

static void *waitfn(void *arg)
{
	struct waiter *w = arg;
	struct epoll_event ev[4];

	errno = 0;
	w->n = epoll_wait(w->ep, ev, 4, w->ms);
	w->err = errno;
	if (w->n > 0) {
		w->events = ev[0].events;
		w->data = ev[0].data.u64;
	}
	return NULL;
}

static void waiter_print(const char *what, struct waiter *w)
{
	out("  %s: epoll_wait = %d %s %s data 0x%llx", what, w->n, w->n < 0 ? ename(w->err) : "",
	    w->n > 0 ? epollname(w->events) : "-", (unsigned long long)w->data);
}

/* 1. A thread waits on the set; the deleted registration's fd is closed
 * and an edge-triggered eventfd is added with the same data (as an event
 * loop keyed by fd number does when the number is reused), then written:
 * the waiter must get the eventfd's event. */
STREAM_SCEN(rv_et_eventfd_takes_ghost_data_while_waiting)
{
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC), e;
	struct waiter w = { .ep = ep, .ms = 1500 };
	uint64_t one = 1;
	pthread_t t;

	fam_pair(f, &c, &s);
	R("ADD", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0x2d1));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	pthread_create(&t, NULL, waitfn, &w);
	msleep(100);
	R("close the deleted fd", close(s));
	R("eventfd", (e = eventfd(0, EFD_NONBLOCK)) >= 0);
	R("ADD the eventfd, same data, edge-triggered", ctl(ep, EPOLL_CTL_ADD, e, EPOLLIN | EPOLLET, 0x2d1));
	R("write the eventfd", write(e, &one, 8));
	pthread_join(t, NULL);
	waiter_print("the waiter", &w);
	wait_print("after", ep, 4, 50);
	close(e);
	close(c);
}

/* 2. An edge-triggered eventfd and a socket share data 0; the socket is
 * deleted, then the eventfd written: one event. */
STREAM_SCEN(rv_untracked_et_shares_data_with_deleted)
{
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC), e = eventfd(0, EFD_NONBLOCK);
	uint64_t one = 1;

	fam_pair(f, &c, &s);
	R("ADD the eventfd ET data 0", ctl(ep, EPOLL_CTL_ADD, e, EPOLLIN | EPOLLET, 0));
	R("ADD the socket data 0", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0));
	R("DEL the socket", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	R("write the eventfd", write(e, &one, 8));
	wait_print("the eventfd", ep, 4, 300);
	wait_print("then", ep, 4, 50);
	close(e);
}

/* 3. posix_spawn with a dup2 file action passes the set to the program:
 * its wait must not hear of the deleted registration. */
STREAM_SCEN(rv_spawn_dup2_action_passes_set)
{
	extern char **environ;
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC), st;
	char b[8];
	char *argv[] = { "conf-scen", "exec-child", "200", "epwait", NULL };
	posix_spawn_file_actions_t fa;
	pid_t pid;

	fam_pair(f, &c, &s);
	R("ADD", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0x3d1));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	R("send", send(c, "data", 4, 0));
	R("wait for it", wait_fd(s, POLLIN, 2000));
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, ep, 200);
	fflush(stdout);
	R("posix_spawn with adddup2(set, 200)", posix_spawn(&pid, self_exe(), &fa, NULL, argv, environ));
	waitpid(pid, &st, 0);
	out("  child exit %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	posix_spawn_file_actions_destroy(&fa);
	R("recv", recv(s, b, sizeof(b), 0));
}

/* 4. A thread waits on a dup of a set; another closes the set's first
 * number (and, new_set, makes a new set, which takes that number); data
 * then comes for a member of the first set: the waiter on the dup reports
 * it.  parked: a writer parked in another set makes dsock's wait look
 * again every 5 ms. */
static void key_closed_while_waiting(const struct fam *f, int parked, int new_set)
{
	int c, s, c2, s2, other = -1, a = epoll_create1(EPOLL_CLOEXEC), a2, a3 = -1;
	struct waiter w = { .ms = 1500 };
	pthread_t t;
	char b[8];

	fam_pair(f, &c2, &s2);
	if (parked) {
		other = epoll_create1(EPOLL_CLOEXEC);
		fam_pair(f, &c, &s);
		R("fill the first connection", fill_full(c) > 0);
		R("ADD the full writer to another set, OUT", ctl(other, EPOLL_CTL_ADD, c, EPOLLOUT, 0x4d0));
		wait_print("the other set", other, 4, 0);
	}
	R("dup the set", (a2 = dup(a)) >= 0);
	R("ADD the second connection to the set", ctl(a, EPOLL_CTL_ADD, s2, EPOLLIN, 0x4d1));
	w.ep = a2;
	pthread_create(&t, NULL, waitfn, &w);
	msleep(100);
	R("close the set's first number", close(a));
	if (new_set)
		R("a new set", (a3 = epoll_create1(EPOLL_CLOEXEC)) >= 0);
	msleep(50);
	R("send on the second connection", send(c2, "x", 1, 0));
	pthread_join(t, NULL);
	waiter_print("the waiter on the dup", &w);
	R("recv", recv(s2, b, sizeof(b), 0));
	close(a2);
	if (a3 >= 0)
		close(a3);
	if (other >= 0)
		close(other);
}

STREAM_SCEN(rv_alias_key_closed_while_waiting) { key_closed_while_waiting(f, 1, 1); }
STREAM_SCEN(rv_alias_key_closed_while_waiting_b) { key_closed_while_waiting(f, 1, 0); }
STREAM_SCEN(rv_alias_key_closed_while_waiting_c) { key_closed_while_waiting(f, 0, 1); }

/* 5. select on a set whose registration was deleted, data waiting. */
STREAM_SCEN(rv_select_on_set_with_deleted)
{
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC);
	struct timeval tv = { 0, 100000 };
	fd_set r;
	char b[8];

	fam_pair(f, &c, &s);
	R("ADD", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0x5d1));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	R("send", send(c, "data", 4, 0));
	R("wait for it", wait_fd(s, POLLIN, 2000));
	FD_ZERO(&r);
	FD_SET(ep, &r);
	R("select on the set", select(ep + 1, &r, NULL, NULL, &tv));
	out("  set readable: %d", FD_ISSET(ep, &r) ? 1 : 0);
	wait_print("epoll_wait", ep, 4, 0);
	R("recv", recv(s, b, sizeof(b), 0));
}

/* 6. A deleted registration's event first in the kernel's list, then two
 * edge-triggered eventfds with the same data; room for two. */
STREAM_SCEN(rv_full_wait_two_same_data)
{
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC), e1 = eventfd(0, EFD_NONBLOCK), e2 = eventfd(0, EFD_NONBLOCK);
	uint64_t one = 1;
	char b[8];

	fam_pair(f, &c, &s);
	R("ADD", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0x6d1));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	R("send", send(c, "data", 4, 0));
	R("wait for it", wait_fd(s, POLLIN, 2000));
	R("ADD eventfd 1 ET", ctl(ep, EPOLL_CTL_ADD, e1, EPOLLIN | EPOLLET, 0x6d5));
	R("ADD eventfd 2 ET", ctl(ep, EPOLL_CTL_ADD, e2, EPOLLIN | EPOLLET, 0x6d5));
	R("write 1", write(e1, &one, 8));
	R("write 2", write(e2, &one, 8));
	wait_print("room for two", ep, 2, 0);
	wait_print("then", ep, 2, 0);
	R("recv", recv(s, b, sizeof(b), 0));
	close(e1);
	close(e2);
}

/* 7. Five connections with data deleted, a sixth with data registered: a
 * wait with room for one event and no timeout reports the sixth. */
STREAM_SCEN(rv_five_deleted_room_for_one)
{
	int c[6], s[6], ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { 0 };
	char b[8];

	for (int i = 0; i < 6; i++) {
		fam_pair(f, &c[i], &s[i]);
		ctl(ep, EPOLL_CTL_ADD, s[i], EPOLLIN, 0x7d0 + i);
	}
	for (int i = 0; i < 6; i++) {
		send(c[i], "x", 1, 0);
		wait_fd(s[i], POLLIN, 2000);
	}
	wait_print("all six", ep, 8, 2000);
	for (int i = 0; i < 5; i++)
		R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, s[i], NULL));
	int n = epoll_wait(ep, &ev, 1, 0);
	out("  room for one, no timeout: epoll_wait = %d data 0x%llx", n, n > 0 ? (unsigned long long)ev.data.u64 : 0ULL);
	for (int i = 0; i < 6; i++)
		recv(s[i], b, sizeof(b), 0);
}

/* 8. The set passed to this same process over SCM_RIGHTS: the received
 * number reaches the set. */
STREAM_SCEN(rv_set_over_scm_rights_same_process)
{
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC), sp[2], ep2 = -1;
	char b[8], cb[CMSG_SPACE(sizeof(int))];

	fam_pair(f, &c, &s);
	R("ADD", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0x8d1));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	R("send", send(c, "data", 4, 0));
	R("wait for it", wait_fd(s, POLLIN, 2000));
	R("socketpair", socketpair(AF_UNIX, SOCK_STREAM, 0, sp));
	struct iovec io = { .iov_base = "x", .iov_len = 1 };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = cb, .msg_controllen = sizeof(cb) };
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);
	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(h), &ep, sizeof(int));
	R("sendmsg the set", sendmsg(sp[0], &m, 0));
	memset(cb, 0, sizeof(cb));
	io.iov_base = b;
	m.msg_controllen = sizeof(cb);
	R("recvmsg it", recvmsg(sp[1], &m, 0));
	if ((h = CMSG_FIRSTHDR(&m)))
		memcpy(&ep2, CMSG_DATA(h), sizeof(int));
	wait_print("the received number", ep2, 4, 100);
	R("recv", recv(s, b, sizeof(b), 0));
}

/* 9. vfork, dup2 of the set to 200 in the child, exec: the program's wait
 * hears nothing. */
STREAM_SCEN(rv_vfork_dup2_exec)
{
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC), st;
	char b[8];

	fam_pair(f, &c, &s);
	R("ADD", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0x9d1));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	R("send", send(c, "data", 4, 0));
	R("wait for it", wait_fd(s, POLLIN, 2000));
	fflush(stdout);
	pid_t pid = vfork();
	if (pid == 0) {
		dup2(ep, 200);
		execl(self_exe(), "conf-scen", "exec-child", "200", "epwait", (char *)NULL);
		_exit(127);
	}
	waitpid(pid, &st, 0);
	R("recv", recv(s, b, sizeof(b), 0));
}

/* 10. A thread waits while the main thread takes a registration out and
 * puts it back, deletes a second one, and sends to the first: the waiter
 * gets it; data for the deleted one afterwards is not reported.  (Under
 * dsock with DSOCK_TEST_GHOST_UNSURE=1 the waiter's events are judged by
 * the readiness of the registration that holds their data.) */
STREAM_SCEN(rv_put_back_while_waiting)
{
	int c, s, c2, s2, ep = epoll_create1(EPOLL_CLOEXEC);
	struct waiter w = { .ep = ep, .ms = 2000 };
	pthread_t t;
	char b[8];

	fam_pair(f, &c, &s);
	fam_pair(f, &c2, &s2);
	R("ADD", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0xad1));
	R("ADD the second", ctl(ep, EPOLL_CTL_ADD, s2, EPOLLIN, 0xad2));
	pthread_create(&t, NULL, waitfn, &w);
	msleep(100);
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	R("ADD again", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0xad1));
	R("DEL the second", epoll_ctl(ep, EPOLL_CTL_DEL, s2, NULL));
	R("send", send(c, "x", 1, 0));
	pthread_join(t, NULL);
	waiter_print("the waiter", &w);
	R("send to the second", send(c2, "y", 1, 0));
	msleep(50);
	wait_print("after", ep, 4, 50);
	R("recv", recv(s, b, sizeof(b), 0));
	R("recv the second", recv(s2, b, sizeof(b), 0));
	wait_print("at the end", ep, 4, 50);
}

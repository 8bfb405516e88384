/* Scenarios: several threads of one process, each asleep in epoll_wait on
 * a set of its own, served by the same peer process.  Under dsock the two
 * connections share one link between the processes, and a wake-up meant for
 * one set must never be taken by the other's thread. */
#include "conf.h"

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUNDS 3000

struct echo_set {
	int fd;
	_Atomic int done;
};

/* An echo server on a set of its own: every byte back, until the peer
 * closes or nothing comes for 3 s. */
static void *echo_on_own_set(void *arg)
{
	struct echo_set *e = arg;
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = e->fd };

	epoll_ctl(ep, EPOLL_CTL_ADD, e->fd, &ev);
	for (;;) {
		char buf[64];
		int n = epoll_wait(ep, &ev, 1, 3000);
		if (n <= 0)
			break;
		ssize_t r = recv(e->fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (r == 0)
			break;
		if (r > 0 && send(e->fd, buf, (size_t)r, 0) != r)
			break;
	}
	close(ep);
	atomic_store(&e->done, 1);
	return NULL;
}

struct pinger {
	int fd, replies, late;
	int how; /* 0 poll, 1 select, 2 epoll_wait on a set of its own */
};

/* 1 if fd is readable within ms (p->how says how the thread waits). */
static int wait_in(const struct pinger *p, int ep, int ms)
{
	if (p->how == 1) {
		fd_set r;
		struct timeval tv = { ms / 1000, ms % 1000 * 1000 };
		FD_ZERO(&r);
		FD_SET(p->fd, &r);
		return select(p->fd + 1, &r, NULL, NULL, &tv) == 1;
	}
	if (p->how == 2) {
		struct epoll_event ev;
		return epoll_wait(ep, &ev, 1, ms) == 1;
	}
	struct pollfd pf = { .fd = p->fd, .events = POLLIN };
	return poll(&pf, 1, ms) == 1;
}

/* Round trips of one byte; a reply that takes more than 3 s is late (a
 * lost wake-up: the kernel answers within microseconds). */
static void *ping(void *arg)
{
	struct pinger *p = arg;
	int ep = -1;

	if (p->how == 2) {
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = p->fd };
		ep = epoll_create1(EPOLL_CLOEXEC);
		epoll_ctl(ep, EPOLL_CTL_ADD, p->fd, &ev);
	}
	for (int i = 0; i < ROUNDS; i++) {
		char b = (char)('a' + i % 26);
		if (send(p->fd, &b, 1, 0) != 1)
			break;
		if (!wait_in(p, ep, 3000)) {
			p->late++;
			if (!wait_in(p, ep, 5000))
				break;
		}
		if (recv(p->fd, &b, 1, 0) != 1)
			break;
		p->replies++;
	}
	if (ep >= 0)
		close(ep);
	return NULL;
}

/* The peer process: n connections to a, pinged at once by a thread each
 * (waiting as hows[i] says); their counts go back through fd res.  Never
 * returns. */
static void pingers(const struct fam *f, const struct sockaddr_storage *a, socklen_t alen, int n, const int *hows,
		    int res)
{
	struct pinger p[n];
	pthread_t tp[n];

	for (int i = 0; i < n; i++) {
		p[i] = (struct pinger){ .fd = fam_socket(f, 0), .how = hows[i] };
		if (connect(p[i].fd, (const struct sockaddr *)a, alen) != 0)
			_exit(2);
	}
	for (int i = 0; i < n; i++)
		pthread_create(&tp[i], NULL, ping, &p[i]);
	for (int i = 0; i < n; i++) {
		pthread_join(tp[i], NULL);
		close(p[i].fd);
	}
	_exit(write(res, p, sizeof(p)) == (ssize_t)sizeof(p) ? 0 : 3);
}

/* Two connections from another process, each served by its own thread
 * asleep on its own set, pinged at once (two threads there).  The servers
 * fall asleep before dsock pairs their connections, then sleep between
 * the round trips. */
STREAM_SCEN(epoll_threads_each_on_own_set)
{
	struct sockaddr_storage a;
	socklen_t alen = sizeof(a);
	int l = fam_server(f, &a, &alen), res[2], st;
	struct echo_set e[2];
	pthread_t ts[2];

	CHECK(pipe(res) == 0);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		close(l);
		pingers(f, &a, alen, 2, (const int[]){ 0, 0 }, res[1]);
	}
	close(res[1]);
	for (int i = 0; i < 2; i++) {
		e[i].fd = accept(l, NULL, NULL);
		atomic_store(&e[i].done, 0);
		pthread_create(&ts[i], NULL, echo_on_own_set, &e[i]);
	}
	struct pinger p[2] = { { 0 } };
	CHECK(read(res[0], p, sizeof(p)) == (ssize_t)sizeof(p));
	waitpid(pid, &st, 0);
	for (int i = 0; i < 2; i++)
		out("connection %d: all %d replies: %s, none late: %s", i, ROUNDS,
		    p[i].replies == ROUNDS ? "yes" : "no", p[i].late == 0 ? "yes" : "no");
	for (int i = 0; i < 2; i++) {
		pthread_join(ts[i], NULL);
		close(e[i].fd);
	}
	close(res[0]);
	close(l);
}

/* Three connections from another process whose threads wait each its own
 * way: poll, select and epoll_wait (a set of its own), pinged at once and
 * served by one thread of ours asleep on one set.  Under dsock the three
 * share one link and the peer's one bell: a wake-up one thread's arming
 * takes must reach the thread it was for. */
STREAM_SCEN(poll_select_epoll_threads_one_peer)
{
	struct sockaddr_storage a;
	socklen_t alen = sizeof(a);
	int l = fam_server(f, &a, &alen), res[2], st, c[3];

	CHECK(pipe(res) == 0);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		close(l);
		pingers(f, &a, alen, 3, (const int[]){ 0, 1, 2 }, res[1]);
	}
	close(res[1]);
	int ep = epoll_create1(EPOLL_CLOEXEC), open = 3;
	for (int i = 0; i < 3; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = c[i] = accept(l, NULL, NULL) };
		epoll_ctl(ep, EPOLL_CTL_ADD, c[i], &ev);
	}
	while (open > 0) {
		struct epoll_event ev[3];
		int n = epoll_wait(ep, ev, 3, 10000);
		if (n <= 0)
			break;
		for (int i = 0; i < n; i++) {
			char buf[64];
			ssize_t r = recv(ev[i].data.fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (r == 0) {
				epoll_ctl(ep, EPOLL_CTL_DEL, ev[i].data.fd, NULL);
				open--;
			} else if (r > 0 && send(ev[i].data.fd, buf, (size_t)r, 0) != r) {
				open = 0;
			}
		}
	}
	struct pinger p[3] = { { 0 } };
	CHECK(read(res[0], p, sizeof(p)) == (ssize_t)sizeof(p));
	waitpid(pid, &st, 0);
	for (int i = 0; i < 3; i++)
		out("connection %d (%s): all %d replies: %s, none late: %s", i, i == 0 ? "poll" : i == 1 ? "select" : "epoll",
		    ROUNDS, p[i].replies == ROUNDS ? "yes" : "no", p[i].late == 0 ? "yes" : "no");
	for (int i = 0; i < 3; i++)
		close(c[i]);
	close(ep);
	close(res[0]);
	close(l);
}

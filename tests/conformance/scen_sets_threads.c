/* Scenarios: several threads of one process, each asleep in epoll_wait on
 * a set of its own, served by the same peer process.  Under dsock the two
 * connections share one link between the processes, and a wake-up meant for
 * one set must never be taken by the other's thread. */
#include "conf.h"

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <sys/epoll.h>
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
};

/* Round trips of one byte; a reply that takes more than 3 s is late (a
 * lost wake-up: the kernel answers within microseconds). */
static void *ping(void *arg)
{
	struct pinger *p = arg;

	for (int i = 0; i < ROUNDS; i++) {
		char b = (char)('a' + i % 26);
		if (send(p->fd, &b, 1, 0) != 1)
			break;
		struct pollfd pf = { .fd = p->fd, .events = POLLIN };
		if (poll(&pf, 1, 3000) != 1) {
			p->late++;
			if (poll(&pf, 1, 5000) != 1)
				break;
		}
		if (recv(p->fd, &b, 1, 0) != 1)
			break;
		p->replies++;
	}
	return NULL;
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
		struct pinger p[2];
		pthread_t tp[2];
		close(l);
		for (int i = 0; i < 2; i++) {
			p[i] = (struct pinger){ .fd = fam_socket(f, 0) };
			if (connect(p[i].fd, (struct sockaddr *)&a, alen) != 0)
				_exit(2);
		}
		for (int i = 0; i < 2; i++)
			pthread_create(&tp[i], NULL, ping, &p[i]);
		for (int i = 0; i < 2; i++) {
			pthread_join(tp[i], NULL);
			close(p[i].fd);
		}
		_exit(write(res[1], p, sizeof(p)) == sizeof(p) ? 0 : 3);
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

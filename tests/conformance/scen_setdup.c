/* An epoll set reached by more than one fd number (dup, dup2, F_DUPFD):
 * registrations made through one number are the set's, waits on any
 * number report them, and the set lives on when the number it was made
 * with is closed.  Under dsock a connection's data may wait in its ring
 * with no wake-up byte on the kernel socket, so the wrapper must know
 * that both numbers name one set. */
#include "conf.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/epoll.h>
#include <unistd.h>

static void wait_one(const char *what, int ep, int ms)
{
	struct epoll_event ev = { 0 };
	int n = epoll_wait(ep, &ev, 1, ms);

	out("  %s: epoll_wait = %d %s data 0x%llx", what, n, n > 0 ? epollname(ev.events) : "-",
	    n > 0 ? (unsigned long long)ev.data.u64 : 0ULL);
}

STREAM_SCEN(epoll_set_dup_numbers)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0x5d1 };
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC), d1, d2 = 900, d3;
	char b[32];

	fam_pair(f, &c, &s);
	R("dup the set", (d1 = dup(ep)) >= 0);
	R("dup2 it", dup2(ep, d2) == d2);
	R("ADD through the dup", epoll_ctl(d1, EPOLL_CTL_ADD, s, &ev));
	for (int i = 0; i < 3; i++) {
		R("send", send(c, "ping", 4, 0));
		wait_one(i == 0 ? "the first number" : i == 1 ? "the dup2" : "the dup", i == 0 ? ep : i == 1 ? d2 : d1,
			 2000);
		R("recv", recv(s, b, sizeof(b), 0));
	}
	R("close the first number", close(ep));
	R("F_DUPFD the dup", (d3 = fcntl(d1, F_DUPFD_CLOEXEC, 0)) >= 0);
	R("close the dup", close(d1));
	R("send", send(c, "pong", 4, 0));
	wait_one("the dup2", d2, 2000);
	wait_one("the F_DUPFD copy", d3, 2000);
	R("recv", recv(s, b, sizeof(b), 0));
	R("DEL through the dup2", epoll_ctl(d2, EPOLL_CTL_DEL, s, NULL));
	R("send", send(c, "more", 4, 0));
	wait_one("the F_DUPFD copy, deleted", d3, 100);
	R("recv", recv(s, b, sizeof(b), 0));
	close(d2);
	close(d3);
}

/* dup is async-signal-safe: a handler that dups a pipe while the thread
 * it interrupted is inside an epoll call of ours (holding the records'
 * locks) must not wait for them (a dup of a file or a pipe takes no lock
 * of ours).  A hang ends the scenario by the harness's alarm. */
static int sig_pipe[2], sig_dups[4096];
static volatile int sig_ndups;

static void dup_on_signal(int sig)
{
	int d = dup(sig_pipe[0]);

	(void)sig;
	if (d >= 0 && sig_ndups < 4096)
		sig_dups[sig_ndups++] = d;
}

STREAM_SCEN(dup_in_signal_handler_beside_epoll)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 1 }, got[4];
	struct sigaction sa = { .sa_handler = dup_on_signal, .sa_flags = SA_RESTART }, old;
	struct itimerval it = { { 0, 200 }, { 0, 200 } }, off = { { 0, 0 }, { 0, 0 } };
	sigset_t m, o;
	int c, s, ep = epoll_create1(0), total = 0;

	fam_pair(f, &c, &s);
	R("pipe", pipe(sig_pipe));
	epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
	sigaction(SIGPROF, &sa, &old);
	setitimer(ITIMER_PROF, &it, NULL);
	sigemptyset(&m);
	sigaddset(&m, SIGPROF);
	/* 40000 calls, and on until a signal came: the timer counts CPU time
	 * at the scheduler's ticks, and a short loop on a crowded machine
	 * may see none */
	for (int i = 0; i < 40000 || (!total && !sig_ndups && i < 4000000); i++) {
		ev.events = (i & 1) ? EPOLLIN : EPOLLIN | EPOLLOUT;
		epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev);
		epoll_wait(ep, got, 4, 0);
		if (sig_ndups > 1000) {
			sigprocmask(SIG_BLOCK, &m, &o);
			for (int j = 0; j < sig_ndups; j++)
				close(sig_dups[j]);
			total += sig_ndups;
			sig_ndups = 0;
			sigprocmask(SIG_SETMASK, &o, NULL);
		}
	}
	setitimer(ITIMER_PROF, &off, NULL);
	sigaction(SIGPROF, &old, NULL);
	out("40000 epoll calls beside dups in a handler: done (dups made: %s)", total + sig_ndups > 0 ? "some" : "none");
}

/* Urgent data (TCP only): send(MSG_OOB), the mark (SIOCATMARK), POLLPRI,
 * select's exceptfds, EPOLLPRI, recv(MSG_OOB) and its errors,
 * MSG_OOB|MSG_PEEK, SO_OOBINLINE, SIGURG.  The kernel keeps one urgent
 * byte out of the stream (unless SO_OOBINLINE): a normal read stops at
 * the mark and never returns that byte; a later urgent byte takes over
 * and the earlier one becomes normal data. */
#include "conf.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <unistd.h>

static void show_atmark(const char *label, int fd)
{
	int at = -1;

	if (ioctl(fd, SIOCATMARK, &at) < 0)
		out("%s: -1 %s", label, ename(errno));
	else
		out("%s: %d", label, at);
}

/* Waits until the urgent byte has arrived (POLLPRI), then a little for
 * what the sender wrote after it (one call each, sent already). */
static void wait_urgent(int fd)
{
	if (!(wait_fd(fd, POLLPRI, 2000) & POLLPRI))
		out("no POLLPRI within 2 s");
	msleep(20);
}

static void show_recv(const char *label, int fd, size_t n, int flags)
{
	char b[64] = { 0 };
	ssize_t r;

	errno = 0;
	r = recv(fd, b, n, flags);
	if (r < 0)
		out("%s = -1 %s", label, ename(errno));
	else
		out("%s = %zd \"%.*s\"", label, r, (int)r, b);
}

static void show_poll(const char *label, int fd)
{
	out("%s: %s", label, pollname((unsigned)wait_fd(fd, POLLIN | POLLPRI | POLLOUT | POLLRDHUP, 0)));
}

STREAM_SCEN(urgent_readiness)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLPRI, .data.u64 = 1 }, got[2];
	int c, s, ep = epoll_create1(0), ep_pri = epoll_create1(0);
	fd_set r, x;
	struct timeval tv;

	if (!tcp_only(f))
		return;
	fam_pair(f, &c, &s);
	epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
	ev.events = EPOLLPRI;
	epoll_ctl(ep_pri, EPOLL_CTL_ADD, s, &ev);
	show_poll("poll idle", s);
	R("send abc", send(c, "abc", 3, 0));
	R("send ! MSG_OOB", send(c, "!", 1, MSG_OOB));
	wait_urgent(s);
	show_poll("poll", s);
	FD_ZERO(&r);
	FD_ZERO(&x);
	FD_SET(s, &r);
	FD_SET(s, &x);
	tv = (struct timeval){ 0, 0 };
	R("select read+except", select(s + 1, &r, NULL, &x, &tv));
	out("readable %d, exception %d", FD_ISSET(s, &r), FD_ISSET(s, &x));
	R("epoll_wait IN|PRI", epoll_wait(ep, got, 2, 1000));
	out("events %s", epollname(got[0].events));
	R("epoll_wait PRI only", epoll_wait(ep_pri, got, 2, 1000));
	out("events %s", epollname(got[0].events));
	show_recv("recv 64", s, 64, 0);
	show_poll("poll at the mark", s);
	show_recv("recv MSG_OOB", s, 1, MSG_OOB);
	show_poll("poll after the urgent byte", s);
	R("epoll_wait PRI only", epoll_wait(ep_pri, got, 2, 50));
	FD_ZERO(&x);
	FD_SET(s, &x);
	tv = (struct timeval){ 0, 0 };
	R("select except", select(s + 1, NULL, NULL, &x, &tv));
	R("send xyz", send(c, "xyz", 3, 0));
	wait_fd(s, POLLIN, 2000);
	show_recv("recv 64", s, 64, 0);
	show_poll("poll drained", s);
}

STREAM_SCEN(urgent_atmark_and_reads)
{
	int c, s;

	if (!tcp_only(f))
		return;
	fam_pair(f, &c, &s);
	show_atmark("SIOCATMARK, nothing sent", s);
	R("send abcd", send(c, "abcd", 4, 0));
	R("send ! MSG_OOB", send(c, "!", 1, MSG_OOB));
	R("send xyz", send(c, "xyz", 3, 0));
	wait_urgent(s);
	show_atmark("SIOCATMARK before reading", s);
	show_recv("recv 2", s, 2, 0);
	show_atmark("SIOCATMARK after 2", s);
	show_recv("recv 64 (stops at the mark)", s, 64, 0);
	show_atmark("SIOCATMARK at the mark", s);
	show_recv("recv MSG_OOB", s, 1, MSG_OOB);
	show_atmark("SIOCATMARK after the urgent byte", s);
	show_recv("recv MSG_OOB again", s, 1, MSG_OOB);
	show_recv("recv 64", s, 64, 0);
	show_atmark("SIOCATMARK past the mark", s);
	show_recv("recv MSG_OOB, none left", s, 1, MSG_OOB);
	show_recv("recv dontwait, empty", s, 64, MSG_DONTWAIT);
}

/* The urgent byte read before the normal data in front of it. */
STREAM_SCEN(urgent_read_first)
{
	int c, s;

	if (!tcp_only(f))
		return;
	fam_pair(f, &c, &s);
	R("send hello", send(c, "hello", 5, 0));
	R("send ! MSG_OOB", send(c, "!", 1, MSG_OOB));
	wait_urgent(s);
	show_recv("recv MSG_OOB first", s, 1, MSG_OOB);
	show_atmark("SIOCATMARK", s);
	show_recv("recv 64", s, 64, 0);
	show_atmark("SIOCATMARK", s);
	show_recv("recv dontwait", s, 64, MSG_DONTWAIT);
	R("send more", send(c, "more", 4, 0));
	wait_fd(s, POLLIN, 2000);
	show_recv("recv 64", s, 64, 0);
}

STREAM_SCEN(urgent_none_einval)
{
	int c, s;

	if (!tcp_only(f))
		return;
	fam_pair(f, &c, &s);
	show_recv("recv MSG_OOB, nothing at all", s, 1, MSG_OOB);
	show_recv("recv MSG_OOB|MSG_DONTWAIT", s, 1, MSG_OOB | MSG_DONTWAIT);
	R("send abc", send(c, "abc", 3, 0));
	wait_fd(s, POLLIN, 2000);
	show_recv("recv MSG_OOB, normal data only", s, 1, MSG_OOB);
	show_recv("recv MSG_OOB|MSG_PEEK", s, 1, MSG_OOB | MSG_PEEK);
	show_atmark("SIOCATMARK", s);
	show_poll("poll", s);
	show_recv("recv 64", s, 64, 0);
}

STREAM_SCEN(urgent_peek)
{
	int c, s;

	if (!tcp_only(f))
		return;
	fam_pair(f, &c, &s);
	R("send ab", send(c, "ab", 2, 0));
	R("send ! MSG_OOB", send(c, "!", 1, MSG_OOB));
	wait_urgent(s);
	show_recv("recv MSG_OOB|MSG_PEEK", s, 1, MSG_OOB | MSG_PEEK);
	show_recv("recv MSG_OOB|MSG_PEEK again", s, 1, MSG_OOB | MSG_PEEK);
	show_recv("recv MSG_PEEK 64", s, 64, MSG_PEEK);
	show_poll("poll", s);
	show_recv("recv MSG_OOB 0 bytes", s, 0, MSG_OOB);
	show_recv("recv MSG_OOB", s, 1, MSG_OOB);
	show_recv("recv MSG_OOB|MSG_PEEK after", s, 1, MSG_OOB | MSG_PEEK);
	show_recv("recv 64", s, 64, 0);
}

STREAM_SCEN(urgent_oobinline)
{
	int c, s, one = 1, v = -1;
	socklen_t vl = sizeof(v);

	if (!tcp_only(f))
		return;
	fam_pair(f, &c, &s);
	R("SO_OOBINLINE", setsockopt(s, SOL_SOCKET, SO_OOBINLINE, &one, sizeof(one)));
	R("SO_OOBINLINE get", getsockopt(s, SOL_SOCKET, SO_OOBINLINE, &v, &vl));
	out("oobinline %d", v);
	R("send abc", send(c, "abc", 3, 0));
	R("send ! MSG_OOB", send(c, "!", 1, MSG_OOB));
	R("send xyz", send(c, "xyz", 3, 0));
	wait_urgent(s);
	show_poll("poll", s);
	show_atmark("SIOCATMARK", s);
	show_recv("recv MSG_OOB", s, 1, MSG_OOB);
	show_recv("recv 64", s, 64, 0);
	show_atmark("SIOCATMARK at the mark", s);
	show_recv("recv 64", s, 64, 0);
	show_atmark("SIOCATMARK", s);
	show_poll("poll drained", s);
}

/* Two urgent bytes in a row: the second is the urgent one, the first
 * joins the normal data. */
STREAM_SCEN(urgent_two_in_a_row)
{
	int c, s;

	if (!tcp_only(f))
		return;
	fam_pair(f, &c, &s);
	R("send abc", send(c, "abc", 3, 0));
	R("send A MSG_OOB", send(c, "A", 1, MSG_OOB));
	R("send B MSG_OOB", send(c, "B", 1, MSG_OOB));
	R("send xyz", send(c, "xyz", 3, 0));
	wait_urgent(s);
	msleep(20);
	show_atmark("SIOCATMARK", s);
	show_recv("recv 64", s, 64, 0);
	show_atmark("SIOCATMARK", s);
	show_recv("recv MSG_OOB", s, 1, MSG_OOB);
	show_recv("recv 64", s, 64, 0);
	show_recv("recv MSG_OOB again", s, 1, MSG_OOB);
}

static volatile sig_atomic_t got_urg;
static void on_urg(int sig)
{
	got_urg++;
}

/* F_SETOWN: the owner gets SIGURG when urgent data arrives. */
STREAM_SCEN(urgent_sigurg)
{
	int c, s;

	if (!tcp_only(f))
		return;
	signal(SIGURG, on_urg);
	fam_pair(f, &c, &s);
	R("F_SETOWN", fcntl(s, F_SETOWN, getpid()));
	out("owner is us: %s", fcntl(s, F_GETOWN) == getpid() ? "yes" : "no");
	R("send abc", send(c, "abc", 3, 0));
	wait_fd(s, POLLIN, 2000);
	msleep(20);
	out("SIGURG after normal data: %d", (int)got_urg);
	R("send ! MSG_OOB", send(c, "!", 1, MSG_OOB));
	wait_urgent(s);
	out("SIGURG after urgent data: %s", got_urg > 0 ? "yes" : "no");
	show_recv("recv MSG_OOB", s, 1, MSG_OOB);
	show_recv("recv 64", s, 64, 0);
}

/* Urgent data on a connection that has carried a lot both ways. */
STREAM_SCEN(urgent_after_bulk)
{
	const size_t n = 1 << 20;
	char *a = malloc(n), *b = malloc(n);
	int c, s;

	if (!tcp_only(f))
		return;
	fam_pair(f, &c, &s);
	fill(a, n, 21);
	for (int round = 0; round < 4; round++) {
		int from = round & 1 ? s : c, to = round & 1 ? c : s;
		/* 1 MiB each way, a piece at a time so that neither side blocks */
		long ok = 1;
		for (size_t off = 0; off < n && ok; off += 65536) {
			ok = write_all(from, a + off, 65536) == 65536 && read_all(to, b + off, 65536) == 65536;
		}
		out("round %d: 1 MiB %s, same bytes: %s", round, round & 1 ? "s->c" : "c->s",
		    ok && !memcmp(a, b, n) ? "yes" : "no");
	}
	R("send tail", send(c, "tail", 4, 0));
	R("send ! MSG_OOB", send(c, "!", 1, MSG_OOB));
	wait_urgent(s);
	show_atmark("SIOCATMARK", s);
	show_recv("recv 64", s, 64, 0);
	show_atmark("SIOCATMARK", s);
	show_recv("recv MSG_OOB", s, 1, MSG_OOB);
	R("send back", send(s, "back", 4, 0));
	show_recv("peer recv", c, 4, MSG_WAITALL);
	free(a);
	free(b);
}

/* Connection set-up and tear-down: connect, accept, shutdown, close,
 * resets, SIGPIPE, timeouts, socket options and names. */
#include "conf.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

STREAM_NOCONN_SCEN(connect_refused)
{
	struct sockaddr_storage a;
	socklen_t al;
	int c = fam_socket(f, 0);

	fam_dead_addr(f, &a, &al);
	R("connect", connect(c, (struct sockaddr *)&a, al));
	R("connect again", connect(c, (struct sockaddr *)&a, al));
}

STREAM_SCEN(connect_nonblocking)
{
	struct sockaddr_storage a;
	socklen_t al, el = sizeof(int);
	int l = fam_server(f, &a, &al), c = fam_socket(f, SOCK_NONBLOCK), s, err = -1, r;
	char b[8];

	r = connect(c, (struct sockaddr *)&a, al);
	/* 0 or EINPROGRESS are both the kernel's right to choose */
	out("connect started: %s", r == 0 || errno == EINPROGRESS ? "yes" : ename(errno));
	out("writable: %s", wait_fd(c, POLLOUT, 2000) & POLLOUT ? "yes" : "no");
	R("SO_ERROR", getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &el));
	out("err = %s", err ? ename(err) : "0");
	R("connect again", connect(c, (struct sockaddr *)&a, al));
	s = accept(l, NULL, NULL);
	fam_warm(f, c, s);
	R("send", send(c, "ping", 4, 0));
	wait_fd(s, POLLIN, 2000);
	R("recv", recv(s, b, 8, 0));
}

STREAM_NOCONN_SCEN(connect_nonblocking_refused)
{
	struct sockaddr_storage a;
	socklen_t al, el = sizeof(int);
	int c = fam_socket(f, SOCK_NONBLOCK), err = 0, r;

	fam_dead_addr(f, &a, &al);
	r = connect(c, (struct sockaddr *)&a, al);
	if (r < 0 && errno == EINPROGRESS) {
		wait_fd(c, POLLOUT, 2000);
		getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &el);
	} else {
		err = r < 0 ? errno : 0;
	}
	out("refused: %s", ename(err));
	err = -1;
	getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &el);
	out("SO_ERROR after read: %d", err);
}

STREAM_SCEN(connect_when_connected)
{
	struct sockaddr_storage a;
	socklen_t al = sizeof(a);
	int c, s;

	fam_pair(f, &c, &s);
	getpeername(c, (struct sockaddr *)&a, &al);
	R("connect", connect(c, (struct sockaddr *)&a, al));
}

STREAM_NOCONN_SCEN(accept_nonblocking_empty)
{
	struct sockaddr_storage a;
	socklen_t al;
	int l = fam_server(f, &a, &al);

	fcntl(l, F_SETFL, O_NONBLOCK);
	R("accept", accept(l, NULL, NULL));
	R("accept4", accept4(l, NULL, NULL, SOCK_CLOEXEC));
	out("listener readable: %s", pollname((unsigned)wait_fd(l, POLLIN, 0)));
}

STREAM_SCEN(accept4_flags)
{
	struct sockaddr_storage a, pa;
	socklen_t al, pl = sizeof(pa);
	int l = fam_server(f, &a, &al), c = fam_socket(f, 0), s;

	fcntl(l, F_SETFL, O_NONBLOCK);
	connect(c, (struct sockaddr *)&a, al);
	wait_fd(l, POLLIN, 2000);
	s = accept4(l, (struct sockaddr *)&pa, &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);
	rec("accept4 nonblock|cloexec", s >= 0, errno);
	out("addr family %d", pa.ss_family);
	fam_warm(f, c, s);
	out("warm accept4 O_NONBLOCK: %s", fcntl(s, F_GETFL) & O_NONBLOCK ? "yes" : "no");
	c = fam_socket(f, 0);
	connect(c, (struct sockaddr *)&a, al);
	wait_fd(l, POLLIN, 2000);
	s = accept(l, NULL, NULL);
	fam_warm(f, c, s);
	out("plain accept inherits listener O_NONBLOCK: %s", fcntl(s, F_GETFL) & O_NONBLOCK ? "yes" : "no");
	out("plain accept FD_CLOEXEC: %s", fcntl(s, F_GETFD) & FD_CLOEXEC ? "yes" : "no");
	c = fam_socket(f, 0);
	connect(c, (struct sockaddr *)&a, al);
	wait_fd(l, POLLIN, 2000);
	s = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	fam_warm(f, c, s);
	out("accept4 O_NONBLOCK: %s", fcntl(s, F_GETFL) & O_NONBLOCK ? "yes" : "no");
	out("accept4 FD_CLOEXEC: %s", fcntl(s, F_GETFD) & FD_CLOEXEC ? "yes" : "no");
	R("accept4 bad flags", accept4(l, NULL, NULL, 0x40000000));
}

STREAM_SCEN(backlog_then_accept)
{
	struct sockaddr_storage a;
	socklen_t al;
	int l = fam_server(f, &a, &al), c[3];

	for (int i = 0; i < 3; i++) {
		c[i] = fam_socket(f, 0);
		R("connect", connect(c[i], (struct sockaddr *)&a, al));
	}
	for (int i = 0; i < 3; i++) {
		int s = accept(l, NULL, NULL);
		out("accepted: %s", s >= 0 ? "yes" : ename(errno));
		fam_warm(f, c[i], s);
		R("send", send(s, "x", 1, 0));
	}
	for (int i = 0; i < 3; i++) {
		char b;
		wait_fd(c[i], POLLIN, 2000);
		R("recv", recv(c[i], &b, 1, 0));
	}
}

STREAM_SCEN(shutdown_write)
{
	char b[8];
	int c, s;

	fam_pair(f, &c, &s);
	R("send", send(c, "abc", 3, 0));
	R("shutdown WR", shutdown(c, SHUT_WR));
	R("recv data", recv(s, b, 8, MSG_WAITALL));
	R("recv eof", recv(s, b, 8, 0));
	R("recv eof again", recv(s, b, 8, 0));
	out("peer poll: %s", pollname((unsigned)wait_fd(s, POLLIN | POLLOUT | POLLRDHUP, 1000)));
	R("send after SHUT_WR", send(c, "x", 1, MSG_NOSIGNAL));
	R("reverse send", send(s, "back", 4, 0));
	R("reverse recv", recv(c, b, 4, MSG_WAITALL));
}

STREAM_SCEN(shutdown_read)
{
	char b[8];
	int c, s;

	fam_pair(f, &c, &s);
	R("shutdown RD", shutdown(s, SHUT_RD));
	R("recv", recv(s, b, 8, 0));
	out("poll: %s", pollname((unsigned)wait_fd(s, POLLIN | POLLOUT | POLLRDHUP, 1000)));
	R("send still works", send(s, "ok", 2, 0));
	R("peer recv", recv(c, b, 2, MSG_WAITALL));
}

STREAM_SCEN(shutdown_both_and_errors)
{
	char b[8];
	int c, s, u = fam_socket(f, 0);

	fam_pair(f, &c, &s);
	R("shutdown RDWR", shutdown(c, SHUT_RDWR));
	out("local poll: %s", pollname((unsigned)wait_fd(c, POLLIN | POLLOUT | POLLRDHUP, 1000)));
	out("peer poll: %s", pollname((unsigned)wait_fd(s, POLLIN | POLLRDHUP, 1000)));
	R("peer recv", recv(s, b, 8, 0));
	R("shutdown again", shutdown(c, SHUT_RDWR));
	R("shutdown bad how", shutdown(c, 7));
	R("shutdown unconnected", shutdown(u, SHUT_RDWR));
	R("shutdown bad fd", shutdown(9999, SHUT_RDWR));
}

STREAM_SCEN(peer_close_eof)
{
	char b[8];
	int c, s;

	fam_pair(f, &c, &s);
	send(c, "bye", 3, 0);
	R("close", close(c));
	R("recv data", recv(s, b, 8, MSG_WAITALL));
	R("recv eof", recv(s, b, 8, 0));
	out("poll: %s", pollname((unsigned)wait_fd(s, POLLIN | POLLRDHUP, 1000)));
}

STREAM_SCEN(close_with_unread_data)
{
	char b[8];
	int c, s;

	fam_pair(f, &c, &s);
	R("send to c", send(s, "unread", 6, 0));
	wait_fd(c, POLLIN, 2000);
	R("close c unread", close(c));
	out("peer poll: %s", pollname((unsigned)wait_fd(s, POLLIN | POLLRDHUP, 1000)));
	R("peer recv", recv(s, b, 8, 0));
	R("peer recv again", recv(s, b, 8, 0));
}

STREAM_SCEN(linger_zero_reset)
{
	struct linger lg = { 1, 0 };
	char b[8];
	int c, s;

	fam_pair(f, &c, &s);
	R("SO_LINGER", setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)));
	R("close", close(c));
	out("peer poll: %s", pollname((unsigned)wait_fd(s, POLLIN | POLLRDHUP, 1000)));
	R("peer recv", recv(s, b, 8, 0));
}

static volatile sig_atomic_t sigpipes;
static void on_sigpipe(int sig)
{
	sigpipes++;
}

/* Writes until EPIPE (the first writes after a FIN may still succeed). */
static void write_until_epipe(int fd, int flags)
{
	for (int i = 0; i < 20; i++) {
		ssize_t r = send(fd, "x", 1, flags);
		if (r < 0) {
			out("send failed: %s", ename(errno));
			return;
		}
		msleep(5);
	}
	out("send never failed");
}

STREAM_SCEN(sigpipe_and_epipe)
{
	int c, s;

	signal(SIGPIPE, on_sigpipe);
	fam_pair(f, &c, &s);
	close(s);
	write_until_epipe(c, 0);
	out("SIGPIPE count: %d", (int)sigpipes);
	R("write again", write(c, "x", 1));
	out("SIGPIPE count: %d", (int)sigpipes);
}

STREAM_SCEN(msg_nosignal)
{
	int c, s;

	signal(SIGPIPE, on_sigpipe);
	fam_pair(f, &c, &s);
	close(s);
	write_until_epipe(c, MSG_NOSIGNAL);
	out("SIGPIPE count: %d", (int)sigpipes);
}

STREAM_SCEN(sigpipe_ignored)
{
	int c, s;

	signal(SIGPIPE, SIG_IGN);
	fam_pair(f, &c, &s);
	close(s);
	write_until_epipe(c, 0);
	out("still alive: yes");
}

STREAM_SCEN(rcvtimeo)
{
	struct timeval tv = { 0, 50000 }, got;
	socklen_t gl = sizeof(got);
	struct timespec t0;
	char b[4];
	int c, s;

	fam_pair(f, &c, &s);
	R("SO_RCVTIMEO", setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	getsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &got, &gl);
	out("read back: %ld.%06ld", (long)got.tv_sec, (long)got.tv_usec);
	now(&t0);
	R("recv", recv(s, b, 4, 0));
	out("waited >= 40ms: %s", ms_since(&t0) >= 40 ? "yes" : "no");
	now(&t0);
	R("read", read(s, b, 4));
	out("waited >= 40ms: %s", ms_since(&t0) >= 40 ? "yes" : "no");
	tv.tv_usec = -1;
	R("SO_RCVTIMEO bad", setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
}

STREAM_SCEN(sndtimeo)
{
	struct timeval tv = { 0, 50000 };
	static char big[1 << 20];
	struct timespec t0;
	ssize_t r;
	int c, s;

	fam_pair(f, &c, &s);
	/* full for good: ACKs that arrive after a first EAGAIN (later across
	 * a bridge or a NAT than on loopback) would let the kernel copy part
	 * of the send */
	fill_full(c);
	R("SO_SNDTIMEO", setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)));
	now(&t0);
	r = send(c, big, sizeof(big), 0);
	out("send timed out: %s", r < 0 && errno == EAGAIN ? "yes (EAGAIN)" : r > 0 ? "yes (partial)" : ename(errno));
	out("waited >= 40ms: %s", ms_since(&t0) >= 40 ? "yes" : "no");
}

STREAM_SCEN(socket_options)
{
	int c, s, v = -1, one = 1;
	socklen_t vl = sizeof(v);

	fam_pair(f, &c, &s);
	R("SO_TYPE", getsockopt(c, SOL_SOCKET, SO_TYPE, &v, &vl));
	out("type %d", v);
	R("SO_DOMAIN", getsockopt(c, SOL_SOCKET, SO_DOMAIN, &v, &vl));
	out("domain %d", v);
	R("SO_PROTOCOL", getsockopt(c, SOL_SOCKET, SO_PROTOCOL, &v, &vl));
	out("protocol %d", v);
	R("SO_ACCEPTCONN", getsockopt(c, SOL_SOCKET, SO_ACCEPTCONN, &v, &vl));
	out("acceptconn %d", v);
	R("SO_ERROR", getsockopt(c, SOL_SOCKET, SO_ERROR, &v, &vl));
	out("error %d", v);
	R("TCP_NODELAY set", setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)));
	v = -1;
	R("TCP_NODELAY get", getsockopt(c, IPPROTO_TCP, TCP_NODELAY, &v, &vl));
	out("nodelay %d", v);
	v = 65536;
	R("SO_RCVBUF set", setsockopt(c, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)));
	v = -1;
	R("SO_RCVBUF get", getsockopt(c, SOL_SOCKET, SO_RCVBUF, &v, &vl));
	out("rcvbuf %d", v);
	R("SO_KEEPALIVE set", setsockopt(c, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)));
	R("bad level", getsockopt(c, 9999, 1, &v, &vl));
	vl = 1;
	R("short optlen", getsockopt(c, SOL_SOCKET, SO_TYPE, &v, &vl));
	out("optlen now %u", vl);
}

STREAM_SCEN(names)
{
	struct sockaddr_storage cl, cp, sl, sp;
	socklen_t cll = sizeof(cl), cpl = sizeof(cp), sll = sizeof(sl), spl = sizeof(sp), tiny = 2;
	int c, s, u = fam_socket(f, 0);

	fam_pair(f, &c, &s);
	R("getsockname c", getsockname(c, (struct sockaddr *)&cl, &cll));
	R("getpeername c", getpeername(c, (struct sockaddr *)&cp, &cpl));
	R("getsockname s", getsockname(s, (struct sockaddr *)&sl, &sll));
	R("getpeername s", getpeername(s, (struct sockaddr *)&sp, &spl));
	out("families %d %d, peer(c) == name(s): %s, peer(s) == name(c): %s", cl.ss_family, cp.ss_family,
	    cpl == sll && !memcmp(&cp, &sl, cpl) ? "yes" : "no",
	    spl == cll && !memcmp(&sp, &cl, spl) ? "yes" : "no");
	R("getpeername unconnected", getpeername(u, (struct sockaddr *)&cp, &cpl));
	R("getsockname tiny buffer", getsockname(c, (struct sockaddr *)&cl, &tiny));
	out("needed length %u", tiny);
	R("getsockname bad fd", getsockname(9999, (struct sockaddr *)&cl, &cll));
}

STREAM_NOCONN_SCEN(io_on_unconnected)
{
	int u = fam_socket(f, 0);
	char b[4];

	signal(SIGPIPE, SIG_IGN);
	R("recv", recv(u, b, 4, MSG_DONTWAIT));
	R("send", send(u, "x", 1, MSG_NOSIGNAL));
	R("read", read(u, b, 4));
	R("write", write(u, "x", 1));
	out("poll: %s", pollname((unsigned)wait_fd(u, POLLIN | POLLOUT, 0)));
}

STREAM_SCEN(listen_and_bind_errors)
{
	struct sockaddr_storage a;
	socklen_t al;
	int l = fam_server(f, &a, &al), x = fam_socket(f, 0), c, s;

	R("bind in use", bind(x, (struct sockaddr *)&a, al));
	R("bind again", bind(l, (struct sockaddr *)&a, al));
	R("listen again", listen(l, 5));
	R("accept on unlistened", accept(x, NULL, NULL));
	fam_pair(f, &c, &s);
	R("listen on connected", listen(c, 5));
	R("accept on connected", accept(c, NULL, NULL));
}

static int accept_fd;
static void *blocked_accept(void *arg)
{
	return (void *)(long)accept(accept_fd, NULL, NULL);
}

STREAM_SCEN(thread_blocked_in_accept)
{
	struct sockaddr_storage a;
	socklen_t al;
	pthread_t t;
	void *r;
	int c;

	accept_fd = fam_server(f, &a, &al);
	pthread_create(&t, NULL, blocked_accept, NULL);
	msleep(30);
	c = fam_socket(f, 0);
	R("connect", connect(c, (struct sockaddr *)&a, al));
	pthread_join(t, &r);
	out("thread accepted: %s", (long)r >= 0 ? "yes" : "no");
	fam_warm(f, c, (int)(long)r);
	R("send", send(c, "x", 1, 0));
	R("recv", recv((int)(long)r, &al, 1, 0));
}

/* A connection from the same client address and port as one that was
 * reset a moment before (a reset leaves no TIME_WAIT: the addresses are
 * free at once).  The old server end was offered to the daemon for the
 * fast path and still waits for its mate when the new connection offers
 * with the same addresses: it must not be taken for the new client's
 * other end.  The old end's sends then fail as the kernel's do, and the
 * new client reads only its own server's bytes. */
static int client_from(int port, const struct sockaddr_in *to)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(connect(fd, (const struct sockaddr *)to, sizeof(*to)) == 0);
	return fd;
}

SCEN(reused_addresses_after_reset)
{
	struct sockaddr_in l = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) }, p = l;
	socklen_t ll = sizeof(l), pl = sizeof(p);
	struct linger lg = { 1, 0 };
	char b[64];
	int lfd = socket(AF_INET, SOCK_STREAM, 0), t = socket(AF_INET, SOCK_STREAM, 0);

	CHECK(bind(lfd, (struct sockaddr *)&l, sizeof(l)) == 0 && listen(lfd, 8) == 0);
	CHECK(getsockname(lfd, (struct sockaddr *)&l, &ll) == 0);
	CHECK(bind(t, (struct sockaddr *)&p, sizeof(p)) == 0 && getsockname(t, (struct sockaddr *)&p, &pl) == 0);
	close(t); /* a free port for both clients */
	int c1 = client_from(ntohs(p.sin_port), &l), s1 = accept(lfd, NULL, NULL);
	for (int i = 0; i < 6; i++) /* s1 offers; c1 never does */
		R("old server sends", send(s1, "x", 1, MSG_NOSIGNAL));
	msleep(100);
	R("old client SO_LINGER {1,0}", setsockopt(c1, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)));
	R("old client close (reset)", close(c1));
	msleep(100);
	int c2 = client_from(ntohs(p.sin_port), &l), s2 = accept(lfd, NULL, NULL);
	for (int i = 0; i < 6; i++) /* both new ends offer */
		R("new client sends", send(c2, "a", 1, MSG_NOSIGNAL));
	R("new server reads", read_all(s2, b, 6));
	msleep(200);
	for (int i = 0; i < 3; i++)
		R("old server sends after the reset", send(s1, "EVIL", 4, MSG_NOSIGNAL));
	R("new server sends", send(s2, "good!!", 6, MSG_NOSIGNAL));
	R("new client reads", read_all(c2, b, 6));
	out("new client read: %.6s", b);
	out("new client poll: %s", pollname((unsigned)wait_fd(c2, POLLIN, 200)));
	R("new client reads again", recv(c2, b, sizeof(b), MSG_DONTWAIT));
	close(s1);
	close(c2);
	close(s2);
	close(lfd);
}

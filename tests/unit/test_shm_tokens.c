/* Wake-up token bookkeeping on one fast-path connection (both ends in this
 * process, tests/unit/shm_pair.h).
 *
 * A token flag can outlive its byte: a consumer clears the flag, then
 * drains; a producer that sets the flag again and sends its byte in
 * between has its byte taken by that drain, and the flag stays set with
 * nothing behind it.  A later partial read must not take that flag as a
 * token backing the data left in the ring, or the data is invisible to
 * every poller and the peer, having sent its last byte, waits forever for
 * an answer (FIONREAD counts the data, poll never reports it).  Here the
 * state is made directly: the test takes the byte from the kernel socket
 * itself, as such a drain does, and then reads part of the data.
 *
 * Then the FIN behind tokens that an edge-triggered epoll must still
 * report, a peer that switches to the ring while we receive, and the
 * wake-ups of writers (below). */
#include "unit/unit.h"
#include "unit/shm_pair.h"
#include "lib/base/real.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <time.h>

/* Takes the one token byte from fd's kernel socket, as a drain would:
 * 1 if it took one (waits up to 1 s for it to arrive). */
static int steal_token(int fd)
{
	for (int i = 0; i < 1000; i++) {
		char t;
		if (dsock_real.recv(fd, &t, 1, MSG_DONTWAIT) == 1)
			return 1;
		usleep(1000);
	}
	return 0;
}

static void stale_flag_after_partial_read(int lfd, struct sockaddr_in *la)
{
	struct conn k;
	unsigned char out[100], in[100];
	int inq = -1;

	make_conn(&k, lfd, la);
	for (int i = 0; i < 100; i++)
		out[i] = (unsigned char)(i * 7 + 1);
	ASSERT_EQ(send(k.a, out, sizeof(out), 0), 100);
	/* a -> b is ring 0; its consumer was not polling, so a token went */
	ASSERT_EQ(__atomic_load_n(&k.h->ring[0].token, __ATOMIC_ACQUIRE), 1);
	ASSERT_EQ(steal_token(k.b), 1);
	ASSERT_EQ(k.h->ring[0].token, 1); /* the flag outlived its byte */

	ASSERT_EQ(recv(k.b, in, 10, 0), 10);
	ASSERT_EQ(ioctl(k.b, FIONREAD, &inq), 0);
	ASSERT_EQ(inq, 90);
	/* 90 bytes unread: readable, as the kernel would say, to each poller */
	struct pollfd p = { k.b, POLLIN, 0 };
	ASSERT_EQ(poll(&p, 1, 0), 1);
	ASSERT_EQ(p.revents, POLLIN);
	fd_set rd;
	struct timeval tv = { 0, 0 };
	FD_ZERO(&rd);
	FD_SET(k.b, &rd);
	ASSERT_EQ(select(k.b + 1, &rd, NULL, NULL, &tv), 1);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0xfeed }, got[2];
	ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, k.b, &ev), 0);
	ASSERT_EQ(epoll_wait(ep, got, 2, 0), 1);
	ASSERT_EQ(got[0].data.u64, 0xfeed);
	close(ep);
	/* and a blocking poll does not sleep through it */
	p.revents = 0;
	ASSERT_EQ(poll(&p, 1, 2000), 1);

	ASSERT_EQ(recv(k.b, in + 10, 90, MSG_DONTWAIT), 90);
	ASSERT_EQ(memcmp(in, out, sizeof(out)), 0);
	/* drained dry: no longer readable */
	p.revents = 0;
	ASSERT_EQ(poll(&p, 1, 0), 0);
	drop_conn(&k);
}

/* Tokens left in the kernel socket with the peer's FIN behind them and the
 * ring empty: the token filter drains them, and must see the FIN there, or
 * it drops the edge-triggered event that is the only news of the EOF (as
 * a drain that stops at its first short read would). */
static void eof_behind_tokens_edge_triggered(int lfd, struct sockaddr_in *la)
{
	struct conn k;
	char b[8];

	make_conn(&k, lfd, la);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.u64 = 0xe0f }, got[2];
	ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, k.b, &ev), 0);
	ASSERT_EQ(send(k.a, "x", 1, 0), 1);
	ASSERT_EQ(epoll_wait(ep, got, 2, 1000), 1);
	ASSERT_EQ(recv(k.b, b, sizeof(b), 0), 1);
	/* tokens whose flags a drain already cleared (they came late) */
	ASSERT_EQ(dsock_real.send(k.a, "ttt", 3, 0), 3);
	ASSERT_EQ(shutdown(k.a, SHUT_WR), 0);
	struct pollfd kp = { k.b, POLLRDHUP, 0 };
	ASSERT_EQ(dsock_real.poll(&kp, 1, 1000), 1); /* the FIN is in */
	ASSERT_EQ(epoll_wait(ep, got, 2, 1000), 1);
	ASSERT_EQ(got[0].events & EPOLLIN, EPOLLIN);
	ASSERT_EQ(recv(k.b, b, sizeof(b), MSG_DONTWAIT), 0);
	close(ep);
	drop_conn(&k);
}

/* The peer switches to the ring while we are in a receive (hot, so its
 * first ring bytes come with no token) and that receive reads the last of
 * its kernel bytes: leaving, we must look at the ring, or the ring data
 * stays invisible (read exactly up to the peer's switch offset,
 * rx_switched still 0, data in the ring, no token). */
static void switch_while_hot(int lfd, struct sockaddr_in *la)
{
	struct conn k;
	char pre[100], in[200], post[50];

	make_conn(&k, lfd, la);
	/* a -> b: a has not switched, b reads the kernel */
	k.h->side[0].switch_off = DSOCK_SWITCH_NONE;
	k.h->side[1].rx_switched = 0;
	memset(pre, 'k', sizeof(pre));
	memset(post, 'r', sizeof(post));
	ASSERT_EQ(dsock_real.send(k.a, pre, sizeof(pre), 0), 100); /* before a's switch */
	int unsent = 1;
	for (int i = 0; i < 1000 && unsent; i++) {
		ioctl(k.a, SIOCOUTQNSD, &unsent);
		usleep(100);
	}
	/* b spins in a receive (a long lease, for determinism) when a switches */
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	__atomic_store_n(&k.h->ring[0].lease_until, (uint64_t)(now.tv_sec + 10) * 1000000000ull, __ATOMIC_SEQ_CST);
	ASSERT_EQ(send(k.a, post, sizeof(post), 0), 50);
	ASSERT_EQ(k.h->side[0].switch_off, 100); /* it switched after its 100 kernel bytes */
	ASSERT_EQ(k.h->ring[0].token, 0);        /* and b was hot: no token */
	/* b's receive reads exactly the kernel bytes, and leaves */
	ASSERT_EQ(recv(k.b, in, 100, MSG_DONTWAIT), 100);
	ASSERT_EQ(memcmp(in, pre, 100), 0);
	struct pollfd p = { k.b, POLLIN, 0 };
	ASSERT_EQ(poll(&p, 1, 1000), 1); /* the ring's 50 bytes are readable */
	ASSERT_EQ(recv(k.b, in, sizeof(in), MSG_DONTWAIT), 50);
	ASSERT_EQ(memcmp(in, post, 50), 0);
	drop_conn(&k);
}

/* A nonblocking writer whose write came back short (the ring filled) and
 * that then waits, edge-triggered, as nginx does (IN|OUT|RDHUP|ET): the
 * reader freeing space must give it an edge (a space token), as the
 * kernel would.  (A writer registered for EPOLLOUT alone is not woken by
 * an arriving token: docs/ARCHITECTURE.md, known limits.) */
static void short_write_then_epollout(int lfd, struct sockaddr_in *la)
{
	struct conn k;
	static char buf[RING];
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.u64 = 0xab }, got[2];
	int ep = epoll_create1(EPOLL_CLOEXEC);

	make_conn(&k, lfd, la);
	fcntl(k.a, F_SETFL, O_NONBLOCK);
	memset(buf, 'w', sizeof(buf));
	ASSERT_EQ(send(k.a, buf, RING - 100, 0), RING - 100);
	ASSERT_EQ(send(k.a, buf, 1000, 0), 100); /* short: the ring is full */
	ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, k.a, &ev), 0);
	for (int i = 0; i < 50 && epoll_wait(ep, got, 2, 20) > 0; i++)
		; /* edges from before (ACKs of its tokens) */
	long left = RING;
	for (int idle = 0; left > 0 && idle < 1000;) {
		ssize_t r = recv(k.b, buf, sizeof(buf), MSG_DONTWAIT);
		if (r > 0)
			left -= r;
		else
			idle++, usleep(100);
	}
	ASSERT_EQ(left, 0);
	int n = epoll_wait(ep, got, 2, 1000);
	ASSERT_EQ(n, 1);
	ASSERT_TRUE(n == 1 && (got[0].events & EPOLLOUT));
	close(ep);
	drop_conn(&k);
}

/* A side that only writes (nginx sending a file) never receives, so its
 * receive side has not seen the peer's switch: the peer's space tokens
 * must still be taken for tokens (drained, no EPOLLIN reported), or they
 * pile up unread, the writer delays its ACKs, the peer's 1-byte tokens
 * fill its congestion window and its next wake-up waits 40 ms for an
 * ACK. */
static void writer_only_drains_space_tokens(int lfd, struct sockaddr_in *la)
{
	struct conn k;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.u64 = 0x5 }, got[2];
	int ep = epoll_create1(EPOLL_CLOEXEC), inq = -1;

	make_conn(&k, lfd, la);
	k.h->side[0].rx_switched = 0; /* a has never received; b switched at 0 */
	ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, k.a, &ev), 0);
	ASSERT_EQ(dsock_real.send(k.b, "t", 1, 0), 1); /* b's space token */
	struct pollfd kp = { k.a, POLLIN, 0 };
	ASSERT_EQ(dsock_real.poll(&kp, 1, 1000), 1);
	ASSERT_EQ(epoll_wait(ep, got, 2, 0), 0); /* only a token: nothing to read */
	ASSERT_EQ(dsock_real.ioctl(k.a, SIOCINQ, &inq), 0);
	ASSERT_EQ(inq, 0); /* and it was taken */
	ASSERT_EQ(k.h->side[0].rx_switched, 1);
	close(ep);
	drop_conn(&k);
}

int main(int argc, char **argv)
{
	struct sockaddr_in la;
	int lfd;

	unit_isolate(argv, "TEST_SHM_TOKENS_CHILD");
	(void)argc;
	lfd = loopback_listener(&la);
	if (lfd < 0)
		return 1;
	stale_flag_after_partial_read(lfd, &la);
	eof_behind_tokens_edge_triggered(lfd, &la);
	switch_while_hot(lfd, &la);
	short_write_then_epollout(lfd, &la);
	writer_only_drains_space_tokens(lfd, &la);
	UNIT_DONE();
}

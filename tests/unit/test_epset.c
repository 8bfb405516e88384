/* The epoll registration index (src/lib/sock/epset.c), through the
 * interposed epoll_ctl and close: which fd an event's data names, what a
 * close forgets, and which members a wait reports as hidden readable
 * (level, edge and one-shot), with thousands of registrations. */
#include "unit/unit.h"
#include "lib/sock/epset.h"
#include "lib/sock/ready.h"
#include "lib/sock/sock.h"
#include "lib/transport/transport.h"

#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define N 9000

static int flag_hidden[N];
static uint64_t arrivals = 1; /* the rx_mark of every fake socket (a ring tail: data came) */

static int fake_hidden(struct dsock_sock *s)
{
	return 1; /* only sockets on the hidden list are asked */
}

static uint64_t fake_mark(struct dsock_sock *s)
{
	return arrivals;
}

static const struct dsock_transport fake = {
	.name = "fake-hidden",
	.hidden_readable = fake_hidden,
	.rx_mark = fake_mark,
};

static int add(int ep, int fd, unsigned events, uint64_t data)
{
	struct epoll_event ev = { .events = events, .data.u64 = data };
	return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

int main(int argc, char **argv)
{
	int fds[N], ep, ep2;
	struct epoll_event out[8];

	unit_isolate(argv, "TEST_EPSET_CHILD");
	(void)argc;
	struct rlimit rl;
	ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
	rl.rlim_cur = rl.rlim_max;
	if (rl.rlim_max < N + 64 || setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		fprintf(stderr, "test_epset: needs %d descriptors, the hard limit is %llu\n", N + 64,
			(unsigned long long)rl.rlim_max);
		return 1;
	}
	ep = epoll_create1(0);
	ep2 = epoll_create1(0);
	for (int i = 0; i < N; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM, 0);
		ASSERT_TRUE(fds[i] >= 0);
		ASSERT_EQ(add(ep, fds[i], EPOLLIN, 1000 + (uint64_t)i * 7), 0);
	}
	/* every event's data names its fd */
	int wrong = 0;
	for (int i = 0; i < N; i++)
		wrong += dsock_epset_member_fd(ep, 1000 + (uint64_t)i * 7) != fds[i];
	ASSERT_EQ(wrong, 0);
	ASSERT_EQ(dsock_epset_member_fd(ep, 5), -1);
	ASSERT_EQ(dsock_epset_member_fd(ep2, 1000), -1);
	/* two members of one set with the same data: cannot tell */
	ASSERT_EQ(add(ep2, fds[0], EPOLLIN, 42), 0);
	ASSERT_EQ(add(ep2, fds[1], EPOLLIN, 42), 0);
	ASSERT_EQ(dsock_epset_member_fd(ep2, 42), -1);
	/* MOD: the new data names it, the old no longer */
	struct epoll_event mod = { .events = EPOLLIN, .data.u64 = 77 };
	ASSERT_EQ(epoll_ctl(ep2, EPOLL_CTL_MOD, fds[1], &mod), 0);
	ASSERT_EQ(dsock_epset_member_fd(ep2, 42), fds[0]);
	ASSERT_EQ(dsock_epset_member_fd(ep2, 77), fds[1]);
	/* DEL */
	ASSERT_EQ(epoll_ctl(ep2, EPOLL_CTL_DEL, fds[1], NULL), 0);
	ASSERT_EQ(dsock_epset_member_fd(ep2, 77), -1);

	/* hidden readable: three sockets of the 9,000 (the index grew twice
	 * on the way), level, edge, one-shot */
	struct dsock_sock *s[3];
	int which[3] = { 10, 4500, 8999 };
	for (int k = 0; k < 3; k++) {
		s[k] = dsock_fdt_get(fds[which[k]]);
		ASSERT_TRUE(s[k] != NULL);
		s[k]->tp = &fake;
	}
	struct epoll_event mev = { .events = EPOLLIN | EPOLLET, .data.u64 = 1000 + 4500 * 7 };
	ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_MOD, fds[4500], &mev), 0);
	mev.events = EPOLLIN | EPOLLONESHOT;
	mev.data.u64 = 1000 + 8999 * 7;
	ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_MOD, fds[8999], &mev), 0);
	int wk = -1;
	ASSERT_EQ(dsock_epset_hidden(ep, out, 8, &wk), 0); /* nothing hidden yet */
	for (int k = 0; k < 3; k++)
		dsock_hidden_set(s[k], &flag_hidden[which[k]], 1);
	ASSERT_EQ(dsock_hidden_readable, 3);
	int n = dsock_epset_hidden(ep, out, 8, &wk), seen = 0;
	ASSERT_EQ(n, 3);
	ASSERT_EQ(wk, 1); /* edge-triggered and one-shot members among them */
	for (int i = 0; i < n; i++) {
		ASSERT_EQ(out[i].events, EPOLLIN);
		for (int k = 0; k < 3; k++)
			seen |= (out[i].data.u64 == 1000 + (uint64_t)which[k] * 7) << k;
	}
	ASSERT_EQ(seen, 7);
	/* again: level only (edge saw no new arrival, one-shot is disarmed) */
	n = dsock_epset_hidden(ep, out, 8, &wk);
	ASSERT_EQ(n, 1);
	ASSERT_EQ(out[0].data.u64, 1000 + 10 * 7);
	arrivals++; /* a new arrival: edge once more */
	ASSERT_EQ(dsock_epset_hidden(ep, out, 8, &wk), 2);
	/* another set holding the same socket reports it there too */
	ASSERT_EQ(add(ep2, fds[10], EPOLLIN, 99), 0);
	ASSERT_EQ(dsock_epset_hidden(ep2, out, 8, &wk), 1);
	ASSERT_EQ(out[0].data.u64, 99);
	ASSERT_EQ(wk, 0); /* level-triggered EPOLLIN alone: the ring tells all */
	/* a member that wants EPOLLOUT too needs the kernel's look */
	mev.events = EPOLLIN | EPOLLOUT;
	mev.data.u64 = 99;
	ASSERT_EQ(epoll_ctl(ep2, EPOLL_CTL_MOD, fds[10], &mev), 0);
	ASSERT_EQ(dsock_epset_hidden(ep2, out, 8, &wk), 1);
	ASSERT_EQ(wk, 1);
	/* cleared: gone from every wait, the count back to 0 */
	for (int k = 0; k < 3; k++)
		dsock_hidden_set(s[k], &flag_hidden[which[k]], 0);
	ASSERT_EQ(dsock_hidden_readable, 0);
	ASSERT_EQ(dsock_epset_hidden(ep, out, 8, &wk), 0);
	for (int k = 0; k < 3; k++) {
		s[k]->tp = NULL;
		dsock_sock_put(s[k]);
	}

	/* close forgets: half the sockets, then a whole set */
	for (int i = 0; i < N; i += 2)
		close(fds[i]);
	wrong = 0;
	for (int i = 0; i < N; i++)
		wrong += dsock_epset_member_fd(ep, 1000 + (uint64_t)i * 7) != (i % 2 ? fds[i] : -1);
	ASSERT_EQ(wrong, 0);
	close(ep);
	wrong = 0;
	for (int i = 1; i < N; i += 2)
		wrong += dsock_epset_member_fd(ep, 1000 + (uint64_t)i * 7) != -1;
	ASSERT_EQ(wrong, 0);
	close(ep2);
	for (int i = 1; i < N; i += 2)
		close(fds[i]);
	UNIT_DONE();
}

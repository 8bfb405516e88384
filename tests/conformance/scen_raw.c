/* Calls made without their libc functions: syscall() with the call's
 * number (as libuv makes io_uring_setup, and some programs their reads),
 * and an io_uring, whose reads, sends and epoll changes no wrapper sees.
 * Each must find the bytes, readiness and registrations the libc calls
 * would. */
#include "conf.h"

#include <fcntl.h>
#include <linux/io_uring.h>
#include <poll.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Bytes, a peek, a wait, an epoll set and a close, all through syscall(). */
STREAM_SCEN(raw_syscalls_on_a_connection)
{
	int c, s;
	char b[32] = { 0 };

	fam_pair(f, &c, &s);
	R("write", syscall(SYS_write, c, "hello", 5));
	struct pollfd p = { .fd = s, .events = POLLIN };
	struct timespec t = { 2, 0 };
	R("ppoll", syscall(SYS_ppoll, &p, 1, &t, NULL, 0));
	out("  revents %s, time left: %s", pollname((unsigned)p.revents), t.tv_sec >= 1 ? "more than 1 s" : "less");
	R("recvfrom MSG_PEEK", syscall(SYS_recvfrom, s, b, sizeof(b), MSG_PEEK, NULL, NULL));
	R("read", syscall(SYS_read, s, b, sizeof(b)));
	out("  bytes: %s", b);
	R("sendto", syscall(SYS_sendto, s, "world!", 6, 0, NULL, 0));
	int ep = (int)syscall(SYS_epoll_create1, EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0x61 }, got[2];
	R("epoll_ctl ADD", syscall(SYS_epoll_ctl, ep, EPOLL_CTL_ADD, c, &ev));
	int n = (int)syscall(SYS_epoll_pwait, ep, got, 2, 2000, NULL, 8);
	out("epoll_pwait = %d %s data 0x%llx", n, n == 1 ? epollname(got[0].events) : "-",
	    n == 1 ? (unsigned long long)got[0].data.u64 : 0ULL);
	memset(b, 0, sizeof(b));
	R("recvfrom", syscall(SYS_recvfrom, c, b, sizeof(b), 0, NULL, NULL));
	out("  bytes: %s", b);
	R("epoll_ctl DEL", syscall(SYS_epoll_ctl, ep, EPOLL_CTL_DEL, c, NULL));
	R("epoll_ctl DEL again", syscall(SYS_epoll_ctl, ep, EPOLL_CTL_DEL, c, NULL));
	R("epoll_ctl ADD again", syscall(SYS_epoll_ctl, ep, EPOLL_CTL_ADD, c, &ev));
	R("send", send(s, "x", 1, 0));
	n = (int)syscall(SYS_epoll_pwait, ep, got, 2, 2000, NULL, 8);
	out("epoll_pwait = %d %s", n, n == 1 ? epollname(got[0].events) : "-");
	R("close", syscall(SYS_close, s));
	R("read after the peer closed", syscall(SYS_read, c, b, sizeof(b)));
	R("read at the end", syscall(SYS_read, c, b, sizeof(b)));
	R("read of the closed fd", syscall(SYS_read, s, b, sizeof(b)));
}

/* A registration the application deleted with epoll_ctl, then added again
 * with syscall(): the kernel's answers, and its events. */
STREAM_SCEN(epoll_deleted_then_raw_add)
{
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0x62 }, got[2];

	fam_pair(f, &c, &s);
	R("ADD", epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));
	R("raw ADD", syscall(SYS_epoll_ctl, ep, EPOLL_CTL_ADD, c, &ev));
	R("send", send(s, "x", 1, 0));
	int n = epoll_wait(ep, got, 2, 2000);
	out("epoll_wait = %d %s", n, n == 1 ? epollname(got[0].events) : "-");
	R("raw DEL", syscall(SYS_epoll_ctl, ep, EPOLL_CTL_DEL, c, NULL));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));
	R("wait for nothing", epoll_wait(ep, got, 2, 50));
}

/* ---- a minimal io_uring: one operation at a time ---------------------- */
struct ring {
	int fd;
	unsigned *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqes;
};

static int ring_init(struct ring *r)
{
	struct io_uring_params p;

	memset(&p, 0, sizeof(p));
	r->fd = (int)syscall(SYS_io_uring_setup, 4, &p);
	if (r->fd < 0)
		return -errno;
	size_t sq = p.sq_off.array + p.sq_entries * sizeof(unsigned);
	size_t cq = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	size_t len = sq > cq ? sq : cq; /* (IORING_FEAT_SINGLE_MMAP: one map for both) */
	char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQ_RING);
	void *e = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
	if (m == MAP_FAILED || e == MAP_FAILED || !(p.features & IORING_FEAT_SINGLE_MMAP))
		return -ENOMEM;
	r->sq_tail = (unsigned *)(m + p.sq_off.tail);
	r->sq_mask = (unsigned *)(m + p.sq_off.ring_mask);
	r->sq_array = (unsigned *)(m + p.sq_off.array);
	r->cq_head = (unsigned *)(m + p.cq_off.head);
	r->cq_tail = (unsigned *)(m + p.cq_off.tail);
	r->cq_mask = (unsigned *)(m + p.cq_off.ring_mask);
	r->cqes = (struct io_uring_cqe *)(m + p.cq_off.cqes);
	r->sqes = e;
	return 0;
}

/* Submits one operation and waits for its completion: its result. */
static long ring_op(struct ring *r, unsigned char op, int fd, void *addr, unsigned len, uint64_t off)
{
	unsigned tail = *r->sq_tail, i = tail & *r->sq_mask, head;

	memset(&r->sqes[i], 0, sizeof(r->sqes[i]));
	r->sqes[i].opcode = op;
	r->sqes[i].fd = fd;
	r->sqes[i].addr = (uint64_t)(uintptr_t)addr;
	r->sqes[i].len = len;
	r->sqes[i].off = off;
	r->sq_array[i] = i;
	__atomic_store_n(r->sq_tail, tail + 1, __ATOMIC_RELEASE);
	if (syscall(SYS_io_uring_enter, r->fd, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
		return -errno;
	head = *r->cq_head;
	while (__atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE) == head)
		;
	long res = r->cqes[head & *r->cq_mask].res;
	__atomic_store_n(r->cq_head, head + 1, __ATOMIC_RELEASE);
	return res;
}

/* A connection with bytes waiting when the process sets up an io_uring:
 * the ring's receive gets them, its send reaches the peer, and its
 * EPOLL_CTL_ADD of a socket the application had deleted from a set
 * succeeds; a connection made afterwards carries bytes the same way. */
STREAM_SCEN(uring_on_a_connection)
{
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0x63 }, got[2];
	struct ring r;
	char b[32] = { 0 };

	fam_pair(f, &c, &s);
	R("ADD", epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));
	R("send before the ring", send(c, "before", 6, 0));
	int e = ring_init(&r);
	if (e < 0) {
		out("io_uring: %s", ename(-e));
		return;
	}
	R("ring RECV", ring_op(&r, IORING_OP_RECV, s, b, sizeof(b), 0));
	out("  bytes: %s", b);
	R("ring SEND", ring_op(&r, IORING_OP_SEND, s, "after", 5, 0));
	memset(b, 0, sizeof(b));
	R("recv", recv(c, b, sizeof(b), 0));
	out("  bytes: %s", b);
	R("ring EPOLL_CTL ADD", ring_op(&r, IORING_OP_EPOLL_CTL, ep, &ev, EPOLL_CTL_ADD, (uint64_t)c));
	R("send", send(s, "y", 1, 0));
	int n = epoll_wait(ep, got, 2, 2000);
	out("epoll_wait = %d %s data 0x%llx", n, n == 1 ? epollname(got[0].events) : "-",
	    n == 1 ? (unsigned long long)got[0].data.u64 : 0ULL);
	R("recv", recv(c, b, sizeof(b), 0));
	R("DEL", epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));
	R("ring EPOLL_CTL ADD again", ring_op(&r, IORING_OP_EPOLL_CTL, ep, &ev, EPOLL_CTL_ADD, (uint64_t)c));
	int c2, s2;
	fam_pair(f, &c2, &s2);
	R("a new connection's send", send(c2, "new one", 7, 0));
	memset(b, 0, sizeof(b));
	R("ring RECV", ring_op(&r, IORING_OP_RECV, s2, b, sizeof(b), 0));
	out("  bytes: %s", b);
}

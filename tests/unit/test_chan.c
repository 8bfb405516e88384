/* The channel's core (src/lib/chan/chan.h) over a TCP connection on
 * loopback: streams byte-exact under threads, credits (a stream far
 * larger than its ring), a slow reader that stalls only its own stream,
 * EOF and STOP (the streams' ends in detail: test_chan_ends.c), control
 * frames owed while the frame ring is full, a fork's two holders, a peer that breaks the rules (a length
 * past its credit, one that wraps), a peer that goes away, and state
 * that a holder scribbled on. */
#include "chan_pair.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

static unsigned char pat(unsigned st, uint64_t i)
{
	return (unsigned char)(i * 131 + st * 7 + (i >> 11));
}

static ssize_t send_all(struct ch *c, unsigned st, const unsigned char *p, size_t n)
{
	size_t done = 0;

	while (done < n) {
		struct iovec v = { (void *)(p + done), n - done };
		ssize_t r = ch_send(c, st, &v, 1, 0, FOREVER);
		if (r < 0)
			return r;
		done += (size_t)r;
	}
	return (ssize_t)done;
}

struct job {
	struct ch *c;
	unsigned st;
	size_t n;
	int ok;
};

static void *sender(void *arg)
{
	struct job *j = arg;
	unsigned char *b = malloc(j->n);

	for (size_t i = 0; i < j->n; i++)
		b[i] = pat(j->st, i);
	j->ok = send_all(j->c, j->st, b, j->n) == (ssize_t)j->n && ch_shutdown(j->c, j->st, SHUT_WR) == 0;
	free(b);
	return NULL;
}

/* Reads the stream to its EOF in odd-sized pieces: all of it, exact. */
static void *receiver(void *arg)
{
	struct job *j = arg;
	unsigned char b[7000];
	size_t got = 0;
	int exact = 1;
	ssize_t r;

	for (;;) {
		struct iovec v = { b, 1 + (got * 7) % sizeof(b) };
		if ((r = ch_recv(j->c, j->st, &v, 1, 0, FOREVER)) <= 0)
			break;
		for (ssize_t i = 0; i < r; i++)
			exact &= b[i] == pat(j->st, got + (size_t)i);
		got += (size_t)r;
	}
	j->ok = r == 0 && exact && got == j->n;
	if (!j->ok)
		fprintf(stderr, "stream %u: got %zu of %zu, exact %d, last %zd\n", j->st, got, j->n, exact, r);
	return NULL;
}

static void streams_threads(void)
{
	enum { N = 8 };
	struct ch c[2];
	pthread_t t[2 * N];
	struct job j[2 * N];

	chans(c, 64);
	for (unsigned i = 0; i < N; i++) {
		/* even streams a -> b, odd ones b -> a; 1 MiB each */
		unsigned st = 10 + i, from = i & 1;
		j[2 * i] = (struct job){ &c[from], st, 1 << 20, 0 };
		j[2 * i + 1] = (struct job){ &c[1 - from], st, 1 << 20, 0 };
		pthread_create(&t[2 * i], NULL, sender, &j[2 * i]);
		pthread_create(&t[2 * i + 1], NULL, receiver, &j[2 * i + 1]);
	}
	int ok = 1;
	for (int i = 0; i < 2 * N; i++) {
		pthread_join(t[i], NULL);
		ok &= j[i].ok;
	}
	ASSERT_TRUE(ok);
	ch_close(&c[0]);
	ch_close(&c[1]);
}

/* A stream whose reader reads nothing holds a ring's worth; another
 * stream carries 4 MiB meanwhile. */
static void slow_reader(void)
{
	struct ch c[2];
	unsigned char *b = malloc(CH_RING);
	struct iovec v = { b, CH_RING };
	pthread_t t;

	chans(c, 8);
	memset(b, 'x', CH_RING);
	ASSERT_EQ(ch_send(&c[0], 1, &v, 1, MSG_DONTWAIT, FOREVER), CH_RING);
	v.iov_len = 1;
	ASSERT_EQ(ch_send(&c[0], 1, &v, 1, MSG_DONTWAIT, FOREVER), -EAGAIN); /* no credit */
	ASSERT_EQ(ch_poll(&c[0], 1, POLLOUT), 0);
	struct job r = { &c[1], 2, 4 << 20, 0 }, s = { &c[0], 2, 4 << 20, 0 };
	pthread_create(&t, NULL, receiver, &r);
	sender(&s);
	pthread_join(t, NULL);
	ASSERT_TRUE(s.ok && r.ok);
	/* the stalled stream's bytes are all there, and once read its
	 * sender has credit again */
	ASSERT_EQ(ch_readable(&c[1], 1), CH_RING);
	v.iov_len = CH_RING;
	ASSERT_EQ(ch_recv(&c[1], 1, &v, 1, MSG_WAITALL, FOREVER), CH_RING);
	ASSERT_TRUE(b[0] == 'x' && b[CH_RING - 1] == 'x');
	int64_t until = INT64_MAX;
	v.iov_len = 1;
	ASSERT_EQ(ch_send(&c[0], 1, &v, 1, 0, until), 1);
	free(b);
	ch_close(&c[0]);
	ch_close(&c[1]);
}

static void eof_stop_peek(void)
{
	struct ch c[2];
	char b[64];
	struct iovec v = { b, sizeof(b) };

	chans(c, 8);
	ASSERT_EQ(send_all(&c[0], 3, (const unsigned char *)"hello", 5), 5);
	ASSERT_EQ(ch_shutdown(&c[0], 3, SHUT_WR), 0);
	ASSERT_EQ(ch_recv(&c[1], 3, &v, 1, MSG_PEEK | MSG_WAITALL, FOREVER), 5); /* EOF ends the wait */
	ASSERT_EQ(ch_recv(&c[1], 3, &v, 1, 0, FOREVER), 5);
	ASSERT_TRUE(!memcmp(b, "hello", 5));
	ASSERT_EQ(ch_recv(&c[1], 3, &v, 1, 0, FOREVER), 0);
	ASSERT_TRUE(ch_poll(&c[1], 3, POLLIN) & POLLIN);
	ASSERT_EQ(ch_send(&c[0], 3, &v, 1, 0, FOREVER), -EPIPE);
	/* a receive that times out */
	int64_t t0 = mono_ns();
	ASSERT_EQ(ch_recv(&c[1], 4, &v, 1, 0, t0 + 20000000), -EAGAIN);
	ASSERT_TRUE(mono_ns() - t0 >= 20000000);
	/* STOP: the sender's sends fail once it has read it */
	ASSERT_EQ(ch_shutdown(&c[1], 5, SHUT_RD), 0);
	ssize_t r = 0;
	for (int i = 0; i < 1000 && r >= 0; i++) {
		r = ch_send(&c[0], 5, &v, 1, 0, FOREVER);
		ch_progress(&c[0]);
		usleep(100);
	}
	ASSERT_EQ(r, -EPIPE);
	ch_close(&c[0]);
	ch_close(&c[1]);
}

/* After a fork both holders of one end send on streams of their own. */
static void forked(void)
{
	struct ch c[2];
	pid_t pid;
	int st;

	chans(c, 8);
	if ((pid = fork()) == 0) {
		struct job s = { &c[0], 6, 1 << 20, 0 };
		sender(&s);
		_exit(s.ok ? 0 : 1);
	}
	struct job s = { &c[0], 7, 1 << 20, 0 }, r6 = { &c[1], 6, 1 << 20, 0 }, r7 = { &c[1], 7, 1 << 20, 0 };
	pthread_t t[2];
	pthread_create(&t[0], NULL, receiver, &r6);
	pthread_create(&t[1], NULL, receiver, &r7);
	sender(&s);
	pthread_join(t[0], NULL);
	pthread_join(t[1], NULL);
	waitpid(pid, &st, 0);
	ASSERT_TRUE(s.ok && r6.ok && r7.ok && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ch_close(&c[0]);
	ch_close(&c[1]);
}

/* A peer that breaks the rules kills the channel; one that goes away
 * ends every stream. */
static void faults(void)
{
	struct ch c;
	int fd[2];
	char b[64];
	struct iovec v = { b, sizeof(b) };
	/* DATA on stream 1 of more than a ring's credit */
	unsigned char h[CH_HDR] = { 1, 0, 0, 0, CH_DATA, 0, 0, 0 };
	uint64_t big = CH_RING + 1;

	tcp_pair(fd);
	ASSERT_EQ(ch_create(&c, fd[1], 4), 0);
	memcpy(h + 8, &big, 8);
	ASSERT_EQ(write(fd[0], h, sizeof(h)), sizeof(h));
	ASSERT_EQ(ch_recv(&c, 1, &v, 1, 0, FOREVER), -ECONNRESET);
	ASSERT_EQ(ch_send(&c, 2, &v, 1, 0, FOREVER), -ECONNRESET);
	ASSERT_TRUE(ch_poll(&c, 3, POLLIN) & POLLERR);
	close(fd[0]);
	ch_close(&c);

	tcp_pair(fd);
	ASSERT_EQ(ch_create(&c, fd[1], 4), 0);
	close(fd[0]);
	ASSERT_EQ(ch_recv(&c, 1, &v, 1, 0, FOREVER), 0);
	ASSERT_EQ(ch_send(&c, 1, &v, 1, 0, FOREVER), -EPIPE);
	ch_close(&c);
}

/* While the frame ring is full (small socket buffers, a peer that does
 * not read), a CREDIT and an EOF are owed, not lost: once the peer reads,
 * they arrive. */
static void owed(void)
{
	static unsigned char b[CH_RING];
	struct iovec v = { b, sizeof(b) };
	struct ch c[2];
	int fd[2];
	size_t got = 0;
	ssize_t r;

	tcp_pair_sized(fd, 4096);
	ASSERT_EQ(ch_create(&c[0], fd[0], 64), 0);
	ASSERT_EQ(ch_create(&c[1], fd[1], 64), 0);
	/* a ring's worth on stream 1, b's to a's, filed at a */
	for (size_t sent = 0; sent < CH_RING;) {
		if ((r = ch_send(&c[1], 1, &v, 1, MSG_DONTWAIT, FOREVER)) > 0)
			sent += (size_t)r;
		ch_progress(&c[0]);
		ch_progress(&c[1]);
	}
	for (int i = 0; i < 100000 && ch_readable(&c[0], 1) < CH_RING; i++)
		ch_progress(&c[0]), ch_progress(&c[1]);
	ASSERT_EQ(ch_readable(&c[0], 1), CH_RING);
	/* a's frame ring filled on other streams, b not reading */
	for (unsigned st = 2; st < 64; st++)
		while (ch_send(&c[0], st, &v, 1, MSG_DONTWAIT, FOREVER) > 0)
			;
	ASSERT_TRUE(ch_tx_room(&c[0]) < CH_HDR + 1);
	while ((r = ch_recv(&c[0], 1, &v, 1, MSG_DONTWAIT, FOREVER)) > 0)
		got += (size_t)r;
	ASSERT_EQ(got, CH_RING);
	ASSERT_EQ(ch_shutdown(&c[0], 3, SHUT_WR), 0);
	ASSERT_TRUE(c[0].sh->owing > 0);
	/* b reads what a queued; a's owed frames follow */
	for (int i = 0; i < 20000 && (ch_tx_pending(&c[0]) || i < 10); i++) {
		ch_progress(&c[0]);
		ch_progress(&c[1]);
		for (unsigned st = 2; st < 64; st++)
			while (ch_recv(&c[1], st, &v, 1, MSG_DONTWAIT, FOREVER) > 0)
				;
	}
	v.iov_len = 1;
	ASSERT_EQ(ch_send(&c[1], 1, &v, 1, 0, mono_ns() + 2000000000), 1); /* the credit came */
	ASSERT_EQ(ch_recv(&c[1], 3, &v, 1, 0, mono_ns() + 2000000000), 0);  /* the EOF came */
	ch_close(&c[0]);
	ch_close(&c[1]);
}

static void *blocked_reader(void *arg)
{
	char b[8];
	struct iovec v = { b, sizeof(b) };

	return (void *)(intptr_t)ch_recv(arg, 1, &v, 1, 0, mono_ns() + 5000000000LL);
}

/* A peek that waits for all at the channel's end returns what there is;
 * a reader blocked on a stream shut for reading returns 0 once the
 * peer's answer (its EOF) is there. */
static void ends(void)
{
	struct ch c[2];
	char b[64];
	struct iovec v = { b, 5 };
	pthread_t t;
	void *r;

	chans(c, 8);
	ASSERT_EQ(ch_send(&c[0], 1, &v, 1, 0, FOREVER), 5);
	ch_close(&c[0]);
	v.iov_len = sizeof(b);
	int64_t t0 = mono_ns();
	ASSERT_EQ(ch_recv(&c[1], 1, &v, 1, MSG_PEEK | MSG_WAITALL, t0 + 2000000000), 5);
	ASSERT_TRUE(mono_ns() - t0 < 1000000000);
	ch_close(&c[1]);

	chans(c, 8);
	pthread_create(&t, NULL, blocked_reader, &c[1]);
	usleep(50000);
	t0 = mono_ns();
	ASSERT_EQ(ch_shutdown(&c[1], 1, SHUT_RD), 0);
	for (int i = 0; i < 100; i++) { /* (the peer reads the STOP and answers) */
		ch_progress(&c[0]);
		usleep(1000);
	}
	pthread_join(t, &r);
	ASSERT_EQ((intptr_t)r, 0);
	ASSERT_TRUE(mono_ns() - t0 < 1000000000);
	ch_close(&c[0]);
	ch_close(&c[1]);
}

/* A DATA length that wraps the credit check kills the channel; so does
 * state a holder scribbled on (the parser's place), without a crash. */
static void lies(void)
{
	static unsigned char junk[4096];
	unsigned char h[CH_HDR] = { 1, 0, 0, 0, CH_DATA, 0, 0, 0 };
	char b[64];
	struct iovec v = { b, sizeof(b) };
	uint64_t n = 100;
	struct ch c, other;
	int fd[2];

	tcp_pair(fd);
	ASSERT_EQ(ch_create(&c, fd[1], 4), 0);
	memcpy(h + 8, &n, 8);
	ASSERT_EQ(write(fd[0], h, sizeof(h)), sizeof(h));
	ASSERT_EQ(write(fd[0], junk, 100), 100);
	n = (uint64_t)0 - 50;
	memcpy(h + 8, &n, 8);
	ASSERT_EQ(write(fd[0], h, sizeof(h)), sizeof(h));
	ASSERT_EQ(write(fd[0], junk, sizeof(junk)), sizeof(junk));
	usleep(20000);
	ch_progress(&c);
	ASSERT_EQ(ch_recv(&c, 1, &v, 1, MSG_DONTWAIT, FOREVER), 64); /* (what was within its credit) */
	ASSERT_EQ(ch_recv(&c, 2, &v, 1, 0, FOREVER), -ECONNRESET);
	close(fd[0]);
	ch_close(&c);

	tcp_pair(fd);
	ASSERT_EQ(ch_create(&c, fd[1], 4), 0);
	/* a second holder maps the same state, as an exec's child would */
	ASSERT_EQ(ch_attach(&other, dup(fd[1]), dup(c.memfd), dup(c.nudge)), 0);
	c.sh->hdr_len = 0x7ffffff0;
	ASSERT_EQ(write(fd[0], junk, 16), 16);
	usleep(20000);
	ASSERT_EQ(ch_progress(&other), -ECONNRESET);
	ASSERT_TRUE(ch_poll(&c, 1, POLLIN) & POLLERR);
	ch_close(&other);
	ch_close(&c);
	close(fd[0]);
}

/* A receive that waits for nothing costs no CPU: it sleeps in poll as
 * the pumper, or on the futex beside one. */
static void *idle_reader(void *arg)
{
	char x[8];
	struct iovec w = { x, sizeof(x) };

	return (void *)(intptr_t)ch_recv(arg, 7, &w, 1, 0, mono_ns() + 300000000);
}

static void idle(void)
{
	struct ch c[2];
	struct rusage r0, r1;
	pthread_t t[2];
	void *r;

	chans(c, 8);
	getrusage(RUSAGE_SELF, &r0);
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, idle_reader, &c[0]);
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], &r);
		ASSERT_EQ((intptr_t)r, -EAGAIN);
	}
	getrusage(RUSAGE_SELF, &r1);
	long us = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) * 1000000L +
		  (r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec - r0.ru_stime.tv_usec);
	if (us >= 60000)
		fprintf(stderr, "idle: two receives waiting 300 ms took %ld us of CPU\n", us);
	ASSERT_TRUE(us < 60000);
	ch_close(&c[0]);
	ch_close(&c[1]);
}

/* A fork's child that dies while it is the pumper, asleep in poll, takes
 * nothing with it: the parent's streams carry on. */
static void pumper_dies(void)
{
	struct ch c[2];
	char b[64];
	struct iovec v = { b, 5 };
	pid_t pid;

	chans(c, 8);
	if ((pid = fork()) == 0) {
		char x[8];
		struct iovec w = { x, sizeof(x) };
		ch_recv(&c[0], 6, &w, 1, 0, FOREVER); /* (nothing comes on 6) */
		_exit(0);
	}
	usleep(100000);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	ASSERT_EQ(ch_send(&c[1], 1, &v, 1, 0, FOREVER), 5);
	v.iov_len = sizeof(b);
	ASSERT_EQ(ch_recv(&c[0], 1, &v, 1, 0, mono_ns() + 2000000000), 5);
	v.iov_len = 5;
	ASSERT_EQ(ch_send(&c[0], 2, &v, 1, 0, FOREVER), 5);
	ASSERT_EQ(ch_recv(&c[1], 2, &v, 1, 0, mono_ns() + 2000000000), 5);
	ASSERT_EQ(c[0].sh->dead, 0);
	ch_close(&c[0]);
	ch_close(&c[1]);
}

int main(void)
{
	streams_threads();
	slow_reader();
	eof_stop_peek();
	forked();
	faults();
	owed();
	ends();
	lies();
	idle();
	pumper_dies();
	if (unit_failures)
		fprintf(stderr, "test_chan: %d failures\n", unit_failures);
	return unit_failures ? 1 : 0;
}

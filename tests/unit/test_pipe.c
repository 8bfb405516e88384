/* The socketpair transport's pipes (src/lib/transport/socketpair/sp.h):
 * the pipe over a channel's stream (pipe_chan.c) answers as the pipe over
 * an AF_UNIX socketpair (pipe_fd.c), whose semantics define a pipe.  Each
 * scenario runs on both and writes what each call returned; the two
 * transcripts must be equal.  A channel is asynchronous: where the peer
 * must first read what the other end did (a STOP, a close), the scenario
 * lets both ends look at their sockets a while ("settle") first. */
#include "unit.h"
#include "lib/transport/socketpair/sp.h"
#include "lib/chan/chan.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>

struct end {
	struct sp_conn c;
	struct sp_shared sh;
	struct ch ch;
	int pf;
};

static char out[4096];
static size_t used;

/* "what value " into the transcript (hex: %x in what) */
static void say(const char *what, long long v)
{
	size_t l = strlen(what);
	int hex = l > 3 && !strcmp(what + l - 4, "%llx");

	used += (size_t)snprintf(out + used, sizeof(out) - used, hex ? "%.*s%llx " : "%.*s%lld ",
				 (int)(hex ? l - 4 : l), what, v);
}

static void make(struct end e[2], int chan)
{
	int sv[2];

	memset(e, 0, 2 * sizeof(*e));
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		perror("socketpair");
		exit(1);
	}
	for (int i = 0; i < 2; i++) {
		e[i].c.sh = &e[i].sh;
		e[i].pf = sv[i];
		e[i].c.pipe = chan ? &sp_pipe_chan : &sp_pipe_fd;
		if (chan) {
			if (ch_create(&e[i].ch, sv[i], 1)) {
				fprintf(stderr, "ch_create failed\n");
				exit(1);
			}
			e[i].c.ch = &e[i].ch;
		}
	}
}

static void done(struct end e[2])
{
	for (int i = 0; i < 2; i++)
		if (e[i].pf >= 0)
			e[i].c.pipe->close(&e[i].c, e[i].pf);
}

/* Both ends look at their sockets a while (a channel's peer reads what
 * the other end did; a socketpair needs nothing). */
static void settle(struct end e[2])
{
	for (int k = 0; k < 20; k++)
		for (int i = 0; i < 2; i++)
			if (e[i].c.ch && e[i].pf >= 0) {
				ch_progress(e[i].c.ch);
				usleep(250);
			}
}

static ssize_t snd(struct end *e, const char *p, size_t n, int flags)
{
	struct iovec v = { (void *)p, n };
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1 };

	return e->c.pipe->sendmsg(&e->c, e->pf, &m, flags);
}

static ssize_t rcv(struct end *e, char *p, size_t n, int flags)
{
	struct iovec v = { p, n };
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1 };

	return e->c.pipe->recvmsg(&e->c, e->pf, &m, flags);
}

static short look(struct end *e, short events)
{
	return (short)(e->c.pipe->poll(&e->c, e->pf, events) & (POLLIN | POLLOUT | POLLERR | POLLHUP));
}

static void data(struct end e[2])
{
	char b[64] = { 0 };

	say("send ", snd(&e[0], "hello", 5, 0));
	settle(e);
	say("inq ", e[1].c.pipe->inq(&e[1].c, e[1].pf));
	say("peek ", rcv(&e[1], b, sizeof(b), MSG_PEEK));
	say("recv 3: ", rcv(&e[1], b, 3, 0));
	say("waitall 2: ", rcv(&e[1], b + 3, 2, MSG_WAITALL));
	say("same ", !memcmp(b, "hello", 5));
	say("dontwait ", rcv(&e[1], b, sizeof(b), MSG_DONTWAIT));
	say("poll %llx", look(&e[1], POLLIN | POLLOUT));
}

static void shut_wr(struct end e[2])
{
	char b[64];

	say("send ", snd(&e[0], "ab", 2, 0));
	say("shut wr ", e[0].c.pipe->shutdown(&e[0].c, e[0].pf, SHUT_WR));
	settle(e);
	say("poll %llx", look(&e[1], POLLIN));
	say("recv ", rcv(&e[1], b, sizeof(b), 0));
	say("recv ", rcv(&e[1], b, sizeof(b), 0));
	say("send after ", snd(&e[0], "c", 1, MSG_DONTWAIT));
	say("peer sends ", snd(&e[1], "d", 1, 0));
	settle(e);
	say("got ", rcv(&e[0], b, sizeof(b), 0));
}

static void shut_rd(struct end e[2])
{
	char b[64];

	say("send ", snd(&e[0], "ab", 2, 0));
	say("shut rd ", e[1].c.pipe->shutdown(&e[1].c, e[1].pf, SHUT_RD));
	settle(e);
	say("send after ", snd(&e[0], "c", 1, MSG_DONTWAIT));
	say("recv ", rcv(&e[1], b, sizeof(b), 0));
	say("recv ", rcv(&e[1], b, sizeof(b), 0));
	say("reverse ", snd(&e[1], "d", 1, 0));
	settle(e);
	say("got ", rcv(&e[0], b, sizeof(b), 0));
}

static void close_unread(struct end e[2])
{
	char b[64];

	say("send ", snd(&e[1], "zz", 2, 0));
	say("send ", snd(&e[0], "yy", 2, 0));
	settle(e);
	e[0].c.pipe->close(&e[0].c, e[0].pf);
	e[0].pf = -1;
	settle(e);
	say("poll %llx", look(&e[1], POLLIN));
	say("recv ", rcv(&e[1], b, sizeof(b), 0));
	say("recv ", rcv(&e[1], b, sizeof(b), 0));
	say("recv ", rcv(&e[1], b, sizeof(b), 0));
	say("send ", snd(&e[1], "x", 1, MSG_DONTWAIT));
}

static void close_read(struct end e[2])
{
	char b[64];

	say("send ", snd(&e[1], "zz", 2, 0));
	settle(e);
	say("recv ", rcv(&e[0], b, sizeof(b), 0));
	e[0].c.pipe->close(&e[0].c, e[0].pf);
	e[0].pf = -1;
	settle(e);
	say("poll %llx", look(&e[1], POLLIN));
	say("recv ", rcv(&e[1], b, sizeof(b), 0));
	say("send ", snd(&e[1], "x", 1, MSG_DONTWAIT));
}

static void timeout(struct end e[2])
{
	char b[8];
	struct timespec t0, t1;

	e[1].sh.rcvtimeo.tv_usec = 30000;
	e[1].c.pipe->timeouts(&e[1].c, e[1].pf);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	say("recv ", rcv(&e[1], b, sizeof(b), 0));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	say("waited ", ms >= 29 && ms < 1000);
}

struct bulk {
	struct end *e;
	char *p;
	size_t n;
	ssize_t r;
};

static void *bulk_send(void *arg)
{
	struct bulk *b = arg;

	b->r = snd(b->e, b->p, b->n, 0);
	return NULL;
}

/* 1 MiB blocking each way at once, byte-exact. */
static void bulk(struct end e[2])
{
	size_t n = 1 << 20;
	char *p = malloc(n), *q = malloc(n);
	struct bulk s = { &e[0], p, n, 0 };
	pthread_t t;

	for (size_t i = 0; i < n; i++)
		p[i] = (char)(i * 7 + (i >> 12));
	pthread_create(&t, NULL, bulk_send, &s);
	say("recv ", rcv(&e[1], q, n, MSG_WAITALL));
	pthread_join(t, NULL);
	say("sent ", s.r);
	say("same ", !memcmp(p, q, n));
	free(p);
	free(q);
}

static void both(const char *name, void (*fn)(struct end e[2]))
{
	struct end e[2];
	char fd_says[4096];

	for (int chan = 0; chan < 2; chan++) {
		used = 0;
		out[0] = '\0';
		make(e, chan);
		fn(e);
		done(e);
		if (!chan)
			snprintf(fd_says, sizeof(fd_says), "%s", out);
	}
	if (strcmp(fd_says, out)) {
		fprintf(stderr, "%s:\n  socketpair: %s\n  channel:    %s\n", name, fd_says, out);
		unit_failures++;
	}
}

int main(void)
{
	both("data", data);
	both("shut_wr", shut_wr);
	both("shut_rd", shut_rd);
	both("close_unread", close_unread);
	both("close_read", close_read);
	both("timeout", timeout);
	both("bulk", bulk);
	if (unit_failures)
		fprintf(stderr, "test_pipe: %d failures\n", unit_failures);
	return unit_failures ? 1 : 0;
}

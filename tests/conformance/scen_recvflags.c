/* Receive flags on stream sockets: MSG_TRUNC (TCP discards the bytes
 * without copying them; a unix stream socket copies them), MSG_PEEK with
 * MSG_WAITALL and MSG_DONTWAIT, and how a MSG_WAITALL receive ends early:
 * a signal, SO_RCVTIMEO, the peer's shutdown, MSG_DONTWAIT. */
#include "conf.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int untouched(const char *b, size_t n, char marker)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != marker)
			return 0;
	return 1;
}

STREAM_SCEN(msg_trunc_stream)
{
	char a[100], b[100], ref[100];
	int c, s;

	fam_pair(f, &c, &s);
	fill(a, sizeof(a), 31);
	R("send 100", send(c, a, 100, 0));
	msleep(20);
	memset(b, '#', sizeof(b));
	R("recv 10 MSG_TRUNC", recv(s, b, 10, MSG_TRUNC));
	out("buffer untouched: %s", untouched(b, sizeof(b), '#') ? "yes" : "no");
	memset(b, '#', sizeof(b));
	R("recv 10 MSG_TRUNC|MSG_PEEK", recv(s, b, 10, MSG_TRUNC | MSG_PEEK));
	out("buffer untouched: %s", untouched(b, sizeof(b), '#') ? "yes" : "no");
	memset(b, '#', sizeof(b));
	R("recv 10 MSG_PEEK", recv(s, b, 10, MSG_PEEK));
	/* where the stream is now: 10 bytes on (TCP) or 10 copied (unix) */
	out("peeked bytes 10..19: %s, bytes 0..9: %s", !memcmp(b, a + 10, 10) ? "yes" : "no",
	    !memcmp(b, a, 10) ? "yes" : "no");
	memset(b, '#', sizeof(b));
	R("recv 30 MSG_TRUNC|MSG_DONTWAIT", recv(s, b, 30, MSG_TRUNC | MSG_DONTWAIT));
	out("buffer untouched: %s", untouched(b, sizeof(b), '#') ? "yes" : "no");
	memset(b, '#', sizeof(b));
	R("recv 100", recv(s, b, 100, 0));
	memcpy(ref, a + 40, 60);
	out("the last 60 bytes: %s", !memcmp(b, ref, 60) ? "yes" : "no");
	R("recv MSG_TRUNC dontwait, empty", recv(s, b, 10, MSG_TRUNC | MSG_DONTWAIT));
}

/* MSG_TRUNC with no buffer at all: TCP never touches it. */
STREAM_SCEN(msg_trunc_null_buffer)
{
	char a[64] = { 0 }, b[64];
	int c, s;

	if (!tcp_only(f))
		return;
	fam_pair(f, &c, &s);
	R("send 64", send(c, a, 64, 0));
	msleep(20);
	R("recv NULL 16 MSG_TRUNC|MSG_PEEK", recv(s, NULL, 16, MSG_TRUNC | MSG_PEEK));
	R("recv NULL 16 MSG_TRUNC", recv(s, NULL, 16, MSG_TRUNC));
	R("recv 64", recv(s, b, 64, 0));
}

struct pieces {
	int fd, n, len, gap_ms;
	const char *buf;
};

static void *send_pieces(void *arg)
{
	struct pieces *p = arg;

	for (int i = 0; i < p->n; i++) {
		msleep(p->gap_ms);
		write_all(p->fd, p->buf + i * p->len, (size_t)p->len);
	}
	return NULL;
}

/* MSG_PEEK|MSG_WAITALL waits for the whole count on TCP (three writes 20
 * ms apart) and leaves it for the next read; a unix stream socket's peek
 * returns what has come (its result depends on timing: skipped there). */
STREAM_SCEN(msg_peek_waitall)
{
	char a[3000], b[3000], d[3000];
	struct pieces p;
	pthread_t t;
	int c, s;

	if (!tcp_only(f))
		return;
	fam_pair(f, &c, &s);
	fill(a, sizeof(a), 32);
	p = (struct pieces){ c, 3, 1000, 20, a };
	pthread_create(&t, NULL, send_pieces, &p);
	R("recv 3000 MSG_PEEK|MSG_WAITALL", recv(s, b, sizeof(b), MSG_PEEK | MSG_WAITALL));
	pthread_join(t, NULL);
	R("read 3000", read_all(s, d, sizeof(d)));
	out("peek and read got the bytes sent: %s", !memcmp(a, b, 3000) && !memcmp(a, d, 3000) ? "yes" : "no");
	R("recv dontwait, empty", recv(s, d, 10, MSG_DONTWAIT));
}

STREAM_SCEN(msg_peek_dontwait)
{
	char a[40], b[64] = { 0 };
	int c, s;

	fam_pair(f, &c, &s);
	fill(a, sizeof(a), 33);
	R("peek|dontwait, nothing there", recv(s, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT));
	R("send 40", send(c, a, 40, 0));
	wait_fd(s, POLLIN, 2000);
	R("peek|dontwait", recv(s, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT));
	R("peek|dontwait 10", recv(s, b, 10, MSG_PEEK | MSG_DONTWAIT));
	R("peek|waitall|dontwait 64", recv(s, b, sizeof(b), MSG_PEEK | MSG_WAITALL | MSG_DONTWAIT));
	R("recv 64", recv(s, b, sizeof(b), 0));
	out("same bytes: %s", memcmp(a, b, 40) ? "no" : "yes");
	R("peek|dontwait, drained", recv(s, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT));
}

/* ---- a MSG_WAITALL receive that ends early ------------------------------ */
struct waitall {
	int fd, err, done;
	long r;
	char buf[3000];
};

static void *waitall_recv(void *arg)
{
	struct waitall *w = arg;

	w->r = recv(w->fd, w->buf, sizeof(w->buf), MSG_WAITALL);
	w->err = errno;
	__atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void signal_until_done(pthread_t t, struct waitall *w)
{
	for (int i = 0; i < 500 && !__atomic_load_n(&w->done, __ATOMIC_SEQ_CST); i++) {
		pthread_kill(t, SIGUSR1);
		msleep(10);
	}
}

/* 1000 of the 3000 bytes have come when the signal lands: the receive
 * returns them (with or without SA_RESTART); with none there, a signal
 * without SA_RESTART is EINTR. */
static void waitall_signal(const struct fam *f, int restart)
{
	char a[3000], b[3000];
	struct waitall w = { 0 };
	pthread_t t;
	int c, s;

	handle_usr1(restart);
	fam_pair(f, &c, &s);
	fill(a, sizeof(a), 34);
	w.fd = s;
	pthread_create(&t, NULL, waitall_recv, &w);
	R("send 1000", send(c, a, 1000, 0));
	msleep(30);
	signal_until_done(t, &w);
	pthread_join(t, NULL);
	rec("recv 3000 MSG_WAITALL", w.r, w.err);
	out("handler ran: %s, same bytes: %s", got_usr1 ? "yes" : "no", memcmp(a, w.buf, 1000) ? "no" : "yes");
	R("send 2000", send(c, a + 1000, 2000, 0));
	R("recv 2000 MSG_WAITALL", recv(s, b, 2000, MSG_WAITALL));
	out("same bytes: %s", memcmp(a + 1000, b, 2000) ? "no" : "yes");
	if (!restart) {
		w = (struct waitall){ .fd = s };
		pthread_create(&t, NULL, waitall_recv, &w);
		msleep(30);
		signal_until_done(t, &w);
		pthread_join(t, NULL);
		rec("recv 3000 MSG_WAITALL, nothing there", w.r, w.err);
	}
}

STREAM_SCEN(msg_waitall_signal) { waitall_signal(f, 0); }
STREAM_SCEN(msg_waitall_signal_restart) { waitall_signal(f, 1); }

STREAM_SCEN(msg_waitall_rcvtimeo)
{
	struct timeval tv = { 0, 50000 };
	char a[1000] = { 0 }, b[3000];
	struct timespec t0;
	int c, s;

	fam_pair(f, &c, &s);
	R("SO_RCVTIMEO 50ms", setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	R("send 1000", send(c, a, 1000, 0));
	now(&t0);
	R("recv 3000 MSG_WAITALL", recv(s, b, sizeof(b), MSG_WAITALL));
	out("waited >= 40ms: %s", ms_since(&t0) >= 40 ? "yes" : "no");
	now(&t0);
	R("recv 3000 MSG_WAITALL, nothing there", recv(s, b, sizeof(b), MSG_WAITALL));
	out("waited >= 40ms: %s", ms_since(&t0) >= 40 ? "yes" : "no");
}

static void *send_then_shutdown(void *arg)
{
	int fd = *(int *)arg;

	msleep(20);
	send(fd, "0123456789", 10, 0);
	msleep(20);
	shutdown(fd, SHUT_WR);
	return NULL;
}

STREAM_SCEN(msg_waitall_peer_shutdown)
{
	char b[3000];
	pthread_t t;
	int c, s;

	fam_pair(f, &c, &s);
	pthread_create(&t, NULL, send_then_shutdown, &c);
	R("recv 3000 MSG_WAITALL", recv(s, b, sizeof(b), MSG_WAITALL));
	pthread_join(t, NULL);
	out("data: %.10s", b);
	R("recv again", recv(s, b, sizeof(b), MSG_WAITALL));
}

STREAM_SCEN(msg_waitall_dontwait)
{
	char a[100] = { 0 }, b[3000];
	int c, s;

	fam_pair(f, &c, &s);
	R("waitall|dontwait, nothing there", recv(s, b, sizeof(b), MSG_WAITALL | MSG_DONTWAIT));
	R("send 100", send(c, a, 100, 0));
	wait_fd(s, POLLIN, 2000);
	msleep(10);
	R("waitall|dontwait 3000", recv(s, b, sizeof(b), MSG_WAITALL | MSG_DONTWAIT));
}

/* MSG_PEEK|MSG_WAITALL with part of it there: SO_RCVTIMEO ends the wait
 * with what is there (and no spinning meanwhile: the CPU it took is
 * printed as a yes/no against a generous bound). */
STREAM_SCEN(msg_peek_waitall_rcvtimeo)
{
	struct timeval tv = { 0, 200000 };
	char a[100] = { 0 }, b[1000];
	struct timespec t0;
	int c, s;

	if (!tcp_only(f))
		return;
	fam_pair(f, &c, &s);
	R("SO_RCVTIMEO 200ms", setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	R("send 100", send(c, a, sizeof(a), 0));
	wait_fd(s, POLLIN, 2000);
	now(&t0);
	clock_t cpu0 = clock();
	R("peek|waitall 1000", recv(s, b, sizeof(b), MSG_PEEK | MSG_WAITALL));
	out("waited >= 150ms: %s, spun: %s", ms_since(&t0) >= 150 ? "yes" : "no",
	    clock() - cpu0 > CLOCKS_PER_SEC / 10 ? "yes" : "no");
	R("read 1000", recv(s, b, sizeof(b), 0));
}

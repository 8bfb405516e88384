/* Blocking writes against a full peer: every kind of send call, from 1 B
 * to 64 MiB, waits until the reader makes room and then returns its full
 * count, with every byte delivered once and in order; a signal or
 * SO_SNDTIMEO ends such a write with what it had sent (or EINTR/EAGAIN
 * when that is nothing).  "Full" means the peer's whole receive path: the
 * kernel's buffers natively, the ring (256 KiB by default) and the kernel
 * socket under dsock; sizes above both make even an empty peer fill up. */
#include "conf.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define MIB (1L << 20)
#define BIG (64 * MIB)
static const long SIZES[] = { 1, 1000, 300000, 600000, 4 * MIB, BIG };
#define NSIZES ((int)(sizeof(SIZES) / sizeof(SIZES[0])))
/* the reader's pause before it reads: the writer is blocked by then */
#define READER_DELAY_MS 30

/* Bytes that differ with the seed and the position (xorshift), fast
 * enough for 64 MiB; and a hash over them, 8 bytes a step. */
static void pattern(char *buf, long n, unsigned seed)
{
	uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);

	for (long i = 0; i < n; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(buf + i, &x, n - i < 8 ? (size_t)(n - i) : 8);
	}
}

static uint64_t hash64(const char *buf, long n)
{
	uint64_t h = 0xcbf29ce484222325ull, w;
	long i = 0;

	for (; i + 8 <= n; i += 8) {
		memcpy(&w, buf + i, 8);
		h = (h ^ w) * 0x100000001b3ull;
		h ^= h >> 29;
	}
	for (; i < n; i++)
		h = (h ^ (unsigned char)buf[i]) * 0x100000001b3ull;
	return h;
}

/* Reads and drops skip bytes, then reads n bytes into buf. */
struct reader {
	int fd, delay_ms;
	long skip, n, got;
	char *buf;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	char *junk = malloc(65536);

	msleep(r->delay_ms);
	for (long left = r->skip; left > 0;) {
		ssize_t k = read(r->fd, junk, left < 65536 ? (size_t)left : 65536);
		if (k <= 0) {
			r->got = k < 0 ? -errno : -1000;
			free(junk);
			return NULL;
		}
		left -= k;
	}
	r->got = read_all(r->fd, r->buf, (size_t)r->n);
	free(junk);
	return NULL;
}

enum kind { K_SEND, K_SENDMSG, K_WRITEV, K_WRITE, K_SENDTO, K_SENDMMSG, K_SENDFILE };

/* One blocking write of n bytes of buf by the call of kind k (vectored
 * ones in three pieces, the first possibly empty; sendmmsg as two
 * messages; sendfile from a file holding them, its offset given); prints
 * its result. */
static void blocking_write(enum kind k, int fd, char *buf, long n)
{
	char label[64];
	size_t a = (size_t)n / 4, b = (size_t)n / 2, z = (size_t)n - a - b;
	struct iovec v[3] = { { buf, a }, { buf + a, b }, { buf + a + b, z } };
	struct msghdr m = { .msg_iov = v, .msg_iovlen = 3 };
	struct iovec mv[2] = { { buf, (size_t)n / 2 }, { buf + n / 2, (size_t)(n - n / 2) } };
	struct mmsghdr mm[2] = { { .msg_hdr = { .msg_iov = &mv[0], .msg_iovlen = 1 } },
				 { .msg_hdr = { .msg_iov = &mv[1], .msg_iovlen = 1 } } };

	switch (k) {
	case K_SEND:
		snprintf(label, sizeof(label), "send %ld", n);
		R(label, send(fd, buf, (size_t)n, 0));
		break;
	case K_SENDMSG:
		snprintf(label, sizeof(label), "sendmsg 3 iovecs, %ld", n);
		R(label, sendmsg(fd, &m, 0));
		break;
	case K_WRITEV:
		snprintf(label, sizeof(label), "writev 3 iovecs, %ld", n);
		R(label, writev(fd, v, 3));
		break;
	case K_WRITE:
		snprintf(label, sizeof(label), "write %ld", n);
		R(label, write(fd, buf, (size_t)n));
		break;
	case K_SENDTO:
		snprintf(label, sizeof(label), "sendto %ld", n);
		R(label, sendto(fd, buf, (size_t)n, 0, NULL, 0));
		break;
	case K_SENDMMSG:
		snprintf(label, sizeof(label), "sendmmsg 2 messages, %ld", n);
		R(label, sendmmsg(fd, mm, 2, 0));
		out("  message lengths: %u + %u", mm[0].msg_len, mm[1].msg_len);
		break;
	case K_SENDFILE: {
		int file = memfd_create("conf-sendfile", MFD_CLOEXEC);
		off_t off = 0;
		if (file < 0 || write_all(file, buf, (size_t)n) != n) {
			out("sendfile: no file (%s)", ename(errno));
			break;
		}
		snprintf(label, sizeof(label), "sendfile %ld", n);
		R(label, sendfile(fd, file, &off, (size_t)n));
		out("  offset after: %lld", (long long)off);
		close(file);
		break;
	}
	}
}

static void blocking_writes(const struct fam *f, enum kind k)
{
	char *src = malloc(BIG), *dst = malloc(BIG);
	int c, s;

	fam_pair(f, &c, &s);
	for (int i = 0; i < NSIZES; i++) {
		long n = SIZES[i], filled;
		struct reader r = { .fd = s, .delay_ms = READER_DELAY_MS, .n = n, .buf = dst };
		pthread_t t;

		pattern(src, n, (unsigned)(k * NSIZES + i));
		memset(dst, 0, (size_t)n);
		filled = fill_until_eagain(c); /* the peer is full: the write must wait */
		r.skip = filled;
		pthread_create(&t, NULL, reader_main, &r);
		blocking_write(k, c, src, n);
		pthread_join(t, NULL);
		out("  reader got %ld after the fill, hash %016llx, same as sent: %s", r.got,
		    (unsigned long long)hash64(dst, n), r.got == n && !memcmp(src, dst, (size_t)n) ? "yes" : "no");
	}
	R("recv dontwait: nothing more", recv(s, dst, 16, MSG_DONTWAIT));
	free(src);
	free(dst);
}

STREAM_SCEN(blocking_send_full_peer) { blocking_writes(f, K_SEND); }
STREAM_SCEN(blocking_sendmsg_full_peer) { blocking_writes(f, K_SENDMSG); }
STREAM_SCEN(blocking_writev_full_peer) { blocking_writes(f, K_WRITEV); }
STREAM_SCEN(blocking_write_full_peer) { blocking_writes(f, K_WRITE); }
STREAM_SCEN(blocking_sendto_full_peer) { blocking_writes(f, K_SENDTO); }
STREAM_SCEN(blocking_sendmmsg_full_peer) { blocking_writes(f, K_SENDMMSG); }
STREAM_SCEN(blocking_sendfile_full_peer) { blocking_writes(f, K_SENDFILE); }

/* ---- a blocked write ended by a signal or a timeout ---------------------- */
struct writer {
	int fd;
	const char *buf;
	long n, r;
	int err, done;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;

	w->r = send(w->fd, w->buf, (size_t)w->n, 0);
	w->err = errno;
	__atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/* Signals t every 10 ms until the writer returns: one that lands before
 * the call blocks is simply handled, the next one interrupts it. */
static void signal_until_done(pthread_t t, struct writer *w)
{
	for (int i = 0; i < 500 && !__atomic_load_n(&w->done, __ATOMIC_SEQ_CST); i++) {
		pthread_kill(t, SIGUSR1);
		msleep(10);
	}
}

/* Reads to EOF into buf (up to cap); returns the count. */
static long read_eof_into(int fd, char *buf, long cap)
{
	long got = 0;
	ssize_t k;
	char junk[4096];

	while ((k = read(fd, got < cap ? buf + got : junk, got < cap ? (size_t)(cap - got) : sizeof(junk))) > 0)
		got += k;
	return got;
}

/* A 32 MiB send to a peer that does not read blocks once the peer is
 * full; a signal (no SA_RESTART) ends it with the count it had sent, and
 * the reader gets exactly those bytes. */
STREAM_SCEN(blocking_send_signal_partial)
{
	const long n = 32 * MIB;
	char *src = malloc(n), *dst = malloc(n);
	struct writer w = { .buf = src, .n = n };
	pthread_t t;
	long got;
	int c, s;

	handle_usr1(0);
	pattern(src, n, 99);
	fam_pair(f, &c, &s);
	w.fd = c;
	pthread_create(&t, NULL, writer_main, &w);
	msleep(50);
	signal_until_done(t, &w);
	pthread_join(t, NULL);
	out("send returned a partial count >0: %s", w.r > 0 && w.r < n ? "yes" : w.r < 0 ? ename(w.err) : "no");
	out("handler ran: %s", got_usr1 > 0 ? "yes" : "no");
	R("shutdown WR", shutdown(c, SHUT_WR));
	got = read_eof_into(s, dst, n);
	out("reader got exactly as many bytes as were reported sent: %s", got == w.r ? "yes" : "no");
	out("same bytes: %s", got > 0 && got <= n && !memcmp(src, dst, (size_t)got) ? "yes" : "no");
	free(src);
	free(dst);
}

/* On a peer that is full for good the blocked send has copied nothing:
 * a signal without SA_RESTART makes it EINTR and none of its bytes go;
 * with SA_RESTART the send goes on and returns its full count once the
 * reader makes room. */
static void signal_on_full_peer(const struct fam *f, int restart)
{
	char src[1000], dst[1000];
	struct writer w = { .buf = src, .n = sizeof(src) };
	struct reader r = { .n = sizeof(dst), .buf = dst };
	pthread_t t, rt;
	int c, s;

	handle_usr1(restart);
	fill(src, sizeof(src), 5);
	fam_pair(f, &c, &s);
	r.skip = fill_full(c);
	w.fd = c;
	pthread_create(&t, NULL, writer_main, &w);
	msleep(30);
	if (restart) {
		pthread_kill(t, SIGUSR1);
		msleep(30);
		out("handler ran: %s", got_usr1 > 0 ? "yes" : "no");
		r.fd = s;
		pthread_create(&rt, NULL, reader_main, &r);
		pthread_join(t, NULL);
		pthread_join(rt, NULL);
		rec("blocked send", w.r, w.err);
		out("reader got %ld after the fill, same as sent: %s", r.got, !memcmp(src, dst, sizeof(dst)) ? "yes" : "no");
	} else {
		signal_until_done(t, &w);
		pthread_join(t, NULL);
		rec("blocked send", w.r, w.err);
		r.fd = s;
		r.n = 0;
		reader_main(&r);
		out("reader drained the fill: %s", r.got == 0 ? "yes" : "no");
	}
	R("recv dontwait: nothing more", recv(s, dst, sizeof(dst), MSG_DONTWAIT));
}

STREAM_SCEN(blocking_send_signal_eintr) { signal_on_full_peer(f, 0); }
STREAM_SCEN(blocking_send_signal_restart) { signal_on_full_peer(f, 1); }

/* SO_SNDTIMEO: a 32 MiB send to a peer that does not read times out with
 * the count it sent; then, the peer full for good, a send times out with
 * EAGAIN.  The reader gets exactly the bytes reported sent. */
STREAM_SCEN(blocking_send_sndtimeo_partial)
{
	const long n = 32 * MIB;
	struct timeval tv = { 0, 50000 };
	char *src = malloc(n), *dst = malloc(n);
	struct timespec t0;
	long r, filled, got;
	int c, s;

	pattern(src, n, 98);
	fam_pair(f, &c, &s);
	R("SO_SNDTIMEO 50ms", setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)));
	now(&t0);
	r = send(c, src, (size_t)n, 0);
	out("send timed out with a partial count >0: %s", r > 0 && r < n ? "yes" : r < 0 ? ename(errno) : "no");
	out("waited >= 40ms: %s", ms_since(&t0) >= 40 ? "yes" : "no");
	filled = fill_full(c);
	now(&t0);
	R("send 1000 on a full peer", send(c, src, 1000, 0));
	out("waited >= 40ms: %s", ms_since(&t0) >= 40 ? "yes" : "no");
	R("shutdown WR", shutdown(c, SHUT_WR));
	got = read_eof_into(s, dst, n);
	out("reader got exactly the bytes reported sent (and the fill): %s", got == r + filled ? "yes" : "no");
	out("same bytes: %s", r > 0 && r <= n && !memcmp(src, dst, (size_t)r) ? "yes" : "no");
	free(src);
	free(dst);
}

/* The channel's core (src/lib/chan/chan.h), its streams' ends: SHUT_RD
 * answered by the peer's EOF, a stream let go of with bytes unread (the
 * peer's ECONNRESET), and a stream's level eventfds. */
#include "chan_pair.h"

#include <poll.h>
#include <pthread.h>

/* SHUT_RD: what the peer sent before it read the STOP still arrives, in
 * order, then its EOF; its sends fail from then on. */
static void stop_flush(void)
{
	struct ch c[2];
	char b[64];
	struct iovec v = { b, 3 };

	chans(c, 4);
	memcpy(b, "abc", 3);
	ASSERT_EQ(ch_send(&c[0], 1, &v, 1, 0, FOREVER), 3);
	ASSERT_EQ(ch_shutdown(&c[1], 1, SHUT_RD), 0);
	memcpy(b, "def", 3);
	ASSERT_EQ(ch_send(&c[0], 1, &v, 1, 0, FOREVER), 3); /* (the STOP not read yet) */
	ssize_t r = 0;
	for (int i = 0; i < 1000 && r >= 0; i++) {
		ch_progress(&c[0]);
		r = ch_send(&c[0], 1, &v, 1, MSG_DONTWAIT, FOREVER);
		usleep(100);
	}
	ASSERT_EQ(r, -EPIPE);
	v.iov_len = sizeof(b);
	memset(b, 0, sizeof(b));
	ASSERT_EQ(ch_recv(&c[1], 1, &v, 1, MSG_WAITALL, mono_ns() + 2000000000LL), 6);
	ASSERT_TRUE(!memcmp(b, "abcdef", 6));
	ASSERT_EQ(ch_recv(&c[1], 1, &v, 1, 0, FOREVER), 0);
	ch_close(&c[0]);
	ch_close(&c[1]);
}

/* A stream let go of with bytes unread: its peer reads what came before,
 * then ECONNRESET once (POLLERR until then), then the end; let go of with
 * nothing unread: the end alone. */
static void close_reset(void)
{
	struct ch c[2];
	char b[64];
	struct iovec v = { b, 3 };

	chans(c, 8);
	memcpy(b, "xyz", 3);
	ASSERT_EQ(ch_send(&c[0], 1, &v, 1, 0, FOREVER), 3);
	memcpy(b, "hi", 2);
	v.iov_len = 2;
	ASSERT_EQ(ch_send(&c[1], 1, &v, 1, 0, FOREVER), 2);
	ASSERT_EQ(ch_send(&c[1], 2, &v, 1, 0, FOREVER), 2);
	for (int i = 0; i < 1000 && ch_readable(&c[1], 1) < 3; i++) {
		ch_progress(&c[1]);
		usleep(100);
	}
	ASSERT_EQ(ch_readable(&c[1], 1), 3);
	ASSERT_EQ(ch_close_stream(&c[1], 1), 0);
	ASSERT_EQ(ch_close_stream(&c[1], 2), 0); /* (nothing unread on 2) */
	short ev = 0;
	for (int i = 0; i < 1000 && !(ev & POLLERR); i++) {
		ev = ch_poll(&c[0], 1, POLLIN);
		usleep(100);
	}
	ASSERT_EQ(ev & (POLLIN | POLLERR), POLLIN | POLLERR);
	v.iov_len = sizeof(b);
	ASSERT_EQ(ch_recv(&c[0], 1, &v, 1, 0, FOREVER), 2);
	ASSERT_EQ(ch_recv(&c[0], 1, &v, 1, 0, FOREVER), -ECONNRESET);
	ASSERT_EQ(ch_recv(&c[0], 1, &v, 1, 0, FOREVER), 0);
	ASSERT_EQ(ch_poll(&c[0], 1, POLLIN) & POLLERR, 0);
	ASSERT_EQ(ch_send(&c[0], 1, &v, 1, 0, FOREVER), -EPIPE);
	ASSERT_EQ(ch_recv(&c[0], 2, &v, 1, 0, FOREVER), 2);
	ASSERT_EQ(ch_recv(&c[0], 2, &v, 1, 0, FOREVER), 0);
	/* bytes still in the socket when their stream is let go of are
	 * unread too; so are bytes sent after it was (in flight) */
	v.iov_len = 3;
	ASSERT_EQ(ch_send(&c[0], 3, &v, 1, 0, FOREVER), 3);
	usleep(2000);
	ASSERT_EQ(ch_close_stream(&c[1], 3), 0);
	ASSERT_EQ(ch_close_stream(&c[1], 4), 0);
	ASSERT_EQ(ch_send(&c[0], 4, &v, 1, 0, FOREVER), 3); /* (the STOP not read yet) */
	v.iov_len = sizeof(b);
	for (int st = 3; st <= 4; st++) {
		ssize_t r = -EAGAIN;
		for (int i = 0; i < 2000 && r == -EAGAIN; i++) {
			ch_progress(&c[1]);
			r = ch_recv(&c[0], (unsigned)st, &v, 1, MSG_DONTWAIT, FOREVER);
			usleep(100);
		}
		ASSERT_EQ(r, -ECONNRESET);
		ASSERT_EQ(ch_recv(&c[0], (unsigned)st, &v, 1, 0, FOREVER), 0);
	}
	ch_close(&c[0]);
	ch_close(&c[1]);
}

static int readable_now(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/* Until fd is readable, one second at most, as c reads its socket. */
static void await_readable(struct ch *c, int fd)
{
	for (int i = 0; i < 1000 && !readable_now(fd); i++) {
		ch_progress(c);
		usleep(100);
	}
}

/* A stream's level eventfds follow its state: IN from an arrival (a new
 * count at each) until it is read, and from the EOF on; OUT while the
 * credit lasts, back once the reader credits; the IN level's mark. */
static void levels(void)
{
	struct ch c[2];
	unsigned char *b = malloc(CH_RING);
	struct iovec v = { b, 5 };
	int lv[2], lw[2];
	uint64_t n;

	chans(c, 4);
	ASSERT_EQ(ch_levels(&c[1], 1, lv), 0);
	ASSERT_EQ(ch_levels(&c[0], 1, lw), 0);
	ASSERT_EQ(readable_now(lv[0]), 0);
	ASSERT_EQ(readable_now(lw[1]), 1); /* (credit: a send would not wait) */
	memcpy(b, "hello", 5);
	ASSERT_EQ(ch_send(&c[0], 1, &v, 1, 0, FOREVER), 5);
	await_readable(&c[1], lv[0]);
	ASSERT_EQ(readable_now(lv[0]), 1);
	ASSERT_EQ(ch_recv(&c[1], 1, &v, 1, 0, FOREVER), 5);
	ASSERT_EQ(readable_now(lv[0]), 0);
	/* a second arrival writes a new count (an edge) though still readable */
	ASSERT_EQ(ch_send(&c[0], 1, &v, 1, 0, FOREVER), 5);
	await_readable(&c[1], lv[0]);
	ASSERT_EQ(read(lv[0], &n, sizeof(n)), (ssize_t)sizeof(n)); /* (takes the count: a poller's edge) */
	ASSERT_EQ(ch_send(&c[0], 1, &v, 1, 0, FOREVER), 5);
	await_readable(&c[1], lv[0]);
	ASSERT_EQ(readable_now(lv[0]), 1);
	v.iov_len = 10;
	ASSERT_EQ(ch_recv(&c[1], 1, &v, 1, MSG_WAITALL, FOREVER), 10);
	ASSERT_EQ(readable_now(lv[0]), 0);
	/* the mark: 3 bytes do not make it readable, 8 do */
	ch_set_lowat(&c[1], 1, 8);
	v.iov_len = 3;
	ASSERT_EQ(ch_send(&c[0], 1, &v, 1, 0, FOREVER), 3);
	for (int i = 0; i < 50; i++) {
		ch_progress(&c[1]);
		usleep(100);
	}
	ASSERT_EQ(readable_now(lv[0]), 0);
	v.iov_len = 5;
	ASSERT_EQ(ch_send(&c[0], 1, &v, 1, 0, FOREVER), 5);
	await_readable(&c[1], lv[0]);
	ASSERT_EQ(readable_now(lv[0]), 1);
	v.iov_len = 8;
	ASSERT_EQ(ch_recv(&c[1], 1, &v, 1, MSG_WAITALL, FOREVER), 8);
	ch_set_lowat(&c[1], 1, 0);
	/* OUT: a full credit's worth unread makes it unwritable, until read
	 * (what was read since the last quarter's credit rides on the
	 * reader's next DATA: the send takes the rest) */
	for (int i = 0; i < 50; i++) { /* (the reader's credits back first) */
		ch_progress(&c[0]);
		usleep(100);
	}
	v.iov_len = CH_RING;
	ssize_t sent = ch_send(&c[0], 1, &v, 1, MSG_DONTWAIT, FOREVER);
	ASSERT_TRUE(sent > (ssize_t)(CH_RING - CH_RING / 4) && sent <= (ssize_t)CH_RING);
	ASSERT_EQ(readable_now(lw[1]), 0);
	v.iov_len = sent > 0 ? (size_t)sent : 1;
	ASSERT_EQ(ch_recv(&c[1], 1, &v, 1, MSG_WAITALL, mono_ns() + 2000000000LL), sent);
	await_readable(&c[0], lw[1]);
	ASSERT_EQ(readable_now(lw[1]), 1);
	/* the EOF makes IN readable for good */
	ASSERT_EQ(ch_shutdown(&c[0], 1, SHUT_WR), 0);
	await_readable(&c[1], lv[0]);
	ASSERT_EQ(readable_now(lv[0]), 1);
	free(b);
	ch_close(&c[0]);
	ch_close(&c[1]);
}

/* Bytes read and not credited yet (under a quarter, the ring drained)
 * are credited once the sender runs short, so a reader that waits for a
 * message whole without reading it (here: for 120,000 bytes readable)
 * gets it, as it would a ring's worth with everything credited. */
static struct ch uc[2];

static void *send_whole(void *arg)
{
	static char big[CH_RING + 30000];
	size_t want = (size_t)(long)arg, done = 0;

	while (done < want) {
		struct iovec v = { big, want - done };
		ssize_t r = ch_send(&uc[0], 1, &v, 1, 0, mono_ns() + 5000000000LL);
		if (r < 0)
			break;
		done += (size_t)r;
	}
	return (void *)(long)done;
}

static void uncredited_then_whole(void)
{
	static char b[30000];
	struct iovec v = { b, sizeof(b) };
	pthread_t t;
	void *sent = NULL;
	size_t have = 0;

	chans(uc, 2);
	ASSERT_EQ(ch_send(&uc[0], 1, &v, 1, 0, FOREVER), (ssize_t)sizeof(b));
	ASSERT_EQ(ch_recv(&uc[1], 1, &v, 1, MSG_WAITALL, FOREVER), (ssize_t)sizeof(b));
	for (int i = 0; i < 20; i++) {
		ch_progress(&uc[0]);
		ch_progress(&uc[1]);
		usleep(1000);
	}
	ASSERT_EQ(pthread_create(&t, NULL, send_whole, (void *)120000L), 0);
	for (int64_t end = mono_ns() + 5000000000LL; mono_ns() < end && have < 120000; usleep(1000)) {
		ch_progress(&uc[1]);
		have = ch_readable(&uc[1], 1);
	}
	pthread_join(t, &sent);
	ASSERT_EQ(have, 120000);
	ASSERT_EQ((long)sent, 120000);
	ch_close(&uc[0]);
	ch_close(&uc[1]);
}

/* A read of a full ring under a quarter (but sizeable) credits at once
 * when the sender runs short: the sender's blocked send goes on while
 * the reader only waits (an edge-triggered poller that read a part has
 * no new edge to wake for otherwise). */
static void part_of_full_ring(void)
{
	static char b[30000];
	struct iovec v = { b, sizeof(b) };
	pthread_t t;
	void *sent = NULL;

	chans(uc, 2);
	ASSERT_EQ(pthread_create(&t, NULL, send_whole, (void *)(long)(CH_RING + sizeof(b))), 0);
	for (int64_t end = mono_ns() + 5000000000LL; mono_ns() < end && ch_readable(&uc[1], 1) < CH_RING; usleep(1000))
		ch_progress(&uc[1]);
	ASSERT_EQ(ch_readable(&uc[1], 1), CH_RING);
	ASSERT_EQ(ch_recv(&uc[1], 1, &v, 1, MSG_WAITALL, FOREVER), (ssize_t)sizeof(b));
	/* (no look at the channel here: the credit went with the read) */
	pthread_join(t, &sent);
	ASSERT_EQ((long)sent, (long)(CH_RING + sizeof(b)));
	ch_close(&uc[0]);
	ch_close(&uc[1]);
}

int main(void)
{
	stop_flush();
	close_reset();
	levels();
	uncredited_then_whole();
	part_of_full_ring();
	if (unit_failures)
		fprintf(stderr, "test_chan_ends: %d failures\n", unit_failures);
	return unit_failures ? 1 : 0;
}

/* The channel's core: its state, the frame ring and the reader (chan.h). */
#include "lib/chan/chan_int.h"
#include "lib/base/pmutex.h"
#include "lib/base/real.h"
#include "common/rawsys.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#define CH_STREAMS_MAX 65536
#define READ_BUF       16384 /* the reader's buffer, on its caller's stack */
#define READS_MAX      16    /* per look: a peer that streams frames does not hold it */
#define SEALS          (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

_Static_assert(READ_BUF <= CH_RING, "a read's DATA part must fit a ring");

/* The death itself, without the bump (ch_bump's own failure): 1 if it
 * is the first. */
static int ch_kill_quiet(struct ch *c, int err)
{
	int32_t zero = 0;

	return __atomic_compare_exchange_n(&c->sh->dead, &zero, err, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

void ch_kill(struct ch *c, int err)
{
	if (ch_kill_quiet(c, err))
		ch_bump(c);
}

int ch_lock(struct ch *c, pthread_mutex_t *m, int try)
{
	int r = try ? pthread_mutex_trylock(m) : pthread_mutex_lock(m);

	if (r == EOWNERDEAD) {
		if (m == &c->sh->tx_mu || (m == &c->sh->rx_mu && __atomic_load_n(&c->sh->filing, __ATOMIC_ACQUIRE)))
			ch_kill(c, ECONNRESET);
		if (m == &c->sh->rx_mu)
			__atomic_store_n(&c->sh->filing, 0, __ATOMIC_RELEASE);
		pthread_mutex_consistent(m);
		return 0;
	}
	return -r;
}

void ch_bump(struct ch *c)
{
	__atomic_add_fetch(&c->sh->seq, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&c->sh->waiters, __ATOMIC_SEQ_CST))
		dsock_sys(SYS_futex, &c->sh->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	if (__atomic_load_n(&c->sh->asleep, __ATOMIC_SEQ_CST)) {
		uint64_t one = 1;
		if (dsock_real.write(c->nudge, &one, sizeof(one)) < 0 && errno != EAGAIN)
			ch_kill_quiet(c, errno);
	}
}

/* ---- state ------------------------------------------------------------- */

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

/* The layout of a channel of n streams, into c. */
static void layout(struct ch *c, unsigned n)
{
	c->nstreams = n;
	c->streams_off = align_up(sizeof(struct ch_shared), 64);
	c->txring_off = align_up(c->streams_off + (uint64_t)n * sizeof(struct ch_stream), 4096);
	c->rings_off = c->txring_off + CH_TXRING;
	c->size = c->rings_off + (uint64_t)n * CH_RING;
}

static int map(struct ch *c, int fd, int memfd, int nudge)
{
	void *p = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);

	if (p == MAP_FAILED)
		return -errno;
	c->sh = p;
	c->fd = fd;
	c->memfd = memfd;
	c->nudge = nudge;
	c->lvl = NULL;
	return 0;
}

int ch_create(struct ch *c, int fd, unsigned nstreams)
{
	int memfd, nudge, r;

	if (!nstreams || nstreams > CH_STREAMS_MAX)
		return -EINVAL;
	layout(c, nstreams);
	if ((memfd = memfd_create("dsock-channel", MFD_CLOEXEC | MFD_ALLOW_SEALING)) < 0)
		return -errno;
	if ((nudge = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
		r = -errno;
		close(memfd);
		return r;
	}
	if (ftruncate(memfd, (off_t)c->size) < 0 || fcntl(memfd, F_ADD_SEALS, SEALS) < 0 ||
	    (errno = -map(c, fd, memfd, nudge))) {
		r = -errno;
		close(memfd);
		close(nudge);
		return r;
	}
	/* (a fresh memfd is zeros: every stream starts empty) */
	c->sh->nstreams = nstreams;
	c->sh->streams_off = c->streams_off;
	c->sh->txring_off = c->txring_off;
	c->sh->rings_off = c->rings_off;
	c->sh->size = c->size;
	if ((r = dsock_pmutex_init(&c->sh->rx_mu)) || (r = dsock_pmutex_init(&c->sh->tx_mu)) ||
	    (r = dsock_pmutex_init(&c->sh->rd_mu))) {
		c->fd = -1; /* (the caller's still) */
		ch_close(c);
		return r;
	}
	c->sh->version = CH_VERSION;
	__atomic_store_n(&c->sh->magic, CH_MAGIC, __ATOMIC_RELEASE);
	return 0;
}

int ch_attach(struct ch *c, int fd, int memfd, int nudge)
{
	struct ch_shared h;
	struct stat st;

	if (fstat(memfd, &st) < 0)
		return -errno;
	if ((size_t)st.st_size < sizeof(h) || pread(memfd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    fcntl(memfd, F_GET_SEALS) != SEALS)
		return -EPROTO;
	if (h.magic != CH_MAGIC || h.version != CH_VERSION || !h.nstreams || h.nstreams > CH_STREAMS_MAX)
		return -EPROTO;
	/* (the layout is computed here, and the file must agree) */
	layout(c, h.nstreams);
	if (h.streams_off != c->streams_off || h.txring_off != c->txring_off || h.rings_off != c->rings_off ||
	    h.size != c->size || (uint64_t)st.st_size != c->size)
		return -EPROTO;
	return map(c, fd, memfd, nudge);
}

void ch_close(struct ch *c)
{
	if (c->sh)
		munmap(c->sh, c->size);
	c->sh = NULL;
	if (c->fd >= 0)
		dsock_real.close(c->fd);
	if (c->memfd >= 0)
		dsock_real.close(c->memfd);
	if (c->nudge >= 0)
		dsock_real.close(c->nudge);
	c->fd = c->memfd = c->nudge = -1;
	if (c->lvl) {
		for (unsigned i = 0; i < 2 * c->nstreams; i++)
			if (c->lvl[i] >= 0)
				dsock_real.close(c->lvl[i]);
		free(c->lvl);
		c->lvl = NULL;
	}
}

/* ---- frames out (tx_mu held) ---------------------------------------------- */

uint64_t ch_tx_room(struct ch *c)
{
	uint64_t used = __atomic_load_n(&c->sh->tx_tail, __ATOMIC_RELAXED) -
			__atomic_load_n(&c->sh->tx_head, __ATOMIC_RELAXED);

	if (used > CH_TXRING) {
		ch_kill(c, ECONNRESET); /* (a holder scribbled on the ring's counts) */
		return 0;
	}
	return CH_TXRING - used;
}

void ch_tx_put(struct ch *c, const void *p, size_t n)
{
	uint64_t t = __atomic_load_n(&c->sh->tx_tail, __ATOMIC_RELAXED), at = t % CH_TXRING;
	size_t first = CH_TXRING - at < n ? (size_t)(CH_TXRING - at) : n;

	memcpy(ch_txring(c) + at, p, first);
	memcpy(ch_txring(c), (const char *)p + first, n - first);
	__atomic_store_n(&c->sh->tx_tail, t + n, __ATOMIC_RELEASE);
}

void ch_tx_frame(struct ch *c, unsigned st, unsigned type, uint64_t arg)
{
	unsigned char h[CH_HDR] = { 0 };
	uint32_t s = htole32(st);
	uint16_t t = htole16((uint16_t)type);
	uint64_t a = htole64(arg);

	memcpy(h, &s, 4);
	memcpy(h + 4, &t, 2);
	memcpy(h + 8, &a, 8);
	ch_tx_put(c, h, sizeof(h));
}

/* A CREDIT of the stream's consumption now. */
static void credit_frame(struct ch *c, unsigned st)
{
	struct ch_stream *s = ch_stream_at(c, st);
	uint64_t head = __atomic_load_n(&s->rx_head, __ATOMIC_ACQUIRE);

	ch_tx_frame(c, st, CH_CREDIT, head);
	/* (release: the pumper writes where the reader read only after it
	 * has seen this) */
	__atomic_store_n(&s->credited, head, __ATOMIC_RELEASE);
}

/* Frame type what of stream st now, or owed when the ring has no room. */
static void control(struct ch *c, unsigned st, unsigned what)
{
	struct ch_stream *s = ch_stream_at(c, st);

	/* (behind frames it owes already: a stream's frames keep their order) */
	if (!s->owe && ch_tx_room(c) >= CH_HDR) {
		if (what == CH_OWE_CREDIT)
			credit_frame(c, st);
		else if (what == CH_OWE_EOF)
			ch_tx_frame(c, st, CH_EOF, __atomic_load_n(&s->tx_sent, __ATOMIC_RELAXED));
		else
			ch_tx_frame(c, st, CH_STOP, what & CH_OWE_RESET ? CH_STOP_RESET : 0);
		return;
	}
	if (!s->owe)
		c->sh->owing++;
	s->owe |= what;
}

/* The owed control frames that fit now, in stream order. */
static void pay(struct ch *c)
{
	for (unsigned st = 0; st < c->nstreams && c->sh->owing; st++) {
		struct ch_stream *s = ch_stream_at(c, st);
		unsigned owe = s->owe, n = __builtin_popcount(owe & 7);

		if (!owe)
			continue;
		if (ch_tx_room(c) < (uint64_t)n * CH_HDR)
			return;
		/* (a STOP before an EOF: a receiver finds the reset before
		 * the end) */
		if (owe & CH_OWE_CREDIT)
			credit_frame(c, st);
		if (owe & CH_OWE_STOP)
			ch_tx_frame(c, st, CH_STOP, owe & CH_OWE_RESET ? CH_STOP_RESET : 0);
		if (owe & CH_OWE_EOF)
			ch_tx_frame(c, st, CH_EOF, __atomic_load_n(&s->tx_sent, __ATOMIC_RELAXED));
		s->owe = 0;
		c->sh->owing--;
	}
}

int ch_tx_flush(struct ch *c)
{
	int moved = 0;

	for (;;) {
		uint64_t h = __atomic_load_n(&c->sh->tx_head, __ATOMIC_RELAXED), at = h % CH_TXRING;
		uint64_t n = CH_TXRING - ch_tx_room(c);
		struct iovec v[2] = { { ch_txring(c) + at, CH_TXRING - at < n ? CH_TXRING - at : n }, { ch_txring(c), 0 } };
		struct msghdr m = { .msg_iov = v, .msg_iovlen = 2 };
		ssize_t r;

		if (!n) {
			if (c->sh->owing) {
				pay(c);
				if (ch_tx_room(c) < CH_TXRING)
					continue;
			}
			break;
		}
		v[1].iov_len = n - v[0].iov_len;
		r = dsock_real.sendmsg(c->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r < 0) {
			if (errno == EAGAIN || errno == EINTR)
				break;
			ch_kill(c, errno == EPIPE ? ECONNRESET : errno);
			return -errno;
		}
		__atomic_store_n(&c->sh->tx_head, h + (uint64_t)r, __ATOMIC_RELEASE);
		moved = 1;
		if (c->sh->owing)
			pay(c);
	}
	if (moved)
		ch_bump(c); /* (a sender that waits for room) */
	else if (ch_tx_room(c) < CH_TXRING && __atomic_load_n(&c->sh->asleep, __ATOMIC_SEQ_CST))
		ch_bump(c); /* (a pumper asleep without asking for room asks now) */
	return 0;
}

/* Stream st's sender has under a quarter of its credit left, going by
 * what was filed, while a sizeable part read here is not credited yet
 * (read since the last quarter, the ring drained): a reader that waits
 * for more without reading (a peek for all of it, FIONREAD polled, an
 * edge-triggered poller that read a part)
 * would otherwise never get it.  (Not a few bytes: a TCP window does not
 * reopen by them, and a full peer stays unwritable.) */
int ch_credit_short(struct ch *c, unsigned st)
{
	struct ch_stream *s = ch_stream_at(c, st);
	uint64_t told = __atomic_load_n(&s->credited, __ATOMIC_ACQUIRE);

	return __atomic_load_n(&s->rx_head, __ATOMIC_ACQUIRE) - told >= CH_RING / 16 &&
	       __atomic_load_n(&s->rx_tail, __ATOMIC_ACQUIRE) - told > CH_RING - CH_RING / 4;
}

void ch_credit_now(struct ch *c, unsigned st)
{
	control(c, st, CH_OWE_CREDIT);
}

void ch_credit(struct ch *c, unsigned st)
{
	struct ch_stream *s = ch_stream_at(c, st);
	uint64_t head = __atomic_load_n(&s->rx_head, __ATOMIC_ACQUIRE);
	uint64_t told = __atomic_load_n(&s->credited, __ATOMIC_ACQUIRE);

	/* (less than a quarter is told with the stream's next DATA once the
	 * ring is drained, ch_send: a sender waits only with a whole ring
	 * uncredited, and the quarters of it are credited as they are read) */
	if (head - told < CH_RING / 4 && !ch_credit_short(c, st))
		return;
	if (ch_lock(c, &c->sh->tx_mu, 0))
		return;
	if (__atomic_load_n(&s->rx_head, __ATOMIC_ACQUIRE) != __atomic_load_n(&s->credited, __ATOMIC_RELAXED))
		control(c, st, CH_OWE_CREDIT);
	ch_tx_flush(c);
	pthread_mutex_unlock(&c->sh->tx_mu);
}

int ch_shutdown(struct ch *c, unsigned st, int how)
{
	struct ch_stream *s;
	int r;

	if (st >= c->nstreams)
		return -EINVAL;
	s = ch_stream_at(c, st);
	if ((r = ch_lock(c, &c->sh->tx_mu, 0)))
		return r;
	if (how & CH_SHUT_RD_NOW)
		__atomic_store_n(&s->rx_nowait, 1, __ATOMIC_RELEASE);
	how &= ~CH_SHUT_RD_NOW;
	if ((how == SHUT_WR || how == SHUT_RDWR) && !__atomic_load_n(&s->tx_eof, __ATOMIC_RELAXED)) {
		__atomic_store_n(&s->tx_eof, 1, __ATOMIC_RELEASE);
		control(c, st, CH_OWE_EOF);
	}
	if ((how == SHUT_RD || how == SHUT_RDWR) && !__atomic_load_n(&s->rx_stopped, __ATOMIC_RELAXED)) {
		__atomic_store_n(&s->rx_stopped, 1, __ATOMIC_RELEASE);
		control(c, st, CH_OWE_STOP);
	}
	ch_tx_flush(c);
	pthread_mutex_unlock(&c->sh->tx_mu);
	ch_bump(c); /* (a reader that waits sees its end) */
	ch_levels_all(c, 0);
	return 0;
}

int ch_close_stream(struct ch *c, unsigned st)
{
	struct ch_stream *s;
	int r;

	if (st >= c->nstreams)
		return -EINVAL;
	s = ch_stream_at(c, st);
	ch_progress(c); /* (what the socket holds for it counts as unread too) */
	if ((r = ch_lock(c, &c->sh->tx_mu, 0)))
		return r;
	unsigned unread = ch_readable(c, st) ? CH_OWE_RESET : 0;
	if (!__atomic_exchange_n(&s->rx_discard, unread ? 2 : 1, __ATOMIC_ACQ_REL)) {
		__atomic_store_n(&s->rx_stopped, 1, __ATOMIC_RELEASE);
		control(c, st, CH_OWE_STOP | unread);
	}
	if (!__atomic_load_n(&s->tx_eof, __ATOMIC_RELAXED)) {
		__atomic_store_n(&s->tx_eof, 1, __ATOMIC_RELEASE);
		control(c, st, CH_OWE_EOF);
	}
	ch_tx_flush(c);
	pthread_mutex_unlock(&c->sh->tx_mu);
	ch_bump(c);
	ch_levels_all(c, 0);
	return 0;
}

/* ---- the reader (rx_mu held) ---------------------------------------------- */

/* One whole header in sh->hdr: 0, or -EPROTO (the peer broke a rule). */
static int on_header(struct ch *c)
{
	struct ch_shared *sh = c->sh;
	uint32_t st;
	uint16_t type;
	uint64_t arg;
	struct ch_stream *s;

	memcpy(&st, sh->hdr, 4);
	memcpy(&type, sh->hdr + 4, 2);
	memcpy(&arg, sh->hdr + 8, 8);
	st = le32toh(st);
	type = le16toh(type);
	arg = le64toh(arg);
	sh->hdr_len = 0;
	if (st >= c->nstreams)
		return -EPROTO;
	s = ch_stream_at(c, st);
	switch (type) {
	case CH_DATA: {
		/* (credited + CH_RING - tail cannot wrap: filing keeps tail
		 * within it) */
		uint64_t tail = __atomic_load_n(&s->rx_tail, __ATOMIC_RELAXED);
		uint64_t room = __atomic_load_n(&s->credited, __ATOMIC_ACQUIRE) + CH_RING - tail;
		if (!arg || __atomic_load_n(&s->rx_eof, __ATOMIC_RELAXED) || room > CH_RING || arg > room)
			return -EPROTO;
		sh->cur = st;
		sh->cur_left = arg;
		return 0;
	}
	case CH_CREDIT:
		if (arg < __atomic_load_n(&s->tx_acked, __ATOMIC_RELAXED) ||
		    arg > __atomic_load_n(&s->tx_sent, __ATOMIC_ACQUIRE))
			return -EPROTO;
		__atomic_store_n(&s->tx_acked, arg, __ATOMIC_RELEASE);
		return 0;
	case CH_EOF:
		if (arg != __atomic_load_n(&s->rx_tail, __ATOMIC_RELAXED) || __atomic_load_n(&s->rx_eof, __ATOMIC_RELAXED))
			return -EPROTO;
		__atomic_store_n(&s->rx_eof, 1, __ATOMIC_RELEASE);
		return 0;
	case CH_STOP:
		if (arg & ~(uint64_t)CH_STOP_RESET)
			return -EPROTO;
		if (arg & CH_STOP_RESET)
			__atomic_store_n(&s->rx_err, ECONNRESET, __ATOMIC_RELEASE);
		__atomic_store_n(&s->tx_stopped, 1, __ATOMIC_RELEASE);
		/* the answer: our EOF, after what we sent before this STOP */
		if (ch_lock(c, &sh->tx_mu, 0) == 0) {
			if (!__atomic_load_n(&s->tx_eof, __ATOMIC_RELAXED)) {
				__atomic_store_n(&s->tx_eof, 1, __ATOMIC_RELEASE);
				control(c, st, CH_OWE_EOF);
				ch_tx_flush(c);
			}
			pthread_mutex_unlock(&sh->tx_mu);
		}
		return 0;
	}
	return -EPROTO;
}

/* Files n bytes of the current DATA frame (n <= READ_BUF <= CH_RING).  A
 * stream our end let go of keeps only its count: the bytes are dropped,
 * and bytes that arrive after a STOP without the reset flag (they were in
 * the socket when our end let go) get the peer a STOP with it: unread
 * bytes make the close a reset (rx_discard 2: the flag went). */
static void file_data(struct ch *c, const unsigned char *p, size_t n)
{
	struct ch_stream *s = ch_stream_at(c, c->sh->cur);
	uint64_t t = __atomic_load_n(&s->rx_tail, __ATOMIC_RELAXED), at = t % CH_RING;
	size_t first = CH_RING - at < n ? (size_t)(CH_RING - at) : n;
	uint32_t one = 1;

	if (__atomic_compare_exchange_n(&s->rx_discard, &one, 2, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
	    ch_lock(c, &c->sh->tx_mu, 0) == 0) {
		control(c, c->sh->cur, CH_OWE_STOP | CH_OWE_RESET);
		ch_tx_flush(c);
		pthread_mutex_unlock(&c->sh->tx_mu);
	}
	if (!__atomic_load_n(&s->rx_discard, __ATOMIC_ACQUIRE)) {
		memcpy(ch_ring(c, c->sh->cur) + at, p, first);
		memcpy(ch_ring(c, c->sh->cur), p + first, n - first);
	}
	__atomic_store_n(&s->rx_tail, t + n, __ATOMIC_RELEASE);
	c->sh->cur_left -= n;
}

ssize_t ch_pump_locked(struct ch *c)
{
	struct ch_shared *sh = c->sh;
	unsigned char buf[READ_BUF];
	ssize_t r = 0, total = 0;
	int dead;

	if ((dead = __atomic_load_n(&sh->dead, __ATOMIC_ACQUIRE)))
		return -dead;
	if (__atomic_load_n(&sh->eof, __ATOMIC_ACQUIRE))
		return -EPIPE;
	/* (the parser's place, as any holder left it) */
	if (sh->hdr_len >= CH_HDR || (sh->cur_left && (sh->cur >= c->nstreams || sh->cur_left > CH_RING))) {
		ch_kill(c, ECONNRESET);
		ch_levels_all(c, 0); /* (its pollers see the death) */
		return -ECONNRESET;
	}
	for (int reads = 0; reads < READS_MAX; reads++) {
		__atomic_store_n(&sh->filing, 1, __ATOMIC_RELEASE);
		if ((r = dsock_real.recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT)) <= 0)
			break;
		total += r;
		for (size_t i = 0; i < (size_t)r;) {
			size_t n;
			if (sh->cur_left) {
				n = (size_t)r - i < sh->cur_left ? (size_t)r - i : (size_t)sh->cur_left;
				file_data(c, buf + i, n);
				i += n;
				continue;
			}
			n = CH_HDR - sh->hdr_len < (size_t)r - i ? CH_HDR - sh->hdr_len : (size_t)r - i;
			memcpy(sh->hdr + sh->hdr_len, buf + i, n);
			sh->hdr_len += (uint32_t)n;
			i += n;
			if (sh->hdr_len == CH_HDR && on_header(c)) {
				ch_kill(c, ECONNRESET);
				ch_levels_all(c, 0);
				return -ECONNRESET;
			}
		}
		__atomic_store_n(&sh->filing, 0, __ATOMIC_RELEASE);
		if ((size_t)r < sizeof(buf))
			break;
	}
	__atomic_store_n(&sh->filing, 0, __ATOMIC_RELEASE);
	if (r == 0 && !total) {
		/* the peer's end is gone: a frame cut short is a fault */
		if (sh->cur_left || sh->hdr_len)
			ch_kill(c, ECONNRESET);
		__atomic_store_n(&sh->eof, 1, __ATOMIC_RELEASE);
		ch_bump(c);
	} else if (r < 0 && errno != EAGAIN && errno != EINTR) {
		ch_kill(c, errno);
	}
	if (total)
		ch_bump(c);
	/* (what arrived, or the channel's end, moves the streams' levels) */
	if (c->lvl && (total || r == 0 || __atomic_load_n(&sh->dead, __ATOMIC_ACQUIRE)))
		ch_levels_all(c, total > 0);
	return total;
}

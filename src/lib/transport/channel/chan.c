/* The channel's core: its state, the frame ring and the reader (chan.h). */
#include "lib/transport/channel/chan_int.h"
#include "lib/base/pmutex.h"
#include "lib/base/clock.h"
#include "lib/base/real.h"
#include "common/rawsys.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#define CH_STREAMS_MAX 65536

void ch_kill(struct ch *c, int err)
{
	int32_t zero = 0;

	__atomic_compare_exchange_n(&c->sh->dead, &zero, err, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/* 0, or -errno: a holder that died inside may have left a frame half
 * filed or half written, so the channel dies with it. */
int ch_lock(struct ch *c, pthread_mutex_t *m, int try)
{
	int r = try ? pthread_mutex_trylock(m) : pthread_mutex_lock(m);

	if (r == EOWNERDEAD) {
		ch_kill(c, ECONNRESET);
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
}

/* ---- state ------------------------------------------------------------- */

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

static int map(struct ch *c, int fd, int memfd, uint64_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);

	if (p == MAP_FAILED)
		return -errno;
	c->sh = p;
	c->fd = fd;
	c->memfd = memfd;
	return 0;
}

int ch_create(struct ch *c, int fd, unsigned nstreams)
{
	uint64_t streams_off = align_up(sizeof(struct ch_shared), 64);
	uint64_t txring_off = align_up(streams_off + (uint64_t)nstreams * sizeof(struct ch_stream), 4096);
	uint64_t rings_off = txring_off + CH_TXRING, size = rings_off + (uint64_t)nstreams * CH_RING;
	int memfd, r;

	if (!nstreams || nstreams > CH_STREAMS_MAX)
		return -EINVAL;
	if ((memfd = memfd_create("dsock-channel", MFD_CLOEXEC)) < 0)
		return -errno;
	if (ftruncate(memfd, (off_t)size) < 0 || (r = map(c, fd, memfd, size))) {
		r = -errno;
		close(memfd);
		return r ? r : -ENOMEM;
	}
	/* (a fresh memfd is zeros: every stream starts empty) */
	c->sh->nstreams = nstreams;
	c->sh->streams_off = streams_off;
	c->sh->txring_off = txring_off;
	c->sh->rings_off = rings_off;
	c->sh->size = size;
	if ((r = dsock_pmutex_init(&c->sh->rx_mu)) || (r = dsock_pmutex_init(&c->sh->tx_mu)) || (r = dsock_pmutex_init(&c->sh->rd_mu))) {
		ch_close(c);
		return r;
	}
	c->sh->version = CH_VERSION;
	__atomic_store_n(&c->sh->magic, CH_MAGIC, __ATOMIC_RELEASE);
	return 0;
}

int ch_attach(struct ch *c, int fd, int memfd)
{
	struct ch_shared h;
	struct stat st;
	int r;

	if (fstat(memfd, &st) < 0)
		return -errno;
	if ((size_t)st.st_size < sizeof(h) || pread(memfd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
		return -EPROTO;
	/* (the layout is recomputed, never taken from the file) */
	uint64_t streams_off = align_up(sizeof(struct ch_shared), 64);
	uint64_t txring_off = align_up(streams_off + (uint64_t)h.nstreams * sizeof(struct ch_stream), 4096);
	uint64_t rings_off = txring_off + CH_TXRING, size = rings_off + (uint64_t)h.nstreams * CH_RING;
	if (h.magic != CH_MAGIC || h.version != CH_VERSION || !h.nstreams || h.nstreams > CH_STREAMS_MAX ||
	    h.streams_off != streams_off || h.txring_off != txring_off || h.rings_off != rings_off ||
	    h.size != size || (uint64_t)st.st_size != size)
		return -EPROTO;
	if ((r = map(c, fd, memfd, size)))
		return r;
	return 0;
}

void ch_close(struct ch *c)
{
	if (c->sh)
		munmap(c->sh, c->sh->size);
	c->sh = NULL;
	if (c->fd >= 0)
		dsock_real.close(c->fd);
	if (c->memfd >= 0)
		dsock_real.close(c->memfd);
	c->fd = c->memfd = -1;
}

/* ---- frames out (tx_mu held) ---------------------------------------------- */

void ch_tx_put(struct ch *c, const void *p, size_t n)
{
	uint64_t t = __atomic_load_n(&c->sh->tx_tail, __ATOMIC_RELAXED), at = t % CH_TXRING, first = CH_TXRING - at < n ? CH_TXRING - at : n;

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

/* Writes what the socket takes of the frame ring: 0, or -errno (dead). */
int ch_tx_flush(struct ch *c)
{
	for (;;) {
		uint64_t h = __atomic_load_n(&c->sh->tx_head, __ATOMIC_RELAXED);
		uint64_t n = __atomic_load_n(&c->sh->tx_tail, __ATOMIC_RELAXED) - h, at = h % CH_TXRING;
		struct iovec v[2] = { { ch_txring(c) + at, CH_TXRING - at < n ? CH_TXRING - at : n },
				      { ch_txring(c), 0 } };
		struct msghdr m = { .msg_iov = v, .msg_iovlen = 2 };
		ssize_t r;

		if (!n)
			return 0;
		v[1].iov_len = n - v[0].iov_len;
		r = dsock_real.sendmsg(c->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return 0;
			ch_kill(c, errno == EPIPE ? ECONNRESET : errno);
			return -errno;
		}
		__atomic_store_n(&c->sh->tx_head, h + (uint64_t)r, __ATOMIC_RELEASE);
	}
}

/* Tells the peer what the stream's reader consumed, when it is worth a
 * frame (a quarter ring, or the ring drained). */
void ch_credit(struct ch *c, unsigned st)
{
	struct ch_stream *s = ch_stream_at(c, st);
	uint64_t head = __atomic_load_n(&s->rx_head, __ATOMIC_ACQUIRE);

	uint64_t told = __atomic_load_n(&s->credited, __ATOMIC_ACQUIRE);

	if (head - told < CH_RING / 4 && head != __atomic_load_n(&s->rx_tail, __ATOMIC_ACQUIRE))
		return;
	if (head == told || ch_lock(c, &c->sh->tx_mu, 0))
		return;
	head = __atomic_load_n(&s->rx_head, __ATOMIC_ACQUIRE);
	if (head != __atomic_load_n(&s->credited, __ATOMIC_RELAXED) && ch_tx_room(c) >= CH_HDR) {
		ch_tx_frame(c, st, CH_CREDIT, head);
		/* (release: the pumper writes where the reader read only after
		 * it has seen this) */
		__atomic_store_n(&s->credited, head, __ATOMIC_RELEASE);
		ch_tx_flush(c);
	}
	pthread_mutex_unlock(&c->sh->tx_mu);
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
	if (st >= sh->nstreams)
		return -EPROTO;
	s = ch_stream_at(c, st);
	switch (type) {
	case CH_DATA: {
		uint64_t tail = __atomic_load_n(&s->rx_tail, __ATOMIC_RELAXED);
		if (!arg || __atomic_load_n(&s->rx_eof, __ATOMIC_RELAXED) ||
		    tail + arg > __atomic_load_n(&s->credited, __ATOMIC_ACQUIRE) + CH_RING)
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
		if (arg != __atomic_load_n(&s->rx_tail, __ATOMIC_RELAXED))
			return -EPROTO;
		__atomic_store_n(&s->rx_eof, 1, __ATOMIC_RELEASE);
		return 0;
	case CH_STOP:
		__atomic_store_n(&s->tx_stopped, 1, __ATOMIC_RELEASE);
		return 0;
	}
	return -EPROTO;
}

/* Files n bytes of the current DATA frame. */
static void file_data(struct ch *c, const unsigned char *p, size_t n)
{
	struct ch_stream *s = ch_stream_at(c, c->sh->cur);
	uint64_t t = __atomic_load_n(&s->rx_tail, __ATOMIC_RELAXED), at = t % CH_RING;
	size_t first = CH_RING - at < n ? CH_RING - at : n;

	if (__atomic_load_n(&s->rx_stopped, __ATOMIC_ACQUIRE)) {
		/* (read no more: dropped, and the ring stays empty) */
		__atomic_store_n(&s->rx_head, t + n, __ATOMIC_RELEASE);
	} else {
		memcpy(ch_ring(c, c->sh->cur) + at, p, first);
		memcpy(ch_ring(c, c->sh->cur), p + first, n - first);
	}
	__atomic_store_n(&s->rx_tail, t + n, __ATOMIC_RELEASE);
	c->sh->cur_left -= n;
}

/* Reads what the socket has, without waiting, and files it: the bytes
 * read (0: none), or -errno once the channel is dead or at its EOF. */
ssize_t ch_pump_locked(struct ch *c)
{
	struct ch_shared *sh = c->sh;
	unsigned char buf[65536];
	ssize_t r, total = 0;

	if (__atomic_load_n(&sh->dead, __ATOMIC_ACQUIRE))
		return -__atomic_load_n(&sh->dead, __ATOMIC_ACQUIRE);
	if (__atomic_load_n(&sh->eof, __ATOMIC_ACQUIRE))
		return -EPIPE;
	while ((r = dsock_real.recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
		size_t i = 0;
		total += r;
		while (i < (size_t)r) {
			if (sh->cur_left) {
				size_t n = (size_t)r - i < sh->cur_left ? (size_t)r - i : (size_t)sh->cur_left;
				file_data(c, buf + i, n);
				i += n;
				continue;
			}
			size_t n = CH_HDR - sh->hdr_len < (size_t)r - i ? CH_HDR - sh->hdr_len : (size_t)r - i;
			memcpy(sh->hdr + sh->hdr_len, buf + i, n);
			sh->hdr_len += (uint32_t)n;
			i += n;
			if (sh->hdr_len == CH_HDR && on_header(c)) {
				ch_kill(c, ECONNRESET);
				ch_bump(c);
				return -ECONNRESET;
			}
		}
		if ((size_t)r < sizeof(buf))
			break;
	}
	if (r == 0) {
		/* the peer's end is gone: a frame cut short is a fault */
		if (sh->cur_left || sh->hdr_len)
			ch_kill(c, ECONNRESET);
		__atomic_store_n(&sh->eof, 1, __ATOMIC_RELEASE);
	} else if (r < 0 && errno != EAGAIN && errno != EINTR) {
		ch_kill(c, errno);
	}
	if (total || r >= 0 || (errno != EAGAIN && errno != EINTR))
		ch_bump(c);
	return total;
}

int ch_progress(struct ch *c)
{
	int dead;

	if (ch_lock(c, &c->sh->rx_mu, 1) == 0) {
		ch_pump_locked(c);
		pthread_mutex_unlock(&c->sh->rx_mu);
	}
	if (ch_tx_pending(c) && ch_lock(c, &c->sh->tx_mu, 1) == 0) {
		ch_tx_flush(c);
		pthread_mutex_unlock(&c->sh->tx_mu);
	}
	dead = __atomic_load_n(&c->sh->dead, __ATOMIC_ACQUIRE);
	return dead ? -dead : 0;
}


/* Coverage-guided fuzzing of the shm transport against a hostile peer.
 *
 * Each input builds one fast-path connection the way an exec'ed program
 * adopts one (DSOCK_EXEC_SHM: map_conn's checks run), over a real loopback
 * TCP pair, and then plays a script: the peer writes legal or arbitrary
 * values into the shared header and the rings, sends kernel bytes, shuts
 * down or resets; the victim (this process, through the interposed calls)
 * sends, receives (peek, waitall, several iovecs), polls and shuts down.
 *
 * Checked: no crash, no out-of-bounds access or undefined behaviour (ASan,
 * UBSan), no call blocks, every return value is one the kernel could give,
 * and, while the peer has broken no rule, every byte arrives exactly once
 * and in order in both directions.
 *
 * Input: byte 0 = options (bit 0 victim side, bit 1 start switched, bit 2
 * victim lingers), then operations: an opcode byte and its arguments. */
#include "lib/sock/sock.h"
#include "lib/transport/shm/shm.h"
#include "lib/base/real.h"
#include "common/rawsys.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <linux/tcp.h> /* the kernel's tcp_info: byte counters */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RING 16384u /* wider than DSOCK_RING_MIN: the rings' maps widen */
#define MAPLEN (DSOCK_SHM_HDR + 2 * RING)

static int lfd = -1, trace;
/* FUZZ_TRACE=1: print each operation (to read a crash's script) */
#define TRACE(...) do { if (trace) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
static struct sockaddr_in laddr;

#define CHECK(c) do { if (!(c)) { \
	fprintf(stderr, "fuzz_ring: check failed: %s (line %d)\n", #c, __LINE__); abort(); } } while (0)

/* Where ring r's byte i lies as its map word says (shm_layout.h), or -1
 * when the word breaks the rules (scribbled: nobody knows). */
static long ring_pos(const struct dsock_shm_ring *r, uint64_t i)
{
	uint64_t m = __atomic_load_n(&r->map, __ATOMIC_RELAXED);
	uint32_t w = (uint32_t)m ? (uint32_t)m : DSOCK_RING_MIN, shift = (uint32_t)(m >> 32);

	if (w < DSOCK_RING_MIN || w > RING || (w & (w - 1)))
		return -1;
	return (long)((i + shift) & (w - 1));
}

static uint32_t ring_width(const struct dsock_shm_ring *r)
{
	uint32_t w = (uint32_t)__atomic_load_n(&r->map, __ATOMIC_RELAXED);
	return w ? w : DSOCK_RING_MIN;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	extern char **environ;
	socklen_t l = sizeof(laddr);

	/* the adopted connection must be the only transport: no daemon, no
	 * shm offers of our own; raw exec: the linked-in wrapper would preload
	 * this executable */
	if (!getenv("DSOCK_FASTPATH")) {
		setenv("DSOCK_FASTPATH", "0", 1);
		setenv("DSOCK_SOCKET", "/nonexistent/dsockd.sock", 1);
		if (!getenv("DSOCK_LOG"))
			setenv("DSOCK_LOG", "error", 1); /* each reset logs a warning */
		dsock_sys(SYS_execve, "/proc/self/exe", *argv, environ);
		abort();
	}
	trace = getenv("FUZZ_TRACE") != NULL;
	laddr.sin_family = AF_INET;
	laddr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&laddr, sizeof(laddr)) == 0 &&
	      listen(lfd, 16) == 0 && getsockname(lfd, (struct sockaddr *)&laddr, &l) == 0);
	return 0;
}

/* The stream pattern: byte p of direction dir. */
static uint8_t pat(uint64_t p, int dir)
{
	return (uint8_t)(p * 131 + (p >> 9) + (uint64_t)dir * 77);
}

struct script {
	const uint8_t *d;
	size_t n, i;
};

static unsigned take(struct script *s, int bytes)
{
	unsigned v = 0;
	for (int b = 0; b < bytes; b++)
		v |= (unsigned)(s->i < s->n ? s->d[s->i++] : 0) << (8 * b);
	return v;
}

struct world {
	int a, b, memfd, victim, ep;
	struct dsock_shm_hdr *h;
	unsigned char *vrx, *vtx;   /* ring data: victim receives, victim sends */
	struct dsock_shm_ring *rx, *tx;
	struct dsock_shm_side *me, *peer;
	int broken;                 /* the peer broke a rule: no data oracle */
	int peer_switched;
	uint64_t in_made, in_read;  /* peer -> victim stream: produced, consumed */
	uint64_t out_sent, out_read; /* victim -> peer stream */
	uint64_t peer_kernel_data;  /* pre-switch kernel data bytes the peer sent */
	int victim_reset;           /* the victim got ECONNRESET/EPIPE: stream ends */
	uint64_t peer_kbytes;       /* every byte the peer sent on the kernel */
	int peer_back;              /* the peer's sending went back to the kernel */
	uint64_t peer_kread;        /* bytes the peer read from the victim's kernel stream */
};

/* The kernel's byte counters as the transport calibrates them. */
static void baselines(int fd, long long *tx, long long *rx)
{
	struct tcp_info ti;
	socklen_t l = sizeof(ti);
	int outq = 0, inq = 0;

	CHECK(dsock_real.getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) == 0);
	dsock_real.ioctl(fd, SIOCOUTQ, &outq);
	dsock_real.ioctl(fd, SIOCINQ, &inq);
	*tx = (long long)ti.tcpi_bytes_acked + outq;
	*rx = (long long)ti.tcpi_bytes_received - inq;
}

static int setup(struct world *w, unsigned opts)
{
	char env[128];
	long long txb, rxb;
	struct dsock_sock *s;

	memset(w, 0, sizeof(*w));
	w->victim = opts & 1;
	w->a = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(w->a >= 0);
	int r, tries = 0;
	/* EINTR: libFuzzer's SIGALRM; EADDRNOTAVAIL: ports in TIME_WAIT from
	 * other tests */
	while ((r = connect(w->a, (struct sockaddr *)&laddr, sizeof(laddr))) < 0 &&
	       (errno == EINTR || errno == EADDRNOTAVAIL) && tries++ < 100)
		usleep(10000);
	if (r < 0 && (errno == EISCONN || errno == EALREADY))
		r = 0; /* an interrupted connect went on */
	if (r < 0)
		fprintf(stderr, "fuzz_ring: connect: %s\n", strerror(errno));
	CHECK(r == 0);
	w->b = accept(lfd, NULL, NULL);
	CHECK(w->b >= 0);
	CHECK(fcntl(w->a, F_SETFL, O_NONBLOCK) == 0);
	CHECK(fcntl(w->b, F_SETFL, O_NONBLOCK) == 0);
	w->memfd = memfd_create("fuzz-ring", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	CHECK(w->memfd >= 0 && ftruncate(w->memfd, MAPLEN) == 0);
	CHECK(fcntl(w->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0);
	w->h = mmap(NULL, MAPLEN, PROT_READ | PROT_WRITE, MAP_SHARED, w->memfd, 0);
	CHECK(w->h != MAP_FAILED);
	w->h->magic = DSOCK_SHM_MAGIC;
	w->h->version = DSOCK_SHM_VERSION;
	w->h->ring_size = RING;
	w->h->data_off = DSOCK_SHM_HDR;
	w->me = &w->h->side[w->victim];
	w->peer = &w->h->side[1 - w->victim];
	w->tx = &w->h->ring[w->victim];
	w->rx = &w->h->ring[1 - w->victim];
	w->vtx = (unsigned char *)w->h + DSOCK_SHM_HDR + (size_t)w->victim * RING;
	w->vrx = (unsigned char *)w->h + DSOCK_SHM_HDR + (size_t)(1 - w->victim) * RING;
	w->me->attached = w->peer->attached = DSOCK_ATT_ATTACHED;
	if (opts & 2) { /* both directions already on the rings */
		w->me->switch_off = w->peer->switch_off = 0;
		w->me->rx_switched = w->peer->rx_switched = 1;
		w->peer_switched = 1;
	} else {
		w->me->switch_off = w->peer->switch_off = DSOCK_SWITCH_NONE;
	}
	baselines(w->a, &txb, &rxb);
	TRACE("baselines: sent %lld, received %lld", txb, rxb);
	snprintf(env, sizeof(env), "%d:%d:0:%d:%u:%lld", w->a, fcntl(w->memfd, F_DUPFD_CLOEXEC, 0),
		 w->victim, RING, txb);
	setenv("DSOCK_EXEC_SHM", env, 1);
	shm_adopt();
	s = dsock_fdt_get(w->a);
	CHECK(s && s->tp == &dsock_shm_transport);
	if (opts & 4)
		shm_conn(s)->fork_gen = shm_fork_gen; /* may linger after recv */
	dsock_sock_put(s);
	w->ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.u64 = 7 };
	CHECK(epoll_ctl(w->ep, EPOLL_CTL_ADD, w->a, &ev) == 0);
	return 0;
}

static void teardown(struct world *w)
{
	close(w->ep);
	/* the peer resets: no TIME_WAIT left behind (thousands of inputs a
	 * minute would use up the ephemeral ports) */
	if (w->b >= 0) {
		struct linger lg = { 1, 0 };
		setsockopt(w->b, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		close(w->b);
	}
	close(w->a);
	munmap(w->h, MAPLEN);
	close(w->memfd);
}

/* errnos a TCP send/recv may return on a nonblocking socket */
static int plausible(int e)
{
	return e == EAGAIN || e == ECONNRESET || e == EPIPE || e == ENOTCONN || e == EINTR ||
	       e == ETIMEDOUT;
}

/* A peer that follows the rules switches its sending before writing the ring. */
static void peer_switch(struct world *w)
{
	if (!w->peer_switched) {
		__atomic_store_n(&w->peer->switch_off, w->peer_kernel_data, __ATOMIC_SEQ_CST);
		TRACE("peer switches at %llu", (unsigned long long)w->peer_kernel_data);
		w->peer_switched = 1;
	}
}

/* The peer widens its ring to RING where the bytes in flight keep their
 * places (as the library's tx_widen). */
static void peer_widen(struct world *w, uint64_t tail, uint64_t head)
{
	uint64_t m = __atomic_load_n(&w->rx->map, __ATOMIC_RELAXED);
	uint32_t wd = ring_width(w->rx), shift = (uint32_t)(m >> 32);

	if (wd >= RING)
		return;
	if (tail != head) {
		uint64_t first = head + shift, last = tail - 1 + shift;
		if (first / wd != last / wd)
			return;
		shift = (uint32_t)(shift - (first - first % wd));
	}
	__atomic_store_n(&w->rx->map, (uint64_t)(shift & (RING - 1)) << 32 | RING, __ATOMIC_RELAXED);
	TRACE("peer widens its ring (shift %u)", shift & (RING - 1));
}

static void op_produce(struct world *w, struct script *s)
{
	unsigned want = take(s, 2) % (RING + 1), flags = take(s, 1), token = flags & 1;
	uint64_t tail = __atomic_load_n(&w->rx->tail, __ATOMIC_RELAXED);
	uint64_t head = __atomic_load_n(&w->rx->head, __ATOMIC_ACQUIRE);

	if (tail - head > ring_width(w->rx) || ring_pos(w->rx, 0) < 0)
		return; /* scribbled: the peer would not know where it is either */
	if (w->peer_back) { /* back on the kernel: plain data there */
		unsigned char buf[RING];
		for (unsigned i = 0; i < want && w->b >= 0; i++)
			buf[i] = pat(w->in_made + i, 0);
		ssize_t r = w->b >= 0 ? send(w->b, buf, want, MSG_DONTWAIT | MSG_NOSIGNAL) : -1;
		TRACE("peer (down) sends %u -> %zd", want, r);
		if (r > 0) {
			w->in_made += (uint64_t)r;
			w->peer_kbytes += (uint64_t)r;
		}
		return;
	}
	peer_switch(w);
	if ((flags & 2) && !w->broken)
		peer_widen(w, tail, head);
	if (want > ring_width(w->rx) - (tail - head))
		want = (unsigned)(ring_width(w->rx) - (tail - head));
	for (unsigned i = 0; i < want; i++)
		w->vrx[ring_pos(w->rx, tail + i)] = pat(w->in_made + i, 0);
	w->in_made += want;
	TRACE("peer produces %u (token %u)", want, token);
	__atomic_store_n(&w->rx->tail, tail + want, __ATOMIC_RELEASE);
	if (token && w->b >= 0) {
		char t = 0;
		__atomic_store_n(&w->rx->token, 1, __ATOMIC_SEQ_CST);
		if (send(w->b, &t, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1)
			w->peer_kbytes++;
	}
}

static void op_consume(struct world *w, struct script *s)
{
	unsigned want = take(s, 2) % (RING + 1);
	uint64_t head = __atomic_load_n(&w->tx->head, __ATOMIC_RELAXED);
	uint64_t tail = __atomic_load_n(&w->tx->tail, __ATOMIC_ACQUIRE);

	if (tail - head > RING || ring_pos(w->tx, 0) < 0 || __atomic_load_n(&w->me->back_sent, __ATOMIC_ACQUIRE))
		return; /* scribbled, or closed: the victim re-sent it by the kernel */
	if (want > tail - head)
		want = (unsigned)(tail - head);
	if (!w->broken)
		for (unsigned i = 0; i < want; i++)
			CHECK(w->vtx[ring_pos(w->tx, head + i)] == pat(w->out_read + i, 1));
	w->out_read += want;
	TRACE("peer consumes %u", want);
	__atomic_store_n(&w->tx->head, head + want, __ATOMIC_RELEASE);
	if (want && __atomic_load_n(&w->tx->tx_waiting, __ATOMIC_SEQ_CST)) {
		uint32_t waiting = __atomic_exchange_n(&w->tx->tx_waiting, 0, __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&w->tx->space_seq, 1, __ATOMIC_SEQ_CST);
		if ((waiting & DSOCK_TXW_POLL) && w->b >= 0 && w->peer_switched && !w->peer_back) {
			char t = 0;
			__atomic_store_n(&w->tx->space_token, 1, __ATOMIC_SEQ_CST);
			if (send(w->b, &t, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1)
				w->peer_kbytes++;
		}
	}
}

static void op_recv(struct world *w, struct script *s)
{
	static unsigned char buf[3 * 4096];
	unsigned len = take(s, 2) % (3 * 4096 + 1), how = take(s, 1);
	int flags = MSG_DONTWAIT | (how & 1 ? MSG_PEEK : 0) | (how & 2 ? MSG_WAITALL : 0);
	struct iovec v[3];
	struct msghdr m = { .msg_iov = v, .msg_iovlen = 1 + (how >> 2) % 3 };
	size_t per = len / m.msg_iovlen;
	ssize_t r;

	for (size_t i = 0; i < m.msg_iovlen; i++) {
		v[i].iov_base = buf + i * per;
		v[i].iov_len = i + 1 == m.msg_iovlen ? len - i * per : per;
	}
	if (trace) {
		long long t, rr;
		baselines(w->a, &t, &rr);
		TRACE("before recv: kernel sent %lld, consumed %lld", t, rr);
	}
	r = recvmsg(w->a, &m, flags);
	TRACE("recv %u flags %#x iovs %zu -> %zd (stream at %llu of %llu)", len, flags, m.msg_iovlen, r,
	      (unsigned long long)w->in_read, (unsigned long long)w->in_made);
	CHECK(r >= -1 && r <= (ssize_t)len);
	if (r < 0) {
		CHECK(plausible(errno));
		if (errno != EAGAIN)
			w->victim_reset = 1;
		return;
	}
	if (w->broken || w->victim_reset)
		return;
	/* bytes seen are exactly the next ones of the stream */
	CHECK(w->in_read + (uint64_t)r <= w->in_made);
	for (ssize_t i = 0; i < r; i++) {
		if (buf[i] != pat(w->in_read + (uint64_t)i, 0))
			TRACE("byte %zd of this read: %u, stream byte %llu is %u", i, buf[i],
			      (unsigned long long)(w->in_read + (uint64_t)i), pat(w->in_read + (uint64_t)i, 0));
		CHECK(buf[i] == pat(w->in_read + (uint64_t)i, 0));
	}
	if (!(flags & MSG_PEEK))
		w->in_read += (uint64_t)r;
}

static void op_send(struct world *w, struct script *s)
{
	static unsigned char buf[3 * 4096];
	unsigned len = take(s, 2) % (3 * 4096 + 1), vec = take(s, 1) & 1;
	ssize_t r;

	for (unsigned i = 0; i < len; i++)
		buf[i] = pat(w->out_sent + i, 1);
	if (vec) {
		struct iovec v[2] = { { buf, len / 2 }, { buf + len / 2, len - len / 2 } };
		struct msghdr m = { .msg_iov = v, .msg_iovlen = 2 };
		r = sendmsg(w->a, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
	} else {
		r = send(w->a, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	}
	TRACE("send %u -> %zd", len, r);
	CHECK(r >= -1 && r <= (ssize_t)len);
	if (r < 0) {
		CHECK(plausible(errno));
		return;
	}
	w->out_sent += (uint64_t)r;
}

/* Readiness and counts: only that they answer, and sanely. */
static void op_look(struct world *w, struct script *s)
{
	unsigned how = take(s, 1);
	struct pollfd p = { .fd = w->a, .events = POLLIN | POLLOUT | POLLRDHUP };
	struct epoll_event ev[2];
	int n = 0;

	int pr = poll(&p, 1, 0);
	TRACE("poll -> %d (%s)", pr, pr < 0 ? strerror(errno) : "");
	CHECK(pr >= 0 || errno == EINTR); /* libFuzzer's SIGALRM ticks */
	TRACE("poll -> %#x", p.revents);
	CHECK(ioctl(w->a, FIONREAD, &n) == 0 || plausible(errno) || errno == EINVAL);
	TRACE("FIONREAD -> %d", n);
	CHECK(n >= 0);
	/* 1 ms: a sleeping poller ends every lease first */
	n = epoll_wait(w->ep, ev, 2, how & 1);
	TRACE("epoll_wait %d ms -> %d (%#x)", how & 1, n, n > 0 ? ev[0].events : 0);
	CHECK((n >= 0 && n <= 1) || (n < 0 && errno == EINTR));
	if (n == 1)
		CHECK(ev[0].data.u64 == 7);
}

static void op_scribble(struct world *w, struct script *s, int wide)
{
	unsigned off = take(s, 2) % DSOCK_SHM_HDR;
	uint64_t v = take(s, 4);

	if (wide)
		v |= (uint64_t)take(s, 4) << 32;
	off &= wide ? ~7u : ~3u;
	/* a lock word held by another living thread is bounded by a long spin
	 * (tested in the fault tests); here a holder is dead or invalid: a
	 * thread id no thread has (bit 30: ids are below 2^22), or a bias to
	 * one (bit 31, DSOCK_LOCK_BIAS: the revocation path), as the script
	 * says */
	unsigned mark = take(s, 1) & 1 ? DSOCK_LOCK_BIAS : 0x40000000u;
	uint32_t *lk[] = { &w->h->ring[0].tx_lock, &w->h->ring[0].rx_lock, &w->h->ring[1].tx_lock,
			   &w->h->ring[1].rx_lock };
	if (wide)
		memcpy((char *)w->h + off, &v, 8);
	else
		memcpy((char *)w->h + off, &(uint32_t){ (uint32_t)v }, 4);
	for (int i = 0; i < 4; i++)
		if (*lk[i] && *lk[i] != (uint32_t)dsock_sys(SYS_gettid))
			*lk[i] |= mark;
	w->broken = 1;
	TRACE("peer scribbles");
}

static void op_scribble_data(struct world *w, struct script *s)
{
	unsigned off = take(s, 2) % (2 * RING), len = take(s, 1);

	for (unsigned i = 0; i < len && off + i < 2 * RING; i++)
		((unsigned char *)w->h)[DSOCK_SHM_HDR + off + i] = (unsigned char)take(s, 1);
	w->broken = 1;
	TRACE("peer scribbles");
}

static void op_peer_kernel(struct world *w, struct script *s)
{
	unsigned len = take(s, 1) % 64;
	unsigned char buf[64];

	if (w->b < 0)
		return;
	int data = !w->peer_switched || w->peer_back;
	for (unsigned i = 0; i < len; i++)
		buf[i] = data ? pat(w->in_made + i, 0) : 0;
	ssize_t r = send(w->b, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	TRACE("peer kernel send %u %s -> %zd", len, data ? "data" : "tokens", r);
	if (r > 0) {
		w->peer_kbytes += (uint64_t)r;
		if (data)
			w->in_made += (uint64_t)r;
		if (!w->peer_switched)
			w->peer_kernel_data += (uint64_t)r;
	}
}

/* The peer's sending goes back to the kernel, as back.c does it: the
 * count of its kernel bytes, then the ring bytes the victim has not read,
 * sent after them.  (The victim is in no call: no lock needed.) */
static void op_peer_back(struct world *w)
{
	uint64_t head = __atomic_load_n(&w->rx->head, __ATOMIC_ACQUIRE);
	uint64_t tail = __atomic_load_n(&w->rx->tail, __ATOMIC_RELAXED);
	uint64_t n = w->peer_switched ? tail - head : 0;
	unsigned char buf[RING];

	if (w->peer_back || w->b < 0 || n > RING || w->broken)
		return;
	for (uint64_t i = 0; i < n; i++)
		buf[i] = w->vrx[ring_pos(w->rx, head + i)];
	if (n && send(w->b, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)n) {
		w->broken = 1; /* a short send: the stream is broken, as the library would reset */
		return;
	}
	__atomic_store_n(&w->peer->back_off, w->peer_kbytes, __ATOMIC_RELAXED);
	__atomic_store_n(&w->peer->back_sent, 1, __ATOMIC_SEQ_CST);
	w->peer_kbytes += n;
	w->peer_back = 1;
	TRACE("peer goes back to the kernel at %llu, re-sending %llu", (unsigned long long)(w->peer_kbytes - n),
	      (unsigned long long)n);
}

/* The peer reads the victim's kernel stream: once the victim's sending is
 * back on the kernel, past its back_off every byte is data, in order. */
static void op_peer_read(struct world *w, struct script *s)
{
	unsigned char buf[4096];
	unsigned len = 1 + take(s, 2) % sizeof(buf);

	if (w->b < 0 || !__atomic_load_n(&w->me->back_sent, __ATOMIC_ACQUIRE))
		return;
	/* data before the victim's switch, tokens up to back_off, then data */
	uint64_t dn = __atomic_load_n(&w->me->back_off, __ATOMIC_RELAXED);
	uint64_t sw = __atomic_load_n(&w->me->switch_off, __ATOMIC_RELAXED);
	if (sw > dn)
		sw = dn;
	ssize_t r = recv(w->b, buf, len, MSG_DONTWAIT);
	TRACE("peer reads the victim's kernel stream at %llu (switch %llu, down %llu): %zd",
	      (unsigned long long)w->peer_kread, (unsigned long long)sw, (unsigned long long)dn, r);
	for (ssize_t i = 0; i < r; i++, w->peer_kread++) {
		if (w->peer_kread >= sw && w->peer_kread < dn)
			continue; /* a token */
		if (!w->broken)
			CHECK(buf[i] == pat(w->out_read, 1));
		w->out_read++;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct script s = { data, size, 0 };
	struct world w;

	if (size < 1 || size > 4096)
		return 0;
	setup(&w, take(&s, 1));
	while (s.i < s.n) {
		switch (take(&s, 1) % 16) {
		case 0: op_produce(&w, &s); break;
		case 1: op_consume(&w, &s); break;
		case 2: op_recv(&w, &s); break;
		case 3: op_send(&w, &s); break;
		case 4: op_look(&w, &s); break;
		case 5: op_scribble(&w, &s, 0); break;
		case 6: op_scribble(&w, &s, 1); break;
		case 7: op_scribble_data(&w, &s); break;
		case 8: op_peer_kernel(&w, &s); break;
		case 9: peer_switch(&w); break;
		case 10: /* the peer shuts down its sending: EOF after the ring */
			if (w.b >= 0) {
				__atomic_store_n(&w.peer->closing, 1, __ATOMIC_SEQ_CST);
				shutdown(w.b, SHUT_WR);
				TRACE("peer shuts down");
			}
			break;
		case 11: {
			int how = (int)(take(&s, 1) % 3);
			TRACE("shutdown(%d) -> %d", how, shutdown(w.a, how));
			break;
		}
		case 12: /* the peer dies with unread data: RST */
			if (w.b >= 0) {
				struct linger lg = { 1, 0 };
				setsockopt(w.b, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
				close(w.b);
				w.b = -1;
				TRACE("peer resets");
			}
			break;
		case 13: op_peer_back(&w); break;
		case 14: /* the peer asks the victim back to the kernel */
			__atomic_store_n(&w.peer->back_req, 1, __ATOMIC_SEQ_CST);
			TRACE("peer asks to go back to the kernel");
			break;
		case 15: op_peer_read(&w, &s); break;
		}
		if (trace) {
			int inq = -1;
			dsock_real.ioctl(w.a, SIOCINQ, &inq);
			TRACE("  (victim rx_switched %u, switch_off %lld, kernel inq %d)", w.me->rx_switched,
			      (long long)w.me->switch_off, inq);
		}
	}
	teardown(&w);
	return 0;
}

/* Links between daemons of different hosts (hostlink.h).  One thread: the
 * daemon's epoll loop drives every link's TLS by hand (non-blocking
 * sockets; a handshake or a read that wants the other direction waits for
 * it).  A link's bytes are messages: a 4-byte header (type, payload
 * length, little-endian) and a payload of the type's exact size; anything
 * else, a message before HELLO, or a version other than ours, closes
 * that link and nothing else. */
#include "daemon/hostlink.h"
#include "daemon/hostkey.h"
#include "daemon/hostauth.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/reason.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#ifdef DSOCK_HAVE_TLS
#include <arpa/inet.h>
#include <endian.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LINKS_MAX    256
#define HL_VERSION   2 /* 2: CONFIRM */
#define SETUP_MS     3000    /* connect, TLS and HELLO */
#define RETRY_MS     2000    /* a host whose link failed is not dialled again before */
#define OUT_MAX      (4 << 20) /* a peer that reads nothing is dropped */
#define SETUP_PER_ADDR 4       /* links in their handshake from one address */
#define SLOT_LISTENER LINKS_MAX

enum { HL_HELLO = 1, HL_CLAIM = 2, HL_ANSWER = 3, HL_CONFIRM = 4 };
enum { L_FREE, L_CONNECTING, L_TLS, L_UP, L_FAILED };

/* wire forms (little-endian) */
struct hl_addr {
	uint8_t addr[16];
	uint16_t port, family;
} __attribute__((packed));
struct hl_hello {
	uint32_t version, flags;
} __attribute__((packed));
struct hl_claim {
	uint64_t id, sent, recv;
	uint32_t role, pad;
	struct hl_addr local, peer;
} __attribute__((packed));
/* ANSWER (to a claim) and CONFIRM (the claimant's word on a MATCHED) */
struct hl_answer {
	uint64_t id;
	uint32_t result, reason;
} __attribute__((packed));
static const uint16_t payload_len[] = { [HL_HELLO] = sizeof(struct hl_hello),
					[HL_CLAIM] = sizeof(struct hl_claim),
					[HL_ANSWER] = sizeof(struct hl_answer),
					[HL_CONFIRM] = sizeof(struct hl_answer) };

struct link {
	int state, fd, dialled, host, hello, hello_out, armed_out;
	SSL *ssl;
	uint64_t gen;
	struct dsock_addr addr; /* the peer's (dialled: the host's claims go here) */
	int64_t deadline;       /* set-up, or (L_FAILED) the next dial */
	unsigned char in[512];
	size_t nin;
	unsigned char *out;
	size_t nout, cap;
	unsigned long claims_out, claims_in, answers_in, answers_out, confirms_in, confirms_out;
};

static struct link links[LINKS_MAX];
static int on, ep = -1, lfd = -1, dial_port = 7447;
static uint32_t base;
static uint64_t next_gen = 1;
static char listen_at[80];

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void arm(struct link *l, int out)
{
	struct epoll_event ev = { .events = EPOLLIN | (out ? EPOLLOUT : 0),
				  .data.u32 = base + (uint32_t)(l - links) };

	if (l->armed_out != out && epoll_ctl(ep, EPOLL_CTL_MOD, l->fd, &ev) == 0)
		l->armed_out = out;
}

static void tls_why(char *buf, size_t n)
{
	unsigned long e = ERR_get_error();

	if (e)
		ERR_error_string_n(e, buf, n);
	else
		snprintf(buf, n, "%s", errno ? strerror(errno) : "closed");
	ERR_clear_error();
}

static void fail(struct link *l, unsigned reason, const char *why)
{
	char a[64];
	uint64_t gen = l->gen;

	dsock_addr_format(&l->addr, a, sizeof(a));
	if (l->state == L_UP && l->hello)
		DSOCK_WARN("host link %s %s (%s) down: %s", l->dialled ? "to" : "from", dd_hosts_name(l->host), a, why);
	else
		DSOCK_WARN("host link %s %s: %s", l->dialled ? "to" : "from", a, why);
	if (l->ssl)
		SSL_free(l->ssl);
	l->ssl = NULL;
	if (l->fd >= 0) {
		epoll_ctl(ep, EPOLL_CTL_DEL, l->fd, NULL);
		close(l->fd);
	}
	l->fd = -1;
	free(l->out);
	l->out = NULL;
	l->nout = l->cap = l->nin = 0;
	l->hello = l->hello_out = l->armed_out = 0;
	/* a dialled host is not dialled again at once; its slot remembers */
	l->state = l->dialled ? L_FAILED : L_FREE;
	l->deadline = now_ms() + RETRY_MS;
	l->gen = 0;
	dd_pairing_link_down(gen, reason);
}

/* A read or write on an established link failed (e: SSL_get_error's).
 * In TLS 1.3 a client's handshake ends before the server judges its key:
 * a server that refuses it closes the link before its HELLO, with an
 * alert, or a reset where our first message was still unread (which a
 * write may meet as well as a read). */
static void fail_io(struct link *l, int e, const char *why)
{
	if (l->dialled && !l->hello)
		fail(l, DSOCK_R_HOST_REFUSED, "closed before its HELLO: this host's key is not on its "
					    "allow-list, or it speaks another protocol");
	else
		fail(l, DSOCK_R_HOST_UNREACHABLE, e == SSL_ERROR_ZERO_RETURN ? "closed by the peer" : why);
}

static int queue(struct link *l, uint16_t type, const void *p, size_t n)
{
	if (l->nout + 4 + n > l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 4096;
		unsigned char *o;
		while (cap < l->nout + 4 + n)
			cap *= 2;
		if (cap > OUT_MAX || !(o = realloc(l->out, cap)))
			return -ENOBUFS;
		l->out = o;
		l->cap = cap;
	}
	uint16_t h[2] = { htole16(type), htole16((uint16_t)n) };
	memcpy(l->out + l->nout, h, 4);
	memcpy(l->out + l->nout + 4, p, n);
	l->nout += 4 + n;
	return 0;
}

/* Writes what is queued once the link is up: 0, or -1 (failed). */
static int flush(struct link *l)
{
	char why[160];

	while (l->state == L_UP && l->nout) {
		int w = SSL_write(l->ssl, l->out, (int)l->nout);
		if (w <= 0) {
			int e = SSL_get_error(l->ssl, w);
			if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
				arm(l, e == SSL_ERROR_WANT_WRITE);
				return 0;
			}
			tls_why(why, sizeof(why));
			fail_io(l, e, why);
			return -1;
		}
		memmove(l->out, l->out + w, l->nout - (size_t)w);
		l->nout -= (size_t)w;
	}
	if (l->state == L_UP)
		arm(l, 0);
	return 0;
}

static void addr_out(struct hl_addr *w, const struct dsock_addr *a)
{
	memcpy(w->addr, a->addr, 16);
	w->port = htole16(a->port);
	w->family = htole16(a->family);
}

static int addr_in(struct dsock_addr *a, const struct hl_addr *w)
{
	memcpy(a->addr, w->addr, 16);
	a->port = le16toh(w->port);
	a->family = le16toh(w->family);
	return a->family == AF_INET || a->family == AF_INET6;
}

/* One message from the peer: 0, or -1 (the link was closed for it). */
static int on_msg(struct link *l, unsigned type, const unsigned char *p)
{
	if (!l->hello) {
		struct hl_hello h;
		if (type != HL_HELLO) {
			fail(l, DSOCK_R_HOST_UNREACHABLE, "a message before HELLO");
			return -1;
		}
		memcpy(&h, p, sizeof(h));
		if (le32toh(h.version) != HL_VERSION) {
			char why[64];
			snprintf(why, sizeof(why), "protocol version %u, ours %u", le32toh(h.version), HL_VERSION);
			fail(l, DSOCK_R_HOST_UNREACHABLE, why);
			return -1;
		}
		l->hello = 1;
		DSOCK_INFO("host link %s %s up", l->dialled ? "to" : "from", dd_hosts_name(l->host));
		return 0;
	}
	if (type == HL_CLAIM) {
		struct hl_claim w;
		struct dd_claim c;
		memcpy(&w, p, sizeof(w));
		c.id = le64toh(w.id);
		c.sent = le64toh(w.sent);
		c.recv = le64toh(w.recv);
		c.role = le32toh(w.role);
		if (!addr_in(&c.local, &w.local) || !addr_in(&c.peer, &w.peer)) {
			fail(l, DSOCK_R_HOST_UNREACHABLE, "a claim with a malformed address");
			return -1;
		}
		l->claims_in++;
		dd_pairing_remote_claim(l->gen, l->host, &c);
	} else if (type == HL_ANSWER || type == HL_CONFIRM) {
		struct hl_answer a;
		memcpy(&a, p, sizeof(a));
		if (type == HL_ANSWER) {
			l->answers_in++;
			dd_pairing_remote_answer(l->gen, l->host, le64toh(a.id), le32toh(a.result), le32toh(a.reason));
		} else {
			l->confirms_in++;
			dd_pairing_remote_confirm(l->gen, l->host, le64toh(a.id), le32toh(a.result));
		}
	} else {
		fail(l, DSOCK_R_HOST_UNREACHABLE, "a second HELLO");
		return -1;
	}
	return 0;
}

/* Reads and handles what the peer sent: 0, or -1 (failed). */
static int pump(struct link *l)
{
	char why[160];

	for (;;) {
		int r = SSL_read(l->ssl, l->in + l->nin, (int)(sizeof(l->in) - l->nin));
		if (r <= 0) {
			int e = SSL_get_error(l->ssl, r);
			if (e == SSL_ERROR_WANT_READ)
				return 0;
			if (e == SSL_ERROR_WANT_WRITE) {
				arm(l, 1);
				return 0;
			}
			tls_why(why, sizeof(why));
			fail_io(l, e, why);
			return -1;
		}
		l->nin += (size_t)r;
		size_t at = 0;
		while (l->nin - at >= 4) {
			uint16_t h[2];
			memcpy(h, l->in + at, 4);
			unsigned type = le16toh(h[0]), len = le16toh(h[1]);
			if (type < HL_HELLO || type > HL_CONFIRM || len != payload_len[type]) {
				fail(l, DSOCK_R_HOST_UNREACHABLE, "a malformed message");
				return -1;
			}
			if (l->nin - at < 4 + len)
				break;
			/* (a message's handling may end the link: an answer
			 * it writes can fail it) */
			uint64_t gen = l->gen;
			if (on_msg(l, type, l->in + at + 4) || l->gen != gen)
				return -1;
			at += 4 + len;
		}
		memmove(l->in, l->in + at, l->nin - at);
		l->nin -= at;
	}
}

static void handshake(struct link *l)
{
	char why[200];
	int r = SSL_do_handshake(l->ssl);

	if (r == 1) {
		struct hl_hello h = { htole32(HL_VERSION), 0 };
		l->host = dd_hostauth_host(SSL_get0_peer_certificate(l->ssl));
		if (l->host < 0) { /* (the verify callback refused it already) */
			fail(l, DSOCK_R_HOST_REFUSED, "its key is not on the allow-list");
			return;
		}
		l->state = L_UP;
		if ((l->hello_out || queue(l, HL_HELLO, &h, sizeof(h)) == 0) && flush(l) == 0)
			pump(l);
		l->hello_out = 1;
		return;
	}
	int e = SSL_get_error(l->ssl, r);
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
		arm(l, e == SSL_ERROR_WANT_WRITE);
		return;
	}
	long v = SSL_get_verify_result(l->ssl);
	tls_why(why, sizeof(why));
	if (v != X509_V_OK || strstr(why, "certificate"))
		fail(l, DSOCK_R_HOST_REFUSED, "TLS refused: a key not on an allow-list (ours or the peer's)");
	else
		fail(l, DSOCK_R_HOST_UNREACHABLE, why);
}

static struct link *slot_free(void)
{
	struct link *failed = NULL;

	for (int i = 0; i < LINKS_MAX; i++) {
		if (links[i].state == L_FREE)
			return &links[i];
		if (links[i].state == L_FAILED && (!failed || links[i].deadline < failed->deadline))
			failed = &links[i];
	}
	if (failed)
		failed->state = L_FREE;
	return failed;
}

static int setup(struct link *l, int fd, int dialled)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.u32 = base + (uint32_t)(l - links) };
	int one = 1, idle = 10, intvl = 5, cnt = 3;

	/* a vanished host is noticed in about 25 s even with nothing to say */
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (!(l->ssl = SSL_new(dd_hostauth_ctx())) || !SSL_set_fd(l->ssl, fd) ||
	    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
		if (l->ssl)
			SSL_free(l->ssl);
		l->ssl = NULL;
		close(fd);
		l->state = dialled ? L_FAILED : L_FREE;
		return -1;
	}
	l->fd = fd;
	l->armed_out = 1;
	l->dialled = dialled;
	l->host = -1;
	l->hello = l->hello_out = 0;
	l->gen = next_gen++;
	l->deadline = now_ms() + SETUP_MS;
	l->claims_out = l->claims_in = l->answers_in = l->answers_out = l->confirms_in = l->confirms_out = 0;
	if (dialled)
		SSL_set_connect_state(l->ssl);
	else
		SSL_set_accept_state(l->ssl);
	return 0;
}

static void on_listener(void)
{
	struct sockaddr_storage sa;
	socklen_t sl = sizeof(sa);
	int fd;

	while ((fd = accept4(lfd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		struct dsock_addr from;
		struct link *l = NULL, *oldest = NULL;
		int same = 0;

		sl = sizeof(sa);
		dsock_addr_from(&from, (struct sockaddr *)&sa);
		/* Links not yet authenticated are what anyone who reaches the
		 * port can hold: a few per address, and when the slots run out
		 * the oldest of them makes room, so a flood delays an allowed
		 * host's link by a handshake at most, never refuses it */
		for (int i = 0; i < LINKS_MAX; i++) {
			struct link *x = &links[i];
			if (x->fd < 0 || x->dialled || (x->state == L_UP && x->hello))
				continue;
			same += !memcmp(x->addr.addr, from.addr, 16);
			if (!oldest || x->deadline < oldest->deadline)
				oldest = x;
		}
		if (same >= SETUP_PER_ADDR || (!(l = slot_free()) && !oldest)) {
			close(fd);
			continue;
		}
		if (!l) {
			fail(oldest, DSOCK_R_HOST_UNREACHABLE, "no handshake yet, and every link slot taken: made room");
			l = oldest;
		}
		l->addr = from;
		l->state = L_TLS;
		setup(l, fd, 0);
	}
}

static int dial(struct link *l, const struct dsock_addr *a)
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	struct sockaddr_storage ss = { 0 };
	socklen_t sl;
	int fd;

	if (!memcmp(a->addr, v4mapped, 12)) {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)dial_port);
		memcpy(&in->sin_addr, a->addr + 12, 4);
		sl = sizeof(*in);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)dial_port);
		memcpy(&in6->sin6_addr, a->addr, 16);
		sl = sizeof(*in6);
	}
	l->addr = *a;
	l->addr.port = (uint16_t)dial_port;
	l->dialled = 1;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || (connect(fd, (struct sockaddr *)&ss, sl) < 0 && errno != EINPROGRESS)) {
		if (fd >= 0)
			close(fd);
		l->state = L_FAILED;
		l->deadline = now_ms() + RETRY_MS;
		return -1;
	}
	l->state = L_CONNECTING;
	return setup(l, fd, 1);
}

void dd_hosts_event(uint32_t slot, uint32_t events)
{
	struct link *l;

	if (slot - base == SLOT_LISTENER) {
		on_listener();
		return;
	}
	if (slot - base >= LINKS_MAX || (l = &links[slot - base])->fd < 0 || l->state == L_FREE ||
	    l->state == L_FAILED)
		return;
	if (l->state == L_CONNECTING) {
		int err = 0;
		socklen_t el = sizeof(err);
		if (getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err) {
			fail(l, DSOCK_R_HOST_UNREACHABLE, strerror(err ? err : errno));
			return;
		}
		l->state = L_TLS;
	}
	if (l->state == L_TLS) {
		handshake(l);
		return;
	}
	if ((events & EPOLLOUT) && flush(l))
		return;
	if (events & ~EPOLLOUT)
		pump(l);
}

int dd_hosts_tick(void)
{
	int64_t now = now_ms(), next = -1;

	if (!on)
		return -1;
	for (int i = 0; i < LINKS_MAX; i++) {
		struct link *l = &links[i];
		if (l->state == L_FREE || l->state == L_FAILED || (l->state == L_UP && l->hello))
			continue;
		if (l->deadline <= now)
			fail(l, DSOCK_R_HOST_UNREACHABLE, "no link within the set-up time");
		else if (next < 0 || l->deadline - now < next)
			next = l->deadline - now;
	}
	return (int)next;
}

int64_t dd_hosts_claim(const struct dsock_addr *addr, const struct dd_claim *c)
{
	struct link *l = NULL;
	struct hl_claim w = { .id = htole64(c->id), .sent = htole64(c->sent), .recv = htole64(c->recv),
			      .role = htole32(c->role) };

	if (!on)
		return -DSOCK_R_PEER_TIMEOUT;
	for (int i = 0; i < LINKS_MAX && !l; i++)
		if (links[i].dialled && links[i].state != L_FREE && !memcmp(links[i].addr.addr, addr->addr, 16))
			l = &links[i];
	if (l && l->state == L_FAILED) {
		if (l->deadline > now_ms())
			return -DSOCK_R_HOST_UNREACHABLE;
		l->state = L_FREE;
	} else if (!l && !(l = slot_free())) {
		return -DSOCK_R_RESOURCE;
	}
	if (l->state == L_FREE && dial(l, addr))
		return -DSOCK_R_HOST_UNREACHABLE;
	addr_out(&w.local, &c->local);
	addr_out(&w.peer, &c->peer);
	/* (queued until the link is up, HELLO first: flush writes only an
	 * established link's queue) */
	if (!l->hello_out) {
		struct hl_hello h = { htole32(HL_VERSION), 0 };
		if (queue(l, HL_HELLO, &h, sizeof(h)))
			return -DSOCK_R_RESOURCE;
		l->hello_out = 1;
	}
	if (queue(l, HL_CLAIM, &w, sizeof(w)))
		return -DSOCK_R_RESOURCE;
	l->claims_out++;
	flush(l);
	return l->gen ? (int64_t)l->gen : -DSOCK_R_HOST_UNREACHABLE;
}

/* Sends an ANSWER or CONFIRM over link gen: 1 if it is queued or written
 * and the link lives on, 0 otherwise (gone, full, failed). */
static int send_word(uint64_t gen, uint16_t type, uint64_t id, unsigned result, unsigned reason)
{
	struct hl_answer a = { htole64(id), htole32(result), htole32(reason) };

	for (int i = 0; i < LINKS_MAX; i++)
		if (links[i].gen == gen && links[i].state == L_UP) {
			if (queue(&links[i], type, &a, sizeof(a)))
				return 0;
			(*(type == HL_ANSWER ? &links[i].answers_out : &links[i].confirms_out))++;
			return flush(&links[i]) == 0 && links[i].gen == gen;
		}
	return 0;
}

void dd_hosts_answer(uint64_t gen, uint64_t id, unsigned result, unsigned reason)
{
	send_word(gen, HL_ANSWER, id, result, reason);
}

int dd_hosts_confirm(uint64_t gen, uint64_t id, unsigned result)
{
	return send_word(gen, HL_CONFIRM, id, result, 0);
}

int dd_hosts_stat(int (*line)(int fd, const char *text), int fd)
{
	static const char *const st[] = { "free", "connecting", "tls", "up", "failed" };
	char buf[512], a[64];
	int r;

	if (!on)
		return 0;
	snprintf(buf, sizeof(buf), "hostkey fp=%s listen=%s dial_port=%d allowed=%d", dd_hostauth_fp(), listen_at,
		 dial_port, dd_hostauth_count());
	if ((r = line(fd, buf)))
		return r;
	for (int i = 0; i < LINKS_MAX; i++) {
		const struct link *l = &links[i];
		if (l->state == L_FREE)
			continue;
		dsock_addr_format(&l->addr, a, sizeof(a));
		snprintf(buf, sizeof(buf), "hostlink addr=%s dir=%s state=%s host=%s claims_out=%lu claims_in=%lu "
			 "answers_out=%lu answers_in=%lu confirms_out=%lu confirms_in=%lu",
			 a, l->dialled ? "out" : "in", st[l->state == L_UP && !l->hello ? L_TLS : l->state],
			 l->host >= 0 ? dd_hosts_name(l->host) : "-", l->claims_out, l->claims_in, l->answers_out,
			 l->answers_in, l->confirms_out, l->confirms_in);
		if ((r = line(fd, buf)))
			return r;
	}
	return 0;
}

/* "PORT", "ADDR:PORT" or "[ADDR]:PORT" (ADDR numeric) */
static int listen_on(const char *spec, char *why, size_t n)
{
	char host[64] = "::", port[16];
	const char *colon = strrchr(spec, ':');
	struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV,
				  .ai_socktype = SOCK_STREAM }, *ai;
	int fd, one = 1;

	if (colon) {
		size_t hl = (size_t)(colon - spec);
		if (spec[0] == '[' && hl >= 2 && spec[hl - 1] == ']')
			snprintf(host, sizeof(host), "%.*s", (int)hl - 2, spec + 1);
		else
			snprintf(host, sizeof(host), "%.*s", (int)hl, spec);
		snprintf(port, sizeof(port), "%s", colon + 1);
	} else {
		snprintf(port, sizeof(port), "%s", spec);
	}
	if (getaddrinfo(host, port, &hints, &ai)) {
		snprintf(why, n, "DSOCK_HOSTS_LISTEN=%s: want PORT, ADDR:PORT or [ADDR]:PORT", spec);
		return -1;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (ai->ai_family == AF_INET6) {
			int zero = 0; /* (IPv4 hosts too, where ADDR is ::) */
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		}
	}
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0) {
		snprintf(why, n, "listen on %s: %s", spec, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	snprintf(listen_at, sizeof(listen_at), "%s", spec);
	return fd;
}

int dd_hosts_start(const char *socket_path, int epfd, uint32_t slot_base)
{
	const char *allow = getenv("DSOCK_HOSTS_ALLOW");
	const char *lsn = getenv("DSOCK_HOSTS_LISTEN"), *port = getenv("DSOCK_HOSTS_PORT");
	int asked = allow && *allow;
	char why[512];
	struct stat st;
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = slot_base + SLOT_LISTENER };

	ep = epfd;
	base = slot_base;
	for (int i = 0; i < LINKS_MAX; i++)
		links[i].fd = -1;
	/* the host's daemon by default, a private one when told */
	if (!asked && strcmp(socket_path, DSOCK_HOST_SOCKET))
		return 0;
	if (!asked)
		allow = "/etc/dsock/hosts.allow";
	if (!asked && stat(allow, &st) < 0) {
		DSOCK_INFO("links to other hosts off: no allow-list (%s)", allow);
		return 0;
	}
	if (port && *port && (atoi(port) < 1 || atoi(port) > 65535)) {
		DSOCK_ERR("links to other hosts off: DSOCK_HOSTS_PORT=%s: want 1..65535", port);
		return -1;
	}
	if (port && *port)
		dial_port = atoi(port);
	if (dd_hostauth_start(allow, why, sizeof(why)) ||
	    (lfd = listen_on(lsn && *lsn ? lsn : "7447", why, sizeof(why))) < 0 ||
	    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0) {
		DSOCK_ERR("links to other hosts off: %s", why);
		dd_hosts_stop();
		return -1;
	}
	on = 1;
	DSOCK_INFO("links to other hosts on: this host is %s; listening on %s; %d hosts allowed", dd_hostauth_fp(),
		   listen_at, dd_hostauth_count());
	return 0;
}

int dd_hosts_on(void)
{
	return on;
}

void dd_hosts_reload(void)
{
	char why[512];

	if (!on)
		return;
	if (dd_hostauth_reload(why, sizeof(why))) {
		DSOCK_ERR("allow-list not reloaded: %s; the hosts allowed before stay so", why);
		return;
	}
	DSOCK_INFO("allow-list reloaded: %d hosts allowed", dd_hostauth_count());
	/* a host taken off the list loses its links at once (and a link
	 * still in its handshake is judged by the new list) */
	for (int i = 0; i < LINKS_MAX; i++)
		if (links[i].fd >= 0 && links[i].host >= 0 && !dd_hostauth_allowed(links[i].host))
			fail(&links[i], DSOCK_R_HOST_REFUSED, "its key is no longer on the allow-list");
}

void dd_hosts_stop(void)
{
	for (int i = 0; i < LINKS_MAX; i++) {
		if (links[i].ssl)
			SSL_free(links[i].ssl);
		if (links[i].fd >= 0)
			close(links[i].fd);
		free(links[i].out);
		memset(&links[i], 0, sizeof(links[i]));
		links[i].fd = -1;
	}
	if (lfd >= 0)
		close(lfd);
	lfd = -1;
	dd_hostauth_stop();
	on = 0;
}

#else /* built without OpenSSL's headers */

int dd_hosts_start(const char *socket_path, int epfd, uint32_t slot_base)
{
	const char *allow = getenv("DSOCK_HOSTS_ALLOW");

	(void)socket_path;
	(void)epfd;
	(void)slot_base;
	if (allow && *allow)
		DSOCK_ERR("links to other hosts off: dsockd was built without TLS (libssl-dev)");
	return allow && *allow ? -1 : 0;
}
int dd_hosts_on(void) { return 0; }
void dd_hosts_reload(void) {}
void dd_hosts_event(uint32_t slot, uint32_t events) { (void)slot; (void)events; }
int dd_hosts_tick(void) { return -1; }
void dd_hosts_stop(void) {}
int64_t dd_hosts_claim(const struct dsock_addr *addr, const struct dd_claim *c)
{
	(void)addr;
	(void)c;
	return -DSOCK_R_PEER_TIMEOUT;
}
void dd_hosts_answer(uint64_t gen, uint64_t id, unsigned result, unsigned reason)
{
	(void)gen; (void)id; (void)result; (void)reason;
}
int dd_hosts_confirm(uint64_t gen, uint64_t id, unsigned result)
{
	(void)gen; (void)id; (void)result;
	return 0;
}
int dd_hosts_stat(int (*line)(int fd, const char *text), int fd) { (void)line; (void)fd; return 0; }
#endif

/* Messages on a link between hosts (hostlink.h): a 4-byte header (type,
 * payload length, little-endian) and a payload of the type's exact size;
 * anything else, a message before HELLO, or a version other than ours,
 * closes that link and nothing else.  The link's life is hostlink.c's. */
#ifdef DSOCK_HAVE_TLS
#include "daemon/hostlink_int.h"
#include "daemon/hostauth.h"
#include "daemon/hostchan.h"
#include "common/log.h"
#include "common/reason.h"

#include <endian.h>
#include <errno.h>
#include <openssl/err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

void hl_tls_why(char *buf, size_t n)
{
	unsigned long e = ERR_get_error();

	if (e)
		ERR_error_string_n(e, buf, n);
	else
		snprintf(buf, n, "%s", errno ? strerror(errno) : "closed");
	ERR_clear_error();
}

void hl_fail(struct link *l, unsigned reason, const char *why)
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
		epoll_ctl(hl_ep, EPOLL_CTL_DEL, l->fd, NULL);
		close(l->fd);
	}
	l->fd = -1;
	free(l->out);
	l->out = NULL;
	l->nout = l->cap = l->nin = 0;
	l->hello = l->hello_out = l->armed_out = 0;
	/* a dialled host is not dialled again at once; its slot remembers */
	l->state = l->dialled ? L_FAILED : L_FREE;
	l->deadline = hl_now_ms() + RETRY_MS;
	l->gen = 0;
	dd_pairing_link_down(gen, reason);
}

/* A read or write on an established link failed (e: SSL_get_error's).
 * In TLS 1.3 a client's handshake ends before the server judges its key:
 * a server that refuses it closes the link before its HELLO, with an
 * alert, or a reset where our first message was still unread (which a
 * write may meet as well as a read). */
void hl_fail_io(struct link *l, int e, const char *why)
{
	if (l->dialled && !l->hello)
		hl_fail(l, DSOCK_R_HOST_REFUSED, "closed before its HELLO: this host's key is not on its "
					       "allow-list, or it speaks another protocol");
	else
		hl_fail(l, DSOCK_R_HOST_UNREACHABLE, e == SSL_ERROR_ZERO_RETURN ? "closed by the peer" : why);
}

int hl_queue(struct link *l, uint16_t type, const void *p, size_t n)
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
int hl_flush(struct link *l)
{
	char why[160];

	while (l->state == L_UP && l->nout) {
		int w = SSL_write(l->ssl, l->out, (int)l->nout);
		if (w <= 0) {
			int e = SSL_get_error(l->ssl, w);
			if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
				hl_arm(l, e == SSL_ERROR_WANT_WRITE);
				return 0;
			}
			hl_tls_why(why, sizeof(why));
			hl_fail_io(l, e, why);
			return -1;
		}
		memmove(l->out, l->out + w, l->nout - (size_t)w);
		l->nout -= (size_t)w;
	}
	if (l->state == L_UP)
		hl_arm(l, 0);
	return 0;
}

void hl_addr_out(struct hl_addr *w, const struct dsock_addr *a)
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
			hl_fail(l, DSOCK_R_HOST_UNREACHABLE, "a message before HELLO");
			return -1;
		}
		memcpy(&h, p, sizeof(h));
		if (le32toh(h.version) != HL_VERSION) {
			char why[64];
			snprintf(why, sizeof(why), "protocol version %u, ours %u", le32toh(h.version), HL_VERSION);
			hl_fail(l, DSOCK_R_HOST_UNREACHABLE, why);
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
		c.transport = le32toh(w.transport);
		if (!addr_in(&c.local, &w.local) || !addr_in(&c.peer, &w.peer)) {
			hl_fail(l, DSOCK_R_HOST_UNREACHABLE, "a claim with a malformed address");
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
	} else if (type == HL_CHANNEL) {
		struct hl_channel w;
		memcpy(&w, p, sizeof(w));
		l->channels_in++;
		dd_chan_token(l->gen, le64toh(w.id), w.token);
	} else if (type == HL_TAKEN) {
		struct hl_answer a;
		memcpy(&a, p, sizeof(a));
		dd_chan_taken(l->gen, le64toh(a.id));
	} else {
		hl_fail(l, DSOCK_R_HOST_UNREACHABLE, "a second HELLO");
		return -1;
	}
	return 0;
}

/* Reads and handles what the peer sent: 0, or -1 (failed). */
int hl_pump(struct link *l)
{
	char why[160];

	for (;;) {
		int r = SSL_read(l->ssl, l->in + l->nin, (int)(sizeof(l->in) - l->nin));
		if (r <= 0) {
			int e = SSL_get_error(l->ssl, r);
			if (e == SSL_ERROR_WANT_READ)
				return 0;
			if (e == SSL_ERROR_WANT_WRITE) {
				hl_arm(l, 1);
				return 0;
			}
			hl_tls_why(why, sizeof(why));
			hl_fail_io(l, e, why);
			return -1;
		}
		l->nin += (size_t)r;
		size_t at = 0;
		while (l->nin - at >= 4) {
			uint16_t h[2];
			memcpy(h, l->in + at, 4);
			unsigned type = le16toh(h[0]), len = le16toh(h[1]);
			if (type < HL_HELLO || type > HL_TAKEN || len != payload_len[type]) {
				hl_fail(l, DSOCK_R_HOST_UNREACHABLE, "a malformed message");
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


/* The link of generation gen while it is up (hello: and the peer's HELLO
 * read), or NULL. */
static struct link *link_of(uint64_t gen, int hello)
{
	for (int i = 0; i < LINKS_MAX; i++)
		if (gen && hl_links[i].gen == gen && hl_links[i].state == L_UP && (!hello || hl_links[i].hello))
			return &hl_links[i];
	return NULL;
}

/* Queues a message on link l and writes what the link has queued: 1 if
 * it is on its way and the link lives on, 0 otherwise (full, failed).
 * count, if any, counts it once queued. */
static int send_on(struct link *l, uint16_t type, const void *p, size_t n, unsigned long *count)
{
	uint64_t gen = l->gen;

	if (hl_queue(l, type, p, n))
		return 0;
	if (count)
		(*count)++;
	return hl_flush(l) == 0 && l->gen == gen;
}

/* Sends an ANSWER, CONFIRM or TAKEN over link gen: 1 if it is queued or
 * written and the link lives on, 0 otherwise (gone, full, failed). */
static int send_word(uint64_t gen, uint16_t type, uint64_t id, unsigned result, unsigned reason)
{
	struct hl_answer a = { htole64(id), htole32(result), htole32(reason) };
	struct link *l = link_of(gen, 0);

	if (!l)
		return 0;
	return send_on(l, type, &a, sizeof(a),
		       type == HL_ANSWER ? &l->answers_out : type == HL_CONFIRM ? &l->confirms_out : NULL);
}

void dd_hosts_answer(uint64_t gen, uint64_t id, unsigned result, unsigned reason)
{
	send_word(gen, HL_ANSWER, id, result, reason);
}

int dd_hosts_confirm(uint64_t gen, uint64_t id, unsigned result)
{
	return send_word(gen, HL_CONFIRM, id, result, 0);
}

int dd_hosts_channel(uint64_t gen, uint64_t id, const uint8_t token[DD_CHAN_TOKEN])
{
	struct link *l = link_of(gen, 1);
	struct hl_channel w = { .id = htole64(id) };

	memcpy(w.token, token, sizeof(w.token));
	return l && send_on(l, HL_CHANNEL, &w, sizeof(w), &l->channels_out);
}

int dd_hosts_taken(uint64_t gen, uint64_t id)
{
	return send_word(gen, HL_TAKEN, id, DD_CLAIM_MATCHED, 0);
}

int dd_hosts_linked(const struct sockaddr_storage *from)
{
	struct dsock_addr a;

	dsock_addr_from(&a, (const struct sockaddr *)from);
	for (int i = 0; i < LINKS_MAX; i++)
		if (hl_links[i].state == L_UP && hl_links[i].hello && !memcmp(hl_links[i].addr.addr, a.addr, 16))
			return 1;
	return 0;
}

int dd_hosts_link_addrs(uint64_t gen, struct sockaddr_storage *local, struct sockaddr_storage *peer)
{
	struct link *l = link_of(gen, 1);
	socklen_t a = sizeof(*local), b = sizeof(*peer);

	if (!l || getsockname(l->fd, (struct sockaddr *)local, &a) < 0 ||
	    getpeername(l->fd, (struct sockaddr *)peer, &b) < 0)
		return -1;
	return 0;
}

#endif

/* What the two files of the hl_links between hosts share (hostlink.c: the
 * hl_links' life, from dial or accept to their end; hostmsg.c: the messages
 * on a link).  Built with OpenSSL only (DSOCK_HAVE_TLS). */
#ifndef DSOCKD_HOSTLINK_INT_H
#define DSOCKD_HOSTLINK_INT_H

#include "daemon/hostlink.h"

#include <openssl/ssl.h>
#include <stddef.h>
#include <stdint.h>

#define LINKS_MAX    256
#define HL_VERSION   3 /* 2: CONFIRM; 3: CHANNEL, TAKEN */
#define SETUP_MS     3000    /* connect, TLS and HELLO */
#define RETRY_MS     2000    /* a host whose link failed is not dialled again before */
#define OUT_MAX      (4 << 20) /* a peer that reads nothing is dropped */
#define SETUP_PER_ADDR 4       /* hl_links in their handshake from one address */
#define SLOT_LISTENER LINKS_MAX
#define SLOT_CHANNELS 1024 /* hostchan.h's slots from here */

enum { HL_HELLO = 1, HL_CLAIM = 2, HL_ANSWER = 3, HL_CONFIRM = 4, HL_CHANNEL = 5, HL_TAKEN = 6 };
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
	uint32_t role, transport;
	struct hl_addr local, peer;
} __attribute__((packed));
/* ANSWER (to a claim) and CONFIRM (the claimant's word on a MATCHED) */
struct hl_answer {
	uint64_t id;
	uint32_t result, reason;
} __attribute__((packed));
/* CHANNEL: the claimant's token for the channel of claim id
 * (hostchan.h) */
struct hl_channel {
	uint64_t id;
	uint8_t token[16];
} __attribute__((packed));
static const uint16_t payload_len[] = { [HL_HELLO] = sizeof(struct hl_hello),
					[HL_CLAIM] = sizeof(struct hl_claim),
					[HL_ANSWER] = sizeof(struct hl_answer),
					[HL_CONFIRM] = sizeof(struct hl_answer),
					[HL_CHANNEL] = sizeof(struct hl_channel),
					[HL_TAKEN] = sizeof(struct hl_answer) };

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
	unsigned long channels_in, channels_out;
};

extern struct link hl_links[LINKS_MAX];
extern int hl_ep;          /* the daemon's epoll set */
extern uint32_t hl_base;   /* the hl_links' first slot in it */

int64_t hl_now_ms(void);
/* Asks epoll for the link's room to write too (out 1), or not. */
void hl_arm(struct link *l, int out);
/* OpenSSL's last error, or errno's, into buf. */
void hl_tls_why(char *buf, size_t n);
/* The link ends (reason: enum dsock_reason, for its claims), logged. */
void hl_fail(struct link *l, unsigned reason, const char *why);
/* A read or write on an established link failed (e: SSL_get_error's). */
void hl_fail_io(struct link *l, int e, const char *why);
/* Appends a message to the link's output: 0, or -ENOBUFS. */
int hl_queue(struct link *l, uint16_t type, const void *p, size_t n);
/* Writes what is queued once the link is up: 0, or -1 (failed). */
int hl_flush(struct link *l);
void hl_addr_out(struct hl_addr *w, const struct dsock_addr *a);
/* Reads and handles what the peer sent: 0, or -1 (failed). */
int hl_pump(struct link *l);

#endif

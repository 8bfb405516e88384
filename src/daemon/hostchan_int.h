/* What the two files of the channels between hosts share (hostchan.h):
 * hostchan.c keeps the ends waiting for their channel, hostchan_port.c
 * the channel sockets in the making (dialled by the claimant's daemon, or
 * accepted at the channel port and reading their first bytes). */
#ifndef DSOCKD_HOSTCHAN_INT_H
#define DSOCKD_HOSTCHAN_INT_H

#include "daemon/hostchan.h"
#include "daemon/pairing.h"

#include <stdint.h>
#include <sys/socket.h>

/* the channel's first bytes: magic, the claim's id, the token */
#define HELLO_LEN (8 + 8 + DD_CHAN_TOKEN)
/* an end waits this long for its channel (a round trip between the
 * daemons, a connect and TAKEN); a RESULT that comes after the library
 * gave up on the offer (10 s: a busy daemon's offer wait and grace come
 * before this) is ignored there, and the kernel carries the connection */
#define END_WAIT_MS 3000
/* a connection accepted has this long to present its first bytes and be
 * matched (its token may come over the link after it) */
#define ACCEPT_WAIT_MS 3000
/* accepted connections waiting at once: from one address, and in all
 * (the rest of the slots are the dials') */
#define ACCEPT_PER_ADDR 128
#define ACCEPT_MAX (DD_CHAN_SLOTS - 256)

/* a slot: a dial connecting (P_DIAL) or waiting for TAKEN with its first
 * bytes sent (P_SENT), or a connection accepted (P_ACCEPTED) */
enum { P_FREE, P_DIAL, P_SENT, P_ACCEPTED };

struct end {
	struct dd_reply_to to;
	uint64_t sock_id, gen, id;
	unsigned transport;
	int claimant, has_token, slot; /* slot: the claimant's dial (-1: none) */
	uint8_t token[DD_CHAN_TOKEN];
	int64_t deadline;
	struct end *prev, *next; /* every end, for the walks */
	struct end *idnext;      /* same id */
};

struct pend {
	int fd, state;
	int64_t deadline;
	struct end *e;          /* a dial's end */
	struct sockaddr_storage from; /* an accepted one's source */
	unsigned char in[HELLO_LEN];
	size_t nin;
};

extern struct pend hc_pends[DD_CHAN_SLOTS];
extern unsigned long hc_n_dialled, hc_n_accepted, hc_n_refused, hc_n_failed;

int64_t hc_now_ms(void);

/* ---- the ends (hostchan.c) ---- */
/* Draws the key of the ids' table: 0, or -1. */
int hc_ends_start(void);
/* The ends with claim id (a chain through idnext), or NULL. */
struct end *hc_ends_with(uint64_t id);
/* Takes e out of the tables (and closes its dial, if any). */
void hc_end_unlink(struct end *e);
/* The outcome of an end out of the tables: its channel (fd >= 0,
 * PAIRED) or the kernel; then it is freed. */
void hc_answer(struct end *e, int fd, unsigned reason);
/* Both. */
void hc_end_done(struct end *e, int fd, unsigned reason);

/* ---- the channel sockets (hostchan_port.c) ---- */
int hc_port_on(void);
/* The claimant's dial for e: 0, or -reason. */
int hc_dial(struct end *e);
void hc_pend_close(struct pend *p);
/* Accepted connections whose first bytes are read look for their end
 * again (an end or a token came). */
void hc_retry_waiting(void);
/* The waits of accepted connections that ran out end: ms until the next
 * deadline, or -1. */
int hc_port_tick(int64_t now);
void hc_port_stop(void);

#endif

/* Links between this host's daemon and other hosts' daemons: TCP with TLS
 * 1.3, both ends presenting their host key (hostkey.h) and each accepting
 * only a key on its allow-list.  Over a link the daemons ask each other
 * about connections whose two ends are on their two hosts: a claim names
 * the nonces the kernel recorded in one end's handshake (ident.h), and
 * the other host's daemon answers whether it holds the socket whose
 * record crosses them; a match counts only once the claimant confirms
 * that its end still waits, so both ends take one outcome while the link
 * lives and the CONFIRM arrives within the wait (docs/ARCHITECTURE.md,
 * "Between hosts").  A link
 * is dialled on the first claim to a host, to the connection's peer
 * address at DSOCK_HOSTS_PORT, and kept; the data of a connection never
 * crosses a link. */
#ifndef DSOCKD_HOSTLINK_H
#define DSOCKD_HOSTLINK_H

#include "common/proto.h"

#include <stddef.h>
#include <stdint.h>

/* A claim, as one daemon sends it: the claimant's end of a connection,
 * by its record's nonces and its addresses as its kernel sees them. */
struct dd_claim {
	uint64_t id;         /* the claimant's, from a cryptographic source */
	uint64_t sent, recv; /* the end's record */
	uint32_t role;       /* DSOCK_IDENT_ACTIVE: only a connecting end claims */
	uint32_t transport;  /* the claimant's offer's (enum dsock_path): only
			      * an offer to the same transport matches */
	struct dsock_addr local, peer;
};

/* An ANSWER's result; a CONFIRM's too (the claimant's word on MATCHED:
 * its end still waits and takes the match, or it does not). */
enum { DD_CLAIM_MATCHED = 1, DD_CLAIM_REFUSED = 2 };

/* Starts the links where this daemon takes part: the host's daemon
 * (socket_path DSOCK_HOST_SOCKET) when the allow-list exists, a private
 * one when DSOCK_HOSTS_ALLOW names one.  Registers its fds in ep with
 * data.u32 from slot_base up.  0 (on, or off by configuration: logged),
 * or -1 when it was asked for and cannot (logged). */
int dd_hosts_start(const char *socket_path, int ep, uint32_t slot_base);
int dd_hosts_on(void);
/* Reads the allow-list again (SIGHUP): links of hosts no longer on it
 * end at once; a list that cannot be read leaves the old one in force. */
void dd_hosts_reload(void);
/* An epoll event on one of its fds (slot as registered). */
void dd_hosts_event(uint32_t slot, uint32_t events);
/* Deadlines: ms until the next, or -1. */
int dd_hosts_tick(void);
void dd_hosts_stop(void);

/* This host's fingerprint (the key made when missing): 0, or -1 with why. */
int dd_hosts_fingerprint(char *out, char *why, size_t n);

/* Sends claim c to the daemon of the host at addr (dialling it): the
 * link's generation (> 0), or -reason (enum dsock_reason) when no claim
 * can go there now. */
int64_t dd_hosts_claim(const struct dsock_addr *addr, const struct dd_claim *c);
/* Answers claim id that came over link gen (gone: nothing). */
void dd_hosts_answer(uint64_t gen, uint64_t id, unsigned result, unsigned reason);
/* The claimant's CONFIRM of claim id's MATCHED, over link gen: 1 if it
 * is on its way (queued or written, the link still up), else 0. */
int dd_hosts_confirm(uint64_t gen, uint64_t id, unsigned result);
/* The name of allow-list entry host (its index), or "?". */
const char *dd_hosts_name(int host);
/* `dsock stat` lines: this host's key, then one per link. */
int dd_hosts_stat(int (*line)(int fd, const char *text), int fd);

/* Provided by the pairing (pairing.c). */
void dd_pairing_remote_claim(uint64_t gen, int host, const struct dd_claim *c);
void dd_pairing_remote_answer(uint64_t gen, int host, uint64_t id, unsigned result, unsigned reason);
void dd_pairing_remote_confirm(uint64_t gen, int host, uint64_t id, unsigned result);
/* Link gen is gone: its claims, both ways, end (reason: why). */
void dd_pairing_link_down(uint64_t gen, unsigned reason);

#endif

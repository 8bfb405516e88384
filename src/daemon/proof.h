/* Proofs of identity: how the daemon proves, from what the kernel itself
 * recorded, that two offered sockets are the two ends of one connection.
 * Never from a message: a false match hands one tenant's data to another.
 * An offer names its proof (enum dsock_proof); each proof reads the
 * socket (inspect) and says under which key the other end's offer is
 * found (key, mate_key), and whether two candidates really are one
 * connection (proves, then still: both sockets live at one instant). */
#ifndef DSOCKD_PROOF_H
#define DSOCKD_PROOF_H

#include "common/proto.h"

#include <stdint.h>
#include <sys/types.h>

struct dd_ident {
	uint64_t netns;  /* SO_NETNS_COOKIE */
	uint64_t cookie; /* SO_COOKIE: never reused, unlike an inode number */
	ino_t ino;
	struct dsock_addr local, peer;
	uint64_t sent, recv; /* HANDSHAKE: the nonces of this end's record */
	uint32_t role;       /* HANDSHAKE: DSOCK_IDENT_ACTIVE or _PASSIVE */
	uint64_t key;      /* this end's key */
	uint64_t mate_key; /* the key the other end's offer has */
	/* NETNS: the socket was marked for the handshake's proof and its
	 * record is not complete (TCP Fast Open, SYN cookies, a peer without
	 * dsock or without the programs, no option space): unpaired, it
	 * goes to the kernel for that reason */
	int unproven;
};

struct dd_proof {
	unsigned id; /* enum dsock_proof */
	const char *name;
	/* Reads the socket: DSOCK_R_NONE, or why it cannot be paired
	 * (enum dsock_reason). */
	unsigned (*inspect)(int fd, struct dd_ident *out);
	/* 1 if a and b are proven the two ends of one connection, as each
	 * was when it was inspected. */
	int (*proves)(const struct dd_ident *a, const struct dd_ident *b);
	/* 1 if the socket of a waiting offer is still what it was when it was
	 * inspected, asked where fd (the other end, offered now) lives: an
	 * offer waits, and its socket may be reset and its addresses taken by
	 * a new connection before its close reaches us. */
	int (*still)(const struct dd_ident *a, int fd);
};

/* The proof of that id, or NULL. */
const struct dd_proof *dd_proof_get(unsigned id);
/* Inspects fd by the proof an offer names (*reason: DSOCK_R_NONE or why
 * it cannot be paired) and says which proof pairs it: the named one, or
 * HANDSHAKE where the kernel recorded this socket's handshake (ident.h;
 * that proof holds across network namespaces and NAT). */
const struct dd_proof *dd_proof_inspect(const struct dd_proof *named, int fd, struct dd_ident *id,
				       unsigned *reason);

/* Fills id's key and mate_key from its record's nonces (sent, recv), as
 * the HANDSHAKE proof keys an offer: for another host's claim. */
void dd_proof_handshake_keys(struct dd_ident *id);

/* Socket addresses in the daemon's one form (IPv4 v4-mapped). */
int dd_addr_same(const struct dsock_addr *a, const struct dsock_addr *b);

#endif

/* The proofs of identity (proof.h).  First, the proof for connections
 * within one network namespace: both ends in
 * the same namespace (SO_NETNS_COOKIE), two different sockets, each one's
 * local address the other's peer address, both ESTABLISHED TCP, and both
 * live at one instant.  Within one namespace the kernel holds one socket
 * per 4-tuple at a time, so a live mirror is the connection.  Only at one
 * instant: the end that offered first may have been reset since (its
 * close not yet with us, or its owner not yet aware), and a new
 * connection may reuse its addresses at once (no TIME_WAIT after a
 * reset); that new connection's end would mirror the stale offer.  So
 * the waiting end is looked up again when its mate offers (diag.c): the
 * end offered now was ESTABLISHED a moment ago, the waiting one existed
 * before it, and if the kernel still holds the waiting one under its
 * addresses, both were live together. */
#include "daemon/proof.h"
#include "daemon/diag.h"
#include "daemon/ident.h"
#include "common/hmap.h"
#include "common/reason.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71
#endif

int dd_addr_same(const struct dsock_addr *a, const struct dsock_addr *b)
{
	return a->port == b->port && !memcmp(a->addr, b->addr, 16);
}

static uint64_t tuple_key(uint64_t netns, const struct dsock_addr *a, const struct dsock_addr *b)
{
	uint8_t k[44];

	memcpy(k, &netns, 8);
	memcpy(k + 8, &a->port, 2);
	memcpy(k + 10, a->addr, 16);
	memcpy(k + 26, &b->port, 2);
	memcpy(k + 28, b->addr, 16);
	return dsock_hash(k, sizeof(k), 0x4e);
}

static unsigned netns_inspect(int fd, struct dd_ident *o)
{
	struct sockaddr_storage l, p;
	socklen_t ll = sizeof(l), pl = sizeof(p), il = sizeof(int), cl = sizeof(o->netns), kl = sizeof(o->cookie);
	struct tcp_info ti;
	socklen_t tl = sizeof(ti);
	struct stat st;
	int type, proto;

	if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return DSOCK_R_NOT_ESTABLISHED;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &il) < 0 || type != SOCK_STREAM ||
	    getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &il) < 0 || proto != IPPROTO_TCP)
		return DSOCK_R_NOT_TCP;
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) < 0 || ti.tcpi_state != TCP_ESTABLISHED)
		return DSOCK_R_NOT_ESTABLISHED;
	if (getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &o->netns, &cl) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_COOKIE, &o->cookie, &kl) < 0)
		return DSOCK_R_NOT_ESTABLISHED;
	if (getsockname(fd, (struct sockaddr *)&l, &ll) < 0 ||
	    getpeername(fd, (struct sockaddr *)&p, &pl) < 0)
		return DSOCK_R_NOT_ESTABLISHED;
	o->ino = st.st_ino;
	/* compared in one (v4-mapped) form: dd_addr_same */
	dsock_addr_from(&o->local, (const struct sockaddr *)&l);
	dsock_addr_from(&o->peer, (const struct sockaddr *)&p);
	o->key = tuple_key(o->netns, &o->local, &o->peer);
	o->mate_key = tuple_key(o->netns, &o->peer, &o->local);
	return DSOCK_R_NONE;
}

static int netns_proves(const struct dd_ident *a, const struct dd_ident *b)
{
	return a->netns == b->netns && a->ino != b->ino && a->cookie != b->cookie &&
	       dd_addr_same(&a->local, &b->peer) && dd_addr_same(&a->peer, &b->local);
}

static int netns_still(const struct dd_ident *a, int fd)
{
	return dd_diag_holds(fd, a->netns, a->cookie, a->ino, &a->local, &a->peer);
}

/* The proof across namespaces and NAT (ident.h): the socket's record,
 * read by the fd the offer brought, names the nonce its handshake sent
 * and the one it received, and the two ends are the sockets whose records
 * cross.  A record is written by the daemon's BPF programs alone, and its
 * `sent` is fresh kernel randomness or a keyed hash of the peer's, so no
 * socket but the real peer can hold the other half.  The socket is first
 * inspected as for the netns proof (TCP, established, its addresses for
 * the rules and `dsock stat`).  No `still`: a socket reset and its
 * addresses reused meanwhile make a new connection with new nonces,
 * which cannot match the old one's. */
static uint64_t nonce_key(uint64_t a, uint64_t b)
{
	uint64_t k[2] = { a, b };

	return dsock_hash(k, sizeof(k), 0x6873);
}

void dd_proof_handshake_keys(struct dd_ident *id)
{
	id->key = nonce_key(id->sent, id->recv);
	id->mate_key = nonce_key(id->recv, id->sent);
}

/* Adds the socket's record to what netns_inspect read: 0; 1 where it has
 * a record that is not complete (the socket connected marked, and its
 * handshake did not carry both nonces); -1 where it has none. */
static int handshake_record(int fd, struct dd_ident *o)
{
	const uint32_t complete = DSOCK_IDENT_HANDSHAKE | DSOCK_IDENT_GOT_PEER;
	struct dsock_ident_rec r;

	if (dd_ident_read(fd, &r) || !(r.flags & (DSOCK_IDENT_ACTIVE | DSOCK_IDENT_PASSIVE)))
		return -1; /* none, or a mark alone: an accepted child whose client sent no nonce */
	if (r.version != DSOCK_IDENT_VERSION || (r.flags & complete) != complete || !r.sent || !r.recv ||
	    r.sent == r.recv || !(r.flags & DSOCK_IDENT_ACTIVE) == !(r.flags & DSOCK_IDENT_PASSIVE))
		return 1;
	o->sent = r.sent;
	o->recv = r.recv;
	o->role = r.flags & (DSOCK_IDENT_ACTIVE | DSOCK_IDENT_PASSIVE);
	o->key = nonce_key(r.sent, r.recv);
	o->mate_key = nonce_key(r.recv, r.sent);
	return 0;
}

static unsigned handshake_inspect(int fd, struct dd_ident *o)
{
	unsigned reason = netns_inspect(fd, o);

	if (reason == DSOCK_R_NONE && handshake_record(fd, o))
		reason = DSOCK_R_PEER_PLAIN;
	return reason;
}

static int handshake_proves(const struct dd_ident *a, const struct dd_ident *b)
{
	return a->sent == b->recv && a->recv == b->sent && a->role != b->role && a->cookie != b->cookie;
}

static const struct dd_proof proofs[] = {
	{ DSOCK_PROOF_NETNS, "netns", netns_inspect, netns_proves, netns_still },
	{ DSOCK_PROOF_HANDSHAKE, "handshake", handshake_inspect, handshake_proves, NULL },
};

const struct dd_proof *dd_proof_inspect(const struct dd_proof *named, int fd, struct dd_ident *id,
				       unsigned *reason)
{
	int rec;

	*reason = named->inspect(fd, id);
	if (*reason != DSOCK_R_NONE || named->id != DSOCK_PROOF_NETNS)
		return named;
	if (!(rec = handshake_record(fd, id)))
		return dd_proof_get(DSOCK_PROOF_HANDSHAKE);
	id->unproven = rec > 0;
	return named;
}

const struct dd_proof *dd_proof_get(unsigned id)
{
	for (size_t i = 0; i < sizeof(proofs) / sizeof(proofs[0]); i++)
		if (proofs[i].id == id)
			return &proofs[i];
	return NULL;
}

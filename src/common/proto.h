/* The dsockd control protocol: versioned, length-prefixed messages on an
 * AF_UNIX SOCK_SEQPACKET socket (one message per packet, so a message can
 * never be split or merged with the next).  Shared by libdsock, dsockd and
 * the CLI.  All fields are fixed-width; every received message is checked
 * by dsock_msg_check() before any field is used. */
#ifndef DSOCK_PROTO_H
#define DSOCK_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define DSOCK_PROTO_MAGIC   0x4b435344u /* "DSCK" little-endian */
#define DSOCK_PROTO_VERSION 12 /* 2: the event ring holds 1,024 slots; 3: the
			      * connection memory is layout version 5 (the
			      * daemon writes it: a change there is a change
			      * here); 4: layout version 6; 5: the reason
			      * consumer-asleep, and fd -1 in a socket event;
			      * 6: PEER_REQ, layout version 7; 7: offers and
			      * results name their transport and proof, FETCH
			      * replaces MEMFD_REQ; 8: links (RESULT of kind
			      * LINK), layout version 8; 9: pools (RESULT
			      * of kind POOL), layout version 9; 10: HELLO
			      * flag POOLS, POOL without a memfd; 11:
			      * bells (RESULT of kind BELL), link layout
			      * version 2; 12: HELLO's parent_evpos and
			      * parent_seq, the ring's lost count */
#define DSOCK_MSG_MAX       4096

enum dsock_msg_type {
	DSOCK_MSG_HELLO = 1,      /* lib -> d: register this process */
	DSOCK_MSG_SOCK_EVENT = 2, /* lib -> d: a socket changed state */
	DSOCK_MSG_STAT_REQ = 3,   /* cli -> d: send me your view */
	DSOCK_MSG_STAT_LINE = 4,  /* d -> cli: one text record of the view */
	DSOCK_MSG_STAT_END = 5,   /* d -> cli: end of the view */
	DSOCK_MSG_SHUTDOWN = 6,   /* cli -> d: exit cleanly */
	DSOCK_MSG_ACK = 7,        /* d -> any: request done */
	DSOCK_MSG_ERROR = 8,      /* d -> any: request refused (payload: errno) */
	DSOCK_MSG_OFFER = 9,      /* lib -> d: pair this established TCP socket
				   * (the socket itself attached, SCM_RIGHTS) */
	DSOCK_MSG_RESULT = 10,    /* d -> lib: the pairing's outcome (when paired,
				   * the connection's memfd attached) */
	DSOCK_MSG_FETCH = 11,     /* lib -> d: the transport's resource of this
				   * paired socket again (the socket attached),
				   * for an exec; answered by a RESULT of kind
				   * FETCHED */
	DSOCK_MSG_EVENTS = 12,    /* lib -> d: read my event ring (no payload) */
	DSOCK_MSG_PEER_REQ = 13,  /* lib -> d: the other end's kernel socket of
				   * this paired socket (attached), for a
				   * hand-over; answered by a RESULT of kind PEER */
	DSOCK_MSG_TYPE_MAX = 13,
};

/* Messages that carry exactly one fd (SCM_RIGHTS); every other type
 * carries none, and a stray fd is closed and the message refused.  HELLO
 * carries the process's mail page (a sealed 4 KiB memfd): the daemon bumps
 * its counter whenever it sends the process a RESULT, so the library learns
 * of mail with a memory read instead of a system call. */
static inline int dsock_msg_has_fd(unsigned type)
{
	return type == DSOCK_MSG_HELLO || type == DSOCK_MSG_OFFER || type == DSOCK_MSG_FETCH ||
	       type == DSOCK_MSG_PEER_REQ;
}

struct dsock_mail_page {
	uint64_t mail_seq; /* written by the daemon only */
	uint64_t closed;   /* the daemon let go of us (it stopped, or dropped
			    * our connection): events written to the ring
			    * would go unread, so the library reconnects */
};

/* Who carries a connection's data: the kernel, or a transport.  The ids
 * name the same transport in the library (its table's `id`), in the
 * daemon (its provisioning) and in `dsock stat`.  SOCKETPAIR exists for
 * the tests: its ends get one socketpair (daemon/prov_socketpair.c). */
enum dsock_path { DSOCK_PATH_KERNEL = 1, DSOCK_PATH_SHM = 2, DSOCK_PATH_SOCKETPAIR = 3, DSOCK_PATH_MAX = 3 };

/* How the daemon proves that two offered sockets are one connection's two
 * ends (daemon/proof.c).  NETNS: both in one network namespace, each
 * one's local address the other's peer address.  HANDSHAKE: each one's
 * handshake carried the nonce the other recorded (daemon/ident.c, BPF):
 * across namespaces and NAT.  An offer names NETNS; the daemon proves by
 * HANDSHAKE instead where both ends have complete records. */
enum dsock_proof { DSOCK_PROOF_NETNS = 1, DSOCK_PROOF_HANDSHAKE = 2, DSOCK_PROOF_MAX = 2 };

/* An offer is for one transport, proven one way; the RESULT names the
 * transport it answers, so the library routes it to the one that asked. */
enum { DSOCK_OFFER_CONNECT = 1, DSOCK_OFFER_ACCEPT = 2 };
struct dsock_msg_offer {
	uint64_t sock_id;
	uint32_t role;      /* DSOCK_OFFER_CONNECT or _ACCEPT */
	uint16_t transport; /* enum dsock_path, not KERNEL */
	uint16_t proof;     /* enum dsock_proof */
};

/* HELD: the daemon inspected the offered socket and closed its copy; the
 * answer comes later.  Until then the socket's close must wait: a socket
 * still in flight to the daemon would outlive its close (RST, not FIN). */
enum dsock_result {
	DSOCK_RES_PAIRED = 1,
	DSOCK_RES_KERNEL = 2,
	DSOCK_RES_HELD = 3,
	DSOCK_RES_FETCHED = 4,
	DSOCK_RES_PEER = 5,
	DSOCK_RES_LINK = 6,
	DSOCK_RES_POOL = 7,
	DSOCK_RES_BELL = 8,
};

/* FETCH: a transport's endpoints may close the resource the pairing gave
 * them (the shm transport closes its memfd once mapped: an fd per
 * connection would count against the application's fd limit), and the
 * daemon keeps it until the connection ends.  Only a process that sends
 * one of the connection's two sockets gets it (matched by SO_COOKIE, which
 * the kernel never reuses).  The answer is a RESULT of kind FETCHED for
 * sock_id, with the resource attached, or without one when the daemon
 * has none (the connection then goes back to the kernel for the exec). */
struct dsock_msg_fetch {
	uint64_t sock_id;
	uint16_t transport; /* enum dsock_path: the transport that asks */
	uint16_t pad[3];
};

/* PEER_REQ: a connection handed to a holder without dsock goes back to
 * the kernel in both directions first, and the peer's direction needs
 * the peer's kernel socket: what the peer wrote into the ring goes there,
 * after the bytes the peer's kernel stream already carries.  A peer that
 * is asleep, computing or stopped cannot do it in time, so the daemon,
 * where it may (pidfd_getfd: ptrace access to the peer's process), takes
 * the peer's socket from its process and lends it to the hander, who
 * moves the peer's direction itself and closes it (handover.c, peer_back).
 * Only a process that sends one of the connection's two sockets (matched
 * by SO_COOKIE) gets the other, and only when it runs as root or as the
 * peer process's user.  The request may come on a connection of its own
 * with no HELLO (a vfork child, or a process that closed its control
 * socket before exec).  The answer is a RESULT of kind PEER for sock_id
 * with the socket attached, or none and the errno in `reason`. */
struct dsock_msg_peer_req {
	uint64_t sock_id;
};

/* RESULT of kind LINK: the memfd of a link (shm_layout.h), shared by two
 * processes with connections on the rings between them, sent to each of
 * them before the first PAIRED result that names it; the same kind
 * without a memfd says that the link's other process left (the receiver
 * unmaps it once none of its connections uses it).  RESULT of kind POOL:
 * the memfd of a pool of connection memory (shm_layout.h) that belongs to
 * a link, sent to each of its two processes before the first PAIRED
 * result that names it; the link's end ends the pool's use for new
 * connections (the receiver unmaps it once none of its connections uses
 * it).  RESULT of kind BELL: an eventfd (nonblocking) that wakes a
 * process's sleeping pollers, one per process: with link 0 the
 * receiver's own (sent once, before its first LINK), else the bell of the
 * other process of that link (sent right after the LINK), which the
 * receiver rings when it announces to that process while one of its
 * pollers sleeps (shm_layout.h). */
struct dsock_msg_result {
	uint64_t sock_id;
	uint16_t transport; /* enum dsock_path: the transport of the offer
			     * or fetch (PEER: 0) */
	uint16_t link_side; /* PAIRED, LINK, BELL: our side of the link */
	uint32_t result;    /* enum dsock_result */
	uint32_t side;      /* PAIRED: 0 or 1, which half of the memfd is ours */
	uint32_t reason;    /* KERNEL: enum dsock_reason; PEER without a
			     * socket: why (an errno) */
	uint32_t ring_size; /* PAIRED, FETCHED: shm's bytes per direction;
			     * socketpair's PAIRED: 1 when the pair is
			     * framed as a channel */
	uint32_t link;      /* PAIRED: the link of the two processes (0:
			     * none); LINK: the link given (its memfd
			     * attached), or without a memfd: the other
			     * process of that link left; POOL: the link
			     * the pool belongs to */
	uint32_t pool;      /* PAIRED: the resource is part of this pool,
			     * which the process already holds (no fd comes
			     * with the result); 0: the fd attached is the
			     * resource.  POOL: the pool given (its memfd
			     * attached) */
	uint32_t pool_page; /* PAIRED with a pool, FETCHED: where the
			     * resource starts in the memory, in 4 KiB pages */
};

struct dsock_msg_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t len; /* whole message, header included */
	uint32_t seq;
};

#define DSOCK_HELLO_FORKED   0x1u /* process is a fork child of ppid */
#define DSOCK_HELLO_DISABLED 0x2u /* program denied by rules: passthrough only */
#define DSOCK_HELLO_POOLS    0x4u /* it maps pools of its parent's links and
				   * counts in their slots (a fork child, or a
				   * program that adopted connections at exec) */
#define DSOCK_HELLO_FLAGS    0x7u

struct dsock_msg_hello {
	uint32_t flags;
	int32_t ppid;
	char comm[32]; /* NUL-terminated, printable */
	char lib_version[16];
	/* a fork child: the events its parent had written to its ring, and
	 * the header seq of the last message it had sent, when it forked
	 * (the child holds none of the sockets the parent told of later) */
	uint64_t parent_evpos;
	uint32_t parent_seq;
	uint32_t pad;
};

/* A socket address as the daemon sees it: IPv4 is stored v4-mapped. */
struct dsock_addr {
	uint16_t family; /* AF_INET, AF_INET6 or 0 (unknown) */
	uint16_t port;   /* host order */
	uint8_t addr[16];
};

enum dsock_sock_event {
	DSOCK_EV_OPEN = 1,    /* known socket (listen, bind, inherited) */
	DSOCK_EV_CONNECT = 2, /* connect() succeeded or is in progress */
	DSOCK_EV_ACCEPT = 3,  /* accept() returned a connection */
	DSOCK_EV_CLOSE = 4,   /* last fd of the socket closed */
	DSOCK_EV_MAX = 4,
};

enum dsock_sock_state {
	DSOCK_ST_OPEN = 1,
	DSOCK_ST_BOUND = 2,
	DSOCK_ST_LISTENING = 3,
	DSOCK_ST_CONNECTING = 4,
	DSOCK_ST_CONNECTED = 5,
	DSOCK_ST_MAX = 5,
};

struct dsock_msg_sock_event {
	uint32_t event;  /* enum dsock_sock_event */
	int32_t fd;      /* -1: the fd and addresses as told before (the
			  * sender does not know them here) */
	uint64_t sock_id; /* unique within the sending process */
	uint16_t domain;
	uint16_t type;
	uint16_t state;  /* enum dsock_sock_state */
	uint16_t path;   /* enum dsock_path */
	uint16_t reason; /* enum dsock_reason */
	uint16_t pad;
	struct dsock_addr local;
	struct dsock_addr peer;
};

/* The event ring: socket events without a message each.  It follows the
 * mail page in the same memfd (DSOCK_MAIL_SIZE bytes): the library writes
 * events and `tail`, the daemon reads them and writes `head`.  The daemon
 * reads a process's ring before it handles any message of that process
 * (so a message never overtakes an event written before it), before it
 * answers an offer or a stat request (all processes), when the process
 * leaves, and when the process rings (DSOCK_MSG_EVENTS, sent when the
 * ring is half full).  Events that matter at once (listeners, fast-path
 * sockets) still go as messages.  Nor does an event overtake a message sent
 * before it (`after`): the daemon may read the ring while messages of the
 * process still wait in its socket (for another process's offer or stat
 * request, or for a doorbell sent before them), and a CLOSE read before
 * the CONNECT that went as a message while the ring was full would leave
 * a closed socket in stat.  Each side trusts only its private copy of its
 * own index and checks the other's; the daemon checks every event it
 * copies out as it checks a SOCK_EVENT message.  (A message per event
 * would cost a daemon wake-up per event.) */
#define DSOCK_EVRING_OFF   4096
/* 1,024 slots (76 KiB, touched only as far as a process writes): a
 * connect/accept/close loop rings about every 128 connections, and each
 * doorbell wakes the daemon at the sender's expense (docs/ARCHITECTURE.md,
 * "Design decisions and measurements"). */
#define DSOCK_EVRING_SLOTS 1024u /* power of two */
struct dsock_ev_ring {
	uint64_t tail; /* events ever written (the library) */
	uint64_t lost; /* events the library could not send (the daemon's
			* view of the process may be stale; shown in stat) */
	uint8_t pad0[48];
	uint64_t head; /* events ever read (the daemon) */
	uint8_t pad1[56];
	struct dsock_msg_sock_event ev[DSOCK_EVRING_SLOTS];
	/* per slot: the header seq of the last message (a doorbell aside) the
	 * library sent before it wrote the event; the daemon applies the event
	 * only once it has handled that message */
	uint32_t after[DSOCK_EVRING_SLOTS];
};
#define DSOCK_MAIL_SIZE \
	((DSOCK_EVRING_OFF + sizeof(struct dsock_ev_ring) + 4095) / 4096 * 4096)

struct dsock_msg_error {
	int32_t err; /* positive errno */
};

/* Checks one socket event's fields (a message's or a ring slot's):
 * 0 or -EBADMSG. */
int dsock_sock_event_check(const struct dsock_msg_sock_event *m);

/* Checks a received message of n bytes: magic, version, known type, length
 * equal to n and to the type's payload size, and the payload's own fields.
 * Returns 0 or -EBADMSG / -EPROTO (version) / -EMSGSIZE. */
int dsock_msg_check(const void *buf, size_t n);

/* Fills a header for a message of type with payload_len bytes after it. */
void dsock_msg_init(struct dsock_msg_hdr *h, uint16_t type, size_t payload_len,
		    uint32_t seq);

const char *dsock_event_name(unsigned ev);
const char *dsock_state_name(unsigned st);
const char *dsock_path_name(unsigned path);

/* Formats "1.2.3.4:80" / "[::1]:80" / "-" into buf. */
void dsock_addr_format(const struct dsock_addr *a, char *buf, size_t n);
/* A socket address in the protocol's form (IPv4 v4-mapped, family kept);
 * anything but AF_INET and AF_INET6 gives family 0. */
struct sockaddr;
void dsock_addr_from(struct dsock_addr *out, const struct sockaddr *a);

#endif

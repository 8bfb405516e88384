/* The kernel-recorded proof of identity's shared terms: what the BPF
 * programs (daemon/bpf/ident.bpf.c) record per socket, the option they
 * carry, and the socket option level through which a socket opts in.
 * Included by the BPF programs (UAPI types only), the daemon and the
 * library. */
#ifndef DSOCK_COMMON_IDENT_H
#define DSOCK_COMMON_IDENT_H

#include <linux/types.h>

#define DSOCK_SOL            0x6473 /* setsockopt/getsockopt level ("ds") */
#define DSOCK_OPTIN          1      /* set before connect()/listen(): opt in */
#define DSOCK_IDENTITY       2      /* get: the socket's record */

/* RFC 6994 experimental option: kind 254, length 12, ExID 0xd50c, then
 * the 8-byte nonce */
#define DSOCK_IDENT_OPT_KIND 254
#define DSOCK_IDENT_OPT_LEN  12
#define DSOCK_IDENT_EXID_HI  0xd5
#define DSOCK_IDENT_EXID_LO  0x0c

#define DSOCK_IDENT_VERSION  2
enum {
	DSOCK_IDENT_ACTIVE = 1,    /* this end connected */
	DSOCK_IDENT_PASSIVE = 2,   /* this end was accepted */
	DSOCK_IDENT_GOT_PEER = 4,  /* recv holds the peer's nonce */
	DSOCK_IDENT_HANDSHAKE = 8, /* recorded in the handshake itself */
	DSOCK_IDENT_MARKED = 16,   /* opted in (a listener's children inherit it) */
	DSOCK_IDENT_ECHO = 32,     /* active: its nonce goes once more, after the SYN-ACK */
};

/* How many segments after the SYN-ACK echo the client's nonce: the third
 * ACK, and the next one for a listener that drops a bare ACK
 * (TCP_DEFER_ACCEPT) and makes its child from the first data segment. */
#define DSOCK_IDENT_ECHOES   2

/* One socket's record (socket-local storage, written by the programs
 * only): two sockets are one connection's ends iff each one's recv is the
 * other's sent (and both are complete, of opposite roles). */
struct dsock_ident_rec {
	__u64 sent;   /* the nonce this end's handshake segment carried */
	__u64 recv;   /* the nonce the peer's carried (0: none came) */
	__u64 netns;  /* this end's network namespace cookie */
	__u32 flags;  /* DSOCK_IDENT_* */
	__u16 version;
	__u16 echoes; /* active: echoes of sent still to go */
};

#endif

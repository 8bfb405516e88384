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
#define DSOCK_PROTO_VERSION 1
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
	DSOCK_MSG_TYPE_MAX = 8,
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
#define DSOCK_HELLO_FLAGS    0x3u

struct dsock_msg_hello {
	uint32_t flags;
	int32_t ppid;
	char comm[32]; /* NUL-terminated, printable */
	char lib_version[16];
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

enum dsock_path { DSOCK_PATH_KERNEL = 1, DSOCK_PATH_MAX = 1 };

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
	int32_t fd;
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

struct dsock_msg_error {
	int32_t err; /* positive errno */
};

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

#endif

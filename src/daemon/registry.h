/* What the daemon knows: registered processes and the sockets each told it
 * about.  Identity comes from SO_PEERCRED, never from a message.  Hashed:
 * a socket's event, and the questions the pairing asks (is there a dsock
 * listener for this address, has a dsock process reported this
 * connection's other end), cost the same however many sockets there are. */
#ifndef DSOCKD_REGISTRY_H
#define DSOCKD_REGISTRY_H

#include "common/proto.h"
#include "common/hmap.h"

#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#define DD_SOCKS_PER_PROC_MAX 65536

struct dd_sock {
	uint64_t id;
	int32_t fd;
	uint16_t domain, type, state, path, reason, event;
	uint16_t host; /* its other end's host (allow-list entry + 1; 0: none known) */
	struct dsock_addr local, peer;
	uint64_t lkey, ckey; /* its entries in the listener and connection
			      * indexes (0: none) */
	/* what made this record: the process's ring events up to that one,
	 * or that message's header seq (0 and 0: inherited) */
	uint64_t born_ev;
	uint32_t born_seq;
};

struct dd_proc {
	pid_t pid, ppid;
	unsigned long long start; /* its start time (lineage.h; 0: not known) */
	uid_t uid;
	/* its network namespace's inode (as `lsns` and /proc/PID/ns/net name
	 * it; 0: not readable), read at registration: where its sockets are
	 * made unless it enters another namespace for one */
	unsigned long long netns;
	unsigned flags; /* DSOCK_HELLO_* */
	char comm[32];
	char version[16];
	time_t since;
	struct dd_sock *socks;
	size_t nsocks, cap;
	struct dsock_hmap ids; /* socket id -> index in socks */
	unsigned long untracked; /* events past DD_SOCKS_PER_PROC_MAX */
	struct dsock_mail_page *mail; /* the process's mail page, or NULL */
	size_t mail_len;              /* its mapping's length */
	struct dsock_ev_ring *evr;    /* its event ring (in that mapping), or NULL */
	uint64_t ev_head;             /* events read from it (ours, not the ring's) */
	uint32_t seen_seq;            /* header seq of its last message handled */
	struct dd_proc *next;
};

struct dd_proc *dd_proc_add(pid_t pid, uid_t uid, const struct dsock_msg_hello *h);
void dd_proc_remove(struct dd_proc *p);
/* The inode of process pid's network namespace (0: not readable). */
unsigned long long dd_proc_netns(pid_t pid);
struct dd_proc *dd_proc_find(pid_t pid);
struct dd_proc *dd_proc_first(void);
size_t dd_proc_count(void);
/* Copies the parent's sockets into a fork child (same uid only): those its
 * first evpos ring events or its messages up to seq made (a socket the
 * parent told of after the fork is not the child's). */
void dd_proc_inherit(struct dd_proc *child, const struct dd_proc *parent, uint64_t evpos, uint32_t seq);
/* Applies a socket event, the ring's event number ev (counted from 1) or
 * the message of header seq (ev 0); returns 0 or -ENOMEM. */
int dd_proc_event(struct dd_proc *p, const struct dsock_msg_sock_event *ev, uint64_t born_ev, uint32_t born_seq);
/* 1 if an enabled dsock process listens (TCP) where a connects to: on its
 * address or on the wildcard, at its port. */
int dd_listener_known(const struct dsock_addr *a);
/* The addresses of p's socket sock_id, from the socket itself (an offer):
 * a connection's event comes without its local address (the library
 * does not ask for it), which this fills in. */
void dd_proc_learn(struct dd_proc *p, uint64_t sock_id, const struct dsock_addr *local,
		   const struct dsock_addr *peer);
/* Notes that p's socket sock_id has its other end on host (hostlink.h):
 * 1, or 0 when p holds no such socket (closed, or never told of). */
int dd_proc_set_host(struct dd_proc *p, uint64_t sock_id, int host);
/* 1 if an enabled dsock process reported a TCP socket whose own address
 * is local and whose peer's is peer. */
int dd_socket_known(const struct dsock_addr *local, const struct dsock_addr *peer);

#endif

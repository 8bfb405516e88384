/* The socket layer: what dsock knows about each socket the process holds,
 * the fd table that maps fd numbers to it, and the lifecycle hooks the
 * interposition layer calls.
 *
 * Objects are type-stable: they come from slabs that are never unmapped, so
 * a lock-free reader may look at one that is being freed and will only see a
 * stale value, never fault.  A reference (ref) is held by every fd-table slot
 * pointing at the object (dup shares one object) and by every in-flight
 * lookup that needs more than the tp field. */
#ifndef DSOCK_SOCK_H
#define DSOCK_SOCK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct dsock_transport;

#define DSOCK_SF_REPORTED  0x1u /* the daemon has been told about it */
#define DSOCK_SF_INHERITED 0x2u /* found at start-up (exec inheritance) */
#define DSOCK_SF_NONBLOCK  0x4u /* O_NONBLOCK as last set through us */
#define DSOCK_SF_LISTENED  0x8u /* it listened: no transport carries it, ever
				  * (a set holding it may sleep light: light.h) */

struct dsock_sock {
	_Atomic int ref;                  /* 0: free */
	_Atomic int solo_used;            /* the solo thread has used it (solo.h);
					   * never cleared, as the object is reused */
	int domain, type, protocol;       /* type without SOCK_NONBLOCK/CLOEXEC */
	_Atomic unsigned flags;           /* DSOCK_SF_* */
	uint16_t state;                   /* enum dsock_sock_state */
	uint16_t reason;                  /* enum dsock_reason */
	uint16_t ev;                      /* last event told to the daemon, 0: none */
	uint64_t id;                      /* unique in this process */
	const struct dsock_transport *tp; /* NULL: the kernel carries the data */
	void *tp_priv;
	/* the transport whose state tp_priv is: it stays the owner after tp
	 * goes back to NULL (fallback to the kernel), and releases it at the
	 * last put */
	const struct dsock_transport *owner;
	struct dsock_sock *next_free;
	size_t hid_idx;                   /* its place on the hidden list (hidden.c) */
};

/* ---- objects ----------------------------------------------------------- */
/* A new object with ref 1, or NULL when memory is exhausted. */
struct dsock_sock *dsock_sock_new(int domain, int type, int protocol);
void dsock_sock_hold(struct dsock_sock *s);
/* Drops a reference; the last one releases the transport, tells the daemon
 * and frees the object. */
void dsock_sock_put(struct dsock_sock *s);
/* Lock and unlock the allocator around fork (see core/init.c). */
void dsock_sock_fork_prepare(void);
void dsock_sock_fork_parent(void);
void dsock_sock_fork_child(void);

/* ---- transport fields -------------------------------------------------- */
/* Only these write tp, tp_priv and owner.  attach: t carries the data from
 * now on, with priv as its state (release: a reader that sees tp sees
 * priv's state).  detach: the kernel carries the data again, for reason
 * (enum dsock_reason); owner and tp_priv stay until the last put hands
 * them to owner->release, as a racing caller may still be inside t. */
void dsock_sock_attach(struct dsock_sock *s, const struct dsock_transport *t, void *priv);
void dsock_sock_detach(struct dsock_sock *s, unsigned reason);
/* Sockets carried by a transport with waits (transport.h): while > 0 the
 * pollers look at each fd they are given. */
extern _Atomic long dsock_waits_socks;
/* What the kernel is asked to watch for s's epoll registrations follows
 * its transport's waits again (epset.c): the transport calls it when they
 * change, attach and detach when the transport does.  Takes the epoll
 * registrations' lock: not to be called from a transport's waits op. */
void dsock_sock_rewatch(struct dsock_sock *s);

/* ---- fd table ---------------------------------------------------------- */
#define DSOCK_FDT_CHUNK_BITS 10
#define DSOCK_FDT_CHUNK      (1u << DSOCK_FDT_CHUNK_BITS)
#define DSOCK_FDT_CHUNKS     4096u /* fds up to 4M */

extern _Atomic(struct dsock_sock *) *_Atomic dsock_fdt[DSOCK_FDT_CHUNKS];

/* Lock-free look-up without a reference: only for testing whether fd has a
 * transport (the hot path of every call).  NULL when dsock knows nothing. */
static inline struct dsock_sock *dsock_fdt_peek(int fd)
{
	_Atomic(struct dsock_sock *) *chunk;

	if ((unsigned)fd >= DSOCK_FDT_CHUNKS * DSOCK_FDT_CHUNK)
		return NULL;
	chunk = atomic_load_explicit(&dsock_fdt[(unsigned)fd >> DSOCK_FDT_CHUNK_BITS],
				     memory_order_acquire);
	if (!chunk)
		return NULL;
	return atomic_load_explicit(&chunk[(unsigned)fd & (DSOCK_FDT_CHUNK - 1)],
				    memory_order_acquire);
}

/* Look-up with a reference (drop it with dsock_sock_put), or NULL. */
struct dsock_sock *dsock_fdt_get(int fd);

/* The one look-up before a call into a transport: the socket, with a
 * reference, when a transport carries fd now (*tp: that transport), else
 * NULL: one lock-free load when the kernel carries fd. */
static inline struct dsock_sock *dsock_sock_carried(int fd, const struct dsock_transport **tp)
{
	struct dsock_sock *s = fd >= 0 ? dsock_fdt_peek(fd) : NULL;

	if (__builtin_expect(!s || !__atomic_load_n(&s->tp, __ATOMIC_ACQUIRE), 1))
		return NULL;
	if (!(s = dsock_fdt_get(fd)))
		return NULL;
	*tp = __atomic_load_n(&s->tp, __ATOMIC_ACQUIRE);
	if (!*tp) {
		dsock_sock_put(s);
		return NULL;
	}
	return s;
}
/* Puts s (whose reference the table takes over) at fd and returns what was
 * there (whose table reference the caller now owns), or NULL.  s may be NULL
 * to clear the slot.  Returns (void *)-1 when fd is out of range or memory
 * for the table is exhausted (then s is not taken). */
struct dsock_sock *dsock_fdt_swap(int fd, struct dsock_sock *s);
#define DSOCK_FDT_FAIL ((struct dsock_sock *)-1)
/* Calls fn for every occupied slot (no references taken: use it only where
 * no other thread mutates the table, e.g. after fork or under the guard of a
 * single-threaded start-up). */
void dsock_fdt_walk(void (*fn)(int fd, struct dsock_sock *s, void *arg), void *arg);

/* ---- lifecycle hooks (called by the interposition layer) --------------- */
/* All return 0/-errno or a count, like the calls they wrap. */
int dsock_sock_socket(int domain, int type, int protocol);
int dsock_sock_socketpair(int domain, int type, int protocol, int sv[2]);
int dsock_sock_bind(int fd, const struct sockaddr *a, socklen_t len);
int dsock_sock_listen(int fd, int backlog);
/* Marks an inet stream socket for the kernel-recorded proof before it
 * connects to a (optin.c): not for loopback. */
void dsock_optin(int fd, const struct sockaddr *a);
/* The same before a listen, by the address it is bound to. */
void dsock_optin_listener(int fd);
int dsock_sock_connect(int fd, const struct sockaddr *a, socklen_t len);
/* A stream socket connected by its first send (sendto or sendmsg with
 * MSG_FASTOPEN and an address; sent: the call succeeded, else it is in
 * progress): TCP Fast Open leaves its handshake no room for the proof's
 * option and carries its first bytes in the SYN, so the kernel carries
 * it, reported as a connection with that reason and never offered. */
void dsock_sock_fastopen(int fd, const struct sockaddr *a, int sent);
int dsock_sock_accept4(int fd, struct sockaddr *a, socklen_t *len, int flags, int is_accept4);
int dsock_sock_close(int fd);
int dsock_sock_close_range(unsigned first, unsigned last, int flags);
int dsock_sock_dup(int oldfd, int newfd, int flags, int how);
int dsock_sock_setfl(int fd, int flags);
void dsock_sock_set_nonblock(int fd, int on);

enum { DSOCK_DUP_ANY = 1, DSOCK_DUP2, DSOCK_DUP3, DSOCK_DUP_FCNTL, DSOCK_DUP_FCNTL_CLOEXEC };

/* Registers the sockets inherited across exec (scans /proc/self/fd). */
void dsock_sock_scan_inherited(void);

/* ---- reports to the daemon (report.c) ---------------------------------- */
/* s changed state (ev: enum dsock_sock_event); fd is one of its fds (-1:
 * the fd and addresses as told before). */
void dsock_sock_report(struct dsock_sock *s, int fd, unsigned ev);
/* The same for a connection just made, with its addresses as at hand: a
 * NULL peer is asked of the kernel, a NULL local is not (the daemon
 * learns it from the socket at the offer, and a connection that ends
 * before its offer never costs the call). */
void dsock_sock_report_at(struct dsock_sock *s, int fd, unsigned ev, const struct sockaddr *local,
			  const struct sockaddr *peer);
/* Tells a newly (re)connected daemon what the process holds (the daemon
 * client calls it: dsock_ctl_set_replay). */
void dsock_sock_replay(int listeners_only);
/* The process set up an io_uring (uring.c): from now on the kernel carries
 * every connection.  dsock_uring_seen: 1 once it did. */
void dsock_sock_uring(void);
extern _Atomic int dsock_uring_seen;

#endif

/* The shared-memory transport: TCP connections between dsock processes on
 * one host move onto a pair of rings in one memfd.
 *
 * States of a connection, per process:
 *   OFFER_DUE  connected or accepted (or a nonblocking connect in progress):
 *              the first data call or readiness check offers
 *   PENDING    offered to the daemon, no answer yet: the kernel carries data
 *   ATTACHED   the memfd is mapped and this side said so in it; once the
 *              peer has attached too, each side moves its sending to the
 *              ring at an exact kernel byte offset (switch_off), and each
 *              receiver drains the kernel up to the peer's offset first
 *   (KERNEL)   final: the socket leaves the transport (tp = NULL)
 *
 * After the switch every byte on the kernel socket is a wake-up token: the
 * kernel socket is the doorbell, so readiness stays native for any poller,
 * and a dead peer shows up as FIN or RST.  A producer sends a token only if
 * the consumer is not polling (lease_until lease) and no token is
 * outstanding. */
#ifndef DSOCK_SHM_H
#define DSOCK_SHM_H

#include "common/shm_layout.h"
#include "lib/sock/ready.h"
#include "lib/sock/sock.h"
#include "lib/transport/transport.h"

#include <pthread.h>
#include <stdint.h>

enum { SC_OFFER_DUE = 1, SC_PENDING, SC_ATTACHED };

/* What a PAIRED result gives a connection: its memory (a memfd, or slot
 * `page` of pool `pool`, which this process holds), its side, the ring
 * size and its link as named on daemon connection gen. */
struct shm_given {
	int memfd;           /* -1 with a pool */
	uint32_t pool, page;
	int side;
	uint32_t size;
	uint32_t link;
	int link_side;
	unsigned gen;
};

/* Where a ring's bytes lie (shm_layout.h: map): byte i at
 * (i + shift) & (w - 1).  w 0: the word breaks the rules. */
struct ring_map {
	uint32_t w, shift;
};

struct shm_conn {
	_Atomic int state;   /* SC_*: any thread of ours may look */
	_Atomic int offering; /* a thread is offering (OFFER_DUE) */
	int refuse;          /* refuse the pairing, why (a DSOCK_R_*): forked or
			      * exec'ed while pending, or an option the ring
			      * cannot carry (SO_RCVLOWAT); 0: no */
	int calls;           /* OFFER_DUE: data calls so far (offering thread) */
	int offer_busy;      /* offers the daemon's full queue refused */
	_Atomic int64_t early_sent; /* bytes sent on the kernel before the offer
				     * (under mu; the calibration subtracts them) */
	int offer_done;      /* the daemon no longer holds our socket */
	int wr_shut;         /* shut down for writing (maybe before attaching) */
	int side;            /* 0 connect end, 1 accept end */
	int role;            /* DSOCK_ROLE_*, for the offer */
	int exec_memfd;      /* fetched for an exec under way (else -1), valid
			      * in process exec_memfd_pid only (a vfork child
			      * writes our memory) */
	int exec_memfd_pid;
	struct dsock_shm_hdr *h;
	size_t map_len;
	size_t map_delta;    /* where the header lies past the mapping's start (a system page
			      * larger than 4 KiB) */
	uint32_t size;       /* ring size, read once at attach, never again */
	unsigned char *txd, *rxd;
	uint64_t tx_head;    /* the consumer's head as we last saw it */
	uint64_t tx_tail;    /* the tail we stored last (see tx_space_for), */
	int tx_tail_ok;      /* ... once we stored one (an exec'd image has
			      * our pid and may reuse our numbers) */
	struct ring_map tx_rm; /* the tx ring's map as tx_space_for last
			      * found it: current while tail_writer is us
			      * (a holder that widens the ring otherwise
			      * clears tail_writer) */
	int tx_biased;       /* the tx lock's holder entered by its bias */
	int fast_counted;    /* counted in dsock_fastpath_conns (conn.c) */
	int32_t asleep_delta; /* our part of the service's asleep score not
			       * yet added to it (rx lock held; tokens.c,
			       * note_read) */
	uint32_t test_reads;  /* ring reads, for DSOCK_TEST_BACK_READS */
	int asleep_counted;   /* counted in shm_asleep_conns (attach to release) */
	uint16_t service;    /* the service port: the peer's if we connected,
			      * ours if we accepted (0: unknown) */
	uint32_t nr;         /* this connection's number in this process */
	uint32_t rx_reads;   /* ring reads since we last ended a lease */
	int lease_skippable; /* the lease we published last has bit 0 (our
			      * own record: the peer can write the line) */
	int settling;        /* shm_settle_lingering's mark (linger_mu) */
	struct dsock_shm_ring *tx, *rx;
	struct dsock_shm_side *me, *peer;
	int unbacked;        /* rx ring has data that no token backs */
	int lingering;       /* on the linger list: our lease outlives a recv */
	size_t linger_idx;   /* its place there (linger_mu) */
	unsigned fork_gen;   /* shm_fork_gen when attached (in this process) */
	int let_go;          /* this process no longer counts among the holders */
	int on_held;         /* on the list of attached connections (conn.c) */
	struct shm_conn *hnext, *hprev;
	unsigned exec_mark;  /* the exec attempt that hands it over */
	int exec_dropped;    /* let go of for an exec that may still fail */
	unsigned exec_counted; /* the exec attempt that counted its new process in holders and maps */
	int app_nodelay, nodelay_saved; /* TCP_NODELAY as the application set it */
	int64_t tx_base;     /* the kernel's sent-byte counter before any
			      * application byte moved (the SYN may count) */
	int reported;        /* the daemon has been told we are on shm */
	int used_ring;       /* bytes moved through the ring (counted once) */
	int64_t pending_since_ms;
	struct shm_given delayed; /* a PAIRED result we could not attach yet, */
	int delayed_set;          /* ... while this is 1 (claimed by exchange) */
	struct shm_pool *pool; /* the pool our memory is in (NULL: a mapping of its own) */
	uint32_t page;       /* where our memory starts in its memfd, in 4 KiB pages */
	int mapped;          /* this process counts in h->maps[side] */
	_Atomic int kernel_rx_inflight; /* PENDING kernel reads in progress */
	_Atomic int64_t pending_read; /* bytes PENDING reads consumed */
	/* where the counts of early_sent and pending_read go: those fields,
	 * or the slot a fork shares them in (forked.c) */
	_Atomic int64_t *sent_cnt, *read_cnt;
	struct shm_fork_slot *fslot; /* shared by a fork before its offer, or NULL */
	int fslot_pid;       /* the process that counts in fslot (a fork child's
			      * copy of one it did not share is not counted) */
	int fork_shared;     /* a fork under way shares it (mu held across it) */
	_Atomic int attaching; /* an attach is deciding: PENDING kernel reads wait */
	int pend_err;         /* a kernel error our own look took (the kernel
			       * reports one once): for the next receive that
			       * finds the ring dry (recv.c, shm_stash_err) */
	_Atomic int kfd;      /* a private dup of the socket, made when the
			       * application closes it under a call in flight */
	pthread_mutex_t mu;  /* PENDING-state sends and state changes */
	struct dsock_sock *sock;
	struct shm_conn *next, *prev; /* pending list (conn.c), */
	int listed;                    /* while on it */
	struct shm_link *link; /* our link with the peer's process (link.c), or NULL */
	uint32_t link_slot;  /* our slot on it (as in me->link_slot) */
	uint64_t link_pushed; /* the link queue's tail just after our last
			       * entry there (tx lock held; 0: none): while
			       * the consumer's head is below it, that entry
			       * is not taken yet and names our new data too */
};

extern const struct dsock_transport dsock_shm_transport;
/* Connections of this process whose bytes went through a ring. */
extern _Atomic long shm_ring_conns;
/* ... and of them, those that went back to the kernel (back.c). */
extern _Atomic long shm_back_conns;

static inline struct shm_conn *shm_conn(struct dsock_sock *s)
{
	return (struct shm_conn *)s->tp_priv;
}

/* conn.c */
extern int shm_offer_calls; /* DSOCK_OFFER_CALLS */
extern unsigned shm_asleep_reads; /* DSOCK_ASLEEP_READS */
/* For tests: every connection asks to go back to the kernel at its Nth
 * ring read, as one whose consumers sleep (DSOCK_TEST_BACK_READS; 0 never):
 * the move then happens mid-stream in every test that reads a ring. */
extern unsigned shm_test_back_reads;
/* The asleep score of this process's connections per service port (a
 * slot per port modulo its size; tokens.c, note_read). */
#define SHM_ASLEEP_SLOTS 1024
extern _Atomic int32_t shm_asleep_score[SHM_ASLEEP_SLOTS];
/* Adds c's part to its service's score; returns the score. */
int32_t shm_asleep_flush(struct shm_conn *c);
/* Counts c among its service's connections on the rings (on 1), or not. */
void shm_asleep_count(struct shm_conn *c, int on);

int shm_init(void);
int shm_offer(struct dsock_sock *s, int fd, int role, void **priv, unsigned *reason);
/* Delivers mail and settles an OFFER_DUE / PENDING / delayed connection.
 * Returns 1 when the connection is attached (mapping valid). */
int shm_progress(struct dsock_sock *s, int fd);
void shm_release(struct dsock_sock *s);
/* Leaves the transport for good: the kernel carries the data. */
void shm_detach(struct dsock_sock *s, unsigned reason);
int shm_active(const struct shm_conn *c);
/* This process lets go of c (close, exit): 1 if it was the last holder. */
int shm_let_go(struct shm_conn *c);
/* The application's connect(AF_UNSPEC): the kernel resets the connection,
 * which leaves the transport.  Returns the connect's result. */
int shm_disconnect(struct dsock_sock *s, int fd);
/* The shared memory broke its rules: reset this connection only. */
int shm_fault(struct dsock_sock *s, int fd, const char *what);
/* Resets the connection (ECONNRESET here, RST to the peer) and leaves the
 * transport with the reason.  Returns -ECONNRESET. */
int shm_reset(struct dsock_sock *s, int fd, unsigned reason);

/* Fork: a pairing still pending when the process forks is refused in both
 * processes (only one of them would hear the answer); one not offered yet
 * goes on in both, offered by the last holder (forked.c). */
void shm_fork_prepare(void);
void shm_fork_parent(void);
void shm_fork_child(void);

/* SO_RCVLOWAT above 1 on fd (handover.c): the ring cannot carry it. */
int shm_rcvlowat_set(int fd);

/* conn.c's lists, which the fork handlers (forked.c) walk: the
 * connections due to offer or offered (shm_pending, shm_pending_mu), the
 * attached ones (shm_held, shm_held_mu; after shm_pending_mu). */
extern pthread_mutex_t shm_pending_mu, shm_held_mu;
extern struct shm_conn *shm_pending, *shm_held;
/* Puts c on the pending list (shm_pending_mu held); offered_too: findable
 * by its socket id too.  0, or -ENOMEM. */
int shm_list_pending_locked(struct shm_conn *c, int offered_too);
/* A fork child: no socket id finds a connection any more. */
void shm_offered_forget(void);

/* ---- connections a fork shares before their offer (forked.c) ---- */
/* Refuses c's pairing (a DSOCK_R_*), in every process holding it. */
void shm_refuse(struct shm_conn *c, unsigned reason);
/* Why c's pairing is refused, or 0. */
unsigned shm_refused(const struct shm_conn *c);
/* No other process holds c: it may be offered. */
int shm_forked_alone(const struct shm_conn *c);
/* Before a fork (pending_mu held): 1 if c goes on in both processes. */
int shm_forked_share(struct shm_conn *c);
/* After the fork, for each connection shm_forked_share kept. */
void shm_forked_done(struct shm_conn *c, int child);
/* In a fork child, for a connection the fork did not share. */
void shm_forked_forget(struct shm_conn *c);
/* At c's release. */
void shm_forked_release(struct shm_conn *c);
/* At c's attach (no call of ours in flight). */
void shm_forked_attached(struct shm_conn *c);
/* At exit, c not closed. */
void shm_forked_exit(struct shm_conn *c);
/* exec: hands attached connections to the new program through the
 * environment (DSOCK_EXEC_SHM), and takes them back in it; if the new
 * program will not run dsock (t), they go back to the kernel instead.  spawn: the new
 * program runs in another process (posix_spawn), a holder more: counted
 * here, before it runs (a close of ours and the peer's could otherwise
 * end the connection, and the daemon give its slot to another, before
 * the new program maps it), and uncounted by shm_exec_done(0). */
struct dsock_exec_target;
size_t shm_exec_env(char *buf, size_t n, int spawn, const struct dsock_exec_target *t);
void shm_exec_done(int started);
void shm_adopt(void);
/* Normal exit: this process lets go of its connections as close does (a
 * process that ends with _exit or a signal cannot: see ARCHITECTURE.md). */
void shm_exit(void);

/* ---- links (link.c) ---- */
struct shm_link;
struct dsock_msg_result;
/* A RESULT of kind LINK: the link's memfd (the handler owns it), or -1:
 * its other process left. */
void shm_link_result(const struct dsock_msg_result *r, int fd);
/* A RESULT of kind BELL: our bell (link 0) or a link peer's (the
 * handler owns fd); and our bell for the socket layer (the transport's
 * bell op). */
void shm_link_bell_result(const struct dsock_msg_result *r, int fd);
int shm_link_bell(unsigned *gen);
/* c (attached, mapped, held by this process alone) goes on link id as
 * side, as named on daemon connection gen (dsock_ctl_gen() when its
 * result came): its peer may announce its data there.  Nothing if there
 * is no such link. */
void shm_link_join(struct shm_conn *c, uint32_t id, int side, unsigned gen);
/* c off its link (release). */
void shm_link_leave(struct shm_conn *c);
/* The producer's announcement, after publishing data and a full fence,
 * when the consumer's ring lease has ended: 1 if the consumer's poller
 * will find it (no token needed), else 0. */
int shm_link_notify(struct shm_conn *c, int64_t now);
/* The transport's collect op, and its before_sleep part: every link lease
 * ends, what the queues hold is taken. */
void shm_link_collect(int64_t now);
void shm_link_end_leases(void);
/* A poller is about to sleep on a set that holds our bell: the leases end
 * and the bells are armed instead (while no thread sleeps counted in
 * dsock_sleepers), then what the queues hold is taken.  1 if the bell was
 * rung (it drained a ring). */
int shm_link_arm_bells(void);
/* The last bell sleeper is up: the bells end (the transport's wake op). */
void shm_link_disarm_bells(void);
/* 1 if a poller of ours holds a lease on c's link (so c's consumer need
 * not linger: its producer announces there). */
int shm_link_polled(const struct shm_conn *c, int64_t now);
/* Every connection off its link (exec: another holder may read them). */
void shm_link_unjoin_all(void);
void shm_link_fork_prepare(void);
void shm_link_fork_parent(void);
void shm_link_fork_child(void);

/* ---- pools (pool.c) ---- */
struct shm_pool;
/* A RESULT of kind POOL: the pool's memfd (the handler owns it). */
void shm_pool_result(const struct dsock_msg_result *r, int fd);
/* Slot `page` (in 4 KiB pages) of pool id, as named on daemon connection
 * gen, for rings of ring_size: its memory, the pool held (*out) until
 * shm_pool_put; NULL if there is no such pool or slot. */
void *shm_pool_slot(uint32_t id, unsigned gen, uint32_t page, uint32_t ring_size, struct shm_pool **out);
void shm_pool_put(struct shm_pool *p);
/* The link's other process left: its pools are named no more. */
void shm_pool_link_gone(uint32_t link, int side, unsigned gen);
void shm_pool_fork_prepare(void);
void shm_pool_fork_parent(void);
void shm_pool_fork_child(void);

/* conn.c, for init.c: the daemon's answer to an offer (memfd: -1 unless
 * paired; the handler owns it). */
struct dsock_msg_result;
void shm_on_result(const struct dsock_msg_result *r, int memfd);
/* conn.c, for exec.c: a new connection state for s (NULL: no memory). */
struct shm_conn *shm_new_conn(struct dsock_sock *s);
/* mem.c: c's rings mapped from memfd at `page` 4 KiB pages (0 or -errno:
 * the memory broke its rules); the memfd is closed once mapped. */
int shm_map_conn(struct shm_conn *c, int memfd, uint32_t page, int side, uint32_t size);
/* mem.c: the memory a PAIRED result gives (a memfd of its own, which is
 * closed once mapped, or a pool's slot, the pool held): 0 or -errno. */
int shm_map_given(struct shm_conn *c, const struct shm_given *g);
/* mem.c: drops c's mapping without touching the memory (for a process
 * that does not count in maps: the slot may be another's by now). */
void shm_unmap(struct shm_conn *c);
/* Counts c as carried (dsock_fastpath_conns). */
void shm_fast_count(struct shm_conn *c);
/* Lists c among the connections this process maps and counts in
 * h->maps (c->mapped; a fork counts them again for the child, and the
 * holders of those not let go).  add_map: count this process in maps
 * now (an exec's adopter was counted by the old program). */
void shm_held_add(struct shm_conn *c, int add_map);
void shm_drop_exec_memfd(struct shm_conn *c);
/* This thread's owner id for the lock words (lock.c). */
int shm_my_tid(void);
/* After publishing data: wake the consumer unless it polls (tokens.c). */
void shm_ring_doorbell(struct shm_conn *c, int fd);
/* Moves our sending from the kernel to the ring (tx lock held; tokens.c):
 * 0 once switched (or before), -EAGAIN while it must stay on the kernel
 * (force: even while the connection goes back), -EPIPE after our FIN. */
int shm_switch_tx_locked(struct shm_conn *c, int fd, int force);
/* 1 once this process is registered for MEMBARRIER_CMD_GLOBAL_EXPEDITED
 * (at start and in a fork child): then its leases may let producers skip
 * their fence, and it may skip its own ("skippable leases") */
extern int shm_membarrier_ok;
void shm_membarrier_register(void);
/* 1 if a socket in TCP state st has sent its FIN (the states of
 * include/net/tcp_states.h, not in the uapi headers): FIN_WAIT1,
 * FIN_WAIT2, TIME_WAIT, LAST_ACK, CLOSING. */
static inline int shm_fin_state(int st)
{
	return st == 4 || st == 5 || st == 6 || st == 9 || st == 11;
}
/* Reads the kernel's counters as the baseline: the stream's first byte
 * (the bytes sent before, early_sent, subtracted; every receive since the
 * connection's start counts in pending_read).  0, -EINVAL, or -EBUSY
 * while a send of ours is in flight (a later call offers). */
int shm_calibrate(struct shm_conn *c, int fd);
ssize_t shm_sendmsg(struct dsock_sock *s, int fd, const struct msghdr *m, int flags);
ssize_t shm_sendfile(struct dsock_sock *s, int fd, int file, off_t pos, size_t n);
/* A send that fits the ring of a switched connection, or DSOCK_ESLOW
 * (the transport's sendmsg_solo). */
ssize_t shm_sendmsg_solo(struct dsock_sock *s, int fd, const struct msghdr *m, int flags);
ssize_t shm_recvmsg(struct dsock_sock *s, int fd, struct msghdr *m, int flags);
/* 1 if a call with these flags must not block: MSG_DONTWAIT, or
 * O_NONBLOCK (as set through us while no other process holds or held the
 * socket, else the kernel's file flags). */
int shm_nonblocking(struct dsock_sock *s, int fd, int flags);
int shm_shutdown(struct dsock_sock *s, int fd, int how);
/* Bytes readable now (ring, or pre-switch kernel data), -errno on fault. */
long shm_readable(struct dsock_sock *s, int fd);
void shm_closing(struct dsock_sock *s, int fd);
void shm_wait_offer_done(struct dsock_sock *s);
/* The application closes fd: calls in flight keep the socket (as they
 * would in the kernel) through a private dup. */
void shm_before_close(struct dsock_sock *s, int fd);
/* POLLOUT if the tx ring has space, the kernel carries the data, or a
 * send fails at once (our SHUT_WR; with POLLERR and POLLHUP as the kernel
 * says, a consumer gone); 0 if a send would block. */
int shm_writable(struct dsock_sock *s, int fd);
/* A poller waits for space: ask the consumer for a token when it frees some. */
void shm_want_space(struct dsock_sock *s);
int shm_spurious_in(struct dsock_sock *s, int fd);
int shm_sockopt(struct dsock_sock *s, int fd, int set, int level, int opt, void *val, socklen_t *len);
/* 1 if our pollers must report fd readable although the kernel may not. */
int shm_hidden_readable(struct dsock_sock *s);

/* How long a consumer that left recv keeps its lease (DSOCK_LEASE_US). */
extern int64_t shm_lease_ns;
/* Lock words in shared memory (tid-tagged; a dead holder's lock is taken
 * over; shm_lock gives up with -EDEADLK after ~0.2 s or on re-entry). */
int shm_lock(uint32_t *w);
/* Frees a lock word whose holder no longer exists; 1 if it did. */
int shm_reap_dead_holder(uint32_t *w);
int shm_trylock(uint32_t *w);
/* Our producer lock (c->tx's), biased to its usual holder (lock.c): 0 or
 * -EDEADLK as shm_lock; trylock 1 if taken.  The peer's producer lock (a
 * hand-over): trylock (1 if taken; a bias is revoked, waiting ~1 ms for
 * its owner to leave, and left as it was if it does not), then
 * shm_unlock(&c->rx->tx_lock). */
int shm_tx_lock(struct shm_conn *c);
int shm_tx_trylock(struct shm_conn *c);
void shm_tx_unlock(struct shm_conn *c);
int shm_peer_tx_trylock(struct shm_conn *c);
/* In a fork child: the lock owner id cached from the parent is wrong. */
void shm_forget_tid(void);
void shm_unlock(uint32_t *w);
/* Data bytes ever written to the kernel socket (tokens included once
 * switched), or -1. */
int64_t shm_kernel_sent(int fd);
/* Pre-switch kernel data for a receiver (rx lock held): at most up to the
 * peer's switch offset.  Bytes, 0 on EOF, -EAGAIN, -errno. */
ssize_t shm_rx_kernel(struct shm_conn *c, int fd, struct msghdr *m, size_t off, size_t want, int flags);
/* Reads and discards tokens (rx lock held), counting them in side.kread,
 * never past a published back_off; to_end: until EAGAIN or EOF, else up
 * to a short read.  0, 1 on kernel EOF, or -errno. */
int shm_drain_tokens(struct shm_conn *c, int fd, int to_end);
/* Wakes the peer with a token on our kernel stream (switching it first if
 * need be); 0, or -EAGAIN if our stream cannot carry a token now. */
int shm_wake_peer(struct shm_conn *c, int fd);
/* The same with the tx lock held: the last token before our sending goes
 * back (switched first if need be: a byte on an unswitched stream is
 * data).  0, or -EAGAIN (it cannot switch now). */
int shm_last_token_locked(struct shm_conn *c, int fd);

/* back.c: moving a connection back to the kernel when its fd goes to a
 * holder that does not run dsock (an exec'ed static or setuid program, a
 * program the rules exclude, any receiver of SCM_RIGHTS).  That holder
 * would read wake-up tokens as data and never see the rings: so both
 * directions return to the kernel, each at an exact kernel byte offset
 * (side.back_off), with the ring bytes their consumer had not read sent
 * after it.  See docs/ARCHITECTURE.md ("Handing a connection over"). */
/* A side asked, or the peer went back (it may do so unasked: a hostile
 * peer may, and we must not loop on it). */
static inline int shm_back_any(const struct shm_conn *c)
{
	return __atomic_load_n(&c->me->back_req, __ATOMIC_ACQUIRE) |
	       __atomic_load_n(&c->peer->back_req, __ATOMIC_ACQUIRE) |
	       __atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE);
}
/* A move back that can be made now: a direction already went, or a side
 * asks for one that does not wait for both rings to empty (all but the
 * move of a connection whose consumers sleep). */
static inline int shm_back_now(const struct shm_conn *c)
{
	uint32_t a = __atomic_load_n(&c->me->back_req, __ATOMIC_ACQUIRE);
	uint32_t b = __atomic_load_n(&c->peer->back_req, __ATOMIC_ACQUIRE);

	return __atomic_load_n(&c->peer->back_sent, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&c->me->back_sent, __ATOMIC_ACQUIRE) || (a && a != DSOCK_BACK_ASLEEP) ||
	       (b && b != DSOCK_BACK_ASLEEP);
}
/* The peer asks us to go back and we have not yet: a receiver waiting on
 * the ring must answer (the request's wake-up token may be the one it just
 * drained while spinning). */
static inline int shm_back_asked(const struct shm_conn *c)
{
	return __atomic_load_n(&c->peer->back_req, __ATOMIC_ACQUIRE) &&
	       !__atomic_load_n(&c->me->back_sent, __ATOMIC_ACQUIRE);
}
extern unsigned shm_fork_gen;
/* Another process may hold our end, or did: a fork (fork_gen) or an
 * adoption (holders).  Such a connection never moves back first because
 * its consumers sleep (back.c), nor asks to (tokens.c). */
static inline int shm_shared(const struct shm_conn *c)
{
	return c->fork_gen != shm_fork_gen || __atomic_load_n(&c->me->holders, __ATOMIC_RELAXED) != 1 ||
	       __atomic_load_n(&c->peer->holders, __ATOMIC_RELAXED) != 1;
}
/* Before a call (no shared lock held): answers the peer's request by
 * moving our sending back; leaves the transport once both directions are
 * plain.  0, or -ECONNRESET if the move failed (connection reset). */
int shm_back_step(struct dsock_sock *s, int fd);
/* The same without leaving the transport (close). */
int shm_back_answer(struct dsock_sock *s, int fd);
/* Moves our sending back to the kernel for good (the three locks of
 * back.c held meanwhile).  0, -EAGAIN (not now: try again), or -errno.
 * asleep: the move of a connection whose consumers sleep (one try, both
 * rings empty, a last token), else a hand-over's (waits for the peer's
 * rx lock, sends again what the ring holds). */
int shm_tx_back(struct shm_conn *c, int fd, int asleep);
/* Sends n bytes on fd without blocking, from the ring `ring` at index
 * head, or from buf when ring is NULL (the socket's buffer grown once if
 * need be).  0 or -errno. */
int shm_send_backlog(struct shm_conn *c, int fd, const unsigned char *ring, uint32_t win, uint32_t shift,
		     const unsigned char *buf, uint64_t head, uint64_t n);
/* The peer's stream as we read it: its switch offset, its back_off (a
 * switch offset past it is cut to it) and our kernel bytes read. */
void shm_peer_offsets(struct shm_conn *c, uint64_t *sw, uint64_t *dn, uint64_t *kr);
/* Discards the peer's tokens in our kernel socket (rx lock held, past its
 * switch offset, its back_off published): 1 when none is left, 2 at EOF,
 * 0 if some are still to come, or -errno. */
int shm_discard_tokens(struct shm_conn *c, int fd);
/* A lock of the peer's, tried (two sides going back at once would each
 * hold their own and wait for the other's); a dead holder's is taken
 * every 64th round. */
int shm_trylock_peer(uint32_t *w, int round);
void shm_nap(long ns);
/* handover.c: fd leaves for a holder without dsock: both directions back
 * on the kernel first, the peer's with its socket lent by the daemon
 * where it may (no answer needed), else by the peer's answer (at most
 * 2 s).  0, or -ECONNRESET when it could not be made exact (connection
 * reset, logged). */
int shm_handover(struct dsock_sock *s, int fd);
/* Both directions back to the kernel for a feature the ring cannot carry
 * (why: DSOCK_BACK_URGENT, DSOCK_BACK_RCVLOWAT): ours now, the peer's now
 * too where the daemon lends its socket, else at its next call (it looks
 * for our request before every ring byte).  A connection not attached yet
 * is refused its pairing instead.  0, or -ECONNRESET (reset, logged). */
int shm_go_back(struct dsock_sock *s, int fd, uint32_t why);
/* Receiving once the peer's sending is back on the kernel. */
ssize_t shm_recv_back(struct dsock_sock *s, int fd, struct msghdr *m, int flags);
/* The rest of a MSG_WAITALL receive that had read got bytes (no lock
 * held): element by element of m's iovec, as plain receives.  Returns got
 * plus what came; short only on EOF, an error, a timeout or a signal, as
 * the kernel's. */
ssize_t shm_recv_back_rest(struct dsock_sock *s, int fd, struct msghdr *m, size_t got, int flags);
/* Readable bytes then (FIONREAD), and whether a kernel-readable socket
 * holds only tokens (our pollers' filter). */
long shm_readable_back(struct shm_conn *c, int fd);
/* At the last close: the peer's tokens out of the way (once every byte it
 * sent before its switch is read), so that the kernel's close is a FIN,
 * not a reset.  Our receives may never have noticed its switch: a peer
 * whose consumers sleep switches to send its last token (tx_back). */
void shm_back_discard(struct shm_conn *c, int fd);
int shm_spurious_back(struct shm_conn *c, int fd);

/* lease.c and tokens.c, for recv.c: the consumer's side of the rings (rx
 * lock held unless said otherwise). */
/* Sets our lease as consumer until `until` (CLOCK_MONOTONIC ns); 0 ends
 * it (then a full fence, and a membarrier if it was skippable, before the
 * caller looks at the ring). */
void shm_lease(struct shm_conn *c, int64_t until);
/* Leaving the consumer side: keeps the kernel's readiness honest (a token
 * backs every non-empty ring, or the data is marked hidden).  1 on kernel
 * EOF, -errno on a kernel error, else 0. */
int shm_rx_settle(struct shm_conn *c, int fd);
/* The same, keeping a lingering lease where it may.  Returns as settle. */
int shm_rx_leave(struct shm_conn *c, int fd);
/* A ring read of n bytes (not a peek): the asleep score, the test knob. */
void shm_note_read(struct shm_conn *c, size_t n);
/* After a ring read freed space: wakes a producer waiting for it. */
void shm_space_freed(struct shm_conn *c, int fd);
/* A producer whose ring is full: the kernel's POLLERR|POLLHUP if the
 * consumer is gone, else 0 (a token probes a consumer whose FIN came;
 * locked: the caller holds the tx lock). */
short shm_consumer_gone(struct shm_conn *c, int fd, int locked);
/* A token flag is set (a token may be in our kernel socket). */
int shm_tokens_flagged(struct shm_conn *c);
/* Clears both token flags, then drains as shm_drain_tokens. */
int shm_clear_and_drain(struct shm_conn *c, int fd, int to_end);
/* This connection moved bytes through a ring (counted once). */
void shm_count_ring_use(struct shm_conn *c);
/* A spinning receiver's wait for its next look (no lock needed). */
void shm_spin_watch(struct shm_conn *c, uint64_t head);
int shm_err_is_fatal(int err);
/* recv.c: keeps kernel error e (positive; EAGAIN and EINTR are none) that
 * one of our looks at the socket took, for the application's next receive. */
void shm_stash_err(struct shm_conn *c, int e);
/* ... and takes it back: -errno, or 0 when none is kept. */
int shm_take_err(struct shm_conn *c);
/* recv.c: the peer has switched and every kernel byte it sent before is
 * read: the ring is ours to read from now on (rx lock held). */
void shm_rx_switch_if_read(struct shm_conn *c);

/* Lingering leases (lease.c).  A receiver keeps its lease on a connection for a
 * moment after a recv, so a producer sending meanwhile skips the wake-up
 * token (a system call on each side).  The price: our own pollers must look
 * at those rings, and before any of our threads sleeps in the kernel the
 * leases are ended (shm_settle_lingering) so that data arriving afterwards
 * is tokened again.  Only connections used by this one process linger: a
 * fork bumps the generation, and older connections settle at once. */
extern unsigned shm_fork_gen;
void shm_settle_lingering(void);
void shm_linger_forget(struct shm_conn *c);

#endif

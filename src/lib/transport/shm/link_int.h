/* Links on the shm transport, inside the transport: the per-link state
 * that link.c (queues, leases, fork and exec) and bell.c (bells) share.
 * The locks: shm_links_mu (the list; leases and bells are armed and ended
 * under it), then a link's rx_mu (its slots, taking entries) or tx_mu
 * (pushing). */
#ifndef DSOCK_SHM_LINK_INT_H
#define DSOCK_SHM_LINK_INT_H

#include "lib/transport/shm/shm.h"
#include "common/shm_layout.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

struct shm_link {
	uint32_t id;
	unsigned gen;  /* dsock_ctl_gen() of the daemon connection it came on */
	int side; /* ours: we produce on queue side, consume queue 1 - side */
	struct dsock_link_hdr *h;
	struct dsock_link_queue *inq, *outq;
	uint32_t *in, *out;
	/* consumer */
	pthread_mutex_t rx_mu;       /* the slots and taking entries */
	uint64_t head;               /* entries taken */
	struct shm_conn **slot;      /* by slot number; slot[0] unused */
	size_t nslot, slot_cap;
	uint32_t *freed;             /* slot numbers to give out again */
	size_t nfreed, freed_cap;
	int64_t lease;               /* the lease we published last (ours) */
	int armed;                   /* our bell word is set (links_mu) */
	int broken;                  /* its queue broke the rules: unused */
	int took;                    /* an entry was taken (logged once) */
	/* producer */
	pthread_mutex_t tx_mu;
	uint64_t tail;               /* entries pushed */
	int bell;                    /* the other process's bell (kept open
				      * with a spare link: a late ring must
				      * not reach a reused fd number), or -1 */
	_Atomic int bell_ok;         /* bell is this link's */
	_Atomic int self;            /* both sides are ours: the bell too */
	int users;                   /* connections on it (rx_mu) */
	int gone;                    /* the other process left (links_mu) */
	struct shm_link *next;
};

extern pthread_mutex_t shm_links_mu;
extern struct shm_link *shm_links;
extern _Atomic int shm_nlinks;
/* our bell (RESULT of kind BELL, link 0), or -1, and its generation */
extern _Atomic int shm_own_bell;
extern _Atomic unsigned shm_own_bell_gen;

/* The link (number, side, daemon connection gen), or NULL (links_mu held). */
struct shm_link *shm_link_find_locked(uint32_t id, int side, unsigned gen);
/* Takes l's entries (its rx_mu held). */
void shm_link_take_locked(struct shm_link *l);
/* Takes what every queue holds (links_mu held; after a full fence). */
void shm_link_take_all_locked(void);

/* l's lease ends (links_mu held). */
static inline void shm_link_end_lease_locked(struct shm_link *l)
{
	if (l->lease) {
		__atomic_store_n(&l->inq->lease_until, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&l->lease, 0, __ATOMIC_RELAXED);
	}
}

/* l's bell ends (links_mu held): its producer sends tokens again. */
static inline void shm_link_disarm_locked(struct shm_link *l)
{
	if (l->armed) {
		__atomic_store_n(&l->inq->bell, 0, __ATOMIC_RELAXED);
		l->armed = 0;
	}
}
/* Ends every lease and bell of ours and takes what every queue holds
 * (links_mu held): a thread of ours is about to sleep counted. */
void shm_link_end_and_take_locked(void);

#endif

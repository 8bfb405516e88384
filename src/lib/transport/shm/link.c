/* Links on the shm transport (shm_layout.h): the memory this process
 * shares with one peer process, whose queues tell a polling consumer
 * which rings have news, so that its epoll_wait looks at those rings
 * only, not at every connection it holds, and a producer writes an entry
 * where it would otherwise make a system call (a wake-up token).
 *
 * The promise behind a link lease is the one behind a lingering lease: a
 * poller of this process looks at the queue before any thread of it
 * sleeps.  So a lease is published only by an epoll_wait of ours that
 * looks without sleeping (the transport's collect op with a time), kept
 * only while no thread of ours sleeps (checked after publishing it: Dekker with
 * the sleeper's count-then-end), and every sleeper ends them all and
 * takes what the queues hold first (shm_link_end_leases).  The producer
 * pushes its entry, then (a full fence) looks at the lease; the consumer
 * ends the lease, then (a full fence) takes the entries: one of them sees
 * the other's store, so either the entry is taken or a token is sent.
 *
 * A connection uses its link only while this process alone holds it: a
 * fork or an exec (another holder may sleep on it where we cannot see)
 * takes every connection off its link first (shm_link_unjoin_all).
 * A poller that sleeps may leave a bell standing instead of a lease
 * (bell.c). */
#include "lib/transport/shm/link_int.h"
#include "lib/transport/shm/ring.h"
#include "lib/base/grow.h"
#include "lib/base/real.h"
#include "lib/ctl/ctl.h"
#include "lib/sock/ready.h"
#include "common/log.h"
#include "common/proto.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>



pthread_mutex_t shm_links_mu = PTHREAD_MUTEX_INITIALIZER;
struct shm_link *shm_links;
_Atomic int shm_nlinks;
_Atomic int shm_own_bell = -1;
_Atomic unsigned shm_own_bell_gen;

/* A link's number is the daemon's, and a new daemon (a restart) numbers
 * anew: links are found by (number, side, daemon connection). */
struct shm_link *shm_link_find_locked(uint32_t id, int side, unsigned gen)
{
	struct shm_link *l = shm_links;

	while (l && (l->id != id || l->side != side || l->gen != gen))
		l = l->next;
	return l;
}

/* Links no longer used stay allocated and mapped: a sending thread that
 * read a connection's link just before a fork or an exec took the
 * connection off it may still push there, and must find memory.  A new
 * link takes a spare one's place, its memory mapped over the old (such a
 * late entry is then one spurious look of ours). */
static struct shm_link *spare;

/* Out of the list, onto the spares (links_mu held, no connection on it). */
static void retire_locked(struct shm_link *l)
{
	for (struct shm_link **pp = &shm_links; *pp; pp = &(*pp)->next)
		if (*pp == l) {
			*pp = l->next;
			atomic_fetch_sub(&shm_nlinks, 1);
			break;
		}
	pthread_mutex_lock(&l->rx_mu);
	free(l->slot);
	free(l->freed);
	l->slot = NULL;
	l->freed = NULL;
	l->nslot = l->slot_cap = l->nfreed = l->freed_cap = 0;
	pthread_mutex_unlock(&l->rx_mu);
	l->next = spare;
	spare = l;
}

/* l's other process is gone (links_mu held): l is retired once no
 * connection of ours uses it. */
static void gone_locked(struct shm_link *l)
{
	pthread_mutex_lock(&l->rx_mu);
	int idle = l->users == 0;
	l->gone = 1;
	pthread_mutex_unlock(&l->rx_mu);
	if (idle)
		retire_locked(l);
}

/* A link for memory h: a spare one (h moved over its memory) or a new one. */
static struct shm_link *link_for(struct dsock_link_hdr **h)
{
	struct shm_link *l = spare;

	if (l) {
		void *at = mremap(*h, DSOCK_LINK_BYTES, DSOCK_LINK_BYTES, MREMAP_MAYMOVE | MREMAP_FIXED, l->h);
		if (at == MAP_FAILED)
			return NULL;
		spare = l->next;
		*h = at;
		pthread_mutex_lock(&l->tx_mu);
		l->tail = 0;
		atomic_store(&l->bell_ok, 0);
		atomic_store(&l->self, 0);
		pthread_mutex_unlock(&l->tx_mu);
		pthread_mutex_lock(&l->rx_mu);
		l->head = 0;
		l->lease = 0;
		l->broken = l->took = l->users = l->gone = 0;
		pthread_mutex_unlock(&l->rx_mu);
		return l;
	}
	if (!(l = calloc(1, sizeof(*l))))
		return NULL;
	l->bell = -1;
	pthread_mutex_init(&l->rx_mu, NULL);
	pthread_mutex_init(&l->tx_mu, NULL);
	return l;
}

/* Maps and checks a link's memory: a sealed memfd of exactly its size
 * whose header agrees.  Returns the mapping or NULL. */
static struct dsock_link_hdr *map_link(int fd)
{
	int seals = dsock_real.fcntl(fd, F_GET_SEALS);
	struct stat st;
	struct dsock_link_hdr *h;

	if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(fd, &st) < 0 || st.st_size != DSOCK_LINK_BYTES)
		return NULL;
	h = mmap(NULL, DSOCK_LINK_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		return NULL;
	if (h->magic != DSOCK_LINK_MAGIC || h->version != DSOCK_LINK_VERSION || h->slots != DSOCK_LINK_SLOTS) {
		munmap(h, DSOCK_LINK_BYTES);
		return NULL;
	}
	return h;
}

void shm_link_result(const struct dsock_msg_result *r, int fd)
{
	struct shm_link *l;
	int side = r->link_side;
	unsigned gen = dsock_ctl_gen();

	pthread_mutex_lock(&shm_links_mu);
	/* links from an earlier daemon: no "gone" comes for them any more */
	for (struct shm_link *o = shm_links, *next; o; o = next) {
		next = o->next;
		if (o->gen != gen && !o->gone)
			gone_locked(o);
	}
	l = shm_link_find_locked(r->link, side, gen);
	if (fd < 0) { /* the other process left */
		if (l)
			gone_locked(l);
		pthread_mutex_unlock(&shm_links_mu);
		shm_pool_link_gone(r->link, side, gen);
		return;
	}
	if (l) { /* (given twice: the first stands) */
		pthread_mutex_unlock(&shm_links_mu);
		dsock_real.close(fd);
		return;
	}
	struct dsock_link_hdr *h = map_link(fd);
	dsock_real.close(fd);
	if (!h || !(l = link_for(&h))) {
		if (h)
			munmap(h, DSOCK_LINK_BYTES);
		pthread_mutex_unlock(&shm_links_mu);
		DSOCK_WARN("unusable link memory from the daemon: its connections wake by tokens");
		return;
	}
	l->id = r->link;
	l->gen = gen;
	l->side = side;
	l->h = h;
	l->outq = &h->q[side];
	l->inq = &h->q[1 - side];
	l->out = (uint32_t *)((char *)h + DSOCK_SHM_HDR + (size_t)side * DSOCK_LINK_SLOTS * 4);
	l->in = (uint32_t *)((char *)h + DSOCK_SHM_HDR + (size_t)(1 - side) * DSOCK_LINK_SLOTS * 4);
	l->nslot = 1;
	/* a process connected to itself holds both sides: it rings its own
	 * bell (the daemon sends no other) */
	struct shm_link *o = shm_link_find_locked(r->link, 1 - side, gen);
	if (o) {
		atomic_store(&o->self, 1);
		atomic_store(&l->self, 1);
	}
	l->next = shm_links;
	shm_links = l;
	atomic_fetch_add(&shm_nlinks, 1);
	pthread_mutex_unlock(&shm_links_mu);
	DSOCK_DBG("link %u: side %d mapped", l->id, side);
}

void shm_link_join(struct shm_conn *c, uint32_t id, int side, unsigned gen)
{
	struct shm_link *l;
	uint32_t n = 0;

	if (!id)
		return;
	pthread_mutex_lock(&shm_links_mu);
	l = shm_link_find_locked(id, side, gen);
	/* (a fork since the attach: another process may hold it) */
	if (l && !l->gone && !l->broken && c->fork_gen == shm_fork_gen) {
		pthread_mutex_lock(&l->rx_mu);
		if (l->nfreed)
			n = l->freed[--l->nfreed];
		else if (!dsock_grow(&l->slot, &l->slot_cap, l->nslot, sizeof(*l->slot), 64))
			n = (uint32_t)l->nslot++;
		if (n) {
			l->slot[n] = c;
			l->users++;
		}
		pthread_mutex_unlock(&l->rx_mu);
	}
	pthread_mutex_unlock(&shm_links_mu);
	if (!n)
		return;
	c->link_slot = n;
	c->link_pushed = 0;
	__atomic_store_n(&c->link, l, __ATOMIC_RELEASE);
	__atomic_store_n(&c->me->link_slot, n, __ATOMIC_SEQ_CST);
}

/* Off its link (links_mu held). */
static void leave_locked(struct shm_conn *c)
{
	struct shm_link *l = c->link;
	int idle;

	__atomic_store_n(&c->me->link_slot, 0, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&l->rx_mu);
	l->slot[c->link_slot] = NULL;
	if (!dsock_grow(&l->freed, &l->freed_cap, l->nfreed, sizeof(*l->freed), 64))
		l->freed[l->nfreed++] = c->link_slot;
	idle = --l->users == 0 && l->gone;
	pthread_mutex_unlock(&l->rx_mu);
	__atomic_store_n(&c->link, NULL, __ATOMIC_RELAXED);
	c->link_slot = 0;
	if (idle)
		retire_locked(l);
}

void shm_link_leave(struct shm_conn *c)
{
	if (!__atomic_load_n(&c->link, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&shm_links_mu);
	if (c->link)
		leave_locked(c);
	pthread_mutex_unlock(&shm_links_mu);
}

/* ---- the producer ---------------------------------------------------------- */
int shm_link_notify(struct shm_conn *c, int64_t now)
{
	struct shm_link *l = __atomic_load_n(&c->link, __ATOMIC_ACQUIRE);
	struct dsock_link_queue *q;
	uint32_t n;

	if (!l)
		return 0;
	q = l->outq;
	if (((int64_t)__atomic_load_n(&q->lease_until, __ATOMIC_RELAXED) <= now &&
	     !__atomic_load_n(&q->bell, __ATOMIC_RELAXED)) ||
	    !(n = __atomic_load_n(&c->peer->link_slot, __ATOMIC_RELAXED)))
		return 0;
	/* one entry per ring at a time: one the consumer has not taken yet
	 * names our new data too (it advances its head, then, after a full
	 * fence, looks at the ring; we stored our tail before the full fence
	 * of the doorbell, then read its head).  Our own index, not a flag in
	 * the ring that both processes write: that line crossed between the
	 * two CPUs three times per message. */
	uint64_t h = __atomic_load_n(&q->head, __ATOMIC_ACQUIRE);
	if (h >= c->link_pushed) {
		if (n > DSOCK_LINK_SLOT_MASK || pthread_mutex_trylock(&l->tx_mu))
			return 0;
		if (l->tail - h >= DSOCK_LINK_SLOTS) { /* full, or a head that lies */
			pthread_mutex_unlock(&l->tx_mu);
			return 0;
		}
		uint32_t e = n | dsock_link_lap(l->tail) << DSOCK_LINK_LAP_SHIFT;
		__atomic_store_n(&l->out[l->tail % DSOCK_LINK_SLOTS], e, __ATOMIC_RELEASE);
		c->link_pushed = ++l->tail;
		pthread_mutex_unlock(&l->tx_mu);
	}
	__atomic_thread_fence(__ATOMIC_SEQ_CST); /* the entry before the lease */
	if ((int64_t)__atomic_load_n(&q->lease_until, __ATOMIC_RELAXED) > now)
		return 1;
	int bell = atomic_load_explicit(&l->self, memory_order_relaxed) ? atomic_load(&shm_own_bell)
		   : atomic_load_explicit(&l->bell_ok, memory_order_acquire) ? l->bell : -1;
	if (!__atomic_load_n(&q->bell, __ATOMIC_RELAXED) || bell < 0)
		return 0;
	if (__atomic_exchange_n(&q->rung, 1, __ATOMIC_SEQ_CST))
		return 1; /* rung since every sleeper armed it */
	uint64_t one = 1;
	if (dsock_real.write(bell, &one, sizeof(one)) == (ssize_t)sizeof(one))
		return 1;
	__atomic_store_n(&q->rung, 0, __ATOMIC_SEQ_CST); /* (a token instead) */
	return 0;
}

/* ---- the consumer ---------------------------------------------------------- */
#define TAKE_BATCH 64

/* l's queue broke the rules (rx_mu held): a corrupt or hostile peer.  No
 * lease from now on, then (a full fence) a look at every ring of the
 * link: the entries of an honest producer that saw the lease are lost
 * with the queue, not its data. */
static void broke(struct shm_link *l)
{
	if (l->broken)
		return;
	DSOCK_WARN("link %u: its queue broke the rules (a corrupt or hostile peer): "
		   "its connections wake by tokens",
		   l->id);
	l->broken = 1;
	__atomic_store_n(&l->inq->lease_until, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&l->lease, 0, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	for (size_t i = 1; i < l->nslot; i++) {
		uint64_t head;
		if (l->slot[i] && rx_avail(l->slot[i], &head) != 0)
			dsock_hidden_set(l->slot[i]->sock, &l->slot[i]->unbacked, 1);
	}
}

/* Takes l's entries (rx_mu held): each names a ring that has news; the
 * head moves past them, then (a full fence) the rings are looked at, and
 * a ring with data is marked hidden readable for our pollers. */
void shm_link_take_locked(struct shm_link *l)
{
	struct shm_conn *got[TAKE_BATCH];

	for (;;) {
		uint64_t from = l->head;
		int k = 0;
		for (; k < TAKE_BATCH; l->head++) {
			uint32_t e = __atomic_load_n(&l->in[l->head % DSOCK_LINK_SLOTS], __ATOMIC_ACQUIRE);
			uint32_t lap = e >> DSOCK_LINK_LAP_SHIFT, n = e & DSOCK_LINK_SLOT_MASK;
			if (lap != dsock_link_lap(l->head)) {
				if (lap != (l->head < DSOCK_LINK_SLOTS ? 0 : dsock_link_lap(l->head - DSOCK_LINK_SLOTS)))
					broke(l);
				break; /* (not written yet) */
			}
			if (n < l->nslot && l->slot[n])
				got[k++] = l->slot[n];
		}
		if (l->head == from)
			return;
		if (!l->took) {
			l->took = 1;
			DSOCK_DBG("link %u: announcements taken", l->id); /* (tests look for it) */
		}
		__atomic_store_n(&l->inq->head, l->head, __ATOMIC_RELEASE);
		__atomic_thread_fence(__ATOMIC_SEQ_CST); /* the head before the rings */
		for (int i = 0; i < k; i++) {
			uint64_t head;
			if (rx_avail(got[i], &head) != 0) {
				shm_prefetch_reply(got[i], head);
				dsock_hidden_set(got[i]->sock, &got[i]->unbacked, 1);
			}
		}
		if (k < TAKE_BATCH || l->broken)
			return;
	}
}

/* Ends every lease of ours (links_mu held); then, after a full fence, the
 * queues may be taken. */
static void end_leases_locked(void)
{
	for (struct shm_link *l = shm_links; l; l = l->next) {
		shm_link_end_lease_locked(l);
		shm_link_disarm_locked(l);
	}
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

void shm_link_take_all_locked(void)
{
	for (struct shm_link *l = shm_links; l; l = l->next) {
		pthread_mutex_lock(&l->rx_mu);
		if (!l->broken)
			shm_link_take_locked(l);
		pthread_mutex_unlock(&l->rx_mu);
	}
}

/* Ends every lease of ours and takes what every queue holds (links_mu
 * held): a thread of ours is about to sleep. */
void shm_link_end_and_take_locked(void)
{
	end_leases_locked();
	shm_link_take_all_locked();
}

void shm_link_end_leases(void)
{
	if (!atomic_load_explicit(&shm_nlinks, memory_order_relaxed))
		return;
	pthread_mutex_lock(&shm_links_mu);
	shm_link_end_and_take_locked();
	pthread_mutex_unlock(&shm_links_mu);
}

void shm_link_collect(int64_t now)
{
	int leased = 0, settle = 0;

	if (!atomic_load_explicit(&shm_nlinks, memory_order_relaxed))
		return;
	if (pthread_mutex_trylock(&shm_links_mu))
		return; /* another poller of ours is at it */
	/* no lease while a thread of ours sleeps: one published now, though
	 * ended below, would let a producer announce to us in between, and
	 * the entry we take then wakes nobody (a sleeper took the queues
	 * before it slept; one that counts itself after this look waits for
	 * links_mu and ends what we publish) */
	if (dsock_anyone_sleeps())
		now = 0;
	for (struct shm_link *l = shm_links; l; l = l->next) {
		if (l->broken)
			continue;
		/* rewritten only when less than half of it is left: the
		 * producer reads the line on every send */
		if (now && !l->gone && l->lease < now + shm_lease_ns / 2) {
			/* a new lease: receives that lingered meanwhile (before
			 * any poller of ours leased the link) stop, or every
			 * look walks them (hidden readable) long after their
			 * leases ran out; with the link leased they linger no
			 * more */
			if (l->lease <= now)
				settle = 1;
			__atomic_store_n(&l->lease, now + shm_lease_ns, __ATOMIC_RELAXED);
			__atomic_store_n(&l->inq->lease_until, (uint64_t)l->lease, __ATOMIC_SEQ_CST);
		}
		leased |= l->lease != 0;
		if (pthread_mutex_trylock(&l->rx_mu) == 0) {
			shm_link_take_locked(l);
			pthread_mutex_unlock(&l->rx_mu);
		}
	}
	/* a sleeper counted itself before we published: it may have ended
	 * the leases already, so ours must not stand */
	if (now && leased) {
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (dsock_anyone_sleeps())
			shm_link_end_and_take_locked();
	}
	pthread_mutex_unlock(&shm_links_mu);
	if (settle)
		shm_settle_lingering();
}

int shm_link_polled(const struct shm_conn *c, int64_t now)
{
	struct shm_link *l = __atomic_load_n(&c->link, __ATOMIC_ACQUIRE);

	return l && __atomic_load_n(&l->lease, __ATOMIC_RELAXED) > now;
}

/* ---- fork and exec ---------------------------------------------------------- */
static void unjoin_locked(void)
{
	for (struct shm_link *l = shm_links, *next; l; l = next) {
		int left = l->users;
		next = l->next;
		/* (the last leave may free l: users 0 and gone) */
		for (size_t i = 1; left > 0 && i < l->nslot; i++)
			if (l->slot[i]) {
				left--;
				leave_locked(l->slot[i]);
			}
	}
}

void shm_link_unjoin_all(void)
{
	if (!atomic_load_explicit(&shm_nlinks, memory_order_relaxed))
		return;
	/* what the queues hold is taken (and marked) first: a producer that
	 * saw a lease announced instead of waking */
	shm_link_end_leases();
	pthread_mutex_lock(&shm_links_mu);
	unjoin_locked();
	pthread_mutex_unlock(&shm_links_mu);
}

void shm_link_fork_prepare(void)
{
	/* held across the fork: no connection joins a link in between (an
	 * attach racing with the fork waits, then sees the new fork_gen) */
	shm_link_end_leases();
	pthread_mutex_lock(&shm_links_mu);
	unjoin_locked();
}

void shm_link_fork_parent(void)
{
	pthread_mutex_unlock(&shm_links_mu);
}

void shm_link_fork_child(void)
{
	/* the parent's links are the parent's: none of them is ours (their
	 * mutexes may be held by threads that are not here) */
	pthread_mutex_init(&shm_links_mu, NULL);
	for (int k = 0; k < 2; k++)
		for (struct shm_link *l = k ? spare : shm_links, *next; l; l = next) {
			next = l->next;
			if (l->bell >= 0)
				dsock_real.close(l->bell);
			munmap(l->h, DSOCK_LINK_BYTES);
			free(l->slot);
			free(l->freed);
			free(l);
		}
	shm_links = spare = NULL;
	atomic_store(&shm_nlinks, 0);
	/* (the parent's: the sets we share with it hold it no more) */
	int bell = atomic_exchange(&shm_own_bell, -1);
	if (bell >= 0)
		dsock_real.close(bell);
	atomic_fetch_add(&shm_own_bell_gen, 1);
}

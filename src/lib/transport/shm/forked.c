/* The shm transport at fork, and the connections a fork shares before
 * their offer: accepted, then handed to a fork child that serves them while the parent closes its copy (PostgreSQL,
 * prefork servers, inetd-style daemons).
 *
 * A connection due to offer (OFFER_DUE) counts the bytes that moved on the
 * kernel before its offer, for the stream's origin.  Once a fork shares
 * it, those counts and the number of processes holding it live in a slot
 * of memory the process and its fork children share (MAP_SHARED |
 * MAP_ANONYMOUS, inherited by fork, gone at exec), so every holder's
 * kernel I/O adds to one count.  Any holder may offer it, once it is the
 * only one left: a holder leaves the count at its release of the
 * connection (its last fd closed and no call of its in flight), and the
 * slot is free again once its last holder left or attached the
 * connection.  A holder that lets it go where the count cannot follow
 * (exec, posix_spawn, SCM_RIGHTS, io_uring, exit: its other threads may
 * still read) or takes it where the ring cannot (urgent data,
 * SO_RCVLOWAT) refuses its pairing for all of them.  A holder that ends
 * by _exit or a signal, or a fork that failed, leaves the count too high:
 * the connection stays on the kernel, and its slot is lost to the
 * lineage (which then keeps its forked connections on the kernel once
 * all are lost). */
#include "lib/transport/shm/shm.h"

#include "common/rawsys.h"
#include "common/reason.h"

#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define SLAB_BYTES (64u << 10)

struct shm_fork_slot {
	_Atomic uint32_t holders; /* processes holding it; 0: a free slot */
	_Atomic uint32_t refuse;  /* a DSOCK_R_* once a holder refused it */
	_Atomic int64_t read;     /* as shm_conn.pending_read */
	_Atomic int64_t sent;     /* as shm_conn.early_sent */
};

#define SLOTS (SLAB_BYTES / sizeof(struct shm_fork_slot))

static struct shm_fork_slot *slab; /* shared with our fork lineage */
static unsigned hint;

/* A free slot with this process and the child to come counted in; NULL if
 * there is none (the connection stays on the kernel, as before). */
static struct shm_fork_slot *slot_new(void)
{
	if (!slab) {
		void *p = mmap(NULL, SLAB_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return NULL;
		slab = p;
	}
	for (unsigned i = 0; i < SLOTS; i++) {
		struct shm_fork_slot *f = &slab[(hint + i) % SLOTS];
		uint32_t free_ = 0;
		/* (a holder of another lineage member may take slots too) */
		if (atomic_compare_exchange_strong(&f->holders, &free_, 2)) {
			hint = (hint + i + 1) % SLOTS;
			atomic_store(&f->refuse, 0);
			return f;
		}
	}
	return NULL;
}

void shm_refuse(struct shm_conn *c, unsigned reason)
{
	c->refuse = (int)reason;
	if (c->fslot) {
		uint32_t none = 0;
		atomic_compare_exchange_strong(&c->fslot->refuse, &none, reason);
	}
}

unsigned shm_refused(const struct shm_conn *c)
{
	if (c->refuse)
		return (unsigned)c->refuse;
	return c->fslot ? atomic_load(&c->fslot->refuse) : 0;
}

int shm_forked_alone(const struct shm_conn *c)
{
	return !c->fslot || atomic_load(&c->fslot->holders) == 1;
}

/* Before a fork (pending_mu held): 1 if c goes on in both processes, its
 * counts shared, its send lock held until the fork is over; 0 if the
 * pairing is refused in both (it is offered, or a call of ours is moving
 * bytes on it: a count made across the fork would be lost). */
int shm_forked_share(struct shm_conn *c)
{
	int none = 0;

	if (c->state != SC_OFFER_DUE || shm_refused(c) || c->delayed_set)
		return 0;
	/* no offer of ours starts until the fork is over (a thread that
	 * claimed it is offering: refused), nor does a thread of the parent
	 * leave the child a claim nobody clears */
	if (!atomic_compare_exchange_strong(&c->offering, &none, 1))
		return 0;
	/* Dekker with the readers, as an attach (recv.c): they wait while we
	 * move their count; the senders hold mu */
	atomic_store(&c->attaching, 1);
	if (atomic_load(&c->kernel_rx_inflight) > 0 || pthread_mutex_trylock(&c->mu) != 0)
		goto refused;
	if (c->fslot) {
		atomic_fetch_add(&c->fslot->holders, 1);
	} else {
		struct shm_fork_slot *f = slot_new();
		if (!f) {
			pthread_mutex_unlock(&c->mu);
			goto refused;
		}
		atomic_store(&f->read, atomic_load(c->read_cnt));
		atomic_store(&f->sent, atomic_load(c->sent_cnt));
		c->fslot = f;
		c->fslot_pid = (int)dsock_sys(SYS_getpid);
		c->read_cnt = &f->read;
		c->sent_cnt = &f->sent;
	}
	c->fork_shared = 1;
	return 1;
refused:
	atomic_store(&c->attaching, 0);
	atomic_store(&c->offering, 0);
	return 0;
}

/* After the fork, in the parent and in the child: the connection goes on. */
void shm_forked_done(struct shm_conn *c, int child)
{
	if (!c->fork_shared)
		return;
	c->fork_shared = 0;
	if (child) {
		/* one thread here: a reader of the parent's that counted
		 * itself in flight across the fork is not ours */
		pthread_mutex_init(&c->mu, NULL);
		atomic_store(&c->kernel_rx_inflight, 0);
		c->fslot_pid = (int)dsock_sys(SYS_getpid);
	} else {
		pthread_mutex_unlock(&c->mu);
	}
	atomic_store(&c->attaching, 0);
	atomic_store(&c->offering, 0);
}

/* A fork child's copy of a connection the fork did not share: the child
 * was not counted, so it never touches the slot. */
void shm_forked_forget(struct shm_conn *c)
{
	c->fslot = NULL;
	c->read_cnt = &c->pending_read;
	c->sent_cnt = &c->early_sent;
}

/* c's slot, taken out of c, if this process counts in it (one of a
 * connection the pending list no longer holds, as a detached one, came
 * with a fork that did not count us; a thread closing c may race with
 * the exit's walk: one of them takes it) */
static struct shm_fork_slot *slot_take(struct shm_conn *c)
{
	struct shm_fork_slot *f = __atomic_exchange_n(&c->fslot, NULL, __ATOMIC_SEQ_CST);

	return f && c->fslot_pid == (int)dsock_sys(SYS_getpid) ? f : NULL;
}

/* Our release: one holder fewer (the last frees the slot). */
void shm_forked_release(struct shm_conn *c)
{
	struct shm_fork_slot *f = slot_take(c);

	if (f)
		atomic_fetch_sub(&f->holders, 1);
	shm_forked_forget(c);
}

/* The slot's counts back in c's own fields, which c counts in from now. */
static void counts_back(struct shm_conn *c, struct shm_fork_slot *f)
{
	atomic_store(&c->pending_read, atomic_load(&f->read));
	atomic_store(&c->early_sent, atomic_load(&f->sent));
	__atomic_store_n(&c->read_cnt, &c->pending_read, __ATOMIC_SEQ_CST);
	__atomic_store_n(&c->sent_cnt, &c->early_sent, __ATOMIC_SEQ_CST);
}

/* The counts back in c, and c out of the slot, if no call of ours may add
 * to the slot's counts any more: a call that starts after the switch adds
 * to c's, one already under way is seen (a reader counts itself in flight
 * before it adds, a sender holds mu).  Returns 0, or -EBUSY with c still
 * in the slot. */
static int slot_leave(struct shm_conn *c)
{
	struct shm_fork_slot *f = slot_take(c);

	if (!f)
		return 0;
	counts_back(c, f);
	if (atomic_load(&c->kernel_rx_inflight) > 0 || pthread_mutex_trylock(&c->mu) != 0) {
		__atomic_store_n(&c->read_cnt, &f->read, __ATOMIC_SEQ_CST);
		__atomic_store_n(&c->sent_cnt, &f->sent, __ATOMIC_SEQ_CST);
		return -EBUSY; /* (c no longer names it: the count stays ours for good) */
	}
	pthread_mutex_unlock(&c->mu);
	atomic_fetch_sub(&f->holders, 1);
	return 0;
}

/* Attached (we were alone when we offered it, no call of ours in flight:
 * attach excludes them): the slot is free again. */
void shm_forked_attached(struct shm_conn *c)
{
	struct shm_fork_slot *f = slot_take(c);

	if (!f)
		return;
	counts_back(c, f);
	atomic_fetch_sub(&f->holders, 1);
}

/* At exit, with the fd still open: our other threads may still read, so
 * no other holder may pair it; we leave the count when no call of ours
 * can add to it any more. */
void shm_forked_exit(struct shm_conn *c)
{
	if (!c->fslot)
		return;
	shm_refuse(c, DSOCK_R_FORKED); /* (here too: a thread of ours may still offer) */
	slot_leave(c);
}

/* ---- fork ------------------------------------------------------------------ */
void shm_fork_prepare(void)
{
	/* connections from before the fork may be read by both processes: no
	 * lease may outlive a recv on them any more */
	shm_settle_lingering();
	shm_fork_gen++;
	/* held across the fork: no offer slips in between */
	pthread_mutex_lock(&shm_pending_mu);
	/* again: an attach that read it under shm_pending_mu before us takes
	 * its connection for unshared no more (its link join fails) */
	shm_fork_gen++;
	for (struct shm_conn *c = shm_pending; c; c = c->next)
		if (!shm_forked_share(c))
			shm_refuse(c, DSOCK_R_FORKED);
	/* the child holds every attached connection too: counted here, before
	 * the fork returns, or the parent's close could come first and end a
	 * connection the child goes on using (its tokens would stop) */
	pthread_mutex_lock(&shm_held_mu);
	for (struct shm_conn *c = shm_held; c; c = c->hnext) {
		if (!c->let_go)
			__atomic_add_fetch(&c->me->holders, 1, __ATOMIC_SEQ_CST);
		if (c->mapped) /* the child maps it too until its release */
			__atomic_add_fetch(&c->h->maps[c->side], 1, __ATOMIC_SEQ_CST);
	}
	/* and none stays on a link */
	shm_link_fork_prepare();
	shm_pool_fork_prepare();
}

void shm_fork_parent(void)
{
	for (struct shm_conn *c = shm_pending; c; c = c->next)
		shm_forked_done(c, 0);
	shm_pool_fork_parent();
	shm_link_fork_parent();
	pthread_mutex_unlock(&shm_held_mu);
	pthread_mutex_unlock(&shm_pending_mu);
}

void shm_fork_child(void)
{
	struct shm_conn *list = shm_pending;

	shm_forget_tid();
	shm_link_fork_child();
	shm_pool_fork_child();
	shm_membarrier_register(); /* a registration is the address space's */
	pthread_mutex_init(&shm_held_mu, NULL);
	/* the child counts the connections it moves bytes through itself */
	atomic_store(&shm_ring_conns, 0);
	atomic_store(&shm_back_conns, 0);
	for (struct shm_conn *c = shm_held; c; c = c->hnext)
		c->used_ring = 0;

	pthread_mutex_init(&shm_pending_mu, NULL);
	shm_pending = NULL;
	shm_offered_forget();
	/* one not offered yet, that the fork shared, goes on here too; the
	 * answers of the others go to the parent: here these stay on the
	 * kernel; one that a thread of the parent was attaching may be mapped
	 * already, uncounted for us: dropped untouched */
	for (struct shm_conn *c = list, *next; c; c = next) {
		next = c->next;
		c->next = c->prev = NULL;
		c->listed = 0;
		if (c->fork_shared) {
			shm_forked_done(c, 1);
			shm_list_pending_locked(c, 0);
			continue;
		}
		shm_forked_forget(c);
		c->state = SC_PENDING;
		shm_unmap(c);
		dsock_sock_detach(c->sock, DSOCK_R_FORKED);
	}
}

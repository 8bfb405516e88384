/* Bells on the shm transport (link.c's links; docs/ARCHITECTURE.md,
 * "Bells"): our own, which the socket layer registers in the sets our
 * pollers sleep on, and each link peer's, which our producers ring.
 *
 * A poller that sleeps on a set holding our bell (the transport's bell
 * op; counted in dsock_bell_sleepers) arms the bell instead: every link's
 * lease ends and its bell word is set and its rung word cleared, then (a
 * full fence) the queues are taken.  A producer that pushes an entry
 * while the bell word is set rings our bell (an eventfd the daemon made
 * for this process and gave to its link peers) if it sets rung first:
 * one system call per burst, not a token per message.  Producer: entry,
 * fence, exchange of rung; poller: rung cleared, fence, entries (Dekker):
 * either the poller took the entry before it slept or the producer saw
 * rung clear and rang (rung already set means a ring came after every
 * sleeper armed it, and each woken sleeper arms it again or returns to
 * look).  The sets hold the bell level-triggered, and only an arming
 * drains it: a look by a thread that does not sleep leaves a ring for the
 * sleeper (the kernel wakes a waiter while the bell is readable).  A
 * thread that sleeps counted in dsock_sleepers (a blocking receive, a
 * poll past the sleepers' slots, a set without our bell) ends the bells
 * too: tokens. */
#include "lib/transport/shm/link_int.h"
#include "lib/base/real.h"
#include "lib/ctl/ctl.h"
#include "lib/sock/light.h"
#include "lib/sock/ready.h"
#include "common/proto.h"

#include <fcntl.h>
#include <unistd.h>

struct own_swap {
	int fd, old;
};

/* (under the sets' lock, their registrations of the old file gone) */
static void own_swap(void *arg)
{
	struct own_swap *w = arg;

	if (dsock_real.dup3(w->fd, w->old, O_CLOEXEC) == w->old)
		dsock_real.close(w->fd);
	else
		atomic_store(&shm_own_bell, w->fd); /* (the old number stays ours) */
	atomic_fetch_add(&shm_own_bell_gen, 1);
}

void shm_link_bell_result(const struct dsock_msg_result *r, int fd)
{
	unsigned gen = dsock_ctl_gen();

	if (!r->link) { /* ours: a new daemon's replaces the last */
		struct own_swap w = { fd, atomic_load(&shm_own_bell) };
		if (w.old >= 0) {
			dsock_light_bell_replace(own_swap, &w);
		} else {
			atomic_store(&shm_own_bell, fd);
			atomic_fetch_add(&shm_own_bell_gen, 1);
		}
		return;
	}
	pthread_mutex_lock(&shm_links_mu);
	struct shm_link *l = shm_link_find_locked(r->link, r->link_side, gen);
	if (l) {
		pthread_mutex_lock(&l->tx_mu);
		if (l->bell < 0)
			l->bell = fd, fd = -1;
		else if (dsock_real.dup3(fd, l->bell, O_CLOEXEC) < 0)
			l->bell = -1; /* (the fd number stays ours) */
		atomic_store(&l->bell_ok, l->bell >= 0);
		pthread_mutex_unlock(&l->tx_mu);
	}
	pthread_mutex_unlock(&shm_links_mu);
	if (fd >= 0)
		dsock_real.close(fd);
}

int shm_link_bell(unsigned *gen)
{
	*gen = atomic_load(&shm_own_bell_gen);
	return atomic_load(&shm_own_bell);
}

void shm_link_disarm_bells(void)
{
	if (!atomic_load_explicit(&shm_nlinks, memory_order_relaxed))
		return;
	pthread_mutex_lock(&shm_links_mu);
	/* (a bell sleeper that came meanwhile armed them anew: they stand) */
	if (!atomic_load(&dsock_bell_sleepers))
		for (struct shm_link *l = shm_links; l; l = l->next)
			shm_link_disarm_locked(l);
	pthread_mutex_unlock(&shm_links_mu);
}

/* Drains our bell: 1 if it was rung.  *own: the bell's fd, or -1. */
static int drain_own(int *own)
{
	uint64_t count = 0;

	if ((*own = atomic_load(&shm_own_bell)) >= 0 && dsock_real.read(*own, &count, sizeof(count)) < 0)
		count = 0; /* (not rung: EAGAIN) */
	return count != 0;
}

int shm_link_arm_bells(void)
{
	int own, rang;

	/* (a ring that came before the last link went: never left readable,
	 * or every sleep on the bell would wake at once) */
	if (!atomic_load_explicit(&shm_nlinks, memory_order_relaxed))
		return drain_own(&own);
	pthread_mutex_lock(&shm_links_mu);
	/* drained first (the sets hold it level-triggered: it stays readable
	 * until a sleeper arms it again, whatever other threads look); a
	 * ring from here on wakes the sleep that follows.  Only a sleeper on
	 * the one set that holds the bell arms (light.h), and it looks at
	 * that set after this */
	rang = drain_own(&own);
	/* a thread asleep counted in dsock_sleepers (it counts itself
	 * before it takes links_mu to end them) wants tokens */
	if (atomic_load(&dsock_sleepers) > 0 || own < 0) {
		shm_link_end_and_take_locked();
		pthread_mutex_unlock(&shm_links_mu);
		return rang;
	}
	for (struct shm_link *l = shm_links; l; l = l->next) {
		shm_link_end_lease_locked(l);
		if (l->broken || l->gone)
			continue;
		if (!l->armed) {
			__atomic_store_n(&l->inq->bell, 1, __ATOMIC_RELAXED);
			l->armed = 1;
		}
		__atomic_store_n(&l->inq->rung, 0, __ATOMIC_RELAXED);
	}
	__atomic_thread_fence(__ATOMIC_SEQ_CST); /* rung before the entries */
	shm_link_take_all_locked();
	pthread_mutex_unlock(&shm_links_mu);
	return rang;
}


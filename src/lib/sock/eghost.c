/* Ghosts: epoll registrations the application deleted that the kernel's
 * set keeps.
 *
 * Event loops built like redis's (ae) take a socket out of their epoll set
 * and put it back with other events around every message: MOD, DEL, ADD
 * for EPOLLOUT, then DEL, ADD for EPOLLIN, five system calls a request
 * (ADD and DEL cost some 800 ns each here).  On the rings the message
 * itself needs none, so these calls are most of what such a client still
 * asks of the kernel.  So a DEL of a plain level-triggered member leaves
 * the kernel's registration as it is and marks the member a ghost: no
 * wait reports it (events the kernel gives for it are dropped, and the
 * ghost then leaves the kernel's set for real, so a ghost with data
 * waiting cannot wake a wait twice); an ADD of the same fd to the same set
 * makes it a member again with a MOD, or with nothing at all when the
 * kernel already has those events and that data; a MOD that would change
 * nothing is left out too.  A ghost leaves the kernel's set for real
 * before its fd is closed (the file can outlive the fd: a dup, a fork
 * child, and its events would come with data the application let go of),
 * when another registration of the set takes its data (the kernel's events
 * must name one member), and before an exec.
 *
 * Only members whose kernel registration is exactly what the application
 * asked (no EPOLLIN added, not parked, no transport waits), level-
 * triggered, not one-shot or exclusive, of sets no other set holds (the
 * kernel's readiness of the set itself would count the ghost) and of the
 * process that owns the tables (not a vfork child) become ghosts.
 *
 * Off unless DSOCK_EPOLL_GHOSTS=1: ghosts are judged by (set number,
 * data) against this process's records as they are when the wait's events
 * are filtered, and these differ from the kernel (found by review, each
 * reproduced): a dup of the set reaches the ghost under another number
 * (reported there; a DEL there removes it, and the revival by ADD on the
 * first number then asks the kernel nothing: its events are lost); an fd
 * the records do not hold (an eventfd) registered with a ghost's data has
 * its event taken for the ghost's and dropped (lost for good if
 * edge-triggered); another thread that closes, revives or takes the data
 * of a ghost between a wait's kernel call and its filter lets a deleted
 * registration's event through; a ghost's event can fill maxevents of a
 * timeout-0 wait that then returns 0; fork marks only sets with members;
 * vfork+exec, system() and popen() keep ghosts in sets the new program
 * inherits; a poll already asleep on the set sees them; MOD of a ghost
 * answers ENOENT where the kernel checks its arguments first (EFAULT,
 * EINVAL); exec and poll take the table lock, which a signal handler that
 * interrupted its holder would wait for. */
#include "lib/sock/epset.h"
#include "lib/sock/epset_int.h"
#include "lib/base/proc.h"
#include "lib/base/real.h"
#include "lib/transport/transport.h"

#include <stdatomic.h>

_Atomic long dsock_epoll_ghosts;
int dsock_epoll_ghosts_on;

#define GHOST_NEVER (EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE | EPOLLWAKEUP)

/* no other registration of the set has m's data */
static int data_alone(const struct member *m)
{
	for (struct member *o = dsock_epset_data_chain(m->epfd, m->data); o; o = o->next[BY_DATA])
		if (o != m && o->epfd == m->epfd && o->data == m->data)
			return 0;
	return 1;
}

/* m's kernel registration is what the application asked, level-triggered
 * and plain */
static int plain(const struct member *m)
{
	return dsock_epoll_ghosts_on && !(m->events & GHOST_NEVER) && !m->in_added && !m->parked && !m->watched;
}

int dsock_ghost_may(const struct member *m)
{
	/* (sets are known to be nested only while a transport may run) */
	return plain(m) && m->sock && m->capable && dsock_transports_any() && dsock_table_owner() &&
	       !dsock_epset_nested(m->epfd) && data_alone(m);
}

int dsock_ghost_same(const struct member *m, const struct epoll_event *ev, unsigned kernel_events)
{
	return plain(m) && kernel_events == ev->events && ev->events == m->events && ev->data.u64 == m->data;
}

void dsock_ghost_set(struct member *m, int on)
{
	if (m->ghost == on)
		return;
	m->ghost = on;
	atomic_fetch_add(&dsock_epoll_ghosts, on ? 1 : -1);
}

int dsock_ghosts_drop_data(int epfd, uint64_t data, const struct member *keep)
{
	int dropped = 0;

	for (struct member *m = dsock_epset_data_chain(epfd, data), *n; m; m = n) {
		n = m->next[BY_DATA];
		if (m != keep && m->ghost && m->epfd == epfd && m->data == data) {
			dsock_epset_drop(m);
			dropped++;
		}
	}
	return dropped;
}

int dsock_epset_ghost_event(int epfd, uint64_t data)
{
	pthread_mutex_lock(&dsock_epset_mu);
	int found = dsock_ghosts_drop_data(epfd, data, NULL) > 0;
	pthread_mutex_unlock(&dsock_epset_mu);
	return found;
}

void dsock_epset_before_exec(void)
{
	if (!atomic_load_explicit(&dsock_epoll_ghosts, memory_order_relaxed) || !dsock_table_owner())
		return;
	pthread_mutex_lock(&dsock_epset_mu);
	dsock_epset_drop_ghosts(-1);
	pthread_mutex_unlock(&dsock_epset_mu);
}

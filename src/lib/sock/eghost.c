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
 * triggered, not one-shot or exclusive, of the process that owns the
 * tables (not a vfork child), become ghosts, and only in sets that no
 * one else can reach (light.h, dsock_light_ghostable): made by this
 * process image after its last fork, close-on-exec (so no exec, spawn,
 * system() or popen() passes them on), never dup'd, never nested in
 * another set, never polled as a whole (the kernel's readiness of the set
 * itself would count the ghost; a poll that starts on the set ends that
 * for good, so none is made while one sleeps on it).
 *
 * A wait's events are judged against the records after the kernel's call;
 * another thread may end a ghost in between (close it, take its data, or
 * revive it with other data).  Each ghost that ends leaves a tombstone
 * (set, data, sequence number); the wait drops an event whose registration
 * is no ghost now but was one after its kernel call began, unless a
 * registration that holds that data now is edge-triggered or one-shot (its
 * own edge may be that event: a spurious report rather than a lost one).
 * A wait whose room the ghosts' events took looks again at once.  MOD of a
 * ghost answers as the kernel does for a registration it does not hold,
 * arguments checked first (EFAULT, EINVAL, then ENOENT).  A spawn with
 * file actions and a set sent with SCM_RIGHTS end ghosts for good.
 *
 * With ghosts on, the records of a set born here hold every registration
 * (untracked members for fds that are neither sockets of ours nor sets;
 * a registration whose record cannot be allocated ends the set's ghosts
 * for good), so a ghost is made only if no registration shares its data,
 * and a wait that outlived TOMBS tombstones drops exactly the events whose
 * data no registration holds, and reports one that a single level-
 * triggered registration holds for what that registration is ready for
 * now (ready.c).  An io_uring ends every set's ghosts for good (uring.c).
 *
 * On unless DSOCK_EPOLL_GHOSTS=0.  What shows them: a set polled as a
 * whole by a process without dsock that took it with pidfd_getfd, and an
 * io_uring made with the system call instruction itself.  What they miss:
 * a registration the kernel keeps after its fd closed (a dup or another
 * process holds the file) is in no record, so a ghost may share its data,
 * and such a registration's event is then dropped once as the ghost's. */
#include "lib/sock/epset.h"
#include "lib/sock/epset_int.h"
#include "lib/sock/light.h"
#include "lib/sock/sock.h"
#include "lib/base/proc.h"
#include "lib/base/real.h"
#include "lib/transport/transport.h"

#include <errno.h>
#include <stdatomic.h>
#include <sys/ioctl.h>
#include <fcntl.h>

_Atomic long dsock_epoll_ghosts;
int dsock_epoll_ghosts_on;
int dsock_ghost_test_unsure;

/* Tombstones: the last ghosts that ended, written under the table lock. */
#define TOMBS 256
static struct {
	int epfd;
	uint64_t data, seq;
} tombs[TOMBS];
static _Atomic uint64_t tomb_seq;

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
	if (!on) {
		uint64_t q = atomic_load_explicit(&tomb_seq, memory_order_relaxed) + 1;
		tombs[q % TOMBS].epfd = m->epfd;
		tombs[q % TOMBS].data = m->data;
		tombs[q % TOMBS].seq = q;
		atomic_store_explicit(&tomb_seq, q, memory_order_release);
	}
	m->ghost = on;
	atomic_fetch_add(&dsock_epoll_ghosts, on ? 1 : -1);
}

uint64_t dsock_ghost_since(void)
{
	return atomic_load_explicit(&tomb_seq, memory_order_acquire);
}

/* A ghost of (epfd, data) ended after tombstone since, up to now (mu
 * held; the stretch is not overwritten). */
static int ended_since(int epfd, uint64_t data, uint64_t since, uint64_t now)
{
	for (uint64_t q = since + 1; q <= now; q++)
		if (tombs[q % TOMBS].seq == q && tombs[q % TOMBS].epfd == epfd && tombs[q % TOMBS].data == data)
			return 1;
	return 0;
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

/* How many registrations hold data in set epfd now, ghosts aside (mu
 * held); *edge: one of them is edge-triggered or one-shot; *one: the
 * last of them. */
static int holders(int epfd, uint64_t data, int *edge, const struct member **one)
{
	int n = 0;

	*edge = 0;
	for (struct member *m = dsock_epset_data_chain(epfd, data); m; m = m->next[BY_DATA])
		if (m->epfd == epfd && m->data == data && !m->ghost) {
			n++;
			*edge |= (m->events & (EPOLLET | EPOLLONESHOT)) != 0;
			*one = m;
		}
	return n;
}

int dsock_epset_data_holders(int epfd, uint64_t data)
{
	const struct member *one;
	int n, edge;

	pthread_mutex_lock(&dsock_epset_mu);
	n = holders(epfd, data, &edge, &one);
	pthread_mutex_unlock(&dsock_epset_mu);
	return n;
}

int dsock_epset_ghost_event(int epfd, uint64_t data, uint64_t since, int *fd, unsigned *events)
{
	const struct member *one = NULL;
	uint64_t now;
	int r;

	pthread_mutex_lock(&dsock_epset_mu);
	r = dsock_ghosts_drop_data(epfd, data, NULL) > 0;
	now = atomic_load_explicit(&tomb_seq, memory_order_relaxed);
	if (!r && now != since) {
		/* a set born here holds ghosts, and its records hold every
		 * registration (the untracked fds too): an event whose data no
		 * registration holds is a ghost's that ended; one a level-
		 * triggered registration holds comes again at the next wait */
		int edge, n = holders(epfd, data, &edge, &one);
		if (now - since <= TOMBS && !dsock_ghost_test_unsure)
			r = !edge && ended_since(epfd, data, since, now);
		else if (n == 0) /* the tombstones cannot tell */
			r = dsock_light_ghostable(epfd);
		else if (n == 1 && !edge && dsock_light_ghostable(epfd)) {
			/* the holder's own readiness decides (ready.c) */
			*fd = one->fd;
			*events = one->events;
			r = DSOCK_GHOST_UNSURE;
		}
	}
	pthread_mutex_unlock(&dsock_epset_mu);
	return r;
}

static void drop_every_ghost(void)
{
	pthread_mutex_lock(&dsock_epset_mu);
	dsock_epset_drop_ghosts(-1);
	pthread_mutex_unlock(&dsock_epset_mu);
}

void dsock_epset_spawn_actions(void)
{
	if (dsock_sets_watched() && dsock_light_unghost(-1) && dsock_epoll_ghosts_on)
		drop_every_ghost();
}

void dsock_epset_ghosts_end(void)
{
	if (!dsock_epoll_ghosts_on)
		return;
	/* off before the drop: a DEL that takes mu after it makes none */
	__atomic_store_n(&dsock_epoll_ghosts_on, 0, __ATOMIC_SEQ_CST);
	dsock_light_unghost(-1);
	drop_every_ghost();
}

void dsock_epset_passed(int fd)
{
	if (dsock_sets_watched() && !dsock_fdt_peek(fd))
		dsock_epset_no_ghosts(fd);
}

int dsock_epset_cloexec(int fd, int on, int fcntl, long arg)
{
	int r;

	/* (before the kernel's flag changes: an exec in another thread
	 * right after must find no ghost) */
	if (!on && dsock_sets_watched() && !dsock_fdt_peek(fd))
		dsock_epset_no_ghosts(fd);
	r = fcntl ? dsock_real.fcntl(fd, F_SETFD, arg) : dsock_real.ioctl(fd, on ? FIOCLEX : FIONCLEX);
	if (r < 0)
		return -errno;
	if (on && dsock_sets_watched() && !dsock_fdt_peek(fd))
		dsock_light_cloexec(fd, 1);
	return r;
}

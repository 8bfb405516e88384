/* What dsock's epoll wrapper must know about epoll sets: which fd each
 * registration (epoll set, data) names, and which registered sockets hold
 * data the kernel does not show (hidden readable).  Indexed, so the cost of
 * a wait, an event or a close does not grow with the number of
 * registrations: members hang in hash chains by fd, by (epoll set, data)
 * and by socket, and the hidden-readable sockets are a short list of their
 * own (a wait walks that list, not the members). */
#include "lib/sock/epset.h"
#include "lib/sock/epset_int.h"
#include "lib/sock/light.h"
#include "lib/sock/poke.h"
#include "lib/base/grow.h"
#include "lib/base/proc.h"
#include "lib/base/real.h"
#include "lib/sock/ready.h"
#include "lib/sock/sock.h"
#include "lib/sock/watch.h"
#include "lib/transport/transport.h"
#include "common/rawsys.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sys/socket.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Buckets per index: a power of two, at least one per member (grown by
 * doubling, so a chain stays about one member long at any count). */
#define BUCKETS_MIN 4096u
static size_t nbuckets;

pthread_mutex_t dsock_epset_mu = PTHREAD_MUTEX_INITIALIZER;
_Atomic long dsock_epoll_in_added;

unsigned dsock_epoll_kernel_events(int fd, unsigned events)
{
	struct dsock_sock *s = dsock_fdt_peek(fd);

	if (s && s->type == SOCK_STREAM && (s->domain == AF_INET || s->domain == AF_INET6) &&
	    (events & (EPOLLET | EPOLLOUT | EPOLLIN)) == (EPOLLET | EPOLLOUT) && dsock_transports_any())
		return events | EPOLLIN;
	return events;
}

void dsock_epset_in_added(struct member *m, int on)
{
	if (m->in_added != on)
		atomic_fetch_add(&dsock_epoll_in_added, on ? 1 : -1);
	m->in_added = on;
}
static struct member *all;
static struct member **heads[4]; /* [ALL] unused: all is the head */
_Atomic size_t dsock_epset_nmembers;
/* the epoll sets that have members, and how many (a close of one of them
 * drops its members) */
static struct {
	int epfd;
	size_t n;
} *sets;
static size_t nsets, sets_cap;
static int sets_lost; /* out of memory once: every close scans */

static void set_count(int epfd, int delta)
{
	size_t i;

	for (i = 0; i < nsets && sets[i].epfd != epfd; i++)
		;
	if (i == nsets) {
		if (delta < 0)
			return;
		if (dsock_grow(&sets, &sets_cap, nsets, sizeof(*sets), 8)) {
			sets_lost = 1;
			return;
		}
		dsock_setbit_mark(epfd);
		sets[nsets].epfd = epfd;
		sets[nsets++].n = 0;
	}
	sets[i].n += (size_t)delta;
	if (sets[i].n == 0)
		sets[i] = sets[--nsets];
}

int dsock_epset_ghosts_allowed(int epfd)
{
	return !sets_lost && dsock_light_ghostable(epfd);
}

void dsock_epset_no_ghosts(int epfd)
{
	if (!dsock_setbit_maybe(epfd))
		return; /* (no set of ours: no lock taken) */
	epfd = dsock_epset_key(epfd);
	/* a ghost made before this mark is dropped below (both under mu);
	 * a set that could hold none holds none */
	if (!dsock_light_unghost(epfd))
		return;
	/* the count is read under mu: a DEL that found the set
	 * ghostable before the mark above holds mu until its ghost is made */
	pthread_mutex_lock(&dsock_epset_mu);
	dsock_epset_drop_ghosts(epfd);
	pthread_mutex_unlock(&dsock_epset_mu);
}

static size_t h_fd(int fd)
{
	return (unsigned)fd & (nbuckets - 1);
}

static size_t h_data(int epfd, uint64_t data)
{
	uint64_t x = data * 0x9e3779b97f4a7c15ull ^ (uint64_t)(unsigned)epfd * 0xc2b2ae3d27d4eb4full;
	return (size_t)(x >> 24) & (nbuckets - 1);
}

static size_t h_sock(const struct dsock_sock *s)
{
	return (size_t)(((uintptr_t)s >> 6) * 0x9e3779b97f4a7c15ull >> 24) & (nbuckets - 1);
}

static struct member **head_of(int k, const struct member *m)
{
	return k == ALL ? &all : &heads[k][k == BY_FD ? h_fd(m->fd) : k == BY_DATA ? h_data(m->epfd, m->data) : h_sock(m->sock)];
}

static void link_in(struct member *m, int k)
{
	if (k == BY_SOCK && m->untracked)
		return;
	struct member **h = head_of(k, m);
	m->next[k] = *h;
	if (*h)
		(*h)->pprev[k] = &m->next[k];
	*h = m;
	m->pprev[k] = h;
}

static void link_out(struct member *m, int k)
{
	if (k == BY_SOCK && m->untracked)
		return;
	*m->pprev[k] = m->next[k];
	if (m->next[k])
		m->next[k]->pprev[k] = m->pprev[k];
}

/* (mu held) */
static void watch(struct member *m)
{
	int on = dsock_watch_apply(&m->w, m->epfd, m->fd, m->data, m->events, m->disarmed, m->sock);

	if (m->watched != on)
		atomic_fetch_add(&dsock_epoll_watched, on ? 1 : -1);
	m->watched = on;
}

static void drop(struct member *m)
{
	if (m->ghost) {
		dsock_real.epoll_ctl(m->epfd, EPOLL_CTL_DEL, m->fd, NULL);
		dsock_ghost_set(m, 0);
	}
	dsock_watch_drop(&m->w, m->epfd);
	if (m->watched)
		atomic_fetch_sub(&dsock_epoll_watched, 1);
	dsock_epset_set_parked(m, 0);
	dsock_epset_in_added(m, 0);
	for (int k = 0; k < 4; k++)
		link_out(m, k);
	if (!m->untracked)
		set_count(m->epfd, -1);
	if (m->capable)
		dsock_light_member(m->epfd, -1, 0);
	atomic_fetch_sub(&dsock_epset_nmembers, 1);
	free(m);
}

void dsock_epset_drop(struct member *m)
{
	drop(m);
}

struct member *dsock_epset_data_chain(int epfd, uint64_t data)
{
	return heads[BY_DATA] ? heads[BY_DATA][h_data(epfd, data)] : NULL;
}

struct member *dsock_epset_sock_chain(const struct dsock_sock *s)
{
	return heads[BY_SOCK] ? heads[BY_SOCK][h_sock(s)] : NULL;
}

struct member *dsock_epset_all_members(void)
{
	return all;
}

void dsock_epset_drop_ghosts(int epfd)
{
	for (struct member *m = all, *n; atomic_load(&dsock_epoll_ghosts) && m; m = n) {
		n = m->next[ALL];
		if (m->ghost && (epfd < 0 || m->epfd == epfd))
			drop(m);
	}
}

/* 1 if the non-socket fd is an epoll set (a member of another one, or
 * polled: hidden data inside it counts as its readiness).  A readlink per
 * registration of a non-socket fd, never on a data path. */
static int dsock_is_epoll_fd(int fd)
{
	char path[48], link[32];
	long n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = dsock_sys(SYS_readlinkat, AT_FDCWD, path, link, sizeof(link) - 1);
	return n == (long)sizeof("anon_inode:[eventpoll]") - 1 && !memcmp(link, "anon_inode:[eventpoll]", (size_t)n);
}

/* The three indexes with n buckets each, every member linked in again (mu
 * held); -ENOMEM leaves them as they were, still correct, only longer. */
static int rehash(size_t n)
{
	struct member **h[4] = { NULL };

	for (int k = BY_FD; k <= BY_SOCK; k++)
		if (!(h[k] = calloc(n, sizeof(struct member *)))) {
			while (k-- > BY_FD)
				free(h[k]);
			return -ENOMEM;
		}
	for (int k = BY_FD; k <= BY_SOCK; k++) {
		free(heads[k]);
		heads[k] = h[k];
	}
	nbuckets = n;
	for (struct member *m = all; m; m = m->next[ALL])
		for (int k = BY_FD; k <= BY_SOCK; k++)
			link_in(m, k);
	return 0;
}

/* ---- registrations ---------------------------------------------------------- */
static struct member *find(int epfd, int fd)
{
	for (struct member *m = heads[BY_FD] ? heads[BY_FD][h_fd(fd)] : NULL; m; m = m->next[BY_FD])
		if (m->fd == fd && m->epfd == epfd)
			return m;
	return NULL;
}

/* 1 if a transport may ever carry fd's data (light.h): an Internet stream
 * socket that never listened, or an epoll set */
static int capable(const struct dsock_sock *s)
{
	return !s || (s->type == SOCK_STREAM && (s->domain == AF_INET || s->domain == AF_INET6) &&
		      !(atomic_load(&s->flags) & DSOCK_SF_LISTENED));
}

/* 1 if epfd is a member of another set */
int dsock_epset_nested(int epfd)
{
	/* (sets have no socket: all hang in the chain of NULL; one may be
	 * in the other set by an alias's number) */
	for (struct member *m = heads[BY_SOCK] ? heads[BY_SOCK][h_sock(NULL)] : NULL; m; m = m->next[BY_SOCK])
		if (!m->sock && dsock_epset_key(m->fd) == epfd)
			return 1;
	return 0;
}

int dsock_epoll_ctl(int app_epfd, int op, int fd, struct epoll_event *ev)
{
	/* the records name the set by its key (ealias.c); the kernel is asked
	 * by the number the application gave */
	int epfd = dsock_epset_key(app_epfd);
	struct dsock_sock *s = dsock_fdt_peek(fd);
	struct epoll_event kv, *kev = ev;
	unsigned kernel_events = 0;
	struct member *m;
	int r, cap = 0, lost = 0;

	if (ev && (op == EPOLL_CTL_ADD || op == EPOLL_CTL_MOD)) {
		kv = *ev;
		kv.events = kernel_events = dsock_epoll_kernel_events(fd, ev->events);
		kev = &kv;
	}
	if (op == EPOLL_CTL_ADD && !s && dsock_sets_watched())
		dsock_epset_no_ghosts(fd); /* (if a set) one inside another */
	/* an fd we do not track takes a ghost's data too */
	if (ev && op != EPOLL_CTL_DEL && !s && atomic_load(&dsock_epoll_ghosts)) {
		pthread_mutex_lock(&dsock_epset_mu);
		dsock_ghosts_drop_data(epfd, ev->data.u64, NULL);
		pthread_mutex_unlock(&dsock_epset_mu);
	}
	/* only sockets a transport may own, and epoll sets (nesting); with
	 * ghosts on, every fd in a set born here (eghost.c) */
	int untracked = 0;
	if (op == EPOLL_CTL_ADD && !s && (!dsock_transports_any() || !dsock_is_epoll_fd(fd))) {
		if (!dsock_epoll_ghosts_on || !dsock_light_known(epfd))
			return dsock_real.epoll_ctl(app_epfd, op, fd, kev) < 0 ? -errno : 0;
		untracked = 1;
	}
	/* the kernel's change and ours together: a parking (its own MOD) in
	 * between would put back what the application just changed */
	pthread_mutex_lock(&dsock_epset_mu);
	m = find(epfd, fd);
	/* a ghost whose fd now names another socket: closed
	 * where dsock did not see it (fclose, pclose, a raw close) */
	if (m && m->ghost && op == EPOLL_CTL_ADD && m->sock != s) {
		drop(m);
		m = NULL;
	}
	/* an ADD the kernel accepts while a record says the fd is
	 * registered: the record is stale, replaced by a fresh one below */
	struct member *stale = m && !m->ghost && op == EPOLL_CTL_ADD ? m : NULL;
	if (stale)
		m = NULL;
	/* ghosts (eghost.c): what the kernel is asked, if anything */
	int kop = op, skip = 0;
	if (m && m->ghost && op != EPOLL_CTL_ADD && op != EPOLL_CTL_MOD && op != EPOLL_CTL_DEL) {
		/* no such op: the kernel's EFAULT or EINVAL */
		pthread_mutex_unlock(&dsock_epset_mu);
		return dsock_real.epoll_ctl(app_epfd, op, fd, ev) < 0 ? -errno : 0;
	}
	if (m && m->ghost) {
		if (op != EPOLL_CTL_ADD) {
			pthread_mutex_unlock(&dsock_epset_mu);
			/* deleted, as far as the application knows: the kernel's
			 * answer for a registration it does not hold */
			if (op == EPOLL_CTL_MOD && !ev)
				return -EFAULT;
			if (op == EPOLL_CTL_MOD && (ev->events & EPOLLEXCLUSIVE))
				return -EINVAL;
			return -ENOENT;
		}
		if (!ev || (ev->events & EPOLLEXCLUSIVE)) { /* (no MOD can ask that) */
			drop(m);
			m = NULL;
		} else {
			kop = EPOLL_CTL_MOD;
			skip = dsock_ghost_same(m, ev, kernel_events);
		}
	} else if (m && op == EPOLL_CTL_DEL) {
		skip = dsock_ghost_may(m) && dsock_epset_ghosts_allowed(epfd);
	} else if (m && op == EPOLL_CTL_MOD && ev) {
		skip = dsock_ghost_same(m, ev, kernel_events);
	}
	if (ev && op != EPOLL_CTL_DEL && atomic_load(&dsock_epoll_ghosts))
		dsock_ghosts_drop_data(epfd, ev->data.u64, m);
	/* (MOD of an fd we do not track: a socket added while dsock did not
	 * know it yet; anything else stays untracked, as at its ADD) */
	int joins = !m && ev && (op == EPOLL_CTL_ADD || (op == EPOLL_CTL_MOD && s));
	if (joins && !untracked && (cap = capable(s)))
		dsock_light_member(epfd, 1, dsock_epset_nested(epfd)); /* before the kernel has it */
	if (!skip && dsock_real.epoll_ctl(app_epfd, kop, fd, kev) < 0) {
		r = -errno;
		if (cap)
			dsock_light_member(epfd, -1, 0);
		pthread_mutex_unlock(&dsock_epset_mu);
		return r;
	}
	if (stale)
		drop(stale);
	if (m) {
		if (op == EPOLL_CTL_DEL) {
			if (skip)
				dsock_ghost_set(m, 1);
			else
				drop(m);
		} else if (ev) {
			dsock_ghost_set(m, 0);
			link_out(m, BY_DATA);
			dsock_epset_in_added(m, kernel_events != ev->events);
			m->events = ev->events;
			m->data = ev->data.u64;
			m->disarmed = 0;
			dsock_epset_set_parked(m, 0); /* the kernel has the application's events again */
			m->mark = 0; /* MOD reports data already there */
			link_in(m, BY_DATA);
			if (m->watched || (s && s->tp && s->tp->waits))
				watch(m);
		}
	} else if (joins) {
		/* a registration without a record: the set's records no
		 * longer hold every registration, so it holds no ghosts */
		lost = 1;
		if (atomic_load(&dsock_epset_nmembers) >= nbuckets && rehash(nbuckets ? 2 * nbuckets : BUCKETS_MIN) < 0 &&
		    !nbuckets)
			goto out;
		m = calloc(1, sizeof(*m));
		if (!m)
			goto out;
		lost = 0;
		*m = (struct member){ .epfd = epfd, .fd = fd, .events = ev->events, .data = ev->data.u64, .sock = s,
				      .capable = cap, .untracked = untracked };
		dsock_epset_in_added(m, kernel_events != ev->events);
		for (int k = 0; k < 4; k++)
			link_in(m, k);
		if (!untracked)
			set_count(epfd, 1);
		atomic_fetch_add(&dsock_epset_nmembers, 1);
		if (s && s->tp && s->tp->waits)
			watch(m);
	}
out:
	pthread_mutex_unlock(&dsock_epset_mu);
	if (lost)
		dsock_epset_no_ghosts(app_epfd);
	/* the kernel would wake a thread asleep on the set for data already
	 * there; data without a token behind it needs a poke (poke.h).  After
	 * the kernel's change: a sleeper registers before its last look, so
	 * either that look sees the member or we see the sleeper. */
	if (ev && s && (ev->events & EPOLLIN) && (op == EPOLL_CTL_ADD || op == EPOLL_CTL_MOD) &&
	    atomic_load_explicit(&dsock_hidden_readable, memory_order_relaxed) > 0) {
		const struct dsock_transport *tp;
		struct dsock_sock *held = dsock_sock_carried(fd, &tp);
		if (held && dsock_hidden_sock(held, NULL)) {
			pthread_mutex_lock(&dsock_epset_mu);
			int nest = dsock_epset_nested(epfd);
			pthread_mutex_unlock(&dsock_epset_mu);
			if (dsock_light_sleeping(epfd, nest))
				dsock_poke(epfd);
		}
		if (held)
			dsock_sock_put(held);
	}
	return 0;
}

void dsock_epset_rekey(int from, int to)
{
	for (struct member *m = all; m; m = m->next[ALL])
		if (m->epfd == from) {
			link_out(m, BY_DATA);
			m->epfd = to;
			link_in(m, BY_DATA);
		}
	for (size_t i = 0; i < nsets; i++)
		if (sets[i].epfd == from)
			sets[i].epfd = to;
	dsock_light_rekey(from, to);
	dsock_poke_rekey(from, to);
}

void dsock_epoll_forget_range(unsigned first, unsigned last)
{
	int a_set = sets_lost;

	/* a vfork child closes its own fds, not ours: our sets stay (else
	 * they drop the parent's members, and its epoll_wait misses hidden
	 * data) */
	if (!dsock_table_owner())
		return;
	/* a set that stays reachable by another number keeps its records */
	dsock_epset_alias_forget(first, last);
	/* a set born here may hold untracked members only (counted in no
	 * set): its close forgets them too */
	if (dsock_epoll_ghosts_on && first == last && dsock_light_known((int)first))
		a_set = 1;
	dsock_light_forget(first, last);
	if (!atomic_load_explicit(&dsock_epset_nmembers, memory_order_relaxed))
		return;
	pthread_mutex_lock(&dsock_epset_mu);
	for (size_t i = 0; i < nsets; i++)
		a_set |= (unsigned)sets[i].epfd >= first && (unsigned)sets[i].epfd <= last;
	if (first == last && !a_set) {
		/* one fd that is no epoll set: its own chain */
		for (struct member *m = heads[BY_FD][h_fd((int)first)], *n; m; m = n) {
			n = m->next[BY_FD];
			if ((unsigned)m->fd == first)
				drop(m);
		}
	} else {
		for (struct member *m = all, *n; m; m = n) {
			n = m->next[ALL];
			unsigned fd = (unsigned)m->fd, ep = (unsigned)m->epfd;
			if ((fd >= first && fd <= last) || (ep >= first && ep <= last))
				drop(m);
		}
	}
	pthread_mutex_unlock(&dsock_epset_mu);
}

void dsock_epoll_forget_fd(int fd)
{
	if (fd >= 0)
		dsock_epoll_forget_range((unsigned)fd, (unsigned)fd);
}

int dsock_epset_member_fd(int epfd, uint64_t data)
{
	struct dsock_epmember mb;

	return dsock_epset_lookup(epfd, data, &mb);
}

/* The one member of epfd with this data (mu held), or NULL (none, or two
 * share the data: we cannot tell). */
struct member *dsock_epset_by_data(int epfd, uint64_t data)
{
	struct member *found = NULL;

	for (struct member *m = heads[BY_DATA][h_data(epfd, data)]; m; m = m->next[BY_DATA]) {
		/* (an untracked member is neither a socket nor a set) */
		if (m->epfd != epfd || m->data != data || m->ghost || m->untracked)
			continue;
		if (found)
			return NULL;
		found = m;
	}
	return found;
}

int dsock_epset_lookup(int epfd, uint64_t data, struct dsock_epmember *out)
{
	struct member *m;

	*out = (struct dsock_epmember){ .fd = -1 };
	if (!atomic_load_explicit(&dsock_epset_nmembers, memory_order_relaxed))
		return -1;
	pthread_mutex_lock(&dsock_epset_mu);
	if ((m = dsock_epset_by_data(epfd, data)))
		*out = (struct dsock_epmember){ .fd = m->fd, .events = m->events, .in_added = m->in_added,
						.parked = m->parked, .watched = m->watched,
						.disarmed = m->disarmed, .set = !m->sock && !m->untracked };
	pthread_mutex_unlock(&dsock_epset_mu);
	return out->fd;
}

int dsock_epset_arrived(int epfd, uint64_t data, uint64_t mark)
{
	struct member *m;
	int r = 1;

	if (!mark)
		return 1;
	pthread_mutex_lock(&dsock_epset_mu);
	if ((m = dsock_epset_by_data(epfd, data))) {
		r = m->mark != mark;
		m->mark = mark;
	}
	pthread_mutex_unlock(&dsock_epset_mu);
	return r;
}

void dsock_sock_rewatch(struct dsock_sock *s)
{
	if (!atomic_load_explicit(&dsock_epset_nmembers, memory_order_relaxed))
		return;
	pthread_mutex_lock(&dsock_epset_mu);
	for (struct member *m = heads[BY_SOCK] ? heads[BY_SOCK][h_sock(s)] : NULL; m; m = m->next[BY_SOCK])
		if (m->sock == s && !m->ghost)
			watch(m);
	pthread_mutex_unlock(&dsock_epset_mu);
}

void dsock_epset_oneshot(int epfd, uint64_t data, int reported)
{
	struct member *m;

	pthread_mutex_lock(&dsock_epset_mu);
	if ((m = dsock_epset_by_data(epfd, data)) && !m->disarmed && m->watched) {
		m->disarmed = reported;
		watch(m);
	}
	pthread_mutex_unlock(&dsock_epset_mu);
}

int dsock_epset_is_set(int fd)
{
	int r = 0;

	if (!atomic_load_explicit(&dsock_epset_nmembers, memory_order_relaxed))
		return 0;
	fd = dsock_epset_key(fd);
	pthread_mutex_lock(&dsock_epset_mu);
	for (size_t i = 0; i < nsets && !r; i++)
		r = sets[i].epfd == fd;
	pthread_mutex_unlock(&dsock_epset_mu);
	return r;
}

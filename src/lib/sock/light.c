/* Light sleepers (light.h): the sets born in this process image with their
 * count of members a transport may carry, and the threads asleep in
 * epoll_wait, light or counted.  One lock orders a sleeper's look at its
 * set's count against a member's joining: a sleeper either saw the member
 * (and sleeps counted) or is promoted by its joining. */
#include "lib/sock/light.h"
#include "lib/base/grow.h"
#include "lib/sock/poke.h"
#include "lib/sock/ready.h"
#include "lib/transport/transport.h"

#include <errno.h>

#include "lib/base/real.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>

static pthread_mutex_t light_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	int epfd;
	long capable; /* members a transport may carry */
	int cloexec;  /* close-on-exec, as far as we know */
	int shared;   /* dup'd, forked, polled as a whole or nested */
	unsigned belled; /* the bell's generation + 1 that it holds, or 0 */
} *sets;
static size_t nsets, sets_cap;
static _Atomic size_t nsets_any; /* nsets, read without the lock */
static struct dsock_light *lights;

static _Atomic uint64_t setbits[DSOCK_SETBITS / 64];

void dsock_setbit_mark(int fd)
{
	if (fd >= 0 && fd < DSOCK_SETBITS)
		atomic_fetch_or(&setbits[fd / 64], 1ull << (fd % 64));
}

int dsock_setbit_maybe(int fd)
{
	if (fd < 0)
		return 0;
	return fd >= DSOCK_SETBITS ||
	       (atomic_load_explicit(&setbits[fd / 64], memory_order_relaxed) >> (fd % 64) & 1);
}

static void setbits_clear(unsigned first, unsigned last)
{
	if (last >= DSOCK_SETBITS)
		last = DSOCK_SETBITS - 1;
	for (unsigned fd = first; fd <= last; fd++) {
		if (fd % 64 == 0 && fd + 63 <= last) {
			atomic_store(&setbits[fd / 64], 0);
			fd += 63;
			continue;
		}
		atomic_fetch_and(&setbits[fd / 64], ~(1ull << (fd % 64)));
	}
}

static size_t find_locked(int epfd)
{
	size_t i = 0;

	while (i < nsets && sets[i].epfd != epfd)
		i++;
	return i;
}

void dsock_light_born(int epfd, int cloexec)
{
	dsock_setbit_mark(epfd);
	pthread_mutex_lock(&light_mu);
	size_t i = find_locked(epfd);
	/* (out of memory: the set is unknown, and its sleepers count) */
	if (i < nsets || !dsock_grow(&sets, &sets_cap, nsets, sizeof(*sets), 8)) {
		if (i == nsets)
			nsets++;
		sets[i].epfd = epfd;
		sets[i].capable = 0;
		sets[i].cloexec = cloexec;
		sets[i].shared = 0;
		sets[i].belled = 0;
		atomic_store(&nsets_any, nsets);
	}
	pthread_mutex_unlock(&light_mu);
}

int dsock_light_any(void)
{
	return atomic_load_explicit(&nsets_any, memory_order_relaxed) > 0;
}

int dsock_light_capable(int epfd)
{
	int r;

	if (!atomic_load_explicit(&nsets_any, memory_order_relaxed))
		return 0;
	pthread_mutex_lock(&light_mu);
	size_t i = find_locked(epfd);
	r = i < nsets && sets[i].capable > 0;
	pthread_mutex_unlock(&light_mu);
	return r;
}

int dsock_light_known(int fd)
{
	int r;

	if (!atomic_load_explicit(&nsets_any, memory_order_relaxed))
		return 0;
	pthread_mutex_lock(&light_mu);
	r = find_locked(fd) < nsets;
	pthread_mutex_unlock(&light_mu);
	return r;
}

void dsock_light_rekey(int from, int to)
{
	dsock_setbit_mark(to);
	pthread_mutex_lock(&light_mu);
	for (size_t i = 0; i < nsets; i++)
		if (sets[i].epfd == from)
			sets[i].epfd = to;
	for (struct dsock_light *l = lights; l; l = l->next)
		if (l->epfd == from)
			l->epfd = to;
	pthread_mutex_unlock(&light_mu);
}

void dsock_light_forget(unsigned first, unsigned last)
{
	if (first < DSOCK_SETBITS)
		setbits_clear(first, last);
	if (!atomic_load_explicit(&nsets_any, memory_order_relaxed))
		return;
	pthread_mutex_lock(&light_mu);
	for (size_t i = 0; i < nsets;)
		if ((unsigned)sets[i].epfd >= first && (unsigned)sets[i].epfd <= last) {
			if (sets[i].belled)
				atomic_fetch_sub(&dsock_belled_sets, 1);
			sets[i] = sets[--nsets];
		} else {
			i++;
		}
	atomic_store(&nsets_any, nsets);
	pthread_mutex_unlock(&light_mu);
}

int dsock_light_ghostable(int epfd)
{
	int r;

	if (!atomic_load_explicit(&nsets_any, memory_order_relaxed))
		return 0;
	pthread_mutex_lock(&light_mu);
	size_t i = find_locked(epfd);
	r = i < nsets && sets[i].cloexec && !sets[i].shared;
	pthread_mutex_unlock(&light_mu);
	return r;
}

/* Set i's bell leaves it (light_mu held): another process, or a poller
 * that does not filter it, could take the edge its sleepers wait for. */
static void unbell_locked(size_t i)
{
	unsigned gen;
	int bell = dsock_transports_bell(&gen);

	if (!sets[i].belled)
		return;
	if (bell >= 0 && sets[i].belled == gen + 1)
		dsock_real.epoll_ctl(sets[i].epfd, EPOLL_CTL_DEL, bell, NULL);
	sets[i].belled = 0;
	atomic_fetch_sub(&dsock_belled_sets, 1);
	/* a thread asleep on it counts on the bell: woken, it sleeps again
	 * without (ready.c looks again after registering) */
	for (struct dsock_light *l = lights; l; l = l->next)
		if (l->epfd == sets[i].epfd) {
			dsock_poke(sets[i].epfd);
			break;
		}
}

int dsock_light_unghost(int epfd)
{
	int was = 0;

	if (!atomic_load_explicit(&nsets_any, memory_order_relaxed))
		return 0;
	pthread_mutex_lock(&light_mu);
	for (size_t i = 0; i < nsets; i++)
		if (epfd < 0 || sets[i].epfd == epfd) {
			was |= sets[i].cloexec && !sets[i].shared;
			sets[i].shared = 1;
			unbell_locked(i);
		}
	pthread_mutex_unlock(&light_mu);
	return was;
}

/* ---- bells ---------------------------------------------------------------- */
int dsock_bells_on;
_Atomic int dsock_belled_sets;

/* Registers the bell in set i (light_mu held): 1 if it holds it now. */
static int bell_in_locked(size_t i, int bell, unsigned gen)
{
	struct epoll_event e = { .events = EPOLLIN, .data.u64 = DSOCK_BELL_DATA };

	if (sets[i].belled == gen + 1)
		return 1;
	if (dsock_real.epoll_ctl(sets[i].epfd, EPOLL_CTL_ADD, bell, &e) < 0 && errno != EEXIST)
		return 0;
	sets[i].belled = gen + 1;
	atomic_fetch_add(&dsock_belled_sets, 1);
	return 1;
}

int dsock_light_bell(int epfd)
{
	unsigned gen;
	int r = 0, bell;

	if (!dsock_bells_on || !atomic_load_explicit(&nsets_any, memory_order_relaxed) ||
	    (bell = dsock_transports_bell(&gen)) < 0)
		return 0;
	pthread_mutex_lock(&light_mu);
	size_t i = find_locked(epfd);
	if (i < nsets && !sets[i].shared) {
		/* counted here, under the lock, before the thread arms */
		if (bell_in_locked(i, bell, gen)) {
			atomic_fetch_add(&dsock_bell_sleepers, 1);
			r = 1;
		}
	}
	pthread_mutex_unlock(&light_mu);
	return r;
}

int dsock_light_belled(int epfd)
{
	unsigned gen;
	int r = 0;

	if (!atomic_load_explicit(&dsock_belled_sets, memory_order_relaxed) || dsock_transports_bell(&gen) < 0)
		return 0;
	pthread_mutex_lock(&light_mu);
	size_t i = find_locked(epfd);
	r = i < nsets && sets[i].belled == gen + 1;
	pthread_mutex_unlock(&light_mu);
	return r;
}

int dsock_light_bell_others(int epfd, int *out, int cap)
{
	unsigned gen;
	int n = 0;

	if (dsock_transports_bell(&gen) < 0)
		return 0;
	pthread_mutex_lock(&light_mu);
	for (size_t i = 0; i < nsets; i++) {
		if (sets[i].epfd == epfd || sets[i].belled != gen + 1)
			continue;
		struct dsock_light *l = lights;
		while (l && l->epfd != sets[i].epfd)
			l = l->next;
		if (l && n++ < cap)
			out[n - 1] = sets[i].epfd;
	}
	pthread_mutex_unlock(&light_mu);
	return n;
}

void dsock_light_bell_replace(void (*swap)(void *), void *arg)
{
	/* its registrations go while the number still names the old file:
	 * the file outlives our number (link peers hold it), and a set would
	 * keep it, readable for good once rung */
	pthread_mutex_lock(&light_mu);
	for (size_t i = 0; i < nsets; i++)
		unbell_locked(i);
	swap(arg);
	pthread_mutex_unlock(&light_mu);
	/* (a poll asleep on the bell waits on the old file) */
	dsock_poll_bell_poke();
}

void dsock_light_exec(void)
{
	if (!atomic_load_explicit(&dsock_belled_sets, memory_order_relaxed))
		return;
	pthread_mutex_lock(&light_mu);
	for (size_t i = 0; i < nsets; i++)
		if (sets[i].belled && !sets[i].cloexec) {
			sets[i].shared = 1;
			unbell_locked(i);
		}
	pthread_mutex_unlock(&light_mu);
}


void dsock_light_cloexec(int epfd, int on)
{
	/* (fcntl is async-signal-safe: a handler that interrupted the lock's
	 * holder leaves the set as it was, which is never less safe) */
	if (!atomic_load_explicit(&nsets_any, memory_order_relaxed) || pthread_mutex_trylock(&light_mu))
		return;
	size_t i = find_locked(epfd);
	if (i < nsets)
		sets[i].cloexec = on;
	pthread_mutex_unlock(&light_mu);
}

/* The uncounted sleepers on epfd (-1: on any set; cold: the cold ones
 * only) count in dsock_sleepers from now on (light_mu held): how many. */
static int promote_locked(int epfd, int cold)
{
	int n = 0;

	for (struct dsock_light *l = lights; l; l = l->next)
		if (l->light && !l->promoted && (cold ? l->light == 2 : epfd < 0 || l->epfd == epfd)) {
			l->promoted = 1;
			n++;
		}
	if (n)
		atomic_fetch_add(&dsock_sleepers, n);
	return n;
}

/* n were promoted (light_mu released): as a sleeper does on its way in,
 * the leases end and the queues are taken (dsock_sleep_begin). */
static void promoted(int n)
{
	if (n)
		dsock_transports_before_sleep(0);
}

void dsock_light_member(int epfd, int delta, int nested)
{
	int n = 0;

	pthread_mutex_lock(&light_mu);
	size_t i = find_locked(epfd);
	if (i < nsets)
		sets[i].capable += delta;
	if (delta > 0)
		n = promote_locked(nested ? -1 : epfd, 0);
	pthread_mutex_unlock(&light_mu);
	promoted(n);
}

static void enter_locked(int epfd, struct dsock_light *me, int light)
{
	me->epfd = epfd;
	me->light = light;
	me->promoted = 0;
	me->next = lights;
	if (lights)
		lights->pprev = &me->next;
	lights = me;
	me->pprev = &lights;
}

int dsock_light_enter(int epfd, struct dsock_light *me)
{
	int light;

	if (!atomic_load_explicit(&nsets_any, memory_order_relaxed))
		return 0;
	pthread_mutex_lock(&light_mu);
	size_t i = find_locked(epfd);
	light = i < nsets && sets[i].capable == 0;
	if (light)
		enter_locked(epfd, me, 1);
	pthread_mutex_unlock(&light_mu);
	return light;
}

int dsock_light_enter_cold(int epfd, struct dsock_light *me)
{
	pthread_mutex_lock(&light_mu);
	enter_locked(epfd, me, 2);
	pthread_mutex_unlock(&light_mu);
	/* an attach counts itself, then promotes under light_mu: either it
	 * saw us, or we see its count */
	if (atomic_load(&dsock_fastpath_conns) == 0)
		return 1;
	dsock_light_leave(me);
	return 0;
}

void dsock_light_attached(void)
{
	pthread_mutex_lock(&light_mu);
	int n = promote_locked(-1, 1);
	pthread_mutex_unlock(&light_mu);
	promoted(n);
}

void dsock_light_enter_counted(int epfd, struct dsock_light *me)
{
	pthread_mutex_lock(&light_mu);
	enter_locked(epfd, me, 0);
	pthread_mutex_unlock(&light_mu);
}

int dsock_light_sleeping(int epfd, int nested)
{
	int r = 0;

	pthread_mutex_lock(&light_mu);
	for (struct dsock_light *l = lights; l && !r; l = l->next)
		r = nested || l->epfd == epfd;
	pthread_mutex_unlock(&light_mu);
	return r;
}

void dsock_light_leave(struct dsock_light *me)
{
	pthread_mutex_lock(&light_mu);
	*me->pprev = me->next;
	if (me->next)
		me->next->pprev = me->pprev;
	if (me->promoted)
		atomic_fetch_sub(&dsock_sleepers, 1);
	pthread_mutex_unlock(&light_mu);
}

void dsock_light_fork_child(void)
{
	/* the sets and their members are the child's too (shared, so
	 * without bells: the fork's prepare took them out) */
	pthread_mutex_init(&light_mu, NULL);
	lights = NULL;
}

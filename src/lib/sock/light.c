/* Light sleepers (light.h): the sets born in this process image with their
 * count of members a transport may carry, and the threads asleep in
 * epoll_wait, light or counted.  One lock orders a sleeper's look at its
 * set's count against a member's joining: a sleeper either saw the member
 * (and sleeps counted) or is promoted by its joining. */
#include "lib/sock/light.h"
#include "lib/base/grow.h"
#include "lib/sock/ready.h"
#include "lib/transport/transport.h"

#include <pthread.h>
#include <stdatomic.h>

static pthread_mutex_t light_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	int epfd;
	long capable; /* members a transport may carry */
	int cloexec;  /* close-on-exec, as far as we know */
	int shared;   /* dup'd, forked, polled as a whole or nested */
} *sets;
static size_t nsets, sets_cap;
static _Atomic size_t nsets_any; /* nsets, read without the lock */
static struct dsock_light *lights;

static size_t find_locked(int epfd)
{
	size_t i = 0;

	while (i < nsets && sets[i].epfd != epfd)
		i++;
	return i;
}

void dsock_light_born(int epfd, int cloexec)
{
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
		atomic_store(&nsets_any, nsets);
	}
	pthread_mutex_unlock(&light_mu);
}

int dsock_light_any(void)
{
	return atomic_load_explicit(&nsets_any, memory_order_relaxed) > 0;
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
	if (!atomic_load_explicit(&nsets_any, memory_order_relaxed))
		return;
	pthread_mutex_lock(&light_mu);
	for (size_t i = 0; i < nsets;)
		if ((unsigned)sets[i].epfd >= first && (unsigned)sets[i].epfd <= last)
			sets[i] = sets[--nsets];
		else
			i++;
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
		}
	pthread_mutex_unlock(&light_mu);
	return was;
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

void dsock_light_member(int epfd, int delta, int nested)
{
	int n = 0;

	pthread_mutex_lock(&light_mu);
	size_t i = find_locked(epfd);
	if (i < nsets)
		sets[i].capable += delta;
	if (delta > 0)
		for (struct dsock_light *l = lights; l; l = l->next)
			if (l->light && !l->promoted && (nested || l->epfd == epfd)) {
				l->promoted = 1;
				n++;
			}
	if (n)
		atomic_fetch_add(&dsock_sleepers, n);
	pthread_mutex_unlock(&light_mu);
	/* as a sleeper does on its way in: the leases end, the queues are
	 * taken (dsock_sleep_begin) */
	if (n)
		dsock_transports_before_sleep();
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
	/* the sets and their members are the child's too */
	pthread_mutex_init(&light_mu, NULL);
	lights = NULL;
}

/* Epoll sets reached by more than one fd number (dup, dup2, dup3,
 * F_DUPFD): the records of a set (epset.c, light.c, poke.c) name it by one
 * number, its key, the one it was first known by; every other number of
 * the set is an alias of the key, and our epoll calls made on an alias
 * look at the key's records.  When the key is closed while an alias
 * lives, the records move to the alias, which becomes the key. */
#include "lib/sock/epset.h"
#include "lib/sock/epset_int.h"
#include "lib/base/grow.h"

#include "lib/sock/light.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

static pthread_mutex_t alias_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	int fd, key;
} *aliases;
static size_t naliases, aliases_cap;
static _Atomic size_t naliases_any; /* naliases, read without the lock */

static int key_locked(int fd)
{
	for (size_t i = 0; i < naliases; i++)
		if (aliases[i].fd == fd)
			return aliases[i].key;
	return fd;
}

int dsock_epset_key(int fd)
{
	int key;

	if (!atomic_load_explicit(&naliases_any, memory_order_relaxed))
		return fd;
	pthread_mutex_lock(&alias_mu);
	key = key_locked(fd);
	pthread_mutex_unlock(&alias_mu);
	return key;
}

/* The lock, for a dup: one that a signal handler interrupted (a dup in
 * the handler) is given up after a while, and the copy left unaliased. */
static int alias_lock_dup(void)
{
	for (int i = 0; i < 1000; i++) {
		if (!pthread_mutex_trylock(&alias_mu))
			return 0;
		sched_yield();
	}
	return -1;
}

/* 1 if fd is the key of aliases (alias_mu held) */
static int is_key_locked(int fd)
{
	for (size_t i = 0; i < naliases; i++)
		if (aliases[i].key == fd)
			return 1;
	return 0;
}

void dsock_epset_dup(int oldfd, int newfd)
{
	/* only a set we know: one born here, with members, or aliased (no
	 * readlink for the dups of files and pipes) */
	if (oldfd == newfd || !dsock_setbit_maybe(oldfd))
		return; /* (a file or a pipe: no lock taken, as in a signal handler) */
	int known = dsock_light_known(oldfd) || dsock_epset_is_set(oldfd);

	if ((!known && !atomic_load_explicit(&naliases_any, memory_order_relaxed)) || alias_lock_dup())
		return;
	int key = key_locked(oldfd);
	if (!known && key == oldfd && !is_key_locked(oldfd)) {
		pthread_mutex_unlock(&alias_mu);
		return;
	}
	if (key != newfd && !dsock_grow(&aliases, &aliases_cap, naliases, sizeof(*aliases), 8)) {
		dsock_setbit_mark(newfd);
		aliases[naliases].fd = newfd;
		aliases[naliases++].key = key;
		atomic_store(&naliases_any, naliases);
	}
	pthread_mutex_unlock(&alias_mu);
}

void dsock_epset_alias_forget(unsigned first, unsigned last)
{
	if (!atomic_load_explicit(&naliases_any, memory_order_relaxed))
		return;
	pthread_mutex_lock(&dsock_epset_mu);
	pthread_mutex_lock(&alias_mu);
	/* the closed aliases go */
	for (size_t i = 0; i < naliases;)
		if ((unsigned)aliases[i].fd >= first && (unsigned)aliases[i].fd <= last)
			aliases[i] = aliases[--naliases];
		else
			i++;
	/* a closed key hands its records to an alias that stays */
	for (size_t i = 0; i < naliases;) {
		int key = aliases[i].key, heir = aliases[i].fd;
		if ((unsigned)key < first || (unsigned)key > last) {
			i++;
			continue;
		}
		dsock_epset_rekey(key, heir);
		aliases[i] = aliases[--naliases];
		for (size_t j = 0; j < naliases; j++)
			if (aliases[j].key == key)
				aliases[j].key = heir;
		i = 0;
	}
	atomic_store(&naliases_any, naliases);
	pthread_mutex_unlock(&alias_mu);
	pthread_mutex_unlock(&dsock_epset_mu);
}

/* Closes and dups of numbers that may be sets, one at a time.  A close
 * forgets its set's records before the kernel closes the number (after
 * it, the number may already be another set's); a dup in another thread
 * that the kernel made just before that close, but whose alias came
 * after the forgetting, would leave the copy an alias of a closed key
 * with no records: the set's members unknown to our waits.  Bounded, as
 * for a dup in a signal handler; a fork child starts with it free. */
static pthread_mutex_t serial_mu = PTHREAD_MUTEX_INITIALIZER;

int dsock_epset_serial_enter(void)
{
	for (int i = 0; i < 1000; i++) {
		if (!pthread_mutex_trylock(&serial_mu))
			return 1;
		sched_yield();
	}
	return 0;
}

void dsock_epset_serial_leave(int entered)
{
	if (entered)
		pthread_mutex_unlock(&serial_mu);
}

/* Held across a fork (after dsock_epset_mu), so that the child never
 * copies the table in the middle of a change (a grow frees the old
 * array).  Bounded, as for a dup: a fork in a signal handler that
 * interrupted this thread inside the lock goes on without it. */
static int fork_locked;

void dsock_epset_alias_fork_prepare(void)
{
	fork_locked = alias_lock_dup() == 0;
}

void dsock_epset_alias_fork_parent(void)
{
	if (fork_locked)
		pthread_mutex_unlock(&alias_mu);
}

void dsock_epset_alias_fork_child(void)
{
	pthread_mutex_init(&alias_mu, NULL);
	pthread_mutex_init(&serial_mu, NULL);
}

/* The socket layer's side of the bells (light.h, docs/ARCHITECTURE.md
 * "Bells"): counting bell sleepers, and ringing this process's own bell
 * where a look took an edge that a sleeper waits for. */
#include "lib/sock/light.h"
#include "lib/sock/epset.h"
#include "lib/sock/poke.h"
#include "lib/sock/ready.h"
#include "lib/base/real.h"
#include "lib/transport/transport.h"
#include "common/rawsys.h"

#include <stdatomic.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>

/* Polls asleep on the bell, a slot each: the slot's eventfd wakes its
 * sleeper when another thread's arming drained a ring it may have been
 * waiting for.  A slot's eventfd outlives its sleepers (made at the
 * slot's first use; a poke that comes after its sleeper woke costs the
 * next one a round). */
#define POLL_BELL_SLOTS 32
static struct {
	_Atomic int busy;
	_Atomic int fd;
} poll_slot[POLL_BELL_SLOTS] = { [0 ... POLL_BELL_SLOTS - 1] = { 0, -1 } };
static _Atomic int poll_belled; /* slots busy */

/* Pokes every poll asleep on the bell but the one in slot mine (-1: none). */
static void poke_polls(int mine)
{
	uint64_t one = 1;

	for (int i = 0; i < POLL_BELL_SLOTS && atomic_load(&poll_belled); i++) {
		int fd = atomic_load(&poll_slot[i].fd);
		if (i != mine && atomic_load(&poll_slot[i].busy) && fd >= 0 &&
		    dsock_real.write(fd, &one, sizeof(one)) < 0)
			continue; /* (nonblocking; a full count wakes it already) */
	}
}

void dsock_poll_bell_poke(void)
{
	poke_polls(-1);
}

/* (epfd below -1: the poll in slot -2 - epfd; light.h) */
void dsock_bell_arm(int epfd)
{
	int mine = epfd < -1 ? -2 - epfd : -1;

	/* (the arming's full fence orders its drain before these loads; a
	 * sleeper registers before its own arming and last look) */
	if (dsock_transports_before_sleep(1))
		poke_polls(mine);
	if (atomic_load_explicit(&dsock_belled_sets, memory_order_relaxed) < (epfd >= 0 ? 2 : 1))
		return;
	/* (the sets' lock, then the records': never both at once) */
	int n = dsock_light_bell_others(epfd, NULL, 0);
	if (n <= 0)
		return;
	int others[n], got = dsock_light_bell_others(epfd, others, n);
	if (got < n)
		n = got; /* (more since: they looked after registering) */
	for (int i = 0; i < n; i++)
		if (dsock_epset_readable(others[i]))
			dsock_poke(others[i]);
}

void dsock_bell_sleep_begin(int epfd)
{
	/* (counted in dsock_bell_sleepers by dsock_light_bell) */
	dsock_renew_at = 0;
	dsock_bell_arm(epfd);
}

int dsock_poll_bell_begin(int *bell, int *poke)
{
	unsigned gen;

	if (!dsock_bells_on || (*bell = dsock_transports_bell(&gen)) < 0)
		return 0;
	for (int i = 0; i < POLL_BELL_SLOTS; i++) {
		int free = 0, fd = atomic_load(&poll_slot[i].fd);
		if (atomic_load_explicit(&poll_slot[i].busy, memory_order_relaxed) ||
		    !atomic_compare_exchange_strong(&poll_slot[i].busy, &free, 1))
			continue;
		if (fd < 0 && (fd = (int)dsock_sys(SYS_eventfd2, 0, EFD_CLOEXEC | EFD_NONBLOCK)) >= 0)
			atomic_store(&poll_slot[i].fd, fd);
		if (fd < 0) {
			atomic_store(&poll_slot[i].busy, 0);
			return 0;
		}
		atomic_fetch_add(&poll_belled, 1);
		atomic_fetch_add(&dsock_bell_sleepers, 1);
		*poke = fd;
		dsock_renew_at = 0;
		dsock_bell_arm(-2 - i);
		return i + 1;
	}
	return 0; /* (all taken: tokens) */
}

void dsock_poll_bell_end(int slot, int poked)
{
	uint64_t count;

	if (poked && dsock_real.read(atomic_load(&poll_slot[slot - 1].fd), &count, sizeof(count)) < 0)
		count = 0; /* (drained already) */
	atomic_store(&poll_slot[slot - 1].busy, 0);
	atomic_fetch_sub(&poll_belled, 1);
	dsock_sleep_end(1);
}

void dsock_poll_bell_fork_child(void)
{
	/* (the parent's eventfds: a child draining one would take a poke the
	 * parent's sleeper waits for) */
	for (int i = 0; i < POLL_BELL_SLOTS; i++) {
		int fd = atomic_exchange(&poll_slot[i].fd, -1);
		atomic_store(&poll_slot[i].busy, 0);
		if (fd >= 0)
			dsock_real.close(fd);
	}
	atomic_store(&poll_belled, 0);
}

void dsock_sleep_end(int bell)
{
	if (!bell)
		atomic_fetch_sub(&dsock_sleepers, 1);
	else if (atomic_fetch_sub(&dsock_bell_sleepers, 1) == 1)
		dsock_transports_bells_off();
}

/* Rings this process's bell, as a producer would. */
static void ring_own_bell(void)
{
	unsigned gen;
	uint64_t one = 1;
	int fd = dsock_transports_bell(&gen);

	if (fd >= 0 && dsock_real.write(fd, &one, sizeof(one)) < 0)
		return; /* (nonblocking; a full count is rung already) */
}

int dsock_bell_take(struct epoll_event *ev, int n)
{
	int rang = 0;

	/* (level-triggered: a look leaves the bell readable, and so the
	 * kernel wakes a sleeper for it, until a sleeper arms it again) */
	return dsock_events_take(ev, n, DSOCK_BELL_DATA, &rang);
}

void dsock_bell_unclaimed(void)
{
	unsigned gen;
	uint64_t count;
	int fd;

	if (atomic_load(&dsock_bell_sleepers) || (fd = dsock_transports_bell(&gen)) < 0)
		return;
	if (dsock_real.read(fd, &count, sizeof(count)) < 0)
		return; /* (nonblocking: drained already) */
	if (atomic_load(&dsock_bell_sleepers))
		ring_own_bell();
}

void dsock_bell_pass_on(int n, int max)
{
	/* (64: what one look at hidden data reports at most) */
	if ((n >= max || n >= 64) && atomic_load(&dsock_bell_sleepers) >= 2)
		ring_own_bell();
}


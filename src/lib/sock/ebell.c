/* The socket layer's side of the bells (light.h, docs/ARCHITECTURE.md
 * "Bells"): counting bell sleepers, and ringing this process's own bell
 * where a look took an edge that a sleeper waits for. */
#include "lib/sock/light.h"
#include "lib/sock/epset.h"
#include "lib/sock/poke.h"
#include "lib/sock/ready.h"
#include "lib/base/real.h"
#include "lib/transport/transport.h"

#include <stdatomic.h>
#include <stdint.h>

void dsock_bell_arm(int epfd)
{
	dsock_transports_before_sleep(1);
	if (atomic_load_explicit(&dsock_belled_sets, memory_order_relaxed) < 2)
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


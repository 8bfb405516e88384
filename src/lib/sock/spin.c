/* How a waiting thread spins: whether it spins at all, how long it spins
 * without yielding, and its courtesy yields (spin.h). */
#include "lib/sock/spin.h"
#include "lib/base/clock.h"

#include <sched.h>

/* How long a poller or a receiver polls before it sleeps (DSOCK_SPIN_US). */
int64_t dsock_spin_ns = 50000;

#define COURTESY_NS 20000LL /* a spinner that keeps finding its data yields this often */

static __thread long long courtesy_at;

#define SCORE_ONE 1024        /* a spin that found something */
#define SCORE_MIN 256         /* spin while a quarter of them do */
#define SCORE_SHIFT 2         /* each outcome weighs a quarter */
#define PROBE_CALLS 8         /* below it, one wait in this many spins */

static __thread int spin_score = SCORE_ONE;
static __thread unsigned spin_skipped;

/* where the peer this thread last sent to last sent from (+1; 0 unknown) */
static __thread uint32_t peer_cpu;

int dsock_spin_worth(void)
{
	if (spin_score >= SCORE_MIN)
		return 1;
	if (++spin_skipped < PROBE_CALLS)
		return 0;
	spin_skipped = 0;
	return 1;
}

void dsock_spin_outcome(int found)
{
	spin_score += ((found ? SCORE_ONE : 0) - spin_score) >> SCORE_SHIFT;
}

void dsock_spin_sent_to(uint32_t cpu)
{
	peer_cpu = cpu;
}

int dsock_spin_here(uint32_t cpu)
{
	return cpu && cpu == (uint32_t)sched_getcpu() + 1;
}

int dsock_spin_awaited_here(void)
{
	return dsock_spin_here(peer_cpu);
}

void dsock_spin_courtesy(long long now_ns)
{
	if (now_ns >= courtesy_at) {
		courtesy_at = now_ns + COURTESY_NS;
		sched_yield();
	}
}

/* The shm transport's settings (DSOCK_* in the environment) and its
 * start-up. */
#include "lib/transport/shm/shm.h"
#include "lib/ctl/ctl.h"
#include "lib/sock/ready.h"
#include "common/log.h"
#include "common/proto.h"

#include <stdlib.h>
#include <string.h>

/* 1 ms by default: an event loop that serves many connections comes back
 * to each after a few hundred microseconds, and a shorter lease makes it
 * pay a token and a drain per message (docs/ARCHITECTURE.md, "Lingering
 * leases"). */
int64_t shm_lease_ns = 1000000;

/* A connection is offered at its shm_offer_calls-th send or receive
 * (DSOCK_OFFER_CALLS; 1: at the first). */
int shm_offer_calls = 4;

/* Connections to one service go back to the kernel once their consumers
 * were found asleep before this many more reads than 8 in 9
 * (DSOCK_ASLEEP_READS; 0: never; tokens.c, note_read).  1,024, not less:
 * a server that sleeps at first, until its spins start paying
 * (redis-benchmark with 1 client), must not be judged on its first reads. */
unsigned shm_asleep_reads = 1024;
unsigned shm_test_back_reads = 0;

/* A setting from lo to hi (unit: for the warning) into *v: 1 if set and
 * good; a bad one is warned of and ignored. */
static int env_num(const char *name, long long lo, long long hi, const char *unit, long long *v)
{
	const char *s = getenv(name);
	char *end;
	long long n;

	if (!s || !*s)
		return 0;
	n = strtoll(s, &end, 10);
	if (*end || n < lo || n > hi) {
		DSOCK_WARN("%s=%s ignored: %s, %lld to %lld", name, s, unit, lo, hi);
		return 0;
	}
	*v = n;
	return 1;
}

int shm_init(void)
{
	const char *on = getenv("DSOCK_FASTPATH");
	long long v;

	if (env_num("DSOCK_LEASE_US", 0, 1000000, "microseconds", &v))
		shm_lease_ns = v * 1000;
	if (env_num("DSOCK_SPIN_US", 0, 1000000, "microseconds", &v))
		dsock_spin_ns = v * 1000;
	if (env_num("DSOCK_OFFER_CALLS", 1, 1000000, "a count", &v))
		shm_offer_calls = (int)v;
	if (env_num("DSOCK_ASLEEP_READS", 0, 1000000000, "a count", &v))
		shm_asleep_reads = (unsigned)v;
	if (env_num("DSOCK_TEST_BACK_READS", 0, 1000000000, "a count", &v))
		shm_test_back_reads = (unsigned)v;

	if (on && !strcmp(on, "0"))
		return 1; /* DSOCK_FASTPATH=0: every connection stays on the kernel */
	shm_membarrier_register();
	dsock_ctl_set_result_handler(DSOCK_PATH_SHM, shm_on_result);
	return 0;
}

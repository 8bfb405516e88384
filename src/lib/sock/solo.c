/* The solo thread: data calls without a reference (see solo.h). */
#include "lib/sock/solo.h"
#include "common/rawsys.h"

#include <errno.h>
#include <pthread.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

_Atomic int dsock_solo_state = DSOCK_SOLO_OFF;
__thread int dsock_solo_me;
_Atomic(struct dsock_sock *) dsock_solo_cur;
volatile int dsock_solo_owed;
static pthread_key_t exit_key;
static int exit_key_ok;

/* The solo thread ends: another may take the role (it was outside any
 * section, as every thread that exits is). */
static void solo_thread_exit(void *unused)
{
	int claimed = DSOCK_SOLO_CLAIMED;

	(void)unused;
	dsock_solo_me = 0;
	atomic_compare_exchange_strong(&dsock_solo_state, &claimed, DSOCK_SOLO_FREE);
}

void dsock_solo_init(void)
{
	long q = dsock_sys(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
	int ok = q > 0 && (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
		 dsock_sys(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;

	if (!exit_key_ok)
		exit_key_ok = pthread_key_create(&exit_key, solo_thread_exit) == 0;
	/* in a fork child: one thread, whose sections (if any) ended with
	 * the fork; it keeps the role if it had it, else anyone may claim */
	atomic_store(&dsock_solo_cur, NULL);
	dsock_solo_owed = 0;
	atomic_store(&dsock_solo_state, !ok ? DSOCK_SOLO_OFF : dsock_solo_me ? DSOCK_SOLO_CLAIMED : DSOCK_SOLO_FREE);
}

int dsock_solo_claim(void)
{
	int free_ = DSOCK_SOLO_FREE;

	if (atomic_load_explicit(&dsock_solo_state, memory_order_relaxed) != DSOCK_SOLO_FREE ||
	    !atomic_compare_exchange_strong(&dsock_solo_state, &free_, DSOCK_SOLO_CLAIMED))
		return 0;
	dsock_solo_me = 1;
	if (exit_key_ok)
		pthread_setspecific(exit_key, (void *)1);
	return 1;
}

void dsock_solo_owed_put(struct dsock_sock *s)
{
	dsock_solo_owed = 0;
	dsock_sock_put(s);
}

int dsock_solo_before_release(struct dsock_sock *s)
{
	/* after the caller's locked decrement: the solo thread set solo_used
	 * (locked) before its look-up, so clear means it never found s */
	if (!atomic_load_explicit(&s->solo_used, memory_order_seq_cst))
		return 0;
	if (dsock_solo_me) {
		if (!dsock_solo_inside(s))
			return 0;
		/* a signal handler inside our own section on s: the section
		 * drops this reference when it ends */
		atomic_store_explicit(&s->ref, 1, memory_order_relaxed);
		dsock_solo_owed = 1;
		return 1;
	}
	/* the solo thread's store of dsock_solo_cur is visible after this,
	 * or its look-up sees s gone; nothing to do if the kernel refuses
	 * (the registration succeeded, so it will not) but wait */
	dsock_sys(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
	while (atomic_load_explicit(&dsock_solo_cur, memory_order_acquire) == s)
		sched_yield(); /* a section never blocks: it ends soon */
	return 0;
}

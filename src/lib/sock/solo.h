/* Calls without a reference: the solo thread.
 *
 * A data call holds a reference on its socket so that a close elsewhere
 * cannot free it under the call.  Taking and dropping it are two locked
 * instructions, and on a streaming send the drop waits for the transport's
 * last store to leave the store buffer (the polling consumer holds that
 * line): most of a small send's time would go there.  So one thread per
 * process, the first that sends on a transport's socket (it claims the
 * role), sends with no reference: it names the socket in dsock_solo_cur
 * for the length of the call (a section), which only lasts while nothing
 * blocks.  Whoever drops a socket's last reference while the solo thread
 * may be inside a section on it (the socket's solo_used is set) makes the
 * solo thread run a barrier (membarrier, private expedited) and waits
 * until dsock_solo_cur no longer names it.  The solo thread stores
 * dsock_solo_cur, then looks the fd up again, with no fence: after the
 * barrier its store is visible to the releaser, or the releaser's removal
 * from the fd table is visible to its look-up.  A signal handler on the
 * solo thread that drops the last reference inside the section leaves the
 * release to the section's end (dsock_solo_owed). */
#ifndef DSOCK_SOLO_H
#define DSOCK_SOLO_H

#include "lib/sock/sock.h"

enum { DSOCK_SOLO_FREE = 0, DSOCK_SOLO_CLAIMED, DSOCK_SOLO_OFF };

extern _Atomic int dsock_solo_state;                  /* DSOCK_SOLO_* */
extern __thread int dsock_solo_me;                    /* this is the solo thread */
extern _Atomic(struct dsock_sock *) dsock_solo_cur;   /* its section's socket */
extern volatile int dsock_solo_owed;                  /* a put left for the section's end */

/* At start-up and in a fork child: registers for the barrier (sections
 * stay off where the kernel refuses it). */
void dsock_solo_init(void);
/* Claims the role for this thread if nobody has: 1 if it is ours now. */
int dsock_solo_claim(void);

/* Opens a section on s (found at fd): 1, or 0 when this call must take a
 * reference instead. */
static inline int dsock_solo_enter(struct dsock_sock *s, int fd)
{
	if (__builtin_expect(!dsock_solo_me, 0) && !dsock_solo_claim())
		return 0;
	if (atomic_load_explicit(&dsock_solo_cur, memory_order_relaxed))
		return 0; /* a signal handler inside our own section */
	if (__builtin_expect(!atomic_load_explicit(&s->solo_used, memory_order_relaxed), 0))
		/* once per socket, a locked store: a releaser that finds it
		 * clear knows we never looked the socket up after it left */
		atomic_store_explicit(&s->solo_used, 1, memory_order_seq_cst);
	atomic_store_explicit(&dsock_solo_cur, s, memory_order_relaxed);
	atomic_signal_fence(memory_order_seq_cst);
	if (dsock_fdt_peek(fd) == s && atomic_load_explicit(&s->ref, memory_order_relaxed) > 0)
		return 1;
	atomic_store_explicit(&dsock_solo_cur, NULL, memory_order_release);
	return 0;
}

void dsock_solo_owed_put(struct dsock_sock *s);

static inline void dsock_solo_exit(struct dsock_sock *s)
{
	/* release: what the section read of s before its reuse */
	atomic_store_explicit(&dsock_solo_cur, NULL, memory_order_release);
	atomic_signal_fence(memory_order_seq_cst);
	if (__builtin_expect(dsock_solo_owed, 0))
		dsock_solo_owed_put(s);
}

/* At the last reference of s, before it is released: 1 if the release
 * must wait for the section that uses it (left to its end), else 0 once
 * no section uses it. */
int dsock_solo_before_release(struct dsock_sock *s);

/* 1 while a call of ours is inside s without a reference. */
static inline int dsock_solo_inside(struct dsock_sock *s)
{
	return atomic_load_explicit(&dsock_solo_cur, memory_order_relaxed) == s;
}

#endif

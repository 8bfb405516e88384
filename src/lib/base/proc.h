/* Process-wide state of the preload library. */
#ifndef DSOCK_PROC_H
#define DSOCK_PROC_H

#include "common/rules.h"
#include "common/rawsys.h"

#include <sys/syscall.h>
#include <unistd.h>

#define DSOCK_VERSION "0.1.0"

struct dsock_proc {
	int pid;           /* this process; refreshed in the fork child */
	int enabled;       /* 0: rules or DSOCK_DISABLE turned dsock off here */
	char prog[64];     /* argv[0]'s file name */
	struct dsock_rules rules;
};

extern struct dsock_proc dsock_proc;

/* Set (never cleared) before the first vfork, or clone with CLONE_VM and
 * without CLONE_THREAD, made through libc (interpose/process_calls.c):
 * until then no process shares our memory without being us. */
extern int dsock_vm_shared;

/* 0 inside a vfork child (or a clone) that shares our memory but not our
 * fd table: such a child must not change dsock's state.  A getpid system
 * call only once such a child may exist (a connect/accept/close loop would
 * otherwise pay two per connection); used only on close and dup of fds
 * dsock tracks.
 * (Relaxed: the child sees the store its own thread made before the
 * system call that created it; any other thread of ours is us.) */
static inline int dsock_table_owner(void)
{
	return !__atomic_load_n(&dsock_vm_shared, __ATOMIC_RELAXED) ||
	       (int)dsock_sys(SYS_getpid) == dsock_proc.pid;
}

#endif

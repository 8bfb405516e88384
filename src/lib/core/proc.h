/* Process-wide state of the preload library. */
#ifndef DSOCK_PROC_H
#define DSOCK_PROC_H

#include "common/rules.h"

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

/* 0 inside a vfork child (or a raw clone) that shares our memory but not our
 * fd table: such a child must not change dsock's state.  One getpid system
 * call; used only on close and dup of fds dsock tracks. */
static inline int dsock_table_owner(void)
{
	return (int)syscall(SYS_getpid) == dsock_proc.pid;
}

#endif

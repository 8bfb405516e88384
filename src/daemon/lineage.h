/* Processes by what the kernel records of them (/proc/PID/stat): when
 * each started, and whose child it is.  A pid with its start time names
 * one process for good (a pid alone is reused). */
#ifndef DSOCKD_LINEAGE_H
#define DSOCKD_LINEAGE_H

#include <sys/types.h>

/* pid's start time (clock ticks since boot) and parent: 0 or -errno. */
int dd_proc_stat(pid_t pid, unsigned long long *start, pid_t *ppid);
/* 1 if the process pid is the one that started at anc_start as anc, or a
 * descendant of it still in its line (a process whose parent died
 * belongs to the reaper now: 0); 0 otherwise. */
int dd_descends(pid_t pid, pid_t anc, unsigned long long anc_start);

#endif

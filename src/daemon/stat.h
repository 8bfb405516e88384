/* `dsock stat`, the daemon's side: its counters, the processes that left,
 * and the records a client is sent. */
#ifndef DSOCKD_STAT_H
#define DSOCKD_STAT_H

#include "daemon/registry.h"

#include <sys/socket.h>
#include <time.h>

struct dd_stats {
	unsigned long accepted, refused, bad_msgs, events, stat_reqs;
	time_t start;
};

/* Keeps p, leaving, in the short history `dsock stat` shows. */
void dd_stat_gone(const struct dd_proc *p);

/* Sends the records who may see (root and the daemon's user: all; others:
 * their own processes) to a client's socket fd, then the end.  0 or
 * -errno. */
int dd_stat_send(int fd, const struct ucred *who, const struct dd_stats *stats, int nclients);

#endif

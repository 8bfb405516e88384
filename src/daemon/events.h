/* Socket events: applying one, and reading the processes' event rings. */
#ifndef DSOCKD_EVENTS_H
#define DSOCKD_EVENTS_H

#include "daemon/registry.h"

/* Applies one checked event of p (a message's or a ring slot's): 0 or
 * -ENOMEM. */
int dd_event_apply(struct dd_proc *p, const struct dsock_msg_sock_event *ev);
/* Applies what p's ring holds; returns the events applied and adds the
 * refused ones (and a broken ring) to *bad. */
unsigned long dd_events_drain(struct dd_proc *p, unsigned long *bad);
/* The same for every process (before an offer or a stat answer). */
unsigned long dd_events_drain_all(unsigned long *bad);

#endif

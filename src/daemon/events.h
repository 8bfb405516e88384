/* Socket events: applying one, and reading the processes' event rings. */
#ifndef DSOCKD_EVENTS_H
#define DSOCKD_EVENTS_H

#include "daemon/registry.h"

/* Applies one checked event of p, its ring's event number ev_no (counted
 * from 1) or a message's of header seq (ev_no 0): 0 or -ENOMEM. */
int dd_event_apply(struct dd_proc *p, const struct dsock_msg_sock_event *ev, uint64_t ev_no, uint32_t seq);
/* Applies what p's ring holds, up to its first `upto` events ever written
 * (UINT64_MAX: all); returns the events applied and adds the refused ones
 * (and a broken ring) to *bad. */
unsigned long dd_events_drain(struct dd_proc *p, uint64_t upto, unsigned long *bad);
/* The same for every process (before an offer or a stat answer). */
unsigned long dd_events_drain_all(unsigned long *bad);

#endif

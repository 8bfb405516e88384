/* The processes' event rings (common/proto.h, struct dsock_ev_ring): socket
 * events a library wrote to shared memory instead of sending each as a
 * message.  Read here and applied exactly as SOCK_EVENT messages are.  The
 * ring's writer is not trusted: the daemon keeps its own read count, takes
 * the writer's count only if it is at most a ring ahead, and checks every
 * event after copying it out. */
#include "daemon/events.h"
#include "daemon/pairing.h"
#include "common/log.h"

#include <string.h>

int dd_event_apply(struct dd_proc *p, const struct dsock_msg_sock_event *ev, uint64_t ev_no, uint32_t seq)
{
	if (ev->event == DSOCK_EV_CLOSE)
		dd_pairing_closed(p, ev->sock_id);
	return dd_proc_event(p, ev, ev_no, seq);
}

unsigned long dd_events_drain(struct dd_proc *p, uint64_t upto, unsigned long *bad)
{
	struct dsock_ev_ring *r = p->evr;
	unsigned long done = 0;
	uint64_t tail;

	if (!r)
		return 0;
	tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);
	if (tail - p->ev_head > DSOCK_EVRING_SLOTS) {
		DSOCK_WARN("pid %d: event ring count out of range (%llu read, %llu written): ring ignored",
			   p->pid, (unsigned long long)p->ev_head, (unsigned long long)tail);
		p->evr = NULL;
		(*bad)++;
		return 0;
	}
	if (upto < tail)
		tail = upto > p->ev_head ? upto : p->ev_head;
	for (; p->ev_head != tail; p->ev_head++) {
		struct dsock_msg_sock_event ev;
		uint32_t after = __atomic_load_n(&r->after[p->ev_head % DSOCK_EVRING_SLOTS], __ATOMIC_RELAXED);
		/* written after a message we have not handled yet: it waits
		 * (a writer that lies here only holds up its own events) */
		if ((int32_t)(after - p->seen_seq) > 0)
			break;
		memcpy(&ev, &r->ev[p->ev_head % DSOCK_EVRING_SLOTS], sizeof(ev));
		if (dsock_sock_event_check(&ev) || dd_event_apply(p, &ev, p->ev_head + 1, 0))
			(*bad)++;
		else
			done++;
	}
	/* release: we are done with the slots before the writer reuses them */
	__atomic_store_n(&r->head, p->ev_head, __ATOMIC_RELEASE);
	return done;
}

unsigned long dd_events_drain_all(unsigned long *bad)
{
	unsigned long done = 0;

	for (struct dd_proc *p = dd_proc_first(); p; p = p->next)
		done += dd_events_drain(p, UINT64_MAX, bad);
	return done;
}

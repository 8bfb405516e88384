/* Pokes: a socket whose ring holds data that no token stands for (hidden
 * readable) joins, or is re-armed in, an epoll set that another thread of
 * ours sleeps on.  The kernel would wake that sleeper (the socket is
 * readable); the kernel's view of our socket is not, so the set gets a
 * readable eventfd of ours, registered with DSOCK_POKE_DATA, which wakes
 * it.  Our epoll_wait takes such an event out (and the eventfd out of the
 * set) and looks at the hidden data instead (ready.c). */
#ifndef DSOCK_POKE_H
#define DSOCK_POKE_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/epoll.h>

#define DSOCK_POKE_DATA 0xd50c9b0e7f1a2c3dULL

/* Pokes outstanding: epoll_wait looks for them while > 0. */
extern _Atomic int dsock_pokes;

/* The n events of a look with those of data taken out (*found set if
 * there was one): the count left. */
int dsock_events_take(struct epoll_event *ev, int n, uint64_t data, int *found);
/* Wakes the threads asleep on epfd (one poke per set at a time). */
void dsock_poke(int epfd);
/* The events of a look at epfd, the pokes taken out: the count left.
 * *poked: one was there.  epfd's pokes are removed by a sleeper's own
 * look after its wait (sleeper), or by any look while no thread sleeps
 * on epfd: a look by a thread that does not sleep there (a loop of
 * zero-timeout waits) leaves them, level-triggered, for the sleepers. */
int dsock_poke_take(int epfd, struct epoll_event *ev, int n, int *poked, int sleeper);
/* Set from is known as set to from now on (ealias.c). */
void dsock_poke_rekey(int from, int to);
/* A fork child: the list stays (the sets are shared), its lock anew. */
void dsock_poke_fork_child(void);

#endif

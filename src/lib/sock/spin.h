/* How a waiting thread spins before it sleeps: the receivers' waits
 * (transports) and epoll_wait (ready.c) share these rules and the
 * per-thread state they learn (spin.c). */
#ifndef DSOCK_SPIN_H
#define DSOCK_SPIN_H

#include <stdint.h>

/* How long a poller or a receiver polls before it sleeps, in ns
 * (DSOCK_SPIN_US; default 50 us).  0: no spinning, which saves the CPU
 * the spins take when more busy processes than cores share the machine
 * (docs/ARCHITECTURE.md, "Wake-ups"). */
extern int64_t dsock_spin_ns;

/* Spinning politely.  A spinner that never blocks starves the other
 * processes when there are more runnable threads than CPUs, so past a
 * short pure spin (DSOCK_PURE_SPIN_NS) every round of a spin yields.  With
 * more runnable threads than CPUs the others run in those yields and the
 * spin goes on until its budget: the thread it waits for may be one of
 * them, and its data then lands with no wake-up, where a sleep would cost
 * it a token and us a wake-up.  A spinner whose data always comes within
 * its pure spin never reaches a yield, and starves the others all the
 * same, so every 20 us a wait about to spin starts with one (a wait that
 * sleeps at once gives the core away anyway): dsock_spin_courtesy
 * (docs/ARCHITECTURE.md, "Design decisions and measurements"). */
void dsock_spin_courtesy(long long now_ns);

/* Spinning only where it pays, learnt per thread: a spin that ends with
 * something to read saves a sleep and a wake-up, one that runs out spends
 * its CPU for nothing (on 2 cores, CPU the other processes of a pipeline
 * are waiting for).  dsock_spin_worth: 1 if this wait may spin (while at
 * least a quarter of this thread's recent spins found something; below
 * that one wait in 8 still spins, to see whether it pays again).
 * dsock_spin_outcome: a spin (one that may find something: not a wait
 * that had something at once) found something (1) or ran out (0). */
int dsock_spin_worth(void);
void dsock_spin_outcome(int found);

/* How long a wait spins before its first yield (ns).  It is spun only
 * while the thread it waits for may be running on another CPU: a wait
 * for a thread that last ran on this very CPU yields from its first round,
 * since every microsecond spun is one that thread does not run.  A
 * receiver knows its connection's peer (the CPU the peer last sent from);
 * an epoll_wait, which may be woken by any member, takes the peer its
 * thread last sent to (a server answers, then waits for that client's
 * next request; a proxy forwards, then waits for the answer):
 * dsock_spin_sent_to records the CPU that peer last sent from (+1; 0
 * unknown), dsock_spin_awaited_here says whether it is this one, and
 * dsock_spin_here whether a CPU so written (+1; 0 unknown) is. */
#define DSOCK_PURE_SPIN_NS 2000LL
void dsock_spin_sent_to(uint32_t cpu);
int dsock_spin_awaited_here(void);
int dsock_spin_here(uint32_t cpu);

#endif

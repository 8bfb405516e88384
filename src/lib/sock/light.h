/* Light sleepers: threads asleep in epoll_wait on a set that holds no
 * member a transport may ever carry (listeners, pipes, eventfds, timers:
 * the acceptor thread of memcached and of many servers).  No data of a
 * transport can be due to them, so they neither spin nor count in
 * dsock_sleepers: the pollers of the process keep their leases, and
 * producers go on announcing to them instead of sending tokens
 * (docs/ARCHITECTURE.md, "Light sleepers").
 *
 * A set may be slept on light only if dsock saw its creation in this
 * process image (a set inherited across exec may hold connections we do
 * not know of) and no member a transport may carry joined it since: an
 * Internet stream socket that does not listen, or another epoll set
 * (what that one holds may change).  Such a member joining a set first
 * promotes the set's light sleepers (all of them, when the set is nested
 * in another): they count in dsock_sleepers from then on, as if they had
 * counted when they went to sleep, and the leases end before the kernel
 * takes the member, so that every later arrival comes with a token.
 *
 * The registry holds every thread asleep in our epoll_wait, counted ones
 * too: a socket with hidden data given to a set someone sleeps on pokes
 * it (poke.h). */
#ifndef DSOCK_LIGHT_H
#define DSOCK_LIGHT_H

struct dsock_light {
	int epfd;
	int light;    /* 0: counted in dsock_sleepers by itself; 1: light;
		       * 2: cold (dsock_light_enter_cold) */
	int promoted; /* counted in dsock_sleepers on our behalf */
	struct dsock_light *next, **pprev;
};

/* A hint kept without a lock, per fd number below DSOCK_SETBITS: the
 * number may name an epoll set of ours (born here, holding member
 * records, or an alias of one: ealias.c).  Marked before the records
 * know the number, cleared when it closes; a number at or above the
 * bound always answers 1.  The paths a signal handler may run (a dup of
 * a pipe, for one) look here before they take any lock. */
#define DSOCK_SETBITS 65536
void dsock_setbit_mark(int fd);
int dsock_setbit_maybe(int fd);
/* epoll_create made epfd, empty; cloexec: with EPOLL_CLOEXEC. */
void dsock_light_born(int epfd, int cloexec);
/* Ghosts (eghost.c) may stay in set epfd: dsock saw its creation in this
 * process image, after the last fork, with close-on-exec (no other
 * process, no program run by exec or spawn, can reach it), and it was
 * never dup'd, given close-on-exec back, polled as a whole or nested in
 * another set since. */
int dsock_light_ghostable(int epfd);
/* Set epfd (-1: every set) may hold no ghosts from now on (1 if it could
 * until now). */
int dsock_light_unghost(int epfd);
/* fcntl(F_SETFD) or ioctl(FIOCLEX/FIONCLEX) set epfd's close-on-exec. */
void dsock_light_cloexec(int epfd, int on);
/* 1 if epoll_create made any set in this image that is still open. */
int dsock_light_any(void);
/* 1 if epoll_create made fd in this image (a set we know). */
int dsock_light_known(int fd);
/* Set from is known as set to from now on (ealias.c). */
void dsock_light_rekey(int from, int to);
/* fds first..last are closed: sets among them are forgotten. */
void dsock_light_forget(unsigned first, unsigned last);
/* A member that a transport may carry joins epfd (+1: before the kernel
 * has it, promoting the sleepers; nested: epfd is a member of another
 * set, and every light sleeper is promoted) or left it (-1). */
void dsock_light_member(int epfd, int delta, int nested);
/* 1 if set epfd (one seen made here) holds a member a transport may
 * carry: an Internet stream socket that never listened. */
int dsock_light_capable(int epfd);
/* 1 if a thread about to sleep on epfd may sleep light: then me is
 * registered until dsock_light_leave. */
int dsock_light_enter(int epfd, struct dsock_light *me);
/* A thread that counted itself (dsock_sleep_begin) registers before its
 * last look at epfd: a socket with hidden data given to the set after that
 * look pokes it (poke.h). */
void dsock_light_enter_counted(int epfd, struct dsock_light *me);
/* A thread about to sleep on epfd (-1: in poll or select) while no
 * connection of ours is on a transport sleeps *cold*: uncounted, but
 * registered (me), so that the first attach promotes it before the
 * connection's producer can announce instead of sending a token (another
 * poller's lease, a bell).  0 (not registered) if a connection attached
 * meanwhile: the caller sleeps as with one. */
int dsock_light_enter_cold(int epfd, struct dsock_light *me);
/* A connection attached (counted in dsock_fastpath_conns), before its
 * producer may announce: cold sleepers count in dsock_sleepers from now
 * on, and the leases end. */
void dsock_light_attached(void);
/* 1 if a thread is registered asleep on epfd (nested: epfd is a member of
 * another set, and any sleeper counts). */
int dsock_light_sleeping(int epfd, int nested);
/* me woke: unregistered, and uncounted if it was promoted. */
void dsock_light_leave(struct dsock_light *me);
/* A fork child: no thread but the forking one, and it is not asleep. */
void dsock_light_fork_child(void);

/* Bells (docs/ARCHITECTURE.md, "Bells"): a poller about to sleep on a
 * set that holds the transports' bell sleeps with bell 1 (ready.h): its
 * producers ring the bell, once per burst, instead of sending a token
 * per message.  The bell is registered level-triggered with
 * DSOCK_BELL_DATA (only an arming sleeper drains it), and only in a set
 * that nothing else waits on: born here after the last fork, never
 * dup'd, nested, polled or selected as a whole or sent away (as for
 * ghosts; another process's waiter would see our data), and taken out
 * again before an exec or spawn that the set survives (not
 * close-on-exec).  dsock_bells_on: unless DSOCK_BELLS=0. */
#include <stdint.h>
#include <sys/epoll.h>
#define DSOCK_BELL_DATA 0xd50cbe11a6c3f70dULL
extern int dsock_bells_on;
/* Sets that hold the bell now: waits filter its events while > 0. */
extern _Atomic int dsock_belled_sets;
/* 1 if a thread about to sleep on set epfd may sleep with the bell: the
 * set holds it (registered now if need be), counted in
 * dsock_bell_sleepers until dsock_sleep_end(1). */
int dsock_light_bell(int epfd);
/* The sets other than epfd that hold the bell and have a thread
 * registered asleep: how many (the first cap of them in out). */
int dsock_light_bell_others(int epfd, int *out, int cap);
/* 1 if set epfd holds the bell now (no count taken). */
int dsock_light_belled(int epfd);
/* The transport replaces its bell's file at the same number (a new
 * daemon's): every set lets go of the old file, then swap(arg) runs,
 * under the sets' lock. */
void dsock_light_bell_replace(void (*swap)(void *), void *arg);
/* An exec or spawn: sets that it leaves open lose the bell for good. */
void dsock_light_exec(void);

/* ebell.c.  As dsock_sleep_begin (ready.h), for a poller that
 * dsock_light_bell counted as a bell sleeper on set epfd. */
void dsock_bell_sleep_begin(int epfd);
/* A bell sleeper on set epfd (below -1: the poll sleeper in slot
 * -2 - epfd) arms the bell (drains it, takes the queues).  One bell
 * serves every set and poll that sleeps on it, so what it drained and
 * took may be another's: each other set holding the bell that has a
 * sleeper and data to report is poked (its wait may have found the bell
 * drained already), and, when a ring was drained, every other poll
 * sleeper. */
void dsock_bell_arm(int epfd);
/* poll, ppoll, select and pselect sleep on the bell too (poll.c), up to
 * 32 threads at a time, each in a slot of its own: the slot's number + 1
 * if this one may (0: it sleeps on tokens), counted as a bell sleeper,
 * the bell armed (and other sleepers poked as dsock_bell_arm does);
 * *bell and *poke are the fds it waits on besides its own, readable for
 * input.  Its fds are the caller's array, which nothing else waits on,
 * but another thread's arming may drain a ring it sleeps for (and take
 * the entries behind it): an arming that drained one writes every other
 * poll sleeper's *poke (each registers before its own arming and last
 * look, and the other thread reads the slots after its drain: either
 * sees the other).  *poke is an eventfd of ours, one per slot, made at
 * its first use. */
int dsock_poll_bell_begin(int *bell, int *poke);
/* The poll sleeper in slot (dsock_poll_bell_begin's number) is up;
 * poked: its *poke was readable (drained here). */
void dsock_poll_bell_end(int slot, int poked);
/* Wakes every poll asleep on the bell: the bell's file was replaced. */
void dsock_poll_bell_poke(void);
/* A fork child: no poll sleeps on the bell; the eventfds are the parent's. */
void dsock_poll_bell_fork_child(void);
/* A poller that counted itself (bell: as a bell sleeper) is up.  The
 * last bell sleeper up ends the bells: what is announced from then on
 * waits for a look (collect), or a token wakes its sleeper. */
void dsock_sleep_end(int bell);
/* The n events of a look that is no woken bell sleeper's, the bell's
 * taken out: the count left.  The bell is registered level-triggered and
 * only a sleeper that arms it drains it (the transport's before_sleep),
 * so a look by another thread (a loop of zero-timeout waits beside a
 * sleeper) never takes a ring that a sleeper waits for: the kernel wakes
 * a waiter for it as long as it stays readable. */
int dsock_bell_take(struct epoll_event *ev, int n);
/* A sleeper woken by the bell reported n events of max while other
 * threads sleep with the bell: when it reported all it may, hidden data
 * may be left that one ring stood for (the kernel wakes another waiter
 * when its ready list is not empty after a wait): the bell rings again. */
void dsock_bell_pass_on(int n, int max);
/* The bell woke a wait that is no bell sleep (a cold or light sleep, the
 * look of a wait whose set lost the bell).  Only an arming drains the
 * bell, so with no bell sleeper counted a ring that came after the last
 * arming stays readable for good, and every wait of a set that holds it
 * returns at once (an idle loop at 100 % CPU): it is drained here, and
 * rung again if a sleeper was counted meanwhile (it may have armed before
 * the drain, and the ring was its). */
void dsock_bell_unclaimed(void);

#endif

/* Waits on sockets the kernel carries spin before they sleep: a blocking
 * receive, poll and epoll_wait ask the kernel again without waiting, for
 * the spin budget, before the call that sleeps.  Data that comes within
 * it lands on an awake thread, which saves the cross-CPU wake-up (6-35 us
 * on this kind of machine) that a sleep costs; the same per-thread rule as
 * the rings' spins (spin.h) decides whether a wait spins at all, so a
 * thread whose spins keep running out sleeps at once (docs/ARCHITECTURE.md,
 * "Spinning on kernel sockets"). */
#ifndef DSOCK_KSPIN_H
#define DSOCK_KSPIN_H

#include <poll.h>
#include <signal.h>

/* 1 unless DSOCK_KERNEL_SPIN=0 (read at start-up). */
extern int dsock_kspin_on;

/* Whether this thread sent on a socket we track, or connected or
 * accepted one, since its last wait.
 * Only such a wait spins: one that waits for the answer to what it sent
 * (a client's request, a server's reply and the next request) is where
 * data comes within a wake-up's time.  A thread that only receives (a
 * stream's reader) would spin for pieces of a stream that the kernel
 * would otherwise hand it in larger reads, taking the socket's lock from
 * the sender's delivery far more often: on loopback, 25 % of a 14 B
 * stream's rate (docs/ARCHITECTURE.md, "Spinning on kernel sockets"). */
extern __thread int dsock_kspin_sent;

struct dsock_sock;

/* A receive of flags on fd (s: its tracked socket, whose data the kernel
 * carries: on no transport, or not paired yet) is about to be made: when
 * it would sleep, fd is looked at (poll, no waiting) until it is readable
 * or the budget is spent.  The receive itself is the caller's, which
 * keeps every rule of the kernel's (SO_RCVLOWAT, MSG_WAITALL, errors). */
void dsock_kspin_recv(const struct dsock_sock *s, int fd, int flags);

/* poll(fds, n) with no transport's socket among them, about to wait
 * *timeout_ms (-1: for ever): its looks without waiting, while fds holds
 * an Internet socket we track; masked: a ppoll's (or pselect's), each
 * look a ppoll with mask, so that a signal the mask lets in ends the
 * wait (EINTR) as in the call itself.  The count (or -errno) of one that
 * found something, else 0 with *timeout_ms less the time spun. */
int dsock_kspin_poll(struct pollfd *fds, nfds_t n, int masked, const sigset_t *mask, int *timeout_ms);

/* p's revents come from a look that may not have waited: a TCP socket
 * that shows an error may be half-way through a reset, and is looked at
 * again (up to 20 us) until it shows the reset whole (hang-up, both
 * directions shut), as a sleeper the reset woke sees it. */
void dsock_kspin_settle(struct pollfd *p);

/* A wait's looks without waiting, for the budget (or until *timeout_ms,
 * if > 0, runs out), if this thread sent since its last wait and its
 * spins pay (spin.h): look(arg)
 * returns 0 for nothing, else what the wait returns (a count, -errno).
 * Its result, or 0 with *timeout_ms (if > 0) less the time spun. */
int dsock_kspin_looks(int (*look)(void *arg), void *arg, int *timeout_ms);

#endif

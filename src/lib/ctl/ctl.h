/* The library's side of the control protocol: registration with dsockd,
 * socket events, offers and their results.  Never blocks the application:
 * the socket is nonblocking, an event that does not fit is dropped and
 * counted, and an absent daemon is retried at most once a second.  It
 * knows messages, not the socket layer's objects: the socket layer fills
 * the events (sock/report.c) and replays what the process holds when a
 * daemon is (re)connected. */
#ifndef DSOCK_CTL_H
#define DSOCK_CTL_H

#include "common/proto.h"

#include <stdint.h>

void dsock_ctl_start(void);
/* In a fork child: leave the parent's connection, register as a child. */
void dsock_ctl_fork_child(int ppid);
/* The HELLO flags this process registers with, set at start-up before
 * dsock_ctl_start (it then names its parent as ppid), or those a fork
 * child registers with besides FORKED, set before the fork (from a
 * fork_prepare hook; each fork replaces them). */
void dsock_ctl_hello_flags(unsigned flags);
/* Sends a socket event: 1 if the daemon is there to hear it, 0 if not,
 * -EAGAIN when another thread held the connection (the event is dropped
 * and counted). */
int dsock_ctl_event(const struct dsock_msg_sock_event *m);
/* The same from the replay function only (the connection is held). */
int dsock_ctl_event_locked(const struct dsock_msg_sock_event *m, int may_reconnect);
/* fn tells a newly (re)connected daemon what the process holds, through
 * dsock_ctl_event_locked (listeners_only: a fork child's listeners). */
void dsock_ctl_set_replay(void (*fn)(int listeners_only));
/* The application is about to close or overwrite fds in [first, last]: if
 * the control socket is among them, dsock lets go of it first. */
void dsock_ctl_fd_lost(unsigned first, unsigned last);
/* Cheap test used before dsock_ctl_fd_lost on every close. */
int dsock_ctl_fd(void);

/* Sends an OFFER for socket sock_id with its kernel socket fd attached,
 * for transport (enum dsock_path) and proven by proof (enum dsock_proof).
 * Returns 0, or -errno when the daemon cannot be reached (the socket then
 * stays on the kernel). */
int dsock_ctl_offer(uint64_t sock_id, int fd, unsigned role, unsigned transport, unsigned proof);
/* The handler of transport's RESULT messages (results are routed by the
 * transport they name); fd is -1 unless paired, and the handler owns it. */
void dsock_ctl_set_result_handler(unsigned transport, void (*fn)(const struct dsock_msg_result *r, int fd));
/* Which connection to a daemon this is (bumped at each new one): names
 * the daemon made before (a link's number) mean nothing to the next. */
unsigned dsock_ctl_gen(void);
/* transport's resource of a paired socket again, from the daemon (sock_fd,
 * one of our fds of it, proves the claim), for an exec: waits up to
 * timeout_ms, delivering other mail meanwhile.  Returns the fd
 * (close-on-exec), or -ENOENT (the daemon has none), -ENOTCONN,
 * -ETIMEDOUT. */
int dsock_ctl_fetch(unsigned transport, unsigned long long sock_id, int sock_fd, int timeout_ms);
/* The other end's kernel socket of a paired socket (sock_fd, one of our
 * fds of it, proves the claim), lent by the daemon for a hand-over the
 * peer cannot make in time (ctl_peer.c; PEER_REQ in common/proto.h), on a
 * connection of its own (safe in a vfork child).  Waits up to timeout_ms.
 * Returns the fd (close-on-exec), or -errno: -EPERM where the daemon may
 * not take it, -ENOENT when it found no process holding it. */
int dsock_ctl_fetch_peer(unsigned long long sock_id, int sock_fd, int timeout_ms);
/* Delivers mail until done(arg) says 1, for timeout_ms at most (a close
 * waiting for the daemon to let go of its copy of an offered socket). */
void dsock_ctl_mail_until(int (*done)(void *arg), void *arg, int timeout_ms);
/* Delivers mail, if the daemon left any: one memory read when there is none. */
void dsock_ctl_poll_mail(void);
/* Blocking variant for tests and slow paths: also reads when no mail page. */
void dsock_ctl_read_mail(void);

#endif

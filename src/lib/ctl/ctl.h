/* The library's side of the control protocol: registration with dsockd and
 * socket events.  Never blocks the application: the socket is nonblocking,
 * an event that does not fit is dropped and counted, and an absent daemon is
 * retried at most once a second. */
#ifndef DSOCK_CTL_H
#define DSOCK_CTL_H

struct dsock_sock;

void dsock_ctl_start(void);
/* In a fork child: leave the parent's connection, register as a child. */
void dsock_ctl_fork_child(int ppid);
/* s changed state (ev: enum dsock_sock_event); fd is one of its fds. */
void dsock_ctl_sock_event(struct dsock_sock *s, int fd, unsigned ev);
/* The same with the socket's addresses already at hand (NULL: unknown),
 * which saves two system calls per connection. */
struct sockaddr;
void dsock_ctl_sock_event_at(struct dsock_sock *s, int fd, unsigned ev,
			     const struct sockaddr *local, const struct sockaddr *peer);
void dsock_ctl_sock_closed(struct dsock_sock *s);
/* The application is about to close or overwrite fds in [first, last]: if
 * the control socket is among them, dsock lets go of it first. */
void dsock_ctl_fd_lost(unsigned first, unsigned last);
/* Cheap test used before dsock_ctl_fd_lost on every close. */
int dsock_ctl_fd(void);

/* Sends an OFFER for s with its kernel socket fd attached, for transport
 * (enum dsock_path) and proven by proof (enum dsock_proof).  Returns 0,
 * or -errno when the daemon cannot be reached (the socket then stays on
 * the kernel). */
struct dsock_msg_result;
int dsock_ctl_offer(struct dsock_sock *s, int fd, unsigned role, unsigned transport, unsigned proof);
/* The handler of transport's RESULT messages (results are routed by the
 * transport they name); fd is -1 unless paired, and the handler owns it. */
void dsock_ctl_set_result_handler(unsigned transport, void (*fn)(const struct dsock_msg_result *r, int fd));
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
/* Delivers mail, if the daemon left any: one memory read when there is none. */
void dsock_ctl_poll_mail(void);
/* Blocking variant for tests and slow paths: also reads when no mail page. */
void dsock_ctl_read_mail(void);

#endif

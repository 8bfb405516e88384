/* Lifecycle hooks: sockets are created, bound, connected, accepted, dup'ed
 * and closed here, after the kernel did the same.  This is where a transport
 * is offered an established connection (settle()). */
#include "lib/sock/sock.h"
#include "lib/sock/epset.h"
#include "lib/ctl/ctl.h"
#include "lib/base/proc.h"
#include "lib/base/real.h"
#include "lib/transport/transport.h"
#include "lib/sock/ready.h"
#include "lib/sock/light.h"
#include "lib/sock/kspin.h"
#include "common/proto.h"
#include "common/reason.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>

#include "lib/base/sysret.h"

static int is_inet(const struct dsock_sock *s)
{
	return s->domain == AF_INET || s->domain == AF_INET6;
}

/* Puts a new object for fd in the table.  Failure to track is not an error
 * for the application: the socket then simply stays on the kernel. */
static struct dsock_sock *track(int fd, int domain, int type, int protocol)
{
	struct dsock_sock *s, *old;

	if (!dsock_proc.enabled)
		return NULL;
	s = dsock_sock_new(domain, type, protocol);
	old = dsock_fdt_swap(fd, s);
	if (old == DSOCK_FDT_FAIL) {
		if (s)
			dsock_sock_put(s);
		return NULL;
	}
	if (old) /* stale: that fd was closed behind our back (raw syscall) */
		dsock_sock_put(old);
	return s;
}

/* An established (or establishing) connection: offer it to the transports,
 * record the path and why, tell the daemon. */
static void settle(struct dsock_sock *s, int fd, int role, const struct sockaddr *peer)
{
	unsigned reason = DSOCK_R_NOT_TCP;
	struct sockaddr_storage l, p;
	socklen_t ll = sizeof(l), pl = sizeof(p);
	const struct sockaddr *local = NULL;

	if (!is_inet(s)) {
		s->reason = (uint16_t)reason;
		return;
	}
	/* a new connection starts a conversation: its first request (or
	 * answer) comes within a wake-up's time, as after a send (kspin.h) */
	dsock_kspin_sent = 1;
	/* the peer is what connect was given, or accept returned, when we
	 * have it; the local address is asked only for rules that name ports
	 * (a system call, 2-3 % of a connect/accept/close loop per end: the
	 * daemon's event goes without it, and the daemon learns it from the
	 * socket at the offer) */
	if (dsock_rules_name_ports(&dsock_proc.rules) &&
	    dsock_real.getsockname(fd, (struct sockaddr *)&l, &ll) == 0)
		local = (struct sockaddr *)&l;
	if (!peer && s->state >= DSOCK_ST_CONNECTING &&
	    dsock_real.getpeername(fd, (struct sockaddr *)&p, &pl) == 0)
		peer = (struct sockaddr *)&p;
	if (s->type == SOCK_STREAM) {
		int rule;
		if (!dsock_rules_conn_allowed(&dsock_proc.rules, local, peer, &rule))
			reason = DSOCK_R_DENIED_RULE;
		else if (atomic_load(&dsock_uring_seen))
			reason = DSOCK_R_URING;
		else if (dsock_transport_offer(s, fd, role, &reason) == 0 && atomic_load(&dsock_uring_seen) &&
			 s->owner->handover)
			s->owner->handover(s, fd); /* (a ring set up meanwhile: uring.c) */
	}
	s->reason = (uint16_t)reason;
	/* a peer the kernel would not give is asked again (and found
	 * missing) by the event */
	dsock_sock_report_at(s, fd, role == DSOCK_ROLE_ACCEPT ? DSOCK_EV_ACCEPT : DSOCK_EV_CONNECT,
				local, peer);
}

int dsock_sock_socket(int domain, int type, int protocol)
{
	int fd = dsock_real.socket(domain, type, protocol);

	if (fd < 0)
		return -errno;
	track(fd, domain, type, protocol);
	return fd;
}

int dsock_sock_socketpair(int domain, int type, int protocol, int sv[2])
{
	int r = dsock_real.socketpair(domain, type, protocol, sv);

	if (r < 0)
		return -errno;
	for (int i = 0; i < 2; i++) {
		struct dsock_sock *s = track(sv[i], domain, type, protocol);
		if (s) {
			s->state = DSOCK_ST_CONNECTED;
			s->reason = DSOCK_R_UNIX;
		}
	}
	return r;
}

int dsock_sock_bind(int fd, const struct sockaddr *a, socklen_t len)
{
	int r = dsock_real.bind(fd, a, len);
	struct dsock_sock *s;

	if (r < 0)
		return -errno;
	s = dsock_fdt_get(fd);
	if (s) {
		if (s->state == DSOCK_ST_OPEN)
			s->state = DSOCK_ST_BOUND;
		if (is_inet(s) && s->type != SOCK_STREAM && !s->ev) {
			s->reason = DSOCK_R_NOT_TCP;
			dsock_sock_report(s, fd, DSOCK_EV_OPEN);
		}
		dsock_sock_put(s);
	}
	return r;
}

int dsock_sock_listen(int fd, int backlog)
{
	struct dsock_sock *s = dsock_fdt_get(fd);
	int r;

	if (s && is_inet(s) && s->type == SOCK_STREAM && s->state != DSOCK_ST_LISTENING)
		dsock_optin_listener(fd);
	r = dsock_real.listen(fd, backlog);
	if (r < 0) {
		r = -errno;
		if (s)
			dsock_sock_put(s);
		return r;
	}
	if (s) {
		int was = s->state == DSOCK_ST_LISTENING;
		s->state = DSOCK_ST_LISTENING;
		s->reason = DSOCK_R_LISTENER;
		atomic_fetch_or(&s->flags, DSOCK_SF_LISTENED);
		if (is_inet(s) && !was)
			dsock_sock_report(s, fd, DSOCK_EV_OPEN);
		dsock_sock_put(s);
	}
	return r;
}

int dsock_sock_connect(int fd, const struct sockaddr *a, socklen_t len)
{
	const struct dsock_transport *tp;
	struct dsock_sock *s;
	int r, err;

	if (a && len >= sizeof(sa_family_t) && a->sa_family == AF_UNSPEC && (s = dsock_sock_carried(fd, &tp))) {
		/* the application resets a transport's connection itself */
		r = tp->disconnect ? tp->disconnect(s, fd) : 1;
		dsock_sock_put(s);
		if (r != 1)
			return r;
	}
	s = dsock_fdt_get(fd);
	/* the peer is the address given (a stream socket's: a datagram
	 * socket's may be AF_UNSPEC and is asked of the kernel) */
	int given = s && s->type == SOCK_STREAM && a &&
		    ((a->sa_family == AF_INET && len >= sizeof(struct sockaddr_in) && s->domain == AF_INET) ||
		     (a->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6) && s->domain == AF_INET6));
	/* a listener that connects (after connect(AF_UNSPEC)) stays on the
	 * kernel (DSOCK_SF_LISTENED) */
	if (given && s->state < DSOCK_ST_CONNECTING && !(atomic_load(&s->flags) & DSOCK_SF_LISTENED))
		dsock_optin(fd, a);
	r = dsock_real.connect(fd, a, len);
	err = r < 0 ? errno : 0;

	if (r < 0 && err != EINPROGRESS) {
		if (s)
			dsock_sock_put(s);
		return -err;
	}
	if (s) {
		/* a datagram socket may connect often (resolvers): report once */
		int again = s->type != SOCK_STREAM && s->ev;
		s->state = r == 0 ? DSOCK_ST_CONNECTED : DSOCK_ST_CONNECTING;
		if (!again && !(atomic_load(&s->flags) & DSOCK_SF_LISTENED))
			settle(s, fd, DSOCK_ROLE_CONNECT, given ? a : NULL);
		dsock_sock_put(s);
	}
	return r < 0 ? -err : r;
}

void dsock_sock_fastopen(int fd, const struct sockaddr *a, int sent)
{
	struct dsock_sock *s = dsock_fdt_get(fd);

	if (!s)
		return;
	if (s->type == SOCK_STREAM && is_inet(s) && s->state < DSOCK_ST_CONNECTING &&
	    !(atomic_load(&s->flags) & DSOCK_SF_LISTENED)) {
		s->state = sent ? DSOCK_ST_CONNECTED : DSOCK_ST_CONNECTING;
		s->reason = DSOCK_R_FASTOPEN;
		dsock_sock_report_at(s, fd, DSOCK_EV_CONNECT, NULL, a);
	}
	dsock_sock_put(s);
}

int dsock_sock_accept4(int fd, struct sockaddr *a, socklen_t *len, int flags, int is_accept4)
{
	/* the peer's address comes with the call: asked for here when the
	 * application did not (saves a getpeername per connection) */
	struct sockaddr_storage own;
	socklen_t own_len = sizeof(own);
	struct sockaddr *pa = a ? a : (struct sockaddr *)&own;
	socklen_t *pl = a ? len : &own_len;
	socklen_t given = a && len ? *len : 0;
	int nfd = is_accept4 ? dsock_real.accept4(fd, pa, pl, flags) : dsock_real.accept(fd, pa, pl);
	struct dsock_sock *ls, *s;

	if (nfd < 0)
		return -errno;
	/* usable only if it was not truncated */
	if (a && (!len || *len > given))
		pa = NULL;
	ls = dsock_fdt_get(fd);
	if (ls) {
		s = track(nfd, ls->domain, SOCK_STREAM | (flags & SOCK_NONBLOCK), ls->protocol);
		if (s) {
			s->state = DSOCK_ST_CONNECTED;
			settle(s, nfd, DSOCK_ROLE_ACCEPT,
			       pa && (pa->sa_family == AF_INET || pa->sa_family == AF_INET6) ? pa : NULL);
		}
		dsock_sock_put(ls);
	}
	return nfd;
}

/* Forget what dsock holds for [first, last] before the kernel closes it. */
static void untrack_range(unsigned first, unsigned last)
{
	if (!dsock_table_owner())
		return; /* vfork child: our memory, not our fd table */
	dsock_ctl_fd_lost(first, last);
	for (unsigned fd = first; fd <= last && fd < DSOCK_FDT_CHUNKS * DSOCK_FDT_CHUNK; fd++) {
		if ((fd & (DSOCK_FDT_CHUNK - 1)) == 0 &&
		    !atomic_load(&dsock_fdt[fd >> DSOCK_FDT_CHUNK_BITS])) {
			fd += DSOCK_FDT_CHUNK - 1; /* whole chunk empty */
			continue;
		}
		if (dsock_fdt_peek((int)fd)) {
			struct dsock_sock *s = dsock_fdt_swap((int)fd, NULL);
			if (s && s != DSOCK_FDT_FAIL)
				dsock_sock_put(s);
		}
		if (fd == ~0u)
			break;
	}
}

/* fd is about to be closed (by close, or by a dup2 onto it): if it is this
 * process's last fd of a transport's socket, let the transport finish
 * (reset on unread data, drain tokens) before the kernel closes. */
static void before_kernel_close(int fd)
{
	struct dsock_sock *last = dsock_fdt_peek(fd);
	const struct dsock_transport *tp = last ? __atomic_load_n(&last->tp, __ATOMIC_ACQUIRE) : NULL;

	if (tp && tp->before_close)
		tp->before_close(last, fd);
	if (tp && tp->closing && atomic_load(&last->ref) == 1)
		tp->closing(last, fd);
}

int dsock_sock_close(int fd)
{
	struct dsock_sock *s = NULL;
	int r;

	if ((dsock_fdt_peek(fd) || fd == dsock_ctl_fd()) && dsock_table_owner()) {
		before_kernel_close(fd);
		dsock_ctl_fd_lost((unsigned)fd, (unsigned)fd);
		s = dsock_fdt_swap(fd, NULL);
	}
	/* any fd: an epoll set's number is reused once it is closed */
	int serial = dsock_setbit_maybe(fd) && dsock_epset_serial_enter();
	dsock_epoll_forget_fd(fd);
	r = dsock_real.close(fd);
	r = SYSRET(r);
	dsock_epset_serial_leave(serial);
	if (s && s != DSOCK_FDT_FAIL)
		dsock_sock_put(s);
	return r;
}

int dsock_sock_close_range(unsigned first, unsigned last, int flags)
{
	if (first <= last && !(flags & CLOSE_RANGE_CLOEXEC)) {
		untrack_range(first, last);
		dsock_epoll_forget_range(first, last);
	}
	return SYSRET(dsock_real.close_range(first, last, flags));
}

static int dup_in(int oldfd, int newfd, int flags, int how)
{
	int r;
	struct dsock_sock *s;

	if ((how == DSOCK_DUP2 || how == DSOCK_DUP3) && oldfd != newfd && newfd >= 0 &&
	    (dsock_fdt_peek(newfd) || newfd == dsock_ctl_fd()) && dsock_table_owner()) {
		if (dsock_real.fcntl(oldfd, F_GETFD) >= 0) /* else the dup fails: newfd stays */
			before_kernel_close(newfd);
		dsock_ctl_fd_lost((unsigned)newfd, (unsigned)newfd);
	}
	if ((how == DSOCK_DUP2 || how == DSOCK_DUP3) && oldfd != newfd)
		dsock_epoll_forget_fd(newfd); /* closed by the dup, if open */
	/* an epoll set reached by two numbers holds no ghosts (eghost.c) */
	if (dsock_sets_watched() && !dsock_fdt_peek(oldfd))
		dsock_epset_no_ghosts(oldfd);
	switch (how) {
	case DSOCK_DUP_ANY:
		r = dsock_real.dup(oldfd);
		break;
	case DSOCK_DUP2:
		r = dsock_real.dup2(oldfd, newfd);
		if (r >= 0 && oldfd == newfd)
			return r;
		break;
	case DSOCK_DUP3:
		r = dsock_real.dup3(oldfd, newfd, flags);
		break;
	case DSOCK_DUP_FCNTL:
		r = dsock_real.fcntl(oldfd, F_DUPFD, newfd);
		break;
	default:
		r = dsock_real.fcntl(oldfd, F_DUPFD_CLOEXEC, newfd);
		break;
	}
	if (r < 0)
		return -errno;
	if (!dsock_table_owner())
		return r;
	s = dsock_fdt_get(oldfd); /* this reference becomes the new slot's */
	if (!s)
		dsock_epset_dup(oldfd, r); /* (if an epoll set) */
	if (s || dsock_fdt_peek(r)) {
		struct dsock_sock *old = dsock_fdt_swap(r, s);
		if (old == DSOCK_FDT_FAIL)
			old = s; /* cannot track the copy: it stays on the kernel */
		if (old)
			dsock_sock_put(old);
	}
	return r;
}

int dsock_sock_dup(int oldfd, int newfd, int flags, int how)
{
	/* a dup of a set, or onto one (dup2, dup3: a close of newfd) */
	int serial = (dsock_setbit_maybe(oldfd) ||
		      ((how == DSOCK_DUP2 || how == DSOCK_DUP3) && newfd >= 0 && dsock_setbit_maybe(newfd))) &&
		     dsock_epset_serial_enter();
	int r = dup_in(oldfd, newfd, flags, how);

	dsock_epset_serial_leave(serial);
	return r;
}

void dsock_sock_set_nonblock(int fd, int on)
{
	struct dsock_sock *s = dsock_fdt_get(fd);

	if (!s)
		return;
	if (on)
		atomic_fetch_or(&s->flags, DSOCK_SF_NONBLOCK);
	else
		atomic_fetch_and(&s->flags, ~DSOCK_SF_NONBLOCK);
	dsock_sock_put(s);
}

int dsock_sock_setfl(int fd, int flags)
{
	int r = dsock_real.fcntl(fd, F_SETFL, flags);

	if (r < 0)
		return -errno;
	if (dsock_fdt_peek(fd))
		dsock_sock_set_nonblock(fd, !!(flags & O_NONBLOCK));
	return r;
}

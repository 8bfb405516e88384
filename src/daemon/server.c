/* The daemon's event loop: one thread, epoll over the listening socket, a
 * signalfd and every client.  A client is a library (after HELLO) or a CLI
 * request.  Any malformed message closes that client and nothing else. */
#include "daemon/server.h"
#include "daemon/registry.h"
#include "daemon/pairing.h"
#include "daemon/provision.h"
#include "daemon/peerfd.h"
#include "daemon/events.h"
#include "daemon/ident.h"
#include "daemon/hostlink.h"
#include "daemon/outbox.h"
#include "daemon/stat.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/reason.h"
#include "common/fdpass.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

enum { ROLE_NEW, ROLE_LIB, ROLE_CLI };

struct dd_client {
	int fd;
	int role;
	uint64_t gen; /* tells a reused slot from the client an offer came from */
	struct ucred cred;
	struct dd_proc *proc;
	struct dd_outbox out; /* results the socket had no room for yet */
	int out_armed;        /* EPOLLOUT asked for */
};

static struct dd_client *clients;
static int nclients_max, nclients;
static struct dd_stats stats;
static int ep;
static uint64_t next_gen = 1;
static int nbacklogged; /* clients whose outbox holds results */

#define OUT_RETRY_MS 5
#define SLOT_LISTEN  0xfffffffeu
#define SLOT_SIGNALS 0xfffffffdu
/* the links to other hosts' daemons: this slot and the next 4096 */
#define SLOT_HOSTS   0xf0000000u

/* Reads the event ring of p, or of every process (p NULL), up to its first
 * `upto` events. */
static void drain_events_to(struct dd_proc *p, uint64_t upto)
{
	unsigned long bad = 0;

	stats.events += p ? dd_events_drain(p, upto, &bad) : dd_events_drain_all(&bad);
	stats.bad_msgs += bad;
}

static void drain_events(struct dd_proc *p)
{
	drain_events_to(p, UINT64_MAX);
}

void dd_server_drain(struct dd_proc *p)
{
	if (p)
		drain_events(p);
}

static void client_close(uint32_t slot)
{
	struct dd_client *c = &clients[slot];

	if (c->proc) {
		drain_events(c->proc); /* its last closes free pairings */
		if (c->proc->mail)
			__atomic_store_n(&c->proc->mail->closed, 1, __ATOMIC_RELEASE);
		DSOCK_INFO("process %d (%s) left", c->proc->pid, c->proc->comm);
		dd_stat_gone(c->proc);
		dd_pairing_forget(c->proc);
		dd_proc_remove(c->proc);
	}
	if (c->out.n)
		nbacklogged--;
	dd_outbox_clear(&c->out);
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
	nclients--;
}

static int send_msg(int fd, uint16_t type, const void *payload, size_t len)
{
	return dd_send_msg_fd(fd, type, payload, len, -1, 0);
}

static void mail_sent(struct dd_client *c, unsigned n)
{
	if (n && c->proc && c->proc->mail)
		__atomic_add_fetch(&c->proc->mail->mail_seq, n, __ATOMIC_RELEASE);
}

/* EPOLLOUT while the socket is full; a refusal for fds in flight is
 * retried by the loop's timer instead (the socket stays writable). */
static void want_out(uint32_t slot, int on)
{
	struct dd_client *c = &clients[slot];
	struct epoll_event ev = { .events = EPOLLIN | (on ? EPOLLOUT : 0), .data.u32 = slot };

	if (c->out_armed != on && epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) == 0)
		c->out_armed = on;
}

/* Sends what waits in slot's outbox while the socket takes it. */
static void flush_out(uint32_t slot)
{
	struct dd_client *c = &clients[slot];
	unsigned sent;
	int rc = dd_outbox_flush(&c->out, c->fd, &sent);

	mail_sent(c, sent);
	if (rc && !dd_send_transient(rc)) { /* gone: its read side closes the client */
		DSOCK_WARN("cannot send %zu pairing results to pid %d: %s", c->out.n, c->cred.pid, strerror(-rc));
		dd_outbox_clear(&c->out);
	}
	if (!c->out.n)
		nbacklogged--;
	want_out(slot, c->out.n && rc == -EAGAIN);
}

int dd_send_result(const struct dd_reply_to *to, const struct dsock_msg_result *r, int fd)
{
	struct dd_client *c = &clients[to->slot];
	int rc = 0;

	if (to->slot >= (uint32_t)nclients_max || c->fd < 0 || c->gen != to->gen)
		return -ESRCH; /* the process left meanwhile */
	if (!c->out.n) {
		rc = dd_send_msg_fd(c->fd, DSOCK_MSG_RESULT, r, sizeof(*r), fd, MSG_DONTWAIT);
		if (rc == 0) {
			mail_sent(c, 1);
			return 0;
		}
		if (!dd_send_transient(rc)) {
			DSOCK_WARN("cannot send a pairing result to pid %d: %s", c->cred.pid, strerror(-rc));
			return rc;
		}
	}
	/* behind the ones waiting, or the first to wait */
	int e = dd_outbox_push(&c->out, r, fd);
	if (e) {
		DSOCK_WARN("cannot send a pairing result to pid %d: %s", c->cred.pid, strerror(-e));
		return e;
	}
	if (c->out.n == 1) {
		nbacklogged++;
		want_out(to->slot, rc == -EAGAIN);
	}
	return 0;
}

/* Returns 1 when the parent claim of a fork child is true. */
static int is_parent_of(pid_t child, pid_t parent)
{
	char path[64], buf[512], *p;
	FILE *f;
	int ppid = -1;

	snprintf(path, sizeof(path), "/proc/%d/stat", child);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')))
		sscanf(p + 2, "%*c %d", &ppid);
	fclose(f);
	return ppid == parent;
}

/* The mail page (and the event ring after it) must be a sealed (cannot
 * shrink) memfd: otherwise its owner could truncate it and make the daemon
 * fault.  A memfd of one page has a mail page and no ring. */
static int map_mail(struct dd_proc *p, int fd)
{
	struct stat st;
	void *m;
	int seals = fcntl(fd, F_GET_SEALS);

	if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_size < 4096)
		return -EINVAL;
	p->mail_len = (size_t)st.st_size >= DSOCK_MAIL_SIZE ? DSOCK_MAIL_SIZE : 4096;
	m = mmap(NULL, p->mail_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	p->mail = m;
	if (p->mail_len == DSOCK_MAIL_SIZE) {
		/* from its first event: the library may write some before we
		 * get to its HELLO */
		p->evr = (struct dsock_ev_ring *)((char *)m + DSOCK_EVRING_OFF);
		p->ev_head = 0;
	}
	return 0;
}

static int on_hello(struct dd_client *c, const struct dsock_msg_hello *h, int fd)
{
	struct dd_proc *parent;

	if (c->role != ROLE_NEW)
		return -EPROTO;
	c->proc = dd_proc_add(c->cred.pid, c->cred.uid, h);
	if (!c->proc)
		return -ENOMEM;
	if (fd >= 0 && map_mail(c->proc, fd))
		DSOCK_WARN("pid %d sent an unusable mail page", c->cred.pid);
	c->role = ROLE_LIB;
	if ((h->flags & DSOCK_HELLO_FORKED) && (parent = dd_proc_find(h->ppid)) &&
	    parent != c->proc && is_parent_of(c->cred.pid, h->ppid)) {
		/* the child holds the sockets the parent's records name
		 * after its ring events up to the fork: born by then and not
		 * closed since (a close the daemon read already leaves the
		 * child without that record until its own next event) */
		drain_events_to(parent, h->parent_evpos);
		dd_proc_inherit(c->proc, parent, h->parent_evpos, h->parent_seq);
	}
	DSOCK_INFO("process %d (%s) uid %u registered%s", c->cred.pid, c->proc->comm,
		   c->cred.uid, (h->flags & DSOCK_HELLO_FORKED) ? " (fork child)" : "");
	return 0;
}

/* Returns <0 to drop the client, 1 to stop the daemon.  fd is the one
 * received with the message (or -1); it is always consumed here. */
static int on_message(struct dd_client *c, uint32_t slot, const void *buf, size_t n, int fd)
{
	const struct dsock_msg_hdr *h = buf;
	const void *payload = h + 1;
	int r = dsock_msg_check(buf, n);

	if (r == -EPROTO) {
		/* another build's library or CLI: the header's layout is the
		 * same in every version, so it can read who we are before we
		 * drop it (dsock stop then ends us by the pid in the lock) */
		struct dsock_msg_error e = { .err = EPROTO };
		send_msg(c->fd, DSOCK_MSG_ERROR, &e, sizeof(e));
		DSOCK_WARN("a client of protocol version %u (ours %u) refused: a dsock of another build",
			   (unsigned)h->version, DSOCK_PROTO_VERSION);
		if (fd >= 0)
			close(fd);
		return r;
	}

	/* events the process wrote before this message come first; an offer
	 * and a stat answer need everyone's (the peer's accepted socket, the
	 * listener) */
	if (r == 0 && (h->type == DSOCK_MSG_OFFER || h->type == DSOCK_MSG_STAT_REQ))
		drain_events(NULL);
	else if (c->proc)
		drain_events(c->proc);
	if (r == 0 && (fd >= 0) != dsock_msg_has_fd(h->type) && h->type != DSOCK_MSG_HELLO)
		r = -EBADMSG; /* an fd where none belongs, or none where one must be */
	if (r || (h->type != DSOCK_MSG_OFFER && h->type != DSOCK_MSG_FETCH && h->type != DSOCK_MSG_PEER_REQ)) {
		int hello = r == 0 && h->type == DSOCK_MSG_HELLO;
		r = r ? r : hello ? on_hello(c, payload, fd) : 0;
		if (fd >= 0)
			close(fd);
		if (r || hello)
			return r;
	}
	switch (h->type) {
	case DSOCK_MSG_HELLO:
		return 0;
	case DSOCK_MSG_OFFER: {
		struct dd_reply_to to = { .slot = slot, .gen = c->gen, .proc = c->proc };
		if (c->role != ROLE_LIB) {
			close(fd);
			return -EPROTO;
		}
		dd_pairing_offer(&to, payload, fd);
		return 0;
	}
	case DSOCK_MSG_FETCH: {
		struct dd_reply_to to = { .slot = slot, .gen = c->gen, .proc = c->proc };
		if (c->role != ROLE_LIB) {
			close(fd);
			return -EPROTO;
		}
		dd_pairing_fetch(&to, payload, fd);
		return 0;
	}
	case DSOCK_MSG_PEER_REQ: {
		/* on a connection of its own, with or without a HELLO (a vfork
		 * child, a program that closed its fds before exec): the socket
		 * it sends is the proof */
		struct dd_reply_to to = { .slot = slot, .gen = c->gen, .proc = NULL };
		struct dsock_msg_peer_req q;
		int err = 0, pfd;
		memcpy(&q, payload, sizeof(q));
		if (c->role == ROLE_CLI) {
			close(fd);
			return -EPROTO;
		}
		pfd = dd_peer_socket(fd, c->cred.uid, &err);
		close(fd);
		struct dsock_msg_result res = { .sock_id = q.sock_id, .result = DSOCK_RES_PEER,
						.reason = pfd < 0 ? (uint32_t)err : 0 };
		if (pfd >= 0)
			DSOCK_INFO("lent the peer's socket of a connection to pid %d for a hand-over", c->cred.pid);
		else
			DSOCK_INFO("no peer socket for pid %d's hand-over: %s", c->cred.pid, strerror(err));
		dd_send_result(&to, &res, pfd);
		if (pfd >= 0)
			close(pfd);
		return 0;
	}
	case DSOCK_MSG_SOCK_EVENT:
		if (c->role != ROLE_LIB)
			return -EPROTO;
		stats.events++;
		return dd_event_apply(c->proc, payload, 0, h->seq);
	case DSOCK_MSG_EVENTS: /* read above */
		return c->role == ROLE_LIB ? 0 : -EPROTO;
	case DSOCK_MSG_STAT_REQ:
		if (c->role == ROLE_LIB)
			return -EPROTO;
		c->role = ROLE_CLI;
		stats.stat_reqs++;
		return dd_stat_send(c->fd, &c->cred, &stats, nclients);
	case DSOCK_MSG_SHUTDOWN:
		if (c->role == ROLE_LIB)
			return -EPROTO;
		if (c->cred.uid != 0 && c->cred.uid != getuid()) {
			struct dsock_msg_error e = { .err = EPERM };
			DSOCK_WARN("uid %u (pid %d) may not stop the daemon", c->cred.uid, c->cred.pid);
			send_msg(c->fd, DSOCK_MSG_ERROR, &e, sizeof(e));
			return 0;
		}
		send_msg(c->fd, DSOCK_MSG_ACK, NULL, 0);
		DSOCK_INFO("shutdown requested by pid %d", c->cred.pid);
		return 1;
	default: /* replies are never valid requests */
		return -EPROTO;
	}
}

static void on_accept(int lfd)
{
	struct timeval tv = { .tv_sec = 1 };
	socklen_t len = sizeof(struct ucred);
	struct epoll_event ev = { .events = EPOLLIN };
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	int slot = -1;

	if (fd < 0)
		return;
	for (int i = 0; i < nclients_max; i++) {
		if (clients[i].fd < 0) {
			slot = i;
			break;
		}
	}
	if (slot < 0) {
		stats.refused++;
		DSOCK_WARN("client limit (%d) reached; refusing a connection", nclients_max);
		close(fd);
		return;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &clients[slot].cred, &len) < 0) {
		close(fd);
		return;
	}
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	clients[slot].fd = fd;
	clients[slot].role = ROLE_NEW;
	clients[slot].gen = next_gen++;
	ev.data.u32 = (uint32_t)slot;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
		close(fd);
		clients[slot].fd = -1;
		return;
	}
	nclients++;
	stats.accepted++;
}

/* Returns 1 when the daemon should stop. */
static int on_readable(uint32_t slot)
{
	static union { struct dsock_msg_hdr h; char b[DSOCK_MSG_MAX + 1]; } m;
	union dsock_cmsg_one cm;
	struct dd_client *c = &clients[slot];

	for (int i = 0; i < 64; i++) { /* bounded: one client cannot starve others */
		struct iovec v = { m.b, sizeof(m.b) };
		struct msghdr mh = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = cm.b,
				     .msg_controllen = sizeof(cm.b) };
		ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC);
		int r, fd;

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		if (n <= 0) {
			client_close(slot);
			return 0;
		}
		/* every fd the kernel installed is taken; at most one is kept */
		fd = dsock_cmsg_take_fd(&mh, close);
		if (fd == -2) {
			r = -EBADMSG;
		} else if ((size_t)n > DSOCK_MSG_MAX) {
			if (fd >= 0)
				close(fd);
			r = -EMSGSIZE;
		} else {
			r = on_message(c, slot, m.b, (size_t)n, fd);
			if (r == 0 && c->proc)
				c->proc->seen_seq = m.h.seq; /* (see dd_events_drain) */
		}
		if (r == 1)
			return 1;
		if (r < 0) {
			stats.bad_msgs++;
			DSOCK_WARN("dropping client pid %d uid %u: %s (message of %zd bytes)",
				   c->cred.pid, c->cred.uid, strerror(-r), n);
			client_close(slot);
			return 0;
		}
	}
	return 0;
}

int dd_serve(int lfd, const struct dd_config *cfg)
{
	struct epoll_event ev = { .events = EPOLLIN };
	sigset_t mask;
	int sfd, stop = 0;

	nclients_max = cfg->max_clients;
	clients = calloc((size_t)nclients_max, sizeof(*clients));
	if (!clients)
		return 1;
	for (int i = 0; i < nclients_max; i++)
		clients[i].fd = -1;
	stats.start = time(NULL);
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* a file-size limit must fail the connection memory (EFBIG: that
	 * pairing stays on the kernel), not kill the daemon */
	signal(SIGXFSZ, SIG_IGN);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (sfd < 0 || ep < 0)
		return 1;
	ev.data.u32 = SLOT_LISTEN;
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	ev.data.u32 = SLOT_SIGNALS;
	epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev);
	DSOCK_INFO("serving on %s", cfg->socket_path);
	if (dd_hosts_start(cfg->socket_path, ep, SLOT_HOSTS) < 0)
		return 1;
	int behind = 0;
	while (!stop) {
		struct epoll_event evs[64];
		int t = dd_pairing_tick(behind), w = dd_ident_watch(0), h = dd_hosts_tick();
		if (w >= 0 && (t < 0 || w < t))
			t = w;
		if (h >= 0 && (t < 0 || h < t))
			t = h;
		/* outboxes that wait for fds in flight are tried every few ms */
		if (nbacklogged && (t < 0 || t > OUT_RETRY_MS))
			t = OUT_RETRY_MS;
		int n = epoll_wait(ep, evs, 64, t);
		/* (a look that found work: the mates of expiring offers may be
		 * among what waits; a timeout means nothing did) */
		behind = n > 0;

		for (int i = 0; i < n && !stop; i++) {
			uint32_t slot = evs[i].data.u32;
			if (slot == SLOT_LISTEN) {
				on_accept(lfd);
			} else if (slot >= SLOT_HOSTS && slot - SLOT_HOSTS <= 4096) {
				dd_hosts_event(slot, evs[i].events);
			} else if (slot == SLOT_SIGNALS) {
				struct signalfd_siginfo si;
				if (read(sfd, &si, sizeof(si)) != sizeof(si))
					continue;
				if (si.ssi_signo == SIGHUP) { /* a look at the programs, the allow-list again */
					dd_ident_watch(1);
					dd_hosts_reload();
				} else {
					DSOCK_INFO("signal %u: shutting down", si.ssi_signo);
					stop = 1;
				}
			} else if (clients[slot].fd >= 0) {
				if (evs[i].events & EPOLLOUT && clients[slot].out.n)
					flush_out(slot);
				if (evs[i].events & ~EPOLLOUT)
					stop = on_readable(slot);
			}
		}
		for (int i = 0; nbacklogged && i < nclients_max; i++)
			if (clients[i].fd >= 0 && clients[i].out.n && !clients[i].out_armed)
				flush_out((uint32_t)i);
	}
	for (int i = 0; i < nclients_max; i++)
		if (clients[i].fd >= 0)
			client_close((uint32_t)i);
	dd_hosts_stop();
	free(clients);
	return 0;
}

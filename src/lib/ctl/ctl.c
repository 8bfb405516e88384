#include "lib/ctl/ctl.h"
#include "lib/base/clock.h"
#include "lib/base/guard.h"
#include "lib/base/proc.h"
#include "lib/base/real.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/fdpass.h"
#include "common/proto.h"
#include "common/reason.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <time.h>

static _Atomic int ctl_fd = -1;
static _Atomic unsigned ctl_gen; /* connections to a daemon so far */

unsigned dsock_ctl_gen(void)
{
	return atomic_load(&ctl_gen);
}
static atomic_flag ctl_busy = ATOMIC_FLAG_INIT;
static uint32_t ctl_seq;
static uint32_t ctl_ordered_seq; /* of the last message sent, doorbells aside */
static int64_t ctl_next_try_ns;
static _Atomic unsigned long ctl_dropped;
static const struct dsock_mail_page *mail;  /* the daemon writes it */
static uint64_t mail_seen;
static struct dsock_ev_ring *evr;  /* after the mail page: we write it */
static uint64_t evr_tail;          /* our own count (the ring's may be stale) */
static void (*result_handler[DSOCK_PATH_MAX + 1])(const struct dsock_msg_result *r, int fd);

#define OFFER_ROOM_WAITS 5 /* waits for room in the daemon's queue, */
#define OFFER_ROOM_MS 10   /* ... each at most this long */
#define EVENT_ROOM_WAITS 5 /* the same for an event */
#define EVENT_ROOM_MS 10
#define OFFER_ROOM_OFF_NS 1000000000LL /* no such waits this long after one failed */
#define EVENT_LOCK_NS 20000000LL /* an event waits this long for another thread's send */
static _Atomic int64_t room_waits_off;

static __thread int ctl_mine; /* this thread holds the lock (a signal
				* handler on it must not wait for it) */

static int ctl_trylock(void)
{
	if (atomic_flag_test_and_set_explicit(&ctl_busy, memory_order_acquire))
		return 0;
	ctl_mine = 1;
	return 1;
}

static void ctl_unlock(void)
{
	ctl_mine = 0;
	atomic_flag_clear_explicit(&ctl_busy, memory_order_release);
}

/* An event that could not go: counted where the daemon reads it. */
static void lost_event(void)
{
	atomic_fetch_add(&ctl_dropped, 1);
	if (evr)
		__atomic_store_n(&evr->lost, atomic_load(&ctl_dropped), __ATOMIC_RELAXED);
}

static int ctl_connect_locked(unsigned flags, int ppid, uint64_t parent_evpos, uint32_t parent_seq);
/* The socket layer's replay (dsock_ctl_set_replay), or NULL. */
static void (*replay)(int listeners_only);

static void replay_all_locked(int listeners_only)
{
	if (replay)
		replay(listeners_only);
}

static int ctl_send_fd_locked(uint16_t type, const void *payload, size_t len, int pass_fd);

/* Forgets the daemon's socket: it is gone, or it let go of us.  The next
 * attempt to reach a daemon comes at once (retry_now) or after a second. */
static void lose_daemon_locked(int retry_now)
{
	int fd = atomic_exchange(&ctl_fd, -1);

	if (fd >= 0)
		dsock_real.close(fd);
	ctl_next_try_ns = retry_now ? 0 : dsock_mono_ns() + 1000000000;
}

/* Sends one message.  On a dead daemon (it restarted, or died) forgets the
 * socket and, when may_reconnect, tries a new daemon at once: register,
 * replay what this process holds, and send the message again.  Locked. */
static void ctl_send_locked(uint16_t type, const void *payload, size_t len, int may_reconnect)
{
	int r;

	if (atomic_load(&ctl_fd) < 0)
		return; /* (not a lost daemon: no reconnect from here) */
	r = ctl_send_fd_locked(type, payload, len, -1); /* -EMSGSIZE above 256 */
	/* a full queue: the daemon is behind; an event waits for room a
	 * little (the lock held: other threads' events queue behind it) */
	for (int i = 0; r == -EAGAIN && type == DSOCK_MSG_SOCK_EVENT && i < EVENT_ROOM_WAITS &&
			dsock_mono_ns() >= atomic_load_explicit(&room_waits_off, memory_order_relaxed); i++) {
		struct pollfd p = { .fd = atomic_load(&ctl_fd), .events = POLLOUT };
		if (p.fd < 0 || dsock_real.poll(&p, 1, EVENT_ROOM_MS) <= 0) {
			atomic_store_explicit(&room_waits_off, dsock_mono_ns() + OFFER_ROOM_OFF_NS,
					      memory_order_relaxed);
			break;
		}
		r = ctl_send_fd_locked(type, payload, len, -1);
	}
	if (r == -EAGAIN)
		lost_event();
	else if (r == -ENOTCONN && may_reconnect && ctl_connect_locked(0, 0, 0, 0) == 0) {
		replay_all_locked(0);
		ctl_send_locked(type, payload, len, 0);
	}
}

/* The application expects the lowest free fd numbers to be its own: park
 * the control socket near the top of the fd limit. */
static int move_high(int fd)
{
	struct rlimit rl;
	int hi;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < 256)
		return fd;
	hi = dsock_real.fcntl(fd, F_DUPFD_CLOEXEC,
			      (int)((rl.rlim_cur > 65536 ? 65536 : rl.rlim_cur) - 64));
	if (hi < 0)
		return fd;
	dsock_real.close(fd);
	return hi;
}

/* Forgets the mail page and event ring (a fork child must not write its
 * parent's ring). */
static void drop_mail_page(void)
{
	if (mail)
		munmap((void *)mail, DSOCK_MAIL_SIZE);
	mail = NULL;
	evr = NULL;
}

/* A fresh mail page and event ring for this process: a sealed memfd
 * (proto.h, DSOCK_MAIL_SIZE).  Returns its fd (to pass in HELLO) or -1. */
static int new_mail_page(void)
{
	int fd = memfd_create("dsock-mail", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	void *p;

	drop_mail_page();
	if (fd < 0)
		return -1;
	if (ftruncate(fd, DSOCK_MAIL_SIZE) < 0 ||
	    dsock_real.fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0 ||
	    (p = mmap(NULL, DSOCK_MAIL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		dsock_real.close(fd);
		return -1;
	}
	mail = p;
	mail_seen = 0;
	evr = (struct dsock_ev_ring *)((char *)p + DSOCK_EVRING_OFF);
	evr_tail = 0;
	return fd;
}

/* Puts an event in the ring (locked): 0, or -ENOSPC when it is full (or
 * its head makes no sense): then it goes as a message, which the daemon
 * handles only after reading the ring, so the order holds.  Rings the
 * daemon when the ring becomes half full. */
static int ring_put_locked(const struct dsock_msg_sock_event *m)
{
	uint64_t h;

	if (!evr)
		return -ENOSPC;
	h = __atomic_load_n(&evr->head, __ATOMIC_ACQUIRE);
	if (h > evr_tail || evr_tail - h >= DSOCK_EVRING_SLOTS)
		return -ENOSPC;
	memcpy(&evr->ev[evr_tail % DSOCK_EVRING_SLOTS], m, sizeof(*m));
	evr->after[evr_tail % DSOCK_EVRING_SLOTS] = ctl_ordered_seq;
	/* release: the daemon sees the slot before the count */
	__atomic_store_n(&evr->tail, ++evr_tail, __ATOMIC_RELEASE);
	if (evr_tail - h == DSOCK_EVRING_SLOTS / 2)
		ctl_send_locked(DSOCK_MSG_EVENTS, NULL, 0, 0);
	return 0;
}

static int ctl_connect_locked(unsigned flags, int ppid, uint64_t parent_evpos, uint32_t parent_seq)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct dsock_msg_hello h;
	int fd, mfd;

	ctl_next_try_ns = dsock_mono_ns() + 1000000000;
	if (dsock_socket_path(sa.sun_path, sizeof(sa.sun_path)))
		return -ENAMETOOLONG;
	fd = dsock_real.socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	fd = move_high(fd);
	if (dsock_real.connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		DSOCK_DBG("no daemon at %s: %s", sa.sun_path, strerror(e));
		dsock_real.close(fd);
		return -e;
	}
	atomic_fetch_add(&ctl_gen, 1);
	atomic_store(&ctl_fd, fd);
	memset(&h, 0, sizeof(h));
	h.flags = flags | (dsock_proc.enabled ? 0 : DSOCK_HELLO_DISABLED);
	h.ppid = ppid;
	h.parent_evpos = parent_evpos;
	h.parent_seq = parent_seq;
	snprintf(h.comm, sizeof(h.comm), "%.31s", dsock_proc.prog);
	for (char *c = h.comm; *c; c++)
		if (*c < 0x20 || *c > 0x7e)
			*c = '?';
	snprintf(h.lib_version, sizeof(h.lib_version), "%s", DSOCK_VERSION);
	mfd = new_mail_page();
	ctl_send_fd_locked(DSOCK_MSG_HELLO, &h, sizeof(h), mfd);
	if (mfd >= 0)
		dsock_real.close(mfd);
	return 0;
}

/* Sends one message with pass_fd attached (when >= 0).  Returns 0 or
 * -errno; a dead daemon is forgotten (the next event reconnects). */
static int ctl_send_fd_locked(uint16_t type, const void *payload, size_t len, int pass_fd)
{
	char buf[sizeof(struct dsock_msg_hdr) + 256];
	union dsock_cmsg_one cm;
	struct iovec v = { buf, sizeof(struct dsock_msg_hdr) + len };
	struct msghdr mh = { .msg_iov = &v, .msg_iovlen = 1 };
	int fd = atomic_load(&ctl_fd);

	if (fd < 0)
		return -ENOTCONN;
	if (len > 256)
		return -EMSGSIZE;
	dsock_msg_init((struct dsock_msg_hdr *)buf, type, len, ++ctl_seq);
	if (len)
		memcpy(buf + sizeof(struct dsock_msg_hdr), payload, len);
	dsock_cmsg_put_fd(&mh, &cm, pass_fd);
	if (dsock_real.sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) {
		if (type != DSOCK_MSG_EVENTS)
			ctl_ordered_seq = ctl_seq;
		return 0;
	}
	if (errno == EAGAIN || errno == ENOBUFS)
		return -EAGAIN;
	DSOCK_INFO("lost the daemon (%s)", strerror(errno));
	lose_daemon_locked(0);
	return -ENOTCONN;
}

/* Sends one socket event (locked): listeners (offers look for them) and
 * sockets a transport carries (their close frees the transport's
 * resources in the daemon) at once, the rest through the event ring.  1 if
 * the daemon is there to hear it. */
int dsock_ctl_event_locked(const struct dsock_msg_sock_event *m, int may_reconnect)
{
	if (m->event == DSOCK_EV_OPEN || m->path != DSOCK_PATH_KERNEL || atomic_load(&ctl_fd) < 0 ||
	    ring_put_locked(m))
		ctl_send_locked(DSOCK_MSG_SOCK_EVENT, m, sizeof(*m), may_reconnect);
	return atomic_load(&ctl_fd) >= 0;
}

static void ctl_reconnect_locked(void)
{
	if (atomic_load(&ctl_fd) >= 0 || dsock_mono_ns() < ctl_next_try_ns)
		return;
	if (ctl_connect_locked(0, 0, 0, 0) == 0) {
		DSOCK_INFO("connected to the daemon");
		replay_all_locked(0);
	}
}

static unsigned hello_flags;

void dsock_ctl_start(void)
{
	DSOCK_GUARD_ENTER();
	if (ctl_trylock()) {
		/* (flags set at start-up: an adopter of pooled connections
		 * names its parent, whose links' pools it counts in) */
		ctl_connect_locked(hello_flags, hello_flags ? (int)getppid() : 0, 0, 0);
		replay_all_locked(0);
		ctl_unlock();
	}
	DSOCK_GUARD_EXIT();
}

void dsock_ctl_hello_flags(unsigned flags)
{
	hello_flags = flags;
}

void dsock_ctl_fork_child(int ppid)
{
	int fd = atomic_exchange(&ctl_fd, -1);
	uint64_t evpos = evr_tail; /* the parent's, as it forked */
	uint32_t seq = ctl_seq;

	/* one thread now: a sender that held the lock does not exist here */
	ctl_unlock();
	DSOCK_GUARD_ENTER();
	if (fd >= 0)
		dsock_real.close(fd); /* our copy only; the parent keeps its own */
	drop_mail_page();
	if (ctl_trylock()) {
		if (ctl_connect_locked(DSOCK_HELLO_FORKED | hello_flags, ppid, evpos, seq) == 0)
			replay_all_locked(1);
		ctl_unlock();
	}
	DSOCK_GUARD_EXIT();
}

void dsock_ctl_set_replay(void (*fn)(int listeners_only))
{
	replay = fn;
}

/* This thread delivers a result (holding the lock): the events its
 * handler reports (a connection refused or sent to the kernel) go out
 * under that lock, where a trylock of their own would drop them. */
static __thread int delivering;

int dsock_ctl_event(const struct dsock_msg_sock_event *m)
{
	int r = -EAGAIN;

	DSOCK_GUARD_ENTER();
	if (delivering) {
		r = dsock_ctl_event_locked(m, 0);
	} else if (ctl_trylock()) {
		if (mail && __atomic_load_n(&mail->closed, __ATOMIC_ACQUIRE)) {
			/* the daemon left us: no send fails to tell us so,
			 * since most events go to the ring */
			lose_daemon_locked(1);
			drop_mail_page();
		}
		ctl_reconnect_locked();
		r = dsock_ctl_event_locked(m, 1);
		ctl_unlock();
	} else if (ctl_mine) {
		/* a signal handler that interrupted this thread's send */
		lost_event();
	} else {
		/* another thread sends: a ring slot or a message, soon done */
		for (int64_t until = dsock_mono_ns() + EVENT_LOCK_NS;;) {
			sched_yield();
			if (ctl_trylock()) {
				r = dsock_ctl_event_locked(m, 1);
				ctl_unlock();
				break;
			}
			if (dsock_mono_ns() >= until) {
				lost_event();
				break;
			}
		}
	}
	DSOCK_GUARD_EXIT();
	return r;
}


int dsock_ctl_offer(uint64_t sock_id, int fd, unsigned role, unsigned transport, unsigned proof)
{
	struct dsock_msg_offer m = { .sock_id = sock_id, .role = role, .transport = (uint16_t)transport,
				     .proof = (uint16_t)proof };
	int r = -EAGAIN, full = 0;

	DSOCK_GUARD_ENTER();
	/* an offer is worth a short wait for the lock, unlike an event, and
	 * for room in the daemon's queue (it holds 512 messages of ours): a
	 * process that opens thousands of connections at once offers faster
	 * than a busy daemon takes them, and an offer that waits a round of
	 * the application's calls may find its other end expired */
	for (int i = 0; i < 1000 && r == -EAGAIN; i++) {
		if (ctl_trylock()) {
			ctl_reconnect_locked();
			r = ctl_send_fd_locked(DSOCK_MSG_OFFER, &m, sizeof(m), fd);
			if (r == -ENOTCONN && ctl_connect_locked(0, 0, 0, 0) == 0) {
				replay_all_locked(0);
				r = ctl_send_fd_locked(DSOCK_MSG_OFFER, &m, sizeof(m), fd);
			}
			ctl_unlock();
			if (r != -EAGAIN)
				break;
			if (full++ < OFFER_ROOM_WAITS &&
			    dsock_mono_ns() >= atomic_load_explicit(&room_waits_off, memory_order_relaxed)) {
				struct pollfd p = { .fd = atomic_load(&ctl_fd), .events = POLLOUT };
				if (p.fd >= 0)
					dsock_real.poll(&p, 1, OFFER_ROOM_MS);
				continue;
			}
		}
		sched_yield();
	}
	/* a daemon that took nothing in all that time (stopped, or stuck)
	 * costs no more such waits for a while */
	if (r == -EAGAIN && full >= OFFER_ROOM_WAITS)
		atomic_store_explicit(&room_waits_off, dsock_mono_ns() + OFFER_ROOM_OFF_NS, memory_order_relaxed);
	DSOCK_GUARD_EXIT();
	return r;
}

void dsock_ctl_set_result_handler(unsigned transport, void (*fn)(const struct dsock_msg_result *r, int fd))
{
	if (transport <= DSOCK_PATH_MAX)
		result_handler[transport] = fn;
}

/* Hands one received message (n bytes, with fd got or -1) to the result
 * handler of the transport it names; anything else is refused and its fd
 * closed.  Locked. */
static void deliver_locked(const char *b, ssize_t n, int got)
{
	const struct dsock_msg_hdr *h = (const void *)b;
	struct dsock_msg_result r;

	/* the daemon is trusted more than a peer, but still checked */
	if (got == -2 || dsock_msg_check(b, (size_t)n) || h->type != DSOCK_MSG_RESULT) {
		if (got >= 0)
			dsock_real.close(got);
		return;
	}
	memcpy(&r, b + sizeof(*h), sizeof(r));
	/* a fetch answer nobody waits for now, or a transport not here */
	if (r.result == DSOCK_RES_FETCHED || r.result == DSOCK_RES_PEER || !result_handler[r.transport]) {
		if (got >= 0)
			dsock_real.close(got);
		return;
	}
	/* PAIRED comes with its resource unless that is part of a pool the
	 * process holds; LINK and POOL with one (given) or none (gone), BELL
	 * with one */
	int want = r.result == DSOCK_RES_PAIRED && !r.pool;
	if (r.result == DSOCK_RES_BELL && got < 0)
		return;
	if (r.result != DSOCK_RES_LINK && r.result != DSOCK_RES_POOL && r.result != DSOCK_RES_BELL &&
	    want != (got >= 0)) {
		if (got >= 0)
			dsock_real.close(got);
		r.result = DSOCK_RES_KERNEL;
		r.reason = DSOCK_R_RESOURCE;
		got = -1;
	}
	result_handler[r.transport](&r, got);
}

/* Reads every waiting message from the daemon.  Locked. */
static void read_mail_locked(void)
{
	union { struct dsock_msg_hdr h; char b[DSOCK_MSG_MAX + 1]; } m;
	union dsock_cmsg_one cm;
	int fd = atomic_load(&ctl_fd);

	if (mail)
		mail_seen = __atomic_load_n(&mail->mail_seq, __ATOMIC_ACQUIRE);
	while (fd >= 0) {
		struct iovec v = { m.b, sizeof(m.b) };
		struct msghdr mh = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = cm.b,
				     .msg_controllen = sizeof(cm.b) };
		ssize_t n = dsock_real.recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

		if (n <= 0)
			break;
		delivering = 1;
		deliver_locked(m.b, n, dsock_cmsg_take_fd(&mh, dsock_real.close));
		delivering = 0;
	}
}

/* 1 if the message (n bytes, fd got) is the daemon's FETCHED answer for
 * sock_id and transport. */
static int is_fetch_answer(const char *b, ssize_t n, int got, uint64_t sock_id, unsigned transport)
{
	const struct dsock_msg_hdr *h = (const void *)b;
	struct dsock_msg_result r;

	if (got == -2 || dsock_msg_check(b, (size_t)n) || h->type != DSOCK_MSG_RESULT)
		return 0;
	memcpy(&r, b + sizeof(*h), sizeof(r));
	return r.result == DSOCK_RES_FETCHED && r.sock_id == sock_id && r.transport == transport;
}

int dsock_ctl_fetch(unsigned transport, unsigned long long sock_id, int sock_fd, int timeout_ms)
{
	struct dsock_msg_fetch q = { .sock_id = sock_id, .transport = (uint16_t)transport };
	union { struct dsock_msg_hdr h; char b[DSOCK_MSG_MAX + 1]; } m;
	union dsock_cmsg_one cm;
	int64_t end = dsock_mono_ns() + (int64_t)timeout_ms * 1000000;
	int r = -ETIMEDOUT, fd;

	DSOCK_GUARD_ENTER();
	while (!ctl_trylock()) {
		if (dsock_mono_ns() >= end) {
			DSOCK_GUARD_EXIT();
			return -ETIMEDOUT;
		}
		sched_yield();
	}
	fd = atomic_load(&ctl_fd);
	if (fd < 0 || ctl_send_fd_locked(DSOCK_MSG_FETCH, &q, sizeof(q), sock_fd) < 0)
		r = -ENOTCONN;
	else
		for (int64_t left; r == -ETIMEDOUT && (left = end - dsock_mono_ns()) > 0;) {
			struct pollfd p = { .fd = fd, .events = POLLIN };
			struct iovec v = { m.b, sizeof(m.b) };
			struct msghdr mh = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = cm.b,
					     .msg_controllen = sizeof(cm.b) };
			if (dsock_real.poll(&p, 1, (int)(left / 1000000) + 1) < 0 && errno != EINTR)
				r = -errno;
			ssize_t n = dsock_real.recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
				r = -ENOTCONN;
				break;
			}
			if (n < 0)
				continue;
			int got = dsock_cmsg_take_fd(&mh, dsock_real.close);
			if (is_fetch_answer(m.b, n, got, sock_id, transport)) {
				r = got >= 0 ? got : -ENOENT;
				break;
			}
			deliver_locked(m.b, n, got); /* someone else's pairing result */
		}
	ctl_unlock();
	DSOCK_GUARD_EXIT();
	return r;
}

void dsock_ctl_mail_until(int (*done)(void *arg), void *arg, int timeout_ms)
{
	int64_t end = dsock_mono_ns() + timeout_ms * 1000000LL;

	while (!done(arg) && dsock_mono_ns() < end) {
		struct pollfd p = { .fd = dsock_ctl_fd(), .events = POLLIN };
		dsock_ctl_read_mail();
		if (done(arg) || p.fd < 0)
			break;
		dsock_real.poll(&p, 1, 5);
	}
}

void dsock_ctl_poll_mail(void)
{
	if (mail && __atomic_load_n(&mail->mail_seq, __ATOMIC_ACQUIRE) == mail_seen)
		return;
	dsock_ctl_read_mail();
}

void dsock_ctl_read_mail(void)
{
	DSOCK_GUARD_ENTER();
	if (ctl_trylock()) {
		read_mail_locked();
		ctl_unlock();
	}
	DSOCK_GUARD_EXIT();
}

int dsock_ctl_fd(void)
{
	return atomic_load_explicit(&ctl_fd, memory_order_relaxed);
}

void dsock_ctl_fd_lost(unsigned first, unsigned last)
{
	int fd = atomic_load(&ctl_fd);

	if (fd < 0 || (unsigned)fd < first || (unsigned)fd > last)
		return;
	/* wait for an in-flight send: after this the number may be reused by
	 * the application and must never be written to by us again */
	while (!ctl_trylock())
		sched_yield();
	atomic_store(&ctl_fd, -1);
	ctl_next_try_ns = dsock_mono_ns() + 1000000000;
	ctl_unlock();
}

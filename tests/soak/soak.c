/* The integrity soak: many TCP connections between two processes, random
 * write and read sizes, peeks, vectored I/O, shutdowns, early closes and
 * forks, every byte checked.
 *
 * Each connection carries a stream named by a random 64-bit id: the client
 * sends a 16-byte header {id, length} and then `length` bytes of the id's
 * pseudo-random stream; the server checks every byte and echoes the same
 * stream back, which the client checks.  A byte lost, duplicated,
 * reordered or delivered to another connection breaks the check.
 *
 *   soak [-s SECONDS] [-c CONCURRENT] [-m MAX_STREAM] [-r SEED] [-f N] [-a N] [-e] [-p PORTS]
 *   (-f: one step in N forks a helper, default 500; -a: one stream in N is
 *   cut short by the client, default 20; 0: never; -c: up to 16,384; -e:
 *   both processes wait in epoll_wait, level-triggered, instead of poll,
 *   which looks at every connection each time: with thousands of
 *   connections at once; -p: the client's connections come from a window
 *   of PORTS ports below the ephemeral range, in turn, so that addresses
 *   come back within a fraction of a second)
 *   SOAK_HOLD=1: a process that stalls sleeps 300 s before it reports, for
 *   a debugger (the report's own reads would change the state).
 *
 * The server is this process, the client a fork child; both fork helpers
 * now and then that take a connection over.  Exit status 0 only if every
 * byte of every finished stream matched; the last line is
 *   "soak: N streams (A aborted, F forked), X MiB each way, E errors". */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXC 16384

struct conn {
	int fd;
	uint64_t id, len;      /* from the header */
	unsigned char hdr[16];
	uint64_t hdr_got;      /* header bytes exchanged */
	uint64_t tx, rx;       /* stream bytes sent and checked */
	uint64_t abort_at;     /* client: close early once tx reaches this (0: never) */
	int shut;              /* our SHUT_WR done */
	int eof;               /* the peer's EOF seen (after the whole stream) */
};

static uint64_t rng_state;
static struct conn cs[MAXC];
static int ncs, errors, is_client, use_epoll;
static unsigned fork_one_in = 500, abort_one_in = 20; /* 0: never */
static unsigned long n_streams, n_aborted, n_forked;
static unsigned long long bytes_moved;

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rnd(uint64_t n)
{
	return n ? splitmix(&rng_state) % n : 0;
}

/* Byte p of stream id (each block of 8 from one hash). */
static void stream_bytes(uint64_t id, uint64_t p, unsigned char *out, size_t n)
{
	uint64_t blk = UINT64_MAX, v = 0;
	for (size_t i = 0; i < n; i++, p++) {
		if (p / 8 != blk) {
			uint64_t x = id ^ ((p / 8) * 0x2545f4914f6cdd1dull);
			blk = p / 8;
			v = splitmix(&x);
		}
		out[i] = (unsigned char)(v >> (8 * (p % 8)));
	}
}

static void fail(struct conn *c, const char *what, uint64_t at)
{
	fprintf(stderr, "soak %s: stream %016llx: %s at byte %llu of %llu\n", is_client ? "client" : "server",
		(unsigned long long)c->id, what, (unsigned long long)at, (unsigned long long)c->len);
	errors++;
}

/* What the bytes from a wrong one on are: zeros, this stream's bytes from
 * another offset (within 4 MiB: a ring's lap), or neither; and how far the
 * difference goes, so that a report tells overwritten from stale memory. */
static void explain(const struct conn *c, const unsigned char *buf, size_t n, size_t i)
{
	size_t k = n - i < 16 ? n - i : 16, zeros = 0, bad = 0, last_bad = i;
	unsigned char want[16];
	char got_hex[40] = "", want_hex[40] = "";

	stream_bytes(c->id, c->rx + i, want, k);
	for (size_t j = 0; j < k; j++) {
		snprintf(got_hex + 2 * j, 3, "%02x", buf[i + j]);
		snprintf(want_hex + 2 * j, 3, "%02x", want[j]);
	}
	for (size_t j = i; j < n; j++) {
		unsigned char w;
		stream_bytes(c->id, c->rx + j, &w, 1);
		if (buf[j] != w) {
			bad++;
			last_bad = j;
			zeros += !buf[j];
		}
	}
	fprintf(stderr, "soak %s: stream %016llx: read of %zu at %llu, wrong from +%zu: got %s want %s; %zu wrong "
		"(%zu of them zero), the last at +%zu\n", is_client ? "client" : "server", (unsigned long long)c->id, n,
		(unsigned long long)c->rx, i, got_hex, want_hex, bad, zeros, last_bad);
	if (k < 8)
		return;
	uint64_t at = c->rx + i, lo = at > (4u << 20) ? at - (4u << 20) : 0;
	for (uint64_t p = lo; p < at + (4u << 20); p++) {
		unsigned char s[16];
		stream_bytes(c->id, p, s, k);
		if (p != at && !memcmp(s, buf + i, k)) {
			fprintf(stderr, "soak %s: stream %016llx: those bytes are the stream's at %llu (%+lld)\n",
				is_client ? "client" : "server", (unsigned long long)c->id, (unsigned long long)p,
				(long long)(p - at));
			return;
		}
	}
}

/* Checks n received bytes at stream offset c->rx. */
static int check(struct conn *c, const unsigned char *buf, size_t n)
{
	unsigned char want[65536];
	stream_bytes(c->id, c->rx, want, n);
	for (size_t i = 0; i < n; i++)
		if (buf[i] != want[i]) {
			fail(c, "wrong byte", c->rx + i);
			explain(c, buf, n, i);
			return -1;
		}
	return 0;
}

/* Sends up to a random amount of the stream (the server only what it has
 * checked: it echoes).  Returns -1 when the connection is over. */
static int do_send(struct conn *c)
{
	unsigned char buf[65536];
	uint64_t limit = is_client ? c->len : c->rx;
	size_t n = (size_t)(1 + rnd(sizeof(buf)));
	ssize_t r;

	if (c->tx >= limit)
		return 0;
	if (n > limit - c->tx)
		n = (size_t)(limit - c->tx);
	stream_bytes(c->id, c->tx, buf, n);
	if (rnd(4) == 0 && n > 1) {
		size_t h = n / 2;
		struct iovec v[2] = { { buf, h }, { buf + h, n - h } };
		r = writev(c->fd, v, 2);
	} else {
		r = send(c->fd, buf, n, MSG_NOSIGNAL);
	}
	if (r < 0)
		return errno == EAGAIN ? 0 : -1;
	c->tx += (uint64_t)r;
	if (is_client)
		bytes_moved += (uint64_t)r;
	return 0;
}

/* Reads and checks; returns 1 at EOF, -1 on error, else 0. */
static int do_recv(struct conn *c)
{
	unsigned char buf[65536], peek[65536];
	size_t n = (size_t)(1 + rnd(sizeof(buf)));
	ssize_t r, p = -1;

	if (c->hdr_got < 16) { /* server: the header first */
		r = recv(c->fd, c->hdr + c->hdr_got, 16 - c->hdr_got, 0);
		if (r <= 0)
			return r == 0 ? 1 : errno == EAGAIN ? 0 : -1;
		c->hdr_got += (uint64_t)r;
		if (c->hdr_got == 16) {
			memcpy(&c->id, c->hdr, 8);
			memcpy(&c->len, c->hdr + 8, 8);
		}
		return 0;
	}
	if (rnd(8) == 0) {
		p = recv(c->fd, peek, n, MSG_PEEK);
		if (p <= 0)
			return p == 0 ? 1 : errno == EAGAIN ? 0 : -1;
		n = (size_t)p; /* what a peek saw, a read must see */
	}
	if (rnd(4) == 0 && n > 1) {
		struct iovec v[2] = { { buf, n / 2 }, { buf + n / 2, n - n / 2 } };
		r = readv(c->fd, v, 2);
	} else {
		r = recv(c->fd, buf, n, 0);
	}
	if (r <= 0)
		return r == 0 ? 1 : errno == EAGAIN ? 0 : -1;
	if (p > 0 && (r != p || memcmp(buf, peek, (size_t)r))) {
		fail(c, "read differs from the peek before it", c->rx);
		return -1;
	}
	if (c->rx + (uint64_t)r > c->len) {
		fail(c, "bytes past the end of the stream", c->len);
		return -1;
	}
	if (check(c, buf, (size_t)r))
		return -1;
	c->rx += (uint64_t)r;
	return 0;
}

/* One step of a connection when its fd is ready; returns 1 when done. */
static int done(struct conn *c)
{
	if (c->hdr_got == 16 && c->rx == c->len && c->tx == c->len) {
		n_streams++;
		return 1;
	}
	return 0;
}

static int step(struct conn *c, short rev)
{
	if (is_client && done(c)) /* an empty stream */
		return 1;
	if (is_client && c->abort_at && c->tx >= c->abort_at) {
		if (rnd(2)) { /* with unread data this is a reset, as natively */
			struct linger lg = { 1, 0 };
			setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		}
		n_aborted++;
		return 1;
	}
	if (!c->eof && (rev & (POLLIN | POLLHUP | POLLERR))) {
		int r = do_recv(c);
		if (r == 1 && !is_client && c->hdr_got == 16 && c->rx == c->len) {
			c->eof = 1; /* the client shut down after its last byte: echo on */
		} else if (r != 0) {
			/* EOF or reset: the client must have had the whole echo; the
			 * server sees it early only from a client that gave up */
			if (is_client || !abort_one_in)
				fail(c, r == 1 ? "early EOF" : errno == ECONNRESET ? "reset" : "recv error", c->rx);
			else
				n_aborted++;
			return 1;
		}
	}
	if (rev & POLLOUT) {
		if (do_send(c) < 0) {
			if (is_client || !abort_one_in)
				fail(c, errno == ECONNRESET ? "send: reset" : errno == EPIPE ? "send: EPIPE" : "send error", c->tx);
			return 1;
		}
		if (!c->shut && c->hdr_got == 16 && c->tx == c->len && rnd(2)) {
			shutdown(c->fd, SHUT_WR); /* EOF after the last byte */
			c->shut = 1;
		}
	}
	return done(c);
}

/* -p: the client's connections come from a window of this many ports,
 * taken in turn from port_base on, so that a port comes back within a
 * fraction of a second, often right after a reset freed it (a reset
 * leaves no TIME_WAIT): a new connection then has the 4-tuple of one that
 * may still be offered for the fast path. */
static unsigned port_window, port_next;
static uint16_t port_base;

/* A socket connected to a (from the next free port of the window, with
 * -p), or -1. */
static int connect_from_window(const struct sockaddr_in *a)
{
	for (unsigned tries = 0; tries < (port_window ? port_window : 1); tries++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
		if (fd < 0)
			return -1;
		if (port_window) {
			struct sockaddr_in me = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
						  .sin_port = htons((uint16_t)(port_base + port_next++ % port_window)) };
			setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
			if (bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0) {
				close(fd);
				continue; /* in use (a listener, a live connection) */
			}
		}
		if (connect(fd, (const struct sockaddr *)a, sizeof(*a)) == 0)
			return fd;
		int e = errno;
		close(fd);
		if (!port_window || (e != EADDRNOTAVAIL && e != EADDRINUSE))
			return -1;
	}
	errno = EADDRNOTAVAIL;
	return -1;
}

/* The client's side of a new connection: header first, blocking. */
static int client_open(const struct sockaddr_in *a, uint64_t max)
{
	struct conn *c = &cs[ncs];
	int fd = connect_from_window(a);

	if (fd < 0) {
		perror("soak client: connect");
		return -1;
	}
	memset(c, 0, sizeof(*c));
	c->fd = fd;
	c->id = splitmix(&rng_state);
	c->len = rnd(4) == 0 ? rnd(64) : rnd(max + 1);
	c->abort_at = abort_one_in && rnd(abort_one_in) == 0 ? 1 + rnd(c->len + 1) : 0;
	memcpy(c->hdr, &c->id, 8);
	memcpy(c->hdr + 8, &c->len, 8);
	if (send(fd, c->hdr, 16, MSG_NOSIGNAL) != 16) {
		perror("soak client: header");
		close(fd);
		return -1;
	}
	c->hdr_got = 16;
	fcntl(fd, F_SETFL, O_NONBLOCK);
	ncs++;
	return 0;
}

static int want_out(const struct conn *c)
{
	return c->hdr_got == 16 && c->tx < (is_client ? c->len : c->rx);
}

/* A connection that made no progress: what a look without waiting finds
 * says whose fault (where = " helper" in a helper). */
static void report_stuck(const struct conn *c, short events, const char *where)
{
	unsigned char b;
	int inq = -1;
	ssize_t pk = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	int e = errno;

	ioctl(c->fd, FIONREAD, &inq);
	fprintf(stderr, "soak %s%s: fd %d stuck waiting for%s%s; a peek finds %zd (%s), FIONREAD %d, "
		"len %llu tx %llu rx %llu eof %d\n", is_client ? "client" : "server", where, c->fd,
		events & POLLIN ? " input" : "", events & POLLOUT ? " output" : "", pk,
		pk < 0 ? strerror(e) : "", inq, (unsigned long long)c->len, (unsigned long long)c->tx,
		(unsigned long long)c->rx, c->eof);
}

/* A helper process takes connection i over and finishes it alone (the
 * fast path's fork sharing, then the parent's close). */
static void fork_helper(int i)
{
	pid_t pid = fork();

	if (pid < 0)
		return;
	if (pid == 0) {
		struct conn c = cs[i];
		for (int j = 0; j < ncs; j++)
			if (j != i && cs[j].fd >= 0)
				close(cs[j].fd);
		rng_state ^= (uint64_t)getpid() << 17;
		errors = 0;
		for (;;) {
			struct pollfd p = { c.fd, (short)((c.eof ? 0 : POLLIN) | (want_out(&c) ? POLLOUT : 0)), 0 };
			if (poll(&p, 1, 10000) <= 0) {
				if (getenv("SOAK_HOLD")) {
					fprintf(stderr, "soak helper: pid %d (fd %d) holds for 300 s\n", (int)getpid(), c.fd);
					sleep(300);
				}
				report_stuck(&c, p.events, " helper");
				fail(&c, "helper: no progress for 10 s", c.rx);
				_exit(1);
			}
			if (step(&c, p.revents))
				break;
		}
		/* the three ways a helper ends: close and _exit, exit (atexit
		 * handlers run), _exit with the socket still open */
		switch (rnd(3)) {
		case 0: close(c.fd); _exit(errors ? 1 : 0);
		case 1: exit(errors ? 1 : 0);
		default: _exit(errors ? 1 : 0);
		}
	}
	n_forked++;
	close(cs[i].fd);
	cs[i].fd = -1;
}

/* The server's client process, once reap() below has collected it (its
 * waitpid(-1) may get there first: the server would then wait for a
 * client that is gone, and fail "no progress for 10 s"). */
static pid_t client_pid;
static int client_reaped, client_status;

static int reap(int nohang)
{
	int st, bad = 0;
	pid_t p;
	while ((p = waitpid(-1, &st, nohang ? WNOHANG : 0)) > 0 || (p < 0 && errno == EINTR))
		if (p > 0 && p == client_pid) {
			client_reaped = 1;
			client_status = st;
		} else if (p > 0 && (!WIFEXITED(st) || WEXITSTATUS(st))) {
			fprintf(stderr, "soak: helper %d failed (status %#x)\n", (int)p, st);
			bad++;
		}
	return bad;
}

static double elapsed(const struct timespec *t0)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - t0->tv_sec) + (now.tv_nsec - t0->tv_nsec) / 1e9;
}

/* -e: the set, and what each registration asks (by fd, as it was last
 * registered), so that only a change costs an epoll_ctl. */
static int ep = -1;
static short *asked; /* by fd */
static int *slot_of; /* by fd: the connection's index in cs */
static int fd_cap;

static short wants(const struct conn *c)
{
	return (short)((c->eof ? 0 : POLLIN) | (want_out(c) ? POLLOUT : 0));
}

/* Registers fd (index i) for what its connection wants now. */
static void ep_track(int i)
{
	int fd = cs[i].fd;
	short w = wants(&cs[i]);

	if (fd >= fd_cap) {
		fprintf(stderr, "soak: fd %d past the limit\n", fd);
		errors++;
		return;
	}
	slot_of[fd] = i;
	if (asked[fd] == w)
		return;
	struct epoll_event ev = { .events = (w & POLLIN ? EPOLLIN : 0) | (w & POLLOUT ? EPOLLOUT : 0), .data.fd = fd };
	if (epoll_ctl(ep, asked[fd] < 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev) < 0) {
		perror("soak: epoll_ctl");
		errors++;
	}
	asked[fd] = w;
}

/* One wait: ps[0..*n) gets the ready connections (their index in cs in
 * ready[]), *lready whether the listener is ready. */
static int ep_wait(int lfd, struct pollfd *ps, int *ready, int *n, int *lready)
{
	struct epoll_event evs[512];
	int r = epoll_wait(ep, evs, 512, 100);

	*n = 0;
	*lready = 0;
	for (int k = 0; k < r; k++) {
		int fd = evs[k].data.fd;
		short rev = (short)((evs[k].events & EPOLLIN ? POLLIN : 0) | (evs[k].events & EPOLLOUT ? POLLOUT : 0) |
				    (evs[k].events & EPOLLHUP ? POLLHUP : 0) | (evs[k].events & EPOLLERR ? POLLERR : 0));
		if (fd == lfd) {
			*lready = 1;
			continue;
		}
		ps[*n].fd = fd;
		ps[*n].revents = rev;
		ready[(*n)++] = slot_of[fd];
	}
	return r;
}

static void ep_forget(int fd)
{
	if (fd >= 0 && fd < fd_cap)
		asked[fd] = -1; /* (its close takes it out of the set) */
}

/* Drives every connection until each is done: the client opens new ones
 * for `secs`, the server accepts until the client process has exited. */
static void run_loop(int lfd, const struct sockaddr_in *a, int conc, uint64_t max, double secs, pid_t client)
{
	static struct pollfd ps[MAXC + 1];
	static int ready[MAXC];
	struct timespec t0, last;
	int client_done = 0;

	if (use_epoll) {
		struct rlimit rl;
		getrlimit(RLIMIT_NOFILE, &rl);
		fd_cap = (int)rl.rlim_cur;
		ep = epoll_create1(0);
		asked = malloc((size_t)fd_cap * sizeof(*asked));
		slot_of = malloc((size_t)fd_cap * sizeof(*slot_of));
		if (ep < 0 || !asked || !slot_of) {
			perror("soak: epoll");
			errors++;
			return;
		}
		memset(asked, 0xff, (size_t)fd_cap * sizeof(*asked));
		if (lfd >= 0) {
			struct epoll_event ev = { .events = EPOLLIN, .data.fd = lfd };
			epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	last = t0;
	for (;;) {
		int more = is_client && elapsed(&t0) < secs;
		while (more && ncs < conc && client_open(a, max) == 0)
			;
		if (is_client && !ncs)
			break;
		int n = 0, r, lready = 0;
		if (use_epoll) {
			for (int i = 0; i < ncs; i++)
				if (asked[cs[i].fd] != wants(&cs[i]) || slot_of[cs[i].fd] != i)
					ep_track(i);
			r = ep_wait(lfd, ps, ready, &n, &lready);
		} else {
			for (int i = 0; i < ncs; i++) {
				ps[n].fd = cs[i].fd;
				ps[n].events = wants(&cs[i]);
				ready[n] = i;
				n++;
			}
			if (!is_client) {
				ps[n].fd = lfd;
				ps[n].events = POLLIN;
				n++;
			}
			r = poll(ps, (nfds_t)n, 100);
			if (!is_client)
				lready = (ps[--n].revents & POLLIN) != 0;
		}
		if (!is_client && !client_done) {
			int st = client_status;
			if (client_reaped || waitpid(client, &st, WNOHANG) == client) {
				client_done = 1;
				if (!WIFEXITED(st) || WEXITSTATUS(st))
					errors++;
			}
		}
		errors += reap(1);
		if (r > 0) {
			clock_gettime(CLOCK_MONOTONIC, &last);
		} else if (!is_client && client_done && !ncs) {
			break; /* the client is gone, its connections are all done */
		} else if (elapsed(&last) > 10) {
			fprintf(stderr, "soak %s: no progress for 10 s with %d connections\n",
				is_client ? "client" : "server", ncs);
			if (getenv("SOAK_HOLD")) { /* debugging: stay for a debugger */
				fprintf(stderr, "soak %s: pid %d holds for 300 s\n", is_client ? "client" : "server",
					(int)getpid());
				sleep(300);
			}
			for (int i = 0; i < ncs; i++)
				report_stuck(&cs[i], wants(&cs[i]), "");
			errors++;
			return;
		}
		if (lready && ncs < MAXC) {
			/* (several at once: the epoll loop hears of the listener
			 * once per batch) */
			for (int k = 0; k < 64 && ncs < MAXC; k++) {
				int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
				if (fd < 0)
					break;
				memset(&cs[ncs], 0, sizeof(cs[ncs]));
				cs[ncs].fd = fd;
				ncs++;
			}
		}
		for (int k = 0; k < n; k++) {
			int i = ready[k];
			if (!ps[k].revents || cs[i].fd != ps[k].fd)
				continue;
			if (step(&cs[i], ps[k].revents)) {
				if (use_epoll)
					ep_forget(cs[i].fd);
				close(cs[i].fd);
				cs[i].fd = -1;
			} else if (fork_one_in && rnd(fork_one_in) == 0 && cs[i].hdr_got == 16) {
				/* the helper keeps the socket open: its registration
				 * here would outlive our close */
				if (use_epoll) {
					epoll_ctl(ep, EPOLL_CTL_DEL, cs[i].fd, NULL);
					ep_forget(cs[i].fd);
				}
				fork_helper(i);
			}
		}
		int k = 0; /* drop the finished and handed-over ones */
		for (int i = 0; i < ncs; i++)
			if (cs[i].fd >= 0)
				cs[k++] = cs[i];
		ncs = k;
	}
	errors += reap(0);
}

int main(int argc, char **argv)
{
	double secs = 10;
	int conc = 32, opt;
	uint64_t max = 1 << 20, seed = (uint64_t)time(NULL);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);

	while ((opt = getopt(argc, argv, "s:c:m:r:f:a:ep:")) != -1) {
		switch (opt) {
		case 's': secs = atof(optarg); break;
		case 'c': conc = atoi(optarg); break;
		case 'm': max = strtoull(optarg, NULL, 0); break;
		case 'r': seed = strtoull(optarg, NULL, 0); break;
		case 'f': fork_one_in = (unsigned)atoi(optarg); break;
		case 'a': abort_one_in = (unsigned)atoi(optarg); break;
		case 'e': use_epoll = 1; break;
		case 'p': port_window = (unsigned)atoi(optarg) > 30000 ? 30000 : (unsigned)atoi(optarg); break;
		default:
			fprintf(stderr, "usage: soak [-s SECONDS] [-c CONCURRENT] [-m MAX_STREAM] [-r SEED]\n"
				"            [-f FORK_ONE_IN] [-a ABORT_ONE_IN] [-e] [-p PORTS]   (0: never)\n");
			return 2;
		}
	}
	if (conc < 1 || conc > MAXC)
		conc = MAXC;
	if (conc > 256) { /* room for every connection in both processes */
		struct rlimit rl = { (rlim_t)conc * 2 + 256, (rlim_t)conc * 2 + 256 };
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	signal(SIGPIPE, SIG_IGN);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 4096) ||
	    getsockname(lfd, (struct sockaddr *)&a, &al)) {
		perror("soak: listen");
		return 2;
	}
	fcntl(lfd, F_SETFL, O_NONBLOCK); /* several accepts per readiness */
	fprintf(stderr, "soak: seed %llu, %g s, %d connections at a time, streams up to %llu bytes\n",
		(unsigned long long)seed, secs, conc, (unsigned long long)max);
	pid_t client = fork();
	if (client < 0) {
		perror("soak: fork");
		return 2;
	}
	if (client == 0) {
		close(lfd);
		is_client = 1;
		rng_state = seed;
		port_base = (uint16_t)(20000 + seed % 10000);
		run_loop(-1, &a, conc, max, secs, 0);
		printf("soak: %lu streams (%lu aborted, %lu forked), %.1f MiB each way, %d errors\n",
		       n_streams, n_aborted, n_forked, (double)bytes_moved / 1048576.0, errors);
		fflush(stdout);
		_exit(errors ? 1 : 0);
	}
	rng_state = seed ^ 0x5555;
	client_pid = client;
	run_loop(lfd, &a, conc, max, 0, client);
	printf("soak server: %lu streams echoed, %lu cut short by the client, %lu forked, %d errors\n",
	       n_streams, n_aborted, n_forked, errors);
	return errors ? 1 : 0;
}

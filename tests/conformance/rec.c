#include "conf.h"

#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/shm_layout.h" /* warm_check only */

int conf_failed;
volatile sig_atomic_t got_usr1;

static void on_usr1(int sig)
{
	got_usr1++;
}

void handle_usr1(int restart)
{
	struct sigaction sa = { .sa_handler = on_usr1, .sa_flags = restart ? SA_RESTART : 0 };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
}

void out(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

const char *ename(int e)
{
	const char *n = strerrorname_np(e);
	return n ? n : "E?";
}

long rec(const char *label, long r, int err)
{
	if (r < 0)
		out("%s = %ld %s", label, r, ename(err));
	else
		out("%s = %ld", label, r);
	errno = err;
	return r;
}

void check_failed(const char *what, const char *file, int line)
{
	out("CHECK FAILED: %s (%s:%d)", what, file, line);
	conf_failed = 1;
}

int is_stream(const struct fam *f)
{
	return f->type == SOCK_STREAM;
}

int is_inet(const struct fam *f)
{
	return f->domain != AF_UNIX;
}

int fam_socket(const struct fam *f, int flags)
{
	int fd = socket(f->domain, f->type | flags, 0);

	if (fd < 0) {
		out("socket() failed: %s", ename(errno));
		exit(3);
	}
	return fd;
}

static void fam_any_addr(const struct fam *f, struct sockaddr_storage *a, socklen_t *len)
{
	static unsigned seq;

	memset(a, 0, sizeof(*a));
	if (f->domain == AF_INET) {
		struct sockaddr_in *in = (void *)a;
		in->sin_family = AF_INET;
		in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		*len = sizeof(*in);
	} else if (f->domain == AF_INET6) {
		struct sockaddr_in6 *in6 = (void *)a;
		in6->sin6_family = AF_INET6;
		in6->sin6_addr = in6addr_loopback;
		*len = sizeof(*in6);
	} else {
		struct sockaddr_un *un = (void *)a;
		un->sun_family = AF_UNIX;
		/* abstract name: unique per process and call, nothing to unlink */
		int n = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1, "dsock-conf-%d-%u",
				 getpid(), seq++);
		*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
	}
}

/* Across namespaces (tests/conformance/across_ns.sh): with CONF_SERVER_NETNS
 * set (a namespace's path, /run/netns/NAME), fam_server makes its inet
 * sockets in that network namespace, bound to CONF_SERVER_ADDR4 or
 * CONF_SERVER_ADDR6, and gives back CONF_DIAL4 or CONF_DIAL6 (an address
 * DNAT rewrites to the bound one, port unchanged) where set, else the bound
 * address.  Stream sockets only; every other socket stays in the
 * scenario's own namespace. */
static const char *server_ns(const struct fam *f)
{
	return f->domain != AF_UNIX && f->type == SOCK_STREAM ? getenv("CONF_SERVER_NETNS") : NULL;
}

int fam_on_wire(const struct fam *f)
{
	return server_ns(f) != NULL;
}

static const char *server_env(const struct fam *f, const char *v4, const char *v6)
{
	return server_ns(f) ? getenv(f->domain == AF_INET ? v4 : v6) : NULL;
}

static int set_addr(const struct fam *f, const char *text, struct sockaddr_storage *a)
{
	void *at = f->domain == AF_INET ? (void *)&((struct sockaddr_in *)a)->sin_addr
					: (void *)&((struct sockaddr_in6 *)a)->sin6_addr;
	return inet_pton(f->domain, text, at) == 1 ? 0 : -1;
}

/* A socket of the family made in the server's namespace; fam_socket's
 * where none is set. */
static int server_socket(const struct fam *f)
{
	const char *ns = server_ns(f);
	int self, there, fd;

	if (!ns)
		return fam_socket(f, 0);
	self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	there = open(ns, O_RDONLY | O_CLOEXEC);
	if (self < 0 || there < 0 || setns(there, CLONE_NEWNET) < 0) {
		out("server namespace %s: %s", ns, ename(errno));
		exit(3);
	}
	fd = socket(f->domain, f->type, 0);
	if (setns(self, CLONE_NEWNET) < 0 || fd < 0) {
		out("server socket: %s", ename(errno));
		exit(3);
	}
	close(self);
	close(there);
	return fd;
}

int fam_server(const struct fam *f, struct sockaddr_storage *addr, socklen_t *len)
{
	int fd = server_socket(f), one = 1;
	const char *bind_to = server_env(f, "CONF_SERVER_ADDR4", "CONF_SERVER_ADDR6");
	const char *dial = server_env(f, "CONF_DIAL4", "CONF_DIAL6");

	fam_any_addr(f, addr, len);
	if (bind_to && set_addr(f, bind_to, addr) < 0) {
		out("bad server address %s", bind_to);
		exit(3);
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)addr, *len) < 0 ||
	    (is_stream(f) && listen(fd, 64) < 0) ||
	    getsockname(fd, (struct sockaddr *)addr, len) < 0) {
		out("server set-up failed: %s", ename(errno));
		exit(3);
	}
	if (dial && set_addr(f, dial, addr) < 0) {
		out("bad dial address %s", dial);
		exit(3);
	}
	return fd;
}

void fam_pair(const struct fam *f, int *c, int *s)
{
	struct sockaddr_storage a, b;
	socklen_t al, bl;
	int l = fam_server(f, &a, &al);

	*c = fam_socket(f, 0);
	if (!is_stream(f)) {
		/* two bound datagram sockets connected to each other */
		fam_any_addr(f, &b, &bl);
		if (bind(*c, (struct sockaddr *)&b, bl) < 0 ||
		    getsockname(*c, (struct sockaddr *)&b, &bl) < 0 ||
		    connect(*c, (struct sockaddr *)&a, al) < 0 ||
		    connect(l, (struct sockaddr *)&b, bl) < 0) {
			out("dgram pair failed: %s", ename(errno));
			exit(3);
		}
		*s = l;
		return;
	}
	if (connect(*c, (struct sockaddr *)&a, al) < 0 || (*s = accept(l, NULL, NULL)) < 0) {
		out("stream pair failed: %s", ename(errno));
		exit(3);
	}
	close(l);
	/* tcp4 pairs get a short warm-up: four round trips start the pairing
	 * under dsock (each end offers at its fourth data call) and the
	 * scenario races its end; tcp6 pairs start cold, as a short connection
	 * does; the warm families (tcp4w, tcp6w) start on the rings. */
	if (f->domain == AF_INET && !f->warm) {
		char x = 0;
		for (int i = 0; i < 4; i++) {
			if (send(*c, &x, 1, 0) != 1 || recv(*s, &x, 1, 0) != 1 || send(*s, &x, 1, 0) != 1 ||
			    recv(*c, &x, 1, 0) != 1) {
				out("warm-up failed: %s", ename(errno));
				exit(3);
			}
			usleep(2000);
		}
	}
	fam_warm(f, *c, *s);
}

/* One byte from one end to the other, on blocking or nonblocking sockets. */
static void warm_byte(int from, int to)
{
	char x = 'w';
	ssize_t r;

	while ((r = send(from, &x, 1, MSG_NOSIGNAL)) != 1)
		if (r == 0 || (errno != EAGAIN && errno != EINTR) || (errno == EAGAIN && !wait_fd(from, POLLOUT, 5000)))
			goto fail;
	while ((r = recv(to, &x, 1, 0)) != 1)
		if (r == 0 || (errno != EAGAIN && errno != EINTR) || (errno == EAGAIN && !wait_fd(to, POLLIN, 5000)))
			goto fail;
	return;
fail:
	out("warm-up failed: %s", r == 0 ? "EOF" : ename(errno));
	exit(3);
}

/* The warm-up.  Under dsock a connection is offered to the daemon at each
 * end's fourth data call, the answer comes asynchronously (well under a
 * millisecond to a few), each end attaches at its next call and each end's
 * sending moves to its ring at its next send: WARM_FIRST round trips make
 * both ends offer, WARM_PAUSE_MS lets the daemon answer, and WARM_MORE
 * round trips attach both ends, switch both directions and read past both
 * switch offsets (two would do once both have attached; the rest covers a
 * late answer).  CONF_WARM="FIRST,PAUSE_MS,MORE" overrides them (tuning);
 * CONF_WARM_CHECK=1 reports on stderr whether the rings this process maps
 * say both directions switched (by hand, under dsock). */
#define WARM_FIRST    4
#define WARM_PAUSE_MS 15
#define WARM_MORE     16

static void warm_check(const struct fam *f);

void fam_warm(const struct fam *f, int c, int s)
{
	int first = WARM_FIRST, pause = WARM_PAUSE_MS, more = WARM_MORE, e = errno;
	const char *knob = getenv("CONF_WARM");

	if (!f->warm)
		return;
	if (knob)
		sscanf(knob, "%d,%d,%d", &first, &pause, &more);
	for (int i = 0; i < first; i++) {
		warm_byte(c, s);
		warm_byte(s, c);
	}
	msleep(pause);
	for (int i = 0; i < more; i++) {
		warm_byte(c, s);
		warm_byte(s, c);
	}
	if (getenv("CONF_WARM_CHECK"))
		warm_check(f);
	errno = e;
}

/* By hand only: the rings' header (the layout dsockd and the library
 * share), for each connection memory this process maps. */
static void warm_check(const struct fam *f)
{
	FILE *m = fopen("/proc/self/maps", "r");
	char line[512];
	int maps = 0, attached = 0, switched = 0;

	while (m && fgets(line, sizeof(line), m)) {
		unsigned long lo, hi;
		if ((!strstr(line, "memfd:dsock-conn") && !strstr(line, "memfd:dsock-pool")) ||
		    sscanf(line, "%lx-%lx", &lo, &hi) != 2)
			continue;
		/* a pool's slots one after the other, each a header and two rings */
		for (unsigned long at = lo; at < hi;) {
			const struct dsock_shm_hdr *h = (const void *)at;
			if (h->magic != DSOCK_SHM_MAGIC || !h->ring_size)
				break;
			maps++;
			attached += h->side[0].attached == DSOCK_ATT_ATTACHED &&
				    h->side[1].attached == DSOCK_ATT_ATTACHED;
			switched += h->side[0].switch_off != DSOCK_SWITCH_NONE &&
				    h->side[1].switch_off != DSOCK_SWITCH_NONE && h->side[0].rx_switched &&
				    h->side[1].rx_switched;
			at += DSOCK_SHM_HDR + 2ul * h->ring_size;
		}
	}
	if (m)
		fclose(m);
	fprintf(stderr, "warm-check %s: rings mapped %d, both ends attached %d, both ways switched %d\n", f->name,
		maps, attached, switched);
}

void fam_dead_addr(const struct fam *f, struct sockaddr_storage *addr, socklen_t *len)
{
	/* bind a socket to get a free address, then close it: nobody listens */
	struct fam g = *f;
	int fd;

	g.type = SOCK_DGRAM == f->type ? SOCK_DGRAM : SOCK_STREAM;
	fd = socket(g.domain, g.type, 0);
	fam_any_addr(f, addr, len);
	bind(fd, (struct sockaddr *)addr, *len);
	getsockname(fd, (struct sockaddr *)addr, len);
	close(fd);
}

void fill(char *buf, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		buf[i] = (char)(seed >> 16);
	}
}

uint32_t csum(const char *buf, size_t n)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)buf[i]) * 16777619u;
	return h;
}

int wait_fd(int fd, short events, int ms)
{
	struct pollfd p = { .fd = fd, .events = events };

	return poll(&p, 1, ms) > 0 ? p.revents : 0;
}

long write_all(int fd, const char *buf, size_t n)
{
	for (size_t off = 0; off < n;) {
		ssize_t w = write(fd, buf + off, n - off);
		if (w < 0)
			return -errno;
		off += (size_t)w;
	}
	return (long)n;
}

long read_to_eof(int fd)
{
	char buf[65536];
	long total = 0;
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf))) > 0)
		total += n;
	return total;
}

long read_all(int fd, char *buf, size_t n)
{
	size_t off = 0;

	while (off < n) {
		ssize_t r = read(fd, buf + off, n - off);
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		off += (size_t)r;
	}
	return (long)off;
}

long fill_until_eagain(int fd)
{
	static char junk[65536];
	long total = 0;

	for (;;) {
		ssize_t w = send(fd, junk, sizeof(junk), MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w < 0)
			return errno == EAGAIN ? total : -errno;
		total += w;
	}
}

long fill_full(int fd)
{
	long total = fill_until_eagain(fd), more;

	/* (natively the receiver's window opens once more 30-50 ms after
	 * the first stall, here: so 60 ms with nothing added) */
	for (int i = 0, quiet = 0; i < 100 && quiet < 6 && total >= 0; i++) {
		msleep(10);
		if ((more = fill_until_eagain(fd)) < 0)
			return more;
		quiet = more ? 0 : quiet + 1;
		total += more;
	}
	return total;
}

int tcp_only(const struct fam *f)
{
	if (f->domain != AF_UNIX)
		return 1;
	out("skipped on unix");
	return 0;
}

void msleep(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

void now(struct timespec *t)
{
	clock_gettime(CLOCK_MONOTONIC, t);
}

long ms_since(const struct timespec *t0)
{
	struct timespec t;

	now(&t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

static const char *names(unsigned ev, const unsigned *bits, const char *const *n, int cnt)
{
	static char buf[8][128];
	static int k;
	char *b = buf[k++ & 7];

	b[0] = '\0';
	for (int i = 0; i < cnt; i++) {
		if (ev & bits[i]) {
			if (b[0])
				strcat(b, "|");
			strcat(b, n[i]);
			ev &= ~bits[i];
		}
	}
	if (ev)
		sprintf(b + strlen(b), "%s0x%x", b[0] ? "|" : "", ev);
	if (!b[0])
		strcpy(b, "none");
	return b;
}

const char *pollname(unsigned ev)
{
	static const unsigned bits[] = { POLLIN, POLLPRI, POLLOUT, POLLERR, POLLHUP, POLLNVAL, POLLRDHUP,
					 POLLRDNORM, POLLWRNORM, POLLRDBAND, POLLWRBAND };
	static const char *const n[] = { "IN", "PRI", "OUT", "ERR", "HUP", "NVAL", "RDHUP",
					 "RDNORM", "WRNORM", "RDBAND", "WRBAND" };
	return names(ev, bits, n, 11);
}

const char *epollname(unsigned ev)
{
	static const unsigned bits[] = { EPOLLIN, EPOLLPRI, EPOLLOUT, EPOLLERR, EPOLLHUP, EPOLLRDHUP,
					 EPOLLRDNORM, EPOLLWRNORM, EPOLLRDBAND, EPOLLWRBAND };
	static const char *const n[] = { "IN", "PRI", "OUT", "ERR", "HUP", "RDHUP",
					 "RDNORM", "WRNORM", "RDBAND", "WRBAND" };
	return names(ev, bits, n, 10);
}

const char *self_exe(void)
{
	static char path[4096];
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);

	path[n > 0 ? n : 0] = '\0';
	return path;
}

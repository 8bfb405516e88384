/* Conformance scenarios: each prints a transcript of what the socket API
 * returned (values, errno names, bytes, readiness events).  The harness runs
 * every scenario natively and under dsock and compares the transcripts, so a
 * scenario must print only what the kernel specifies: no ports, no pids, no
 * timings (print "elapsed>=40ms: yes" rather than the time), no counts that
 * depend on buffer sizes.
 *
 * A scenario is written once for a kind of socket and instantiated for each
 * family: STREAM_SCEN for tcp4, tcp6, unix, tcp4w and tcp6w stream sockets;
 * DGRAM_SCEN for udp4, udp6 and unix datagram sockets; SCEN for one
 * instance.
 *
 * tcp4w and tcp6w are the warm families: their connections carry a warm-up
 * before the scenario's first step (fam_pair, fam_warm), so that under
 * dsock both directions are on the shared-memory rings by then.  A stream
 * scenario that never has a connection (refused connects, unconnected
 * sockets, an empty listener) is STREAM_NOCONN_SCEN: tcp4, tcp6 and unix
 * only, since a warm family would run the same thing again. */
#ifndef CONF_H
#define CONF_H

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

struct fam {
	const char *name;
	int domain; /* AF_INET, AF_INET6, AF_UNIX */
	int type;   /* SOCK_STREAM or SOCK_DGRAM */
	int warm;   /* 1: connections are warmed up before the scenario uses them */
};

typedef void (*scen_fn)(const struct fam *f);

void conf_register(const char *kind, const char *name, scen_fn fn);

#define SCEN_DEFINE(kind, fn) \
	static void fn(const struct fam *f); \
	__attribute__((constructor)) static void reg_##fn(void) { conf_register(kind, #fn, fn); } \
	static void fn(__attribute__((unused)) const struct fam *f)
#define STREAM_SCEN(fn) SCEN_DEFINE("stream", fn)
#define STREAM_NOCONN_SCEN(fn) SCEN_DEFINE("stream-noconn", fn)
#define DGRAM_SCEN(fn)  SCEN_DEFINE("dgram", fn)
#define SCEN(fn)        SCEN_DEFINE("one", fn)
/* Runs only when named: used to show that the harness can fail. */
#define SELFTEST_SCEN(fn) SCEN_DEFINE("selftest", fn)

/* ---- transcript -------------------------------------------------------- */
/* OUT prints a line.  R evaluates a call once and prints "label = value" or
 * "label = -1 ENAME".  CHECK records a failed expectation (the scenario
 * then exits 1: it must hold natively too). */
void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
long rec(const char *label, long r, int err);
void check_failed(const char *what, const char *file, int line);
const char *ename(int e);

#define R(label, call) ({ errno = 0; long r_ = (long)(call); rec(label, r_, errno); })
#define CHECK(c) do { if (!(c)) check_failed(#c, __FILE__, __LINE__); } while (0)

/* ---- helpers (rec.c) --------------------------------------------------- */
/* A socket of the family, with extra type flags (SOCK_NONBLOCK...). */
int fam_socket(const struct fam *f, int flags);
/* A bound (port 0 / unique unix name) listening stream socket, or bound
 * datagram socket.  *addr gets its address. */
int fam_server(const struct fam *f, struct sockaddr_storage *addr, socklen_t *len);
/* 1 when f's pairs cross a network between namespaces (across_ns.sh):
 * there, how much room a full TCP send path has at an instant depends on
 * the ACKs in flight (the kernel grows the send buffer as they come), and
 * two native runs disagree; a scenario reports such instants only where
 * this is 0. */
int fam_on_wire(const struct fam *f);
/* A connected pair: *c the client, *s the accepted (stream) or peer (dgram).
 * Warm families: warmed up (fam_warm). */
void fam_pair(const struct fam *f, int *c, int *s);
/* In a warm family, the warm-up of a connection a scenario made itself
 * (c and s its two ends, blocking or not): round trips, a pause for the
 * pairing, more round trips; it prints nothing.  A no-op elsewhere. */
void fam_warm(const struct fam *f, int c, int s);
/* An address nobody listens on (for refused connects). */
void fam_dead_addr(const struct fam *f, struct sockaddr_storage *addr, socklen_t *len);
int is_stream(const struct fam *f);
int is_inet(const struct fam *f);

void fill(char *buf, size_t n, unsigned seed);
uint32_t csum(const char *buf, size_t n);
/* Waits up to ms for events on fd; returns revents (0 on timeout). */
int wait_fd(int fd, short events, int ms);
/* Writes all (blocking) / reads exactly n (blocking); returns n or -errno. */
long write_all(int fd, const char *buf, size_t n);
long read_all(int fd, char *buf, size_t n);
/* Reads and discards until EOF (or an error); returns the bytes read. */
long read_to_eof(int fd);
/* Fills the socket's send path until EAGAIN (MSG_DONTWAIT, so on any
 * socket); returns bytes written. */
long fill_until_eagain(int fd);
/* The same until the peer is full for good: fills again after 10 ms
 * pauses until 60 ms pass with nothing added (ACKs and a late window
 * update free room after the first EAGAIN; after this a blocking send
 * copies nothing before it blocks). */
long fill_full(int fd);
/* The unix family prints "skipped on unix" and gets 0 (features only TCP
 * has); the others get 1. */
int tcp_only(const struct fam *f);
void msleep(int ms);
long ms_since(const struct timespec *t0);
void now(struct timespec *t);
/* Prints the events of a poll/epoll mask as names: "IN|OUT|HUP". */
const char *pollname(unsigned ev);
const char *epollname(unsigned ev);
/* SIGUSR1 counted in got_usr1 from now on, its handler with SA_RESTART or
 * without. */
extern volatile sig_atomic_t got_usr1;
void handle_usr1(int restart);
/* Path of this executable (for exec scenarios). */
const char *self_exe(void);

#endif

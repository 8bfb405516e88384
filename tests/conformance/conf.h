/* Conformance scenarios: each prints a transcript of what the socket API
 * returned (values, errno names, bytes, readiness events).  The harness runs
 * every scenario natively and under dsock and compares the transcripts, so a
 * scenario must print only what the kernel specifies: no ports, no pids, no
 * timings (print "elapsed>=40ms: yes" rather than the time), no counts that
 * depend on buffer sizes.
 *
 * A scenario is written once for a kind of socket and instantiated for each
 * family: STREAM_SCEN for tcp4, tcp6 and unix stream sockets; DGRAM_SCEN for
 * udp4, udp6 and unix datagram sockets; SCEN for one instance. */
#ifndef CONF_H
#define CONF_H

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

struct fam {
	const char *name;
	int domain; /* AF_INET, AF_INET6, AF_UNIX */
	int type;   /* SOCK_STREAM or SOCK_DGRAM */
};

typedef void (*scen_fn)(const struct fam *f);

void conf_register(const char *kind, const char *name, scen_fn fn);

#define SCEN_DEFINE(kind, fn) \
	static void fn(const struct fam *f); \
	__attribute__((constructor)) static void reg_##fn(void) { conf_register(kind, #fn, fn); } \
	static void fn(__attribute__((unused)) const struct fam *f)
#define STREAM_SCEN(fn) SCEN_DEFINE("stream", fn)
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
/* A connected pair: *c the client, *s the accepted (stream) or peer (dgram). */
void fam_pair(const struct fam *f, int *c, int *s);
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
/* Fills the socket's send path until EAGAIN (fd must be nonblocking);
 * returns bytes written. */
long fill_until_eagain(int fd);
void msleep(int ms);
long ms_since(const struct timespec *t0);
void now(struct timespec *t);
/* Prints the events of a poll/epoll mask as names: "IN|OUT|HUP". */
const char *pollname(unsigned ev);
const char *epollname(unsigned ev);
/* Path of this executable (for exec scenarios). */
const char *self_exe(void);

#endif

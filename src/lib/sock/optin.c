/* Opting a socket in to the kernel-recorded proof of identity
 * (common/ident.h, daemon/ident.c): before connect() to an address that
 * is not loopback, and before listen() on one, the socket is marked with
 * setsockopt(SOL_DSOCK, DSOCK_OPTIN), which the daemon's cgroup program
 * serves (no privilege, no bpf(2), allowed under a container's seccomp
 * profile).  Its handshake then carries a nonce, and the daemon can prove
 * the connection's two ends across network namespaces and NAT.  Loopback
 * connections stay in one namespace, where the addresses prove them, so
 * they skip the mark and its cost in the handshake, and so do the
 * connections the process's rules keep on the kernel (judged by the
 * address known then: the peer's at connect, the local one at listen;
 * where the other address would have changed the verdict, a connection
 * is marked for nothing, or left unmarked and pairs within its namespace
 * only).  A connection is marked only to a private or link-local
 * address by default (DSOCK_PROOF_MARK=private: IPv4 10/8, 172.16/12,
 * 192.168/16, 100.64/10, 169.254/16; IPv6 fc00::/7, fe80::/10, where
 * containers and their hosts' bridges live), so that no SYN to the
 * internet carries the experimental option; "all" marks every one that
 * is not loopback, "none" none.  A listener is marked whatever its
 * address: it answers only a SYN that carried the option.  Where no
 * daemon has the programs attached the kernel answers ENOPROTOOPT, and
 * the process asks again only after a while. */
#include "lib/sock/sock.h"
#include "lib/base/proc.h"
#include "lib/base/clock.h"
#include "lib/base/real.h"
#include "common/ident.h"
#include "common/log.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define ABSENT_RETRY_NS (10 * 1000000000LL)

static _Atomic int64_t absent_until; /* no programs attached: not before then */

enum { MARK_NONE, MARK_PRIVATE, MARK_ALL };
static _Atomic int mark_mode = -1; /* (read at the first connect) */

static int marks(void)
{
	int m = atomic_load_explicit(&mark_mode, memory_order_relaxed);
	const char *e;

	if (m >= 0)
		return m;
	e = getenv("DSOCK_PROOF_MARK");
	if (!e || !*e || !strcmp(e, "private"))
		m = MARK_PRIVATE;
	else if (!strcmp(e, "all"))
		m = MARK_ALL;
	else {
		if (strcmp(e, "none"))
			DSOCK_WARN("DSOCK_PROOF_MARK=%s: not private, all or none; no connection is marked", e);
		m = MARK_NONE;
	}
	atomic_store_explicit(&mark_mode, m, memory_order_relaxed);
	return m;
}

/* The IPv4 address of a (AF_INET, or AF_INET6 v4-mapped), host order:
 * 1; else 0 (x: the IPv6 address, when a is AF_INET6). */
static int ipv4_of(const struct sockaddr *a, uint32_t *v4, const struct in6_addr **x)
{
	*x = NULL;
	if (a->sa_family == AF_INET) {
		*v4 = ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr);
		return 1;
	}
	*x = &((const struct sockaddr_in6 *)a)->sin6_addr;
	if (!IN6_IS_ADDR_V4MAPPED(*x))
		return 0;
	memcpy(v4, (*x)->s6_addr + 12, 4);
	*v4 = ntohl(*v4);
	return 1;
}

/* a private or link-local address (a: AF_INET or AF_INET6) */
static int private_addr(const struct sockaddr *a)
{
	const struct in6_addr *x;
	uint32_t v4;

	if (!ipv4_of(a, &v4, &x))
		return (x->s6_addr[0] & 0xfe) == 0xfc || (x->s6_addr[0] == 0xfe && (x->s6_addr[1] & 0xc0) == 0x80);
	return (v4 >> 24) == 10 || (v4 >> 20) == 0xac1 || (v4 >> 16) == 0xc0a8 || (v4 >> 22) == (100 << 2 | 1) ||
	       (v4 >> 16) == 0xa9fe;
}

/* a loopback address, or one of no IP family (never marked) */
static int loopback(const struct sockaddr *a)
{
	const struct in6_addr *x;
	uint32_t v4;

	if (a->sa_family != AF_INET && a->sa_family != AF_INET6)
		return 1;
	return ipv4_of(a, &v4, &x) ? (v4 >> 24) == 127 : IN6_IS_ADDR_LOOPBACK(x);
}

/* a is the peer's address (connect) or the local one (listen) */
static void optin(int fd, const struct sockaddr *a, int peer)
{
	int one = 1, e = errno, rule;
	int64_t now;

	if (!a || loopback(a))
		return;
	if (peer) { /* (a listener answers only a SYN that carried the option) */
		int m = marks();
		if (m == MARK_NONE || (m == MARK_PRIVATE && !private_addr(a)))
			return;
	}
	if ((now = dsock_mono_ns()) < atomic_load_explicit(&absent_until, memory_order_relaxed))
		return;
	if (!dsock_rules_conn_allowed(&dsock_proc.rules, peer ? NULL : a, peer ? a : NULL, &rule))
		return;
	if (dsock_real.setsockopt(fd, DSOCK_SOL, DSOCK_OPTIN, &one, sizeof(one)) < 0 && errno == ENOPROTOOPT)
		atomic_store_explicit(&absent_until, now + ABSENT_RETRY_NS, memory_order_relaxed);
	errno = e; /* the application's call reports its own */
}

void dsock_optin(int fd, const struct sockaddr *a)
{
	optin(fd, a, 1);
}

void dsock_optin_listener(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int e = errno;

	if (dsock_mono_ns() < atomic_load_explicit(&absent_until, memory_order_relaxed))
		return;
	if (dsock_real.getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
		optin(fd, (struct sockaddr *)&ss, 0);
	errno = e;
}

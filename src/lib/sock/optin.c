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
 * only).  Where no daemon has
 * the programs attached the kernel answers ENOPROTOOPT, and the process
 * asks again only after a while. */
#include "lib/sock/sock.h"
#include "lib/base/proc.h"
#include "lib/base/clock.h"
#include "lib/base/real.h"
#include "common/ident.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>

#define ABSENT_RETRY_NS (10 * 1000000000LL)

static _Atomic int64_t absent_until; /* no programs attached: not before then */

static int loopback(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
	if (a->sa_family == AF_INET6) {
		const struct in6_addr *x = &((const struct sockaddr_in6 *)a)->sin6_addr;
		return IN6_IS_ADDR_LOOPBACK(x) || (IN6_IS_ADDR_V4MAPPED(x) && x->s6_addr[12] == 127);
	}
	return 1;
}

/* a is the peer's address (connect) or the local one (listen) */
static void optin(int fd, const struct sockaddr *a, int peer)
{
	int one = 1, e = errno, rule;
	int64_t now;

	if (!a || loopback(a) || (now = dsock_mono_ns()) < atomic_load_explicit(&absent_until, memory_order_relaxed))
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

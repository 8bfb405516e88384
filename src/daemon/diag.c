/* Exact sock_diag look-ups (NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY
 * without NLM_F_DUMP): the kernel looks the 4-tuple up in its table of
 * connections and answers only if the socket it finds has the cookie we
 * name.  A socket that was reset or closed is no longer there, and once it
 * is gone the same addresses may already belong to a new connection.
 *
 * The request runs in the namespace of the socket it concerns: the
 * daemon's own through one netlink socket kept open; another namespace
 * through a netlink socket made there for the one look-up (setns to the
 * namespace of the offered socket, SIOCGSKNS, and back), so that the
 * daemon holds no reference that would keep a deleted namespace alive. */
#include "daemon/diag.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71
#endif

static int own_nl = -1;      /* a diag socket in the daemon's namespace */
static uint64_t own_netns;   /* its cookie (0: not known yet) */
static int own_ns = -1;      /* the daemon's namespace, to come back to */
static uint32_t seq;

static int diag_socket(void)
{
	return socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
}

static int open_own(void)
{
	if (own_nl >= 0)
		return 0;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	socklen_t l = sizeof(own_netns);

	if (s < 0)
		return -1;
	if (getsockopt(s, SOL_SOCKET, SO_NETNS_COOKIE, &own_netns, &l) < 0)
		own_netns = 0;
	close(s);
	own_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	own_nl = diag_socket();
	return own_nl >= 0 ? 0 : -1;
}

/* A diag socket in the namespace of fd (to close after use), or -1. */
static int foreign_socket(int fd)
{
	int ns = ioctl(fd, SIOCGSKNS), nl = -1;

	if (ns < 0 || own_ns < 0) {
		if (ns >= 0)
			close(ns);
		return -1;
	}
	if (setns(ns, CLONE_NEWNET) == 0) {
		nl = diag_socket();
		if (setns(own_ns, CLONE_NEWNET) < 0)
			DSOCK_ERR("cannot return to the daemon's network namespace: %s", strerror(errno));
	}
	close(ns);
	return nl;
}

static int v4_mapped(const uint8_t a[16])
{
	static const uint8_t pre[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return !memcmp(a, pre, sizeof(pre));
}

/* A full socket in a state its owner can still be using. */
static int state_held(unsigned st)
{
	/* ESTABLISHED, FIN_WAIT1, FIN_WAIT2, CLOSE_WAIT, LAST_ACK, CLOSING
	 * (include/net/tcp_states.h); not TIME_WAIT (6), CLOSE (7) */
	return st == 1 || st == 4 || st == 5 || st == 8 || st == 9 || st == 11;
}

static int ask(int nl, uint64_t cookie, ino_t ino, const struct dsock_addr *local, const struct dsock_addr *peer)
{
	struct {
		struct nlmsghdr nh;
		struct inet_diag_req_v2 r;
	} req;
	int v4 = v4_mapped(local->addr) && v4_mapped(peer->addr);
	struct sockaddr_nl k = { .nl_family = AF_NETLINK };
	union {
		struct nlmsghdr nh;
		char b[8192];
	} buf;

	memset(&req, 0, sizeof(req));
	req.nh.nlmsg_len = sizeof(req);
	req.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.nh.nlmsg_flags = NLM_F_REQUEST;
	req.nh.nlmsg_seq = ++seq;
	req.r.sdiag_family = v4 ? AF_INET : AF_INET6;
	req.r.sdiag_protocol = IPPROTO_TCP;
	req.r.idiag_states = ~0u;
	req.r.id.idiag_sport = htons(local->port);
	req.r.id.idiag_dport = htons(peer->port);
	memcpy(req.r.id.idiag_src, v4 ? local->addr + 12 : local->addr, v4 ? 4 : 16);
	memcpy(req.r.id.idiag_dst, v4 ? peer->addr + 12 : peer->addr, v4 ? 4 : 16);
	req.r.id.idiag_cookie[0] = (uint32_t)cookie;
	req.r.id.idiag_cookie[1] = (uint32_t)(cookie >> 32);
	if (sendto(nl, &req, sizeof(req), 0, (struct sockaddr *)&k, sizeof(k)) != (ssize_t)sizeof(req))
		return 0;
	/* the kernel answers within the send; older answers (a look-up
	 * given up on) are skipped by their sequence number */
	for (int tries = 0; tries < 8; tries++) {
		ssize_t n = recv(nl, &buf, sizeof(buf), MSG_DONTWAIT);
		if (n < 0)
			return 0;
		for (struct nlmsghdr *h = &buf.nh; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_seq != seq)
				continue;
			if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
				return 0; /* NLMSG_ERROR: ENOENT (gone), ESTALE (another socket) */
			const struct inet_diag_msg *m = NLMSG_DATA(h);
			uint64_t c = (uint64_t)m->id.idiag_cookie[1] << 32 | m->id.idiag_cookie[0];
			return c == cookie && (ino_t)m->idiag_inode == ino && state_held(m->idiag_state);
		}
	}
	return 0;
}

int dd_diag_holds(int fd, uint64_t netns, uint64_t cookie, ino_t ino, const struct dsock_addr *local,
		  const struct dsock_addr *peer)
{
	int nl, r;

	if (open_own() < 0)
		return 0;
	if (own_netns && netns == own_netns)
		return ask(own_nl, cookie, ino, local, peer);
	if ((nl = foreign_socket(fd)) < 0)
		return 0;
	r = ask(nl, cookie, ino, local, peer);
	close(nl);
	return r;
}

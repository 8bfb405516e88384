/* Links between daemons of different hosts (hostlink.h).  One thread: the
 * daemon's epoll loop drives every link's TLS by hand (non-blocking
 * sockets; a handshake or a read that wants the other direction waits for
 * it).  A link's messages are hostmsg.c's. */
#ifdef DSOCK_HAVE_TLS
#include "daemon/hostlink_int.h"
#include "daemon/hostkey.h"
#include "daemon/hostauth.h"
#include "daemon/hostchan.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/reason.h"

#include <arpa/inet.h>
#include <errno.h>
#include <endian.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct link hl_links[LINKS_MAX];
int hl_ep = -1;
uint32_t hl_base;
static int on, lfd = -1, dial_port = 7447;
static uint64_t next_gen = 1;
static char listen_at[80];

int64_t hl_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void hl_arm(struct link *l, int out)
{
	struct epoll_event ev = { .events = EPOLLIN | (out ? EPOLLOUT : 0),
				  .data.u32 = hl_base + (uint32_t)(l - hl_links) };

	if (l->armed_out != out && epoll_ctl(hl_ep, EPOLL_CTL_MOD, l->fd, &ev) == 0)
		l->armed_out = out;
}

static void handshake(struct link *l)
{
	char why[200];
	int r = SSL_do_handshake(l->ssl);

	if (r == 1) {
		struct hl_hello h = { htole32(HL_VERSION), 0 };
		l->host = dd_hostauth_host(SSL_get0_peer_certificate(l->ssl));
		if (l->host < 0) { /* (the verify callback refused it already) */
			hl_fail(l, DSOCK_R_HOST_REFUSED, "its key is not on the allow-list");
			return;
		}
		l->state = L_UP;
		if ((l->hello_out || hl_queue(l, HL_HELLO, &h, sizeof(h)) == 0) && hl_flush(l) == 0)
			hl_pump(l);
		l->hello_out = 1;
		return;
	}
	int e = SSL_get_error(l->ssl, r);
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
		hl_arm(l, e == SSL_ERROR_WANT_WRITE);
		return;
	}
	long v = SSL_get_verify_result(l->ssl);
	hl_tls_why(why, sizeof(why));
	if (v != X509_V_OK || strstr(why, "certificate"))
		hl_fail(l, DSOCK_R_HOST_REFUSED, "TLS refused: a key not on an allow-list (ours or the peer's)");
	else
		hl_fail(l, DSOCK_R_HOST_UNREACHABLE, why);
}

static struct link *slot_free(void)
{
	struct link *failed = NULL;

	for (int i = 0; i < LINKS_MAX; i++) {
		if (hl_links[i].state == L_FREE)
			return &hl_links[i];
		if (hl_links[i].state == L_FAILED && (!failed || hl_links[i].deadline < failed->deadline))
			failed = &hl_links[i];
	}
	if (failed)
		failed->state = L_FREE;
	return failed;
}

static int setup(struct link *l, int fd, int dialled)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.u32 = hl_base + (uint32_t)(l - hl_links) };
	int one = 1, idle = 10, intvl = 5, cnt = 3;

	/* a vanished host is noticed in about 25 s even with nothing to say */
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (!(l->ssl = SSL_new(dd_hostauth_ctx())) || !SSL_set_fd(l->ssl, fd) ||
	    epoll_ctl(hl_ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
		if (l->ssl)
			SSL_free(l->ssl);
		l->ssl = NULL;
		close(fd);
		l->state = dialled ? L_FAILED : L_FREE;
		return -1;
	}
	l->fd = fd;
	l->armed_out = 1;
	l->dialled = dialled;
	l->host = -1;
	l->hello = l->hello_out = 0;
	l->gen = next_gen++;
	l->deadline = hl_now_ms() + SETUP_MS;
	l->claims_out = l->claims_in = l->answers_in = l->answers_out = l->confirms_in = l->confirms_out = 0;
	l->channels_in = l->channels_out = 0;
	if (dialled)
		SSL_set_connect_state(l->ssl);
	else
		SSL_set_accept_state(l->ssl);
	return 0;
}

static void on_listener(void)
{
	struct sockaddr_storage sa;
	socklen_t sl = sizeof(sa);
	int fd;

	while ((fd = accept4(lfd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		struct dsock_addr from;
		struct link *l = NULL, *oldest = NULL;
		int same = 0;

		sl = sizeof(sa);
		dsock_addr_from(&from, (struct sockaddr *)&sa);
		/* Links not yet authenticated are what anyone who reaches the
		 * port can hold: a few per address, and when the slots run out
		 * the oldest of them makes room, so a flood delays an allowed
		 * host's link by a handshake at most, never refuses it */
		for (int i = 0; i < LINKS_MAX; i++) {
			struct link *x = &hl_links[i];
			if (x->fd < 0 || x->dialled || (x->state == L_UP && x->hello))
				continue;
			same += !memcmp(x->addr.addr, from.addr, 16);
			if (!oldest || x->deadline < oldest->deadline)
				oldest = x;
		}
		if (same >= SETUP_PER_ADDR || (!(l = slot_free()) && !oldest)) {
			close(fd);
			continue;
		}
		if (!l) {
			hl_fail(oldest, DSOCK_R_HOST_UNREACHABLE, "no handshake yet, and every link slot taken: made room");
			l = oldest;
		}
		l->addr = from;
		l->state = L_TLS;
		setup(l, fd, 0);
	}
}

static int dial(struct link *l, const struct dsock_addr *a)
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	struct sockaddr_storage ss = { 0 };
	socklen_t sl;
	int fd;

	if (!memcmp(a->addr, v4mapped, 12)) {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)dial_port);
		memcpy(&in->sin_addr, a->addr + 12, 4);
		sl = sizeof(*in);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)dial_port);
		memcpy(&in6->sin6_addr, a->addr, 16);
		sl = sizeof(*in6);
	}
	l->addr = *a;
	l->addr.port = (uint16_t)dial_port;
	l->dialled = 1;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || (connect(fd, (struct sockaddr *)&ss, sl) < 0 && errno != EINPROGRESS)) {
		if (fd >= 0)
			close(fd);
		l->state = L_FAILED;
		l->deadline = hl_now_ms() + RETRY_MS;
		return -1;
	}
	l->state = L_CONNECTING;
	return setup(l, fd, 1);
}

void dd_hosts_event(uint32_t slot, uint32_t events)
{
	struct link *l;

	if (slot - hl_base >= SLOT_CHANNELS) {
		dd_chan_event(slot, events);
		return;
	}
	if (slot - hl_base == SLOT_LISTENER) {
		on_listener();
		return;
	}
	if (slot - hl_base >= LINKS_MAX || (l = &hl_links[slot - hl_base])->fd < 0 || l->state == L_FREE ||
	    l->state == L_FAILED)
		return;
	if (l->state == L_CONNECTING) {
		int err = 0;
		socklen_t el = sizeof(err);
		if (getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err) {
			hl_fail(l, DSOCK_R_HOST_UNREACHABLE, strerror(err ? err : errno));
			return;
		}
		l->state = L_TLS;
	}
	if (l->state == L_TLS) {
		handshake(l);
		return;
	}
	if ((events & EPOLLOUT) && hl_flush(l))
		return;
	if (events & ~EPOLLOUT)
		hl_pump(l);
}

int dd_hosts_tick(void)
{
	int64_t now = hl_now_ms(), next;

	if (!on)
		return -1;
	next = dd_chan_tick();
	for (int i = 0; i < LINKS_MAX; i++) {
		struct link *l = &hl_links[i];
		if (l->state == L_FREE || l->state == L_FAILED || (l->state == L_UP && l->hello))
			continue;
		if (l->deadline <= now)
			hl_fail(l, DSOCK_R_HOST_UNREACHABLE, "no link within the set-up time");
		else if (next < 0 || l->deadline - now < next)
			next = l->deadline - now;
	}
	return (int)next;
}

int64_t dd_hosts_claim(const struct dsock_addr *addr, const struct dd_claim *c)
{
	struct link *l = NULL;
	struct hl_claim w = { .id = htole64(c->id), .sent = htole64(c->sent), .recv = htole64(c->recv),
			      .role = htole32(c->role), .transport = htole32(c->transport) };

	if (!on)
		return -DSOCK_R_PEER_TIMEOUT;
	for (int i = 0; i < LINKS_MAX && !l; i++)
		if (hl_links[i].dialled && hl_links[i].state != L_FREE && !memcmp(hl_links[i].addr.addr, addr->addr, 16))
			l = &hl_links[i];
	if (l && l->state == L_FAILED) {
		if (l->deadline > hl_now_ms())
			return -DSOCK_R_HOST_UNREACHABLE;
		l->state = L_FREE;
	} else if (!l && !(l = slot_free())) {
		return -DSOCK_R_RESOURCE;
	}
	if (l->state == L_FREE && dial(l, addr))
		return -DSOCK_R_HOST_UNREACHABLE;
	hl_addr_out(&w.local, &c->local);
	hl_addr_out(&w.peer, &c->peer);
	/* (queued until the link is up, HELLO first: flush writes only an
	 * established link's queue) */
	if (!l->hello_out) {
		struct hl_hello h = { htole32(HL_VERSION), 0 };
		if (hl_queue(l, HL_HELLO, &h, sizeof(h)))
			return -DSOCK_R_RESOURCE;
		l->hello_out = 1;
	}
	if (hl_queue(l, HL_CLAIM, &w, sizeof(w)))
		return -DSOCK_R_RESOURCE;
	l->claims_out++;
	hl_flush(l);
	return l->gen ? (int64_t)l->gen : -DSOCK_R_HOST_UNREACHABLE;
}


int dd_hosts_stat(int (*line)(int fd, const char *text), int fd)
{
	static const char *const st[] = { "free", "connecting", "tls", "up", "failed" };
	char buf[512], a[64];
	int r;

	if (!on)
		return 0;
	snprintf(buf, sizeof(buf), "hostkey fp=%s listen=%s dial_port=%d allowed=%d", dd_hostauth_fp(), listen_at,
		 dial_port, dd_hostauth_count());
	dd_chan_stat(buf, sizeof(buf));
	if ((r = line(fd, buf)))
		return r;
	for (int i = 0; i < LINKS_MAX; i++) {
		const struct link *l = &hl_links[i];
		if (l->state == L_FREE)
			continue;
		dsock_addr_format(&l->addr, a, sizeof(a));
		snprintf(buf, sizeof(buf), "hostlink addr=%s dir=%s state=%s host=%s claims_out=%lu claims_in=%lu "
			 "answers_out=%lu answers_in=%lu confirms_out=%lu confirms_in=%lu channels_out=%lu channels_in=%lu",
			 a, l->dialled ? "out" : "in", st[l->state == L_UP && !l->hello ? L_TLS : l->state],
			 l->host >= 0 ? dd_hosts_name(l->host) : "-", l->claims_out, l->claims_in, l->answers_out,
			 l->answers_in, l->confirms_out, l->confirms_in, l->channels_out, l->channels_in);
		if ((r = line(fd, buf)))
			return r;
	}
	return 0;
}

/* "PORT", "ADDR:PORT" or "[ADDR]:PORT" (ADDR numeric) */
static int listen_on(const char *spec, char *why, size_t n)
{
	char host[64] = "::", port[16];
	const char *colon = strrchr(spec, ':');
	struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV,
				  .ai_socktype = SOCK_STREAM }, *ai;
	int fd, one = 1;

	if (colon) {
		size_t hl = (size_t)(colon - spec);
		if (spec[0] == '[' && hl >= 2 && spec[hl - 1] == ']')
			snprintf(host, sizeof(host), "%.*s", (int)hl - 2, spec + 1);
		else
			snprintf(host, sizeof(host), "%.*s", (int)hl, spec);
		snprintf(port, sizeof(port), "%s", colon + 1);
	} else {
		snprintf(port, sizeof(port), "%s", spec);
	}
	if (getaddrinfo(host, port, &hints, &ai)) {
		snprintf(why, n, "DSOCK_HOSTS_LISTEN=%s: want PORT, ADDR:PORT or [ADDR]:PORT", spec);
		return -1;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (ai->ai_family == AF_INET6) {
			int zero = 0; /* (IPv4 hosts too, where ADDR is ::) */
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		}
	}
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0) {
		snprintf(why, n, "listen on %s: %s", spec, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	snprintf(listen_at, sizeof(listen_at), "%s", spec);
	return fd;
}

int dd_hosts_start(const char *socket_path, int epfd, uint32_t slot_base)
{
	const char *allow = getenv("DSOCK_HOSTS_ALLOW");
	const char *lsn = getenv("DSOCK_HOSTS_LISTEN"), *port = getenv("DSOCK_HOSTS_PORT");
	int asked = allow && *allow;
	char why[512];
	struct stat st;
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = slot_base + SLOT_LISTENER };

	hl_ep = epfd;
	hl_base = slot_base;
	for (int i = 0; i < LINKS_MAX; i++)
		hl_links[i].fd = -1;
	/* the host's daemon by default, a private one when told */
	if (!asked && strcmp(socket_path, DSOCK_HOST_SOCKET))
		return 0;
	if (!asked)
		allow = "/etc/dsock/hosts.allow";
	if (!asked && stat(allow, &st) < 0) {
		DSOCK_INFO("hl_links to other hosts off: no allow-list (%s)", allow);
		return 0;
	}
	if (port && *port && (atoi(port) < 1 || atoi(port) > 65535)) {
		DSOCK_ERR("hl_links to other hosts off: DSOCK_HOSTS_PORT=%s: want 1..65535", port);
		return -1;
	}
	if (port && *port)
		dial_port = atoi(port);
	struct sockaddr_storage at;
	socklen_t atl = sizeof(at);
	if (dd_hostauth_start(allow, why, sizeof(why)) ||
	    (lfd = listen_on(lsn && *lsn ? lsn : "7447", why, sizeof(why))) < 0 ||
	    epoll_ctl(hl_ep, EPOLL_CTL_ADD, lfd, &ev) < 0) {
		DSOCK_ERR("hl_links to other hosts off: %s", why);
		dd_hosts_stop();
		return -1;
	}
	/* (without channels the links still prove: the connections stay on
	 * the kernel) */
	if (getsockname(lfd, (struct sockaddr *)&at, &atl) < 0 ||
	    dd_chan_start(hl_ep, hl_base + SLOT_CHANNELS, &at, dial_port, why, sizeof(why)))
		DSOCK_ERR("channels to other hosts off: %s", why);
	on = 1;
	DSOCK_INFO("hl_links to other hosts on: this host is %s; listening on %s; %d hosts allowed", dd_hostauth_fp(),
		   listen_at, dd_hostauth_count());
	return 0;
}

int dd_hosts_on(void)
{
	return on;
}

void dd_hosts_reload(void)
{
	char why[512];

	if (!on)
		return;
	if (dd_hostauth_reload(why, sizeof(why))) {
		DSOCK_ERR("allow-list not reloaded: %s; the hosts allowed before stay so", why);
		return;
	}
	DSOCK_INFO("allow-list reloaded: %d hosts allowed", dd_hostauth_count());
	/* a host taken off the list loses its hl_links at once (and a link
	 * still in its handshake is judged by the new list) */
	for (int i = 0; i < LINKS_MAX; i++)
		if (hl_links[i].fd >= 0 && hl_links[i].host >= 0 && !dd_hostauth_allowed(hl_links[i].host))
			hl_fail(&hl_links[i], DSOCK_R_HOST_REFUSED, "its key is no longer on the allow-list");
}

void dd_hosts_stop(void)
{
	for (int i = 0; i < LINKS_MAX; i++) {
		if (hl_links[i].ssl)
			SSL_free(hl_links[i].ssl);
		if (hl_links[i].fd >= 0)
			close(hl_links[i].fd);
		free(hl_links[i].out);
		memset(&hl_links[i], 0, sizeof(hl_links[i]));
		hl_links[i].fd = -1;
	}
	if (lfd >= 0)
		close(lfd);
	lfd = -1;
	dd_chan_stop();
	dd_hostauth_stop();
	on = 0;
}

#endif

/* What the socket layer tells the daemon: a socket's events (its state,
 * who carries it and why, its addresses), and what the process holds when
 * a daemon is (re)connected. */
#include "lib/sock/sock.h"
#include "lib/ctl/ctl.h"
#include "lib/base/real.h"
#include "lib/transport/transport.h"
#include "common/reason.h"

#include <netinet/in.h>
#include <stdatomic.h>
#include <string.h>

/* known: the address at hand, else asked of the kernel. */
static void fill_addr(struct dsock_addr *out, int fd, int peer, const struct sockaddr *known)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	memset(out, 0, sizeof(*out));
	if (!known && (peer ? dsock_real.getpeername(fd, (struct sockaddr *)&ss, &len)
			    : dsock_real.getsockname(fd, (struct sockaddr *)&ss, &len)) < 0)
		return;
	dsock_addr_from(out, known ? known : (const struct sockaddr *)&ss);
}

static void fill(struct dsock_msg_sock_event *m, const struct dsock_sock *s, int fd, unsigned ev,
		 const struct sockaddr *local, const struct sockaddr *peer, int ask_local)
{
	const struct dsock_transport *tp = __atomic_load_n(&s->tp, __ATOMIC_ACQUIRE);

	memset(m, 0, sizeof(*m));
	m->event = ev;
	m->fd = fd;
	m->sock_id = s->id;
	m->domain = (uint16_t)s->domain;
	m->type = (uint16_t)s->type;
	m->state = s->state;
	m->path = (uint16_t)(tp && s->reason == DSOCK_R_NONE ? tp->id : DSOCK_PATH_KERNEL);
	m->reason = s->reason;
	if (ev != DSOCK_EV_CLOSE && fd >= 0) {
		if (local || ask_local)
			fill_addr(&m->local, fd, 0, local);
		if (s->state >= DSOCK_ST_CONNECTING)
			fill_addr(&m->peer, fd, 1, peer);
	}
}

/* A daemon heard it: replayed after a reconnect, and told of the close. */
static void heard(struct dsock_sock *s, unsigned ev, int r)
{
	if (r == 1 && ev != DSOCK_EV_CLOSE) {
		s->ev = (uint16_t)ev;
		atomic_fetch_or(&s->flags, DSOCK_SF_REPORTED);
	}
}

void dsock_sock_report_at(struct dsock_sock *s, int fd, unsigned ev, const struct sockaddr *local,
			  const struct sockaddr *peer)
{
	struct dsock_msg_sock_event m;

	fill(&m, s, fd, ev, local, peer, 0);
	heard(s, ev, dsock_ctl_event(&m));
}

void dsock_sock_report(struct dsock_sock *s, int fd, unsigned ev)
{
	struct dsock_msg_sock_event m;

	fill(&m, s, fd, ev, NULL, NULL, 1);
	heard(s, ev, dsock_ctl_event(&m));
}

static void replay_one(int fd, struct dsock_sock *unused, void *arg)
{
	int listeners_only = *(int *)arg;
	struct dsock_sock *s = dsock_fdt_get(fd);

	(void)unused;
	if (!s)
		return;
	if (s->ev && (!listeners_only || s->state == DSOCK_ST_LISTENING)) {
		struct dsock_msg_sock_event m;

		fill(&m, s, fd, s->ev, NULL, NULL, 1);
		heard(s, s->ev, dsock_ctl_event_locked(&m, 0));
	}
	dsock_sock_put(s);
}

/* After (re)connecting: tell the daemon what this process already holds.
 * A fork child tells only its listeners (its parent may already be gone,
 * a daemonizing server, taking them with it from the daemon's view). */
void dsock_sock_replay(int listeners_only)
{
	dsock_fdt_walk(replay_one, &listeners_only);
}

/* The daemon's answer to `dsock stat` (stat.h): a line for the daemon,
 * one per process a client may see and one per socket of it, then the
 * last processes that left. */
#include "daemon/stat.h"
#include "daemon/hostlink.h"
#include "daemon/ident.h"
#include "daemon/outbox.h"
#include "daemon/pairing.h"
#include "daemon/peerfd.h"
#include "daemon/provision.h"
#include "common/proto.h"
#include "common/reason.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The last processes that left (a short history). */
#define GONE_MAX 64
struct dd_gone {
	pid_t pid;
	uid_t uid;
	char comm[32];
	long lived;
	size_t socks;
};
static struct dd_gone gone[GONE_MAX];
static unsigned long ngone;

void dd_stat_gone(const struct dd_proc *p)
{
	struct dd_gone *g = &gone[ngone++ % GONE_MAX];

	g->pid = p->pid;
	g->uid = p->uid;
	memcpy(g->comm, p->comm, sizeof(g->comm));
	g->lived = (long)(time(NULL) - p->since);
	g->socks = p->nsocks;
}

static int send_line(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int send_line(int fd, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0 || n >= (int)sizeof(line))
		n = (int)sizeof(line) - 1;
	for (char *p = line; *p; p++) /* the protocol carries printable text */
		if (*p < 0x20 || *p > 0x7e)
			*p = '?';
	return dd_send_msg_fd(fd, DSOCK_MSG_STAT_LINE, line, (size_t)n + 1, -1, 0);
}

static const char *proto_name(const struct dd_sock *s)
{
	int v6 = s->domain == AF_INET6;

	if (s->type == SOCK_STREAM)
		return v6 ? "tcp6" : "tcp4";
	if (s->type == SOCK_DGRAM)
		return v6 ? "udp6" : "udp4";
	return v6 ? "inet6" : "inet4";
}

static int may_see(const struct ucred *who, uid_t owner)
{
	return who->uid == 0 || who->uid == getuid() || who->uid == owner;
}

static int send_text(int fd, const char *text)
{
	return send_line(fd, "%s", text);
}

int dd_stat_send(int fd, const struct ucred *who, const struct dd_stats *stats, int nclients)
{
	unsigned long paired, kernel, pending, live, stale, remote;
	char transports[512] = "";
	int r;

	dd_pairing_stats(&paired, &kernel, &pending, &live, &stale, &remote);
	dd_provision_stat(transports, sizeof(transports));
	r = send_line(fd, "daemon pid=%d uid=%u netns=%llu proof=%s version=%s uptime=%lds clients=%d procs=%zu "
		      "accepted=%lu refused=%lu bad_msgs=%lu events=%lu paired=%lu kernel=%lu pending=%lu "
		      "live=%lu stale_offers=%lu other_host=%lu%s",
		      getpid(), getuid(), dd_proc_netns(getpid()), dd_ident_on() ? "handshake,netns" : "netns",
		      "0.1.0", (long)(time(NULL) - stats->start), nclients,
		      dd_proc_count(), stats->accepted, stats->refused, stats->bad_msgs, stats->events,
		      paired, kernel, pending, live, stale, remote, transports);
	if (!r)
		r = dd_hosts_stat(send_text, fd);
	for (struct dd_proc *p = dd_proc_first(); p && !r; p = p->next) {
		if (!may_see(who, p->uid))
			continue;
		/* (the process's own count: shown, never used) */
		unsigned long long lost = p->evr ? __atomic_load_n(&p->evr->lost, __ATOMIC_RELAXED) : 0;
		r = send_line(fd, "proc pid=%d ppid=%d uid=%u netns=%llu comm=%s dsock=%s socks=%zu untracked=%lu "
			      "lost=%llu",
			      p->pid, p->ppid, p->uid, p->netns, p->comm,
			      (p->flags & DSOCK_HELLO_DISABLED) ? "disabled" : "enabled",
			      p->nsocks, p->untracked, lost);
		dd_peer_fill_local(p);
		for (size_t i = 0; i < p->nsocks && !r; i++) {
			const struct dd_sock *s = &p->socks[i];
			char la[64], pa[64];
			dsock_addr_format(&s->local, la, sizeof(la));
			dsock_addr_format(&s->peer, pa, sizeof(pa));
			r = send_line(fd, "sock pid=%d fd=%d id=%llu proto=%s state=%s via=%s "
				      "local=%s peer=%s path=%s reason=%s%s%s",
				      p->pid, s->fd, (unsigned long long)s->id, proto_name(s),
				      dsock_state_name(s->state), dsock_event_name(s->event), la, pa,
				      dsock_path_name(s->path), dsock_reason_name(s->reason),
				      s->host ? " host=" : "", s->host ? dd_hosts_name(s->host - 1) : "");
		}
	}
	for (unsigned long i = ngone > GONE_MAX ? ngone - GONE_MAX : 0; i < ngone && !r; i++) {
		const struct dd_gone *g = &gone[i % GONE_MAX];
		if (may_see(who, g->uid))
			r = send_line(fd, "gone pid=%d uid=%u comm=%s lived=%lds socks=%zu",
				      g->pid, g->uid, g->comm, g->lived, g->socks);
	}
	return r ? r : dd_send_msg_fd(fd, DSOCK_MSG_STAT_END, NULL, 0, -1, 0);
}


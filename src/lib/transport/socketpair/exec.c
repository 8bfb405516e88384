/* The socketpair transport across exec (sp.h): the old program names each
 * connection it hands over in DSOCK_EXEC_SOCKETPAIR (the fd, the pair's
 * end and the page; a framed pair's channel state, nudge and levels too),
 * clears close-on-exec on them, and the new one attaches them again.  A
 * program that will not run dsock gets the connection back on the
 * kernel (sp_handover). */
#include "lib/transport/socketpair/sp.h"
#include "lib/chan/chan.h"
#include "lib/sock/sock.h"
#include "lib/base/exec_target.h"
#include "lib/base/proc.h"
#include "lib/base/real.h"
#include "common/reason.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct exec_walk {
	char *buf;
	size_t n, used;
	const struct dsock_exec_target *target;
	int runs_dsock; /* -1: not known yet */
	int restore;
	int started;    /* (restore) a spawned child runs */
	int new_holder; /* the new program runs in a process not counted yet */
};

static unsigned exec_mark;

static void exec_one(int fd, struct dsock_sock *s, void *arg)
{
	struct exec_walk *w = arg;
	struct sp_conn *c;
	int runs, len;

	if (__atomic_load_n(&s->tp, __ATOMIC_ACQUIRE) != &dsock_socketpair_transport || !(c = sp_conn(s)))
		return;
	int lv[2] = { -1, -1 };
	if (c->ch && ch_levels(c->ch, c->st, lv))
		lv[0] = lv[1] = -1;
	/* a pipe framed as a channel hands over the channel's state, its
	 * nudge and the stream's levels too */
	int extra[4] = { c->ch ? c->ch->memfd : -1, c->ch ? c->ch->nudge : -1, lv[0], lv[1] };
	if (w->restore) {
		if (c->exec_counted == exec_mark && !w->started) /* no new holder after all */
			atomic_fetch_sub(&c->sh->holders, 1);
		c->exec_counted = 0;
		if (c->pairfd >= 0)
			dsock_real.fcntl(c->pairfd, F_SETFD, FD_CLOEXEC);
		dsock_real.fcntl(c->memfd, F_SETFD, FD_CLOEXEC);
		for (int i = 0; i < 4; i++)
			if (extra[i] >= 0)
				dsock_real.fcntl(extra[i], F_SETFD, FD_CLOEXEC);
		return;
	}
	if (atomic_load(&c->sh->state) != SP_PAIRED) {
		atomic_store(&c->sh->refuse, DSOCK_R_FORKED); /* the new program will not hear the answer */
		return;
	}
	if ((runs = dsock_exec_passes(fd, w->target, &w->runs_dsock)) < 0)
		return;
	if (c->ch && (extra[0] < 0 || extra[1] < 0 || extra[2] < 0 || extra[3] < 0))
		runs = 0;
	if (!runs)
		len = -1;
	else if (c->ch)
		len = snprintf(w->buf + w->used, w->n - w->used, "%s%d:%d:%d:%d:%d:%d:%d", w->used ? "," : "", fd,
			       c->pairfd, c->memfd, extra[0], extra[1], extra[2], extra[3]);
	else
		len = snprintf(w->buf + w->used, w->n - w->used, "%s%d:%d:%d", w->used ? "," : "", fd, c->pairfd,
			       c->memfd);
	if (len < 0 || (size_t)len >= w->n - w->used) {
		sp_handover(s, fd);
		return;
	}
	dsock_real.fcntl(c->pairfd, F_SETFD, 0);
	dsock_real.fcntl(c->memfd, F_SETFD, 0);
	for (int i = 0; c->ch && i < 4; i++)
		dsock_real.fcntl(extra[i], F_SETFD, 0);
	w->used += (size_t)len;
	/* a spawned child or a vfork child's program holds it too (one count
	 * for several fds) */
	if (c->ch && w->new_holder && c->exec_counted != exec_mark) {
		atomic_store(&c->sh->shared, 1);
		atomic_fetch_add(&c->sh->holders, 1);
		c->exec_counted = exec_mark;
	}
}

size_t sp_exec_env(char *buf, size_t n, int spawn, const struct dsock_exec_target *t)
{
	static const char name[] = "DSOCK_EXEC_SOCKETPAIR=";
	/* a vfork child (our memory, its own process) is a new holder too */
	struct exec_walk w = { .buf = buf + sizeof(name) - 1, .n = n - (sizeof(name) - 1), .target = t,
			       .runs_dsock = -1, .new_holder = spawn || !dsock_table_owner() };

	if (n <= sizeof(name))
		return 0;
	exec_mark++;
	dsock_fdt_walk(exec_one, &w);
	if (!w.used)
		return 0;
	memcpy(buf, name, sizeof(name) - 1);
	return sizeof(name) - 1 + w.used;
}

void sp_exec_done(int started)
{
	struct exec_walk w = { .restore = 1, .started = started };

	/* (the parent's copies close either way) */
	dsock_fdt_walk(exec_one, &w);
}

/* An fd handed over by the old program, for one more connection of ours:
 * the first use takes it, later ones a copy above it (a lower number may
 * be one the application expects the exec to have closed). */
static int take(int fd, int *used, int *nused)
{
	for (int i = 0; i < *nused; i++)
		if (used[i] == fd)
			return dsock_real.fcntl(fd, F_DUPFD_CLOEXEC, fd + 1);
	if (*nused < 448)
		used[(*nused)++] = fd;
	dsock_real.fcntl(fd, F_SETFD, FD_CLOEXEC);
	return fd;
}

/* In the new program: the connections the old one handed over.  Each fd
 * of a connection gets its own copies of the pair's end and the page. */
void sp_adopt(void)
{
	const char *env = getenv("DSOCK_EXEC_SOCKETPAIR");
	int handed[448], nhanded = 0, used[448], nused = 0, seen[64], nseen = 0;
	char copy[1024];

	if (!env)
		return;
	snprintf(copy, sizeof(copy), "%s", env);
	unsetenv("DSOCK_EXEC_SOCKETPAIR");
	for (char *save, *e = strtok_r(copy, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
		int fd, pairfd, memfd, pf = -1, mf = -1, x[4] = { -1, -1, -1, -1 }, got[4] = { -1, -1, -1, -1 };
		struct dsock_sock *s;
		struct sp_conn *c = NULL;
		struct ch *ch = NULL;

		int nf = sscanf(e, "%d:%d:%d:%d:%d:%d:%d", &fd, &pairfd, &memfd, &x[0], &x[1], &x[2], &x[3]);
		if (nf != 3 && nf != 7)
			continue;
		for (int i = 0; i < 2 && nhanded < 448; i++)
			handed[nhanded++] = i ? memfd : pairfd;
		for (int i = 0; nf == 7 && i < 4 && nhanded < 448; i++)
			handed[nhanded++] = x[i];
		s = dsock_fdt_get(fd);
		if (s && !s->tp) {
			pf = take(pairfd, used, &nused);
			mf = take(memfd, used, &nused);
			for (int i = 0; nf == 7 && i < 4; i++)
				got[i] = take(x[i], used, &nused);
		}
		/* a framed pair: the channel's state, nudge and levels */
		if (nf == 7 && pf >= 0 && got[0] >= 0 && got[1] >= 0 && got[2] >= 0 && got[3] >= 0 &&
		    (ch = calloc(1, sizeof(*ch))) && ch_attach(ch, pf, got[0], got[1]) == 0) {
			if (ch_adopt_levels(ch, 0, &got[2])) {
				dsock_real.close(got[2]);
				dsock_real.close(got[3]);
			}
		} else if (nf == 7) {
			free(ch);
			ch = NULL;
			for (int i = 0; i < 4; i++)
				if (got[i] >= 0)
					dsock_real.close(got[i]);
			if (pf >= 0)
				dsock_real.close(pf);
			pf = -1;
		}
		if (pf >= 0 && mf >= 0 && (c = sp_map_conn(s, mf))) {
			if (ch) {
				c->ch = ch;
				c->st = 0;
				c->pipe = &sp_pipe_chan;
				atomic_store(&c->sh->shared, 1);
				/* each fd of one connection is a connection of its
				 * own here, and lets go of the stream on its own: a
				 * holder more for each after the first (one page:
				 * the old program named one memfd for them all) */
				int again = 0;
				for (int i = 0; i < nseen; i++)
					again |= seen[i] == memfd;
				if (again)
					atomic_fetch_add(&c->sh->holders, 1);
				else if (nseen < 64)
					seen[nseen++] = memfd;
			}
			c->pairfd = pf;
			c->carried = 1; /* counted by the old program */
			c->counted_back = 1;
			s->reason = DSOCK_R_NONE;
			s->state = DSOCK_ST_CONNECTED;
			dsock_sock_attach(s, &dsock_socketpair_transport, c);
		} else {
			if (ch) {
				ch_close(ch); /* (its socket is pf) */
				free(ch);
				pf = -1;
			}
			if (pf >= 0)
				dsock_real.close(pf);
			if (mf >= 0)
				dsock_real.close(mf);
		}
		if (s)
			dsock_sock_put(s);
	}
	/* the ones no connection took */
	for (int i = 0; i < nhanded; i++) {
		int keep = 0;
		for (int j = 0; j < i; j++)
			keep |= handed[j] == handed[i];
		for (int j = 0; j < nused; j++)
			keep |= used[j] == handed[i];
		if (!keep)
			dsock_real.close(handed[i]);
	}
}


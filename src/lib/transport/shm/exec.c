/* The shm transport across exec: connections handed to the new program
 * through its environment (DSOCK_EXEC_SHM) and taken back in it, and the
 * last holder's exit. */
#include "lib/transport/shm/shm.h"
#include "lib/ctl/ctl.h"
#include "lib/base/exec_target.h"
#include "lib/base/proc.h"
#include "lib/base/real.h"
#include "lib/sock/ready.h"
#include "lib/sock/solo.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/reason.h"
#include "common/rawsys.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Closes a memfd fetched for an exec, in the process that fetched it. */
void shm_drop_exec_memfd(struct shm_conn *c)
{
	if (c->exec_memfd >= 0 && c->exec_memfd_pid == (int)dsock_sys(SYS_getpid))
		dsock_real.close(c->exec_memfd);
	c->exec_memfd = -1;
}

/* ---- exec ------------------------------------------------------------------ */
struct exec_walk {
	char *buf;
	size_t n, used;
	int restore;
	int started;    /* (restore) the spawned child runs */
	int new_holder; /* the new program runs in a process not counted yet */
	unsigned mark;  /* this exec attempt */
	const struct dsock_exec_target *target;
	int runs_dsock; /* the new program will: -1 not known yet */
};

static unsigned exec_mark;

static void exec_one(int fd, struct dsock_sock *s, void *arg)
{
	struct exec_walk *w = arg;
	struct shm_conn *c;

	if (__atomic_load_n(&s->tp, __ATOMIC_ACQUIRE) != &dsock_shm_transport || !(c = shm_conn(s)))
		return;
	if (c->state != SC_ATTACHED) {
		shm_refuse(c, DSOCK_R_FORKED); /* the new program will not hear the answer */
		return;
	}
	if (w->restore) {
		shm_drop_exec_memfd(c); /* the exec failed, or a spawned child has it */
		if (c->exec_counted == exec_mark && !w->started) { /* no new holder after all */
			__atomic_sub_fetch(&c->me->holders, 1, __ATOMIC_SEQ_CST);
			__atomic_sub_fetch(&c->h->maps[c->side], 1, __ATOMIC_SEQ_CST);
		}
		c->exec_counted = 0;
		if (c->exec_dropped) { /* still ours after all */
			c->exec_dropped = 0;
			c->let_go = 0;
			__atomic_add_fetch(&c->me->holders, 1, __ATOMIC_SEQ_CST);
		}
		return;
	}
	if (dsock_exec_passes(fd, w->target, &w->runs_dsock) < 0)
		return;
	/* the new program maps the memory from an fd that survives the exec:
	 * the daemon keeps one (we closed ours once mapped) */
	int mine = c->exec_memfd >= 0 && c->exec_memfd_pid == (int)dsock_sys(SYS_getpid); /* a dup's */
	int mfd = !w->runs_dsock ? -1 : mine ? c->exec_memfd : dsock_ctl_fetch(DSOCK_PATH_SHM, s->id, fd, 1000);
	int len = mfd < 0 ? -1 : snprintf(w->buf + w->used, w->n - w->used, "%s%d:%d:%u:%d:%u:%lld",
					  w->used ? "," : "", fd, mfd, c->page, c->side, c->size,
					  (long long)c->tx_base);
	if (len < 0 || (size_t)len >= w->n - w->used) {
		/* a program without dsock would read tokens as data; with no
		 * memory to hand over (no daemon: it restarted, or it forgot a
		 * connection whose first holders left) the new one could not
		 * use the ring: either way the kernel carries it from now */
		if (w->runs_dsock)
			DSOCK_INFO("sock %llu goes back to the kernel for the exec (%s)", (unsigned long long)s->id,
				   mfd < 0 ? strerror(-mfd) : "too many connections to name");
		if (mfd >= 0 && !mine)
			dsock_real.close(mfd);
		shm_handover(s, fd);
		c->exec_mark = w->mark; /* its fd survives: not dropped */
		return;
	}
	dsock_real.fcntl(mfd, F_SETFD, 0); /* survives the exec */
	c->exec_memfd = mfd;
	c->exec_memfd_pid = (int)dsock_sys(SYS_getpid);
	w->used += (size_t)len;
	c->exec_mark = w->mark;
	if (w->new_holder && c->exec_counted != w->mark) { /* (one count for several fds) */
		__atomic_add_fetch(&c->me->holders, 1, __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&c->h->maps[c->side], 1, __ATOMIC_SEQ_CST);
		c->exec_counted = w->mark;
	}
}

/* After the walk: a connection none of whose fds survives the exec is
 * closed by it, so this process lets go of it (undone if the exec fails). */
static void exec_drop(int fd, struct dsock_sock *s, void *arg)
{
	struct exec_walk *w = arg;
	struct shm_conn *c;

	if (s->owner == &dsock_shm_transport && (c = shm_conn(s)) && c->state == SC_ATTACHED &&
	    c->exec_mark != w->mark && !c->let_go) {
		shm_let_go(c);
		c->exec_dropped = 1;
	}
}

size_t shm_exec_env(char *buf, size_t n, int spawn, const struct dsock_exec_target *t)
{
	static const char name[] = "DSOCK_EXEC_SHM=";
	/* a vfork child (our memory, its own process) is a new holder too */
	struct exec_walk w = { .buf = buf + sizeof(name) - 1, .n = n - (sizeof(name) - 1),
			       .new_holder = spawn || !dsock_table_owner(), .target = t, .runs_dsock = -1 };

	if (n <= sizeof(name))
		return 0;
	/* another process will read these connections: no lease of ours may
	 * outlive a recv on them from now on (as at fork) */
	if (w.new_holder)
		__atomic_add_fetch(&shm_fork_gen, 1, __ATOMIC_RELAXED);
	/* nor may a producer announce on our links what the other reads */
	shm_link_unjoin_all();
	w.mark = ++exec_mark;
	dsock_fdt_walk(exec_one, &w);
	if (!w.new_holder) /* our own exec (not a vfork child's: our memory) */
		dsock_fdt_walk(exec_drop, &w);
	if (!w.used)
		return 0;
	memcpy(buf, name, sizeof(name) - 1);
	return sizeof(name) - 1 + w.used;
}

void shm_exec_done(int started)
{
	struct exec_walk w = { .restore = 1, .started = started };
	dsock_fdt_walk(exec_one, &w);
}

/* In the new program: take back the connections the old one handed over. */
void shm_adopt(void)
{
	const char *env = getenv("DSOCK_EXEC_SHM");
	char copy[1024];

	if (!env)
		return;
	snprintf(copy, sizeof(copy), "%s", env);
	unsetenv("DSOCK_EXEC_SHM");
	for (char *save, *e = strtok_r(copy, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
		int fd, memfd, side;
		unsigned size, page;
		long long txb;
		struct dsock_sock *s;
		struct shm_conn *c;

		if (sscanf(e, "%d:%d:%u:%d:%u:%lld", &fd, &memfd, &page, &side, &size, &txb) != 6)
			continue;
		dsock_real.fcntl(memfd, F_SETFD, FD_CLOEXEC);
		s = dsock_fdt_get(fd);
		if (!s || s->tp || !(c = shm_new_conn(s))) {
			if (s)
				dsock_sock_put(s);
			dsock_real.close(memfd);
			continue;
		}
		if (shm_map_conn(c, memfd, page, side, size)) {
			/* (the count the old program made for us stays: the
			 * slot is lost to its pool, never given to another) */
			DSOCK_WARN("cannot map the memory of fd %d handed over by exec: it stays on the kernel", fd);
			free(c);
			dsock_real.close(memfd);
			dsock_sock_put(s);
			continue;
		}
		c->state = SC_ATTACHED;
		c->fork_gen = shm_fork_gen - 1; /* the old program may hold it too */
		shm_fast_count(c);
		c->reported = 1;
		c->tx_base = txb;
		/* the old program counted us in holders and maps (for a
		 * spawned child: before it ran) */
		shm_held_add(c, 0);
		s->reason = DSOCK_R_NONE;
		s->state = DSOCK_ST_CONNECTED;
		dsock_sock_attach(s, &dsock_shm_transport, c);
		dsock_sock_put(s);
		/* counted in a slot of its parent's pools (as a fork child
		 * is): if it ends without its release, the daemon retires
		 * them */
		dsock_ctl_hello_flags(DSOCK_HELLO_POOLS);
	}
}

/* This process lets go of c: returns 1 if it was the last holder. */
int shm_let_go(struct shm_conn *c)
{
	if (c->let_go)
		return 0;
	c->let_go = 1;
	return __atomic_sub_fetch(&c->me->holders, 1, __ATOMIC_SEQ_CST) == 0;
}

/* At exit every fd closes: the last holder ends each connection as a
 * close would (tokens drained: a FIN, not a reset). */
static void exit_one(int fd, struct dsock_sock *s, void *arg)
{
	if (s->owner != &dsock_shm_transport || !shm_conn(s))
		return;
	shm_forked_exit(shm_conn(s));
	if (__atomic_load_n(&s->tp, __ATOMIC_ACQUIRE))
		shm_closing(s, fd);
}

void shm_exit(void)
{
	dsock_fdt_walk(exit_one, NULL);
}

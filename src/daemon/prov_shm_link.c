/* Links for the shared-memory transport: one memfd per pair of processes
 * with connections on the rings between them (shm_layout.h), made at
 * their first pairing, sent to each of the two before the first PAIRED
 * result that names it, and dropped when either process leaves (the
 * other is told; it unmaps the link and its pools once its connections
 * let go).  The link's pools hold its connections' memory.
 * Hashed by the two processes, so a pairing finds its link in the same
 * time with one peer process or thousands.
 *
 * Bells: each process with a link has one eventfd, made here, that its
 * link peers ring when they announce to it while a poller of it sleeps
 * (shm_layout.h).  It is sent to the process itself before its first
 * LINK and to each link peer right after that link's LINK; the daemon
 * keeps it until the process leaves and never rings it. */
#include "daemon/prov_shm.h"
#include "daemon/pairing.h"
#include "daemon/registry.h"
#include "common/hmap.h"
#include "common/log.h"
#include "common/shm_layout.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct link {
	const struct dd_proc *proc[2]; /* side 0 is the one that paired first */
	struct dd_reply_to to[2];
	uint32_t id;
	int fd;
	int sent[2];   /* that side has the memfd */
	struct dd_shm_pool *pools;
	uint32_t live; /* pairs in its pools */
	struct link *prev, *next;
};

static struct link *links;
static struct dsock_hmap by_procs;
static struct dsock_hmap bells; /* process -> its bell's fd, bit 32: sent to it */

#define BELL_SENT (1ull << 32)

/* p's bell (made if need be), or -1; *sent: p has it already. */
static int bell_of(const struct dd_proc *p, int *sent)
{
	uint64_t v, key = (uint64_t)(uintptr_t)p;
	int fd;

	if (dsock_hmap_get(&bells, key, &v)) {
		*sent = (v & BELL_SENT) != 0;
		return (int)(uint32_t)v;
	}
	*sent = 0;
	if ((fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		return -1;
	if (dsock_hmap_put(&bells, key, (uint32_t)fd)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Before end i's first LINK: its own bell, once. */
static void send_own_bell(const struct dd_reply_to *to)
{
	int sent, fd = bell_of(to->proc, &sent);

	if (fd < 0 || sent)
		return;
	struct dsock_msg_result m = { .transport = DSOCK_PATH_SHM, .result = DSOCK_RES_BELL };
	if (dd_send_result(to, &m, fd) == 0)
		dsock_hmap_put(&bells, (uint64_t)(uintptr_t)to->proc, (uint32_t)fd | BELL_SENT);
}

/* After end i's LINK: the bell of the link's other process (side). */
static void send_peer_bell(const struct link *l, const struct dd_reply_to *to, int side)
{
	int sent, fd;

	if (l->proc[0] == l->proc[1]) /* (connected to itself: its own) */
		return;
	if ((fd = bell_of(l->proc[1 - side], &sent)) < 0)
		return;
	struct dsock_msg_result m = { .transport = DSOCK_PATH_SHM, .result = DSOCK_RES_BELL, .link = l->id,
				      .link_side = (uint16_t)side };
	dd_send_result(to, &m, fd);
}
static uint32_t next_id;
static unsigned long n_links;

static uint64_t procs_key(const struct dd_proc *a, const struct dd_proc *b)
{
	uintptr_t k[2] = { (uintptr_t)(a < b ? a : b), (uintptr_t)(a < b ? b : a) };

	return dsock_hash(k, sizeof(k), 0x4c);
}

static void link_header(void *page, void *arg)
{
	struct dsock_link_hdr *h = page;

	(void)arg;
	h->magic = DSOCK_LINK_MAGIC;
	h->version = DSOCK_LINK_VERSION;
	h->slots = DSOCK_LINK_SLOTS;
}

/* The link of the two processes, made if need be; NULL when there is
 * none to be had (an end without a process, no memory). */
static struct link *link_of(const struct dd_proc *a, const struct dd_proc *b, const struct dd_reply_to *ta,
			    const struct dd_reply_to *tb)
{
	uint64_t v, key;
	struct link *l;

	if (!a || !b)
		return NULL;
	key = procs_key(a, b);
	if (dsock_hmap_get(&by_procs, key, &v)) {
		l = (struct link *)(uintptr_t)v;
		/* (a hash that collides leaves the newer pair without a link) */
		return (l->proc[0] == a && l->proc[1] == b) || (l->proc[0] == b && l->proc[1] == a) ? l : NULL;
	}
	if (!(l = calloc(1, sizeof(*l))))
		return NULL;
	if ((l->fd = dd_sealed_memfd("dsock-link", DSOCK_LINK_BYTES, link_header, NULL)) < 0) {
		DSOCK_WARN("cannot create a link: %s", strerror(-l->fd));
		free(l);
		return NULL;
	}
	if (dsock_hmap_put(&by_procs, key, (uint64_t)(uintptr_t)l)) {
		close(l->fd);
		free(l);
		return NULL;
	}
	l->proc[0] = a;
	l->proc[1] = b;
	l->to[0] = *ta;
	l->to[1] = *tb;
	if (!++next_id)
		next_id = 1;
	l->id = next_id;
	l->next = links;
	if (links)
		links->prev = l;
	links = l;
	n_links++;
	return l;
}

int dd_shm_link_take(const struct dd_reply_to *to[2], struct dsock_msg_result r[2], uint32_t ring_size,
		     struct dd_pair *x)
{
	struct link *l = link_of(to[0]->proc, to[1]->proc, to[0], to[1]);
	int ls[2], e;

	for (int i = 0; i < 2; i++) {
		r[i].link = 0;
		r[i].link_side = 0;
	}
	if (!l)
		return -ENOENT;
	for (int i = 0; i < 2; i++) {
		/* which side of the link end i is on (both, for a process
		 * connected to itself: one side per end) */
		ls[i] = l->proc[0] == l->proc[1] ? i : l->proc[0] == to[i]->proc ? 0 : 1;
		if (!l->sent[ls[i]]) {
			struct dsock_msg_result m = { .transport = r[i].transport, .result = DSOCK_RES_LINK,
						      .link = l->id, .link_side = (uint16_t)ls[i] };
			send_own_bell(to[i]);
			if (dd_send_result(to[i], &m, l->fd))
				return -EIO;
			l->sent[ls[i]] = 1;
			send_peer_bell(l, to[i], ls[i]);
		}
	}
	if ((e = dd_shm_pool_take(&l->pools, &l->live, l->id, ls, to, ring_size, x, r)))
		return e;
	for (int i = 0; i < 2; i++) {
		r[i].link = l->id;
		r[i].link_side = (uint16_t)ls[i];
	}
	return 0;
}

#define LINE_DEPTH 16 /* registered ancestors whose pools a leaving child retires */

/* A fork child that mapped pools of its parent's links left, or a
 * program that adopted connections in them from an exec (HELLO flag
 * POOLS, its parent as ppid).  What it counted in their slots' maps
 * stays counted (only a release takes a count off, and a process that ends with _exit or a
 * signal makes none), so those slots would wait for ever: the links of
 * each registered ancestor retire their pools instead (each goes once its
 * last pair ends, the two processes told), and their next pairs take new
 * ones.  A child cannot map a pool made after it registered. */
static void retire_inherited(const struct dd_proc *p)
{
	pid_t pid = p->ppid;

	for (int depth = 0; depth < LINE_DEPTH && pid > 0; depth++) {
		const struct dd_proc *a = dd_proc_find(pid);
		if (!a)
			return;
		for (struct link *l = links; l; l = l->next) {
			if ((l->proc[0] != a && l->proc[1] != a) || !l->pools)
				continue;
			dd_shm_pool_retire(l->pools, l->id, l->to);
			l->pools = NULL;
		}
		pid = (a->flags & DSOCK_HELLO_FORKED) ? a->ppid : 0;
	}
}

/* A process left: its links go, and the other process of each is told. */
void dd_shm_link_forget(const struct dd_proc *p)
{
	uint64_t v;

	if (p->flags & DSOCK_HELLO_POOLS)
		retire_inherited(p);
	if (dsock_hmap_get(&bells, (uint64_t)(uintptr_t)p, &v)) {
		close((int)(uint32_t)v);
		dsock_hmap_del(&bells, (uint64_t)(uintptr_t)p);
	}
	for (struct link *l = links, *next; l; l = next) {
		next = l->next;
		if (l->proc[0] != p && l->proc[1] != p)
			continue;
		int other = l->proc[0] == p ? 1 : 0;
		if (l->proc[other] != p && l->sent[other]) {
			struct dsock_msg_result m = { .transport = DSOCK_PATH_SHM, .result = DSOCK_RES_LINK,
						      .link = l->id, .link_side = (uint16_t)other };
			dd_send_result(&l->to[other], &m, -1);
		}
		dsock_hmap_del(&by_procs, procs_key(l->proc[0], l->proc[1]));
		if (l->prev)
			l->prev->next = l->next;
		else
			links = l->next;
		if (l->next)
			l->next->prev = l->prev;
		dd_shm_pool_retire(l->pools, 0, NULL);
		close(l->fd);
		free(l);
		n_links--;
	}
}

unsigned long dd_shm_links(void)
{
	return n_links;
}

/* Provisioning for the shared-memory transport: a slot in a pool of the
 * two processes' link for each pair (its header written here; both
 * processes map the pool once), or a sealed memfd of its own where they
 * have no link; the ring size (DSOCK_RING_KB) and the memory limit
 * (DSOCK_SHM_LIMIT_MB).  The daemon keeps the memfd while the pair lives,
 * for an exec that hands a connection to a new program (the ends close
 * theirs once mapped: FETCH in proto.h). */
#include "daemon/prov_shm.h"
#include "daemon/lineage.h"
#include "common/log.h"
#include "common/shm_layout.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static uint32_t ring_size = DSOCK_RING_DEFAULT;
static uint64_t limit; /* bytes of connection memory; 0: no limit */
static unsigned long n_conns, n_own, n_limited; /* n_own: memfds of their own */

static size_t conn_bytes(void)
{
	return DSOCK_SHM_HDR + 2 * (size_t)ring_size;
}

static int shm_init(void)
{
	/* bytes per direction of every connection's ring */
	const char *kb = getenv("DSOCK_RING_KB");
	long v = kb ? atol(kb) * 1024 : DSOCK_RING_DEFAULT;
	/* connection memory in all, default a quarter of the RAM; beyond it
	 * new connections stay on the kernel */
	const char *mb = getenv("DSOCK_SHM_LIMIT_MB");
	long long lim = (long long)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE) / 4;

	if (v < DSOCK_RING_MIN || v > DSOCK_RING_MAX || (v & (v - 1))) {
		fprintf(stderr, "dsockd: DSOCK_RING_KB must be a power of two from %u to %u\n",
			DSOCK_RING_MIN >> 10, DSOCK_RING_MAX >> 10);
		return -1;
	}
	if (mb) {
		char *end;
		lim = strtoll(mb, &end, 10) * 1024 * 1024;
		if (*end || lim < 0) {
			fprintf(stderr, "dsockd: DSOCK_SHM_LIMIT_MB must be a number of MiB (0: no limit)\n");
			return -1;
		}
	}
	ring_size = (uint32_t)v;
	limit = (uint64_t)(lim > 0 ? lim : 0);
	return 0;
}

int dd_sealed_memfd(const char *name, size_t len, void (*init)(void *page, void *arg), void *arg)
{
	void *h;
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) < 0)
		goto fail;
	h = mmap(NULL, DSOCK_SHM_HDR, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		goto fail;
	init(h, arg);
	munmap(h, DSOCK_SHM_HDR);
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		goto fail;
	return fd;
fail:
	close(fd);
	return -errno;
}

void dd_shm_header(struct dsock_shm_hdr *h, uint32_t rs)
{
	memset(h, 0, sizeof(*h));
	h->magic = DSOCK_SHM_MAGIC;
	h->version = DSOCK_SHM_VERSION;
	h->ring_size = rs;
	h->data_off = DSOCK_SHM_HDR;
	for (int i = 0; i < 2; i++)
		h->side[i].switch_off = DSOCK_SWITCH_NONE;
}

static void conn_header(void *page, void *arg)
{
	(void)arg;
	dd_shm_header(page, ring_size);
}

static int shm_make(struct dd_pair *x, const struct dd_reply_to *to[2], struct dsock_msg_result r[2])
{
	int fd;

	if (limit && dd_shm_pooled_bytes + (n_own + 1) * conn_bytes() > limit) {
		if (n_limited++ % 1000 == 0)
			DSOCK_WARN("connection memory limit (%llu bytes, %lu connections) reached: "
				   "new connections stay on the kernel", (unsigned long long)limit, n_conns);
		return -ENOSPC;
	}
	r[0].ring_size = r[1].ring_size = ring_size;
	if (dd_shm_link_take(to, r, ring_size, x) == 0) {
		n_conns++;
		return 0;
	}
	/* no link between the two processes: memory of its own */
	fd = dd_sealed_memfd("dsock-conn", conn_bytes(), conn_header, NULL);
	if (fd < 0) {
		DSOCK_WARN("cannot create connection memory: %s", strerror(-fd));
		return fd;
	}
	x->fd[0] = x->fd[1] = fd;
	n_conns++;
	n_own++;
	return 0;
}

/* A pool holds every connection between the two processes: its memfd
 * goes only to the process that paired this end, or one of its line (a
 * fork child, a spawned or exec'd program), never to another holder of
 * the socket (one sent it over SCM_RIGHTS): that one's exec takes the
 * connection back to the kernel instead. */
static int shm_fetched(const struct dd_pair *x, int side, pid_t pid, struct dsock_msg_result *r)
{
	if (x->priv && (!pid || !x->start[side] || !dd_descends(pid, x->pid[side], x->start[side])))
		return -EPERM;
	r->ring_size = x->priv ? dd_shm_pool_ring(x) : ring_size;
	r->pool_page = (uint32_t)(dd_shm_pool_off(x) / DSOCK_SHM_HDR);
	return 0;
}

/* No process holds either end: each side attached and then let go by its
 * last holder, or refused; and, in a pool that gives slots out again, no
 * process maps the slot any more (a refused side stays mapped until its
 * release: freed while mapped, the slot would wait instead of coming back
 * at once; in a retired pool a count that a dead fork child left must not
 * keep the pair, and so the pool, alive). */
static int shm_dead(const struct dd_pair *x)
{
	struct dsock_shm_side side[2];
	uint32_t maps[2];
	off_t off = dd_shm_pool_off(x);

	if (pread(x->fd[0], side, sizeof(side), off + (off_t)offsetof(struct dsock_shm_hdr, side)) !=
	    (ssize_t)sizeof(side))
		return 0;
	for (int i = 0; i < 2; i++) {
		uint32_t att = side[i].attached;
		if (!(att == DSOCK_ATT_REFUSED || (att == DSOCK_ATT_ATTACHED && side[i].holders == 0)))
			return 0;
	}
	if (!x->priv || dd_shm_pool_retired(x))
		return 1;
	return pread(x->fd[0], maps, sizeof(maps), off + (off_t)offsetof(struct dsock_shm_hdr, maps)) ==
		       (ssize_t)sizeof(maps) &&
	       !maps[0] && !maps[1];
}

static void shm_release(struct dd_pair *x)
{
	if (x->priv) {
		dd_shm_pool_give_back(x);
	} else {
		close(x->fd[0]);
		n_own--;
	}
	n_conns--;
}

static void shm_stat(char *buf, size_t n)
{
	size_t l = strlen(buf);

	snprintf(buf + l, n - l, " shm_conns=%lu shm_bytes=%llu shm_limited=%lu shm_links=%lu", n_conns,
		 (unsigned long long)(dd_shm_pooled_bytes + n_own * conn_bytes()), n_limited, dd_shm_links());
	dd_shm_pool_stat(buf, n);
}

const struct dd_provision dd_prov_shm = {
	.transport = DSOCK_PATH_SHM,
	.name = "shm",
	.init = shm_init,
	.make = shm_make,
	.forget = dd_shm_link_forget,
	.fetched = shm_fetched,
	.dead = shm_dead,
	.release = shm_release,
	.stat = shm_stat,
};

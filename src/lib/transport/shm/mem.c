/* A connection's memory: mapped from a memfd of its own (a pairing
 * without a link, or an exec's), or found in a pool this process holds,
 * and checked before use. */
#include "lib/transport/shm/shm.h"
#include "lib/base/real.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Takes the connection memory at h (len bytes) if its header agrees. */
static int use_mem(struct shm_conn *c, struct dsock_shm_hdr *h, size_t len, int side, uint32_t size)
{
	if (h->magic != DSOCK_SHM_MAGIC || h->version != DSOCK_SHM_VERSION || h->ring_size != size ||
	    h->data_off != DSOCK_SHM_HDR)
		return -EINVAL;
	c->h = h;
	c->map_len = len;
	c->size = size;
	c->side = side;
	c->me = &h->side[side];
	c->peer = &h->side[1 - side];
	c->tx = &h->ring[side];
	c->rx = &h->ring[1 - side];
	c->txd = (unsigned char *)h + DSOCK_SHM_HDR + (size_t)side * size;
	c->rxd = (unsigned char *)h + DSOCK_SHM_HDR + (size_t)(1 - side) * size;
	return 0;
}

static int size_ok(int side, uint32_t size)
{
	return size >= DSOCK_RING_MIN && size <= DSOCK_RING_MAX && !(size & (size - 1)) && side >= 0 && side <= 1;
}

/* Maps and checks a connection's memory from memfd, `page` pages in.
 * Trusts only what it can verify: the memfd is sealed against shrinking
 * and holds the rings, and their header agrees.  Once mapped, the fd is
 * closed: one per connection would count against the application's fd
 * limit (a program that fits natively must fit under dsock) and show in
 * its /proc/self/fd; an exec gets it again from the daemon (exec_one). */
int shm_map_conn(struct shm_conn *c, int memfd, uint32_t page, int side, uint32_t size)
{
	size_t len = DSOCK_SHM_HDR + 2 * (size_t)size;
	off_t off = (off_t)page * DSOCK_SHM_HDR;
	/* mmap takes offsets in system pages, which may be larger than the
	 * 4 KiB ones that number slots: from the page the slot starts in */
	size_t delta = (size_t)(off % (off_t)sysconf(_SC_PAGESIZE));
	int seals = dsock_real.fcntl(memfd, F_GET_SEALS);
	struct stat st;
	unsigned char *base;
	struct dsock_shm_hdr *h;

	if (!size_ok(side, size))
		return -EINVAL;
	if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(memfd, &st) < 0 || st.st_size < off ||
	    (size_t)(st.st_size - off) < len)
		return -EINVAL;
	base = mmap(NULL, len + delta, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, off - (off_t)delta);
	if (base == MAP_FAILED)
		return -errno;
	h = (struct dsock_shm_hdr *)(base + delta);
	if (use_mem(c, h, len, side, size)) {
		munmap(base, len + delta);
		return -EINVAL;
	}
	c->map_len = len + delta;
	c->map_delta = delta;
	dsock_real.close(memfd);
	c->page = page;
	return 0;
}

int shm_map_given(struct shm_conn *c, const struct shm_given *g)
{
	struct shm_pool *p;
	void *h;
	int r;

	if (g->memfd >= 0)
		return shm_map_conn(c, g->memfd, 0, g->side, g->size);
	if (!size_ok(g->side, g->size) || !(h = shm_pool_slot(g->pool, g->gen, g->page, g->size, &p)))
		return -ENOENT;
	c->pool = p; /* before c->h: shm_unmap (a fork child's) finds both */
	if ((r = use_mem(c, h, DSOCK_SHM_HDR + 2 * (size_t)g->size, g->side, g->size))) {
		c->pool = NULL;
		shm_pool_put(p);
		return r;
	}
	c->page = g->page;
	return 0;
}

void shm_unmap(struct shm_conn *c)
{
	if (!c->h)
		return;
	if (c->pool)
		shm_pool_put(c->pool);
	else
		munmap((unsigned char *)c->h - c->map_delta, c->map_len);
	c->h = NULL;
	c->pool = NULL;
}

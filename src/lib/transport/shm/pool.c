/* Pools of connection memory (shm_layout.h): each pool the daemon gives
 * this process is mapped once and found by its id, so a connection
 * between two processes that share a link costs no memfd, no mmap and no
 * descriptor passing.  A pool is unmapped once no connection of ours uses
 * it and the daemon will name it no more: its link's other process left,
 * the daemon retired it (a fork child that mapped it left: its counts in
 * the slots stay), the daemon restarted, or this process is a fork child
 * (the daemon gives a child pools of its own). */
#include "lib/transport/shm/shm.h"
#include "common/hmap.h"
#include "common/log.h"
#include "common/proto.h"
#include "lib/base/real.h"
#include "lib/ctl/ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>

struct shm_pool {
	uint32_t id;
	unsigned gen;      /* the daemon connection that named it */
	uint32_t link;     /* the link it belongs to, and our side of it */
	int link_side;
	unsigned char *base;
	size_t len;
	size_t slot_bytes;
	uint32_t ring_size;
	int refs;          /* connections of ours in it */
	int gone;          /* never named again: unmapped at refs 0 */
	struct shm_pool *prev, *next;
};

static pthread_mutex_t pools_mu = PTHREAD_MUTEX_INITIALIZER;
static struct shm_pool *pools;
static struct dsock_hmap by_id;

static uint64_t id_key(uint32_t id, unsigned gen)
{
	uint32_t k[2] = { id, gen };

	return dsock_hash(k, sizeof(k), 0x50);
}

static void unmap_locked(struct shm_pool *p)
{
	if (!p->gone)
		dsock_hmap_del(&by_id, id_key(p->id, p->gen));
	if (p->prev)
		p->prev->next = p->next;
	else
		pools = p->next;
	if (p->next)
		p->next->prev = p->prev;
	munmap(p->base, p->len);
	free(p);
}

static void gone_locked(struct shm_pool *p)
{
	if (p->gone)
		return;
	dsock_hmap_del(&by_id, id_key(p->id, p->gen));
	p->gone = 1;
	if (!p->refs)
		unmap_locked(p);
}

void shm_pool_result(const struct dsock_msg_result *r, int fd)
{
	unsigned gen = dsock_ctl_gen();
	uint32_t rs = r->ring_size;
	size_t slot = DSOCK_SHM_HDR + 2 * (size_t)rs;
	struct stat st;
	struct shm_pool *p = NULL;
	uint64_t v;
	void *base;

	if (fd < 0) { /* retired: named no more */
		pthread_mutex_lock(&pools_mu);
		if (dsock_hmap_get(&by_id, id_key(r->pool, gen), &v))
			gone_locked((struct shm_pool *)(uintptr_t)v);
		pthread_mutex_unlock(&pools_mu);
		return;
	}
	int seals = dsock_real.fcntl(fd, F_GET_SEALS);

	if (rs < DSOCK_RING_MIN || rs > DSOCK_RING_MAX || (rs & (rs - 1)) || !r->pool || seals < 0 ||
	    !(seals & F_SEAL_SHRINK) || fstat(fd, &st) < 0 || st.st_size <= 0 || (size_t)st.st_size % slot ||
	    (size_t)st.st_size / slot > DSOCK_POOL_SLOTS_MAX) {
		dsock_real.close(fd);
		DSOCK_WARN("unusable pool memory from the daemon: its connections stay on the kernel");
		return;
	}
	base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	dsock_real.close(fd);
	if (base == MAP_FAILED || !(p = calloc(1, sizeof(*p)))) {
		if (base != MAP_FAILED)
			munmap(base, (size_t)st.st_size);
		DSOCK_WARN("cannot map pool memory: its connections stay on the kernel");
		return;
	}
	p->id = r->pool;
	p->gen = gen;
	p->link = r->link;
	p->link_side = r->link_side;
	p->base = base;
	p->len = (size_t)st.st_size;
	p->slot_bytes = slot;
	p->ring_size = rs;
	pthread_mutex_lock(&pools_mu);
	/* pools from an earlier daemon: never named again */
	for (struct shm_pool *o = pools, *next; o; o = next) {
		next = o->next;
		if (o->gen != gen)
			gone_locked(o);
	}
	/* (given twice: the first stands) */
	if (dsock_hmap_get(&by_id, id_key(p->id, gen), &v) ||
	    dsock_hmap_put(&by_id, id_key(p->id, gen), (uint64_t)(uintptr_t)p)) {
		pthread_mutex_unlock(&pools_mu);
		munmap(base, p->len);
		free(p);
		return;
	}
	p->next = pools;
	if (pools)
		pools->prev = p;
	pools = p;
	pthread_mutex_unlock(&pools_mu);
	DSOCK_DBG("pool %u of link %u: %zu slots mapped", p->id, p->link, p->len / slot);
}

void *shm_pool_slot(uint32_t id, unsigned gen, uint32_t page, uint32_t ring_size, struct shm_pool **out)
{
	uint64_t v;
	struct shm_pool *p;
	size_t off = (size_t)page * DSOCK_SHM_HDR;
	void *at = NULL;

	pthread_mutex_lock(&pools_mu);
	if (dsock_hmap_get(&by_id, id_key(id, gen), &v)) {
		p = (struct shm_pool *)(uintptr_t)v;
		if (p->ring_size == ring_size && off % p->slot_bytes == 0 && off < p->len) {
			p->refs++;
			*out = p;
			at = p->base + off;
		}
	}
	pthread_mutex_unlock(&pools_mu);
	return at;
}

void shm_pool_put(struct shm_pool *p)
{
	pthread_mutex_lock(&pools_mu);
	if (--p->refs == 0 && p->gone)
		unmap_locked(p);
	pthread_mutex_unlock(&pools_mu);
}

void shm_pool_link_gone(uint32_t link, int side, unsigned gen)
{
	pthread_mutex_lock(&pools_mu);
	for (struct shm_pool *p = pools, *next; p; p = next) {
		next = p->next;
		if (p->link == link && p->link_side == side && p->gen == gen)
			gone_locked(p);
	}
	pthread_mutex_unlock(&pools_mu);
}

/* Held across a fork: the child's copy of the table is whole.  A child
 * that inherits connections in pools says so when it registers: if it
 * ends without releasing them, its counts in their slots stay, and the
 * daemon retires those pools when it leaves. */
void shm_pool_fork_prepare(void)
{
	int inherits = 0;

	pthread_mutex_lock(&pools_mu);
	for (struct shm_pool *p = pools; p && !inherits; p = p->next)
		inherits = p->refs > 0;
	dsock_ctl_hello_flags(inherits ? DSOCK_HELLO_POOLS : 0);
}

void shm_pool_fork_parent(void)
{
	pthread_mutex_unlock(&pools_mu);
}

void shm_pool_fork_child(void)
{
	/* the parent's pools are the parent's: only the connections we
	 * inherited keep theirs mapped */
	pthread_mutex_init(&pools_mu, NULL);
	for (struct shm_pool *p = pools, *next; p; p = next) {
		next = p->next;
		gone_locked(p);
	}
}

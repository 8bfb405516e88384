/* Pools of connection memory for the shared-memory transport
 * (shm_layout.h): the slots of the connections between the two processes
 * of a link.  A pool is made when the link's pools are full, sent to each
 * of the two processes once, before the first PAIRED result that names
 * it, and retired when the link ends (no slot is given out again; the
 * memfd closes once its last pair is gone: an exec may still FETCH a
 * slot), or when a fork child that may have counted in its slots leaves
 * (prov_shm_link.c).  A freed slot is given out again only when no
 * process maps it (hdr.maps), after its pages are punched out; until then
 * it waits (a fork child still holds the connection), looked at again
 * when the link needs a slot; for good only if a process lies. */
#include "daemon/prov_shm.h"
#include "daemon/pairing.h"
#include "common/log.h"
#include "common/shm_layout.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct dd_shm_pool {
	int fd;
	uint32_t id;
	uint32_t ring_size;
	uint32_t nslots;
	size_t slot_bytes;
	uint32_t live;     /* pairs in it */
	uint32_t next_new; /* slots below it have been given out */
	uint32_t *free;    /* slots to give out again (nfree of them) */
	uint32_t nfree;
	uint32_t *waiting; /* freed slots some process still maps (nwaiting) */
	uint32_t nwaiting;
	uint32_t wait_at;  /* the next of them to look at */
	int sent[2];       /* that side of the link has the memfd */
	int retired;       /* its link ended */
	uint32_t *link_live; /* the link's count of pairs (NULL once retired) */
	struct dd_shm_pool *next;
};

static uint32_t next_id;
static unsigned long n_pools, n_waiting, n_freed;
uint64_t dd_shm_pooled_bytes;

/* The ring size for a new pool of a link whose processes already share
 * `live` connections: the configured size for the first 256, then half
 * for every doubling, down to the minimum.  A process pair with 100,000
 * connections then holds some 1.6 GiB at most (256 KiB rings: 52 GiB),
 * as the kernel shrinks socket buffers under memory pressure; the
 * connections of many-connection servers carry small messages. */
static uint32_t tier(uint32_t configured, uint32_t live)
{
	uint32_t rs = configured;

	for (uint32_t n = 256; live >= n && rs > DSOCK_RING_MIN && n < (1u << 31); n *= 2)
		rs /= 2;
	return rs;
}

static void no_init(void *page, void *arg)
{
	(void)page;
	(void)arg;
}

static struct dd_shm_pool *pool_new(uint32_t ring_size)
{
	struct dd_shm_pool *p = calloc(1, sizeof(*p));
	size_t slot = DSOCK_SHM_HDR + 2 * (size_t)ring_size;
	size_t n = DSOCK_POOL_BYTES / slot;

	if (!p)
		return NULL;
	p->ring_size = ring_size;
	p->slot_bytes = slot;
	p->nslots = (uint32_t)(n < 1 ? 1 : n > DSOCK_POOL_SLOTS_MAX ? DSOCK_POOL_SLOTS_MAX : n);
	p->free = malloc(2 * (size_t)p->nslots * sizeof(*p->free));
	p->waiting = p->free ? p->free + p->nslots : NULL;
	p->fd = p->free ? dd_sealed_memfd("dsock-pool", p->nslots * slot, no_init, NULL) : -ENOMEM;
	if (p->fd < 0) {
		DSOCK_WARN("cannot create a pool of connection memory: %s", strerror(-p->fd));
		free(p->free);
		free(p);
		return NULL;
	}
	if (!++next_id)
		next_id = 1;
	p->id = next_id;
	n_pools++;
	return p;
}

static void pool_free(struct dd_shm_pool *p)
{
	n_waiting -= p->nwaiting;
	close(p->fd);
	free(p->free);
	free(p);
	n_pools--;
}

static off_t slot_off(const struct dd_shm_pool *p, uint32_t slot)
{
	return (off_t)slot * (off_t)p->slot_bytes;
}

/* Gives slot out again if no process maps it: 1, else 0. */
static int reclaim(struct dd_shm_pool *p, uint32_t slot)
{
	off_t off = slot_off(p, slot);
	uint32_t maps[2];

	/* nobody maps it (a process that lies only loses its own pair's
	 * connections): zeroed, its memory returned, ready for the next */
	if (pread(p->fd, maps, sizeof(maps), off + (off_t)offsetof(struct dsock_shm_hdr, maps)) !=
		    (ssize_t)sizeof(maps) ||
	    maps[0] || maps[1] || fallocate(p->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, (off_t)p->slot_bytes))
		return 0;
	p->free[p->nfree++] = slot;
	dd_shm_pooled_bytes -= p->slot_bytes;
	n_freed++;
	return 1;
}

#define RECLAIM_LOOKS 64 /* waiting slots looked at when the link's pools are full */

/* Looks at some waiting slots of the link's pools again, each pool's from
 * where its last look stopped (slots that wait for good do not hide the
 * others).  Runs once per pool's worth of pairings at most: a new pool
 * follows a look that frees nothing. */
static void reclaim_some(struct dd_shm_pool *list)
{
	int looks = 0;

	for (struct dd_shm_pool *p = list; p && looks < RECLAIM_LOOKS; p = p->next)
		for (uint32_t k = p->nwaiting < 8 ? p->nwaiting : 8; k && looks < RECLAIM_LOOKS; k--, looks++) {
			uint32_t i = p->wait_at % p->nwaiting;
			if (reclaim(p, p->waiting[i])) {
				p->waiting[i] = p->waiting[--p->nwaiting];
				n_waiting--;
			} else {
				p->wait_at = i + 1;
			}
			if (!p->nwaiting)
				break;
		}
}

/* The first pool on list with a slot to give, or NULL. */
static struct dd_shm_pool *with_room(struct dd_shm_pool *list)
{
	while (list && !list->nfree && list->next_new == list->nslots)
		list = list->next;
	return list;
}

int dd_shm_pool_take(struct dd_shm_pool **list, uint32_t *link_live, uint32_t link, const int ls[2],
		     const struct dd_reply_to *to[2], uint32_t ring_size, struct dd_pair *x, struct dsock_msg_result r[2])
{
	struct dd_shm_pool *p;
	struct dsock_shm_hdr h;
	uint32_t slot;

	/* new pools go first: the first with room is found at once */
	if (!(p = with_room(*list))) {
		reclaim_some(*list);
		p = with_room(*list);
	}
	if (!p) {
		if (!(p = pool_new(tier(ring_size, *link_live))))
			return -ENOMEM;
		p->link_live = link_live;
		p->next = *list;
		*list = p;
	}
	for (int i = 0; i < 2; i++) {
		if (p->sent[ls[i]])
			continue;
		struct dsock_msg_result m = { .transport = DSOCK_PATH_SHM, .result = DSOCK_RES_POOL, .link = link,
					      .link_side = (uint16_t)ls[i], .pool = p->id,
					      .ring_size = p->ring_size };
		if (dd_send_result(to[i], &m, p->fd))
			return -EIO; /* (a new pool stays for the next pair) */
		p->sent[ls[i]] = 1;
	}
	slot = p->nfree ? p->free[--p->nfree] : p->next_new++;
	dd_shm_header(&h, p->ring_size);
	if (pwrite(p->fd, &h, sizeof(h), slot_off(p, slot)) != (ssize_t)sizeof(h)) {
		int e = errno ? -errno : -EIO;
		p->free[p->nfree++] = slot;
		return e;
	}
	p->live++;
	(*link_live)++;
	dd_shm_pooled_bytes += p->slot_bytes;
	x->priv = p;
	x->slot = slot;
	x->fd[0] = x->fd[1] = p->fd;
	for (int i = 0; i < 2; i++) {
		r[i].ring_size = p->ring_size;
		r[i].pool = p->id;
		r[i].pool_page = (uint32_t)(slot_off(p, slot) / DSOCK_SHM_HDR);
	}
	return 0;
}

off_t dd_shm_pool_off(const struct dd_pair *x)
{
	return x->priv ? slot_off(x->priv, x->slot) : 0;
}

int dd_shm_pool_retired(const struct dd_pair *x)
{
	return ((const struct dd_shm_pool *)x->priv)->retired;
}

uint32_t dd_shm_pool_ring(const struct dd_pair *x)
{
	return ((const struct dd_shm_pool *)x->priv)->ring_size;
}

void dd_shm_pool_give_back(struct dd_pair *x)
{
	struct dd_shm_pool *p = x->priv;

	p->live--;
	if (p->link_live)
		(*p->link_live)--;
	if (p->retired) {
		dd_shm_pooled_bytes -= p->slot_bytes;
		if (!p->live)
			pool_free(p);
		return;
	}
	if (!reclaim(p, x->slot)) { /* (its memory stays counted) */
		p->waiting[p->nwaiting++] = x->slot;
		n_waiting++;
	}
}

void dd_shm_pool_retire(struct dd_shm_pool *list, uint32_t link, const struct dd_reply_to *to)
{
	for (struct dd_shm_pool *p = list, *next; p; p = next) {
		next = p->next;
		for (int i = 0; link && i < 2; i++)
			if (p->sent[i]) {
				struct dsock_msg_result m = { .transport = DSOCK_PATH_SHM, .result = DSOCK_RES_POOL,
							      .link = link, .link_side = (uint16_t)i, .pool = p->id };
				dd_send_result(&to[i], &m, -1);
			}
		p->retired = 1;
		p->link_live = NULL;
		p->next = NULL;
		/* its waiting slots go with it */
		dd_shm_pooled_bytes -= (uint64_t)(p->next_new - p->nfree - p->live) * p->slot_bytes;
		if (!p->live)
			pool_free(p);
	}
}

void dd_shm_pool_stat(char *buf, size_t n)
{
	size_t l = strlen(buf);

	snprintf(buf + l, n - l, " shm_pools=%lu shm_slots_freed=%lu shm_slots_waiting=%lu", n_pools, n_freed,
		 n_waiting);
}

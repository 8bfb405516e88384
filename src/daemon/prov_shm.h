/* The shared-memory transport's provisioning, between its files:
 * prov_shm.c (connection memory, the ops table), prov_shm_link.c (one
 * link per pair of processes) and prov_shm_pool.c (the link's pools of
 * connection memory). */
#ifndef DSOCKD_PROV_SHM_H
#define DSOCKD_PROV_SHM_H

#include "daemon/provision.h"

/* A memfd of len bytes whose first page init(page, arg) writes, its size
 * sealed so neither end can shrink it under the other (which would be
 * SIGBUS on access): the fd, or -errno. */
int dd_sealed_memfd(const char *name, size_t len, void (*init)(void *page, void *arg), void *arg);
#include "common/shm_layout.h"

#include <sys/types.h>

struct dd_shm_pool;

/* A connection header for rings of ring_size bytes. */
void dd_shm_header(struct dsock_shm_hdr *h, uint32_t ring_size);

/* The link of the two processes that to[0] and to[1] answer, made and
 * sent to each of them if need be (r[i].link and link_side name it for
 * end i), and a slot for pair x in one of its pools (r[i].pool and
 * pool_page, x->priv, slot, fd[]): 0, or -errno when there is no link or
 * no slot to be had (r[] then names no link). */
int dd_shm_link_take(const struct dd_reply_to *to[2], struct dsock_msg_result r[2], uint32_t ring_size,
		     struct dd_pair *x);
/* The provision op forget for links (provision.h). */
void dd_shm_link_forget(const struct dd_proc *p);

/* prov_shm_pool.c.  A slot for x in one of the pools on *list (a new one
 * made when all are full, its rings ring_size or smaller as *link_live,
 * the link's pairs, grows), each pool sent once to each side ls[i] of
 * link `link` through to[i]: 0 or -errno. */
int dd_shm_pool_take(struct dd_shm_pool **list, uint32_t *link_live, uint32_t link, const int ls[2],
		     const struct dd_reply_to *to[2], uint32_t ring_size, struct dd_pair *x, struct dsock_msg_result r[2]);
/* 1 if x's pool gives no slot out again (its counts need not be 0 for
 * x to end). */
int dd_shm_pool_retired(const struct dd_pair *x);
/* The ring size of x, which is in a pool. */
uint32_t dd_shm_pool_ring(const struct dd_pair *x);
/* Where x's memory starts in its fd. */
off_t dd_shm_pool_off(const struct dd_pair *x);
/* x is gone: its slot is given out again if nobody maps it. */
void dd_shm_pool_give_back(struct dd_pair *x);
/* These pools give no slot out again, and go once their last pair
 * ends: their link ended, or (link != 0) a process that may have counted
 * in their slots left; then each side i of the link that has a pool is
 * told through to[i] (to: the link's two; a POOL result without a
 * memfd: unmap it once unused). */
void dd_shm_pool_retire(struct dd_shm_pool *list, uint32_t link, const struct dd_reply_to *to);
void dd_shm_pool_stat(char *buf, size_t n);
/* Bytes of the slots in use or lost, at their full size. */
extern uint64_t dd_shm_pooled_bytes;
/* Links alive, for `dsock stat`. */
unsigned long dd_shm_links(void);

#endif

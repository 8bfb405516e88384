/* The shared-memory transport's provisioning, between its two files:
 * prov_shm.c (connection memory, the ops table) and prov_shm_link.c (one
 * link per pair of processes). */
#ifndef DSOCKD_PROV_SHM_H
#define DSOCKD_PROV_SHM_H

#include "daemon/provision.h"

/* A memfd of len bytes whose first page init(page, arg) writes, its size
 * sealed so neither end can shrink it under the other (which would be
 * SIGBUS on access): the fd, or -errno. */
int dd_sealed_memfd(const char *name, size_t len, void (*init)(void *page, void *arg), void *arg);
/* The provision ops intro and forget for links (provision.h). */
void dd_shm_link_intro(const struct dd_reply_to *to[2], struct dsock_msg_result r[2]);
void dd_shm_link_forget(const struct dd_proc *p);
/* Links alive, for `dsock stat`. */
unsigned long dd_shm_links(void);

#endif

/* A loopback TCP pair whose two ends are both adopted by the calling
 * process as an exec'ed program adopts inherited connections, on the rings
 * from the first byte (both sides switched).  For the unit tests that link
 * the library's objects and drive the shm transport by hand.  Inherited
 * connections never keep a lingering lease (another program may hold
 * them), so every receive here settles as it leaves. */
#ifndef UNIT_SHM_PAIR_H
#define UNIT_SHM_PAIR_H

#include "lib/sock/sock.h"
#include "lib/transport/shm/shm.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef RING
#define RING 65536u
#endif

struct conn {
	int a, b, memfd;
	struct dsock_shm_hdr *h;
};

/* A loopback listener on an ephemeral port (*la gets its address), or -1. */
static inline int loopback_listener(struct sockaddr_in *la)
{
	socklen_t l = sizeof(*la);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	*la = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (lfd < 0 || bind(lfd, (struct sockaddr *)la, sizeof(*la)) < 0 || listen(lfd, 8) < 0 ||
	    getsockname(lfd, (struct sockaddr *)la, &l) < 0)
		return -1;
	return lfd;
}

/* A connection's memory as the daemon makes it (k->memfd, mapped at k->h). */
static inline void make_memfd(struct conn *k)
{
	size_t len = DSOCK_SHM_HDR + 2 * RING;
	k->memfd = memfd_create("test-shm", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	if (k->memfd < 0 || ftruncate(k->memfd, (off_t)len) < 0 ||
	    fcntl(k->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		perror("memfd");
		exit(1);
	}
	k->h = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, k->memfd, 0);
	k->h->magic = DSOCK_SHM_MAGIC;
	k->h->version = DSOCK_SHM_VERSION;
	k->h->ring_size = RING;
	k->h->data_off = DSOCK_SHM_HDR;
}

static inline void make_conn(struct conn *k, int lfd, struct sockaddr_in *la)
{
	char env[160];

	k->a = socket(AF_INET, SOCK_STREAM, 0);
	if (k->a < 0 || connect(k->a, (struct sockaddr *)la, sizeof(*la)) < 0 || (k->b = accept(lfd, NULL, NULL)) < 0) {
		perror("loopback pair");
		exit(1);
	}
	make_memfd(k);
	for (int i = 0; i < 2; i++) {
		k->h->side[i].attached = DSOCK_ATT_ATTACHED;
		k->h->side[i].switch_off = 0;
		k->h->side[i].rx_switched = 1;
	}
	/* tx baselines: nothing but the SYN went yet (counted as 1, as the
	 * transport's own calibration would see it) */
	snprintf(env, sizeof(env), "%d:%d:0:0:%u:%lld,%d:%d:0:1:%u:%lld", k->a,
		 fcntl(k->memfd, F_DUPFD_CLOEXEC, 0), RING, (long long)shm_kernel_sent(k->a), k->b,
		 fcntl(k->memfd, F_DUPFD_CLOEXEC, 0), RING, (long long)shm_kernel_sent(k->b));
	setenv("DSOCK_EXEC_SHM", env, 1);
	shm_adopt();
	for (int i = 0; i < 2; i++) {
		struct dsock_sock *s = dsock_fdt_get(i ? k->b : k->a);
		if (!s || s->tp != &dsock_shm_transport) {
			fprintf(stderr, "adoption failed\n");
			exit(1);
		}
		dsock_sock_put(s);
	}
}

/* Closes both ends and the memory of a pair from make_conn. */
static inline void drop_conn(struct conn *k)
{
	close(k->a);
	close(k->b);
	close(k->memfd);
	munmap(k->h, DSOCK_SHM_HDR + 2 * RING);
}

#endif

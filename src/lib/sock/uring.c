/* io_uring: a ring reads, writes, polls and registers in epoll sets any fd
 * of the process, and none of its work passes through a wrapper.  So from
 * the process's first io_uring_setup seen (syscall(), the way libuv and
 * liburing make it) until an exec, the kernel carries every connection:
 * those a transport holds go back to it as for SCM_RIGHTS, later ones stay
 * with the reason "io-uring", and no epoll set keeps a registration the
 * application deleted (eghost.c: a ring's EPOLL_CTL_ADD of such an fd
 * would find it still registered). */
#include "lib/sock/sock.h"
#include "lib/sock/epset.h"
#include "lib/sock/io.h"

#include <stdatomic.h>

_Atomic int dsock_uring_seen;

/* (the walk's pointer holds no reference: the fd is looked up again) */
static void back_one(int fd, struct dsock_sock *unused, void *arg)
{
	(void)unused;
	(void)arg;
	dsock_io_hand_over(fd);
}

void dsock_sock_uring(void)
{
	/* (seq_cst, as settle()'s look after its offer: a connection offered
	 * meanwhile is either seen by the walk or sees the flag) */
	if (atomic_exchange(&dsock_uring_seen, 1))
		return;
	dsock_epset_ghosts_end();
	dsock_fdt_walk(back_one, NULL);
}

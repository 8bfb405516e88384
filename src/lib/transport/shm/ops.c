/* The shm transport's entry in the transport table, and its readiness. */
#include "lib/transport/shm/shm.h"

int shm_hidden_readable(struct dsock_sock *s)
{
	struct shm_conn *c = shm_conn(s);

	/* a ring that broke its rules counts as readable: the read resets it */
	return c && c->state == SC_ATTACHED && __atomic_load_n(&c->unbacked, __ATOMIC_RELAXED) &&
	       shm_readable(s, -1) != 0;
}

static uint64_t shm_rx_mark(struct dsock_sock *s)
{
	struct shm_conn *c = shm_conn(s);

	return c && c->state == SC_ATTACHED ? __atomic_load_n(&c->rx->tail, __ATOMIC_ACQUIRE) : 0;
}

/* SCM_RIGHTS: back to the kernel, and out of the transport here too. */
static int shm_handover_op(struct dsock_sock *s, int fd)
{
	int r = shm_handover(s, fd);

	return r ? r : shm_down_step(s, fd);
}

static void shm_counts(long *carried, long *back)
{
	*carried = atomic_load(&shm_ring_conns);
	*back = atomic_load(&shm_back_conns);
}

const struct dsock_transport dsock_shm_transport = {
	.name = "shm",
	.offer = shm_offer,
	.sendmsg = shm_sendmsg,
	.sendmsg_solo = shm_sendmsg_solo,
	.recvmsg = shm_recvmsg,
	.shutdown = shm_shutdown,
	.disconnect = shm_disconnect,
	.readable = shm_readable,
	.hidden_readable = shm_hidden_readable,
	.rx_mark = shm_rx_mark,
	.spurious_in = shm_spurious_in,
	.closing = shm_closing,
	.before_close = shm_before_close,
	.writable = shm_writable,
	.sockopt = shm_sockopt,
	.want_space = shm_want_space,
	.handover = shm_handover_op,
	.release = shm_release,
	.before_sleep = shm_settle_lingering,
	.init = shm_init,
	.adopt = shm_adopt,
	.fork_prepare = shm_fork_prepare,
	.fork_parent = shm_fork_parent,
	.fork_child = shm_fork_child,
	.exec_env = shm_exec_env,
	.exec_failed = shm_exec_failed,
	.exit = shm_exit,
	.counts = shm_counts,
};

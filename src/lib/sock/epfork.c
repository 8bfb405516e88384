/* The epoll wrapper's records across fork (epset.h): taken whole, with
 * no other thread halfway through a change, and a child's own from then
 * on. */
#include "lib/sock/epset.h"
#include "lib/sock/epset_int.h"
#include "lib/sock/light.h"
#include "lib/sock/poke.h"
#include "lib/sock/ready.h"

#include <pthread.h>
#include <stdatomic.h>

/* fork: the lists must not be caught half-changed by another thread */
void dsock_epset_fork_prepare(void)
{
	pthread_mutex_lock(&dsock_epset_mu);
	/* a set both processes hold holds no ghosts: one's ghost would be
	 * reported to the other, or taken out of the kernel's set by the
	 * other's wait after the first made it a member again */
	dsock_light_unghost(-1);
	dsock_epset_drop_ghosts(-1);
	dsock_hidden_fork(0);
	dsock_epset_alias_fork_prepare();
}

void dsock_epset_fork_parent(void)
{
	dsock_hidden_fork(1);
	dsock_epset_alias_fork_parent();
	pthread_mutex_unlock(&dsock_epset_mu);
}

void dsock_epset_fork_child(void)
{
	/* no thread but the forking one, and it is not asleep */
	atomic_store(&dsock_sleepers, 0);
	atomic_store(&dsock_bell_sleepers, 0);
	dsock_hidden_fork(2);
	dsock_light_fork_child();
	dsock_poke_fork_child();
	dsock_poll_bell_fork_child();
	dsock_epset_alias_fork_child();
	pthread_mutex_init(&dsock_epset_mu, NULL);
}

/* Pokes (poke.h): outstanding ones by epoll set.  The eventfds are ours: a
 * fork child keeps its copies (and the list) so that either process takes
 * them out of a set they share; an exec closes them (close-on-exec), which
 * takes them out of every set. */
#include "lib/sock/poke.h"
#include "lib/sock/light.h"
#include "lib/base/grow.h"
#include "lib/base/real.h"
#include "common/rawsys.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

_Atomic int dsock_pokes;
static pthread_mutex_t poke_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	int epfd, fd;
} *pokes;
static size_t npokes, pokes_cap;

void dsock_poke(int epfd)
{
	pthread_mutex_lock(&poke_mu);
	for (size_t i = 0; i < npokes; i++)
		if (pokes[i].epfd == epfd)
			goto out; /* readable until taken */
	if (dsock_grow(&pokes, &pokes_cap, npokes, sizeof(*pokes), 4))
		goto out;
	/* created readable (a count of 1), level-triggered */
	int fd = (int)dsock_sys(SYS_eventfd2, 1, EFD_CLOEXEC | EFD_NONBLOCK);
	struct epoll_event e = { .events = EPOLLIN, .data.u64 = DSOCK_POKE_DATA };
	if (fd < 0)
		goto out;
	/* counted before the set has it: a sleeper it wakes must look for it */
	atomic_fetch_add(&dsock_pokes, 1);
	if (dsock_real.epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &e) < 0) {
		atomic_fetch_sub(&dsock_pokes, 1);
		dsock_real.close(fd);
		goto out;
	}
	pokes[npokes].epfd = epfd;
	pokes[npokes++].fd = fd;
out:
	pthread_mutex_unlock(&poke_mu);
}

int dsock_events_take(struct epoll_event *ev, int n, uint64_t data, int *found)
{
	int k = 0;

	for (int i = 0; i < n; i++)
		if (ev[i].data.u64 == data)
			*found = 1;
		else
			ev[k++] = ev[i];
	return k;
}

int dsock_poke_take(int epfd, struct epoll_event *ev, int n, int *poked, int sleeper)
{
	int k;

	*poked = 0;
	k = dsock_events_take(ev, n, DSOCK_POKE_DATA, poked);
	if (!*poked)
		return n;
	if (!sleeper && dsock_light_sleeping(epfd, 0))
		return k; /* (theirs: the kernel wakes one while it is there) */
	pthread_mutex_lock(&poke_mu);
	for (size_t i = 0; i < npokes;)
		if (pokes[i].epfd == epfd) {
			dsock_real.epoll_ctl(epfd, EPOLL_CTL_DEL, pokes[i].fd, NULL);
			dsock_real.close(pokes[i].fd);
			pokes[i] = pokes[--npokes];
			atomic_fetch_sub(&dsock_pokes, 1);
		} else {
			i++;
		}
	pthread_mutex_unlock(&poke_mu);
	return k;
}

void dsock_poke_rekey(int from, int to)
{
	pthread_mutex_lock(&poke_mu);
	for (size_t i = 0; i < npokes; i++)
		if (pokes[i].epfd == from)
			pokes[i].epfd = to;
	pthread_mutex_unlock(&poke_mu);
}

void dsock_poke_fork_child(void)
{
	pthread_mutex_init(&poke_mu, NULL);
}

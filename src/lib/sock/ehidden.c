/* The readiness of epoll sets that the kernel does not show or shows
 * wrongly: members whose socket holds data with no token behind it (hidden
 * readable: a wait reports them from the hidden list, which is short, not
 * by walking the members), and a set polled as a whole (poll, select, an
 * outer set), whose kernel readiness counts parts of our members that may
 * be ready for nothing. */
#include "lib/sock/epset.h"
#include "lib/sock/epset_int.h"
#include "lib/base/grow.h"
#include "lib/base/real.h"
#include "lib/sock/ready.h"
#include "lib/sock/sock.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

/* A member that needs the kernel's look in the same call as ours: it
 * wants events whose state only the kernel knows, or the kernel holds an
 * edge or a one-shot for it that this report must use up (else a later
 * look reports the same arrival again). */
#define KERNEL_LOOK_EVENTS (EPOLLOUT | EPOLLWRNORM | EPOLLWRBAND | EPOLLPRI | EPOLLRDBAND | EPOLLET | EPOLLONESHOT)
static __thread int emitted_wants_kernel;

/* Reports member m (mu held). */
static int emit(struct member *m, struct epoll_event *out)
{
	if (m->events & KERNEL_LOOK_EVENTS)
		emitted_wants_kernel = 1;
	out->events = EPOLLIN;
	out->data.u64 = m->data;
	if (m->events & EPOLLONESHOT)
		m->disarmed = 1;
	return 1;
}

/* Members of set epfd whose socket is hidden readable, as events (mu
 * held): the hidden-readable sockets are few, and each names its members. */
struct hidden_walk {
	int epfd, max, n;
	struct epoll_event *out;
};

static int emit_members(struct dsock_sock *s, void *arg)
{
	struct hidden_walk *w = arg;

	for (struct member *m = dsock_epset_sock_chain(s); m && w->n < w->max; m = m->next[BY_SOCK]) {
		if (m->sock != s || m->epfd != w->epfd || m->disarmed || m->ghost || !(m->events & EPOLLIN))
			continue;
		/* the socket must still be the one at that fd */
		if (dsock_fdt_peek(m->fd) != s ||
		    !dsock_hidden_sock(s, (m->events & EPOLLET) ? &m->mark : NULL))
			continue;
		w->n += emit(m, &w->out[w->n]);
	}
	return w->n >= w->max;
}

static int hidden_in_set(int epfd, struct epoll_event *out, int max)
{
	struct hidden_walk w = { .epfd = epfd, .max = max, .out = out };

	if (max > 0)
		dsock_hidden_each(emit_members, &w);
	return w.n;
}

/* 1 if set epfd has a member whose socket is hidden readable and that
 * epoll_wait on it would report (mu held): a look that changes nothing (an
 * edge-triggered member's arrival stays unreported, a one-shot stays
 * armed), for a poller of the set itself. */
static int member_reportable(struct dsock_sock *s, void *arg)
{
	int epfd = *(int *)arg;

	for (struct member *m = dsock_epset_sock_chain(s); m; m = m->next[BY_SOCK]) {
		uint64_t mark = m->mark;
		if (m->sock != s || m->epfd != epfd || m->disarmed || m->ghost || !(m->events & EPOLLIN) ||
		    dsock_fdt_peek(m->fd) != s)
			continue;
		if (dsock_hidden_sock(s, (m->events & EPOLLET) ? &mark : NULL))
			return 1;
	}
	return 0;
}

static int set_has_hidden(int epfd)
{
	return dsock_hidden_each(member_reportable, &epfd);
}

/* The same, or one of the sets nested in it (one level) has such data. */
static int set_or_nested_has_hidden(int epfd)
{
	if (set_has_hidden(epfd))
		return 1;
	for (struct member *m = dsock_epset_sock_chain(NULL); m; m = m->next[BY_SOCK])
		if (m->epfd == epfd && !m->sock && !m->disarmed && (m->events & EPOLLIN) && set_has_hidden(dsock_epset_key(m->fd)))
			return 1;
	return 0;
}

int dsock_epset_readable(int epfd)
{
	int r;

	if (!atomic_load_explicit(&dsock_epset_nmembers, memory_order_relaxed) ||
	    !atomic_load_explicit(&dsock_hidden_readable, memory_order_relaxed))
		return 0;
	pthread_mutex_lock(&dsock_epset_mu);
	r = set_or_nested_has_hidden(dsock_epset_key(epfd));
	pthread_mutex_unlock(&dsock_epset_mu);
	return r;
}

int dsock_epset_hidden(int epfd, struct epoll_event *out, int max, int *wants_kernel)
{
	int n;

	*wants_kernel = 0;
	if (!atomic_load_explicit(&dsock_epset_nmembers, memory_order_relaxed))
		return 0;
	pthread_mutex_lock(&dsock_epset_mu);
	emitted_wants_kernel = 0;
	n = hidden_in_set(epfd, out, max);
	/* epoll sets nested in epfd (one level): hidden data inside counts;
	 * they have no socket, so all hang in the chain of NULL */
	for (struct member *m = dsock_epset_sock_chain(NULL); m && n < max; m = m->next[BY_SOCK]) {
		if (m->epfd != epfd || m->sock || m->disarmed || !(m->events & EPOLLIN))
			continue;
		if (set_has_hidden(dsock_epset_key(m->fd)))
			n += emit(m, &out[n]);
	}
	*wants_kernel = emitted_wants_kernel;
	pthread_mutex_unlock(&dsock_epset_mu);
	return n;
}

/* A member whose kernel parts may be ready for nothing: the fd, the
 * application's events, whether its transport has waits. */
struct part {
	int fd;
	short events;
	int watched;
};

/* (mu held) Adds the carried socket members of set epfd and of the sets
 * nested in it (one level) to *v; -1 when memory runs out. */
static int carried_members(int epfd, struct part **v, size_t *cap, size_t *n)
{
	int sets[9] = { epfd }, nsets = 1;

	for (struct member *m = dsock_epset_sock_chain(NULL); m && nsets < 9; m = m->next[BY_SOCK])
		if (m->epfd == epfd && !m->sock)
			sets[nsets++] = dsock_epset_key(m->fd);
	for (struct member *m = dsock_epset_all_members(); m; m = m->next[ALL]) {
		int in = 0;
		for (int i = 0; i < nsets && !in; i++)
			in = m->epfd == sets[i];
		if (!in || !m->sock || m->ghost || dsock_fdt_peek(m->fd) != m->sock ||
		    !__atomic_load_n(&m->sock->tp, __ATOMIC_ACQUIRE))
			continue;
		if (dsock_grow(v, cap, *n, sizeof(**v), 16))
			return -1;
		(*v)[(*n)++] = (struct part){ .fd = m->fd, .events = (short)m->events, .watched = m->watched };
	}
	return 0;
}

int dsock_epset_confirm(int epfd)
{
	struct part *v = NULL;
	struct pollfd *k = NULL;
	size_t cap = 0, n = 0, nk = 0;
	int r;

	if (!atomic_load_explicit(&dsock_epset_nmembers, memory_order_relaxed))
		return 1;
	pthread_mutex_lock(&dsock_epset_mu);
	r = carried_members(dsock_epset_key(epfd), &v, &cap, &n);
	pthread_mutex_unlock(&dsock_epset_mu);
	if (r < 0 || !n || !(k = malloc(n * sizeof(*k)))) {
		free(v);
		return 1; /* the kernel's word (none of ours can mislead it) */
	}
	/* a transport with waits reads its headers as it answers; a socket
	 * whose kernel bytes are tokens only loses them (dsock_ready_spurious_in) */
	for (size_t i = 0; i < n; i++) {
		if (v[i].watched)
			dsock_ready_poll_fd(v[i].fd, (short)(v[i].events & (POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM)));
		else
			k[nk++] = (struct pollfd){ .fd = v[i].fd, .events = POLLIN };
	}
	if (nk && dsock_real.poll(k, nk, 0) > 0)
		for (size_t i = 0; i < nk; i++)
			if ((k[i].revents & POLLIN) && !(k[i].revents & (POLLHUP | POLLERR)))
				dsock_ready_spurious_in(k[i].fd);
	free(k);
	free(v);
	struct pollfd p = { .fd = epfd, .events = POLLIN };
	return dsock_real.poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/* Level-triggered EPOLLOUT parked while a transport has no room (epset.h). */
#include "lib/sock/epset.h"
#include "lib/sock/epset_int.h"
#include "lib/base/grow.h"
#include "lib/base/real.h"
#include "lib/sock/ready.h"
#include "lib/sock/sock.h"
#include "lib/transport/transport.h"

#include <stdatomic.h>

_Atomic long dsock_epoll_parked;
static struct member **parked_v; /* the parked members (few: full buffers) */
static size_t nparked_v, parked_cap;

/* (mu held) */
void dsock_epset_set_parked(struct member *m, int on)
{
	if (m->parked == on)
		return;
	if (on) {
		if (dsock_grow(&parked_v, &parked_cap, nparked_v, sizeof(*parked_v), 16))
			return; /* not parked: it stays as it was */
		parked_v[nparked_v++] = m;
	} else {
		for (size_t i = 0; i < nparked_v; i++)
			if (parked_v[i] == m) {
				parked_v[i] = parked_v[--nparked_v];
				break;
			}
	}
	m->parked = on;
	atomic_fetch_add(&dsock_epoll_parked, on ? 1 : -1);
}

/* ---- level-triggered EPOLLOUT with no room in the transport -----------------
 * The kernel socket of a transport's connection is always writable (it
 * carries only tokens), so a level-triggered registration for EPOLLOUT
 * would be reported at every wait while the transport has no room, and a loop
 * waiting for room would spin.  Such a registration is parked: EPOLLOUT
 * leaves the kernel's registration and EPOLLIN joins it (edge-triggered
 * when the application did not ask for it: unread data behind a
 * token must not wake every wait), for the space token the consumer sends
 * once it frees room (the caller asks for one).  A token can be drained by
 * another thread of ours before the kernel reports it, and a connection
 * can go back to the kernel with none, so our epoll_wait also looks at
 * the parked members before it sleeps and every PARK_SLICE while it does
 * (ready.c).  The registration goes back as it was once there is room.
 * Edge-triggered ones have their own way (dsock_epoll_kernel_events), and
 * one-shot ones are left alone (a MOD would re-arm them). */
static int kernel_mod(struct member *m, unsigned events)
{
	struct epoll_event e = { .events = events, .data.u64 = m->data };

	return dsock_real.epoll_ctl(m->epfd, EPOLL_CTL_MOD, m->fd, &e);
}

int dsock_epset_park(int epfd, uint64_t data)
{
	unsigned in = EPOLLIN;
	struct member *m;
	int r = 0;

	pthread_mutex_lock(&dsock_epset_mu);
	if ((m = dsock_epset_by_data(epfd, data)) && !(m->events & EPOLLIN))
		in |= EPOLLET;
	if (m && !m->parked && m->sock && !(m->events & (EPOLLET | EPOLLONESHOT)) &&
	    kernel_mod(m, (m->events & ~(unsigned)(EPOLLOUT | EPOLLWRNORM | EPOLLWRBAND)) | in) == 0) {
		dsock_epset_set_parked(m, 1);
		dsock_epset_in_added(m, !(m->events & EPOLLIN));
		r = m->parked;
	}
	pthread_mutex_unlock(&dsock_epset_mu);
	return r;
}

/* (mu held) */
static void unpark(struct member *m)
{
	unsigned k = dsock_epoll_kernel_events(m->fd, m->events);

	kernel_mod(m, k);
	dsock_epset_set_parked(m, 0);
	dsock_epset_in_added(m, k != m->events);
}

void dsock_epset_unpark(int epfd, uint64_t data)
{
	struct member *m;

	pthread_mutex_lock(&dsock_epset_mu);
	if ((m = dsock_epset_by_data(epfd, data)) && m->parked)
		unpark(m);
	pthread_mutex_unlock(&dsock_epset_mu);
}

/* The socket at fd (still sock) would take a send, or the kernel now
 * carries it: EPOLLOUT, with EPOLLERR and EPOLLHUP as its transport says
 * (dsock_tp_writable); 0 with a space token asked for.  No lock of ours
 * held: the reference may be the last, whose release takes them. */
static unsigned has_room(int fd, const struct dsock_sock *sock)
{
	const struct dsock_transport *tp;
	struct dsock_sock *s = dsock_sock_carried(fd, &tp);
	int w = EPOLLOUT;

	if (!s)
		return EPOLLOUT;
	if (s == sock && (w = dsock_tp_writable(s, fd, tp)) < 0)
		w = EPOLLOUT;
	dsock_sock_put(s);
	return (unsigned)w;
}

int dsock_epset_parked_ready(int epfd, struct epoll_event *out, int max)
{
	struct { int fd; uint64_t data; unsigned events; const struct dsock_sock *sock; } cand[64];
	int nc = 0, n = 0;

	if (!atomic_load_explicit(&dsock_epoll_parked, memory_order_relaxed) || max <= 0)
		return 0;
	pthread_mutex_lock(&dsock_epset_mu);
	for (size_t i = 0; i < nparked_v && nc < 64; i++)
		if (parked_v[i]->epfd == epfd)
			cand[nc++] = (typeof(cand[0])){ parked_v[i]->fd, parked_v[i]->data, parked_v[i]->events,
							 parked_v[i]->sock };
	pthread_mutex_unlock(&dsock_epset_mu);
	for (int i = 0; i < nc && n < max; i++) {
		struct member *m;
		unsigned room = has_room(cand[i].fd, cand[i].sock);
		if (!room)
			continue;
		pthread_mutex_lock(&dsock_epset_mu);
		if ((m = dsock_epset_by_data(epfd, cand[i].data)) && m->parked && m->fd == cand[i].fd) {
			unpark(m);
			out[n].events = (cand[i].events & (EPOLLOUT | EPOLLWRNORM)) | (room & (EPOLLERR | EPOLLHUP));
			out[n++].data.u64 = cand[i].data;
		}
		pthread_mutex_unlock(&dsock_epset_mu);
	}
	return n;
}

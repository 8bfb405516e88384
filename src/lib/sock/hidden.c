/* The hidden-readable sockets (ready.h): counted process-wide, so that
 * pollers look closer only while there are some, and listed, so that
 * epoll_wait reports the members that name them without looking at every
 * member. */
#include "lib/sock/ready.h"
#include "lib/sock/sock.h"
#include "lib/transport/transport.h"
#include "lib/base/grow.h"

#include <pthread.h>
#include <stdatomic.h>

static pthread_mutex_t hid_mu = PTHREAD_MUTEX_INITIALIZER;
static struct dsock_sock **hid;
static size_t nhid, hid_cap;
static size_t hid_next; /* where the next walk starts (hid_mu) */

void dsock_hidden_set(struct dsock_sock *s, int *flag, int on)
{
	if (__atomic_load_n(flag, __ATOMIC_RELAXED) == on)
		return;
	/* the flag changes under the lock, with the list: two threads setting
	 * and clearing it at once (a poller taking a link's announcements, the
	 * socket's reader) must leave the socket listed exactly when the flag
	 * is set, and once (listed twice, it would be reported twice in one
	 * batch, and the second read would find nothing); the count must
	 * return to 0, or every poll stops sleeping */
	pthread_mutex_lock(&hid_mu);
	if (__atomic_exchange_n(flag, on, __ATOMIC_ACQ_REL) != on) {
		int listed = s->hid_idx < nhid && hid[s->hid_idx] == s;
		if (on && !listed && !dsock_grow(&hid, &hid_cap, nhid, sizeof(*hid), 64)) {
			s->hid_idx = nhid;
			hid[nhid++] = s;
		} else if (!on && listed) {
			/* (by its place: the list may hold every connection) */
			size_t i = s->hid_idx;
			hid[i] = hid[--nhid];
			hid[i]->hid_idx = i;
		}
		atomic_fetch_add(&dsock_hidden_readable, on ? 1 : -1);
	}
	pthread_mutex_unlock(&hid_mu);
}

int dsock_hidden_sock(struct dsock_sock *s, uint64_t *mark)
{
	const struct dsock_transport *tp = __atomic_load_n(&s->tp, __ATOMIC_ACQUIRE);
	int r;

	if (!tp || !tp->hidden_readable)
		return 0;
	r = tp->hidden_readable(s);
	if (r && mark && tp->rx_mark) {
		uint64_t now = tp->rx_mark(s);
		r = now != *mark;
		*mark = now;
	}
	return r;
}

int dsock_hidden_each(int (*fn)(struct dsock_sock *s, void *arg), void *arg)
{
	int r = 0;

	pthread_mutex_lock(&hid_mu);
	size_t start = hid_next < nhid ? hid_next : 0;
	for (size_t k = 0; k < nhid && !r; k++) {
		size_t i = start + k < nhid ? start + k : start + k - nhid;
		if ((r = fn(hid[i], arg)))
			hid_next = i + 1;
	}
	pthread_mutex_unlock(&hid_mu);
	return r;
}

void dsock_hidden_fork(int phase)
{
	if (phase == 0)
		pthread_mutex_lock(&hid_mu);
	else if (phase == 1)
		pthread_mutex_unlock(&hid_mu);
	else
		pthread_mutex_init(&hid_mu, NULL);
}

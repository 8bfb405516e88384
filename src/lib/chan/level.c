/* A stream's readiness as two eventfds a poller can sleep on (chan.h,
 * ch_levels): the channel's socket carries every stream's frames, and a
 * thread that reads it (a receive, a send waiting for credit) files what
 * a poller of another stream, or of the same one, waits for; the kernel's
 * readiness of the socket says nothing of that.  Each eventfd holds a
 * count exactly while its condition holds: the count changes only under
 * the stream's lock (rd_mu for IN, tx_mu for OUT), and a flag in the
 * state says whether it holds one.  A set writes before it records, a
 * clear records before it reads (a read takes the whole count), so a
 * holder that dies between the two leaves at worst a count too many,
 * which the next clear takes. */
#include "lib/chan/chan_int.h"
#include "lib/base/real.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>

static int want_in(struct ch *c, struct ch_stream *s)
{
	uint64_t have = __atomic_load_n(&s->rx_tail, __ATOMIC_ACQUIRE) - __atomic_load_n(&s->rx_head, __ATOMIC_ACQUIRE);
	uint32_t mark = __atomic_load_n(&s->rx_lowat, __ATOMIC_ACQUIRE);

	return (have && have >= mark && !__atomic_load_n(&s->rx_discard, __ATOMIC_ACQUIRE)) ||
	       __atomic_load_n(&s->rx_eof, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&s->rx_err, __ATOMIC_ACQUIRE) || __atomic_load_n(&s->rx_discard, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&s->rx_nowait, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&c->sh->eof, __ATOMIC_ACQUIRE) || __atomic_load_n(&c->sh->dead, __ATOMIC_ACQUIRE);
}

static int want_out(struct ch *c, struct ch_stream *s)
{
	uint64_t cred = CH_RING - (__atomic_load_n(&s->tx_sent, __ATOMIC_ACQUIRE) - __atomic_load_n(&s->tx_acked, __ATOMIC_ACQUIRE));
	uint64_t used = __atomic_load_n(&c->sh->tx_tail, __ATOMIC_ACQUIRE) - __atomic_load_n(&c->sh->tx_head, __ATOMIC_ACQUIRE);

	return (cred && cred <= CH_RING && used + CH_HDR < CH_TXRING) || __atomic_load_n(&s->tx_stopped, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&s->tx_eof, __ATOMIC_ACQUIRE) || __atomic_load_n(&c->sh->eof, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&c->sh->dead, __ATOMIC_ACQUIRE);
}

static void level(int fd, uint32_t *flag, int want, int arrival)
{
	uint64_t n = 1;

	if (want && (arrival || !__atomic_load_n(flag, __ATOMIC_ACQUIRE))) {
		if (dsock_real.write(fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
			return;
		__atomic_store_n(flag, 1, __ATOMIC_RELEASE);
	} else if (!want && __atomic_load_n(flag, __ATOMIC_ACQUIRE)) {
		__atomic_store_n(flag, 0, __ATOMIC_RELEASE);
		if (dsock_real.read(fd, &n, sizeof(n)) < 0) {
			/* (nothing: a count a dead holder never wrote) */
		}
	}
}

static __thread struct ch *defer_ch;
static __thread unsigned defer_st;
static __thread int deferred;

struct ch_defer ch_rx_defer(struct ch *c, unsigned st)
{
	struct ch_defer prev = { defer_ch, defer_st, deferred };

	defer_ch = c;
	defer_st = st;
	deferred = 0;
	return prev;
}

int ch_rx_deferred(void)
{
	int d = deferred;

	deferred = 0;
	return d;
}

void ch_rx_defer_end(struct ch_defer prev)
{
	defer_ch = prev.c;
	defer_st = prev.st;
	deferred = prev.deferred;
}

void ch_level_in(struct ch *c, unsigned st, int arrival)
{
	if (c->lvl && st < c->nstreams && c->lvl[2 * st] >= 0)
		level(c->lvl[2 * st], &ch_stream_at(c, st)->lvl_in, want_in(c, ch_stream_at(c, st)), arrival);
}

void ch_level_out(struct ch *c, unsigned st)
{
	if (c->lvl && st < c->nstreams && c->lvl[2 * st + 1] >= 0)
		level(c->lvl[2 * st + 1], &ch_stream_at(c, st)->lvl_out, want_out(c, ch_stream_at(c, st)), 0);
}

/* (every stream with levels: a channel with levels carries few streams
 * today, one per connection) */
void ch_levels_all(struct ch *c, int arrival)
{
	if (!c->lvl)
		return;
	if (ch_lock(c, &c->sh->rd_mu, 0) == 0) {
		for (unsigned st = 0; st < c->nstreams; st++) {
			if (arrival && c == defer_ch && st == defer_st) {
				deferred = 1; /* (the receive that pumped moves it) */
				continue;
			}
			ch_level_in(c, st, arrival);
		}
		pthread_mutex_unlock(&c->sh->rd_mu);
	}
	if (ch_lock(c, &c->sh->tx_mu, 0) == 0) {
		for (unsigned st = 0; st < c->nstreams; st++)
			ch_level_out(c, st);
		pthread_mutex_unlock(&c->sh->tx_mu);
	}
}

void ch_set_lowat(struct ch *c, unsigned st, unsigned n)
{
	if (st >= c->nstreams)
		return;
	__atomic_store_n(&ch_stream_at(c, st)->rx_lowat, n, __ATOMIC_RELEASE);
	ch_levels_all(c, 0);
}

static int lvl_array(struct ch *c)
{
	if (!c->lvl) {
		if (!(c->lvl = malloc(2 * c->nstreams * sizeof(int))))
			return -ENOMEM;
		for (unsigned i = 0; i < 2 * c->nstreams; i++)
			c->lvl[i] = -1;
	}
	return 0;
}

int ch_adopt_levels(struct ch *c, unsigned st, const int fds[2])
{
	if (st >= c->nstreams || fds[0] < 0 || fds[1] < 0)
		return -EINVAL;
	if (lvl_array(c))
		return -ENOMEM;
	c->lvl[2 * st] = fds[0];
	c->lvl[2 * st + 1] = fds[1];
	return 0;
}

int ch_levels(struct ch *c, unsigned st, int fds[2])
{
	if (st >= c->nstreams)
		return -EINVAL;
	if (lvl_array(c))
		return -ENOMEM;
	for (int i = 0; i < 2; i++)
		if (c->lvl[2 * st + (unsigned)i] < 0 &&
		    (c->lvl[2 * st + (unsigned)i] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
			return -errno;
	fds[0] = c->lvl[2 * st];
	fds[1] = c->lvl[2 * st + 1];
	ch_levels_all(c, 0);
	return 0;
}

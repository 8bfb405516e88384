/* What the channel's two files share (chan.c: state, frames out, the
 * reader; stream.c: waits and the streams' calls). */
#ifndef DSOCK_CHAN_INT_H
#define DSOCK_CHAN_INT_H

#include "lib/chan/chan.h"

/* (st < c->nstreams: the callers check) */
static inline struct ch_stream *ch_stream_at(const struct ch *c, unsigned st)
{
	return (struct ch_stream *)((char *)c->sh + c->streams_off) + st;
}

static inline unsigned char *ch_ring(const struct ch *c, unsigned st)
{
	return (unsigned char *)c->sh + c->rings_off + (uint64_t)st * CH_RING;
}

static inline unsigned char *ch_txring(const struct ch *c)
{
	return (unsigned char *)c->sh + c->txring_off;
}

/* Bytes free in the frame ring (tx_mu held); counts out of bounds kill
 * the channel, and there is no room then. */
uint64_t ch_tx_room(struct ch *c);

/* The channel dies with err (the first death stays). */
void ch_kill(struct ch *c, int err);
/* Locks m (try: without waiting): 0, or -errno.  A holder that died
 * inside tx_mu may have left a frame half written, and one that died
 * inside rx_mu while filing (not asleep in poll: the pumper's usual
 * place) may have lost bytes it read: the channel dies with either.  A
 * reader that died inside rd_mu changed nothing it had not finished. */
int ch_lock(struct ch *c, pthread_mutex_t *m, int try);
/* Something happened: wakes the futex's sleepers. */
void ch_bump(struct ch *c);
/* Frames out (tx_mu held): n bytes, or a header; ch_tx_flush writes what
 * the socket takes, and the control frames owed as room comes (0, or
 * -errno: dead). */
void ch_tx_put(struct ch *c, const void *p, size_t n);
void ch_tx_frame(struct ch *c, unsigned st, unsigned type, uint64_t arg);
int ch_tx_flush(struct ch *c);
/* The stream's level eventfds follow its state (level.c; no-ops without
 * them).  ch_level_in with rd_mu held (arrival: a new count even when
 * already readable), ch_level_out with tx_mu held; ch_levels_all takes
 * the locks itself (the caller holds neither rd_mu nor tx_mu). */
void ch_level_in(struct ch *c, unsigned st, int arrival);
void ch_level_out(struct ch *c, unsigned st);
void ch_levels_all(struct ch *c, int arrival);
/* A receive of stream st of c that this thread makes: an arrival its own
 * pumping files for st moves no level (ch_rx_deferred says whether one
 * came), since the receive takes it at once; the receive then moves the
 * level as what it left unread says (a count for an arrival left
 * unread).  An arrival read at once costs no eventfd write and read. */
struct ch_defer {
	struct ch *c;
	unsigned st;
	int deferred;
};
/* (returns the state it replaces, which ch_rx_defer_end puts back: a
 * signal handler's receive inside another's) */
struct ch_defer ch_rx_defer(struct ch *c, unsigned st);
int ch_rx_deferred(void);
void ch_rx_defer_end(struct ch_defer prev);
/* Tells the peer what the stream's reader consumed, when worth a frame. */
void ch_credit(struct ch *c, unsigned st);
/* Whether stream st's sender runs short while a sizeable part read is
 * not credited yet: the credit goes at once (after a read, at a flush). */
int ch_credit_short(struct ch *c, unsigned st);
/* A CREDIT for what was read of stream st, appended now (tx_mu held). */
void ch_credit_now(struct ch *c, unsigned st);
/* (rx_mu held) reads what the socket has, without waiting, and files it:
 * the bytes read (0: none), or -errno once dead or at the channel's EOF. */
ssize_t ch_pump_locked(struct ch *c);

#endif

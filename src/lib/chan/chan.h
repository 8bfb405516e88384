/* A channel: one stream socket between two processes (kernel TCP between
 * hosts) that carries the bytes of many connections, its "streams", each
 * with flow control of its own, so that a slow reader stalls only its own
 * stream (docs/ARCHITECTURE.md, "Channels").  This is the channel's core:
 * frames, credits, the reader and the waits; the transport that moves a
 * connection onto a stream builds on it.
 *
 * Frames: a 16-byte header { stream u32, type u16, reserved u16, arg u64 },
 * little-endian; DATA is followed by arg bytes of the stream's data.
 *   DATA    arg bytes of the stream
 *   CREDIT  arg: the bytes of the stream its receiver has consumed in all
 *   EOF     its sender writes no more on the stream (arg: bytes it sent)
 *   STOP    its receiver asks for no more: the sender's sends fail (EPIPE)
 *           from its receipt on, and the sender answers with its EOF, so
 *           that the receiver reads all that was sent before it; arg:
 *           CH_STOP_RESET when the receiver let go of the stream with
 *           bytes unread (its sender's receive then reports ECONNRESET
 *           after what it holds, as an AF_UNIX pair's does)
 * A sender has at most CH_RING bytes of a stream that its receiver has not
 * credited back, and the receiver has a ring of that size per stream, so
 * the channel's reader always has room for what arrives: reading never
 * waits for a stream's reader, and two ends that both send never deadlock.
 * A peer that breaks a rule (more than its credit, a credit for bytes never
 * sent, an unknown type or stream) kills the channel: every stream on it
 * reports ECONNRESET.  The channel's own EOF ends every stream's input
 * (EOF) and output (EPIPE).
 *
 * State lives in a memfd, so every process holding the channel after a
 * fork sees one state; it holds counts and offsets, never pointers.
 * Frames go out through a byte ring in the same memfd (tx_mu): a send
 * appends its frame whole and writes what the socket takes.  What the
 * socket does not take is written by the next call of any thread, by a
 * pumper's wait (it polls for room while the ring holds any), and by the
 * sender itself: a blocking send returns once its frame is in the socket,
 * as the kernel's returns once its bytes are in the send buffer.  A caller
 * that sleeps elsewhere while ch_tx_pending() must wake on the socket's
 * room (POLLOUT).  One thread at a time reads the socket (rx_mu: the
 * "pumper"), filing frames into the streams' rings, each a single-producer
 * single-consumer ring whose readers take rd_mu only while they copy, so
 * a reader never waits for the pumper.  A thread that waits is either the
 * pumper (asleep in poll on the socket) or asleep on the futex `seq`,
 * which every filing and every pumper's leaving bumps; a bump also wakes
 * a pumper asleep in poll, through the channel's eventfd (`nudge`), so
 * that what happens here (a stream shut for reading, frames queued that
 * wait for room) reaches it as what arrives does.
 *
 * Every value read from the state is checked before it is used as a
 * size or a place (a holder is one of our processes, but a corrupt one
 * must not make another write outside the state): one out of bounds
 * kills the channel.  The memfd is sealed against resizing.
 *
 * Streams are numbered by whoever pairs them (both ends use one number)
 * and start empty: a stream's first frame may arrive before its receiver
 * knows of it.  A number is not used twice on one channel.
 *
 * All functions return 0, a count or -errno. */
#ifndef DSOCK_CHAN_H
#define DSOCK_CHAN_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define CH_MAGIC   0x314e484b434f5344ull /* "DSOCKHN1" */
#define CH_VERSION 2 /* 2: STOP answered by EOF, its reset flag */
#define CH_RING    (128u << 10) /* a stream's receive ring, and its credit */
#define CH_TXRING  (256u << 10) /* frames not yet taken by the socket */
#define CH_HDR     16

enum ch_type { CH_DATA = 1, CH_CREDIT = 2, CH_EOF = 3, CH_STOP = 4 };
#define CH_STOP_RESET 1

struct ch_stream {
	/* input: filed by the pumper (rx_mu), consumed by readers (rd_mu) */
	uint64_t rx_tail;    /* bytes arrived */
	uint64_t rx_head;    /* bytes consumed */
	uint64_t credited;           /* rx_head as last told the peer (tx_mu) */
	uint32_t rx_eof;     /* the peer's EOF is filed */
	uint32_t rx_stopped; /* we sent STOP: the peer's EOF follows */
	uint32_t rx_discard; /* we let go of the stream: input is dropped (2:
			      * our STOP said reset) */
	int32_t rx_err;      /* ECONNRESET from the peer's STOP, for one receive */
	uint32_t rx_nowait;  /* shut with CH_SHUT_RD_NOW: an empty ring reads 0 */
	uint32_t rx_lowat;   /* ch_set_lowat: the IN level's mark */
	/* output (tx_mu) */
	uint64_t tx_sent;    /* bytes framed */
	uint64_t tx_acked;   /* the peer's latest CREDIT */
	uint32_t tx_eof;     /* we sent EOF (or owe it) */
	uint32_t tx_stopped; /* the peer's STOP is filed */
	uint32_t owe;        /* control frames owed, CH_OWE_* (tx_mu) */
	uint32_t lvl_in;     /* its IN level eventfd holds a count (rd_mu) */
	uint32_t lvl_out;    /* its OUT level eventfd holds a count (tx_mu) */
};

/* Control frames that found no room in the frame ring: owed, and written
 * by whoever next makes room (a stream owes at most one of each). */
enum { CH_OWE_CREDIT = 1, CH_OWE_EOF = 2, CH_OWE_STOP = 4, CH_OWE_RESET = 8 /* (the STOP's flag) */ };

struct ch_shared {
	uint64_t magic;
	uint32_t version, nstreams;
	uint64_t streams_off, rings_off, txring_off, size;
	pthread_mutex_t rx_mu, tx_mu, rd_mu; /* process-shared, robust */
	/* the reader's place in the byte stream (rx_mu) */
	unsigned char hdr[CH_HDR];
	uint32_t hdr_len;     /* header bytes read of the frame at hand */
	uint32_t cur;         /* its stream */
	uint64_t cur_left;    /* DATA bytes of it still to come */
	uint32_t filing;      /* 1 from a read of the socket until its bytes are filed */
	/* frames not yet written (tx_mu) */
	uint64_t tx_head, tx_tail;
	uint32_t owing;   /* streams that owe control frames (tx_mu) */
	uint32_t seq;     /* futex: something was filed, or a pumper left */
	uint32_t waiters; /* asleep on seq */
	uint32_t asleep;  /* the pumper sleeps in poll (nudge to wake it) */
	int32_t dead;     /* 0, or the errno every stream now reports */
	int32_t eof;      /* the channel's EOF was read */
};

struct ch {
	struct ch_shared *sh;
	int fd;    /* the channel's socket */
	int memfd; /* its state (for a fork's child, an exec) */
	int nudge; /* an eventfd: wakes a pumper asleep in poll for what
		    * happens here (a stream shut, frames queued) */
	/* the layout, kept privately: never read again from shared memory,
	 * which any holder may scribble on */
	unsigned nstreams;
	uint64_t streams_off, rings_off, txring_off, size;
	/* level eventfds (level.c): two per stream, -1 until made; NULL: none */
	int *lvl;
};

/* A new channel over socket fd with room for nstreams streams: maps a
 * memfd of its own, and makes its nudge.  0 or -errno. */
int ch_create(struct ch *c, int fd, unsigned nstreams);
/* Maps the state of a channel made elsewhere (memfd, socket fd, nudge):
 * checks it as untrusted input.  0 or -errno. */
int ch_attach(struct ch *c, int fd, int memfd, int nudge);
/* Unmaps and closes its fds. */
void ch_close(struct ch *c);

/* flags: MSG_DONTWAIT.  deadline: CLOCK_MONOTONIC ns, INT64_MAX none;
 * past it, -EAGAIN.  A send takes what the stream's credit and the frame
 * ring allow (at least one byte once it returns a count); -EPIPE after the
 * peer's STOP or our EOF, -EINTR on a signal with nothing sent. */
ssize_t ch_send(struct ch *c, unsigned st, const struct iovec *iov, int n, int flags, int64_t deadline);
/* flags: MSG_DONTWAIT, MSG_PEEK, MSG_WAITALL, MSG_TRUNC (discards).
 * 0 at the stream's EOF; -ECONNRESET once, where the peer let go of the
 * stream with our bytes unread, after the bytes that came before. */
ssize_t ch_recv(struct ch *c, unsigned st, const struct iovec *iov, int n, int flags, int64_t deadline);
/* SHUT_WR: EOF; SHUT_RD: STOP (what the peer sent before it read the
 * STOP still arrives, then its EOF).  With CH_SHUT_RD_NOW in how, a
 * receive that finds nothing returns 0 at once from then on, a waiting one
 * too (the application's own SHUT_RD; what arrives later is read later). */
#define CH_SHUT_RD_NOW 0x100
int ch_shutdown(struct ch *c, unsigned st, int how);
/* Our end lets go of the stream: EOF, and STOP (with CH_STOP_RESET when
 * bytes it holds are unread); what arrives later is dropped. */
int ch_close_stream(struct ch *c, unsigned st);
/* The stream's POLLIN, POLLOUT, POLLHUP, POLLRDHUP, POLLERR now (of events,
 * plus the last three), after taking what the socket has if no other
 * thread reads it. */
short ch_poll(struct ch *c, unsigned st, short events);
/* 1 while frames wait in the frame ring for room in the socket. */
int ch_tx_pending(const struct ch *c);
/* Bytes readable on the stream now. */
size_t ch_readable(struct ch *c, unsigned st);
/* 1 once nothing more can arrive on the stream: the peer's EOF is filed,
 * our end let go of it, or the channel ended. */
int ch_ended(struct ch *c, unsigned st);
/* The stream's level eventfds, made at the first call (before a fork, so
 * that every holder shares them): fds[0] is readable while a receive
 * would not wait (bytes, the EOF, a reset, the channel's end), and gets a
 * new count at every arrival (a wake-up for edge-triggered pollers);
 * fds[1] is readable while a send would not wait.  A poller sleeps on
 * them and on the channel's socket (someone must read it).  0 or -errno. */
int ch_levels(struct ch *c, unsigned st, int fds[2]);
/* The IN level is readable from n bytes on (the application's
 * SO_RCVLOWAT; the EOF and the errors still make it readable). */
void ch_set_lowat(struct ch *c, unsigned st, unsigned n);
/* In a new program (exec): the stream's level eventfds as the old one
 * made them (ours from now on).  0 or -errno. */
int ch_adopt_levels(struct ch *c, unsigned st, const int fds[2]);
/* Takes what the socket has and writes what the frame ring holds, without
 * waiting, if no other thread does: 0, or -errno once the channel is dead. */
int ch_progress(struct ch *c);

#endif

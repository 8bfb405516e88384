/* The socketpair transport, for the tests: it carries a connection's bytes
 * through an AF_UNIX stream socketpair the daemon makes for the pair.  It
 * exists to prove the transport interface with a second transport: offers,
 * results and provisioning by transport id, and readiness whose wake-ups
 * come through an fd other than the application's socket (waits, poll).
 * It is never chosen unless DSOCK_TRANSPORTS names it.
 *
 * The protocol, per direction.  Bytes go through the kernel until both
 * ends are paired; each end then writes HELLO (8 bytes) into its end of
 * the pair.  A sender that has read the peer's HELLO (the peer reads the
 * pair from now on) writes SWITCH (8 bytes: how many bytes it gave the
 * kernel) and sends through the pair from then on.  The receiver reads
 * the kernel up to that count, then the pair.  Going back to the kernel is
 * one-sided and needs no answer: the sender shuts its end for writing
 * (the receiver reads the pair up to its EOF, then the kernel); the
 * receiver shuts its end for reading (the peer's next send through the
 * pair fails, and the peer goes back).  So an EOF on the pair always
 * means "the kernel from here": the peer's close, reset and shutdown are
 * the kernel's, read there.
 *
 * The state is shared by every process holding the end (a memfd page,
 * kept across fork and handed over an exec), so what one holder read of
 * the headers every holder knows.  Locks: tx_mu orders sends against the
 * switch (and counts the kernel's bytes), rx_mu orders receives against
 * the header reads. */
#ifndef DSOCK_SP_H
#define DSOCK_SP_H

#include "lib/transport/transport.h"
#include "lib/sock/sock.h"

#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>

#define SP_HELLO 0x3150534b434f5344ull /* "DSOCKSP1" */

enum sp_state { SP_PENDING, SP_PAIRED, SP_REFUSED };
enum sp_tx { SPTX_KERNEL, SPTX_PAIR, SPTX_BACK };
/* RX_HELLO, RX_SWITCH: the peer's header not read yet (it sends through
 * the kernel); RX_KERNEL: read the kernel up to `until`; RX_PAIR: the
 * pair up to its EOF; RX_BACK: the kernel from here on. */
enum sp_rx { SPRX_HELLO, SPRX_SWITCH, SPRX_KERNEL, SPRX_PAIR, SPRX_BACK };

struct sp_shared {
	pthread_mutex_t tx_mu, rx_mu; /* process-shared, robust */
	uint64_t kernel_sent;        /* bytes our sends gave the kernel (tx_mu) */
	uint64_t kernel_got;         /* bytes our receives took from it (rx_mu) */
	uint64_t until;              /* the peer's SWITCH count (rx_mu) */
	_Atomic uint64_t pair_got;   /* data bytes taken from the pair */
	unsigned hdr_len;            /* bytes of the next header read so far */
	unsigned char hdr[8];
	_Atomic int state;           /* enum sp_state */
	_Atomic int tx, rx;          /* enum sp_tx, enum sp_rx */
	_Atomic int back_reason;     /* why it went back (enum dsock_reason) */
	_Atomic int refuse;          /* a reason: an answer still pending must not attach */
	_Atomic int app_shut_rd;     /* the application shut its reading */
	_Atomic int holders;         /* processes holding a framed pair (a fork's) */
	_Atomic int shared;          /* a framed pair held by another process once
				      * (a fork, a spawn, an exec's program):
				      * O_NONBLOCK is then the file's to read */
	_Atomic int lowat;           /* the application's SO_RCVLOWAT (above 1) */
	struct timeval rcvtimeo, sndtimeo; /* the application's, for the pair too */
};

struct sp_conn;

/* The pipe: what carries the bytes of a paired connection, behind the
 * protocol above.  Its semantics are an AF_UNIX stream socketpair's: a
 * shut reading end makes the peer's sends fail (EPIPE), a close with the
 * peer's bytes unread resets the peer's end (ECONNRESET, after what it
 * holds), and an EOF follows a shut writing end or a close.  pf is the
 * pipe's handle as loaded once by the caller (c->pairfd: -1 once closed,
 * and every call then fails with -EBADF).  All return 0, a count or
 * -errno. */
struct sp_pipe_ops {
	/* flags: MSG_DONTWAIT, MSG_MORE.  A blocking send keeps the
	 * application's SO_SNDTIMEO (-EAGAIN past it) and ends at a signal
	 * (-EINTR, or what it sent). */
	ssize_t (*sendmsg)(struct sp_conn *c, int pf, const struct msghdr *m, int flags);
	/* flags: MSG_PEEK, MSG_WAITALL, MSG_DONTWAIT; 0 at the EOF.  A
	 * blocking receive keeps SO_RCVTIMEO and ends at a signal. */
	ssize_t (*recvmsg)(struct sp_conn *c, int pf, struct msghdr *m, int flags);
	int (*shutdown)(struct sp_conn *c, int pf, int how);
	/* Bytes readable now. */
	int (*inq)(struct sp_conn *c, int pf);
	/* Of events (POLLIN, POLLOUT), plus POLLERR and POLLHUP: now. */
	short (*poll)(struct sp_conn *c, int pf, short events);
	/* What a poller sleeps on for events: fills w (at most
	 * SP_PIPE_WAITS entries) and returns how many. */
	int (*waits)(struct sp_conn *c, int pf, short events, struct pollfd *w);
	/* The application's timeouts (sh->rcvtimeo, sndtimeo) changed. */
	void (*timeouts)(struct sp_conn *c, int pf);
	/* The application's SO_RCVLOWAT (sh->lowat) changed: what a poller
	 * sleeps on wakes from that many bytes on. */
	void (*lowat)(struct sp_conn *c, int pf);
	/* 1 if a receive's 0 is the pipe's EOF (nothing more can come), 0 if
	 * it only says that nothing is there after the application shut its
	 * reading (sh->app_shut_rd: what the peer sent before it learnt of
	 * it may still come, and is read then, as TCP's is). */
	int (*ended)(struct sp_conn *c, int pf);
	void (*close)(struct sp_conn *c, int pf);
};

#define SP_PIPE_WAITS (DSOCK_WAITS_MAX - 1) /* (the kernel's socket is one) */

/* pipe_fd.c: the socketpair the daemon made, as it is. */
extern const struct sp_pipe_ops sp_pipe_fd;
/* pipe_chan.c: a stream of a channel (lib/chan/chan.h): c->ch, c->st. */
extern const struct sp_pipe_ops sp_pipe_chan;

struct ch;

struct sp_conn {
	const struct sp_pipe_ops *pipe;
	struct ch *ch; /* sp_pipe_chan's: the channel, and our stream on it */
	unsigned st;
	struct dsock_sock *sock;
	struct sp_shared *sh;
	int memfd;   /* the page: for an exec */
	int pairfd;  /* our end of the pair, -1 until paired */
	int role;
	int carried; /* moved bytes through the pair in this process */
	unsigned fork_gen; /* the fork that counted this process's copy */
	unsigned exec_counted; /* the exec attempt that counted a new holder */
	int settle_spent; /* ready.c: a settle ran out; not again until the state changes */
	int counted_back;
	int reported; /* the daemon was told the connection is carried */
	_Atomic int offer_done; /* the daemon answered (and let go of its copy) */
	long long pending_since; /* mono ns of the offer; 0: no answer expected */
	int listed; /* in this process's list of offers waiting (pending_mu) */
	struct sp_conn *next; /* pending answers */
};

extern const struct dsock_transport dsock_socketpair_transport;

static inline struct sp_conn *sp_conn(struct dsock_sock *s)
{
	return s->owner == &dsock_socketpair_transport ? s->tp_priv : NULL;
}

/* conn.c */
/* A connection on the page in memfd (ours from now on), or NULL. */
struct sp_conn *sp_map_conn(struct dsock_sock *s, int memfd);
int sp_lock(pthread_mutex_t *m);
void sp_unlock(pthread_mutex_t *m);
/* While the answer is pending: deliver the daemon's mail. */
void sp_progress(struct sp_conn *c);
/* Both directions are back: the kernel carries the socket. */
void sp_maybe_detach(struct sp_conn *c);
/* Resets the connection (as an RST would); returns -ECONNRESET. */
int sp_reset(struct dsock_sock *s, int fd, unsigned reason);
void sp_count_carried(struct sp_conn *c);

/* data.c */
#define RESET_WAIT_MS 100 /* the peer's kernel close follows its pair's at once */
static inline int sp_pairfd(struct sp_conn *c)
{
	return __atomic_load_n(&c->pairfd, __ATOMIC_ACQUIRE);
}
/* MSG_DONTWAIT when the application's socket does not block. */
int sp_dontwait(const struct sp_conn *c, int fd, int flags);
size_t sp_iov_total(const struct msghdr *m);
/* The iovecs of m from byte skip on, at most cap bytes, into v (IOV_MAX). */
size_t sp_iov_part(const struct msghdr *m, size_t skip, size_t cap, struct iovec *v);
ssize_t sp_sendmsg(struct dsock_sock *s, int fd, const struct msghdr *m, int flags);
int sp_shutdown(struct dsock_sock *s, int fd, int how);
int sp_ioctl(struct dsock_sock *s, int fd, unsigned long req, int *val);
int sp_sockopt(struct dsock_sock *s, int fd, int set, int level, int opt, void *val, socklen_t *len);
/* Both directions back to the kernel, without waiting for the peer. */
void sp_go_back(struct sp_conn *c, unsigned reason);
int sp_handover(struct dsock_sock *s, int fd);
/* Reads the peer's headers that have arrived (rx_mu held). */
void sp_read_headers(struct sp_conn *c);

/* exec.c: the transport's exec_env, exec_done and adopt */
struct dsock_exec_target;
size_t sp_exec_env(char *buf, size_t n, int spawn, const struct dsock_exec_target *t);
void sp_exec_done(int started);
void sp_adopt(void);

/* recv.c */
ssize_t sp_recvmsg(struct dsock_sock *s, int fd, struct msghdr *m, int flags);
/* While the pipe still holds the peer's bytes after SO_RCVLOWAT sent it
 * back (an asynchronous pipe's bytes come until the peer's EOF): the bytes
 * readable in order now, the pipe's and (once it ended) the kernel's, and
 * whether that meets the low mark for a receive of want bytes; -1 when no
 * mark applies. */
int sp_lowat_met(struct sp_conn *c, int fd, size_t want);

/* ready.c */
int sp_waits(struct dsock_sock *s, int fd, short events, struct pollfd *w);
short sp_poll(struct dsock_sock *s, int fd, short events);
/* The peer's data bytes that ever arrived in the pair. */
uint64_t sp_rx_mark(struct dsock_sock *s);

#endif

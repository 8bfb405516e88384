/* Channels between hosts: the kernel TCP connection that carries a
 * connection whose two ends the daemons proved over their link
 * (hostlink.h) to be on their two hosts.  The claimant's daemon makes a
 * 128-bit token from the kernel's CSPRNG, sends it over the link (TLS:
 * only the other daemon reads it), and dials the other daemon's channel
 * port (the links' port + 1) from the link's own address; the first
 * bytes of the new connection are a magic, the claim's id and the token.
 * The other daemon takes the connection for its end only when all three
 * match, the token arrived over the link the claim came on, and the
 * connection comes from that link's peer address; anything else is closed.
 * It then says TAKEN over the link, and only that word makes the
 * claimant's daemon trust its dial (whoever answered at the channel port
 * read the token, so nothing on the channel can prove the other daemon).
 * Each daemon hands its end of the channel to its process with the RESULT
 * (SCM_RIGHTS) and closes its copy: the data never passes through a
 * daemon.  No commit step is needed: the transport's protocol is
 * one-sided (docs/ARCHITECTURE.md, "The test transport"), so an end whose
 * channel never comes stays on the kernel, and its peer, whose channel
 * the other daemon closes, reads the channel's end as "the kernel from
 * here". */
#ifndef DSOCKD_HOSTCHAN_H
#define DSOCKD_HOSTCHAN_H

#include "common/proto.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct dd_proc;
struct dd_reply_to;

#define DD_CHAN_TOKEN 16
/* the channel sockets in the making at once (dialled or accepted) */
#define DD_CHAN_SLOTS 1024

/* Listens for channels at the link listener's address, port + 1, and
 * dials other hosts' at dial_port; registers its fds in ep with data.u32
 * from slot_base up (DD_CHAN_SLOTS + 1 slots).  0, or -1 (why filled). */
int dd_chan_start(int ep, uint32_t slot_base, const struct sockaddr_storage *link_listen, int dial_port,
		  char *why, size_t n);
void dd_chan_stop(void);
/* An epoll event on one of its fds (slot as registered). */
void dd_chan_event(uint32_t slot, uint32_t events);
/* Deadlines: ms until the next, or -1. */
int dd_chan_tick(void);

/* Our end (to, sock_id; offered to transport) was proven over link gen by
 * claim id to have its other end on that link's host: it is to be carried
 * on a channel.  claimant 1: this daemon claimed and dials; 0: it waits
 * for the claimant's token and channel.  0 (a RESULT follows, PAIRED or
 * KERNEL), or -reason (enum dsock_reason; the caller answers KERNEL). */
int dd_chan_begin(const struct dd_reply_to *to, uint64_t sock_id, unsigned transport, int claimant,
		  uint64_t gen, uint64_t id);
/* The claimant's token for claim id, over link gen. */
void dd_chan_token(uint64_t gen, uint64_t id, const uint8_t token[DD_CHAN_TOKEN]);
/* A socket closed, a process left, a link went down: their ends go
 * (the last with a KERNEL answer). */
void dd_chan_closed(const struct dd_proc *p, uint64_t sock_id);
void dd_chan_forget(const struct dd_proc *p);
void dd_chan_link_down(uint64_t gen);
/* `dsock stat`: " name=value ..." appended to buf. */
void dd_chan_stat(char *buf, size_t n);

/* The other daemon took the claimant's channel for claim id (TAKEN, over
 * link gen). */
void dd_chan_taken(uint64_t gen, uint64_t id);

/* Provided by the links (hostlink.c): the link's two addresses as its
 * socket has them (0, or -1: no such link up); the claimant's token sent
 * over it, and the word that its channel was taken (1 if queued or
 * written on a live link, else 0); whether a link is up with a host at
 * address from (its port aside). */
int dd_hosts_link_addrs(uint64_t gen, struct sockaddr_storage *local, struct sockaddr_storage *peer);
int dd_hosts_channel(uint64_t gen, uint64_t id, const uint8_t token[DD_CHAN_TOKEN]);
int dd_hosts_taken(uint64_t gen, uint64_t id);
int dd_hosts_linked(const struct sockaddr_storage *from);

#endif

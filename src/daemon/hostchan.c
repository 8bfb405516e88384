/* Channels between hosts (hostchan.h): the ends waiting for their
 * channel, by claim id and by socket, and their outcome (the channel
 * sockets themselves are hostchan_port.c's). */
#include "daemon/hostchan_int.h"
#include "daemon/registry.h"
#include "common/hmap.h"
#include "common/log.h"
#include "common/reason.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static struct end *ends;
static struct dsock_hmap by_id;  /* claim id -> ends with it (a chain) */
static struct dsock_hmap by_end; /* (process, socket) -> its end */
static uint64_t id_seed; /* (ids are the other host's choice: keyed) */
unsigned long hc_n_dialled, hc_n_accepted, hc_n_refused, hc_n_failed;

int64_t hc_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t end_key(const struct dd_proc *p, uint64_t sock_id)
{
	uint64_t k[2] = { (uint64_t)(uintptr_t)p, sock_id };

	return dsock_hash(k, sizeof(k), 0x3c);
}

static uint64_t id_key(uint64_t id)
{
	return dsock_hash(&id, sizeof(id), id_seed);
}

int hc_ends_start(void)
{
	return getrandom(&id_seed, sizeof(id_seed), 0) == sizeof(id_seed) ? 0 : -1;
}

struct end *hc_ends_with(uint64_t id)
{
	uint64_t v;

	return dsock_hmap_get(&by_id, id_key(id), &v) ? (struct end *)(uintptr_t)v : NULL;
}

void hc_end_unlink(struct end *e)
{
	uint64_t v;
	struct end *head, **pp;

	if (e->prev)
		e->prev->next = e->next;
	else
		ends = e->next;
	if (e->next)
		e->next->prev = e->prev;
	if (dsock_hmap_get(&by_id, id_key(e->id), &v)) {
		head = (struct end *)(uintptr_t)v;
		for (pp = &head; *pp && *pp != e; pp = &(*pp)->idnext)
			;
		if (*pp)
			*pp = e->idnext;
		if (head)
			dsock_hmap_put(&by_id, id_key(e->id), (uint64_t)(uintptr_t)head);
		else
			dsock_hmap_del(&by_id, id_key(e->id));
	}
	if (dsock_hmap_get(&by_end, end_key(e->to.proc, e->sock_id), &v) && v == (uint64_t)(uintptr_t)e)
		dsock_hmap_del(&by_end, end_key(e->to.proc, e->sock_id));
	if (e->slot >= 0)
		hc_pend_close(&hc_pends[e->slot]);
}

/* The outcome of an end no longer in the tables: its channel (fd >= 0,
 * PAIRED) or the kernel; then it is freed. */
void hc_answer(struct end *e, int fd, unsigned reason)
{
	struct dsock_msg_result r = { .sock_id = e->sock_id, .transport = (uint16_t)e->transport };

	if (fd >= 0) {
		/* (the process gets what an AF_UNIX pair would be: blocking) */
		int fl = fcntl(fd, F_GETFL);
		if (fl >= 0)
			fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
		r.result = DSOCK_RES_PAIRED;
		r.side = e->claimant ? 0 : 1;
		r.ring_size = 1; /* framed as a channel */
		DSOCK_INFO("pid %d sock %llu: on a channel to the other host (%s)",
			   e->to.proc ? e->to.proc->pid : -1, (unsigned long long)e->sock_id,
			   e->claimant ? "dialled" : "accepted");
	} else {
		r.result = DSOCK_RES_KERNEL;
		r.reason = reason;
		hc_n_failed++;
		DSOCK_INFO("pid %d sock %llu: no channel to the other host: %s", e->to.proc ? e->to.proc->pid : -1,
			   (unsigned long long)e->sock_id, dsock_reason_name(reason));
	}
	dd_send_result(&e->to, &r, fd);
	free(e);
}

void hc_end_done(struct end *e, int fd, unsigned reason)
{
	hc_end_unlink(e);
	hc_answer(e, fd, reason);
}

static int end_add(struct end *e)
{
	uint64_t v = 0;

	if (dsock_hmap_put(&by_end, end_key(e->to.proc, e->sock_id), (uint64_t)(uintptr_t)e))
		return -ENOMEM;
	dsock_hmap_get(&by_id, id_key(e->id), &v);
	e->idnext = (struct end *)(uintptr_t)v;
	if (dsock_hmap_put(&by_id, id_key(e->id), (uint64_t)(uintptr_t)e)) {
		dsock_hmap_del(&by_end, end_key(e->to.proc, e->sock_id));
		return -ENOMEM;
	}
	e->prev = NULL;
	e->next = ends;
	if (ends)
		ends->prev = e;
	ends = e;
	return 0;
}

int dd_chan_begin(const struct dd_reply_to *to, uint64_t sock_id, unsigned transport, int claimant,
		  uint64_t gen, uint64_t id)
{
	struct end *e;
	int r;

	if (!hc_port_on())
		return -DSOCK_R_HOST_NO_TRANSPORT;
	if (!(e = calloc(1, sizeof(*e))))
		return -DSOCK_R_RESOURCE;
	e->to = *to;
	e->sock_id = sock_id;
	e->transport = transport;
	e->claimant = claimant;
	e->gen = gen;
	e->id = id;
	e->slot = -1;
	e->deadline = hc_now_ms() + END_WAIT_MS;
	/* the token goes over the link before the dial, so it is usually
	 * there first (a connection that comes first waits for it); sent
	 * before the end is in the tables, since a link that fails as it is
	 * written ends that link's ends */
	if (claimant && getrandom(e->token, sizeof(e->token), 0) != sizeof(e->token))
		r = -DSOCK_R_RESOURCE;
	else if (claimant && !dd_hosts_channel(gen, id, e->token))
		r = -DSOCK_R_HOST_UNREACHABLE;
	else
		r = end_add(e) ? -DSOCK_R_RESOURCE : 0;
	if (r) {
		free(e);
		return r;
	}
	if (!claimant) {
		/* a connection that came before this end waits for it */
		hc_retry_waiting();
		return 0;
	}
	if ((r = hc_dial(e))) {
		hc_end_unlink(e);
		free(e);
	}
	return r;
}

void dd_chan_token(uint64_t gen, uint64_t id, const uint8_t token[DD_CHAN_TOKEN])
{
	for (struct end *e = hc_ends_with(id); e; e = e->idnext)
		if (!e->claimant && e->gen == gen && e->id == id && !e->has_token) {
			memcpy(e->token, token, DD_CHAN_TOKEN);
			e->has_token = 1;
			hc_retry_waiting();
			return;
		}
}

void dd_chan_taken(uint64_t gen, uint64_t id)
{
	struct end *e;

	for (e = hc_ends_with(id); e; e = e->idnext)
		if (e->claimant && e->gen == gen && e->id == id && e->slot >= 0 && hc_pends[e->slot].state == P_SENT)
			break;
	if (!e)
		return;
	struct pend *p = &hc_pends[e->slot];
	int fd = p->fd;
	p->fd = -1;
	e->slot = -1;
	hc_pend_close(p);
	hc_n_dialled++;
	hc_end_done(e, fd, 0);
	close(fd);
}

void dd_chan_closed(const struct dd_proc *p, uint64_t sock_id)
{
	uint64_t v;
	struct end *e;

	if (dsock_hmap_get(&by_end, end_key(p, sock_id), &v) && (e = (struct end *)(uintptr_t)v) &&
	    e->to.proc == p && e->sock_id == sock_id) {
		hc_end_unlink(e);
		free(e);
	}
}

void dd_chan_forget(const struct dd_proc *p)
{
	for (struct end *e = ends, *next; e; e = next) {
		next = e->next;
		if (e->to.proc == p) {
			hc_end_unlink(e);
			free(e);
		}
	}
}

void dd_chan_link_down(uint64_t gen)
{
	for (struct end *e = ends, *next; e; e = next) {
		next = e->next;
		if (e->gen == gen)
			hc_end_done(e, -1, DSOCK_R_HOST_UNREACHABLE);
	}
}

int dd_chan_tick(void)
{
	int64_t now = hc_now_ms(), next = -1;

	for (struct end *e = ends, *nx; e; e = nx) {
		nx = e->next;
		if (e->deadline <= now)
			hc_end_done(e, -1, DSOCK_R_HOST_UNREACHABLE);
		else if (next < 0 || e->deadline - now < next)
			next = e->deadline - now;
	}
	int p = hc_port_tick(now);
	if (p >= 0 && (next < 0 || p < next))
		next = p;
	return (int)next;
}

void dd_chan_stat(char *buf, size_t n)
{
	size_t l = strlen(buf);

	if (hc_port_on())
		snprintf(buf + l, n - l, " channels_dialled=%lu channels_accepted=%lu channels_refused=%lu "
			 "channels_failed=%lu", hc_n_dialled, hc_n_accepted, hc_n_refused, hc_n_failed);
}

void dd_chan_stop(void)
{
	while (ends) {
		struct end *e = ends;
		hc_end_unlink(e);
		free(e);
	}
	hc_port_stop();
	dsock_hmap_free(&by_id);
	dsock_hmap_free(&by_end);
}

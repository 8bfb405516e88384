#include "daemon/registry.h"
#include "daemon/lineage.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>

static struct dd_proc *procs;
static size_t nprocs;
/* counted sets over the sockets of enabled processes: listeners by
 * (port, address), connected stream sockets by (local, peer) */
static struct dsock_hmap listeners, conns;

static uint64_t listener_key(uint16_t port, const uint8_t addr[16])
{
	uint8_t k[18];

	memcpy(k, &port, 2);
	memcpy(k + 2, addr, 16);
	return dsock_hash(k, sizeof(k), 0x4c);
}

static uint64_t conn_key(const struct dsock_addr *local, const struct dsock_addr *peer)
{
	uint8_t k[36];

	memcpy(k, &local->port, 2);
	memcpy(k + 2, local->addr, 16);
	memcpy(k + 18, &peer->port, 2);
	memcpy(k + 20, peer->addr, 16);
	return dsock_hash(k, sizeof(k), 0x43);
}

static int known_family(const struct dsock_addr *a)
{
	return a->family == AF_INET || a->family == AF_INET6;
}

static void unindex(struct dd_sock *s)
{
	if (s->lkey)
		dsock_hset_drop(&listeners, s->lkey);
	if (s->ckey)
		dsock_hset_drop(&conns, s->ckey);
	s->lkey = s->ckey = 0;
}

/* Failing to index (no memory) only makes an offer wait less long. */
static void index_sock(const struct dd_proc *p, struct dd_sock *s)
{
	if (p->flags & DSOCK_HELLO_DISABLED || s->type != SOCK_STREAM)
		return;
	if (s->state == DSOCK_ST_LISTENING && known_family(&s->local)) {
		s->lkey = listener_key(s->local.port, s->local.addr);
		if (dsock_hset_add(&listeners, s->lkey))
			s->lkey = 0;
	}
	if (known_family(&s->local) && known_family(&s->peer)) {
		s->ckey = conn_key(&s->local, &s->peer);
		if (dsock_hset_add(&conns, s->ckey))
			s->ckey = 0;
	}
}

int dd_listener_known(const struct dsock_addr *a)
{
	/* stored addresses are v4-mapped already */
	static const uint8_t any6[16], any4[16] = { [10] = 0xff, [11] = 0xff };

	return dsock_hset_has(&listeners, listener_key(a->port, a->addr)) ||
	       dsock_hset_has(&listeners, listener_key(a->port, any6)) ||
	       dsock_hset_has(&listeners, listener_key(a->port, any4));
}

int dd_socket_known(const struct dsock_addr *local, const struct dsock_addr *peer)
{
	return dsock_hset_has(&conns, conn_key(local, peer));
}

unsigned long long dd_proc_netns(pid_t pid)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
	return stat(path, &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

struct dd_proc *dd_proc_add(pid_t pid, uid_t uid, const struct dsock_msg_hello *h)
{
	struct dd_proc *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->pid = pid;
	pid_t ppid;
	if (dd_proc_stat(pid, &p->start, &ppid))
		p->start = 0;
	p->uid = uid;
	p->netns = dd_proc_netns(pid);
	p->ppid = h->ppid;
	p->flags = h->flags;
	memcpy(p->comm, h->comm, sizeof(p->comm));
	memcpy(p->version, h->lib_version, sizeof(p->version));
	p->since = time(NULL);
	p->next = procs;
	procs = p;
	nprocs++;
	return p;
}

void dd_proc_remove(struct dd_proc *p)
{
	for (struct dd_proc **pp = &procs; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			nprocs--;
			break;
		}
	}
	for (size_t i = 0; i < p->nsocks; i++)
		unindex(&p->socks[i]);
	if (p->mail)
		munmap(p->mail, p->mail_len);
	dsock_hmap_free(&p->ids);
	free(p->socks);
	free(p);
}

struct dd_proc *dd_proc_find(pid_t pid)
{
	for (struct dd_proc *p = procs; p; p = p->next)
		if (p->pid == pid)
			return p;
	return NULL;
}

struct dd_proc *dd_proc_first(void)
{
	return procs;
}

size_t dd_proc_count(void)
{
	return nprocs;
}

static int reserve(struct dd_proc *p, size_t n)
{
	size_t cap = p->cap ? p->cap : 16;
	struct dd_sock *s;

	if (n <= p->cap)
		return 0;
	while (cap < n)
		cap *= 2;
	s = realloc(p->socks, cap * sizeof(*s));
	if (!s)
		return -ENOMEM;
	p->socks = s;
	p->cap = cap;
	return 0;
}

static uint64_t id_key(uint64_t id)
{
	return dsock_hash(&id, sizeof(id), 0x49);
}

void dd_proc_inherit(struct dd_proc *child, const struct dd_proc *parent, uint64_t evpos, uint32_t seq)
{
	if (child->uid != parent->uid || reserve(child, parent->nsocks))
		return;
	child->nsocks = 0;
	for (size_t i = 0; i < parent->nsocks; i++) {
		struct dd_sock *s = &child->socks[child->nsocks];

		const struct dd_sock *ps = &parent->socks[i];

		if (ps->born_ev > evpos || (ps->born_seq && (int32_t)(ps->born_seq - seq) > 0))
			continue;
		*s = *ps;
		if (dsock_hmap_put(&child->ids, id_key(s->id), child->nsocks))
			break;
		s->lkey = s->ckey = 0;
		s->born_ev = 0;
		s->born_seq = 0;
		index_sock(child, s);
		child->nsocks++;
	}
}

void dd_proc_learn(struct dd_proc *p, uint64_t sock_id, const struct dsock_addr *local,
		   const struct dsock_addr *peer)
{
	uint64_t i;

	if (!p || !dsock_hmap_get(&p->ids, id_key(sock_id), &i) || i >= p->nsocks || p->socks[i].id != sock_id)
		return;
	struct dd_sock *s = &p->socks[i];
	if (known_family(&s->local))
		return;
	unindex(s);
	s->local = *local;
	s->peer = *peer;
	index_sock(p, s);
}

int dd_proc_set_host(struct dd_proc *p, uint64_t sock_id, int host)
{
	uint64_t i;

	if (!p || !dsock_hmap_get(&p->ids, id_key(sock_id), &i) || i >= p->nsocks || p->socks[i].id != sock_id)
		return 0;
	if (host >= 0 && host < 0xffff)
		p->socks[i].host = (uint16_t)(host + 1);
	return 1;
}

int dd_proc_event(struct dd_proc *p, const struct dsock_msg_sock_event *ev, uint64_t born_ev, uint32_t born_seq)
{
	uint64_t key = id_key(ev->sock_id), i;
	struct dd_sock *s = NULL;

	if (dsock_hmap_get(&p->ids, key, &i) && i < p->nsocks && p->socks[i].id == ev->sock_id)
		s = &p->socks[i];
	if (ev->event == DSOCK_EV_CLOSE) {
		if (s) {
			unindex(s);
			dsock_hmap_del(&p->ids, key);
			*s = p->socks[--p->nsocks];
			if (s != &p->socks[p->nsocks])
				dsock_hmap_put(&p->ids, id_key(s->id), (uint64_t)(s - p->socks));
		}
		return 0;
	}
	if (!s) {
		if (p->nsocks >= DD_SOCKS_PER_PROC_MAX) {
			p->untracked++;
			return 0;
		}
		if (reserve(p, p->nsocks + 1) || dsock_hmap_put(&p->ids, key, p->nsocks))
			return -ENOMEM;
		s = &p->socks[p->nsocks++];
		memset(s, 0, sizeof(*s));
		s->id = ~ev->sock_id; /* new: takes the event's fd and addresses */
		s->born_ev = born_ev;
		s->born_seq = born_ev ? 0 : born_seq;
	}
	unindex(s);
	s->domain = ev->domain;
	s->type = ev->type;
	s->state = ev->state;
	s->path = ev->path;
	s->reason = ev->reason;
	s->event = (uint16_t)ev->event;
	/* fd -1: as told before (a socket new to us shows none) */
	if (ev->fd >= 0 || s->id != ev->sock_id) {
		s->fd = ev->fd;
		s->local = ev->local;
		s->peer = ev->peer;
	}
	s->id = ev->sock_id;
	index_sock(p, s);
	return 0;
}

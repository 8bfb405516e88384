#include "daemon/registry.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static struct dd_proc *procs;
static size_t nprocs;

struct dd_proc *dd_proc_add(pid_t pid, uid_t uid, const struct dsock_msg_hello *h)
{
	struct dd_proc *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->pid = pid;
	p->uid = uid;
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
	if (p->mail)
		munmap(p->mail, p->mail_len);
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

void dd_proc_inherit(struct dd_proc *child, const struct dd_proc *parent)
{
	if (child->uid != parent->uid || reserve(child, parent->nsocks))
		return;
	memcpy(child->socks, parent->socks, parent->nsocks * sizeof(*child->socks));
	child->nsocks = parent->nsocks;
}

int dd_proc_event(struct dd_proc *p, const struct dsock_msg_sock_event *ev)
{
	struct dd_sock *s = NULL;

	for (size_t i = 0; i < p->nsocks; i++) {
		if (p->socks[i].id == ev->sock_id) {
			s = &p->socks[i];
			break;
		}
	}
	if (ev->event == DSOCK_EV_CLOSE) {
		if (s)
			*s = p->socks[--p->nsocks];
		return 0;
	}
	if (!s) {
		if (p->nsocks >= DD_SOCKS_PER_PROC_MAX) {
			p->untracked++;
			return 0;
		}
		if (reserve(p, p->nsocks + 1))
			return -ENOMEM;
		s = &p->socks[p->nsocks++];
	}
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
	return 0;
}

/* The matcher: offers wait, hashed by their proof's key, until the offer
 * of the other end arrives (found under the mirrored key, then proven by
 * the proof) or they expire.  A proven pair gets its transport's
 * resources (provision.h) and lives in pairs.c. */
#include "daemon/pairing.h"
#include "common/hmap.h"
#include "daemon/hostlink.h"
#include "daemon/hostchan.h"
#include "common/ident.h"
#include "daemon/policy.h"
#include "daemon/proof.h"
#include "daemon/provision.h"
#include "daemon/registry.h"
#include "common/log.h"
#include "common/reason.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* An offer waiting for its other end.  The socket itself is not kept: the
 * daemon must never hold a connection open after its owner closes it. */
struct dd_offer {
	struct dd_reply_to to;
	uint64_t sock_id;
	uint32_t role;
	const struct dd_proof *proof;
	const struct dd_provision *prov;
	struct dd_ident id;
	int64_t expire_ms;
	struct dd_offer *hnext;             /* same key */
	struct dd_offer *qprev, *qnext;     /* its wait class, oldest first */
	int wait;                           /* which class */
	/* Between hosts (hostlink.h).  remote: not an offer but another
	 * host's claim, which came over link `link` from allow-list entry
	 * `host` (to.proc NULL).  Otherwise claim_id, when not 0, names the
	 * claim this offer sent to the peer's host over link `link`.
	 * confirming: our end that another host's claim `claim_id` proved,
	 * waiting for that claimant's CONFIRM over link `link` (in no
	 * key's chain: nothing else can match it). */
	int remote, host, confirming;
	uint64_t claim_id, link;
};

/* Each side offers at its first data call, so either may come first, and
 * the gap is the application's (sockperf's client waits 2 s before its
 * first send).  Held below the library's own give-up (10 s), so a late
 * answer never reaches a socket that already went to the kernel.  One
 * queue per wait: each is in expiry order, so a tick looks at heads only. */
enum { WAIT_LIKELY, WAIT_UNLIKELY, WAIT_CONFIRM, NWAITS };
/* (a CONFIRM takes one round trip between the daemons.  A likely offer's
 * wait and this stay below the library's give-up; with a busy daemon's
 * grace on both an end may outlast it, and the library, which has left
 * the offer by then, ignores the answer: the kernel carries that socket
 * either way) */
static const int wait_ms[NWAITS] = { 4000, 300, 1500 };
/* A daemon that is behind (messages were waiting at its last look) may
 * not have read the mate's offer yet: a likely offer then waits up to
 * this much longer, since a burst of 100,000 connections keeps the daemon
 * busy for seconds and two mates' offers may sit seconds apart in its
 * queues.  Still below the library's give-up (10 s). */
#define BEHIND_GRACE_MS 4000

static struct dsock_hmap by_key; /* key -> the newest offer with it */
static struct dsock_hmap by_end; /* (process, socket id) -> its offer */
static struct dsock_hmap by_claim; /* our claim's id -> its offer */
static struct dsock_hmap by_confirm; /* (a proving claim's id, its link) -> our confirming end */
static struct dd_offer *qhead[NWAITS], *qtail[NWAITS];
static unsigned long n_paired, n_kernel, n_pending, n_stale, n_remote, n_remote_waiting;
/* claims of other hosts waiting at once: beyond, refused */
#define REMOTE_WAITING_MAX 65536

static void await_confirm(struct dd_offer *o, const struct dd_offer *r);
static void claim(struct dd_offer *o);

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void answer_kernel(const struct dd_reply_to *to, uint64_t sock_id, unsigned transport, unsigned reason)
{
	struct dsock_msg_result r = { .sock_id = sock_id, .transport = (uint16_t)transport,
				      .result = DSOCK_RES_KERNEL, .reason = reason };

	n_kernel++;
	dd_send_result(to, &r, -1);
}

/* (the id is another host's choice: hashed with its link, so that ids it
 * picks neither cluster in the table nor meet another link's) */
static uint64_t confirm_key(uint64_t id, uint64_t link)
{
	uint64_t k[2] = { id, link };

	return dsock_hash(k, sizeof(k), 0xc0);
}

static uint64_t end_key(const struct dd_proc *p, uint64_t sock_id)
{
	uint64_t k[2] = { (uint64_t)(uintptr_t)p, sock_id };

	return dsock_hash(k, sizeof(k), 0x4f);
}

static int insert(struct dd_offer *o)
{
	uint64_t v = 0;

	if (!o->remote && dsock_hmap_put(&by_end, end_key(o->to.proc, o->sock_id), (uint64_t)(uintptr_t)o))
		return -ENOMEM;
	if (o->confirming) {
		uint64_t k = confirm_key(o->claim_id, o->link);
		/* (an id another host chose: one already waiting is refused) */
		if (dsock_hmap_get(&by_confirm, k, &v) || dsock_hmap_put(&by_confirm, k, (uint64_t)(uintptr_t)o)) {
			dsock_hmap_del(&by_end, end_key(o->to.proc, o->sock_id));
			return -ENOMEM;
		}
		goto queue;
	}
	dsock_hmap_get(&by_key, o->id.key, &v);
	o->hnext = (struct dd_offer *)(uintptr_t)v;
	if (dsock_hmap_put(&by_key, o->id.key, (uint64_t)(uintptr_t)o)) {
		if (!o->remote)
			dsock_hmap_del(&by_end, end_key(o->to.proc, o->sock_id));
		return -ENOMEM;
	}
queue:
	n_remote_waiting += o->remote;
	o->qnext = NULL;
	o->qprev = qtail[o->wait];
	if (o->qprev)
		o->qprev->qnext = o;
	else
		qhead[o->wait] = o;
	qtail[o->wait] = o;
	n_pending++;
	return 0;
}

static void unlink_offer(struct dd_offer *o)
{
	uint64_t v = 0;
	struct dd_offer *head, **pp;

	dsock_hmap_get(&by_key, o->id.key, &v);
	head = (struct dd_offer *)(uintptr_t)v;
	for (pp = &head; *pp && *pp != o; pp = &(*pp)->hnext)
		;
	if (*pp)
		*pp = o->hnext;
	if (head)
		dsock_hmap_put(&by_key, o->id.key, (uint64_t)(uintptr_t)head); /* an update: no allocation */
	else
		dsock_hmap_del(&by_key, o->id.key);
	if (!o->remote && dsock_hmap_get(&by_end, end_key(o->to.proc, o->sock_id), &v) &&
	    v == (uint64_t)(uintptr_t)o)
		dsock_hmap_del(&by_end, end_key(o->to.proc, o->sock_id));
	if (!o->remote && o->claim_id && dsock_hmap_get(&by_claim, o->claim_id, &v) && v == (uint64_t)(uintptr_t)o)
		dsock_hmap_del(&by_claim, o->claim_id);
	if (o->confirming) {
		uint64_t k = confirm_key(o->claim_id, o->link);
		if (dsock_hmap_get(&by_confirm, k, &v) && v == (uint64_t)(uintptr_t)o)
			dsock_hmap_del(&by_confirm, k);
	}
	n_remote_waiting -= o->remote;
	if (o->qprev)
		o->qprev->qnext = o->qnext;
	else
		qhead[o->wait] = o->qnext;
	if (o->qnext)
		o->qnext->qprev = o->qprev;
	else
		qtail[o->wait] = o->qprev;
	n_pending--;
}

/* The waiting offer that o's proof proves o's other end, or NULL (fd: o's
 * socket).  A candidate whose socket is no longer what it was (reset, its
 * addresses taken by o's connection) goes back to the kernel: it could
 * only ever mirror connections that are not its own. */
static struct dd_offer *find_mate(const struct dd_offer *o, int fd)
{
	uint64_t v;

	if (!dsock_hmap_get(&by_key, o->id.mate_key, &v))
		return NULL;
	for (struct dd_offer *x = (struct dd_offer *)(uintptr_t)v, *next; x; x = next) {
		next = x->hnext;
		if (x->proof != o->proof || !o->proof->proves(&x->id, &o->id))
			continue;
		/* another host's claim pairs with an offer of ours to the
		 * same transport, never with another claim */
		if ((x->remote && o->remote) || x->prov != o->prov)
			continue;
		if (!o->proof->still || o->proof->still(&x->id, fd))
			return x;
		n_stale++;
		unlink_offer(x);
		answer_kernel(&x->to, x->sock_id, x->prov->transport, DSOCK_R_NOT_ESTABLISHED);
		free(x);
	}
	return NULL;
}

static void pair(struct dd_offer *a, struct dd_offer *b)
{
	/* side 0 is the connecting end (a stable choice both can compute) */
	struct dd_offer *s[2];
	struct dsock_msg_result r = { .transport = (uint16_t)a->prov->transport, .result = DSOCK_RES_PAIRED };
	struct dd_pair *x = calloc(1, sizeof(*x));
	int e;

	s[0] = a->role == DSOCK_OFFER_CONNECT ? a : b;
	s[1] = s[0] == a ? b : a;
	struct dsock_msg_result rs[2] = { r, r };
	const struct dd_reply_to *to[2] = { &s[0]->to, &s[1]->to };
	if (!x) {
		e = -ENOMEM;
	} else {
		x->prov = a->prov;
		x->fd[0] = x->fd[1] = -1;
		for (int i = 0; i < 2; i++) {
			x->proc[i] = s[i]->to.proc;
			x->pid[i] = s[i]->to.proc ? s[i]->to.proc->pid : 0;
			x->start[i] = s[i]->to.proc ? s[i]->to.proc->start : 0;
			x->sid[i] = s[i]->sock_id;
			x->cookie[i] = s[i]->id.cookie;
			x->ino[i] = s[i]->id.ino;
			x->local[i] = s[i]->id.local;
		}
		e = a->prov->make(x, to, rs);
		if (e == 0 && (e = dd_pair_add(x)))
			a->prov->release(x);
	}
	if (e) {
		free(x);
		answer_kernel(&a->to, a->sock_id, a->prov->transport, DSOCK_R_RESOURCE);
		answer_kernel(&b->to, b->sock_id, b->prov->transport, DSOCK_R_RESOURCE);
		return;
	}
	for (int i = 0; i < 2; i++) {
		rs[i].sock_id = s[i]->sock_id;
		rs[i].side = (uint32_t)i;
		/* a part of a pool the process holds comes without an fd */
		dd_send_result(&s[i]->to, &rs[i], rs[i].pool ? -1 : x->fd[i]);
	}
	if (x->prov->sent)
		x->prov->sent(x);
	n_paired++;
	dd_pair_sweep(2);
	DSOCK_INFO("paired pid %d sock %llu with pid %d sock %llu (%s)",
		   s[0]->to.proc ? s[0]->to.proc->pid : -1, (unsigned long long)s[0]->sock_id,
		   s[1]->to.proc ? s[1]->to.proc->pid : -1, (unsigned long long)s[1]->sock_id, x->prov->name);
}

/* Whether process p may offer socket fd: root may, another only a socket
 * its own user made (the uid of its inode, the maker's as seen here, as
 * SO_PEERCRED gave p's); a socket received from another user's process
 * (another tenant's, over SCM_RIGHTS) stays on the kernel, which carries
 * it for whoever holds it. */
static int may_offer(const struct dd_proc *p, int fd)
{
	struct stat st;

	return p && (p->uid == 0 || (fstat(fd, &st) == 0 && st.st_uid == p->uid));
}

/* The offer m waits (its close waits for this word, not the result). */
static void held(const struct dd_reply_to *to, const struct dsock_msg_offer *m)
{
	struct dsock_msg_result r = { .sock_id = m->sock_id, .transport = (uint16_t)m->transport,
				      .result = DSOCK_RES_HELD };

	dd_send_result(to, &r, -1);
}

void dd_pairing_offer(const struct dd_reply_to *to, const struct dsock_msg_offer *m, int fd)
{
	struct dd_offer o = { .to = *to, .sock_id = m->sock_id, .role = m->role,
			      .proof = dd_proof_get(m->proof), .prov = dd_provision_get(m->transport) };
	unsigned reason = DSOCK_R_NO_TRANSPORT;
	struct dd_offer *x, *n;

	if (!may_offer(to->proc, fd))
		reason = DSOCK_R_NOT_OWNER;
	else if (o.proof && o.prov)
		o.proof = dd_proof_inspect(o.proof, fd, &o.id, &reason);
	if (reason == DSOCK_R_NONE && !dd_policy_allows(to->proc ? to->proc->pid : 0, fd))
		reason = DSOCK_R_DENIED_RULE;
	if (reason != DSOCK_R_NONE) {
		close(fd);
		answer_kernel(to, m->sock_id, m->transport, reason);
		return;
	}
	dd_proc_learn(to->proc, m->sock_id, &o.id.local, &o.id.peer);
	x = find_mate(&o, fd);
	close(fd);
	if (x) {
		unlink_offer(x);
		if (!x->remote)
			pair(x, &o);
		else if (!(n = malloc(sizeof(*n)))) {
			dd_hosts_answer(x->link, x->claim_id, DD_CLAIM_REFUSED, DSOCK_R_RESOURCE);
			answer_kernel(to, m->sock_id, m->transport, DSOCK_R_RESOURCE);
		} else {
			held(to, m);
			*n = o;
			await_confirm(n, x);
		}
		free(x);
		return;
	}
	/* a connect end whose peer is no known dsock listener (a plain server,
	 * or a listener closed or not yet reported) is held only briefly; one
	 * whose handshake the peer answered has an opted-in peer */
	o.wait = m->role != DSOCK_OFFER_CONNECT || o.proof->id == DSOCK_PROOF_HANDSHAKE ||
			 dd_listener_known(&o.id.peer) || dd_socket_known(&o.id.peer, &o.id.local) ?
		 WAIT_LIKELY : WAIT_UNLIKELY;
	o.expire_ms = now_ms() + wait_ms[o.wait];
	n = malloc(sizeof(*n));
	if (!n || (*n = o, insert(n))) {
		free(n);
		answer_kernel(to, m->sock_id, m->transport, DSOCK_R_RESOURCE);
		return;
	}
	held(to, m);
	if (o.proof->id == DSOCK_PROOF_HANDSHAKE && m->role == DSOCK_OFFER_CONNECT && dd_hosts_on() &&
	    !dd_listener_known(&o.id.peer) && !dd_socket_known(&o.id.peer, &o.id.local))
		claim(n);
}

/* Between hosts (hostlink.h). */

/* Our offer o is proven one end of a connection whose other end another
 * host's daemon holds (`dsock stat` names that host): a transport that
 * runs over channels gets one (the claimant's daemon dials it), another
 * stays on the kernel. */
static void remote_proven(struct dd_offer *o, int host)
{
	int r = -DSOCK_R_HOST_NO_TRANSPORT;

	n_remote++;
	if (o->prov->channel)
		r = dd_chan_begin(&o->to, o->sock_id, o->prov->transport, !o->confirming, o->link, o->claim_id);
	/* (an offer made when the connection settled comes before the
	 * event that tells of the socket, which may not be read yet; a close
	 * read now ends the channel's end begun above) */
	dd_server_drain(o->to.proc);
	dd_proc_set_host(o->to.proc, o->sock_id, host);
	if (r)
		answer_kernel(&o->to, o->sock_id, o->prov->transport, (unsigned)-r);
	DSOCK_INFO("pid %d sock %llu: the other end is on host %s", o->to.proc ? o->to.proc->pid : -1,
		   (unsigned long long)o->sock_id, dd_hosts_name(host));
}

/* Another host's claim r proves our offer o (on the heap, in no queue)
 * the other end of its connection: it answers MATCHED, and o waits for
 * the claimant's CONFIRM, matched by nothing else meanwhile.  The
 * claimant's end may have stopped waiting (closed, or its wait over)
 * while the answer travelled; the two ends take one outcome only once
 * the claimant has said which. */
static void await_confirm(struct dd_offer *o, const struct dd_offer *r)
{
	o->confirming = 1;
	o->claim_id = r->claim_id;
	o->link = r->link;
	o->host = r->host;
	o->wait = WAIT_CONFIRM;
	o->expire_ms = now_ms() + wait_ms[WAIT_CONFIRM];
	if (insert(o)) {
		dd_hosts_answer(r->link, r->claim_id, DD_CLAIM_REFUSED, DSOCK_R_RESOURCE);
		answer_kernel(&o->to, o->sock_id, o->prov->transport, DSOCK_R_RESOURCE);
		free(o);
		return;
	}
	dd_hosts_answer(r->link, r->claim_id, DD_CLAIM_MATCHED, DSOCK_R_NONE);
}

/* Our connecting end o (waiting, HANDSHAKE-proven) asks the host its peer
 * address names whether it holds the other end.  Only a connecting end
 * claims, where its handshake reached a dsock listener: one claim per
 * connection, and it goes to the address the kernel connected to (a
 * published port's host where DNAT rewrote it). */
static void claim(struct dd_offer *o)
{
	struct dd_claim c = { .sent = o->id.sent, .recv = o->id.recv, .role = DSOCK_IDENT_ACTIVE,
			      .transport = o->prov->transport, .local = o->id.local, .peer = o->id.peer };
	int64_t link;

	/* (an id from the kernel's CSPRNG: the other host cannot guess it,
	 * so no answer over another link can name it) */
	if (getrandom(&c.id, sizeof(c.id), 0) != sizeof(c.id) || !c.id || !~c.id ||
	    dsock_hmap_put(&by_claim, c.id, (uint64_t)(uintptr_t)o))
		return;
	o->claim_id = c.id;
	if ((link = dd_hosts_claim(&o->id.peer, &c)) > 0) {
		o->link = (uint64_t)link;
		return;
	}
	/* no link there now: the offer waits for a mate of this host as any */
	dsock_hmap_del(&by_claim, c.id);
	o->claim_id = 0;
}

void dd_pairing_remote_claim(uint64_t gen, int host, const struct dd_claim *c)
{
	struct dd_offer o = { .remote = 1, .host = host, .link = gen, .claim_id = c->id,
			      .role = DSOCK_OFFER_CONNECT, .proof = dd_proof_get(DSOCK_PROOF_HANDSHAKE),
			      .prov = dd_provision_get(c->transport) };
	struct dd_offer *x, *n;

	if (c->role != DSOCK_IDENT_ACTIVE || !c->sent || !c->recv || c->sent == c->recv || !c->id || !~c->id ||
	    !o.prov) {
		dd_hosts_answer(gen, c->id, DD_CLAIM_REFUSED, DSOCK_R_UNPROVEN);
		return;
	}
	o.id.sent = c->sent;
	o.id.recv = c->recv;
	o.id.role = DSOCK_IDENT_ACTIVE;
	o.id.local = c->local;
	o.id.peer = c->peer;
	dd_proof_handshake_keys(&o.id);
	if ((x = find_mate(&o, -1))) {
		unlink_offer(x);
		await_confirm(x, &o);
		return;
	}
	o.wait = WAIT_LIKELY;
	o.expire_ms = now_ms() + wait_ms[o.wait];
	n = n_remote_waiting < REMOTE_WAITING_MAX ? malloc(sizeof(*n)) : NULL;
	if (!n || (*n = o, insert(n))) {
		free(n);
		dd_hosts_answer(gen, c->id, DD_CLAIM_REFUSED, DSOCK_R_RESOURCE);
	}
}

void dd_pairing_remote_answer(uint64_t gen, int host, uint64_t id, unsigned result, unsigned reason)
{
	uint64_t v;
	struct dd_offer *o;

	/* an answer counts only over the link its claim went on; a match
	 * for an end that no longer waits is refused, so that the other
	 * end does not take it either */
	if (!dsock_hmap_get(&by_claim, id, &v) || !(o = (struct dd_offer *)(uintptr_t)v) || o->link != gen ||
	    o->claim_id != id) {
		if (result == DD_CLAIM_MATCHED)
			dd_hosts_confirm(gen, id, DD_CLAIM_REFUSED);
		return;
	}
	unlink_offer(o);
	if (result == DD_CLAIM_MATCHED) {
		/* proven only if our CONFIRM is on its way: else the other end
		 * goes to the kernel when its wait ends, and so does ours */
		if (dd_hosts_confirm(gen, id, DD_CLAIM_MATCHED))
			remote_proven(o, host);
		else
			answer_kernel(&o->to, o->sock_id, o->prov->transport, DSOCK_R_HOST_UNREACHABLE);
	} else
		answer_kernel(&o->to, o->sock_id, o->prov->transport,
			      reason == DSOCK_R_UNPROVEN || reason == DSOCK_R_RESOURCE ? reason : DSOCK_R_PEER_TIMEOUT);
	free(o);
}

void dd_pairing_remote_confirm(uint64_t gen, int host, uint64_t id, unsigned result)
{
	uint64_t v;
	struct dd_offer *o;

	/* a confirm counts only over the link its claim came on */
	if (!dsock_hmap_get(&by_confirm, confirm_key(id, gen), &v) || !(o = (struct dd_offer *)(uintptr_t)v) ||
	    !o->confirming || o->link != gen || o->claim_id != id)
		return;
	unlink_offer(o);
	if (result == DD_CLAIM_MATCHED) {
		remote_proven(o, host);
	} else {
		DSOCK_INFO("pid %d sock %llu: host %s's end no longer waits", o->to.proc ? o->to.proc->pid : -1,
			   (unsigned long long)o->sock_id, dd_hosts_name(host));
		answer_kernel(&o->to, o->sock_id, o->prov->transport, DSOCK_R_PEER_TIMEOUT);
	}
	free(o);
}

void dd_pairing_link_down(uint64_t gen, unsigned reason)
{
	dd_chan_link_down(gen);
	for (int w = 0; w < NWAITS; w++)
		for (struct dd_offer *x = qhead[w], *next; x; x = next) {
			next = x->qnext;
			if (x->link != gen || (!x->remote && !x->claim_id))
				continue;
			unlink_offer(x);
			if (!x->remote)
				answer_kernel(&x->to, x->sock_id, x->prov->transport, reason);
			free(x);
		}
}

void dd_pairing_fetch(const struct dd_reply_to *to, const struct dsock_msg_fetch *m, int fd)
{
	struct dsock_msg_result r = { .sock_id = m->sock_id, .transport = m->transport,
				      .result = DSOCK_RES_FETCHED };
	uint64_t cookie = 0;
	socklen_t kl = sizeof(cookie);
	struct dd_pair *x = NULL;
	int side = 0;

	if (getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &kl) == 0)
		x = dd_pair_by_cookie(cookie, &side);
	close(fd);
	if (x && x->prov->transport == m->transport &&
	    (!x->prov->fetched || x->prov->fetched(x, side, to->proc ? to->proc->pid : 0, &r) == 0))
		r.side = (uint32_t)side;
	else
		x = NULL;
	dd_send_result(to, &r, x ? x->fd[side] : -1);
}

int dd_pairing_peer_of(int fd, struct dd_peer_id *out)
{
	uint64_t cookie = 0;
	socklen_t kl = sizeof(cookie);
	struct dd_pair *x;
	int i;

	if (getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &kl) < 0 || !cookie)
		return -ENOTSOCK;
	if (!(x = dd_pair_by_cookie(cookie, &i)))
		return -ENOENT;
	out->proc = x->proc[1 - i];
	out->sock_id = x->sid[1 - i];
	out->cookie = x->cookie[1 - i];
	out->ino = x->ino[1 - i];
	out->local = x->local[1 - i];
	out->peer = x->local[i];
	return 0;
}

/* A socket closed: its live pair loses that end, and an offer of it that
 * still waits goes (its close comes after the daemon took the offer: the
 * library waits for HELD).  Left waiting, it could be matched with the
 * offer of a later connection that reuses its addresses, a pair for a
 * closed socket that no close would ever end. */
void dd_pairing_closed(const struct dd_proc *p, uint64_t sock_id)
{
	uint64_t v;
	struct dd_offer *o;

	dd_pair_closed(p, sock_id);
	dd_chan_closed(p, sock_id);
	if (dsock_hmap_get(&by_end, end_key(p, sock_id), &v) && (o = (struct dd_offer *)(uintptr_t)v) &&
	    o->to.proc == p && o->sock_id == sock_id) {
		unlink_offer(o);
		free(o);
	}
}

/* A process leaving: its offers go (one walk over the waiting offers,
 * which are few), and its ends of live pairs. */
void dd_pairing_forget(const struct dd_proc *p)
{
	dd_pair_forget(p);
	dd_chan_forget(p);
	dd_provision_forget(p);
	for (int w = 0; w < NWAITS; w++)
		for (struct dd_offer *x = qhead[w], *next; x; x = next) {
			next = x->qnext;
			if (x->to.proc == p) {
				unlink_offer(x);
				free(x);
			}
		}
}

int dd_pairing_tick(int behind)
{
	int64_t now = now_ms(), next = -1;

	for (int w = 0; w < NWAITS; w++) {
		struct dd_offer *x;
		/* (a CONFIRM may sit unread in a busy daemon's link too) */
		int64_t grace = behind && (w == WAIT_LIKELY || w == WAIT_CONFIRM) ? BEHIND_GRACE_MS : 0;

		while ((x = qhead[w]) && x->expire_ms + grace <= now) {
			unlink_offer(x);
			if (x->remote) {
				dd_hosts_answer(x->link, x->claim_id, DD_CLAIM_REFUSED, DSOCK_R_PEER_TIMEOUT);
				free(x);
				continue;
			}
			if (x->confirming)
				DSOCK_INFO("pid %d sock %llu: host %s did not confirm", x->to.proc ? x->to.proc->pid : -1,
					   (unsigned long long)x->sock_id, dd_hosts_name(x->host));
			answer_kernel(&x->to, x->sock_id, x->prov->transport,
				      x->confirming		       ? DSOCK_R_HOST_UNREACHABLE
				      : x->id.unproven		       ? DSOCK_R_UNPROVEN
				      : x->role == DSOCK_OFFER_CONNECT ? DSOCK_R_PEER_TIMEOUT
								       : DSOCK_R_PEER_PLAIN);
			free(x);
		}
		if (x && (next < 0 || x->expire_ms + grace - now < next))
			next = x->expire_ms + grace - now;
	}
	return (int)next;
}

void dd_pairing_stats(unsigned long *paired, unsigned long *kernel, unsigned long *pending,
		      unsigned long *live, unsigned long *stale, unsigned long *remote)
{
	*remote = n_remote;
	*stale = n_stale;
	*paired = n_paired;
	*kernel = n_kernel;
	*pending = n_pending;
	*live = dd_pairs_live();
}

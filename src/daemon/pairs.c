/* The live pairs, hashed by each end's SO_COOKIE and by (process, socket
 * id), so a close, a fetch or a peer look-up costs the same with one pair
 * or 100,000. */
#include "daemon/provision.h"
#include "common/hmap.h"

#include <errno.h>
#include <stdlib.h>

static struct dd_pair *pairs;
static struct dd_pair *sweep_at; /* the pair dd_pair_sweep looks at next */
static struct dsock_hmap by_cookie, by_end;
static unsigned long n_live;

static uint64_t cookie_key(uint64_t cookie)
{
	return dsock_hash(&cookie, sizeof(cookie), 0x50);
}

static uint64_t end_key(const struct dd_proc *p, uint64_t sid)
{
	uint64_t k[2] = { (uint64_t)(uintptr_t)p, sid };

	return dsock_hash(k, sizeof(k), 0x45);
}

/* Removes key from m if it names x (a newer pair may have taken it). */
static void del_if(struct dsock_hmap *m, uint64_t key, const struct dd_pair *x)
{
	uint64_t v;

	if (dsock_hmap_get(m, key, &v) && v == (uint64_t)(uintptr_t)x)
		dsock_hmap_del(m, key);
}

int dd_pair_add(struct dd_pair *x)
{
	for (int i = 0; i < 2; i++)
		if (dsock_hmap_put(&by_cookie, cookie_key(x->cookie[i]), (uint64_t)(uintptr_t)x) ||
		    (x->proc[i] && dsock_hmap_put(&by_end, end_key(x->proc[i], x->sid[i]), (uint64_t)(uintptr_t)x))) {
			for (int j = 0; j <= i; j++) {
				del_if(&by_cookie, cookie_key(x->cookie[j]), x);
				if (x->proc[j])
					del_if(&by_end, end_key(x->proc[j], x->sid[j]), x);
			}
			return -ENOMEM;
		}
	x->prev = NULL;
	x->next = pairs;
	if (pairs)
		pairs->prev = x;
	pairs = x;
	n_live++;
	return 0;
}

static void pair_free(struct dd_pair *x)
{
	for (int i = 0; i < 2; i++) {
		del_if(&by_cookie, cookie_key(x->cookie[i]), x);
		if (x->proc[i])
			del_if(&by_end, end_key(x->proc[i], x->sid[i]), x);
	}
	if (sweep_at == x)
		sweep_at = x->next;
	if (x->prev)
		x->prev->next = x->next;
	else
		pairs = x->next;
	if (x->next)
		x->next->prev = x->prev;
	x->prov->release(x);
	free(x);
	n_live--;
}

struct dd_pair *dd_pair_by_cookie(uint64_t cookie, int *side)
{
	uint64_t v;
	struct dd_pair *x;

	if (!cookie || !dsock_hmap_get(&by_cookie, cookie_key(cookie), &v))
		return NULL;
	x = (struct dd_pair *)(uintptr_t)v;
	*side = x->cookie[0] == cookie ? 0 : 1;
	return x;
}

static void end_gone(struct dd_pair *x, int i)
{
	del_if(&by_end, end_key(x->proc[i], x->sid[i]), x);
	x->proc[i] = NULL;
	if (!x->proc[0] && !x->proc[1])
		pair_free(x);
}

void dd_pair_closed(const struct dd_proc *p, uint64_t sid)
{
	uint64_t v;
	struct dd_pair *x;

	if (!dsock_hmap_get(&by_end, end_key(p, sid), &v))
		return;
	x = (struct dd_pair *)(uintptr_t)v;
	for (int i = 0; i < 2; i++)
		if (x->proc[i] == p && x->sid[i] == sid) {
			end_gone(x, i);
			return;
		}
}

/* A process leaving: one walk over the pairs (rare next to socket
 * events, which are hashed). */
void dd_pair_forget(const struct dd_proc *p)
{
	for (struct dd_pair *x = pairs, *next; x; x = next) {
		int mine0 = x->proc[0] == p, mine1 = x->proc[1] == p;

		next = x->next;
		if (mine0 && mine1)
			pair_free(x);
		else if (mine0 || mine1)
			end_gone(x, mine0 ? 0 : 1);
	}
}

void dd_pair_sweep(int n)
{
	for (int i = 0; i < n && pairs; i++) {
		struct dd_pair *x = sweep_at ? sweep_at : pairs;

		sweep_at = x->next;
		if (x->prov->dead && x->prov->dead(x))
			pair_free(x);
	}
}

unsigned long dd_pairs_live(void)
{
	return n_live;
}

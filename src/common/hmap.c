#include "common/hmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define EMPTY 0
#define DEAD  (~(uint64_t)0)

uint64_t dsock_hash(const void *p, size_t n, uint64_t seed)
{
	/* FNV-1a over the bytes, then a 64-bit finaliser (murmur3's) */
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ull ^ seed;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return h == EMPTY ? 1 : h == DEAD ? DEAD - 1 : h;
}

static size_t find(const struct dsock_hmap *m, uint64_t key)
{
	size_t mask = m->cap - 1;

	for (size_t i = key & mask;; i = (i + 1) & mask)
		if (m->keys[i] == key || m->keys[i] == EMPTY)
			return i;
}

/* key's slot, or -1 when absent.  The two reserved keys are never
 * present: a caller's key that is one (an unhashed value from outside)
 * must not find an empty or a dead slot. */
static long slot_of(const struct dsock_hmap *m, uint64_t key)
{
	size_t i;

	if (!m->cap || key == EMPTY || key == DEAD)
		return -1;
	i = find(m, key);
	return m->keys[i] == key ? (long)i : -1;
}

int dsock_hmap_get(const struct dsock_hmap *m, uint64_t key, uint64_t *val)
{
	long i = slot_of(m, key);

	if (i < 0)
		return 0;
	*val = m->vals[i];
	return 1;
}

static int grow(struct dsock_hmap *m)
{
	struct dsock_hmap n = { .cap = m->cap ? m->cap * 2 : 64 };

	/* only tombstones: rehash at the same size */
	if (m->cap && m->used + 1 <= m->cap / 2)
		n.cap = m->cap;
	n.keys = calloc(n.cap, sizeof(*n.keys));
	n.vals = calloc(n.cap, sizeof(*n.vals));
	if (!n.keys || !n.vals) {
		free(n.keys);
		free(n.vals);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->cap; i++) {
		if (m->keys[i] == EMPTY || m->keys[i] == DEAD)
			continue;
		size_t j = find(&n, m->keys[i]);
		n.keys[j] = m->keys[i];
		n.vals[j] = m->vals[i];
		n.used++;
	}
	dsock_hmap_free(m);
	*m = n;
	return 0;
}

int dsock_hmap_put(struct dsock_hmap *m, uint64_t key, uint64_t val)
{
	size_t i, mask;

	if (key == EMPTY || key == DEAD)
		return -EINVAL;
	if ((m->used + m->dead + 1) * 4 > m->cap * 3 && grow(m))
		return -ENOMEM;
	i = find(m, key);
	if (m->keys[i] == key) {
		m->vals[i] = val;
		return 0;
	}
	/* reuse the first tombstone on key's probe path, if any */
	mask = m->cap - 1;
	for (size_t j = key & mask; j != i; j = (j + 1) & mask)
		if (m->keys[j] == DEAD) {
			i = j;
			m->dead--;
			break;
		}
	m->keys[i] = key;
	m->vals[i] = val;
	m->used++;
	return 0;
}

int dsock_hmap_del(struct dsock_hmap *m, uint64_t key)
{
	long i = slot_of(m, key);

	if (i < 0)
		return 0;
	m->keys[i] = DEAD;
	m->used--;
	m->dead++;
	return 1;
}

void dsock_hmap_free(struct dsock_hmap *m)
{
	free(m->keys);
	free(m->vals);
	memset(m, 0, sizeof(*m));
}

int dsock_hset_add(struct dsock_hmap *m, uint64_t key)
{
	uint64_t n = 0;

	dsock_hmap_get(m, key, &n);
	return dsock_hmap_put(m, key, n + 1);
}

void dsock_hset_drop(struct dsock_hmap *m, uint64_t key)
{
	uint64_t n = 0;

	if (!dsock_hmap_get(m, key, &n))
		return;
	if (n <= 1)
		dsock_hmap_del(m, key);
	else
		dsock_hmap_put(m, key, n - 1);
}

int dsock_hset_has(const struct dsock_hmap *m, uint64_t key)
{
	uint64_t n = 0;

	return dsock_hmap_get(m, key, &n) && n > 0;
}

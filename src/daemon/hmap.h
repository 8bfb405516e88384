/* A hash map from 64-bit keys to 64-bit values (open addressing, linear
 * probing, tombstones; grows at 3/4 full, never shrinks).  The daemon's
 * tables index by it, so an event, an offer or a look-up costs the same
 * with 10 sockets or 100,000.  Key 0 and key ~0 are reserved (empty and
 * deleted slots): callers hash their keys with dd_hash, which never gives
 * either. */
#ifndef DSOCKD_HMAP_H
#define DSOCKD_HMAP_H

#include <stddef.h>
#include <stdint.h>

struct dd_hmap {
	uint64_t *keys;
	uint64_t *vals;
	size_t cap;  /* a power of two, or 0 */
	size_t used; /* live entries */
	size_t dead; /* tombstones */
};

/* A 64-bit hash of n bytes, never 0 or ~0. */
uint64_t dd_hash(const void *p, size_t n, uint64_t seed);
/* 1 and *val when key is present, else 0. */
int dd_hmap_get(const struct dd_hmap *m, uint64_t key, uint64_t *val);
/* Sets key's value (adds it if absent): 0 or -ENOMEM. */
int dd_hmap_put(struct dd_hmap *m, uint64_t key, uint64_t val);
/* Removes key: 1 if it was present. */
int dd_hmap_del(struct dd_hmap *m, uint64_t key);
void dd_hmap_free(struct dd_hmap *m);

/* A counted set on the same table: add bumps key's count, drop lowers it
 * (removing the key at 0), has says whether the count is above 0. */
int dd_hset_add(struct dd_hmap *m, uint64_t key);
void dd_hset_drop(struct dd_hmap *m, uint64_t key);
int dd_hset_has(const struct dd_hmap *m, uint64_t key);

#endif

/* A hash map from 64-bit keys to 64-bit values (open addressing, linear
 * probing, tombstones; grows at 3/4 full, never shrinks).  The daemon's
 * tables and the library's offers waiting for an answer index by it, so an
 * event, an offer or a look-up costs the same with 10 sockets or 100,000.
 * Key 0 and key ~0 are reserved (empty and deleted slots): callers hash
 * their keys with dsock_hash, which never gives either, and a reserved key
 * is never found and never put (-EINVAL). */
#ifndef DSOCK_COMMON_HMAP_H
#define DSOCK_COMMON_HMAP_H

#include <stddef.h>
#include <stdint.h>

struct dsock_hmap {
	uint64_t *keys;
	uint64_t *vals;
	size_t cap;  /* a power of two, or 0 */
	size_t used; /* live entries */
	size_t dead; /* tombstones */
};

/* A 64-bit hash of n bytes, never 0 or ~0. */
uint64_t dsock_hash(const void *p, size_t n, uint64_t seed);
/* 1 and *val when key is present, else 0. */
int dsock_hmap_get(const struct dsock_hmap *m, uint64_t key, uint64_t *val);
/* Sets key's value (adds it if absent): 0, -ENOMEM or -EINVAL. */
int dsock_hmap_put(struct dsock_hmap *m, uint64_t key, uint64_t val);
/* Removes key: 1 if it was present. */
int dsock_hmap_del(struct dsock_hmap *m, uint64_t key);
void dsock_hmap_free(struct dsock_hmap *m);

/* A counted set on the same table: add bumps key's count, drop lowers it
 * (removing the key at 0), has says whether the count is above 0. */
int dsock_hset_add(struct dsock_hmap *m, uint64_t key);
void dsock_hset_drop(struct dsock_hmap *m, uint64_t key);
int dsock_hset_has(const struct dsock_hmap *m, uint64_t key);

#endif

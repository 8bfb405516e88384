/* The hash tables of the daemon and the library (src/common/hmap.c): a
 * random mix of puts, gets and deletes checked against a plain array,
 * through growth and tombstone reuse; the counted set; and that the
 * table's size stays bounded by the live entries, not by how many ever
 * passed through. */
#include "unit/unit.h"
#include "common/hmap.h"

#include <errno.h>

#define N 50000

static uint64_t ref_val[N];
static unsigned char ref_has[N];

static uint64_t key_of(unsigned i)
{
	return dsock_hash(&i, sizeof(i), 7);
}

int main(void)
{
	struct dsock_hmap m = { 0 }, set = { 0 };
	unsigned seed = 12345;
	uint64_t v;

	for (int round = 0; round < 400000; round++) {
		unsigned i, op;

		seed = seed * 1103515245 + 12345;
		i = (seed >> 8) % N;
		op = (seed >> 4) % 4;
		if (op < 2) {
			ASSERT_EQ(dsock_hmap_put(&m, key_of(i), (uint64_t)round), 0);
			ref_val[i] = (uint64_t)round;
			ref_has[i] = 1;
		} else if (op == 2) {
			ASSERT_EQ(dsock_hmap_del(&m, key_of(i)), ref_has[i]);
			ref_has[i] = 0;
		} else {
			int got = dsock_hmap_get(&m, key_of(i), &v);
			ASSERT_EQ(got, ref_has[i]);
			if (got && ref_has[i])
				ASSERT_EQ(v, ref_val[i]);
		}
	}
	size_t live = 0;
	for (unsigned i = 0; i < N; i++) {
		int got = dsock_hmap_get(&m, key_of(i), &v);
		live += ref_has[i];
		ASSERT_EQ(got, ref_has[i]);
		if (got && ref_has[i])
			ASSERT_EQ(v, ref_val[i]);
	}
	ASSERT_EQ(m.used, live);
	/* 400,000 operations over 50,000 keys: the table holds the live
	 * ones, not the history (tombstones are rehashed away) */
	ASSERT_TRUE(m.cap <= 4 * (size_t)N);
	dsock_hmap_free(&m);

	/* counted set: three adds, two drops, still there; the third drop
	 * removes it; dropping an absent key is harmless */
	for (int k = 0; k < 3; k++)
		ASSERT_EQ(dsock_hset_add(&set, key_of(1)), 0);
	dsock_hset_drop(&set, key_of(1));
	dsock_hset_drop(&set, key_of(1));
	ASSERT_TRUE(dsock_hset_has(&set, key_of(1)));
	dsock_hset_drop(&set, key_of(1));
	ASSERT_TRUE(!dsock_hset_has(&set, key_of(1)));
	dsock_hset_drop(&set, key_of(2));
	ASSERT_TRUE(!dsock_hset_has(&set, key_of(2)));
	ASSERT_EQ(set.used, 0);
	dsock_hmap_free(&set);

	/* a reserved key (an unhashed value from outside) is never put and
	 * never found, not even in a table full of tombstones */
	ASSERT_EQ(dsock_hmap_put(&m, 0, 1), -EINVAL);
	ASSERT_EQ(dsock_hmap_put(&m, ~(uint64_t)0, 1), -EINVAL);
	for (unsigned i = 0; i < 100; i++)
		ASSERT_EQ(dsock_hmap_put(&m, key_of(i), i), 0);
	for (unsigned i = 0; i < 100; i++)
		ASSERT_EQ(dsock_hmap_del(&m, key_of(i)), 1);
	ASSERT_EQ(dsock_hmap_get(&m, ~(uint64_t)0, &v), 0);
	ASSERT_EQ(dsock_hmap_get(&m, 0, &v), 0);
	ASSERT_EQ(dsock_hmap_del(&m, ~(uint64_t)0), 0);
	ASSERT_EQ(m.used, 0);
	dsock_hmap_free(&m);

	/* the reserved keys never come out of the hash */
	for (unsigned i = 0; i < 1000000; i++) {
		uint64_t h = dsock_hash(&i, sizeof(i), 0);
		if (h == 0 || h == ~(uint64_t)0) {
			ASSERT_TRUE(0);
			break;
		}
	}
	UNIT_DONE();
}

/* The raw shared-memory reference: two processes spinning on a shared
 * single-producer single-consumer ring, no system call, no checks.  The
 * physical limit of this machine for the fast path to be compared with.
 *
 *   rawshm pingpong SIZE COUNT   prints "p50_ns p99_ns" one-way latency
 *   rawshm stream SIZE COUNT     prints "msgs_per_sec"
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RING (1u << 20)

struct chan {
	_Alignas(64) _Atomic uint64_t tail;
	_Alignas(64) _Atomic uint64_t head;
	_Alignas(64) unsigned char data[RING];
};

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* memcpy in at most two pieces (the ring wraps), as dsock's rings do */
static void copy_in(struct chan *c, uint64_t idx, const void *p, size_t n)
{
	size_t pos = (size_t)(idx & (RING - 1)), first = RING - pos < n ? RING - pos : n;
	memcpy(c->data + pos, p, first);
	memcpy(c->data, (const unsigned char *)p + first, n - first);
}

static void copy_out(struct chan *c, uint64_t idx, void *p, size_t n)
{
	size_t pos = (size_t)(idx & (RING - 1)), first = RING - pos < n ? RING - pos : n;
	memcpy(p, c->data + pos, first);
	memcpy((unsigned char *)p + first, c->data, n - first);
}

static void put(struct chan *c, const void *p, size_t n)
{
	uint64_t t = atomic_load_explicit(&c->tail, memory_order_relaxed);
	while (t + n - atomic_load_explicit(&c->head, memory_order_acquire) > RING)
		;
	copy_in(c, t, p, n);
	atomic_store_explicit(&c->tail, t + n, memory_order_release);
}

static void get(struct chan *c, void *p, size_t n)
{
	uint64_t h = atomic_load_explicit(&c->head, memory_order_relaxed);
	while (atomic_load_explicit(&c->tail, memory_order_acquire) - h < n)
		;
	copy_out(c, h, p, n);
	atomic_store_explicit(&c->head, h + n, memory_order_release);
}

static int cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	size_t size = argc > 2 ? (size_t)atol(argv[2]) : 14;
	long count = argc > 3 ? atol(argv[3]) : 100000;
	struct chan *ab = mmap(NULL, 2 * sizeof(struct chan), PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_ANONYMOUS, -1, 0), *ba = ab + 1;
	char buf[65536] = { 0 };
	int pingpong = argc > 1 && !strcmp(argv[1], "pingpong");

	if (ab == MAP_FAILED || size > sizeof(buf) || size == 0)
		return 2;
	if (fork() == 0) {
		for (long i = 0; i < count; i++) {
			get(ab, buf, size);
			if (pingpong)
				put(ba, buf, size);
		}
		_exit(0);
	}
	if (pingpong) {
		int64_t *rtt = malloc((size_t)count * sizeof(*rtt));
		for (long i = 0; i < count; i++) {
			int64_t t0 = now_ns();
			put(ab, buf, size);
			get(ba, buf, size);
			rtt[i] = now_ns() - t0;
		}
		qsort(rtt, (size_t)count, sizeof(*rtt), cmp);
		printf("%lld %lld\n", (long long)rtt[count / 2] / 2, (long long)rtt[count * 99 / 100] / 2);
	} else {
		int64_t t0 = now_ns();
		for (long i = 0; i < count; i++)
			put(ab, buf, size);
		wait(NULL);
		printf("%.0f\n", (double)count * 1e9 / (double)(now_ns() - t0));
	}
	wait(NULL);
	return 0;
}

/* The coarse and the TSC-extrapolated readings of the library's clock. */
#include "lib/base/clock.h"
#include "lib/base/real.h"

#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#define ANCHOR_NS   1000000 /* a precise reading at least this often */
#define RATE_MIN_NS 100000  /* the rate from readings this far apart */

static int use_tsc; /* set at init */
static __thread uint64_t anchor_tsc, anchor_limit, tsc_mult; /* ns per tick << 32 */
static __thread int64_t anchor_ns;

void dsock_clock_init(void)
{
#if defined(__x86_64__)
	char cs[32] = "";
	int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		ssize_t n = dsock_real.read(fd, cs, sizeof(cs) - 1);

		cs[n > 0 ? n : 0] = 0;
		dsock_real.close(fd);
	}
	use_tsc = !strcmp(cs, "tsc\n");
#endif
}

int64_t dsock_fast_ns(void)
{
#if defined(__x86_64__)
	if (use_tsc) {
		uint64_t d = __rdtsc() - anchor_tsc;

		if (tsc_mult && d < anchor_limit)
			return anchor_ns + (int64_t)((d * tsc_mult) >> 32);
		int64_t ns = dsock_mono_ns();
		uint64_t t = __rdtsc();

		if (anchor_tsc && ns - anchor_ns >= RATE_MIN_NS && t > anchor_tsc) {
			tsc_mult = ((uint64_t)(ns - anchor_ns) << 32) / (t - anchor_tsc);
			anchor_limit = tsc_mult ? ((uint64_t)ANCHOR_NS << 32) / tsc_mult : 0;
		}
		if (!anchor_tsc || ns - anchor_ns >= RATE_MIN_NS) {
			anchor_tsc = t;
			anchor_ns = ns;
		}
		return ns;
	}
#endif
	return dsock_mono_ns();
}

int64_t dsock_coarse_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t dsock_timeo_deadline(int fd, int opt)
{
	struct timeval tv = { 0, 0 };
	socklen_t tl = sizeof(tv);

	dsock_real.getsockopt(fd, SOL_SOCKET, opt, &tv, &tl);
	return tv.tv_sec || tv.tv_usec ? dsock_mono_ns() + tv.tv_sec * 1000000000LL + tv.tv_usec * 1000LL : INT64_MAX;
}

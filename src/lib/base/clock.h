/* The library's clock: CLOCK_MONOTONIC in nanoseconds, read three ways.
 * Every wait, deadline and lease in the library compares times of this one
 * clock, so a time taken in one layer is valid in another. */
#ifndef DSOCK_CLOCK_H
#define DSOCK_CLOCK_H

#include <stdint.h>
#include <time.h>

/* The precise reading (a vDSO call). */
static inline int64_t dsock_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* *out = the timeout t less what elapsed since since_ns (this clock), not
 * below zero: what a wait that spun first has left for its sleep.
 * Returns out. */
static inline const struct timespec *dsock_ts_left(const struct timespec *t, int64_t since_ns,
						   struct timespec *out)
{
	int64_t ns = t->tv_sec * 1000000000LL + t->tv_nsec - (dsock_mono_ns() - since_ns);

	out->tv_sec = ns > 0 ? ns / 1000000000LL : 0;
	out->tv_nsec = ns > 0 ? ns % 1000000000LL : 0;
	return out;
}

/* The same clock at the last tick: no TSC read, lags by at most a tick.
 * Only for deadlines whose holder looks again whenever one ends. */
int64_t dsock_coarse_ns(void);

/* The same clock extrapolated by the TSC from this thread's last precise
 * reading, read again once a millisecond has passed: about half the cost of
 * the vDSO call, within about a microsecond.  The TSC is used only where the
 * kernel keeps time with it (clocksource tsc: synchronized, constant rate);
 * elsewhere, and before dsock_clock_init, this is dsock_mono_ns. */
int64_t dsock_fast_ns(void);

/* The deadline (this clock) of a wait bounded by fd's SO_RCVTIMEO or
 * SO_SNDTIMEO (opt), from now; INT64_MAX when it has none. */
int64_t dsock_timeo_deadline(int fd, int opt);

/* Reads the clock source once (start-up). */
void dsock_clock_init(void);

#endif

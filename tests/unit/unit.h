/* Minimal unit-test support: each test is a main() that exits 0 on pass,
 * 1 on failure; ASSERT_* print both operands and where. */
#ifndef UNIT_H
#define UNIT_H

#include "common/rawsys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int unit_failures;

#define ASSERT_EQ(a, b) do { \
	long long a_ = (long long)(a), b_ = (long long)(b); \
	if (a_ != b_) { \
		fprintf(stderr, "%s:%d: ASSERT_EQ(%s, %s): %lld != %lld\n", __FILE__, __LINE__, #a, #b, a_, b_); \
		unit_failures++; \
	} } while (0)
#define ASSERT_TRUE(c) do { if (!(c)) { \
	fprintf(stderr, "%s:%d: ASSERT_TRUE(%s)\n", __FILE__, __LINE__, #c); unit_failures++; } } while (0)
#define ASSERT_STREQ(a, b) do { const char *a_ = (a), *b_ = (b); \
	if (strcmp(a_, b_)) { \
		fprintf(stderr, "%s:%d: ASSERT_STREQ: \"%s\" != \"%s\"\n", __FILE__, __LINE__, a_, b_); \
		unit_failures++; \
	} } while (0)

/* Tests that drive the linked-in library's fast path by hand: it reads its
 * settings at load, so the test re-executes itself once (marker set) with
 * no daemon and no offers of its own, logging errors only.  A raw execve:
 * the library's exec wrapper would preload this executable.  Returns in
 * the re-executed process only; exits if the exec fails. */
static inline void unit_isolate(char **argv, const char *marker)
{
	extern char **environ;

	if (getenv(marker))
		return;
	setenv(marker, "1", 1);
	setenv("DSOCK_FASTPATH", "0", 1);
	setenv("DSOCK_SOCKET", "/nonexistent/dsockd.sock", 1);
	setenv("DSOCK_LOG", "error", 1);
	dsock_sys(SYS_execve, "/proc/self/exe", argv, environ);
	exit(1);
}

#define UNIT_DONE() do { \
	if (unit_failures) fprintf(stderr, "%s: %d failure(s)\n", __FILE__, unit_failures); \
	return unit_failures ? 1 : 0; } while (0)

#endif

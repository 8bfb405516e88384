/* Minimal unit-test support: each test is a main() that exits 0 on pass,
 * 1 on failure; ASSERT_* print both operands and where. */
#ifndef UNIT_H
#define UNIT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#define UNIT_DONE() do { \
	if (unit_failures) fprintf(stderr, "%s: %d failure(s)\n", __FILE__, unit_failures); \
	return unit_failures ? 1 : 0; } while (0)

#endif

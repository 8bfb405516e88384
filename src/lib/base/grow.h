/* Growable arrays: room for one more element, doubling the capacity. */
#ifndef DSOCK_GROW_H
#define DSOCK_GROW_H

#include <stddef.h>
#include <stdlib.h>

/* Makes *v (of *cap elements of size elem, n of them used) hold at least
 * n + 1, starting at first elements.  0, or -1 (memory exhausted: *v and
 * *cap unchanged). */
static inline int dsock_grow(void *v, size_t *cap, size_t n, size_t elem, size_t first)
{
	void **p = (void **)v;
	size_t ncap;
	void *nv;

	if (n < *cap)
		return 0;
	ncap = *cap ? *cap * 2 : first;
	nv = realloc(*p, ncap * elem);
	if (!nv)
		return -1;
	*p = nv;
	*cap = ncap;
	return 0;
}

#endif

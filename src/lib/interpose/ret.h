/* The one place where the library sets errno: every interposed function
 * returns through dsock_ret(), which turns the socket layer's -errno into
 * errno and -1.  A non-negative result leaves errno untouched, as libc does. */
#ifndef DSOCK_RET_H
#define DSOCK_RET_H

#include <errno.h>

static inline long dsock_ret(long r)
{
	if (r < 0) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

#endif

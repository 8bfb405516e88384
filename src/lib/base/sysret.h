/* libc's "-1 and errno" as the socket layer's "-errno" (a function, so the
 * call in its argument runs exactly once). */
#ifndef DSOCK_SYSRET_H
#define DSOCK_SYSRET_H

#include <errno.h>

static inline long dsock_sysret(long r)
{
	return r < 0 ? -errno : r;
}

#define SYSRET(r) dsock_sysret(r)

#endif

/* Per-thread "inside dsock" flag.  While it is set, interposed functions go
 * straight to libc: dsock's own control-plane calls (and anything libc does
 * on their behalf) never loop back into the socket layer. */
#ifndef DSOCK_GUARD_H
#define DSOCK_GUARD_H

extern __thread int dsock_guard;

#define DSOCK_GUARD_ENTER() (dsock_guard++)
#define DSOCK_GUARD_EXIT()  (dsock_guard--)
#define DSOCK_GUARDED()     (__builtin_expect(dsock_guard != 0, 0))

#endif

/* Whether the kernel would restart a call a signal interrupted. */
#ifndef DSOCK_SIGNALS_H
#define DSOCK_SIGNALS_H

/* A wait of ours (one the kernel never restarts: poll, a timed futex)
 * was interrupted before the call did anything: would the kernel's own
 * call have been restarted?  It is when the handler has SA_RESTART.
 * Which signal came is not known, so 1 only when every handled signal
 * has it: a program with a handler that lacks it expects EINTR.  One look
 * at the handlers per interrupted wait. */
int dsock_signals_restart(void);

#endif

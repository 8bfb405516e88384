/* Shared by the interposed entry points. */
#ifndef DSOCK_API_H
#define DSOCK_API_H

#include "lib/core/guard.h"
#include "lib/core/sysret.h"
#include "lib/interpose/real.h"
#include "lib/interpose/ret.h"

#include <errno.h>

/* Exported (the version script lists the same names). */
#define DSOCK_API __attribute__((visibility("default")))


#endif

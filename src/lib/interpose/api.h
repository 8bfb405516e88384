/* Shared by the interposed entry points. */
#ifndef DSOCK_API_H
#define DSOCK_API_H

#include "lib/base/guard.h"
#include "lib/base/sysret.h"
#include "lib/base/real.h"
#include "lib/interpose/ret.h"

#include <errno.h>

/* Exported (the version script lists the same names). */
#define DSOCK_API __attribute__((visibility("default")))


#endif

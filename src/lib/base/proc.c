/* The process-wide state of base/ (proc.h, guard.h). */
#include "lib/base/guard.h"
#include "lib/base/proc.h"

__thread int dsock_guard;
struct dsock_proc dsock_proc;
int dsock_vm_shared;

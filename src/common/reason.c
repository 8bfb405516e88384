#include "common/reason.h"

const char *dsock_reason_name(unsigned r)
{
	static const char *const n[DSOCK_R_MAX] = {
		[DSOCK_R_NONE] = "-",
		[DSOCK_R_NO_TRANSPORT] = "no-fast-path-in-this-build",
		[DSOCK_R_NOT_TCP] = "not-tcp",
		[DSOCK_R_UNIX] = "af-unix",
		[DSOCK_R_LISTENER] = "listener",
		[DSOCK_R_DENIED_RULE] = "denied-by-rule",
		[DSOCK_R_PROG_DISABLED] = "program-disabled",
		[DSOCK_R_INHERITED] = "inherited",
	};
	return r < DSOCK_R_MAX ? n[r] : "?";
}

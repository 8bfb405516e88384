#include "common/reason.h"

const char *dsock_reason_name(unsigned r)
{
	static const char *const n[DSOCK_R_MAX] = {
		[DSOCK_R_NONE] = "-",
		[DSOCK_R_NO_TRANSPORT] = "fast-path-off",
		[DSOCK_R_NOT_TCP] = "not-tcp",
		[DSOCK_R_UNIX] = "af-unix",
		[DSOCK_R_LISTENER] = "listener",
		[DSOCK_R_DENIED_RULE] = "denied-by-rule",
		[DSOCK_R_PROG_DISABLED] = "program-disabled",
		[DSOCK_R_INHERITED] = "inherited",
		[DSOCK_R_PENDING] = "pairing-pending",
		[DSOCK_R_NO_DAEMON] = "no-daemon",
		[DSOCK_R_PEER_PLAIN] = "peer-not-dsock",
		[DSOCK_R_PEER_TIMEOUT] = "peer-did-not-pair",
		[DSOCK_R_NOT_ESTABLISHED] = "not-established",
		[DSOCK_R_RESOURCE] = "no-resources",
		[DSOCK_R_FORKED] = "forked-while-pending",
		[DSOCK_R_FAULT] = "shm-fault-reset",
		[DSOCK_R_HANDED_OVER] = "handed-over",
		[DSOCK_R_HANDOVER_RESET] = "handover-reset",
		[DSOCK_R_ASLEEP] = "consumer-asleep",
		[DSOCK_R_URGENT] = "urgent-data",
		[DSOCK_R_RCVLOWAT] = "rcvlowat",
		[DSOCK_R_PEER_DIED] = "peer-died-unread",
		[DSOCK_R_URING] = "io-uring",
		[DSOCK_R_UNPROVEN] = "handshake-unproven",
		[DSOCK_R_FASTOPEN] = "tcp-fast-open",
		[DSOCK_R_NOT_OWNER] = "socket-of-another-user",
		[DSOCK_R_HOST_NO_TRANSPORT] = "other-host-no-transport",
		[DSOCK_R_HOST_REFUSED] = "host-not-allowed",
		[DSOCK_R_HOST_UNREACHABLE] = "host-daemon-unreachable",
	};
	return r < DSOCK_R_MAX ? n[r] : "?";
}

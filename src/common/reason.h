/* Why a socket takes the path it takes.  Recorded per socket, sent to the
 * daemon in every socket event and shown by `dsock stat`. */
#ifndef DSOCK_REASON_H
#define DSOCK_REASON_H

enum dsock_reason {
	DSOCK_R_NONE = 0,
	DSOCK_R_NO_TRANSPORT,  /* no transport registered (DSOCK_FASTPATH=1 enables shm) */
	DSOCK_R_NOT_TCP,       /* datagram or raw socket: kernel only */
	DSOCK_R_UNIX,          /* AF_UNIX: already a local IPC path */
	DSOCK_R_LISTENER,      /* a listening socket itself moves no data */
	DSOCK_R_DENIED_RULE,   /* an allow/deny rule excludes it */
	DSOCK_R_PROG_DISABLED, /* dsock is disabled for this program */
	DSOCK_R_INHERITED,     /* inherited across exec, state unknown */
	DSOCK_R_PENDING,       /* offered to the daemon, no answer yet */
	DSOCK_R_NO_DAEMON,     /* the daemon could not be reached */
	DSOCK_R_PEER_PLAIN,    /* no dsock process can hold the other end */
	DSOCK_R_PEER_TIMEOUT,  /* the other end never offered or attached */
	DSOCK_R_NOT_ESTABLISHED, /* the socket was not an established TCP connection */
	DSOCK_R_RESOURCE,      /* memory or fds for the rings were not available */
	DSOCK_R_FORKED,        /* forked or exec'ed while the pairing was pending */
	DSOCK_R_FAULT,         /* the shared memory broke its rules: reset */
	DSOCK_R_HANDED_OVER,   /* back on the kernel: its fd went to a holder
				* without dsock (exec, SCM_RIGHTS) */
	DSOCK_R_HANDOVER_RESET, /* that move could not be made exact: reset */
	DSOCK_R_ASLEEP,        /* back on the kernel: its consumer slept at
				* nearly every write, and a wake-up token per
				* write costs more than the ring saves */
	DSOCK_R_URGENT,        /* back on the kernel: urgent data (MSG_OOB),
				* which the ring cannot carry */
	DSOCK_R_RCVLOWAT,      /* back on the kernel: SO_RCVLOWAT, which the
				* kernel applies to every byte it holds */
	DSOCK_R_PEER_DIED,     /* reset: the peer ended without closing while
				* bytes of ours were unread in its ring (the
				* kernel's close would have sent an RST) */
	DSOCK_R_URING,         /* the process set up an io_uring, whose work on
				* the socket no wrapper sees: kernel only */
	DSOCK_R_UNPROVEN,      /* marked for the kernel-recorded proof, its
				* handshake did not carry both nonces (TCP Fast
				* Open, a peer without dsock or without the
				* programs, no option space, lost echoes), and
				* no other proof reached a peer */
	DSOCK_R_FASTOPEN,      /* connected by TCP Fast Open (MSG_FASTOPEN):
				* its first bytes went in the SYN, and its
				* handshake has no room for the proof's option */
	DSOCK_R_NOT_OWNER,     /* offered by a process (not root) of another
				* user than the one that made the socket: a
				* socket received from another tenant */
	DSOCK_R_HOST_NO_TRANSPORT, /* proven the two ends of one connection on two
				    * hosts (their daemons agree); no transport
				    * between hosts in this build */
	DSOCK_R_HOST_REFUSED,  /* the other host's daemon and this one do not
				* both have each other's key on their
				* allow-lists */
	DSOCK_R_HOST_UNREACHABLE, /* no link to the other host's daemon (none
				   * listens, it failed, or it went away) */
	DSOCK_R_MAX,
};

const char *dsock_reason_name(unsigned r);

#endif

/* Per-transport provisioning: what a proven pair of ends gets from the
 * daemon for its transport (enum dsock_path names the transports), and
 * the pairs the daemon keeps while they live.  No other file of the
 * daemon knows what a transport's resources are. */
#ifndef DSOCKD_PROVISION_H
#define DSOCKD_PROVISION_H

#include "common/proto.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct dd_proc;
struct dd_reply_to;

/* A proven pair of ends.  A pair lives until both ends have closed
 * (CLOSE events) or their processes left, or its transport says no
 * process holds either end any more (dead). */
struct dd_pair {
	const struct dd_proc *proc[2]; /* NULL once that end is gone */
	pid_t pid[2];                  /* each end's process, for good */
	unsigned long long start[2];   /* (with its start time: lineage.h) */
	uint64_t sid[2];
	uint64_t cookie[2];
	ino_t ino[2];
	struct dsock_addr local[2]; /* each end's own address */
	const struct dd_provision *prov;
	int fd[2]; /* the resource each end gets (the transport's; -1: none) */
	void *priv; /* the transport's own record of the pair's resources */
	uint32_t slot;
	struct dd_pair *prev, *next;
};

struct dd_provision {
	unsigned transport; /* enum dsock_path */
	const char *name;
	/* 1: its ends can run over a channel between hosts (hostchan.h): a
	 * connection proven to end on another host gets one, its RESULT
	 * saying so (ring_size 1) */
	int channel;
	/* Start-up: reads the transport's settings; 0, or -1 after saying on
	 * stderr what is wrong. */
	int (*init)(void);
	/* A new pair's resources: fd[0] and fd[1] (the same fd may serve
	 * both), and the transport fields of r[0] (for the end to[0] answers)
	 * and r[1]; what the ends' processes share may be sent to them here,
	 * once, before their RESULTs (a result that names a pool the process
	 * holds goes without an fd).  proc[], sid[] and the ends' identity
	 * are set.  0, or -errno (the ends stay on the kernel, reason
	 * resource). */
	int (*make)(struct dd_pair *x, const struct dd_reply_to *to[2], struct dsock_msg_result r[2]);
	/* A process left.  May be NULL. */
	void (*forget)(const struct dd_proc *p);
	/* Both RESULTs have gone out: a transport whose ends must see each
	 * other's close lets go of fd[] here (set to -1; a FETCH then finds
	 * none).  NULL: the daemon keeps them while the pair lives. */
	void (*sent)(struct dd_pair *x);
	/* The RESULT's transport fields for a FETCH of side's resource by the
	 * process pid: 0, or -EPERM (that process may not have it: the
	 * answer names no resource).  NULL: any holder of side's socket gets
	 * the resource, and no more fields. */
	int (*fetched)(const struct dd_pair *x, int side, pid_t pid, struct dsock_msg_result *r);
	/* 1 if no process holds either end any more (read from what the
	 * ends write: a lie only ends the pair early, or keeps it until the
	 * processes leave).  May be NULL. */
	int (*dead)(const struct dd_pair *x);
	/* The pair is gone: close fd[] and count it out. */
	void (*release)(struct dd_pair *x);
	/* Appends " name=value ..." for `dsock stat` to buf. */
	void (*stat)(char *buf, size_t n);
};

/* The provisioning of a transport, or NULL. */
const struct dd_provision *dd_provision_get(unsigned transport);
/* Calls every init: 0, or -1. */
int dd_provision_init(void);
/* Every provisioner's stat, one after the other. */
void dd_provision_stat(char *buf, size_t n);
/* Every provisioner's forget. */
void dd_provision_forget(const struct dd_proc *p);


/* ---- live pairs (pairs.c) ---- */
/* Adds x (filled, its resources made): 0 or -ENOMEM. */
int dd_pair_add(struct dd_pair *x);
/* The pair one of whose ends has this SO_COOKIE (*side: which), or NULL. */
struct dd_pair *dd_pair_by_cookie(uint64_t cookie, int *side);
/* An end closed, or its process left (any sid: every end of p). */
void dd_pair_closed(const struct dd_proc *p, uint64_t sid);
void dd_pair_forget(const struct dd_proc *p);
/* Looks at n pairs, round robin, and ends those their transport says
 * nobody holds (an end's CLOSE event may have been dropped). */
void dd_pair_sweep(int n);
unsigned long dd_pairs_live(void);

#endif

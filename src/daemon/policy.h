/* The operator's pairing policy: which ends dsockd may pair, by where
 * they live.  The rules are the daemon's, not the programs' (a tenant
 * sets its own library's DSOCK_RULES, never these):
 *
 *   deny  netns /run/netns/tenant-a   the namespace a path names, or an
 *   allow netns 4026532345            inode number (lsns -t net)
 *   deny  cgroup /docker-PATTERN      glob (* and ?) on the process's cgroup-v2 path
 *                                     (/proc/PID/cgroup, its "0::" line)
 *
 * from $DSOCK_PAIR_RULES (';' or newline separated), then the file
 * $DSOCK_PAIR_CONFIG (default /etc/dsock-pair.conf when it exists).  For
 * each end the first match wins and no match allows; an end denied goes
 * to the kernel with the reason denied-by-rule, and its peer finds no
 * mate.  A netns rule judges the namespace of the offered socket itself
 * (SIOCGSKNS); a cgroup rule, the offering process's cgroup at the
 * offer; where the daemon cannot tell (no CAP_NET_ADMIN over the
 * socket's namespace, the process gone), the end stays on the kernel.
 * Neither costs an offer anything while no rule names it. */
#ifndef DSOCK_DAEMON_POLICY_H
#define DSOCK_DAEMON_POLICY_H

#include <stddef.h>
#include <sys/types.h>

/* Reads the rules; 0, or -EINVAL with "source:line: message" in err. */
int dd_policy_load(char *err, size_t errlen);
/* 1 if the socket fd, offered by process pid, may be paired. */
int dd_policy_allows(pid_t pid, int fd);
/* The number of rules (dsock stat). */
int dd_policy_count(void);

#endif

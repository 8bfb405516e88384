/* The pairing policy (policy.h).  Rules are parsed once, at start: a bad
 * rule stops the daemon with its message, so an operator's deny is never
 * silently dropped. */
#include "daemon/policy.h"
#include "common/rules.h" /* dsock_glob_match, dsock_rules_each_line */

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define POLICY_MAX 64

enum { P_NETNS = 1, P_CGROUP };

struct prule {
	int allow, kind;
	unsigned long long ino; /* P_NETNS */
	char glob[256];         /* P_CGROUP */
};

static struct prule rules[POLICY_MAX];
static int nrules, name_netns, name_cgroup;

static int parse_line(void *unused, const char *line, char *err, size_t errlen)
{
	char verb[16], kind[16], arg[256], extra[2];
	struct prule r = { 0 };
	int n;

	(void)unused;
	while (isspace((unsigned char)*line))
		line++;
	if (!*line || *line == '#')
		return 0;
	n = sscanf(line, "%15s %15s %255s %1s", verb, kind, arg, extra);
	if (n != 3 || (strcmp(verb, "allow") && strcmp(verb, "deny"))) {
		snprintf(err, errlen, "expected 'allow|deny netns|cgroup ARG': %.80s", line);
		return -EINVAL;
	}
	r.allow = !strcmp(verb, "allow");
	if (!strcmp(kind, "netns")) {
		struct stat st;
		char *end;
		r.kind = P_NETNS;
		r.ino = strtoull(arg, &end, 10);
		if (*end || !r.ino) {
			if (stat(arg, &st) < 0) {
				snprintf(err, errlen, "netns %.200s: %s", arg, strerror(errno));
				return -EINVAL;
			}
			r.ino = (unsigned long long)st.st_ino;
		}
		name_netns = 1;
	} else if (!strcmp(kind, "cgroup") && arg[0] == '/') {
		r.kind = P_CGROUP;
		snprintf(r.glob, sizeof(r.glob), "%s", arg);
		name_cgroup = 1;
	} else {
		snprintf(err, errlen, "unknown kind '%s' (netns NS, cgroup /PATH-GLOB)", kind);
		return -EINVAL;
	}
	if (nrules == POLICY_MAX) {
		snprintf(err, errlen, "more than %d rules", POLICY_MAX);
		return -EINVAL;
	}
	rules[nrules++] = r;
	return 0;
}

int dd_policy_load(char *err, size_t errlen)
{
	const char *env = getenv("DSOCK_PAIR_RULES"), *path = getenv("DSOCK_PAIR_CONFIG");
	int r;

	nrules = name_netns = name_cgroup = 0;
	if (env && (r = dsock_rules_each_line(env, "DSOCK_PAIR_RULES", 512, parse_line, NULL, err, errlen)))
		return r;
	if (!path && access("/etc/dsock-pair.conf", R_OK) == 0)
		path = "/etc/dsock-pair.conf";
	if (path) {
		static char text[65536];
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		ssize_t n = fd < 0 ? -1 : read(fd, text, sizeof(text) - 1);
		if (fd >= 0)
			close(fd);
		if (n < 0 || n == (ssize_t)sizeof(text) - 1) {
			snprintf(err, errlen, "%s: %s", path, n < 0 ? strerror(errno) : "larger than 64 KiB");
			return -EINVAL;
		}
		text[n] = '\0';
		return dsock_rules_each_line(text, path, 512, parse_line, NULL, err, errlen);
	}
	return 0;
}

int dd_policy_count(void)
{
	return nrules;
}

/* The socket's own network namespace (0: unknown). */
static unsigned long long sock_netns(int fd)
{
	struct stat st;
	int ns = ioctl(fd, SIOCGSKNS);
	unsigned long long ino = 0;

	if (ns >= 0) {
		if (fstat(ns, &st) == 0)
			ino = (unsigned long long)st.st_ino;
		close(ns);
	}
	return ino;
}

/* The process's cgroup-v2 path ("" where unknown). */
static void proc_cgroup(pid_t pid, char *out, size_t n)
{
	char path[64], line[512];
	FILE *f;

	out[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	if (!(f = fopen(path, "re")))
		return;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "0::", 3)) {
			line[strcspn(line, "\n")] = '\0';
			snprintf(out, n, "%s", line + 3);
		}
	fclose(f);
}

int dd_policy_allows(pid_t pid, int fd)
{
	unsigned long long ino = 0;
	char cg[512] = "";

	if (!nrules)
		return 1;
	/* where a rule cannot be judged (no CAP_NET_ADMIN for SIOCGSKNS, the
	 * process gone), the end stays on the kernel */
	if (name_netns && !(ino = sock_netns(fd)))
		return 0;
	if (name_cgroup && (pid <= 0 || (proc_cgroup(pid, cg, sizeof(cg)), !cg[0])))
		return 0;
	for (int i = 0; i < nrules; i++) {
		const struct prule *r = &rules[i];
		if ((r->kind == P_NETNS && r->ino == ino) || (r->kind == P_CGROUP && dsock_glob_match(r->glob, cg)))
			return r->allow;
	}
	return 1;
}

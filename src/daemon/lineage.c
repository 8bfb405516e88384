/* Process start times and ancestry from /proc/PID/stat. */
#include "daemon/lineage.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LINE_MAX_DEPTH 64 /* ancestors looked at (a deeper line answers 0) */

int dd_proc_stat(pid_t pid, unsigned long long *start, pid_t *ppid)
{
	char path[32], buf[1024], *p, *save;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = '\0';
	/* the command name (field 2) may hold spaces and parentheses: the
	 * fields after it start at the last ')' */
	if (!(p = strrchr(buf, ')')))
		return -EIO;
	p++;
	/* field 3 (state) is the first token: ppid is field 4, starttime 22 */
	int field = 3;
	for (char *t = strtok_r(p, " ", &save); t; t = strtok_r(NULL, " ", &save), field++) {
		if (field == 4)
			*ppid = (pid_t)strtol(t, NULL, 10);
		if (field == 22) {
			*start = strtoull(t, NULL, 10);
			return 0;
		}
	}
	return -EIO;
}

int dd_descends(pid_t pid, pid_t anc, unsigned long long anc_start)
{
	for (int depth = 0; depth < LINE_MAX_DEPTH && pid > 1; depth++) {
		unsigned long long start;
		pid_t ppid;

		if (dd_proc_stat(pid, &start, &ppid))
			return 0;
		if (pid == anc)
			return start == anc_start;
		pid = ppid;
	}
	return 0;
}

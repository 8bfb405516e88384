#include "common/log.h"
#include "common/rawsys.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static int log_fd = 2;
static int log_level = DSOCK_LOG_WARN;
static char log_prefix[32] = "dsock";

int dsock_log_level_parse(const char *s)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };

	for (int i = 0; i < 4; i++)
		if (s && !strcasecmp(s, names[i]))
			return i;
	return -1;
}

void dsock_log_setup(const char *prefix, int fd, int level)
{
	if (prefix)
		snprintf(log_prefix, sizeof(log_prefix), "%s", prefix);
	log_fd = fd;
	log_level = level;
}

int dsock_log_enabled(int level)
{
	return level <= log_level;
}

void dsock_log(int level, const char *fmt, ...)
{
	static const char *const tag[] = { "error", "warn", "info", "debug" };
	char buf[512];
	struct timespec ts;
	va_list ap;
	int n;

	if (level > log_level)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	n = snprintf(buf, sizeof(buf), "%s[%ld] %ld.%03ld %s: ", log_prefix,
		     (long)dsock_sys(SYS_getpid), (long)ts.tv_sec, ts.tv_nsec / 1000000L,
		     tag[level]);
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	/* raw syscall: never re-enter the interposed write() */
	dsock_sys(SYS_write, log_fd, buf, (size_t)n);
}

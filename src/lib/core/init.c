/* Start-up of the preload library, and the fork handlers. */
#include "lib/ctl/ctl.h"
#include "lib/core/env.h"
#include "lib/base/clock.h"
#include "lib/base/guard.h"
#include "lib/base/proc.h"
#include "lib/base/real.h"
#include "lib/sock/epset.h"
#include "lib/sock/kspin.h"
#include "lib/sock/sock.h"
#include "lib/sock/solo.h"
#include "lib/transport/transport.h"
#include "common/log.h"
#include "common/rawsys.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The name the program was started as (argv[0]'s file name): what users
 * write in rules and look for in `dsock stat`.  /proc/self/exe would name
 * the target of a symlink instead (redis-server -> redis-check-rdb). */
static void program_name(void)
{
	const char *n = program_invocation_short_name;

	snprintf(dsock_proc.prog, sizeof(dsock_proc.prog), "%.63s", n && *n ? n : "?");
}

/* Reads the rules; a broken configuration turns dsock off for this process
 * (the program still runs, on the kernel) and says why on stderr. */
static int load_rules(void)
{
	static char text[16384];
	char err[256];
	const char *env = getenv("DSOCK_RULES");
	const char *path = getenv("DSOCK_CONFIG");
	int fd;
	long n;

	if (env && dsock_rules_parse_text(&dsock_proc.rules, env, "DSOCK_RULES", err, sizeof(err))) {
		DSOCK_ERR("%s; dsock disabled for this process", err);
		return -1;
	}
	if (!path || !*path)
		path = "/etc/dsock.conf";
	fd = (int)dsock_sys(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (getenv("DSOCK_CONFIG") && *getenv("DSOCK_CONFIG")) {
			DSOCK_ERR("cannot open config %s; dsock disabled for this process", path);
			return -1;
		}
		return 0;
	}
	n = dsock_sys(SYS_read, fd, text, sizeof(text) - 1);
	dsock_sys(SYS_close, fd);
	if (n < 0 || n == (long)sizeof(text) - 1) {
		DSOCK_ERR("cannot read config %s (too large?); dsock disabled for this process", path);
		return -1;
	}
	text[n] = '\0';
	if (dsock_rules_parse_text(&dsock_proc.rules, text, path, err, sizeof(err))) {
		DSOCK_ERR("%s; dsock disabled for this process", err);
		return -1;
	}
	return 0;
}

static void fork_prepare(void)
{
	dsock_transports_fork_prepare();
	dsock_sock_fork_prepare();
	dsock_epset_fork_prepare();
}

static void fork_parent(void)
{
	dsock_epset_fork_parent();
	dsock_sock_fork_parent();
	dsock_transports_fork_parent();
}

static void fork_child(void)
{
	int ppid = dsock_proc.pid;

	dsock_proc.pid = (int)dsock_sys(SYS_getpid);
	dsock_epset_fork_child();
	dsock_sock_fork_child();
	if (dsock_proc.enabled)
		dsock_ctl_fork_child(ppid);
	dsock_transports_fork_child();
}

__attribute__((constructor)) static void dsock_init(void)
{
	const char *lvl = getenv("DSOCK_LOG");
	const char *off = getenv("DSOCK_DISABLE");
	const char *ghosts = getenv("DSOCK_EPOLL_GHOSTS");
	const char *bells = getenv("DSOCK_BELLS");
	const char *kspin = getenv("DSOCK_KERNEL_SPIN");
	const char *unsure = getenv("DSOCK_TEST_GHOST_UNSURE");

	DSOCK_GUARD_ENTER();
	dsock_real_init();
	dsock_clock_init();
	dsock_proc.pid = (int)dsock_sys(SYS_getpid);
	dsock_log_setup("dsock", 2, lvl && dsock_log_level_parse(lvl) >= 0 ?
			dsock_log_level_parse(lvl) : DSOCK_LOG_WARN);
	dsock_env_init();
	dsock_epoll_ghosts_on = !(ghosts && !strcmp(ghosts, "0"));
	dsock_ghost_test_unsure = unsure && !strcmp(unsure, "1");
	dsock_bells_on = !(bells && !strcmp(bells, "0"));
	dsock_kspin_on = !(kspin && !strcmp(kspin, "0"));
	program_name();
	dsock_proc.enabled = !(off && *off && strcmp(off, "0")) && load_rules() == 0 &&
			     dsock_rules_program_allowed(&dsock_proc.rules, dsock_proc.prog);
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	if (dsock_proc.enabled) {
		dsock_transports_init();
		if (dsock_transports_any())
			dsock_solo_init();
		dsock_sock_scan_inherited();
		dsock_transports_adopt();
	}
	dsock_ctl_set_replay(dsock_sock_replay);
	dsock_ctl_start();
	DSOCK_DBG("loaded into %s (%s)", dsock_proc.prog,
		  dsock_proc.enabled ? "enabled" : "disabled");
	DSOCK_GUARD_EXIT();
}

/* DSOCK_FASTPATH_REPORT=FILE: at exit, append "PID CONNECTIONS BACK": the
 * connections whose bytes went through a transport, and how many of
 * them went back to the kernel afterwards (the conformance harness uses
 * it to say which scenarios really ran on the fast path). */
__attribute__((destructor)) static void dsock_fini(void)
{
	const char *path = getenv("DSOCK_FASTPATH_REPORT");
	long n, back;
	char line[64];
	int fd, len;

	if ((int)dsock_sys(SYS_getpid) != dsock_proc.pid)
		return;
	dsock_transports_exit();
	dsock_transports_counts(&n, &back);
	if (!path || !*path || n <= 0)
		return;
	fd = (int)dsock_sys(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	len = snprintf(line, sizeof(line), "%d %ld %ld\n", dsock_proc.pid, n, back);
	dsock_sys(SYS_write, fd, line, (size_t)len);
	dsock_sys(SYS_close, fd);
}

/* dsock run: exec a command with libdsock.so preloaded. */
#include "cli/cli.h"
#include "common/rules.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char RUN_USAGE[] =
	"usage: dsock run [OPTIONS] [--] COMMAND [ARGS...]\n"
	"\n"
	"Runs COMMAND with libdsock.so preloaded into it and every program it\n"
	"executes, and starts the dsock daemon if none is running.  The exit\n"
	"status is COMMAND's own (127: not found, 126: not executable).\n"
	"\n"
	"Options:\n"
	"  -c, --config FILE  read allow/deny rules from FILE (DSOCK_CONFIG;\n"
	"                     default /etc/dsock.conf when it exists)\n"
	"  -r, --rules RULES  rules to apply before the file's, separated by ';'\n"
	"                     (DSOCK_RULES), e.g. 'deny port 22; deny program ssh*'\n"
	"  -l, --log LEVEL    library log level: error, warn, info, debug (DSOCK_LOG)\n"
	"  -s, --socket PATH  daemon control socket (DSOCK_SOCKET)\n"
	"      --no-daemon    do not start the daemon if it is not running\n"
	"      --disable      preload, but leave every socket to the kernel\n"
	"                     (DSOCK_DISABLE=1; for comparing)\n"
	"  -h, --help         this text\n"
	"\n"
	"Rules (one per line in a file; first match wins, no match allows):\n"
	"  allow|deny program GLOB   the program's file name, e.g. 'deny program sshd'\n"
	"  allow|deny addr CIDR      the peer address, e.g. 'deny addr 10.0.0.0/8'\n"
	"  allow|deny port N[-M]     either end's port, e.g. 'deny port 22'\n";

/* Parses rules the way the library will, so mistakes fail here, loudly. */
static int check_rules(const char *rules, const char *file)
{
	struct dsock_rules r = { 0 };
	char err[256], text[16384];
	FILE *f;
	size_t n;

	if (rules && dsock_rules_parse_text(&r, rules, "--rules", err, sizeof(err))) {
		fprintf(stderr, "dsock run: %s\n", err);
		return -EINVAL;
	}
	if (!file)
		return 0;
	f = fopen(file, "r");
	if (!f) {
		fprintf(stderr, "dsock run: cannot open config %s: %s\n", file, strerror(errno));
		return -errno;
	}
	n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	if (n == sizeof(text) - 1) {
		fprintf(stderr, "dsock run: config %s is larger than %zu bytes\n", file, sizeof(text) - 2);
		return -EFBIG;
	}
	text[n] = '\0';
	if (dsock_rules_parse_text(&r, text, file, err, sizeof(err))) {
		fprintf(stderr, "dsock run: %s\n", err);
		return -EINVAL;
	}
	return 0;
}

static int prepend_preload(const char *lib)
{
	const char *old = getenv("LD_PRELOAD");
	char buf[8192];

	if (old && strstr(old, lib))
		return 0;
	if ((size_t)snprintf(buf, sizeof(buf), "%s%s%s", lib, old && *old ? ":" : "",
			     old ? old : "") >= sizeof(buf))
		return -E2BIG;
	return setenv("LD_PRELOAD", buf, 1) ? -errno : 0;
}

int cmd_run(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, 0, 'c' }, { "rules", required_argument, 0, 'r' },
		{ "log", required_argument, 0, 'l' },    { "socket", required_argument, 0, 's' },
		{ "no-daemon", no_argument, 0, 'N' },    { "disable", no_argument, 0, 'D' },
		{ "help", no_argument, 0, 'h' },         { 0, 0, 0, 0 },
	};
	const char *config = NULL, *rules = NULL;
	char lib[PATH_MAX], cfg_abs[PATH_MAX];
	int no_daemon = 0, c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, "+c:r:l:s:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config = optarg; break;
		case 'r': rules = optarg; break;
		case 'l':
			if (strcmp(optarg, "error") && strcmp(optarg, "warn") &&
			    strcmp(optarg, "info") && strcmp(optarg, "debug")) {
				fprintf(stderr, "dsock run: bad log level '%s'\n", optarg);
				return 2;
			}
			setenv("DSOCK_LOG", optarg, 1);
			break;
		case 's': setenv("DSOCK_SOCKET", optarg, 1); break;
		case 'N': no_daemon = 1; break;
		case 'D': setenv("DSOCK_DISABLE", "1", 1); break;
		case 'h': fputs(RUN_USAGE, stdout); return 0;
		default: fputs(RUN_USAGE, stderr); return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "dsock run: no command given\n\n%s", RUN_USAGE);
		return 2;
	}
	if (check_rules(rules, config))
		return 2;
	if (config) {
		/* absolute: the program may chdir before it execs others */
		if (!realpath(config, cfg_abs)) {
			fprintf(stderr, "dsock run: %s: %s\n", config, strerror(errno));
			return 2;
		}
		setenv("DSOCK_CONFIG", cfg_abs, 1);
	}
	if (rules)
		setenv("DSOCK_RULES", rules, 1);
	r = cli_lib_path(lib, sizeof(lib));
	if (r) {
		fprintf(stderr, "dsock run: cannot find libdsock.so beside dsock (%s); "
			"set DSOCK_LIB to its absolute path\n", strerror(-r));
		return 2;
	}
	if (!no_daemon && cli_ensure_daemon(0))
		fprintf(stderr, "dsock run: running without the daemon: every connection stays on the kernel\n");
	if ((r = prepend_preload(lib))) {
		fprintf(stderr, "dsock run: LD_PRELOAD: %s\n", strerror(-r));
		return 2;
	}
	execvp(argv[optind], &argv[optind]);
	r = errno;
	fprintf(stderr, "dsock run: %s: %s\n", argv[optind], strerror(r));
	return r == ENOENT ? 127 : 126;
}

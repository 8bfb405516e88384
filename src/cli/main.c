/* dsock: the command-line tool. */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

static const char USAGE[] =
	"usage: dsock COMMAND [ARGS...]\n"
	"\n"
	"dsock makes the sockets of unmodified Linux programs faster.  It is loaded\n"
	"into a program (LD_PRELOAD), intercepts the socket and fd calls, and moves\n"
	"the data of eligible connections onto a faster path; everything else stays\n"
	"on the kernel, per connection, with the reason recorded.\n"
	"\n"
	"Commands:\n"
	"  run [OPTIONS] -- CMD [ARGS...]  run CMD (and what it executes) under dsock;\n"
	"                                  starts the daemon if needed (dsock run --help)\n"
	"  stat [--raw]                    processes, sockets, their paths and why\n"
	"  stop                            stop the daemon\n"
	"  demo [-n N]                     built-in example: echo ping-pong natively\n"
	"                                  and under dsock, side by side\n"
	"  bench [--secs N]                benchmark suite: kernel, dsock and raw shared\n"
	"                                  memory side by side (bench/run.py)\n"
	"  version                         print the version\n"
	"  help                            this text\n"
	"\n"
	"Environment (read by the library in every process; `dsock run` sets them):\n"
	"  DSOCK_CONFIG   rules file (default /etc/dsock.conf if it exists)\n"
	"  DSOCK_RULES    extra rules, ';'-separated, applied before the file's\n"
	"  DSOCK_LOG      library log level: error, warn (default), info, debug\n"
	"  DSOCK_SOCKET   daemon socket (default /run/dsock/dsockd.sock for root,\n"
	"                 else $XDG_RUNTIME_DIR/dsock/dsockd.sock or /tmp/dsock-UID/)\n"
	"  DSOCK_DISABLE  1: pass every call to the kernel\n"
	"  DSOCK_FASTPATH 0: no shared-memory fast path\n"
	"  DSOCK_RING_KB  ring size per direction (read by dsockd; default 256)\n"
	"  DSOCK_SHM_LIMIT_MB  connection memory in all (read by dsockd; default RAM/4)\n"
	"  DSOCK_BPF_PROOF 1: dsockd (root) proves connections by their handshake,\n"
	"                 across network namespaces and NAT (BPF; default off)\n"
	"  DSOCK_LIB      absolute path of libdsock.so (default: ../lib beside dsock)\n"
	"\n"
	"Exit status: that of CMD for `run`; 0 on success, 1 on failure, 2 on bad\n"
	"usage for the others.\n";

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "help";

	if (!strcmp(cmd, "run"))
		return cmd_run(argc - 1, argv + 1);
	if (!strcmp(cmd, "stat"))
		return cmd_stat(argc - 1, argv + 1);
	if (!strcmp(cmd, "stop"))
		return cmd_stop(argc - 1, argv + 1);
	if (!strcmp(cmd, "demo"))
		return cmd_demo(argc - 1, argv + 1);
	if (!strcmp(cmd, "bench"))
		return cmd_bench(argc - 1, argv + 1);
	if (!strcmp(cmd, "_echo-server"))
		return cmd_echo_server(argc - 1, argv + 1);
	if (!strcmp(cmd, "_echo-client"))
		return cmd_echo_client(argc - 1, argv + 1);
	if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
		puts("dsock 0.1.0");
		return 0;
	}
	if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		fputs(USAGE, stdout);
		return 0;
	}
	fprintf(stderr, "dsock: unknown command '%s'\n\n%s", cmd, USAGE);
	return 2;
}

/* dsock demo: the built-in example.  A 14-byte TCP echo ping-pong on
 * loopback, run natively and then with both ends under dsock, latencies
 * side by side, and the path the daemon saw the connection take. */
#include "cli/cli.h"
#include "common/proto.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct result {
	double p50_us, p99_us, per_sec;
	char path[64], reason[64];
};

/* Starts argv with stdout (and optionally stdin) on pipes. */
static pid_t spawn(char **argv, FILE **out, int *in_fd)
{
	int po[2], pi[2] = { -1, -1 };
	pid_t pid;

	if (pipe(po) < 0 || (in_fd && pipe(pi) < 0))
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(po[1], 1);
		if (in_fd)
			dup2(pi[0], 0);
		close(po[0]);
		close(po[1]);
		if (in_fd) {
			close(pi[0]);
			close(pi[1]);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	close(po[1]);
	*out = fdopen(po[0], "r");
	if (in_fd) {
		close(pi[0]);
		*in_fd = pi[1];
	}
	return pid;
}

struct find { int pid, port; struct result *res; };

static void take_path(const char *text, void *arg)
{
	struct find *f = arg;
	char key[64], peer[32];
	const char *p;

	snprintf(key, sizeof(key), "sock pid=%d ", f->pid);
	snprintf(peer, sizeof(peer), "peer=127.0.0.1:%d ", f->port);
	if (strncmp(text, key, strlen(key)) || !strstr(text, peer))
		return;
	if ((p = strstr(text, " path=")))
		sscanf(p + 6, "%63s", f->res->path);
	if ((p = strstr(text, " reason=")))
		sscanf(p + 8, "%63s", f->res->reason);
}

static int run_pair(const char *self, int under, int count, struct result *res)
{
	char cnt[16], port_s[16], line[256];
	char *srv_native[] = { (char *)self, "_echo-server", NULL };
	char *srv_dsock[] = { (char *)self, "run", "--", (char *)self, "_echo-server", NULL };
	char *cli_native[] = { (char *)self, "_echo-client", port_s, cnt, "14", NULL };
	/* the native pair must not be under dsock even if we are */
	if (!under)
		unsetenv("LD_PRELOAD");
	char *cli_dsock[] = { (char *)self, "run", "--", (char *)self, "_echo-client", port_s, cnt, "14", NULL };
	FILE *so, *co;
	int port = 0, in_fd, st, ok = 0;
	long long p50, p99, total;
	pid_t sp, cp;

	snprintf(cnt, sizeof(cnt), "%d", count);
	sp = spawn(under ? srv_dsock : srv_native, &so, NULL);
	if (sp < 0 || !fgets(line, sizeof(line), so) || sscanf(line, "port %d", &port) != 1) {
		fprintf(stderr, "dsock demo: the echo server did not start\n");
		return -1;
	}
	snprintf(port_s, sizeof(port_s), "%d", port);
	cp = spawn(under ? cli_dsock : cli_native, &co, &in_fd);
	if (cp > 0 && fgets(line, sizeof(line), co) &&
	    sscanf(line, "result %lld %lld %lld", &p50, &p99, &total) == 3) {
		struct find f = { .pid = cp, .port = port, .res = res };
		res->p50_us = (double)p50 / 1000;
		res->p99_us = (double)p99 / 1000;
		res->per_sec = (double)count * 1e9 / (double)total;
		snprintf(res->path, sizeof(res->path), "kernel");
		snprintf(res->reason, sizeof(res->reason), under ? "(daemon not asked)" : "not under dsock");
		if (under)
			cli_request(DSOCK_MSG_STAT_REQ, take_path, &f);
		ok = 1;
	}
	close(in_fd);
	waitpid(cp, &st, 0);
	waitpid(sp, &st, 0);
	fclose(so);
	fclose(co);
	if (!ok)
		fprintf(stderr, "dsock demo: the echo client failed\n");
	return ok ? 0 : -1;
}

int cmd_demo(int argc, char **argv)
{
	char self[PATH_MAX];
	struct result native = { 0 }, under = { 0 };
	int count = 20000, c;
	ssize_t n;

	optind = 1;
	while ((c = getopt(argc, argv, "n:h")) != -1) {
		if (c == 'n' && atoi(optarg) > 0) {
			count = atoi(optarg);
		} else {
			printf("usage: dsock demo [-n ROUND_TRIPS]\n"
			       "Runs a 14-byte TCP echo ping-pong on loopback natively, then with both\n"
			       "ends under dsock, and prints the latencies side by side.\n");
			return c == 'h' ? 0 : 2;
		}
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n < 0)
		return 1;
	self[n] = '\0';
	signal(SIGPIPE, SIG_IGN);
	if (cli_ensure_daemon(0))
		return 1;
	printf("dsock demo: TCP echo over loopback, 14-byte messages, %d round trips each\n\n", count);
	fflush(stdout);
	if (run_pair(self, 0, count, &native) || run_pair(self, 1, count, &under))
		return 1;
	printf("%-16s %12s %12s %16s   %s\n", "", "p50 RTT", "p99 RTT", "round trips/s", "path");
	printf("%-16s %9.1f us %9.1f us %16.0f   %s\n", "kernel (native)", native.p50_us,
	       native.p99_us, native.per_sec, "kernel");
	printf("%-16s %9.1f us %9.1f us %16.0f   %s%s%s%s\n", "under dsock", under.p50_us,
	       under.p99_us, under.per_sec, under.path, strcmp(under.reason, "-") ? " (" : "",
	       strcmp(under.reason, "-") ? under.reason : "", strcmp(under.reason, "-") ? ")" : "");
	printf("\np50 ratio dsock/kernel: %.2fx  (below 1 is faster)\n", under.p50_us / native.p50_us);
	if (!strcmp(under.path, "kernel"))
		printf("The connection stayed on the kernel (%s), so the two rows show the cost\n"
		       "of interposition alone.\n", under.reason);
	else
		printf("Both ends ran under dsock: after the kernel's handshake the daemon paired\n"
		       "the two sockets and the bytes moved through shared memory.\n");
	return 0;
}

/* dsock bench: runs bench/run.py from the source tree this dsock was built
 * in (<tree>/build/bin/dsock -> <tree>/bench/run.py). */
int cmd_bench(int argc, char **argv)
{
	char self[PATH_MAX], script[PATH_MAX + 32], build[PATH_MAX + 8];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *args[64];
	int k = 0;

	if (n < 0)
		return 1;
	self[n] = '\0';
	*strrchr(self, '/') = '\0'; /* .../build/bin */
	snprintf(build, sizeof(build), "%s/..", self);
	snprintf(script, sizeof(script), "%s/../../bench/run.py", self);
	if (access(script, R_OK)) {
		fprintf(stderr, "dsock bench: %s not found (run from a source tree)\n", script);
		return 1;
	}
	args[k++] = "python3";
	args[k++] = script;
	args[k++] = "--build";
	args[k++] = build;
	for (int i = 1; i < argc && k < 62; i++)
		args[k++] = argv[i];
	args[k] = NULL;
	execvp("python3", args);
	perror("dsock bench: python3");
	return 1;
}

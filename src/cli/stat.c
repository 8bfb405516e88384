/* dsock stat and dsock stop. */
#include "cli/cli.h"
#include "common/paths.h"
#include "common/proto.h"

#include <errno.h>
#include <signal.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static const char STAT_USAGE[] =
	"usage: dsock stat [--raw]\n"
	"\n"
	"Shows the daemon's view: the daemon itself, each process running under\n"
	"dsock (yours only, unless you are root), and each of their sockets: its\n"
	"protocol and state, addresses, the path its data takes (kernel, or a\n"
	"fast path) and why; then the last processes that exited.  --raw prints\n"
	"the daemon's key=value records as is.\n";

/* Pulls the value of key from a "k=v k=v" record into out. */
static const char *field(const char *rec, const char *key, char *out, size_t n)
{
	size_t kl = strlen(key);

	for (const char *p = rec; (p = strstr(p, key)); p += kl) {
		if ((p == rec || p[-1] == ' ') && p[kl] == '=') {
			size_t len = strcspn(p + kl + 1, " ");
			if (len >= n)
				len = n - 1;
			memcpy(out, p + kl + 1, len);
			out[len] = '\0';
			return out;
		}
	}
	snprintf(out, n, "-");
	return out;
}

static void print_line(const char *text, void *arg)
{
	int raw = *(int *)arg;
	char a[64], b[64], c[64], d[64], e[64], f[64], g[64], h[64], i[80];

	if (raw) {
		puts(text);
		return;
	}
	if (!strncmp(text, "daemon ", 7)) {
		printf("daemon  pid %s, netns %s, up %s, %s processes, %s clients, %s malformed messages refused, "
		       "proofs: %s\n",
		       field(text, "pid", a, 64), field(text, "netns", f, 64), field(text, "uptime", b, 64),
		       field(text, "procs", c, 64), field(text, "clients", d, 64),
		       field(text, "bad_msgs", e, 64), field(text, "proof", g, 64));
	} else if (!strncmp(text, "proc ", 5)) {
		int lost = strcmp(field(text, "lost", g, 64), "0") && strcmp(g, "-");
		printf("\nprocess %s (%s) uid %s, parent %s, netns %s, dsock %s, %s sockets known%s%s%s\n",
		       field(text, "pid", a, 64), field(text, "comm", b, 64), field(text, "uid", c, 64),
		       field(text, "ppid", d, 64), field(text, "netns", h, 64), field(text, "dsock", e, 64),
		       field(text, "socks", f, 64),
		       lost ? ", " : "", lost ? g : "", lost ? " of its events lost (this view may be stale)" : "");
		printf("  %-5s %-6s %-11s %-24s %-24s %-7s %s\n", "fd", "proto", "state", "local",
		       "peer", "path", "why");
	} else if (!strncmp(text, "gone ", 5)) {
		static int header;
		if (!header++)
			printf("\nrecently exited\n");
		printf("  pid %s (%s) uid %s, lived %s, %s sockets at exit\n", field(text, "pid", a, 64),
		       field(text, "comm", b, 64), field(text, "uid", c, 64), field(text, "lived", d, 64),
		       field(text, "socks", e, 64));
	} else if (!strncmp(text, "sock ", 5)) {
		int on_host = strcmp(field(text, "host", a, 64), "-");
		printf("  %-5s %-6s %-11s %-24s %-24s %-7s %s (%s)%s%s\n", field(text, "fd", h, 64),
		       field(text, "proto", b, 64), field(text, "state", c, 64),
		       field(text, "local", d, 64), field(text, "peer", e, 64),
		       field(text, "path", f, 64), field(text, "reason", g, 64),
		       field(text, "via", i, 64), on_host ? ", other end on host " : "", on_host ? a : "");
	} else if (!strncmp(text, "hostkey ", 8)) {
		printf("hosts   this host's key %s, listening on %s, %s hosts allowed\n", field(text, "fp", i, 80),
		       field(text, "listen", a, 64), field(text, "allowed", b, 64));
	} else if (!strncmp(text, "hostlink ", 9)) {
		printf("  link %s %s %s, host %s: claims %s sent, %s received; answers %s sent, %s received\n",
		       field(text, "dir", a, 64), field(text, "addr", b, 64), field(text, "state", c, 64),
		       field(text, "host", d, 64), field(text, "claims_out", e, 64), field(text, "claims_in", f, 64),
		       field(text, "answers_out", g, 64), field(text, "answers_in", h, 64));
	}
}

int cmd_stat(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "raw", no_argument, 0, 'r' }, { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
	};
	int raw = 0, c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, "rh", opts, NULL)) != -1) {
		if (c == 'r') {
			raw = 1;
		} else if (c == 'h') {
			fputs(STAT_USAGE, stdout);
			return 0;
		} else {
			fputs(STAT_USAGE, stderr);
			return 2;
		}
	}
	r = cli_request(DSOCK_MSG_STAT_REQ, print_line, &raw);
	if (r) {
		fprintf(stderr, "dsock stat: %s%s\n", strerror(-r),
			r == -ENOENT || r == -ECONNREFUSED ? " (is the daemon running? `dsock run` starts it)" : "");
		return 1;
	}
	return 0;
}

/* A daemon of another protocol version cannot read our SHUTDOWN: SIGTERM
 * to the pid its lock file holds (it removes its socket as it goes), and
 * wait up to 5 s for the socket to go.  0 or -errno. */
static int stop_by_pid(void)
{
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int pid, ver, r = cli_daemon_lock(&pid, &ver);

	if (r)
		return r;
	if (dsock_socket_path(path, sizeof(path)))
		return -ENAMETOOLONG;
	if (kill(pid, SIGTERM) < 0)
		return -errno;
	for (int i = 0; i < 500; i++) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		if (access(path, F_OK) < 0)
			return 0;
		nanosleep(&ts, NULL);
	}
	return -ETIMEDOUT;
}

int cmd_stop(int argc, char **argv)
{
	int r = cli_request(DSOCK_MSG_SHUTDOWN, NULL, NULL);

	if (r == -ENOENT || r == -ECONNREFUSED) {
		fprintf(stderr, "dsock stop: no daemon is running\n");
		return 0;
	}
	if (r == -EPROTO || r == -ECONNRESET)
		r = stop_by_pid(); /* (a daemon from before the ERROR reply just drops us) */
	if (r) {
		fprintf(stderr, "dsock stop: %s\n", strerror(-r));
		return 1;
	}
	return 0;
}

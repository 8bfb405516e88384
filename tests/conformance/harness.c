/* conformance: runs each scenario natively and under a wrapper (normally
 * `dsock run --`) and compares the two transcripts line by line.
 *
 *   conformance [-w "WRAP WORDS"] [-f SUBSTR] [-j JOBS] [-v] [-s] [-r DIR [-m PCT]] [-k KNOWN] CONF_SCEN
 *
 * -r DIR: count the scenarios whose dsock run moved bytes through a
 * transport, and those where such a connection then went back to the kernel
 * (the library reports both through DSOCK_FASTPATH_REPORT), passed or not:
 * "fast path: N of M tcp scenarios moved bytes through a transport (in N
 * a connection then went back to the kernel)", and the same count for the
 * warm families alone (tcp4w, tcp6w: their connections are warmed up
 * before each scenario, so under dsock they should all be on a transport):
 * "fast path: N of M warm tcp scenarios moved bytes through a transport".
 * -m PCT: fail (exit 1) when fewer than PCT % of the warm scenarios did.
 * -k KNOWN: comma-separated name endings ("/urgent_two_in_a_row",
 * "tcp6/x") of scenarios whose difference is known and explained where
 * the list is given: their failures are reported, not counted.
 *
 * A scenario passes when its native run exits 0 with no failed CHECK and
 * the wrapped transcript (stdout and exit status) is identical.  Prints a
 * line per failure with the first difference, and a closing line
 * "conformance: N passed, N failed".  Exit 0 only when none failed. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORDS 32
#define TIMEOUT_MS 60000

struct run {
	char *text; /* transcript + "[exit N]" */
	size_t len;
};

static char *wrap[MAX_WORDS];
static int nwrap;
static int verbose;
static const char *report_dir; /* -r: count scenarios that ran on the fast path */

static void append(struct run *r, const char *s, size_t n)
{
	r->text = realloc(r->text, r->len + n + 1);
	if (!r->text)
		abort();
	memcpy(r->text + r->len, s, n);
	r->len += n;
	r->text[r->len] = '\0';
}

/* Runs argv; collects stdout and the way it ended. */
static void run_cmd(char **argv, struct run *r)
{
	int p[2], status = 0, waited = 0;
	char buf[4096], tail[64];
	pid_t pid;
	struct timespec t0, t;

	r->text = NULL;
	r->len = 0;
	append(r, "", 0);
	if (pipe(p) < 0 || (pid = fork()) < 0) {
		append(r, "[harness: fork failed]", 22);
		return;
	}
	if (pid == 0) {
		dup2(p[1], 1);
		close(p[0]);
		close(p[1]);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd pf = { .fd = p[0], .events = POLLIN };
		long el;
		clock_gettime(CLOCK_MONOTONIC, &t);
		el = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
		if (el > TIMEOUT_MS) {
			kill(pid, SIGKILL);
			append(r, "[harness: timeout]\n", 19);
			break;
		}
		if (poll(&pf, 1, 1000) <= 0)
			continue;
		ssize_t n = read(p[0], buf, sizeof(buf));
		if (n <= 0)
			break;
		append(r, buf, (size_t)n);
	}
	close(p[0]);
	while (!waited) {
		if (waitpid(pid, &status, 0) == pid || errno != EINTR)
			waited = 1;
	}
	if (WIFEXITED(status))
		snprintf(tail, sizeof(tail), "[exit %d]\n", WEXITSTATUS(status));
	else
		snprintf(tail, sizeof(tail), "[signal %s]\n", sigabbrev_np(WTERMSIG(status)) ?: "?");
	append(r, tail, strlen(tail));
}

static int native_ok(const struct run *r)
{
	return !strstr(r->text, "CHECK FAILED") && strstr(r->text, "[exit 0]\n") &&
	       !strstr(r->text, "[harness:");
}

/* Prints the first differing line of a and b. */
static void show_diff(const char *a, const char *b)
{
	int line = 1;

	while (*a || *b) {
		size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
		if (la != lb || memcmp(a, b, la)) {
			printf("    line %d native: %.*s\n", line, (int)la, a);
			printf("    line %d dsock:  %.*s\n", line, (int)lb, b);
			return;
		}
		a += la + (a[la] == '\n');
		b += lb + (b[lb] == '\n');
		line++;
	}
}

/* What a scenario's child tells the parent, as its exit status. */
enum { RUN_FAILED = 1, RUN_FAST = 2, RUN_BACK = 4 };

static int run_one(const char *scen, const char *name)
{
	char *argv[MAX_WORDS + 4];
	struct run nat, dso;
	int n = 0, ok;

	argv[0] = (char *)scen;
	argv[1] = "run";
	argv[2] = (char *)name;
	argv[3] = NULL;
	run_cmd(argv, &nat);
	for (int i = 0; i < nwrap; i++)
		argv[n++] = wrap[i];
	argv[n++] = (char *)scen;
	argv[n++] = "run";
	argv[n++] = (char *)name;
	argv[n] = NULL;
	char report[512] = "";
	if (report_dir) {
		snprintf(report, sizeof(report), "%s/%d", report_dir, getpid());
		unlink(report);
		setenv("DSOCK_FASTPATH_REPORT", report, 1);
	}
	run_cmd(argv, &dso);
	if (report_dir)
		unsetenv("DSOCK_FASTPATH_REPORT");
	ok = native_ok(&nat) && nat.len == dso.len && !memcmp(nat.text, dso.text, nat.len);
	int r = ok ? 0 : RUN_FAILED;
	if (report[0] && access(report, F_OK) == 0) {
		/* lines "PID CONNECTIONS BACK" */
		FILE *f = fopen(report, "r");
		long pid, conns, back, went_back = 0;
		while (f && fscanf(f, "%ld %ld %ld", &pid, &conns, &back) == 3)
			went_back += back;
		if (f)
			fclose(f);
		unlink(report);
		r |= RUN_FAST | (went_back ? RUN_BACK : 0);
	}
	/* -v with -r: [shm] after a scenario that moved bytes through shared
	 * memory, [shm, back] when a connection then went back */
	const char *how = !verbose || !report_dir ? "" : r & RUN_BACK ? " [shm, back]" : r & RUN_FAST ? " [shm]" : " [kernel]";
	if (!ok) {
		printf("FAIL %s%s%s\n", name, how, native_ok(&nat) ? "" : " (fails natively: the scenario is wrong)");
		show_diff(nat.text, dso.text);
		if (!native_ok(&nat) || verbose)
			printf("  native transcript:\n%s  dsock transcript:\n%s", nat.text, dso.text);
	} else if (verbose) {
		printf("PASS %s%s\n", name, how);
	}
	fflush(stdout);
	free(nat.text);
	free(dso.text);
	return r;
}

/* 1 if name ends with one of the comma-separated entries of list. */
static int is_known(const char *list, const char *name)
{
	size_t nl = strlen(name);

	for (const char *p = list; p && *p; p += strcspn(p, ",")) {
		size_t l;
		p += *p == ',';
		l = strcspn(p, ",");
		if (l && l <= nl && !strncmp(name + nl - l, p, l))
			return 1;
	}
	return 0;
}

static int is_warm(const char *name)
{
	return !strncmp(name, "tcp4w/", 6) || !strncmp(name, "tcp6w/", 6);
}

int main(int argc, char **argv)
{
	const char *filter = NULL, *scen;
	char cmd[4096], name[256], *w;
	int jobs = 1, selftest = 0, passed = 0, failed = 0, c, running = 0, min_warm_pct = -1, differ = 0;
	const char *known = NULL;
	FILE *list;
	char **names = NULL;
	size_t nnames = 0;

	static char wrapbuf[4096];
	int on_fast = 0, went_back = 0, tcp_total = 0, warm_fast = 0, warm_total = 0;
	pid_t *pids = NULL;     /* the child running names[i] */

	while ((c = getopt(argc, argv, "w:f:j:vsr:m:k:")) != -1) {
		switch (c) {
		case 'w':
			snprintf(wrapbuf, sizeof(wrapbuf), "%s", optarg);
			for (w = strtok(wrapbuf, " "); w && nwrap < MAX_WORDS; w = strtok(NULL, " "))
				wrap[nwrap++] = w;
			break;
		case 'f': filter = optarg; break;
		case 'j': jobs = atoi(optarg) > 0 ? atoi(optarg) : 1; break;
		case 'v': verbose = 1; break;
		case 's': selftest = 1; break;
		case 'r': report_dir = optarg; break;
		case 'm': min_warm_pct = atoi(optarg); break;
		case 'k': known = optarg; break;
		default:
			fprintf(stderr, "usage: conformance [-w WRAP] [-f SUBSTR] [-j JOBS] [-v] [-s] [-r DIR [-m PCT]] [-k KNOWN] CONF_SCEN\n");
			return 2;
		}
	}
	if (optind >= argc || !nwrap) {
		fprintf(stderr, "conformance: need -w WRAP and the conf-scen binary\n");
		return 2;
	}
	scen = argv[optind];
	snprintf(cmd, sizeof(cmd), "'%s' list%s", scen, selftest ? " --selftest" : "");
	list = popen(cmd, "r");
	while (list && fgets(name, sizeof(name), list)) {
		name[strcspn(name, "\n")] = '\0';
		if (filter && !strstr(name, filter))
			continue;
		names = realloc(names, (nnames + 1) * sizeof(*names));
		names[nnames++] = strdup(name);
	}
	if (list)
		pclose(list);
	if (!nnames) {
		fprintf(stderr, "conformance: no scenarios matched\n");
		return 2;
	}
	pids = calloc(nnames, sizeof(*pids));
	/* -j: scenarios in parallel, each in a child that reports by exit code */
	for (size_t i = 0; i < nnames || running; ) {
		int st;
		pid_t pid;
		if (i < nnames && running < jobs) {
			pid = fork();
			if (pid == 0)
				_exit(run_one(scen, names[i]));
			pids[i] = pid;
			tcp_total += !strncmp(names[i], "tcp", 3);
			warm_total += is_warm(names[i]);
			running++;
			i++;
			continue;
		}
		if ((pid = wait(&st)) > 0) {
			size_t k = 0;
			while (k < nnames && pids[k] != pid)
				k++;
			running--;
			if (WIFEXITED(st) && WEXITSTATUS(st) <= (RUN_FAILED | RUN_FAST | RUN_BACK)) {
				int r = WEXITSTATUS(st), fast = (r & RUN_FAST) && k < nnames && !strncmp(names[k], "tcp", 3);
				if ((r & RUN_FAILED) && k < nnames && is_known(known, names[k])) {
					printf("known difference: %s\n", names[k]);
					fflush(stdout); /* (before the next fork) */
					differ++;
				} else if (r & RUN_FAILED) {
					failed++;
				} else {
					passed++;
				}
				on_fast += fast;
				went_back += fast && (r & RUN_BACK);
				warm_fast += fast && is_warm(names[k]);
			} else {
				failed++;
			}
		}
	}
	int warm_short = 0;
	if (report_dir) {
		printf("fast path: %d of %d tcp scenarios moved bytes through a transport"
		       " (in %d a connection then went back to the kernel)\n", on_fast, tcp_total, went_back);
		if (warm_total) {
			printf("fast path: %d of %d warm tcp scenarios moved bytes through a transport (%d %%)\n",
			       warm_fast, warm_total, warm_fast * 100 / warm_total);
			warm_short = warm_fast * 100 < min_warm_pct * warm_total;
			if (warm_short)
				printf("fast path: fewer than %d %% of the warm tcp scenarios did\n", min_warm_pct);
		}
	}
	if (known)
		printf("conformance: %d known differences (-k)\n", differ);
	printf("conformance: %d passed, %d failed\n", passed, failed);
	return failed || warm_short ? 1 : 0;
}

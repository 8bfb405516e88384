/* conf-scen: runs one conformance scenario.
 *   conf-scen list [--selftest]   names, one a line
 *   conf-scen run NAME            the transcript on stdout; exit 0, or 1 when
 *                                 a CHECK failed
 *   conf-scen exec-child ...      helper that exec scenarios run */
#include "conf.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_SCEN 1024

struct entry {
	char name[96];
	const char *kind;
	scen_fn fn;
	const struct fam *fam;
};

static struct entry table[MAX_SCEN];
static int nscen;
extern int conf_failed;

/* the first three also run the scenarios without a connection */
static const struct fam STREAMS[] = {
	{ "tcp4", AF_INET, SOCK_STREAM, 0 },  { "tcp6", AF_INET6, SOCK_STREAM, 0 },
	{ "unix", AF_UNIX, SOCK_STREAM, 0 },  { "tcp4w", AF_INET, SOCK_STREAM, 1 },
	{ "tcp6w", AF_INET6, SOCK_STREAM, 1 },
};
static const struct fam DGRAMS[] = {
	{ "udp4", AF_INET, SOCK_DGRAM, 0 }, { "udp6", AF_INET6, SOCK_DGRAM, 0 }, { "unixdg", AF_UNIX, SOCK_DGRAM, 0 },
};
static const struct fam NONE = { "any", AF_INET, SOCK_STREAM, 0 };

static void add(const char *kind, const char *prefix, const char *name, scen_fn fn, const struct fam *f)
{
	if (nscen >= MAX_SCEN)
		abort();
	snprintf(table[nscen].name, sizeof(table[nscen].name), "%s/%s", prefix, name);
	table[nscen].kind = kind;
	table[nscen].fn = fn;
	table[nscen].fam = f;
	nscen++;
}

void conf_register(const char *kind, const char *name, scen_fn fn)
{
	if (!strcmp(kind, "stream"))
		for (int i = 0; i < 5; i++)
			add(kind, STREAMS[i].name, name, fn, &STREAMS[i]);
	else if (!strcmp(kind, "stream-noconn"))
		for (int i = 0; i < 3; i++)
			add(kind, STREAMS[i].name, name, fn, &STREAMS[i]);
	else if (!strcmp(kind, "dgram"))
		for (int i = 0; i < 3; i++)
			add(kind, DGRAMS[i].name, name, fn, &DGRAMS[i]);
	else
		add(kind, !strcmp(kind, "selftest") ? "selftest" : "misc", name, fn, &NONE);
}

int exec_child_main(int argc, char **argv);

static int cmp(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->name, ((const struct entry *)b)->name);
}

int main(int argc, char **argv)
{
	qsort(table, (size_t)nscen, sizeof(table[0]), cmp);
	if (argc >= 2 && !strcmp(argv[1], "list")) {
		int selftest = argc >= 3 && !strcmp(argv[2], "--selftest");
		for (int i = 0; i < nscen; i++)
			if ((strcmp(table[i].kind, "selftest") == 0) == selftest)
				puts(table[i].name);
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "exec-child"))
		return exec_child_main(argc - 1, argv + 1);
	if (argc == 3 && !strcmp(argv[1], "run")) {
		for (int i = 0; i < nscen; i++) {
			if (strcmp(table[i].name, argv[2]))
				continue;
			setvbuf(stdout, NULL, _IOLBF, 0);
			alarm(20); /* a hung scenario dies by SIGALRM: the harness reports it */
			table[i].fn(table[i].fam);
			fflush(stdout);
			return conf_failed;
		}
		fprintf(stderr, "conf-scen: no scenario %s\n", argv[2]);
		return 2;
	}
	fprintf(stderr, "usage: conf-scen list [--selftest] | run NAME\n");
	return 2;
}

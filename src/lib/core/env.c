#include "lib/core/env.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static char lib_path[PATH_MAX];
static char saved_buf[4096];
static const char *saved[DSOCK_ENV_SAVED_MAX];
static int nsaved;

static const char PRELOAD[] = "LD_PRELOAD=";

void dsock_env_init(void)
{
	Dl_info info;
	size_t used = 0;

	/* absolute, so that it still names the library after a chdir */
	lib_path[0] = '\0';
	if (dladdr((void *)dsock_env_init, &info) && info.dli_fname &&
	    (!realpath(info.dli_fname, lib_path) || strlen(lib_path) >= sizeof(lib_path)))
		lib_path[0] = '\0';
	nsaved = 0;
	for (char **e = environ; e && *e && nsaved < DSOCK_ENV_SAVED_MAX; e++) {
		size_t len = strlen(*e) + 1;
		if (strncmp(*e, "DSOCK_", 6) || !strchr(*e, '=') || used + len > sizeof(saved_buf) ||
		    !strncmp(*e, "DSOCK_EXEC_", 11)) /* per exec, never inherited further */
			continue;
		memcpy(saved_buf + used, *e, len);
		saved[nsaved++] = saved_buf + used;
		used += len;
	}
}

const char *dsock_env_lib_path(void)
{
	return lib_path;
}

size_t dsock_env_count(char *const envp[])
{
	size_t n = 0;

	while (envp && envp[n])
		n++;
	return n;
}

static const char *find(char *const envp[], const char *name, size_t namelen)
{
	for (size_t i = 0; envp && envp[i]; i++)
		if (!strncmp(envp[i], name, namelen) && envp[i][namelen] == '=')
			return envp[i];
	return NULL;
}

size_t dsock_env_strbuf_size(char *const envp[])
{
	const char *old = find(envp, "LD_PRELOAD", 10);

	return sizeof(PRELOAD) + strlen(lib_path) + 1 + (old ? strlen(old) : 0) + 1;
}

/* Is lib an element of the ':'/' '-separated list? */
static int listed(const char *list, const char *lib)
{
	size_t n = strlen(lib);

	for (const char *p = list; (p = strstr(p, lib)); p += n)
		if ((p == list || p[-1] == ':' || p[-1] == ' ') &&
		    (p[n] == '\0' || p[n] == ':' || p[n] == ' '))
			return 1;
	return 0;
}

char *const *dsock_env_fix(char *const envp[], char **out, size_t cap, char *sbuf, size_t sbuflen,
			   const char *extra)
{
	const char *old = find(envp, "LD_PRELOAD", 10);
	int need_preload = lib_path[0] && !(old && listed(old + sizeof(PRELOAD) - 1, lib_path));
	const char *xs[DSOCK_ENV_EXTRA_MAX];
	size_t xlen[DSOCK_ENV_EXTRA_MAX];
	size_t n = 0, nx = 0;
	int missing = 0;

	for (const char *x = extra; x && *x && nx < DSOCK_ENV_EXTRA_MAX; x += strlen(x) + 1) {
		if (!strchr(x, '='))
			continue;
		xs[nx] = x;
		xlen[nx++] = (size_t)(strchr(x, '=') - x);
	}

	for (int i = 0; i < nsaved; i++)
		if (!find(envp, saved[i], (size_t)(strchr(saved[i], '=') - saved[i])))
			missing++;
	if (!need_preload && !missing && !nx)
		return envp;
	if (dsock_env_count(envp) + (size_t)missing + nx + 2 > cap)
		return envp;
	if (need_preload) {
		const char *rest = old ? old + sizeof(PRELOAD) - 1 : "";
		size_t need = sizeof(PRELOAD) + strlen(lib_path) + 1 + strlen(rest) + 1;
		if (need > sbuflen)
			return envp;
		strcpy(sbuf, PRELOAD);
		strcat(sbuf, lib_path);
		if (*rest) {
			strcat(sbuf, ":");
			strcat(sbuf, rest);
		}
		out[n++] = sbuf;
	}
	for (size_t i = 0; envp && envp[i]; i++) {
		size_t k = 0;

		while (k < nx && !(!strncmp(envp[i], xs[k], xlen[k]) && envp[i][xlen[k]] == '='))
			k++;
		if (!(need_preload && envp[i] == old) && k == nx)
			out[n++] = envp[i];
	}
	for (size_t k = 0; k < nx; k++)
		out[n++] = (char *)xs[k];
	for (int i = 0; i < nsaved; i++)
		if (!find(envp, saved[i], (size_t)(strchr(saved[i], '=') - saved[i])))
			out[n++] = (char *)saved[i];
	out[n] = NULL;
	return out;
}

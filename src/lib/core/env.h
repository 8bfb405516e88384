/* Keeping dsock across exec: the exec wrappers pass an environment that
 * still preloads libdsock.so and still carries every DSOCK_* setting this
 * process started with, even when the program built a new environment.
 * Everything here works on caller-provided (stack) buffers: an exec wrapper
 * may run in a vfork child, which shares our memory and must not allocate. */
#ifndef DSOCK_ENV_H
#define DSOCK_ENV_H

#include "lib/base/exec_target.h"
#include "lib/transport/transport.h" /* dsock_transports_exec_env */

#include <stddef.h>

#define DSOCK_ENV_SAVED_MAX 32

void dsock_env_init(void);
/* Path of the loaded libdsock.so, "" if unknown. */
const char *dsock_env_lib_path(void);
size_t dsock_env_count(char *const envp[]);
/* Bytes the fixed LD_PRELOAD entry needs. */
size_t dsock_env_strbuf_size(char *const envp[]);
/* Returns envp itself when nothing is missing, else out (cap entries), built
 * from envp plus what is missing, with a new LD_PRELOAD string in sbuf. */
/* extra (NULL, or a list of "NAME=value" entries, each ending with a NUL,
 * the list with an empty one) replaces any NAME= entry of envp; at most
 * DSOCK_ENV_EXTRA_MAX entries. */
#define DSOCK_ENV_EXTRA_MAX 4
char *const *dsock_env_fix(char *const envp[], char **out, size_t cap, char *sbuf, size_t sbuflen,
			   const char *extra);

/* Declares `name`, the fixed environment for envp, on the caller's stack,
 * with the transports' entries for the program to run (dirfd, path,
 * search, argv: struct dsock_exec_target): their connections handed over,
 * or moved back to the kernel if it will not run dsock. */
#define DSOCK_ENV_FIXED(envp, name, spawn, dirfd, path, search, argv) \
	char name##_x[1024]; \
	const struct dsock_exec_target name##_t = { dirfd, path, search, argv, envp }; \
	size_t name##_xl = dsock_transports_exec_env(name##_x, sizeof(name##_x), spawn, &name##_t); \
	size_t name##_cap = dsock_env_count(envp) + DSOCK_ENV_SAVED_MAX + DSOCK_ENV_EXTRA_MAX + 2; \
	char *name##_v[name##_cap]; \
	char name##_s[dsock_env_strbuf_size(envp)]; \
	char *const *name = dsock_env_fix(envp, name##_v, name##_cap, name##_s, sizeof(name##_s), \
					  name##_xl ? name##_x : NULL)

#endif

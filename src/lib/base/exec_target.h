/* What an exec is about to start, and whether it will run dsock (so that
 * connections on a transport can be handed to it, or must go back to the
 * kernel first). */
#ifndef DSOCK_EXEC_TARGET_H
#define DSOCK_EXEC_TARGET_H

struct dsock_exec_target {
	int dirfd;          /* AT_FDCWD, execveat's directory, or fexecve's file */
	const char *path;   /* NULL or "": dirfd is the file itself */
	int search;         /* execvp*, posix_spawnp: looked up in PATH */
	char *const *argv;
	char *const *envp;  /* as the program passes it */
};

/* 1 if the new program will load libdsock.so with the fast path enabled
 * and so take the connections over (the transports' exec entries); 0 if not, or unsure. */
int dsock_exec_runs_dsock(const struct dsock_exec_target *t);
/* For a transport handing fd's connection to the program t: -1 if fd does
 * not reach it (close-on-exec, or not open), else whether it runs dsock
 * (*runs caches the answer for one exec: -1 until asked). */
int dsock_exec_passes(int fd, const struct dsock_exec_target *t, int *runs);

#endif

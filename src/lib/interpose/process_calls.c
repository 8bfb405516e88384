/* fork and the exec family.  Exec wrappers keep dsock in the new program
 * (core/env.h); they allocate nothing and touch no shared state, so they
 * are safe in a vfork child, which runs on its parent's stack and memory.
 * vfork itself is not wrapped: returning twice from a wrapper on a shared
 * stack is undefined.  Its child is recognised by dsock_table_owner(). */
#include "lib/interpose/api.h"
#include "lib/core/env.h"

#include <fcntl.h>
#include <stdarg.h>
#include <unistd.h>

extern char **environ;

DSOCK_API pid_t fork(void)
{
	/* the pthread_atfork handlers (core/init.c) do dsock's part, for this
	 * fork and for the ones libc makes itself (daemon(), system()) */
	return (pid_t)dsock_ret(SYSRET(dsock_real.fork()));
}

DSOCK_API int execve(const char *path, char *const argv[], char *const envp[])
{
	DSOCK_ENV_FIXED(envp, env, 0, AT_FDCWD, path, 0, argv);
	int r_ = (int)SYSRET(dsock_real.execve(path, argv, env));
	dsock_shm_exec_failed(); /* still here: the exec failed */
	return (int)dsock_ret(r_);
}

DSOCK_API int execvpe(const char *file, char *const argv[], char *const envp[])
{
	DSOCK_ENV_FIXED(envp, env, 0, AT_FDCWD, file, 1, argv);
	int r_ = (int)SYSRET(dsock_real.execvpe(file, argv, env));
	dsock_shm_exec_failed(); /* still here: the exec failed */
	return (int)dsock_ret(r_);
}

DSOCK_API int execv(const char *path, char *const argv[])
{
	return execve(path, argv, environ);
}

DSOCK_API int execvp(const char *file, char *const argv[])
{
	return execvpe(file, argv, environ);
}

DSOCK_API int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags)
{
	DSOCK_ENV_FIXED(envp, env, 0, dirfd, (flags & AT_EMPTY_PATH) && !*path ? NULL : path, 0, argv);
	int r_ = (int)SYSRET(dsock_real.execveat(dirfd, path, argv, env, flags));
	dsock_shm_exec_failed(); /* still here: the exec failed */
	return (int)dsock_ret(r_);
}

DSOCK_API int fexecve(int fd, char *const argv[], char *const envp[])
{
	DSOCK_ENV_FIXED(envp, env, 0, fd, NULL, 0, argv);
	int r_ = (int)SYSRET(dsock_real.fexecve(fd, argv, env));
	dsock_shm_exec_failed(); /* still here: the exec failed */
	return (int)dsock_ret(r_);
}

/* execl*: gather the variadic arguments into an array on the stack. */
#define COLLECT_ARGS(arg0, last, argv, ...) \
	size_t argc_ = 1; \
	va_list ap_; \
	va_start(ap_, last); \
	while (va_arg(ap_, char *)) \
		argc_++; \
	va_end(ap_); \
	char *argv[argc_ + 1]; \
	argv[0] = (char *)(arg0); \
	va_start(ap_, last); \
	for (size_t i_ = 1; i_ <= argc_; i_++) \
		argv[i_] = va_arg(ap_, char *); \
	__VA_ARGS__; \
	va_end(ap_)

DSOCK_API int execl(const char *path, const char *arg, ...)
{
	COLLECT_ARGS(arg, arg, argv);
	return execve(path, argv, environ);
}

DSOCK_API int execlp(const char *file, const char *arg, ...)
{
	COLLECT_ARGS(arg, arg, argv);
	return execvpe(file, argv, environ);
}

DSOCK_API int execle(const char *path, const char *arg, ...)
{
	char **envp;
	COLLECT_ARGS(arg, arg, argv, envp = va_arg(ap_, char **));
	return execve(path, argv, envp);
}

/* posix_spawn reports errors as its return value, not errno. */
DSOCK_API int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
			  const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	DSOCK_ENV_FIXED(envp, env, 1, AT_FDCWD, path, 0, argv);
	int r = dsock_real.posix_spawn(pid, path, fa, attr, argv, env);
	dsock_shm_exec_failed(); /* the parent keeps its memfds private */
	return r;
}

DSOCK_API int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			   const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	DSOCK_ENV_FIXED(envp, env, 1, AT_FDCWD, file, 1, argv);
	int r = dsock_real.posix_spawnp(pid, file, fa, attr, argv, env);
	dsock_shm_exec_failed();
	return r;
}

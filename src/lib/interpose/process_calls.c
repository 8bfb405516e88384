/* fork and the exec family.  Exec wrappers keep dsock in the new program
 * (core/env.h); they allocate nothing and touch no shared state, so they
 * are safe in a vfork child, which runs on its parent's stack and memory.
 * vfork itself is not wrapped (returning twice from a wrapper on a shared
 * stack is undefined): a trampoline notes that a child may share our
 * memory, then jumps to libc's, whose child dsock_table_owner() then
 * recognises.  clone with CLONE_VM is noted the same way. */
#include "lib/interpose/api.h"
#include "lib/base/proc.h"
#include "lib/core/env.h"
#include "lib/sock/epset.h"
#include "lib/sock/light.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <unistd.h>

extern char **environ;

void *dsock_next_vfork; /* libc's, found at the first call */

/* Called (an ordinary call, before any child exists) when dsock_next_vfork
 * is not known yet; returns it.  No libc vfork: fork, which POSIX allows. */
void *dsock_vfork_next(void);
void *dsock_vfork_next(void)
{
	void *f = dlsym(RTLD_NEXT, "vfork");
	if (!f)
		f = (void *)dsock_real.fork;
	__atomic_store_n(&dsock_next_vfork, f, __ATOMIC_RELEASE);
	return f;
}

/* vfork: note, then a tail jump with the caller's stack as it was, so
 * that libc's vfork (which pops and pushes its return address around the
 * system call) runs exactly as if called directly. */
__asm__(".text\n"
	".globl vfork\n"
	".type vfork, @function\n"
	"vfork:\n"
	"	endbr64\n"
	"	movl $1, dsock_vm_shared(%rip)\n"
	"	movq dsock_next_vfork(%rip), %rax\n"
	"	testq %rax, %rax\n"
	"	jz 1f\n"
	"	jmp *%rax\n"
	"1:	subq $8, %rsp\n" /* 16-byte alignment for the call */
	"	call dsock_vfork_next\n"
	"	addq $8, %rsp\n"
	"	jmp *%rax\n"
	".size vfork, .-vfork\n");

typedef int (*clone_fn)(int (*)(void *), void *, int, void *, ...);

DSOCK_API int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...)
{
	static clone_fn next;
	clone_fn f = __atomic_load_n(&next, __ATOMIC_ACQUIRE);
	va_list ap;

	if (!f) {
		f = (clone_fn)dlsym(RTLD_NEXT, "clone");
		if (!f)
			return dsock_ret(-ENOSYS);
		__atomic_store_n(&next, f, __ATOMIC_RELEASE);
	}
	/* the optional arguments are passed on whether given or not, as
	 * libc's own clone reads them */
	va_start(ap, arg);
	pid_t *ptid = va_arg(ap, pid_t *);
	void *tls = va_arg(ap, void *);
	pid_t *ctid = va_arg(ap, pid_t *);
	va_end(ap);
	if ((flags & CLONE_VM) && !(flags & CLONE_THREAD))
		__atomic_store_n(&dsock_vm_shared, 1, __ATOMIC_RELAXED);
	/* a child with its own memory and our sets, no fork
	 * handlers run: the sets are shared from now on, as at a fork */
	if (!(flags & CLONE_VM))
		dsock_epset_spawn_actions();
	return f(fn, stack, flags, arg, ptid, tls, ctid);
}

DSOCK_API pid_t fork(void)
{
	/* the pthread_atfork handlers (core/init.c) do dsock's part, for this
	 * fork and for the ones libc makes itself (daemon(), system()) */
	return (pid_t)dsock_ret(SYSRET(dsock_real.fork()));
}

DSOCK_API int execve(const char *path, char *const argv[], char *const envp[])
{
	dsock_light_exec(); /* (before the program can reach a set) */
	DSOCK_ENV_FIXED(envp, env, 0, AT_FDCWD, path, 0, argv);
	int r_ = (int)SYSRET(dsock_real.execve(path, argv, env));
	dsock_transports_exec_done(0); /* still here: the exec failed */
	return (int)dsock_ret(r_);
}

DSOCK_API int execvpe(const char *file, char *const argv[], char *const envp[])
{
	dsock_light_exec(); /* (before the program can reach a set) */
	DSOCK_ENV_FIXED(envp, env, 0, AT_FDCWD, file, 1, argv);
	int r_ = (int)SYSRET(dsock_real.execvpe(file, argv, env));
	dsock_transports_exec_done(0); /* still here: the exec failed */
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
	dsock_light_exec(); /* (before the program can reach a set) */
	DSOCK_ENV_FIXED(envp, env, 0, dirfd, (flags & AT_EMPTY_PATH) && !*path ? NULL : path, 0, argv);
	int r_ = (int)SYSRET(dsock_real.execveat(dirfd, path, argv, env, flags));
	dsock_transports_exec_done(0); /* still here: the exec failed */
	return (int)dsock_ret(r_);
}

DSOCK_API int fexecve(int fd, char *const argv[], char *const envp[])
{
	dsock_light_exec(); /* (before the program can reach a set) */
	DSOCK_ENV_FIXED(envp, env, 0, fd, NULL, 0, argv);
	int r_ = (int)SYSRET(dsock_real.fexecve(fd, argv, env));
	dsock_transports_exec_done(0); /* still here: the exec failed */
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
	dsock_light_exec(); /* (before the program can reach a set) */
	DSOCK_ENV_FIXED(envp, env, 1, AT_FDCWD, path, 0, argv);
	if (fa)
		dsock_epset_spawn_actions();
	int r = dsock_real.posix_spawn(pid, path, fa, attr, argv, env);
	dsock_transports_exec_done(r == 0); /* the parent keeps its memfds private */
	return r;
}

DSOCK_API int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			   const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	dsock_light_exec(); /* (before the program can reach a set) */
	DSOCK_ENV_FIXED(envp, env, 1, AT_FDCWD, file, 1, argv);
	if (fa)
		dsock_epset_spawn_actions();
	int r = dsock_real.posix_spawnp(pid, file, fa, attr, argv, env);
	dsock_transports_exec_done(r == 0);
	return r;
}

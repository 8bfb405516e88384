/* Will the program an exec starts run dsock?  The exec wrappers keep
 * LD_PRELOAD, so a dynamic program does, unless the loader ignores the
 * preload (a set-user-ID, set-group-ID or file-capability program, which
 * runs in secure mode), the program is static (no PT_INTERP: nothing reads
 * LD_PRELOAD), of another ELF class or machine, or dsock's rules disable it
 * there.  A script runs its interpreter.  Unknown formats count as "no":
 * handing a connection back to the kernel is always safe, handing a
 * transport's state to
 * a program that cannot read them is not.
 *
 * Runs in the exec wrapper, possibly in a vfork child: stack only, no
 * allocation. */
#include "lib/base/exec_target.h"
#include "lib/base/proc.h"
#include "lib/base/real.h"
#include "common/rawsys.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#if defined(__x86_64__)
#define OUR_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define OUR_MACHINE EM_AARCH64
#endif

#if UINTPTR_MAX > 0xffffffffu
typedef Elf64_Ehdr ehdr_t;
typedef Elf64_Phdr phdr_t;
#define OUR_CLASS ELFCLASS64
#else
typedef Elf32_Ehdr ehdr_t;
typedef Elf32_Phdr phdr_t;
#define OUR_CLASS ELFCLASS32
#endif

/* A dynamic ELF of our class and machine (1), or not (0). */
static int elf_dynamic(int fd, const unsigned char *head, size_t n)
{
	const ehdr_t *e = (const ehdr_t *)head;

	if (n < sizeof(*e) || e->e_ident[EI_CLASS] != OUR_CLASS)
		return 0;
#ifdef OUR_MACHINE
	if (e->e_machine != OUR_MACHINE)
		return 0;
#endif
	if (e->e_phentsize != sizeof(phdr_t) || e->e_phnum == 0 || e->e_phnum > 256)
		return 0;
	for (unsigned i = 0; i < e->e_phnum; i++) {
		phdr_t p;
		if (pread(fd, &p, sizeof(p), (off_t)(e->e_phoff + i * sizeof(p))) != (ssize_t)sizeof(p))
			return 0;
		if (p.p_type == PT_INTERP)
			return 1;
	}
	return 0;
}

/* The loader's secure mode ignores an LD_PRELOAD path with a slash. */
static int secure_exec(int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return 1;
	if ((st.st_mode & S_ISUID) && st.st_uid != geteuid())
		return 1;
	if ((st.st_mode & S_ISGID) && st.st_gid != getegid())
		return 1;
	return fgetxattr(fd, "security.capability", NULL, 0) > 0;
}

static int file_runs_dsock(int dirfd, const char *path, int depth)
{
	unsigned char head[256];
	int fd, r = 0;
	ssize_t n;

	if (path && *path)
		fd = (int)dsock_sys(SYS_openat, dirfd, path, O_RDONLY | O_CLOEXEC);
	else
		fd = (int)dsock_sys(SYS_fcntl, dirfd, F_DUPFD_CLOEXEC, 0); /* fexecve, AT_EMPTY_PATH */
	if (fd < 0)
		return 0;
	n = pread(fd, head, sizeof(head) - 1, 0);
	if (n >= 2 && head[0] == '#' && head[1] == '!' && depth < 4) {
		/* "#!interpreter [arg]": the interpreter is what runs */
		char interp[sizeof(head)];
		size_t i = 2, j = 0;
		head[n] = '\0';
		while (head[i] == ' ' || head[i] == '\t')
			i++;
		while (head[i] && head[i] != ' ' && head[i] != '\t' && head[i] != '\n')
			interp[j++] = (char)head[i++];
		interp[j] = '\0';
		r = j && !secure_exec(fd) && file_runs_dsock(AT_FDCWD, interp, depth + 1);
	} else if (n >= 4 && !memcmp(head, ELFMAG, SELFMAG)) {
		r = !secure_exec(fd) && elf_dynamic(fd, head, (size_t)n);
	}
	dsock_sys(SYS_close, fd);
	return r;
}

/* execvp's lookup: the first executable file of that name in PATH. */
static int search_path(const char *file, char *out, size_t len)
{
	const char *p = getenv("PATH");

	if (!p)
		p = "/bin:/usr/bin";
	for (;;) {
		const char *end = strchrnul(p, ':');
		size_t dl = (size_t)(end - p);
		if (dl + 1 + strlen(file) + 1 <= len) {
			memcpy(out, p, dl);
			if (!dl)
				out[dl++] = '.';
			out[dl] = '/';
			strcpy(out + dl + 1, file);
			if (access(out, X_OK) == 0)
				return 0;
		}
		if (!*end)
			return -ENOENT;
		p = end + 1;
	}
}

static const char *env_get(char *const envp[], const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; envp && envp[i]; i++)
		if (!strncmp(envp[i], name, n) && envp[i][n] == '=')
			return envp[i] + n + 1;
	return NULL;
}

int dsock_exec_runs_dsock(const struct dsock_exec_target *t)
{
	char found[PATH_MAX];
	const char *path = t->path, *prog, *off, *rules;

	/* the new program's own switches (its environment as the wrappers
	 * pass it: our DSOCK_* settings are added when missing) */
	off = env_get(t->envp, "DSOCK_DISABLE");
	if (off && *off && strcmp(off, "0"))
		return 0;
	prog = t->argv && t->argv[0] ? t->argv[0] : path ? path : "";
	prog = strrchr(prog, '/') ? strrchr(prog, '/') + 1 : prog;
	rules = env_get(t->envp, "DSOCK_RULES");
	if (rules && (!getenv("DSOCK_RULES") || strcmp(rules, getenv("DSOCK_RULES")))) {
		struct dsock_rules r;
		char err[128];
		memset(&r, 0, sizeof(r));
		if (dsock_rules_parse_text(&r, rules, "DSOCK_RULES", err, sizeof(err)) ||
		    !dsock_rules_program_allowed(&r, prog))
			return 0;
	} else if (!dsock_rules_program_allowed(&dsock_proc.rules, prog)) {
		return 0;
	}
	if (t->search && path && !strchr(path, '/')) {
		if (search_path(path, found, sizeof(found)))
			return 0;
		path = found;
	}
	return file_runs_dsock(t->dirfd, path, 0);
}

int dsock_exec_passes(int fd, const struct dsock_exec_target *t, int *runs)
{
	int fl = dsock_real.fcntl(fd, F_GETFD);

	if (fl < 0 || (fl & FD_CLOEXEC))
		return -1;
	if (*runs < 0)
		*runs = dsock_exec_runs_dsock(t);
	return *runs;
}

/* The kernel-recorded proof's loader (ident.h).  The programs are opened
 * from the object built into dsockd, the per-boot SipHash key comes from
 * getrandom, and the three programs are attached by bpf_link at the
 * cgroup-v2 root, so every socket on the host (containers included) runs
 * them; the links go when this daemon does.  Only this process holds a
 * writable fd of the record map: a forged record could pair one tenant's
 * socket with another's.  One proving daemon per host: a second one finds
 * the first one's sockops program attached at the root and stays off
 * (two would each find the other's option written, bpf_store_hdr_opt:
 * EEXIST, and their records would not match). */
#include "daemon/ident.h"
#include "common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#ifdef DSOCK_HAVE_BPF
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/random.h>
#include <unistd.h>

extern const unsigned char dsock_ident_bpf_start[], dsock_ident_bpf_end[];

static const char *const prog_names[] = { "dsock_sockops", "dsock_setsockopt", "dsock_getsockopt" };
static struct bpf_object *obj;
static struct bpf_link *links[3];
static int rec_map = -1;

/* libbpf's messages, warnings only, into the daemon's log */
__attribute__((format(printf, 2, 0)))
static int quiet(enum libbpf_print_level l, const char *fmt, va_list ap)
{
	char line[512];

	if (l == LIBBPF_DEBUG)
		return 0;
	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = 0;
	DSOCK_INFO("libbpf: %s", line);
	return 0;
}

/* The cgroup-v2 mount: /sys/fs/cgroup on a unified host,
 * /sys/fs/cgroup/unified on a hybrid one. */
static int cgroup2_root(char *out, size_t n)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[1024];
	int found = -ENOENT;

	if (!f)
		return -errno;
	while (found && fgets(line, sizeof(line), f)) {
		char mnt[512], *sep = strstr(line, " - ");
		if (!sep || strncmp(sep, " - cgroup2 ", 11) || sscanf(line, "%*s %*s %*s %*s %511s", mnt) != 1)
			continue;
		snprintf(out, n, "%s", mnt);
		found = 0;
	}
	fclose(f);
	return found;
}

/* The pid-less sign of another proving daemon: a program of ours
 * attached at the cgroup root already (its name, as the kernel keeps it).
 * Two would break each other's records, so the second one stays off. */
static int ours_attached(int cg)
{
	__u32 ids[64], n = 64;
	int found = 0;

	if (bpf_prog_query(cg, BPF_CGROUP_SOCK_OPS, 0, NULL, ids, &n))
		return 0;
	for (__u32 i = 0; i < n && !found; i++) {
		struct bpf_prog_info info;
		__u32 len = sizeof(info);
		int fd = bpf_prog_get_fd_by_id(ids[i]);
		if (fd < 0)
			continue;
		memset(&info, 0, sizeof(info));
		found = !bpf_obj_get_info_by_fd(fd, &info, &len) && !strncmp(info.name, prog_names[0], sizeof(info.name));
		close(fd);
	}
	return found;
}

static int attach(void)
{
	struct { __u64 k0, k1; } key;
	char root[512];
	__u32 zero = 0;
	struct bpf_map *m;
	int cg, r;

	obj = bpf_object__open_mem(dsock_ident_bpf_start, (size_t)(dsock_ident_bpf_end - dsock_ident_bpf_start),
				   NULL);
	if (!obj)
		return -errno;
	if ((r = bpf_object__load(obj)))
		return r;
	if (getrandom(&key, sizeof(key), 0) != sizeof(key))
		return -EIO;
	if (!(m = bpf_object__find_map_by_name(obj, "dsock_key")) ||
	    bpf_map_update_elem(bpf_map__fd(m), &zero, &key, BPF_ANY))
		return -errno ? -errno : -ENOENT;
	memset(&key, 0, sizeof(key));
	if (!(m = bpf_object__find_map_by_name(obj, "dsock_ident")))
		return -ENOENT;
	if ((r = cgroup2_root(root, sizeof(root))))
		return r;
	if ((cg = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return -errno;
	if (ours_attached(cg)) {
		close(cg);
		return -EEXIST;
	}
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++) {
		struct bpf_program *p = bpf_object__find_program_by_name(obj, prog_names[i]);
		links[i] = p ? bpf_program__attach_cgroup(p, cg) : NULL;
		if (!links[i]) {
			r = -errno ? -errno : -ENOENT;
			close(cg);
			return r;
		}
	}
	close(cg);
	rec_map = bpf_map__fd(m);
	DSOCK_INFO("kernel-recorded proof on: BPF programs attached at %s", root);
	return 0;
}

int dd_ident_start(void)
{
	const char *e = getenv("DSOCK_BPF_PROOF");
	int r;

	if (!e || strcmp(e, "1"))
		return 0;
	libbpf_set_print(quiet);
	if ((r = attach())) {
		DSOCK_WARN("kernel-recorded proof off: %s%s; pairing keeps to one network namespace",
			   r == -EEXIST ? "another daemon's programs are attached on this host" : "cannot load its BPF programs: ",
			   r == -EEXIST ? "" : strerror(-r));
		dd_ident_stop();
	}
	return r;
}

int dd_ident_on(void)
{
	return rec_map >= 0;
}

int dd_ident_read(int fd, struct dsock_ident_rec *out)
{
	if (rec_map < 0)
		return -ENOSYS;
	return bpf_map_lookup_elem(rec_map, &fd, out) ? -errno : 0;
}

void dd_ident_stop(void)
{
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++) {
		bpf_link__destroy(links[i]);
		links[i] = NULL;
	}
	bpf_object__close(obj);
	obj = NULL;
	rec_map = -1;
}

#else /* built without libbpf's headers or clang's BPF target */

int dd_ident_start(void)
{
	const char *e = getenv("DSOCK_BPF_PROOF");

	if (e && !strcmp(e, "1"))
		DSOCK_WARN("kernel-recorded proof off: dsockd was built without BPF (libbpf-dev, clang)");
	return e && !strcmp(e, "1") ? -ENOSYS : 0;
}

int dd_ident_on(void)
{
	return 0;
}

int dd_ident_read(int fd, struct dsock_ident_rec *out)
{
	(void)fd;
	(void)out;
	return -ENOSYS;
}

void dd_ident_stop(void)
{
}
#endif

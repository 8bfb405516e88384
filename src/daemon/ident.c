/* The kernel-recorded proof's loader (ident.h).  The programs are opened
 * from the object built into dsockd, the per-boot SipHash key comes from
 * getrandom, and the three programs are attached by bpf_link at the
 * cgroup-v2 root, so every socket on the host (containers included) runs
 * them; the links go when this daemon does, and links detached under it
 * (root's BPF_LINK_DETACH, seen every DSOCK_BPF_WATCH_MS, or at once on
 * SIGHUP) are made again: until then new connections have no record and
 * stay on the kernel.  Only this process holds a
 * writable fd of the record map: a forged record could pair one tenant's
 * socket with another's.  One set of programs per host: a second proving
 * daemon (another host's, simulated in a network namespace, or a private
 * one) finds the first one's sockops program attached at the root and
 * attaches none of its own (two would each find the other's option
 * written, bpf_store_hdr_opt: EEXIST, and their records would not match);
 * it reads the records those programs keep through the socket itself
 * (getsockopt DSOCK_IDENTITY, which the getsockopt program serves to any
 * holder of a socket, read-only), and attaches its own once they are
 * gone. */
#include "daemon/ident.h"
#include "common/log.h"
#include "common/paths.h"

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
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

extern const unsigned char dsock_ident_bpf_start[], dsock_ident_bpf_end[];

static const char *const prog_names[] = { "dsock_sockops", "dsock_setsockopt", "dsock_getsockopt" };
static struct bpf_object *obj;
static struct bpf_link *links[3];
static int rec_map = -1;
static int cgroup_fd = -1;
static int reader; /* another daemon's programs are attached: records by getsockopt */
static long long watch_ms = 2000, watch_next; /* (0: no watch) */

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

static void unlink_all(void)
{
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++) {
		bpf_link__destroy(links[i]);
		links[i] = NULL;
	}
}

/* A link of ours that no longer holds its cgroup (detached by force, or
 * the cgroup gone). */
static int detached(struct bpf_link *l)
{
	struct bpf_link_info info;
	__u32 len = sizeof(info);

	memset(&info, 0, sizeof(info));
	if (!l || bpf_obj_get_info_by_fd(bpf_link__fd(l), &info, &len))
		return 1;
	return info.type == BPF_LINK_TYPE_CGROUP && !info.cgroup.cgroup_id;
}

/* The three links at the cgroup root, unless another daemon's programs
 * are there. */
static int link_all(void)
{
	int r;

	if (ours_attached(cgroup_fd))
		return -EEXIST;
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++) {
		struct bpf_program *p = bpf_object__find_program_by_name(obj, prog_names[i]);
		links[i] = p ? bpf_program__attach_cgroup(p, cgroup_fd) : NULL;
		if (!links[i]) {
			r = -errno ? -errno : -ENOENT;
			unlink_all();
			return r;
		}
	}
	return 0;
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
	cgroup_fd = cg;
	if ((r = link_all()))
		return r;
	rec_map = bpf_map__fd(m);
	DSOCK_INFO("kernel-recorded proof on: BPF programs attached at %s", root);
	return 0;
}

int dd_ident_start(const char *socket_path)
{
	const char *e = getenv("DSOCK_BPF_PROOF"), *w = getenv("DSOCK_BPF_WATCH_MS");
	int asked = e && !strcmp(e, "1"), r;

	/* asked (1); told not to (any other value); by default the host's
	 * daemon proves and a private one does not */
	if (!asked && ((e && *e) || strcmp(socket_path, DSOCK_HOST_SOCKET)))
		return 0;
	if (w && *w)
		watch_ms = atoll(w) > 0 ? atoll(w) : 0;
	libbpf_set_print(quiet);
	if ((r = attach()) == -EEXIST) {
		reader = 1;
		DSOCK_INFO("kernel-recorded proof by another daemon's programs: they are attached on this host; "
			   "reading their records");
		return 0;
	}
	if (r) {
		/* (a warning when asked; by default, where it cannot, a note) */
		const char *why = r == -EEXIST ? "another daemon's programs are attached on this host" : strerror(-r);
		if (asked)
			DSOCK_WARN("kernel-recorded proof off: %s; pairing keeps to one network namespace", why);
		else
			DSOCK_INFO("kernel-recorded proof off: %s; pairing keeps to one network namespace "
				   "(DSOCK_BPF_PROOF=0: do not try)", why);
		dd_ident_stop();
	}
	return r;
}

int dd_ident_on(void)
{
	return rec_map >= 0 || reader;
}

int dd_ident_read(int fd, struct dsock_ident_rec *out)
{
	socklen_t len = sizeof(*out);

	if (reader)
		return getsockopt(fd, DSOCK_SOL, DSOCK_IDENTITY, out, &len) ? -errno : len == sizeof(*out) ? 0 : -ENOENT;
	if (rec_map < 0)
		return -ENOSYS;
	return bpf_map_lookup_elem(rec_map, &fd, out) ? -errno : 0;
}

/* A reader whose programs' daemon left attaches its own (the records of
 * connections made before are gone with the other's map). */
static void reader_watch(void)
{
	struct bpf_map *m = bpf_object__find_map_by_name(obj, "dsock_ident");

	if (!m || ours_attached(cgroup_fd) || link_all())
		return;
	reader = 0;
	rec_map = bpf_map__fd(m);
	DSOCK_INFO("kernel-recorded proof on: the other daemon's programs are gone; this daemon's are attached");
}

int dd_ident_watch(int now)
{
	struct timespec ts;
	long long now_ms;
	int gone = 0, r;

	if ((rec_map < 0 && !reader) || (!now && !watch_ms))
		return -1;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	now_ms = ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
	if (!now && now_ms < watch_next)
		return (int)(watch_next - now_ms);
	watch_next = now_ms + watch_ms;
	if (reader) {
		reader_watch();
		return watch_ms ? (int)watch_ms : -1;
	}
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
		gone += detached(links[i]);
	if (gone) {
		/* all three again: a socket must meet either all or none */
		unlink_all();
		if ((r = link_all())) {
			DSOCK_WARN("kernel-recorded proof off: %d of its programs were detached, and attaching them again "
				   "failed: %s", gone, r == -EEXIST ? "another daemon's programs are attached" : strerror(-r));
			dd_ident_stop();
			return -1;
		}
		DSOCK_WARN("kernel-recorded proof: %d of its programs were detached under the daemon; attached again "
			   "(connections made meanwhile stay on the kernel)", gone);
	}
	return watch_ms ? (int)watch_ms : -1;
}

void dd_ident_stop(void)
{
	unlink_all();
	bpf_object__close(obj);
	obj = NULL;
	rec_map = -1;
	reader = 0;
	if (cgroup_fd >= 0)
		close(cgroup_fd);
	cgroup_fd = -1;
}

#else /* built without libbpf's headers or clang's BPF target */

int dd_ident_start(const char *socket_path)
{
	const char *e = getenv("DSOCK_BPF_PROOF");

	(void)socket_path;
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

int dd_ident_watch(int now)
{
	(void)now;
	return -1;
}

void dd_ident_stop(void)
{
}
#endif

/* Finding, starting and talking to dsockd. */
#include "cli/cli.h"
#include "common/paths.h"
#include "common/proto.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int self_dir(char *buf, size_t n)
{
	char exe[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (len < 0)
		return -errno;
	exe[len] = '\0';
	if ((size_t)snprintf(buf, n, "%s", dirname(exe)) >= n)
		return -ENAMETOOLONG;
	return 0;
}

static int beside(char *buf, size_t n, const char *rel)
{
	char dir[PATH_MAX];
	int r = self_dir(dir, sizeof(dir));

	if (r)
		return r;
	if ((size_t)snprintf(buf, n, "%s/%s", dir, rel) >= n)
		return -ENAMETOOLONG;
	return access(buf, R_OK) == 0 ? 0 : -errno;
}

int cli_lib_path(char *buf, size_t n)
{
	const char *env = getenv("DSOCK_LIB");

	if (env && *env) {
		if (env[0] != '/' || (size_t)snprintf(buf, n, "%s", env) >= n)
			return -EINVAL;
		return access(buf, R_OK) == 0 ? 0 : -errno;
	}
	return beside(buf, n, "../lib/libdsock.so");
}

int cli_daemon_path(char *buf, size_t n)
{
	return beside(buf, n, "dsockd");
}

int cli_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (dsock_socket_path(sa.sun_path, sizeof(sa.sun_path)))
		return -ENAMETOOLONG;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

int cli_daemon_lock(int *pid, int *version)
{
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)], lock[sizeof(path) + 8];
	FILE *f;
	int n;

	if (dsock_socket_path(path, sizeof(path)))
		return -ENAMETOOLONG;
	snprintf(lock, sizeof(lock), "%s.lock", path);
	f = fopen(lock, "r");
	if (!f)
		return -errno;
	*version = 0;
	n = fscanf(f, "%d %d", pid, version);
	fclose(f);
	return n >= 1 && *pid > 1 ? 0 : -ESRCH;
}

int cli_ensure_daemon(int quiet)
{
	char dpath[PATH_MAX];
	int fd = cli_connect(), status, r;
	pid_t pid;

	if (fd >= 0) {
		close(fd);
		/* one of another build refuses our programs' libraries: they
		 * would run on the kernel only (its lock file says) */
		int dpid, ver = 0;
		char theirs[32] = "an older one";
		if (!quiet && cli_daemon_lock(&dpid, &ver) == 0 && ver != DSOCK_PROTO_VERSION) {
			if (ver)
				snprintf(theirs, sizeof(theirs), "%d", ver);
			fprintf(stderr, "dsock: the running dsockd (pid %d) speaks protocol version %s, this "
				"dsock %d: programs run on the kernel until `dsock stop` ends it (the next "
				"`dsock run` starts this one)\n", dpid, theirs, DSOCK_PROTO_VERSION);
		}
		return 0;
	}
	r = cli_daemon_path(dpath, sizeof(dpath));
	if (r) {
		if (!quiet)
			fprintf(stderr, "dsock: cannot find dsockd beside dsock: %s\n", strerror(-r));
		return r;
	}
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		/* the daemon never runs under dsock itself */
		unsetenv("LD_PRELOAD");
		execl(dpath, "dsockd", (char *)NULL);
		_exit(127);
	}
	/* dsockd returns once its socket listens (or at once if another
	 * instance holds the lock and is about to listen) */
	waitpid(pid, &status, 0);
	for (int i = 0; i < 200; i++) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		fd = cli_connect();
		if (fd >= 0) {
			close(fd);
			return 0;
		}
		nanosleep(&ts, NULL);
	}
	if (!quiet)
		fprintf(stderr, "dsock: the daemon did not start (%s); see its log beside the socket\n",
			strerror(-fd));
	return fd;
}

int cli_request(int type, void (*line)(const char *text, void *arg), void *arg)
{
	union { struct dsock_msg_hdr h; char b[DSOCK_MSG_MAX + 1]; } m;
	struct timeval tv = { .tv_sec = 5 };
	int fd = cli_connect(), r = 0;

	if (fd < 0)
		return fd;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	dsock_msg_init(&m.h, (uint16_t)type, 0, 1);
	if (send(fd, m.b, sizeof(m.h), MSG_NOSIGNAL) < 0) {
		r = -errno;
		goto out;
	}
	for (;;) {
		ssize_t n = recv(fd, m.b, sizeof(m.b), MSG_TRUNC);
		if (n <= 0) {
			r = n < 0 ? -errno : -ECONNRESET;
			break;
		}
		if ((size_t)n > DSOCK_MSG_MAX || dsock_msg_check(m.b, (size_t)n)) {
			r = -EBADMSG;
			if ((size_t)n >= sizeof(m.h) && m.h.magic == DSOCK_PROTO_MAGIC &&
			    m.h.version != DSOCK_PROTO_VERSION) {
				fprintf(stderr, "dsock: the running dsockd speaks protocol version %u, this dsock %u "
					"(another build): `dsock stop` ends it, the next `dsock run` starts this one\n",
					(unsigned)m.h.version, DSOCK_PROTO_VERSION);
				r = -EPROTO;
			}
			break;
		}
		if (m.h.type == DSOCK_MSG_STAT_LINE) {
			if (line)
				line(m.b + sizeof(m.h), arg);
			continue;
		}
		if (m.h.type == DSOCK_MSG_ERROR) {
			struct dsock_msg_error e;
			memcpy(&e, m.b + sizeof(m.h), sizeof(e));
			r = -e.err;
		}
		break; /* STAT_END, ACK */
	}
out:
	close(fd);
	return r;
}

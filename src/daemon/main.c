/* dsockd: the per-host control plane.  Never on the data path.
 *
 *   dsockd [--socket PATH] [--foreground] [--log FILE] [--log-level L]
 *          [--max-clients N]
 *
 * One daemon per socket path: a lock file beside the socket (flock) makes a
 * second instance exit 0 at once, so any number of `dsock run` may try to
 * start it concurrently. */
#include "daemon/server.h"
#include "daemon/hostkey.h"
#include "daemon/hostlink.h"
#include "daemon/ident.h"
#include "daemon/pairing.h"
#include "daemon/policy.h"
#include "daemon/provision.h"
#include "common/log.h"
#include "common/paths.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static void usage(FILE *f)
{
	fprintf(f,
		"usage: dsockd [--socket PATH] [--foreground] [--log FILE] [--log-level LEVEL]\n"
		"              [--max-clients N]\n"
		"       dsockd --fingerprint\n"
		"The dsock control daemon. `dsock run` starts it when needed; see dsock --help.\n"
		"--fingerprint prints this host's key (DSOCK_HOST_KEY, else /var/lib/dsock/host.key;\n"
		"made when missing) as other hosts' allow-lists name it, and exits.\n");
}

/* mkdir -p for the socket's directory; private to the user unless root. */
static int make_dir(const char *sock_path)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	mode_t mode = geteuid() == 0 ? 0755 : 0700;

	snprintf(dir, sizeof(dir), "%s", sock_path);
	for (char *p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(dir, mode) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	return 0;
}

static int listen_on(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	unlink(path); /* stale: we hold the lock, so no live daemon owns it */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 512) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	/* root's daemon serves every user (SO_PEERCRED keeps them apart); a
	 * user's daemon serves that user only */
	chmod(path, geteuid() == 0 ? 0666 : 0600);
	return fd;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, 0, 's' }, { "foreground", no_argument, 0, 'f' },
		{ "log", required_argument, 0, 'l' },    { "log-level", required_argument, 0, 'L' },
		{ "max-clients", required_argument, 0, 'm' }, { "help", no_argument, 0, 'h' },
		{ "fingerprint", no_argument, 0, 'F' },
		{ 0, 0, 0, 0 },
	};
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)], lock_path[sizeof(path) + 8];
	char log_path[sizeof(path) + 8];
	struct dd_config cfg = { .max_clients = 4096 };
	const char *log_file = NULL;
	int foreground = 0, level = DSOCK_LOG_INFO, c, lock_fd, lfd, rc, up[2] = { -1, -1 };

	while ((c = getopt_long(argc, argv, "s:fl:L:m:h", opts, NULL)) != -1) {
		switch (c) {
		case 's': setenv("DSOCK_SOCKET", optarg, 1); break;
		case 'f': foreground = 1; break;
		case 'l': log_file = optarg; break;
		case 'L':
			level = dsock_log_level_parse(optarg);
			if (level < 0) {
				fprintf(stderr, "dsockd: bad log level '%s' (error, warn, info, debug)\n", optarg);
				return 2;
			}
			break;
		case 'm':
			cfg.max_clients = atoi(optarg);
			if (cfg.max_clients < 1 || cfg.max_clients > 1 << 20) {
				fprintf(stderr, "dsockd: --max-clients wants 1..1048576\n");
				return 2;
			}
			break;
		case 'h': usage(stdout); return 0;
		case 'F': {
			char fp[DD_FP_LEN], why[512];
			if (dd_hosts_fingerprint(fp, why, sizeof(why))) {
				fprintf(stderr, "dsockd: %s\n", why);
				return 1;
			}
			puts(fp);
			return 0;
		}
		default: usage(stderr); return 2;
		}
	}
	if (dd_provision_init()) /* each transport's settings */
		return 2;
	{
		/* the daemon keeps a transport's resource (an fd) per live
		 * connection (provision.h): as many fds as it may have: a
		 * failure only refuses pairings */
		struct rlimit rl;
		long nr_open = 0;
		FILE *f = fopen("/proc/sys/fs/nr_open", "re");
		if (f) {
			if (fscanf(f, "%ld", &nr_open) != 1)
				nr_open = 0;
			fclose(f);
		}
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
			struct rlimit all = { (rlim_t)nr_open, (rlim_t)nr_open };
			/* (raising the hard limit takes CAP_SYS_RESOURCE) */
			if (nr_open <= (long)rl.rlim_max || setrlimit(RLIMIT_NOFILE, &all) < 0) {
				rl.rlim_cur = rl.rlim_max;
				setrlimit(RLIMIT_NOFILE, &rl);
			}
		}
	}
	if (dsock_socket_path(path, sizeof(path))) {
		fprintf(stderr, "dsockd: socket path too long\n");
		return 2;
	}
	cfg.socket_path = path;
	if ((rc = make_dir(path)) < 0) {
		fprintf(stderr, "dsockd: cannot create the directory of %s: %s\n", path, strerror(-rc));
		return 1;
	}
	snprintf(lock_path, sizeof(lock_path), "%s.lock", path);
	lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lock_fd < 0) {
		fprintf(stderr, "dsockd: %s: %s\n", lock_path, strerror(errno));
		return 1;
	}
	if (flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno == EWOULDBLOCK)
			return 0; /* another daemon serves this path */
		fprintf(stderr, "dsockd: lock %s: %s\n", lock_path, strerror(errno));
		return 1;
	}
	lfd = listen_on(path);
	if (lfd < 0) {
		fprintf(stderr, "dsockd: cannot listen on %s: %s\n", path, strerror(-lfd));
		return 1;
	}
	if (!foreground) {
		int logfd;
		if (!log_file) {
			snprintf(log_path, sizeof(log_path), "%s.log", path);
			log_file = log_path;
		}
		logfd = open(log_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (logfd < 0) {
			fprintf(stderr, "dsockd: log %s: %s\n", log_file, strerror(errno));
			return 1;
		}
		if (pipe2(up, O_CLOEXEC) < 0)
			return 1;
		switch (fork()) {
		case -1:
			return 1;
		case 0:
			close(up[0]);
			break;
		default: {
			/* the socket is listening already: callers may connect;
			 * back once the lock names the daemon and its proof is
			 * set up (the pipe's end closes after that, or with the
			 * daemon) */
			char b;
			close(up[1]);
			while (read(up[0], &b, 1) < 0 && errno == EINTR)
				;
			return 0;
		}
		}
		setsid();
		if (fork() > 0)
			_exit(0);
		if (chdir("/") < 0)
			_exit(1);
		int null = open("/dev/null", O_RDWR);
		dup2(null, 0);
		dup2(null, 1);
		dup2(logfd, 2);
		close(null);
		dsock_log_setup("dsockd", logfd, level);
	} else {
		dsock_log_setup("dsockd", log_file ? open(log_file, O_WRONLY | O_CREAT | O_APPEND, 0600) : 2,
				level);
	}
	/* the pid (dsock stop's fallback) and the protocol version (dsock run
	 * warns of a daemon of another build) */
	if (ftruncate(lock_fd, 0) == 0)
		dprintf(lock_fd, "%d %d\n", getpid(), DSOCK_PROTO_VERSION);
	char perr[512];
	if (dd_policy_load(perr, sizeof(perr))) {
		DSOCK_ERR("pairing rules: %s; not serving", perr);
		unlink(path);
		return 1;
	}
	if (dd_policy_count())
		DSOCK_INFO("pairing rules: %d", dd_policy_count());
	dd_ident_start(path);
	/* the caller waits until here: the connections it makes next are
	 * marked for the kernel-recorded proof where the programs attached */
	if (up[1] >= 0)
		close(up[1]);
	rc = dd_serve(lfd, &cfg);
	dd_ident_stop();
	unlink(path);
	DSOCK_INFO("stopped");
	return rc;
}

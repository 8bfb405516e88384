/* Sockets inherited across exec: found at start-up by listing /proc/self/fd
 * with raw system calls (no malloc, no stdio: we run in the constructor). */
#include "lib/sock/sock.h"
#include "lib/base/proc.h"
#include "lib/base/real.h"
#include "common/proto.h"
#include "common/reason.h"
#include "common/rawsys.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

struct linux_dirent64 {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

static void adopt(int fd)
{
	struct stat st;
	int domain, type, protocol, listening = 0;
	socklen_t l = sizeof(int);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct dsock_sock *s, *old;

	if (dsock_sys(SYS_fstat, fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return;
	if (dsock_real.getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &l) < 0 ||
	    dsock_real.getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l) < 0 ||
	    dsock_real.getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &l) < 0)
		return;
	dsock_real.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &l);
	s = dsock_sock_new(domain, type, protocol);
	if (!s)
		return;
	atomic_fetch_or(&s->flags, DSOCK_SF_INHERITED);
	if (dsock_real.fcntl(fd, F_GETFL) & O_NONBLOCK)
		atomic_fetch_or(&s->flags, DSOCK_SF_NONBLOCK);
	if (listening) {
		s->state = DSOCK_ST_LISTENING;
		s->reason = DSOCK_R_LISTENER;
		atomic_fetch_or(&s->flags, DSOCK_SF_LISTENED);
	} else if (dsock_real.getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
		s->state = DSOCK_ST_CONNECTED;
		s->reason = DSOCK_R_INHERITED;
	}
	/* the daemon hears of it on registration (dsock_sock_replay, report.c) */
	if ((domain == AF_INET || domain == AF_INET6) && s->state != DSOCK_ST_OPEN)
		s->ev = DSOCK_EV_OPEN;
	old = dsock_fdt_swap(fd, s);
	if (old == DSOCK_FDT_FAIL)
		dsock_sock_put(s);
	else if (old)
		dsock_sock_put(old);
}

void dsock_sock_scan_inherited(void)
{
	char buf[4096];
	int dir = (int)dsock_sys(SYS_openat, AT_FDCWD, "/proc/self/fd",
			       O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	long n;

	if (dir < 0)
		return;
	while ((n = dsock_sys(SYS_getdents64, dir, buf, sizeof(buf))) > 0) {
		for (long off = 0; off < n;) {
			struct linux_dirent64 *d = (void *)(buf + off);
			char *end;
			long fd = strtol(d->d_name, &end, 10);

			off += d->d_reclen;
			if (end != d->d_name && !*end && fd != dir)
				adopt((int)fd);
		}
	}
	dsock_sys(SYS_close, dir);
}

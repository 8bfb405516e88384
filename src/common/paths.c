#include "common/paths.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/un.h>
#include <unistd.h>

int dsock_socket_path(char *buf, size_t n)
{
	const char *env = getenv("DSOCK_SOCKET");
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	int len;

	if (env && *env)
		len = snprintf(buf, n, "%s", env);
	else if (geteuid() == 0)
		len = snprintf(buf, n, "%s", DSOCK_HOST_SOCKET);
	else if (xdg && *xdg == '/')
		len = snprintf(buf, n, "%s/dsock/dsockd.sock", xdg);
	else
		len = snprintf(buf, n, "/tmp/dsock-%u/dsockd.sock", (unsigned)geteuid());
	if (len < 0 || (size_t)len >= n || (size_t)len >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return -ENAMETOOLONG;
	return 0;
}

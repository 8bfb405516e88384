#ifndef DSOCKD_SERVER_H
#define DSOCKD_SERVER_H

struct dd_config {
	const char *socket_path;
	int max_clients;
};

/* Serves until SIGTERM/SIGINT or a SHUTDOWN request.  listen_fd is bound and
 * listening.  Returns the exit status. */
int dd_serve(int listen_fd, const struct dd_config *cfg);

#endif

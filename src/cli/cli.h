/* Internals shared by the dsock CLI's commands. */
#ifndef DSOCK_CLI_H
#define DSOCK_CLI_H

#include <stddef.h>

/* Absolute paths of libdsock.so and dsockd, found beside this executable
 * (<prefix>/bin/dsock -> <prefix>/lib/libdsock.so); $DSOCK_LIB overrides. */
int cli_lib_path(char *buf, size_t n);
int cli_daemon_path(char *buf, size_t n);

/* Connects to the daemon: fd or -errno. */
int cli_connect(void);
/* Makes sure a daemon serves our socket path, starting one if needed.
 * Returns 0 or -errno (with a message printed). */
int cli_ensure_daemon(int quiet);
/* The running daemon's pid and protocol version from its lock file (the
 * version 0 if it wrote none: from before protocol 3).  0 or -errno. */
int cli_daemon_lock(int *pid, int *version);
/* Sends a request of type with no payload; for STAT_REQ calls line() for
 * each record until the end.  Returns 0 or -errno. */
int cli_request(int type, void (*line)(const char *text, void *arg), void *arg);

int cmd_run(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_stop(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_echo_server(int argc, char **argv);
int cmd_echo_client(int argc, char **argv);

#endif

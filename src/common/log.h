/* Logging for every part of dsock.  Writes whole lines with one write(2) on
 * a raw system call, so it is safe inside the preload library (no stdio, no
 * malloc, no interposed call). */
#ifndef DSOCK_LOG_H
#define DSOCK_LOG_H

enum dsock_log_level { DSOCK_LOG_ERROR, DSOCK_LOG_WARN, DSOCK_LOG_INFO, DSOCK_LOG_DEBUG };

/* Level from a name ("error".."debug") or -1. */
int dsock_log_level_parse(const char *s);
void dsock_log_setup(const char *prefix, int fd, int level);
int dsock_log_enabled(int level);
void dsock_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define DSOCK_ERR(...)  dsock_log(DSOCK_LOG_ERROR, __VA_ARGS__)
#define DSOCK_WARN(...) dsock_log(DSOCK_LOG_WARN, __VA_ARGS__)
#define DSOCK_INFO(...) dsock_log(DSOCK_LOG_INFO, __VA_ARGS__)
#define DSOCK_DBG(...) \
	do { if (dsock_log_enabled(DSOCK_LOG_DEBUG)) dsock_log(DSOCK_LOG_DEBUG, __VA_ARGS__); } while (0)

#endif

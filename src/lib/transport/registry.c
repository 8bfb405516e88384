/* The transports the library is built with, and the calls that go to each
 * registered one.  A transport is a folder filling struct dsock_transport
 * and one line in `builtin`. */
#include "lib/transport/transport.h"
#include "lib/sock/sock.h"
#include "common/log.h"
#include "common/reason.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

extern const struct dsock_transport dsock_shm_transport;
extern const struct dsock_transport dsock_socketpair_transport;

static const struct dsock_transport *const builtin[] = {
	&dsock_shm_transport,
	&dsock_socketpair_transport,
};

/* Every registered transport gets the process-wide hooks (one configured
 * off may still be handed connections by an exec); only those whose
 * `offers` flag is set are offered new connections. */
static const struct dsock_transport *transports[DSOCK_TRANSPORTS_MAX];
static int offers[DSOCK_TRANSPORTS_MAX];
static int ntransports;

/* 1 if the comma-separated list names name. */
static int named(const char *list, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = list; *p; p += strcspn(p, ",")) {
		p += *p == ',';
		if (!strncmp(p, name, n) && (p[n] == ',' || p[n] == '\0'))
			return 1;
	}
	return 0;
}

void dsock_transports_init(void)
{
	const char *list = getenv("DSOCK_TRANSPORTS");

	for (size_t i = 0; i < sizeof(builtin) / sizeof(builtin[0]); i++) {
		int r = builtin[i]->init ? builtin[i]->init() : 0;

		if (r < 0)
			DSOCK_WARN("transport %s unavailable: %s", builtin[i]->name, strerror(-r));
		else if (dsock_transport_register(builtin[i]))
			DSOCK_WARN("transport %s unavailable: too many transports", builtin[i]->name);
		else
			offers[ntransports - 1] =
				r == 0 && (list ? named(list, builtin[i]->name) : !builtin[i]->on_request);
	}
}

int dsock_transport_register(const struct dsock_transport *t)
{
	if (ntransports >= DSOCK_TRANSPORTS_MAX)
		return -ENOSPC;
	offers[ntransports] = 1;
	transports[ntransports++] = t;
	return 0;
}

int dsock_transport_offer(struct dsock_sock *s, int fd, int role, unsigned *reason)
{
	*reason = DSOCK_R_NO_TRANSPORT;
	for (int i = 0; i < ntransports; i++) {
		void *priv = NULL;

		if (!offers[i])
			continue;
		*reason = DSOCK_R_NONE;
		if (transports[i]->offer(s, fd, role, &priv, reason) == 0) {
			dsock_sock_attach(s, transports[i], priv);
			return 0;
		}
		if (*reason == DSOCK_R_NONE)
			*reason = DSOCK_R_NO_TRANSPORT;
	}
	return -ENOTSUP;
}

int dsock_transports_any(void)
{
	for (int i = 0; i < ntransports; i++)
		if (offers[i])
			return 1;
	return 0;
}

#define EACH(hook)                                               \
	void dsock_transports_##hook(void)                       \
	{                                                        \
		for (int i = 0; i < ntransports; i++)            \
			if (transports[i]->hook)                 \
				transports[i]->hook();           \
	}
EACH(adopt)
EACH(bells_off)
EACH(fork_prepare)
EACH(fork_child)
EACH(exit)

void dsock_transports_exec_done(int started)
{
	for (int i = 0; i < ntransports; i++)
		if (transports[i]->exec_done)
			transports[i]->exec_done(started);
}

int dsock_transports_before_sleep(int bell)
{
	int rang = 0;

	for (int i = 0; i < ntransports; i++)
		if (transports[i]->before_sleep)
			rang |= transports[i]->before_sleep(bell);
	return rang;
}

int dsock_transports_bell(unsigned *gen)
{
	for (int i = 0; i < ntransports; i++)
		if (transports[i]->bell)
			return transports[i]->bell(gen);
	return -1;
}

void dsock_transports_collect(int64_t now)
{
	for (int i = 0; i < ntransports; i++)
		if (transports[i]->collect)
			transports[i]->collect(now);
}

/* The reverse order of fork_prepare: locks taken in prepare are released
 * last to first. */
void dsock_transports_fork_parent(void)
{
	for (int i = ntransports - 1; i >= 0; i--)
		if (transports[i]->fork_parent)
			transports[i]->fork_parent();
}

size_t dsock_transports_exec_env(char *buf, size_t n, int spawn, const struct dsock_exec_target *t)
{
	size_t used = 0;

	for (int i = 0; i < ntransports; i++) {
		size_t l;

		if (!transports[i]->exec_env || n - used < 2)
			continue;
		l = transports[i]->exec_env(buf + used, n - used - 2, spawn, t);
		if (l) {
			buf[used + l] = '\0';
			used += l + 1;
		}
	}
	if (!used)
		return 0;
	buf[used] = '\0';
	return used + 1;
}

void dsock_transports_counts(long *carried, long *back)
{
	*carried = *back = 0;
	for (int i = 0; i < ntransports; i++) {
		long c = 0, b = 0;

		if (transports[i]->counts)
			transports[i]->counts(&c, &b);
		*carried += c;
		*back += b;
	}
}

/* Who may link with this host's daemon: the TLS context its links use
 * (this host's key and certificate, TLS 1.3 only, the peer's key checked
 * against the allow-list) and the allow-list itself, read at start and
 * again on SIGHUP (hostlink.h).  Hosts are numbered in a table that only
 * grows, so the number a link or a socket's record holds names the same
 * host after a reload. */
#ifndef DSOCKD_HOSTAUTH_H
#define DSOCKD_HOSTAUTH_H

#include <stddef.h>

#ifdef DSOCK_HAVE_TLS
#include <openssl/ssl.h>

/* Reads the allow-list at allow_path and makes the context with the key
 * at DSOCK_HOST_KEY (default /var/lib/dsock/host.key; made when
 * missing): 0, or -1 with why. */
int dd_hostauth_start(const char *allow_path, char *why, size_t n);
SSL_CTX *dd_hostauth_ctx(void);
/* This host's fingerprint. */
const char *dd_hostauth_fp(void);
/* The number of the host whose key cert holds, if the list names it now;
 * else -1. */
int dd_hostauth_host(X509 *cert);
void dd_hostauth_stop(void);
#endif

/* 1 if the list names host now. */
int dd_hostauth_allowed(int host);
/* The hosts the list names now. */
int dd_hostauth_count(void);
/* Reads the list again: 0, or -1 with why (the old list stays). */
int dd_hostauth_reload(char *why, size_t n);

#endif

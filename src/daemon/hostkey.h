/* A host's identity between daemons: its key (Ed25519, a PEM file only
 * root reads, made at the first start), the self-signed certificate the
 * daemon presents in TLS, and the allow-list of the other hosts' keys the
 * operator keeps (docs/SECURITY.md, "Between hosts").  A host is its
 * public key: a fingerprint, SHA-256 of the key's SubjectPublicKeyInfo,
 * written "sha256:" and 64 hex digits. */
#ifndef DSOCKD_HOSTKEY_H
#define DSOCKD_HOSTKEY_H

#include <stddef.h>

#define DD_FP_LEN 72 /* "sha256:" + 64 hex + NUL */

struct dd_allowed {
	char fp[DD_FP_LEN];
	char name[32];
};

#ifdef DSOCK_HAVE_TLS
#include <openssl/evp.h>
#include <openssl/x509.h>

/* Reads the key at path, or makes one there (mode 0600) when there is
 * none.  A key file that others than its owner may read or write is
 * refused.  NULL with why filled on failure. */
EVP_PKEY *dd_hostkey_load(const char *path, char *why, size_t n);
/* A self-signed certificate for key (the peer pins the key, not the
 * certificate). */
X509 *dd_hostkey_cert(EVP_PKEY *key);
/* The fingerprint of key: 0, or -1. */
int dd_hostkey_fp(EVP_PKEY *key, char out[DD_FP_LEN]);
#endif

/* Reads the allow-list at path: lines "sha256:HEX [name]", '#' comments.
 * The number of entries (into out, at most max), or -1 with why filled. */
int dd_allow_load(const char *path, struct dd_allowed *out, int max, char *why, size_t n);

#endif

/* The allow-list and the links' TLS context (hostauth.h). */
#include "daemon/hostauth.h"
#include "daemon/hostkey.h"
#include "daemon/hostlink.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALLOW_MAX 1024

/* Every host the allow-list has named since start; allowed_now says which
 * the list names now. */
static struct dd_allowed known[ALLOW_MAX];
static unsigned char allowed_now[ALLOW_MAX];
static int nknown, nallowed;
static char allow_path[512];

const char *dd_hosts_name(int host)
{
	return host >= 0 && host < nknown ? known[host].name : "?";
}

int dd_hostauth_allowed(int host)
{
	return host >= 0 && host < nknown && allowed_now[host];
}

int dd_hostauth_count(void)
{
	return nallowed;
}

int dd_hostauth_reload(char *why, size_t n)
{
	static struct dd_allowed list[ALLOW_MAX];
	int count = dd_allow_load(allow_path, list, ALLOW_MAX, why, n), i, k;

	if (count < 0)
		return -1;
	for (i = 0; i < count; i++) {
		for (k = 0; k < nknown && strcmp(known[k].fp, list[i].fp); k++)
			;
		if (k == nknown && nknown == ALLOW_MAX) {
			snprintf(why, n, "more than %d hosts named since start (restart the daemon)", ALLOW_MAX);
			return -1;
		}
	}
	memset(allowed_now, 0, sizeof(allowed_now));
	for (i = 0; i < count; i++) {
		for (k = 0; k < nknown && strcmp(known[k].fp, list[i].fp); k++)
			;
		if (k == nknown)
			nknown++;
		known[k] = list[i];
		allowed_now[k] = 1;
	}
	nallowed = count;
	return 0;
}

#ifdef DSOCK_HAVE_TLS
static SSL_CTX *ctx;
static char own_fp[DD_FP_LEN];

int dd_hostauth_host(X509 *cert)
{
	char fp[DD_FP_LEN];
	EVP_PKEY *k = cert ? X509_get0_pubkey(cert) : NULL;

	if (!k || dd_hostkey_fp(k, fp))
		return -1;
	for (int i = 0; i < nknown; i++)
		if (allowed_now[i] && !strcmp(known[i].fp, fp))
			return i;
	return -1;
}

/* The certificate is self-signed: what is checked is its key, pinned by
 * the allow-list, and TLS 1.3's CertificateVerify proves the peer holds
 * the private half.  Only the leaf counts. */
static int verify(int ok, X509_STORE_CTX *x)
{
	(void)ok;
	if (X509_STORE_CTX_get_error_depth(x) != 0)
		return 1;
	return dd_hostauth_host(X509_STORE_CTX_get_current_cert(x)) >= 0;
}

static const char *key_path(void)
{
	const char *key = getenv("DSOCK_HOST_KEY");

	return key && *key ? key : "/var/lib/dsock/host.key";
}

int dd_hosts_fingerprint(char *out, char *why, size_t n)
{
	EVP_PKEY *k = dd_hostkey_load(key_path(), why, n);
	int r = k ? dd_hostkey_fp(k, out) : -1;

	if (k && r)
		snprintf(why, n, "cannot hash the key");
	EVP_PKEY_free(k);
	return r;
}

int dd_hostauth_start(const char *allow, char *why, size_t n)
{
	EVP_PKEY *k;
	X509 *x;

	snprintf(allow_path, sizeof(allow_path), "%s", allow);
	if (dd_hostauth_reload(why, n) || !(k = dd_hostkey_load(key_path(), why, n)))
		return -1;
	x = dd_hostkey_cert(k);
	if (!x || dd_hostkey_fp(k, own_fp) || !(ctx = SSL_CTX_new(TLS_method())) ||
	    !SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) ||
	    !SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) || SSL_CTX_use_certificate(ctx, x) != 1 ||
	    SSL_CTX_use_PrivateKey(ctx, k) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
		snprintf(why, n, "TLS set-up failed");
		X509_free(x);
		EVP_PKEY_free(k);
		return -1;
	}
	X509_free(x);
	EVP_PKEY_free(k);
	/* every link proves its key in a full handshake: no tickets to resume */
	SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, verify);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	return 0;
}

SSL_CTX *dd_hostauth_ctx(void)
{
	return ctx;
}

const char *dd_hostauth_fp(void)
{
	return own_fp;
}

void dd_hostauth_stop(void)
{
	SSL_CTX_free(ctx);
	ctx = NULL;
	nallowed = 0;
	memset(allowed_now, 0, sizeof(allowed_now));
}

#else /* built without OpenSSL's headers */

int dd_hosts_fingerprint(char *out, char *why, size_t n)
{
	(void)out;
	snprintf(why, n, "built without TLS (libssl-dev)");
	return -1;
}
#endif

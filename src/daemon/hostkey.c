/* The host key, its certificate and the allow-list (hostkey.h). */
#include "daemon/hostkey.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef DSOCK_HAVE_TLS
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

EVP_PKEY *dd_hostkey_load(const char *path, char *why, size_t n)
{
	EVP_PKEY *k = NULL;
	struct stat st;
	FILE *f;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0 && errno == ENOENT) {
		/* made once: a new key is a new host to every allow-list (its
		 * directory too, private) */
		char dir[512], *slash;
		snprintf(dir, sizeof(dir), "%s", path);
		if ((slash = strrchr(dir, '/')) && slash != dir) {
			*slash = 0;
			mkdir(dir, 0700);
		}
		if (!(k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519"))) {
			snprintf(why, n, "cannot make a key");
			return NULL;
		}
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0 || !(f = fdopen(fd, "w"))) {
			snprintf(why, n, "%s: %s", path, strerror(errno));
			if (fd >= 0)
				close(fd);
			EVP_PKEY_free(k);
			return NULL;
		}
		if (!PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL) || fclose(f)) {
			snprintf(why, n, "%s: cannot write the key", path);
			unlink(path);
			EVP_PKEY_free(k);
			return NULL;
		}
		return k;
	}
	if (fd < 0) {
		snprintf(why, n, "%s: %s", path, strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (st.st_mode & 077) || st.st_uid != geteuid()) {
		snprintf(why, n, "%s: a host key must be a file of the daemon's user that nobody else may read "
			 "(chmod 600)", path);
		close(fd);
		return NULL;
	}
	if (!(f = fdopen(fd, "r"))) {
		close(fd);
		snprintf(why, n, "%s: %s", path, strerror(errno));
		return NULL;
	}
	k = PEM_read_PrivateKey(f, NULL, NULL, NULL);
	fclose(f);
	if (!k || EVP_PKEY_get_id(k) != EVP_PKEY_ED25519) {
		snprintf(why, n, "%s: not an Ed25519 private key in PEM", path);
		EVP_PKEY_free(k);
		return NULL;
	}
	return k;
}

X509 *dd_hostkey_cert(EVP_PKEY *key)
{
	X509 *x = X509_new();
	unsigned char serial[8];
	X509_NAME *name;
	ASN1_INTEGER *sn = NULL;
	BIGNUM *bn = NULL;

	if (!x || RAND_bytes(serial, sizeof(serial)) != 1 || !(bn = BN_bin2bn(serial, sizeof(serial), NULL)) ||
	    !(sn = BN_to_ASN1_INTEGER(bn, NULL)) || !X509_set_version(x, 2) || !X509_set_serialNumber(x, sn) ||
	    !X509_gmtime_adj(X509_getm_notBefore(x), -86400) ||
	    !X509_gmtime_adj(X509_getm_notAfter(x), 3650L * 86400) || !X509_set_pubkey(x, key) ||
	    !(name = X509_get_subject_name(x)) ||
	    !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"dsock host", -1, -1, 0) ||
	    !X509_set_issuer_name(x, name) || !X509_sign(x, key, NULL)) {
		X509_free(x);
		x = NULL;
	}
	ASN1_INTEGER_free(sn);
	BN_free(bn);
	return x;
}

int dd_hostkey_fp(EVP_PKEY *key, char out[DD_FP_LEN])
{
	unsigned char *der = NULL, md[SHA256_DIGEST_LENGTH];
	int len = i2d_PUBKEY(key, &der);

	if (len <= 0)
		return -1;
	SHA256(der, (size_t)len, md);
	OPENSSL_free(der);
	memcpy(out, "sha256:", 7);
	for (int i = 0; i < SHA256_DIGEST_LENGTH; i++)
		snprintf(out + 7 + 2 * i, 3, "%02x", md[i]);
	return 0;
}
#endif

static int fp_valid(const char *s)
{
	if (strncmp(s, "sha256:", 7) || strlen(s) != 71)
		return 0;
	for (int i = 7; i < 71; i++)
		if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
			return 0;
	return 1;
}

int dd_allow_load(const char *path, struct dd_allowed *out, int max, char *why, size_t n)
{
	char line[512], fp[128], name[128];
	int count = 0, lineno = 0;
	FILE *f = fopen(path, "re");

	if (!f) {
		snprintf(why, n, "%s: %s", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		char *hash = strchr(line, '#');
		int k;

		lineno++;
		if (hash)
			*hash = 0;
		name[0] = 0;
		k = sscanf(line, "%127s %31s", fp, name);
		if (k <= 0)
			continue;
		if (!fp_valid(fp) || count == max) {
			snprintf(why, n, "%s:%d: %s", path, lineno,
				 count == max ? "too many hosts" : "want 'sha256:<64 lower-case hex digits> [name]'");
			fclose(f);
			return -1;
		}
		snprintf(out[count].fp, sizeof(out[count].fp), "%s", fp);
		/* unnamed: the fingerprint's first digits */
		snprintf(out[count].name, sizeof(out[count].name), "%.31s", k == 2 ? name : fp + 7);
		if (k != 2)
			out[count].name[12] = 0;
		count++;
	}
	fclose(f);
	return count;
}

/* digest.c — sha256 (LFS files, the store's content addresses) and sha1 (git
 * blob ids of small hub files) through OpenSSL's libcrypto: a maintained,
 * hardware-accelerated implementation instead of our own. */
#include "registry_int.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct moe_digest {
	EVP_MD_CTX *ctx;
	int kind;
};

int moe_digest_new(moe_digest **out, int kind, moe_error *e)
{
	*out = NULL;
	moe_digest *d = calloc(1, sizeof *d);
	if (!d || !(d->ctx = EVP_MD_CTX_new())) {
		free(d);
		return moe_err(e, MOE_ENOMEM, "out of memory");
	}
	d->kind = kind;
	if (EVP_DigestInit_ex(d->ctx, kind == MOE_DIGEST_SHA1 ? EVP_sha1() : EVP_sha256(), NULL) != 1) {
		moe_digest_free(d);
		return moe_err(e, MOE_EINTERNAL, "libcrypto: digest initialisation failed");
	}
	*out = d;
	return 0;
}

void moe_digest_update(moe_digest *d, const void *p, size_t n)
{
	EVP_DigestUpdate(d->ctx, p, n);
}

void moe_digest_hex(moe_digest *d, char *hex)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	EVP_DigestFinal_ex(d->ctx, md, &len);
	for (unsigned i = 0; i < len; i++)
		sprintf(hex + 2 * i, "%02x", md[i]);
	hex[2 * len] = '\0';
}

void moe_digest_free(moe_digest *d)
{
	if (!d)
		return;
	EVP_MD_CTX_free(d->ctx);
	free(d);
}

int moe_digest_fd(moe_digest *d, int fd, int64_t len, const char *name, moe_error *e)
{
	enum { BUF = 1 << 20 };
	unsigned char *buf = malloc(BUF);
	if (!buf)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	uint64_t off = 0;
	for (;;) {
		size_t want = BUF;
		if (len >= 0) {
			if (off >= (uint64_t)len)
				break;
			if ((uint64_t)len - off < want)
				want = (size_t)((uint64_t)len - off);
		}
		ssize_t got = pread(fd, buf, want, (off_t)off);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			int rc = moe_err(e, MOE_EIO, "%s: read failed: %s", name, strerror(errno));
			free(buf);
			return rc;
		}
		if (got == 0) {
			if (len >= 0) {
				free(buf);
				return moe_err(e, MOE_EIO, "%s: file shorter than expected", name);
			}
			break;
		}
		moe_digest_update(d, buf, (size_t)got);
		off += (uint64_t)got;
	}
	free(buf);
	return 0;
}

int moe_sha256_file(const char *path, char hex[65], moe_error *e)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return moe_err(e, MOE_EIO, "%s: cannot open: %s", path, strerror(errno));
	moe_digest *d;
	int rc = moe_digest_new(&d, MOE_DIGEST_SHA256, e);
	if (rc == 0)
		rc = moe_digest_fd(d, fd, -1, path, e);
	if (rc == 0)
		moe_digest_hex(d, hex);
	moe_digest_free(d);
	close(fd);
	return rc;
}

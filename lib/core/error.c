/* error.c — error records: a code plus a message naming what went wrong. */
#include "core.h"

#include <string.h>

int moe_err(moe_error *e, int code, const char *fmt, ...)
{
	if (e) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(e->msg, sizeof e->msg, fmt, ap);
		va_end(ap);
		e->code = code;
	}
	return code;
}

int moe_err_prefix(moe_error *e, const char *fmt, ...)
{
	if (!e)
		return MOE_EINTERNAL;
	char prefix[MOE_ERRMSG_MAX], old[MOE_ERRMSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof prefix, fmt, ap);
	va_end(ap);
	memcpy(old, e->msg, sizeof old);
	old[sizeof old - 1] = '\0';
	snprintf(e->msg, sizeof e->msg, "%.200s: %.300s", prefix, old);
	return e->code;
}

const char *moe_strerror(int code)
{
	switch (code) {
	case MOE_OK: return "success";
	case MOE_EIO: return "input/output error";
	case MOE_ENOMEM: return "out of memory";
	case MOE_EFORMAT: return "malformed input";
	case MOE_EINVAL: return "invalid argument";
	case MOE_EUNSUPPORTED: return "not supported";
	case MOE_ERANGE: return "value out of range";
	case MOE_ECHECKSUM: return "checksum mismatch";
	case MOE_ENOTFOUND: return "not found";
	case MOE_ENET: return "network error";
	case MOE_EINTERNAL: return "internal error";
	}
	return "unknown error";
}

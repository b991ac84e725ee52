/* cli.c — shared helpers of the moe tools (see cli.h). */
#include "cli.h"
#include "registry.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *prog = "moe";

void cli_init(const char *argv0)
{
	const char *s = strrchr(argv0, '/');
	prog = s ? s + 1 : argv0;
	moe_out_install_signal_cleanup();
}

const char *cli_prog(void)
{
	return prog;
}

void die(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(EXIT_FAILURE);
}

void die_error(const moe_error *e)
{
	die("%s", e->msg[0] ? e->msg : moe_strerror(e->code));
}

void usage_error(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help' for more information.\n", prog);
	exit(EXIT_USAGE);
}

void print_version(void)
{
	printf("%s (%s) %s\n", prog, PACKAGE_NAME, PACKAGE_VERSION);
	char feat[256];
	moe_cpu_feature_string(moe_cpu_features(), feat, sizeof feat);
	printf("kernels: %s (cpu: %s)\n", moe_isa_name(moe_cpu_isa()), feat[0] ? feat : "baseline");
}

long cli_parse_long(const char *opt, const char *val, long min, long max)
{
	char *end;
	errno = 0;
	long v = strtol(val, &end, 10);
	if (errno || end == val || *end || v < min || v > max)
		usage_error("invalid value '%s' for %s (expected %ld..%ld)", val, opt, min, max);
	return v;
}

float cli_parse_float(const char *opt, const char *val, double min, double max)
{
	char *end;
	errno = 0;
	double v = strtod(val, &end);
	if (errno || end == val || *end || !(v >= min && v <= max))
		usage_error("invalid value '%s' for %s (expected %g..%g)", val, opt, min, max);
	return (float)v;
}

char *cli_model(const char *arg)
{
	moe_error e = {0};
	char *path;
	if (moe_registry_resolve(arg, &path, &e) < 0)
		die_error(&e);
	return path;
}

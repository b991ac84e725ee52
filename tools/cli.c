/* cli.c — shared helpers of the moe tools (see cli.h). */
#include "cli.h"
#include "experts.h"
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

/* Resolved paths live until exit: tools keep them in their options. */
static char **model_paths;
static size_t n_model_paths;

static void free_model_paths(void)
{
	for (size_t i = 0; i < n_model_paths; i++)
		free(model_paths[i]);
	free(model_paths);
	model_paths = NULL;
	n_model_paths = 0;
}

char *cli_model(const char *arg)
{
	moe_error e = {0};
	char *path;
	if (moe_registry_resolve(arg, &path, &e) < 0)
		die_error(&e);
	char **p = realloc(model_paths, (n_model_paths + 1) * sizeof *p);
	if (!p)
		die("out of memory");
	if (!model_paths)
		atexit(free_model_paths);
	model_paths = p;
	model_paths[n_model_paths++] = path;
	return path;
}

void cli_check_budget(const char *opt, const char *text, bool list)
{
	char *copy = strdup(text), *save = NULL;
	if (!copy)
		die("out of memory");
	int n = 0;
	for (char *tok = strtok_r(copy, list ? "," : "", &save); tok;
	     tok = strtok_r(NULL, list ? "," : "", &save), n++) {
		moe_error e = {0};
		uint64_t b;
		if (!strcmp(tok, "min") || (list && !strcmp(tok, "resident")))
			continue;
		/* any model size: only the syntax is checked here, percentages
		 * are taken of the model once it is loaded */
		if (moe_experts_parse_size(tok, 1, &b, &e) < 0)
			usage_error("%s: %s", opt, e.msg);
	}
	free(copy);
	if (n == 0)
		usage_error("%s needs a size", opt);
}

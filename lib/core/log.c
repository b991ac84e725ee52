/* log.c — leveled log messages to a sink the program chooses (stderr by
 * default); the library itself never writes to stdout. */
#include "core.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static moe_log_fn log_sink;
static void *log_user;
static int log_level = -1; /* -1: not yet read from the environment */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static int level_from_env(void)
{
	const char *s = getenv("MOE_LOG_LEVEL");
	if (!s)
		return MOE_LOG_WARN;
	if (!strcasecmp(s, "debug"))
		return MOE_LOG_DEBUG;
	if (!strcasecmp(s, "info"))
		return MOE_LOG_INFO;
	if (!strcasecmp(s, "error"))
		return MOE_LOG_ERROR;
	return MOE_LOG_WARN;
}

void moe_log_set_sink(moe_log_fn fn, void *user)
{
	pthread_mutex_lock(&log_lock);
	log_sink = fn;
	log_user = user;
	pthread_mutex_unlock(&log_lock);
}

void moe_log_set_level(int level)
{
	log_level = level;
}

void moe_log(int level, const char *fmt, ...)
{
	if (log_level < 0)
		log_level = level_from_env();
	if (level < log_level)
		return;
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&log_lock);
	if (log_sink) {
		log_sink(level, msg, log_user);
	} else {
		static const char *names[] = {"debug", "info", "warning", "error"};
		const char *prog = program_invocation_short_name;
		fprintf(stderr, "%s: %s: %s\n", prog, names[level < 0 ? 0 : level > 3 ? 3 : level], msg);
	}
	pthread_mutex_unlock(&log_lock);
}

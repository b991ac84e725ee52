/* cli.h — what every moe tool shares: the program name, GNU-style
 * --version, and die()/usage_error() with the fixed exit codes
 * (0 ok, 1 failure, 2 usage error), and model-name resolution. */
#ifndef MOE_CLI_H
#define MOE_CLI_H

#include "core.h"

enum { EXIT_USAGE = 2 };

/* Remember argv[0]'s base name and install the cleanup of temporary
 * output files on SIGINT/SIGTERM. */
void cli_init(const char *argv0);
const char *cli_prog(void);
/* "prog: message" on stderr, exit 1. */
_Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Report a library error and exit 1. */
_Noreturn void die_error(const moe_error *e);
/* "prog: message" + a --help hint on stderr, exit 2. */
_Noreturn void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* GNU-style version text on stdout. */
void print_version(void);
/* Parse a non-negative integer option value or exit 2 naming the option. */
long cli_parse_long(const char *opt, const char *val, long min, long max);
/* The same for a finite number in [min, max]. */
float cli_parse_float(const char *opt, const char *val, double min, double max);
/* The syntax of a --mem-budget value before any model is loaded: "min" or
 * a size ("1536M", "2G", "75%"); with list, comma-separated and "resident"
 * allowed too.  Exit 2 naming opt otherwise. */
void cli_check_budget(const char *opt, const char *text, bool list);
/* A model argument (-m): an existing file, or a name registered by moe-pull
 * (NAME, NAME:TAG, or the part after the last '/'), as a UTH path
 * (malloc'd).  Never uses the network.  Exits 1 with a message listing what
 * is available when the name is missing or ambiguous. */
char *cli_model(const char *arg);

#endif

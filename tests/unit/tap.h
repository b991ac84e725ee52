/* tap.h — a tiny single-header TAP producer for unit tests.
 *
 * Usage:   int main(void) { ok(1 + 1 == 2, "addition"); return tap_done(); }
 * Emits "ok N - name" / "not ok N - name" lines and a trailing plan; exit
 * status is 1 if any test failed.  tap_skip_all(reason) prints a
 * "1..0 # SKIP" plan and exits 0: the TAP driver takes the skip from the
 * plan and reports any non-zero exit (77 included) as an ERROR.
 */
#ifndef MOE_TAP_H
#define MOE_TAP_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_n_, tap_failed_;

static inline int tap_ok_(int cond, const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static inline int tap_ok_(int cond, const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	printf("%sok %d - ", cond ? "" : "not ", ++tap_n_);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (!cond) {
		tap_failed_++;
		printf("#   failed at %s:%d\n", file, line);
	}
	fflush(stdout);
	return cond;
}

#define ok(cond, ...) tap_ok_(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

/* Compare integers and report both values on failure. */
#define is_int(got, want, ...)                                                  \
	do {                                                                    \
		long long g_ = (long long)(got), w_ = (long long)(want);        \
		if (!ok(g_ == w_, __VA_ARGS__))                                 \
			printf("#   got %lld, want %lld\n", g_, w_);            \
	} while (0)

/* Compare strings (NULL-safe). */
#define is_str(got, want, ...)                                                  \
	do {                                                                    \
		const char *g_ = (got), *w_ = (want);                           \
		if (!ok(g_ && w_ && strcmp(g_, w_) == 0, __VA_ARGS__))          \
			printf("#   got \"%s\", want \"%s\"\n", g_ ? g_ : "(null)", \
			       w_ ? w_ : "(null)");                             \
	} while (0)

/* |got - want| <= tol */
#define is_near(got, want, tol, ...)                                            \
	do {                                                                    \
		double g_ = (got), w_ = (want);                                 \
		if (!ok(fabs(g_ - w_) <= (tol), __VA_ARGS__))                   \
			printf("#   got %.9g, want %.9g (tol %g)\n", g_, w_,       \
			       (double)(tol));                                  \
	} while (0)

static inline void tap_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void tap_diag(const char *fmt, ...)
{
	va_list ap;
	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

static inline void tap_skip_all(const char *reason)
{
	printf("1..0 # SKIP %s\n", reason);
	exit(0);
}

static inline int tap_done(void)
{
	printf("1..%d\n", tap_n_);
	return tap_failed_ ? 1 : 0;
}

#endif

/* core.h — the base of libmoecore: errors, logging, overflow-safe arithmetic,
 * arena allocator, thread pool, CPU feature detection, XDG paths, byte sources
 * and atomic output files.
 *
 * How to use: every library function that can fail returns an int, 0 on
 * success or a negative MOE_E* code, and fills a caller-owned moe_error with a
 * message naming the file/field and the problem.  The library never prints to
 * stdout and never exits; log messages go through moe_log() to a sink the
 * program chooses (stderr by default).
 */
#ifndef MOE_CORE_H
#define MOE_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---------------------------------------------------------------- errors */

/* Stable error codes; never renumbered. */
enum {
	MOE_OK = 0,
	MOE_EIO = -1,          /* read/write/open failed (errno in message) */
	MOE_ENOMEM = -2,       /* allocation failed */
	MOE_EFORMAT = -3,      /* malformed input file or request */
	MOE_EINVAL = -4,       /* bad argument from the caller/user */
	MOE_EUNSUPPORTED = -5, /* valid but not supported (arch, dtype, ...) */
	MOE_ERANGE = -6,       /* size/offset overflow or out of bounds */
	MOE_ECHECKSUM = -7,    /* checksum mismatch */
	MOE_ENOTFOUND = -8,    /* named thing (key, tensor, file) not present */
	MOE_ENET = -9,         /* network failure */
	MOE_EINTERNAL = -10,   /* a bug: invariant broken */
};

#define MOE_ERRMSG_MAX 512

typedef struct moe_error {
	int code;
	char msg[MOE_ERRMSG_MAX];
} moe_error;

/* Record an error (printf-style message) and return `code` so callers can
 * write `return moe_err(e, MOE_EFORMAT, "%s: bad magic", path);`.
 * `e` may be NULL. */
int moe_err(moe_error *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Prefix an existing message: "ctx: old message". Returns e->code. */
int moe_err_prefix(moe_error *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Short description of a code ("malformed input", ...). Never NULL. */
const char *moe_strerror(int code);

/* Propagate a negative result in one line. */
#define MOE_TRY(expr)                                                          \
	do {                                                                   \
		int moe_try_rc_ = (expr);                                      \
		if (moe_try_rc_ < 0)                                           \
			return moe_try_rc_;                                    \
	} while (0)

/* ----------------------------------------------------- checked arithmetic */

/* Return false on overflow, else store the result in *out. */
static inline bool moe_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
	return !__builtin_add_overflow(a, b, out);
}
static inline bool moe_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
	return !__builtin_mul_overflow(a, b, out);
}
/* Round x up to a multiple of align (a power of two); false on overflow. */
static inline bool moe_align_u64(uint64_t x, uint64_t align, uint64_t *out)
{
	uint64_t t;
	if (!moe_add_u64(x, align - 1, &t))
		return false;
	*out = t & ~(align - 1);
	return true;
}
/* True if [off, off+len) lies within [0, size). */
static inline bool moe_range_ok(uint64_t off, uint64_t len, uint64_t size)
{
	return off <= size && len <= size - off;
}

/* --------------------------------------------------------------- logging */

enum { MOE_LOG_DEBUG, MOE_LOG_INFO, MOE_LOG_WARN, MOE_LOG_ERROR };

typedef void (*moe_log_fn)(int level, const char *msg, void *user);

/* Install a sink (NULL restores the default: stderr, level >= threshold). */
void moe_log_set_sink(moe_log_fn fn, void *user);
/* Messages below `level` are dropped. Default MOE_LOG_WARN;
 * MOE_LOG_LEVEL=debug|info|warn|error in the environment overrides it. */
void moe_log_set_level(int level);
void moe_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ----------------------------------------------------------------- arena */

/* A bump allocator: many small allocations, one free.  Blocks grow as needed;
 * moe_arena_alloc returns NULL only when malloc fails. Memory is zeroed. */
typedef struct moe_arena_block moe_arena_block;
typedef struct moe_arena {
	moe_arena_block *head;
	size_t block_size;
	size_t used_total;
} moe_arena;

void moe_arena_init(moe_arena *a, size_t block_size);
void *moe_arena_alloc(moe_arena *a, size_t size, size_t align);
char *moe_arena_strndup(moe_arena *a, const char *s, size_t n);
void moe_arena_reset(moe_arena *a); /* free all but keep nothing */
void moe_arena_free(moe_arena *a);

/* ----------------------------------------------------------- thread pool */

/* A fixed pool of workers that run one data-parallel job at a time:
 * moe_pool_run calls fn(arg, i, n) for i in [0, n) where n is the thread count
 * (the caller's thread is i = 0) and returns when all have finished. */
typedef struct moe_pool moe_pool;
typedef void (*moe_pool_fn)(void *arg, int ith, int nth);

int moe_pool_create(moe_pool **out, int n_threads, moe_error *e);
int moe_pool_threads(const moe_pool *p);
void moe_pool_run(moe_pool *p, moe_pool_fn fn, void *arg);
void moe_pool_free(moe_pool *p);
/* Default thread count: physical cores as far as we can tell, at least 1. */
int moe_default_threads(void);

/* ------------------------------------------------------------------ cpu */

enum {
	MOE_CPU_AVX2 = 1u << 0,
	MOE_CPU_FMA = 1u << 1,
	MOE_CPU_F16C = 1u << 2,
	MOE_CPU_AVX512F = 1u << 3,
	MOE_CPU_AVX512BW = 1u << 4,
	MOE_CPU_AVX512VL = 1u << 5,
	MOE_CPU_AVX512VNNI = 1u << 6,
	MOE_CPU_AVX512BF16 = 1u << 7,
	MOE_CPU_AMX_TILE = 1u << 8,
	MOE_CPU_AMX_INT8 = 1u << 9,
	MOE_CPU_AMX_BF16 = 1u << 10,
	MOE_CPU_AVXVNNI = 1u << 11,
};

/* Instruction-set levels the kernels are built for; a level's parent (the
 * one whose kernels fill in what it has none for) comes before it. */
typedef enum {
	MOE_ISA_GENERIC = 0,
	MOE_ISA_AVX2 = 1,
	MOE_ISA_AVX512 = 2,
	MOE_ISA_AVXVNNI = 3,    /* AVX2 + AVX-VNNI (vpdpbusd on ymm) */
	MOE_ISA_AVX512BF16 = 4, /* AVX-512 + AVX512-BF16 (vdpbf16ps, BF16 weights) */
	MOE_ISA_COUNT           /* number of levels; keep last */
} moe_isa;

/* Features of this CPU (cpuid + OS support via xgetbv) minus those named
 * in MOE_CPU_DISABLE, cached. */
unsigned moe_cpu_features(void);
/* The ISA level to use: the best the CPU supports (moe_cpu_isa_for) among
 * the levels this build has (moe_isa_built), or the one the environment
 * variable MOE_ISA=generic|avx2|avxvnni|avx512|avx512bf16 names if it is
 * built and the CPU supports it (otherwise the best, with a warning that
 * says which). Cached after the first call. */
moe_isa moe_cpu_isa(void);
const char *moe_isa_name(moe_isa isa);
/* Space-separated feature names, e.g. "avx2 fma f16c avx512f". */
void moe_cpu_feature_string(unsigned features, char *buf, size_t n);
/* Forget the cached ISA and features (tests switching MOE_ISA or
 * MOE_CPU_DISABLE). */
void moe_cpu_reset_cache(void);

/* One kernel level: the CPU features its kernel file is compiled for (all
 * must be present to use it) and the level below it (-1 for generic). */
typedef struct moe_isa_info {
	moe_isa isa;
	const char *name;  /* as MOE_ISA spells it */
	unsigned features; /* MOE_CPU_* bits, all required */
	int parent;
} moe_isa_info;
/* The level's entry, or NULL for an unknown level. */
const moe_isa_info *moe_isa_info_get(moe_isa isa);
/* The best level whose required features are all in `features`: walking
 * the table in order, a usable level replaces the choice so far when it
 * descends from it, so among levels on different branches (avx512 and
 * avxvnni, both children of avx2) the one listed first is preferred. */
moe_isa moe_cpu_isa_for(unsigned features);
/* Whether this build has the level's kernels: configure leaves out a level
 * whose flags or intrinsics the compiler lacks (and the levels below it),
 * and every SIMD level on hosts other than x86.  moe_cpu_isa_for() ignores
 * this (it is the rule for a CPU); moe_cpu_isa() offers built levels only. */
bool moe_isa_built(moe_isa isa);
/* Feature bits named in a list such as "avx512bf16,avx512vnni" (unknown
 * names are ignored; NULL gives 0).  moe_cpu_features() leaves out the ones
 * named by the environment variable MOE_CPU_DISABLE, so tests can simulate
 * CPUs without them. */
unsigned moe_cpu_feature_parse(const char *list);

/* ----------------------------------------------------------------- time */

double moe_time_now(void); /* monotonic seconds */

/* ----------------------------------------------------------------- paths */

/* XDG base directories with the "moe" suffix, e.g. $XDG_CACHE_HOME/moe or
 * ~/.cache/moe. Writes into buf (size n); returns 0 or MOE_ERANGE/EINVAL. */
int moe_path_cache(char *buf, size_t n, moe_error *e);
int moe_path_data(char *buf, size_t n, moe_error *e);
int moe_path_config(char *buf, size_t n, moe_error *e);
/* mkdir -p with mode 0755 for each missing component. */
int moe_mkdir_p(const char *path, moe_error *e);

/* ---------------------------------------------------------- byte sources */

/* A readable byte range with random access: a file (pread), a memory buffer,
 * or a member of an archive (see hf.h).  Readers of GGUF/safetensors take a
 * source so the same parser works everywhere. */
typedef struct moe_src moe_src;
struct moe_src {
	const char *name; /* for messages: path or "archive.tar:member" */
	uint64_t size;
	/* Read exactly n bytes at off; error if short. */
	int (*read_at)(moe_src *s, uint64_t off, void *buf, size_t n, moe_error *e);
	void (*close)(moe_src *s);
	void *impl;
};

int moe_src_open_file(moe_src **out, const char *path, moe_error *e);
/* Wrap a memory buffer (not copied, must outlive the source). */
int moe_src_open_mem(moe_src **out, const char *name, const void *data,
		     uint64_t size, moe_error *e);
static inline int moe_src_read(moe_src *s, uint64_t off, void *buf, size_t n,
			       moe_error *e)
{
	return s->read_at(s, off, buf, n, e);
}
void moe_src_close(moe_src *s);

/* Read a whole (small) file into a NUL-terminated malloc'd buffer; refuses
 * files larger than max_size. */
int moe_read_file(const char *path, size_t max_size, char **out, size_t *len,
		  moe_error *e);

/* ------------------------------------------------------- atomic output */

/* An output file that appears complete or not at all: data goes to a
 * temporary file next to the target, which moe_out_commit fsyncs and renames
 * into place.  The path "-" means stdout (written directly; commit flushes).
 * moe_out_abort (or freeing without commit) removes the temporary file. */
typedef struct moe_out {
	int fd;
	bool is_stdout;
	bool seekable; /* lseek works: writers may go back to patch headers */
	uint64_t pos;  /* bytes written so far (current offset) */
	char *path;    /* final path */
	char *tmp;     /* temporary path (NULL for stdout) */
} moe_out;

int moe_out_open(moe_out *o, const char *path, moe_error *e);
/* MOE_EINVAL when output (a path, or "-" for standard output) is the same
 * file as input (a path, or "-" for standard input), also through links or
 * a redirection: writing it would destroy what is being read.  0 otherwise,
 * also when either does not exist yet. */
int moe_out_check_not_input(const char *output, const char *input, moe_error *e);
int moe_out_write(moe_out *o, const void *buf, size_t n, moe_error *e);
/* Write zero bytes until pos is a multiple of align. */
int moe_out_pad(moe_out *o, uint64_t align, moe_error *e);
/* Write at an absolute offset without moving pos (requires seekable). */
int moe_out_pwrite(moe_out *o, uint64_t off, const void *buf, size_t n, moe_error *e);
int moe_out_commit(moe_out *o, moe_error *e);
void moe_out_abort(moe_out *o);

/* Remove temporary output files on SIGINT/SIGTERM: tools call this once. */
void moe_out_install_signal_cleanup(void);

#endif

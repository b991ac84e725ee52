/* t-core.c — core module: errors, checked arithmetic, arena, thread pool,
 * ISA override, XDG paths, sources, atomic output. */
#include "core.h"
#include "tap.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void test_errors(void)
{
	moe_error e = {0};
	int rc = moe_err(&e, MOE_EFORMAT, "%s: bad magic", "x.uth");
	is_int(rc, MOE_EFORMAT, "moe_err returns its code");
	is_str(e.msg, "x.uth: bad magic", "message formatted");
	moe_err_prefix(&e, "converting %s", "a");
	is_str(e.msg, "converting a: x.uth: bad magic", "prefix prepended");
	ok(strcmp(moe_strerror(MOE_ECHECKSUM), "checksum mismatch") == 0, "strerror");
	ok(moe_err(NULL, MOE_EIO, "ignored") == MOE_EIO, "NULL error record allowed");
}

static void test_arith(void)
{
	uint64_t r;
	ok(moe_mul_u64(1ull << 32, 1ull << 31, &r) && r == 1ull << 63, "mul in range");
	ok(!moe_mul_u64(1ull << 32, 1ull << 32, &r), "mul overflow detected");
	ok(!moe_add_u64(UINT64_MAX, 1, &r), "add overflow detected");
	ok(moe_align_u64(4097, 4096, &r) && r == 8192, "align up");
	ok(!moe_align_u64(UINT64_MAX - 5, 4096, &r), "align overflow detected");
	ok(moe_range_ok(10, 90, 100) && !moe_range_ok(10, 91, 100) && !moe_range_ok(101, 0, 100),
	   "range check");
	ok(!moe_range_ok(50, UINT64_MAX, 100), "range check with huge length");
}

static void test_arena(void)
{
	moe_arena a;
	moe_arena_init(&a, 64);
	char *p = moe_arena_alloc(&a, 10, 1);
	double *d = moe_arena_alloc(&a, sizeof(double) * 3, _Alignof(double));
	char *big = moe_arena_alloc(&a, 1000, 1); /* larger than a block */
	ok(p && d && big, "arena allocations succeed");
	ok(((uintptr_t)d % _Alignof(double)) == 0, "arena alignment respected");
	ok(big[999] == 0 && d[2] == 0.0, "arena memory is zeroed");
	char *s = moe_arena_strndup(&a, "hello world", 5);
	is_str(s, "hello", "arena strndup");
	moe_arena_free(&a);
}

typedef struct {
	int n;
	long sums[8];
	int seen[8];
} pool_job;

static void pool_fn(void *arg, int ith, int nth)
{
	pool_job *j = arg;
	long s = 0;
	for (int i = ith; i < j->n; i += nth)
		s += i;
	j->sums[ith] = s;
	j->seen[ith]++;
}

static void test_pool(void)
{
	moe_error e = {0};
	moe_pool *p;
	/* a lost wake-up hangs a job: the alarm turns that into a failure */
	alarm(60);
	ok(moe_pool_create(&p, 4, &e) == 0, "pool of 4 created");
	for (int round = 0; round < 50; round++) {
		pool_job j = {.n = 1000};
		moe_pool_run(p, pool_fn, &j);
		long total = 0;
		int all_once = 1;
		for (int i = 0; i < 4; i++) {
			total += j.sums[i];
			all_once &= j.seen[i] == 1;
		}
		if (round == 0 || round == 49) {
			is_int(total, 999 * 1000 / 2, "pool computed sum 0..999 (round %d)", round);
			ok(all_once, "every thread ran exactly once (round %d)", round);
		}
	}
	/* jobs after the workers have gone to sleep (a pause longer than
	 * their spin) and right at the edge of it: each must wake every
	 * worker */
	int woke = 1;
	for (int round = 0; round < 40; round++) {
		struct timespec gap = {0, round % 2 ? 3000000 : 1000L * (round * 2)};
		nanosleep(&gap, NULL);
		pool_job j = {.n = 100};
		moe_pool_run(p, pool_fn, &j);
		long total = 0;
		for (int i = 0; i < 4; i++)
			total += j.sums[i], woke &= j.seen[i] == 1;
		woke &= total == 99 * 100 / 2;
	}
	alarm(0);
	ok(woke, "jobs after sleeps of 0 to 3 ms: every worker woke and ran once");
	is_int(moe_pool_threads(p), 4, "thread count");
	moe_pool_free(p);
	ok(moe_pool_create(&p, 0, &e) == MOE_EINVAL, "zero threads rejected");
}

static void test_cpu(void)
{
	setenv("MOE_ISA", "generic", 1);
	moe_cpu_reset_cache();
	is_int(moe_cpu_isa(), MOE_ISA_GENERIC, "MOE_ISA=generic forces the generic path");
	setenv("MOE_ISA", "avx512", 1);
	moe_cpu_reset_cache();
	moe_isa isa = moe_cpu_isa();
	unsigned f = moe_cpu_features();
	ok(isa == MOE_ISA_AVX512 || !(f & MOE_CPU_AVX512F) || !moe_isa_built(MOE_ISA_AVX512),
	   "avx512 chosen when the CPU has it (and this build has it)");
	unsetenv("MOE_ISA");
	moe_cpu_reset_cache();
	char buf[256];
	moe_cpu_feature_string(MOE_CPU_AVX2 | MOE_CPU_FMA, buf, sizeof buf);
	is_str(buf, "avx2 fma", "feature string");
	moe_cpu_feature_string(f, buf, sizeof buf);
	tap_diag("cpu: %s; isa %s", buf, moe_isa_name(moe_cpu_isa()));
}

static void test_paths(void)
{
	moe_error e = {0};
	char buf[512];
	setenv("XDG_CACHE_HOME", "/tmp/xdgc", 1);
	ok(moe_path_cache(buf, sizeof buf, &e) == 0, "cache path");
	is_str(buf, "/tmp/xdgc/moe", "XDG_CACHE_HOME respected");
	setenv("XDG_CACHE_HOME", "relative", 1);
	setenv("HOME", "/home/u", 1);
	moe_path_cache(buf, sizeof buf, &e);
	is_str(buf, "/home/u/.cache/moe", "relative XDG value ignored, HOME fallback");
	unsetenv("XDG_DATA_HOME");
	moe_path_data(buf, sizeof buf, &e);
	is_str(buf, "/home/u/.local/share/moe", "data dir fallback");
	char small[8];
	ok(moe_path_config(small, sizeof small, &e) == MOE_ERANGE, "too-small buffer rejected");
}

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)))
		if (de->d_name[0] != '.' || (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")))
			n++;
	if (d)
		closedir(d);
	return n;
}

static void test_src_and_out(void)
{
	moe_error e = {0};
	char dir[] = "/tmp/moe-t-core.XXXXXX";
	ok(mkdtemp(dir) != NULL, "temp dir");
	char path[256];
	snprintf(path, sizeof path, "%s/out.bin", dir);

	moe_out o;
	ok(moe_out_open(&o, path, &e) == 0, "out open");
	ok(access(path, F_OK) != 0, "target does not exist before commit");
	ok(moe_out_write(&o, "abc", 3, &e) == 0 && moe_out_pad(&o, 8, &e) == 0, "write + pad");
	ok(moe_out_pwrite(&o, 0, "X", 1, &e) == 0, "pwrite patches");
	is_int(o.pos, 8, "position after padding");
	ok(moe_out_commit(&o, &e) == 0, "commit");
	is_int(count_entries(dir), 1, "only the final file exists after commit");

	moe_src *s;
	ok(moe_src_open_file(&s, path, &e) == 0, "src open");
	is_int(s->size, 8, "src size");
	char buf[8];
	ok(moe_src_read(s, 0, buf, 8, &e) == 0 && memcmp(buf, "Xbc\0\0\0\0\0", 8) == 0,
	   "src content");
	ok(moe_src_read(s, 4, buf, 5, &e) == MOE_EFORMAT && strstr(e.msg, "past end"),
	   "read past end rejected: %s", e.msg);
	moe_src_close(s);

	char other[256];
	snprintf(other, sizeof other, "%s/aborted.bin", dir);
	ok(moe_out_open(&o, other, &e) == 0, "second out");
	moe_out_write(&o, "zzz", 3, &e);
	moe_out_abort(&o);
	is_int(count_entries(dir), 1, "abort leaves nothing behind");

	ok(moe_out_open(&o, "/nonexistent-dir/x", &e) == MOE_EIO && strstr(e.msg, "/nonexistent-dir/x"),
	   "unwritable target named: %s", e.msg);

	char *txt;
	size_t len;
	ok(moe_read_file(path, 4, &txt, &len, &e) == MOE_EFORMAT && strstr(e.msg, "too large"),
	   "read_file size limit");
	ok(moe_read_file(path, 100, &txt, &len, &e) == 0 && len == 8 && txt[8] == 0, "read_file");
	free(txt);

	static const char mem[] = "hello";
	ok(moe_src_open_mem(&s, "mem", mem, 5, &e) == 0, "mem src");
	ok(moe_src_read(s, 1, buf, 4, &e) == 0 && memcmp(buf, "ello", 4) == 0, "mem read");
	ok(moe_src_read(s, UINT64_MAX, buf, 1, &e) < 0, "mem read with huge offset rejected");
	moe_src_close(s);

	unlink(path);
	rmdir(dir);
}

int main(void)
{
	test_errors();
	test_arith();
	test_arena();
	test_pool();
	test_cpu();
	test_paths();
	test_src_and_out();
	return tap_done();
}

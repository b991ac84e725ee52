/* moe-bench — measure models: throughput as llama-bench does (pp, tg,
 * pp+tg, at a depth; mean ± stddev and median tokens/s), perplexity as
 * llama-perplexity does, KL-divergence against a saved base, expert routing
 * statistics, and the machine's memory bandwidth (--stream-bw) that tg
 * figures are a percentage of.  main() parses options into a bench_opts
 * and calls one mode; the measuring itself is in libmoecore (bench.h). */
#include "bench.h"
#include "cli.h"
#include "experts.h"
#include "model.h"
#include "quant.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LIST_MAX 32
#define MODELS_MAX 64
#define TEXT_MAX ((size_t)1 << 30)

typedef struct int_list {
	int v[LIST_MAX];
	int n;
} int_list;

typedef struct bench_opts {
	const char *models[MODELS_MAX];
	int n_models;
	int_list prompts, gens, threads, batches, depths, parallel;
	int pg[LIST_MAX][2];
	int n_pg;
	int reps;
	int fmt;
	int kv_type;
	uint64_t seed;
	bool stream_bw;
	int stream_mib;
	double bw_given;      /* --bw GB/S: a bandwidth measured before */
	const char *ppl_file; /* --perplexity */
	int n_ctx, n_chunks;
	const char *kl_base_out, *kl_in;
	const char *expert_stats, *prompt_file;
	bool verbose;
	bool batch_given;
	const char *mem_budget;     /* --mem-budget LIST (sizes, commas) */
	const char *expert_profile; /* --expert-profile: warm start */
	double pin;                 /* --pin FRACTION */
	int policy;                 /* --policy */
	bool no_prefetch;           /* --no-prefetch */
	int lookahead;              /* --lookahead (0: the store's default) */
	bool no_overlap;            /* --no-overlap */
	bool plan;                  /* --plan */
} bench_opts;

static void help(void)
{
	printf("Usage: %s -m MODEL [-m MODEL]... [OPTION]...          (throughput)\n"
	       "  or:  %s -m MODEL --perplexity FILE [-c N] [--chunks N] [--kl-base OUT]\n"
	       "  or:  %s -m MODEL --kl BASE [--perplexity FILE]\n"
	       "  or:  %s -m MODEL --expert-stats OUT.json --perplexity FILE\n"
	       "  or:  %s -m MODEL --expert-stats OUT.json -f FILE [-n N]\n"
	       "  or:  %s -m MODEL --imatrix OUT -f TEXT [-c N] [--chunks N]\n"
	       "  or:  %s -m MODEL (--mem-budget LIST [-n N] [-f FILE] | --plan)\n"
	       "  or:  %s --endpoint URL [-np LIST] [-p N] [-n N] [-r N]\n"
	       "  or:  %s --stream-bw\n"
	       "Measure models in the UTH format: speed like llama-bench, perplexity like\n"
	       "llama-perplexity, quantisation quality (KL-divergence against a base), expert\n"
	       "routing statistics, and the memory bandwidth speeds are compared with.\n"
	       "\n"
	       "Throughput (each test warmed up once, then repeated -r times):\n"
	       "  -m, --model=MODEL     a UTH file or moe-pull name (repeat for several)\n"
	       "  -p, --n-prompt=LIST   prompt processing of N tokens (default 512; 0: none)\n"
	       "  -n, --n-gen=LIST      generation tests of N tokens (default 128; 0: none)\n"
	       "  -pg, --pg=PP,TG       a test of PP prompt tokens then TG generated\n"
	       "                        (repeatable)\n"
	       "  -np, --parallel=LIST  instead: N sequences at once, each with -p prompt and\n"
	       "                        -n generated tokens (llama-batched-bench); aggregate\n"
	       "                        prefill and generation tokens/s per N\n"
	       "  -d, --n-depth=LIST    run the tests after filling the context with N tokens\n"
	       "                        (default 0)\n"
	       "  -r, --repetitions=N   timed runs per test (default 5)\n"
	       "  -t, --threads=LIST    thread counts (default: the number of cores)\n"
	       "  -b, --batch-size=LIST prompt tokens per forward batch (default 512)\n"
	       "      --kv-type=TYPE    KV cache type: f16 (default) or q8_0\n"
	       "      --seed=N          seed of the random token ids (default 1)\n"
	       "  -o, --output=FORMAT   md (default), csv, json or jsonl\n"
	       "      --endpoint=URL    instead: TTFT, inter-token latency and tokens/s of an\n"
	       "                        OpenAI-compatible server (http://HOST:PORT or unix:PATH)\n"
	       "                        with -np streaming clients; also -p, -n, -r, --model,\n"
	       "                        --api-key\n"
	       "      --stream-bw       measure the memory bandwidth first (STREAM triad, all\n"
	       "                        threads); tg rows then show their share of it\n"
	       "      --stream-mib=N    size of each of the three arrays in MiB (default 256;\n"
	       "                        implies --stream-bw)\n"
	       "      --bw=GB/S         use this bandwidth instead of measuring it\n"
	       "\n"
	       "Quality:\n"
	       "      --perplexity=FILE perplexity of the text in FILE: chunks of -c tokens,\n"
	       "                        the second half of each scored\n"
	       "  -c, --ctx-size=N      chunk length (default 512)\n"
	       "      --chunks=N        evaluate at most N chunks (default: all)\n"
	       "      --kl-base=OUT     save the model's log-probabilities over the text to OUT\n"
	       "      --kl=BASE         compare with a base saved by --kl-base: KL-divergence,\n"
	       "                        top-1 agreement, perplexity ratio (the text comes from\n"
	       "                        BASE)\n"
	       "      --expert-stats=OUT  write expert routing statistics (JSON) over the text\n"
	       "                        of --perplexity/--kl, or over a greedy generation\n"
	       "  -f, --prompt-file=FILE  the prompt of that generation (-n tokens generated)\n"
	       "      --imatrix=OUT     with -f FILE: an importance matrix for moe-quant\n"
	       "                        --imatrix, over the text of FILE in chunks of -c\n"
	       "                        tokens (default 512; --chunks N: at most N)\n"
	       "\n"
	       "Models larger than RAM:\n"
	       "      --mem-budget=LIST after 8 prompt tokens, -n single tokens (random ids, or\n"
	       "                        the text of -f FILE) with the\n"
	       "                        experts streamed under each budget (1536M, 2G, 50%%, ...;\n"
	       "                        'min': one layer of experts; commas between;\n"
	       "                        'resident': no streaming): tokens/s,\n"
	       "                        expert hit rate, lookahead\n"
	       "                        prediction accuracy, bytes read per token, I/O wait,\n"
	       "                        experts computed under I/O, the disk's O_DIRECT\n"
	       "                        bandwidth (measured before each budget), the read rate\n"
	       "                        reached and the %% of the I/O bound (their ratio)\n"
	       "      --policy=NAME     expert cache eviction: nextuse (default), lru or lfru\n"
	       "      --expert-profile=FILE  warm start from an --expert-stats profile\n"
	       "      --pin=FRACTION    with --expert-profile: pin that share of the cache\n"
	       "      --no-prefetch     no router-lookahead prefetch (for comparison)\n"
	       "      --lookahead=N     predict the experts of the next N layers (1-%d,\n"
	       "                        default %d); the prediction accuracy per distance\n"
	       "      --no-overlap      wait for all of a layer's experts before computing any\n"
	       "                        (for comparison with computing them as they arrive)\n"
	       "      --plan            measure this machine (available memory, memory and disk\n"
	       "                        bandwidth) and predict tokens/s at a few budgets, with\n"
	       "                        the routing of --expert-profile if given; recommend one\n"
	       "\n"
	       "  -v, --verbose         progress on standard error (default when it is a tty)\n"
	       "      --help            display this help and exit\n"
	       "      --version         output version information and exit\n"
	       "\n"
	       "LIST is one number or several separated by commas (1,2).\n"
	       "Exit status: 0 success, 1 failure, 2 usage error.\n"
	       "See moe-bench(1).\n",
	       cli_prog(), cli_prog(), cli_prog(), cli_prog(), cli_prog(), cli_prog(), cli_prog(),
	       cli_prog(), cli_prog(),
	       MOE_EXPERTS_MAX_LOOKAHEAD, MOE_EXPERTS_LOOKAHEAD);
}

static void parse_list(const char *opt, const char *val, int min, int max, int_list *l)
{
	char buf[256];
	if (strlen(val) >= sizeof buf)
		usage_error("%s: list too long", opt);
	strcpy(buf, val);
	l->n = 0;
	for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (l->n == LIST_MAX)
			usage_error("%s: at most %d values", opt, LIST_MAX);
		l->v[l->n++] = (int)cli_parse_long(opt, tok, min, max);
	}
	if (l->n == 0)
		usage_error("%s needs a value", opt);
}

static void parse_args(int argc, char **argv, bench_opts *o)
{
	enum {
		OPT_HELP = 256,
		OPT_VERSION,
		OPT_PG,
		OPT_KV_TYPE,
		OPT_SEED,
		OPT_STREAM,
		OPT_STREAM_MIB,
		OPT_BW,
		OPT_PPL,
		OPT_CHUNKS,
		OPT_KL_BASE,
		OPT_KL,
		OPT_EXPERTS, OPT_MEM_BUDGET, OPT_POLICY, OPT_XPROFILE, OPT_PIN, OPT_NO_PREFETCH, OPT_LOOKAHEAD, OPT_NO_OVERLAP, OPT_PLAN,
		OPT_PARALLEL,
	};
	static const struct option longopts[] = {
		{"model", required_argument, NULL, 'm'},
		{"n-prompt", required_argument, NULL, 'p'},
		{"n-gen", required_argument, NULL, 'n'},
		{"pg", required_argument, NULL, OPT_PG},
		{"n-depth", required_argument, NULL, 'd'},
		{"parallel", required_argument, NULL, OPT_PARALLEL},
		{"repetitions", required_argument, NULL, 'r'},
		{"threads", required_argument, NULL, 't'},
		{"batch-size", required_argument, NULL, 'b'},
		{"kv-type", required_argument, NULL, OPT_KV_TYPE},
		{"seed", required_argument, NULL, OPT_SEED},
		{"output", required_argument, NULL, 'o'},
		{"stream-bw", no_argument, NULL, OPT_STREAM},
		{"stream-mib", required_argument, NULL, OPT_STREAM_MIB},
		{"bw", required_argument, NULL, OPT_BW},
		{"perplexity", required_argument, NULL, OPT_PPL},
		{"ctx-size", required_argument, NULL, 'c'},
		{"chunks", required_argument, NULL, OPT_CHUNKS},
		{"kl-base", required_argument, NULL, OPT_KL_BASE},
		{"kl", required_argument, NULL, OPT_KL},
		{"expert-stats", required_argument, NULL, OPT_EXPERTS},
		{"mem-budget", required_argument, NULL, OPT_MEM_BUDGET},
		{"policy", required_argument, NULL, OPT_POLICY},
		{"expert-profile", required_argument, NULL, OPT_XPROFILE},
		{"pin", required_argument, NULL, OPT_PIN},
		{"no-prefetch", no_argument, NULL, OPT_NO_PREFETCH},
		{"lookahead", required_argument, NULL, OPT_LOOKAHEAD},
		{"no-overlap", no_argument, NULL, OPT_NO_OVERLAP},
		{"plan", no_argument, NULL, OPT_PLAN},
		{"prompt-file", required_argument, NULL, 'f'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, OPT_HELP},
		{"version", no_argument, NULL, OPT_VERSION},
		{NULL, 0, NULL, 0},
	};
	*o = (bench_opts){.reps = 5, .seed = 1, .stream_mib = 256, .n_chunks = -1};
	o->prompts = (int_list){.v = {512}, .n = 1};
	o->gens = (int_list){.v = {128}, .n = 1};
	o->threads = (int_list){.v = {moe_default_threads()}, .n = 1};
	o->batches = (int_list){.v = {512}, .n = 1};
	o->depths = (int_list){.v = {0}, .n = 1};
	bool quality_opt = false, throughput_opt = false;
	int c;
	/* llama-bench spells it -pg; getopt would read that as -p g */
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "-pg") == 0)
			argv[i] = "--pg";
		else if (strcmp(argv[i], "-np") == 0)
			argv[i] = "--parallel";
	while ((c = getopt_long(argc, argv, "m:p:n:d:r:t:b:o:c:f:v", longopts, NULL)) != -1) {
		switch (c) {
		case 'm':
			if (o->n_models == MODELS_MAX)
				usage_error("at most %d models", MODELS_MAX);
			o->models[o->n_models++] = cli_model(optarg);
			break;
		case 'p':
			parse_list("-p", optarg, 0, 1 << 20, &o->prompts);
			throughput_opt = true;
			break;
		case 'n': parse_list("-n", optarg, 0, 1 << 20, &o->gens); break;
		case 'd':
			parse_list("-d", optarg, 0, 1 << 22, &o->depths);
			throughput_opt = true;
			break;
		case 't': parse_list("-t", optarg, 1, 1024, &o->threads); break;
		case 'b':
			parse_list("-b", optarg, 1, 1 << 16, &o->batches);
			o->batch_given = true;
			break;
		case 'r':
			o->reps = (int)cli_parse_long("-r", optarg, 1, 100000);
			throughput_opt = true;
			break;
		case OPT_PG: {
			char *comma = strchr(optarg, ',');
			if (!comma)
				usage_error("-pg needs PP,TG (e.g. -pg 512,128), not '%s'", optarg);
			if (o->n_pg == LIST_MAX)
				usage_error("at most %d -pg tests", LIST_MAX);
			*comma = '\0';
			o->pg[o->n_pg][0] = (int)cli_parse_long("-pg", optarg, 1, 1 << 20);
			o->pg[o->n_pg][1] = (int)cli_parse_long("-pg", comma + 1, 1, 1 << 20);
			o->n_pg++;
			throughput_opt = true;
			break;
		}
		case OPT_PARALLEL:
			parse_list("-np", optarg, 1, 4096, &o->parallel);
			throughput_opt = true;
			break;
		case OPT_KV_TYPE:
			/* f32 is not offered: the engine reads kv_type 0 (MOE_F32) as
			 * "the default", F16 */
			o->kv_type = moe_type_from_name(optarg);
			if (o->kv_type != MOE_F16 && o->kv_type != MOE_Q8_0)
				usage_error("--kv-type must be f16 or q8_0, not '%s'", optarg);
			break;
		case OPT_SEED:
			o->seed = (uint64_t)cli_parse_long("--seed", optarg, 0, 1L << 62);
			break;
		case 'o':
			o->fmt = moe_bench_format_from_name(optarg);
			if (o->fmt < 0)
				usage_error("-o must be md, csv, json or jsonl, not '%s'", optarg);
			break;
		case OPT_STREAM: o->stream_bw = true; break;
		case OPT_STREAM_MIB:
			o->stream_mib = (int)cli_parse_long("--stream-mib", optarg, 1, 1 << 16);
			o->stream_bw = true;
			break;
		case OPT_BW: o->bw_given = cli_parse_float("--bw", optarg, 0.001, 1e6); break;
		case OPT_PPL: o->ppl_file = optarg; break;
		case 'c':
			o->n_ctx = (int)cli_parse_long("-c", optarg, 4, 1 << 22);
			quality_opt = true;
			break;
		case OPT_CHUNKS:
			o->n_chunks = (int)cli_parse_long("--chunks", optarg, 1, 1 << 30);
			quality_opt = true;
			break;
		case OPT_KL_BASE: o->kl_base_out = optarg; break;
		case OPT_KL: o->kl_in = optarg; break;
		case OPT_EXPERTS: o->expert_stats = optarg; break;
		case OPT_MEM_BUDGET:
			cli_check_budget("--mem-budget", optarg, true);
			o->mem_budget = optarg;
			break;
		case OPT_POLICY:
			if ((o->policy = moe_experts_policy_parse(optarg)) < 0)
				usage_error("--policy: nextuse, lru or lfru, not '%s'", optarg);
			break;
		case OPT_XPROFILE: o->expert_profile = optarg; break;
		case OPT_NO_PREFETCH: o->no_prefetch = true; break;
		case OPT_LOOKAHEAD:
			o->lookahead = (int)cli_parse_long("--lookahead", optarg, 1, MOE_EXPERTS_MAX_LOOKAHEAD);
			break;
		case OPT_NO_OVERLAP: o->no_overlap = true; break;
		case OPT_PLAN: o->plan = true; break;
		case OPT_PIN: o->pin = cli_parse_float("--pin", optarg, 0, 1); break;
		case 'f': o->prompt_file = optarg; break;
		case 'v': o->verbose = true; break;
		case OPT_HELP: help(); exit(0);
		case OPT_VERSION: print_version(); exit(0);
		default: usage_error("unknown option");
		}
	}
	if (optind < argc)
		usage_error("unexpected argument '%s'", argv[optind]);
	bool quality = o->ppl_file || o->kl_in;
	if (o->n_models == 0 && !(o->stream_bw && !quality && !o->expert_stats))
		usage_error("no model given (-m FILE)");
	if (o->kl_base_out && o->kl_in)
		usage_error("--kl-base saves a base, --kl compares with one: use one of them");
	if (o->kl_base_out && !o->ppl_file)
		usage_error("--kl-base needs the text: --perplexity FILE");
	if ((o->kl_base_out || o->expert_stats) && o->n_models > 1)
		usage_error("--kl-base and --expert-stats take one model");
	if (o->expert_stats && !quality && !o->prompt_file)
		usage_error(
			"--expert-stats needs a text: --perplexity FILE, --kl BASE or -f PROMPT");
	if (o->prompt_file && ((!o->expert_stats && !o->mem_budget) || quality))
		usage_error("-f gives the prompt of an --expert-stats generation");
	if (quality_opt && !quality)
		usage_error("-c and --chunks go with --perplexity or --kl");
	if (throughput_opt && (quality || o->expert_stats))
		usage_error(
			"throughput options (-p, -pg, -d, -r) do not go with --perplexity, --kl "
			"or --expert-stats");
	if ((o->stream_bw || o->bw_given > 0) && (quality || o->expert_stats))
		usage_error("--stream-bw and --bw go with throughput tests");
	if (o->prompt_file && o->gens.n > 1)
		usage_error("-n takes one value with -f");
	if (o->plan && (o->mem_budget || quality || o->expert_stats || o->n_models != 1))
		usage_error("--plan takes one model and no other test");
	if ((o->lookahead || o->no_prefetch || o->no_overlap) && !o->mem_budget)
		usage_error("--lookahead, --no-prefetch and --no-overlap go with --mem-budget");
	if (o->pin > 0 && !o->expert_profile)
		usage_error("--pin pins experts of an --expert-profile: give one");
	if ((o->expert_profile || o->pin > 0) && !o->mem_budget && !(o->plan && !o->pin))
		usage_error("--expert-profile and --pin go with --mem-budget (--plan takes a profile)");
	if (o->mem_budget && (quality || o->expert_stats || o->parallel.n || o->n_models != 1))
		usage_error("--mem-budget takes one model and no other test");
	if (o->parallel.n && (o->n_pg || o->depths.n > 1 || o->depths.v[0]))
		usage_error("-np does not go with -pg or -d");
}

static bool progress_on(const bench_opts *o)
{
	return o->verbose || isatty(STDERR_FILENO);
}

static void load_model(const char *path, moe_model **m, double *load_s)
{
	moe_error e = {0};
	double t0 = moe_time_now();
	if (moe_model_load(m, path, &e) < 0)
		die_error(&e);
	*load_s = moe_time_now() - t0;
}

static void env_init(moe_bench_env *env, char *cpu, size_t cpu_len)
{
	moe_bench_cpu_name(cpu, cpu_len);
	*env = (moe_bench_env){.build_commit = PACKAGE_NAME " " PACKAGE_VERSION,
			       .cpu_info = cpu,
			       .isa = moe_isa_name(moe_cpu_isa())};
}

static int max_threads(const bench_opts *o)
{
	int t = 0;
	for (int i = 0; i < o->threads.n; i++)
		t = o->threads.v[i] > t ? o->threads.v[i] : t;
	return t;
}

static void measure_stream(const bench_opts *o, moe_bench_env *env)
{
	moe_error e = {0};
	moe_stream_result sr;
	if (progress_on(o))
		fprintf(stderr, "%s: memory bandwidth: 3 x %d MiB, %d threads...\n", cli_prog(),
			o->stream_mib, max_threads(o));
	if (moe_bench_stream((size_t)o->stream_mib << 20, max_threads(o), 0, &sr, &e) < 0)
		die_error(&e);
	env->stream_gbs = sr.triad_gbs;
	env->stream_read_gbs = sr.read_gbs;
	env->stream_threads = sr.n_threads;
	env->stream_array_bytes = sr.array_bytes;
}

/* --stream-bw alone: the bandwidth in the chosen format. */
static void print_stream(const bench_opts *o, const moe_bench_env *env)
{
	if (o->fmt == MOE_BENCH_MD) {
		printf("memory bandwidth: triad %.1f GB/s, read %.1f GB/s (%d threads, 3 x %zu MiB "
		       "arrays, best of 10)\n",
		       env->stream_gbs, env->stream_read_gbs, env->stream_threads,
		       env->stream_array_bytes >> 20);
		return;
	}
	if (o->fmt == MOE_BENCH_CSV) {
		printf("\"triad_gbs\",\"read_gbs\",\"n_threads\",\"array_bytes\",\"cpu_info\"\n"
		       "%.3f,%.3f,%d,%zu,\"%s\"\n",
		       env->stream_gbs, env->stream_read_gbs, env->stream_threads,
		       env->stream_array_bytes, env->cpu_info);
		return;
	}
	json_t *j = json_pack("{s:f,s:f,s:i,s:I,s:s}", "triad_gbs", env->stream_gbs, "read_gbs",
			      env->stream_read_gbs, "n_threads", env->stream_threads, "array_bytes",
			      (json_int_t)env->stream_array_bytes, "cpu_info", env->cpu_info);
	if (!j)
		die("out of memory");
	char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
	json_decref(j);
	if (!s)
		die("out of memory");
	puts(s);
	free(s);
}

/* ------------------------------------------------------------ throughput */

typedef struct row_buf {
	moe_bench_row *rows;
	size_t n, cap;
} row_buf;

static void run_one(const bench_opts *o, const moe_model *m, const moe_bench_model_row *mr,
		    const moe_bench_test *t, const moe_bench_env *env, row_buf *rb)
{
	moe_error e = {0};
	if (rb->n == rb->cap) {
		rb->cap = rb->cap ? rb->cap * 2 : 16;
		rb->rows = realloc(rb->rows, rb->cap * sizeof *rb->rows);
		if (!rb->rows)
			die("out of memory");
	}
	moe_bench_row *r = &rb->rows[rb->n];
	*r = (moe_bench_row){.model = mr, .test = *t, .n_samples = (size_t)t->reps};
	uint64_t *samples = calloc((size_t)t->reps, sizeof *samples);
	if (!samples)
		die("out of memory");
	r->samples_ns = samples;
	moe_bench_time_iso(r->test_time, sizeof r->test_time);
	char name[64];
	moe_bench_test_name(t, name, sizeof name);
	if (moe_bench_run(m, t, samples, &e) < 0)
		die("%s: %s: %s", mr->filename, name, e.msg);
	rb->n++;
	if (progress_on(o)) {
		moe_bench_derived d;
		moe_bench_derive(r, env, NULL, &d);
		fprintf(stderr, "%s: %s %s t=%d b=%d: %.2f ± %.2f t/s (median %.2f)\n", cli_prog(),
			mr->info.type, name, t->n_threads, t->n_batch, d.avg_ts, d.stddev_ts,
			d.median_ts);
	}
}

/* -np: llama-batched-bench's test for every -p x -n x -np x -t x -b. */
static int run_batched(const bench_opts *o, moe_bench_env *env)
{
	moe_error e = {0};
	size_t n_rows = 0, cap = 0;
	moe_batched_row *rows = NULL;
	moe_bench_model_row *mrows = calloc((size_t)o->n_models, sizeof *mrows);
	if (!mrows)
		die("out of memory");
	for (int mi = 0; mi < o->n_models; mi++) {
		moe_bench_model_row *mr = &mrows[mi];
		moe_model *m;
		moe_bench_peak_rss_reset();
		load_model(o->models[mi], &m, &mr->load_s);
		mr->filename = o->models[mi];
		if (moe_bench_describe(m, &mr->info, &e) < 0)
			die_error(&e);
		for (int ti = 0; ti < o->threads.n; ti++)
			for (int bi = 0; bi < o->batches.n; bi++)
				for (int pi = 0; pi < o->prompts.n; pi++)
					for (int gi = 0; gi < o->gens.n; gi++)
						for (int li = 0; li < o->parallel.n; li++) {
							moe_batched_test t = {
								.n_pp = o->prompts.v[pi],
								.n_tg = o->gens.v[gi],
								.n_pl = o->parallel.v[li],
								.n_batch = o->batches.v[bi],
								.n_threads = o->threads.v[ti],
								.kv_type = o->kv_type ? o->kv_type : MOE_F16,
								.reps = o->reps,
								.seed = o->seed};
							if (n_rows == cap &&
							    !(rows = realloc(rows, (cap = cap * 2 + 8) *
											   sizeof *rows)))
								die("out of memory");
							moe_batched_row *r = &rows[n_rows++];
							*r = (moe_batched_row){.model = mr};
							r->pp_ns = calloc((size_t)t.reps, sizeof *r->pp_ns);
							r->tg_ns = calloc((size_t)t.reps, sizeof *r->tg_ns);
							if (!r->pp_ns || !r->tg_ns)
								die("out of memory");
							moe_bench_time_iso(r->test_time, sizeof r->test_time);
							if (progress_on(o))
								fprintf(stderr, "%s: %s: pp %d tg %d x %d sequences\n",
									cli_prog(), o->models[mi], t.n_pp, t.n_tg,
									t.n_pl);
							if (moe_bench_batched_run(m, &t, r, &e) < 0)
								die("%s: %s", o->models[mi], e.msg);
						}
		mr->peak_rss = moe_bench_peak_rss();
		moe_model_free(m);
	}
	int rc = moe_batched_report(stdout, (moe_bench_format)o->fmt, env, rows, n_rows, &e);
	for (size_t i = 0; i < n_rows; i++) {
		free(rows[i].pp_ns);
		free(rows[i].tg_ns);
	}
	free(rows);
	free(mrows);
	if (rc < 0)
		die_error(&e);
	return 0;
}

static int run_throughput(const bench_opts *o, moe_bench_env *env)
{
	moe_error e = {0};
	moe_bench_model_row *mrows = calloc((size_t)o->n_models, sizeof *mrows);
	row_buf rb = {0};
	if (!mrows)
		die("out of memory");
	for (int mi = 0; mi < o->n_models; mi++) {
		moe_bench_model_row *mr = &mrows[mi];
		moe_model *m;
		moe_bench_peak_rss_reset();
		load_model(o->models[mi], &m, &mr->load_s);
		mr->filename = o->models[mi];
		if (moe_bench_describe(m, &mr->info, &e) < 0)
			die_error(&e);
		for (int ti = 0; ti < o->threads.n; ti++)
			for (int bi = 0; bi < o->batches.n; bi++)
				for (int di = 0; di < o->depths.n; di++) {
					moe_bench_test t = {.n_depth = o->depths.v[di],
							    .n_batch = o->batches.v[bi],
							    .n_threads = o->threads.v[ti],
							    .kv_type = o->kv_type ? o->kv_type
										  : MOE_F16,
							    .reps = o->reps,
							    .seed = o->seed};
					for (int i = 0; i < o->prompts.n; i++) {
						if (!o->prompts.v[i])
							continue;
						t.n_prompt = o->prompts.v[i];
						t.n_gen = 0;
						run_one(o, m, mr, &t, env, &rb);
					}
					for (int i = 0; i < o->gens.n; i++) {
						if (!o->gens.v[i])
							continue;
						t.n_prompt = 0;
						t.n_gen = o->gens.v[i];
						run_one(o, m, mr, &t, env, &rb);
					}
					for (int i = 0; i < o->n_pg; i++) {
						t.n_prompt = o->pg[i][0];
						t.n_gen = o->pg[i][1];
						run_one(o, m, mr, &t, env, &rb);
					}
				}
		mr->peak_rss = moe_bench_peak_rss();
		moe_model_free(m);
	}
	int rc = moe_bench_report(stdout, (moe_bench_format)o->fmt, env, rb.rows, rb.n, &e);
	for (size_t i = 0; i < rb.n; i++)
		free((void *)rb.rows[i].samples_ns);
	free(rb.rows);
	free(mrows);
	if (rc < 0)
		die_error(&e);
	return 0;
}

/* --------------------------------------------------------------- quality */

typedef struct ppl_progress {
	const bench_opts *o;
	bool to_stdout; /* md: the running values are part of the output */
} ppl_progress;

static void chunk_done(void *user, int chunk, const moe_ppl_result *r)
{
	ppl_progress *pp = user;
	FILE *f = pp->to_stdout ? stdout : stderr;
	if (!pp->to_stdout && !progress_on(pp->o))
		return;
	if (r->has_kl)
		fprintf(f, "[%d]%.4f (KLD %.6f, same top %.2f%%),", chunk, r->ppl, r->kl.kld,
			100.0 * r->kl.same_top);
	else
		fprintf(f, "[%d]%.4f,", chunk, r->ppl);
	if (chunk == r->n_chunks)
		fputc('\n', f);
	fflush(f);
}

static char *read_text(const char *path, size_t *len)
{
	moe_error e = {0};
	char *buf;
	if (moe_read_file(path, TEXT_MAX, &buf, len, &e) < 0)
		die_error(&e);
	return buf;
}

static void write_expert_stats(const moe_expert_stats *es, const char *model, const char *source,
			       const char *text, const bench_opts *o, int n_gen)
{
	moe_error e = {0};
	json_t *info = json_object();
	json_object_set_new(info, "model", json_string(model));
	json_object_set_new(info, "source", json_string(source));
	json_object_set_new(info, "text", json_string(text));
	if (n_gen >= 0)
		json_object_set_new(info, "n_gen", json_integer(n_gen));
	int rc = moe_expert_stats_write(es, info, o->expert_stats, &e);
	json_decref(info);
	if (rc < 0)
		die_error(&e);
}

static int run_quality(const bench_opts *o)
{
	moe_error e = {0};
	size_t len = 0;
	char *text = o->ppl_file ? read_text(o->ppl_file, &len) : NULL;
	moe_ppl_result *res = calloc((size_t)o->n_models, sizeof *res);
	moe_ppl_row *rows = calloc((size_t)o->n_models, sizeof *rows);
	if (!res || !rows)
		die("out of memory");
	bool md = o->fmt == MOE_BENCH_MD;
	int batch = o->batch_given ? o->batches.v[0] : 512;
	for (int mi = 0; mi < o->n_models; mi++) {
		moe_model *m;
		double load_s;
		load_model(o->models[mi], &m, &load_s);
		moe_expert_stats *es = NULL;
		if (o->expert_stats && moe_expert_stats_new(&es, m, batch, &e) < 0)
			die_error(&e);
		ppl_progress pp = {.o = o, .to_stdout = md};
		moe_ppl_params p = {.n_ctx = o->n_ctx,
				    .n_chunks = o->n_chunks,
				    .n_batch = batch,
				    .n_threads = o->threads.v[0],
				    .kv_type = o->kv_type,
				    .kld_out = o->kl_base_out,
				    .kld_in = o->kl_in,
				    .model_name = o->models[mi],
				    .route_fn = es ? moe_expert_stats_route : NULL,
				    .route_user = es,
				    .chunk_done = chunk_done,
				    .user = &pp};
		if (md && o->n_models > 1)
			printf("model: %s\n", o->models[mi]);
		if (progress_on(o))
			fprintf(stderr, "%s: %s: perplexity over %s...\n", cli_prog(),
				o->models[mi], o->kl_in ? o->kl_in : o->ppl_file);
		if (moe_bench_perplexity(m, text, len, &p, &res[mi], &e) < 0)
			die("%s: %s", o->models[mi], e.msg);
		rows[mi] = (moe_ppl_row){.model_filename = o->models[mi],
					 .text = o->ppl_file ? o->ppl_file : o->kl_in,
					 .r = &res[mi]};
		if (md && moe_ppl_report(stdout, MOE_BENCH_MD, &rows[mi], 1, &e) < 0)
			die_error(&e);
		if (es) {
			write_expert_stats(es, o->models[mi], o->kl_in ? "kl" : "perplexity",
					   rows[mi].text, o, -1);
			moe_expert_stats_free(es);
		}
		moe_model_free(m);
	}
	if (!md &&
	    moe_ppl_report(stdout, (moe_bench_format)o->fmt, rows, (size_t)o->n_models, &e) < 0)
		die_error(&e);
	free(rows);
	free(res);
	free(text);
	return 0;
}

/* Expert statistics over a greedy generation from a prompt file. */
static int run_expert_gen(const bench_opts *o)
{
	moe_error e = {0};
	size_t len, n_ids;
	int32_t *ids;
	char *text = read_text(o->prompt_file, &len);
	moe_model *m;
	double load_s;
	load_model(o->models[0], &m, &load_s);
	if (!m->tok)
		die("%s: the model has no tokenizer", o->models[0]);
	if (moe_tokenizer_encode(m->tok, text, len, true, true, &ids, &n_ids, &e) < 0)
		die_error(&e);
	int n_gen = o->gens.v[0], batch = o->batch_given ? o->batches.v[0] : 512;
	moe_expert_stats *es;
	moe_engine *eng;
	moe_seq *ctx;
	moe_engine_params ep = {.kv_size = (int)(n_ids + (size_t)n_gen + 1),
				.n_threads = o->threads.v[0],
				.n_batch = batch,
				.kv_type = o->kv_type};
	if (moe_expert_stats_new(&es, m, batch, &e) < 0 || moe_engine_new(&eng, m, &ep, &e) < 0 ||
	    moe_seq_new(&ctx, eng, &e) < 0)
		die_error(&e);
	moe_engine_set_route_callback(eng, moe_expert_stats_route, es);
	if (moe_bench_greedy(m, ctx, ids, n_ids, n_gen, &e) < 0)
		die("%s: %s", o->models[0], e.msg);
	write_expert_stats(es, o->models[0], "generation", o->prompt_file, o, n_gen);
	if (progress_on(o))
		fprintf(stderr,
			"%s: expert statistics over %zu prompt and %d generated tokens in %s\n",
			cli_prog(), n_ids, n_gen, o->expert_stats);
	moe_seq_free(ctx);
	moe_engine_free(eng);
	moe_expert_stats_free(es);
	moe_model_free(m);
	free(ids);
	free(text);
	return 0;
}

/* --endpoint URL (lib/bench/endpoint.c): an OpenAI-compatible server's TTFT,
 * inter-token latency and aggregate tokens/s with -np N streaming clients;
 * its own options: -p N (prompt of about N tokens), -n N, -np LIST, -r N
 * (requests per client), --model NAME, --api-key KEY. */
static int run_endpoint(int argc, char **argv)
{
	moe_endpoint_params ep = {.n_predict = 128, .reps = 5};
	int_list np = {.v = {1}, .n = 1};
	int n_prompt = 512;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		const char *eq = strchr(a, '=');
		if (strncmp(a, "--", 2) == 0 && eq) /* --opt=value */
			v = eq + 1;
		else if (!v)
			usage_error("%s needs a value", a);
		else
			i++;
		size_t al = eq && strncmp(a, "--", 2) == 0 ? (size_t)(eq - a) : strlen(a);
#define IS(name) (al == strlen(name) && strncmp(a, name, al) == 0)
		if (IS("--endpoint")) ep.url = v;
		else if (IS("-p") || IS("--n-prompt")) n_prompt = (int)cli_parse_long("-p", v, 1, 1 << 20);
		else if (IS("-n") || IS("--n-gen")) ep.n_predict = (int)cli_parse_long("-n", v, 1, 1 << 20);
		else if (IS("-np") || IS("--parallel")) parse_list("-np", v, 1, 4096, &np);
		else if (IS("-r") || IS("--repetitions")) ep.reps = (int)cli_parse_long("-r", v, 1, 100000);
		else if (IS("--model") || IS("-m")) ep.model = v;
		else if (IS("--api-key")) ep.api_key = v;
		else usage_error("%s does not go with --endpoint", a);
#undef IS
	}
	/* " the" is one token in SentencePiece and byte-level BPE vocabularies */
	char *prompt = malloc((size_t)n_prompt * 4 + 1);
	if (!prompt)
		die("out of memory");
	for (int i = 0; i < n_prompt; i++)
		memcpy(prompt + 4 * i, " the", 4);
	prompt[4 * n_prompt] = 0;
	ep.prompt = prompt;
	printf("| endpoint | clients | prompt tok | gen tok | requests | TTFT ms median | TTFT ms max "
	       "| ITL ms median | tokens/s |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n");
	for (int i = 0; i < np.n; i++) {
		moe_endpoint_result r;
		moe_error e = {0};
		ep.n_clients = np.v[i];
		if (moe_bench_endpoint_run(&ep, &r, &e) < 0)
			die_error(&e);
		if (r.n_failed)
			fprintf(stderr, "%s: %d of %d requests failed: %s\n", cli_prog(), r.n_failed,
				r.n_requests, r.first_error);
		printf("| %s | %d | %.0f | %d | %d | %.2f | %.2f | %.2f | %.2f |\n", ep.url, np.v[i],
		       r.prompt_tokens.median, ep.n_predict, r.n_requests - r.n_failed,
		       r.ttft_ms.median, r.ttft_ms.max, r.itl_ms.median, r.tokens_per_s);
		fflush(stdout);
	}
	free(prompt);
	return 0;
}

/* The disk as the expert store reads it: expert-sized reads one at a time
 * (qd1) and at the store's queue depth (qdn, the bound's). */
static void measure_disk(const moe_model *m, moe_disk_bw *qd1, moe_disk_bw *qdn)
{
	moe_error e = {0};
	if (moe_bench_disk_bw(m, 1, 512u << 20, qd1, &e) < 0 ||
	    moe_bench_disk_bw(m, moe_experts_queue_depth(m), 512u << 20, qdn, &e) < 0)
		die_error(&e);
}

/* --plan: the fit planner. */
static void run_plan(const bench_opts *o)
{
	moe_error e = {0};
	moe_model *m;
	double load_s;
	load_model(o->models[0], &m, &load_s);
	moe_stream_result sr;
	moe_plan_params pp = {.mem_available = moe_bench_mem_available(),
			      .profile = o->expert_profile};
	if (moe_bench_stream(256u << 20, o->threads.v[0], 3, &sr, &e) < 0)
		die_error(&e);
	moe_disk_bw qd1, qdn;
	measure_disk(m, &qd1, &qdn);
	pp.disk_bw = qdn.bytes_s;
	pp.mem_bw = sr.read_gbs * 1e9;
	moe_plan pl;
	if (moe_bench_plan(m, &pp, &pl, &e) < 0)
		die_error(&e);
	printf("model: %s: %.1f MiB of weights, %.1f MiB non-expert, %.2f MiB per expert slot, "
	       "%.1f MiB read per token\n"
	       "machine: %.1f MiB available, memory %.1f GB/s (read, %d threads), disk %.2f GB/s "
	       "at %u reads in flight, %.2f GB/s one at a time (%.2f MiB reads%s)\nrouting: %s\n\n"
	       "| --mem-budget | slots | hit %% | MB read/token | predicted t/s | fits |\n"
	       "|---:|---:|---:|---:|---:|:---|\n",
	       o->models[0], (double)(pl.fixed + pl.experts) / 1048576, (double)pl.fixed / 1048576,
	       (double)pl.slot / 1048576, pl.active / 1048576, (double)pp.mem_available / 1048576,
	       sr.read_gbs, sr.n_threads, qdn.bytes_s / 1e9, qdn.depth, qd1.bytes_s / 1e9,
	       qdn.read_bytes / 1048576, qdn.direct ? ", O_DIRECT" : ", buffered: O_DIRECT refused",
	       o->expert_profile ? o->expert_profile : "uniform (no --expert-profile)");
	for (int i = 0; i < pl.n; i++) {
		const moe_plan_row *r = &pl.rows[i];
		printf("| %.0fM | %llu | %.1f | %.1f | %.2f | %s |\n", (double)r->budget / 1048576,
		       (unsigned long long)r->slots, 100 * r->hit_rate, r->read_per_token / 1e6, r->tok_s,
		       r->is_fit ? "largest that fits" : r->fits ? "yes" : "no");
	}
	if (pl.recommended)
		printf("\nrecommended: --mem-budget %.0fM\n", (double)pl.recommended / 1048576);
	else
		printf("\nthe model does not fit in the available memory, even streamed\n");
	moe_model_free(m);
}

/* --mem-budget LIST: one cold streamed run per budget. */
static void run_budgets(const bench_opts *o, moe_bench_env *env)
{
	moe_error e = {0};
	moe_model *m;
	double load_s;
	(void)env;
	load_model(o->models[0], &m, &load_s);
	moe_disk_bw qd1, qdn;
	uint64_t all = moe_experts_fixed_bytes(m) + moe_experts_total_bytes(m);
	bool json = o->fmt == MOE_BENCH_JSON || o->fmt == MOE_BENCH_JSONL;
	json_t *arr = json_array();
	if (!json)
		printf("model: %s; weights %.1f MiB (non-expert %.1f MiB)\n\n"
		       "| budget MiB | slots | t/s | hit %% | predicted %% (1/2.. layers ahead) | prefetch used %% | MB read/token "
		       "| I/O wait s | overlap %% | disk GB/s QD%u | QD1 | read GB/s | I/O bound t/s "
		       "| %% of bound | %% of QD1 bound |\n"
		       "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
		       o->models[0], (double)all / 1048576, (double)moe_experts_fixed_bytes(m) / 1048576,
		       moe_experts_queue_depth(m));
	int32_t *ids = NULL;
	size_t n_ids = 0;
	int n_prompt = 8, n_gen = o->gens.v[0];
	if (o->prompt_file) {
		size_t len;
		char *text = read_text(o->prompt_file, &len);
		if (!m->tok || moe_tokenizer_encode(m->tok, text, len, true, false, &ids, &n_ids, &e) < 0)
			die("%s: %s", o->prompt_file, m->tok ? e.msg : "the model has no tokenizer");
		free(text);
		if (n_ids < 16)
			die("%s: too short (%zu tokens)", o->prompt_file, n_ids);
		if ((size_t)n_gen + 9 > n_ids)
			n_gen = (int)n_ids - 9;
	}
	char *list = strdup(o->mem_budget), *save = NULL;
	for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		/* the disk again for each budget: on a shared machine its bandwidth
		 * drifts, and the %% of the bound is only as good as this figure */
		measure_disk(m, &qd1, &qdn);
		double bw = qdn.bytes_s;
		moe_budget_params p = {.policy = o->policy, .profile = o->expert_profile,
				       .pin_fraction = o->pin, .no_prefetch = o->no_prefetch,
				       .lookahead = o->lookahead,
				       .no_overlap = o->no_overlap,
				       .n_prompt = n_prompt, .n_gen = n_gen,
				       .n_threads = o->threads.v[0], .disk_bw = bw,
				       .disk_bw_qd1 = qd1.bytes_s, .ids = ids,
				       .n_ids = n_ids, .seed = o->seed};
		moe_budget_row r;
		if ((strcmp(tok, "resident") && moe_experts_parse_budget(tok, m, &p.budget, &e) < 0) ||
		    moe_bench_budget(m, &p, &r, &e) < 0)
			die_error(&e);
		double pct = r.io_bound_tok_s > 0 ? 100.0 * r.tok_s / r.io_bound_tok_s : 0;
		double pct1 = r.io_bound_qd1_tok_s > 0 ? 100.0 * r.tok_s / r.io_bound_qd1_tok_s : 0;
		/* the prediction accuracy at each distance: JSON array, or "67.0/51.2" */
		json_t *at = json_array(), *cat = json_array();
		char pred[64] = "";
		for (int d = 0; d < r.lookahead; d++) {
			json_array_append_new(at, json_real(r.prediction_at[d]));
			json_array_append_new(cat, json_real(r.candidate_at[d]));
			size_t l = strlen(pred);
			snprintf(pred + l, sizeof pred - l, "%s%.1f", d ? "/" : "", 100 * r.prediction_at[d]);
		}
		if (!r.lookahead)
			snprintf(pred, sizeof pred, "%.1f", 100 * r.prediction);
		if (json)
			json_array_append_new(
				arr, json_pack("{s:s, s:I, s:I, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, "
					       "s:f, s:f, s:f, s:i, s:f, s:f, s:f, s:f, s:i, s:o, s:o, s:f, s:f, s:f, s:f, s:b, s:s}",
					       "model", o->models[0], "budget_bytes", (json_int_t)r.budget,
					       "slots", (json_int_t)r.slots, "n_gen", r.n_gen, "tok_s",
					       r.tok_s, "hit_rate", r.hit_rate, "prediction_accuracy",
					       r.prediction, "prefetch_used", r.prefetch_used,
					       "bytes_read_per_token", r.bytes_per_token, "io_wait_s",
					       r.io_wait_s, "overlap", r.overlap, "read_bytes_s",
					       r.tok_s * r.bytes_per_token, "disk_bw_bytes_s", bw, "io_bound_tok_s",
					       r.io_bound_tok_s, "pct_of_io_bound", pct, "disk_queue_depth",
					       (int)qdn.depth, "disk_read_bytes", qdn.read_bytes,
					       "disk_bw_qd1_bytes_s", qd1.bytes_s, "io_bound_qd1_tok_s",
					       r.io_bound_qd1_tok_s, "pct_of_io_bound_qd1", pct1, "lookahead",
					       r.lookahead, "prediction_accuracy_at", at,
					       "candidate_accuracy_at", cat, "prefetch_reads_per_token",
					       r.prefetch_reads, "lookahead_share", r.lookahead_share, "open_s",
					       r.open_s, "populate_s", r.populate_s, "o_direct",
					       r.direct, "policy", moe_experts_policy_name(o->policy)));
		else {
			json_decref(at);
			json_decref(cat);
			printf("| %.0f | %llu | %.2f | %.1f | %s | %.1f | %.1f | %.2f | %.0f | %.2f | %.2f | "
			       "%.2f | %.2f | %.0f | %.0f |\n",
			       (double)r.budget / 1048576, (unsigned long long)r.slots, r.tok_s,
			       100 * r.hit_rate, pred, 100 * r.prefetch_used,
			       r.bytes_per_token / 1e6, r.io_wait_s, 100 * r.overlap, bw / 1e9,
			       qd1.bytes_s / 1e9, r.tok_s * r.bytes_per_token / 1e9, r.io_bound_tok_s, pct,
			       pct1);
		}
		fflush(stdout);
	}
	free(list);
	free(ids);
	if (json) {
		char *txt = json_dumps(arr, JSON_INDENT(2));
		if (txt)
			puts(txt);
		free(txt);
	}
	json_decref(arr);
	moe_model_free(m);
}

/* --imatrix OUT: an importance matrix for moe-quant over the text of -f,
 * a mode of its own (like --endpoint), parsed here. */
static int run_imatrix(int argc, char **argv)
{
	moe_imatrix_params p = {0};
	const char *model = NULL, *text_file = NULL;
	bool verbose = isatty(2);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
		size_t al = eq ? (size_t)(eq - a) : strlen(a);
#define IS(name) (al == strlen(name) && strncmp(a, name, al) == 0)
		if (IS("-v") || IS("--verbose")) {
			verbose = true;
			continue;
		}
		if (eq)
			v = eq + 1;
		else if (!v)
			usage_error("%s needs a value", a);
		else
			i++;
		if (IS("--imatrix")) p.out = v;
		else if (IS("-m") || IS("--model")) model = cli_model(v); /* a file or a moe-pull name */
		else if (IS("-f") || IS("--prompt-file")) text_file = v;
		else if (IS("-c") || IS("--ctx-size")) p.n_ctx = (int)cli_parse_long("-c", v, 2, 1 << 22);
		else if (IS("--chunks")) p.n_chunks = (int)cli_parse_long("--chunks", v, 1, 1 << 30);
		else if (IS("-t") || IS("--threads")) p.n_threads = (int)cli_parse_long("-t", v, 1, 4096);
		else if (IS("-b") || IS("--batch-size")) p.n_batch = (int)cli_parse_long("-b", v, 1, 1 << 22);
		else usage_error("%s does not go with --imatrix", a);
#undef IS
	}
	if (!p.out || !*p.out)
		usage_error("--imatrix needs an output file");
	if (!model)
		usage_error("no model given (-m FILE)");
	if (!text_file)
		usage_error("--imatrix needs the calibration text: -f FILE");
	size_t len = 0;
	char *text = read_text(text_file, &len);
	moe_model *m;
	double load_s;
	load_model(model, &m, &load_s);
	moe_imatrix_result r;
	moe_error e = {0};
	if (verbose)
		fprintf(stderr, "%s: %s: importance matrix over %s...\n", cli_prog(), model, text_file);
	if (moe_bench_imatrix(m, text, len, &p, &r, &e) < 0)
		die("%s: %s", model, e.msg);
	if (verbose)
		fprintf(stderr, "%s: %zu tensors, %d chunks of %d tokens (%llu of the text's %llu) -> %s\n",
			cli_prog(), r.n_tensors, r.n_chunks, r.n_ctx, (unsigned long long)r.n_tokens,
			(unsigned long long)r.n_text_tokens, p.out);
	moe_model_free(m);
	free(text);
	return 0;
}

int main(int argc, char **argv)
{
	bench_opts o;
	moe_bench_env env;
	char cpu[256];

	cli_init(argv[0]);
	for (int i = 1; i < argc; i++)
		if (strncmp(argv[i], "--endpoint", 10) == 0)
			return run_endpoint(argc, argv);
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--imatrix") || !strncmp(argv[i], "--imatrix=", 10))
			return run_imatrix(argc, argv);
	parse_args(argc, argv, &o);
	env_init(&env, cpu, sizeof cpu);
	if (o.plan)
		run_plan(&o);
	else if (o.mem_budget)
		run_budgets(&o, &env);
	else if (o.ppl_file || o.kl_in)
		run_quality(&o);
	else if (o.expert_stats)
		run_expert_gen(&o);
	else {
		if (o.stream_bw)
			measure_stream(&o, &env);
		else if (o.bw_given > 0)
			env.stream_gbs = o.bw_given;
		if (o.n_models > 0 && o.parallel.n)
			run_batched(&o, &env);
		else if (o.n_models > 0)
			run_throughput(&o, &env);
		else
			print_stream(&o, &env);
	}
	if (fflush(stdout) != 0)
		die("write error: %s", strerror(errno));
	return 0;
}

/* moe-quant — quantise a UTH model (file or pipe) with a recipe or a type,
 * importance matrices and per-expert mixed precision.  Options only: the
 * work is moe_quant_model() / moe_quant_plan_experts(). */
#include "cli.h"
#include "quant.h"
#include "uth.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void help(void)
{
	printf("Usage: %s [OPTION]... IN OUT\n"
	       "Quantise the UTH model IN into OUT (files, or '-' for a pipe).\n"
	       "\n"
	       "  -t, --type=RECIPE|TYPE    a recipe, with per-tensor rules as llama-quantize\n"
	       "                            (q2_k q3_k_s q3_k_m q3_k_l q4_k_s q4_k_m q5_k_s\n"
	       "                            q5_k_m q6_k q8_0 iq4_xs; see moe-quant(1)),\n"
	       "                            or one type for every matrix (f32 f16 bf16 q4_0\n"
	       "                            q4_1 q5_0 q5_1 q3_k q4_k q5_k iq4_nl mxfp4; q2_k\n"
	       "                            q6_k q8_0 iq4_xs name recipes); default q4_k_m\n"
	       "      --tensor-type=REGEX=TYPE  matrices whose name matches REGEX (PCRE2) get\n"
	       "                            TYPE; repeatable, the first match wins\n"
	       "      --imatrix=FILE        weight the error by an importance matrix (moe-bench\n"
	       "                            --imatrix, or llama.cpp's imatrix.dat)\n"
	       "      --expert-profile=FILE with --size: a type per routed expert from a\n"
	       "                            moe-bench --expert-stats profile (IN read twice:\n"
	       "                            a piped IN is first copied to $TMPDIR)\n"
	       "      --size=SIZE           total output size for --expert-profile (bytes, or\n"
	       "                            with K, M, G suffix: powers of 1024)\n"
	       "      --ladder=T1,T2,...    expert types to choose from (default\n"
	       "                            q2_k,q3_k,q4_k,q5_k,q6_k)\n"
	       "      --allow-requantize    requantise tensors that are already quantised\n"
	       "                            (lower quality than from F16/BF16; warns)\n"
	       "      --repack              store Q8_0 and Q4_K matrices in the row-interleaved\n"
	       "                            layout r4 (four rows per block column; uth(5))\n"
	       "  -n, --dry-run             print each tensor's type (and the expert plan),\n"
	       "                            write nothing\n"
	       "  -j, --threads=N           threads (default: the cores)\n"
	       "  -q, --quiet               no progress or summary on a terminal\n"
	       "      --help                display this help and exit\n"
	       "      --version             output version information and exit\n"
	       "\n"
	       "Exit status: 0 success, 1 failure, 2 usage error.  See moe-quant(1).\n",
	       cli_prog());
}

/* Errors about the spooled copy of a pipe name "standard input", not the
 * /dev/fd/N the library was given. */
static void die_spooled(moe_error *e, const char *spool_path)
{
	size_t n = strlen(spool_path);
	if (!strncmp(e->msg, spool_path, n)) {
		char msg[sizeof(e->msg)];
		snprintf(msg, sizeof(msg), "standard input%s", e->msg + n);
		snprintf(e->msg, sizeof(e->msg), "%s", msg);
	}
	die_error(e);
}

static void progress(void *ctx, const char *tensor, uint64_t done, uint64_t total)
{
	static double last;
	double now = moe_time_now();
	(void)ctx;
	if (now - last < 0.2 && done < total)
		return;
	last = now;
	fprintf(stderr, "\r%5.1f%%  %-48.48s", total ? 100.0 * done / total : 100.0, tensor);
	if (done >= total)
		fputc('\n', stderr);
}

static uint64_t parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	double mul = 1;
	switch (*end) {
	case 'k': case 'K': mul = 1024.0; end++; break;
	case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
	case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
	}
	if (*end == 'i' || *end == 'B')
		end += *end == 'i' ? (end[1] == 'B' ? 2 : 1) : 1;
	if (end == s || *end || !(v > 0) || v * mul > 1e18)
		usage_error("--size must be a positive size such as 12G or 800M, not '%s'", s);
	return (uint64_t)(v * mul);
}

static void print_plan(const moe_quant_plan *p)
{
	printf("expert plan: %d layers x %d experts, predicted size %.1f MiB (recipe's own "
	       "types: %.1f MiB)\n", p->n_layer, p->n_expert, p->size / 1048576.0,
	       p->size_uniform / 1048576.0);
	printf("expected error: %.6g (recipe's own types: %.6g, %.1f%% %s)\n", p->cost,
	       p->cost_uniform,
	       p->cost_uniform > 0 ? 100.0 * fabs(1.0 - p->cost / p->cost_uniform) : 0.0,
	       p->cost <= p->cost_uniform ? "lower" : "higher");
	for (int l = 0; l < p->n_layer; l++) {
		bool any = false;
		for (int x = 0; x < p->n_expert; x++)
			any |= p->types[l * p->n_expert + x] >= 0;
		if (!any)
			continue;
		printf("layer %d:", l);
		for (int x = 0; x < p->n_expert; x++) {
			int t = p->types[l * p->n_expert + x];
			if (t >= 0)
				printf(" %d=%s(%.3f)", x, moe_type_name(t), p->freq[l * p->n_expert + x]);
		}
		printf("\n");
	}
}

static int dry_run(const moe_quant_opts *o, moe_error *e)
{
	moe_uth_stream *s;
	MOE_TRY(moe_uth_stream_open(&s, o->in, e));
	const moe_uth *u = moe_uth_stream_info(s);
	int *types = calloc(u->n_tensors ? u->n_tensors : 1, sizeof(int));
	if (!types) {
		moe_uth_stream_close(s);
		return moe_err(e, MOE_ENOMEM, "out of memory");
	}
	int rc = moe_quant_assign(u, o, types, e);
	if (rc == 0) {
		uint64_t in = 0, out = 0;
		for (size_t i = 0; i < u->n_tensors; i++) {
			const moe_uth_tensor *t = &u->tensors[i];
			const moe_type_traits *tt = moe_type_get(types[i]);
			uint64_t n = (uint64_t)t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
			uint64_t b = n / tt->block_size * tt->type_size;
			printf("%-40s %-7s -> %-7s %10.1f KiB  [%u", t->name, moe_type_name(t->dtype),
			       tt->name, b / 1024.0, t->ne[0]);
			for (int d = 1; d < t->n_dims; d++)
				printf(", %u", t->ne[d]);
			printf("]\n");
			in += t->size;
			out += b;
		}
		printf("total: %.2f MiB -> %.2f MiB (recipe %s)\n", in / 1048576.0, out / 1048576.0,
		       o->recipe.name);
	}
	free(types);
	moe_uth_stream_close(s);
	return rc;
}

int main(int argc, char **argv)
{
	cli_init(argv[0]);
	enum { OPT_HELP = 256, OPT_VERSION, OPT_TT, OPT_IMATRIX, OPT_PROFILE, OPT_SIZE,
	       OPT_LADDER, OPT_REQ, OPT_REPACK };
	static const struct option longopts[] = {
		{"type", required_argument, NULL, 't'},
		{"tensor-type", required_argument, NULL, OPT_TT},
		{"imatrix", required_argument, NULL, OPT_IMATRIX},
		{"expert-profile", required_argument, NULL, OPT_PROFILE},
		{"size", required_argument, NULL, OPT_SIZE},
		{"ladder", required_argument, NULL, OPT_LADDER},
		{"allow-requantize", no_argument, NULL, OPT_REQ},
		{"repack", no_argument, NULL, OPT_REPACK},
		{"dry-run", no_argument, NULL, 'n'},
		{"threads", required_argument, NULL, 'j'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, OPT_HELP},
		{"version", no_argument, NULL, OPT_VERSION},
		{NULL, 0, NULL, 0},
	};
	moe_quant_opts o = {.threads = moe_default_threads()};
	const char *type = "q4_k_m", *imatrix = NULL, *profile = NULL;
	moe_quant_tensor_type *tt = NULL;
	size_t ntt = 0;
	uint64_t size = 0;
	int ladder[16] = {MOE_Q2_K, MOE_Q3_K, MOE_Q4_K, MOE_Q5_K, MOE_Q6_K}, n_ladder = 5;
	bool dry = false, quiet = false;
	int c;
	while ((c = getopt_long(argc, argv, "t:nj:q", longopts, NULL)) != -1) {
		switch (c) {
		case 't': type = optarg; break;
		case OPT_TT: {
			char *eq = strrchr(optarg, '=');
			if (!eq || eq == optarg)
				usage_error("--tensor-type takes REGEX=TYPE, not '%s'", optarg);
			*eq = 0;
			int ty = moe_type_from_name(eq + 1);
			if (ty < 0 || !moe_quant_fn(ty))
				usage_error("--tensor-type: '%s' is not a weight type", eq + 1);
			tt = realloc(tt, (ntt + 1) * sizeof(*tt));
			if (!tt)
				die("out of memory");
			tt[ntt].regex = optarg;
			tt[ntt++].dtype = ty;
			break;
		}
		case OPT_IMATRIX: imatrix = optarg; break;
		case OPT_PROFILE: profile = optarg; break;
		case OPT_SIZE: size = parse_size(optarg); break;
		case OPT_LADDER: {
			n_ladder = 0;
			for (char *tok = strtok(optarg, ","); tok; tok = strtok(NULL, ",")) {
				int ty = moe_type_from_name(tok);
				if (ty < 0 || !moe_quant_fn(ty) || n_ladder == 16)
					usage_error("--ladder: '%s' is not a weight type", tok);
				if (n_ladder && moe_quant_bpw(ty) <= moe_quant_bpw(ladder[n_ladder - 1]))
					usage_error("--ladder must go up in bits per weight ('%s')", tok);
				ladder[n_ladder++] = ty;
			}
			if (!n_ladder)
				usage_error("--ladder is empty");
			break;
		}
		case OPT_REQ: o.allow_requantize = true; break;
		case OPT_REPACK: o.repack = true; break;
		case 'n': dry = true; break;
		case 'j': o.threads = (int)cli_parse_long("--threads", optarg, 1, 1024); break;
		case 'q': quiet = true; break;
		case OPT_HELP: help(); return 0;
		case OPT_VERSION: print_version(); return 0;
		default: usage_error("unknown option");
		}
	}
	if (argc - optind != (dry ? 1 : 2) && !(dry && argc - optind == 2))
		usage_error("expected IN and OUT (IN alone with --dry-run)");
	o.in = argv[optind];
	o.out = dry ? NULL : argv[optind + 1];
	if (moe_quant_recipe_find(type, &o.recipe) < 0)
		usage_error("--type must be a recipe (%s) or a weight type, not '%s'",
			    moe_quant_recipe_names(), type);
	if (!!profile != !!size)
		usage_error("--expert-profile and --size go together");
	if (!dry && !strcmp(o.out, "-") && isatty(STDOUT_FILENO))
		usage_error("refusing to write a model to a terminal (redirect standard output)");
	o.tensor_types = tt;
	o.n_tensor_types = ntt;

	moe_error e = {0};
	moe_imatrix *im = NULL;
	if (imatrix) {
		if (moe_imatrix_load(&im, imatrix, &e) < 0)
			die_error(&e);
		o.imatrix = im;
		const char *b = strrchr(imatrix, '/');
		o.imatrix_name = b ? b + 1 : imatrix;
	}
	moe_quant_plan plan = {0};
	char desc[256], spool_path[64];
	int spool_fd = -1;
	if (profile && !strcmp(o.in, "-")) { /* read twice: spool the pipe to a file */
		if (moe_quant_spool_stdin(&spool_fd, spool_path, sizeof(spool_path), &e) < 0)
			die_error(&e);
		o.in = spool_path;
	}
	const char *spooled = spool_fd >= 0 ? spool_path : "\001"; /* never a message prefix */
	if (profile) {
		if (moe_quant_plan_experts(&o, profile, size, ladder, n_ladder, &plan, &e) < 0)
			die_spooled(&e, spooled);
		o.expert_types = plan.types;
		o.plan_n_layer = plan.n_layer;
		o.plan_n_expert = plan.n_expert;
		snprintf(desc, sizeof(desc), "%s, size %llu", profile, (unsigned long long)size);
		o.plan_desc = desc;
		if (dry)
			print_plan(&plan);
	}
	if (dry) {
		if (dry_run(&o, &e) < 0)
			die_spooled(&e, spooled);
	} else {
		bool tty = !quiet && isatty(STDERR_FILENO);
		if (tty)
			o.progress = progress;
		moe_quant_result r;
		double t0 = moe_time_now();
		if (moe_quant_model(&o, &r, &e) < 0)
			die_spooled(&e, spooled);
		if (tty)
			fprintf(stderr, "%s: %zu of %zu tensors quantised (%s), %.1f MiB -> %.1f MiB "
				"in %.1f s\n", cli_prog(), r.n_quantized, r.n_tensors, o.recipe.name,
				r.in_bytes / 1048576.0, r.out_bytes / 1048576.0, moe_time_now() - t0);
	}
	moe_quant_plan_free(&plan);
	moe_imatrix_free(im);
	if (spool_fd >= 0)
		close(spool_fd);
	free(tt);
	return 0;
}

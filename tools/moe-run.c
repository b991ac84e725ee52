/* moe-run — run a model: generate text from a prompt (the default), chat
 * (--chat), a JSONL batch (--jsonl), or the tokenizer modes (--tokenize,
 * --detokenize, --render-chat, which also work on vocabulary-only files).
 * main() parses options into a run_opts, opens the model and hands it to the
 * mode's function; the work itself is in libmoecore (engine.h, text.h):
 * every generating mode submits requests to the engine's scheduler.
 * Without -m the model is $MOE_MODEL, else the demo model installed with the
 * tools (MOE_PKGDATADIR), else the one in the source tree the tools were built
 * from (MOE_SRC_SHAREDIR), so an uninstalled build runs out of the box. */
#include "cli.h"
#include "engine.h"
#include "experts.h"
#include "quant.h"
#include "text.h"
#include "uth.h"

#include <errno.h>
#include <stddef.h>
#include <strings.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef enum run_mode {
	MODE_NONE,
	MODE_GENERATE,
	MODE_CHAT,
	MODE_JSONL,
	MODE_TOKENIZE,
	MODE_DETOKENIZE,
	MODE_RENDER_CHAT,
} run_mode;

typedef struct run_opts {
	run_mode mode;
	const char *model;         /* -m */
	const char *prompt;        /* -p: the input text itself */
	const char *file;          /* -f: input file ("-" = stdin) */
	bool add_special;          /* BOS/EOS as the model asks */
	bool parse_special;        /* special-token text is special */
	bool show_pieces;          /* --tokenize: "ID<TAB>PIECE" lines */
	const char *system;        /* --system */
	const char *chat_template; /* --chat-template NAME */
	bool generation_prompt;    /* --render-chat: open an assistant turn */
	int reasoning;             /* --reasoning: REASON_* (harmony models) */
	bool reasoning_given;
	/* generation */
	moe_req_params rp;         /* sampling, -n, --stop, --ignore-eos */
	int threads, n_ctx, n_batch, kv_type;
	int parallel;              /* --parallel: requests decoded together */
	bool unordered;            /* --jsonl: write results as they finish */
	const char *prompt_cache;  /* --prompt-cache FILE */
	const char *mem_budget;    /* --mem-budget SIZE: stream experts (experts.h) */
	bool verify_reads;         /* --verify-reads */
	bool verbose;
	bool gen_option_given;     /* for usage checks */
} run_opts;

/* The open model: the file and what the modes need from it. */
typedef struct run_model {
	moe_uth *uth;          /* tokenizer modes */
	moe_model *model;      /* generation modes (owns its file and tokenizer) */
	const moe_tokenizer *tok;
	moe_tokenizer *own_tok;
	moe_engine *eng;
	moe_sched *sched;
	moe_expert_store *experts; /* --mem-budget: the streamed store, else NULL */
	const char *prompt_cache;
	double t_load;
} run_model;

/* --reasoning: what a harmony model's (gpt-oss's) analysis channel
 * becomes in --chat and --jsonl. */
enum { REASON_HIDE, REASON_SHOW, REASON_RAW };

#define INPUT_MAX ((size_t)1 << 30)
/* Longest line --jsonl and --chat accept (a request or a message): longer
 * ones are refused, not read into memory whole. */
#define LINE_MAX_BYTES ((size_t)16 << 20)

/* Where the demo model is installed (tools/moe-run.mk sets it from
 * $(pkgdatadir)), and the source tree's share/ (uninstalled builds). */
#ifndef MOE_PKGDATADIR
#define MOE_PKGDATADIR "/usr/local/share/moe"
#endif
#define DEMO_MODEL "moe-demo.uth"

/* The model used without -m, or NULL if there is none: $MOE_MODEL, else
 * the installed demo model, else the source tree's. */
static const char *default_model(void)
{
	static const char *const dirs[] = {
		MOE_PKGDATADIR,
#ifdef MOE_SRC_SHAREDIR
		MOE_SRC_SHAREDIR,
#endif
	};
	return moe_req_default_model(dirs, sizeof dirs / sizeof dirs[0], DEMO_MODEL);
}

static void help(void)
{
	printf("Usage: %s [-m MODEL] [OPTION]... [-p PROMPT | -f FILE]   (generate text)\n"
	       "  or:  %s [-m MODEL] --chat [OPTION]...\n"
	       "  or:  %s [-m MODEL] --jsonl [OPTION]... < requests.jsonl > results.jsonl\n"
	       "  or:  %s [-m MODEL] --tokenize | --detokenize | --render-chat [OPTION]...\n"
	       "Run a model in the UTH format (see moe-convert(1)).  The prompt comes from -p,\n"
	       "-f or standard input; only the generated text is written to standard output,\n"
	       "as it is produced.  Without -m: $MOE_MODEL, else the demo model\n"
	       "(%s).\n"
	       "\n"
	       "Modes:\n"
	       "  -i, --chat, --interactive  interactive chat: one user message per input\n"
	       "                        line; the KV cache is kept across turns\n"
	       "      --jsonl           batch: each input line {\"prompt\": ...} or {\"messages\":\n"
	       "                        [...]} (plus sampling fields) gives one output line\n"
	       "                        {\"text\", \"tokens\", \"prompt_tokens\", \"finish_reason\"}\n"
	       "      --tokenize        print the token ids of the text, separated by spaces\n"
	       "      --detokenize      read token ids (separated by white space), print text\n"
	       "      --render-chat     read a JSON array of {\"role\", \"content\"} messages and\n"
	       "                        print the prompt the model would see\n"
	       "\n"
	       "Generation:\n"
	       "  -m, --model=MODEL     a .uth file or a name registered by moe-pull\n"
	       "                        (default: see above)\n"
	       "  -p, --prompt=TEXT     the prompt\n"
	       "  -f, --file=FILE       read the prompt from FILE ('-' for standard input)\n"
	       "  -n, --n-predict=N     tokens to generate (default -1: until end of text or a\n"
	       "                        full context)\n"
	       "  -t, --threads=N       threads (default: the number of CPUs)\n"
	       "  -c, --ctx-size=N, --kv-size=N  tokens the KV cache holds, all sequences\n"
	       "                        together (default: the model's context, at most 4096)\n"
	       "  -b, --batch-size=N    tokens per forward step (default 256)\n"
	       "  -np, --parallel=N     --jsonl: decode up to N requests together (default 1)\n"
	       "      --unordered       --jsonl: write each result when it is done, not in\n"
	       "                        input order\n"
	       "      --prompt-cache=FILE  reuse the KV state of a prompt that starts the same\n"
	       "                        way from FILE, and save this prompt's there\n"
	       "      --kv-type=TYPE    KV cache type: f16 (default) or q8_0\n"
	       "      --mem-budget=SIZE weights in memory at most SIZE (e.g. 1536M, 2G, 50%%,\n"
	       "                        min = one layer of experts cached):\n"
	       "                        the dense weights stay resident, the rest is a cache\n"
	       "                        of experts read from the file with O_DIRECT\n"
	       "      --verify-reads    with --mem-budget: check each expert read (xxh3)\n"
	       "      --temp=T          temperature (default 0.8; 0 = greedy)\n"
	       "      --top-k=N         keep the N most likely tokens (default 40; 0 = off)\n"
	       "      --top-p=P         nucleus sampling (default 0.95; 1 = off)\n"
	       "      --min-p=P         drop tokens below P x the top probability (default 0.05)\n"
	       "      --repeat-penalty=X  penalise recent tokens (default 1 = off)\n"
	       "      --repeat-last-n=N tokens the penalties look back (default 64, -1 = all)\n"
	       "      --presence-penalty=X, --frequency-penalty=X  (default 0 = off)\n"
	       "      --seed=N          random seed (default: from the clock)\n"
	       "      --stop=STR        stop before STR (may be repeated, at most 16)\n"
	       "      --ignore-eos      do not stop at end-of-text tokens\n"
	       "      --system=TEXT     system prompt (--chat, --jsonl, --render-chat)\n"
	       "      --reasoning=MODE  harmony models (gpt-oss), --chat and --jsonl: the\n"
	       "                        analysis channel is hidden (hide, the default),\n"
	       "                        shown marked [analysis] (show), or the raw\n"
	       "                        harmony text is printed (raw)\n"
	       "      --chat-template=NAME  instead of the model's own template ('auto'):\n"
	       "                        one the model names (e.g. tool_use) or a built-in\n"
	       "                        format:\n"
	       "          %s\n"
	       "      --verbose         load time and prompt/generation speed on stderr\n"
	       "\n"
	       "Tokenizer modes:\n"
	       "      --add-special     add BOS/EOS as the model asks (--tokenize)\n"
	       "      --parse-special   special-token text such as <s> or <|im_end|> becomes\n"
	       "                        those tokens (--tokenize); control tokens are\n"
	       "                        printed as their text (--detokenize)\n"
	       "      --show-pieces     --tokenize prints one 'ID<TAB>PIECE' line per token\n"
	       "      --no-generation-prompt  do not open an assistant turn at the end\n"
	       "\n"
	       "      --help            display this help and exit\n"
	       "      --version         output version information and exit\n"
	       "\n"
	       "Exit status: 0 success, 1 failure, 2 usage error.\n"
	       "See moe-run(1).\n",
	       cli_prog(), cli_prog(), cli_prog(), cli_prog(), MOE_PKGDATADIR "/" DEMO_MODEL,
	       moe_chat_template_names());
}

static void parse_args(int argc, char **argv, run_opts *o)
{
	enum {
		OPT_HELP = 256, OPT_VERSION, OPT_TOKENIZE, OPT_DETOKENIZE, OPT_RENDER_CHAT,
		OPT_ADD_SPECIAL, OPT_PARSE_SPECIAL, OPT_SHOW_PIECES, OPT_SYSTEM, OPT_TEMPLATE,
		OPT_NO_GEN, OPT_JSONL, OPT_KV_TYPE, OPT_TEMP, OPT_TOP_K, OPT_TOP_P, OPT_MIN_P,
		OPT_REPEAT_PENALTY, OPT_REPEAT_LAST_N, OPT_PRESENCE, OPT_FREQUENCY, OPT_SEED, OPT_STOP,
		OPT_IGNORE_EOS, OPT_REASONING, OPT_VERBOSE, OPT_PARALLEL, OPT_UNORDERED, OPT_PROMPT_CACHE,
		OPT_MEM_BUDGET, OPT_VERIFY_READS,
	};
	static const struct option longopts[] = {
		{"model", required_argument, NULL, 'm'},
		{"prompt", required_argument, NULL, 'p'},
		{"file", required_argument, NULL, 'f'},
		{"tokenize", no_argument, NULL, OPT_TOKENIZE},
		{"detokenize", no_argument, NULL, OPT_DETOKENIZE},
		{"render-chat", no_argument, NULL, OPT_RENDER_CHAT},
		{"add-special", no_argument, NULL, OPT_ADD_SPECIAL},
		{"parse-special", no_argument, NULL, OPT_PARSE_SPECIAL},
		{"show-pieces", no_argument, NULL, OPT_SHOW_PIECES},
		{"system", required_argument, NULL, OPT_SYSTEM},
		{"chat-template", required_argument, NULL, OPT_TEMPLATE},
		{"no-generation-prompt", no_argument, NULL, OPT_NO_GEN},
		{"chat", no_argument, NULL, 'i'},
		{"interactive", no_argument, NULL, 'i'},
		{"jsonl", no_argument, NULL, OPT_JSONL},
		{"n-predict", required_argument, NULL, 'n'},
		{"threads", required_argument, NULL, 't'},
		{"ctx-size", required_argument, NULL, 'c'},
		{"kv-size", required_argument, NULL, 'c'},
		{"parallel", required_argument, NULL, OPT_PARALLEL},
		{"unordered", no_argument, NULL, OPT_UNORDERED},
		{"prompt-cache", required_argument, NULL, OPT_PROMPT_CACHE},
		{"mem-budget", required_argument, NULL, OPT_MEM_BUDGET},
		{"verify-reads", no_argument, NULL, OPT_VERIFY_READS},
		{"batch-size", required_argument, NULL, 'b'},
		{"kv-type", required_argument, NULL, OPT_KV_TYPE},
		{"temp", required_argument, NULL, OPT_TEMP},
		{"top-k", required_argument, NULL, OPT_TOP_K},
		{"top-p", required_argument, NULL, OPT_TOP_P},
		{"min-p", required_argument, NULL, OPT_MIN_P},
		{"repeat-penalty", required_argument, NULL, OPT_REPEAT_PENALTY},
		{"repeat-last-n", required_argument, NULL, OPT_REPEAT_LAST_N},
		{"presence-penalty", required_argument, NULL, OPT_PRESENCE},
		{"frequency-penalty", required_argument, NULL, OPT_FREQUENCY},
		{"seed", required_argument, NULL, OPT_SEED},
		{"stop", required_argument, NULL, OPT_STOP},
		{"ignore-eos", no_argument, NULL, OPT_IGNORE_EOS},
		{"reasoning", required_argument, NULL, OPT_REASONING},
		{"verbose", no_argument, NULL, OPT_VERBOSE},
		{"help", no_argument, NULL, OPT_HELP},
		{"version", no_argument, NULL, OPT_VERSION},
		{NULL, 0, NULL, 0},
	};
	int c;

	*o = (run_opts){.generation_prompt = true, .rp = moe_req_params_defaults()};
	o->rp.sampling.seed = (uint64_t)(moe_time_now() * 1e9);
	moe_sampler_params *sp = &o->rp.sampling;
	/* "-np N" as llama.cpp spells it: one option of two letters */
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "-np"))
			argv[i] = "--parallel";
	while ((c = getopt_long(argc, argv, "m:p:f:in:t:c:b:", longopts, NULL)) != -1) {
		run_mode m = MODE_NONE;
		if (c == 'n' || c == 't' || c == 'c' || c == 'b' ||
		    (c >= OPT_KV_TYPE && c <= OPT_IGNORE_EOS))
			o->gen_option_given = true;
		switch (c) {
		case 'i': m = MODE_CHAT; break;
		case OPT_JSONL: m = MODE_JSONL; break;
		case 'n': o->rp.n_predict = (int)cli_parse_long("-n", optarg, INT_MIN, INT_MAX); break;
		case 't': o->threads = (int)cli_parse_long("-t", optarg, 1, 1024); break;
		case 'c': o->n_ctx = (int)cli_parse_long("-c", optarg, 1, 1 << 24); break;
		case 'b': o->n_batch = (int)cli_parse_long("-b", optarg, 1, 1 << 16); break;
		case OPT_KV_TYPE:
			o->kv_type = moe_type_from_name(optarg);
			if (o->kv_type != MOE_F16 && o->kv_type != MOE_Q8_0)
				usage_error("--kv-type must be f16 or q8_0, not '%s'", optarg);
			break;
		case OPT_TEMP: sp->temp = cli_parse_float("--temp", optarg, -1e6, 1e6); break;
		case OPT_TOP_K: sp->top_k = (int)cli_parse_long("--top-k", optarg, INT_MIN, INT_MAX); break;
		case OPT_TOP_P: sp->top_p = cli_parse_float("--top-p", optarg, -1e6, 1e6); break;
		case OPT_MIN_P: sp->min_p = cli_parse_float("--min-p", optarg, -1e6, 1e6); break;
		case OPT_REPEAT_PENALTY:
			sp->repeat_penalty = cli_parse_float("--repeat-penalty", optarg, -1e6, 1e6);
			break;
		case OPT_REPEAT_LAST_N:
			sp->repeat_last_n = (int)cli_parse_long("--repeat-last-n", optarg, INT_MIN, INT_MAX);
			break;
		case OPT_PRESENCE:
			sp->presence_penalty = cli_parse_float("--presence-penalty", optarg, -1e6, 1e6);
			break;
		case OPT_FREQUENCY:
			sp->frequency_penalty = cli_parse_float("--frequency-penalty", optarg, -1e6, 1e6);
			break;
		case OPT_SEED: sp->seed = (uint64_t)cli_parse_long("--seed", optarg, 0, LONG_MAX); break;
		case OPT_STOP:
			if (o->rp.n_stop == MOE_REQ_MAX_STOP)
				usage_error("at most %d --stop strings", MOE_REQ_MAX_STOP);
			o->rp.stop[o->rp.n_stop++] = optarg;
			o->gen_option_given = true;
			break;
		case OPT_IGNORE_EOS: o->rp.ignore_eos = true; break;
		case OPT_PARALLEL:
			o->parallel = (int)cli_parse_long("--parallel", optarg, 1, 4096);
			o->gen_option_given = true;
			break;
		case OPT_UNORDERED: o->unordered = true; o->gen_option_given = true; break;
		case OPT_PROMPT_CACHE: o->prompt_cache = optarg; o->gen_option_given = true; break;
		case OPT_MEM_BUDGET:
			cli_check_budget("--mem-budget", optarg, false);
			o->mem_budget = optarg;
			o->gen_option_given = true;
			break;
		case OPT_VERIFY_READS: o->verify_reads = true; o->gen_option_given = true; break;
		case OPT_VERBOSE: o->verbose = true; break;
		case OPT_REASONING:
			if (!strcmp(optarg, "hide"))
				o->reasoning = REASON_HIDE;
			else if (!strcmp(optarg, "show"))
				o->reasoning = REASON_SHOW;
			else if (!strcmp(optarg, "raw"))
				o->reasoning = REASON_RAW;
			else
				usage_error("--reasoning is hide, show or raw, not '%s'", optarg);
			o->reasoning_given = true;
			break;
		case 'm': o->model = cli_model(optarg); break;
		case 'p': o->prompt = optarg; break;
		case 'f': o->file = optarg; break;
		case OPT_TOKENIZE: m = MODE_TOKENIZE; break;
		case OPT_DETOKENIZE: m = MODE_DETOKENIZE; break;
		case OPT_RENDER_CHAT: m = MODE_RENDER_CHAT; break;
		case OPT_ADD_SPECIAL: o->add_special = true; break;
		case OPT_PARSE_SPECIAL: o->parse_special = true; break;
		case OPT_SHOW_PIECES: o->show_pieces = true; break;
		case OPT_SYSTEM: o->system = optarg; break;
		case OPT_TEMPLATE:
			/* A built-in format, or a template the model names (such
			 * as tool_use): only the model can say, so an unknown
			 * name is reported when the model is loaded. */
			o->chat_template = optarg;
			break;
		case OPT_NO_GEN: o->generation_prompt = false; break;
		case OPT_HELP: help(); exit(0);
		case OPT_VERSION: print_version(); exit(0);
		default: usage_error("unknown option");
		}
		if (m != MODE_NONE) {
			if (o->mode != MODE_NONE && o->mode != m)
				usage_error(
					"--tokenize, --detokenize and --render-chat are separate "
					"modes");
			o->mode = m;
		}
	}
	if (optind < argc)
		usage_error("unexpected argument '%s'", argv[optind]);
	if (o->mode == MODE_NONE)
		o->mode = MODE_GENERATE;
	bool gen = o->mode == MODE_GENERATE || o->mode == MODE_CHAT || o->mode == MODE_JSONL;
	if (!o->model) { /* $MOE_MODEL may be a moe-pull name, as -m may */
		const char *d = default_model();
		o->model = d ? cli_model(d) : NULL;
	}
	if (!o->model)
		usage_error("no model given (-m FILE) and no demo model in %s", MOE_PKGDATADIR);
	if (o->prompt && o->file)
		usage_error("-p and -f both give the input; use one");
	if (o->show_pieces && o->mode != MODE_TOKENIZE)
		usage_error("--show-pieces goes with --tokenize");
	if (o->add_special && o->mode != MODE_TOKENIZE)
		usage_error("--add-special goes with --tokenize");
	if (o->parse_special && o->mode != MODE_TOKENIZE && o->mode != MODE_DETOKENIZE)
		usage_error("--parse-special goes with --tokenize or --detokenize");
	if (!o->generation_prompt && o->mode != MODE_RENDER_CHAT)
		usage_error("--no-generation-prompt goes with --render-chat");
	if ((o->system || o->chat_template) && o->mode != MODE_RENDER_CHAT &&
	    o->mode != MODE_CHAT && o->mode != MODE_JSONL)
		usage_error("--system and --chat-template go with --chat, --jsonl or --render-chat");
	if ((o->gen_option_given || o->verbose) && !gen)
		usage_error("generation options go with text generation, --chat or --jsonl");
	if ((o->prompt || o->file) && (o->mode == MODE_CHAT || o->mode == MODE_JSONL))
		usage_error("--chat and --jsonl read standard input; -p and -f are for one prompt");
	if (o->prompt && o->mode == MODE_RENDER_CHAT)
		usage_error("--render-chat reads messages from -f FILE or standard input");
	if (o->reasoning_given && o->mode != MODE_CHAT && o->mode != MODE_JSONL)
		usage_error("--reasoning goes with --chat or --jsonl");
	if ((o->parallel || o->unordered) && o->mode != MODE_JSONL)
		usage_error("--parallel and --unordered go with --jsonl");
	if (o->prompt_cache && o->mode != MODE_GENERATE)
		usage_error("--prompt-cache goes with text generation from one prompt");
	/* the same check as a JSON request's fields get */
	moe_error e = {0};
	if (moe_req_params_check(&o->rp, &e) < 0)
		usage_error("%s", e.msg);
}

/* ----------------------------------------------------------------- input */

static char *read_stream(FILE *f, const char *name, size_t *len)
{
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap + 1);
	if (!buf)
		die("out of memory");
	for (;;) {
		size_t r = fread(buf + n, 1, cap - n, f);
		n += r;
		if (n < cap) {
			if (ferror(f))
				die("%s: read error: %s", name, strerror(errno));
			break;
		}
		if (cap >= INPUT_MAX)
			die("%s: input larger than %zu bytes", name, INPUT_MAX);
		cap *= 2;
		char *p = realloc(buf, cap + 1);
		if (!p)
			die("out of memory");
		buf = p;
	}
	buf[n] = '\0';
	*len = n;
	return buf;
}

/* The input text: -p, -f FILE, or standard input.  NUL-terminated. */
static char *read_input(const run_opts *o, size_t *len)
{
	if (o->prompt) {
		*len = strlen(o->prompt);
		char *s = strdup(o->prompt);
		if (!s)
			die("out of memory");
		return s;
	}
	if (!o->file || strcmp(o->file, "-") == 0)
		return read_stream(stdin, "standard input", len);
	FILE *f = fopen(o->file, "rb");
	if (!f)
		die("%s: %s", o->file, strerror(errno));
	char *s = read_stream(f, o->file, len);
	fclose(f);
	return s;
}

static void write_out(const void *p, size_t n)
{
	if (n && fwrite(p, 1, n, stdout) != n)
		die("write error: %s", strerror(errno));
}

static void flush_out(void)
{
	if (fflush(stdout) != 0)
		die("write error: %s", strerror(errno));
}

/* One line of at most LINE_MAX_BYTES (without its end) into *buf; -1 at
 * the end of input.  *too_long when the line was longer: its first bytes
 * are dropped with the rest, which is read and thrown away. */
static ssize_t read_line(FILE *f, char **buf, size_t *cap, bool *too_long)
{
	size_t n = 0;
	int c;
	*too_long = false;
	while ((c = getc(f)) != EOF && c != '\n') {
		if (n >= LINE_MAX_BYTES) {
			*too_long = true;
			continue;
		}
		if (n + 2 > *cap) {
			size_t nc = *cap ? *cap * 2 : 4096;
			char *b = realloc(*buf, nc);
			if (!b)
				die("out of memory");
			*buf = b;
			*cap = nc;
		}
		(*buf)[n++] = (char)c;
	}
	if (ferror(f))
		die("standard input: read error: %s", strerror(errno));
	if (c == EOF && n == 0 && !*too_long)
		return -1;
	if (*too_long)
		n = 0;
	if (!*buf && !(*buf = malloc(*cap = 4096)))
		die("out of memory");
	(*buf)[n] = '\0';
	return (ssize_t)n;
}

/* ----------------------------------------------------------------- modes */

/* A piece for --show-pieces: printable UTF-8 as is, the rest escaped so
 * that every token stays on one line. */
static void write_piece(const char *s, size_t n)
{
	char *clean;
	size_t cl;
	moe_error e;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '\\')
			fputs("\\\\", stdout);
		else if (c == '\n')
			fputs("\\n", stdout);
		else if (c == '\r')
			fputs("\\r", stdout);
		else if (c == '\t')
			fputs("\\t", stdout);
		else if (c < 0x20 || c == 0x7F)
			printf("\\x%02x", c);
		else if (c < 0x80)
			putchar(c);
		else {
			/* A complete UTF-8 character is printed; a stray byte
			 * (half a character) is escaped. */
			size_t j = i + 1;
			while (j < n && j - i < 4 && ((unsigned char)s[j] & 0xC0) == 0x80)
				j++;
			if (moe_utf8_sanitize(s + i, j - i, &clean, &cl, &e) == 0 &&
			    cl == j - i && memcmp(clean, s + i, cl) == 0) {
				write_out(s + i, j - i);
				i = j - 1;
			} else {
				printf("\\x%02x", c);
			}
			free(clean);
		}
	}
}

static int run_tokenize(const run_opts *o, run_model *m, moe_error *e)
{
	size_t len, n;
	int32_t *ids;
	char *text = read_input(o, &len);
	int rc = moe_tokenizer_encode(m->tok, text, len, o->add_special, o->parse_special, &ids,
				      &n, e);
	free(text);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++) {
		if (o->show_pieces) {
			size_t pl;
			const char *p = moe_tokenizer_piece(m->tok, ids[i], true, &pl);
			printf("%" PRId32 "\t", ids[i]);
			write_piece(p, pl);
			putchar('\n');
		} else {
			printf(i ? " %" PRId32 : "%" PRId32, ids[i]);
		}
	}
	if (!o->show_pieces)
		putchar('\n');
	free(ids);
	return 0;
}

static int run_detokenize(const run_opts *o, run_model *m, moe_error *e)
{
	size_t len;
	char *text = read_input(o, &len);
	moe_detok *d;
	unsigned flags = MOE_DETOK_STRIP_SPACE | (o->parse_special ? MOE_DETOK_SPECIAL : 0);
	int rc = moe_detok_new(&d, m->tok, flags, e);
	const char *s;
	size_t sl;
	char *p = text;

	while (rc == 0) {
		while (*p == ' ' || (*p >= '\t' && *p <= '\r'))
			p++;
		if (!*p)
			break;
		char *end;
		errno = 0;
		long long v = strtoll(p, &end, 10);
		if (end == p || errno || v < INT32_MIN || v > INT32_MAX ||
		    !(*end == '\0' || *end == ' ' || (*end >= '\t' && *end <= '\r'))) {
			int l = 0;
			while (p[l] && p[l] != ' ' && !(p[l] >= '\t' && p[l] <= '\r') && l < 20)
				l++;
			rc = moe_err(e, MOE_EINVAL, "'%.*s' is not a token id", l, p);
			break;
		}
		rc = moe_detok_push(d, (int32_t)v, &s, &sl, e);
		if (rc == 0)
			write_out(s, sl);
		p = end;
	}
	if (rc == 0) {
		moe_detok_flush(d, &s, &sl);
		write_out(s, sl);
	}
	moe_detok_free(d);
	free(text);
	return rc;
}

/* The prompt text for a conversation, with the model's template (or
 * --chat-template) and its own BOS/EOS texts. */
static int render_prompt(const run_opts *o, const moe_tokenizer *tok, const moe_chat_msg *msgs,
			 size_t n, bool gen_prompt, char **out, size_t *len, moe_error *e)
{
	return moe_req_render_chat(tok, msgs, n, o->system, o->chat_template, gen_prompt, out, len,
				   e);
}

static int run_render_chat(const run_opts *o, run_model *m, moe_error *e)
{
	size_t len;
	json_error_t je;
	char *text = read_input(o, &len);
	json_t *root = json_loadb(text, len, 0, &je);
	const char *src = o->file && strcmp(o->file, "-") ? o->file : "standard input";
	free(text);
	if (!root)
		return moe_err(e, MOE_EINVAL, "%s: %s (line %d)", src, je.text, je.line);
	/* An array of messages, or an object with "messages" (and optionally
	 * "tools" and "chat_template_kwargs", as a request carries them); the
	 * messages reach the template as they are (tool calls and replies,
	 * reasoning_content). */
	bool obj = json_is_object(root);
	json_t *arr = obj ? json_object_get(root, "messages") : root;
	char *out;
	size_t ol;
	int rc = moe_req_render_messages(m->tok, arr, obj ? json_object_get(root, "tools") : NULL,
					 obj ? json_object_get(root, "chat_template_kwargs") : NULL,
					 o->system, o->chat_template, o->generation_prompt, &out,
					 &ol, e);
	if (rc == 0) {
		write_out(out, ol);
		free(out);
	} else {
		moe_err_prefix(e, "%s", src);
	}
	json_decref(root);
	return rc;
}

/* ------------------------------------------------------------ generation */

static int emit_stdout(void *user, moe_req *r, const char *text, size_t len)
{
	(void)user, (void)r;
	write_out(text, len);
	flush_out();
	return 0;
}

typedef struct {
	char *buf;
	size_t len, cap;
	bool echo; /* also stream to stdout */
} text_buf;

static int emit_buffer(void *user, moe_req *r, const char *text, size_t len)
{
	text_buf *b = user;
	if (b->len + len + 1 > b->cap) {
		b->cap = (b->len + len + 1) * 2;
		b->buf = realloc(b->buf, b->cap);
		if (!b->buf)
			die("out of memory");
	}
	memcpy(b->buf + b->len, text, len);
	b->len += len;
	b->buf[b->len] = '\0';
	if (b->echo)
		emit_stdout(NULL, r, text, len);
	return 0;
}

/* One assistant turn of a chat: for a harmony model the generated text is
 * split into channels (moe_harmony): the answer (final) and the analysis.
 * Otherwise all of it is the answer. */
typedef struct {
	text_buf final;     /* the answer */
	text_buf reasoning; /* harmony: the analysis channel */
	text_buf raw;       /* harmony: the text as generated */
	moe_harmony *h;     /* NULL: not a harmony model */
	int mode;           /* REASON_*: what is echoed */
	bool echo;          /* stream to stdout */
	int shown;          /* show: the channel echoed last (-1: none yet) */
} reply_buf;

static void reply_init(reply_buf *b, const run_model *m, int mode, bool echo)
{
	memset(b, 0, sizeof *b);
	b->mode = mode;
	b->echo = echo;
	b->shown = -1;
	moe_error e;
	if (moe_tokenizer_is_harmony(m->tok) && moe_harmony_new(&b->h, &e) < 0)
		die_error(&e);
}

static void reply_free(reply_buf *b)
{
	free(b->final.buf);
	free(b->reasoning.buf);
	free(b->raw.buf);
	moe_harmony_free(b->h);
}

static int reply_channel(void *user, moe_harmony_channel ch, const char *text, size_t len)
{
	reply_buf *b = user;
	if (ch == MOE_HARMONY_FINAL)
		emit_buffer(&b->final, NULL, text, len);
	else if (ch == MOE_HARMONY_ANALYSIS)
		emit_buffer(&b->reasoning, NULL, text, len);
	if (!b->echo || b->mode == REASON_RAW || (b->mode == REASON_HIDE && ch != MOE_HARMONY_FINAL))
		return 0;
	if (b->mode == REASON_SHOW && (int)ch != b->shown) {
		/* a new channel: its name in brackets (an answer that comes
		 * first is not marked) */
		if (b->shown >= 0 || ch != MOE_HARMONY_FINAL) {
			char mark[64];
			snprintf(mark, sizeof mark, "%s[%s] ", b->shown < 0 ? "" : "\n",
				 moe_harmony_channel_name(ch));
			write_out(mark, strlen(mark));
		}
		b->shown = (int)ch;
	}
	write_out(text, len);
	flush_out();
	return 0;
}

static int emit_reply(void *user, moe_req *r, const char *text, size_t len)
{
	reply_buf *b = user;
	if (!b->h) {
		text_buf *f = &b->final;
		f->echo = b->echo;
		return emit_buffer(f, r, text, len);
	}
	emit_buffer(&b->raw, r, text, len);
	if (b->echo && b->mode == REASON_RAW) {
		write_out(text, len);
		flush_out();
	}
	return moe_harmony_feed(b->h, text, len, reply_channel, b) < 0 ? -1 : 0;
}

/* The end of the turn: what the parser held back. */
static void reply_end(reply_buf *b)
{
	if (b->h && moe_harmony_finish(b->h, reply_channel, b) < 0)
		die("out of memory");
}

static void report_speed(const run_opts *o, const run_model *m, const moe_req_result *r)
{
	if (!o->verbose)
		return;
	fprintf(stderr, "\n%s: load %.2f s; prompt %zu tokens (%zu evaluated) in %.2f s, %.1f tok/s; "
			"generated %zu tokens in %.2f s, %.1f tok/s; finish: %s\n",
		cli_prog(), m->t_load, r->n_prompt, r->n_prompt_eval, r->t_prompt,
		r->t_prompt > 0 ? r->n_prompt_eval / r->t_prompt : 0.0, r->n_gen, r->t_gen,
		r->t_gen > 0 ? r->n_gen / r->t_gen : 0.0, moe_finish_name(r->finish));
	if (m->experts) {
		moe_experts_stats s;
		moe_experts_get_stats(m->experts, &s);
		fprintf(stderr, "%s: experts: %llu slots of %.2f MiB; hit rate %.1f%%; prediction "
				"%.1f%% right; %.1f MiB read; %.2f s waiting for the disk%s\n",
			cli_prog(), (unsigned long long)s.slots, (double)s.slot_bytes / 1048576,
			s.requests ? 100.0 * (double)s.hits / (double)s.requests : 0.0,
			s.predicted ? 100.0 * (double)s.predicted_right / (double)s.predicted : 0.0,
			(double)s.bytes_read / 1048576, s.io_wait, s.direct ? "" : " (buffered)");
	}
}

/* One request through the scheduler, to the end. */
/* --prompt-cache: what FILE holds of the prompt goes into seq (a damaged or
 * foreign file is a warning, and the prompt is computed). */
static int cache_load(const char *path, moe_seq *seq, const int32_t *ids, size_t n)
{
	moe_error le = {0};
	int loaded = 0;
	if (access(path, F_OK) != 0)
		return 0;
	if (moe_seq_load(seq, path, ids, n, &loaded, &le) < 0) {
		fprintf(stderr, "%s: warning: %s; computing the prompt\n", cli_prog(), le.msg);
		return 0;
	}
	return loaded;
}

static int generate(run_model *m, const moe_req_params *rp, const char *prompt, size_t len,
		    bool chat, moe_seq *seq, moe_req_text_fn emit, void *user, moe_req_result *res,
		    moe_error *e)
{
	int32_t *ids;
	size_t n;
	MOE_TRY(moe_req_tokenize(m->tok, prompt, len, chat, &ids, &n, e));
	int cached = 0;
	if (m->prompt_cache && seq && n > 0)
		cached = cache_load(m->prompt_cache, seq, ids, n);
	moe_req *r;
	moe_req_callbacks cb = {.text = emit, .user = user};
	int rc = moe_req_new(&r, m->eng, ids, n, rp, &cb, e);
	free(ids);
	if (rc < 0)
		return rc;
	if (seq)
		moe_req_use_seq(r, seq);
	if ((rc = moe_sched_submit(m->sched, r, e)) == 0)
		rc = moe_sched_run(m->sched, e);
	*res = *moe_req_get_result(r);
	if (rc == 0 && res->finish == MOE_FINISH_ERROR) {
		*e = res->error;
		rc = e->code ? e->code : MOE_EINTERNAL;
	}
	moe_req_free(r);
	/* save the prompt's state unless the file already had all of it */
	if (rc == 0 && m->prompt_cache && (size_t)cached + 1 < n &&
	    moe_seq_pos(seq) >= (int)n && (rc = moe_seq_save(seq, (int)n, m->prompt_cache, e)) < 0) {
		/* a sliding window passed: the answer stands, the file is not written */
		if (rc == MOE_EUNSUPPORTED) {
			fprintf(stderr, "%s: warning: --prompt-cache: %s\n", cli_prog(), e->msg);
			return 0;
		}
		moe_err_prefix(e, "--prompt-cache");
	}
	return rc;
}

static int run_generate(const run_opts *o, run_model *m, moe_error *e)
{
	size_t len;
	char *prompt = read_input(o, &len);
	moe_req_result res;
	moe_seq *seq = NULL;
	int rc = 0;
	if (o->prompt_cache) {
		m->prompt_cache = o->prompt_cache;
		rc = moe_seq_new(&seq, m->eng, e);
	}
	if (rc == 0)
		rc = generate(m, &o->rp, prompt, len, false, seq, emit_stdout, NULL, &res, e);
	moe_seq_free(seq);
	free(prompt);
	if (rc == 0) {
		if (isatty(STDOUT_FILENO))
			putchar('\n');
		report_speed(o, m, &res);
	}
	return rc;
}

/* One user message per input line; the conversation is rendered anew each
 * turn and runs on one sequence, which keeps the tokens the turns share. */
static int run_chat(const run_opts *o, run_model *m, moe_error *e)
{
	moe_seq *seq;
	MOE_TRY(moe_seq_new(&seq, m->eng, e));
	moe_chat_msg *msgs = NULL;
	size_t n = 0, cap = 0;
	char *line = NULL;
	size_t lcap = 0;
	bool tty = isatty(STDIN_FILENO);
	int rc = 0;
	for (;;) {
		if (tty)
			fputs("> ", stderr);
		bool too_long;
		ssize_t r = read_line(stdin, &line, &lcap, &too_long);
		if (r < 0)
			break;
		if (too_long) {
			rc = moe_err(e, MOE_EINVAL, "a message longer than %zu bytes", LINE_MAX_BYTES);
			break;
		}
		while (r > 0 && (line[r - 1] == '\n' || line[r - 1] == '\r'))
			line[--r] = '\0';
		if (r == 0)
			continue;
		if (n + 2 > cap) {
			cap = (n + 2) * 2;
			msgs = realloc(msgs, cap * sizeof *msgs);
			if (!msgs)
				die("out of memory");
		}
		msgs[n].role = "user";
		msgs[n].content = strdup(line);
		if (!msgs[n].content)
			die("out of memory");
		n++;
		char *prompt;
		size_t plen;
		if ((rc = render_prompt(o, m->tok, msgs, n, true, &prompt, &plen, e)) < 0)
			break;
		reply_buf reply;
		reply_init(&reply, m, o->reasoning, true);
		moe_req_result res;
		rc = generate(m, &o->rp, prompt, plen, true, seq, emit_reply, &reply, &res, e);
		free(prompt);
		if (rc < 0) {
			reply_free(&reply);
			break;
		}
		reply_end(&reply);
		write_out("\n", 1);
		flush_out();
		report_speed(o, m, &res);
		/* the history keeps the answer (the template drops the analysis) */
		msgs[n].role = "assistant";
		msgs[n].content = reply.final.buf ? reply.final.buf : strdup("");
		reply.final.buf = NULL;
		reply_free(&reply);
		if (!msgs[n].content)
			die("out of memory");
		n++;
	}
	for (size_t i = 0; i < n; i++)
		free((char *)msgs[i].content);
	free(msgs);
	free(line);
	moe_seq_free(seq);
	return rc;
}

/* --jsonl: one result line per request line, in input order (or as they
 * finish with --unordered); up to --parallel requests decode together.  A
 * bad request gets an error object and the batch goes on. */
typedef struct jsonl_item {
	long lineno;
	json_t *out;          /* the result line, once known */
	json_t *id;           /* the request's "id" */
	moe_req *req;
	reply_buf reply;
	struct jsonl_batch *batch;
} jsonl_item;

typedef struct jsonl_batch {
	const run_opts *o;
	run_model *m;
	jsonl_item **items;   /* not yet written, input order */
	size_t n, cap;
} jsonl_batch;

static void jsonl_error(jsonl_item *it, const char *msg)
{
	it->out = json_object();
	if (it->id)
		json_object_set(it->out, "id", it->id);
	json_object_set_new(it->out, "error", json_string(msg));
	json_object_set_new(it->out, "line", json_integer(it->lineno));
}

static void jsonl_done(void *user, moe_req *r)
{
	jsonl_item *it = user;
	const moe_req_result *res = moe_req_get_result(r);
	if (res->finish == MOE_FINISH_ERROR) {
		jsonl_error(it, res->error.msg);
		return;
	}
	it->out = json_object();
	if (it->id)
		json_object_set(it->out, "id", it->id);
	/* a harmony model's chat: the answer as text, the analysis apart
	 * (--reasoning=raw: the text as generated) */
	reply_buf *b = &it->reply;
	reply_end(b);
	const text_buf *t = b->h && b->mode == REASON_RAW ? &b->raw : &b->final;
	json_object_set_new(it->out, "text", json_stringn(t->buf ? t->buf : "", t->len));
	if (b->h && b->mode != REASON_RAW)
		json_object_set_new(it->out, "reasoning_content",
				    json_stringn(b->reasoning.buf ? b->reasoning.buf : "",
						 b->reasoning.len));
	json_object_set_new(it->out, "tokens", json_integer((json_int_t)res->n_gen));
	json_object_set_new(it->out, "prompt_tokens", json_integer((json_int_t)res->n_prompt));
	json_object_set_new(it->out, "finish_reason", json_string(moe_finish_name(res->finish)));
	report_speed(it->batch->o, it->batch->m, res);
}

/* Write finished results: the leading ones (in order), or all (unordered). */
static void jsonl_flush(jsonl_batch *b)
{
	size_t keep = 0;
	bool blocked = false;
	for (size_t i = 0; i < b->n; i++) {
		jsonl_item *it = b->items[i];
		if (!it->out || (blocked && !b->o->unordered)) {
			blocked = true;
			b->items[keep++] = it;
			continue;
		}
		char *s = json_dumps(it->out, JSON_COMPACT | JSON_ENSURE_ASCII);
		if (!s)
			die("out of memory");
		write_out(s, strlen(s));
		write_out("\n", 1);
		free(s);
		json_decref(it->out);
		json_decref(it->id);
		moe_req_free(it->req);
		reply_free(&it->reply);
		free(it);
	}
	b->n = keep;
	flush_out();
}

static int jsonl_text(void *user, moe_req *r, const char *text, size_t len)
{
	return emit_reply(&((jsonl_item *)user)->reply, r, text, len);
}

/* Parse one line into a submitted request (or an error result). */
static void jsonl_submit(jsonl_batch *b, const char *line, size_t len, long lineno)
{
	jsonl_item *it = calloc(1, sizeof *it);
	if (!it || (b->n == b->cap && !(b->items = realloc(b->items, (b->cap = b->cap * 2 + 16) *
								       sizeof *b->items))))
		die("out of memory");
	b->items[b->n++] = it;
	it->lineno = lineno;
	it->batch = b;
	moe_req_defaults d = {b->o->rp, b->o->system, b->o->chat_template};
	moe_req_input in;
	moe_error le = {0};
	if (moe_req_parse(line, len, b->m->tok, &d, &in, &le) < 0) {
		/* a bad field: the error line still carries the request's id, so
		 * a client can match it (moe-run(1), --jsonl) */
		json_t *j = json_loadb(line, len, 0, NULL);
		json_t *id = json_is_object(j) ? json_object_get(j, "id") : NULL;
		if (id)
			it->id = json_incref(id);
		json_decref(j);
		jsonl_error(it, le.msg);
		return;
	}
	if (in.id)
		it->id = json_incref(in.id);
	reply_init(&it->reply, b->m, b->o->reasoning, false);
	if (!in.chat) { /* a raw prompt's text is passed on as it is */
		moe_harmony_free(it->reply.h);
		it->reply.h = NULL;
	}
	int32_t *ids = NULL;
	size_t n;
	moe_req_callbacks cb = {.text = jsonl_text, .done = jsonl_done, .user = it};
	if (moe_req_tokenize(b->m->tok, in.prompt, in.prompt_len, in.chat, &ids, &n, &le) < 0 ||
	    moe_req_new(&it->req, b->m->eng, ids, n, &in.params, &cb, &le) < 0 ||
	    moe_sched_submit(b->m->sched, it->req, &le) < 0)
		jsonl_error(it, le.msg);
	free(ids);
	moe_req_input_free(&in);
}

static int run_jsonl(const run_opts *o, run_model *m, moe_error *e)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t r = 0;
	long lineno = 0;
	int parallel = o->parallel > 0 ? o->parallel : 1, rc = 0;
	jsonl_batch b = {.o = o, .m = m};
	bool eof = false;
	while (!eof || b.n) {
		/* keep the scheduler fed: up to `parallel` requests waiting or running */
		int busy = 0;
		for (size_t i = 0; i < b.n; i++)
			busy += b.items[i]->req && !moe_req_done(b.items[i]->req);
		while (!eof && busy < parallel) {
			bool too_long;
			if ((r = read_line(stdin, &line, &cap, &too_long)) < 0) {
				eof = true;
				break;
			}
			lineno++;
			if (too_long) {
				/* an error line in its place; the batch goes on */
				jsonl_submit(&b, "", 0, lineno);
				json_object_set_new(b.items[b.n - 1]->out, "error",
						    json_sprintf("a request longer than %zu bytes",
								 LINE_MAX_BYTES));
				continue;
			}
			size_t len = (size_t)r;
			while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
				len--;
			if (len == 0)
				continue;
			jsonl_submit(&b, line, len, lineno);
			jsonl_item *it = b.items[b.n - 1];
			busy += it->req && !moe_req_done(it->req);
		}
		if (busy && (rc = moe_sched_step(m->sched, e)) < 0)
			break;
		rc = 0;
		jsonl_flush(&b);
	}
	free(b.items);
	free(line);
	return rc;
}

/* ------------------------------------------------------------------ main */

static void not_gguf(const char *path)
{
	char magic[4] = {0};
	FILE *f = fopen(path, "rb");
	if (f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0)
		die("%s: a GGUF file; convert it first: moe-convert %s MODEL.uth", path, path);
	if (f)
		fclose(f);
}

/* Tokenizer modes need only the vocabulary; generation binds the weights
 * and makes a context. */
static void open_model(const run_opts *o, run_model *m)
{
	moe_error e = {0};
	double t0 = moe_time_now();
	if (o->mode == MODE_TOKENIZE || o->mode == MODE_DETOKENIZE || o->mode == MODE_RENDER_CHAT) {
		if (moe_uth_open(&m->uth, o->model, &e) < 0) {
			not_gguf(o->model);
			die_error(&e);
		}
		if (moe_tokenizer_load(&m->own_tok, m->uth, &e) < 0)
			die_error(&e);
		m->tok = m->own_tok;
		return;
	}
	if (moe_model_load(&m->model, o->model, &e) < 0) {
		not_gguf(o->model);
		die_error(&e);
	}
	if (!m->model->tok)
		die("%s: the model has no tokenizer", o->model);
	m->tok = m->model->tok;
	if (o->verify_reads && !o->mem_budget)
		die("--verify-reads goes with --mem-budget");
	if (o->mem_budget) {
		moe_experts_params xp = {.verify_reads = o->verify_reads};
		if (moe_experts_parse_budget(o->mem_budget, m->model, &xp.budget, &e) < 0)
			die_error(&e);
		if (moe_experts_open(&m->experts, m->model, &xp, &e) < 0)
			die_error(&e);
	}
	moe_engine_params ep = {.kv_size = o->n_ctx, .n_threads = o->threads,
				.n_batch = o->n_batch, .kv_type = o->kv_type, .experts = m->experts};
	moe_sched_params sp = {.n_parallel = o->parallel};
	if (moe_engine_new(&m->eng, m->model, &ep, &e) < 0 ||
	    moe_sched_new(&m->sched, m->eng, &sp, &e) < 0)
		die_error(&e);
	m->t_load = moe_time_now() - t0;
}

int main(int argc, char **argv)
{
	run_opts o;
	run_model m = {0};
	moe_error e = {0};
	int rc = 0;

	cli_init(argv[0]);
	parse_args(argc, argv, &o);
	open_model(&o, &m);
	if (o.chat_template && strcasecmp(o.chat_template, "auto") != 0 &&
	    moe_chat_template_from_name(o.chat_template) < 0 &&
	    !moe_tokenizer_chat_template_named(m.tok, o.chat_template))
		usage_error("unknown chat template '%s' (the model's own: auto%s; built-in: %s)",
			    o.chat_template,
			    moe_tokenizer_chat_template_named(m.tok, "tool_use") ? ", tool_use" : "",
			    moe_chat_template_names());
	switch (o.mode) {
	case MODE_GENERATE: rc = run_generate(&o, &m, &e); break;
	case MODE_CHAT: rc = run_chat(&o, &m, &e); break;
	case MODE_JSONL: rc = run_jsonl(&o, &m, &e); break;
	case MODE_TOKENIZE: rc = run_tokenize(&o, &m, &e); break;
	case MODE_DETOKENIZE: rc = run_detokenize(&o, &m, &e); break;
	case MODE_RENDER_CHAT: rc = run_render_chat(&o, &m, &e); break;
	case MODE_NONE: break;
	}
	/* a full disk or a closed pipe must not pass for success */
	if (fflush(stdout) != 0 || ferror(stdout) || fclose(stdout) != 0)
		die("write error: %s", strerror(errno));
	moe_sched_free(m.sched);
	moe_engine_free(m.eng);
	moe_experts_close(m.experts);
	moe_model_free(m.model);
	moe_tokenizer_free(m.own_tok);
	moe_uth_close(m.uth);
	if (rc < 0)
		die_error(&e);
	return 0;
}

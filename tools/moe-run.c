/* moe-run — run a model: generate text from a prompt (the default), chat
 * (--chat), a JSONL batch (--jsonl), or the tokenizer modes (--tokenize,
 * --detokenize, --render-chat, which also work on vocabulary-only files).
 * main() parses options into a run_opts, opens the model and hands it to the
 * mode's function; the work itself is in libmoecore (generate.h, text.h).
 * Without -m the model is $MOE_MODEL, else the demo model installed with the
 * tools (MOE_PKGDATADIR), else the one in the source tree the tools were built
 * from (MOE_SRC_SHAREDIR), so an uninstalled build runs out of the box. */
#include "cli.h"
#include "generate.h"
#include "model.h"
#include "quant.h"
#include "text.h"
#include "uth.h"

#include <errno.h>
#include <stddef.h>
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
	/* generation */
	int n_predict;             /* -n: -1 = until EOS or a full context */
	int threads, n_ctx, n_batch, kv_type;
	moe_sampler_params sp;
	const char *stop[16];
	size_t n_stop;
	bool ignore_eos, verbose;
	bool gen_option_given;     /* for usage checks */
} run_opts;

/* The open model: the file and what the modes need from it. */
typedef struct run_model {
	moe_uth *uth;          /* tokenizer modes */
	moe_model *model;      /* generation modes (owns its file and tokenizer) */
	const moe_tokenizer *tok;
	moe_tokenizer *own_tok;
	moe_ctx *ctx;
	double t_load;
} run_model;

#define INPUT_MAX ((size_t)1 << 30)

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
	static char path[PATH_MAX];
	const char *env = getenv("MOE_MODEL");
	if (env && *env)
		return env;
	const char *dirs[] = {
		MOE_PKGDATADIR,
#ifdef MOE_SRC_SHAREDIR
		MOE_SRC_SHAREDIR,
#endif
	};
	for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
		int n = snprintf(path, sizeof path, "%s/%s", dirs[i], DEMO_MODEL);
		if (n > 0 && (size_t)n < sizeof path && access(path, R_OK) == 0)
			return path;
	}
	return NULL;
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
	       "  -i, --chat            interactive chat: one user message per input line; the\n"
	       "                        KV cache is kept across turns\n"
	       "      --jsonl           batch: each input line {\"prompt\": ...} or {\"messages\":\n"
	       "                        [...]} (plus sampling fields) gives one output line\n"
	       "                        {\"text\", \"tokens\", \"finish_reason\"}\n"
	       "      --tokenize        print the token ids of the text, separated by spaces\n"
	       "      --detokenize      read token ids (separated by white space), print text\n"
	       "      --render-chat     read a JSON array of {\"role\", \"content\"} messages and\n"
	       "                        print the prompt the model would see\n"
	       "\n"
	       "Generation:\n"
	       "  -m, --model=FILE      the model (.uth; default: see above)\n"
	       "  -p, --prompt=TEXT     the prompt\n"
	       "  -f, --file=FILE       read the prompt from FILE ('-' for standard input)\n"
	       "  -n, --n-predict=N     tokens to generate (default -1: until end of text or a\n"
	       "                        full context)\n"
	       "  -t, --threads=N       threads (default: the number of CPUs)\n"
	       "  -c, --ctx-size=N      context length in tokens (default: the model's, at most\n"
	       "                        4096)\n"
	       "  -b, --batch-size=N    prompt tokens per forward batch (default 256)\n"
	       "      --kv-type=TYPE    KV cache type: f16 (default) or q8_0\n"
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
	       "      --chat-template=NAME  use this template instead of recognising the\n"
	       "                        model's (%s)\n"
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
		OPT_IGNORE_EOS, OPT_VERBOSE,
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
		{"verbose", no_argument, NULL, OPT_VERBOSE},
		{"help", no_argument, NULL, OPT_HELP},
		{"version", no_argument, NULL, OPT_VERSION},
		{NULL, 0, NULL, 0},
	};
	int c;

	*o = (run_opts){.generation_prompt = true, .n_predict = -1, .sp = moe_sampler_defaults()};
	o->sp.seed = (uint64_t)(moe_time_now() * 1e9);
	while ((c = getopt_long(argc, argv, "m:p:f:in:t:c:b:", longopts, NULL)) != -1) {
		run_mode m = MODE_NONE;
		if (c == 'n' || c == 't' || c == 'c' || c == 'b' ||
		    (c >= OPT_KV_TYPE && c <= OPT_IGNORE_EOS))
			o->gen_option_given = true;
		switch (c) {
		case 'i': m = MODE_CHAT; break;
		case OPT_JSONL: m = MODE_JSONL; break;
		case 'n': o->n_predict = (int)cli_parse_long("-n", optarg, -1, 1 << 30); break;
		case 't': o->threads = (int)cli_parse_long("-t", optarg, 1, 1024); break;
		case 'c': o->n_ctx = (int)cli_parse_long("-c", optarg, 1, 1 << 24); break;
		case 'b': o->n_batch = (int)cli_parse_long("-b", optarg, 1, 1 << 16); break;
		case OPT_KV_TYPE:
			o->kv_type = moe_type_from_name(optarg);
			if (o->kv_type != MOE_F16 && o->kv_type != MOE_Q8_0)
				usage_error("--kv-type must be f16 or q8_0, not '%s'", optarg);
			break;
		case OPT_TEMP: o->sp.temp = cli_parse_float("--temp", optarg, 0, 100); break;
		case OPT_TOP_K: o->sp.top_k = (int)cli_parse_long("--top-k", optarg, 0, 1 << 30); break;
		case OPT_TOP_P: o->sp.top_p = cli_parse_float("--top-p", optarg, 1e-6, 1); break;
		case OPT_MIN_P: o->sp.min_p = cli_parse_float("--min-p", optarg, 0, 1); break;
		case OPT_REPEAT_PENALTY:
			o->sp.repeat_penalty = cli_parse_float("--repeat-penalty", optarg, 1e-3, 100);
			break;
		case OPT_REPEAT_LAST_N:
			o->sp.repeat_last_n = (int)cli_parse_long("--repeat-last-n", optarg, -1, 1 << 20);
			break;
		case OPT_PRESENCE:
			o->sp.presence_penalty = cli_parse_float("--presence-penalty", optarg, -100, 100);
			break;
		case OPT_FREQUENCY:
			o->sp.frequency_penalty = cli_parse_float("--frequency-penalty", optarg, -100, 100);
			break;
		case OPT_SEED: o->sp.seed = (uint64_t)cli_parse_long("--seed", optarg, 0, LONG_MAX); break;
		case OPT_STOP:
			if (o->n_stop == 16)
				usage_error("at most 16 --stop strings");
			if (!*optarg)
				usage_error("--stop needs a non-empty string");
			o->stop[o->n_stop++] = optarg;
			o->gen_option_given = true;
			break;
		case OPT_IGNORE_EOS: o->ignore_eos = true; break;
		case OPT_VERBOSE: o->verbose = true; break;
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
			if (moe_chat_template_from_name(optarg) < 0)
				usage_error("unknown chat template '%s' (known: %s)", optarg,
					    moe_chat_template_names());
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
	if (!o->model)
		o->model = default_model();
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

/* Messages from a JSON array of {"role", "content"} (pointers into arr). */
static int parse_messages(const json_t *arr, const char *src, moe_chat_msg **out, size_t *n,
			  moe_error *e)
{
	if (!json_is_array(arr))
		return moe_err(e, MOE_EINVAL,
			       "%s: expected a JSON array of {\"role\", \"content\"} messages", src);
	size_t i;
	json_t *v;
	moe_chat_msg *msgs = calloc(json_array_size(arr) + 1, sizeof *msgs);
	if (!msgs)
		die("out of memory");
	json_array_foreach(arr, i, v) {
		msgs[i].role = json_string_value(json_object_get(v, "role"));
		msgs[i].content = json_string_value(json_object_get(v, "content"));
		if (!msgs[i].role || !msgs[i].content) {
			free(msgs);
			return moe_err(e, MOE_EINVAL,
				       "%s: message %zu: needs string \"role\" and \"content\"", src, i);
		}
	}
	*out = msgs;
	*n = json_array_size(arr);
	return 0;
}

/* The prompt text for a conversation, with the model's template (or
 * --chat-template) and its own BOS/EOS texts. */
static int render_prompt(const run_opts *o, const moe_tokenizer *tok, const moe_chat_msg *msgs,
			 size_t n, bool gen_prompt, char **out, size_t *len, moe_error *e)
{
	moe_chat_template tmpl;
	if (o->chat_template)
		tmpl = (moe_chat_template)moe_chat_template_from_name(o->chat_template);
	else
		tmpl = moe_chat_detect(moe_tokenizer_chat_template(tok), NULL);
	char *bos = NULL, *eos = NULL;
	size_t tl;
	const char *t = moe_tokenizer_token_text(tok, moe_tokenizer_special(tok, MOE_SPECIAL_BOS), &tl);
	if (t)
		bos = strndup(t, tl);
	t = moe_tokenizer_token_text(tok, moe_tokenizer_special(tok, MOE_SPECIAL_EOS), &tl);
	if (t)
		eos = strndup(t, tl);
	int rc = moe_chat_render(tmpl, msgs, n, o->system, gen_prompt, bos, eos, out, len, e);
	free(bos);
	free(eos);
	return rc;
}

static int run_render_chat(const run_opts *o, run_model *m, moe_error *e)
{
	size_t len, n;
	json_error_t je;
	char *text = read_input(o, &len);
	json_t *root = json_loadb(text, len, 0, &je);
	const char *src = o->file && strcmp(o->file, "-") ? o->file : "standard input";
	free(text);
	if (!root)
		return moe_err(e, MOE_EINVAL, "%s: %s (line %d)", src, je.text, je.line);
	/* An array of messages, or an object with "messages". */
	json_t *arr = json_is_object(root) ? json_object_get(root, "messages") : root;
	moe_chat_msg *msgs;
	int rc = parse_messages(arr, src, &msgs, &n, e);
	if (rc == 0) {
		char *out;
		size_t ol;
		rc = render_prompt(o, m->tok, msgs, n, o->generation_prompt, &out, &ol, e);
		if (rc == 0) {
			write_out(out, ol);
			free(out);
		}
		free(msgs);
	}
	json_decref(root);
	return rc;
}

/* ------------------------------------------------------------ generation */

static int emit_stdout(void *user, const char *text, size_t len)
{
	(void)user;
	write_out(text, len);
	fflush(stdout);
	return 0;
}

typedef struct {
	char *buf;
	size_t len, cap;
	bool echo; /* also stream to stdout */
} text_buf;

static int emit_buffer(void *user, const char *text, size_t len)
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
		emit_stdout(NULL, text, len);
	return 0;
}

static void report_speed(const run_opts *o, const run_model *m, const moe_gen_result *r)
{
	if (!o->verbose)
		return;
	fprintf(stderr, "\n%s: load %.2f s; prompt %zu tokens (%zu evaluated) in %.2f s, %.1f tok/s; "
			"generated %zu tokens in %.2f s, %.1f tok/s; finish: %s\n",
		cli_prog(), m->t_load, r->n_prompt, r->n_prompt_eval, r->t_prompt,
		r->t_prompt > 0 ? r->n_prompt_eval / r->t_prompt : 0.0, r->n_gen, r->t_gen,
		r->t_gen > 0 ? r->n_gen / r->t_gen : 0.0, moe_finish_name(r->finish));
}

static int generate(run_model *m, const moe_sampler_params *sp, const moe_gen_params *gp,
		    const char *prompt, size_t len, bool add_special, moe_gen_emit_fn emit,
		    void *user, moe_gen_result *res, moe_error *e)
{
	int32_t *ids;
	size_t n;
	/* As llama.cpp: BOS when the tokenizer asks for it, special-token text
	 * in prompts is parsed (chat templates rely on it). */
	MOE_TRY(moe_tokenizer_encode(m->tok, prompt, len, add_special, true, &ids, &n, e));
	moe_sampler *s;
	int rc = moe_sampler_new(&s, sp, (int)moe_ctx_n_vocab(m->ctx), e);
	if (rc == 0) {
		rc = moe_generate(m->ctx, m->tok, s, ids, n, gp, emit, user, res, e);
		moe_sampler_free(s);
	}
	free(ids);
	return rc;
}

static moe_gen_params gen_params(const run_opts *o)
{
	return (moe_gen_params){.n_predict = o->n_predict, .stop = o->stop, .n_stop = o->n_stop,
				.ignore_eos = o->ignore_eos};
}

static int run_generate(const run_opts *o, run_model *m, moe_error *e)
{
	size_t len;
	char *prompt = read_input(o, &len);
	moe_gen_params gp = gen_params(o);
	moe_gen_result res;
	int rc = generate(m, &o->sp, &gp, prompt, len, true, emit_stdout, NULL, &res, e);
	free(prompt);
	if (rc == 0) {
		if (isatty(STDOUT_FILENO))
			putchar('\n');
		report_speed(o, m, &res);
	}
	return rc;
}

/* One user message per input line; the conversation is rendered anew each
 * turn and the context reuses the tokens it already holds. */
static int run_chat(const run_opts *o, run_model *m, moe_error *e)
{
	moe_chat_msg *msgs = NULL;
	size_t n = 0, cap = 0;
	char *line = NULL;
	size_t lcap = 0;
	bool tty = isatty(STDIN_FILENO);
	int rc = 0;
	for (;;) {
		if (tty)
			fputs("> ", stderr);
		ssize_t r = getline(&line, &lcap, stdin);
		if (r < 0)
			break;
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
		text_buf reply = {.echo = true};
		moe_gen_params gp = gen_params(o);
		moe_gen_result res;
		rc = generate(m, &o->sp, &gp, prompt, plen, false, emit_buffer, &reply, &res, e);
		free(prompt);
		if (rc < 0) {
			free(reply.buf);
			break;
		}
		putchar('\n');
		fflush(stdout);
		report_speed(o, m, &res);
		msgs[n].role = "assistant";
		msgs[n].content = reply.buf ? reply.buf : strdup("");
		if (!msgs[n].content)
			die("out of memory");
		n++;
	}
	for (size_t i = 0; i < n; i++)
		free((char *)msgs[i].content);
	free(msgs);
	free(line);
	return rc;
}

/* Per-request sampling fields override the command line's. */
static int jsonl_params(const json_t *req, const run_opts *o, moe_sampler_params *sp,
			moe_gen_params *gp, const char **stops, moe_error *e)
{
	*sp = o->sp;
	*gp = gen_params(o);
	static const struct { const char *key; int kind; size_t off; } fields[] = {
		{"temperature", 0, offsetof(moe_sampler_params, temp)},
		{"temp", 0, offsetof(moe_sampler_params, temp)},
		{"top_p", 0, offsetof(moe_sampler_params, top_p)},
		{"min_p", 0, offsetof(moe_sampler_params, min_p)},
		{"repeat_penalty", 0, offsetof(moe_sampler_params, repeat_penalty)},
		{"presence_penalty", 0, offsetof(moe_sampler_params, presence_penalty)},
		{"frequency_penalty", 0, offsetof(moe_sampler_params, frequency_penalty)},
		{"top_k", 1, offsetof(moe_sampler_params, top_k)},
		{"repeat_last_n", 1, offsetof(moe_sampler_params, repeat_last_n)},
	};
	for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
		json_t *v = json_object_get(req, fields[i].key);
		if (!v)
			continue;
		if (!json_is_number(v))
			return moe_err(e, MOE_EINVAL, "\"%s\" must be a number", fields[i].key);
		if (fields[i].kind == 0)
			*(float *)((char *)sp + fields[i].off) = (float)json_number_value(v);
		else
			*(int *)((char *)sp + fields[i].off) = (int)json_number_value(v);
	}
	json_t *v = json_object_get(req, "seed");
	if (v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return moe_err(e, MOE_EINVAL, "\"seed\" must be a non-negative integer");
		sp->seed = (uint64_t)json_integer_value(v);
	}
	v = json_object_get(req, "n_predict");
	if (!v)
		v = json_object_get(req, "max_tokens");
	if (v) {
		if (!json_is_integer(v) || json_integer_value(v) < -1 || json_integer_value(v) > INT_MAX)
			return moe_err(e, MOE_EINVAL, "\"n_predict\" must be an integer >= -1");
		gp->n_predict = (int)json_integer_value(v);
	}
	v = json_object_get(req, "stop");
	if (v) {
		size_t k = 0;
		if (json_is_string(v)) {
			stops[k++] = json_string_value(v);
		} else if (json_is_array(v) && json_array_size(v) <= 16) {
			size_t i;
			json_t *sv;
			json_array_foreach(v, i, sv) {
				if (!json_is_string(sv) || !*json_string_value(sv))
					return moe_err(e, MOE_EINVAL, "\"stop\" entries must be non-empty strings");
				stops[k++] = json_string_value(sv);
			}
		} else {
			return moe_err(e, MOE_EINVAL, "\"stop\" must be a string or an array of at most 16");
		}
		gp->stop = stops;
		gp->n_stop = k;
	}
	return 0;
}

static int jsonl_one(const run_opts *o, run_model *m, const char *line, size_t len, json_t **out,
		     moe_error *e)
{
	json_error_t je;
	json_t *req = json_loadb(line, len, 0, &je);
	if (!json_is_object(req)) {
		json_decref(req);
		return req ? moe_err(e, MOE_EINVAL, "a request must be a JSON object")
			   : moe_err(e, MOE_EINVAL, "invalid JSON: %s", je.text);
	}
	moe_sampler_params sp;
	moe_gen_params gp;
	const char *stops[16];
	int rc = jsonl_params(req, o, &sp, &gp, stops, e);
	char *prompt = NULL;
	size_t plen = 0;
	bool chat = false;
	json_t *pj = json_object_get(req, "prompt"), *mj = json_object_get(req, "messages");
	if (rc == 0 && json_is_string(pj) && !mj) {
		prompt = strdup(json_string_value(pj));
		plen = json_string_length(pj);
	} else if (rc == 0 && mj && !pj) {
		moe_chat_msg *msgs;
		size_t n;
		rc = parse_messages(mj, "\"messages\"", &msgs, &n, e);
		if (rc == 0) {
			rc = render_prompt(o, m->tok, msgs, n, true, &prompt, &plen, e);
			free(msgs);
			chat = true;
		}
	} else if (rc == 0) {
		rc = moe_err(e, MOE_EINVAL, "a request needs a string \"prompt\" or a \"messages\" array");
	}
	text_buf text = {0};
	moe_gen_result res;
	if (rc == 0)
		rc = generate(m, &sp, &gp, prompt, plen, !chat, emit_buffer, &text, &res, e);
	if (rc == 0) {
		*out = json_object();
		if (json_object_get(req, "id"))
			json_object_set(*out, "id", json_object_get(req, "id"));
		json_object_set_new(*out, "text", json_stringn(text.buf ? text.buf : "", text.len));
		json_object_set_new(*out, "tokens", json_integer((json_int_t)res.n_gen));
		json_object_set_new(*out, "prompt_tokens", json_integer((json_int_t)res.n_prompt));
		json_object_set_new(*out, "finish_reason", json_string(moe_finish_name(res.finish)));
		report_speed(o, m, &res);
	}
	free(text.buf);
	free(prompt);
	json_decref(req);
	return rc;
}

/* One result line per request line; a bad request gets an error object
 * and the batch goes on. */
static int run_jsonl(const run_opts *o, run_model *m, moe_error *e)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t r;
	long lineno = 0;
	while ((r = getline(&line, &cap, stdin)) >= 0) {
		lineno++;
		size_t len = (size_t)r;
		while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			len--;
		if (len == 0)
			continue;
		json_t *out = NULL;
		moe_error le = {0};
		if (jsonl_one(o, m, line, len, &out, &le) < 0) {
			out = json_object();
			json_object_set_new(out, "error", json_string(le.msg));
			json_object_set_new(out, "line", json_integer(lineno));
		}
		char *s = json_dumps(out, JSON_COMPACT | JSON_ENSURE_ASCII);
		json_decref(out);
		if (!s)
			die("out of memory");
		write_out(s, strlen(s));
		write_out("\n", 1);
		fflush(stdout);
		free(s);
	}
	free(line);
	(void)e;
	return 0;
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
	moe_ctx_params cp = {.n_ctx = o->n_ctx, .n_threads = o->threads, .n_batch = o->n_batch,
			     .kv_type = o->kv_type};
	if (moe_ctx_new(&m->ctx, m->model, &cp, &e) < 0)
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
	switch (o.mode) {
	case MODE_GENERATE: rc = run_generate(&o, &m, &e); break;
	case MODE_CHAT: rc = run_chat(&o, &m, &e); break;
	case MODE_JSONL: rc = run_jsonl(&o, &m, &e); break;
	case MODE_TOKENIZE: rc = run_tokenize(&o, &m, &e); break;
	case MODE_DETOKENIZE: rc = run_detokenize(&o, &m, &e); break;
	case MODE_RENDER_CHAT: rc = run_render_chat(&o, &m, &e); break;
	case MODE_NONE: break;
	}
	if (fflush(stdout) != 0)
		die("write error: %s", strerror(errno));
	moe_ctx_free(m.ctx);
	moe_model_free(m.model);
	moe_tokenizer_free(m.own_tok);
	moe_uth_close(m.uth);
	if (rc < 0)
		die_error(&e);
	return 0;
}

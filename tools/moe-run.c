/* moe-run — run a model: for now the tokenizer modes (--tokenize,
 * --detokenize, --render-chat), which work on vocabulary-only models.
 * main() parses options into a run_opts, opens the model and hands it to the
 * mode's function; generation modes add a mode and a function. */
#include "cli.h"
#include "text.h"
#include "uth.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef enum run_mode {
	MODE_NONE,
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
} run_opts;

/* The open model: the file and what the modes need from it. */
typedef struct run_model {
	moe_uth *uth;
	moe_tokenizer *tok;
} run_model;

#define INPUT_MAX ((size_t)1 << 30)

static void help(void)
{
	printf("Usage: %s -m MODEL --tokenize [OPTION]... [-p TEXT | -f FILE]\n"
	       "  or:  %s -m MODEL --detokenize [OPTION]... [-p IDS | -f FILE]\n"
	       "  or:  %s -m MODEL --render-chat [OPTION]... [-f FILE]\n"
	       "Run a model in the UTH format (see moe-convert(1)).  Input comes from -p, -f\n"
	       "or standard input.\n"
	       "\n"
	       "Modes:\n"
	       "      --tokenize        print the token ids of the text, separated by spaces\n"
	       "      --detokenize      read token ids (separated by white space), print text\n"
	       "      --render-chat     read a JSON array of {\"role\", \"content\"} messages and\n"
	       "                        print the prompt the model would see\n"
	       "\n"
	       "Options:\n"
	       "  -m, --model=FILE      the model (.uth; vocabulary-only files work)\n"
	       "  -p, --prompt=TEXT     input given on the command line\n"
	       "  -f, --file=FILE       input read from FILE ('-' for standard input)\n"
	       "      --add-special     add BOS/EOS as the model asks (--tokenize)\n"
	       "      --parse-special   special-token text such as <s> or <|im_end|> becomes\n"
	       "                        those tokens (--tokenize); control tokens are\n"
	       "                        printed as their text (--detokenize)\n"
	       "      --show-pieces     --tokenize prints one 'ID<TAB>PIECE' line per token\n"
	       "      --system=TEXT     system prompt when the messages have none\n"
	       "      --chat-template=NAME  use this template instead of recognising the\n"
	       "                        model's (%s)\n"
	       "      --no-generation-prompt  do not open an assistant turn at the end\n"
	       "      --help            display this help and exit\n"
	       "      --version         output version information and exit\n"
	       "\n"
	       "Exit status: 0 success, 1 failure, 2 usage error.\n"
	       "See moe-run(1).\n",
	       cli_prog(), cli_prog(), cli_prog(), moe_chat_template_names());
}

static void parse_args(int argc, char **argv, run_opts *o)
{
	enum {
		OPT_HELP = 256, OPT_VERSION, OPT_TOKENIZE, OPT_DETOKENIZE, OPT_RENDER_CHAT,
		OPT_ADD_SPECIAL, OPT_PARSE_SPECIAL, OPT_SHOW_PIECES, OPT_SYSTEM, OPT_TEMPLATE,
		OPT_NO_GEN,
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
		{"help", no_argument, NULL, OPT_HELP},
		{"version", no_argument, NULL, OPT_VERSION},
		{NULL, 0, NULL, 0},
	};
	int c;

	*o = (run_opts){.generation_prompt = true};
	while ((c = getopt_long(argc, argv, "m:p:f:", longopts, NULL)) != -1) {
		run_mode m = MODE_NONE;
		switch (c) {
		case 'm': o->model = optarg; break;
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
		usage_error("no mode given (--tokenize, --detokenize or --render-chat); "
			    "text generation is not available yet");
	if (!o->model)
		usage_error("no model given (-m FILE)");
	if (o->prompt && o->file)
		usage_error("-p and -f both give the input; use one");
	if (o->show_pieces && o->mode != MODE_TOKENIZE)
		usage_error("--show-pieces goes with --tokenize");
	if (o->add_special && o->mode != MODE_TOKENIZE)
		usage_error("--add-special goes with --tokenize");
	if ((o->system || o->chat_template || !o->generation_prompt) &&
	    o->mode != MODE_RENDER_CHAT)
		usage_error("--system, --chat-template and --no-generation-prompt go with "
			    "--render-chat");
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
	/* An array of messages, or an object with "messages". */
	json_t *arr = json_is_object(root) ? json_object_get(root, "messages") : root;
	if (!json_is_array(arr)) {
		json_decref(root);
		return moe_err(e, MOE_EINVAL,
			       "%s: expected a JSON array of {\"role\", \"content\"} "
			       "messages",
			       src);
	}
	size_t n = json_array_size(arr), i;
	moe_chat_msg *msgs = calloc(n + 1, sizeof *msgs);
	json_t *v;
	if (!msgs)
		die("out of memory");
	json_array_foreach(arr, i, v) {
		msgs[i].role = json_string_value(json_object_get(v, "role"));
		msgs[i].content = json_string_value(json_object_get(v, "content"));
		if (!msgs[i].role || !msgs[i].content) {
			free(msgs);
			json_decref(root);
			return moe_err(e, MOE_EINVAL, "%s: message %zu: needs string \"role\" and "
				       "\"content\"", src, i);
		}
	}

	moe_chat_template tmpl;
	if (o->chat_template) {
		tmpl = (moe_chat_template)moe_chat_template_from_name(o->chat_template);
	} else {
		tmpl = moe_chat_detect(moe_tokenizer_chat_template(m->tok), NULL);
	}
	/* The model's own BOS/EOS texts, where it has them. */
	char *bos = NULL, *eos = NULL;
	size_t tl;
	const char *t = moe_tokenizer_token_text(m->tok,
		moe_tokenizer_special(m->tok, MOE_SPECIAL_BOS), &tl);
	if (t)
		bos = strndup(t, tl);
	t = moe_tokenizer_token_text(m->tok, moe_tokenizer_special(m->tok, MOE_SPECIAL_EOS), &tl);
	if (t)
		eos = strndup(t, tl);
	char *out;
	size_t ol;
	int rc = moe_chat_render(tmpl, msgs, n, o->system, o->generation_prompt, bos, eos, &out,
				 &ol, e);
	if (rc == 0) {
		write_out(out, ol);
		free(out);
	}
	free(bos);
	free(eos);
	free(msgs);
	json_decref(root);
	return rc;
}

/* ------------------------------------------------------------------ main */

static void open_model(const char *path, run_model *m)
{
	moe_error e = {0};
	if (moe_uth_open(&m->uth, path, &e) < 0) {
		char magic[4] = {0};
		FILE *f = fopen(path, "rb");
		if (f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0)
			die("%s: a GGUF file; convert it first: moe-convert %s MODEL.uth", path,
			    path);
		if (f)
			fclose(f);
		die_error(&e);
	}
	if (moe_tokenizer_load(&m->tok, m->uth, &e) < 0)
		die_error(&e);
}

int main(int argc, char **argv)
{
	run_opts o;
	run_model m = {0};
	moe_error e = {0};
	int rc = 0;

	cli_init(argv[0]);
	parse_args(argc, argv, &o);
	open_model(o.model, &m);
	switch (o.mode) {
	case MODE_TOKENIZE: rc = run_tokenize(&o, &m, &e); break;
	case MODE_DETOKENIZE: rc = run_detokenize(&o, &m, &e); break;
	case MODE_RENDER_CHAT: rc = run_render_chat(&o, &m, &e); break;
	case MODE_NONE: break;
	}
	if (fflush(stdout) != 0)
		die("write error: %s", strerror(errno));
	moe_tokenizer_free(m.tok);
	moe_uth_close(m.uth);
	if (rc < 0)
		die_error(&e);
	return 0;
}

/* moe-convert — GGUF files and Hugging Face snapshots to UTH; --info and
 * --verify for existing files.  Options only: the work is moe_convert(). */
#include "cli.h"
#include "convert.h"
#include "quant.h"
#include "uth.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void help(void)
{
	printf("Usage: %s [OPTION]... INPUT OUTPUT\n"
	       "  or:  %s --info [--json] FILE\n"
	       "  or:  %s --verify FILE\n"
	       "Convert a model to the UTH format read by the other moe tools.\n"
	       "\n"
	       "INPUT is a GGUF file, a Hugging Face snapshot directory, or such a directory\n"
	       "inside a .tar, .tar.gz, .tar.zst or .zip archive (read without unpacking).\n"
	       "OUTPUT is a file (written atomically) or '-' for standard output.\n"
	       "\n"
	       "  -t, --type=TYPE   store safetensors matrices as TYPE: f32, f16, bf16,\n"
	       "                    or q8_0, q4_0, q4_1, q5_0, q5_1 (moe-quant's\n"
	       "                    quantisers); default: keep the source type.  Not\n"
	       "                    for GGUF input (use moe-quant)\n"
	       "      --reference-quant  with a quantised --type: ggml's round-to-nearest\n"
	       "                    reference bytes instead of moe-quant's search\n"
	       "      --repack      store Q8_0 and Q4_K matrices in the row-interleaved\n"
	       "                    layout r4 (four rows per block column; uth(5))\n"
	       "  -i, --info        print a summary of FILE (.uth or .gguf)\n"
	       "      --json        with --info: print JSON instead of text\n"
	       "      --verify      check the header and every tensor checksum of FILE\n"
	       "  -q, --quiet       no closing message on a terminal\n"
	       "      --help        display this help and exit\n"
	       "      --version     output version information and exit\n"
	       "\n"
	       "Exit status: 0 success, 1 failure, 2 usage error.\n"
	       "See moe-convert(1) and uth(5).\n",
	       cli_prog(), cli_prog(), cli_prog());
}

/* What was printed must have arrived: a full disk or a closed descriptor
 * is a failure, not a silent exit 0. */
static int finish_stdout(void)
{
	if (fflush(stdout) != 0 || ferror(stdout) || fclose(stdout) != 0)
		die("standard output: write error: %s", errno ? strerror(errno) : "unknown error");
	return 0;
}

int main(int argc, char **argv)
{
	cli_init(argv[0]);
	enum { OPT_HELP = 256, OPT_VERSION, OPT_JSON, OPT_VERIFY, OPT_REFERENCE, OPT_REPACK };
	static const struct option longopts[] = {
		{"type", required_argument, NULL, 't'}, {"info", no_argument, NULL, 'i'},
		{"json", no_argument, NULL, OPT_JSON},   {"verify", no_argument, NULL, OPT_VERIFY},
		{"reference-quant", no_argument, NULL, OPT_REFERENCE},
		{"repack", no_argument, NULL, OPT_REPACK},
		{"quiet", no_argument, NULL, 'q'},       {"help", no_argument, NULL, OPT_HELP},
		{"version", no_argument, NULL, OPT_VERSION}, {NULL, 0, NULL, 0},
	};
	moe_convert_opts o = {.out_type = -1};
	bool info = false, json = false, verify = false, quiet = false;
	int c;
	while ((c = getopt_long(argc, argv, "t:iq", longopts, NULL)) != -1) {
		switch (c) {
		case 't':
			o.out_type = moe_type_from_name(optarg);
			if (o.out_type < 0 || !moe_convert_type_ok(o.out_type))
				usage_error("--type must be one of %s, not '%s'", MOE_CONVERT_TYPES, optarg);
			break;
		case 'i': info = true; break;
		case OPT_JSON: json = true; break;
		case OPT_VERIFY: verify = true; break;
		case OPT_REFERENCE: o.reference_quant = true; break;
		case OPT_REPACK: o.repack = true; break;
		case 'q': quiet = true; break;
		case OPT_HELP: help(); return 0;
		case OPT_VERSION: print_version(); return 0;
		default: usage_error("unknown option");
		}
	}
	int nargs = argc - optind;
	moe_error e = {0};
	if (info || verify) {
		if (info && verify)
			usage_error("--info and --verify are separate modes");
		if (nargs != 1)
			usage_error("%s takes exactly one FILE", info ? "--info" : "--verify");
		const char *path = argv[optind];
		if (verify) {
			moe_uth *u;
			if (moe_uth_open(&u, path, &e) < 0 || moe_uth_verify(u, &e) < 0)
				die_error(&e);
			printf("%s: OK (%llu tensors verified)\n", path, (unsigned long long)u->n_tensors);
			moe_uth_close(u);
			return finish_stdout();
		}
		json_t *j;
		if (moe_model_info(path, &j, &e) < 0)
			die_error(&e);
		char *s = json ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : moe_model_info_text(j);
		fputs(s, stdout);
		if (json)
			fputc('\n', stdout);
		free(s);
		json_decref(j);
		return finish_stdout();
	}
	if (json)
		usage_error("--json goes with --info");
	if (o.reference_quant && (o.out_type < 0 || !moe_type_get(o.out_type)->is_quantized))
		usage_error("--reference-quant goes with a quantised --type (q8_0, q4_0, q4_1, q5_0, q5_1)");
	if (nargs != 2)
		usage_error(nargs < 2 ? "missing INPUT or OUTPUT" : "too many arguments");
	o.input = argv[optind];
	o.output = argv[optind + 1];
	if (!strcmp(o.output, "-") && isatty(STDOUT_FILENO))
		usage_error("refusing to write a binary model to a terminal");
	double t0 = moe_time_now();
	if (moe_convert(&o, &e) < 0)
		die_error(&e);
	if (!quiet && isatty(STDERR_FILENO))
		fprintf(stderr, "%s: wrote %s in %.1f s\n", cli_prog(), o.output, moe_time_now() - t0);
	return 0;
}

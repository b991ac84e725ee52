/* moe-pull — get a model by name: Hugging Face repos, URLs and local files
 * become registered UTH models; list, show, rm, tag and repair the
 * registry.  Options only: the work is moe_pull() and moe_registry_*(). */
#include "cli.h"
#include "convert.h"
#include "quant.h"
#include "registry.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void help(void)
{
	printf("Usage: %s [OPTION]... SOURCE\n"
	       "  or:  %s list [--json]\n"
	       "  or:  %s show [--json] NAME\n"
	       "  or:  %s rm NAME...\n"
	       "  or:  %s tag NAME NEWNAME\n"
	       "  or:  %s repair\n"
	       "Fetch a model, convert it to UTH and register it under a name that every\n"
	       "moe tool accepts in place of a file (moe-run -m NAME).\n"
	       "\n"
	       "SOURCE is a Hugging Face repo ORG/NAME or hf://ORG/NAME (a safetensors\n"
	       "snapshot, or the GGUF model of the repo), ORG/NAME:QUANT (the GGUF file(s)\n"
	       "of that quantisation, e.g. :Q4_K_M; split GGUFs are joined), an http(s)\n"
	       "URL of a .gguf, .uth or snapshot archive, or a local file or directory.\n"
	       "Hub files land in the Hugging Face cache ($HF_HUB_CACHE), shared with\n"
	       "huggingface_hub; models in $XDG_DATA_HOME/moe ($MOE_STORE overrides).\n"
	       "\n"
	       "  -n, --name=NAME[:TAG]   register as NAME:TAG (default: ORG/NAME and the\n"
	       "                          quant, or the file's name; tag 'latest')\n"
	       "  -r, --revision=REV      branch, tag or commit of the repo (default main)\n"
	       "  -I, --include=GLOB      fetch the repo files matching GLOB (repeatable)\n"
	       "  -t, --type=TYPE         store safetensors matrices as TYPE (as moe-convert:\n"
	       "                          %s)\n"
	       "      --sha256=HEX        expected sha256 of a URL download\n"
	       "  -j, --connections=N     parallel ranges per large file (default 4)\n"
	       "      --retries=N         retries per request (default 5)\n"
	       "      --retry-wait=S      first wait between retries, doubling (default 1)\n"
	       "      --timeout=S         connect timeout, and abort a transfer that moves\n"
	       "                          no data for S seconds (default 30)\n"
	       "      --download-only     fetch into the cache; do not convert or register\n"
	       "      --json              print the entry (pull, show) or all (list) as JSON\n"
	       "  -q, --quiet             no progress or messages\n"
	       "      --help              display this help and exit\n"
	       "      --version           output version information and exit\n"
	       "\n"
	       "Environment: HF_ENDPOINT, HF_TOKEN (else $HF_HOME/token), HF_HUB_OFFLINE=1,\n"
	       "HF_HUB_CACHE, HF_HOME, XDG_DATA_HOME, XDG_CACHE_HOME, MOE_STORE.\n"
	       "Exit status: 0 success, 1 failure, 2 usage error.  See moe-pull(1).\n",
	       cli_prog(), cli_prog(), cli_prog(), cli_prog(), cli_prog(), cli_prog(),
	       MOE_CONVERT_TYPES);
}

/* ------------------------------------------------------------ progress */

typedef struct progress {
	bool quiet, tty;
	bool line_open;
	double t_file;
	uint64_t first_done; /* bytes present when the file started (resume) */
	double t_start;
	uint64_t all_first;
	bool have_first_all;
} progress;

static void human(uint64_t b, char *buf, size_t n)
{
	const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)b;
	int i = 0;
	while (v >= 1024 && i < 4)
		v /= 1024, i++;
	snprintf(buf, n, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

static void eta(double s, char *buf, size_t n)
{
	if (!(s >= 0) || s > 99 * 3600)
		snprintf(buf, n, "--");
	else if (s >= 3600)
		snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
	else if (s >= 60)
		snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
	else
		snprintf(buf, n, "%ds", (int)s);
}

static void end_line(progress *p)
{
	if (p->line_open) {
		fputs("\r\033[K", stderr);
		p->line_open = false;
	}
}

static void on_progress(void *user, const moe_pull_event *ev)
{
	progress *p = user;
	if (p->quiet)
		return;
	char a[32], b[32], r[32], t[32], ta[32], tb[32];
	switch (ev->kind) {
	case MOE_PULL_EV_STAGE:
		if (p->tty) {
			end_line(p);
			fprintf(stderr, "%s: %s\n", cli_prog(), ev->msg);
		}
		break;
	case MOE_PULL_EV_FILE:
		p->t_file = moe_time_now();
		p->first_done = UINT64_MAX;
		break;
	case MOE_PULL_EV_BYTES: {
		if (!p->tty)
			break;
		if (p->first_done == UINT64_MAX)
			p->first_done = ev->file_done;
		if (!p->have_first_all) {
			p->have_first_all = true;
			p->all_first = ev->all_done;
			p->t_start = moe_time_now();
		}
		double dt = moe_time_now() - p->t_file;
		double rate = dt > 0 ? (double)(ev->file_done - p->first_done) / dt : 0;
		human(ev->file_done, a, sizeof a);
		human(rate, r, sizeof r);
		bool known = ev->file_total != UINT64_MAX;
		if (known) {
			human(ev->file_total, b, sizeof b);
			eta(rate > 0 ? (double)(ev->file_total - ev->file_done) / rate : -1, t, sizeof t);
		}
		double dta = moe_time_now() - p->t_start;
		double rate_all = dta > 0 ? (double)(ev->all_done - p->all_first) / dta : 0;
		human(ev->all_done, ta, sizeof ta);
		human(ev->all_total, tb, sizeof tb);
		char teta[32];
		eta(rate_all > 0 ? (double)(ev->all_total - ev->all_done) / rate_all : -1, teta, sizeof teta);
		fprintf(stderr, "\r\033[K[%d/%d] %.40s  ", ev->file_index + 1, ev->n_files, ev->file);
		if (known)
			fprintf(stderr, "%3d%% %s/%s %s/s ETA %s", (int)(100.0 * ev->file_done / (ev->file_total ? ev->file_total : 1)), a, b, r, t);
		else
			fprintf(stderr, "%s %s/s", a, r);
		if (ev->n_files > 1 && ev->all_total != UINT64_MAX && known)
			fprintf(stderr, " | total %s/%s ETA %s", ta, tb, teta);
		p->line_open = true;
		break;
	}
	case MOE_PULL_EV_FILE_END: {
		end_line(p);
		double dt = moe_time_now() - p->t_file;
		human(ev->file_total != UINT64_MAX ? ev->file_total : ev->file_done, a, sizeof a);
		if (!strcmp(ev->msg, "cached"))
			fprintf(stderr, "%s: [%d/%d] %s: %s, cached\n", cli_prog(), ev->file_index + 1,
				ev->n_files, ev->file, a);
		else
			fprintf(stderr, "%s: [%d/%d] %s: %s, %s in %.1f s\n", cli_prog(), ev->file_index + 1,
				ev->n_files, ev->file, a, ev->msg, dt);
		break;
	}
	}
}

/* ------------------------------------------------------------ commands */

static void print_entry_text(const moe_registry_entry *en)
{
	char sz[32], when[64] = "never";
	human(en->size, sz, sizeof sz);
	time_t t = (time_t)en->created;
	char created[64];
	strftime(created, sizeof created, "%Y-%m-%d %H:%M:%S UTC", gmtime(&t));
	if (en->last_used) {
		t = (time_t)en->last_used;
		strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&t));
	}
	printf("name:          %s:%s\n"
	       "source:        %s\n"
	       "revision:      %s\n"
	       "architecture:  %s\n"
	       "parameters:    %llu\n"
	       "weight types:  %s\n"
	       "size:          %s (%llu bytes)\n"
	       "sha256:        %s\n"
	       "file:          %s\n"
	       "created:       %s\n"
	       "last used:     %s\n",
	       en->name, en->tag, en->source, en->revision[0] ? en->revision : "-", en->architecture,
	       (unsigned long long)en->parameters, en->weight_types, sz, (unsigned long long)en->size,
	       en->sha256, en->path, created, when);
}

static void print_json(json_t *j)
{
	char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	puts(s);
	free(s);
	json_decref(j);
}

static int cmd_list(bool json)
{
	moe_error e = {0};
	moe_registry *r = NULL;
	moe_registry_entry *v = NULL;
	size_t n = 0;
	/* read-only: listing works on a read-only store, and no store is an
	 * empty list */
	int rc = moe_registry_open(&r, true, &e);
	if (rc < 0 && rc != MOE_ENOTFOUND)
		die_error(&e);
	if (r && moe_registry_list(r, &v, &n, &e) < 0)
		die_error(&e);
	if (json) {
		json_t *a = json_array();
		for (size_t i = 0; i < n; i++)
			json_array_append_new(a, moe_registry_entry_json(&v[i]));
		print_json(a);
	} else {
		printf("%-44s %10s %-12s %8s  %-20s %s\n", "NAME", "SIZE", "ARCH", "PARAMS", "TYPES",
		       "LAST USED");
		for (size_t i = 0; i < n; i++) {
			char full[400], sz[32], pm[32], when[32] = "never";
			snprintf(full, sizeof full, "%s:%s", v[i].name, v[i].tag);
			human(v[i].size, sz, sizeof sz);
			double p = (double)v[i].parameters;
			if (p >= 1e9)
				snprintf(pm, sizeof pm, "%.1fB", p / 1e9);
			else if (p >= 1e6)
				snprintf(pm, sizeof pm, "%.1fM", p / 1e6);
			else
				snprintf(pm, sizeof pm, "%.0fK", p / 1e3);
			if (v[i].last_used) {
				time_t t = (time_t)v[i].last_used;
				strftime(when, sizeof when, "%Y-%m-%d %H:%M", gmtime(&t));
			}
			printf("%-44s %10s %-12s %8s  %-20s %s\n", full, sz, v[i].architecture, pm,
			       v[i].weight_types, when);
		}
	}
	free(v);
	moe_registry_close(r);
	return 0;
}

int main(int argc, char **argv)
{
	cli_init(argv[0]);
	enum { OPT_HELP = 256, OPT_VERSION, OPT_JSON, OPT_SHA, OPT_RETRIES, OPT_WAIT, OPT_TIMEOUT,
	       OPT_DLONLY };
	static const struct option longopts[] = {
		{"name", required_argument, NULL, 'n'},      {"revision", required_argument, NULL, 'r'},
		{"include", required_argument, NULL, 'I'},   {"type", required_argument, NULL, 't'},
		{"sha256", required_argument, NULL, OPT_SHA}, {"connections", required_argument, NULL, 'j'},
		{"retries", required_argument, NULL, OPT_RETRIES},
		{"retry-wait", required_argument, NULL, OPT_WAIT},
		{"timeout", required_argument, NULL, OPT_TIMEOUT},
		{"download-only", no_argument, NULL, OPT_DLONLY},
		{"json", no_argument, NULL, OPT_JSON},       {"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, OPT_HELP},       {"version", no_argument, NULL, OPT_VERSION},
		{NULL, 0, NULL, 0},
	};
	moe_pull_opts o = {.out_type = -1, .retries = -1};
	const char *include[64];
	bool json = false, quiet = false;
	int c;
	while ((c = getopt_long(argc, argv, "n:r:I:t:j:q", longopts, NULL)) != -1) {
		switch (c) {
		case 'n': o.name = optarg; break;
		case 'r': o.revision = optarg; break;
		case 'I':
			if (o.n_include == 64)
				usage_error("at most 64 --include patterns");
			include[o.n_include++] = optarg;
			break;
		case 't':
			o.out_type = moe_type_from_name(optarg);
			if (o.out_type < 0 || !moe_convert_type_ok(o.out_type))
				usage_error("--type must be one of %s, not '%s'", MOE_CONVERT_TYPES, optarg);
			break;
		case OPT_SHA:
			if (strlen(optarg) != 64 || strspn(optarg, "0123456789abcdefABCDEF") != 64)
				usage_error("--sha256 takes 64 hex digits");
			o.sha256 = optarg;
			break;
		case 'j': o.connections = (int)cli_parse_long("--connections", optarg, 1, 32); break;
		case OPT_RETRIES: o.retries = (int)cli_parse_long("--retries", optarg, 0, 100); break;
		case OPT_WAIT: o.retry_wait = cli_parse_float("--retry-wait", optarg, 0.01, 600); break;
		case OPT_TIMEOUT: o.timeout = cli_parse_float("--timeout", optarg, 1, 3600); break;
		case OPT_DLONLY: o.download_only = true; break;
		case OPT_JSON: json = true; break;
		case 'q': quiet = true; break;
		case OPT_HELP: help(); return 0;
		case OPT_VERSION: print_version(); return 0;
		default: usage_error("unknown option");
		}
	}
	o.include = include;
	int nargs = argc - optind;
	char **args = argv + optind;
	if (nargs < 1)
		usage_error("missing SOURCE (or a command: list, show, rm, tag, repair)");
	moe_error e = {0};
	const char *cmd = args[0];
	if (!strcmp(cmd, "list")) {
		if (nargs != 1)
			usage_error("list takes no arguments");
		return cmd_list(json);
	}
	if (!strcmp(cmd, "show") || !strcmp(cmd, "rm") || !strcmp(cmd, "tag") || !strcmp(cmd, "repair")) {
		if (!strcmp(cmd, "repair")) {
			if (nargs != 1)
				usage_error("repair takes no arguments");
			size_t n;
			char moved[4400];
			if (moe_registry_repair(&n, moved, sizeof moved, &e) < 0)
				die_error(&e);
			if (!quiet) {
				if (moved[0])
					fprintf(stderr, "%s: moved the old database to %s\n", cli_prog(), moved);
				fprintf(stderr, "%s: restored %zu name%s\n", cli_prog(), n, n == 1 ? "" : "s");
			}
			return 0;
		}
		moe_registry *r;
		if (!strcmp(cmd, "show")) {
			if (nargs != 2)
				usage_error("show takes one NAME");
			if (moe_registry_open(&r, true, &e) < 0)
				die_error(&e);
			moe_registry_entry en;
			if (moe_registry_get(r, args[1], &en, &e) < 0)
				die_error(&e);
			if (json)
				print_json(moe_registry_entry_json(&en));
			else
				print_entry_text(&en);
			moe_registry_close(r);
			return 0;
		}
		if (!strcmp(cmd, "tag") && nargs != 3)
			usage_error("tag takes NAME and NEWNAME");
		if (!strcmp(cmd, "rm") && nargs < 2)
			usage_error("rm takes one or more NAMEs");
		if (moe_registry_open(&r, false, &e) < 0)
			die_error(&e);
		if (!strcmp(cmd, "tag")) {
			if (moe_registry_tag(r, args[1], args[2], &e) < 0)
				die_error(&e);
		} else {
			int status = 0;
			for (int i = 1; i < nargs; i++) {
				bool gone;
				if (moe_registry_rm(r, args[i], &gone, &e) < 0) {
					fprintf(stderr, "%s: %s\n", cli_prog(), e.msg);
					status = 1;
				} else if (!quiet) {
					fprintf(stderr, "%s: removed %s%s\n", cli_prog(), args[i],
						gone ? " and its file" : " (its file has other names)");
				}
			}
			moe_registry_close(r);
			return status;
		}
		moe_registry_close(r);
		return 0;
	}
	if (nargs != 1)
		usage_error("one SOURCE at a time");
	o.source = cmd;
	progress p = {.quiet = quiet, .tty = isatty(STDERR_FILENO)};
	o.progress = on_progress;
	o.user = &p;
	double t0 = moe_time_now();
	moe_registry_entry en;
	int rc = moe_pull(&o, &en, &e);
	end_line(&p);
	if (rc < 0)
		die_error(&e);
	if (json && !o.download_only) {
		print_json(moe_registry_entry_json(&en));
	} else if (o.download_only) {
		printf("%s\n", en.path);
	}
	if (!quiet && !o.download_only) {
		char sz[32];
		human(en.size, sz, sizeof sz);
		fprintf(stderr, "%s: %s:%s ready (%s, %s, %s) in %.1f s\n", cli_prog(), en.name, en.tag,
			en.architecture, en.weight_types, sz, moe_time_now() - t0);
	}
	return 0;
}

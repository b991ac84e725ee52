/* moe-serve — OpenAI and Ollama HTTP APIs over the engine (moe-serve(1)).
 * main() parses options, starts the server (lib/serve.h) and waits for
 * SIGTERM or SIGINT. */
#include "cli.h"
#include "engine.h"
#include "experts.h"
#include "serve.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef MOE_PKGDATADIR
#define MOE_PKGDATADIR "/usr/local/share/moe"
#endif
#define DEMO_MODEL "moe-demo.uth"

enum { OPT_HOST = 256, OPT_PORT, OPT_SOCKET, OPT_PARALLEL, OPT_QUEUE, OPT_API_KEY,
       OPT_API_KEY_FILE, OPT_CORS, OPT_MAX_BODY, OPT_MAX_HEADER, OPT_MAX_DEPTH,
       OPT_MAX_CONN, OPT_IDLE, OPT_KEEP_ALIVE, OPT_ALLOW_PATHS, OPT_TEMPLATE, OPT_MEM_BUDGET };

static void help(void)
{
	printf("Usage: %s [-m MODEL]... [OPTION]...\n"
	       "Serve models over HTTP with the OpenAI (/v1/...) and Ollama (/api/...) APIs.\n"
	       "\n"
	       "  -m, --model [NAME=]MODEL a UTH file or a registry name (moe-pull(1));\n"
	       "                           repeatable: the first is the default and loads at\n"
	       "                           start, the others on first use; without -m\n"
	       "                           $MOE_MODEL or the demo model.  Requests may also\n"
	       "                           name any registered model\n"
	       "      --host ADDR          TCP address (default 127.0.0.1)\n"
	       "      --port N             TCP port (default 8080; 0: any free port)\n"
	       "      --socket PATH        also listen on a Unix domain socket (without --host\n"
	       "                           or --port: only there)\n"
	       "  -t, --threads N          compute threads (default: the cores)\n"
	       "  -c, --kv-size N          KV tokens per model, all requests together\n"
	       "                           (default: the model's context, at most 4096)\n"
	       "  -b, --batch-size N       tokens per forward pass (default 256)\n"
	       "      --parallel N         requests generating at once per model (default 4)\n"
	       "      --queue N            requests waiting beyond those (default 64; then 503)\n"
	       "      --api-key KEY        require this key (Bearer or X-Api-Key; /health is\n"
	       "                           exempt)\n"
	       "      --api-key-file F     the key from the first line of F\n"
	       "      --cors ORIGIN        allow browsers from ORIGIN (default: no CORS)\n"
	       "      --max-body N         request body limit in bytes (default 8388608)\n"
	       "      --max-header N       request head limit in bytes (default 65536, at\n"
	       "                           least 4096)\n"
	       "      --max-depth N        JSON nesting limit (default 64)\n"
	       "      --max-connections N  open connections (default 256)\n"
	       "      --idle-timeout S     close silent connections after S seconds (default\n"
	       "                           30)\n"
	       "      --keep-alive S       unload idle models after S seconds (default 300;\n"
	       "                           -1: never)\n"
	       "      --allow-paths        accept model paths in requests, and URLs and paths\n"
	       "                           in /api/pull\n"
	       "      --mem-budget SIZE    weights of all loaded models together at most SIZE\n"
	       "                           (e.g. 2G): idle models unload to make room, else a\n"
	       "                           model's routed experts stream from its file as in\n"
	       "                           moe-run; 'min': every model streamed at its minimum\n"
	       "      --chat-template NAME a chat template for every model (default: its own)\n"
	       "      --help               display this help and exit\n"
	       "      --version            output version information and exit\n"
	       "\n"
	       "SIGTERM or SIGINT: stop accepting, cancel what runs, exit 0.  See moe-serve(1).\n",
	       cli_prog());
}

/* -m [NAME=]MODEL: MODEL through the registry (cli_model), named NAME, else
 * after the file or the registry name's last part. */
static const char *model_spec(const char *arg, char **owned)
{
	const char *eq = strchr(arg, '=');
	const char *m = eq ? eq + 1 : arg;
	if (access(m, F_OK) == 0)
		return arg; /* a file, as before */
	const char *path = cli_model(m);
	const char *base = strrchr(m, '/');
	base = base ? base + 1 : m;
	int nlen = eq ? (int)(eq - arg) : (int)strlen(base);
	size_t n = (size_t)nlen + strlen(path) + 2;
	char *spec = malloc(n);
	if (!spec)
		die("out of memory");
	snprintf(spec, n, "%.*s=%s", nlen, eq ? arg : base, path);
	*owned = spec; /* freed at exit */
	return spec;
}

static char *read_key_file(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		die("%s: %s", path, strerror(errno));
	char line[4096];
	if (!fgets(line, sizeof line, f)) {
		fclose(f);
		die("%s: empty key file", path);
	}
	fclose(f);
	line[strcspn(line, "\r\n")] = 0;
	if (!*line)
		die("%s: empty key", path);
	return strdup(line);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"model", required_argument, NULL, 'm'}, {"threads", required_argument, NULL, 't'},
		{"kv-size", required_argument, NULL, 'c'}, {"batch-size", required_argument, NULL, 'b'},
		{"host", required_argument, NULL, OPT_HOST}, {"port", required_argument, NULL, OPT_PORT},
		{"socket", required_argument, NULL, OPT_SOCKET},
		{"parallel", required_argument, NULL, OPT_PARALLEL},
		{"queue", required_argument, NULL, OPT_QUEUE},
		{"api-key", required_argument, NULL, OPT_API_KEY},
		{"api-key-file", required_argument, NULL, OPT_API_KEY_FILE},
		{"cors", required_argument, NULL, OPT_CORS},
		{"max-body", required_argument, NULL, OPT_MAX_BODY},
		{"max-header", required_argument, NULL, OPT_MAX_HEADER},
		{"max-depth", required_argument, NULL, OPT_MAX_DEPTH},
		{"max-connections", required_argument, NULL, OPT_MAX_CONN},
		{"idle-timeout", required_argument, NULL, OPT_IDLE},
		{"keep-alive", required_argument, NULL, OPT_KEEP_ALIVE},
		{"allow-paths", no_argument, NULL, OPT_ALLOW_PATHS},
		{"chat-template", required_argument, NULL, OPT_TEMPLATE},
		{"mem-budget", required_argument, NULL, OPT_MEM_BUDGET},
		{"help", no_argument, NULL, 'h'}, {"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0}};
	cli_init(argv[0]);
	moe_serve_params p = moe_serve_defaults();
	p.version = PACKAGE_VERSION;
	const char **models = calloc((size_t)argc + 1, sizeof *models);
	char **owned = calloc((size_t)argc + 1, sizeof *owned); /* specs model_spec made */
	size_t n_models = 0;
	bool tcp_asked = false;
	char *key = NULL;
	int c;
	if (!models || !owned)
		die("out of memory");
	while ((c = getopt_long(argc, argv, "m:t:c:b:", longopts, NULL)) != -1) {
		switch (c) {
		case 'm': models[n_models] = model_spec(optarg, &owned[n_models]); n_models++; break;
		case 't': p.n_threads = (int)cli_parse_long("-t", optarg, 1, 1024); break;
		case 'c': p.kv_size = (int)cli_parse_long("-c", optarg, 1, 1 << 24); break;
		case 'b': p.n_batch = (int)cli_parse_long("-b", optarg, 1, 1 << 16); break;
		case OPT_HOST: p.host = optarg; tcp_asked = true; break;
		case OPT_PORT: p.port = (int)cli_parse_long("--port", optarg, 0, 65535); tcp_asked = true; break;
		case OPT_SOCKET: p.socket_path = optarg; break;
		case OPT_PARALLEL: p.n_parallel = (int)cli_parse_long("--parallel", optarg, 1, 4096); break;
		case OPT_QUEUE: p.queue_max = (int)cli_parse_long("--queue", optarg, 0, 1 << 20); break;
		case OPT_API_KEY: free(key); key = strdup(optarg); break;
		case OPT_API_KEY_FILE: free(key); key = read_key_file(optarg); break;
		case OPT_CORS: p.cors_origin = optarg; break;
		case OPT_MAX_BODY: p.max_body = (size_t)cli_parse_long("--max-body", optarg, 1, LONG_MAX); break;
		case OPT_MAX_HEADER:
			p.max_header = (size_t)cli_parse_long("--max-header", optarg, 4096, 1L << 30);
			break;
		case OPT_MAX_DEPTH: p.max_depth = (int)cli_parse_long("--max-depth", optarg, 1, 10000); break;
		case OPT_MAX_CONN:
			p.max_connections = (int)cli_parse_long("--max-connections", optarg, 1, 1 << 20);
			break;
		case OPT_IDLE: p.idle_timeout = (int)cli_parse_long("--idle-timeout", optarg, 1, 86400); break;
		case OPT_KEEP_ALIVE:
			p.keep_alive = (double)cli_parse_long("--keep-alive", optarg, -1, 1L << 31);
			break;
		case OPT_ALLOW_PATHS: p.allow_paths = true; break;
		case OPT_TEMPLATE: p.chat_template = optarg; break;
		case OPT_MEM_BUDGET: p.mem_budget = optarg; break;
		case 'h': help(); return 0;
		case 'V': print_version(); return 0;
		default: usage_error("unknown option");
		}
	}
	if (p.mem_budget && strcmp(p.mem_budget, "min") != 0) {
		/* one size for all models: no percentage (of which model?) */
		moe_error be = {0};
		uint64_t b;
		if (moe_experts_parse_size(p.mem_budget, 0, &b, &be) < 0)
			usage_error("--mem-budget (shared by all models: a size or min): %s", be.msg);
	}
	if (optind < argc)
		usage_error("unexpected argument '%s'", argv[optind]);
	if (p.socket_path && !tcp_asked)
		p.host = NULL;
	if (n_models == 0) {
		static const char *const dirs[] = {
			MOE_PKGDATADIR,
#ifdef MOE_SRC_SHAREDIR
			MOE_SRC_SHAREDIR,
#endif
		};
		const char *d = moe_req_default_model(dirs, sizeof dirs / sizeof dirs[0], DEMO_MODEL);
		if (!d)
			usage_error("no model: give -m MODEL (or set MOE_MODEL)");
		/* $MOE_MODEL: a file, or a moe-pull name as -m takes */
		models[n_models] = access(d, F_OK) == 0 ? d : model_spec(d, &owned[n_models]);
		n_models++;
	}
	p.models = models;
	p.n_models = n_models;
	p.api_key = key;

	/* every thread inherits the mask; this one waits for the signal */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	moe_error e = {0};
	moe_serve *s;
	if (moe_serve_start(&s, &p, &e) < 0)
		die_error(&e);
	if (p.host)
		fprintf(stderr, "%s: listening on http://%s%s%s:%d/\n", cli_prog(),
			strchr(p.host, ':') ? "[" : "", p.host, strchr(p.host, ':') ? "]" : "",
			moe_serve_port(s));
	if (p.socket_path)
		fprintf(stderr, "%s: listening on unix:%s\n", cli_prog(), p.socket_path);
	int sig = 0;
	sigwait(&set, &sig);
	fprintf(stderr, "%s: %s: shutting down\n", cli_prog(), strsignal(sig));
	moe_serve_stop(s);
	free(key);
	for (size_t i = 0; i < n_models; i++)
		free(owned[i]);
	free(owned);
	free(models);
	return 0;
}

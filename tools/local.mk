# tools/local.mk — the programs; each main() parses options and calls libmoecore.
noinst_HEADERS += tools/cli.h
include tools/moe-convert.mk
include tools/moe-run.mk
include tools/moe-bench.mk
include tools/moe-quant.mk
include tools/moe-pull.mk
include tools/moe-serve.mk

# tools/local.mk — the programs; each main() parses options and calls libmoecore.
include tools/moe-convert.mk
include tools/moe-run.mk

# tools/moe-run.mk

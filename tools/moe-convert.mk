# tools/moe-convert.mk

# scripts/local.mk

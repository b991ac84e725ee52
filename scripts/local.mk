# scripts/local.mk — developer and CI helpers.
dist_noinst_SCRIPTS += scripts/install-deps

# share/local.mk — data installed with the tools: the demo model moe-run uses
# when no -m is given (share/moe-demo.uth, trained by scripts/train-demo-model;
# README, "The demo model") and the log of its training.  The model is
# committed: building and testing never retrain it.
dist_pkgdata_DATA = share/moe-demo.uth
EXTRA_DIST += share/demo-model-training.log
dist_noinst_SCRIPTS += scripts/train-demo-model
TESTS += tests/cli/t0600-demo-model.sh
EXTRA_DIST += tests/cli/t0600-demo-model.sh tests/golden/demo-model.json \
	tests/golden/demo-model-heldout.txt

# tests/ref/local.mk — the independent numpy reference forward pass
# (tests/ref/ref.py, no code shared with the C engine) and its self-test.
TESTS += tests/cli/t0400-ref-selftest.sh
EXTRA_DIST += tests/cli/t0400-ref-selftest.sh \
	tests/ref/ref.py tests/ref/model.py tests/ref/load.py tests/ref/quants.py \
	tests/ref/selftest.py

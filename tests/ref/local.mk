# tests/ref/local.mk — the independent numpy reference forward pass
# (tests/ref/ref.py, no code shared with the C engine), its self-test, and
# the engine judged by it (t0410: needs tests/unit/engine-run).
TESTS += tests/cli/t0400-ref-selftest.sh tests/cli/t0410-engine-ref.sh
EXTRA_DIST += tests/cli/t0400-ref-selftest.sh tests/cli/t0410-engine-ref.sh \
	tests/ref/ref.py tests/ref/model.py tests/ref/load.py tests/ref/quants.py \
	tests/ref/actquant.py tests/ref/vs_engine.py tests/ref/selftest.py tests/ref/README \
	tests/ref/arch_common.py tests/ref/arch_deepseek2.py tests/ref/arch_gptoss.py \
	tests/ref/arch_phimoe.py tests/ref/arch_granitemoe.py tests/ref/selftest2.py

# scripts/local.mk — developer and CI helpers.
dist_noinst_SCRIPTS += scripts/install-deps scripts/demo

# gen-model: seeded random-weight models as GGUF and HF snapshots (numpy only);
# the moegen package also holds the independent GGUF reader.
dist_noinst_SCRIPTS += scripts/gen-model
# outlier-model: a GGUF with outlier activation channels, same function (moe-quant tests)
dist_noinst_SCRIPTS += scripts/outlier-model
EXTRA_DIST += \
	scripts/moegen/__init__.py \
	scripts/moegen/arch.py \
	scripts/moegen/compare.py \
	scripts/moegen/generate.py \
	scripts/moegen/ggml.py \
	scripts/moegen/gguf.py \
	scripts/moegen/moe2.py \
	scripts/moegen/reader.py \
	scripts/moegen/safetensors.py \
	scripts/moegen/vocab.py
TESTS += tests/cli/t0100-gen-model.sh
EXTRA_DIST += tests/cli/t0100-gen-model.sh

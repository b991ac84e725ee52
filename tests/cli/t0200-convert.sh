#!/bin/sh
# t0200-convert.sh — moe-convert end to end: the same generated model as GGUF
# and as a Hugging Face snapshot (directory and archives) converts to the same
# tensors and the same normalised metadata; stdout output equals file output
# byte for byte; --info and --verify work.
. "$top_srcdir/tests/cli/lib.sh"
GEN="$PYTHON3 $top_srcdir/scripts/gen-model"
DIFF="$top_builddir/tests/unit/uth-diff"
CONV="$BIN/moe-convert"

# What only one source can know is left out of the comparison: provenance
# (file names), and generation defaults (generation_config.json has no GGUF
# counterpart).  SentencePiece scores are not in tokenizer.json; they are
# derived from the merge ranks, so for llama-family vocabularies the test
# checks that both files tokenize a corpus identically instead.
IGN="--ignore provenance --ignore generation"
CORPUS="$top_srcdir/tests/unit/tokenizer-corpus.txt"
for arch in llama mixtral qwen2moe qwen3moe olmoe; do
	check "$arch: generate GGUF + HF snapshot" -- $GEN --arch $arch --format both --seed 7 --out "$T/$arch"
	check "$arch: GGUF -> UTH" -- $CONV "$T/$arch.gguf" "$T/$arch-g.uth"
	check "$arch: HF -> UTH" -- $CONV "$T/$arch.hf" "$T/$arch-h.uth"
	check "$arch: same tensors and metadata from both sources" -- \
		"$DIFF" $IGN --ignore-tensor tokenizer.scores "$T/$arch-g.uth" "$T/$arch-h.uth"
	"$BIN/moe-run" -m "$T/$arch-g.uth" --tokenize -f "$CORPUS" > "$T/tok-g" &&
	"$BIN/moe-run" -m "$T/$arch-h.uth" --tokenize -f "$CORPUS" > "$T/tok-h" &&
	[ -s "$T/tok-g" ] && cmp -s "$T/tok-g" "$T/tok-h"
	ok $? "$arch: both sources tokenize the corpus identically"
	check "$arch: --verify" -- $CONV --verify "$T/$arch-g.uth"
done
# byte-level BPE has no scores: there the tables must match exactly
check "olmoe: tokenizer tables identical (byte-level BPE)" -- "$DIFF" $IGN "$T/olmoe-g.uth" "$T/olmoe-h.uth"

# Quantised GGUF against the dequantised values in the HF snapshot.
for ty in q8_0 q4_0 q4_k q6_k; do
	check "mixtral $ty: generate" -- $GEN --arch mixtral --shape small --type $ty --format both --seed 3 --out "$T/mq-$ty"
	check "mixtral $ty: GGUF -> UTH keeps the type" -- $CONV "$T/mq-$ty.gguf" "$T/mq-$ty-g.uth"
	check "mixtral $ty: HF -> UTH" -- $CONV "$T/mq-$ty.hf" "$T/mq-$ty-h.uth"
	check "mixtral $ty: dequantised GGUF tensors equal the HF values" -- \
		"$DIFF" $IGN --ignore-tensor tokenizer.scores --ignore quantization --tol 1e-6 "$T/mq-$ty-g.uth" "$T/mq-$ty-h.uth"
	n=$($CONV --info --json "$T/mq-$ty-g.uth" | $PYTHON3 -c "import json,sys; print(json.load(sys.stdin)['dtypes'].get('$ty',{}).get('tensors',0))")
	[ "${n:-0}" -gt 0 ]; ok $? "mixtral $ty: UTH holds $ty tensors ($n)"
done

# --type on safetensors input.
check "HF -> UTH --type f16" -- $CONV --type f16 "$T/mixtral.hf" "$T/mixtral-f16.uth"
check "f16 conversion within f16 rounding" -- "$DIFF" $IGN --ignore-tensor tokenizer.scores --ignore quantization --tol 1e-3 "$T/mixtral-h.uth" "$T/mixtral-f16.uth"
$CONV --info --json "$T/mixtral-f16.uth" > "$T/f16.json"
$PYTHON3 -c "import json,sys; d=json.load(open('$T/f16.json'))['dtypes']; sys.exit(0 if 'f16' in d and 'f32' in d else 1)"
ok $? "--type f16 stores matrices as f16 and vectors as f32"

# --type q8_0 --reference-quant: the reference quantiser, byte for byte.
check "HF -> UTH --type q8_0 --reference-quant" -- $CONV --type q8_0 --reference-quant "$T/mq-q8_0.hf" "$T/hq8.uth"
check "q8_0 from safetensors equals the q8_0 GGUF (same reference rounding)" -- \
	"$DIFF" $IGN --ignore-tensor tokenizer.scores --ignore quantization "$T/mq-q8_0-g.uth" "$T/hq8.uth"

# Stdout output: redirected to a file, and through a pipe (two passes).
$CONV "$T/mixtral.gguf" - > "$T/stdout.uth"; ok $? "convert to stdout (file)"
cmp -s "$T/stdout.uth" "$T/mixtral-g.uth"; ok $? "stdout (file) output equals file output byte for byte"
$CONV "$T/mixtral.gguf" - | cat > "$T/pipe.uth"; ok $? "convert to stdout (pipe)"
cmp -s "$T/pipe.uth" "$T/mixtral-g.uth"; ok $? "pipe output equals file output byte for byte"
$CONV "$T/mixtral.hf" - | cat > "$T/pipe-h.uth"
cmp -s "$T/pipe-h.uth" "$T/mixtral-h.uth"; ok $? "HF pipe output equals file output (permuted q/k streamed twice)"

# Archives: read without unpacking.
(cd "$T/qwen3moe.hf" && tar cf "$T/snap.tar" . && tar czf "$T/snap.tar.gz" . && tar cf - . | zstd -q -o "$T/snap.tar.zst")
(cd "$T" && mkdir -p zipdir && cp -r qwen3moe.hf zipdir/snapshot && cd zipdir && $PYTHON3 -c "
import os, zipfile
with zipfile.ZipFile('$T/snap.zip', 'w', zipfile.ZIP_DEFLATED) as z:
    for root, _, files in os.walk('snapshot'):
        for f in files: z.write(os.path.join(root, f))")
for a in snap.tar snap.tar.gz snap.tar.zst snap.zip; do
	check "archive $a -> UTH" -- $CONV "$T/$a" "$T/$a.uth"
	check "archive $a: same model as the directory" -- "$DIFF" $IGN "$T/$a.uth" "$T/qwen3moe-h.uth"
done

# Sharded safetensors.
check "sharded snapshot: generate" -- $GEN --arch olmoe --format hf --shards 3 --seed 7 --out "$T/olmoe-sharded"
check "sharded snapshot -> UTH" -- $CONV "$T/olmoe-sharded.hf" "$T/olmoe-sharded.uth"
check "sharded equals single file" -- "$DIFF" $IGN "$T/olmoe-sharded.uth" "$T/olmoe-h.uth"

# --info, text and JSON.
$CONV --info "$T/mixtral-g.uth" > "$T/info.txt"; ok $? "--info on a UTH file"
grep -q "^architecture: *llama" "$T/info.txt"; ok $? "--info names the architecture"
grep -q "^experts per layer: 4 4" "$T/info.txt"; ok $? "--info lists experts per layer"
$CONV --info --json "$T/mixtral.gguf" > "$T/info-g.json"; ok $? "--info --json on a GGUF file"
$CONV --info --json "$T/mixtral-g.uth" > "$T/info-u.json"
$PYTHON3 - "$T/info-g.json" "$T/info-u.json" <<'PY'
import json, sys
g, u = (json.load(open(p)) for p in sys.argv[1:3])
assert g['hparams'] == u['hparams'], 'hparams differ'
assert g['n_tensors'] == u['n_tensors'] and g['bytes'] == u['bytes'], 'counts differ'
assert g['hparams']['n_expert'] == 4 and g['hparams']['n_expert_used'] == 2
PY
ok $? "--info of the GGUF describes the UTH it converts to"

# A flipped data byte is caught by --verify and names the tensor.
cp "$T/mixtral-g.uth" "$T/corrupt.uth"
size=$(stat -c %s "$T/corrupt.uth")
printf '\377' | dd of="$T/corrupt.uth" bs=1 seek=$((size - 100)) conv=notrunc 2>/dev/null
$CONV --verify "$T/corrupt.uth" 2> "$T/verify.err"; st=$?
[ $st -eq 1 ] && grep -q "checksum" "$T/verify.err" && grep -q "output.weight\|blk\." "$T/verify.err"
ok $? "--verify fails naming the corrupted tensor: $(cat "$T/verify.err")"

done_testing

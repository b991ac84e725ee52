#!/bin/sh
# t0220-convert-hostile.sh — hostile input, round two (issue 16), and JSON as
# real files write it (issue 15): every case ends quickly with exit 1, a
# message naming the file and the field, and no output left behind — or,
# for what real models legitimately contain, converts.
. "$top_srcdir/tests/cli/lib.sh"
GEN="$PYTHON3 $top_srcdir/scripts/gen-model"
CONV="$BIN/moe-convert"
export PYTHONDONTWRITEBYTECODE=1
mkdir -p "$T/out"

check "generate a tiny llama (GGUF + HF)" -- $GEN --arch llama --format both --seed 1 --out "$T/llama"
check "generate a tiny mixtral (GGUF + HF)" -- $GEN --arch mixtral --format both --seed 2 --out "$T/mixtral"
check "generate a tiny qwen2 (HF, has biases)" -- $GEN --arch qwen2 --format hf --seed 3 --out "$T/qwen2"

# fails NAME EXPECT INPUT: exit 1 within 20 s, the message names EXPECT, no
# output file (not even a temporary one).
fails() {
	name=$1 expect=$2 input=$3
	timeout 20 "$CONV" "$input" "$T/out/x.uth" 2> "$T/err"; st=$?
	is "$st" 1 "$name: exit status 1 (got $st)"
	grep -qiF -- "$expect" "$T/err"; ok $? "$name: the message names '$expect': $(head -c 300 "$T/err")"
	[ -z "$(ls -A "$T/out")" ]; ok $? "$name: no output file left"
	rm -rf "$T/out/"* "$T/out/".??* 2>/dev/null
}
converts() {
	name=$1 input=$2
	timeout 60 "$CONV" "$input" "$T/out/x.uth" 2> "$T/err"; st=$?
	is "$st" 0 "$name: converts ($(head -c 300 "$T/err"))"
	[ $st -ne 0 ] || "$BIN/moe-run" -m "$T/out/x.uth" -p "Hello" -n 2 --temp 0 > /dev/null 2> "$T/err"
	ok $? "$name: and the result runs ($(head -c 300 "$T/err"))"
	rm -rf "$T/out/"* "$T/out/".??* 2>/dev/null
}

# edit_cfg SRC DST PYTHON: copy snapshot SRC to DST and run PYTHON on its
# config as `c` (a dict), then write it back; `tj`/`tc` likewise for
# tokenizer.json / tokenizer_config.json.
edit_snap() {
	src=$1 dst=$2 code=$3
	rm -rf "$dst"; cp -r "$src" "$dst"
	$PYTHON3 - "$dst" "$code" <<'PY'
import json, sys
d, code = sys.argv[1], sys.argv[2]
c = json.load(open(d + '/config.json'))
tj = json.load(open(d + '/tokenizer.json'))
tc = json.load(open(d + '/tokenizer_config.json'))
raw = {}
exec(code)
json.dump(c, open(d + '/config.json', 'w'))
json.dump(tj, open(d + '/tokenizer.json', 'w'))
json.dump(tc, open(d + '/tokenizer_config.json', 'w'))
for name, text in raw.items():   # files written as text, as Python would not
    open(d + '/' + name, 'w').write(text)
PY
	[ $? -eq 0 ] || ok 1 "edit_snap failed (the case below tests nothing): $code"
}

# patch_gguf SRC DST KEY FORMAT VALUE: overwrite KEY's value in place
# (same-size types only).
patch_gguf() {
	$PYTHON3 - "$@" <<'PY'
import struct, sys
src, dst, key, fmt, val = sys.argv[1:6]
b = bytearray(open(src, 'rb').read())
k = key.encode()
i = b.find(struct.pack('<Q', len(k)) + k)
assert i > 0, key
i += 8 + len(k) + 4
v = float(val) if fmt == 'f' else int(val)
struct.pack_into('<' + fmt, b, i, v)
open(dst, 'wb').write(b)
PY
	[ $? -eq 0 ] || ok 1 "patch_gguf failed: $*"
}

# --- hangs -------------------------------------------------------------------
patch_gguf "$T/llama.gguf" "$T/blocks.gguf" llama.block_count I 4294967295
fails "GGUF block_count 2^32-1" "block_count" "$T/blocks.gguf"
timeout 20 "$CONV" --info "$T/blocks.gguf" > /dev/null 2> "$T/err"; is $? 1 "--info on block_count 2^32-1: exit 1, fast"

cp -r "$T/llama.hf" "$T/fifo.hf"; rm "$T/fifo.hf/config.json"
if mkfifo "$T/fifo.hf/config.json" 2>/dev/null; then
	fails "config.json is a FIFO" "not a regular file" "$T/fifo.hf"
	mkfifo "$T/in.fifo"
	fails "the input is a FIFO" "not a regular file" "$T/in.fifo"
	rm -rf "$T/fifo.hf/tokenizer.json"; mkfifo "$T/fifo.hf/tokenizer.json"
	cp "$T/llama.hf/config.json" "$T/cfg"; rm "$T/fifo.hf/config.json"; cp "$T/cfg" "$T/fifo.hf/config.json"
	fails "tokenizer.json is a FIFO" "not a regular file" "$T/fifo.hf"
else
	diag "mkfifo failed: FIFO cases not run"
fi

# --- float -> integer conversions ------------------------------------------------
for v in 1e30 268435456 -0.5; do
	edit_snap "$T/llama.hf" "$T/prf.hf" "c['partial_rotary_factor'] = $v"
	fails "partial_rotary_factor $v" "partial_rotary_factor" "$T/prf.hf"
done

# --- non-finite or absurd hyper-parameters ------------------------------------------
edit_snap "$T/llama.hf" "$T/h.hf" "c['rope_theta'] = 1e39"
fails "rope_theta 1e39 (infinite as a float)" "rope_theta" "$T/h.hf"
edit_snap "$T/llama.hf" "$T/h.hf" "c['rms_norm_eps'] = 3.5e38"
fails "rms_norm_eps 3.5e38" "rms_norm_eps" "$T/h.hf"
edit_snap "$T/llama.hf" "$T/h.hf" "c['rope_scaling'] = {'type': 'linear', 'factor': 3.5e38}"
fails "rope factor 3.5e38" "rope_scaling.factor" "$T/h.hf"
patch_gguf "$T/llama.gguf" "$T/inf.gguf" llama.rope.freq_base f inf
fails "GGUF freq_base = inf" "llama.rope.freq_base" "$T/inf.gguf"
patch_gguf "$T/llama.gguf" "$T/nan.gguf" llama.attention.layer_norm_rms_epsilon f nan
fails "GGUF rms epsilon = NaN" "layer_norm_rms_epsilon" "$T/nan.gguf"

# --- configs that contradict the tensors ------------------------------------------------
edit_snap "$T/llama.hf" "$T/h.hf" "c['vocab_size'] = 1"
fails "vocab_size 1" "vocab_size" "$T/h.hf"
edit_snap "$T/llama.hf" "$T/h.hf" "c['num_key_value_heads'] = 1"
fails "num_key_value_heads 1 (tensors have 2)" "num_key_value_heads" "$T/h.hf"
edit_snap "$T/llama.hf" "$T/h.hf" "c['attention_bias'] = True"
fails "attention_bias true without biases" "attention_bias" "$T/h.hf"
edit_snap "$T/mixtral.hf" "$T/h.hf" "c['num_local_experts'] = 0"
fails "num_local_experts 0" "num_local_experts" "$T/h.hf"
edit_snap "$T/llama.hf" "$T/h.hf" "c['num_hidden_layers'] = 1"
fails "num_hidden_layers 1 (tensors of 2 layers)" "num_hidden_layers" "$T/h.hf"
patch_gguf "$T/llama.gguf" "$T/embd.gguf" llama.embedding_length I 4096
fails "GGUF embedding_length 4096 on narrower tensors" "embedding_length" "$T/embd.gguf"
patch_gguf "$T/mixtral.gguf" "$T/used.gguf" llama.expert_used_count I 9
fails "GGUF more experts used than experts" "expert_used_count" "$T/used.gguf"
edit_snap "$T/llama.hf" "$T/h.hf" "tj['model']['vocab'] = {}; tj['model']['merges'] = []; tj['added_tokens'] = []"
fails "tokenizer.json with an empty vocabulary" "empty vocabulary" "$T/h.hf"
edit_snap "$T/llama.hf" "$T/h.hf" "tj['model']['vocab'] = {}; tj['model']['merges'] = []"
fails "tokenizer.json with only added tokens" "vocabulary" "$T/h.hf"

# sampling defaults are checked with moe-run's command-line ranges
for kv in "top_k 1e30" "top_k -5" "temperature 1e39" "top_p 2" "repetition_penalty 0" "max_new_tokens 1.5"; do
	set -- $kv
	edit_snap "$T/llama.hf" "$T/h.hf" "raw['generation_config.json'] = json.dumps({'$1': $2})"
	fails "generation_config.json $1 $2" "'$1'" "$T/h.hf"
done
edit_snap "$T/llama.hf" "$T/h.hf" "raw['generation_config.json'] = '{\"temperature\": NaN}'"
fails "generation_config.json with NaN (not JSON)" "generation_config.json" "$T/h.hf"

# --- JSON as real files write it: these convert -----------------------------------------
edit_snap "$T/llama.hf" "$T/ok.hf" "tc['model_max_length'] = int(1e30)"
grep -q 1000000000000000019884624838656 "$T/ok.hf/tokenizer_config.json"; ok $? "tokenizer_config.json holds int(1e30)"
converts "model_max_length int(1e30) in tokenizer_config.json" "$T/ok.hf"
edit_snap "$T/llama.hf" "$T/ok.hf" "c['max_position_embeddings'] = float(c.get('max_position_embeddings', 2048)); c['num_attention_heads'] = float(c['num_attention_heads']); c['rope_theta'] = int(c.get('rope_theta', 10000)); c['big'] = 10**40"
converts "counts as reals, a real as an integer, a huge unused integer" "$T/ok.hf"
edit_snap "$T/llama.hf" "$T/ok.hf" "raw['generation_config.json'] = json.dumps({'top_k': 40.0, 'temperature': 1, 'top_p': 0.9, 'do_sample': True})"
"$CONV" "$T/ok.hf" "$T/gen.uth" 2> "$T/err"
"$CONV" --info --json "$T/gen.uth" > "$T/info.json" 2>> "$T/err"
"$BIN/moe-run" -m "$T/gen.uth" --tokenize -p x > /dev/null 2>> "$T/err"
ok $? "generation_config.json with top_k 40.0 converts ($(cat "$T/err"))"
edit_snap "$T/llama.hf" "$T/ok.hf" "c['notes'] = 'x' * (1 << 20); raw['config.json'] = json.dumps(c)[:-1] + ', \"deep\": ' + '[' * 1000 + ']' * 1000 + '}'"
[ $(wc -c < "$T/ok.hf/config.json") -gt 1050000 ] && grep -q '\[\[\[\[\[\[\[\[\[\[' "$T/ok.hf/config.json"
ok $? "config.json holds a 1 MiB string and 1000-deep nesting"
converts "a 1 MiB string and 1000-deep nesting in config.json" "$T/ok.hf"
edit_snap "$T/llama.hf" "$T/h.hf" "raw['config.json'] = json.dumps(c)[:-1] + ', \"deep\": ' + '[' * 100000 + ']' * 100000 + '}'"
fails "100000-deep nesting" "config.json" "$T/h.hf"
edit_snap "$T/llama.hf" "$T/h.hf" "c['num_hidden_layers'] = 10**30"
fails "num_hidden_layers int(1e30)" "num_hidden_layers" "$T/h.hf"

# --- careless use -------------------------------------------------------------------------
cp "$T/llama.gguf" "$T/same.gguf"; cp "$T/llama.gguf" "$T/orig.gguf"
"$CONV" "$T/same.gguf" "$T/same.gguf" 2> "$T/err"; is $? 1 "moe-convert x.gguf x.gguf: exit 1"
grep -q "is the input" "$T/err" && cmp -s "$T/same.gguf" "$T/orig.gguf"; ok $? "... says so, the input is intact: $(cat "$T/err")"
"$CONV" "$T/same.gguf" - >> "$T/same.gguf" 2> "$T/err"; is $? 1 "moe-convert x.gguf - >> x.gguf: exit 1"
cmp -s "$T/same.gguf" "$T/orig.gguf"; ok $? "... the input is intact: $(cat "$T/err")"
ln -s same.gguf "$T/link.gguf"
"$CONV" "$T/same.gguf" "$T/link.gguf" 2> "$T/err"; is $? 1 "output a symbolic link to the input: exit 1"
"$CONV" "$T/llama.hf" "$T/llama.hf/model.safetensors" 2> "$T/err"; is $? 1 "output onto a shard of the snapshot: exit 1"
grep -q "is an input file" "$T/err"; ok $? "... says so: $(cat "$T/err")"
if mknod "$T/chardev" c 1 3 2>/dev/null; then
	"$CONV" "$T/llama.gguf" "$T/chardev" 2> "$T/err"; is $? 1 "conversion onto a character device: exit 1"
	[ -c "$T/chardev" ] && grep -q "not a regular file" "$T/err"; ok $? "... the node is still a device: $(cat "$T/err")"
else
	diag "mknod not permitted: character device case not run"
fi
mkfifo "$T/out.fifo" 2>/dev/null
"$CONV" "$T/llama.gguf" "$T/out.fifo" 2> "$T/err"; is $? 1 "conversion onto a FIFO: exit 1"
[ -p "$T/out.fifo" ]; ok $? "... the FIFO is still there"
"$CONV" "$T/llama.gguf" "$T/orig.uth" 2>/dev/null
if [ -w /dev/full ]; then
	"$CONV" --info "$T/orig.uth" > /dev/full 2> "$T/err"; is $? 1 "--info > /dev/full: exit 1"
	grep -q "write error" "$T/err"; ok $? "... with a message: $(cat "$T/err")"
	"$CONV" --info --json "$T/llama.gguf" > /dev/full 2> /dev/null; is $? 1 "--info --json > /dev/full: exit 1"
	"$CONV" --verify "$T/orig.uth" > /dev/full 2> /dev/null; is $? 1 "--verify > /dev/full: exit 1"
fi
"$CONV" --info "$T/orig.uth" >&- 2> /dev/null; is $? 1 "--info with standard output closed: exit 1"

# --- a KL base with NaN or Inf in a record (checksum consistent) --------------------------
cat > "$T/text.txt" <<'EOF'
It was the best of times, it was the worst of times, it was the age of wisdom,
it was the age of foolishness, it was the epoch of belief, it was the epoch of
incredulity, it was the season of Light, it was the season of Darkness.
EOF
"$BIN/moe-bench" -m "$T/orig.uth" --perplexity "$T/text.txt" -c 16 --kl-base "$T/a.kld" > /dev/null
ok $? "write a KL base"
# put_f32 RECORD-FIELD-OFFSET VALUE: in the first record, then reseal the
# trailer (XXH3-64 of everything before it, little-endian) with xxhsum.
for case in "4 nan" "8 inf" "12 -inf" "4 5.0"; do
	set -- $case
	$PYTHON3 - "$T/a.kld" "$T/bad.kld" "$1" "$2" <<'PY'
import struct, subprocess, sys
src, dst, off, val = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
b = bytearray(open(src, 'rb').read())
n_tokens = struct.unpack_from('<Q', b, 40)[0]
rec = 128 + 4 * n_tokens
struct.pack_into('<f', b, rec + off, val)
body = bytes(b[:-8])
open(dst + '.body', 'wb').write(body)
h = subprocess.run(['xxhsum', '-H3', dst + '.body'], capture_output=True, text=True).stdout
digest = int(h.split('=')[-1].strip() if '=' in h else h.split()[0], 16)
open(dst, 'wb').write(body + struct.pack('<Q', digest))
PY
	"$BIN/moe-bench" -m "$T/orig.uth" --kl "$T/bad.kld" > "$T/kl.out" 2> "$T/err"; st=$?
	is "$st" 1 "KL base with $2 at record offset $1: exit 1"
	grep -q "bad.kld: record 0" "$T/err"; ok $? "... naming the file and the record: $(cat "$T/err")"
done
cp "$T/a.kld" "$T/good.kld.body"; head -c -8 "$T/a.kld" > "$T/good.kld.body"
want=$(xxhsum -H3 "$T/good.kld.body" | sed 's/.*= //; s/ .*//')
got=$($PYTHON3 -c "import struct,sys; b=open(sys.argv[1],'rb').read(); print('%016x' % struct.unpack('<Q', b[-8:])[0])" "$T/a.kld")
is "$got" "$want" "the resealing recipe reproduces moe-bench's own trailer"
done_testing

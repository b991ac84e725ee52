#!/bin/sh
# t0230-convert-moe2.sh — issue 14's families (deepseek2 in its V2-Lite, V2
# and V3 forms, gpt-oss, phimoe, granitemoe with and without the shared
# expert): the same generated model as GGUF and as an HF snapshot converts
# to identical UTH tensors and normalised metadata; the metadata agrees with
# what the independent numpy reference reads from each source
# (hparams-vs-ref.py); quantised GGUFs against the HF values; bad
# config.json values and shapes are refused naming the field.
. "$top_srcdir/tests/cli/lib.sh"
GEN="$PYTHON3 $top_srcdir/scripts/gen-model"
DIFF="$top_builddir/tests/unit/uth-diff"
CONV="$BIN/moe-convert"
VSREF="$PYTHON3 $top_srcdir/tests/cli/hparams-vs-ref.py"
IGN="--ignore provenance --ignore generation --ignore-tensor tokenizer.scores"

for arch in deepseek2 deepseek2-v2 deepseek3 gpt-oss phimoe granitemoe granitemoeshared; do
	check "$arch: generate GGUF + HF snapshot" -- $GEN --arch $arch --format both --seed 7 --out "$T/$arch"
	check "$arch: GGUF -> UTH" -- $CONV "$T/$arch.gguf" "$T/$arch-g.uth"
	check "$arch: HF -> UTH" -- $CONV "$T/$arch.hf" "$T/$arch-h.uth"
	check "$arch: same tensors and metadata from both sources" -- \
		"$DIFF" $IGN "$T/$arch-g.uth" "$T/$arch-h.uth"
	for s in g h; do
		src="$T/$arch.gguf"; [ $s = h ] && src="$T/$arch.hf"
		$CONV --info --json "$T/$arch-$s.uth" > "$T/info.json"
		check "$arch ($s): metadata = what the reference reads from the source" -- \
			$VSREF "$T/info.json" "$src"
	done
	check "$arch: --verify" -- $CONV --verify "$T/$arch-g.uth"
	$CONV "$T/$arch.hf" - | cat > "$T/pipe.uth"
	cmp -s "$T/pipe.uth" "$T/$arch-h.uth"; ok $? "$arch: HF through a pipe (split tensors produced twice) = file output"
done

# Roles: the new tensor kinds have their ids (man/uth.5), none is 'other';
# the directory is read here by its byte layout, independently of lib/.
$PYTHON3 - "$T" <<'PY'
import struct, sys
t = sys.argv[1]
ROLE = {'attn_sinks': 49, 'ffn_gate_bias': 50, 'ffn_up_bias': 51, 'ffn_down_bias': 52,
        'rope_factors_short': 53, 'rope_factors_long': 54, 'attn_k_b': 40, 'attn_v_b': 41,
        'ffn_exp_probs_b': 42, 'ffn_gate_inp_bias': 45, 'attn_norm_bias': 30, 'output_bias': 33,
        'ffn_gate_shexp': 19, 'ffn_up_shexp': 20, 'ffn_down_shexp': 21, 'ffn_norm': 14}
want = {'gpt-oss-g': {'blk.1.attn_sinks.weight': 'attn_sinks', 'blk.1.ffn_gate.3.bias': 'ffn_gate_bias',
                      'blk.0.ffn_up.0.bias': 'ffn_up_bias', 'blk.1.ffn_down.2.bias': 'ffn_down_bias',
                      'blk.0.ffn_gate_inp.bias': 'ffn_gate_inp_bias', 'blk.0.ffn_norm.weight': 'ffn_norm'},
        'phimoe-h': {'rope_factors_short.weight': 'rope_factors_short',
                     'rope_factors_long.weight': 'rope_factors_long',
                     'blk.1.attn_norm.bias': 'attn_norm_bias', 'output.bias': 'output_bias'},
        'deepseek3-h': {'blk.2.attn_k_b.weight': 'attn_k_b', 'blk.0.attn_v_b.weight': 'attn_v_b',
                        'blk.1.exp_probs_b.bias': 'ffn_exp_probs_b'},
        'granitemoeshared-h': {'blk.1.ffn_gate_shexp.weight': 'ffn_gate_shexp',
                               'blk.1.ffn_up_shexp.weight': 'ffn_up_shexp',
                               'blk.0.ffn_down_shexp.weight': 'ffn_down_shexp'}}
bad = 0
for f, names in want.items():
    b = open('%s/%s.uth' % (t, f), 'rb').read()
    n, dir_off = struct.unpack_from('<QQ', b, 24)
    names_off = struct.unpack_from('<Q', b, 48)[0]
    roles = {}
    for i in range(n):
        r = dir_off + 64 * i
        name_off = struct.unpack_from('<I', b, r + 4)[0]
        role, name_len = struct.unpack_from('<HH', b, r + 48)
        roles[b[names_off + name_off:names_off + name_off + name_len].decode()] = role
    for nm, role in names.items():
        if roles.get(nm) != ROLE[role]:
            print('# %s: %s has role %s, want %d (%s)' % (f, nm, roles.get(nm), ROLE[role], role))
            bad = 1
    if 48 in roles.values():
        print('# %s: tensors of role other: %s' % (f, [k for k, v in roles.items() if v == 48]))
        bad = 1
sys.exit(bad)
PY
ok $? "new roles by id (attn_sinks, expert biases, rope factors, k_b/v_b, shared expert), none 'other'"

# Quantised GGUFs against the dequantised values of the HF twin.
for spec in "deepseek3 tiny q8_0" "deepseek2 small q4_k" "gpt-oss small q4_k" "phimoe tiny f16" \
	    "granitemoeshared small q8_0" "deepseek2-v2 tiny bf16"; do
	set -- $spec
	check "$1 $3: generate" -- $GEN --arch $1 --shape $2 --type $3 --format both --seed 5 --out "$T/q-$1-$3"
	check "$1 $3: GGUF -> UTH" -- $CONV "$T/q-$1-$3.gguf" "$T/q-$1-$3-g.uth"
	check "$1 $3: HF -> UTH" -- $CONV "$T/q-$1-$3.hf" "$T/q-$1-$3-h.uth"
	check "$1 $3: dequantised GGUF tensors equal the HF values" -- \
		"$DIFF" $IGN --ignore quantization --tol 1e-6 "$T/q-$1-$3-g.uth" "$T/q-$1-$3-h.uth"
done
# --type on an HF snapshot applies to the split tensors too.
check "deepseek2: HF --type q8_0 --reference-quant" -- $CONV --type q8_0 --reference-quant "$T/q-deepseek3-q8_0.hf" "$T/ds-q8.uth"
check "deepseek3 q8_0 from safetensors = the q8_0 GGUF" -- \
	"$DIFF" $IGN --ignore quantization "$T/q-deepseek3-q8_0-g.uth" "$T/ds-q8.uth"

# A deepseek2 GGUF from before llama.cpp's MLA split (attn_kv_b, key_length =
# the head size, no *_mla keys) converts to the same UTH file as the split one.
check "deepseek2: old-layout GGUF (attn_kv_b)" -- $PYTHON3 "$top_srcdir/tests/cli/old-deepseek2-gguf.py" \
	"$T/deepseek2-v2.gguf" "$T/ds-old.gguf" "$top_srcdir/scripts"
check "deepseek2: old-layout GGUF -> UTH" -- $CONV "$T/ds-old.gguf" "$T/ds-old.uth"
check "deepseek2: attn_kv_b split = the split GGUF's attn_k_b / attn_v_b" -- \
	"$DIFF" --ignore provenance "$T/deepseek2-v2-g.uth" "$T/ds-old.uth"

# MXFP4 experts from GGUF keep their type (and from HF: below).
check "gpt-oss MXFP4: generate" -- $GEN --arch gpt-oss --expert-type mxfp4 --format gguf --seed 5 --out "$T/mx"
check "gpt-oss MXFP4: GGUF -> UTH" -- $CONV "$T/mx.gguf" "$T/mx.uth"
n=$($CONV --info --json "$T/mx.uth" | $PYTHON3 -c "import json,sys; print(json.load(sys.stdin)['dtypes'].get('mxfp4',{}).get('tensors',0))")
[ "${n:-0}" -eq 24 ]; ok $? "gpt-oss MXFP4: 24 expert matrices stay MXFP4 ($n)"

# Bad values: exit 1 naming the field, no output.
cfgedit() { # cfgedit SNAPSHOT NEWNAME PYTHON-STATEMENT
	rm -rf "$T/$2"; cp -r "$T/$1.hf" "$T/$2"
	$PYTHON3 -c "import json; p='$T/$2/config.json'; c=json.load(open(p)); $3; json.dump(c, open(p,'w'))"
}
refused() { # refused NAME DIR EXPECT
	rm -f "$T/bad.uth"
	$CONV "$T/$2" "$T/bad.uth" 2> "$T/err"; st=$?
	[ $st -eq 1 ] && grep -qF -- "$3" "$T/err" && [ ! -e "$T/bad.uth" ]
	ok $? "$1: refused naming '$3': $(head -c 200 "$T/err")"
}
cfgedit deepseek3 b1 "c['topk_method']='bogus'"; refused "unknown topk_method" b1 "topk_method 'bogus'"
cfgedit deepseek3 b2 "c['n_group']=3"; refused "n_group not dividing the experts" b2 "n_group"
cfgedit deepseek3 b3 "c['topk_group']=9"; refused "topk_group above n_group" b3 "topk_group"
cfgedit deepseek2 b4 "c['v_head_dim']=12"; refused "kv_b_proj against v_head_dim" b4 "attn_kv_b"
cfgedit deepseek2 b5 "c['qk_rope_head_dim']=24; c['qk_nope_head_dim']=0"; refused "no no-rope part" b5 "qk_rope_head_dim"
cfgedit gpt-oss b6 "c['layer_types']=['sliding_attention']"; refused "layer_types too short" b6 "layer_types"
cfgedit gpt-oss b7 "c['layer_types']=['sliding_attention','chunked']"; refused "unknown layer type" b7 "layer_types[1]"
cfgedit gpt-oss b8 "c['intermediate_size']=16"; refused "expert shapes against intermediate_size" b8 "expected shape"
cfgedit gpt-oss b9 "c['swiglu_limit']=-1"; refused "negative swiglu_limit" b9 "swiglu_limit"
cfgedit phimoe b10 "c['rope_scaling']['short_factor']=[1.0]*3"; refused "short_factor of the wrong length" b10 "short_factor"
cfgedit phimoe b11 "c['rope_scaling']['long_factor'][2]=-1.0"; refused "negative long factor" b11 "long_factor[2]"
cfgedit phimoe b12 "del c['rope_scaling']['long_mscale']"; refused "LongRoPE without long_mscale" b12 "long_mscale"
cfgedit phimoe b13 "c['num_experts_per_tok']=3"; refused "sparsemixer with 3 experts" b13 "sparsemixer"
cfgedit phimoe b14 "c['router_jitter_noise']=0"; refused "zero jitter epsilon" b14 "router_jitter_noise"
cfgedit granitemoeshared b15 "c['shared_intermediate_size']=48"; refused "shared width against the tensor" b15 "ffn_gate_shexp"
cfgedit deepseek3 b16 "c['rope_scaling']['mscale_all_dim']=-5"; refused "negative mscale_all_dim" b16 "mscale_all_dim"

# MXFP4 experts from GGUF keep their type; from HF (the published
# checkpoints' U8 *_blocks and *_scales, nibbles in another order) they are
# repacked into the same blocks: identical UTH, and the engine on the
# HF-sourced file agrees with the reference reading the HF snapshot.
check "gpt-oss MXFP4: generate" -- $GEN --arch gpt-oss --expert-type mxfp4 --format both --seed 5 --out "$T/mx"
check "gpt-oss MXFP4: GGUF -> UTH" -- $CONV "$T/mx.gguf" "$T/mx.uth"
n=$($CONV --info --json "$T/mx.uth" | $PYTHON3 -c "import json,sys; print(json.load(sys.stdin)['dtypes'].get('mxfp4',{}).get('tensors',0))")
[ "${n:-0}" -eq 24 ]; ok $? "gpt-oss MXFP4: 24 expert matrices stay MXFP4 ($n)"
check "gpt-oss MXFP4: HF (U8 blocks and scales) -> UTH" -- $CONV "$T/mx.hf" "$T/mx-h.uth"
check "gpt-oss MXFP4: same tensors and metadata from GGUF and HF" -- \
	"$DIFF" $IGN "$T/mx.uth" "$T/mx-h.uth"
$CONV "$T/mx.hf" - | cat > "$T/pipe.uth"
cmp -s "$T/pipe.uth" "$T/mx-h.uth"; ok $? "gpt-oss MXFP4: HF through a pipe = file output"
RUN="$top_builddir/tests/unit/engine-run"
if [ -x "$RUN" ]; then
	# the tape: the engine's rounding decisions, which vs_engine.py --tapes
	# follows only at ties (a float32 tie may fall either way on any ISA)
	ENGINE_RUN_TAPE="$T/mx-h.out.tape" "$RUN" "$T/mx-h.uth" "1 7 3 9 4 200 11 5" 16 \
		>"$T/mx-h.out" 2>"$T/mx-h.err"
	$PYTHON3 "$top_srcdir/tests/ref/vs_engine.py" --model "$T/mx.hf" --tokens "1 7 3 9 4 200 11 5" \
		--emulate act-quant,kv-f16 --tol 1e-5 --tapes "mx-h=$T/mx-h.out" >"$T/mx-h.vs" 2>&1 &&
		! grep -q '^not ok' "$T/mx-h.vs"
	ok $? "gpt-oss MXFP4 from HF: logits and greedy ids = the reference on the HF snapshot"
	sed 's/^/#   /' "$T/mx-h.vs"
fi
# Damaged MXFP4 snapshots (the safetensors rewritten by st_edit): refused
# naming the tensor.
st_edit() { # st_edit NEWNAME PYTHON (h: header dict, may drop or change entries)
	rm -rf "$T/$1"; cp -r "$T/mx.hf" "$T/$1"
	$PYTHON3 - "$T/$1/model.safetensors" "$2" <<'PY'
import json, struct, sys
p = sys.argv[1]
raw = open(p, 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
h = json.loads(raw[8:8 + n])
data = {k: raw[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]]
	for k, v in h.items() if k != '__metadata__'}
exec(sys.argv[2])
out, at = {}, 0
for k, v in h.items():
	if k == '__metadata__':
		out[k] = v
		continue
	v['data_offsets'] = [at, at + len(data[k])]
	at += len(data[k])
	out[k] = v
hdr = json.dumps(out).encode()
with open(p, 'wb') as f:
	f.write(struct.pack('<Q', len(hdr)) + hdr + b''.join(data[k] for k in out if k != '__metadata__'))
PY
}
L0=model.layers.0.mlp
st_edit m1 "del h['$L0.experts.down_proj_scales']"
refused "MXFP4 blocks without their scales" m1 "down_proj_scales' are missing"
st_edit m2 "del h['$L0.experts.gate_up_proj_blocks']"
refused "MXFP4 scales without their blocks" m2 "gate_up_proj_scales': MXFP4 exponents without their blocks"
st_edit m3 "s = h['$L0.experts.gate_up_proj_blocks']['shape']; s[2] *= 2; s[3] //= 2"
refused "MXFP4 blocks of the wrong shape" m3 "gate_up_proj_blocks': expected U8 of shape"
st_edit m4 "x = h['$L0.experts.down_proj_scales']; x['dtype'] = 'I8'"
refused "MXFP4 scales not U8" m4 "down_proj_scales': expected U8"
st_edit m5 "x = h['$L0.router.weight']; x['dtype'] = 'U8'; x['shape'][1] *= 4"
refused "U8 outside the MXFP4 experts" m5 "router.weight': dtype u8 is not a weight type"

# The engine runs all of them (against the reference: t0410, t0412).
for a in deepseek2 deepseek3; do
	"$BIN/moe-run" -m "$T/$a-g.uth" --temp 0 -p "a b" -n 4 > /dev/null 2> "$T/err"
	ok $? "$a: moe-run generates: $(head -c 160 "$T/err")"
done
"$BIN/moe-run" -m "$T/granitemoeshared-h.uth" --temp 0 -p "a b" -n 4 > /dev/null 2> "$T/err"
ok $? "granitemoeshared (from HF): moe-run generates: $(head -c 160 "$T/err")"
"$BIN/moe-run" -m "$T/phimoe-h.uth" --temp 0 -p "a b" -n 4 > /dev/null 2> "$T/err"
ok $? "phimoe (from HF): moe-run generates: $(head -c 160 "$T/err")"
"$BIN/moe-run" -m "$T/gpt-oss-h.uth" --temp 0 -p "a b" -n 4 > /dev/null 2> "$T/err"
ok $? "gpt-oss (from HF): moe-run generates: $(head -c 160 "$T/err")"

done_testing

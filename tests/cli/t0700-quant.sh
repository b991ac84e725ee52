#!/bin/sh
# t0700-quant.sh — moe-quant as a tool: files and pipes give the same bytes,
# the recipe and per-tensor types land in the metadata, bad input is refused
# with no output left, requantisation needs --allow-requantize, --tensor-type
# overrides, every recipe assigns the types of moe-quant(1)'s table on every
# generated architecture (checked by tests/ref/quant_check.py, which restates
# the table), importance matrices in both formats, and the per-expert plan.
. "$top_srcdir/tests/cli/lib.sh"
Q="$BIN/moe-quant"
CONV="$BIN/moe-convert"
GEN="$top_srcdir/scripts/gen-model"
QC="$top_srcdir/tests/ref/quant_check.py"
[ -x "$Q" ] || skip_all "tools/moe-quant not built"

gen() { # NAME ARCH SHAPE TYPE SEED
	"$PYTHON3" "$GEN" --arch "$2" --shape "$3" --type "$4" --seed "$5" --out "$T/$1" \
		>/dev/null 2>&1 && "$CONV" "$T/$1.gguf" "$T/$1.uth" 2>/dev/null
}
meta() { # FILE EXPR: a Python expression over the metadata dict m
	"$PYTHON3" - "$1" "$2" <<'EOF'
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
off, size = struct.unpack_from('<QQ', b, 64)
m = json.loads(b[off:off + size])
sys.exit(0 if eval(sys.argv[2]) else 1)
EOF
}

check "generate qwen2moe small f16" -- gen m qwen2moe small f16 5
M="$T/m.uth"

# ---- files and pipes
check "file -> file q4_k_m" -- "$Q" -q -t q4_k_m -j 2 "$M" "$T/a.uth"
check "output verifies" -- "$CONV" --verify "$T/a.uth"
"$Q" -t q4_k_m -j 2 - - <"$M" >"$T/b.uth"; ok $? "pipe -> pipe"
cmp -s "$T/a.uth" "$T/b.uth"; ok $? "pipe -> pipe equals file -> file"
"$Q" -t q4_k_m -j 1 - "$T/c.uth" <"$M"; ok $? "pipe -> file (1 thread)"
cmp -s "$T/a.uth" "$T/c.uth"; ok $? "pipe -> file equals file -> file (threads do not matter)"
"$Q" -t q4_k_m "$M" - | cat >"$T/d.uth"; ok $? "file -> pipe"
cmp -s "$T/a.uth" "$T/d.uth"; ok $? "file -> pipe equals file -> file"
meta "$T/a.uth" "m['quantization']['recipe'] == 'q4_k_m' and m['quantization']['tensors']['blk.0.attn_q.weight'] == 'q4_k' and m['quantization']['tensors']['output.weight'] == 'q6_k' and m['architecture'] == 'qwen2moe'"
ok $? "metadata: recipe, per-tensor types, the input's metadata kept"
"$CONV" --info "$T/a.uth" >"$T/info" 2>&1; ok $? "moe-convert --info reads the output"
grep -q "^quantization: *q4_k_m" "$T/info"; ok $? "moe-convert --info shows the recipe"
"$CONV" --info --json "$T/a.uth" | grep -q '"blk.1.attn_v.weight": "q6_k"'; ok $? "--info --json lists per-tensor types"

# ---- bad input: refused, nothing left
mkdir -p "$T/out"
size=$(wc -c <"$M")
head -c $((size - 5000)) "$M" >"$T/trunc.uth"
"$Q" -t q8_0 "$T/trunc.uth" "$T/out/x.uth" 2>"$T/err"; is "$?" 1 "truncated file: exit 1"
grep -q "truncated" "$T/err"; ok $? "truncated file: message says so: $(cat "$T/err")"
"$Q" -t q8_0 - "$T/out/x.uth" <"$T/trunc.uth" 2>"$T/err"; is "$?" 1 "truncated pipe: exit 1"
grep -q "truncated" "$T/err"; ok $? "truncated pipe: message says so"
{ "$Q" -t q8_0 - - <"$T/trunc.uth" 2>"$T/err"; echo $? >"$T/st"; } | cat >"$T/out/y.uth"
is "$(cat "$T/st")" 1 "truncated pipe to pipe: exit 1"
[ ! -s "$T/out/y.uth" ]; ok $? "truncated pipe to pipe: nothing written to stdout"
rm -f "$T/out/y.uth"
"$PYTHON3" -c "
import sys
b = bytearray(open(sys.argv[1], 'rb').read()); b[-3000] ^= 0x55
open(sys.argv[2], 'wb').write(b)" "$M" "$T/corrupt.uth"
"$Q" -t q8_0 "$T/corrupt.uth" "$T/out/x.uth" 2>"$T/err"; is "$?" 1 "corrupt tensor data: exit 1"
grep -q "checksum" "$T/err"; ok $? "corrupt tensor data: checksum named: $(cat "$T/err")"
head -c 4096 /dev/zero >"$T/zero.uth"
"$Q" -t q8_0 "$T/zero.uth" "$T/out/x.uth" 2>"$T/err"; is "$?" 1 "not a UTH file: exit 1"
grep -q "magic" "$T/err"; ok $? "not a UTH file: bad magic named"
{ cat "$M"; echo junk; } >"$T/trail.uth"
"$Q" -t q8_0 "$T/trail.uth" "$T/out/x.uth" 2>"$T/err"; is "$?" 1 "trailing data: exit 1"
cp "$M" "$T/out/same.uth"
"$Q" -t q8_0 "$T/out/same.uth" "$T/out/same.uth" 2>"$T/err"; is "$?" 1 "output = input: exit 1"
grep -q "the output is the input" "$T/err" && cmp -s "$M" "$T/out/same.uth"
ok $? "output = input: refused, the input intact: $(cat "$T/err")"
"$Q" -t q8_0 "$T/out/same.uth" - 2>"$T/err" >>"$T/out/same.uth"; is "$?" 1 "standard output appended to the input: exit 1"
cmp -s "$M" "$T/out/same.uth"; ok $? "... the input intact"
rm -f "$T/out/same.uth"
[ -z "$(ls -A "$T/out")" ]; ok $? "no output file (or temporary) left after any failure"

# ---- requantisation
check "q8_0 model" -- "$Q" -q -t q8_0 "$M" "$T/q8.uth"
"$Q" -t q4_k_m "$T/q8.uth" "$T/out/x.uth" 2>"$T/err"; is "$?" 1 "requantise without the flag: exit 1"
grep -q -- "--allow-requantize" "$T/err"; ok $? "the message names --allow-requantize"
"$Q" -q -t q4_k_m --allow-requantize "$T/q8.uth" "$T/rq.uth" 2>"$T/err"; ok $? "--allow-requantize"
grep -qi "requantis" "$T/err"; ok $? "with a warning"
"$Q" -q -t q8_0 "$T/q8.uth" "$T/same.uth"; ok $? "same type again: no requantisation needed"

# ---- --tensor-type and --dry-run
"$Q" -n -t q4_k_m --tensor-type 'attn_(q|k)\.weight=q8_0' --tensor-type 'ffn_up\.[0-9]+=q5_k' \
	"$M" >"$T/dry" ; ok $? "--dry-run with --tensor-type"
grep -q "^blk.1.attn_k.weight .* -> q8_0" "$T/dry"; ok $? "regex override attn_k -> q8_0"
grep -q "^blk.0.ffn_up.3.weight .* -> q5_k" "$T/dry"; ok $? "regex override ffn_up.3 -> q5_k"
grep -q "^blk.0.ffn_gate.3.weight .* -> q4_k" "$T/dry"; ok $? "other tensors keep the recipe"
grep -q "^total:" "$T/dry"; ok $? "--dry-run prints the total"
"$Q" -n --tensor-type '(=q8_0' "$M" >/dev/null 2>"$T/err"; is "$?" 1 "bad regex: exit 1"
grep -q "regular expression" "$T/err"; ok $? "bad regex: message"
"$Q" -t q9_k "$M" "$T/out/x" 2>/dev/null; is "$?" 2 "unknown recipe: exit 2"
"$Q" --size 1G "$M" "$T/out/x" 2>/dev/null; is "$?" 2 "--size without a profile: exit 2"
"$Q" "$M" 2>/dev/null; is "$?" 2 "one argument: exit 2"
"$Q" --help | grep -q "^Usage: moe-quant"; ok $? "--help"
"$Q" --version | grep -q "^moe-quant (moe)"; ok $? "--version"

# ---- every recipe on every generated architecture: the table of moe-quant(1)
for a in llama mixtral qwen2 qwen2moe qwen3 qwen3moe olmoe; do
	if ! gen "r-$a" "$a" small f16 11; then ok 1 "$a: generate"; continue; fi
	for r in q2_k q3_k_s q3_k_m q3_k_l q4_k_s q4_k_m q5_k_s q5_k_m q6_k q8_0 iq4_xs; do
		"$Q" -n -t $r "$T/r-$a.uth" >"$T/dry" 2>"$T/err" || { ok 1 "$a $r: dry run"; continue; }
		"$PYTHON3" "$QC" recipes $r "$T/dry" >"$T/res"
		ok $? "$a $r: $(tail -1 "$T/res" | sed 's/^[a-z ]* - //')"
	done
	rm -f "$T/r-$a".*
done
# 8 experts: the MoE attention rules
if "$PYTHON3" "$GEN" --arch mixtral --shape small --n-expert 8 --n-expert-used 2 --type f16 \
		--seed 12 --out "$T/r8" >/dev/null 2>&1 && "$CONV" "$T/r8.gguf" "$T/r8.uth" 2>/dev/null; then
	for r in q2_k q3_k_m q4_k_m q6_k iq4_xs; do
		"$Q" -n -t $r "$T/r8.uth" >"$T/dry" 2>"$T/err"
		"$PYTHON3" "$QC" recipes $r "$T/dry" >"$T/res"
		ok $? "mixtral 8 experts $r: $(tail -1 "$T/res" | sed 's/^[a-z ]* - //')"
	done
	grep -q "^blk.1.attn_k.weight .* -> q8_0" "$T/dry"; ok $? "8 experts: attn_k gets q8_0"
else
	ok 1 "mixtral 8 experts: generate"
fi

# ---- importance matrices: llama.cpp's legacy format, and a corrupt one
"$PYTHON3" - "$T/legacy.dat" <<'EOF'
import struct, sys
names = [('blk.0.attn_q.weight', 256), ('blk.0.ffn_up_exps.weight', 256 * 4)]
with open(sys.argv[1], 'wb') as f:
	f.write(struct.pack('<i', len(names)))
	for n, k in names:
		f.write(struct.pack('<i', len(n)) + n.encode() + struct.pack('<ii', 10, k))
		f.write(struct.pack('<%df' % k, *[10.0 * (1 + (i % 7)) for i in range(k)]))
	f.write(struct.pack('<i', 10) + struct.pack('<i', 4) + b'wiki')
EOF
check "--imatrix legacy imatrix.dat" -- "$Q" -q -t q4_k_m --imatrix "$T/legacy.dat" "$M" "$T/im.uth"
meta "$T/im.uth" "m['quantization']['imatrix'] == 'legacy.dat'"; ok $? "imatrix named in the metadata"
cmp -s "$T/im.uth" "$T/a.uth"; [ $? -ne 0 ]; ok $? "the importance matrix changes the result"
head -c 30 "$T/legacy.dat" >"$T/bad.dat"
"$Q" -t q4_k_m --imatrix "$T/bad.dat" "$M" "$T/out/x.uth" 2>"$T/err"; is "$?" 1 "truncated imatrix: exit 1"
grep -q "bad.dat" "$T/err"; ok $? "truncated imatrix: file named: $(cat "$T/err")"

# ---- per-expert plan from a routing profile
"$PYTHON3" - "$T/prof.json" <<'EOF'
import json, sys
layers = [{'layer': l, 'tokens': 1000, 'counts': [1200, 500, 250, 50],
	   'weight_sums': [0, 0, 0, 0]} for l in range(2)]
json.dump({'format': 'moe-expert-stats', 'version': 1, 'n_layer': 2, 'n_expert': 4,
	   'n_expert_used': 2, 'n_tokens': 1000, 'layers': layers}, open(sys.argv[1], 'w'))
EOF
check "q3_k_m for the size budget" -- "$Q" -q -t q3_k_m "$M" "$T/q3.uth"
budget=$(wc -c <"$T/q3.uth")
"$Q" -n -t q3_k_m --expert-profile "$T/prof.json" --size "$budget" "$M" >"$T/plan" 2>"$T/err"
ok $? "--dry-run prints the expert plan"
grep -q "^expert plan:" "$T/plan" && grep -q "^layer 0:" "$T/plan"; ok $? "plan lists layers"
"$PYTHON3" - "$T/plan" <<'EOF'
import re, sys
bits = {'q2_k': 2, 'q3_k': 3, 'q4_k': 4, 'q5_k': 5, 'q6_k': 6}
for line in open(sys.argv[1]):
	if line.startswith('layer '):
		t = [bits[m] for m in re.findall(r'\d+=(\w+)\(', line)]
		if t != sorted(t, reverse=True) or t[0] == t[-1]:
			sys.exit(1)
EOF
ok $? "the most used experts get the most bits: $(grep '^layer 0' "$T/plan")"
"$Q" -q -t q3_k_m --expert-profile "$T/prof.json" --size "$budget" "$M" "$T/plan.uth"; ok $? "quantise with the plan"
[ "$(wc -c <"$T/plan.uth")" -le "$budget" ]; ok $? "plan output within --size ($(wc -c <"$T/plan.uth") <= $budget)"
meta "$T/plan.uth" "'expert_plan' in m['quantization']"; ok $? "plan recorded in the metadata"
"$Q" -n -t q3_k_m --expert-profile "$T/prof.json" --size 100K "$M" >/dev/null 2>"$T/err"
is "$?" 1 "--size too small: exit 1"
grep -q "too small" "$T/err"; ok $? "--size too small: says so"
# the profile's table is sized by its n_layer x n_expert: checked against the
# model's before anything is allocated (4096 x 65535 once asked for 3 GB)
printf '{"format": "moe-expert-stats", "n_layer": 4096, "n_expert": 65535, "layers": []}' \
	>"$T/huge-prof.json"
"$Q" -n -t q3_k_m --expert-profile "$T/huge-prof.json" --size "$budget" "$M" >/dev/null 2>"$T/err"
is "$?" 1 "profile of 4096 x 65535 experts: exit 1"
grep -q "huge-prof.json: n_layer 4096 / n_expert 65535: the model has 2 layers of 4 experts" "$T/err"
ok $? "... names the file and the sizes: $(cat "$T/err")"
sed 's/"n_layer": 2/"n_layer": 3/' "$T/prof.json" >"$T/other-prof.json"
"$Q" -n -t q3_k_m --expert-profile "$T/other-prof.json" --size "$budget" "$M" >/dev/null 2>"$T/err"
is "$?" 1 "profile of a model with more layers: exit 1"
grep -q "other-prof.json: n_layer 3 .*another model" "$T/err"; ok $? "... says so: $(cat "$T/err")"
# a piped IN is read twice through an unlinked copy in $TMPDIR
mkdir -p "$T/spool"
TMPDIR="$T/spool" "$Q" -n -t q3_k_m --expert-profile "$T/prof.json" --size "$budget" - \
	<"$M" >"$T/plan-pipe" 2>"$T/err"
ok $? "--expert-profile with a piped IN (--dry-run)"
cmp -s "$T/plan" "$T/plan-pipe"; ok $? "piped IN: the same plan as from the file"
cat "$M" | TMPDIR="$T/spool" "$Q" -q -t q3_k_m --expert-profile "$T/prof.json" --size "$budget" \
	- - | cat >"$T/plan-pipe.uth"
cmp -s "$T/plan.uth" "$T/plan-pipe.uth"; ok $? "piped IN and OUT: the same bytes as file to file"
[ -z "$(ls -A "$T/spool")" ]; ok $? "no temporary copy left in TMPDIR"
TMPDIR="$T/nonexistent" "$Q" -q -t q3_k_m --expert-profile "$T/prof.json" --size "$budget" - \
	"$T/out/x.uth" <"$M" 2>"$T/err"
is "$?" 1 "TMPDIR missing: exit 1"
grep -q "nonexistent.*TMPDIR" "$T/err"; ok $? "TMPDIR missing: the directory named: $(cat "$T/err")"
head -c $((size - 5000)) "$M" | TMPDIR="$T/spool" "$Q" -q -t q3_k_m \
	--expert-profile "$T/prof.json" --size "$budget" - "$T/out/x.uth" 2>"$T/err"
is "$?" 1 "truncated piped IN with a profile: exit 1"
grep -q "^moe-quant: standard input: .*truncated" "$T/err"; ok $? "... names standard input: $(cat "$T/err")"
[ -z "$(ls -A "$T/out")" ] && [ -z "$(ls -A "$T/spool")" ]; ok $? "... nothing left behind"
done_testing

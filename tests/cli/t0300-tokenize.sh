#!/bin/sh
# t0300-tokenize.sh — moe-run --tokenize on vocabulary-only models converted
# from ../shared/vocab: ids as in the reference vectors, BOS/EOS only with
# --add-special, special-token text only with --parse-special, input from
# -p, -f and standard input, --show-pieces, and usage errors.
. "$top_srcdir/tests/cli/lib.sh"
need_shared
RUN="$BIN/moe-run"
for v in llama-spm gpt-2 phi-3; do
	check "convert $v vocabulary" -- "$BIN/moe-convert" -q "$SHARED/vocab/ggml-vocab-$v.gguf" "$T/$v.uth"
done
L="$T/llama-spm.uth" G="$T/gpt-2.uth" P="$T/phi-3.uth"

# Expected ids are lines of the reference vectors (ggml-vocab-*.gguf.out).
is "$($RUN -m "$L" --tokenize -p 'Hello world')" "15043 3186" "llama-spm: -p"
is "$($RUN -m "$G" --tokenize -p ' Hello world')" "18435 995" "gpt-2: -p"
is "$($RUN -m "$L" --tokenize -p '   Hello')" "1678 15043" "llama-spm: leading spaces"
printf '    Hello\n    Hello' > "$T/two-lines"
is "$($RUN -m "$L" --tokenize -f "$T/two-lines")" "268 15043 13 1678 15043" "llama-spm: -f FILE"
is "$($RUN -m "$L" --tokenize < "$T/two-lines")" "268 15043 13 1678 15043" "llama-spm: standard input"
is "$($RUN -m "$L" --tokenize -f - < "$T/two-lines")" "268 15043 13 1678 15043" "llama-spm: -f -"
is "$(printf '\n =' | $RUN -m "$G" --tokenize)" "198 796" "gpt-2: newline kept from standard input"

# Exactly one line of output, ids separated by single spaces.
$RUN -m "$L" --tokenize -p 'Hello world' > "$T/out"
is "$(od -An -c "$T/out" | tr -s ' ')" " 1 5 0 4 3 3 1 8 6 \n" "output is the ids and one newline"

# BOS/EOS only when asked, and only if the model adds them.
is "$($RUN -m "$L" --tokenize --add-special -p 'Hello world')" "1 15043 3186" "llama-spm: --add-special adds BOS"
is "$($RUN -m "$G" --tokenize --add-special -p ' Hello world')" "18435 995" "gpt-2: --add-special adds nothing (add_bos false)"

# Special-token text.
out=$($RUN -m "$L" --tokenize -p '<s>Hello')
case "$out" in 1\ *) ok 1 "llama-spm: <s> is text without --parse-special ($out)";; *) ok 0 "llama-spm: <s> is text without --parse-special";; esac
is "$($RUN -m "$L" --tokenize --parse-special -p '<s>Hello')" "1 15043" "llama-spm: --parse-special makes <s> BOS"
is "$($RUN -m "$P" --tokenize --parse-special -p '<|user|>')" "32010" "phi-3: --parse-special finds <|user|>"
is "$($RUN -m "$G" --tokenize --parse-special -p 'a<|endoftext|>')" "64 50256" "gpt-2: --parse-special finds <|endoftext|>"

# --show-pieces: "ID<TAB>PIECE" per token, escapes for what would break a line.
printf '15496\tHello\n995\t world\n' > "$T/want"
$RUN -m "$G" --tokenize --show-pieces -p 'Hello world' > "$T/got"
cmp -s "$T/got" "$T/want"; ok $? "gpt-2: --show-pieces"
printf '1\t<s>\n29871\t \n13\t\\n\n' > "$T/want"
$RUN -m "$L" --tokenize --show-pieces --add-special -p '
' > "$T/got"
cmp -s "$T/got" "$T/want"; ok $? "llama-spm: --show-pieces shows control tokens and escapes newlines"
printf '29871\t \n243\t\\xf0\n162\t\\x9f\n169\t\\xa6\n156\t\\x99\n' > "$T/want"
$RUN -m "$L" --tokenize --show-pieces -p '🦙' > "$T/got"
cmp -s "$T/got" "$T/want"; ok $? "llama-spm: --show-pieces escapes byte tokens"

# Empty input: an empty line.
is "$($RUN -m "$L" --tokenize -p '' | od -An -c | tr -d ' ')" '\n' "empty input gives an empty line"

# Invalid UTF-8 is replaced, not fatal.
printf 'a\377b' > "$T/bad"
check "invalid UTF-8 does not fail" -- $RUN -m "$G" --tokenize -f "$T/bad"

# Errors: usage (2) and failures (1).
# (without -m moe-run takes $MOE_MODEL, else the demo model: t0600-demo-model.sh)
MOE_MODEL="$T/none.uth" $RUN --tokenize -p x >/dev/null 2>&1; is $? 1 "\$MOE_MODEL naming no file: exit 1"
$RUN -m "$L" -p x >/dev/null 2>"$T/err"; is $? 1 "no mode means generation: a vocabulary-only file fails"
grep -q "vocabulary-only" "$T/err"; ok $? "... saying the file has only a vocabulary"
$RUN -m "$L" --tokenize -p x -f "$T/bad" >/dev/null 2>&1; is $? 2 "-p and -f together: exit 2"
$RUN -m "$L" --tokenize --frobnicate >/dev/null 2>&1; is $? 2 "unknown option: exit 2"
$RUN -m "$L" --tokenize --detokenize -p 1 >/dev/null 2>&1; is $? 2 "two modes: exit 2"
$RUN -m "$T/missing.uth" --tokenize -p x >/dev/null 2>&1; is $? 1 "missing model: exit 1"
$RUN -m "$SHARED/vocab/ggml-vocab-gpt-2.gguf" --tokenize -p x >/dev/null 2>"$T/err"; is $? 1 "GGUF model: exit 1"
grep -q moe-convert "$T/err"; ok $? "GGUF model: the message suggests moe-convert"
$RUN -m "$L" --tokenize -f "$T/missing" >/dev/null 2>&1; is $? 1 "missing input file: exit 1"
check "--help" -- $RUN --help
check "--version" -- $RUN --version
done_testing

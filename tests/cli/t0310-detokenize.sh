#!/bin/sh
# t0310-detokenize.sh — moe-run --detokenize: ids back to text, the
# inverse of --tokenize for whole texts (round trips through a pipe), control
# tokens silent unless --parse-special, characters split across tokens kept
# whole, bad ids rejected.
. "$top_srcdir/tests/cli/lib.sh"
need_shared
RUN="$BIN/moe-run"
for v in llama-spm gpt-2 deepseek-llm; do
	check "convert $v vocabulary" -- "$BIN/moe-convert" -q "$SHARED/vocab/ggml-vocab-$v.gguf" "$T/$v.uth"
done
L="$T/llama-spm.uth" G="$T/gpt-2.uth"

is "$($RUN -m "$L" --detokenize -p '15043 3186')" "Hello world" "llama-spm: ids to text"
is "$(echo '18435 995' | $RUN -m "$G" --detokenize)" " Hello world" "gpt-2: ids from standard input"
printf '1 15043\n\t2\n' > "$T/ids"
is "$($RUN -m "$L" --detokenize -f "$T/ids")" "Hello" "control tokens are silent; any white space separates ids"
is "$($RUN -m "$L" --detokenize --parse-special -f "$T/ids")" "<s> Hello</s>" "--parse-special prints them"
# No newline is added: the output is exactly the text.
$RUN -m "$L" --detokenize -p '15043' > "$T/out"
is "$(od -An -c "$T/out" | tr -s ' ')" " H e l l o" "no newline is added"

# Round trips through a pipe, for each kind of tokenizer.
printf 'Grüße, 世界! 🦙🦙\n\ttabs  and   spaces\r\nnumbers 1234567890\n' > "$T/text"
for v in llama-spm gpt-2 deepseek-llm; do
	$RUN -m "$T/$v.uth" --tokenize -f "$T/text" | $RUN -m "$T/$v.uth" --detokenize > "$T/back"
	cmp -s "$T/text" "$T/back"; ok $? "$v: --tokenize | --detokenize gives the text back"
done

# Byte tokens of one character: whole when complete, U+FFFD per byte when cut.
is "$($RUN -m "$L" --detokenize -p '243 162 169 156')" "🦙" "llama-spm: four byte tokens make one character"
is "$($RUN -m "$L" --detokenize -p '243 162' | od -An -tx1 | tr -d ' ')" "efbfbdefbfbd" "a cut character ends as U+FFFD per byte"

# Errors.
$RUN -m "$L" --detokenize -p '15043 hello' >/dev/null 2>"$T/err"; is $? 1 "a word that is not an id: exit 1"
grep -q "not a token id" "$T/err"; ok $? "... and says so"
$RUN -m "$L" --detokenize -p '32000' >/dev/null 2>&1; is $? 1 "an id out of range: exit 1"
$RUN -m "$L" --detokenize -p '-1' >/dev/null 2>&1; is $? 1 "a negative id: exit 1"
$RUN -m "$L" --detokenize --show-pieces -p 1 >/dev/null 2>&1; is $? 2 "--show-pieces without --tokenize: exit 2"
done_testing

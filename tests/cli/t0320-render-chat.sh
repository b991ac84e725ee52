#!/bin/sh
# t0320-render-chat.sh — moe-run --render-chat: the prompt for a JSON
# conversation, with the template recognised from the model or named, the
# model's own BOS/EOS texts, --system and --no-generation-prompt.  Golden
# files: tests/golden/chat (written by hand from each published format;
# tulu also against render/olmoe__*, Python's rendering of the published text).
. "$top_srcdir/tests/cli/lib.sh"
need_shared
RUN="$BIN/moe-run"
GOLD="$top_srcdir/tests/golden/chat"
for v in llama-spm gpt-2 phi-3 deepseek-llm; do
	check "convert $v vocabulary" -- "$BIN/moe-convert" -q "$SHARED/vocab/ggml-vocab-$v.gguf" "$T/$v.uth"
done
cat > "$T/conv.json" <<'JSON'
[
  {"role": "system", "content": "You are a helpful assistant."},
  {"role": "user", "content": "Hello!"},
  {"role": "assistant", "content": "Hi there! How can I help?"},
  {"role": "user", "content": "What is 2+2?"}
]
JSON

# Templates whose BOS/EOS texts the model shares with the golden file.
golden() { # golden MODEL TEMPLATE
	$RUN -m "$T/$1.uth" --render-chat --chat-template "$2" < "$T/conv.json" > "$T/$2.out" 2>"$T/err"
	cmp -s "$T/$2.out" "$GOLD/$2.txt"; ok $? "$2 (model $1) equals tests/golden/chat/$2.txt"
}
golden llama-spm llama2
golden llama-spm mistral
golden gpt-2 chatml
golden phi-3 phi3
golden deepseek-llm deepseek
golden deepseek-llm deepseek3
# tulu starts with the model's BOS (gpt-2: <|endoftext|>).
{ printf '<|endoftext|>'; cat "$GOLD/tulu.txt"; } > "$T/tulu.want"
$RUN -m "$T/gpt-2.uth" --render-chat --chat-template olmoe -f "$T/conv.json" > "$T/tulu.out"
cmp -s "$T/tulu.out" "$T/tulu.want"; ok $? "tulu (alias olmoe) with the model's BOS first"
# The built-in tulu format against Python's rendering of OLMoE-Instruct's
# published template (tests/golden/chat/render, by scripts/gen-chat-goldens).
for c in basic basic-nogen nosystem-nogen; do
	ng=; case $c in *-nogen) ng=--no-generation-prompt;; esac
	$RUN -m "$T/gpt-2.uth" --render-chat --chat-template tulu $ng \
		-f "$GOLD/conversations/$c.json" > "$T/tulu-$c.out"
	cmp -s "$T/tulu-$c.out" "$GOLD/render/olmoe__$c.txt"
	ok $? "built-in tulu = OLMoE's published template ($c)"
done

# The model's own template is run (phi-3 has one; it starts with
# {{ bos_token }}, as Hugging Face renders it).
echo '[{"role":"user","content":"Hi"}]' > "$T/one.json"
printf '<s><|user|>\nHi<|end|>\n<|assistant|>\n' > "$T/want"
$RUN -m "$T/phi-3.uth" --render-chat < "$T/one.json" > "$T/got" 2>"$T/err"
cmp -s "$T/got" "$T/want"; ok $? "phi-3's own Jinja template is run"
[ ! -s "$T/err" ]; ok $? "... without a warning"

# No template: chatml, with a warning on standard error.
printf '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n' > "$T/want"
$RUN -m "$T/gpt-2.uth" --render-chat < "$T/one.json" > "$T/got" 2>"$T/err"
cmp -s "$T/got" "$T/want"; ok $? "no template: chatml"
grep -q chatml "$T/err"; ok $? "... with a warning on standard error"

# --system, --no-generation-prompt, {"messages": [...]}.
printf '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n' > "$T/want"
echo '{"messages": [{"role":"user","content":"Hi"}]}' |
	$RUN -m "$T/gpt-2.uth" --render-chat --chat-template chatml --system 'Be brief.' --no-generation-prompt > "$T/got"
cmp -s "$T/got" "$T/want"; ok $? "--system and --no-generation-prompt; {\"messages\": [...]}"

# Errors.
echo '[{"role":"user"}' | $RUN -m "$T/gpt-2.uth" --render-chat >/dev/null 2>&1; is $? 1 "bad JSON: exit 1"
echo '[{"role":"tool","content":"x"}]' | $RUN -m "$T/gpt-2.uth" --render-chat --chat-template chatml >/dev/null 2>&1; is $? 1 "unknown role: exit 1"
echo '[]' | $RUN -m "$T/gpt-2.uth" --render-chat --chat-template jinja >/dev/null 2>&1; is $? 2 "unknown template name: exit 2"
$RUN -m "$T/gpt-2.uth" --tokenize --system x -p y >/dev/null 2>&1; is $? 2 "--system without --render-chat: exit 2"
done_testing

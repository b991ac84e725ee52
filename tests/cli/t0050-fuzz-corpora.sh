#!/bin/sh
# t0050-fuzz-corpora.sh — every fuzz target's seed corpus (tests/fuzz/NAME/,
# which keeps each bad input a fuzzer found) replayed once through the
# target's own checks, built without libFuzzer (tests/fuzz/replay.c): a
# target that crashes, traps or aborts on a seed fails here, in every build.
. "$top_srcdir/tests/cli/lib.sh"
for name in gguf hf-config jinja request safetensors tokenizer-json uth \
	    prompt-cache imatrix registry expert-profile serve archive \
	    quant-plan endpoint bench-plan; do
	prog="$top_builddir/tests/fuzz/replay-$name"
	dir="$top_srcdir/tests/fuzz/$name"
	set -- "$dir"/*
	"$prog" "$@" >"$T/$name.tap" 2>"$T/$name.err"
	st=$?
	replay "$T/$name.tap" "$name: "
	seen=$(grep -c '^ok ' "$T/$name.tap")
	[ $st -eq 0 ] && [ "$seen" -eq $# ]
	ok $? "$name: all $# seeds replayed (status $st)"
	[ $st -eq 0 ] || sed 's/^/#   /' "$T/$name.err" | tail -20
done
done_testing

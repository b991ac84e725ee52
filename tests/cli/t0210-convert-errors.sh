#!/bin/sh
# t0210-convert-errors.sh — malformed inputs: exit status 1, a message naming
# the problem, no crash, and no output file left behind.
. "$top_srcdir/tests/cli/lib.sh"
CONV="$BIN/moe-convert"
mkdir -p "$T/bad" "$T/out"
$PYTHON3 "$top_srcdir/tests/cli/bad-inputs.py" "$T/bad" > "$T/cases" || { echo "Bail out! bad-inputs.py failed"; exit 1; }
while IFS="$(printf '\t')" read -r name path expect; do
	"$CONV" "$path" "$T/out/x.uth" 2> "$T/err"; st=$?
	# the message without the file's own name (which may contain the word)
	msg=$(head -c 300 "$T/err" | sed "s|$path||g")
	[ $st -eq 1 ]; ok $? "$name: exit status 1 (got $st)"
	printf '%s' "$msg" | grep -qiF -- "$expect"; ok $? "$name: message mentions '$expect': $msg"
	[ -z "$(ls -A "$T/out")" ]; ok $? "$name: no output file left"
	rm -f "$T/out/"* "$T/out/".??* 2>/dev/null
done < "$T/cases"

# Usage errors exit 2.
"$CONV" 2>/dev/null; is "$?" 2 "no arguments: exit 2"
"$CONV" --type q4_k a b 2>/dev/null; is "$?" 2 "--type q4_k (no reference quantiser): exit 2"
"$CONV" --bogus 2>/dev/null; is "$?" 2 "unknown option: exit 2"
"$CONV" /nonexistent "$T/out/y.uth" 2>"$T/err"; is "$?" 1 "missing input: exit 1"
grep -q "/nonexistent" "$T/err"; ok $? "missing input named"
"$CONV" --help | grep -q "^Usage: moe-convert"; ok $? "--help"
"$CONV" --version | grep -q "^moe-convert (moe)"; ok $? "--version"
done_testing

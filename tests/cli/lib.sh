# tests/cli/lib.sh — TAP helpers for shell tests.  Source it first:
#   . "$top_srcdir/tests/cli/lib.sh"
# Provides ok/not_ok/is/done_testing, a per-test scratch dir $T (removed on
# exit), $BIN (the tools dir), $SHARED (../shared with the vocab files).
set -u
tap_n=0
tap_failed=0
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
: "${PYTHON3:=/usr/bin/python3}"
BIN="$top_builddir/tools"
SHARED="${MOE_SHARED:-$top_srcdir/../shared}"
T=$(mktemp -d "${TMPDIR:-/tmp}/moe-test.XXXXXX")
trap 'rm -rf "$T"' EXIT

ok() { # ok COND-STATUS NAME...
	local st=$1; shift
	tap_n=$((tap_n + 1))
	if [ "$st" -eq 0 ]; then echo "ok $tap_n - $*"; else echo "not ok $tap_n - $*"; tap_failed=$((tap_failed + 1)); fi
}
# check NAME -- COMMAND...: run the command, pass if it exits 0
check() {
	local name=$1; shift; [ "$1" = "--" ] && shift
	if "$@" >"$T/.out" 2>"$T/.err"; then ok 0 "$name"; else ok 1 "$name"; sed 's/^/#   /' "$T/.err" | head -20; fi
}
# is GOT WANT NAME
is() {
	if [ "$1" = "$2" ]; then ok 0 "$3"; else ok 1 "$3"; printf '#   got:  %s\n#   want: %s\n' "$1" "$2" | head -20; fi
}
diag() { echo "# $*"; }
# replay FILE [PREFIX]: another program's TAP lines ("ok [N] - name",
# "not ok [N] - name", "# ...") as this script's, names prefixed by PREFIX
replay() {
	while IFS= read -r _line; do
		case $_line in
		"ok "*) _name=${_line#ok }; ok 0 "${2-}${_name#*- }" ;;
		"not ok "*) _name=${_line#not ok }; ok 1 "${2-}${_name#*- }" ;;
		"#"*) echo "$_line" ;;
		esac
	done <"$1"
}
skip_all() { echo "1..0 # SKIP $*"; exit 0; }
done_testing() { echo "1..$tap_n"; [ "$tap_failed" -eq 0 ]; }
need_shared() { [ -d "$SHARED/vocab" ] || skip_all "shared vocab not found at $SHARED (set MOE_SHARED)"; }

# tests/local.mk — shared test harness; tests themselves are listed by the
# fragment of the module they test (lib/*.mk, tools/*.mk).
noinst_HEADERS += tests/unit/tap.h tests/unit/testrand.h
EXTRA_DIST += tests/cli/lib.sh tests/cli/engine-lib.sh
include tests/ref/local.mk

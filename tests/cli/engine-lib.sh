# tests/cli/engine-lib.sh — helpers for the tests that judge the engine by
# the numpy reference (t0410, t0412, t0415, t0435).  Source after lib.sh:
#   . "$top_srcdir/tests/cli/lib.sh"
#   . "$top_srcdir/tests/cli/engine-lib.sh"
# Skips the test when tests/unit/engine-run or moe-convert is not built.
# Provides $RUN (engine-run), $CONV, $GEN (scripts/gen-model), $VS
# (tests/ref/vs_engine.py), $PROMPT and:
#   make_model NAME ARCH TYPE SHAPE SEED [GEN-OPTION...]
#   engine NAME TAG [ISA] [BATCH] [KV_BLOCK]   (uses $N)
#   judge NAME OUTS EMULATION TOL PLAIN_TOL
#   run_models SPEC...                          (calls the test's model())
RUN="$top_builddir/tests/unit/engine-run"
CONV="$BIN/moe-convert"
GEN="$top_srcdir/scripts/gen-model"
VS="$top_srcdir/tests/ref/vs_engine.py"
[ -x "$RUN" ] || skip_all "tests/unit/engine-run not built (make check builds it)"
[ -x "$CONV" ] || skip_all "tools/moe-convert not built"
PROMPT="1 7 3 9 4 200 11 5"

# make_model NAME ARCH TYPE SHAPE SEED [GEN-OPTION...]: scripts/gen-model
# writes NAME.gguf, moe-convert NAME.uth (in $T); non-zero status when either
# fails, their messages in $T/NAME.gen.err
make_model() {
	_name=$1 _arch=$2 _type=$3 _shape=$4 _seed=$5
	shift 5
	"$PYTHON3" "$GEN" --arch "$_arch" --type "$_type" --shape "$_shape" --seed "$_seed" "$@" \
		--out "$T/$_name" >"$T/$_name.gen.err" 2>&1 &&
		"$CONV" "$T/$_name.gguf" "$T/$_name.uth" >>"$T/$_name.gen.err" 2>&1
}

# engine NAME TAG [ISA] [BATCH] [KV_BLOCK]: engine-run on NAME.uth, the
# prompt and $N generated ids, into NAME.TAG.out (stderr NAME.TAG.err), its
# rounding decisions into NAME.TAG.out.tape (vs_engine.py --tapes).  ISA
# empty: the kernels MOE_ISA from the caller gives; BATCH 0: one batch.
engine() {
	ENGINE_RUN_TAPE="$T/$1.$2.out.tape" ${3:+env MOE_ISA=$3} "$RUN" "$T/$1.uth" "$PROMPT" $N \
		${4:-0} ${5:-} >"$T/$1.$2.out" 2>"$T/$1.$2.err"
}

# judge NAME OUTS EMULATION TOL PLAIN_TOL: vs_engine.py --tapes on the runs
# OUTS (LABEL=OUT[@BASE] ...) of NAME.gguf; its result lines on stdout, and
# a "not ok" line with its messages when it could not judge
judge() {
	"$PYTHON3" "$VS" --model "$T/$1.gguf" --tokens "$PROMPT" --emulate "$3" --tol "$4" \
		--plain-tol "$5" --self-tol 1e-4 --tapes $2 2>"$T/$1.vs.err"
	[ $? -le 1 ] && [ ! -s "$T/$1.vs.err" ] ||
		{ echo "not ok - $1: vs_engine.py"; sed 's/^/#   /' "$T/$1.vs.err"; }
}

# run_models SPEC...: model SPEC (the test's function, writing result lines
# "ok - ...", "not ok - ...", "# ..." on stdout) for each SPEC, two at a
# time (2 cores: one's Python while the other's engine runs), then their
# lines as this test's, in SPEC order
run_models() {
	_i=0
	for _spec in "$@"; do
		model $_spec >"$T/res.$_i" 2>&1 &
		_i=$((_i + 1))
		[ $((_i % 2)) -eq 0 ] && wait
	done
	wait
	_j=0
	while [ $_j -lt $_i ]; do
		replay "$T/res.$_j"
		_j=$((_j + 1))
	done
}

#!/bin/sh
# t-kernels-isa.sh — the kernel tests with each ISA level forced (MOE_ISA)
# and with CPU features hidden (MOE_CPU_DISABLE), as on CPUs this machine is
# not: a level is chosen only when every feature its kernel file is compiled
# for is present.  Levels above this CPU's are skipped.
: "${top_builddir:=.}"
t="$top_builddir/tests/unit/t-kernels"
n=0
fail=0
run() { # name expect env...
	name=$1 expect=$2
	shift 2
	n=$((n + 1))
	# MOE_ISA from the caller (MOE_ISA=generic make check) must not leak in.
	if out=$(env -u MOE_ISA -u MOE_CPU_DISABLE "$@" MOE_TEST_EXPECT_ISA="$expect" "$t" 2>&1) &&
	   ! printf '%s\n' "$out" | grep -q '^not ok'; then
		echo "ok $n - $name"
	else
		printf '%s\n' "$out" | grep '^not ok' | head -5 | sed 's/^/# /'
		echo "not ok $n - $name"
		fail=1
	fi
}
best=$(MOE_ISA= "$t" | sed -n 's/^# tables:.* \([a-z0-9]*\)$/\1/p')
echo "1..7"
case $best in avx2 | avx512*) has_avx2=1 ;; *) has_avx2= ;; esac
run "MOE_ISA=generic" generic MOE_ISA=generic
if [ -n "$has_avx2" ]; then
	run "MOE_ISA=avx2" avx2 MOE_ISA=avx2
	run "avx512 CPU without VNNI gets avx2" avx2 MOE_CPU_DISABLE=avx512vnni
else
	echo "ok 2 # SKIP no avx2"; echo "ok 3 # SKIP no avx2"; n=3
fi
case $best in
avx512*) run "MOE_ISA=avx512" avx512 MOE_ISA=avx512 ;;
*) n=$((n + 1)); echo "ok $n # SKIP no avx512" ;;
esac
if [ "$best" = avx512bf16 ]; then
	run "MOE_ISA=avx512bf16" avx512bf16 MOE_ISA=avx512bf16
	run "avx512bf16 CPU without it (MOE_CPU_DISABLE) gets avx512" avx512 \
		MOE_CPU_DISABLE=avx512bf16
else
	n=$((n + 1)); echo "ok $n # SKIP no avx512bf16"
	n=$((n + 1)); echo "ok $n # SKIP no avx512bf16"
fi
run "no f16c: generic" generic MOE_CPU_DISABLE=f16c,avx512bw
exit $fail

#!/bin/sh
# t-kernels-isa.sh — the kernel tests with each ISA level forced (MOE_ISA)
# and with CPU features hidden (MOE_CPU_DISABLE), as on CPUs this machine is
# not: a level is chosen only when every feature its kernel file is compiled
# for is present, and AVX-VNNI (a branch of its own under AVX2) only when
# AVX-512 is not usable.  Levels this CPU lacks are skipped; MOE_ISA naming
# a level this build lacks (configure.ac) falls back with a warning.
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
skip() { n=$((n + 1)); echo "ok $n # SKIP $1"; }
# The levels whose tables were built on this CPU, the levels this build has
# (configure leaves out those the compiler cannot build) and the default.
info=$(env -u MOE_ISA -u MOE_CPU_DISABLE "$t")
levels=$(printf '%s\n' "$info" | sed -n 's/^# tables://p')
built=$(printf '%s\n' "$info" | sed -n 's/^# built://p')
default=$(printf '%s\n' "$info" | sed -n 's/^# kernels: //p')
has() { case " $levels " in *" $1 "*) return 0 ;; esac; return 1; }
echo "1..14"
run "MOE_ISA=generic" generic MOE_ISA=generic
if has avx2; then
	run "MOE_ISA=avx2" avx2 MOE_ISA=avx2
	run "avx512 CPU without VNNI and AVX-VNNI gets avx2" avx2 \
		MOE_CPU_DISABLE=avx512vnni,avxvnni
else
	skip "no avx2"; skip "no avx2"
fi
if has avx512; then
	run "MOE_ISA=avx512" avx512 MOE_ISA=avx512
else
	skip "no avx512"
fi
if has avxvnni; then
	run "MOE_ISA=avxvnni" avxvnni MOE_ISA=avxvnni
	run "without AVX-512 (or its VNNI), AVX-VNNI gets avxvnni" avxvnni \
		MOE_CPU_DISABLE=avx512vnni
	if has avx512; then
		run "with AVX-512 and AVX-VNNI (no AVX512-BF16) the default is avx512" avx512 \
			MOE_CPU_DISABLE=avx512bf16
	else
		skip "no avx512"
	fi
else
	skip "no avx-vnni"; skip "no avx-vnni"; skip "no avx-vnni"
fi
if has avx512bf16; then
	run "MOE_ISA=avx512bf16" avx512bf16 MOE_ISA=avx512bf16
	run "avx512bf16 CPU without it (MOE_CPU_DISABLE) gets avx512" avx512 \
		MOE_CPU_DISABLE=avx512bf16
else
	skip "no avx512bf16"; skip "no avx512bf16"
fi
run "no f16c: generic" generic MOE_CPU_DISABLE=f16c,avx512bw
# MOE_ISA naming a level this build left out: the default, with a warning
# that says so (./configure moe_cv_cc_avxvnni=no etc. make such a build).
for l in avx2 avxvnni avx512 avx512bf16; do
	case " $built " in
	*" $l "*) skip "$l is built" ;;
	*)
		n=$((n + 1))
		out=$(env -u MOE_CPU_DISABLE MOE_ISA=$l MOE_TEST_EXPECT_ISA="$default" "$t" 2>&1)
		if [ $? -eq 0 ] && ! printf '%s\n' "$out" | grep -q '^not ok' &&
		   printf '%s\n' "$out" | grep -q "MOE_ISA=$l: this build has no $l kernels.*; using $default"; then
			echo "ok $n - MOE_ISA=$l, not built: $default with a warning"
		else
			printf '%s\n' "$out" | grep -i "^not ok\|MOE_ISA" | head -5 | sed 's/^/# /'
			echo "not ok $n - MOE_ISA=$l, not built: $default with a warning"
			fail=1
		fi
		;;
	esac
done
exit $fail

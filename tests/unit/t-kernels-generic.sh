#!/bin/sh
# t-kernels-generic.sh — the kernel tests again with MOE_ISA=generic, so the
# run-time override and the generic default path are exercised.
: "${top_builddir:=.}"
MOE_ISA=generic exec "$top_builddir/tests/unit/t-kernels"

# lib/kernels.mk — module fragment (sources, unit tests).

# lib/quant.mk — module fragment (sources, unit tests).

# lib/format.mk — module fragment (sources, unit tests).

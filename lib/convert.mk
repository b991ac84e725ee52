# lib/convert.mk — module fragment (sources, unit tests).

# lib/text.mk — module fragment (sources, unit tests).

# lib/arch.mk — architectures, hyper-parameters and their one validation
# (lib/arch.h), shared by the converter and the loader.
noinst_HEADERS += lib/arch.h
lib_libmoecore_a_SOURCES += lib/arch/arch.c lib/arch/hparams.c lib/arch/check.c

# share/local.mk

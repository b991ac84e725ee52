# man/local.mk
dist_man_MANS += man/uth.5

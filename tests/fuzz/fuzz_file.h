/* fuzz_file.h — a fuzz target's input as a file, for parsers that read one
 * by name: a temporary file under /tmp, made on first use and removed at
 * exit, rewritten with each input.  One per target (static). */
#ifndef MOE_FUZZ_FILE_H
#define MOE_FUZZ_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char fuzz_file_path[64];

static void fuzz_file_cleanup(void)
{
	unlink(fuzz_file_path);
}

/* The path of the file now holding data[0..size); `name` (the target's)
 * starts the file's name.  A harness that cannot write it aborts. */
static const char *fuzz_file(const char *name, const uint8_t *data, size_t size)
{
	if (!fuzz_file_path[0]) {
		snprintf(fuzz_file_path, sizeof fuzz_file_path, "/tmp/%.40s-XXXXXX", name);
		int fd = mkstemp(fuzz_file_path);
		if (fd < 0)
			abort();
		close(fd);
		atexit(fuzz_file_cleanup);
	}
	FILE *f = fopen(fuzz_file_path, "wb");
	if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
		abort();
	return fuzz_file_path;
}

#endif

/* replay.c — a fuzz target without libFuzzer: main() feeds each file named
 * on the command line to the target's LLVMFuzzerTestOneInput, once, and
 * prints a TAP line for it.  Linked with every target by the normal build,
 * so make check replays the seed corpora (tests/cli/t0050-fuzz-corpora.sh):
 * each input a fuzzer once found bad stays a test, whatever the compiler.
 * A target that traps or aborts kills the run, which the test reports.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t *read_all(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	uint8_t *b = NULL;
	size_t cap = 0;
	*n = 0;
	if (!f)
		return NULL;
	for (;;) {
		if (*n == cap) {
			uint8_t *nb = realloc(b, cap = cap ? 2 * cap : 65536);
			if (!nb)
				break;
			b = nb;
		}
		size_t r = fread(b + *n, 1, cap - *n, f);
		if (r == 0)
			break;
		*n += r;
	}
	int bad = ferror(f);
	fclose(f);
	if (bad) {
		free(b);
		return NULL;
	}
	/* an exact-size copy, as libFuzzer hands over */
	uint8_t *exact = malloc(*n ? *n : 1);
	for (size_t i = 0; exact && i < *n; i++)
		exact[i] = b[i];
	free(b);
	return exact;
}

int main(int argc, char **argv)
{
	int fail = 0;
	printf("1..%d\n", argc - 1);
	for (int i = 1; i < argc; i++) {
		size_t n;
		uint8_t *b = read_all(argv[i], &n);
		if (!b) {
			printf("not ok %d - %s: cannot read\n", i, argv[i]);
			fail = 1;
			continue;
		}
		fflush(stdout);
		LLVMFuzzerTestOneInput(b, n);
		free(b);
		printf("ok %d - %s (%zu bytes)\n", i, argv[i], n);
	}
	return fail;
}

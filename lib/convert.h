/* convert.h — turn a GGUF file or a Hugging Face snapshot (directory or
 * archive) into a UTH file, and summarise models.
 *
 * How to use: fill a moe_convert_opts and call moe_convert().  The input is
 * read in a streaming fashion (memory is bounded by a few buffers and the
 * metadata, never by the model size) and the output appears atomically (or,
 * for "-", is streamed to stdout in one pass).  moe_model_info() describes a
 * .uth or .gguf file as JSON (moe_model_info_text renders it for people).
 */
#ifndef MOE_CONVERT_H
#define MOE_CONVERT_H

#include "core.h"

#include <jansson.h>

typedef struct moe_convert_opts {
	const char *input;  /* .gguf, snapshot dir, or .tar/.tar.gz/.tar.zst/.zip */
	const char *output; /* path or "-" */
	int out_type;       /* -1: keep source types; else a type accepted by
			       moe_convert_type_ok for the matrices of a
			       safetensors source */
	bool reference_quant; /* quantised out_type: ggml's round-to-nearest
				 reference bytes instead of moe-quant's search
				 (moe_quant_rows, no importance matrix) */
	bool repack;        /* store the matrices that have one (Q8_0, Q4_K) in the
			       row-interleaved layout (UTH layout 1, r4) */
} moe_convert_opts;

/* Types --type accepts: f32, f16, bf16, and q8_0, q4_0, q4_1, q5_0, q5_1,
 * quantised by moe-quant's searching quantisers (quant.h), or with
 * reference_quant by the round-to-nearest references (ggml's bytes). */
#define MOE_CONVERT_TYPES "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1"
bool moe_convert_type_ok(int dtype);

/* Returns 0, or MOE_EINVAL (bad options), MOE_EUNSUPPORTED (architecture,
 * dtype), MOE_EFORMAT (malformed input), MOE_EIO, ... with a message naming
 * the file and the problem.  No output file is left behind on error. */
int moe_convert(const moe_convert_opts *opts, moe_error *e);

/* Summary of a .uth or .gguf file: architecture, hparams, tensor count,
 * bytes per dtype, experts per layer, tokenizer.  *out is a new reference. */
int moe_model_info(const char *path, json_t **out, moe_error *e);
/* Human-readable rendering of moe_model_info's JSON (malloc'd string). */
char *moe_model_info_text(const json_t *info);

/* The version string written into provenance. */
#define MOE_CONVERTER_VERSION PACKAGE_VERSION

#endif

/* text.h — tokenizers (SentencePiece-style BPE and byte-level BPE), the
 * streaming detokeniser and chat templates.
 *
 * How to use: a vocabulary travels in a neutral form, moe_vocab_data, which
 * a converter extracts from a GGUF file (moe_vocab_data_from_gguf) or from a
 * Hugging Face tokenizer.json (moe_vocab_data_from_hf); both give the same
 * result for the same tokenizer.  moe_vocab_data_to_json and
 * moe_vocab_data_add_tensors store it in a UTH file (settings in the
 * metadata object "tokenizer", tables as the tensors "tokenizer.*"), and
 * moe_vocab_data_from_uth reads it back.  A moe_tokenizer is built from a
 * moe_vocab_data (moe_tokenizer_from_data) or straight from a UTH file
 * (moe_tokenizer_load); it is immutable, so one tokenizer may encode from
 * several threads at once.  moe_tokenizer_encode turns text into token ids;
 * a moe_detok turns ids back into text, one token at a time, never emitting
 * half a UTF-8 character.  moe_chat_render formats a conversation with one
 * of the built-in chat templates, chosen by moe_chat_detect from the model's
 * own template text or by name.
 *
 * The reference for every tokenization decision is llama.cpp's tokenizer
 * (the conformance vectors in ../shared/vocab come from the tokenizers it
 * reproduces); differences are documented where they exist (invalid UTF-8).
 */
#ifndef MOE_TEXT_H
#define MOE_TEXT_H

#include "core.h"

struct moe_gguf;
struct moe_uth;
struct moe_uth_writer;
typedef struct json_t json_t;

/* ------------------------------------------------------------ vocabulary */

/* Token types, numbered as GGUF's tokenizer.ggml.token_type. */
enum {
	MOE_TOKEN_UNDEFINED = 0,
	MOE_TOKEN_NORMAL = 1,
	MOE_TOKEN_UNKNOWN = 2,
	MOE_TOKEN_CONTROL = 3,
	MOE_TOKEN_USER_DEFINED = 4,
	MOE_TOKEN_UNUSED = 5,
	MOE_TOKEN_BYTE = 6,
};

/* Per-token flags (moe_vocab_data.flags): when the token is found in text,
 * whitespace before it (LSTRIP) or after it (RSTRIP) is dropped, as HF's
 * added_tokens lstrip/rstrip. */
enum { MOE_TOKEN_LSTRIP = 1u << 0, MOE_TOKEN_RSTRIP = 1u << 1 };

/* Tokenizer algorithms. */
typedef enum moe_vocab_model {
	MOE_VOCAB_NONE = 0, /* "none": no tokenizer (ids only) */
	MOE_VOCAB_SPM = 1,  /* "llama": SentencePiece-style BPE over scores */
	MOE_VOCAB_BPE = 2,  /* "gpt2": byte-level BPE over ranked merges */
	MOE_VOCAB_UGM = 3,  /* "t5": Unigram (SentencePiece unigram), Viterbi over scores */
	MOE_VOCAB_WPM = 4,  /* "bert": WordPiece, greedy longest match, "##" pieces */
} moe_vocab_model;

/* The neutral form of a vocabulary.  Arrays are owned by the arena given to
 * the function that filled the struct.  Token i is the n = token_offsets[i+1]
 * - token_offsets[i] bytes at tokens + token_offsets[i] (any bytes; the blob
 * is followed by a NUL for convenience); merges likewise ("left right",
 * BPE only).  Special ids are -1 when absent. */
typedef struct moe_vocab_data {
	moe_vocab_model model;
	const char *pre;          /* pre-tokenizer name: "default", "llama3", ... */
	uint32_t n_tokens;
	const char *tokens;       /* blob of all token strings */
	const uint32_t *token_offsets; /* [n_tokens + 1] */
	const float *scores;      /* [n_tokens] or NULL (all 0) */
	const int32_t *types;     /* [n_tokens] MOE_TOKEN_* */
	const uint8_t *flags;     /* [n_tokens] MOE_TOKEN_LSTRIP|RSTRIP */
	uint32_t n_merges;
	const char *merges;
	const uint32_t *merge_offsets; /* [n_merges + 1] */
	int32_t bos_id, eos_id, eot_id, eom_id, unk_id, pad_id, sep_id;
	bool add_bos, add_eos, add_space_prefix, remove_extra_whitespaces;
	const char *chat_template; /* NUL-terminated Jinja text or NULL */
	/* Text pipeline as tokenizer.json declares it (JSON texts of its
	 * "normalizer" and "pre_tokenizer" objects, or NULL).  A pre_tokenizer
	 * replaces the named `pre` table for byte-level BPE; a normalizer is
	 * applied to raw text before everything else.  GGUF files carry
	 * neither: the named table supplies the normalizer its models use. */
	const char *normalizer;
	const char *pre_tokenizer;
	bool ignore_merges_set, ignore_merges; /* tokenizer.json model.ignore_merges */
	/* Named templates besides the default ("tool_use", "rag", ...). */
	uint32_t n_chat_templates;
	const char *const *chat_template_names;
	const char *const *chat_template_texts;
} moe_vocab_data;

/* Token i's bytes (not NUL-terminated in general) and length. */
static inline const char *moe_vocab_token(const moe_vocab_data *vd, uint32_t i, size_t *len)
{
	*len = vd->token_offsets[i + 1] - vd->token_offsets[i];
	return vd->tokens + vd->token_offsets[i];
}

/* Model name <-> enum: "llama", "gpt2", "t5", "bert", "none".  from_name returns -1 for an
 * unknown name; to_name never returns NULL. */
int moe_vocab_model_from_name(const char *name);
const char *moe_vocab_model_name(moe_vocab_model m);

/* Extract the vocabulary from GGUF metadata (tokenizer.ggml.* and
 * tokenizer.chat_template), applying llama.cpp's defaults and fix-ups
 * (default special ids, add_bos per model, end-of-turn tokens recognised by
 * their text become control tokens).  Returns 0, MOE_ENOTFOUND (no
 * tokenizer.ggml.model/tokens), MOE_EFORMAT (wrong types, bad lengths, bad
 * merges), MOE_EUNSUPPORTED (a tokenizer model other than llama/gpt2/none, an
 * unknown pre-tokenizer) or MOE_ENOMEM.  vd is valid until `a` is freed. */
int moe_vocab_data_from_gguf(moe_vocab_data *vd, const struct moe_gguf *g, moe_arena *a,
			     moe_error *e);

/* Extract the vocabulary from a HF tokenizer.json (NUL-terminated text) and
 * the optional tokenizer_config.json (may be NULL; supplies add_bos_token,
 * add_eos_token, the special-token names and chat_template).  Supports the
 * "BPE" model either byte-level (ByteLevel pre-tokenizer, alone or after
 * Split regexes: model gpt2, pre named from the regexes when recognised,
 * else "default") or SentencePiece-style (Metaspace pre-tokenizer or a
 * normalizer replacing ' ' by U+2581: model llama, scores -rank of the first
 * merge producing each token).  Returns 0, MOE_EFORMAT (bad JSON or
 * structure), MOE_EUNSUPPORTED (Unigram/WordPiece models, unknown
 * pre-tokenizers) or MOE_ENOMEM. */
int moe_vocab_data_from_hf(moe_vocab_data *vd, const char *tokenizer_json,
			   const char *tokenizer_config_json, moe_arena *a, moe_error *e);

/* The "tokenizer" metadata object of a UTH file (settings only; the caller
 * stores vd->chat_template as the top-level "chat_template").  *out is a new
 * reference.  Returns 0 or MOE_ENOMEM. */
int moe_vocab_data_to_json(const moe_vocab_data *vd, json_t **out, moe_error *e);

/* Add the tensors "tokenizer.tokens", "tokenizer.token_offsets",
 * "tokenizer.scores", "tokenizer.token_types" and, for BPE,
 * "tokenizer.merges" and "tokenizer.merge_offsets" to a UTH writer.  The data
 * is not copied: vd must stay valid until the writer has written.  Returns 0,
 * MOE_ERANGE (tables larger than 2 GiB) or the writer's error. */
int moe_vocab_data_add_tensors(const moe_vocab_data *vd, struct moe_uth_writer *w,
			       moe_error *e);

/* Read a vocabulary back from a UTH file: metadata "tokenizer" and
 * "chat_template" plus the tensors above.  Every table is validated (sizes,
 * monotonic offsets, types, special ids in range).  Everything is copied
 * into the arena: u may be closed afterwards.  Returns 0, MOE_ENOTFOUND (no
 * "tokenizer" object), MOE_EFORMAT (naming the file and the field) or
 * MOE_ENOMEM. */
int moe_vocab_data_from_uth(moe_vocab_data *vd, const struct moe_uth *u, moe_arena *a,
			    moe_error *e);

/* Compare two vocabularies field by field.  Returns true if equal; otherwise
 * false with a description of the first difference in why (if non-NULL).
 * With ignore_scores, scores are not compared (tokenizer.json carries none
 * for SentencePiece-style vocabularies: they are derived). */
bool moe_vocab_data_equal(const moe_vocab_data *a, const moe_vocab_data *b,
			  bool ignore_scores, char *why, size_t why_len);

/* ------------------------------------------------------------- tokenizer */

typedef struct moe_tokenizer moe_tokenizer;

/* Build a tokenizer (copies everything it needs from vd).  Returns 0,
 * MOE_EFORMAT (inconsistent vocabulary, e.g. a special id out of range),
 * MOE_EUNSUPPORTED (unknown pre-tokenizer), MOE_EINTERNAL (a regex failed to
 * compile) or MOE_ENOMEM. */
int moe_tokenizer_from_data(moe_tokenizer **out, const moe_vocab_data *vd, moe_error *e);
/* moe_vocab_data_from_uth + moe_tokenizer_from_data; same errors. */
int moe_tokenizer_load(moe_tokenizer **out, const struct moe_uth *u, moe_error *e);
/* NULL is fine. */
void moe_tokenizer_free(moe_tokenizer *t);

/* Encode len bytes of text.  Any bytes are accepted: invalid UTF-8 is first
 * replaced by U+FFFD, one per bad byte (so decode(encode(x)) gives x back
 * with that repair, for every tokenizer kind).  With add_special, BOS/EOS
 * are added as the vocabulary asks (add_bos/add_eos); with parse_special,
 * control tokens written in the text ("<s>", "<|im_end|>") become those
 * tokens, longest first — without it they are plain text (user-defined
 * tokens are always matched, as in HF tokenizers).  *ids is malloc'd (free
 * it; NULL when *n is 0).  Returns 0, MOE_EINVAL (add_special but the
 * BOS/EOS id is absent), MOE_EUNSUPPORTED (model none), MOE_ERANGE (text
 * over 1 GiB) or MOE_ENOMEM. */
int moe_tokenizer_encode(const moe_tokenizer *t, const char *text, size_t len, bool add_special,
			 bool parse_special, int32_t **ids, size_t *n, moe_error *e);

uint32_t moe_tokenizer_n_tokens(const moe_tokenizer *t);
moe_vocab_model moe_tokenizer_model(const moe_tokenizer *t);
/* Special ids: bos, eos, eot, eom, unk, pad, sep (-1 when absent). */
typedef enum moe_special {
	MOE_SPECIAL_BOS, MOE_SPECIAL_EOS, MOE_SPECIAL_EOT, MOE_SPECIAL_EOM,
	MOE_SPECIAL_UNK, MOE_SPECIAL_PAD, MOE_SPECIAL_SEP, MOE_SPECIAL_COUNT
} moe_special;
int32_t moe_tokenizer_special(const moe_tokenizer *t, moe_special which);
/* True if generating this id ends the turn (EOS, EOT, EOM and the usual
 * end-of-turn tokens such as <|im_end|>). */
bool moe_tokenizer_is_eog(const moe_tokenizer *t, int32_t id);
/* Token type (MOE_TOKEN_*), or -1 if id is out of range. */
int moe_tokenizer_token_type(const moe_tokenizer *t, int32_t id);
/* The token's vocabulary string (e.g. "\xe2\x96\x81Hello", "\xc4\xa0world"),
 * or NULL if id is out of range. */
const char *moe_tokenizer_token_text(const moe_tokenizer *t, int32_t id, size_t *len);
/* The bytes a token stands for: spaces restored, byte tokens decoded, byte-
 * level text mapped back to bytes.  Control and unknown tokens give their
 * text only if `special`, else nothing.  May be a partial UTF-8 sequence.
 * Returns NULL (and *len 0) if id is out of range. */
const char *moe_tokenizer_piece(const moe_tokenizer *t, int32_t id, bool special, size_t *len);
/* The chat template text stored with the vocabulary, or NULL. */
const char *moe_tokenizer_chat_template(const moe_tokenizer *t);

/* ---------------------------------------------------- streaming decoding */

/* A detokeniser turns ids into text one token at a time.  Output is always
 * valid UTF-8: bytes of an incomplete character are held back until it
 * completes; bytes that can never form a character become U+FFFD (one per
 * byte, as llama.cpp's decoder); moe_detok_flush ends the stream. */
enum {
	MOE_DETOK_SPECIAL = 1u << 0,     /* print control/unknown tokens' text */
	MOE_DETOK_STRIP_SPACE = 1u << 1, /* drop the leading space of the first
					    piece if the vocabulary adds one
					    (add_space_prefix): the inverse of
					    encode for a whole text */
};
typedef struct moe_detok moe_detok;

/* Returns 0 or MOE_ENOMEM. */
int moe_detok_new(moe_detok **out, const moe_tokenizer *t, unsigned flags, moe_error *e);
/* Add one token.  *text and *len receive the newly complete text (valid until
 * the next call; may be empty).  Returns 0 or MOE_EINVAL (id out of range). */
int moe_detok_push(moe_detok *d, int32_t id, const char **text, size_t *len, moe_error *e);
/* End of stream: held-back bytes come out as U+FFFD each; the detokeniser
 * is reset for a new stream. */
void moe_detok_flush(moe_detok *d, const char **text, size_t *len);
void moe_detok_free(moe_detok *d);

/* Decode a whole sequence (a detokeniser run to the end).  *text is malloc'd
 * and NUL-terminated.  Returns 0, MOE_EINVAL (an id out of range) or
 * MOE_ENOMEM. */
int moe_tokenizer_decode(const moe_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
			 char **text, size_t *len, moe_error *e);

/* Replace invalid UTF-8 in s (len bytes) with U+FFFD, one per bad byte, as
 * moe_detok does.  *out is malloc'd and NUL-terminated.  0 or MOE_ENOMEM. */
int moe_utf8_sanitize(const char *s, size_t len, char **out, size_t *out_len, moe_error *e);

/* --------------------------------------------------- harmony (gpt-oss) */

/* gpt-oss's harmony format: generated text is messages
 * "<|start|>ROLE<|channel|>CHANNEL<|message|>CONTENT<|end|>", the turn
 * ending with <|return|> (or <|call|> for a tool call).  A vocabulary that
 * has these markers is a harmony vocabulary: the markers are printed by
 * the detokeniser even without MOE_DETOK_SPECIAL (they are the text's
 * structure), <|return|> and <|call|> end generation and <|end|> does not
 * (it ends a message, not the turn). */
bool moe_tokenizer_is_harmony(const moe_tokenizer *t);

typedef enum moe_harmony_channel {
	MOE_HARMONY_FINAL,      /* the answer (also text outside any message) */
	MOE_HARMONY_ANALYSIS,   /* the chain of thought */
	MOE_HARMONY_COMMENTARY, /* tool calls and preambles */
	MOE_HARMONY_OTHER,      /* a channel of another name */
} moe_harmony_channel;
const char *moe_harmony_channel_name(moe_harmony_channel ch);
/* Receives content as it is parsed; a negative return stops the parse and
 * is returned by moe_harmony_feed/finish. */
typedef int (*moe_harmony_fn)(void *user, moe_harmony_channel ch, const char *text, size_t len);
typedef struct moe_harmony moe_harmony;
/* A streaming parser of one assistant turn (it starts inside the header
 * that the prompt's "<|start|>assistant" opened).  Returns 0 or MOE_ENOMEM. */
int moe_harmony_new(moe_harmony **out, moe_error *e);
/* Text in any chunks (a marker may be split between two); content comes
 * out through fn, a possibly incomplete marker is held back. */
int moe_harmony_feed(moe_harmony *h, const char *text, size_t len, moe_harmony_fn fn, void *user);
/* End of the turn: what was held back comes out; the parser is reset. */
int moe_harmony_finish(moe_harmony *h, moe_harmony_fn fn, void *user);
void moe_harmony_free(moe_harmony *h);

/* -------------------------------------------------------- chat templates */

typedef enum moe_chat_template {
	MOE_CHAT_CHATML = 0, /* <|im_start|>role\n...<|im_end|>\n (Qwen, ...) */
	MOE_CHAT_LLAMA2,     /* <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] */
	MOE_CHAT_MISTRAL,    /* <s>[INST] ... [/INST]...</s> (Mistral, Mixtral) */
	MOE_CHAT_LLAMA3,     /* <|start_header_id|>role<|end_header_id|>\n\n... */
	MOE_CHAT_PHI3,       /* <|user|>\n...<|end|>\n (Phi-3, Phi-3.5-MoE) */
	MOE_CHAT_TULU,       /* <|user|>\n...\n<|assistant|>\n (OLMoE, Tulu) */
	MOE_CHAT_DEEPSEEK,   /* User: ...\n\nAssistant: (DeepSeek LLM/MoE/V2) */
	MOE_CHAT_DEEPSEEK3,  /* <｜User｜>...<｜Assistant｜> (DeepSeek V3/R1) */
	MOE_CHAT_COUNT
} moe_chat_template;

typedef struct moe_chat_msg {
	const char *role; /* "system", "user" or "assistant" */
	const char *content;
} moe_chat_msg;

/* Name of a template ("chatml", "llama2", ...), NULL if out of range. */
const char *moe_chat_template_name(moe_chat_template t);
/* Template for a name (case-insensitive; aliases such as "llama-2",
 * "qwen", "olmoe" are accepted), or -1. */
int moe_chat_template_from_name(const char *name);
/* Comma-separated list of the names, for messages and --help. */
const char *moe_chat_template_names(void);
/* Recognise a model's Jinja template by distinctive substrings.  Returns
 * the template, or MOE_CHAT_CHATML with *recognised false (and a warning
 * through moe_log) if the text is NULL or unknown. */
moe_chat_template moe_chat_detect(const char *jinja, bool *recognised);

/* Render a conversation.  bos/eos are the texts of the model's BOS/EOS
 * tokens (NULL = the template's usual one, e.g. "<s>"); system, if
 * non-NULL, is used as the system prompt when msgs has none.  With
 * add_generation_prompt the text ends with the opening of an assistant
 * turn.  *out is malloc'd and NUL-terminated.  Returns 0, MOE_EINVAL (an
 * unknown role or a template out of range) or MOE_ENOMEM. */
int moe_chat_render(moe_chat_template tmpl, const moe_chat_msg *msgs, size_t n,
		    const char *system, bool add_generation_prompt, const char *bos,
		    const char *eos, char **out, size_t *len, moe_error *e);

/* ------------------------------------------------- Jinja2 chat templates */

/* A sandboxed Jinja2 interpreter for chat templates: the language subset
 * real templates use (expressions, filters, tests, string/dict methods,
 * for/if/set/macro/namespace, loop.*, break/continue), rendering exactly
 * as Python's jinja2 does with transformers' settings (trim_blocks,
 * lstrip_blocks, its tojson, raise_exception, strftime_now).  It has no
 * I/O; loop steps, macro recursion, output and memory are limited, and an
 * error names the template line. */
#define MOE_JINJA_MAX_OUTPUT (16u << 20)  /* bytes of output */
#define MOE_JINJA_MAX_MEMORY (256u << 20) /* bytes of working memory */
#define MOE_JINJA_MAX_STEPS 1000000u      /* loop iterations + macro calls */
#define MOE_JINJA_MAX_DEPTH 50u           /* nested macro calls */

typedef struct moe_jinja_opts {
	size_t max_output, max_memory; /* 0: the defaults above */
	uint64_t max_steps;
	unsigned max_depth;
	bool use_now;   /* strftime_now uses `now` instead of the clock */
	int64_t now;    /* seconds since the epoch, formatted in local time */
} moe_jinja_opts;

/* Render template text (len bytes) with the variables of a JSON object
 * (may be NULL).  o may be NULL (defaults).  *out is malloc'd and
 * NUL-terminated.  Returns 0, MOE_EFORMAT (syntax error: "line N: ..."),
 * MOE_EINVAL (an error while rendering, including raise_exception, whose
 * message is "line N: raised: TEXT"), MOE_ERANGE (a limit was reached) or
 * MOE_ENOMEM. */
int moe_jinja_render(const char *tmpl, size_t len, const json_t *vars, const moe_jinja_opts *o,
		     char **out, size_t *out_len, moe_error *e);

/* Options of moe_chat_apply. */
typedef struct moe_chat_opts {
	/* NULL or "auto": the model's own template (moe_tokenizer_chat_template),
	 * or the built-in chatml if it has none.  Otherwise a named template
	 * of the model ("tool_use", "default", ...) or a built-in format name
	 * (moe_chat_template_from_name). */
	const char *template_name;
	const json_t *tools;      /* array of tool definitions, or NULL */
	const json_t *vars;       /* extra variables (enable_thinking, ...) or NULL */
	const char *system;       /* system prompt when the messages have none */
	bool add_generation_prompt;
	const moe_jinja_opts *jinja; /* limits, clock; NULL: defaults */
} moe_chat_opts;

/* Render a conversation (a JSON array of message objects: role, content,
 * and optionally tool_calls, tool_call_id, name, reasoning_content) for
 * the model of tokenizer t.  Jinja templates receive messages, tools,
 * add_generation_prompt, bos_token/eos_token/unk_token/pad_token (the
 * texts of the model's special tokens) and opts->vars, as transformers'
 * apply_chat_template passes them.  Built-in formats take role and string
 * content only.  *out is malloc'd.  Returns 0, MOE_EINVAL (bad messages,
 * unknown template name, template error) or the errors of
 * moe_jinja_render. */
int moe_chat_apply(const moe_tokenizer *t, const json_t *messages, const moe_chat_opts *opts,
		   char **out, size_t *len, moe_error *e);

/* The named chat template `name` stored with the vocabulary (from a
 * tokenizer_config.json list or GGUF's tokenizer.chat_template.NAME), or
 * NULL. */
const char *moe_tokenizer_chat_template_named(const moe_tokenizer *t, const char *name);

#endif

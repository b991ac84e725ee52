/* bpe.c — byte-level BPE (the GPT-2 family): the pre-tokenizer table (PCRE2
 * patterns per model), GPT-2's byte <-> unicode mapping, the merge tables
 * and the merge loop.
 *
 * Words come from the pre-tokenizer's regexes, applied in sequence: each
 * regex splits every piece left by the previous one into its matches and
 * the gaps between them (llama.cpp's unicode_regex_split).  A word's bytes
 * start as one symbol each (the byte's stand-in character); adjacent
 * symbols whose pair is a merge are joined lowest rank first, ties to the
 * left.  Symbols are numbered "entries": every distinct string that is a
 * token or occurs in a merge, so a pair lookup is a hash of two integers
 * and a merge never builds a string.
 */
#include <config.h>

#include "text_int.h"

#include <pthread.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* ------------------------------------------------------- pre-tokenizers */

/* The patterns are facts about each model's tokenizer (the regexes of its
 * tokenizer.json, as llama.cpp lists them), in PCRE2 syntax.  Letters and
 * digits are Unicode properties; PCRE2_UCP makes \s Unicode-aware. */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3_HEAD "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|" \
	"[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
#define RE_LLAMA3_TAIL "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_LLAMA3 RE_LLAMA3_HEAD "\\p{N}{1,3}" RE_LLAMA3_TAIL
#define RE_QWEN2 RE_LLAMA3_HEAD "\\p{N}" RE_LLAMA3_TAIL
/* HF writes the contractions of llama3/qwen2 case-insensitively. */
#define RE_HF_HEAD "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
#define RE_HF_LLAMA3 RE_HF_HEAD "\\p{N}{1,3}" RE_LLAMA3_TAIL
#define RE_HF_QWEN2 RE_HF_HEAD "\\p{N}" RE_LLAMA3_TAIL
/* Cased letters (Unicode LC), as DeepSeek LLM's tokenizer.json spells them. */
#define RE_DS_LETTERS "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}" \
	"\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}" \
	"\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}" \
	"\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}" \
	"\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}" \
	"\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}" \
	"\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}" \
	"\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}" \
	"\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}" \
	"\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}" \
	"\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}" \
	"\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}" \
	"\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}" \
	"\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}" \
	"\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}" \
	"\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}" \
	"\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}" \
	"\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+"
#define RE_DS_PUNCT "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}" \
	"\\x{3000}-\\x{3002}]+"
#define RE_DS_CJK "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
#define RE_BLOOM " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+"
#define RE_TEKKEN_UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_TEKKEN_LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_TEKKEN "[^\\r\\n\\p{L}\\p{N}]?" RE_TEKKEN_UPPER "*" RE_TEKKEN_LOWER "+|" \
	"[^\\r\\n\\p{L}\\p{N}]?" RE_TEKKEN_UPPER "+" RE_TEKKEN_LOWER "*|" \
	"\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* o200k (GPT-4o, gpt-oss; Llama 4 uses the same split) and Kimi K2, as
 * tiktoken writes them; Kimi's class intersections (&&) go through the
 * translation rule of pretok.c. */
#define RE_O200K_WORD(U, L) "[^\\r\\n\\p{L}\\p{N}]?" U L "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
#define RE_O200K                                                                         \
	RE_O200K_WORD("[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*", "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+") "|" \
	RE_O200K_WORD("[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+", "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*") "|" \
	"\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_KIMI_U "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]"
#define RE_KIMI_L "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]"
#define RE_KIMI                                                                          \
	"[\\p{Han}]+|" RE_O200K_WORD(RE_KIMI_U "*", RE_KIMI_L "+") "|"                      \
	RE_O200K_WORD(RE_KIMI_U "+", RE_KIMI_L "*") "|"                                       \
	"\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define NORM_NFC "{\"type\": \"NFC\"}"

static const moe_pre_def pre_defs[] = {
	{"default", "\0",
	 {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, -1, NULL},
	{"llama3", "llama-v3\0llama-bpe\0falcon3\0dbrx\0smaug-bpe\0chatglm-bpe\0",
	 {RE_LLAMA3}, true, 1, NULL},
	{"deepseek-llm", "\0",
	 {"[\\r\\n]", RE_DS_LETTERS, RE_DS_PUNCT, "\\s+$", RE_DS_CJK, "\\p{N}+"}, false, -1, NULL},
	{"deepseek-coder", "\0",
	 {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_DS_CJK, "\\p{N}"}, false, -1, NULL},
	{"deepseek-v3", "\0",
	 {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
	  "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?"
	  "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
	 false, -1, NULL},
	{"falcon", "\0", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, false, -1, NULL},
	{"starcoder", "refact\0command-r\0smollm\0codeshell\0exaone\0minerva-7b\0",
	 {"\\p{N}", RE_GPT2}, false, -1, NULL},
	{"gpt-2", "gpt2\0mpt\0olmo\0gpt-neox\0jais\0phi-2\0jina-es\0jina-de\0gigachat\0"
	 "jina-v1-en\0jina-v2-es\0jina-v2-de\0jina-v2-code\0roberta-bpe\0",
	 {RE_GPT2}, false, -1, NULL},
	{"qwen2", "qwen3\0stablelm2\0megrez\0deepseek-r1-qwen\0", {RE_QWEN2}, false, -1,
	 NORM_NFC},
	{"gpt-4o", "o200k\0gpt-oss\0llama4\0", {RE_O200K}, true, -1, NULL},
	{"kimi-k2", "\0", {RE_KIMI}, true, -1, NULL},
	{"bloom", "poro-chat\0gpt3-finnish\0", {RE_BLOOM}, false, -1, NULL},
	{"viking", "\0", {RE_BLOOM, "\\p{N}"}, false, -1, NULL},
	{"tekken", "\0", {RE_TEKKEN}, true, 1, NULL},
};

const moe_pre_def *moe_pre_find(const char *name)
{
	for (size_t i = 0; i < sizeof pre_defs / sizeof pre_defs[0]; i++) {
		const moe_pre_def *d = &pre_defs[i];
		if (strcmp(d->name, name) == 0)
			return d;
		for (const char *a = d->aliases; *a; a += strlen(a) + 1)
			if (strcmp(a, name) == 0)
				return d;
	}
	return NULL;
}

/* Other spellings of the same splits, as HF's tokenizer.json writes them:
 * the contractions of llama3/qwen2 case-insensitively, and GPT-2's pattern
 * with HF's final "|\s+" (which changes nothing: unmatched text is kept
 * as a word anyway). */
static const struct {
	const char *name;
	const char *regex[MOE_PRE_MAX_REGEX];
} hf_forms[] = {
	{"gpt-2", {RE_GPT2 "|\\s+"}},
	{"llama3", {RE_HF_LLAMA3}},
	{"qwen2", {RE_HF_QWEN2}},
	{"starcoder", {"\\p{N}", RE_GPT2 "|\\s+"}},
};

/* Append c to a bounded buffer; false when full. */
static bool put(char *out, size_t cap, size_t *n, const char *s, size_t l)
{
	if (*n + l >= cap)
		return false;
	memcpy(out + *n, s, l);
	*n += l;
	out[*n] = '\0';
	return true;
}

/* A regex in one canonical spelling, so that "[\r\n]" written with real
 * CR/LF characters (JSON decoded) or as escapes, and literal non-ASCII
 * characters or \x{...} escapes, compare equal: every control or non-ASCII
 * character becomes \x{HEX}.  Returns false if it does not fit or is not
 * valid UTF-8. */
static bool regex_canon(const char *re, char *out, size_t cap)
{
	size_t n = 0;
	const unsigned char *p = (const unsigned char *)re;
	char tmp[16];
	out[0] = '\0';
	while (*p) {
		uint32_t cp;
		if (p[0] == '\\' && (p[1] == 'r' || p[1] == 'n' || p[1] == 't')) {
			cp = p[1] == 'r' ? 13 : p[1] == 'n' ? 10 : 9;
			p += 2;
		} else if (p[0] == '\\' && p[1] == 'x' && p[2] == '{') {
			char *end;
			cp = (uint32_t)strtoul((const char *)p + 3, &end, 16);
			if (*end != '}')
				return false;
			p = (const unsigned char *)end + 1;
		} else if (p[0] == '\\' && p[1]) {
			if (!put(out, cap, &n, (const char *)p, 2))
				return false;
			p += 2;
			continue;
		} else if (p[0] >= 0x80) {
			size_t l = moe_utf8_valid_len(p, strlen((const char *)p), &cp);
			if (!l)
				return false;
			p += l;
		} else {
			cp = *p++;
		}
		if (cp >= 0x20 && cp < 0x7F) {
			char c = (char)cp;
			if (!put(out, cap, &n, &c, 1))
				return false;
		} else {
			int l = snprintf(tmp, sizeof tmp, "\\x{%X}", (unsigned)cp);
			if (!put(out, cap, &n, tmp, (size_t)l))
				return false;
		}
	}
	return true;
}

static bool regex_list_equal(const char *const *a, size_t n, const char *const *b)
{
	static char ca[8192], cb[8192]; /* guarded by the caller's lock */
	size_t m = 0;
	while (m < MOE_PRE_MAX_REGEX && b[m])
		m++;
	if (m != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!regex_canon(a[i], ca, sizeof ca) || !regex_canon(b[i], cb, sizeof cb) ||
		    strcmp(ca, cb) != 0)
			return false;
	return true;
}

static pthread_mutex_t recognise_lock = PTHREAD_MUTEX_INITIALIZER;

const char *moe_pre_recognise(const char *const *regex, size_t n)
{
	const char *found = NULL;
	pthread_mutex_lock(&recognise_lock);
	for (size_t i = 0; !found && i < sizeof pre_defs / sizeof pre_defs[0]; i++)
		if (regex_list_equal(regex, n, pre_defs[i].regex))
			found = pre_defs[i].name;
	for (size_t i = 0; !found && i < sizeof hf_forms / sizeof hf_forms[0]; i++)
		if (regex_list_equal(regex, n, hf_forms[i].regex))
			found = hf_forms[i].name;
	pthread_mutex_unlock(&recognise_lock);
	return found;
}

/* GPT-2's pattern, which a ByteLevel pre-tokenizer with use_regex applies. */
const char *moe_pre_gpt2_regex(void)
{
	return RE_GPT2;
}

/* ------------------------------------------------------ byte <-> unicode */

/* GPT-2 maps bytes that are printable Latin-1 to themselves and the others
 * (controls, space, DEL, NBSP, soft hyphen) to U+0100 + n in byte order, so
 * every byte has a visible stand-in character. */
static bool byte_is_printable(unsigned b)
{
	return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static uint32_t byte_to_cp(unsigned b)
{
	if (byte_is_printable(b))
		return b;
	uint32_t n = 0;
	for (unsigned c = 0; c < b; c++)
		if (!byte_is_printable(c))
			n++;
	return 256 + n;
}

static char byte_chars[256][3];
static unsigned char byte_char_len[256];
static int16_t cp_to_byte[512]; /* code points < 512 only */
static pthread_once_t byte_once = PTHREAD_ONCE_INIT;

static void byte_tables_init(void)
{
	for (int i = 0; i < 512; i++)
		cp_to_byte[i] = -1;
	for (unsigned b = 0; b < 256; b++) {
		uint32_t cp = byte_to_cp(b);
		cp_to_byte[cp] = (int16_t)b;
		if (cp < 0x80) {
			byte_chars[b][0] = (char)cp;
			byte_char_len[b] = 1;
		} else {
			byte_chars[b][0] = (char)(0xC0 | (cp >> 6));
			byte_chars[b][1] = (char)(0x80 | (cp & 0x3F));
			byte_char_len[b] = 2;
		}
	}
}

const char *moe_bpe_byte_char(unsigned b, size_t *len)
{
	pthread_once(&byte_once, byte_tables_init);
	*len = byte_char_len[b & 0xFF];
	return byte_chars[b & 0xFF];
}

int moe_bpe_char_byte(uint32_t cp)
{
	pthread_once(&byte_once, byte_tables_init);
	return cp < 512 ? cp_to_byte[cp] : -1;
}

/* ------------------------------------------------------------- tables */

struct moe_bpe_pair {
	uint32_t left, right; /* entries */
	uint32_t rank;        /* UINT32_MAX: empty slot */
	uint32_t result;      /* entry of left + right */
};

struct moe_pre_re {
	pcre2_code *code;
	bool jit;
};

static uint32_t pair_hash(uint32_t a, uint32_t b)
{
	uint64_t h = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull;
	return (uint32_t)(h >> 32) ^ (uint32_t)h;
}

static const moe_bpe_pair *pair_find(const moe_tokenizer *t, uint32_t a, uint32_t b)
{
	uint32_t i = pair_hash(a, b) & t->pair_mask;
	for (;;) {
		const moe_bpe_pair *p = &t->pairs[i];
		if (p->rank == UINT32_MAX)
			return NULL;
		if (p->left == a && p->right == b)
			return p;
		i = (i + 1) & t->pair_mask;
	}
}

/* The entry of a string, created if new.  Returns the entry or -1 (ENOMEM). */
static int64_t entry_get(moe_tokenizer *t, const char *s, size_t n, bool copy)
{
	int64_t en = moe_strmap_get(&t->ent_map, s, n);
	if (en >= 0)
		return en;
	if (copy) {
		char *c = moe_arena_strndup(&t->arena, s, n);
		if (!c)
			return -1;
		s = c;
	}
	if (t->n_ent == UINT32_MAX - 1)
		return -1;
	en = t->n_ent++;
	if (moe_strmap_put(&t->ent_map, s, n, (uint32_t)en) < 0)
		return -1;
	return en;
}

static int compile_regexes(moe_tokenizer *t, moe_error *e)
{
	const moe_pre_def *d = t->pre;
	size_t n = 0;
	while (n < MOE_PRE_MAX_REGEX && d->regex[n])
		n++;
	t->re = calloc(n ? n : 1, sizeof *t->re);
	if (!t->re)
		return moe_err(e, MOE_ENOMEM, "out of memory (pre-tokenizer)");
	for (size_t i = 0; i < n; i++) {
		/* JIT is an optimisation: without it (no JIT support, W^X
		 * policies) the interpreter gives the same matches. */
		void *code;
		bool jit;
		if (moe_regex_compile(d->regex[i], false, d->name, &code, &jit, e) < 0)
			return moe_err(e, MOE_EINTERNAL, "pre-tokenizer '%s': regex %zu does not "
				       "compile", d->name, i);
		t->re[i].code = code;
		t->re[i].jit = jit;
		t->n_re++;
	}
	return 0;
}

int moe_bpe_build(moe_tokenizer *t, const moe_vocab_data *vd, moe_error *e)
{
	size_t cap = 16;

	if (vd->pre_tokenizer)
		MOE_TRY(moe_pretok_from_json(&t->pretok, vd->pre_tokenizer, e));
	else
		MOE_TRY(compile_regexes(t, e));
	if (moe_strmap_init(&t->ent_map, (size_t)t->n_tokens + vd->n_merges) < 0)
		return moe_err(e, MOE_ENOMEM, "out of memory (merge table)");
	/* Tokens first: entry e < n_ent; duplicates share an entry whose
	 * token is the last id with that text (llama.cpp's token_to_id). */
	size_t ent_cap = (size_t)t->n_tokens + 3 * (size_t)vd->n_merges + 1;
	t->ent_tok = malloc(ent_cap * sizeof *t->ent_tok);
	if (!t->ent_tok)
		return moe_err(e, MOE_ENOMEM, "out of memory (merge table)");
	for (uint32_t i = 0; i < t->n_tokens; i++) {
		int64_t en = entry_get(t, t->blob + t->off[i], t->off[i + 1] - t->off[i], false);
		if (en < 0)
			return moe_err(e, MOE_ENOMEM, "out of memory (merge table)");
		t->ent_tok[en] = (int32_t)i;
	}
	while (cap < (size_t)vd->n_merges * 2 + 16)
		cap *= 2;
	if (cap > UINT32_MAX)
		return moe_err(e, MOE_ERANGE, "too many merges (%" PRIu32 ")", vd->n_merges);
	t->pairs = malloc(cap * sizeof *t->pairs);
	if (!t->pairs)
		return moe_err(e, MOE_ENOMEM, "out of memory (merge table)");
	for (size_t i = 0; i < cap; i++)
		t->pairs[i].rank = UINT32_MAX;
	t->pair_mask = (uint32_t)(cap - 1);

	moe_sbuf cat = {0};
	for (uint32_t r = 0; r < vd->n_merges; r++) {
		const char *m = vd->merges + vd->merge_offsets[r];
		size_t n = vd->merge_offsets[r + 1] - vd->merge_offsets[r];
		/* "left right", split at the first space after the first
		 * byte (a left part may itself be a space-like char). */
		const char *sp = n > 1 ? memchr(m + 1, ' ', n - 1) : NULL;
		if (!sp)
			continue; /* llama.cpp ranks it as ("", ""): never used */
		size_t ln = (size_t)(sp - m), rn = n - ln - 1;
		cat.len = 0;
		if (moe_sbuf_add(&cat, m, ln) < 0 || moe_sbuf_add(&cat, sp + 1, rn) < 0) {
			free(cat.p);
			return moe_err(e, MOE_ENOMEM, "out of memory (merge table)");
		}
		uint32_t before = t->n_ent;
		int64_t a = entry_get(t, m, ln, true);
		int64_t b = a < 0 ? -1 : entry_get(t, sp + 1, rn, true);
		int64_t c = b < 0 ? -1 : entry_get(t, cat.p, cat.len, true);
		if (c < 0) {
			free(cat.p);
			return moe_err(e, MOE_ENOMEM, "out of memory (merge table)");
		}
		for (uint32_t k = before; k < t->n_ent; k++)
			t->ent_tok[k] = -1;
		/* First rank of a pair wins (llama.cpp's bpe_ranks.emplace). */
		uint32_t i = pair_hash((uint32_t)a, (uint32_t)b) & t->pair_mask;
		while (t->pairs[i].rank != UINT32_MAX &&
		       !(t->pairs[i].left == a && t->pairs[i].right == b))
			i = (i + 1) & t->pair_mask;
		if (t->pairs[i].rank == UINT32_MAX) {
			t->pairs[i] = (moe_bpe_pair){(uint32_t)a, (uint32_t)b, r, (uint32_t)c};
		}
	}
	free(cat.p);

	for (unsigned b = 0; b < 256; b++) {
		size_t n;
		const char *s = moe_bpe_byte_char(b, &n);
		int64_t en = moe_strmap_get(&t->ent_map, s, n);
		t->byte_ent[b] = (int32_t)en;
		/* Fallback when a symbol is not a token: llama.cpp looks up
		 * each byte of the stand-in text as a one-byte token. */
		for (size_t k = 0; k < 2; k++)
			t->byte_ent_tok[b][k] =
				k < n ? (int32_t)moe_strmap_get(&t->tok_map, s + k, 1) : -1;
	}
	return 0;
}

void moe_bpe_free(moe_tokenizer *t)
{
	for (uint32_t i = 0; i < t->n_re; i++)
		pcre2_code_free(t->re[i].code);
	free(t->re);
	moe_pretok_free(t->pretok);
	free(t->pairs);
	free(t->ent_tok);
	moe_strmap_free(&t->ent_map);
}

/* ------------------------------------------------------------- encoding */

typedef moe_span span; /* {off, len}: the pre-tokenizer's pieces too */

typedef struct bsym {
	uint32_t ent;  /* entry, or UINT32_MAX if the string is unknown */
	uint32_t n;    /* bytes (0 once merged into its left neighbour) */
	int32_t prev, next;
} bsym;

typedef struct bq {
	uint32_t rank;
	int32_t left, right;
	uint32_t size; /* bytes of left + right when queued */
} bq;

static bool bq_before(const bq *a, const bq *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

MOE_DEFINE_HEAP(bq_heap, bq, bq_before)

/* Per-call scratch, reused across the words of one call. */
typedef struct bpe_work {
	span *pieces, *next;
	size_t n_pieces, cap_pieces, n_next, cap_next;
	bsym *sym;
	size_t cap_sym;
	bq_heap heap;
	moe_sbuf enc;
	pcre2_match_data *md;
} bpe_work;

static int add_pair(const moe_tokenizer *t, bpe_work *w, int32_t l, int32_t r)
{
	if (l < 0 || r < 0)
		return 0;
	const bsym *a = &w->sym[l], *b = &w->sym[r];
	if (a->ent == UINT32_MAX || b->ent == UINT32_MAX)
		return 0;
	const moe_bpe_pair *p = pair_find(t, a->ent, b->ent);
	if (!p)
		return 0;
	return bq_heap_push(&w->heap, (bq){p->rank, l, r, a->n + b->n});
}

static int push_span(span **v, size_t *n, size_t *cap, uint32_t off, uint32_t len)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 64;
		span *p = realloc(*v, c * sizeof *p);
		if (!p)
			return MOE_ENOMEM;
		*v = p;
		*cap = c;
	}
	(*v)[(*n)++] = (span){off, len};
	return 0;
}

/* Split text into words: every regex, in order, splits each current piece
 * into matches and the gaps between them. */
static int pre_split(const moe_tokenizer *t, bpe_work *w, const char *text, size_t len)
{
	w->n_pieces = 0;
	if (push_span(&w->pieces, &w->n_pieces, &w->cap_pieces, 0, (uint32_t)len) < 0)
		return MOE_ENOMEM;
	for (uint32_t r = 0; r < t->n_re; r++) {
		const moe_pre_re *re = &t->re[r];
		w->n_next = 0;
		for (size_t p = 0; p < w->n_pieces; p++) {
			PCRE2_SPTR s = (PCRE2_SPTR)text + w->pieces[p].off;
			size_t n = w->pieces[p].len, pos = 0, last = 0;
			while (pos < n) {
				int rc = PCRE2_ERROR_JIT_STACKLIMIT;
				if (re->jit)
					rc = pcre2_jit_match(re->code, s, n, pos, 0, w->md, NULL);
				/* Without JIT, or when its stack is too small for
				 * this text: the interpreter, which backtracks on
				 * the heap. */
				if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
					rc = pcre2_match(re->code, s, n, pos, PCRE2_NO_UTF_CHECK, w->md,
							 NULL);
				if (rc == PCRE2_ERROR_NOMATCH)
					break; /* the rest of the piece is a gap */
				if (rc < 0)
					return MOE_ERANGE;
				PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
				size_t ms = ov[0], me = ov[1];
				if (me == ms) {
					/* Empty match: none of our patterns make one, but
					 * step a whole character so a future one cannot
					 * loop forever. */
					pos = ms + 1;
					while (pos < n && (s[pos] & 0xC0) == 0x80)
						pos++;
					continue;
				}
				if (ms > last &&
				    push_span(&w->next, &w->n_next, &w->cap_next,
					      w->pieces[p].off + (uint32_t)last,
					      (uint32_t)(ms - last)) < 0)
					return MOE_ENOMEM;
				if (push_span(&w->next, &w->n_next, &w->cap_next,
					      w->pieces[p].off + (uint32_t)ms,
					      (uint32_t)(me - ms)) < 0)
					return MOE_ENOMEM;
				last = pos = me;
			}
			if (last < n && push_span(&w->next, &w->n_next, &w->cap_next,
						  w->pieces[p].off + (uint32_t)last,
						  (uint32_t)(n - last)) < 0)
				return MOE_ENOMEM;
		}
		span *tmp = w->pieces;
		w->pieces = w->next;
		w->next = tmp;
		size_t c = w->cap_pieces;
		w->cap_pieces = w->cap_next;
		w->cap_next = c;
		w->n_pieces = w->n_next;
	}
	return 0;
}

static int emit_symbol(const moe_tokenizer *t, const unsigned char *s, const bsym *y, moe_ids *out)
{
	if (y->ent != UINT32_MAX && t->ent_tok[y->ent] >= 0)
		return moe_ids_push(out, t->ent_tok[y->ent]);
	for (uint32_t k = 0; k < y->n; k++)
		for (int j = 0; j < 2; j++)
			if (t->byte_ent_tok[s[k]][j] >= 0 &&
			    moe_ids_push(out, t->byte_ent_tok[s[k]][j]) < 0)
				return MOE_ENOMEM;
	return 0;
}

static int encode_word(const moe_tokenizer *t, bpe_work *w, const unsigned char *s, size_t n,
		       moe_ids *out)
{
	if (t->ignore_merges) {
		/* A word that is a token as a whole wins over the merges. */
		w->enc.len = 0;
		for (size_t i = 0; i < n; i++) {
			size_t cl;
			const char *c = moe_bpe_byte_char(s[i], &cl);
			if (moe_sbuf_add(&w->enc, c, cl) < 0)
				return MOE_ENOMEM;
		}
		int64_t id = moe_strmap_get(&t->tok_map, w->enc.p, w->enc.len);
		if (id >= 0)
			return moe_ids_push(out, (int32_t)id);
	}
	if (n > w->cap_sym) {
		size_t cap = w->cap_sym ? w->cap_sym : 64;
		while (cap < n)
			cap *= 2;
		bsym *p = realloc(w->sym, cap * sizeof *p);
		if (!p)
			return MOE_ENOMEM;
		w->sym = p;
		w->cap_sym = cap;
	}
	for (size_t i = 0; i < n; i++) {
		int32_t en = t->byte_ent[s[i]];
		w->sym[i] = (bsym){en < 0 ? UINT32_MAX : (uint32_t)en, 1, (int32_t)i - 1,
				   i + 1 < n ? (int32_t)i + 1 : -1};
	}
	w->heap.n = 0;
	for (size_t i = 1; i < n; i++)
		if (add_pair(t, w, (int32_t)i - 1, (int32_t)i) < 0)
			return MOE_ENOMEM;
	while (w->heap.n) {
		bq q = bq_heap_pop(&w->heap);
		bsym *l = &w->sym[q.left], *r = &w->sym[q.right];
		/* Stale if either side was merged away or grew since. */
		if (l->n == 0 || r->n == 0 || l->n + r->n != q.size)
			continue;
		const moe_bpe_pair *p = pair_find(t, l->ent, r->ent);
		l->ent = p->result;
		l->n += r->n;
		r->n = 0;
		l->next = r->next;
		if (r->next >= 0)
			w->sym[r->next].prev = q.left;
		if (add_pair(t, w, l->prev, q.left) < 0 || add_pair(t, w, q.left, l->next) < 0)
			return MOE_ENOMEM;
	}
	for (int32_t i = 0; i >= 0; i = w->sym[i].next)
		if (emit_symbol(t, s + i, &w->sym[i], out) < 0)
			return MOE_ENOMEM;
	return 0;
}

int moe_bpe_encode(const moe_tokenizer *t, const char *text, size_t len, moe_ids *out,
		   moe_error *e)
{
	bpe_work w = {0};
	moe_pieces ps = {0};
	int rc = 0;

	if (len == 0)
		return 0;
	/* The caller (moe_tokenizer_encode) has repaired invalid UTF-8:
	 * PCRE2 in UTF mode is called without checking it again. */
	if (len > UINT32_MAX)
		return moe_err(e, MOE_ERANGE, "text too long for the tokenizer (%zu bytes)", len);
	/* Words: from tokenizer.json's pre-tokenizer (spans of its work
	 * buffer) or from the named regexes (spans of text). */
	const char *base = text;
	const span *words = NULL;
	size_t n_words = 0;
	if (t->pretok) {
		rc = moe_pretok_run(t->pretok, text, len, &ps);
		base = ps.buf.p;
		words = (const span *)ps.v;
		n_words = ps.n;
	} else if (!(w.md = pcre2_match_data_create(4, NULL))) {
		rc = MOE_ENOMEM;
	} else {
		rc = pre_split(t, &w, text, len);
		words = w.pieces;
		n_words = w.n_pieces;
	}
	for (size_t i = 0; rc == 0 && i < n_words; i++)
		rc = encode_word(t, &w, (const unsigned char *)base + words[i].off, words[i].len,
				 out);
	if (w.md)
		pcre2_match_data_free(w.md);
	moe_pieces_free(&ps);
	free(w.pieces);
	free(w.next);
	free(w.sym);
	free(w.heap.v);
	free(w.enc.p);
	if (rc == MOE_ERANGE)
		return moe_err(e, rc, "pre-tokenizer '%s': regular expression limit reached on "
			       "this text", t->pretok ? "tokenizer.json" : t->pre->name);
	if (rc < 0)
		return moe_err(e, rc, "out of memory (tokenizer)");
	return 0;
}

/* harmony.c — gpt-oss's "harmony" chat format, read as it streams out of
 * the detokeniser.
 *
 * A harmony conversation is a run of messages
 *     <|start|>HEADER<|message|>CONTENT<|end|>
 * where HEADER is the role, optionally "<|channel|>NAME" (analysis: the
 * chain of thought; commentary: tool calls and preambles; final: the
 * answer), " to=RECIPIENT" and "<|constrain|>FORMAT".  The assistant's
 * last message ends with <|return|> (the turn is over) or <|call|> (a tool
 * call) instead of <|end|>.  A chat prompt ends with "<|start|>assistant",
 * so generated text begins inside an assistant header.
 *
 * The parser splits that text into (channel, content) pieces as it comes,
 * whatever the chunking: a marker cut between two chunks is held back
 * until it is complete.  Text that is not inside a message (a model that
 * does not follow the format) is passed on as final content, so nothing
 * the model says is lost.
 */
#include <config.h>

#include "text_int.h"

#include <stdlib.h>
#include <string.h>

typedef enum { H_HEADER, H_CONTENT, H_OUTSIDE } hstate;

struct moe_harmony {
	hstate state;
	moe_harmony_channel ch;
	moe_sbuf pend; /* not yet handled (a possible marker's start) */
	moe_sbuf hdr;  /* the current header */
};

enum { M_START, M_END, M_MESSAGE, M_CHANNEL, M_CONSTRAIN, M_RETURN, M_CALL, M_N };
static const char *const markers[M_N] = {
	"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>",
	"<|call|>",
};

static const char *find(const char *h, size_t hn, const char *n, size_t nn)
{
	for (size_t i = 0; i + nn <= hn; i++)
		if (memcmp(h + i, n, nn) == 0)
			return h + i;
	return NULL;
}

int moe_harmony_new(moe_harmony **out, moe_error *e)
{
	moe_harmony *h = calloc(1, sizeof *h);
	if (!h)
		return moe_err(e, MOE_ENOMEM, "out of memory (harmony parser)");
	h->state = H_HEADER;
	*out = h;
	return 0;
}

void moe_harmony_free(moe_harmony *h)
{
	if (!h)
		return;
	free(h->pend.p);
	free(h->hdr.p);
	free(h);
}

/* The channel a header names ("assistant<|channel|>analysis to=..."). */
static moe_harmony_channel header_channel(const moe_sbuf *hdr)
{
	const char *s = hdr->p ? hdr->p : "";
	size_t n = hdr->len;
	const char *c = find(s, n, markers[M_CHANNEL], strlen(markers[M_CHANNEL]));
	if (!c)
		return MOE_HARMONY_FINAL; /* no channel: a plain answer */
	c += strlen(markers[M_CHANNEL]);
	size_t k = 0;
	while (c + k < s + n && c[k] != ' ' && c[k] != '<')
		k++;
	static const struct {
		const char *name;
		moe_harmony_channel ch;
	} names[] = {
		{"final", MOE_HARMONY_FINAL},
		{"analysis", MOE_HARMONY_ANALYSIS},
		{"commentary", MOE_HARMONY_COMMENTARY},
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (k == strlen(names[i].name) && memcmp(c, names[i].name, k) == 0)
			return names[i].ch;
	return MOE_HARMONY_OTHER;
}

/* Plain text (no marker) in the current state. */
static int text(moe_harmony *h, const char *s, size_t n, moe_harmony_fn fn, void *user)
{
	if (!n)
		return 0;
	switch (h->state) {
	case H_HEADER:
		return moe_sbuf_add(&h->hdr, s, n);
	case H_CONTENT:
		return fn(user, h->ch, s, n);
	default:
		return fn(user, MOE_HARMONY_FINAL, s, n);
	}
}

static int marker(moe_harmony *h, int m)
{
	switch (m) {
	case M_START:
		h->state = H_HEADER;
		h->hdr.len = 0;
		return 0;
	case M_CHANNEL:
	case M_CONSTRAIN:
		if (h->state != H_HEADER) {
			/* a header without <|start|> (the role came from the prompt) */
			h->state = H_HEADER;
			h->hdr.len = 0;
		}
		return moe_sbuf_adds(&h->hdr, markers[m]);
	case M_MESSAGE:
		if (h->state == H_HEADER) {
			h->ch = header_channel(&h->hdr);
			h->state = H_CONTENT;
			h->hdr.len = 0;
		}
		return 0;
	default: /* <|end|>, <|return|>, <|call|> */
		h->state = H_OUTSIDE;
		h->hdr.len = 0;
		return 0;
	}
}

/* Handle what can be handled of pend; keep a possible marker start. */
static int drain(moe_harmony *h, bool final, moe_harmony_fn fn, void *user)
{
	const char *s = h->pend.p;
	size_t n = h->pend.len, i = 0, plain = 0;
	int rc = 0;
	while (rc == 0 && i < n) {
		if (s[i] != '<') {
			i++;
			continue;
		}
		int found = -1;
		bool partial = false;
		for (int m = 0; m < M_N; m++) {
			size_t ml = strlen(markers[m]);
			if (n - i >= ml ? memcmp(s + i, markers[m], ml) == 0 : false) {
				found = m;
				break;
			}
			if (n - i < ml && memcmp(s + i, markers[m], n - i) == 0)
				partial = true;
		}
		if (found >= 0) {
			rc = text(h, s + plain, i - plain, fn, user);
			if (rc == 0)
				rc = marker(h, found);
			i += strlen(markers[found]);
			plain = i;
		} else if (partial && !final) {
			break; /* wait for the rest */
		} else {
			i++;
		}
	}
	if (rc == 0)
		rc = text(h, s + plain, i - plain, fn, user);
	memmove(h->pend.p, s + i, n - i);
	h->pend.len = n - i;
	return rc;
}

int moe_harmony_feed(moe_harmony *h, const char *s, size_t n, moe_harmony_fn fn, void *user)
{
	if (moe_sbuf_add(&h->pend, s, n) < 0)
		return MOE_ENOMEM;
	return drain(h, false, fn, user);
}

int moe_harmony_finish(moe_harmony *h, moe_harmony_fn fn, void *user)
{
	int rc = drain(h, true, fn, user);
	/* A header that never reached <|message|>: the model did not follow
	 * the format; its words (not its markers) are the answer. */
	if (rc == 0 && h->state == H_HEADER && h->hdr.len &&
	    !find(h->hdr.p, h->hdr.len, "<|", 2))
		rc = fn(user, MOE_HARMONY_FINAL, h->hdr.p, h->hdr.len);
	h->state = H_HEADER;
	h->hdr.len = 0;
	h->pend.len = 0;
	return rc;
}

const char *moe_harmony_channel_name(moe_harmony_channel ch)
{
	static const char *const names[] = {"final", "analysis", "commentary", "other"};
	return (unsigned)ch < 4 ? names[ch] : "other";
}

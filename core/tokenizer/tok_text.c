/* tok_text.c - text handling for the tokenizer: UTF-8 validation and repair (Unicode's maximal
 * subpart rule, chapter 3 of the standard), character classes, the GPT-2 byte-level alphabet
 * (Radford et al. 2019, the `bytes_to_unicode` table of openai/gpt-2's encoder.py) and the
 * normalizers of Hugging Face tokenizers (NFC/NFD/NFKC/NFKD through utf8proc, Replace,
 * Prepend, Lowercase, Strip). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok_internal.h"

/* ---- UTF-8 ---- */

uint32_t tok_utf8_decode(const uint8_t *s, int len)
{
    switch (len) {
    case 1: return s[0];
    case 2: return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
        return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
               (s[3] & 0x3F);
    }
}

int tok_utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

long tok_utf8_repair(const char *text, size_t n, tok_buf *out)
{
    static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    const uint8_t *s = (const uint8_t *)text;
    out->n = 0;
    if (tok_buf_reserve(out, n + 16) != 0) return -1;
    long bad = 0;
    size_t i = 0, run = 0; /* valid bytes [run, i) not yet copied */
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int l = nnt_utf8_len(s + i, n - i);
        if (l > 0) {
            i += (size_t)l;
            continue;
        }
        if (tok_buf_put(out, text + run, i - run) != 0 || tok_buf_put(out, fffd, 3) != 0) return -1;
        bad++;
        i += (size_t)(-l);
        run = i;
    }
    if (tok_buf_put(out, text + run, n - run) != 0) return -1;
    return bad;
}

/* ---- character classes ---- */

int tok_is_white_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

int tok_is_py_space(uint32_t c)
{
    if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)c);
    return p->bidi_class == UTF8PROC_BIDI_CLASS_WS || p->bidi_class == UTF8PROC_BIDI_CLASS_B ||
           p->bidi_class == UTF8PROC_BIDI_CLASS_S || p->category == UTF8PROC_CATEGORY_ZS;
}

int tok_is_numeric(uint32_t c)
{
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

int tok_is_word(uint32_t c)
{
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    if ((k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || (k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME) ||
        k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_PC)
        return 1;
    return c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
           (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189);
}

/* ---- byte-level alphabet ---- */

void tok_bytelevel_init(tok_bytelevel *bl)
{
    /* Printable Latin-1 bytes stand for themselves; the other 68 take 256, 257, ... in order. */
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        bl->cp[b] = printable ? (uint32_t)b : next++;
    }
    for (int c = 0; c < 324; c++) bl->byte_of[c] = -1;
    for (int b = 0; b < 256; b++) bl->byte_of[bl->cp[b]] = (int16_t)b;
}

int tok_bytelevel_unmap(const tok_bytelevel *bl, const char *s, size_t n, tok_buf *out)
{
    size_t start = out->n;
    const uint8_t *u = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        int l = nnt_utf8_len(u + i, n - i);
        uint32_t cp = l > 0 ? tok_utf8_decode(u + i, l) : 0xFFFFFFFF;
        if (l <= 0 || cp >= 324 || bl->byte_of[cp] < 0) {
            out->n = start;
            return tok_buf_put(out, s, n) == 0 ? 0 : -1;
        }
        char b = (char)bl->byte_of[cp];
        if (tok_buf_put(out, &b, 1) != 0) return -1;
        i += (size_t)l;
    }
    return 1;
}

/* ---- normalizers ---- */

static int replace_all(const tok_norm_op *op, const char *s, size_t n, tok_buf *out, const tok_matcher *m,
                       nnt_error *err)
{
    size_t at = 0;
    for (;;) {
        size_t ms, me;
        if (op->re) {
            int r = tok_regex_next(op->re, m, s, n, at, &ms, &me, err);
            if (r < 0) return -1;
            if (r == 0) break;
        } else {
            if (op->literal_len == 0 || n - at < op->literal_len) break;
            const char *hit = tok_find(s + at, n - at, op->literal, op->literal_len);
            if (!hit) break;
            ms = (size_t)(hit - s);
            me = ms + op->literal_len;
        }
        if (tok_buf_put(out, s + at, ms - at) != 0 || tok_buf_put(out, op->content, op->content_len) != 0)
            goto oom;
        if (me == ms) { /* an empty match replaces nothing more here: keep one character */
            if (me >= n) {
                at = n;
                break;
            }
            int l = nnt_utf8_len((const uint8_t *)s + me, n - me);
            me += (size_t)(l > 0 ? l : 1);
            if (tok_buf_put(out, s + ms, me - ms) != 0) goto oom;
        }
        at = me;
    }
    if (tok_buf_put(out, s + at, n - at) != 0) goto oom;
    return 0;
oom:
    nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "tokenizer: no memory to normalize %zu bytes", n);
    return -1;
}

int tok_normalize(const tok_normalizer *nz, const char *s, size_t n, tok_buf *out, tok_buf *tmp,
                  const tok_matcher *m, nnt_error *err)
{
    out->n = 0;
    if (tok_buf_put(out, s, n) != 0) goto oom;
    for (int i = 0; i < nz->n; i++) {
        const tok_norm_op *op = &nz->ops[i];
        tmp->n = 0;
        switch (op->kind) {
        case TOK_NORM_NFC:
        case TOK_NORM_NFD:
        case TOK_NORM_NFKC:
        case TOK_NORM_NFKD: {
            if (out->n == 0) continue;
            int opts = UTF8PROC_STABLE;
            if (op->kind == TOK_NORM_NFC || op->kind == TOK_NORM_NFKC) opts |= UTF8PROC_COMPOSE;
            else opts |= UTF8PROC_DECOMPOSE;
            if (op->kind == TOK_NORM_NFKC || op->kind == TOK_NORM_NFKD) opts |= UTF8PROC_COMPAT;
            utf8proc_uint8_t *dst = NULL;
            utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)out->p, (utf8proc_ssize_t)out->n, &dst,
                                              (utf8proc_option_t)opts);
            if (r < 0) {
                free(dst);
                nnt_err_set(err, NNT_ERR_INTERNAL, "tokenizer: Unicode normalization failed: %s",
                            utf8proc_errmsg(r));
                return -1;
            }
            int bad = tok_buf_put(tmp, dst, (size_t)r);
            free(dst);
            if (bad) goto oom;
            break;
        }
        case TOK_NORM_REPLACE:
            if (replace_all(op, out->p, out->n, tmp, m, err) != 0) return -1;
            break;
        case TOK_NORM_LOWERCASE: {
            /* character by character, as tokenizers does: the simple lowercase mapping, and
             * U+0130's unconditional two-character one (SpecialCasing.txt) */
            const uint8_t *u = (const uint8_t *)out->p;
            for (size_t k = 0; k < out->n;) {
                int l = nnt_utf8_len(u + k, out->n - k);
                if (l <= 0) l = 1;
                uint32_t cp = tok_utf8_decode(u + k, l);
                char enc[8];
                int el;
                if (cp == 0x130) {
                    enc[0] = 'i';
                    el = 1 + tok_utf8_encode(0x307, enc + 1);
                } else {
                    el = tok_utf8_encode((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), enc);
                }
                if (tok_buf_put(tmp, enc, (size_t)el) != 0) goto oom;
                k += (size_t)l;
            }
            break;
        }
        case TOK_NORM_STRIP: {
            const uint8_t *u = (const uint8_t *)out->p;
            size_t a = 0, b = out->n;
            while (op->strip_left && a < b) {
                int l = nnt_utf8_len(u + a, b - a);
                if (l <= 0 || !tok_is_white_space(tok_utf8_decode(u + a, l))) break;
                a += (size_t)l;
            }
            while (op->strip_right && b > a) {
                size_t st = b - 1;
                while (st > a && (u[st] & 0xC0) == 0x80) st--;
                int l = nnt_utf8_len(u + st, b - st);
                if (l <= 0 || !tok_is_white_space(tok_utf8_decode(u + st, l))) break;
                b = st;
            }
            if (tok_buf_put(tmp, out->p + a, b - a) != 0) goto oom;
            break;
        }
        case TOK_NORM_PREPEND:
            if (out->n == 0) continue;
            if (tok_buf_put(tmp, op->content, op->content_len) != 0 || tok_buf_put(tmp, out->p, out->n) != 0)
                goto oom;
            break;
        }
        tok_buf t = *out;
        *out = *tmp;
        *tmp = t;
    }
    return 0;
oom:
    nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "tokenizer: no memory to normalize %zu bytes", n);
    return -1;
}

void tok_normalizer_free(tok_normalizer *nz)
{
    for (int i = 0; i < nz->n; i++) {
        free(nz->ops[i].literal);
        free(nz->ops[i].content);
        if (nz->ops[i].re) pcre2_code_free(nz->ops[i].re);
    }
    free(nz->ops);
    memset(nz, 0, sizeof *nz);
}

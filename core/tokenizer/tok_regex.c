/* tok_regex.c - split patterns on PCRE2. The tokenizers' patterns are written for other engines
 * (Oniguruma in Hugging Face tokenizers, Rust's regex / fancy-regex in tiktoken); two
 * differences matter and are rewritten before compiling:
 *   - \s there is Unicode's White_Space property; PCRE2's \s (with UCP) leaves out U+0085, so
 *     \s and \S become explicit classes;
 *   - Rust's classes may intersect, [X&&[Y]] (a pattern can keep Han out of its letter classes
 *     that way); PCRE2 has no intersection, so it becomes (?:(?=[Y])[X]): a lookahead
 *     on the same character, which matches exactly the characters in both.
 *   - \w there is letters, marks, decimal digits and connector punctuation; PCRE2's leaves out
 *     the marks, so \w and \W become explicit classes too;
 *   - a script name, \p{Han}, means the characters of that Script in both references; PCRE2
 *     (10.40 on) reads it as Script_Extensions, which adds shared punctuation such as U+3002,
 *     so a script name becomes \p{sc:Han}.
 * Oniguruma's \uHHHH becomes \x{HHHH}. Everything else is passed through unchanged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

/* White_Space, as class items. */
static const char WS_ITEMS[] =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

/* Word characters, as class items. */
static const char WORD_ITEMS[] = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";

/* Nonzero when PCRE2 knows `name` as a script (so \p{sc:name} compiles). */
static int is_script(const char *name, size_t n)
{
    if (n == 0 || n > 64 || memchr(name, ':', n) || memchr(name, '=', n)) return 0;
    char pat[96];
    snprintf(pat, sizeof pat, "\\p{sc:%.*s}", (int)n, name);
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &off, NULL);
    if (!re) return 0;
    pcre2_code_free(re);
    return 1;
}

typedef struct rw {
    const char *p;
    size_t n, i;
    tok_buf out;
    int bad;
} rw;

static void put(rw *r, const char *s, size_t n)
{
    if (tok_buf_put(&r->out, s, n) != 0) r->bad = 1;
}
static void puts_(rw *r, const char *s) { put(r, s, strlen(s)); }

/* Copies the escape at r->p[r->i] ('\\') to dst (a buffer), rewriting \s, \S (in_class: \s
 * only) and \uHHHH. */
static void escape(rw *r, tok_buf *dst, int in_class)
{
    size_t i = r->i;
    if (i + 1 >= r->n) { /* a trailing backslash: let PCRE2 report it */
        if (tok_buf_put(dst, "\\", 1) != 0) r->bad = 1;
        r->i = r->n;
        return;
    }
    char c = r->p[i + 1];
    const char *s = NULL;
    char tmp[24];
    size_t len = 2;
    if (c == 's') {
        if (tok_buf_put(dst, in_class ? "" : "[", in_class ? 0 : 1) != 0 ||
            tok_buf_put(dst, WS_ITEMS, sizeof WS_ITEMS - 1) != 0 || tok_buf_put(dst, in_class ? "" : "]", in_class ? 0 : 1) != 0)
            r->bad = 1;
        r->i += 2;
        return;
    }
    if (c == 'S' && !in_class) {
        if (tok_buf_put(dst, "[^", 2) != 0 || tok_buf_put(dst, WS_ITEMS, sizeof WS_ITEMS - 1) != 0 ||
            tok_buf_put(dst, "]", 1) != 0)
            r->bad = 1;
        r->i += 2;
        return;
    }
    if (c == 'u' && i + 6 <= r->n) {
        int hex = 1;
        for (int k = 2; k < 6; k++) {
            char h = r->p[i + (size_t)k];
            if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F'))) hex = 0;
        }
        if (hex) {
            snprintf(tmp, sizeof tmp, "\\x{%.4s}", r->p + i + 2);
            if (tok_buf_put(dst, tmp, strlen(tmp)) != 0) r->bad = 1;
            r->i += 6;
            return;
        }
    }
    if (c == 'w' || (c == 'W' && !in_class)) {
        int neg = c == 'W';
        if (tok_buf_put(dst, in_class ? "" : neg ? "[^" : "[", in_class ? 0 : neg ? 2 : 1) != 0 ||
            tok_buf_put(dst, WORD_ITEMS, sizeof WORD_ITEMS - 1) != 0 || tok_buf_put(dst, in_class ? "" : "]", in_class ? 0 : 1) != 0)
            r->bad = 1;
        r->i += 2;
        return;
    }
    if ((c == 'p' || c == 'P' || c == 'x') && i + 2 < r->n && r->p[i + 2] == '{') {
        const char *close = memchr(r->p + i + 2, '}', r->n - i - 2);
        if (close) len = (size_t)(close - (r->p + i)) + 1;
        const char *name = r->p + i + 3;
        size_t name_len = close ? (size_t)(close - name) : 0;
        if (c != 'x' && close && name_len && name[0] != '^' && is_script(name, name_len)) {
            snprintf(tmp, sizeof tmp, "\\%c{sc:", c);
            if (tok_buf_put(dst, tmp, strlen(tmp)) != 0 || tok_buf_put(dst, name, name_len) != 0 ||
                tok_buf_put(dst, "}", 1) != 0)
                r->bad = 1;
            r->i += len;
            return;
        }
    }
    s = r->p + i;
    if (tok_buf_put(dst, s, len) != 0) r->bad = 1;
    r->i += len;
}

/* A bracket class starting at r->p[r->i] == '['. Returns 0, or -1 for a form this rewriter
 * does not handle (a nested class outside an intersection). */
static int klass(rw *r)
{
    tok_buf left = {0}, right = {0};
    int negated = 0, has_and = 0, ok = 0;
    size_t i0 = r->i;
    r->i++;
    if (r->i < r->n && r->p[r->i] == '^') negated = 1, r->i++;
    int first = 1;
    while (r->i < r->n) {
        char c = r->p[r->i];
        tok_buf *dst = has_and ? &right : &left;
        if (c == ']' && !first) {
            r->i++;
            ok = 1;
            break;
        }
        first = 0;
        if (c == '\\') {
            escape(r, dst, 1);
        } else if (c == '[' && r->i + 1 < r->n && r->p[r->i + 1] == ':') { /* POSIX [:name:] */
            const char *close = strstr(r->p + r->i, ":]");
            size_t len = close ? (size_t)(close - (r->p + r->i)) + 2 : 1;
            if (tok_buf_put(dst, r->p + r->i, len) != 0) r->bad = 1;
            r->i += len;
        } else if (c == '[') {
            if (!has_and) goto unsupported; /* a nested union class */
            /* the right side of an intersection: rewrite it as a class of its own */
            tok_buf saved = r->out;
            r->out = (tok_buf){0};
            if (klass(r) != 0) {
                tok_buf_free(&r->out);
                r->out = saved;
                goto unsupported;
            }
            if (tok_buf_put(&right, r->out.p, r->out.n) != 0) r->bad = 1;
            tok_buf_free(&r->out);
            r->out = saved;
        } else if (c == '&' && r->i + 1 < r->n && r->p[r->i + 1] == '&') {
            if (has_and) goto unsupported;
            has_and = 1;
            r->i += 2;
        } else {
            if (tok_buf_put(dst, &c, 1) != 0) r->bad = 1;
            r->i++;
        }
    }
    if (!ok) { /* unterminated: copy it and let PCRE2 report it */
        put(r, r->p + i0, r->i - i0);
        goto done;
    }
    if (!has_and) {
        puts_(r, negated ? "[^" : "[");
        put(r, left.p, left.n);
        puts_(r, "]");
    } else {
        /* right holds either a rewritten class "[...]" or bare items */
        int right_is_class = right.n && right.p[0] == '[' && right.p[right.n - 1] == ']';
        puts_(r, negated ? "(?:(?!(?=" : "(?:(?=");
        if (!right_is_class) puts_(r, "[");
        put(r, right.p, right.n);
        if (!right_is_class) puts_(r, "]");
        puts_(r, ")[");
        put(r, left.p, left.n);
        puts_(r, negated ? "])(?s:.))" : "])");
    }
done:
    tok_buf_free(&left);
    tok_buf_free(&right);
    return 0;
unsupported:
    tok_buf_free(&left);
    tok_buf_free(&right);
    return -1;
}

char *tok_regex_rewrite(const char *pattern, size_t len)
{
    rw r = {.p = pattern, .n = len};
    while (r.i < r.n && !r.bad) {
        char c = r.p[r.i];
        if (c == '\\') {
            escape(&r, &r.out, 0);
        } else if (c == '[') {
            if (klass(&r) != 0) {
                tok_buf_free(&r.out);
                return NULL;
            }
        } else {
            put(&r, &c, 1);
            r.i++;
        }
    }
    if (r.bad || tok_buf_put(&r.out, "", 0) != 0) {
        tok_buf_free(&r.out);
        return NULL;
    }
    return r.out.p;
}

pcre2_code *tok_regex_compile(const char *pattern, size_t len, const char *what, nnt_error *err)
{
    char *rewritten = tok_regex_rewrite(pattern, len);
    if (!rewritten) {
        nnt_err_set(err, NNT_ERR_UNSUPPORTED,
                    "%s: the pattern '%.200s' uses a class form nnt cannot translate for PCRE2 (a nested class "
                    "outside an intersection)",
                    what, pattern);
        return NULL;
    }
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)rewritten, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_NEVER_BACKSLASH_C, &code,
                                   &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        nnt_err_set(err, NNT_ERR_FORMAT, "%s: the pattern '%.200s' does not compile (as '%.200s'): %s at offset %zu",
                    what, pattern, rewritten, (const char *)msg, (size_t)off);
        free(rewritten);
        return NULL;
    }
    free(rewritten);
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* the interpreter runs it otherwise */
    return re;
}

int tok_matcher_init(tok_matcher *m)
{
    memset(m, 0, sizeof *m);
    m->md = pcre2_match_data_create(4, NULL);
    m->mctx = pcre2_match_context_create(NULL);
    m->jit = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
    if (!m->md || !m->mctx) return -1;
    /* a bound on backtracking, so that no input can make a match run unboundedly */
    pcre2_set_match_limit(m->mctx, 50u * 1000 * 1000);
    if (m->jit) pcre2_jit_stack_assign(m->mctx, NULL, m->jit);
    return 0;
}

void tok_matcher_free(tok_matcher *m)
{
    if (m->md) pcre2_match_data_free(m->md);
    if (m->mctx) pcre2_match_context_free(m->mctx);
    if (m->jit) pcre2_jit_stack_free(m->jit);
    memset(m, 0, sizeof *m);
}

int tok_regex_next(pcre2_code *re, const tok_matcher *m, const char *s, size_t n, size_t from, size_t *start,
                   size_t *end, nnt_error *err)
{
    if (from >= n) return 0;
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK | PCRE2_NOTEMPTY, m->md, m->mctx);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        nnt_err_set(err, NNT_ERR_INTERNAL, "tokenizer: the split pattern failed at byte %zu of a %zu-byte piece: %s",
                    from, n, (const char *)msg);
        return -1;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
    *start = ov[0];
    *end = ov[1];
    return 1;
}

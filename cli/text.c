/* text.c - what the nnt command prints of tokens and values: token text quoted and escaped so
 * that one token stays on one line, a saved value's summary line, tables in aligned columns,
 * the most probable tokens, a text row's tokens, and a generated row. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"


void sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *g = realloc(b->p, cap);
        if (!g) {
            b->oom = 1;
            return;
        }
        b->p = g;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* The length of the well-formed UTF-8 sequence at s (n bytes available) and its code point, or
 * 0 when s[0] does not start one (overlong forms, surrogates and values past U+10FFFF are not
 * well-formed). */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) len = 2, v = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef) len = 3, v = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, v = c & 0x07, min = 0x10000;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return len;
}

/* Characters written as \uNNNN: C1 controls, and characters that are invisible or change the
 * direction or the lines of what follows them on a terminal. */
static int escaped_code_point(uint32_t cp)
{
    return (cp >= 0x80 && cp <= 0x9f) || cp == 0xad || cp == 0x61c || (cp >= 0x200b && cp <= 0x200f) ||
           (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x2069) || cp == 0xfeff;
}

/* Appends bytes as a double-quoted string: printable text as is; backslash, the double quote,
 * \n, \t and \r escaped; other control bytes and every byte that is not part of well-formed
 * UTF-8 as \xNN; the characters escaped_code_point names as \uNNNN. */
void sb_quoted(sbuf *b, const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    char esc[16];
    sb_add(b, "\"", 1);
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = utf8_seq(s + i, len - i, &cp);
        if (n == 0) { /* a byte that is not well-formed UTF-8 */
            snprintf(esc, sizeof esc, "\\x%02x", s[i]);
            sb_str(b, esc);
            i++;
            continue;
        }
        if (cp == '\\' || cp == '"') {
            esc[0] = '\\', esc[1] = (char)cp, esc[2] = '\0';
            sb_str(b, esc);
        } else if (cp == '\n' || cp == '\t' || cp == '\r') {
            sb_str(b, cp == '\n' ? "\\n" : cp == '\t' ? "\\t" : "\\r");
        } else if (cp < 0x20 || cp == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", (unsigned)cp);
            sb_str(b, esc);
        } else if (escaped_code_point(cp)) {
            snprintf(esc, sizeof esc, "\\u%04x", (unsigned)cp);
            sb_str(b, esc);
        } else {
            sb_add(b, text + i, n);
        }
        i += n;
    }
    sb_add(b, "\"", 1);
}

/* Appends `ID "text"` (or `ID ?` for an id the tokenizer has no token for, or `ID` without a
 * tokenizer). */
void sb_token(sbuf *b, const nnt_tokenizer *tok, int32_t id)
{
    char num[16];
    snprintf(num, sizeof num, "%d", id);
    sb_str(b, num);
    if (!tok) return;
    size_t len;
    const char *bytes = nnt_tokenizer_token_bytes(tok, id, &len);
    sb_add(b, " ", 1);
    if (bytes)
        sb_quoted(b, bytes, len);
    else
        sb_add(b, "?", 1);
}

void print_token(const nnt_tokenizer *tok, int32_t id)
{
    sbuf b = {0};
    sb_token(&b, tok, id);
    fputs(b.oom ? "?" : b.p, stdout);
    free(b.p);
}

/* Characters on screen: code points (wide characters count one). */
static int display_width(const char *s)
{
    int w = 0;
    for (; *s; s++) w += ((unsigned char)*s & 0xc0) != 0x80;
    return w;
}

void describe_value(const char *path, const nnt_tensor *t)
{
    if (!t) {
        printf("%-44s None\n", path);
        return;
    }
    char shape[96];
    size_t k = 0;
    k += (size_t)snprintf(shape + k, sizeof shape - k, "[");
    for (int i = 0; i < t->ndim && k < sizeof shape; i++)
        k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (k < sizeof shape) snprintf(shape + k, sizeof shape - k, "]");
    int64_t n = nnt_tensor_numel(t), finite = 0;
    double mn = INFINITY, mx = -INFINITY, sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double v = nnt_tensor_get_f64(t, i);
        if (!isfinite(v)) continue;
        finite++;
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
        sum += v;
    }
    printf("%-44s %-20s %-4s", path, shape, nnt_dtype_name(t->dtype));
    if (finite)
        printf(" min %.6g  mean %.6g  max %.6g", mn, sum / (double)finite, mx);
    if (finite < n) printf("  (%lld masked or non-finite)", (long long)(n - finite));
    printf("\n");
}

/* The k most probable entries of p[0..V) in decreasing order (k <= 8). */
int top_tokens(const float *p, int64_t V, int k, int *top)
{
    int n = 0;
    for (int64_t v = 0; v < V; v++) {
        int at = n < k ? n++ : k;
        if (at == k && p[v] <= p[top[k - 1]]) continue;
        if (at == k) at = k - 1;
        while (at > 0 && p[top[at - 1]] < p[v]) {
            top[at] = top[at - 1];
            at--;
        }
        top[at] = (int)v;
    }
    return n;
}

/* A token's text for a plot's axis: the tokenizer's text (escaped as in the tables, without
 * quotes) or the id. A new string, or NULL when out of memory. */
char *axis_token(const nnt_tokenizer *tok, int32_t id)
{
    sbuf b = {0};
    size_t len;
    const char *bytes = tok ? nnt_tokenizer_token_bytes(tok, id, &len) : NULL;
    if (bytes) {
        sb_quoted(&b, bytes, len);
        if (b.p && b.n >= 2) { /* drop the quotes */
            memmove(b.p, b.p + 1, b.n - 2);
            b.p[b.n - 2] = 0;
        }
    } else {
        char num[16];
        snprintf(num, sizeof num, "%d", id);
        sb_str(&b, num);
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* Frees n strings and the array. */
void free_strings(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

/* The lens table with token text: cells [rows][S] are laid out in columns as wide as their
 * widest cell. */
void print_table(char **cells, int rows, int S, const char *const *labels)
{
    int *width = calloc((size_t)S, sizeof *width);
    for (int s = 0; width && s < S; s++)
        for (int r = 0; r < rows; r++) {
            int w = display_width(cells[(size_t)r * S + s]);
            width[s] = w > width[s] ? w : width[s];
        }
    for (int r = 0; r < rows; r++) {
        printf("%-6s", labels[r]);
        for (int s = 0; s < S; s++) {
            const char *c = cells[(size_t)r * S + s];
            printf("  %s", c);
            if (s + 1 < S && width)
                for (int w = display_width(c); w < width[s]; w++) putchar(' ');
        }
        printf("\n");
    }
    free(width);
}

void print_prompt_tokens(int text_rows, const nnt_batch *b, const nnt_tokenizer *tok)
{
    if (!text_rows) return;
    for (int r = 0; r < b->batch; r++) {
        int n;
        const int32_t *ids = batch_row(b, r, &n);
        printf("prompt, row %d (%d token%s):", r, n, n == 1 ? "" : "s");
        for (int i = 0; i < n; i++) {
            printf("  ");
            print_token(tok, ids[i]);
        }
        printf("\n");
    }
}

const int32_t *batch_row(const nnt_batch *b, int r, int *n)
{
    *n = b->lens[r];
    return b->ids + (size_t)r * b->seq + (b->seq - b->lens[r]);
}

int print_saved(const nnt_trace *t, const char *header, const char *hidden)
{
    int shown = 0, kept = 0;
    for (int i = 0; i < nnt_trace_result_count(t); i++) {
        const char *key;
        const nnt_tensor *v;
        nnt_trace_result(t, i, &key, &v);
        kept += v != NULL;
        if (hidden && !strcmp(key, hidden)) continue;
        if (!shown++) fputs(header, stdout);
        describe_value(key, v);
    }
    return kept;
}

void print_top_tokens(const nnt_tokenizer *tok, const nnt_tensor *probs)
{
    int64_t V = probs->shape[1];
    for (int r = 0; r < probs->shape[0]; r++) {
        const float *p = (const float *)probs->data + (int64_t)r * V;
        int top[5], n = top_tokens(p, V, 5, top);
        printf("top 5 next tokens, row %d:", r);
        for (int k = 0; k < n; k++) {
            printf("  ");
            print_token(tok, top[k]);
            printf(" (%.4f)", p[top[k]]);
        }
        printf("\n");
    }
}

/* Prints generated row r: its ids; with a tokenizer, each id with its text and the decoded
 * continuation (without the stop token that ended it). */
void print_generated(const nnt_tokenizer *tok, int r, const int32_t *ids, int N, const int32_t *stops, int n_stops)
{
    int n = 0, stopped = 0;
    while (n < N && ids[n] != NNT_TOKEN_STOPPED) n++;
    for (int k = 0; n > 0 && k < n_stops; k++) stopped |= ids[n - 1] == stops[k];
    printf("new tokens, row %d:", r);
    for (int i = 0; i < n; i++) printf(" %d", ids[i]);
    printf("\n");
    if (!tok) return;
    printf("tokens, row %d:", r);
    for (int i = 0; i < n; i++) {
        printf("  ");
        print_token(tok, ids[i]);
    }
    printf("\ntext, row %d: ", r);
    char *text = NULL;
    size_t len = 0;
    if (nnt_tokenizer_decode((nnt_tokenizer *)tok, ids, n - stopped, 0, &text, &len) == NNT_OK) {
        sbuf q = {0};
        sb_quoted(&q, text, len);
        fputs(q.p ? q.p : "?", stdout);
        free(q.p);
        free(text);
    } else {
        printf("? (%s)", nnt_tokenizer_last_error(tok));
    }
    if (stopped) {
        printf(" (stopped at ");
        print_token(tok, ids[n - 1]);
        printf(")");
    }
    printf("\n");
}

/* json_pick.c - builds a cJSON tree of only the members a reader asks for, out of a JSON document
 * that may hold much more.
 *
 * cJSON cannot step over a value without building it: every number, string, array and object
 * costs a node of 64 bytes (some 80 with the allocator's share) plus its strings, so a
 * tokenizer.json or safetensors index carrying a large field nnt never reads cost about 40 times
 * that field's size in memory. Here a scanner that allocates nothing walks the whole document,
 * checking its syntax (RFC 8259), and notes where each member of the top-level object (and of a
 * wanted object whose members are chosen too) begins and ends; cJSON then parses only the byte
 * ranges of the wanted members. The document is still refused when any part of it is malformed,
 * with the offset of the first bad byte. No state outlives a call. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

/* the deepest nesting of arrays and objects accepted: cJSON's CJSON_NESTING_LIMIT */
#define JSON_DEPTH_MAX 1000

typedef struct scan {
    const unsigned char *s;
    size_t n;  /* the document's length */
    size_t at; /* the next byte to read; on an error, the offending byte (n: the text ended early) */
} scan;

static void skip_space(scan *c)
{
    while (c->at < c->n) {
        unsigned char ch = c->s[c->at];
        if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r') break;
        c->at++;
    }
}

static int is_digit(unsigned char ch) { return ch >= '0' && ch <= '9'; }

static int hex_value(unsigned char ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* A string whose opening quote is at c->at; c->at ends past the closing quote. Bytes from 0x80
 * up are taken as they are (UTF-8 is not checked, as cJSON does not check it). 0 or -1. */
static int scan_string(scan *c)
{
    size_t i = c->at + 1;
    for (;;) {
        if (i >= c->n) break;
        unsigned char ch = c->s[i];
        if (ch == '"') {
            c->at = i + 1;
            return 0;
        }
        if (ch < 0x20) break; /* a raw control byte */
        if (ch != '\\') {
            i++;
            continue;
        }
        if (++i >= c->n) break;
        ch = c->s[i];
        if (ch == 'u') {
            for (int k = 1; k <= 4; k++)
                if (i + (size_t)k >= c->n || hex_value(c->s[i + (size_t)k]) < 0) {
                    c->at = i + (size_t)k;
                    return -1;
                }
            i += 5;
        } else if (ch == '"' || ch == '\\' || ch == '/' || ch == 'b' || ch == 'f' || ch == 'n' || ch == 'r' ||
                   ch == 't') {
            i++;
        } else {
            break; /* an escape JSON does not define */
        }
    }
    c->at = i;
    return -1;
}

/* A number by RFC 8259's grammar: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?. A
 * leading zero ends the number, so "01" fails at the '1' where the caller wants a separator. */
static int scan_number(scan *c)
{
    size_t i = c->at, n = c->n;
    const unsigned char *s = c->s;
    if (i < n && s[i] == '-') i++;
    if (i >= n || !is_digit(s[i])) goto bad;
    if (s[i] == '0') i++;
    else
        while (i < n && is_digit(s[i])) i++;
    if (i < n && s[i] == '.') {
        if (++i >= n || !is_digit(s[i])) goto bad;
        while (i < n && is_digit(s[i])) i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || !is_digit(s[i])) goto bad;
        while (i < n && is_digit(s[i])) i++;
    }
    c->at = i;
    return 0;
bad:
    c->at = i;
    return -1;
}

static int scan_word(scan *c, const char *word)
{
    for (size_t k = 0; word[k]; k++, c->at++)
        if (c->at >= c->n || c->s[c->at] != (unsigned char)word[k]) return -1;
    return 0;
}

/* A member's name and its colon, from c->at (whitespace allowed before each); *name_at and
 * *name_end (either may be NULL) get the bounds of the text between the name's quotes. */
static int scan_name(scan *c, size_t *name_at, size_t *name_end)
{
    skip_space(c);
    if (c->at >= c->n || c->s[c->at] != '"') return -1;
    if (name_at) *name_at = c->at + 1;
    if (scan_string(c) != 0) return -1;
    if (name_end) *name_end = c->at - 1;
    skip_space(c);
    if (c->at >= c->n || c->s[c->at] != ':') return -1;
    c->at++;
    return 0;
}

/* One value from c->at (whitespace allowed before it) inside `open` arrays and objects; c->at
 * ends just past it. Iterative: the containers opened here are kept on a stack of 1000 bytes. */
static int scan_value(scan *c, int open)
{
    unsigned char stack[JSON_DEPTH_MAX]; /* the closing bracket each open container wants */
    int top = 0;
    for (;;) {
        /* a value */
        skip_space(c);
        if (c->at >= c->n) return -1;
        unsigned char ch = c->s[c->at];
        if (ch == '{' || ch == '[') {
            if (open + top >= JSON_DEPTH_MAX) return -1;
            unsigned char close = ch == '{' ? '}' : ']';
            stack[top++] = close;
            c->at++;
            skip_space(c);
            if (c->at < c->n && c->s[c->at] == close) {
                c->at++;
                top--;
            } else {
                if (close == '}' && scan_name(c, NULL, NULL) != 0) return -1;
                continue;
            }
        } else if (ch == '"') {
            if (scan_string(c) != 0) return -1;
        } else if (ch == '-' || is_digit(ch)) {
            if (scan_number(c) != 0) return -1;
        } else if (ch == 't' || ch == 'f' || ch == 'n') {
            if (scan_word(c, ch == 't' ? "true" : ch == 'f' ? "false" : "null") != 0) return -1;
        } else {
            return -1;
        }
        /* after a value: close containers until one goes on with a comma */
        for (;;) {
            if (top == 0) return 0;
            skip_space(c);
            if (c->at >= c->n) return -1;
            ch = c->s[c->at];
            if (ch == stack[top - 1]) {
                c->at++;
                top--;
                continue;
            }
            if (ch != ',') return -1;
            c->at++;
            if (stack[top - 1] == '}' && scan_name(c, NULL, NULL) != 0) return -1;
            break;
        }
    }
}

/* cJSON skips a UTF-8 byte order mark before the document; so does this reader. */
static void skip_bom(scan *c)
{
    if (c->n >= 3 && memcmp(c->s, "\xEF\xBB\xBF", 3) == 0) c->at = 3;
}

/* The document's syntax, allocating nothing: 0, or -1 with *err_at (when not NULL) the offset of
 * the first bad byte (len when the text ends early). Declared in internal.h. */
int nnt_json_check(const char *text, size_t len, size_t *err_at)
{
    scan c = {(const unsigned char *)text, len, 0};
    skip_bom(&c);
    int rc = scan_value(&c, 0);
    if (rc == 0) {
        skip_space(&c);
        if (c.at != c.n) rc = -1; /* something after the document */
    }
    if (err_at) *err_at = rc ? c.at : 0;
    return rc;
}

/* ---- picking members ---- */

/* The code point of the 4 hex digits at p (checked by the scanner already). */
static unsigned hex4(const unsigned char *p)
{
    return (unsigned)(hex_value(p[0]) << 12 | hex_value(p[1]) << 8 | hex_value(p[2]) << 4 | hex_value(p[3]));
}

/* Whether the member name s[0..n) (between its quotes, escapes as written) is `want` as cJSON
 * would compare them: escapes decoded to UTF-8, the name cut at a decoded NUL (cJSON holds names
 * as C strings), and a name cJSON cannot decode (a lone surrogate) equal to nothing. */
static int name_is(const unsigned char *s, size_t n, const char *want)
{
    const unsigned char *w = (const unsigned char *)want;
    size_t i = 0;
    while (i < n) {
        unsigned char buf[4];
        size_t len = 1;
        if (s[i] != '\\') {
            buf[0] = s[i++];
        } else if (s[i + 1] != 'u') {
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            buf[0] = (unsigned char)to[strchr(from, s[i + 1]) - from];
            i += 2;
        } else {
            unsigned cp = hex4(s + i + 2);
            i += 6;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return 0;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (i + 6 > n || s[i] != '\\' || s[i + 1] != 'u') return 0;
                unsigned lo = hex4(s + i + 2);
                if (lo < 0xDC00 || lo > 0xDFFF) return 0;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                i += 6;
            }
            if (cp == 0) return *w == 0;
            if (cp < 0x80) {
                buf[0] = (unsigned char)cp;
            } else if (cp < 0x800) {
                buf[0] = (unsigned char)(0xC0 | cp >> 6), buf[1] = (unsigned char)(0x80 | (cp & 0x3F));
                len = 2;
            } else if (cp < 0x10000) {
                buf[0] = (unsigned char)(0xE0 | cp >> 12), buf[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
                buf[2] = (unsigned char)(0x80 | (cp & 0x3F));
                len = 3;
            } else {
                buf[0] = (unsigned char)(0xF0 | cp >> 18), buf[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
                buf[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F)), buf[3] = (unsigned char)(0x80 | (cp & 0x3F));
                len = 4;
            }
        }
        for (size_t k = 0; k < len; k++, w++)
            if (*w != buf[k]) return 0;
    }
    return *w == 0;
}

enum { PICK_OK, PICK_MALFORMED, PICK_NO_MEMORY };

/* The object whose '{' is at c->at, inside `open` arrays and objects: its members named in
 * `want` go into `out`, the rest are only scanned. PICK_OK, or an error with c->at at the bad
 * byte. */
static int pick_object(scan *c, int open, const nnt_json_want *want, cJSON *out)
{
    if (open >= JSON_DEPTH_MAX) return PICK_MALFORMED;
    c->at++;
    skip_space(c);
    if (c->at < c->n && c->s[c->at] == '}') {
        c->at++;
        return PICK_OK;
    }
    for (;;) {
        size_t name_at = 0, name_end = 0;
        if (scan_name(c, &name_at, &name_end) != 0) return PICK_MALFORMED;
        const nnt_json_want *w = want;
        while (w->key && !name_is(c->s + name_at, name_end - name_at, w->key)) w++;
        if (!w->key || cJSON_GetObjectItemCaseSensitive(out, w->key)) w = NULL; /* the first of a name given twice */
        skip_space(c);
        if (w && w->only && c->at < c->n && c->s[c->at] == '{') {
            cJSON *sub = cJSON_CreateObject();
            if (!sub) return PICK_NO_MEMORY;
            if (!cJSON_AddItemToObject(out, w->key, sub)) {
                cJSON_Delete(sub);
                return PICK_NO_MEMORY;
            }
            int rc = pick_object(c, open + 1, w->only, sub);
            if (rc != PICK_OK) return rc;
        } else {
            size_t from = c->at;
            if (scan_value(c, open + 1) != 0) return PICK_MALFORMED;
            if (w) {
                const char *begin = (const char *)c->s + from, *end = NULL;
                cJSON *v = cJSON_ParseWithLengthOpts(begin, c->at - from, &end, 0);
                if (!v || end != (const char *)c->s + c->at) {
                    /* valid JSON that cJSON refuses (a lone surrogate, a number of over 63
                     * characters), or no memory, which cJSON does not tell apart */
                    cJSON_Delete(v);
                    c->at = end ? (size_t)(end - (const char *)c->s) : from;
                    return PICK_MALFORMED;
                }
                if (!cJSON_AddItemToObject(out, w->key, v)) {
                    cJSON_Delete(v);
                    return PICK_NO_MEMORY;
                }
            }
        }
        skip_space(c);
        if (c->at >= c->n) return PICK_MALFORMED;
        if (c->s[c->at] == '}') {
            c->at++;
            return PICK_OK;
        }
        if (c->s[c->at] != ',') return PICK_MALFORMED;
        c->at++;
    }
}

/* The members `want` names of the object document text[0..len), as a new cJSON object *out the
 * caller frees; the rest scanned, not built. Errors (NNT_ERR_FORMAT for malformed JSON or a top
 * that is no object, NNT_ERR_OUT_OF_MEMORY) leave *out NULL and a message naming `name` in *err.
 * Declared, with the details, in internal.h. */
nnt_status nnt_json_pick(const char *text, size_t len, const nnt_json_want *want, const char *name, cJSON **out,
                         nnt_error *err)
{
    *out = NULL;
    scan c = {(const unsigned char *)text, len, 0};
    skip_bom(&c);
    skip_space(&c);
    int rc = PICK_OK, object = c.at < c.n && c.s[c.at] == '{';
    cJSON *root = object ? cJSON_CreateObject() : NULL;
    if (object && !root) rc = PICK_NO_MEMORY;
    else if (object) rc = pick_object(&c, 0, want, root);
    else if (scan_value(&c, 0) != 0) rc = PICK_MALFORMED;
    if (rc == PICK_OK) {
        skip_space(&c);
        if (c.at != c.n) rc = PICK_MALFORMED; /* something after the document */
    }
    if (rc != PICK_OK) {
        cJSON_Delete(root);
        if (rc == PICK_NO_MEMORY) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "%s: no memory", name);
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: malformed JSON near byte %zu", name, c.at);
    }
    if (!root) return nnt_err_set(err, NNT_ERR_FORMAT, "%s: expected a JSON object at the top", name);
    *out = root;
    return NNT_OK;
}

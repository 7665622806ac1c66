/* tok_load_json.c - reads a Hugging Face tokenizers file (tokenizer.json): the BPE model, its
 * normalizer, pre-tokenizer, post-processor, decoder and added tokens. The field names and
 * their meaning are those the tokenizers library writes (its serialisation of each component:
 * tokenizers/src/models/bpe/serialization.rs, normalizers/, pre_tokenizers/, processors/,
 * decoders/). A byte-level tokenizer (one with a ByteLevel pre-tokenizer) is held in raw bytes:
 * vocabulary strings are mapped back from the byte-level alphabet at load, so encoding works
 * on the text's own bytes. Anything this reader does not implement is refused by name. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

#define MAX_TOKENIZER_JSON (2048u << 20)

typedef struct ctx {
    nnt_tokenizer *tok;
    const char *path;
    /* decoder steps applied to each token's spelling to give its decoded bytes */
    int dec_bytelevel, dec_bytefallback;
    struct {
        char *from, *to;
    } dec_replace[8];
    int n_dec_replace;
    int has_decoder;
} ctx;

static nnt_status fail(ctx *c, nnt_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static nnt_status fail(ctx *c, nnt_status st, const char *fmt, ...)
{
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return nnt_err_set(&c->tok->err, st, "%s: %s", c->path, msg);
}

/* A token id: a JSON number that is an integer in [0, 2^31 - 1). 1 with *id set, else 0. */
static int json_id(const cJSON *e, int32_t *id)
{
    if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0 && e->valuedouble < INT32_MAX) ||
        e->valuedouble != (double)(int32_t)e->valuedouble)
        return 0;
    *id = (int32_t)e->valuedouble;
    return 1;
}

static const cJSON *item(const cJSON *o, const char *k)
{
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static int flag(const cJSON *o, const char *k, int dflt)
{
    const cJSON *v = item(o, k);
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
    return dflt;
}

static const char *type_of(const cJSON *o)
{
    const cJSON *t = item(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* A pattern object {"String": s} or {"Regex": r}: *is_regex and the text. */
static nnt_status pattern_of(ctx *c, const cJSON *o, const char *where, const char **text, int *is_regex)
{
    const cJSON *s = item(o, "String"), *r = item(o, "Regex");
    if (cJSON_IsString(s)) {
        *text = s->valuestring;
        *is_regex = 0;
        return NNT_OK;
    }
    if (cJSON_IsString(r)) {
        *text = r->valuestring;
        *is_regex = 1;
        return NNT_OK;
    }
    return fail(c, NNT_ERR_FORMAT, "%s: expected an object {\"String\": ...} or {\"Regex\": ...}", where);
}

/* A literal as a PCRE2 pattern: every character quoted. */
static pcre2_code *literal_regex(ctx *c, const char *s, const char *where)
{
    tok_buf b = {0};
    if (tok_buf_put(&b, "\\Q", 2) != 0) return NULL;
    for (const char *p = s; *p; p++) {
        if (p[0] == '\\' && p[1] == 'E') { /* close, emit "\E" literally, reopen */
            if (tok_buf_put(&b, "\\E\\\\E\\Q", 7) != 0) goto oom;
            p++;
            continue;
        }
        if (tok_buf_put(&b, p, 1) != 0) goto oom;
    }
    if (tok_buf_put(&b, "\\E", 2) != 0) goto oom;
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)b.p, b.n, PCRE2_UTF | PCRE2_UCP, &code, &off, NULL);
    tok_buf_free(&b);
    if (!re) fail(c, NNT_ERR_FORMAT, "%s: the literal '%.100s' does not compile", where, s);
    else (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
oom:
    tok_buf_free(&b);
    fail(c, NNT_ERR_OUT_OF_MEMORY, "%s: no memory", where);
    return NULL;
}

/* ---- normalizer ---- */

static nnt_status add_norm(ctx *c, tok_norm_op op)
{
    tok_normalizer *nz = &c->tok->norm;
    tok_norm_op *ops = realloc(nz->ops, (size_t)(nz->n + 1) * sizeof *ops);
    if (!ops) return fail(c, NNT_ERR_OUT_OF_MEMORY, "no memory for the normalizer");
    nz->ops = ops;
    nz->ops[nz->n++] = op;
    return NNT_OK;
}

static nnt_status parse_normalizer(ctx *c, const cJSON *o, const char *where, int depth)
{
    if (!o || cJSON_IsNull(o)) return NNT_OK;
    const char *t = type_of(o);
    if (!t) return fail(c, NNT_ERR_FORMAT, "%s: expected an object with a string \"type\"", where);
    char sub[160];
    if (strcmp(t, "Sequence") == 0) {
        const cJSON *list = item(o, "normalizers");
        if (!cJSON_IsArray(list)) return fail(c, NNT_ERR_FORMAT, "%s.normalizers: expected an array", where);
        if (depth > 8) return fail(c, NNT_ERR_FORMAT, "%s: Sequence nested too deep", where);
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            snprintf(sub, sizeof sub, "%s.normalizers[%d]", where, i);
            nnt_status st = parse_normalizer(c, e, sub, depth + 1);
            if (st) return st;
        }
        return NNT_OK;
    }
    tok_norm_op op = {0};
    if (strcmp(t, "NFC") == 0) op.kind = TOK_NORM_NFC;
    else if (strcmp(t, "NFD") == 0) op.kind = TOK_NORM_NFD;
    else if (strcmp(t, "NFKC") == 0) op.kind = TOK_NORM_NFKC;
    else if (strcmp(t, "NFKD") == 0) op.kind = TOK_NORM_NFKD;
    else if (strcmp(t, "Lowercase") == 0) op.kind = TOK_NORM_LOWERCASE;
    else if (strcmp(t, "Strip") == 0) {
        op.kind = TOK_NORM_STRIP;
        op.strip_left = flag(o, "strip_left", 1);
        op.strip_right = flag(o, "strip_right", 1);
    } else if (strcmp(t, "Replace") == 0 || strcmp(t, "Prepend") == 0) {
        int replace = t[0] == 'R';
        const cJSON *content = item(o, replace ? "content" : "prepend");
        if (!cJSON_IsString(content))
            return fail(c, NNT_ERR_FORMAT, "%s.%s: expected a string", where, replace ? "content" : "prepend");
        op.kind = replace ? TOK_NORM_REPLACE : TOK_NORM_PREPEND;
        op.content = nnt_strdup(content->valuestring);
        op.content_len = strlen(content->valuestring);
        if (!op.content) return fail(c, NNT_ERR_OUT_OF_MEMORY, "no memory");
        if (replace) {
            const char *text = NULL;
            int is_regex = 0;
            snprintf(sub, sizeof sub, "%s.pattern", where);
            nnt_status st = pattern_of(c, item(o, "pattern"), sub, &text, &is_regex);
            if (st == NNT_OK && is_regex) {
                op.re = tok_regex_compile(text, strlen(text), sub, &c->tok->err);
                if (!op.re) st = c->tok->err.status;
            } else if (st == NNT_OK) {
                op.literal = nnt_strdup(text);
                op.literal_len = strlen(text);
                if (!op.literal) st = fail(c, NNT_ERR_OUT_OF_MEMORY, "no memory");
            }
            if (st) {
                free(op.content);
                free(op.literal);
                return st;
            }
        }
    } else {
        return fail(c, NNT_ERR_UNSUPPORTED,
                    "%s: normalizer type '%s' is not implemented (nnt reads NFC, NFD, NFKC, NFKD, Lowercase, Strip, "
                    "Replace, Prepend, Sequence)",
                    where, t);
    }
    nnt_status st = add_norm(c, op);
    if (st) {
        free(op.content);
        free(op.literal);
        if (op.re) pcre2_code_free(op.re);
    }
    return st;
}

/* ---- pre-tokenizer ---- */

/* GPT-2's split pattern, which the ByteLevel pre-tokenizer applies when use_regex is set. */
static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* The Whitespace pre-tokenizer's pattern: runs of word characters, runs of other non-spaces. */
static const char WHITESPACE_PATTERN[] = "\\w+|[^\\w\\s]+";

static nnt_status add_step(ctx *c, tok_pretok_step s)
{
    tok_pretok *pt = &c->tok->pre;
    tok_pretok_step *steps = realloc(pt->steps, (size_t)(pt->n + 1) * sizeof *steps);
    if (!steps) {
        if (s.re) pcre2_code_free(s.re);
        return fail(c, NNT_ERR_OUT_OF_MEMORY, "no memory for the pre-tokenizer");
    }
    pt->steps = steps;
    pt->steps[pt->n++] = s;
    return NNT_OK;
}

static nnt_status parse_pretok(ctx *c, const cJSON *o, const char *where, int depth)
{
    if (!o || cJSON_IsNull(o)) return NNT_OK;
    const char *t = type_of(o);
    if (!t) return fail(c, NNT_ERR_FORMAT, "%s: expected an object with a string \"type\"", where);
    char sub[160];
    tok_pretok_step s = {0};
    if (strcmp(t, "Sequence") == 0) {
        const cJSON *list = item(o, "pretokenizers");
        if (!cJSON_IsArray(list)) return fail(c, NNT_ERR_FORMAT, "%s.pretokenizers: expected an array", where);
        if (depth > 8) return fail(c, NNT_ERR_FORMAT, "%s: Sequence nested too deep", where);
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            snprintf(sub, sizeof sub, "%s.pretokenizers[%d]", where, i);
            nnt_status st = parse_pretok(c, e, sub, depth + 1);
            if (st) return st;
        }
        return NNT_OK;
    }
    if (strcmp(t, "Split") == 0) {
        const char *text = NULL;
        int is_regex = 0;
        snprintf(sub, sizeof sub, "%s.pattern", where);
        nnt_status st = pattern_of(c, item(o, "pattern"), sub, &text, &is_regex);
        if (st) return st;
        const cJSON *b = item(o, "behavior");
        if (!cJSON_IsString(b)) return fail(c, NNT_ERR_FORMAT, "%s.behavior: expected a string", where);
        static const struct {
            const char *name;
            tok_split_behavior b;
        } names[] = {{"Removed", TOK_SPLIT_REMOVED},
                     {"Isolated", TOK_SPLIT_ISOLATED},
                     {"MergedWithPrevious", TOK_SPLIT_MERGED_WITH_PREVIOUS},
                     {"MergedWithNext", TOK_SPLIT_MERGED_WITH_NEXT},
                     {"Contiguous", TOK_SPLIT_CONTIGUOUS}};
        int found = 0;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strcmp(b->valuestring, names[i].name) == 0) s.behavior = names[i].b, found = 1;
        if (!found)
            return fail(c, NNT_ERR_FORMAT,
                        "%s.behavior: '%s' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                        "Contiguous",
                        where, b->valuestring);
        s.kind = TOK_PRE_SPLIT;
        s.invert = flag(o, "invert", 0);
        s.re = is_regex ? tok_regex_compile(text, strlen(text), sub, &c->tok->err) : literal_regex(c, text, sub);
        if (!s.re) return c->tok->err.status;
    } else if (strcmp(t, "ByteLevel") == 0) {
        s.kind = TOK_PRE_BYTELEVEL;
        s.add_prefix_space = flag(o, "add_prefix_space", 1);
        if (flag(o, "use_regex", 1)) {
            s.re = tok_regex_compile(GPT2_PATTERN, sizeof GPT2_PATTERN - 1, where, &c->tok->err);
            if (!s.re) return c->tok->err.status;
        }
        c->tok->byte_level = 1;
    } else if (strcmp(t, "Digits") == 0) {
        s.kind = TOK_PRE_DIGITS;
        s.individual_digits = flag(o, "individual_digits", 0);
    } else if (strcmp(t, "Whitespace") == 0) {
        s.kind = TOK_PRE_SPLIT;
        s.behavior = TOK_SPLIT_REMOVED;
        s.invert = 1;
        s.re = tok_regex_compile(WHITESPACE_PATTERN, sizeof WHITESPACE_PATTERN - 1, where, &c->tok->err);
        if (!s.re) return c->tok->err.status;
    } else if (strcmp(t, "WhitespaceSplit") == 0) {
        s.kind = TOK_PRE_WHITESPACE_SPLIT;
    } else {
        return fail(c, NNT_ERR_UNSUPPORTED,
                    "%s: pre-tokenizer type '%s' is not implemented (nnt reads ByteLevel, Split, Digits, Whitespace, "
                    "WhitespaceSplit, Sequence)",
                    where, t);
    }
    return add_step(c, s);
}

/* ---- decoder: what each token's spelling decodes to ---- */

static nnt_status parse_decoder(ctx *c, const cJSON *o, const char *where, int depth)
{
    if (!o || cJSON_IsNull(o)) return NNT_OK;
    c->has_decoder = 1;
    const char *t = type_of(o);
    if (!t) return fail(c, NNT_ERR_FORMAT, "%s: expected an object with a string \"type\"", where);
    if (strcmp(t, "Sequence") == 0) {
        const cJSON *list = item(o, "decoders");
        if (!cJSON_IsArray(list)) return fail(c, NNT_ERR_FORMAT, "%s.decoders: expected an array", where);
        if (depth > 8) return fail(c, NNT_ERR_FORMAT, "%s: Sequence nested too deep", where);
        int i = 0;
        char sub[160];
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            snprintf(sub, sizeof sub, "%s.decoders[%d]", where, i);
            nnt_status st = parse_decoder(c, e, sub, depth + 1);
            if (st) return st;
        }
        return NNT_OK;
    }
    if (strcmp(t, "ByteLevel") == 0) c->dec_bytelevel = 1;
    else if (strcmp(t, "ByteFallback") == 0) c->dec_bytefallback = 1;
    else if (strcmp(t, "Fuse") == 0) return NNT_OK; /* decoded tokens are joined anyway */
    else if (strcmp(t, "Replace") == 0) {
        const cJSON *p = item(item(o, "pattern"), "String"), *to = item(o, "content");
        if (!cJSON_IsString(p) || !cJSON_IsString(to))
            return fail(c, NNT_ERR_UNSUPPORTED, "%s: a Replace decoder needs a String pattern and a content", where);
        if (c->n_dec_replace == 8) return fail(c, NNT_ERR_UNSUPPORTED, "%s: more than 8 Replace decoders", where);
        if (c->dec_bytelevel || c->dec_bytefallback)
            return fail(c, NNT_ERR_UNSUPPORTED, "%s: a Replace decoder after ByteLevel or ByteFallback", where);
        c->dec_replace[c->n_dec_replace].from = nnt_strdup(p->valuestring);
        c->dec_replace[c->n_dec_replace].to = nnt_strdup(to->valuestring);
        c->n_dec_replace++;
    } else {
        return fail(c, NNT_ERR_UNSUPPORTED,
                    "%s: decoder type '%s' is not implemented (nnt reads ByteLevel, ByteFallback, Fuse, Replace, "
                    "Sequence)",
                    where, t);
    }
    return NNT_OK;
}

/* The bytes a token spelt s decodes to, into out (cleared). */
static int decoded_bytes(ctx *c, const char *s, size_t n, tok_buf *out, tok_buf *tmp)
{
    out->n = 0;
    if (tok_buf_put(out, s, n) != 0) return -1;
    for (int i = 0; i < c->n_dec_replace; i++) {
        const char *from = c->dec_replace[i].from, *to = c->dec_replace[i].to;
        size_t fl = strlen(from), tl = strlen(to);
        if (!fl) continue;
        tmp->n = 0;
        size_t at = 0;
        const char *hit;
        while ((hit = tok_find(out->p + at, out->n - at, from, fl))) {
            if (tok_buf_put(tmp, out->p + at, (size_t)(hit - (out->p + at))) != 0 || tok_buf_put(tmp, to, tl) != 0)
                return -1;
            at = (size_t)(hit - out->p) + fl;
        }
        if (tok_buf_put(tmp, out->p + at, out->n - at) != 0) return -1;
        tok_buf t = *out;
        *out = *tmp;
        *tmp = t;
    }
    if (c->dec_bytefallback && out->n == 6 && memcmp(out->p, "<0x", 3) == 0 && out->p[5] == '>') {
        char hex[3] = {out->p[3], out->p[4], 0}, *end;
        long v = strtol(hex, &end, 16);
        if (*end == '\0' && hex[0] != '-' && hex[0] != '+' && hex[0] != ' ') {
            out->p[0] = (char)v;
            out->n = 1;
            return 0;
        }
    }
    if (c->dec_bytelevel) {
        tmp->n = 0;
        if (tok_bytelevel_unmap(&c->tok->bl, out->p, out->n, tmp) < 0) return -1;
        tok_buf t = *out;
        *out = *tmp;
        *tmp = t;
    }
    return 0;
}

/* ---- the BPE model ---- */

/* The model's own bytes for a vocabulary spelling (byte-level: unmapped), into out. */
static int model_bytes(ctx *c, const char *s, size_t n, tok_buf *out)
{
    out->n = 0;
    if (c->tok->byte_level) return tok_bytelevel_unmap(&c->tok->bl, s, n, out) < 0 ? -1 : 0;
    return tok_buf_put(out, s, n);
}

static nnt_status parse_model(ctx *c, const cJSON *m)
{
    nnt_tokenizer *tok = c->tok;
    tok_bpe *b = &tok->bpe;
    if (!cJSON_IsObject(m)) return fail(c, NNT_ERR_FORMAT, "model: expected an object");
    const char *t = type_of(m);
    if (t && strcmp(t, "BPE") != 0)
        return fail(c, NNT_ERR_UNSUPPORTED, "model.type: '%s' is not implemented (nnt reads BPE models)", t);
    if (!t && !item(m, "merges"))
        return fail(c, NNT_ERR_UNSUPPORTED, "model: no \"type\" and no \"merges\": not a BPE model");
    const cJSON *dropout = item(m, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble != 0.0)
        return fail(c, NNT_ERR_UNSUPPORTED, "model.dropout: %g; nnt encodes deterministically (null or 0)",
                    dropout->valuedouble);
    const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = item(m, affix[i]);
        if (cJSON_IsString(v) && v->valuestring[0])
            return fail(c, NNT_ERR_UNSUPPORTED, "model.%s: '%s' is not implemented (null or \"\")", affix[i],
                        v->valuestring);
    }
    b->mode = TOK_BPE_MERGES;
    b->byte_units = tok->byte_level;
    b->ignore_merges = flag(m, "ignore_merges", 0);
    b->fuse_unk = flag(m, "fuse_unk", 0);
    b->byte_fallback = flag(m, "byte_fallback", 0);
    b->unk_id = -1;

    const cJSON *vocab = item(m, "vocab");
    if (!cJSON_IsObject(vocab)) return fail(c, NNT_ERR_FORMAT, "model.vocab: expected an object {token: id}");
    tok_buf bytes = {0}, dec = {0}, tmp = {0};
    nnt_status st = NNT_OK;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int32_t id;
        if (!json_id(e, &id)) {
            st = fail(c, NNT_ERR_FORMAT, "model.vocab['%.80s']: expected an integer id in [0, 2^31)", e->string);
            goto out;
        }
        if (id >= tok_id_reach(tok)) {
            st = fail(c, NNT_ERR_FORMAT, "model.vocab['%.80s']: id %d is " TOK_ID_REACH_WHY, e->string, id,
                      (long long)tok_id_reach(tok), (long long)tok->id_entries);
            goto out;
        }
        size_t n = strlen(e->string);
        if (model_bytes(c, e->string, n, &bytes) != 0 || tok_strtab_set(&b->vocab, id, bytes.p, bytes.n) != 0 ||
            tok_reserve_ids(tok, id) != 0 || decoded_bytes(c, e->string, n, &dec, &tmp) != 0 ||
            tok_strtab_set(&tok->dec, id, dec.p, dec.n) != 0) {
            st = fail(c, NNT_ERR_OUT_OF_MEMORY, "no memory for model.vocab");
            goto out;
        }
        tok->flags[id] |= TOK_ID_PRESENT;
    }
    if (tok_strmap_build(&b->vocab_map, &b->vocab) != 0) {
        st = fail(c, NNT_ERR_OUT_OF_MEMORY, "no memory for model.vocab");
        goto out;
    }
    for (int i = 0; i < 256; i++) {
        char ch = (char)i;
        b->byte_id[i] = tok_strmap_find(&b->vocab_map, &b->vocab, &ch, 1);
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", i);
        b->fallback_id[i] = tok_strmap_find(&b->vocab_map, &b->vocab, name, 6);
    }
    const cJSON *unk = item(m, "unk_token");
    if (cJSON_IsString(unk)) {
        if (model_bytes(c, unk->valuestring, strlen(unk->valuestring), &bytes) != 0) {
            st = fail(c, NNT_ERR_OUT_OF_MEMORY, "no memory");
            goto out;
        }
        b->unk_id = tok_vocab_find(tok, bytes.p, bytes.n);
        if (b->unk_id < 0) {
            st = fail(c, NNT_ERR_FORMAT, "model.unk_token: '%.80s' is not in model.vocab", unk->valuestring);
            goto out;
        }
    }

    const cJSON *merges = item(m, "merges");
    if (merges && !cJSON_IsArray(merges)) {
        st = fail(c, NNT_ERR_FORMAT, "model.merges: expected an array");
        goto out;
    }
    uint32_t rank = 0;
    tok_buf joined = {0};
    for (const cJSON *e = merges ? merges->child : NULL; e; e = e->next, rank++) {
        const char *a = NULL, *z = NULL;
        size_t al = 0, zl = 0;
        if (cJSON_IsString(e)) {
            const char *sp = strchr(e->valuestring, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                st = fail(c, NNT_ERR_FORMAT, "model.merges[%u]: '%.80s' is not two tokens separated by one space",
                          rank, e->valuestring);
                break;
            }
            a = e->valuestring, al = (size_t)(sp - a), z = sp + 1, zl = strlen(z);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                   cJSON_IsString(e->child->next)) {
            a = e->child->valuestring, al = strlen(a), z = e->child->next->valuestring, zl = strlen(z);
        } else {
            st = fail(c, NNT_ERR_FORMAT, "model.merges[%u]: expected \"a b\" or [\"a\", \"b\"]", rank);
            break;
        }
        int32_t ids[3];
        joined.n = 0;
        if (tok_buf_put(&joined, a, al) != 0 || tok_buf_put(&joined, z, zl) != 0) {
            st = fail(c, NNT_ERR_OUT_OF_MEMORY, "no memory");
            break;
        }
        const char *parts[3] = {a, z, joined.p};
        size_t lens[3] = {al, zl, joined.n};
        for (int k = 0; k < 3 && st == NNT_OK; k++) {
            if (model_bytes(c, parts[k], lens[k], &bytes) != 0) {
                st = fail(c, NNT_ERR_OUT_OF_MEMORY, "no memory");
                break;
            }
            ids[k] = tok_vocab_find(tok, bytes.p, bytes.n);
            if (ids[k] < 0)
                st = fail(c, NNT_ERR_FORMAT, "model.merges[%u]: '%.*s' is not in model.vocab", rank, (int)lens[k],
                          parts[k]);
        }
        if (st) break;
        if (tok_pairmap_add(&b->merges, ids[0], ids[1], rank, ids[2]) != 0) {
            st = fail(c, NNT_ERR_OUT_OF_MEMORY, "no memory for model.merges");
            break;
        }
    }
    tok_buf_free(&joined);
out:
    tok_buf_free(&bytes);
    tok_buf_free(&dec);
    tok_buf_free(&tmp);
    return st;
}

/* ---- added tokens ---- */

static nnt_status parse_added(ctx *c, const cJSON *list)
{
    nnt_tokenizer *tok = c->tok;
    if (!list || cJSON_IsNull(list)) return NNT_OK;
    if (!cJSON_IsArray(list)) return fail(c, NNT_ERR_FORMAT, "added_tokens: expected an array");
    int n = cJSON_GetArraySize(list);
    tok->added = calloc((size_t)n + 1, sizeof *tok->added);
    if (!tok->added) return fail(c, NNT_ERR_OUT_OF_MEMORY, "no memory for added_tokens");
    tok_buf dec = {0}, tmp = {0};
    int i = 0;
    for (const cJSON *e = list->child; e; e = e->next, i++) {
        const cJSON *content = item(e, "content");
        int32_t id;
        if (!json_id(item(e, "id"), &id) || !cJSON_IsString(content)) {
            tok_buf_free(&dec);
            tok_buf_free(&tmp);
            return fail(c, NNT_ERR_FORMAT, "added_tokens[%d]: expected an integer \"id\" and a string \"content\"", i);
        }
        if (id >= tok_id_reach(tok)) {
            tok_buf_free(&dec);
            tok_buf_free(&tmp);
            return fail(c, NNT_ERR_FORMAT, "added_tokens[%d]: id %d is " TOK_ID_REACH_WHY, i, id,
                        (long long)tok_id_reach(tok), (long long)tok->id_entries);
        }
        tok_added *a = &tok->added[tok->n_added++];
        a->id = id;
        a->len = strlen(content->valuestring);
        a->content = nnt_strdup(content->valuestring);
        a->special = (unsigned)flag(e, "special", 0);
        a->normalized = (unsigned)flag(e, "normalized", !a->special);
        a->lstrip = (unsigned)flag(e, "lstrip", 0);
        a->rstrip = (unsigned)flag(e, "rstrip", 0);
        a->single_word = (unsigned)flag(e, "single_word", 0);
        if (!a->content || tok_reserve_ids(tok, a->id) != 0) {
            tok_buf_free(&dec);
            tok_buf_free(&tmp);
            return fail(c, NNT_ERR_OUT_OF_MEMORY, "no memory for added_tokens");
        }
        /* a normalized token is held (and decodes) as its normalized content */
        const char *shown = a->content;
        size_t shown_len = a->len;
        tok_buf norm = {0}, ntmp = {0};
        if (a->normalized && tok->norm.n) {
            if (tok_normalize(&tok->norm, a->content, a->len, &norm, &ntmp, &tok->m, &tok->err) != 0) {
                tok_buf_free(&dec);
                tok_buf_free(&tmp);
                tok_buf_free(&norm);
                tok_buf_free(&ntmp);
                return tok->err.status;
            }
            shown = norm.p, shown_len = norm.n;
        }
        int bad = decoded_bytes(c, shown, shown_len, &dec, &tmp) != 0 || tok_strtab_set(&tok->dec, a->id, dec.p, dec.n) != 0;
        tok_buf_free(&norm);
        tok_buf_free(&ntmp);
        if (bad) {
            tok_buf_free(&dec);
            tok_buf_free(&tmp);
            return fail(c, NNT_ERR_OUT_OF_MEMORY, "no memory for added_tokens");
        }
        tok->flags[a->id] |= TOK_ID_PRESENT | (a->special ? TOK_ID_SPECIAL : 0);
    }
    tok_buf_free(&dec);
    tok_buf_free(&tmp);
    /* the tries: tokens matched in the raw text, and tokens matched after normalization */
    tok_buf norm = {0}, ntmp = {0};
    nnt_status st = NNT_OK;
    for (int32_t k = 0; k < tok->n_added && st == NNT_OK; k++) {
        tok_added *a = &tok->added[k];
        if (!a->normalized) {
            if (tok_trie_add(&tok->trie_raw, a->content, a->len, k) != 0) st = fail(c, NNT_ERR_OUT_OF_MEMORY, "no memory");
            continue;
        }
        if (tok_normalize(&tok->norm, a->content, a->len, &norm, &ntmp, &tok->m, &tok->err) != 0) {
            st = tok->err.status;
            break;
        }
        if (tok_trie_add(&tok->trie_norm, norm.p, norm.n, k) != 0) st = fail(c, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    tok_buf_free(&norm);
    tok_buf_free(&ntmp);
    return st;
}

/* ---- post-processor ---- */

static nnt_status template_piece(ctx *c, const cJSON *specials, const cJSON *piece, const char *where, int *seen_a)
{
    const cJSON *sp = item(piece, "SpecialToken"), *seq = item(piece, "Sequence");
    if (seq) {
        const cJSON *id = item(seq, "id");
        if (!cJSON_IsString(id) || strcmp(id->valuestring, "A") != 0)
            return fail(c, NNT_ERR_UNSUPPORTED, "%s: a single-sequence template holds only the sequence \"A\"", where);
        *seen_a = 1;
        return NNT_OK;
    }
    const cJSON *name = item(sp, "id");
    if (!cJSON_IsString(name)) return fail(c, NNT_ERR_FORMAT, "%s: expected {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": ...}", where);
    const cJSON *def = item(specials, name->valuestring);
    const cJSON *ids = item(def, "ids");
    if (!cJSON_IsArray(ids))
        return fail(c, NNT_ERR_FORMAT, "%s: special token '%.80s' has no \"ids\" in post_processor.special_tokens", where,
                    name->valuestring);
    for (const cJSON *e = ids->child; e; e = e->next) {
        int32_t id;
        if (!json_id(e, &id))
            return fail(c, NNT_ERR_FORMAT, "post_processor.special_tokens['%.80s'].ids: expected integer ids in [0, 2^31)",
                        name->valuestring);
        if (tok_ids_put(*seen_a ? &c->tok->suffix : &c->tok->prefix, id) != 0)
            return fail(c, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    return NNT_OK;
}

static nnt_status parse_post(ctx *c, const cJSON *o, const char *where, int depth)
{
    if (!o || cJSON_IsNull(o)) return NNT_OK;
    const char *t = type_of(o);
    if (!t) return fail(c, NNT_ERR_FORMAT, "%s: expected an object with a string \"type\"", where);
    char sub[160];
    if (strcmp(t, "ByteLevel") == 0) return NNT_OK; /* it only trims offsets; the ids are unchanged */
    if (strcmp(t, "Sequence") == 0) {
        const cJSON *list = item(o, "processors");
        if (!cJSON_IsArray(list)) return fail(c, NNT_ERR_FORMAT, "%s.processors: expected an array", where);
        if (depth > 8) return fail(c, NNT_ERR_FORMAT, "%s: Sequence nested too deep", where);
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            snprintf(sub, sizeof sub, "%s.processors[%d]", where, i);
            nnt_status st = parse_post(c, e, sub, depth + 1);
            if (st) return st;
        }
        return NNT_OK;
    }
    if (strcmp(t, "TemplateProcessing") == 0) {
        const cJSON *single = item(o, "single"), *specials = item(o, "special_tokens");
        if (!cJSON_IsArray(single)) return fail(c, NNT_ERR_FORMAT, "%s.single: expected an array", where);
        c->tok->prefix.n = c->tok->suffix.n = 0;
        int seen_a = 0, i = 0;
        for (const cJSON *e = single->child; e; e = e->next, i++) {
            snprintf(sub, sizeof sub, "%s.single[%d]", where, i);
            nnt_status st = template_piece(c, specials, e, sub, &seen_a);
            if (st) return st;
        }
        if (!seen_a) return fail(c, NNT_ERR_FORMAT, "%s.single: the template has no sequence $A", where);
        return NNT_OK;
    }
    return fail(c, NNT_ERR_UNSUPPORTED,
                "%s: post-processor type '%s' is not implemented (nnt reads TemplateProcessing, ByteLevel, Sequence)",
                where, t);
}

/* The members this reader reads (item(root, ...) below, item(m, ...) in parse_model); the file's
 * other members are checked for syntax but never built (nnt_json_pick): a large field nnt does
 * not read costs its bytes, not a tree of some 40 times their size. */
static const nnt_json_want MODEL_KEYS[] = {
    {"type", NULL}, {"vocab", NULL}, {"merges", NULL}, {"unk_token", NULL}, {"dropout", NULL},
    {"fuse_unk", NULL}, {"byte_fallback", NULL}, {"ignore_merges", NULL},
    {"continuing_subword_prefix", NULL}, {"end_of_word_suffix", NULL}, {NULL, NULL}};
static const nnt_json_want TOP_KEYS[] = {
    {"model", MODEL_KEYS}, {"added_tokens", NULL}, {"pre_tokenizer", NULL}, {"normalizer", NULL},
    {"decoder", NULL}, {"post_processor", NULL}, {NULL, NULL}};

nnt_status tok_load_json(nnt_tokenizer *tok, const char *path)
{
    ctx c = {.tok = tok, .path = path};
    char *text = NULL;
    size_t len = 0;
    nnt_status st = nnt_read_file(path, MAX_TOKENIZER_JSON, &text, &len, &tok->err);
    if (st) return st;
    cJSON *root = NULL;
    st = nnt_json_pick(text, len, TOP_KEYS, path, &root, &tok->err);
    free(text);
    if (st) return st;
    tok->format = TOK_FORMAT_JSON;
    { /* the ids' bound: the vocabulary's entries and the added tokens */
        const cJSON *m = item(root, "model"), *vocab = m ? item(m, "vocab") : NULL, *added = item(root, "added_tokens");
        tok->id_entries = (cJSON_IsObject(vocab) ? cJSON_GetArraySize(vocab) : 0) +
                          (cJSON_IsArray(added) ? cJSON_GetArraySize(added) : 0);
    }
    /* the order matters: the pre-tokenizer says whether the model is byte-level, the decoder
     * how each token decodes, the normalizer how added tokens are matched */
    if (!st) st = parse_pretok(&c, item(root, "pre_tokenizer"), "pre_tokenizer", 0);
    if (!st) st = parse_normalizer(&c, item(root, "normalizer"), "normalizer", 0);
    if (!st) st = parse_decoder(&c, item(root, "decoder"), "decoder", 0);
    if (!st) st = parse_model(&c, item(root, "model"));
    if (!st) st = parse_added(&c, item(root, "added_tokens"));
    if (!st) st = parse_post(&c, item(root, "post_processor"), "post_processor", 0);
    tok->join_space = !c.has_decoder;
    for (int i = 0; i < c.n_dec_replace; i++) {
        free(c.dec_replace[i].from);
        free(c.dec_replace[i].to);
    }
    cJSON_Delete(root);
    return st;
}

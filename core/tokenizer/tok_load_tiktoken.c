/* tok_load_tiktoken.c - reads a tiktoken vocabulary (tiktoken.model: one token per line, its
 * bytes in base64 and its rank, which is also its id) and the split pattern and special tokens
 * that go with it. A tiktoken file holds neither; a release keeps them in its tokenization code,
 * so they come from:
 *   - tokenizer_config.json's "pat_str" (nnt's convention for tiktoken folders), with
 *     added_tokens_decoder giving the special tokens; else
 *   - the hints of the family plugin serving the checkpoint (tok->hints, nnt_tokenizer_hints):
 *     its split_pattern, and its reserved_special_tokens ids right after the ranks (or, when it
 *     reserves none, added_tokens_decoder's tokens).
 * A folder with neither has no split pattern, and is refused. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

#define MAX_TIKTOKEN_FILE (1024u << 20)

static int b64_value(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+') return 62;
    if (ch == '/') return 63;
    return -1;
}

/* Standard base64 (padding optional) into out. 0, or -1 when malformed. */
static int b64_decode(const char *s, size_t n, tok_buf *out)
{
    out->n = 0;
    while (n && s[n - 1] == '=') n--;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0) return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            char byte = (char)((acc >> bits) & 0xFF);
            if (tok_buf_put(out, &byte, 1) != 0) return -1;
        }
    }
    return bits >= 6 ? -1 : 0; /* a lone trailing character cannot end a base64 text */
}

static nnt_status read_ranks(nnt_tokenizer *tok, const char *path)
{
    char *text = NULL;
    size_t len = 0;
    nnt_status st = nnt_read_file(path, MAX_TIKTOKEN_FILE, &text, &len, &tok->err);
    if (st) return st;
    tok_bpe *b = &tok->bpe;
    tok_buf bytes = {0};
    long line = 0;
    int32_t count = 0;
    /* Ranks index a dense table (0 .. lines - 1 in the released files): they are held below
     * tok_id_reach, twice the lines (a last one without a newline counted) plus 1024. */
    tok->id_entries = 1;
    for (size_t i = 0; i < len; i++) tok->id_entries += text[i] == '\n';
    long long max_rank = (long long)tok_id_reach(tok);
    for (size_t i = 0; i < len;) {
        line++;
        size_t e = i;
        while (e < len && text[e] != '\n') e++;
        size_t le = e;
        if (le > i && text[le - 1] == '\r') le--;
        if (le > i) {
            const char *sp = memchr(text + i, ' ', le - i);
            char *endp = NULL;
            long long rank = sp ? strtoll(sp + 1, &endp, 10) : -1;
            if (!sp || endp != text + le || rank < 0 || rank >= INT32_MAX || sp[1] == '-' || sp[1] == ' ') {
                st = nnt_err_set(&tok->err, NNT_ERR_FORMAT, "%s: line %ld: expected \"<base64 token> <rank>\"", path,
                                 line);
                break;
            }
            if (b64_decode(text + i, (size_t)(sp - (text + i)), &bytes) != 0 || bytes.n == 0) {
                st = nnt_err_set(&tok->err, NNT_ERR_FORMAT, "%s: line %ld: '%.*s' is not base64 of a token", path,
                                 line, (int)((sp - (text + i)) > 60 ? 60 : (sp - (text + i))), text + i);
                break;
            }
            if (rank >= max_rank) {
                st = nnt_err_set(&tok->err, NNT_ERR_FORMAT,
                                 "%s: line %ld: rank %lld is beyond this file's table (ranks below %lld: twice its "
                                 "lines plus 1024)", path, line, rank, max_rank);
                break;
            }
            int32_t id = (int32_t)rank;
            if (id < b->vocab.n && b->vocab.len[id] != 0) {
                st = nnt_err_set(&tok->err, NNT_ERR_FORMAT, "%s: line %ld: rank %d is given twice", path, line, id);
                break;
            }
            if (tok_strtab_set(&b->vocab, id, bytes.p, bytes.n) != 0 || tok_reserve_ids(tok, id) != 0 ||
                tok_strtab_set(&tok->dec, id, bytes.p, bytes.n) != 0) {
                st = nnt_err_set(&tok->err, NNT_ERR_OUT_OF_MEMORY, "%s: no memory", path);
                break;
            }
            tok->flags[id] |= TOK_ID_PRESENT;
            count++;
        }
        i = e + 1;
    }
    free(text);
    tok_buf_free(&bytes);
    if (!st && count == 0) st = nnt_err_set(&tok->err, NNT_ERR_FORMAT, "%s: no tokens", path);
    if (!st && tok_strmap_build(&b->vocab_map, &b->vocab) != 0)
        st = nnt_err_set(&tok->err, NNT_ERR_OUT_OF_MEMORY, "%s: no memory", path);
    if (st) return st;
    b->mode = TOK_BPE_RANKS;
    b->byte_units = 1;
    b->unk_id = -1;
    for (int i = 0; i < 256; i++) {
        char ch = (char)i;
        b->byte_id[i] = tok_strmap_find(&b->vocab_map, &b->vocab, &ch, 1);
        b->fallback_id[i] = -1;
    }
    return NNT_OK;
}

static nnt_status add_special(nnt_tokenizer *tok, int32_t id, const char *content, int special)
{
    tok_added *a = realloc(tok->added, (size_t)(tok->n_added + 1) * sizeof *a);
    if (!a) return nnt_err_set(&tok->err, NNT_ERR_OUT_OF_MEMORY, "tokenizer: no memory for special tokens");
    tok->added = a;
    a = &tok->added[tok->n_added];
    memset(a, 0, sizeof *a);
    a->id = id;
    a->content = nnt_strdup(content);
    a->len = strlen(content);
    a->special = (unsigned)special;
    if (!a->content || tok_reserve_ids(tok, id) != 0 || tok_strtab_set(&tok->dec, id, content, a->len) != 0 ||
        tok_trie_add(&tok->trie_raw, content, a->len, tok->n_added) != 0)
        return nnt_err_set(&tok->err, NNT_ERR_OUT_OF_MEMORY, "tokenizer: no memory for special tokens");
    tok->flags[id] |= TOK_ID_PRESENT | (special ? TOK_ID_SPECIAL : 0);
    tok->n_added++;
    return NNT_OK;
}

/* The content of added_tokens_decoder[id] of tokenizer_config.json, or NULL. */
static const char *decoder_content(const cJSON *atd, int32_t id, int *special)
{
    char key[16];
    snprintf(key, sizeof key, "%d", id);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(atd, key);
    const cJSON *c = e ? cJSON_GetObjectItemCaseSensitive(e, "content") : NULL;
    const cJSON *s = e ? cJSON_GetObjectItemCaseSensitive(e, "special") : NULL;
    *special = s ? cJSON_IsTrue(s) : 1;
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

/* The special tokens tokenizer_config.json's added_tokens_decoder lists, at the ids it gives. */
static nnt_status add_listed_specials(nnt_tokenizer *tok, const cJSON *atd, const char *cfg_path)
{
    nnt_status st = NNT_OK;
    for (const cJSON *e = cJSON_IsObject(atd) ? atd->child : NULL; e && !st; e = e->next) {
        char *endp;
        long id = strtol(e->string, &endp, 10);
        int special;
        const char *content = decoder_content(atd, (int32_t)id, &special);
        if (*endp || id < 0 || id >= INT32_MAX || !content)
            st = nnt_err_set(&tok->err, NNT_ERR_FORMAT,
                             "%s: added_tokens_decoder['%.40s']: expected an integer id and a \"content\" string",
                             cfg_path, e->string);
        else if (id >= tok_id_reach(tok))
            st = nnt_err_set(&tok->err, NNT_ERR_FORMAT, "%s: added_tokens_decoder['%.40s']: id %ld is " TOK_ID_REACH_WHY,
                             cfg_path, e->string, id, (long long)tok_id_reach(tok), (long long)tok->id_entries);
        else
            st = add_special(tok, (int32_t)id, content, special);
    }
    return st;
}

/* The hints' reserved_special_tokens: `count` special tokens with the ids from n_base on, named
 * by added_tokens_decoder where it names them, else "<|reserved_token_ID|>". */
static nnt_status add_reserved_specials(nnt_tokenizer *tok, const cJSON *atd, int32_t n_base, int32_t count)
{
    nnt_status st = NNT_OK;
    for (int32_t id = n_base; id < n_base + count && !st; id++) {
        int special = 1;
        const char *content = cJSON_IsObject(atd) ? decoder_content(atd, id, &special) : NULL;
        char name[48];
        if (!content) {
            snprintf(name, sizeof name, "<|reserved_token_%d|>", id);
            content = name;
        }
        st = add_special(tok, id, content, 1);
    }
    return st;
}

/* The split pattern and special tokens: pat_str, else the hints (see the top of the file). */
static nnt_status add_pattern_and_specials(nnt_tokenizer *tok, const char *path, const cJSON *cfg,
                                           const char *cfg_path)
{
    const cJSON *pat = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "pat_str") : NULL;
    const cJSON *atd = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "added_tokens_decoder") : NULL;
    const char *pattern = cJSON_IsString(pat) ? pat->valuestring : tok->hints.split_pattern;
    if (!pattern)
        return nnt_err_set(&tok->err, NNT_ERR_UNSUPPORTED,
                           "%s: a tiktoken vocabulary without a split pattern: the folder's tokenizer_config.json gives "
                           "no \"pat_str\", and no family plugin supplied one (a family plugin can: load the tokenizer "
                           "through nnt_runtime_tokenizer, or a loaded model's nnt_model_tokenizer, on a folder whose "
                           "config.json names an architecture the plugin serves)",
                           path);
    int32_t n_base = tok->bpe.vocab.n;
    int32_t reserved = cJSON_IsString(pat) ? 0 : tok->hints.reserved_special_tokens;
    if (reserved > INT32_MAX - 1 - n_base)
        return nnt_err_set(&tok->err, NNT_ERR_INVALID_ARGUMENT,
                           "%s: the family's %d reserved special tokens after %d ranks pass the largest id (2^31 - 1)",
                           path, (int)reserved, (int)n_base);
    /* the special tokens count among the entries that bound the ids */
    tok->id_entries += reserved ? reserved : (cJSON_IsObject(atd) ? cJSON_GetArraySize(atd) : 0);
    tok->tik_re = tok_regex_compile(pattern, strlen(pattern),
                                    cJSON_IsString(pat) ? "tokenizer_config.json: pat_str"
                                                        : "the family's split pattern (nnt_tokenizer_hints.split_pattern)",
                                    &tok->err);
    if (!tok->tik_re) return tok->err.status;
    return reserved ? add_reserved_specials(tok, atd, n_base, reserved) : add_listed_specials(tok, atd, cfg_path);
}

nnt_status tok_load_tiktoken(nnt_tokenizer *tok, const char *path)
{
    tok->format = TOK_FORMAT_TIKTOKEN;
    nnt_status st = read_ranks(tok, path);
    if (st) return st;
    cJSON *cfg = NULL;
    st = tok_read_config(tok, &cfg);
    if (st) return st;
    char *cfg_path = nnt_path_join(tok->dir, "tokenizer_config.json");
    st = add_pattern_and_specials(tok, path, cfg, cfg_path ? cfg_path : "tokenizer_config.json");
    if (!st) { /* the names tokenizer_config.json gives may be special tokens: look them up again */
        const char *keys[3] = {"bos_token", "eos_token", "pad_token"};
        int32_t *ids[3] = {&tok->bos_id, &tok->eos_id, &tok->pad_id};
        for (int k = 0; k < 3; k++) {
            const cJSON *v = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, keys[k]) : NULL;
            if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
            if (cJSON_IsString(v)) *ids[k] = tok_lookup(tok, v->valuestring, strlen(v->valuestring));
        }
    }
    free(cfg_path);
    cJSON_Delete(cfg);
    return st;
}

/* tok_load_tiktoken.c - reads a tiktoken vocabulary (tiktoken.model: one token per line, its
 * bytes in base64 and its rank, which is also its id) and the split pattern and special tokens
 * that go with it. A tiktoken file holds neither; they live in the release's tokenization code:
 *   - Kimi-Linear (moonshotai, tokenization_kimi.py): the pattern below, 256 special tokens with
 *     the ids right after the vocabulary, named by tokenizer_config.json's added_tokens_decoder
 *     or "<|reserved_token_ID|>", and an encode that cuts the text first (see tokenizer.c);
 *   - otherwise tokenizer_config.json must carry the pattern as "pat_str" (nnt's convention for
 *     other tiktoken folders), with added_tokens_decoder giving the special tokens. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

#define MAX_TIKTOKEN_FILE (1024u << 20)
#define KIMI_SPECIAL_TOKENS 256

/* Kimi-Linear's split pattern, as tokenization_kimi.py writes it (Rust regex syntax; the class
 * intersections are rewritten for PCRE2 by tok_regex_compile). */
static const char KIMI_PATTERN[] =
    "[\\p{Han}]+"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)"
    "|\\s+";

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

static int mentions_kimi(const cJSON *cfg)
{
    const cJSON *am = cJSON_GetObjectItemCaseSensitive(cfg, "auto_map");
    const cJSON *at = am ? cJSON_GetObjectItemCaseSensitive(am, "AutoTokenizer") : NULL;
    for (const cJSON *e = cJSON_IsArray(at) ? at->child : at; e; e = cJSON_IsArray(at) ? e->next : NULL)
        if (cJSON_IsString(e) && strstr(e->valuestring, "tokenization_kimi")) return 1;
    return 0;
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
    char *code_path = nnt_path_join(tok->dir, "tokenization_kimi.py");
    const cJSON *pat = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "pat_str") : NULL;
    const cJSON *atd = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "added_tokens_decoder") : NULL;
    int kimi = !cJSON_IsString(pat) && ((cfg && mentions_kimi(cfg)) || (code_path && nnt_file_exists(code_path)));
    int32_t n_base = tok->bpe.vocab.n;
    /* the special tokens count among the entries that bound the ids */
    tok->id_entries += cJSON_IsString(pat) ? (cJSON_IsObject(atd) ? cJSON_GetArraySize(atd) : 0)
                                           : (kimi ? KIMI_SPECIAL_TOKENS : 0);
    if (cJSON_IsString(pat)) {
        tok->tik_re = tok_regex_compile(pat->valuestring, strlen(pat->valuestring), "tokenizer_config.json: pat_str",
                                        &tok->err);
        if (!tok->tik_re) st = tok->err.status;
        for (const cJSON *e = cJSON_IsObject(atd) ? atd->child : NULL; e && !st; e = e->next) {
            char *endp;
            long id = strtol(e->string, &endp, 10);
            int special;
            const char *content = decoder_content(atd, (int32_t)id, &special);
            if (*endp || id < 0 || id >= INT32_MAX || !content)
                st = nnt_err_set(&tok->err, NNT_ERR_FORMAT,
                                 "%s: added_tokens_decoder['%.40s']: expected an integer id and a \"content\" string",
                                 cfg_path ? cfg_path : "tokenizer_config.json", e->string);
            else if (id >= tok_id_reach(tok))
                st = nnt_err_set(&tok->err, NNT_ERR_FORMAT, "%s: added_tokens_decoder['%.40s']: id %ld is " TOK_ID_REACH_WHY,
                                 cfg_path ? cfg_path : "tokenizer_config.json", e->string, id,
                                 (long long)tok_id_reach(tok), (long long)tok->id_entries);
            else
                st = add_special(tok, (int32_t)id, content, special);
        }
    } else if (kimi) {
        tok->tik_re = tok_regex_compile(KIMI_PATTERN, sizeof KIMI_PATTERN - 1, "Kimi's split pattern", &tok->err);
        if (!tok->tik_re) st = tok->err.status;
        tok->kimi_chunks = 1;
        for (int32_t id = n_base; id < n_base + KIMI_SPECIAL_TOKENS && !st; id++) {
            int special = 1;
            const char *content = cJSON_IsObject(atd) ? decoder_content(atd, id, &special) : NULL;
            char name[48];
            if (!content) {
                snprintf(name, sizeof name, "<|reserved_token_%d|>", id);
                content = name;
            }
            st = add_special(tok, id, content, 1);
        }
    } else {
        st = nnt_err_set(&tok->err, NNT_ERR_UNSUPPORTED,
                         "%s: a tiktoken vocabulary without a split pattern: tokenizer_config.json in the folder has no "
                         "\"pat_str\" and the folder is not Kimi's (its auto_map names no tokenization_kimi)",
                         path);
    }
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
    free(code_path);
    cJSON_Delete(cfg);
    return st;
}

/* tok_vocab.c - the tokenizer's id space (which ids are tokens, how far ids may reach), look-ups
 * of a token by its text, and tokenizer_config.json's special tokens. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

#define MAX_CONFIG_JSON (64u << 20)

int64_t tok_id_reach(const nnt_tokenizer *tok) { return 2 * tok->id_entries + 1024; }

int tok_id_assigned(const nnt_tokenizer *tok, int64_t id)
{
    return id >= 0 && id < tok->vocab_size && (tok->flags[id] & TOK_ID_PRESENT);
}

int tok_reserve_ids(nnt_tokenizer *tok, int32_t id)
{
    if (id < tok->vocab_size) return 0;
    if (id >= tok_id_reach(tok)) return -1;
    int32_t n = id + 1;
    uint8_t *f = realloc(tok->flags, (size_t)n);
    if (!f) return -1;
    memset(f + tok->vocab_size, 0, (size_t)(n - tok->vocab_size));
    tok->flags = f;
    tok->vocab_size = n;
    return 0;
}

int32_t tok_vocab_find(const nnt_tokenizer *tok, const char *s, size_t n)
{
    int32_t id = tok_strmap_find(&tok->bpe.vocab_map, &tok->bpe.vocab, s, n);
    return tok_id_assigned(tok, id) ? id : -1;
}

int32_t tok_lookup(const nnt_tokenizer *tok, const char *s, size_t n)
{
    for (int32_t i = 0; i < tok->n_added; i++)
        if (tok->added[i].len == n && memcmp(tok->added[i].content, s, n) == 0) return tok->added[i].id;
    if (tok->byte_level) {
        tok_buf b = {0};
        int32_t id = -1;
        if (tok_bytelevel_unmap(&tok->bl, s, n, &b) >= 0)
            id = tok_vocab_find(tok, b.p ? b.p : "", b.n);
        tok_buf_free(&b);
        return id;
    }
    return tok_vocab_find(tok, s, n);
}

nnt_status tok_read_config(nnt_tokenizer *tok, cJSON **cfg_out)
{
    if (cfg_out) *cfg_out = NULL;
    char *path = nnt_path_join(tok->dir, "tokenizer_config.json");
    if (!path) return nnt_err_set(&tok->err, NNT_ERR_OUT_OF_MEMORY, "tokenizer: no memory");
    if (!nnt_file_exists(path)) {
        free(path);
        return NNT_OK;
    }
    char *text = NULL;
    size_t len = 0;
    nnt_status st = nnt_read_file(path, MAX_CONFIG_JSON, &text, &len, &tok->err);
    if (st) {
        free(path);
        return st;
    }
    /* only the members read here and by the tiktoken loader are built (a chat template, or any
     * field nnt does not read, costs its bytes, not a parse tree: nnt_json_pick) */
    static const nnt_json_want want[] = {{"bos_token", NULL}, {"eos_token", NULL}, {"pad_token", NULL},
                                         {"add_bos_token", NULL}, {"pat_str", NULL}, {"added_tokens_decoder", NULL},
                                         {NULL, NULL}};
    cJSON *cfg = NULL;
    st = nnt_json_pick(text, len, want, path, &cfg, &tok->err);
    free(text);
    if (st) {
        free(path);
        return st;
    }
    const char *keys[3] = {"bos_token", "eos_token", "pad_token"};
    int32_t *ids[3] = {&tok->bos_id, &tok->eos_id, &tok->pad_id};
    for (int k = 0; k < 3 && !st; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, keys[k]);
        if (!v || cJSON_IsNull(v)) continue;
        if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (!cJSON_IsString(v)) {
            st = nnt_err_set(&tok->err, NNT_ERR_FORMAT, "%s: %s: expected a string or an object with a \"content\" string",
                             path, keys[k]);
            break;
        }
        *ids[k] = tok_lookup(tok, v->valuestring, strlen(v->valuestring));
    }
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
    if (!st && ab && !cJSON_IsNull(ab) && !cJSON_IsBool(ab))
        st = nnt_err_set(&tok->err, NNT_ERR_FORMAT, "%s: add_bos_token: expected true or false", path);
    if (!st) tok->want_bos = cJSON_IsTrue(ab);
    free(path);
    if (cfg_out && !st) *cfg_out = cfg;
    else cJSON_Delete(cfg);
    return st;
}

/* model_tokenizer.c - the tokenizer of a checkpoint folder as its family sees it: loaded with
 * the hints of the family plugin that serves the folder's config.json (nnt_runtime_tokenizer),
 * and the one a loaded model keeps (nnt_model_tokenizer). */
#include <stdlib.h>

#include "internal.h"

nnt_status nnt_runtime_tokenizer(nnt_runtime *rt, const char *dir, nnt_tokenizer **out)
{
    if (!rt || !dir || !out) return NNT_ERR_INVALID_ARGUMENT;
    const nnt_tokenizer_hints *hints = NULL;
    nnt_checkpoint *ck = NULL;
    nnt_error ignored = {0}; /* a folder without config.json still has a tokenizer, hintless */
    char *config = nnt_path_join(dir, "config.json");
    if (config && nnt_file_exists(config) && nnt_checkpoint_open_config(dir, &ck, &ignored) == NNT_OK) {
        const nnt_plugin *fam = nnt_runtime_find_family(rt, ck);
        if (fam) hints = fam->family->tokenizer;
    }
    free(config);
    nnt_status st = nnt_tokenizer_load_hinted(dir, hints, out);
    nnt_checkpoint_close(ck);
    return st;
}

static nnt_status model_tokenizer_held(nnt_model *m, nnt_tokenizer **out)
{
    if (!m || !out) return NNT_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!m->tokenizer) {
        nnt_tokenizer *tok = NULL;
        nnt_status st = nnt_runtime_tokenizer(m->rt, m->ckpt->dir, &tok);
        if (st != NNT_OK) {
            nnt_err_set(&m->rt->err, st, "%s", nnt_tokenizer_last_error(tok));
            nnt_tokenizer_free(tok);
            return st;
        }
        m->tokenizer = tok;
    }
    *out = m->tokenizer;
    return NNT_OK;
}

nnt_status nnt_model_tokenizer(nnt_model *m, nnt_tokenizer **out)
{
    NNT_GUARDED((m ? m->rt : NULL), "nnt_model_tokenizer", model_tokenizer_held(m, out));
}

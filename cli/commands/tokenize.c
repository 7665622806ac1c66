/* tokenize.c - `nnt tokenize`: a text's tokens as the model folder's tokenizer (with its family's
 * hints, nnt_runtime_tokenizer) splits it: one line per token (its id, a tab, its text quoted),
 * or --ids for the ids alone. Reads no weights. */
#include <stdlib.h>
#include <string.h>

#include "../cli.h"

/* The text to encode: the positional one, or a --prompt / --prompt-file row. *file: what to free. */
static int read_text(const cli_opts *o, const char **text, size_t *len, char **file)
{
    *file = NULL;
    if (o->text || o->rows[0].kind == ROW_PROMPT) {
        *text = o->text ? o->text : o->rows[0].arg;
        *len = strlen(*text);
        return 0;
    }
    nnt_error err = {0};
    if (nnt_read_file(o->rows[0].arg, CLI_MAX_PROMPT_FILE, file, len, &err) != NNT_OK) {
        fprintf(stderr, "nnt: error: --prompt-file %s\n", err.msg);
        return 1;
    }
    *text = *file;
    return 0;
}

int cmd_tokenize(cli_run *c)
{
    const cli_opts *o = c->o;
    nnt_tokenizer *tok = NULL;
    if (nnt_runtime_tokenizer(c->rt, o->model, &tok) != NNT_OK) {
        fprintf(stderr, "nnt: error: %s\n", nnt_tokenizer_last_error(tok));
        nnt_tokenizer_free(tok);
        return 1;
    }
    const char *text;
    size_t len;
    char *file;
    int32_t *ids = NULL;
    int64_t n = 0;
    int rc = read_text(o, &text, &len, &file);
    if (!rc && nnt_tokenizer_encode(tok, text, len, o->no_special ? 0 : NNT_TOKENIZE_ADD_SPECIAL, &ids, &n) != NNT_OK) {
        if (o->text || o->rows[0].kind == ROW_PROMPT)
            fprintf(stderr, "nnt: error: --prompt row 0: %s\n", nnt_tokenizer_last_error(tok));
        else
            fprintf(stderr, "nnt: error: --prompt-file %s (row 0): %s\n", o->rows[0].arg, nnt_tokenizer_last_error(tok));
        rc = 1;
    }
    for (int64_t i = 0; !rc && i < n; i++) {
        if (o->ids_only) {
            printf(i ? " %d" : "%d", ids[i]);
            continue;
        }
        size_t blen;
        const char *bytes = nnt_tokenizer_token_bytes(tok, ids[i], &blen);
        sbuf q = {0};
        if (bytes) sb_quoted(&q, bytes, blen);
        printf("%d\t%s\n", ids[i], q.p ? q.p : "?");
        free(q.p);
    }
    if (!rc && o->ids_only) printf("\n");
    free(ids);
    free(file);
    nnt_tokenizer_free(tok);
    return rc;
}

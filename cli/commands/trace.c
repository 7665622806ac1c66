/* trace.c - `nnt trace`: one forward of the request's rows with its saves and edits; prints each
 * saved value's summary and each row's five most likely next tokens, writes --out and --plot. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "../cli.h"

/* The saves this command adds for itself: next_token_probs for the top tokens (unless the request
 * saves it: then it is shown), and a routing picture's expert_indices beside the first saved
 * expert_weights. Both read the request's own document, whether the options or --request made it. */
typedef struct extra {
    const char *paths[2];
    char indices[300];
    int n, hidden_probs;
    /* for --plot, checked before the forward: saves it could draw, those saved whole, and the
     * first sliced one */
    int drawable, whole;
    char sliced[300];
} extra;

/* One path the request saves: notes a save of next_token_probs, and for --plot the indices the
 * first expert_weights needs. */
static void saved_path(const char *p, int plot, int *user_probs, extra *x)
{
    const char *at;
    if (!strcmp(p, "next_token_probs") || !strcmp(p, "model.next_token_probs")) *user_probs = 1;
    if (plot && !x->indices[0] && (at = strstr(p, ".expert_weights")) != NULL && !strchr(p, '['))
        snprintf(x->indices, sizeof x->indices, "%.*s.expert_indices%s", (int)(at - p), p, at + 15);
    if (plot && (strstr(p, ".attention_probabilities") || strstr(p, ".expert_weights"))) {
        x->drawable++;
        if (!strchr(p, '[')) x->whole++;
        else if (!x->sliced[0]) snprintf(x->sliced, sizeof x->sliced, "%s", p);
    }
}

/* --plot's refusals that the request alone decides, before any forward: nothing it can draw, or
 * only slices of it. 0 or 2 (printed). */
static int check_plot(const extra *x)
{
    if (!x->drawable)
        return cli_usage_error("%s", "trace --plot draws a saved attention_probabilities or expert_weights value: save "
                                     "one (e.g. --save layers.0.self_attn.attention_probabilities or --save "
                                     "layers.0.mlp.expert_weights)");
    if (!x->whole)
        return cli_arg_error("trace --plot: %s saves a slice; --plot draws the whole value (save it without the "
                             "brackets)", x->sliced);
    return 0;
}

static void extra_saves(const nnt_request *r, int plot, extra *x)
{
    char *json = NULL;
    void *tensors = NULL; /* asked for so that the document holds no tensor's numbers */
    size_t n = 0, tn = 0;
    cJSON *doc = nnt_request_write(r, &json, &n, &tensors, &tn) == NNT_OK ? cJSON_ParseWithLength(json, n) : NULL;
    free(json);
    free(tensors);
    int user_probs = 0;
    x->indices[0] = x->sliced[0] = '\0';
    x->drawable = x->whole = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(doc, "edits")) {
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(it, "op"), *path = cJSON_GetObjectItemCaseSensitive(it, "path");
        if (cJSON_IsString(op) && !strcmp(op->valuestring, "save") && cJSON_IsString(path))
            saved_path(path->valuestring, plot, &user_probs, x);
    }
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(doc, "saves"))
        if (cJSON_IsString(it)) saved_path(it->valuestring, plot, &user_probs, x);
    cJSON_Delete(doc);
    x->n = 0;
    x->hidden_probs = !user_probs;
    if (x->hidden_probs) x->paths[x->n++] = "next_token_probs";
    if (x->indices[0]) x->paths[x->n++] = x->indices;
}

/* Prints every saved value but `hidden`; writes --out. Returns 0, 1 or 2. */
static int report(cli_run *c, const nnt_result *res, const char *hidden)
{
    const nnt_batch *b = nnt_result_batch(res);
    char header[96];
    snprintf(header, sizeof header, "saved values (%d rows, %d positions):\n", b->batch, b->seq);
    int written = print_saved(nnt_result_trace(res), header, hidden);
    if (!c->o->out) return 0;
    int rc = cli_write_out(c->o, c->rt, res);
    if (!rc) printf("wrote %d values to %s\n", written, c->o->out);
    return rc;
}

int cmd_trace(cli_run *c)
{
    extra x;
    extra_saves(c->req, c->o->plot != NULL, &x);
    int refused = c->o->plot ? check_plot(&x) : 0;
    if (refused) return refused;
    nnt_run_opts ro = {.struct_size = sizeof ro, .extra_saves = x.paths, .n_extra_saves = x.n, .pipeline = c->p};
    nnt_result *res = NULL;
    if (nnt_request_run(c->m, c->req, &ro, &res) != NNT_OK)
        return c->p ? ranks_fail(c->p, c->o, c->rt, 0, c->held_fd) : cli_fail(c->o, c->rt, NULL);
    int rc = 0;
    if (nnt_result_holds(res)) {
        const nnt_batch *b = nnt_result_batch(res);
        const nnt_trace *t = nnt_result_trace(res);
        /* the added save: "next_token_probs", or "#1" after a --request's own save of it */
        const char *hidden = !x.hidden_probs ? NULL
                             : nnt_trace_lookup(t, "next_token_probs#1", NULL, NULL) == NNT_OK ? "next_token_probs#1"
                                                                                               : "next_token_probs";
        print_prompt_tokens(c->text_rows, b, c->tok);
        rc = report(c, res, hidden);
        const nnt_tensor *probs = nnt_trace_get(t, "next_token_probs");
        if (!rc && probs) print_top_tokens(c->tok, probs);
        if (!rc && c->o->plot) rc = picture_trace(c->o, c->m, b, c->tok, nnt_result_trace(res));
    }
    nnt_result_free(res);
    return rc;
}

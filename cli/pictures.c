/* pictures.c - the nnt command's --plot: what each command's results look like as a heatmap
 * (plot.c draws it). trace: the first saved attention_probabilities (query x key, a panel per
 * head) or expert_weights (tokens x experts) of batch row 0; lens: blocks x chosen positions per
 * row, the top token and its probability in each cell; patch: blocks x positions, the metric. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "plot.h"

/* Writes g to --plot; 0, or 1 with the message printed. */
static int write_plot(const cli_opts *o, const plot_grid *g)
{
    char err[1200];
    if (plot_write(o->plot, g, err, sizeof err) != 0) {
        fprintf(stderr, "nnt: error: %s\n", err);
        return 1;
    }
    printf("wrote the picture to %s\n", o->plot);
    return 0;
}

/* The label of column col of batch row r (left padding counted): "pad", or the token's text,
 * led by its position when with_pos. A new string or NULL. */
static char *batch_token(const nnt_batch *b, const nnt_tokenizer *tok, int r, int col, int with_pos)
{
    int n;
    const int32_t *ids = batch_row(b, r, &n);
    int pad = b->seq - n;
    if (col < pad) return strdup("pad");
    char *t = axis_token(tok, ids[col - pad]);
    if (!t || !with_pos) return t;
    size_t len = strlen(t) + 16;
    char *s = malloc(len);
    if (s) snprintf(s, len, "%d %s", col - pad, t);
    free(t);
    return s;
}

/* n labels "FORMAT" of 0..n-1 (e.g. "head %d"); NULL when out of memory. */
static char **numbered(const char *fmt, int n)
{
    char **v = calloc((size_t)(n ? n : 1), sizeof *v);
    for (int i = 0; v && i < n; i++) {
        char buf[48];
        snprintf(buf, sizeof buf, fmt, i);
        if (!(v[i] = strdup(buf))) {
            free_strings(v, (size_t)n);
            return NULL;
        }
    }
    return v;
}

static char *numbered_label(const char *fmt, int i)
{
    char buf[48];
    snprintf(buf, sizeof buf, fmt, i);
    return strdup(buf);
}

/* Row 0's token labels of every position (NULL when out of memory). */
static char **token_labels(const nnt_batch *b, const nnt_tokenizer *tok, int n)
{
    char **v = calloc((size_t)(n ? n : 1), sizeof *v);
    for (int i = 0; v && i < n; i++)
        if (!(v[i] = i < b->seq ? batch_token(b, tok, 0, i, 1) : numbered_label("entry %d", i))) {
            free_strings(v, (size_t)n);
            return NULL;
        }
    return v;
}

static int attention_picture(const cli_opts *o, const nnt_batch *b, const nnt_tokenizer *tok, const char *key,
                             const nnt_tensor *v)
{
    int H = (int)v->shape[1], S = b->seq, K = (int)v->shape[3], rc = 1;
    char title[512];
    snprintf(title, sizeof title, "%s, batch row 0: query x key per head", key);
    plot_grid g = {.title = title, .cell_w = PLOT_CELL, .cell_h = PLOT_CELL, .vmin = 0, .panels = H,
                   .panel_cols = H < 4 ? H : 4, .rows = S, .cols = K, .row_axis = "query", .col_axis = "key"};
    double *vals = malloc(sizeof(double) * (size_t)H * S * K);
    char **rows = token_labels(b, tok, S), **cols = token_labels(b, tok, K), **ptitles = numbered("head %d", H);
    if (vals && rows && cols && ptitles) {
        for (int64_t i = 0; i < (int64_t)H * S * K; i++) {
            vals[i] = nnt_tensor_get_f64(v, i);
            g.vmax = vals[i] > g.vmax ? vals[i] : g.vmax;
        }
        g.values = vals;
        g.row_labels = (const char *const *)rows;
        g.col_labels = (const char *const *)cols;
        g.panel_titles = (const char *const *)ptitles;
        rc = write_plot(o, &g);
    } else {
        fprintf(stderr, "nnt: trace --plot: out of memory\n");
    }
    free_strings(rows, (size_t)S);
    free_strings(cols, (size_t)K);
    free_strings(ptitles, (size_t)H);
    free(vals);
    return rc;
}

static int routing_picture(const cli_opts *o, const nnt_model *m, const nnt_batch *b, const nnt_tokenizer *tok,
                           const nnt_trace *t, const char *key, const nnt_tensor *v)
{
    char ikey[256], title[512];
    const char *at = strstr(key, "expert_weights");
    snprintf(ikey, sizeof ikey, "%.*sexpert_indices%s", (int)(at - key), key, at + 14);
    const nnt_tensor *idx = nnt_trace_get(t, ikey);
    int E = nnt_model_get_info(m)->num_experts, K = (int)v->shape[2], S = b->seq, rc = 1;
    if (!idx || nnt_tensor_numel(idx) != nnt_tensor_numel(v))
        return cli_arg_error("trace --plot: %s was not saved alongside %s", ikey, key);
    snprintf(title, sizeof title, "%s, batch row 0: each token's weight per expert", key);
    plot_grid g = {.title = title, .cell_w = PLOT_CELL, .cell_h = PLOT_CELL, .vmin = 0, .panels = 1, .panel_cols = 1,
                   .rows = S, .cols = E, .row_axis = "token", .col_axis = "expert"};
    double *vals = calloc((size_t)S * E, sizeof *vals);
    char **rows = token_labels(b, tok, S), **cols = numbered("%d", E);
    if (vals && rows && cols) {
        for (int s = 0; s < S; s++)
            for (int k = 0; k < K; k++) {
                double e = nnt_tensor_get_f64(idx, (int64_t)s * K + k), w = nnt_tensor_get_f64(v, (int64_t)s * K + k);
                if (e < 0 || e >= E) continue;
                vals[(size_t)s * E + (size_t)e] = w;
                g.vmax = w > g.vmax ? w : g.vmax;
            }
        g.values = vals;
        g.row_labels = (const char *const *)rows;
        g.col_labels = (const char *const *)cols;
        rc = write_plot(o, &g);
    } else {
        fprintf(stderr, "nnt: trace --plot: out of memory\n");
    }
    free_strings(rows, (size_t)S);
    free_strings(cols, (size_t)E);
    free(vals);
    return rc;
}

int picture_trace(const cli_opts *o, const nnt_model *m, const nnt_batch *b, const nnt_tokenizer *tok, const nnt_trace *t)
{
    const char *key = NULL;
    const nnt_tensor *v = NULL;
    int attn = 0;
    for (int i = 0; i < nnt_trace_result_count(t) && !key; i++) {
        const char *k;
        const nnt_tensor *x;
        nnt_trace_result(t, i, &k, &x);
        if (!x || strchr(k, '@') || strchr(k, '#')) continue;
        attn = strstr(k, ".attention_probabilities") != NULL;
        if (attn || strstr(k, ".expert_weights")) key = k, v = x;
    }
    if (!key)
        return cli_usage_error("%s", "trace --plot draws a saved attention_probabilities or expert_weights value: save "
                                     "one (e.g. --save layers.0.self_attn.attention_probabilities or --save "
                                     "layers.0.mlp.expert_weights)");
    if (v->ndim != (attn ? 4 : 3) || v->shape[attn ? 2 : 1] != b->seq)
        return cli_arg_error("trace --plot: %s was saved as a slice ([%d axes]); --plot draws the whole value", key,
                             v->ndim);
    return attn ? attention_picture(o, b, tok, key, v) : routing_picture(o, m, b, tok, t, key, v);
}

/* lens: cell texts "token probability" and each row's column labels "position token". */
static int lens_labels(const nnt_batch *b, const nnt_tokenizer *tok, const nnt_lens_result *l, double *vals,
                       char **text, char **cols)
{
    int B = l->batch, L = l->layers, W = l->width;
    for (int r = 0; r < B; r++) {
        int n;
        const int32_t *ids = batch_row(b, r, &n);
        for (int j = 0; j < W; j++) {
            int pos = l->positions[(size_t)r * W + j];
            if (pos < 0) continue; /* past the row's own columns: no value (NaN) */
            for (int layer = 0; layer < L; layer++) {
                size_t c = ((size_t)r * L + layer) * W + j;
                vals[c] = l->top_prob[c];
                char *tk = axis_token(tok, l->top[c]);
                size_t len = tk ? strlen(tk) + 16 : 0;
                if (!tk || !(text[c] = malloc(len))) return free(tk), 0;
                snprintf(text[c], len, "%s %.2f", tk, vals[c]);
                free(tk);
            }
            char *t = axis_token(tok, ids[pos]);
            size_t len = t ? strlen(t) + 16 : 0;
            if (!t || !(cols[(size_t)r * W + j] = malloc(len))) return free(t), 0;
            snprintf(cols[(size_t)r * W + j], len, "%d %s", pos, t);
            free(t);
        }
    }
    return 1;
}

int picture_lens(const cli_opts *o, const nnt_batch *b, const nnt_tokenizer *tok, const nnt_lens_result *l)
{
    int B = l->batch, L = l->layers, W = l->width, rc = 1;
    size_t cells = (size_t)B * L * W;
    double *vals = malloc(sizeof(double) * (cells ? cells : 1));
    char **text = calloc(cells ? cells : 1, sizeof *text), **cols = calloc((size_t)B * W + 1, sizeof *cols);
    char **rows = numbered("block %d", L), **ptitles = numbered("row %d", B);
    int ok = vals && text && rows && cols && ptitles;
    for (size_t k = 0; ok && k < cells; k++) vals[k] = NAN;
    if (ok) ok = lens_labels(b, tok, l, vals, text, cols);
    if (ok) {
        plot_grid g = {.title = "logit lens: top token of each block's output (colour: its probability)", .panels = B,
                       .panel_cols = 1, .panel_titles = (const char *const *)ptitles, .rows = L, .cols = W,
                       .values = vals, .cell_text = (const char *const *)text, .row_labels = (const char *const *)rows,
                       .col_labels = (const char *const *)cols, .col_labels_per_panel = 1, .row_axis = "block",
                       .col_axis = "position", .vmin = 0, .vmax = 1, .cell_w = PLOT_TEXT_CELL_W,
                       .cell_h = PLOT_TEXT_CELL_H};
        rc = write_plot(o, &g);
    } else {
        fprintf(stderr, "nnt: lens --plot: out of memory\n");
    }
    free(vals);
    free_strings(text, cells);
    free_strings(rows, (size_t)L);
    free_strings(cols, (size_t)B * W);
    free_strings(ptitles, (size_t)B);
    return rc;
}

/* A grid of blocks x positions of the corrupted prompt; `what` starts the title. */
static int grid_picture(const cli_opts *o, const nnt_batch *b, const nnt_tokenizer *tok, const nnt_patch_result *res,
                        const char *what, const char *value, const char *metric)
{
    int NB = res->n_blocks, P = res->n_positions, rc = 1, n;
    const int32_t *corrupt = batch_row(b, 1, &n);
    char **rows = calloc((size_t)NB + 1, sizeof *rows), **cols = calloc((size_t)P + 1, sizeof *cols);
    char **text = calloc((size_t)NB * P + 1, sizeof *text);
    double lo = INFINITY, hi = -INFINITY;
    int ok = rows && cols && text;
    for (int r = 0; ok && r < NB; r++) {
        char buf[32];
        snprintf(buf, sizeof buf, "block %d", res->blocks[r]);
        ok = (rows[r] = strdup(buf)) != NULL;
        for (int c = 0; ok && c < P; c++) {
            double v = res->grid[(size_t)r * P + c];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
            snprintf(buf, sizeof buf, "%.3f", v);
            ok = (text[(size_t)r * P + c] = strdup(buf)) != NULL;
        }
    }
    for (int c = 0; ok && c < P; c++) {
        char *t = axis_token(tok, corrupt[res->positions[c]]);
        size_t len = t ? strlen(t) + 16 : 0;
        ok = t && (cols[c] = malloc(len)) != NULL;
        if (ok) snprintf(cols[c], len, "%d %s", res->positions[c], t);
        free(t);
    }
    char title[512];
    snprintf(title, sizeof title, "%s %s: %s (clean %.3f, corrupted %.3f)", what, value, metric, res->clean_metric,
             res->corrupt_metric);
    if (ok) {
        plot_grid g = {.title = title, .panels = 1, .panel_cols = 1, .rows = NB, .cols = P, .values = res->grid,
                       .cell_text = (const char *const *)text, .row_labels = (const char *const *)rows,
                       .col_labels = (const char *const *)cols, .row_axis = "block", .col_axis = "position (corrupted)",
                       .vmin = lo, .vmax = hi, .cell_w = PLOT_TEXT_CELL_W, .cell_h = PLOT_TEXT_CELL_H};
        rc = write_plot(o, &g);
    } else {
        fprintf(stderr, "nnt: %s --plot: out of memory\n", o->cmd_name);
    }
    free_strings(rows, (size_t)NB);
    free_strings(cols, (size_t)P);
    free_strings(text, (size_t)NB * P);
    return rc;
}

int picture_patch(const cli_opts *o, const nnt_batch *b, const nnt_tokenizer *tok, const nnt_patch_result *res,
                  const char *value, const char *metric)
{
    return grid_picture(o, b, tok, res, "patching", value, metric);
}

int picture_attribute(const cli_opts *o, const nnt_batch *b, const nnt_tokenizer *tok, const nnt_patch_result *res,
                      const char *value, const char *metric)
{
    return grid_picture(o, b, tok, res, "attribution (estimated change) of", value, metric);
}

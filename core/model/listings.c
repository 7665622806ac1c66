/* listings.c - a loaded model's printouts: the module tree with the family's notes
 * (nnt_model_print) and the table of every standard value per block (nnt_model_support). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

nnt_status nnt_model_print(const nnt_model *m, FILE *out)
{
    if (!m || !out) return NNT_ERR_INVALID_ARGUMENT;
    nnt_tree *tree = nnt_tree_new();
    if (!tree) return nnt_err_set(&m->rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    nnt_status st = m->family->family->build_tree(m->impl, tree, &m->rt->err);
    if (st == NNT_OK) st = nnt_tree_print(tree, m, out, &m->rt->err);
    nnt_tree_free(tree);
    /* the family's notes, after the tree */
    const char *note;
    for (int i = 0; st == NNT_OK && nnt_model_note(m, i, &note); i++) fprintf(out, "%s  - %s\n", i ? "" : "notes:\n", note);
    return st;
}

int nnt_model_note(const nnt_model *m, int i, const char **text)
{
    if (text) *text = NULL;
    if (!m || i < 0 || i >= NNT_FAMILY_MAX_NOTES || !m->family->family->note) return 0;
    /* notes are counted from 0 without gaps: note i exists only when notes 0..i-1 do */
    for (int k = 0; k <= i; k++) {
        const char *s = m->family->family->note(m->impl, k);
        if (!s) return 0;
        if (k == i && text) *text = s;
    }
    return 1;
}

static const char *host_label(nnt_module h, int layer, char *buf, size_t n)
{
    if (h == NNT_MODULE_MODEL)
        snprintf(buf, n, "model");
    else if (h == NNT_MODULE_LAYER)
        snprintf(buf, n, "layers[%d]", layer);
    else
        snprintf(buf, n, "layers[%d].%s", layer, nnt_module_name(h));
    return buf;
}

/* Appends one row of the text listing (host, name, and served with layout, axes, dtype and
 * writable, or the reason) to s (len used of cap bytes, grown); 0 when there is no memory. */
static int append_row(char **s, size_t *len, size_t *cap, const char *host, const char *name, const nnt_value_info *vi)
{
    char line[800];
    if (vi->served)
        snprintf(line, sizeof line, "  %-12s %-24s yes  %-14s %-38s %s %s\n", host, name, vi->layout, vi->axes,
                 nnt_dtype_name(vi->dtype), vi->writable ? "rw" : "ro");
    else
        snprintf(line, sizeof line, "  %-12s %-24s no   %s\n", host, name, vi->reason);
    size_t l = strlen(line);
    if (*len + l + 1 > *cap) {
        size_t grow = 2 * (*len + l + 1);
        char *g = realloc(*s, grow);
        if (!g) return 0;
        *s = g;
        *cap = grow;
    }
    memcpy(*s + *len, line, l + 1);
    *len += l;
    return 1;
}

/* One block's rows as text, for grouping identical blocks: its standard values host by host,
 * then the values of its modules (their own: an alias is a standard value above). */
static nnt_status block_rows(const nnt_model *m, int layer, char **text, nnt_error *err)
{
    size_t cap = 8192, len = 0;
    char *s = malloc(cap);
    if (!s) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    for (int h = NNT_MODULE_LAYER; h <= NNT_MODULE_COUNT; h++) {
        int natives = h == NNT_MODULE_COUNT, n = natives ? m->n_natives : NNT_VALUE_COUNT;
        for (int i = 0; i < n; i++) {
            const nnt_native_info *ni = natives ? &m->natives[i] : NULL;
            if (natives ? !ni->block || ni->alias >= 0 : (int)nnt_value_module((nnt_value_id)i) != h) continue;
            nnt_value_id slot = natives ? (nnt_value_id)((int)NNT_VALUE_NATIVE + i) : (nnt_value_id)i;
            nnt_value_info vi;
            nnt_status st = nnt_model_slot_info(m, layer, slot, NULL, &vi, err);
            if (st != NNT_OK) {
                free(s);
                return st;
            }
            char path[300];
            if (natives) snprintf(path, sizeof path, "%s.%s", ni->standard, ni->io ? "output" : "input");
            const char *host = natives ? "(module)" : h == NNT_MODULE_LAYER ? "(block)" : nnt_module_name((nnt_module)h);
            const char *name = natives ? path : nnt_value_name(slot);
            if (!append_row(&s, &len, &cap, host, name, &vi)) {
                free(s);
                return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
            }
        }
    }
    *text = s;
    return NNT_OK;
}

nnt_status nnt_model_support(const nnt_model *m, FILE *out, int tsv)
{
    if (!m || !out) return NNT_ERR_INVALID_ARGUMENT;
    nnt_error *err = &m->rt->err;
    int L = m->info.num_layers;
    if (tsv) {
        fprintf(out, "host\tblock\tvalue\tserved\tlayout\taxes\tdtype\twritable\treason\n");
        for (int layer = -1; layer < L; layer++)
            for (int h = layer < 0 ? NNT_MODULE_MODEL : NNT_MODULE_LAYER; h < (layer < 0 ? NNT_MODULE_LAYER : NNT_MODULE_COUNT); h++)
                for (int sl = 0; sl < NNT_VALUE_COUNT; sl++) {
                    if ((int)nnt_value_module((nnt_value_id)sl) != h) continue;
                    nnt_value_info vi;
                    nnt_status st = nnt_model_slot_info(m, layer, (nnt_value_id)sl, NULL, &vi, err);
                    if (st != NNT_OK) return st;
                    char hb[64];
                    fprintf(out, "%s\t%s%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", host_label((nnt_module)h, layer, hb, sizeof hb),
                            "", layer, nnt_value_name((nnt_value_id)sl), vi.served ? "yes" : "no",
                            vi.served ? vi.layout : "-", vi.served ? vi.axes : "-",
                            vi.served ? nnt_dtype_name(vi.dtype) : "-", vi.served ? (vi.writable ? "yes" : "no") : "-",
                            vi.served ? "" : vi.reason);
                }
        /* native values of their own: host layers[N].MODULE, value input or output */
        for (int layer = 0; layer < L; layer++)
            for (int i = 0; i < m->n_natives; i++) {
                const nnt_native_info *ni = &m->natives[i];
                if (!ni->block || ni->alias >= 0) continue;
                nnt_value_info vi;
                nnt_status st = nnt_model_slot_info(m, layer, (nnt_value_id)((int)NNT_VALUE_NATIVE + i), NULL, &vi, err);
                if (st != NNT_OK) return st;
                fprintf(out, "layers[%d].%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", layer, ni->standard, layer,
                        ni->io ? "output" : "input", vi.served ? "yes" : "no", vi.served ? vi.layout : "-",
                        vi.served ? vi.axes : "-", vi.served ? nnt_dtype_name(vi.dtype) : "-",
                        vi.served ? (vi.writable ? "yes" : "no") : "-", vi.served ? "" : vi.reason);
            }
        return NNT_OK;
    }
    fprintf(out, "%s (%s), family %s, backend %s, %d blocks\n\nmodel\n", m->info.root_class,
            m->info.architecture, nnt_model_family(m), nnt_model_backend(m), L);
    for (int sl = 0; sl < NNT_VALUE_COUNT; sl++) {
        if (nnt_value_module((nnt_value_id)sl) != NNT_MODULE_MODEL) continue;
        nnt_value_info vi;
        nnt_status st = nnt_model_slot_info(m, -1, (nnt_value_id)sl, NULL, &vi, err);
        if (st != NNT_OK) return st;
        if (vi.served)
            fprintf(out, "  %-12s %-24s yes  %-14s %-38s %s %s\n", "model", nnt_value_name((nnt_value_id)sl), vi.layout,
                    vi.axes, nnt_dtype_name(vi.dtype), vi.writable ? "rw" : "ro");
        else
            fprintf(out, "  %-12s %-24s no   %s\n", "model", nnt_value_name((nnt_value_id)sl), vi.reason);
    }
    char **texts = calloc((size_t)L + 1, sizeof *texts);
    if (!texts) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    nnt_status st = NNT_OK;
    for (int l = 0; l < L && st == NNT_OK; l++) st = block_rows(m, l, &texts[l], err);
    for (int l = 0; l < L && st == NNT_OK;) {
        int j = l;
        while (j + 1 < L && strcmp(texts[j + 1], texts[l]) == 0) j++;
        if (j == l)
            fprintf(out, "\nlayers[%d]\n%s", l, texts[l]);
        else
            fprintf(out, "\nlayers[%d..%d] (%d identical blocks)\n%s", l, j, j - l + 1, texts[l]);
        l = j + 1;
    }
    for (int l = 0; l < L; l++) free(texts[l]);
    free(texts);
    return st;
}

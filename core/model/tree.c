/* tree.c - the module tree a family builds for `nnt print`, rendered like print(model) with
 * nnterp's standard names and values, identical consecutive blocks grouped as "(a-b): n x". */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct tnode {
    char *native, *standard, *cls, *detail;
    int module, layer, parent;
    int *kids;
    int n_kids;
} tnode;

struct nnt_tree {
    tnode *nodes;
    int n, cap;
};

nnt_tree *nnt_tree_new(void)
{
    return calloc(1, sizeof(nnt_tree));
}

void nnt_tree_free(nnt_tree *t)
{
    if (!t) return;
    for (int i = 0; i < t->n; i++) {
        free(t->nodes[i].native);
        free(t->nodes[i].standard);
        free(t->nodes[i].cls);
        free(t->nodes[i].detail);
        free(t->nodes[i].kids);
    }
    free(t->nodes);
    free(t);
}

int nnt_tree_node(nnt_tree *t, int parent, const char *native, const char *standard,
                  const char *cls, const char *detail, int module, int layer)
{
    if (!t || !native || !cls || parent >= t->n || parent < -1) return -1;
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        tnode *g = realloc(t->nodes, (size_t)cap * sizeof *g);
        if (!g) return -1;
        t->nodes = g;
        t->cap = cap;
    }
    if (parent >= 0) {
        tnode *p = &t->nodes[parent];
        int *k = realloc(p->kids, (size_t)(p->n_kids + 1) * sizeof *k);
        if (!k) return -1;
        p->kids = k;
        p->kids[p->n_kids++] = t->n;
    }
    tnode *n = &t->nodes[t->n];
    memset(n, 0, sizeof *n);
    n->native = nnt_strdup(native);
    n->standard = standard && strcmp(standard, native) != 0 ? nnt_strdup(standard) : NULL;
    n->cls = nnt_strdup(cls);
    n->detail = detail ? nnt_strdup(detail) : NULL;
    n->module = module;
    n->layer = layer;
    n->parent = parent;
    return t->n++;
}

/* A growable string. */
typedef struct sbuf {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf *b, const char *fmt, ...)
{
    if (b->oom) return;
    va_list ap;
    for (;;) {
        size_t room = b->cap - b->n;
        va_start(ap, fmt);
        int w = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? room : 0, fmt, ap);
        va_end(ap);
        if (w < 0) return;
        if (b->s && (size_t)w < room) {
            b->n += (size_t)w;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + (size_t)w + 1) cap *= 2;
        char *g = realloc(b->s, cap);
        if (!g) {
            b->oom = 1;
            return;
        }
        b->s = g;
        b->cap = cap;
    }
}

static void indent(sbuf *b, int depth)
{
    for (int i = 0; i < depth; i++) sb_add(b, "  ");
}

static nnt_status render_values(sbuf *b, const nnt_model *m, int module, int layer, int depth,
                                nnt_error *err)
{
    for (int s = 0; s < NNT_VALUE_COUNT; s++) {
        if ((int)nnt_value_module((nnt_value_id)s) != module) continue;
        nnt_value_info vi;
        nnt_status st = nnt_model_slot_info(m, layer, (nnt_value_id)s, NULL, &vi, err);
        if (st != NNT_OK) return st;
        if (!vi.served && vi.off_page) continue;
        indent(b, depth);
        if (vi.served)
            sb_add(b, "(%s) -> %s %s: %s\n", nnt_value_name((nnt_value_id)s), vi.layout, vi.axes,
                   nnt_value_description((nnt_value_id)s));
        else
            sb_add(b, "(%s): Unavailable: %s\n", nnt_value_name((nnt_value_id)s), vi.reason);
    }
    return NNT_OK;
}

static nnt_status render(sbuf *b, const nnt_tree *t, const nnt_model *m, int id, int depth,
                         const char *label, nnt_error *err);

/* Node id's path of native names below its block (*block 1, *layer its block) or below the root
 * (*block 0): "self_attn.q_proj", "norm"; empty for the root and the block itself. */
static void node_path(const nnt_tree *t, int id, char *buf, size_t n, int *block, int *layer)
{
    int chain[64], k = 0;
    *block = 0;
    *layer = -1;
    for (int j = id; j > 0 && t->nodes[j].parent >= 0 && k < 64; j = t->nodes[j].parent) {
        const tnode *c = &t->nodes[j], *p = &t->nodes[c->parent];
        if (c->layer >= 0 && p->layer < 0) { /* the block: a list's child */
            *block = 1;
            *layer = c->layer;
            break;
        }
        chain[k++] = j;
    }
    buf[0] = '\0';
    for (int i = k - 1; i >= 0; i--) {
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, "%s%s", l ? "." : "", t->nodes[chain[i]].native);
    }
}

/* The lines of node id's native values (nnt_native_info): its input and output, each a value of
 * its own with its layout or the standard value it is. Returns how many lines it wrote. */
static int render_natives(sbuf *b, const nnt_tree *t, const nnt_model *m, int id, int depth)
{
    char path[256];
    int block, layer, lines = 0;
    node_path(t, id, path, sizeof path, &block, &layer);
    if (!path[0]) return 0;
    for (int i = 0; i < m->n_natives; i++) {
        const nnt_native_info *ni = &m->natives[i];
        if (ni->block != block || strcmp(ni->module, path) != 0) continue;
        const char *io = ni->io ? "output" : "input";
        if (ni->alias >= 0) {
            indent(b, depth);
            const nnt_native_info *to = nnt_model_native(m, (nnt_value_id)ni->alias);
            if (to)
                sb_add(b, "(%s) = %s.%s%s\n", io, to->standard, to->io ? "output" : "input",
                       ni->read_only ? " (read-only through this path: other modules read it too)" : "");
            else
                sb_add(b, "(%s) = %s%s\n", io, nnt_value_name((nnt_value_id)ni->alias),
                       ni->read_only ? " (read-only through this path: other modules read it too)" : "");
            lines++;
            continue;
        }
        nnt_value_info vi;
        nnt_error scratch = {0};
        if (nnt_model_slot_info(m, block ? layer : -1, (nnt_value_id)((int)NNT_VALUE_NATIVE + i), NULL, &vi, &scratch) !=
                NNT_OK ||
            !vi.served)
            continue;
        indent(b, depth);
        sb_add(b, "(%s) -> %s %s: the tensor its forward %s\n", io, vi.layout, vi.axes, ni->io ? "returns" : "receives");
        lines++;
    }
    return lines;
}

/* Renders the children of a list node (e.g. `layers`), grouping identical consecutive ones. */
static nnt_status render_list(sbuf *b, const nnt_tree *t, const nnt_model *m, const tnode *n,
                              int depth, nnt_error *err)
{
    char **texts = calloc((size_t)n->n_kids + 1, sizeof *texts);
    if (!texts) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    nnt_status st = NNT_OK;
    for (int i = 0; i < n->n_kids && st == NNT_OK; i++) {
        sbuf one = {0};
        st = render(&one, t, m, n->kids[i], depth, "\x01", err); /* \x01: label placeholder */
        texts[i] = one.s ? one.s : nnt_strdup("");
        if (one.oom) st = nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    for (int i = 0; i < n->n_kids && st == NNT_OK;) {
        int j = i;
        while (j + 1 < n->n_kids && strcmp(texts[j + 1], texts[i]) == 0) j++;
        const char *rest = strchr(texts[i], '\x01');
        rest = rest ? rest + 1 : texts[i];
        indent(b, depth);
        if (j == i)
            sb_add(b, "(%d)%s", i, rest + 0);
        else
            sb_add(b, "(%d-%d): %d x%s", i, j, j - i + 1, rest + 1);
        i = j + 1;
    }
    for (int i = 0; i < n->n_kids; i++) free(texts[i]);
    free(texts);
    return st;
}

static nnt_status render(sbuf *b, const nnt_tree *t, const nnt_model *m, int id, int depth,
                         const char *label, nnt_error *err)
{
    const tnode *n = &t->nodes[id];
    int list = n->n_kids > 0;
    for (int i = 0; i < n->n_kids && list; i++) {
        const tnode *k = &t->nodes[n->kids[i]];
        list = k->layer == i && n->layer < 0;
    }
    if (label && label[0] == '\x01') {
        /* caller prints the index; we print "\x01: Class(" so the caller can splice */
        sb_add(b, "\x01: %s(", n->cls);
    } else {
        indent(b, depth);
        if (n->parent < 0)
            sb_add(b, "%s(", n->cls);
        else if (n->standard)
            sb_add(b, "(%s/%s): %s(", n->standard, n->native, n->cls);
        else
            sb_add(b, "(%s): %s(", n->native, n->cls);
    }
    if (n->n_kids == 0 && n->module < 0) {
        sbuf nat = {0};
        if (!render_natives(&nat, t, m, id, depth + 1)) {
            sb_add(b, "%s)\n", n->detail ? n->detail : "");
            free(nat.s);
            return NNT_OK;
        }
        sb_add(b, "%s\n%s", n->detail ? n->detail : "", nat.s ? nat.s : "");
        free(nat.s);
        indent(b, depth);
        sb_add(b, ")\n");
        return nat.oom ? nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory") : NNT_OK;
    }
    sb_add(b, "\n");
    nnt_status st = NNT_OK;
    if (list) {
        st = render_list(b, t, m, n, depth + 1, err);
    } else {
        for (int i = 0; i < n->n_kids && st == NNT_OK; i++)
            st = render(b, t, m, n->kids[i], depth + 1, NULL, err);
    }
    if (st == NNT_OK && n->module >= 0) st = render_values(b, m, n->module, n->module == NNT_MODULE_MODEL ? -1 : n->layer, depth + 1, err);
    if (st == NNT_OK) render_natives(b, t, m, id, depth + 1);
    indent(b, depth);
    sb_add(b, ")\n");
    return st;
}

nnt_status nnt_tree_print(const nnt_tree *t, const nnt_model *m, FILE *out, nnt_error *err)
{
    if (!t || t->n == 0) return nnt_err_set(err, NNT_ERR_INTERNAL, "the family built an empty module tree");
    sbuf b = {0};
    nnt_status st = render(&b, t, m, 0, 0, NULL, err);
    if (b.oom) st = nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    if (st == NNT_OK && b.s) fputs(b.s, out);
    free(b.s);
    return st;
}

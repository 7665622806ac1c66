/* fam_arch.c - the family kit's architecture table (fam_arch, nnt_family_kit.h): its check, and
 * what every consumer reads from it - a block's binding, the module tree, the weight bytes of
 * the costs, and the values of a module a block lacks. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nnt/nnt_family_kit.h>

#include "fam_internal.h"

nnt_module fam_value_module(nnt_value_id id)
{
    /* nnt_value_id lists the values module by module (nnt_types.h) */
    if ((int)id < 0 || id >= NNT_VALUE_COUNT) return NNT_MODULE_COUNT;
    if (id <= NNT_VALUE_INPUT_SIZE) return NNT_MODULE_MODEL;
    if (id <= NNT_VALUE_MLP_COMB) return NNT_MODULE_LAYER;
    if (id <= NNT_VALUE_ATTN_HEAD_OUTPUTS) return NNT_MODULE_SELF_ATTN;
    if (id <= NNT_VALUE_LIN_STATE_OUTPUT) return NNT_MODULE_LINEAR_ATTN;
    return NNT_MODULE_MLP;
}

/* ---- the table's shape ---- */

static int tensor_used(const fam_tensor *t)
{
    return t->name[0] != NULL || t->experts != NULL;
}

static int has_traits(uint32_t traits, uint32_t when, uint32_t unless)
{
    return (traits & when) == when && (traits & unless) == 0;
}

static int block_row(const fam_arch *a)
{
    for (int i = 0; i < a->n_modules; i++)
        if (a->modules[i].block) return i;
    return -1;
}

/* One past the last row under row i. */
static int subtree_end(const fam_arch *a, int i)
{
    int j = i + 1;
    while (j < a->n_modules && a->modules[j].depth > a->modules[i].depth) j++;
    return j;
}

static nnt_status bad_row(const nnt_core_api *core, nnt_error *err, const fam_arch *a, int i, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static nnt_status bad_row(const nnt_core_api *core, nnt_error *err, const fam_arch *a, int i, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const char *native = a->modules[i].native ? a->modules[i].native : "(no name)";
    return core->set_error(err, NNT_ERR_INTERNAL, "architecture table row %d ('%s'): %s", i, native, what);
}

static int size_ok(const fam_arch *a, int index)
{
    return index >= 0 && index < a->n_sizes;
}

static nnt_status check_tensor(const nnt_core_api *core, const fam_arch *a, int i, int k, nnt_error *err)
{
    const fam_tensor *t = &a->modules[i].tensors[k];
    if (t->ndim < 1 || t->ndim > NNT_MAX_DIMS)
        return bad_row(core, err, a, i, "tensor %d has %d axes; expected 1..%d", k, t->ndim, NNT_MAX_DIMS);
    for (int d = 0; d < t->ndim; d++)
        if (!size_ok(a, t->size[d]))
            return bad_row(core, err, a, i, "tensor %d's axis %d is size %d; the table has %d sizes", k, d, t->size[d],
                           a->n_sizes);
    if ((int)t->store < FAM_STORE_LINEAR || t->store > FAM_STORE_EXPERTS || (int)t->bind < FAM_BIND_WEIGHT ||
        t->bind > FAM_BIND_NONE)
        return bad_row(core, err, a, i, "tensor %d has an unknown store or bind kind", k);
    if (t->store == FAM_STORE_LINEAR && t->ndim < 2)
        return bad_row(core, err, a, i, "tensor %d is a linear weight of %d axis; expected 2 or more", k, t->ndim);
    if ((t->store == FAM_STORE_EXPERTS) != (t->experts != NULL) || (t->store == FAM_STORE_EXPERTS && t->ndim != 3))
        return bad_row(core, err, a, i, "tensor %d: routed experts need their spellings and the shape [E, I, H]", k);
    if (t->bind == FAM_BIND_EXPERTS && t->store != FAM_STORE_EXPERTS)
        return bad_row(core, err, a, i, "tensor %d is bound as experts but not stored as experts", k);
    if (t->bind != FAM_BIND_NONE && t->bind != FAM_BIND_EXPERTS && !t->name[0])
        return bad_row(core, err, a, i, "tensor %d is bound but has no name", k);
    return NNT_OK;
}

/* The detail a row asks for reads its first tensor (or its own text). */
static nnt_status check_detail(const nnt_core_api *core, const fam_arch *a, int i, nnt_error *err)
{
    const fam_module *r = &a->modules[i];
    const fam_tensor *t = &r->tensors[0];
    int need = r->detail == FAM_DETAIL_LINEAR ? 2 : r->detail == FAM_DETAIL_NORM ? 1 : r->detail == FAM_DETAIL_EMBEDDING ? 2 : 0;
    if ((int)r->detail < FAM_DETAIL_NONE || r->detail > FAM_DETAIL_TEXT)
        return bad_row(core, err, a, i, "unknown detail kind %d", (int)r->detail);
    if (need && (!tensor_used(t) || t->ndim < need || (r->detail == FAM_DETAIL_EMBEDDING && t->ndim != 2)))
        return bad_row(core, err, a, i, "its detail reads its first tensor, which needs %d axes", need);
    if (r->detail == FAM_DETAIL_TEXT) {
        if (!r->text) return bad_row(core, err, a, i, "a text detail without its text");
        for (int d = 0; d < NNT_MAX_DIMS; d++)
            if (!size_ok(a, r->dims[d])) return bad_row(core, err, a, i, "detail size %d is outside the sizes", r->dims[d]);
    }
    return NNT_OK;
}

static nnt_status check_row(const nnt_core_api *core, const fam_arch *a, int i, nnt_error *err)
{
    const fam_module *r = &a->modules[i];
    int prev = i ? a->modules[i - 1].depth : -1;
    if (!r->native || (!r->cls && i > 0)) return bad_row(core, err, a, i, "a module needs its name and class");
    if ((i == 0) != (r->depth == 0) || r->depth > prev + 1 || r->depth >= FAM_MAX_DEPTH)
        return bad_row(core, err, a, i, "depth %d after depth %d (the root alone at 0, a child one deeper, below %d)",
                       r->depth, prev, FAM_MAX_DEPTH);
    if (r->module != 0 && r->module != NNT_MODULE_SELF_ATTN && r->module != NNT_MODULE_LINEAR_ATTN &&
        r->module != NNT_MODULE_MLP)
        return bad_row(core, err, a, i, "module %d hosts no values (self_attn, linear_attn or mlp expected)", r->module);
    if (r->block && (r->when || r->unless || r->module || r->depth == 0))
        return bad_row(core, err, a, i, "the block row takes no traits or module and sits below the root");
    if ((r->alt_cls != NULL) != (r->alt_when != 0))
        return bad_row(core, err, a, i, "an alternative class and the traits that select it go together");
    nnt_status st = check_detail(core, a, i, err);
    int ended = 0;
    for (int k = 0; k < FAM_MODULE_TENSORS && st == NNT_OK; k++) {
        if (!tensor_used(&r->tensors[k])) {
            ended = 1;
        } else if (ended) {
            st = bad_row(core, err, a, i, "tensor %d follows an unused entry", k);
        } else {
            st = check_tensor(core, a, i, k, err);
        }
    }
    return st;
}

nnt_status fam_arch_check(const nnt_core_api *core, const fam_arch *a, nnt_error *err)
{
    if (!a || !a->modules || a->n_modules < 2 || !a->describe || a->n_sizes < 0 || a->n_sizes > FAM_MAX_SIZES)
        return core->set_error(err, NNT_ERR_INTERNAL,
                               "architecture table: needs its modules (2 or more), describe and at most %d sizes",
                               FAM_MAX_SIZES);
    int blocks = 0;
    for (int i = 0; i < a->n_modules; i++) {
        nnt_status st = check_row(core, a, i, err);
        if (st != NNT_OK) return st;
        blocks += a->modules[i].block != 0;
    }
    if (blocks != 1)
        return core->set_error(err, NNT_ERR_INTERNAL, "architecture table: %d block rows; expected exactly one", blocks);
    return NNT_OK;
}

/* ---- walking the rows that exist ---- */

enum { WALK_ON = 0, WALK_SKIP = 1, WALK_STOP = 2 };

/* Calls visit for each row of [from, to) that exists under `traits` (its own traits and every
 * ancestor's in the range): a row that does not exist hides the rows under it, and so does one
 * for which visit returns WALK_SKIP; WALK_STOP ends the walk. */
static void walk(const fam_arch *a, int from, int to, uint32_t traits, int (*visit)(void *, int), void *ctx)
{
    int hide = FAM_MAX_DEPTH; /* rows deeper than this are hidden */
    for (int i = from; i < to; i++) {
        const fam_module *r = &a->modules[i];
        if (r->depth > hide) continue;
        hide = FAM_MAX_DEPTH;
        if (!has_traits(traits, r->when, r->unless)) {
            hide = r->depth;
            continue;
        }
        int v = visit(ctx, i);
        if (v == WALK_STOP) return;
        if (v == WALK_SKIP) hide = r->depth;
    }
}

static void describe(const fam_arch *a, const void *self, int layer, fam_block_facts *out)
{
    memset(out, 0, sizeof *out);
    a->describe(self, layer, out);
}

static void tensor_shape(const fam_tensor *t, const fam_block_facts *f, int64_t *shape, int64_t *numel)
{
    *numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        shape[d] = f->size[t->size[d]];
        *numel *= shape[d];
    }
}

/* ---- costs ---- */

static uint64_t stored_bytes(const fam_encoding *e, const fam_tensor *t, const fam_block_facts *f)
{
    int64_t s[NNT_MAX_DIMS], n;
    tensor_shape(t, f, s, &n);
    switch (t->store) {
    case FAM_STORE_LINEAR: {
        int64_t rows = s[t->ndim - 2], cols = s[t->ndim - 1], matrix = rows * cols;
        return (uint64_t)(matrix > 0 ? n / matrix : 0) * fam_cost_matrix(e, rows, cols);
    }
    case FAM_STORE_PLAIN: return fam_cost_vector(e, n);
    case FAM_STORE_F32: return fam_cost_f32(n);
    case FAM_STORE_I64: return (uint64_t)n * 8;
    case FAM_STORE_EXPERTS: return fam_cost_experts(e, s[0], s[1], s[2]);
    }
    return 0;
}

typedef struct cost_walk {
    const fam_arch *a;
    const fam_encoding *e;
    fam_block_facts f;
    int model;              /* 1: the rows outside the blocks */
    uint64_t bytes, first;  /* first: first_stage tensors outside the blocks */
} cost_walk;

static int visit_cost(void *ctx, int i)
{
    cost_walk *c = ctx;
    const fam_module *r = &c->a->modules[i];
    if (c->model && r->block) return WALK_SKIP;
    for (int k = 0; k < FAM_MODULE_TENSORS && tensor_used(&r->tensors[k]); k++) {
        const fam_tensor *t = &r->tensors[k];
        if (!has_traits(c->f.traits, t->when, t->unless)) continue;
        uint64_t b = stored_bytes(c->e, t, &c->f);
        if (c->model && t->first_stage)
            c->first += b;
        else
            c->bytes += b;
    }
    return WALK_ON;
}

nnt_status fam_arch_costs(nnt_cost_args *args, const fam_arch *a, const void *self, const fam_encoding *e,
                          nnt_error *err)
{
    nnt_status st = fam_arch_check(args->core, a, err);
    if (st != NNT_OK) return st;
    int b = block_row(a), end = subtree_end(a, b);
    for (int l = 0; l < args->n_blocks; l++) {
        cost_walk c = {.a = a, .e = e};
        describe(a, self, l, &c.f);
        walk(a, b, end, c.f.traits, visit_cost, &c);
        args->weight_bytes[l] = c.bytes;
    }
    cost_walk c = {.a = a, .e = e, .model = 1};
    describe(a, self, -1, &c.f);
    walk(a, 0, a->n_modules, c.f.traits, visit_cost, &c);
    args->first_bytes = c.first;
    args->last_bytes = c.bytes;
    return NNT_OK;
}

/* ---- value serving ---- */

typedef struct find_walk {
    const fam_arch *a;
    int module, found;
} find_walk;

static int visit_find(void *ctx, int i)
{
    find_walk *c = ctx;
    if (c->a->modules[i].module != c->module) return WALK_ON;
    c->found = 1;
    return WALK_STOP;
}

int fam_arch_value_info(const fam_arch *a, const void *self, int layer, nnt_value_id id, nnt_value_info *out)
{
    nnt_module m = fam_value_module(id);
    if (!a || !a->modules || !a->describe) return 0;
    if (m == NNT_MODULE_MODEL || m == NNT_MODULE_LAYER || m >= NNT_MODULE_COUNT) return 0;
    const char *absent = NULL;
    int rows = 0;
    for (int i = 0; i < a->n_modules; i++)
        if (a->modules[i].module == (int)m) {
            rows++;
            if (!absent) absent = a->modules[i].absent;
        }
    if (!rows) {
        if (!a->off_page[m]) return 0;
        fam_off_page(out, "%s", a->off_page[m]);
        return 1;
    }
    int b = block_row(a);
    if (layer < 0 || b < 0 || !absent) return 0;
    fam_block_facts f;
    describe(a, self, layer, &f);
    find_walk c = {.a = a, .module = (int)m};
    walk(a, b, subtree_end(a, b), f.traits, visit_find, &c);
    if (c.found) return 0;
    fam_unserved(out, "%s", absent);
    return 1;
}

/* ---- what the native values read (fam_natives.c) ---- */

int fam_arch_block_row(const fam_arch *a)
{
    return block_row(a);
}

int fam_arch_subtree_end(const fam_arch *a, int i)
{
    return subtree_end(a, i);
}

typedef struct row_walk {
    int row, found;
} row_walk;

static int visit_row(void *ctx, int i)
{
    row_walk *c = ctx;
    if (i != c->row) return WALK_ON;
    c->found = 1;
    return WALK_STOP;
}

int fam_arch_row_on_block(const fam_arch *a, const void *self, int layer, int row, fam_block_facts *f)
{
    int b = block_row(a);
    if (b < 0) return 0;
    describe(a, self, layer, f);
    row_walk c = {.row = row};
    walk(a, b, subtree_end(a, b), f->traits, visit_row, &c);
    return c.found;
}

/* ---- the module tree ---- */

typedef struct tree_walk {
    const nnt_core_api *core;
    const fam_arch *a;
    const void *self;
    nnt_tree *tree;
    int layers, layer; /* layer: the block being built, -1 outside the blocks */
    int parent[FAM_MAX_DEPTH];
    fam_block_facts f;
    nnt_status st;
    nnt_error *err;
} tree_walk;

/* The class row r shows on the block f describes: alt_cls where the block has alt_when, else cls
 * (the root: describe's root_class, or NULL). */
static const char *row_class(const fam_module *r, const fam_block_facts *f)
{
    if (r->alt_cls && has_traits(f->traits, r->alt_when, 0)) return r->alt_cls;
    return r->cls ? r->cls : f->root_class;
}

static const char *standard_name(const fam_arch *a, const fam_module *r, const char *cls)
{
    for (const nnt_rename_rule *q = a->renames; q && q->native; q++)
        if (strcmp(q->native, r->native) == 0 && (!q->module_class || strcmp(q->module_class, cls) == 0))
            return q->standard;
    return NULL;
}

static const char *detail_text(const fam_module *r, const fam_block_facts *f, char *buf, size_t n)
{
    int64_t s[NNT_MAX_DIMS] = {0}, numel = 0;
    if (tensor_used(&r->tensors[0])) tensor_shape(&r->tensors[0], f, s, &numel);
    int nd = r->tensors[0].ndim;
    switch (r->detail) {
    case FAM_DETAIL_LINEAR: return fam_linear_detail(buf, n, s[nd - 1], s[nd - 1] ? numel / s[nd - 1] : 0);
    case FAM_DETAIL_NORM: return fam_norm_detail(buf, n, s[0], r->eps != 0.0 ? r->eps : f->eps);
    case FAM_DETAIL_EMBEDDING: snprintf(buf, n, "%lld, %lld", (long long)s[0], (long long)s[1]); return buf;
    case FAM_DETAIL_TEXT: {
        long long v[NNT_MAX_DIMS];
        for (int d = 0; d < NNT_MAX_DIMS; d++) v[d] = (long long)f->size[r->dims[d]];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        snprintf(buf, n, r->text, v[0], v[1], v[2], v[3], v[4], v[5]);
#pragma GCC diagnostic pop
        return buf;
    }
    default: return NULL;
    }
}

static int visit_tree(void *ctx, int i);

/* The block row i and its rows, once for each block. */
static void tree_blocks(tree_walk *c, int i)
{
    for (int l = 0; l < c->layers && c->st == NNT_OK; l++) {
        tree_walk sub = *c;
        sub.layer = l;
        describe(c->a, c->self, l, &sub.f);
        walk(c->a, i, subtree_end(c->a, i), sub.f.traits, visit_tree, &sub);
        c->st = sub.st;
    }
}

static int visit_tree(void *ctx, int i)
{
    tree_walk *c = ctx;
    const fam_module *r = &c->a->modules[i];
    if (r->block && c->layer < 0) {
        tree_blocks(c, i);
        return c->st == NNT_OK ? WALK_SKIP : WALK_STOP;
    }
    const char *cls = row_class(r, &c->f);
    if (!cls) {
        c->st = c->core->set_error(c->err, NNT_ERR_INTERNAL, "architecture table: the root has no class");
        return WALK_STOP;
    }
    char d[256];
    int module = r->depth == 0 ? NNT_MODULE_MODEL : r->block ? NNT_MODULE_LAYER : r->module ? r->module : -1;
    int parent = r->depth ? c->parent[r->depth - 1] : -1;
    int id = c->core->tree_node(c->tree, parent, r->native, standard_name(c->a, r, cls), cls,
                                detail_text(r, &c->f, d, sizeof d), module, c->layer);
    if (id < 0) {
        c->st = c->core->set_error(c->err, NNT_ERR_OUT_OF_MEMORY, "no memory for the module tree");
        return WALK_STOP;
    }
    c->parent[r->depth] = id;
    return WALK_ON;
}

nnt_status fam_arch_tree(const nnt_core_api *core, const fam_arch *a, const void *self, int layers, nnt_tree *tree,
                         nnt_error *err)
{
    nnt_status st = fam_arch_check(core, a, err);
    if (st != NNT_OK) return st;
    tree_walk c = {.core = core, .a = a, .self = self, .tree = tree, .layers = layers, .layer = -1, .err = err};
    describe(a, self, -1, &c.f);
    walk(a, 0, a->n_modules, c.f.traits, visit_tree, &c);
    return c.st;
}

/* ---- binding ---- */

typedef struct bind_walk {
    const fam_env *env;
    const fam_arch *a;
    const nnt_checkpoint *ck;
    int layer, base;   /* base: depth of the rows a tensor's module path starts below */
    void *block;
    fam_block_facts f;
    const char *path[FAM_MAX_DEPTH];
    nnt_status st;
    nnt_error *err;
} bind_walk;

/* The module path of row depth `depth` for messages ("block_sparse_moe.gate"). */
static const char *module_path(const bind_walk *c, int depth, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int d = c->base + 1; d <= depth && used < n; d++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", d > c->base + 1 ? "." : "", c->path[d]);
    return buf;
}

/* Writes into name[256] the first spelling of t the checkpoint holds (*found 1), or, when it holds
 * none, the first spelling (*found 0). Errors: NNT_ERR_INTERNAL for a name over 255 bytes. */
static nnt_status pick_name(const bind_walk *c, const fam_tensor *t, char *name, int *found)
{
    *found = 0;
    for (int s = 0; s < FAM_SPELLINGS && t->name[s]; s++) {
        int len = snprintf(name, 256, t->name[s], c->layer);
        if (len < 0 || len >= 256)
            return c->env->core->set_error(c->err, NNT_ERR_INTERNAL, "tensor name '%s' is over 255 bytes", t->name[s]);
        if (c->env->core->has_tensor(c->ck, name)) {
            *found = 1;
            return NNT_OK;
        }
    }
    snprintf(name, 256, t->name[0], c->layer);
    return NNT_OK;
}

/* The error for a required tensor of several spellings none of which the checkpoint holds. */
static nnt_status missing(const bind_walk *c, const fam_tensor *t, int depth)
{
    char list[1200], one[256], path[256], where[32];
    size_t used = 0;
    for (int s = 0; s < FAM_SPELLINGS && t->name[s] && used < sizeof list; s++) {
        snprintf(one, sizeof one, t->name[s], c->layer);
        used += (size_t)snprintf(list + used, sizeof list - used, "%s'%s'", s ? ", " : "", one);
    }
    if (c->layer >= 0)
        snprintf(where, sizeof where, "block %d", c->layer);
    else
        snprintf(where, sizeof where, "the model");
    return c->env->core->set_error(c->err, NNT_ERR_NOT_FOUND, "%s: %s lacks a tensor of %s: the checkpoint holds none of %s",
                                   c->env->core->cfg_path(c->ck), where, module_path(c, depth, path, sizeof path), list);
}

/* The experts of t: the kit's fam_expert[E] (kept by env), bound by fam_bind_experts; an optional
 * layout of which the checkpoint holds neither the fused tensors nor expert 0 is skipped. */
static nnt_status bind_experts(bind_walk *c, const fam_tensor *t, const int64_t *s)
{
    const fam_expert_layout *x = t->experts;
    const nnt_core_api *h = c->env->core;
    char name[256];
    int n = 0, present = 0;
    if (x->fused_gate_up) {
        snprintf(name, sizeof name, x->fused_gate_up, c->layer);
        present = h->has_tensor(c->ck, name);
    }
    for (; n < FAM_SPELLINGS && x->per_expert[n].gate; n++) {
        snprintf(name, sizeof name, x->per_expert[n].gate, c->layer, 0);
        present = present || h->has_tensor(c->ck, name);
    }
    if (!present && t->optional) return NNT_OK;
    fam_expert *e = calloc((size_t)(s[0] > 0 ? s[0] : 1), sizeof *e);
    if (!e) return h->set_error(c->err, NNT_ERR_OUT_OF_MEMORY, "no memory for the experts of block %d", c->layer);
    nnt_status st = fam_keep_buffer(c->env, e, c->err);
    if (st != NNT_OK) return st;
    *(fam_expert **)((char *)c->block + t->field) = e;
    return fam_bind_experts(c->env, c->ck, c->layer, s[0], s[1], s[2], x->fused_gate_up, x->fused_down, x->per_expert, n,
                            e, c->err);
}

static nnt_status bind_tensor(bind_walk *c, const fam_tensor *t, int depth)
{
    int64_t s[NNT_MAX_DIMS], n;
    tensor_shape(t, &c->f, s, &n);
    if (t->bind == FAM_BIND_NONE) return NNT_OK;
    if (t->bind == FAM_BIND_EXPERTS) return bind_experts(c, t, s);
    char name[256];
    int found = 0;
    nnt_status st = pick_name(c, t, name, &found);
    if (st != NNT_OK || (!found && t->optional)) return st;
    if (!found && t->name[1]) return missing(c, t, depth);
    char *at = (char *)c->block + t->field;
    switch (t->bind) {
    case FAM_BIND_VECTOR: { /* fam_bind_vector, prepared in the table's shape */
        float **host = (float **)((char *)c->block + t->host);
        st = fam_vector_f32(c->env, c->ck, name, n, host, c->err);
        if (st != NNT_OK) return st;
        nnt_tensor v = {.dtype = NNT_F32, .ndim = t->ndim, .data = *host};
        memcpy(v.shape, s, sizeof v.shape);
        return fam_prepare(c->env, &v, (nnt_tensor *)at, c->err);
    }
    case FAM_BIND_HOST: return fam_vector_f32(c->env, c->ck, name, n, (float **)at, c->err);
    default:
        if (t->store == FAM_STORE_LINEAR)
            return fam_weight_product(c->env, c->ck, name, t->ndim, s, (nnt_tensor *)at, c->err);
        return fam_weight(c->env, c->ck, name, t->ndim, s, (nnt_tensor *)at, c->err);
    }
}

static int visit_bind(void *ctx, int i)
{
    bind_walk *c = ctx;
    const fam_module *r = &c->a->modules[i];
    if (c->layer < 0 && r->block) return WALK_SKIP;
    c->path[r->depth] = r->native;
    for (int k = 0; k < FAM_MODULE_TENSORS && tensor_used(&r->tensors[k]); k++) {
        const fam_tensor *t = &r->tensors[k];
        if (!has_traits(c->f.traits, t->when, t->unless)) continue;
        c->st = bind_tensor(c, t, r->depth);
        if (c->st != NNT_OK) return WALK_STOP;
    }
    return WALK_ON;
}

nnt_status fam_arch_bind(const fam_env *env, const fam_arch *a, const void *self, const nnt_checkpoint *ck,
                         int layer, void *block, nnt_error *err)
{
    nnt_status st = fam_arch_check(env->core, a, err);
    if (st != NNT_OK) return st;
    int b = block_row(a);
    bind_walk c = {.env = env, .a = a, .ck = ck, .layer = layer < 0 ? -1 : layer, .block = block, .err = err};
    describe(a, self, c.layer, &c.f);
    c.base = c.layer < 0 ? 0 : a->modules[b].depth;
    if (c.layer < 0)
        walk(a, 0, a->n_modules, c.f.traits, visit_bind, &c);
    else
        walk(a, b, subtree_end(a, b), c.f.traits, visit_bind, &c);
    return c.st;
}

const fam_expert_layout fam_experts_block_sparse_moe = {
    .fused_gate_up = "model.layers.%d.mlp.experts.gate_up_proj",
    .fused_down = "model.layers.%d.mlp.experts.down_proj",
    .per_expert = {{.gate = "model.layers.%d.block_sparse_moe.experts.%d.w1.weight",
                    .up = "model.layers.%d.block_sparse_moe.experts.%d.w3.weight",
                    .down = "model.layers.%d.block_sparse_moe.experts.%d.w2.weight"},
                   {.gate = "model.layers.%d.mlp.experts.%d.gate_proj.weight",
                    .up = "model.layers.%d.mlp.experts.%d.up_proj.weight",
                    .down = "model.layers.%d.mlp.experts.%d.down_proj.weight"}},
};

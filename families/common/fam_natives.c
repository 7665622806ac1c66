/* fam_natives.c - the family kit's native module values (nnt_family_kit.h, ABI 3.14): the list
 * of every module's input and output read from the architecture table (a standard value it is,
 * or a value of its own for a linear or norm row under the block row), their description per
 * block, and fam_linear / fam_norm, which run a block's products and emit those values when a
 * request asks for them - so that a family gets its modules' values from its table, not from an
 * emit call written at each product. nnsight reads the same tensors with forward hooks: a
 * module's input is the tensor its forward receives, its output the one it returns. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nnt/nnt_family_kit.h>

#include "fam_internal.h"

typedef struct native_entry {
    int row, io, block;
    int part; /* 0: the row's own module; 1..6: of a routed experts row, its experts' gate_proj,
               * up_proj, down_proj (each input, output), by routing slot (EXPERT_PARTS) */
    int alias;        /* nnt_value_id (a standard one, or NNT_VALUE_NATIVE + j), or -1: a value of its own */
    const char *same; /* the row's same_in / same_out until resolved into alias */
    char *module, *standard; /* in the list's own block of memory */
} native_entry;

/* One allocation (freed whole by fam_env_release): this header, the n entries, their paths. */
struct fam_natives {
    const fam_arch *a;
    const void *self;
    const char *layers;
    size_t stride;
    int n;
    native_entry e[]; /* n of them, then the paths */
};

#define PATH_MAX_LEN 256 /* a row's path, in either spelling, with its terminator */

/* The values of a routed experts row's experts, in the layout [batch seq top_k features]: slot
 * (b, t, k) holds what expert expert_indices[b, t, k] computed for token (b, t). */
static const struct {
    const char *name;
    int io;
} EXPERT_PARTS[] = {{"gate_proj", 0}, {"gate_proj", 1}, {"up_proj", 0}, {"up_proj", 1}, {"down_proj", 0}, {"down_proj", 1}};
#define N_EXPERT_PARTS 6

static int experts_row(const fam_module *r)
{
    return r->tensors[0].store == FAM_STORE_EXPERTS && r->tensors[0].bind == FAM_BIND_EXPERTS && !r->no_native;
}

/* The component `name` of a module of class cls as the family's RENAME rules spell it. */
static const char *renamed(const fam_arch *a, const char *name, const char *cls)
{
    for (const nnt_rename_rule *r = a->renames; r && r->native; r++)
        if (strcmp(r->native, name) == 0 && (!r->module_class || (cls && strcmp(r->module_class, cls) == 0)))
            return r->standard;
    return name;
}

/* Row i's path from below `top` (the block row or the root) in both spellings. */
static void row_path(const fam_arch *a, int top, int i, char *native, char *standard, size_t n)
{
    int chain[FAM_MAX_DEPTH], k = 0;
    for (int j = i, depth = a->modules[i].depth; j > top && k < FAM_MAX_DEPTH; j--)
        if (a->modules[j].depth == depth) {
            chain[k++] = j;
            depth--;
        }
    native[0] = standard[0] = '\0';
    for (int c = k - 1; c >= 0; c--) {
        const fam_module *r = &a->modules[chain[c]];
        size_t ln = strlen(native), ls = strlen(standard);
        snprintf(native + ln, n - ln, "%s%s", ln ? "." : "", r->native);
        snprintf(standard + ls, n - ls, "%s%s", ls ? "." : "", renamed(a, r->native, r->cls));
    }
}

static int own_kind(const fam_module *r)
{
    return (r->detail == FAM_DETAIL_LINEAR || r->detail == FAM_DETAIL_NORM) && !r->no_native;
}

/* The entries of table a, in order (per row: input, then output): *count of them, and when e is
 * not NULL each written to e[k] with its paths at *pool (advanced past them). Returns the bytes
 * the paths take. */
static size_t list_entries(const fam_arch *a, native_entry *e, char **pool, int *count)
{
    int b = fam_arch_block_row(a), end = b >= 0 ? fam_arch_subtree_end(a, b) : -1, n = 0;
    size_t bytes = 0;
    for (int i = 1; i < a->n_modules; i++) {
        const fam_module *r = &a->modules[i];
        int in_block = i > b && i < end;
        if (i == b) continue; /* the block's own input and output are layer_input and layer_output */
        for (int io = 0; io < 2; io++) {
            int alias = (io ? r->alias_out : r->alias_in) - 1;
            const char *same = io ? r->same_out : r->same_in;
            if (alias < 0 && !same && !(in_block && own_kind(r))) continue;
            char native[PATH_MAX_LEN], standard[PATH_MAX_LEN];
            row_path(a, in_block ? b : 0, i, native, standard, PATH_MAX_LEN);
            size_t ln = strlen(native) + 1, ls = strlen(standard) + 1;
            bytes += ln + ls;
            if (e) {
                e[n] = (native_entry){.row = i, .io = io, .block = in_block, .alias = alias, .same = same};
                e[n].module = memcpy(*pool, native, ln);
                e[n].standard = memcpy(*pool + ln, standard, ls);
                *pool += ln + ls;
            }
            n++;
        }
        if (!(in_block && experts_row(r))) continue;
        for (int p = 0; p < N_EXPERT_PARTS; p++) { /* an expert's inputs read the experts' input */
            char native[PATH_MAX_LEN], standard[PATH_MAX_LEN];
            row_path(a, b, i, native, standard, PATH_MAX_LEN);
            size_t l0 = strlen(native), l1 = strlen(standard);
            snprintf(native + l0, PATH_MAX_LEN - l0, ".%s", EXPERT_PARTS[p].name);
            snprintf(standard + l1, PATH_MAX_LEN - l1, ".%s", EXPERT_PARTS[p].name);
            size_t ln = strlen(native) + 1, ls = strlen(standard) + 1;
            bytes += ln + ls;
            int input = EXPERT_PARTS[p].io == 0 && strcmp(EXPERT_PARTS[p].name, "down_proj") != 0;
            if (e) {
                e[n] = (native_entry){.row = i, .io = EXPERT_PARTS[p].io, .block = 1, .part = p + 1,
                                      .alias = input ? r->alias_in - 1 : -1, .same = input ? r->same_in : NULL};
                e[n].module = memcpy(*pool, native, ln);
                e[n].standard = memcpy(*pool + ln, standard, ls);
                *pool += ln + ls;
            }
            n++;
        }
    }
    *count = n;
    return bytes;
}

nnt_status fam_env_natives(fam_env *env, const fam_arch *a, const void *self, const void *layers, size_t stride,
                           nnt_error *err)
{
    int count;
    size_t bytes = list_entries(a, NULL, NULL, &count);
    if (count > NNT_NATIVE_MAX)
        return env->core->set_error(err, NNT_ERR_INTERNAL, "the table has %d native values; at most %d", count,
                                    NNT_NATIVE_MAX);
    struct fam_natives *n = malloc(sizeof *n + (size_t)count * sizeof n->e[0] + bytes);
    if (!n) return env->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the native values' list");
    *n = (struct fam_natives){.a = a, .self = self, .layers = layers, .stride = stride};
    char *pool = (char *)&n->e[count];
    list_entries(a, n->e, &pool, &n->n);
    /* a same_in / same_out names another module's output / input: that entry's value */
    for (int k = 0; k < n->n; k++) {
        native_entry *e = &n->e[k];
        if (!e->same) continue;
        int found = -1;
        for (int j = 0; j < n->n && found < 0; j++)
            if (n->e[j].block == e->block && n->e[j].io == !e->io && strcmp(n->e[j].module, e->same) == 0) found = j;
        if (found < 0) {
            const char *what = e->io ? "input" : "output";
            nnt_status st = env->core->set_error(err, NNT_ERR_INTERNAL,
                                                 "architecture table: %s's %s is named as %s's %s, which has no value",
                                                 e->module, e->io ? "output" : "input", e->same, what);
            free(n);
            return st;
        }
        e->alias = n->e[found].alias >= 0 ? n->e[found].alias : (int)NNT_VALUE_NATIVE + found;
    }
    free(env->natives);
    env->natives = n;
    return NNT_OK;
}

nnt_status fam_natives_entry(const fam_env *env, int i, nnt_native_info *out)
{
    const struct fam_natives *n = env->natives;
    if (!n || i < 0 || i >= n->n) return NNT_ERR_NOT_FOUND;
    const native_entry *e = &n->e[i];
    const fam_module *r = &n->a->modules[e->row];
    static const char *const AXES[2][2] = {{"[batch seq in_features]", "[batch seq out_features]"},
                                           {"[batch seq features]", "[batch seq features]"}};
    if (e->part) {
        out->module = e->module;
        out->standard = e->standard;
        out->io = e->io;
        out->block = 1;
        out->alias = e->alias;
        out->read_only = e->alias >= 0;
        out->axes = e->part == N_EXPERT_PARTS ? "[batch seq top_k hidden_size]" : "[batch seq top_k intermediate_size]";
        return NNT_OK;
    }
    out->module = e->module;
    out->standard = e->standard;
    out->io = e->io;
    out->block = e->block;
    out->alias = e->alias;
    out->read_only = e->alias >= 0 && e->io == 0 && !r->alias_in_edit;
    out->axes = AXES[r->detail == FAM_DETAIL_NORM][e->io];
    return NNT_OK;
}

/* The width of entry e's value on a block of facts f: a linear weight is [out, in], a norm's
 * gain [features]. */
static int64_t entry_width(const fam_module *r, const native_entry *e, const fam_block_facts *f)
{
    const fam_tensor *t = &r->tensors[0];
    if (r->detail == FAM_DETAIL_LINEAR) return f->size[t->size[e->io ? 0 : 1]];
    return f->size[t->size[0]];
}

/* The fam_moe of block `layer` whose experts row is `row`: a FAM_BIND_EXPERTS tensor binds
 * into a fam_moe's `experts` member (fam_arch_bind), so the struct around it is that fam_moe. */
static const fam_moe *experts_moe(const struct fam_natives *n, int layer, int row)
{
    size_t field = n->a->modules[row].tensors[0].field;
    return (const fam_moe *)(n->layers + (size_t)layer * n->stride + field - offsetof(fam_moe, experts));
}

int fam_natives_value_info(const fam_env *env, int layer, nnt_value_id id, const nnt_call_dims *d,
                           nnt_value_info *out)
{
    if ((int)id < (int)NNT_VALUE_NATIVE) return 0;
    const struct fam_natives *n = env->natives;
    int i = (int)id - (int)NNT_VALUE_NATIVE;
    if (!n || i >= n->n) {
        fam_unserved(out, "no native value of this family has the id %d", (int)id);
        return 1;
    }
    const native_entry *e = &n->e[i];
    const fam_module *r = &n->a->modules[e->row];
    fam_block_facts f;
    if (e->alias >= 0 || !e->block || layer < 0) {
        fam_unserved(out, "%s.%s is served as a standard value", e->standard, e->io ? "output" : "input");
        return 1;
    }
    if (!fam_arch_row_on_block(n->a, n->self, layer, e->row, &f)) {
        fam_unserved(out, "block %d has no module %s", layer, e->standard);
        return 1;
    }
    int64_t B = d ? d->batch : 0, T = d ? d->seq : 0;
    if (e->part == 1 || e->part == 3) {
        fam_unserved(out, "%s.input is the experts' input, which this family does not serve", e->standard);
        return 1;
    }
    if (e->part) { /* [batch seq top_k I or H], from the block's fam_moe */
        const fam_moe *moe = experts_moe(n, layer, e->row);
        int64_t H = f.size[r->tensors[0].size[2]];
        int down_out = e->part == N_EXPERT_PARTS;
        fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)moe->top_k, down_out ? H : (int64_t)moe->intermediate));
        out->axes = down_out ? "[batch seq top_k hidden_size]" : "[batch seq top_k intermediate_size]";
        out->layout = "ExpertActivations";
        return 1;
    }
    fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, entry_width(r, e, &f)));
    return 1;
}

/* The ids of the input and output values of the row whose tensor sits at w inside block
 * layer's struct (-1 each when none, or when the row serves standard values only). */
static void own_ids(const fam_env *env, int layer, const nnt_tensor *w, int *in_id, int *out_id)
{
    *in_id = *out_id = -1;
    const struct fam_natives *n = env->natives;
    if (!n || layer < 0 || !n->layers) return;
    const char *base = n->layers + (size_t)layer * n->stride, *p = (const char *)w;
    if (p < base || p >= base + n->stride) return;
    size_t off = (size_t)(p - base);
    for (int i = 0; i < n->n; i++) {
        const native_entry *e = &n->e[i];
        if (e->alias >= 0 || !e->block || e->part) continue;
        const fam_module *r = &n->a->modules[e->row];
        for (int k = 0; k < FAM_MODULE_TENSORS; k++)
            /* a tensor the family binds itself (FAM_BIND_NONE) counts where its row gives the field */
            if ((r->tensors[k].name[0] || r->tensors[k].experts) &&
                (r->tensors[k].bind != FAM_BIND_NONE || r->tensors[k].field != 0) && r->tensors[k].field == off) {
                *(e->io ? out_id : in_id) = (int)NNT_VALUE_NATIVE + i;
                break;
            }
    }
}

/* When the run asks for value id of block layer: x [M, W] emitted as [batch, seq, W] - a copy
 * in run's arena when copy (an input: an edit must reach this product alone), x itself
 * otherwise; *use then points at what the product reads. */
static nnt_status emit_native(const fam_env *env, nnt_run *run, int id, int layer, const nnt_call_dims *dims,
                              const nnt_tensor *x, int copy, nnt_tensor *held, const nnt_tensor **use,
                              nnt_error *err)
{
    *use = x;
    if (id < 0 || !env->core->wants(run, (nnt_value_id)id, layer)) return NNT_OK;
    int64_t B = dims->batch, T = dims->seq, W = x->shape[x->ndim - 1];
    if (x->ndim != 2 || x->shape[0] != B * T)
        return env->core->set_error(err, NNT_ERR_PLUGIN,
                                    "native value %d of block %d: the product runs on %lld rows, not the call's "
                                    "%lld tokens, so it has no [batch, seq, features] value",
                                    id, layer, (long long)x->shape[0], (long long)(B * T));
    nnt_status st;
    if (copy) {
        if ((st = fam_alloc(env, run, x->dtype, held, err, NNT_SHAPE(B * T, W))) != NNT_OK ||
            (st = env->be->copy(env->be_ctx, x, held, err)) != NNT_OK)
            return st;
        *use = held;
    }
    nnt_tensor v = fam_view(*use, NNT_SHAPE(B, T, W));
    return env->core->emit(run, (nnt_value_id)id, layer, &v);
}

nnt_status fam_linear(const fam_env *env, nnt_run *run, int layer, const nnt_call_dims *dims, const nnt_tensor *x,
                      const nnt_tensor *w, nnt_tensor *y, nnt_error *err)
{
    int in_id, out_id;
    own_ids(env, layer, w, &in_id, &out_id);
    nnt_tensor held;
    const nnt_tensor *use = x, *dummy;
    nnt_status st;
    if ((st = emit_native(env, run, in_id, layer, dims, x, 1, &held, &use, err)) != NNT_OK) return st;
    if ((st = env->be->linear(env->be_ctx, use, w, y, err)) != NNT_OK) return st;
    return emit_native(env, run, out_id, layer, dims, y, 0, &held, &dummy, err);
}

nnt_status fam_norm(const fam_env *env, nnt_run *run, int layer, const nnt_call_dims *dims, const nnt_tensor *x,
                    const nnt_tensor *gain, float eps, nnt_tensor *y, nnt_error *err)
{
    int in_id, out_id;
    own_ids(env, layer, gain, &in_id, &out_id);
    nnt_tensor held;
    const nnt_tensor *use = x, *dummy;
    nnt_status st;
    if ((st = emit_native(env, run, in_id, layer, dims, x, 1, &held, &use, err)) != NNT_OK) return st;
    if ((st = env->be->rms_norm(env->be_ctx, use, gain, eps, y, err)) != NNT_OK) return st;
    return emit_native(env, run, out_id, layer, dims, y, 0, &held, &dummy, err);
}

int fam_natives_experts(const fam_env *env, nnt_run *run, int layer, const fam_moe *moe, int ids[4])
{
    ids[0] = ids[1] = ids[2] = ids[3] = -1;
    const struct fam_natives *n = env->natives;
    if (!n || layer < 0 || !n->layers) return 0;
    const char *at = (const char *)&moe->experts, *base = n->layers + (size_t)layer * n->stride;
    if (at < base || at >= base + n->stride) return 0;
    size_t off = (size_t)(at - base);
    int any = 0;
    for (int i = 0; i < n->n; i++) {
        const native_entry *e = &n->e[i];
        if (!e->part || e->alias >= 0 || n->a->modules[e->row].tensors[0].field != off) continue;
        /* parts 2, 4, 5, 6: gate_proj.output, up_proj.output, down_proj.input, down_proj.output */
        int k = e->part == 2 ? 0 : e->part == 4 ? 1 : e->part == 5 ? 2 : e->part == 6 ? 3 : -1;
        if (k < 0) continue;
        ids[k] = (int)NNT_VALUE_NATIVE + i;
        any |= env->core->wants(run, (nnt_value_id)ids[k], layer);
    }
    return any;
}

/* checkpoint.c - a Hugging Face checkpoint directory: config.json plus model.safetensors or a
 * sharded model.safetensors.index.json, memory-mapped; tensor look-up by name with shape
 * checks, views of tensors in their stored bytes (encoded weights with their scale companions,
 * see quant.c), and the count of the bytes a model binds. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct nnt_ck_index {
    const char *name; /* owned by the entry */
    int file;
    const nnt_st_entry *entry;
};

static int cmp_index(const void *a, const void *b)
{
    return strcmp(((const struct nnt_ck_index *)a)->name, ((const struct nnt_ck_index *)b)->name);
}

static const struct nnt_ck_index *find(const nnt_checkpoint *ck, const char *name)
{
    struct nnt_ck_index key = {name, 0, NULL};
    return bsearch(&key, ck->index, (size_t)ck->n_index, sizeof key, cmp_index);
}

static nnt_status add_file(nnt_checkpoint *ck, const char *file, nnt_error *err)
{
    for (int i = 0; i < ck->n_files; i++)
        if (strcmp(ck->files[i]->path, file) == 0) return NNT_OK;
    nnt_st_file **grown = realloc(ck->files, (size_t)(ck->n_files + 1) * sizeof *grown);
    if (!grown) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    ck->files = grown;
    nnt_status st = nnt_st_open(file, &ck->files[ck->n_files], err);
    if (st != NNT_OK) return st;
    ck->n_files++;
    return NNT_OK;
}

/* Reads model.safetensors.index.json: opens every shard it names and checks that each tensor
 * the weight_map assigns to a shard is in that shard. Only weight_map is built in memory; the
 * rest of the file is checked for syntax (nnt_json_pick). */
static nnt_status open_sharded(nnt_checkpoint *ck, const char *index_path, nnt_error *err)
{
    static const nnt_json_want want[] = {{"weight_map", NULL}, {NULL, NULL}};
    char *text = NULL;
    size_t len = 0;
    nnt_status read = nnt_read_file(index_path, (size_t)256 << 20, &text, &len, err);
    if (read != NNT_OK) return read;
    cJSON *root = NULL;
    nnt_status st = nnt_json_pick(text, len, want, index_path, &root, err);
    free(text);
    if (st != NNT_OK) return st;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(map)) {
        cJSON_Delete(root);
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: expected an object field 'weight_map'", index_path);
    }
    for (const cJSON *e = map->child; e && st == NNT_OK; e = e->next) {
        if (!cJSON_IsString(e)) {
            st = nnt_err_set(err, NNT_ERR_FORMAT, "%s: weight_map['%s'] is not a file name", index_path, e->string);
            break;
        }
        if (strchr(e->valuestring, '/') || strcmp(e->valuestring, "..") == 0) {
            st = nnt_err_set(err, NNT_ERR_FORMAT, "%s: weight_map['%s'] names '%s', not a file in the directory",
                             index_path, e->string, e->valuestring);
            break;
        }
        char *file = nnt_path_join(ck->dir, e->valuestring);
        if (!file) {
            st = nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
            break;
        }
        st = add_file(ck, file, err);
        if (st == NNT_OK) {
            const nnt_st_file *sf = NULL;
            for (int i = 0; i < ck->n_files; i++)
                if (strcmp(ck->files[i]->path, file) == 0) sf = ck->files[i];
            if (!sf || !nnt_st_find(sf, e->string))
                st = nnt_err_set(err, NNT_ERR_NOT_FOUND,
                                 "%s: weight_map puts tensor '%s' in %s, which does not hold it",
                                 index_path, e->string, file);
        }
        free(file);
    }
    cJSON_Delete(root);
    return st;
}

static nnt_status build_index(nnt_checkpoint *ck, nnt_error *err)
{
    int total = 0;
    for (int f = 0; f < ck->n_files; f++) total += ck->files[f]->n_entries;
    ck->index = calloc((size_t)(total ? total : 1), sizeof *ck->index);
    if (!ck->index) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    for (int f = 0; f < ck->n_files; f++)
        for (int i = 0; i < ck->files[f]->n_entries; i++) {
            struct nnt_ck_index *x = &ck->index[ck->n_index++];
            x->name = ck->files[f]->entries[i].name;
            x->file = f;
            x->entry = &ck->files[f]->entries[i];
        }
    qsort(ck->index, (size_t)ck->n_index, sizeof *ck->index, cmp_index);
    for (int i = 1; i < ck->n_index; i++)
        if (strcmp(ck->index[i].name, ck->index[i - 1].name) == 0)
            return nnt_err_set(err, NNT_ERR_FORMAT, "tensor '%s' appears in both %s and %s",
                               ck->index[i].name, ck->files[ck->index[i - 1].file]->path,
                               ck->files[ck->index[i].file]->path);
    return NNT_OK;
}

nnt_status nnt_checkpoint_open(const char *dir, nnt_checkpoint **out, nnt_error *err)
{
    *out = NULL;
    nnt_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    ck->dir = nnt_strdup(dir);
    ck->config_path = nnt_path_join(dir, "config.json");
    nnt_status st = nnt_json_load(ck->config_path, &ck->config, err);
    if (st != NNT_OK) goto fail;
    char *index = nnt_path_join(dir, "model.safetensors.index.json");
    char *single = nnt_path_join(dir, "model.safetensors");
    if (nnt_file_exists(index))
        st = open_sharded(ck, index, err);
    else if (nnt_file_exists(single))
        st = add_file(ck, single, err);
    else
        st = nnt_err_set(err, NNT_ERR_IO, "%s: holds neither model.safetensors nor model.safetensors.index.json", dir);
    free(index);
    free(single);
    if (st != NNT_OK) goto fail;
    st = build_index(ck, err);
    if (st != NNT_OK) goto fail;
    *out = ck;
    return NNT_OK;
fail:
    nnt_checkpoint_close(ck);
    return st;
}

nnt_status nnt_checkpoint_open_config(const char *dir, nnt_checkpoint **out, nnt_error *err)
{
    *out = NULL;
    nnt_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    ck->dir = nnt_strdup(dir);
    ck->config_path = nnt_path_join(dir, "config.json");
    nnt_status st = ck->dir && ck->config_path ? nnt_json_load(ck->config_path, &ck->config, err)
                                               : nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    if (st != NNT_OK) {
        nnt_checkpoint_close(ck);
        return st;
    }
    *out = ck;
    return NNT_OK;
}

void nnt_checkpoint_close(nnt_checkpoint *ck)
{
    if (!ck) return;
    for (int i = 0; i < ck->n_files; i++) nnt_st_close(ck->files[i]);
    free(ck->files);
    free(ck->index);
    for (int i = 0; i < ck->n_owned; i++) free(ck->owned[i]);
    free(ck->owned);
    free(ck->bound);
    for (int i = 0; ck->aligned && i < ck->n_index; i++) free(ck->aligned[i]);
    free(ck->aligned);
    nnt_json_free(ck->config);
    free(ck->config_path);
    free(ck->dir);
    free(ck);
}

int nnt_ck_has_tensor(const nnt_checkpoint *ck, const char *name)
{
    return find(ck, name) != NULL;
}

nnt_status nnt_ck_own(nnt_checkpoint *ck, void *p, size_t bytes, nnt_error *err)
{
    if (ck->n_owned == ck->cap_owned) {
        int cap = ck->cap_owned ? ck->cap_owned * 2 : 64;
        void **g = realloc(ck->owned, (size_t)cap * sizeof *g);
        if (!g) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        ck->owned = g;
        ck->cap_owned = cap;
    }
    ck->owned[ck->n_owned++] = p;
    ck->owned_bytes += bytes;
    return NNT_OK;
}

/* Bytes a tensor's start must be aligned to for typed loads of its elements. */
static size_t elem_align(nnt_dtype dt)
{
    int bits = nnt_dtype_bits(dt);
    return bits >= 16 ? (size_t)bits / 8 : 1;
}

/* A view of a tensor's stored bytes. The format lets a header's length be any number, so a
 * tensor of 2-, 4- or 8-byte elements may sit at an address that is not a multiple of its
 * element size; reading it through a float or uint16 pointer would be undefined. Such a tensor
 * is copied once into an aligned buffer the checkpoint owns (its bytes counted as owned, not
 * mapped), and every view of it reads the copy. */
static nnt_status view(nnt_checkpoint *ck, const struct nnt_ck_index *x, nnt_tensor *out, nnt_error *err)
{
    memset(out, 0, sizeof *out);
    out->dtype = x->entry->dtype;
    out->ndim = x->entry->ndim;
    for (int i = 0; i < out->ndim; i++) out->shape[i] = x->entry->shape[i];
    const uint8_t *at = ck->files[x->file]->data + x->entry->begin;
    size_t bytes = (size_t)(x->entry->end - x->entry->begin);
    if ((uintptr_t)at % elem_align(x->entry->dtype) == 0 || bytes == 0) {
        out->data = (void *)at;
        return NNT_OK;
    }
    size_t i = (size_t)(x - ck->index);
    if (!ck->aligned) {
        ck->aligned = calloc((size_t)ck->n_index, sizeof *ck->aligned);
        if (!ck->aligned) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    if (!ck->aligned[i]) {
        void *copy = malloc(bytes); /* malloc's alignment suits every element type */
        if (!copy)
            return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "%s: no memory for an aligned copy of tensor '%s' (%zu bytes)",
                               ck->files[x->file]->path, x->name, bytes);
        memcpy(copy, at, bytes);
        ck->aligned[i] = copy;
        ck->owned_bytes += bytes;
    }
    out->data = ck->aligned[i];
    return NNT_OK;
}

/* Counts a tensor's stored bytes the first time a family binds it. */
static void mark_bound(nnt_checkpoint *ck, const struct nnt_ck_index *x)
{
    if (!x) return;
    size_t i = (size_t)(x - ck->index);
    if (!ck->bound) ck->bound = calloc((size_t)(ck->n_index ? ck->n_index : 1), 1);
    if (!ck->bound || ck->bound[i]) return;
    ck->bound[i] = 1;
    if (!ck->aligned || !ck->aligned[i]) ck->mapped_bytes += x->entry->end - x->entry->begin; /* a copy is owned */
}

nnt_status nnt_ck_lookup(const nnt_checkpoint *ck, const char *name, nnt_tensor *out, const char **file,
                         nnt_error *err)
{
    const struct nnt_ck_index *x = find(ck, name);
    if (!x) return NNT_ERR_NOT_FOUND; /* the caller words the message */
    nnt_status st = view((nnt_checkpoint *)ck, x, out, err); /* an aligned copy is cached in ck */
    if (st != NNT_OK) return st;
    if (file) *file = ck->files[x->file]->path;
    return NNT_OK;
}

void nnt_ck_mark_bound(nnt_checkpoint *ck, const char *name)
{
    mark_bound(ck, find(ck, name));
}

const char *nnt_ck_scale_name(const nnt_checkpoint *ck, const char *name, char *buf, size_t n)
{
    /* "<name>_scale_inv" (DeepSeek-V3 style, Hugging Face's FP8 layout), or "<base>.scale" /
     * "<base>.weight_scale" next to "<base>.weight" (DeepSeek-V4's release and vLLM's names) */
    size_t nl = strlen(name);
    snprintf(buf, n, "%s_scale_inv", name);
    if (find(ck, buf)) return buf;
    if (nl > 7 && strcmp(name + nl - 7, ".weight") == 0) {
        snprintf(buf, n, "%.*s.scale", (int)(nl - 7), name);
        if (find(ck, buf)) return buf;
        snprintf(buf, n, "%.*s.weight_scale", (int)(nl - 7), name);
        if (find(ck, buf)) return buf;
    }
    snprintf(buf, n, "%s_scale_inv", name);
    return NULL;
}

/* The number after a name segment `seg` ("layers", "experts") in a tensor name: e.g. 7 for
 * "model.layers.7.mlp" and seg "layers"; -1 when the segment is absent, -2 when it is followed
 * by a segment that is not a number (a fused tensor such as "experts.gate_up_proj"). */
static long long segment_index(const char *name, const char *seg)
{
    size_t sl = strlen(seg);
    for (const char *p = name; (p = strstr(p, seg)) != NULL; p += sl) {
        if ((p != name && p[-1] != '.') || p[sl] != '.') continue;
        const char *d = p + sl + 1;
        if (*d < '0' || *d > '9') return -2;
        long long v = 0;
        for (; *d >= '0' && *d <= '9'; d++) v = v < 100000000 ? v * 10 + (*d - '0') : v;
        if (*d == '.' || *d == '\0') return v;
        return -2;
    }
    return -1;
}

nnt_status nnt_ck_bound_count(const nnt_checkpoint *ck, const char *key, int64_t value, nnt_error *err)
{
    static const char *const expert_keys[] = {"n_routed_experts", "num_local_experts", "num_experts", NULL};
    int experts = 0;
    for (int i = 0; expert_keys[i]; i++) experts |= strcmp(key, expert_keys[i]) == 0;
    if (!experts && strcmp(key, "num_hidden_layers") != 0) return NNT_OK;
    const char *seg = experts ? "experts" : "layers";
    /* the highest numbered block or expert a tensor names, and the most experts a fused expert
     * tensor [experts, ...] holds */
    long long top = -1, fused = -1;
    const char *top_name = NULL, *fused_name = NULL;
    for (int i = 0; i < ck->n_index; i++) {
        long long k = segment_index(ck->index[i].name, seg);
        if (k >= 0 && k > top) {
            top = k;
            top_name = ck->index[i].name;
        } else if (k == -2 && experts && ck->index[i].entry->ndim >= 3 && ck->index[i].entry->shape[0] > fused) {
            fused = ck->index[i].entry->shape[0];
            fused_name = ck->index[i].name;
        }
    }
    if (top < 0 && fused < 0) return NNT_OK; /* names of another scheme: the family's binding checks them */
    long long have = top + 1 > fused ? top + 1 : fused;
    if (value <= have) return NNT_OK;
    if (!experts)
        return nnt_err_set(err, NNT_ERR_CONFIG,
                           "%s: num_hidden_layers is %lld, but the checkpoint's tensors name blocks 0..%lld only "
                           "(the last: '%s')",
                           ck->config_path, (long long)value, top, top_name);
    if (top + 1 >= fused)
        return nnt_err_set(err, NNT_ERR_CONFIG,
                           "%s: %s is %lld, but the checkpoint's tensors name experts 0..%lld only (the last: '%s')",
                           ck->config_path, key, (long long)value, top, top_name);
    return nnt_err_set(err, NNT_ERR_CONFIG,
                       "%s: %s is %lld, but the checkpoint's fused expert tensor '%s' holds %lld experts",
                       ck->config_path, key, (long long)value, fused_name, fused);
}

nnt_status nnt_ck_check_files(const nnt_checkpoint *ck, nnt_error *err)
{
    for (int i = 0; ck && i < ck->n_files; i++) {
        nnt_status st = nnt_st_check(ck->files[i], err);
        if (st != NNT_OK) return st;
    }
    return NNT_OK;
}

void nnt_ck_memory(const nnt_checkpoint *ck, uint64_t *file_bytes, uint64_t *mapped_bytes, uint64_t *owned_bytes)
{
    uint64_t f = 0;
    for (int i = 0; i < ck->n_files; i++) f += ck->files[i]->map_size;
    if (file_bytes) *file_bytes = f;
    if (mapped_bytes) *mapped_bytes = ck->mapped_bytes;
    if (owned_bytes) *owned_bytes = ck->owned_bytes;
}

const char *nnt_encoding_name(nnt_encoding e)
{
    static const char *const names[NNT_ENC_COUNT] = {"F32", "BF16", "F16", "FP8 e4m3", "FP4 e2m1 (packed)",
                                                      "block scales", "other"};
    return (int)e >= 0 && e < NNT_ENC_COUNT ? names[e] : "?";
}

nnt_status nnt_checkpoint_inspect(nnt_runtime *rt, const char *dir, nnt_checkpoint_summary *out)
{
    if (!rt || !dir || !out) return NNT_ERR_INVALID_ARGUMENT;
    nnt_err_clear(&rt->err);
    memset(out, 0, sizeof *out);
    nnt_checkpoint *ck = NULL;
    nnt_status st = nnt_checkpoint_open(dir, &ck, &rt->err);
    if (st != NNT_OK) return st;
    uint8_t *is_scale = calloc((size_t)(ck->n_index ? ck->n_index : 1), 1);
    if (!is_scale) {
        nnt_checkpoint_close(ck);
        return nnt_err_set(&rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    char buf[512];
    /* first the companions: a tensor whose scales another names */
    for (int i = 0; i < ck->n_index; i++) {
        nnt_dtype dt = ck->index[i].entry->dtype;
        if (dt != NNT_F8_E4M3 && dt != NNT_I8 && dt != NNT_U8 && dt != NNT_F4_E2M1) continue;
        const char *sn = nnt_ck_scale_name(ck, ck->index[i].name, buf, sizeof buf);
        const struct nnt_ck_index *sx = sn ? find(ck, sn) : NULL;
        if (sx) is_scale[sx - ck->index] = 1;
    }
    for (int i = 0; i < ck->n_index; i++) {
        const nnt_st_entry *e = ck->index[i].entry;
        nnt_encoding enc = NNT_ENC_OTHER;
        int scaled = nnt_ck_scale_name(ck, ck->index[i].name, buf, sizeof buf) != NULL;
        if (is_scale[i]) enc = NNT_ENC_SCALES;
        else if (e->dtype == NNT_F32) enc = NNT_ENC_F32;
        else if (e->dtype == NNT_BF16) enc = NNT_ENC_BF16;
        else if (e->dtype == NNT_F16) enc = NNT_ENC_F16;
        else if (e->dtype == NNT_F8_E4M3) enc = NNT_ENC_FP8;
        else if (scaled && (e->dtype == NNT_I8 || e->dtype == NNT_U8 || e->dtype == NNT_F4_E2M1)) enc = NNT_ENC_FP4;
        out->bytes[enc] += e->end - e->begin;
        out->tensors[enc]++;
        out->n_tensors++;
    }
    free(is_scale);
    nnt_ck_memory(ck, &out->file_bytes, NULL, NULL);
    out->n_files = ck->n_files;
    nnt_checkpoint_close(ck);
    return NNT_OK;
}

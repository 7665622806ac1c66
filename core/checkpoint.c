/* checkpoint.c - a Hugging Face checkpoint directory: config.json plus model.safetensors or a
 * sharded model.safetensors.index.json, memory-mapped; tensor look-up by name with shape
 * checks, and FP8 e4m3 block-scaled weights decoded to float32. */
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
 * the weight_map assigns to a shard is in that shard. */
static nnt_status open_sharded(nnt_checkpoint *ck, const char *index_path, nnt_error *err)
{
    FILE *fp = fopen(index_path, "rb");
    if (!fp) return nnt_err_set(err, NNT_ERR_IO, "%s: cannot open", index_path);
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    rewind(fp);
    char *text = size >= 0 ? malloc((size_t)size + 1) : NULL;
    if (!text) {
        fclose(fp);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    size_t got = fread(text, 1, (size_t)size, fp);
    fclose(fp);
    text[got] = '\0';
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) return nnt_err_set(err, NNT_ERR_FORMAT, "%s: malformed JSON", index_path);
    nnt_status st = NNT_OK;
    const cJSON *map = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
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

void nnt_checkpoint_close(nnt_checkpoint *ck)
{
    if (!ck) return;
    for (int i = 0; i < ck->n_files; i++) nnt_st_close(ck->files[i]);
    free(ck->files);
    free(ck->index);
    for (int i = 0; i < ck->n_owned; i++) free(ck->owned[i]);
    free(ck->owned);
    nnt_json_free(ck->config);
    free(ck->config_path);
    free(ck->dir);
    free(ck);
}

int nnt_ck_has_tensor(const nnt_checkpoint *ck, const char *name)
{
    return find(ck, name) != NULL;
}

nnt_status nnt_fp8_block_dequant(const uint8_t *w, int64_t rows, int64_t cols,
                                 const nnt_tensor *scale, int block, float *dst, nnt_error *err)
{
    int64_t sr = (rows + block - 1) / block, sc = (cols + block - 1) / block;
    if (scale->ndim != 2 || scale->shape[0] != sr || scale->shape[1] != sc) {
        char got[64];
        return nnt_err_set(err, NNT_ERR_SHAPE,
                           "block scales have shape %s, a %lldx%lld weight with %dx%d blocks needs [%lld, %lld]",
                           nnt_shape_str(scale, got, sizeof got), (long long)rows, (long long)cols,
                           block, block, (long long)sr, (long long)sc);
    }
    float lut[256];
    for (int i = 0; i < 256; i++) lut[i] = nnt_fp8_e4m3_to_f32((uint8_t)i);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t cb = 0; cb < sc; cb++) {
            int64_t si = (r / block) * sc + cb;
            float s = (float)nnt_tensor_get_f64(scale, si);
            int64_t c0 = cb * block, c1 = c0 + block < cols ? c0 + block : cols;
            for (int64_t c = c0; c < c1; c++) dst[r * cols + c] = lut[w[r * cols + c]] * s;
        }
    }
    return NNT_OK;
}

static nnt_status own(nnt_checkpoint *ck, void *p, nnt_error *err)
{
    if (ck->n_owned == ck->cap_owned) {
        int cap = ck->cap_owned ? ck->cap_owned * 2 : 64;
        void **g = realloc(ck->owned, (size_t)cap * sizeof *g);
        if (!g) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        ck->owned = g;
        ck->cap_owned = cap;
    }
    ck->owned[ck->n_owned++] = p;
    return NNT_OK;
}

static void view(const nnt_checkpoint *ck, const struct nnt_ck_index *x, nnt_tensor *out)
{
    memset(out, 0, sizeof *out);
    out->dtype = x->entry->dtype;
    out->ndim = x->entry->ndim;
    for (int i = 0; i < out->ndim; i++) out->shape[i] = x->entry->shape[i];
    out->data = (void *)(ck->files[x->file]->data + x->entry->begin);
}

/* FP4 e2m1 codes (bit 3 the sign): the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6. Source: OCP
 * Microscaling Formats (MX) v1.0, E2M1. */
float nnt_fp4_e2m1_to_f32(uint8_t code)
{
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float v = mag[code & 7];
    return (code & 8) ? -v : v;
}

nnt_status nnt_fp4_group_dequant(const uint8_t *packed, int64_t rows, int64_t cols, const nnt_tensor *scale, float *dst,
                                 nnt_error *err)
{
    int64_t sc = scale->ndim == 2 ? scale->shape[1] : 0;
    if (scale->ndim != 2 || scale->shape[0] != rows || sc <= 0 || cols % sc) {
        char got[64];
        return nnt_err_set(err, NNT_ERR_SHAPE, "group scales have shape %s; a %lldx%lld FP4 weight needs [%lld, in / group]",
                           nnt_shape_str(scale, got, sizeof got), (long long)rows, (long long)cols, (long long)rows);
    }
    int64_t group = cols / sc;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            uint8_t byte = packed[r * (cols / 2) + c / 2];
            uint8_t code = (c & 1) ? (uint8_t)(byte >> 4) : (uint8_t)(byte & 0xf); /* low nibble: even column */
            dst[r * cols + c] = nnt_fp4_e2m1_to_f32(code) * (float)nnt_tensor_get_f64(scale, r * sc + c / group);
        }
    return NNT_OK;
}

static nnt_status own(nnt_checkpoint *ck, void *p, nnt_error *err);

static nnt_status decode_fp4(nnt_checkpoint *ck, const char *file, const char *name, const nnt_tensor *t,
                             const char *sname, const struct nnt_ck_index *sx, int64_t cols, nnt_tensor *out,
                             nnt_error *err)
{
    nnt_tensor s;
    view(ck, sx, &s);
    int64_t rows = 1;
    for (int i = 0; i < t->ndim - 1; i++) rows *= t->shape[i];
    if (s.ndim != 2 && s.ndim == t->ndim) { /* [lead..., out, groups] -> [rows, groups] */
        s.shape[0] = rows;
        s.shape[1] = s.shape[s.ndim - 1];
        s.ndim = 2;
    }
    float *dst = malloc((size_t)(rows * cols) * sizeof(float));
    if (!dst) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory to decode '%s'", name);
    nnt_status st = nnt_fp4_group_dequant(t->data, rows, cols, &s, dst, err);
    if (st == NNT_OK) st = own(ck, dst, err);
    if (st != NNT_OK) {
        free(dst);
        nnt_err_prefix(err, "%s: '%s' (scales '%s')", file, name, sname);
        return st;
    }
    *out = *t;
    out->dtype = NNT_F32;
    out->shape[t->ndim - 1] = cols;
    out->data = dst;
    return NNT_OK;
}

nnt_status nnt_ck_tensor(const nnt_checkpoint *ck_const, const char *name, int ndim,
                         const int64_t *shape, nnt_tensor *out, nnt_error *err)
{
    nnt_checkpoint *ck = (nnt_checkpoint *)ck_const; /* decoding caches owned buffers */
    const struct nnt_ck_index *x = find(ck, name);
    if (!x) return nnt_err_set(err, NNT_ERR_NOT_FOUND, "%s: the checkpoint has no tensor '%s'", ck->dir, name);
    const char *file = ck->files[x->file]->path;
    nnt_tensor t;
    view(ck, x, &t);
    /* a quantised weight's scales: "<name>_scale_inv" (DeepSeek-V3 style), or "<base>.scale" /
     * "<base>.weight_scale" next to "<base>.weight" (DeepSeek-V4's native names) */
    char sname[512];
    const struct nnt_ck_index *sx = NULL;
    size_t nl = strlen(name);
    snprintf(sname, sizeof sname, "%s_scale_inv", name);
    sx = find(ck, sname);
    if (!sx && nl > 7 && strcmp(name + nl - 7, ".weight") == 0) {
        snprintf(sname, sizeof sname, "%.*s.scale", (int)(nl - 7), name);
        sx = find(ck, sname);
        if (!sx) {
            snprintf(sname, sizeof sname, "%.*s.weight_scale", (int)(nl - 7), name);
            sx = find(ck, sname);
        }
    }
    if (!sx) snprintf(sname, sizeof sname, "%s_scale_inv", name);
    /* FP4 e2m1, two values per byte: stored [..., in / 2], expected [..., in] */
    if ((t.dtype == NNT_I8 || t.dtype == NNT_U8) && sx && ndim > 0 && ndim == t.ndim && t.shape[ndim - 1] * 2 == shape[ndim - 1]) {
        int lead_ok = 1;
        for (int i = 0; i < ndim - 1; i++) lead_ok &= t.shape[i] == shape[i];
        if (lead_ok) return decode_fp4(ck, file, name, &t, sname, sx, shape[ndim - 1], out, err);
    }
    if (ndim > 0 && !nnt_shape_equal(t.ndim, t.shape, ndim, shape)) {
        char got[96], want[96];
        return nnt_err_set(err, NNT_ERR_SHAPE, "%s: tensor '%s' has shape %s, but config.json implies %s",
                           file, name, nnt_shape_str(&t, got, sizeof got),
                           nnt_dims_str(ndim, shape, want, sizeof want));
    }
    switch (t.dtype) {
    case NNT_F32:
    case NNT_BF16:
    case NNT_F16:
    case NNT_I64:
    case NNT_I32:
        *out = t;
        return NNT_OK;
    case NNT_F8_E4M3: break;
    default:
        return nnt_err_set(err, NNT_ERR_SHAPE, "%s: tensor '%s' has dtype %s; expected F32, BF16, F16, F8_E4M3 with block "
                           "scales, or packed FP4 with group scales",
                           file, name, nnt_dtype_name(t.dtype));
    }
    /* FP8: needs its block scales */
    if (!sx)
        return nnt_err_set(err, NNT_ERR_NOT_FOUND, "%s: FP8 tensor '%s' has no companion '%s' holding its block scales",
                           file, name, sname);
    if (t.ndim < 2)
        return nnt_err_set(err, NNT_ERR_SHAPE, "%s: FP8 tensor '%s' has %d dimensions; block scales need at least 2",
                           file, name, t.ndim);
    nnt_tensor s;
    view(ck, sx, &s);
    if (!nnt_dtype_is_float(s.dtype))
        return nnt_err_set(err, NNT_ERR_SHAPE, "%s: scale tensor '%s' has dtype %s; expected a float type",
                           file, sname, nnt_dtype_name(s.dtype));
    int64_t block = 128;
    if (nnt_cfg_has(ck, "quantization_config.weight_block_size")) {
        int64_t bs[2];
        int n = 0;
        nnt_status st = nnt_cfg_int_list(ck, "quantization_config.weight_block_size", NULL, 0, bs, 2, &n, err);
        if (st != NNT_OK) return st;
        if (n != 2 || bs[0] != bs[1] || bs[0] <= 0)
            return nnt_err_set(err, NNT_ERR_UNSUPPORTED, "%s: quantization_config.weight_block_size must be [B, B]",
                               nnt_cfg_path(ck));
        block = bs[0];
    }
    int64_t rows = t.shape[t.ndim - 2], cols = t.shape[t.ndim - 1];
    int64_t lead = 1;
    for (int i = 0; i < t.ndim - 2; i++) lead *= t.shape[i];
    int64_t sr = (rows + block - 1) / block, sc = (cols + block - 1) / block;
    int lead_ok = s.ndim == t.ndim;
    for (int i = 0; lead_ok && i < t.ndim - 2; i++) lead_ok = s.shape[i] == t.shape[i];
    if (!lead_ok || s.shape[s.ndim - 2] != sr || s.shape[s.ndim - 1] != sc) {
        char got[96], w[96];
        return nnt_err_set(err, NNT_ERR_SHAPE,
                           "%s: scale tensor '%s' has shape %s; weight '%s' %s with %lldx%lld blocks needs %lld x %lld blocks",
                           file, sname, nnt_shape_str(&s, got, sizeof got), name,
                           nnt_shape_str(&t, w, sizeof w), (long long)block, (long long)block,
                           (long long)sr, (long long)sc);
    }
    float *dst = malloc((size_t)(lead * rows * cols) * sizeof(float));
    if (!dst) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory to decode '%s'", name);
    for (int64_t l = 0; l < lead; l++) {
        nnt_tensor sl = s;
        sl.ndim = 2;
        sl.shape[0] = sr;
        sl.shape[1] = sc;
        sl.data = (uint8_t *)s.data + (size_t)(l * sr * sc) * nnt_dtype_size(s.dtype);
        nnt_status st = nnt_fp8_block_dequant((const uint8_t *)t.data + l * rows * cols, rows, cols,
                                              &sl, (int)block, dst + l * rows * cols, err);
        if (st != NNT_OK) {
            free(dst);
            nnt_err_prefix(err, "%s: '%s'", file, name);
            return st;
        }
    }
    nnt_status st = own(ck, dst, err);
    if (st != NNT_OK) {
        free(dst);
        return st;
    }
    *out = t;
    out->dtype = NNT_F32;
    out->data = dst;
    return NNT_OK;
}

/* sae_load.c - a sparse autoencoder read from a SAELens folder (cfg.json and
 * sae_weights.safetensors) into float32 weights, each error naming the file and the field; its
 * reference count and settings. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sae_internal.h"

#define SAE_CFG_MAX_BYTES ((size_t)16 << 20)

static void sae_release(nnt_sae *s)
{
    free(s->dir);
    free(s->w_enc);
    free(s->w_dec);
    free(s->b_enc);
    free(s->b_dec);
    free(s->threshold);
    free(s->dec_norm);
    free(s);
}

void nnt_sae_retain(nnt_sae *s)
{
    if (s) __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
}

void nnt_sae_free(nnt_sae *s)
{
    if (s && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0) sae_release(s);
}

const nnt_sae_info *nnt_sae_get_info(const nnt_sae *s)
{
    return s ? &s->info : NULL;
}

/* An integer member of cfg (required, or *out left as it is when absent). */
static nnt_status cfg_int(const cJSON *cfg, const char *file, const char *key, int required, int *out, nnt_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!v)
        return required ? nnt_err_set(err, NNT_ERR_CONFIG, "%s: %s: missing (an integer is needed)", file, key)
                        : NNT_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 || v->valuedouble > 1e9)
        return nnt_err_set(err, NNT_ERR_CONFIG, "%s: %s: expected an integer in 1..1000000000", file, key);
    *out = (int)v->valuedouble;
    return NNT_OK;
}

/* A boolean member of cfg (*out left as it is when absent or null). */
static nnt_status cfg_bool(const cJSON *cfg, const char *file, const char *key, int *out, nnt_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!v || cJSON_IsNull(v)) return NNT_OK;
    if (!cJSON_IsBool(v)) return nnt_err_set(err, NNT_ERR_FORMAT, "%s: %s: expected true or false", file, key);
    *out = cJSON_IsTrue(v);
    return NNT_OK;
}

/* A string member of cfg: *out the string (owned by cfg), or def when absent or null. */
static nnt_status cfg_string(const cJSON *cfg, const char *file, const char *key, int required, const char *def,
                             const char **out, nnt_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    *out = def;
    if (!v || cJSON_IsNull(v))
        return required ? nnt_err_set(err, NNT_ERR_CONFIG, "%s: %s: missing (a string is needed)", file, key) : NNT_OK;
    if (!cJSON_IsString(v)) return nnt_err_set(err, NNT_ERR_FORMAT, "%s: %s: expected a string", file, key);
    *out = v->valuestring;
    return NNT_OK;
}

/* The settings of cfg.json (at file) into s->info. */
static nnt_status read_cfg(const cJSON *cfg, const char *file, nnt_sae *s, nnt_error *err)
{
    nnt_sae_info *in = &s->info;
    const char *arch, *norm, *reshape;
    nnt_status st = cfg_string(cfg, file, "architecture", 1, NULL, &arch, err);
    if (st == NNT_OK) st = cfg_int(cfg, file, "d_in", 1, &in->d_in, err);
    if (st == NNT_OK) st = cfg_int(cfg, file, "d_sae", 1, &in->d_sae, err);
    in->apply_b_dec_to_input = 1;
    if (st == NNT_OK) st = cfg_bool(cfg, file, "apply_b_dec_to_input", &in->apply_b_dec_to_input, err);
    if (st == NNT_OK) st = cfg_bool(cfg, file, "rescale_acts_by_decoder_norm", &in->rescale_by_decoder_norm, err);
    if (st == NNT_OK) st = cfg_string(cfg, file, "normalize_activations", 0, "none", &norm, err);
    if (st == NNT_OK) st = cfg_string(cfg, file, "reshape_activations", 0, "none", &reshape, err);
    if (st != NNT_OK) return st;
    if (!strcmp(arch, "standard"))
        in->arch = NNT_SAE_STANDARD;
    else if (!strcmp(arch, "jumprelu"))
        in->arch = NNT_SAE_JUMPRELU;
    else if (!strcmp(arch, "topk"))
        in->arch = NNT_SAE_TOPK;
    else
        return nnt_err_set(err, NNT_ERR_UNSUPPORTED,
                           "%s: architecture: \"%s\" is not one nnt runs (\"standard\", \"jumprelu\", \"topk\")", file,
                           arch);
    if (in->arch == NNT_SAE_TOPK) {
        if ((st = cfg_int(cfg, file, "k", 1, &in->k, err)) != NNT_OK) return st;
        if (in->k > in->d_sae)
            return nnt_err_set(err, NNT_ERR_CONFIG, "%s: k: %d features kept of d_sae %d", file, in->k, in->d_sae);
    } else {
        in->rescale_by_decoder_norm = 0; /* a topk setting */
    }
    if (!strcmp(norm, "none"))
        in->norm = NNT_SAE_NORM_NONE;
    else if (!strcmp(norm, "expected_average_only_in"))
        in->norm = NNT_SAE_NORM_EXPECTED_AVERAGE;
    else if (!strcmp(norm, "constant_norm_rescale"))
        in->norm = NNT_SAE_NORM_CONSTANT;
    else if (!strcmp(norm, "layer_norm"))
        in->norm = NNT_SAE_NORM_LAYER;
    else
        return nnt_err_set(
            err, NNT_ERR_UNSUPPORTED,
            "%s: normalize_activations: \"%s\" is not one nnt runs (\"none\", \"expected_average_only_in\", "
            "\"constant_norm_rescale\", \"layer_norm\")",
            file, norm);
    if (strcmp(reshape, "none") != 0)
        return nnt_err_set(err, NNT_ERR_UNSUPPORTED,
                           "%s: reshape_activations: \"%s\" is not supported (nnt attaches an SAE to a [batch seq d] "
                           "value as it is)",
                           file, reshape);
    return NNT_OK;
}

/* Tensor `name` of f, of shape [d0] (d1 0) or [d0, d1], as new float32 memory in *out. */
static nnt_status read_weight(const nnt_st_file *f, const char *name, int64_t d0, int64_t d1, float **out,
                              nnt_error *err)
{
    const nnt_st_entry *e = nnt_st_find(f, name);
    if (!e) return nnt_err_set(err, NNT_ERR_NOT_FOUND, "%s: tensor '%s' is missing", f->path, name);
    int64_t want[2] = {d0, d1};
    char got[96], wanted[96];
    if (!nnt_shape_equal(e->ndim, e->shape, d1 ? 2 : 1, want))
        return nnt_err_set(err, NNT_ERR_SHAPE, "%s: tensor '%s' has shape %s, cfg.json's d_in and d_sae make it %s",
                           f->path, name, nnt_dims_str(e->ndim, e->shape, got, sizeof got),
                           nnt_dims_str(d1 ? 2 : 1, want, wanted, sizeof wanted));
    if (!nnt_dtype_is_float(e->dtype))
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: tensor '%s' is %s; a float dtype is needed", f->path, name,
                           nnt_dtype_name(e->dtype));
    int64_t n = d0 * (d1 ? d1 : 1);
    if (!(*out = malloc((size_t)n * sizeof **out)))
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for %s's '%s'", f->path, name);
    nnt_status st = nnt_convert(f->data + e->begin, e->dtype, *out, NNT_F32, n, err);
    if (st == NNT_OK) st = nnt_st_check(f, err);
    return st;
}

static nnt_status read_weights(const char *file, nnt_sae *s, nnt_error *err)
{
    nnt_st_file *f = NULL;
    nnt_status st = nnt_st_open(file, &f, err);
    if (st != NNT_OK) return st;
    int64_t D = s->info.d_in, F = s->info.d_sae;
    st = read_weight(f, "W_enc", D, F, &s->w_enc, err);
    if (st == NNT_OK) st = read_weight(f, "W_dec", F, D, &s->w_dec, err);
    if (st == NNT_OK) st = read_weight(f, "b_enc", F, 0, &s->b_enc, err);
    if (st == NNT_OK) st = read_weight(f, "b_dec", D, 0, &s->b_dec, err);
    if (st == NNT_OK && s->info.arch == NNT_SAE_JUMPRELU) st = read_weight(f, "threshold", F, 0, &s->threshold, err);
    nnt_st_close(f);
    if (st != NNT_OK || !s->info.rescale_by_decoder_norm) return st;
    if (!(s->dec_norm = malloc((size_t)F * sizeof *s->dec_norm)))
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the decoder's norms");
    for (int64_t j = 0; j < F; j++) {
        double sum = 0;
        for (int64_t i = 0; i < D; i++) sum += (double)s->w_dec[j * D + i] * s->w_dec[j * D + i];
        s->dec_norm[j] = (float)sqrt(sum);
    }
    return NNT_OK;
}

nnt_status nnt_sae_load_err(const char *dir, nnt_sae **out, nnt_error *err)
{
    *out = NULL;
    nnt_sae *s = calloc(1, sizeof *s);
    char *cfg_path = nnt_path_join(dir, "cfg.json"), *w_path = nnt_path_join(dir, "sae_weights.safetensors");
    char *text = NULL;
    cJSON *cfg = NULL;
    nnt_status st = s && cfg_path && w_path && (s->dir = nnt_strdup(dir))
                        ? NNT_OK
                        : nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for an SAE");
    if (st == NNT_OK) st = nnt_read_file(cfg_path, SAE_CFG_MAX_BYTES, &text, NULL, err);
    if (st == NNT_OK && !cJSON_IsObject(cfg = cJSON_Parse(text)))
        st = nnt_err_set(err, NNT_ERR_FORMAT, "%s: not a JSON object", cfg_path);
    if (st == NNT_OK) st = read_cfg(cfg, cfg_path, s, err);
    if (st == NNT_OK) st = read_weights(w_path, s, err);
    cJSON_Delete(cfg);
    free(text);
    free(cfg_path);
    free(w_path);
    if (st != NNT_OK) {
        if (s) sae_release(s);
        return st;
    }
    s->info.dir = s->dir;
    s->refs = 1;
    *out = s;
    return NNT_OK;
}

nnt_status nnt_sae_load(nnt_runtime *rt, const char *dir, nnt_sae **out)
{
    if (out) *out = NULL;
    if (!rt || !dir || !out) return NNT_ERR_INVALID_ARGUMENT;
    nnt_err_clear(&rt->err);
    NNT_GUARDED(rt, "nnt_sae_load", nnt_sae_load_err(dir, out, &rt->err));
}

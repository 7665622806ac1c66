/* request_tensor.c - a request's "tensor" fields: a tensor of a safetensors file ({"file",
 * "key"}), of the attachment handed in beside the document ({"key"}), or given inline
 * ({"dtype", "shape", "data"}), each read into a host copy the request owns. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "request_internal.h"

#define BF16_MAX 3.3895313892515355e38 /* the largest finite bfloat16 (0x7f7f) */
#define F16_MAX 65504.0                /* the largest finite binary16 */

void req_tensor_free(req_tensor *t)
{
    if (!t) return;
    nnt_tensor_free(&t->t);
    free(t->file);
    free(t->key);
    memset(t, 0, sizeof *t);
}

/* The dtypes a request's tensors take (the ones an inline tensor can spell exactly). */
static int dtype_allowed(nnt_dtype d)
{
    return d == NNT_F32 || d == NNT_F16 || d == NNT_BF16 || d == NNT_F64 || d == NNT_I32 || d == NNT_I64;
}

/* "'a', 'b', ... (N in all)": the tensors of f, for messages. */
static const char *entry_list(const nnt_st_file *f, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < f->n_entries && i < 8 && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s'%s'", i ? ", " : "", f->entries[i].name);
    if (f->n_entries == 0) snprintf(buf, n, "no tensor");
    else if (f->n_entries > 8 && k < n) snprintf(buf + k, n - k, ", ... (%d in all)", f->n_entries);
    return buf;
}

/* Copies tensor `key` (NULL: the only one) of f - a file or the attachment, `what` in messages -
 * into t->t. */
static nnt_status take_entry(const req_ctx *c, const nnt_st_file *f, const char *key, const char *field,
                             const char *what, req_tensor *t)
{
    char list[512];
    const nnt_st_entry *e = NULL;
    if (key && !(e = nnt_st_find(f, key)))
        return req_fail(c, NNT_ERR_NOT_FOUND, field, "no tensor '%s' in %s; it holds %s", key, what,
                        entry_list(f, list, sizeof list));
    if (!key && f->n_entries != 1)
        return req_fail(c, NNT_ERR_INVALID_ARGUMENT, field, "%s holds %s; name the one to use with \"key\"", what,
                        entry_list(f, list, sizeof list));
    if (!e) e = &f->entries[0];
    if (!dtype_allowed(e->dtype))
        return req_fail(c, NNT_ERR_UNSUPPORTED, field, "'%s' of %s is %s; a request's tensors are F32, F16, BF16, F64, "
                        "I32 or I64", e->name, what, nnt_dtype_name(e->dtype));
    if (nnt_tensor_alloc(&t->t, e->dtype, e->ndim, e->shape) != NNT_OK)
        return req_fail(c, NNT_ERR_OUT_OF_MEMORY, field, "no memory for '%s'", e->name);
    if (e->end > e->begin) memcpy(t->t.data, f->data + e->begin, e->end - e->begin);
    return NNT_OK;
}

/* {"file": F, "key": K?}: F resolved against the document's folder. */
static nnt_status from_file(const req_ctx *c, const cJSON *v, const char *field, req_tensor *t)
{
    char f[REQ_FIELD_MAX], fk[REQ_FIELD_MAX];
    nnt_status st = req_string(c, v, field, "file", 1, &t->file);
    if (st == NNT_OK) st = req_string(c, v, field, "key", 0, &t->key);
    if (st != NNT_OK) return st;
    req_field(f, field, "file");
    if ((st = req_may_name_files(c, f)) != NNT_OK) return st;
    if (!*t->file) return req_fail(c, NNT_ERR_INVALID_ARGUMENT, f, "expected a file name, got \"\"");
    char *path = t->file[0] != '/' && c->base_dir ? nnt_path_join(c->base_dir, t->file) : nnt_strdup(t->file);
    if (!path) return req_fail(c, NNT_ERR_OUT_OF_MEMORY, f, "no memory");
    nnt_st_file *file = NULL;
    st = nnt_st_open(path, &file, c->err);
    if (st != NNT_OK) {
        char msg[NNT_ERROR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", c->err->msg);
        free(path);
        return req_fail(c, st, f, "%s", msg);
    }
    st = take_entry(c, file, t->key, t->key ? req_field(fk, field, "key") : f, path, t);
    nnt_st_close(file);
    free(path);
    t->source = REQ_TENSOR_FILE;
    return st;
}

/* {"key": K}: a tensor of the attachment. */
static nnt_status from_attachment(const req_ctx *c, const cJSON *v, const char *field, req_tensor *t)
{
    char f[REQ_FIELD_MAX];
    nnt_status st = req_string(c, v, field, "key", 1, &t->key);
    if (st != NNT_OK) return st;
    req_field(f, field, "key");
    t->source = REQ_TENSOR_KEY;
    if (!c->attachment)
        return req_fail(c, NNT_ERR_NOT_FOUND, f, "'%s' names a tensor of the attachment, but the request came without "
                        "one (nnt_request_source.tensors)", t->key);
    return take_entry(c, c->attachment, t->key, f, "the attachment", t);
}

/* The shape of an inline tensor: 0..NNT_MAX_DIMS integers whose product *numel fits. */
static nnt_status inline_shape(const req_ctx *c, const cJSON *v, const char *field, int *ndim, int64_t *shape,
                               int64_t *numel)
{
    char f[REQ_FIELD_MAX], fi[REQ_FIELD_MAX], got[80];
    const cJSON *s = req_member(v, "shape");
    req_field(f, field, "shape");
    if (!s) return req_fail(c, NNT_ERR_FORMAT, f, "missing (expected an array of extents)");
    if (!cJSON_IsArray(s)) return req_fail(c, NNT_ERR_FORMAT, f, "expected an array of extents, got %s", req_got(s, got, sizeof got));
    *ndim = cJSON_GetArraySize(s);
    if (*ndim > NNT_MAX_DIMS) return req_fail(c, NNT_ERR_FORMAT, f, "%d axes; a tensor has at most %d", *ndim, NNT_MAX_DIMS);
    *numel = 1;
    int k = 0;
    for (const cJSON *e = s->child; e; e = e->next, k++) {
        long long x;
        nnt_status st = req_int_value(c, e, req_index(fi, f, k), 0, (long long)REQ_EXACT_MAX, &x);
        if (st != NNT_OK) return st;
        shape[k] = x;
        if (*numel >= 0 && __builtin_mul_overflow(*numel, (int64_t)x, numel)) *numel = -1; /* more than any data */
    }
    return NNT_OK;
}

/* Entry x of an inline tensor of dtype d checked against the dtype's range; stored at i. */
static nnt_status inline_entry(const req_ctx *c, const cJSON *e, const char *field, nnt_tensor *t, int64_t i)
{
    char got[80];
    nnt_dtype d = t->dtype;
    if (d == NNT_I32 || d == NNT_I64) {
        long long x;
        nnt_status st = req_int_value(c, e, field, d == NNT_I32 ? -2147483648LL : -(long long)REQ_EXACT_MAX,
                                      d == NNT_I32 ? 2147483647LL : (long long)REQ_EXACT_MAX, &x);
        if (st != NNT_OK) return st;
        if (d == NNT_I32) ((int32_t *)t->data)[i] = (int32_t)x;
        else ((int64_t *)t->data)[i] = (int64_t)x;
        return NNT_OK;
    }
    double lim = d == NNT_F32 ? FLT_MAX : d == NNT_F16 ? F16_MAX : d == NNT_BF16 ? BF16_MAX : DBL_MAX;
    if (!cJSON_IsNumber(e)) return req_fail(c, NNT_ERR_FORMAT, field, "expected a number, got %s", req_got(e, got, sizeof got));
    double x = e->valuedouble;
    if (!isfinite(x) || fabs(x) > lim)
        return req_fail(c, NNT_ERR_INVALID_ARGUMENT, field, "expected a finite %s number (|x| <= %g), got %s",
                        nnt_dtype_name(d), lim, req_got(e, got, sizeof got));
    if (d == NNT_F32) ((float *)t->data)[i] = (float)x;
    else if (d == NNT_F64) ((double *)t->data)[i] = x;
    else if (d == NNT_F16) ((uint16_t *)t->data)[i] = nnt_f32_to_f16((float)x);
    else ((uint16_t *)t->data)[i] = nnt_f32_to_bf16((float)x);
    return NNT_OK;
}

/* {"dtype": D, "shape": [...], "data": [...]}: data flat, row-major, numel(shape) entries. */
static nnt_status from_inline(const req_ctx *c, const cJSON *v, const char *field, req_tensor *t)
{
    char f[REQ_FIELD_MAX], fi[REQ_FIELD_MAX], got[80];
    char *dname = NULL;
    nnt_status st = req_string(c, v, field, "dtype", 1, &dname);
    if (st != NNT_OK) return st;
    nnt_dtype d = nnt_dtype_from_name(dname);
    free(dname);
    if (!dtype_allowed(d))
        return req_fail(c, NNT_ERR_INVALID_ARGUMENT, req_field(f, field, "dtype"),
                        "expected one of \"F32\", \"F16\", \"BF16\", \"F64\", \"I32\", \"I64\", got %s",
                        req_got(req_member(v, "dtype"), got, sizeof got));
    int ndim = 0;
    int64_t shape[NNT_MAX_DIMS] = {0}, numel = 0;
    if ((st = inline_shape(c, v, field, &ndim, shape, &numel)) != NNT_OK) return st;
    const cJSON *data = req_member(v, "data");
    req_field(f, field, "data");
    if (!data) return req_fail(c, NNT_ERR_FORMAT, f, "missing (expected an array of numbers)");
    if (!cJSON_IsArray(data)) return req_fail(c, NNT_ERR_FORMAT, f, "expected an array of numbers, got %s", req_got(data, got, sizeof got));
    int64_t count = cJSON_GetArraySize(data);
    if (numel < 0) {
        char sh[96];
        return req_fail(c, NNT_ERR_FORMAT, req_field(fi, field, "shape"), "%s holds more entries than a tensor can",
                        nnt_dims_str(ndim, shape, sh, sizeof sh));
    }
    if (count != numel) {
        char sh[96];
        return req_fail(c, NNT_ERR_FORMAT, f, "%lld number%s, but shape %s holds %lld", (long long)count, count == 1 ? "" : "s",
                        nnt_dims_str(ndim, shape, sh, sizeof sh), (long long)numel);
    }
    if (nnt_tensor_alloc(&t->t, d, ndim, shape) != NNT_OK) return req_fail(c, NNT_ERR_OUT_OF_MEMORY, f, "no memory");
    int64_t i = 0;
    for (const cJSON *e = data->child; e && st == NNT_OK; e = e->next, i++) st = inline_entry(c, e, req_index(fi, f, (int)i), &t->t, i);
    t->source = REQ_TENSOR_INLINE;
    return st;
}

nnt_status req_tensor_parse(const req_ctx *c, const cJSON *v, const char *field, req_tensor *t)
{
    static const char *const known[] = {"file", "key", "dtype", "shape", "data"};
    memset(t, 0, sizeof *t);
    nnt_status st = req_members(c, v, field, known, 5);
    if (st != NNT_OK) return st;
    int has_inline = req_member(v, "dtype") || req_member(v, "shape") || req_member(v, "data");
    if (has_inline && (req_member(v, "file") || req_member(v, "key")))
        return req_fail(c, NNT_ERR_FORMAT, field, "a tensor is {\"file\"[, \"key\"]}, {\"key\"} or {\"dtype\", "
                        "\"shape\", \"data\"}; this one mixes them");
    if (has_inline) st = from_inline(c, v, field, t);
    else if (req_member(v, "file")) st = from_file(c, v, field, t);
    else if (req_member(v, "key")) st = from_attachment(c, v, field, t);
    else
        st = req_fail(c, NNT_ERR_FORMAT, field, "expected {\"file\"[, \"key\"]}, {\"key\"} or {\"dtype\", \"shape\", "
                      "\"data\"}, got {}");
    if (st != NNT_OK) req_tensor_free(t);
    return st;
}

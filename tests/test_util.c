/* test_util.c - helpers shared by nnt's CUnit suites. */
#include "test_util.h"

#include "core/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *t_ini(void)
{
    return NNT_TEST_INI;
}

const char *t_fixture(const char *rel, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", NNT_TEST_FIXTURES, rel);
    return buf;
}

const char *t_plugin(const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s.so", NNT_TEST_PLUGIN_DIR, name);
    return buf;
}

const char *t_tmpdir(void)
{
    static char dir[512];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/nnt-test-XXXXXX", NNT_TEST_TMP);
        mkdir(NNT_TEST_TMP, 0755);
        if (!mkdtemp(dir)) snprintf(dir, sizeof dir, "%s", NNT_TEST_TMP);
    }
    return dir;
}

int t_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t n = strlen(text);
    int ok = fwrite(text, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

int t_copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = a ? fopen(to, "wb") : NULL;
    if (!a || !b) {
        if (a) fclose(a);
        return -1;
    }
    char buf[65536];
    size_t n;
    int ok = 1;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) ok &= fwrite(buf, 1, n, b) == n;
    fclose(a);
    return fclose(b) == 0 && ok ? 0 : -1;
}

nnt_runtime *t_runtime(void)
{
    nnt_runtime *rt = NULL;
    nnt_status st = nnt_runtime_open(t_ini(), &rt);
    if (st != NNT_OK) fprintf(stderr, "runtime: %s\n", nnt_last_error(rt));
    CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    return rt;
}

nnt_model *t_model(nnt_runtime *rt, const char *rel)
{
    char dir[512];
    nnt_model *m = NULL;
    T_OK(rt, nnt_model_load(rt, t_fixture(rel, dir, sizeof dir), &m));
    return m;
}

int t_ref_open(t_ref *r, nnt_runtime *rt, const char *fixture_rel)
{
    memset(r, 0, sizeof *r);
    r->rt = rt;
    char dir[512];
    snprintf(r->path, sizeof r->path, "%s/reference.safetensors", t_fixture(fixture_rel, dir, sizeof dir));
    nnt_tensor ids, mask;
    if (nnt_safetensors_read(rt, r->path, "input_ids", &ids) != NNT_OK) return -1;
    if (nnt_safetensors_read(rt, r->path, "attention_mask", &mask) != NNT_OK) {
        nnt_tensor_free(&ids);
        return -1;
    }
    r->batch = (int)ids.shape[0];
    r->seq = (int)ids.shape[1];
    for (int64_t i = 0; i < nnt_tensor_numel(&ids) && i < 4096; i++) {
        r->ids[i] = (int32_t)nnt_tensor_get_f64(&ids, i);
        r->mask[i] = (int32_t)nnt_tensor_get_f64(&mask, i);
    }
    nnt_tensor_free(&ids);
    nnt_tensor_free(&mask);
    return 0;
}

int t_ref_get(const t_ref *r, const char *key, nnt_tensor *out)
{
    return nnt_safetensors_read(r->rt, r->path, key, out) == NNT_OK ? 0 : -1;
}

double t_rel_err(const nnt_tensor *a, const nnt_tensor *b, const unsigned char *sel)
{
    if (a->ndim != b->ndim) return -1;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return -1;
    int64_t n = nnt_tensor_numel(a);
    double scale = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (sel && !sel[i]) continue;
        double y = nnt_tensor_get_f64(b, i);
        if (isfinite(y) && fabs(y) > scale) scale = fabs(y);
    }
    if (scale == 0.0) scale = 1.0;
    for (int64_t i = 0; i < n; i++) {
        if (sel && !sel[i]) continue;
        double x = nnt_tensor_get_f64(a, i), y = nnt_tensor_get_f64(b, i);
        if (isinf(y) || isinf(x)) {
            if (x != y) return -1;
            continue;
        }
        if (isnan(x) || isnan(y)) return -1;
        double e = fabs(x - y) / scale;
        if (e > worst) worst = e;
    }
    return worst;
}

unsigned char *t_sel_tokens(const t_ref *r, const nnt_tensor *v)
{
    int64_t n = nnt_tensor_numel(v), inner = n / ((int64_t)r->batch * r->seq);
    unsigned char *s = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) s[i] = r->mask[i / inner] != 0;
    return s;
}

unsigned char *t_sel_heads(const t_ref *r, const nnt_tensor *v)
{
    int64_t B = v->shape[0], H = v->shape[1], T = v->shape[2], D = nnt_tensor_numel(v) / (B * H * T);
    unsigned char *s = malloc((size_t)(B * H * T * D));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t d = 0; d < D; d++) s[((b * H + h) * T + t) * D + d] = r->mask[b * r->seq + t] != 0;
    return s;
}

unsigned char *t_sel_pattern(const t_ref *r, const nnt_tensor *v)
{
    int64_t B = v->shape[0], H = v->shape[1], Q = v->shape[2], K = v->shape[3];
    unsigned char *s = malloc((size_t)(B * H * Q * K));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t q = 0; q < Q; q++)
                for (int64_t k = 0; k < K; k++)
                    s[((b * H + h) * Q + q) * K + k] = r->mask[b * r->seq + q] && r->mask[b * r->seq + k];
    return s;
}

int t_rewrite_weights(const char *src, const char *dst, t_tensor_fn fn, void *user, int n_extra,
                      const char *const *extra_names, const nnt_tensor *extra)
{
    nnt_st_file *f;
    nnt_error err = {0};
    if (nnt_st_open(src, &f, &err) != NNT_OK) {
        fprintf(stderr, "t_rewrite_weights: %s\n", err.msg);
        return -1;
    }
    int cap = f->n_entries + n_extra, n = 0, rc = 0;
    char **names = calloc((size_t)cap, sizeof *names);
    nnt_tensor *ts = calloc((size_t)cap, sizeof *ts);
    int *owned = calloc((size_t)cap, sizeof *owned);
    const nnt_tensor **vals = calloc((size_t)cap, sizeof *vals);
    if (!names || !ts || !owned || !vals) rc = -1;
    for (int i = 0; rc == 0 && i < f->n_entries; i++) {
        const nnt_st_entry *e = &f->entries[i];
        nnt_tensor in = {e->dtype, e->ndim, {0}, (void *)(f->data + e->begin), 0};
        for (int d = 0; d < e->ndim; d++) in.shape[d] = e->shape[d];
        char name[256];
        snprintf(name, sizeof name, "%s", e->name);
        ts[n] = in;
        if (fn && !fn(user, name, sizeof name, &in, &ts[n], &owned[n])) continue;
        names[n] = strdup(name);
        vals[n] = &ts[n];
        n++;
    }
    for (int i = 0; rc == 0 && i < n_extra; i++) {
        names[n] = strdup(extra_names[i]);
        ts[n] = extra[i];
        vals[n] = &ts[n];
        n++;
    }
    if (rc == 0 && nnt_st_write(dst, n, (const char *const *)names, vals, NULL, &err) != NNT_OK) {
        fprintf(stderr, "t_rewrite_weights: %s\n", err.msg);
        rc = -1;
    }
    for (int i = 0; i < n; i++) {
        free(names[i]);
        if (owned && owned[i]) nnt_tensor_free(&ts[i]);
    }
    free(names);
    free(ts);
    free(owned);
    free(vals);
    nnt_st_close(f);
    return rc;
}

const char *t_checkpoint_dir(const char *name, const char *fixture_rel, char *buf, size_t n)
{
    char fx[512], src[768], dst[800];
    snprintf(buf, n, "%s/%s", t_tmpdir(), name);
    mkdir(buf, 0755);
    snprintf(src, sizeof src, "%s/config.json", t_fixture(fixture_rel, fx, sizeof fx));
    snprintf(dst, sizeof dst, "%s/config.json", buf);
    if (t_copy_file(src, dst) != 0) fprintf(stderr, "t_checkpoint_dir: cannot copy %s\n", src);
    return buf;
}

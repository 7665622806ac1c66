/* test_util.c - helpers shared by nnt's CUnit suites. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "test_util.h"

#include "core/internal.h"

#include <ftw.h>
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

/* The scratch directory of this process, empty until t_tmpdir first makes it. */
static char scratch[512];

const char *t_tmpdir(void)
{
    char *dir = scratch;
    if (!dir[0]) {
        snprintf(dir, sizeof scratch, "%s/nnt-test-XXXXXX", NNT_TEST_TMP);
        mkdir(NNT_TEST_TMP, 0755);
        if (!mkdtemp(dir)) snprintf(dir, sizeof scratch, "%s", NNT_TEST_TMP);
    }
    return dir;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path) == 0 ? 0 : -1;
}

void t_tmpdir_finish(int keep)
{
    /* Only a directory this process made (never the shared parent it falls back to). */
    if (!scratch[0] || strcmp(scratch, NNT_TEST_TMP) == 0) return;
    if (keep) {
        fprintf(stderr, "scratch files kept in %s\n", scratch);
        return;
    }
    if (nftw(scratch, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "could not remove all of %s\n", scratch);
}

int t_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t n = strlen(text);
    int ok = fwrite(text, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

const char *t_fake_checkpoint(const char *name, const char *arch, char *buf, size_t n)
{
    char path[1024], fx[512], json[256];
    snprintf(buf, n, "%s/%s-ckpt", t_tmpdir(), name);
    mkdir(buf, 0755);
    snprintf(path, sizeof path, "%s/config.json", buf);
    snprintf(json, sizeof json, "{\"architectures\": [\"%s\"], \"model_type\": \"%s\"}\n", arch, name);
    CU_ASSERT_FATAL(t_write_file(path, json) == 0);
    snprintf(path, sizeof path, "%s/model.safetensors", buf);
    unlink(path);
    CU_ASSERT_FATAL(symlink(t_fixture("minimax_m2/fp32/model.safetensors", fx, sizeof fx), path) == 0);
    return buf;
}

/* s without its leading and trailing blanks (in place). */
static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) *--e = '\0';
    return s;
}

const char *t_ini_with(const char *name, const char *section, const char *key, const char *value, char *buf, size_t n)
{
    char base[512];
    snprintf(base, sizeof base, "%s", t_ini());
    char *slash = strrchr(base, '/');
    if (slash) *slash = '\0';
    else snprintf(base, sizeof base, ".");
    snprintf(buf, n, "%s/%s", t_tmpdir(), name);
    FILE *in = fopen(t_ini(), "r"), *out = in ? fopen(buf, "w") : NULL;
    if (!out) {
        if (in) fclose(in);
        return NULL;
    }
    char line[1024], current[256] = "";
    int placed = key == NULL;
    while (fgets(line, sizeof line, in)) {
        char copy[1024];
        snprintf(copy, sizeof copy, "%s", line);
        char *t = trim(copy);
        if (*t == '[') {
            char *end = strchr(t, ']');
            snprintf(current, sizeof current, "%.*s", end ? (int)(end - t - 1) : 0, t + 1);
            fputs(line, out);
            if (!placed && strcmp(current, section) == 0) {
                fprintf(out, "%s = %s\n", key, value);
                placed = 1;
            }
            continue;
        }
        char *eq = *t && *t != ';' && *t != '#' ? strchr(t, '=') : NULL;
        if (!eq) {
            fputs(line, out);
            continue;
        }
        *eq = '\0';
        char *k = trim(t), *v = eq + 1;
        char *comment = strchr(v, ';');
        if (comment) *comment = '\0';
        v = trim(v);
        if (key && strcmp(current, section) == 0 && strcmp(k, key) == 0) continue; /* replaced above */
        if (strcmp(current, "plugins") == 0 && (strcmp(k, "dir") == 0 || strcmp(k, "file") == 0) && *v != '/')
            fprintf(out, "%s = %s/%s\n", k, base, v);
        else
            fputs(line, out);
    }
    if (!placed) fprintf(out, "\n[%s]\n%s = %s\n", section, key, value);
    fclose(in);
    return fclose(out) == 0 ? buf : NULL;
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

nnt_plugin *t_cpu_backend(nnt_runtime *rt)
{
    for (int i = 0; rt && i < rt->plugins.n; i++) {
        nnt_plugin *p = rt->plugins.items[i];
        if (p->kind == NNT_PLUGIN_BACKEND && strcmp(p->backend->header.name, "cpu") == 0 && p->be_ctx) return p;
    }
    return NULL;
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
    size_t n = strlen(fixture_rel);
    if (n > 12 && strcmp(fixture_rel + n - 12, ".safetensors") == 0) /* a named reference file */
        snprintf(r->path, sizeof r->path, "%s", t_fixture(fixture_rel, dir, sizeof dir));
    else
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
                for (int64_t d = 0; d < D; d++) /* key axes may run past the tokens (compressed entries) */
                    s[((b * H + h) * T + t) * D + d] = t >= r->seq || r->mask[b * r->seq + t] != 0;
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
                    s[((b * H + h) * Q + q) * K + k] = r->mask[b * r->seq + q] && (k >= r->seq || r->mask[b * r->seq + k]);
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
        nnt_tensor in = {.dtype = e->dtype, .ndim = e->ndim, .data = (void *)(f->data + e->begin)};
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

/* ---- reference comparisons ---- */

static int skip_key(const char *k)
{
    if (strcmp(k, "input_ids") == 0 || strcmp(k, "attention_mask") == 0) return 1;
    if (strncmp(k, "bf16_compute.", 13) == 0) return 1;
    size_t n = strlen(k);
    if (n > 18 && strcmp(k + n - 18, ".indexer_selection") == 0) return 1; /* no standard value: checked by the family's suite */
    return n > 6 && strcmp(k + n - 6, ".sinks") == 0;
}

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

int t_save_reference_values(nnt_runtime *rt, nnt_trace *t, const t_ref *r)
{
    nnt_st_file *f;
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(nnt_st_open(r->path, &f, &err), NNT_OK);
    int n = 0;
    for (int i = 0; i < f->n_entries; i++) {
        if (skip_key(f->entries[i].name)) continue;
        T_OK(rt, nnt_trace_save(t, f->entries[i].name));
        n++;
    }
    nnt_st_close(f);
    return n;
}

nnt_trace *t_run_reference(nnt_runtime *rt, nnt_model *m, const t_ref *r)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    CU_ASSERT(t_save_reference_values(rt, t, r) > 0);
    T_OK(rt, nnt_trace_run(t, r->ids, r->mask, r->batch, r->seq));
    return t;
}

/* expert_indices as sets; expert_weights and expert_outputs aligned to the reference's slots */
static void check_slots(const t_ref *r, const nnt_trace *t, const char *key)
{
    char base[160], ki[200];
    snprintf(base, sizeof base, "%s", key);
    *strrchr(base, '.') = '\0';
    snprintf(ki, sizeof ki, "%s.expert_indices", base);
    nnt_tensor ri, rv;
    CU_ASSERT_FATAL(t_ref_get(r, ki, &ri) == 0 && t_ref_get(r, key, &rv) == 0);
    const nnt_tensor *gi = nnt_trace_get(t, ki), *gv = nnt_trace_get(t, key);
    if (!gi) fprintf(stderr, "\n  %s was not saved (needed to align %s)\n", ki, key);
    CU_ASSERT_FATAL(gi && gv);
    int K = (int)ri.shape[2];
    int64_t inner = nnt_tensor_numel(&rv) / ((int64_t)r->batch * r->seq * K);
    int is_indices = ends_with(key, ".expert_indices");
    double scale = 0, worst = 0;
    int mismatch = 0;
    for (int64_t tok = 0; tok < (int64_t)r->batch * r->seq; tok++) {
        if (!r->mask[tok]) continue;
        for (int s = 0; s < K; s++) {
            int64_t e = (int64_t)nnt_tensor_get_f64(&ri, tok * K + s);
            int found = -1;
            for (int q = 0; q < K; q++)
                if ((int64_t)nnt_tensor_get_f64(gi, tok * K + q) == e) found = q;
            if (found < 0) {
                mismatch++;
                continue;
            }
            if (is_indices) continue;
            for (int64_t j = 0; j < inner; j++) {
                double a = nnt_tensor_get_f64(&rv, (tok * K + s) * inner + j), b = nnt_tensor_get_f64(gv, (tok * K + found) * inner + j);
                scale = fmax(scale, fabs(a));
                worst = fmax(worst, fabs(a - b));
            }
        }
    }
    if (mismatch || worst > T_TOL * scale)
        fprintf(stderr, "\n  %s: %s: %d routing slots differ, relative error %.3g\n", r->path, key, mismatch,
                scale ? worst / scale : worst);
    CU_ASSERT_EQUAL(mismatch, 0);
    CU_ASSERT(worst <= T_TOL * scale);
    nnt_tensor_free(&ri);
    nnt_tensor_free(&rv);
}

void t_check_value(const t_ref *r, const nnt_trace *t, const char *key)
{
    if (ends_with(key, ".expert_indices") || ends_with(key, ".expert_weights") || ends_with(key, ".expert_outputs")) {
        check_slots(r, t, key);
        return;
    }
    nnt_tensor ref;
    if (t_ref_get(r, key, &ref) != 0) {
        fprintf(stderr, "\n  %s lacks %s\n", r->path, key);
        CU_FAIL("reference value missing");
        return;
    }
    const nnt_tensor *got = nnt_trace_get(t, key);
    if (!got) fprintf(stderr, "\n  %s was not saved\n", key);
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    unsigned char *sel = NULL;
    if (ends_with(key, ".attention_scores") || ends_with(key, ".attention_probabilities"))
        sel = t_sel_pattern(r, got);
    else if (strstr(key, "self_attn.attention_queries") || strstr(key, "self_attn.attention_keys") ||
             strstr(key, "self_attn.attention_values"))
        sel = t_sel_heads(r, got);
    else if (strcmp(key, "next_token_probs") != 0 && strcmp(key, "input_size") != 0 && !ends_with(key, ".state_output") &&
             !ends_with(key, ".state_input"))
        sel = t_sel_tokens(r, got);
    double e = t_rel_err(got, &ref, sel);
    if (e < 0 || e > T_TOL) fprintf(stderr, "\n  %s: %s relative error %.3g\n", r->path, key, e);
    CU_ASSERT(e >= 0 && e <= T_TOL);
    free(sel);
    nnt_tensor_free(&ref);
}

int t_check_reference(const t_ref *r, const nnt_trace *t)
{
    nnt_st_file *f;
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(nnt_st_open(r->path, &f, &err), NNT_OK);
    int n = 0;
    for (int i = 0; i < f->n_entries; i++) {
        if (skip_key(f->entries[i].name)) continue;
        t_check_value(r, t, f->entries[i].name);
        n++;
    }
    nnt_st_close(f);
    return n;
}

void t_check_block_sum(const nnt_trace *t, int num_layers, const char *(*mixer_of)(int layer))
{
    char k[160];
    for (int l = 0; l < num_layers; l++) {
        const nnt_tensor *x, *a, *mo, *o;
        snprintf(k, sizeof k, "layers.%d.layer_input", l);
        x = nnt_trace_get(t, k);
        snprintf(k, sizeof k, "layers.%d.%s.attention_output", l, mixer_of ? mixer_of(l) : "self_attn");
        a = nnt_trace_get(t, k);
        snprintf(k, sizeof k, "layers.%d.mlp.mlp_output", l);
        mo = nnt_trace_get(t, k);
        snprintf(k, sizeof k, "layers.%d.layer_output", l);
        o = nnt_trace_get(t, k);
        CU_ASSERT_FATAL(x && a && mo && o);
        double worst = 0, scale = 0;
        for (int64_t i = 0; i < nnt_tensor_numel(o); i++) {
            double out = nnt_tensor_get_f64(o, i);
            scale = fmax(scale, fabs(out));
            worst = fmax(worst, fabs(nnt_tensor_get_f64(x, i) + nnt_tensor_get_f64(a, i) + nnt_tensor_get_f64(mo, i) - out));
        }
        if (worst > 1e-6 * scale) fprintf(stderr, "\n  block %d: block sum off by %.3g of %.3g\n", l, worst, scale);
        CU_ASSERT(worst <= 1e-6 * scale);
        if (l + 1 < num_layers) {
            snprintf(k, sizeof k, "layers.%d.layer_input", l + 1);
            CU_ASSERT(t_rel_err(nnt_trace_get(t, k), o, NULL) == 0.0);
        }
    }
}

void t_check_ablation(nnt_runtime *rt, nnt_model *m, const t_ref *r, int layer)
{
    const nnt_model_info *info = nnt_model_get_info(m);
    int64_t M = (int64_t)r->batch * r->seq, H = info->hidden_size;
    int K = info->top_k;
    char ki[96], kw[96], ko[96];
    snprintf(ki, sizeof ki, "layers.%d.mlp.expert_indices", layer);
    snprintf(kw, sizeof kw, "layers.%d.mlp.expert_weights", layer);
    snprintf(ko, sizeof ko, "layers.%d.mlp.mlp_output", layer);
    nnt_trace *clean;
    T_OK(rt, nnt_trace_new(m, &clean));
    T_OK(rt, nnt_trace_save(clean, ki));
    T_OK(rt, nnt_trace_save(clean, ko));
    T_OK(rt, nnt_trace_run(clean, r->ids, r->mask, r->batch, r->seq));
    const nnt_tensor *idx = nnt_trace_get(clean, ki), *a = nnt_trace_get(clean, ko);
    int chosen_somewhere = 0;
    for (int e = 0; e < info->num_experts; e++) {
        nnt_trace *abl;
        T_OK(rt, nnt_trace_new(m, &abl));
        T_OK(rt, nnt_trace_masked_fill(abl, kw, ki, e, 0.0f));
        T_OK(rt, nnt_trace_save(abl, kw));
        T_OK(rt, nnt_trace_save(abl, ko));
        T_OK(rt, nnt_trace_run(abl, r->ids, r->mask, r->batch, r->seq));
        const nnt_tensor *b = nnt_trace_get(abl, ko), *w = nnt_trace_get(abl, kw);
        int mismatches = 0;
        for (int64_t tok = 0; tok < M; tok++) {
            int chose = 0, changed = 0;
            for (int s = 0; s < K; s++) {
                int hit = (int)nnt_tensor_get_f64(idx, tok * K + s) == e;
                chose |= hit;
                if (hit) CU_ASSERT(nnt_tensor_get_f64(w, tok * K + s) == 0.0);
            }
            for (int64_t h = 0; h < H; h++) changed |= nnt_tensor_get_f64(a, tok * H + h) != nnt_tensor_get_f64(b, tok * H + h);
            mismatches += chose != changed;
            chosen_somewhere |= chose;
        }
        if (mismatches) fprintf(stderr, "\n  block %d expert %d: %d tokens break the ablation property\n", layer, e, mismatches);
        CU_ASSERT_EQUAL(mismatches, 0);
        nnt_trace_free(abl);
    }
    CU_ASSERT(chosen_somewhere);
    nnt_trace_free(clean);
}

/* ---- precision = bf16 ---- */

nnt_runtime *t_runtime_with_precision(const char *family, const char *precision)
{
    char name[160], section[160], ini[768];
    snprintf(name, sizeof name, "precision_%s_%s.ini", family, precision ? precision : "default");
    snprintf(section, sizeof section, "family.%s", family);
    const char *path = t_ini_with(name, section, precision ? "precision" : NULL, precision, ini, sizeof ini);
    CU_ASSERT_PTR_NOT_NULL_FATAL(path);
    nnt_runtime *rt = NULL;
    nnt_status st = nnt_runtime_open(path, &rt);
    if (st != NNT_OK) fprintf(stderr, "\n  %s: %s\n", path, nnt_last_error(rt));
    CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    return rt;
}

double t_rms_real(const t_ref *r, const nnt_tensor *a, const nnt_tensor *b)
{
    unsigned char *sel = t_sel_tokens(r, a);
    double sum = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < nnt_tensor_numel(a); i++) {
        if (!sel[i]) continue;
        double d = nnt_tensor_get_f64(a, i) - (b ? nnt_tensor_get_f64(b, i) : 0.0);
        sum += d * d;
        count++;
    }
    free(sel);
    return count ? sqrt(sum / (double)count) : 0.0;
}

int t_same_inputs(const t_ref *a, const t_ref *b)
{
    size_t n = (size_t)a->batch * (size_t)a->seq;
    return a->batch == b->batch && a->seq == b->seq && memcmp(a->ids, b->ids, n * sizeof *a->ids) == 0 &&
           memcmp(a->mask, b->mask, n * sizeof *a->mask) == 0;
}

int64_t t_index_sets_differ(const t_ref *r, const nnt_tensor *a, const nnt_tensor *b)
{
    int64_t tokens = (int64_t)r->batch * r->seq, K = nnt_tensor_numel(b) / tokens, differ = 0;
    for (int64_t tok = 0; tok < tokens; tok++) {
        if (!r->mask[tok]) continue;
        int missing = 0;
        for (int64_t i = 0; i < K; i++) {
            int found = 0;
            for (int64_t j = 0; j < K; j++)
                found |= nnt_tensor_get_f64(a, tok * K + i) == nnt_tensor_get_f64(b, tok * K + j);
            missing |= !found;
        }
        differ += missing;
    }
    return differ;
}

/* Where a key is listed in the table: its block (-1 before the blocks), then its kind. */
static void bf16_order(const char *k, int *layer, int *kind)
{
    static const char *const kinds[] = {".layer_output", ".attention_output", ".mlp_output", ".router_logits",
                                        ".expert_indices"};
    *layer = strncmp(k, "layers.", 7) == 0 ? atoi(k + 7) : (strcmp(k, "logits") == 0 ? -2 : -1);
    *kind = 5;
    for (int i = 0; i < 5; i++)
        if (ends_with(k, kinds[i])) *kind = i;
}

static int bf16_cmp(const void *pa, const void *pb)
{
    const char *a = *(const char *const *)pa, *b = *(const char *const *)pb;
    int la, ka, lb, kb;
    bf16_order(a, &la, &ka);
    bf16_order(b, &lb, &kb);
    if (la != lb) return la < lb ? -1 : 1;
    if (ka != kb) return ka < kb ? -1 : 1;
    return strcmp(a, b);
}

static int bf16_compared(const char *k)
{
    return strcmp(k, "input_ids") != 0 && strcmp(k, "attention_mask") != 0 && !ends_with(k, ".indexer_selection");
}

static nnt_trace *bf16_run(nnt_runtime *rt, nnt_model *m, const t_ref *r, char *const *keys, int n,
                           const char *const *extra, int n_extra)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    for (int i = 0; i < n; i++) T_OK(rt, nnt_trace_save(t, keys[i]));
    for (int i = 0; i < n_extra; i++) T_OK(rt, nnt_trace_save(t, extra[i]));
    T_OK(rt, nnt_trace_run(t, r->ids, r->mask, r->batch, r->seq));
    return t;
}

void t_bf16_open(t_bf16 *c, const char *family, const char *fixture, const char *ref16, const char *ref32,
                 const char *const *extra, int n_extra)
{
    memset(c, 0, sizeof *c);
    c->rt16 = t_runtime_with_precision(family, "bf16");
    c->rt32 = t_runtime_with_precision(family, NULL);
    c->m16 = t_model(c->rt16, fixture);
    c->m32 = t_model(c->rt32, fixture);
    nnt_memory mem;
    T_OK(c->rt16, nnt_model_memory(c->m16, &mem));
    CU_ASSERT_EQUAL(mem.precision, 1);
    T_OK(c->rt32, nnt_model_memory(c->m32, &mem));
    CU_ASSERT_EQUAL(mem.precision, 0);
    CU_ASSERT_FATAL(t_ref_open(&c->hf16, c->rt16, ref16) == 0);
    CU_ASSERT_FATAL(t_ref_open(&c->hf32, c->rt32, ref32) == 0);
    CU_ASSERT_FATAL(t_same_inputs(&c->hf16, &c->hf32));
    nnt_st_file *f;
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(nnt_st_open(c->hf16.path, &f, &err), NNT_OK);
    c->keys = calloc((size_t)f->n_entries + 1, sizeof *c->keys);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c->keys);
    for (int i = 0; i < f->n_entries; i++)
        if (bf16_compared(f->entries[i].name)) c->keys[c->n++] = strdup(f->entries[i].name);
    nnt_st_close(f);
    qsort(c->keys, (size_t)c->n, sizeof *c->keys, bf16_cmp);
    c->t16 = bf16_run(c->rt16, c->m16, &c->hf16, c->keys, c->n, extra, n_extra);
    c->t32 = bf16_run(c->rt32, c->m32, &c->hf16, c->keys, c->n, extra, n_extra);
}

int t_bf16_report(const t_bf16 *c)
{
    int above = 0;
    fprintf(stderr, "\n  relative RMS over real tokens (denominator: rms of transformers-fp32)\n"
                    "  %-40s %12s %12s %12s\n",
            "value", "nnt16-hf16", "hf16-hf32", "nnt16-nnt32");
    for (int i = 0; i < c->n; i++) {
        const char *k = c->keys[i];
        nnt_tensor y16, y32;
        CU_ASSERT_FATAL(t_ref_get(&c->hf16, k, &y16) == 0);
        if (t_ref_get(&c->hf32, k, &y32) != 0) {
            fprintf(stderr, "\n  %s lacks %s\n", c->hf32.path, k);
            CU_FAIL("float32 reference value missing");
            nnt_tensor_free(&y16);
            continue;
        }
        const nnt_tensor *x16 = nnt_trace_get(c->t16, k), *x32 = nnt_trace_get(c->t32, k);
        CU_ASSERT_FATAL(x16 && x32 && t_rel_err(x16, &y16, NULL) >= 0);
        if (ends_with(k, ".expert_indices")) { /* context: expert choices */
            fprintf(stderr, "  %-40s expert sets differ from transformers-bf16 at %lld real tokens (hf16-hf32: %lld)\n",
                    k, (long long)t_index_sets_differ(&c->hf16, x16, &y16),
                    (long long)t_index_sets_differ(&c->hf16, &y16, &y32));
        } else {
            double denom = t_rms_real(&c->hf16, &y32, NULL);
            double ours = t_rms_real(&c->hf16, x16, &y16) / denom, theirs = t_rms_real(&c->hf16, &y16, &y32) / denom;
            double effect = t_rms_real(&c->hf16, x16, x32) / denom;
            /* logits and each block's output are held to the bound; the rest is printed for context */
            int bound = strcmp(k, "logits") == 0 || ends_with(k, ".layer_output");
            fprintf(stderr, "  %-40s %12.4g %12.4g %12.4g%s\n", k, ours, theirs, effect,
                    bound ? (ours <= theirs ? "" : "  <- above the bound") : "  (not bound)");
            if (bound) {
                CU_ASSERT(ours <= theirs);
                above += !(ours <= theirs);
            }
            /* the setting took effect: bfloat16 moves every value well past float32 noise */
            CU_ASSERT(effect > 1e-4);
        }
        nnt_tensor_free(&y16);
        nnt_tensor_free(&y32);
    }
    return above;
}

void t_bf16_close(t_bf16 *c)
{
    nnt_trace_free(c->t16);
    nnt_trace_free(c->t32);
    for (int i = 0; i < c->n; i++) free(c->keys[i]);
    free(c->keys);
    nnt_model_free(c->m16);
    nnt_model_free(c->m32);
    nnt_runtime_close(c->rt16);
    nnt_runtime_close(c->rt32);
}

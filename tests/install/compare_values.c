/* compare_values.c - compares values in two safetensors files, for tests that have no Python:
 *
 *   compare_values GOT.safetensors WANT.safetensors TOL KEY...
 *
 * For each KEY both files must hold a tensor of the same shape. Float tensors (F32, F64, BF16,
 * F16) match when max |got - want| <= TOL * max |want| over the whole tensor (a relative error
 * measured against the tensor's scale, so values near zero do not need to agree to TOL of
 * themselves); integer tensors (I32, I64, any mix of the two) must be equal. Prints one line per
 * key; exit status 0 when every key matches, 1 otherwise, 2 on a usage or file error.
 * A safetensors file is an 8-byte little-endian header length, a JSON header mapping each name
 * to {"dtype", "shape", "data_offsets": [begin, end]}, then the data; this reader finds a key's
 * entry by its quoted name, which is enough for the files nnt and the safetensors library write. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct file {
    char *header;           /* NUL-terminated JSON */
    unsigned char *data;    /* the bytes after the header */
    uint64_t data_len;
} file;

typedef struct tensor {
    char dtype[8];
    int ndim;
    int64_t shape[8];
    int64_t n;
    const unsigned char *bytes;
} tensor;

static int load(const char *path, file *f)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "compare_values: cannot open %s\n", path);
        return 0;
    }
    unsigned char len8[8];
    uint64_t hl = 0;
    int ok = fread(len8, 1, 8, fp) == 8;
    for (int i = 7; ok && i >= 0; i--) hl = hl << 8 | len8[i];
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    ok = ok && size >= 8 && hl <= (uint64_t)size - 8;
    if (ok) {
        f->header = malloc(hl + 1);
        f->data_len = (uint64_t)size - 8 - hl;
        f->data = malloc(f->data_len ? f->data_len : 1);
        fseek(fp, 8, SEEK_SET);
        ok = f->header && f->data && fread(f->header, 1, hl, fp) == hl && fread(f->data, 1, f->data_len, fp) == f->data_len;
        if (ok) f->header[hl] = 0;
    }
    fclose(fp);
    if (!ok) fprintf(stderr, "compare_values: %s is not a safetensors file\n", path);
    return ok;
}

/* The entry of `key` in f's header, or 0 when absent or malformed. */
static int find(const file *f, const char *key, tensor *t)
{
    char quoted[512];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    const char *p = f->header;
    size_t ql = strlen(quoted);
    for (;;) {
        p = strstr(p, quoted);
        if (!p) return 0;
        const char *q = p + ql;
        while (*q == ' ') q++;
        if (*q == ':') { p = q + 1; break; } /* a key, not a value that happens to match */
        p += ql;
    }
    const char *end = strchr(p, '}');
    if (!end) return 0;
    const char *d = strstr(p, "\"dtype\""), *s = strstr(p, "\"shape\""), *o = strstr(p, "\"data_offsets\"");
    if (!d || !s || !o || d > end || s > end || o > end) return 0;
    d = strchr(d + 7, '"');
    if (!d || sscanf(d + 1, "%7[A-Z0-9_]", t->dtype) != 1) return 0;
    s = strchr(s, '[');
    t->ndim = 0;
    t->n = 1;
    for (s++; *s && *s != ']';) {
        char *next;
        long long v = strtoll(s, &next, 10);
        if (next == s) { s++; continue; }
        if (t->ndim == 8) return 0;
        t->shape[t->ndim++] = v;
        t->n *= v;
        s = next;
    }
    unsigned long long b = 0, e = 0;
    o = strchr(o, '[');
    if (!o || sscanf(o, "[ %llu , %llu ]", &b, &e) != 2 || e < b || e > f->data_len) return 0;
    t->bytes = f->data + b;
    return 1;
}

static int is_int(const char *dt) { return !strcmp(dt, "I32") || !strcmp(dt, "I64"); }

static double at(const tensor *t, int64_t i)
{
    const unsigned char *p = t->bytes;
    if (!strcmp(t->dtype, "F32")) { float v; memcpy(&v, p + 4 * i, 4); return v; }
    if (!strcmp(t->dtype, "F64")) { double v; memcpy(&v, p + 8 * i, 8); return v; }
    if (!strcmp(t->dtype, "I32")) { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    if (!strcmp(t->dtype, "I64")) { int64_t v; memcpy(&v, p + 8 * i, 8); return (double)v; }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    if (!strcmp(t->dtype, "BF16")) { uint32_t u = (uint32_t)h << 16; float v; memcpy(&v, &u, 4); return v; }
    int e = (h >> 10) & 0x1f; /* F16 */
    double m = h & 0x3ff, v = e == 0 ? ldexp(m, -24) : e == 31 ? INFINITY : ldexp(1.0 + m / 1024.0, e - 15);
    return (h & 0x8000) ? -v : v;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: compare_values GOT.safetensors WANT.safetensors TOL KEY...\n");
        return 2;
    }
    file got = {0}, want = {0};
    if (!load(argv[1], &got) || !load(argv[2], &want)) return 2;
    double tol = atof(argv[3]);
    int failed = 0;
    for (int k = 4; k < argc; k++) {
        const char *key = argv[k];
        tensor g, w;
        if (!find(&got, key, &g) || !find(&want, key, &w)) {
            printf("FAIL %s: missing from %s\n", key, find(&got, key, &g) ? argv[2] : argv[1]);
            failed = 1;
            continue;
        }
        int same_shape = g.ndim == w.ndim;
        for (int i = 0; same_shape && i < g.ndim; i++) same_shape = g.shape[i] == w.shape[i];
        if (!same_shape || g.n != w.n) {
            printf("FAIL %s: shapes differ (%d dims, %lld values against %d dims, %lld values)\n", key, g.ndim,
                   (long long)g.n, w.ndim, (long long)w.n);
            failed = 1;
            continue;
        }
        if (is_int(g.dtype) != is_int(w.dtype)) {
            printf("FAIL %s: %s against %s\n", key, g.dtype, w.dtype);
            failed = 1;
            continue;
        }
        if (is_int(w.dtype)) {
            int64_t bad = -1;
            for (int64_t i = 0; i < g.n && bad < 0; i++)
                if (at(&g, i) != at(&w, i)) bad = i;
            if (bad >= 0) {
                printf("FAIL %s: element %lld is %.0f, expected %.0f\n", key, (long long)bad, at(&g, bad), at(&w, bad));
                failed = 1;
            } else {
                printf("ok   %s: %lld integers equal\n", key, (long long)g.n);
            }
            continue;
        }
        double scale = 0, diff = 0;
        for (int64_t i = 0; i < g.n; i++) {
            double a = at(&g, i), b = at(&w, i);
            scale = fmax(scale, fabs(b));
            diff = isnan(a) || isnan(b) ? INFINITY : fmax(diff, fabs(a - b));
        }
        double rel = scale > 0 ? diff / scale : diff;
        int ok = rel <= tol;
        printf("%s %s: max |diff| %.3g, max |want| %.3g, relative %.3g (tolerance %g)\n", ok ? "ok  " : "FAIL", key, diff,
               scale, rel, tol);
        if (!ok) failed = 1;
    }
    free(got.header);
    free(got.data);
    free(want.header);
    free(want.data);
    return failed;
}

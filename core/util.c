/* util.c - small string and file helpers used across libnnt. */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

char *nnt_strdup(const char *s)
{
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

char *nnt_path_join(const char *dir, const char *name)
{
    if (!dir || !*dir || name[0] == '/') return nnt_strdup(name);
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

char *nnt_dirname(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return nnt_strdup(".");
    if (slash == path) return nnt_strdup("/");
    size_t n = (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

int nnt_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

nnt_status nnt_read_file(const char *path, size_t max_bytes, char **text, size_t *len, nnt_error *err)
{
    *text = NULL;
    if (len) *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return nnt_err_set(err, NNT_ERR_IO, "%s: cannot open", path);
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return nnt_err_set(err, NNT_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > (uint64_t)max_bytes) {
        fclose(f);
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: %lld bytes, more than the %zu expected at most", path,
                           (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "%s: no memory for %zu bytes", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || got != n) {
        free(buf);
        return nnt_err_set(err, NNT_ERR_IO, "%s: read %zu of %zu bytes", path, got, n);
    }
    buf[n] = '\0';
    *text = buf;
    if (len) *len = n;
    return NNT_OK;
}

int nnt_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return 1000;
    int row[65];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int cost = a[i - 1] == b[j - 1] ? 0 : 1;
            int best = diag + cost;
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

uint64_t nnt_heap_in_use(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();
    uint64_t n = (uint64_t)mi.uordblks + (uint64_t)mi.hblkhd;
    return n ? n : 1;
#else
    return 0;
#endif
}

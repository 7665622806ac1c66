/* fuzz_common.h - helpers shared by the libFuzzer harnesses of tests/fuzz: one private
 * temporary folder per process (removed at exit), files written into it from fuzz input, and
 * splitting an input into parts. Header-only: each harness is one translation unit.
 *
 * A harness writes nothing outside its folder: every file name it builds is a fixed name
 * joined to the folder made by mkdtemp, never a name taken from the input. */
#ifndef NNT_FUZZ_COMMON_H
#define NNT_FUZZ_COMMON_H

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A property every input must keep: when it fails, says which and aborts (libFuzzer then keeps
 * the input as a crash). */
#define FUZZ_CHECK(cond, ...)                                                      \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "nnt fuzz: check failed: %s: ", #cond);                \
            fprintf(stderr, __VA_ARGS__);                                          \
            fprintf(stderr, "\n");                                                 \
            abort();                                                               \
        }                                                                          \
    } while (0)

/* With NNT_FUZZ_VERBOSE set, prints why an input was refused (or "accepted"), to see which
 * errors the corpus reaches; silent otherwise. */
static inline void fuzz_note(const char *what, const char *msg)
{
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("NNT_FUZZ_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "nnt fuzz: %s: %s\n", what, msg);
}

/* The process's temporary folder, made on first use under $TMPDIR (else /tmp); its entries
 * and itself are removed at exit. Aborts when it cannot be made: a harness without its folder
 * would test nothing. */
static char fuzz_dir_path[512];

static inline void fuzz_dir_remove(void)
{
    if (!fuzz_dir_path[0]) return;
    DIR *d = opendir(fuzz_dir_path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char p[1024];
            snprintf(p, sizeof p, "%s/%s", fuzz_dir_path, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(fuzz_dir_path);
    fuzz_dir_path[0] = '\0';
}

static inline const char *fuzz_dir(void)
{
    if (fuzz_dir_path[0]) return fuzz_dir_path;
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/nnt-fuzz-XXXXXX", base);
    if (!mkdtemp(fuzz_dir_path)) {
        perror("nnt fuzz: mkdtemp");
        abort();
    }
    atexit(fuzz_dir_remove);
    return fuzz_dir_path;
}

/* fuzz_dir()/name into buf (size n). */
static inline const char *fuzz_file(const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", fuzz_dir(), name);
    return buf;
}

/* Writes n bytes to fuzz_dir()/name (replacing it); the path goes into buf. Aborts on a write
 * error (a full disk would otherwise read as parser errors). */
static inline const char *fuzz_write(const char *name, const uint8_t *data, size_t n, char *buf, size_t bufsize)
{
    fuzz_file(name, buf, bufsize);
    FILE *f = fopen(buf, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror("nnt fuzz: writing the input file");
        abort();
    }
    return buf;
}

/* Makes fuzz_dir()/name a symbolic link to target (an existing fixture), once. */
static inline void fuzz_link(const char *name, const char *target)
{
    char p[1024];
    fuzz_file(name, p, sizeof p);
    unlink(p);
    if (symlink(target, p) != 0) {
        perror("nnt fuzz: symlink");
        abort();
    }
}

static inline void fuzz_unlink(const char *name)
{
    char p[1024];
    unlink(fuzz_file(name, p, sizeof p));
}

/* A NUL-terminated copy of data (the caller frees it). */
static inline char *fuzz_cstr(const uint8_t *data, size_t n)
{
    char *s = malloc(n + 1);
    if (!s) abort();
    if (n) memcpy(s, data, n);
    s[n] = '\0';
    return s;
}

/* Splits data at the first occurrence of sep (not included in either part): *first gets the
 * bytes before it, *rest those after; when sep is absent the whole input is *first and *rest
 * is empty. Returns 1 when sep was found. */
static inline int fuzz_split(const uint8_t *data, size_t n, const char *sep, const uint8_t **first, size_t *first_n,
                      const uint8_t **rest, size_t *rest_n)
{
    size_t k = strlen(sep);
    *first = data;
    *first_n = n;
    *rest = data + n;
    *rest_n = 0;
    if (k == 0 || n < k) return 0;
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(data + i, sep, k) == 0) {
            *first_n = i;
            *rest = data + i + k;
            *rest_n = n - i - k;
            return 1;
        }
    return 0;
}

#ifdef NNT_FUZZ_FAMILY_DIR
#include "nnt/nnt.h"
/* Opens a runtime on the build tree's plugins with a one-thread cpu backend (an INI written
 * into the folder): no OpenMP worker threads, which LeakSanitizer's scan at exit does not
 * survive, and one core per harness. Aborts on failure. */
static inline nnt_runtime *fuzz_runtime_open(void)
{
    static const char ini[] = "[plugins]\ndir = " NNT_FUZZ_FAMILY_DIR "\ndir = " NNT_FUZZ_KERNEL_DIR
                              "\n[backend.cpu]\nthreads = 1\n";
    char path[1024];
    fuzz_write("fuzz-runtime.ini", (const uint8_t *)ini, sizeof ini - 1, path, sizeof path);
    nnt_runtime *rt = NULL;
    if (nnt_runtime_open(path, &rt) != NNT_OK) {
        fprintf(stderr, "nnt fuzz: runtime: %s\n", nnt_last_error(rt));
        abort();
    }
    return rt;
}
#endif

#endif /* NNT_FUZZ_COMMON_H */

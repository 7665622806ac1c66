/* util.c - small string and file helpers used across libnnt. */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    /* a link that leads nowhere (dangling, or a loop) exists too: opening it then says why */
    return stat(path, &st) == 0 || lstat(path, &st) == 0;
}

/* What a path that is not a regular file is, for messages. */
static const char *file_kind(mode_t mode)
{
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a file";
}

nnt_status nnt_open_regular(const char *path, int *fd_out, struct stat *st_out, nnt_error *err)
{
    *fd_out = -1;
    /* O_NONBLOCK: opening a FIFO with no writer (or a device that waits for a carrier) returns at
     * once instead of waiting; O_NOCTTY: a terminal never becomes the controlling one */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return nnt_err_set(err, NNT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return nnt_err_set(err, NNT_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return nnt_err_set(err, NNT_ERR_IO, "%s: not a regular file (%s)", path, file_kind(st.st_mode));
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        return nnt_err_set(err, NNT_ERR_IO, "%s: cannot set blocking mode: %s", path, strerror(e));
    }
    if (st_out) *st_out = st;
    *fd_out = fd;
    return NNT_OK;
}

nnt_status nnt_read_file(const char *path, size_t max_bytes, char **text, size_t *len, nnt_error *err)
{
    *text = NULL;
    if (len) *len = 0;
    int fd;
    struct stat st;
    nnt_status status = nnt_open_regular(path, &fd, &st, err);
    if (status != NNT_OK) return status;
    if ((uint64_t)st.st_size > (uint64_t)max_bytes) {
        close(fd);
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: %lld bytes, more than the %zu expected at most", path,
                           (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "%s: no memory for %zu bytes", path, n);
    }
    size_t got = 0;
    int e = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) e = errno;
        if (r <= 0) break; /* an error, or the file shrank since fstat */
        got += (size_t)r;
    }
    close(fd);
    if (got != n) {
        free(buf);
        return nnt_err_set(err, NNT_ERR_IO, "%s: read %zu of %zu bytes%s%s", path, got, n, e ? ": " : "",
                           e ? strerror(e) : " (the file shrank while it was read)");
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

uint64_t nnt_fnv1a64(uint64_t h, const void *bytes, size_t n)
{
    const unsigned char *b = bytes;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

nnt_status nnt_file_fnv1a64(const char *path, uint64_t *h, nnt_error *err)
{
    int fd = -1;
    nnt_status st = nnt_open_regular(path, &fd, NULL, err);
    uint64_t v = NNT_FNV1A64_BASIS;
    unsigned char buf[1 << 16];
    for (ssize_t got = 1; st == NNT_OK && got > 0;) {
        got = read(fd, buf, sizeof buf);
        if (got < 0 && errno == EINTR) got = 1;
        else if (got < 0) st = nnt_err_set(err, NNT_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
        else v = nnt_fnv1a64(v, buf, (size_t)got);
    }
    if (fd >= 0) close(fd);
    *h = v;
    return st;
}

/* outfile.c - how libnnt puts an output file in place (nnt_write_parts, nnt_write_file): the
 * bytes go to an unnamed file in the target's folder (open(2) with O_TMPFILE), synced, and only
 * then linked under its name, so a writer stopped at any moment - a signal, SIGKILL from a
 * launcher, a full disk - leaves no file behind and the file it replaces whole. Where the file
 * system has no unnamed files (or /proc is not mounted), a named temporary file beside the
 * target, removed on every failure the process lives through. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/* The file path names: through a symbolic link (to a file not there yet too). A new string, or
 * NULL when path names nothing yet and is no link (the caller uses path). */
static char *resolve_target(const char *path)
{
    char *target = realpath(path, NULL);
    struct stat sb;
    if (target || lstat(path, &sb) != 0 || !S_ISLNK(sb.st_mode)) return target;
    char link[PATH_MAX];
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n <= 0) return NULL;
    link[n] = '\0';
    const char *slash = strrchr(path, '/');
    size_t dir = link[0] == '/' || !slash ? 0 : (size_t)(slash - path) + 1;
    target = malloc(dir + (size_t)n + 1);
    if (target) {
        memcpy(target, path, dir);
        memcpy(target + dir, link, (size_t)n + 1);
    }
    return target;
}

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A fresh name beside dest (dest.tmpPID.K) opened O_EXCL when fd_out is given, or only chosen
 * (for a link) when not; returns 0, or -1 with errno. */
static int temp_name(const char *dest, char *name, size_t cap, int *fd_out)
{
    for (unsigned k = 0; k < 100; k++) {
        snprintf(name, cap, "%s.tmp%ld.%u", dest, (long)getpid(), k);
        if (!fd_out) {
            struct stat sb;
            if (lstat(name, &sb) != 0 && errno == ENOENT) return 0;
            continue;
        }
        *fd_out = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666); /* 0666 less the umask */
        if (*fd_out >= 0) return 0;
        if (errno != EEXIST) return -1;
    }
    errno = EEXIST;
    return -1;
}

/* Links the unnamed file fd under dest: directly when dest does not exist, else under a fresh
 * name renamed over dest (rename replaces in one step; link never does). 0 or -1 with errno. */
static int link_into_place(int fd, const char *dest, char *tmp, size_t cap)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, dest, AT_SYMLINK_FOLLOW) == 0) return 0;
    if (errno != EEXIST) return -1;
    for (int tries = 0; tries < 100; tries++) {
        if (temp_name(dest, tmp, cap, NULL) != 0) return -1;
        if (linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) == 0) break;
        if (errno != EEXIST) return -1;
    }
    if (rename(tmp, dest) == 0) return 0;
    int e = errno;
    unlink(tmp);
    errno = e;
    return -1;
}

nnt_status nnt_write_parts(const char *path, int n, const void *const *parts, const size_t *lens, nnt_error *err)
{
    if (!path || !*path || n < 0 || (n > 0 && (!parts || !lens)))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "write: no file name or no bytes given");
    char *target = resolve_target(path);
    struct stat sb;
    if (target && stat(target, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        free(target);
        return nnt_err_set(err, NNT_ERR_IO, "%s: exists and is not a regular file; not replacing it", path);
    }
    const char *dest = target ? target : path;
    char *dir = nnt_dirname(dest);
    size_t cap = strlen(dest) + 48;
    char *tmp = malloc(cap);
    if (!dir || !tmp) {
        free(dir), free(tmp), free(target);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    tmp[0] = '\0';
    /* the unnamed file, where the folder's file system and /proc allow it */
    int fd = access("/proc/self/fd", X_OK) == 0 ? open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666) : -1;
    int unnamed = fd >= 0;
    if (!unnamed && temp_name(dest, tmp, cap, &fd) != 0) {
        nnt_status st = nnt_err_set(err, NNT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        free(dir), free(tmp), free(target);
        return st;
    }
    int bad = 0;
    for (int i = 0; i < n && !bad; i++) bad = lens[i] && write_all(fd, parts[i], lens[i]) != 0;
    bad = bad || fsync(fd) != 0;
    const char *what = "write failed";
    if (!bad && unnamed && link_into_place(fd, dest, tmp, cap) != 0) bad = 1, what = "cannot link into place";
    int e = errno;
    if (close(fd) != 0 && !bad) bad = 1, e = errno;
    if (!bad && !unnamed && rename(tmp, dest) != 0) bad = 1, e = errno, what = "cannot rename into place";
    nnt_status st = NNT_OK;
    if (bad) {
        if (!unnamed) unlink(tmp);
        st = nnt_err_set(err, NNT_ERR_IO, "%s: %s: %s", path, what, strerror(e));
    }
    free(dir), free(tmp), free(target);
    return st;
}

nnt_status nnt_write_file(const char *path, const void *data, size_t len, nnt_error *err)
{
    if (len && !data) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "%s: no bytes given", path ? path : "write");
    const void *parts[1] = {data};
    size_t lens[1] = {len};
    return nnt_write_parts(path, 1, parts, lens, err);
}

/* ini_config.c - the runtime's INI file, read with inih.
 *
 *   [plugins]
 *   dir  = families          ; every *.so in it is loaded (repeatable); one that is not a
 *                            ; usable plugin is skipped with a warning (plugin_host.c)
 *   file = extra/libfoo.so   ; one plugin file (repeatable); it must load
 *   [family.minimax_m2]
 *   backend = cpu            ; which kernel backend the family runs on (default cpu)
 *   [backend.cpu]
 *   threads = 2              ; options handed to the backend as strings
 *
 * Relative paths are resolved against the INI file's directory. Lines may be of any length up to
 * inih's limit (a comment line of any length); the first error stops the parse and is the one
 * reported, with the file, its line and its message. */
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "../core/internal.h"

/* The lines inih sees come from this reader, which reads each line whole (getline, any length)
 * and counts them, since Debian's inih gives handlers no line numbers. inih reads into a buffer
 * of a size fixed when it was built (200 bytes in Debian's), and read by fgets a longer line
 * would reach it in pieces, each piece parsed as a line of its own: the tail of a long comment
 * could then be a `file = x.so` line. So a line that does not fit whole is never handed over in
 * pieces: a whole-line comment (its first non-blank character ';' or '#') goes over as an empty
 * line, which inih treats alike, and any other line ends the parse with an error naming its
 * number. A line with a NUL byte is refused too (fgets-based reading would cut it there). */
typedef struct line_reader {
    FILE *f;
    char *buf; /* the current line, whole (getline's) */
    size_t cap;
    int line;
    int section_line; /* line of the latest [section] header */
    int stop;         /* set at the first error: no further line is handed to inih */
    int err_line;     /* the reader's own error: its line and message */
    char msg[512];
    int read_errno;
} line_reader;

static char *read_line(char *out, int size, void *stream)
{
    line_reader *lr = stream;
    if (lr->stop) return NULL;
    errno = 0;
    ssize_t n = getline(&lr->buf, &lr->cap, lr->f);
    if (n < 0) {
        if (ferror(lr->f)) lr->read_errno = errno ? errno : EIO;
        return NULL;
    }
    lr->line++;
    const char *p = lr->buf;
    if (lr->line == 1 && n >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) p += 3; /* a UTF-8 byte order mark */
    while (*p && isspace((unsigned char)*p)) p++;
    int comment = *p == ';' || *p == '#';
    if (memchr(lr->buf, '\0', (size_t)n)) {
        lr->err_line = lr->line;
        snprintf(lr->msg, sizeof lr->msg, "the line holds a NUL byte (an INI file is text)");
        lr->stop = 1;
        return NULL;
    }
    if (size < 2 || (size_t)n > (size_t)size - 1) {
        if (comment && size >= 2) {
            out[0] = '\n';
            out[1] = '\0';
            return out;
        }
        lr->err_line = lr->line;
        snprintf(lr->msg, sizeof lr->msg,
                 "line of %zd characters; the INI reader takes lines of at most %d (only a comment line, starting "
                 "with ';' or '#', may be longer)",
                 n - (lr->buf[n - 1] == '\n'), size - 2);
        lr->stop = 1;
        return NULL;
    }
    if (*p == '[') lr->section_line = lr->line;
    memcpy(out, lr->buf, (size_t)n + 1);
    return out;
}

typedef struct parse_state {
    nnt_ini *ini;
    char *dir;
    line_reader *lr;
    /* the handler's first error: the line inih was on (fail_line), the line the message is
     * about (err_line: the key's, or a section header's) and the message */
    int fail_line, err_line;
    char msg[512];
} parse_state;

/* Records the handler's first error and stops the parse there; returns 0 for inih. */
static int handler_fail(parse_state *ps, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int handler_fail(parse_state *ps, int line, const char *fmt, ...)
{
    if (ps->fail_line) return 0;
    ps->fail_line = ps->lr->line;
    ps->err_line = line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->msg, sizeof ps->msg, fmt, ap);
    va_end(ap);
    ps->lr->stop = 1;
    return 0;
}

static int push_str(char ***arr, int **lines, int *n, char *value, int line)
{
    char **g = realloc(*arr, (size_t)(*n + 1) * sizeof *g);
    if (!g) return -1;
    *arr = g;
    int *gl = realloc(*lines, (size_t)(*n + 1) * sizeof *gl);
    if (!gl) return -1;
    *lines = gl;
    (*arr)[*n] = value;
    (*lines)[*n] = line;
    (*n)++;
    return 0;
}

static nnt_ini_section *section_get(nnt_ini *ini, const char *kind, const char *name, int line)
{
    for (int i = 0; i < ini->n_sections; i++)
        if (strcmp(ini->sections[i].kind, kind) == 0 && strcmp(ini->sections[i].name, name) == 0)
            return &ini->sections[i];
    nnt_ini_section *g = realloc(ini->sections, (size_t)(ini->n_sections + 1) * sizeof *g);
    if (!g) return NULL;
    ini->sections = g;
    nnt_ini_section *s = &ini->sections[ini->n_sections++];
    memset(s, 0, sizeof *s);
    s->kind = nnt_strdup(kind);
    s->name = nnt_strdup(name);
    s->line = line;
    return s;
}

static int valid_name(const char *s)
{
    if (!*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_')) return 0;
    return 1;
}

/* [grad] memory_gb = GB (the bound on a backward's kept activations), mode = auto|keep|recompute. */
static int grad_key(parse_state *ps, const char *name, const char *value)
{
    nnt_ini *ini = ps->ini;
    int line = ps->lr->line;
    if (!name) return 1;
    int k = strcmp(name, "memory_gb") == 0 ? 0 : strcmp(name, "mode") == 0 ? 1 : 2;
    if (k == 2) return handler_fail(ps, line, "unknown key '%s' in [grad] (expected memory_gb or mode)", name);
    if (ini->grad_lines[k])
        return handler_fail(ps, line, "key '%s' appears twice in [grad] (first at line %d)", name, ini->grad_lines[k]);
    ini->grad_lines[k] = line;
    if (k == 0) {
        char *end;
        errno = 0;
        double v = strtod(value, &end);
        if (end == value || *end || errno || !(v > 0 && v <= 1e9))
            return handler_fail(ps, line, "[grad] memory_gb = '%s': expected gigabytes (1e9 bytes), a number > 0", value);
        ini->grad_memory_gb = v;
        return 1;
    }
    static const char *const MODES[] = {"auto", "keep", "recompute"};
    for (int m = 0; m < 3; m++)
        if (strcmp(value, MODES[m]) == 0) {
            ini->grad_mode = m;
            return 1;
        }
    return handler_fail(ps, line, "[grad] mode = '%s': expected auto, keep or recompute", value);
}

/* [attention] block_mb = MiB (the bound on one block of attention scores), pattern_mb = MiB (the
 * bound on a whole pattern a request reads); fractions allowed. fused = yes|no: whether a block
 * whose pattern no request reads may run as the backend's one pass (attn_fused; default yes). */
static int attention_key(parse_state *ps, const char *name, const char *value)
{
    nnt_ini *ini = ps->ini;
    int line = ps->lr->line;
    if (!name) return 1;
    int k = strcmp(name, "block_mb") == 0 ? 0 : strcmp(name, "pattern_mb") == 0 ? 1 : strcmp(name, "fused") == 0 ? 2 : 3;
    if (k == 3)
        return handler_fail(ps, line, "unknown key '%s' in [attention] (expected block_mb, pattern_mb or fused)", name);
    if (ini->attention_lines[k])
        return handler_fail(ps, line, "key '%s' appears twice in [attention] (first at line %d)", name,
                            ini->attention_lines[k]);
    ini->attention_lines[k] = line;
    if (k == 2) {
        if (strcmp(value, "yes") != 0 && strcmp(value, "no") != 0)
            return handler_fail(ps, line, "[attention] fused = '%s': expected yes or no", value);
        ini->attention_unfused = strcmp(value, "no") == 0;
        return 1;
    }
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (end == value || *end || errno || !(v * 1048576.0 >= 1.0 && v <= 1e9))
        return handler_fail(ps, line, "[attention] %s = '%s': expected MiB, a number of at least one byte's "
                            "worth (fractions allowed)", name, value);
    *(k == 0 ? &ini->attention_block_bytes : &ini->attention_pattern_bytes) = (uint64_t)(v * 1048576.0);
    return 1;
}

/* [prefill] memory_mb = MiB (the bound on one forward's activations, past which a prompt runs in
 * chunks; fractions allowed), chunk_tokens = N (the chunks' length given outright, >= 1). */
static int prefill_key(parse_state *ps, const char *name, const char *value)
{
    nnt_ini *ini = ps->ini;
    int line = ps->lr->line;
    if (!name) return 1;
    int k = strcmp(name, "memory_mb") == 0 ? 0 : strcmp(name, "chunk_tokens") == 0 ? 1 : 2;
    if (k == 2) return handler_fail(ps, line, "unknown key '%s' in [prefill] (expected memory_mb or chunk_tokens)", name);
    if (ini->prefill_lines[k])
        return handler_fail(ps, line, "key '%s' appears twice in [prefill] (first at line %d)", name,
                            ini->prefill_lines[k]);
    ini->prefill_lines[k] = line;
    char *end;
    errno = 0;
    if (k == 1) {
        long n = strtol(value, &end, 10);
        if (end == value || *end || errno || n < 1 || n > 1 << 30)
            return handler_fail(ps, line, "[prefill] chunk_tokens = '%s': expected a whole number of tokens >= 1", value);
        ini->prefill_chunk_tokens = (int)n;
        return 1;
    }
    double v = strtod(value, &end);
    if (end == value || *end || errno || !(v * 1048576.0 >= 1.0 && v <= 1e9))
        return handler_fail(ps, line, "[prefill] memory_mb = '%s': expected MiB, a number of at least one byte's "
                            "worth (fractions allowed)", value);
    ini->prefill_memory_bytes = (uint64_t)(v * 1048576.0);
    return 1;
}

/* [trace] save_mb = MiB (the bound on the bytes one call's saved values take; fractions allowed). */
static int trace_key(parse_state *ps, const char *name, const char *value)
{
    nnt_ini *ini = ps->ini;
    int line = ps->lr->line;
    if (!name) return 1;
    if (strcmp(name, "save_mb") != 0) return handler_fail(ps, line, "unknown key '%s' in [trace] (expected save_mb)", name);
    if (ini->trace_lines[0])
        return handler_fail(ps, line, "key '%s' appears twice in [trace] (first at line %d)", name, ini->trace_lines[0]);
    ini->trace_lines[0] = line;
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (end == value || *end || errno || !(v * 1048576.0 >= 1.0 && v <= 1e9))
        return handler_fail(ps, line, "[trace] save_mb = '%s': expected MiB, a number of at least one byte's worth "
                            "(fractions allowed)", value);
    ini->trace_save_bytes = (uint64_t)(v * 1048576.0);
    return 1;
}

/* [distributed] transport = FILE, timeout = SECONDS, stages = CUT,CUT,... (ascending block
 * indices >= 1, each the first block of the next rank's stage). */
static int distributed_key(parse_state *ps, const char *name, const char *value)
{
    nnt_ini *ini = ps->ini;
    int line = ps->lr->line;
    if (!name) return 1;
    static const char *const KEYS[] = {"transport", "timeout", "stages"};
    int k = 0;
    while (k < 3 && strcmp(name, KEYS[k]) != 0) k++;
    if (k == 3) return handler_fail(ps, line, "unknown key '%s' in [distributed] (expected transport, timeout or stages)", name);
    if (ini->dist_lines[k])
        return handler_fail(ps, line, "key '%s' appears twice in [distributed] (first at line %d)", name, ini->dist_lines[k]);
    ini->dist_lines[k] = line;
    if (k == 0) {
        if (!*value) return handler_fail(ps, line, "[distributed] transport needs a path");
        if (!(ini->dist_transport = nnt_path_join(ps->dir, value))) return handler_fail(ps, line, "no memory");
        return 1;
    }
    if (k == 1) {
        char *end;
        errno = 0;
        double v = strtod(value, &end);
        if (end == value || *end || errno || !(v > 0 && v <= 1e6))
            return handler_fail(ps, line, "[distributed] timeout = '%s': expected seconds, a number > 0 and <= 1e6", value);
        ini->dist_timeout = v;
        return 1;
    }
    ini->n_dist_cuts = 0;
    for (const char *p = value;;) {
        char *end;
        errno = 0;
        long c = strtol(p, &end, 10);
        if (end == p || errno || c < 1 || c > 1000000 || (ini->n_dist_cuts && c <= ini->dist_cuts[ini->n_dist_cuts - 1]))
            return handler_fail(ps, line,
                                "[distributed] stages = '%s': expected ascending block indices >= 1 separated by commas "
                                "(the first block of every rank after the first)", value);
        int *g = realloc(ini->dist_cuts, (size_t)(ini->n_dist_cuts + 1) * sizeof *g);
        if (!g) return handler_fail(ps, line, "no memory");
        ini->dist_cuts = g;
        ini->dist_cuts[ini->n_dist_cuts++] = (int)c;
        while (*end == ' ' || *end == '\t') end++;
        if (!*end) break;
        if (*end != ',')
            return handler_fail(ps, line, "[distributed] stages = '%s': expected ascending block indices >= 1 separated "
                                "by commas (the first block of every rank after the first)", value);
        p = end + 1;
    }
    return 1;
}

static int handler(void *user, const char *section, const char *name, const char *value)
{
    parse_state *ps = user;
    nnt_ini *ini = ps->ini;
    int line = ps->lr->line;
    if (strcmp(section, "plugins") == 0) {
        if (!name) return 1;
        if (strcmp(name, "dir") == 0 || strcmp(name, "file") == 0) {
            if (!*value) return handler_fail(ps, line, "[plugins] %s needs a path", name);
            char *path = nnt_path_join(ps->dir, value);
            if (!path) return handler_fail(ps, line, "no memory");
            /* "<prefix>/share/nnt/../../lib/nnt/families" -> "<prefix>/lib/nnt/families" when it
             * exists (an installed INI names its plugins relative to itself) */
            char real[PATH_MAX];
            if ((strstr(path, "/../") || strstr(path, "/./")) && realpath(path, real)) {
                free(path);
                if (!(path = nnt_strdup(real))) return handler_fail(ps, line, "no memory");
            }
            int rc = strcmp(name, "dir") == 0 ? push_str(&ini->dirs, &ini->dir_lines, &ini->n_dirs, path, line)
                                              : push_str(&ini->files, &ini->file_lines, &ini->n_files, path, line);
            if (rc != 0) {
                free(path);
                return handler_fail(ps, line, "no memory");
            }
            return 1;
        }
        return handler_fail(ps, line, "unknown key '%s' in [plugins] (expected dir or file)", name);
    }
    const char *dot = strchr(section, '.');
    if (dot && (strncmp(section, "family.", 7) == 0 || strncmp(section, "backend.", 8) == 0)) {
        char kind[16];
        size_t kn = (size_t)(dot - section);
        memcpy(kind, section, kn);
        kind[kn] = '\0';
        if (!valid_name(dot + 1))
            return handler_fail(ps, ps->lr->section_line, "section [%s]: '%s' is not a plugin name ([a-z0-9_]+)",
                                section, dot + 1);
        nnt_ini_section *s = section_get(ini, kind, dot + 1, ps->lr->section_line);
        if (!s) return handler_fail(ps, line, "no memory");
        if (!name) return 1;
        if (strcmp(kind, "family") == 0 && strcmp(name, "backend") != 0 && strcmp(name, "precision") != 0 &&
            strcmp(name, "weights") != 0)
            return handler_fail(ps, line, "unknown key '%s' in [%s] (expected backend, precision or weights)", name,
                                section);
        if (strcmp(kind, "family") == 0 && !valid_name(value))
            return handler_fail(ps, line, "[%s] %s = '%s' is not a %s name ([a-z0-9_]+)", section, name, value,
                                strcmp(name, "backend") == 0 ? "backend" : strcmp(name, "precision") == 0 ? "precision"
                                                                                                          : "weights");
        for (int i = 0; i < s->n_kv; i++)
            if (strcmp(s->kv[i].key, name) == 0)
                return handler_fail(ps, line, "key '%s' appears twice in [%s] (first at line %d)", name, section,
                                    s->kv[i].line);
        nnt_kv *g = realloc(s->kv, (size_t)(s->n_kv + 1) * sizeof *g);
        if (!g) return handler_fail(ps, line, "no memory");
        s->kv = g;
        s->kv[s->n_kv].key = nnt_strdup(name);
        s->kv[s->n_kv].value = nnt_strdup(value);
        s->kv[s->n_kv].line = line;
        s->n_kv++;
        return 1;
    }
    if (strcmp(section, "distributed") == 0) return distributed_key(ps, name, value);
    if (strcmp(section, "grad") == 0) return grad_key(ps, name, value);
    if (strcmp(section, "attention") == 0) return attention_key(ps, name, value);
    if (strcmp(section, "prefill") == 0) return prefill_key(ps, name, value);
    if (strcmp(section, "trace") == 0) return trace_key(ps, name, value);
    if (!section[0])
        return handler_fail(ps, line, "'%s = %s' comes before any section (expected [plugins], [family.NAME], "
                            "[backend.NAME], [distributed], [grad], [attention], [prefill] or [trace] first)", name, value);
    return handler_fail(ps, ps->lr->section_line,
                        "unknown section [%s] (expected [plugins], [family.NAME], [backend.NAME], [distributed], [grad], "
                        "[attention], [prefill] or [trace])", section);
}

nnt_status nnt_ini_load(const char *path, nnt_ini **out, nnt_error *err)
{
    *out = NULL;
    int fd;
    nnt_status st = nnt_open_regular(path, &fd, NULL, err);
    if (st != NNT_OK) return st;
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return nnt_err_set(err, NNT_ERR_IO, "%s: cannot open the configuration file", path);
    }
    nnt_ini *ini = calloc(1, sizeof *ini);
    if (!ini) {
        fclose(f);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    ini->path = nnt_strdup(path);
    ini->n_dist_cuts = -1;
    line_reader lr = {.f = f};
    parse_state ps = {.ini = ini, .dir = nnt_dirname(path), .lr = &lr};
    int rc = ini_parse_stream(read_line, &lr, handler, &ps);
    fclose(f);
    free(lr.buf);
    free(ps.dir);
    /* One error, the first in the file, with its own line and message. The parse stops at the
     * reader's or the handler's first error; inih itself goes on after a syntax error and
     * returns the line of the first error it met (0: none), which can only come before a stop. */
    if (rc < 0)
        st = nnt_err_set(err, NNT_ERR_IO, "%s: cannot read (inih could not allocate its line)", path);
    else if (rc > 0 && rc != ps.fail_line)
        st = nnt_err_set(err, NNT_ERR_CONFIG, "%s:%d: syntax error (expected [section], key = value, or a ; comment)",
                         path, rc);
    else if (ps.fail_line)
        st = nnt_err_set(err, NNT_ERR_CONFIG, "%s:%d: %s", path, ps.err_line, ps.msg);
    else if (lr.err_line)
        st = nnt_err_set(err, NNT_ERR_CONFIG, "%s:%d: %s", path, lr.err_line, lr.msg);
    else if (lr.read_errno)
        st = nnt_err_set(err, NNT_ERR_IO, "%s: cannot read after line %d: %s", path, lr.line, strerror(lr.read_errno));
    if (st != NNT_OK) {
        nnt_ini_free(ini);
        return st;
    }
    *out = ini;
    return NNT_OK;
}

void nnt_ini_free(nnt_ini *ini)
{
    if (!ini) return;
    for (int i = 0; i < ini->n_dirs; i++) free(ini->dirs[i]);
    for (int i = 0; i < ini->n_files; i++) free(ini->files[i]);
    free(ini->dirs);
    free(ini->dir_lines);
    free(ini->files);
    free(ini->file_lines);
    for (int i = 0; i < ini->n_sections; i++) {
        nnt_ini_section *s = &ini->sections[i];
        for (int k = 0; k < s->n_kv; k++) {
            free(s->kv[k].key);
            free(s->kv[k].value);
        }
        free(s->kv);
        free(s->kind);
        free(s->name);
    }
    free(ini->sections);
    free(ini->dist_transport);
    free(ini->dist_cuts);
    free(ini->path);
    free(ini);
}

const nnt_ini_section *nnt_ini_section_find(const nnt_ini *ini, const char *kind, const char *name)
{
    for (int i = 0; i < ini->n_sections; i++)
        if (strcmp(ini->sections[i].kind, kind) == 0 && strcmp(ini->sections[i].name, name) == 0)
            return &ini->sections[i];
    return NULL;
}

const char *nnt_ini_get(const nnt_ini_section *s, const char *key, int *line)
{
    if (!s) return NULL;
    for (int i = 0; i < s->n_kv; i++)
        if (strcmp(s->kv[i].key, key) == 0) {
            if (line) *line = s->kv[i].line;
            return s->kv[i].value;
        }
    return NULL;
}

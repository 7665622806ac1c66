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
 * Relative paths are resolved against the INI file's directory. Every error names the file
 * and the line. */
#include <ini.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/internal.h"

/* inih in Debian is built without line numbers for handlers; a counting reader supplies them. */
typedef struct line_reader {
    FILE *f;
    int line;
    int section_line; /* line of the latest [section] header */
} line_reader;

static char *read_line(char *buf, int size, void *stream)
{
    line_reader *lr = stream;
    char *r = fgets(buf, size, lr->f);
    if (r) {
        lr->line++;
        const char *p = r;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '[') lr->section_line = lr->line;
    }
    return r;
}

typedef struct parse_state {
    nnt_ini *ini;
    char *dir;
    char msg[512];
    line_reader *lr;
    int err_line; /* when nonzero, the line the error belongs to (a section header) */
} parse_state;

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

static int handler(void *user, const char *section, const char *name, const char *value)
{
    parse_state *ps = user;
    nnt_ini *ini = ps->ini;
    if (strcmp(section, "plugins") == 0) {
        if (!name) return 1;
        if (strcmp(name, "dir") == 0 || strcmp(name, "file") == 0) {
            if (!*value) {
                snprintf(ps->msg, sizeof ps->msg, "[plugins] %s needs a path", name);
                return 0;
            }
            char *path = nnt_path_join(ps->dir, value);
            if (!path) return 0;
            /* "<prefix>/share/nnt/../../lib/nnt/families" -> "<prefix>/lib/nnt/families" when it
             * exists (an installed INI names its plugins relative to itself) */
            char real[PATH_MAX];
            if ((strstr(path, "/../") || strstr(path, "/./")) && realpath(path, real)) {
                free(path);
                if (!(path = nnt_strdup(real))) return 0;
            }
            int rc = strcmp(name, "dir") == 0 ? push_str(&ini->dirs, &ini->dir_lines, &ini->n_dirs, path, ps->lr->line)
                                              : push_str(&ini->files, &ini->file_lines, &ini->n_files, path, ps->lr->line);
            if (rc != 0) {
                free(path);
                snprintf(ps->msg, sizeof ps->msg, "no memory");
                return 0;
            }
            return 1;
        }
        snprintf(ps->msg, sizeof ps->msg, "unknown key '%s' in [plugins] (expected dir or file)", name);
        return 0;
    }
    const char *dot = strchr(section, '.');
    if (dot && (strncmp(section, "family.", 7) == 0 || strncmp(section, "backend.", 8) == 0)) {
        char kind[16];
        size_t kn = (size_t)(dot - section);
        memcpy(kind, section, kn);
        kind[kn] = '\0';
        if (!valid_name(dot + 1)) {
            snprintf(ps->msg, sizeof ps->msg, "section [%s]: '%s' is not a plugin name ([a-z0-9_]+)", section, dot + 1);
            return 0;
        }
        nnt_ini_section *s = section_get(ini, kind, dot + 1, ps->lr->section_line);
        if (!s) {
            snprintf(ps->msg, sizeof ps->msg, "no memory");
            return 0;
        }
        if (!name) return 1;
        if (strcmp(kind, "family") == 0 && strcmp(name, "backend") != 0 && strcmp(name, "precision") != 0) {
            snprintf(ps->msg, sizeof ps->msg, "unknown key '%s' in [%s] (expected backend or precision)", name, section);
            return 0;
        }
        if (strcmp(kind, "family") == 0 && !valid_name(value)) {
            snprintf(ps->msg, sizeof ps->msg, "[%s] backend = '%s' is not a backend name ([a-z0-9_]+)", section, value);
            return 0;
        }
        for (int i = 0; i < s->n_kv; i++)
            if (strcmp(s->kv[i].key, name) == 0) {
                snprintf(ps->msg, sizeof ps->msg, "key '%s' appears twice in [%s]", name, section);
                return 0;
            }
        nnt_kv *g = realloc(s->kv, (size_t)(s->n_kv + 1) * sizeof *g);
        if (!g) return 0;
        s->kv = g;
        s->kv[s->n_kv].key = nnt_strdup(name);
        s->kv[s->n_kv].value = nnt_strdup(value);
        s->kv[s->n_kv].line = ps->lr->line;
        s->n_kv++;
        return 1;
    }
    if (!section[0]) {
        snprintf(ps->msg, sizeof ps->msg, "'%s = %s' comes before any section (expected [plugins], [family.NAME] or "
                 "[backend.NAME] first)", name, value);
        return 0;
    }
    snprintf(ps->msg, sizeof ps->msg, "unknown section [%s] (expected [plugins], [family.NAME] or [backend.NAME])",
             section);
    ps->err_line = ps->lr->section_line;
    return 0;
}

nnt_status nnt_ini_load(const char *path, nnt_ini **out, nnt_error *err)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return nnt_err_set(err, NNT_ERR_IO, "%s: the configuration must be a file (an INI file), not a directory or device",
                           path);
    FILE *f = fopen(path, "r");
    if (!f) return nnt_err_set(err, NNT_ERR_IO, "%s: cannot open the configuration file", path);
    nnt_ini *ini = calloc(1, sizeof *ini);
    if (!ini) {
        fclose(f);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    ini->path = nnt_strdup(path);
    line_reader lr = {f, 0, 0};
    parse_state ps = {ini, nnt_dirname(path), "", &lr, 0};
    int rc = ini_parse_stream(read_line, &lr, handler, &ps);
    if (rc != 0) {
        fclose(f);
        free(ps.dir);
        nnt_status st;
        if (rc < 0)
            st = nnt_err_set(err, NNT_ERR_IO, "%s: cannot read", path);
        else
            st = nnt_err_set(err, NNT_ERR_CONFIG, "%s:%d: %s", path, ps.err_line ? ps.err_line : rc,
                             ps.msg[0] ? ps.msg : "syntax error (expected [section], key = value, or a ; comment)");
        nnt_ini_free(ini);
        return st;
    }
    fclose(f);
    free(ps.dir);
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

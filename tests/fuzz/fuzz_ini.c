/* fuzz_ini.c - libFuzzer harness for the runtime's INI file (plugins/ini_config.c, read with
 * inih). The input is the INI file; it is parsed only (nnt_ini_load), no plugin is loaded. An
 * accepted file must give sections of a known kind with plugin names of [a-z0-9_]+, each found
 * again by nnt_ini_section_find, and keys found again by nnt_ini_get; every key's line number
 * must name a line of the file that holds the key and is not a comment. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "fuzz_common.h"

/* Whether line `line` (from 1) of the input holds `key` and is not a comment line; a line that
 * starts with white space (isspace: also \v, \f, \r) passes too, since inih reads it as a
 * continuation of the key before it. */
static int line_holds(const uint8_t *data, size_t size, int line, const char *key)
{
    size_t i = 0;
    for (int l = 1; l < line && i < size; i++)
        if (data[i] == '\n') l++;
    size_t end = i;
    while (end < size && data[end] != '\n') end++;
    size_t p = i;
    if (p < end && isspace(data[p])) return 1;
    if (p < end && (data[p] == ';' || data[p] == '#')) return 0;
    size_t k = strlen(key);
    for (size_t q = i; q + k <= end; q++)
        if (memcmp(data + q, key, k) == 0) return 1;
    return 0;
}

static int plugin_name(const char *s)
{
    if (!*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_')) return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024];
    fuzz_write("nnt.ini", data, size, path, sizeof path);
    int lines = 1;
    for (size_t i = 0; i < size; i++) lines += data[i] == '\n';
    nnt_error err = {0};
    nnt_ini *ini = NULL;
    if (nnt_ini_load(path, &ini, &err) != NNT_OK) {
        fuzz_note("refused", err.msg);
        FUZZ_CHECK(err.msg[0], "a refusal without a message (status %d)", (int)err.status);
        FUZZ_CHECK(ini == NULL, "a refused file still gave a configuration");
        return 0;
    }
    fuzz_note("accepted", "");
    for (int i = 0; i < ini->n_dirs; i++)
        FUZZ_CHECK(ini->dir_lines[i] >= 1 && ini->dir_lines[i] <= lines && line_holds(data, size, ini->dir_lines[i], "dir"),
                   "dir = at line %d of %d", ini->dir_lines[i], lines);
    for (int i = 0; i < ini->n_files; i++)
        FUZZ_CHECK(ini->file_lines[i] >= 1 && ini->file_lines[i] <= lines &&
                       line_holds(data, size, ini->file_lines[i], "file"),
                   "file = at line %d of %d", ini->file_lines[i], lines);
    for (int i = 0; i < ini->n_sections; i++) {
        const nnt_ini_section *s = &ini->sections[i];
        FUZZ_CHECK(strcmp(s->kind, "family") == 0 || strcmp(s->kind, "backend") == 0, "section kind '%s'", s->kind);
        FUZZ_CHECK(plugin_name(s->name), "section name '%s'", s->name);
        FUZZ_CHECK(nnt_ini_section_find(ini, s->kind, s->name) == s, "section [%s.%s] not found again", s->kind, s->name);
        for (int k = 0; k < s->n_kv; k++) {
            int line = 0;
            const char *v = nnt_ini_get(s, s->kv[k].key, &line);
            FUZZ_CHECK(v == s->kv[k].value && line == s->kv[k].line, "key '%s' not found again", s->kv[k].key);
            FUZZ_CHECK(line >= 1 && line <= lines, "key '%s' at line %d of %d", s->kv[k].key, line, lines);
            FUZZ_CHECK(line_holds(data, size, line, s->kv[k].key), "key '%s' is not on its line %d (or it is a comment)",
                       s->kv[k].key, line);
        }
    }
    nnt_ini_free(ini);
    return 0;
}

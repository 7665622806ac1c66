/* request_doc.c - what the nnt command reads of a --request document beside libnnt's parse: the
 * files its fields name (each an input of the run, which --out must not be) and whether its rows
 * are text (then the run shows the prompt's tokens, as a --prompt does). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The document in file, or NULL when it cannot be read or is not JSON (libnnt says why). */
static cJSON *read_doc(const char *file)
{
    FILE *f = fopen(file, "rb");
    if (!f) return NULL;
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (size_t got = 1; got;) {
        if (len == cap) {
            char *t = realloc(text, cap = cap ? 2 * cap : 65536);
            if (!t) break;
            text = t;
        }
        len += got = fread(text + len, 1, cap - len, f);
    }
    fclose(f);
    cJSON *doc = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    return doc;
}

/* The folder of file with its '/' ("dir/"), or "" for a bare name: a new string. */
static char *folder_of(const char *file)
{
    const char *slash = strrchr(file, '/');
    size_t n = slash ? (size_t)(slash - file) + 1 : 0;
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, file, n);
        d[n] = '\0';
    }
    return d;
}

typedef struct walk {
    const char *folder;
    cli_request_file_fn fn;
    void *ctx;
} walk;

/* Calls w->fn for every {"file": F} object at or below item, field its path. Returns the first
 * nonzero return of fn, or 0. */
static int walk_files(const walk *w, const cJSON *item, const char *field)
{
    const cJSON *file = cJSON_IsObject(item) && *field ? cJSON_GetObjectItemCaseSensitive(item, "file") : NULL;
    if (cJSON_IsString(file) && file->valuestring[0]) {
        const char *f = file->valuestring;
        size_t n = strlen(w->folder) + strlen(f) + 1;
        char *path = malloc(n);
        if (!path) return cli_arg_error("%s", "out of memory");
        snprintf(path, n, "%s%s", f[0] == '/' ? "" : w->folder, f);
        int rc = w->fn(w->ctx, path, field);
        free(path);
        if (rc) return rc;
    }
    int i = 0, rc = 0;
    for (const cJSON *c = item ? item->child : NULL; c && !rc; c = c->next, i++) {
        if (!cJSON_IsObject(c) && !cJSON_IsArray(c)) continue;
        size_t n = strlen(field) + (c->string ? strlen(c->string) : 24) + 4;
        char *sub = malloc(n);
        if (!sub) return cli_arg_error("%s", "out of memory");
        if (cJSON_IsArray(item))
            snprintf(sub, n, "%s[%d]", field, i);
        else
            snprintf(sub, n, "%s%s%s", field, *field ? "." : "", c->string);
        rc = walk_files(w, c, sub);
        free(sub);
    }
    return rc;
}

int cli_request_files(const char *request_file, cli_request_file_fn fn, void *ctx)
{
    cJSON *doc = read_doc(request_file);
    char *folder = folder_of(request_file);
    walk w = {.folder = folder, .fn = fn, .ctx = ctx};
    int rc = doc && folder ? walk_files(&w, doc, "") : 0;
    cJSON_Delete(doc);
    free(folder);
    return rc;
}

/* 1 when row (a row of "rows", or patch's "clean" or "corrupt") is text or a file of text. */
static int text_row(const cJSON *row)
{
    return cJSON_GetObjectItemCaseSensitive(row, "text") || cJSON_GetObjectItemCaseSensitive(row, "file");
}

int cli_request_text_rows(const char *request_file)
{
    cJSON *doc = read_doc(request_file);
    int n = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(doc, "rows")) n += text_row(row);
    const cJSON *patch = cJSON_GetObjectItemCaseSensitive(doc, "patch");
    n += text_row(cJSON_GetObjectItemCaseSensitive(patch, "clean"));
    n += text_row(cJSON_GetObjectItemCaseSensitive(patch, "corrupt"));
    cJSON_Delete(doc);
    return n;
}

/* corpus.c - the documents of a harvest's data files, read one at a time (nnt_harvest's corpus):
 * a document per line, per file, or per JSON Lines record (its text member), each checked for
 * well-formed UTF-8, a bad line named by file and line and either ending the run or skipped. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harvest_internal.h"

#define HV_MAX_LINE ((size_t)64 << 20)  /* bytes of one line (a document of a lines or JSONL file) */
#define HV_MAX_FILE ((size_t)256 << 20) /* bytes of a whole-file document */

struct hv_corpus {
    const char *const *files;
    int n_files, at;               /* the file being read (n_files: done) */
    nnt_data_format *formats;      /* [n_files], AUTO resolved */
    const char *field;
    int skip_bad;
    FILE *f;                       /* the open file (LINES, JSONL) */
    int64_t line;                  /* lines of the open file read */
    char *buf;                     /* getline's buffer, or a whole file */
    size_t cap;
    char *text;                    /* a JSONL record's text (owned) */
    int64_t number;                /* the next document number */
    int64_t *firsts;               /* [n_files]: each file's first document number */
    uint64_t done, total, file_done;
    int64_t skipped;
};

static nnt_data_format resolve(nnt_data_format f, const char *name)
{
    if (f != NNT_DATA_AUTO) return f;
    size_t n = strlen(name);
    if ((n > 6 && !strcmp(name + n - 6, ".jsonl")) || (n > 7 && !strcmp(name + n - 7, ".ndjson"))) return NNT_DATA_JSONL;
    return NNT_DATA_LINES;
}

nnt_status hv_corpus_open(const nnt_harvest_spec *s, hv_corpus **out, nnt_error *err)
{
    *out = NULL;
    if (s->n_data < 1 || !s->data)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "data: no data files (expected at least one)");
    if (s->format < NNT_DATA_AUTO || s->format > NNT_DATA_JSONL)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "format: %d is not a data format", (int)s->format);
    hv_corpus *c = calloc(1, sizeof *c);
    if (!c) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    c->files = s->data;
    c->n_files = s->n_data;
    c->field = s->field ? s->field : "text";
    c->skip_bad = s->skip_bad;
    c->formats = calloc((size_t)s->n_data, sizeof *c->formats);
    c->firsts = calloc((size_t)s->n_data, sizeof *c->firsts);
    if (!c->formats || !c->firsts) {
        hv_corpus_free(c);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    for (int i = 0; i < s->n_data; i++) c->firsts[i] = -1; /* a file the run never reaches */
    for (int i = 0; i < s->n_data; i++) {
        int fd = -1;
        struct stat sb;
        if (!s->data[i]) {
            hv_corpus_free(c);
            return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "data[%d]: NULL file name", i);
        }
        nnt_status st = nnt_open_regular(s->data[i], &fd, &sb, err);
        if (st != NNT_OK) {
            hv_corpus_free(c);
            return st;
        }
        close(fd);
        c->total += (uint64_t)sb.st_size;
        c->formats[i] = resolve(s->format, s->data[i]);
    }
    *out = c;
    return NNT_OK;
}

void hv_corpus_free(hv_corpus *c)
{
    if (!c) return;
    if (c->f) fclose(c->f);
    free(c->buf);
    free(c->text);
    free(c->formats);
    free(c->firsts);
    free(c);
}

void hv_corpus_progress(const hv_corpus *c, uint64_t *done, uint64_t *total, int64_t *skipped)
{
    *done = c->done;
    *total = c->total;
    *skipped = c->skipped;
}

const int64_t *hv_corpus_firsts(const hv_corpus *c, int64_t *end)
{
    *end = c->number;
    return c->firsts;
}

/* A bad line: an error naming it, or (skip_bad) 0 after counting it. */
static int bad_line(hv_corpus *c, nnt_error *err, const char *why)
{
    if (c->skip_bad) {
        c->skipped++;
        return 0;
    }
    nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "%s:%lld: %s (pass skip_bad, --skip-bad, to leave such lines out)",
                c->files[c->at], (long long)c->line, why);
    return -1;
}

/* A JSONL record's text into c->text: 1, 0 (skipped) or -1. */
static int record_text(hv_corpus *c, const char *line, size_t n, nnt_error *err)
{
    free(c->text);
    c->text = NULL;
    cJSON *doc = cJSON_ParseWithLength(line, n);
    if (!doc || !cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        return bad_line(c, err, "not a JSON object");
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, c->field);
    char why[160];
    if (!cJSON_IsString(v)) {
        snprintf(why, sizeof why, "%s member \"%.64s\"", v ? "a non-string" : "no", c->field);
        cJSON_Delete(doc);
        return bad_line(c, err, why);
    }
    c->text = nnt_strdup(v->valuestring);
    cJSON_Delete(doc);
    if (!c->text) {
        nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        return -1;
    }
    size_t len = strlen(c->text), ok = nnt_utf8_valid_prefix(c->text, len);
    if (ok < len) {
        snprintf(why, sizeof why, "member \"%.64s\" is not well-formed UTF-8 (at byte %zu of its text)", c->field, ok);
        return bad_line(c, err, why);
    }
    return 1;
}

/* Opens file c->at; 0, or -1 with err set. */
static int open_file(hv_corpus *c, nnt_error *err)
{
    int fd = -1;
    if (nnt_open_regular(c->files[c->at], &fd, NULL, err) != NNT_OK) return -1;
    c->f = fdopen(fd, "rb");
    if (!c->f) {
        close(fd);
        nnt_err_set(err, NNT_ERR_IO, "%s: cannot open: %s", c->files[c->at], strerror(errno));
        return -1;
    }
    c->line = 0;
    c->file_done = 0;
    c->firsts[c->at] = c->number;
    return 0;
}

/* The whole of file c->at as one document: 1 or -1. */
static int whole_file(hv_corpus *c, hv_doc *d, nnt_error *err)
{
    c->firsts[c->at] = c->number;
    free(c->buf);
    c->buf = NULL;
    c->cap = 0;
    size_t len = 0;
    if (nnt_read_file(c->files[c->at], HV_MAX_FILE, &c->buf, &len, err) != NNT_OK) return -1;
    c->done += len;
    size_t ok = nnt_utf8_valid_prefix(c->buf, len);
    c->line = 1;
    if (ok < len) {
        char why[96];
        snprintf(why, sizeof why, "not well-formed UTF-8 (at byte %zu)", ok);
        if (bad_line(c, err, why) < 0) return -1;
        c->at++;
        c->number++;
        return 0;
    }
    d->text = c->buf;
    d->len = len;
    d->number = c->number++;
    c->at++;
    return 1;
}

int hv_corpus_next(hv_corpus *c, hv_doc *d, nnt_error *err)
{
    while (c->at < c->n_files) {
        if (c->formats[c->at] == NNT_DATA_FILE) {
            int r = whole_file(c, d, err);
            if (r) return r;
            continue;
        }
        if (!c->f && open_file(c, err) < 0) return -1;
        errno = 0;
        ssize_t got = getline(&c->buf, &c->cap, c->f);
        if (got < 0) {
            if (ferror(c->f)) {
                nnt_err_set(err, NNT_ERR_IO, "%s: cannot read: %s", c->files[c->at], strerror(errno ? errno : EIO));
                return -1;
            }
            fclose(c->f);
            c->f = NULL;
            c->at++;
            continue;
        }
        c->line++;
        c->done += (uint64_t)got;
        int64_t number = c->number++;
        size_t n = (size_t)got;
        if (n && c->buf[n - 1] == '\n') n--;
        if (n && c->buf[n - 1] == '\r') n--;
        if (n == 0) continue; /* a blank line: no document */
        char why[96];
        if (n > HV_MAX_LINE) {
            snprintf(why, sizeof why, "a line of %zu bytes (at most %zu)", n, HV_MAX_LINE);
            if (bad_line(c, err, why) < 0) return -1;
            continue;
        }
        if (c->formats[c->at] == NNT_DATA_JSONL) {
            int r = record_text(c, c->buf, n, err);
            if (r < 0) return -1;
            if (r == 0) continue;
            d->text = c->text;
            d->len = strlen(c->text);
        } else {
            size_t ok = nnt_utf8_valid_prefix(c->buf, n);
            if (ok < n || memchr(c->buf, '\0', n)) {
                snprintf(why, sizeof why, ok < n ? "not well-formed UTF-8 (at byte %zu of the line)" : "a NUL byte", ok);
                if (bad_line(c, err, why) < 0) return -1;
                continue;
            }
            d->text = c->buf;
            d->len = n;
        }
        d->number = number;
        return 1;
    }
    return 0;
}

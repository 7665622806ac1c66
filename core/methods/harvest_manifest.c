/* harvest_manifest.c - a harvest folder's manifest.json: what made it (the model's config.json
 * and tokenizer files by hash, the request in its canonical form, every setting and data file)
 * and what is done (the shards, rows and tokens, the reductions' state), read back to refuse a
 * folder made otherwise and to continue a run where it stopped. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harvest_manifest.h"

#define HV_MANIFEST_MAX ((size_t)256 << 20)
#define HV_WEIGHT_SAMPLE ((size_t)1 << 20)

static void add_hash(cJSON *obj, const char *key, uint64_t h)
{
    char hex[24];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
    cJSON_AddStringToObject(obj, key, hex);
}

/* The model: its architecture and config.json's hash; the tokenizer files present, by hash. */
static nnt_status add_model(cJSON *id, nnt_model *m, nnt_error *err)
{
    const char *dir = m->ckpt->dir;
    cJSON *mo = cJSON_AddObjectToObject(id, "model");
    cJSON_AddStringToObject(mo, "architecture", nnt_model_get_info(m)->architecture);
    static const char *const FILES[] = {"config.json", "tokenizer.json", "tokenizer_config.json", "tiktoken.model"};
    for (size_t i = 0; i < sizeof FILES / sizeof *FILES; i++) {
        char *path = nnt_path_join(dir, FILES[i]);
        if (!path) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        uint64_t h = 0;
        nnt_status st = i == 0 || nnt_file_exists(path) ? nnt_file_fnv1a64(path, &h, err) : NNT_OK;
        free(path);
        if (st != NNT_OK) return st;
        if (i == 0 || h) add_hash(mo, FILES[i], h);
    }
    /* the weights: each file's name, size and first and last MiB (two checkpoints of one config
     * differ there; reading every byte of a release would take minutes) */
    uint64_t h = NNT_FNV1A64_BASIS;
    const nnt_checkpoint *ck = m->ckpt;
    for (int i = 0; i < ck->n_files; i++) {
        const nnt_st_file *f = ck->files[i];
        const char *slash = strrchr(f->path, '/');
        const char *name = slash ? slash + 1 : f->path;
        size_t n = f->map_size, part = n < HV_WEIGHT_SAMPLE ? n : HV_WEIGHT_SAMPLE;
        uint64_t size = n;
        h = nnt_fnv1a64(h, name, strlen(name) + 1);
        h = nnt_fnv1a64(h, &size, sizeof size);
        h = nnt_fnv1a64(h, f->map, part);
        h = nnt_fnv1a64(h, (const unsigned char *)f->map + (n - part), part);
    }
    add_hash(mo, "weights", h);
    return NNT_OK;
}

static nnt_status add_request(cJSON *id, const nnt_request *r, nnt_error *err)
{
    char *json = NULL;
    void *tensors = NULL;
    size_t n = 0, tn = 0;
    nnt_status st = nnt_request_write(r, &json, &n, &tensors, &tn);
    if (st != NNT_OK) return nnt_err_set(err, st, "request: cannot be written back as a document");
    cJSON *doc = cJSON_ParseWithLength(json, n);
    free(json);
    if (!doc) {
        free(tensors);
        return nnt_err_set(err, NNT_ERR_INTERNAL, "request: its canonical document does not parse");
    }
    cJSON_AddItemToObject(id, "request", doc);
    add_hash(id, "request_tensors", tn ? nnt_fnv1a64(NNT_FNV1A64_BASIS, tensors, tn) : 0);
    free(tensors);
    /* the attached SAEs' files: the request names their folders only */
    const cJSON *sae;
    cJSON *files = NULL;
    cJSON_ArrayForEach(sae, cJSON_GetObjectItemCaseSensitive(doc, "saes")) {
        const cJSON *dir = cJSON_GetObjectItemCaseSensitive(sae, "dir");
        if (!cJSON_IsString(dir)) continue;
        if (!files) files = cJSON_AddObjectToObject(id, "sae_files");
        cJSON *f = cJSON_AddObjectToObject(files, dir->valuestring);
        static const char *const NAMES[] = {"cfg.json", "sae_weights.safetensors"};
        for (int i = 0; f && i < 2; i++) {
            char *path = nnt_path_join(dir->valuestring, NAMES[i]);
            uint64_t h = 0;
            nnt_status st = path ? nnt_file_fnv1a64(path, &h, err) : nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
            free(path);
            if (st != NNT_OK) return st;
            add_hash(f, NAMES[i], h);
        }
    }
    return NNT_OK;
}

static const char *rows_name(nnt_harvest_rows r)
{
    return r == NNT_HARVEST_PACK ? "pack" : r == NNT_HARVEST_SPLIT ? "split" : "truncate";
}

static const char *format_name(nnt_data_format f)
{
    return f == NNT_DATA_LINES ? "lines" : f == NNT_DATA_FILE ? "file" : f == NNT_DATA_JSONL ? "jsonl" : "auto";
}

static nnt_status add_settings(cJSON *id, const nnt_harvest_spec *s, nnt_error *err)
{
    cJSON *se = cJSON_AddObjectToObject(id, "settings");
    cJSON_AddNumberToObject(se, "context", s->context);
    cJSON_AddStringToObject(se, "rows", rows_name(s->rows));
    cJSON_AddNumberToObject(se, "batch", s->batch);
    cJSON_AddStringToObject(se, "dtype", s->dtype == NNT_BF16 ? "BF16" : s->dtype == NNT_F16 ? "F16" : "F32");
    cJSON_AddNumberToObject(se, "shard_bytes", (double)s->shard_bytes);
    cJSON *pos = cJSON_AddArrayToObject(se, "positions");
    for (int i = 0; i < s->n_positions; i++)
        cJSON_AddItemToArray(pos, s->positions[i] == NNT_POS_ALL || s->positions[i] == NNT_POS_PROMPT
                                      ? cJSON_CreateString("all")
                                      : cJSON_CreateNumber(s->positions[i]));
    cJSON_AddBoolToObject(se, "add_special", s->add_special);
    cJSON_AddNumberToObject(se, "max_tokens", (double)s->max_tokens);
    cJSON_AddStringToObject(se, "format", format_name(s->format));
    cJSON_AddStringToObject(se, "field", s->field ? s->field : "text");
    cJSON_AddBoolToObject(se, "skip_bad", s->skip_bad);
    cJSON *red = cJSON_AddArrayToObject(se, "reduce");
    for (int i = 0; i < s->n_reduce; i++) cJSON_AddItemToArray(red, cJSON_CreateString(s->reduce[i]));
    cJSON_AddBoolToObject(se, "routing_stats", s->routing_stats);
    cJSON *tf = cJSON_AddObjectToObject(se, "top_features"), *tcx = cJSON_AddObjectToObject(se, "top_contexts");
    for (int i = 0; i < s->n_top_features; i++)
        cJSON_AddNumberToObject(tf, s->top_features[i] ? s->top_features[i] : "", s->top_features_k[i]);
    for (int i = 0; i < s->n_top_contexts; i++)
        cJSON_AddNumberToObject(tcx, s->top_contexts[i] ? s->top_contexts[i] : "", s->top_contexts_k[i]);
    cJSON_AddNumberToObject(se, "top_tokens", s->top_tokens ? s->top_tokens : 32);
    cJSON *data = cJSON_AddArrayToObject(id, "data");
    for (int i = 0; i < s->n_data; i++) {
        uint64_t h = 0;
        nnt_status st = nnt_file_fnv1a64(s->data[i], &h, err);
        if (st != NNT_OK) return st;
        struct stat sb;
        cJSON *f = cJSON_CreateObject();
        cJSON_AddItemToArray(data, f);
        cJSON_AddStringToObject(f, "file", s->data[i]);
        cJSON_AddNumberToObject(f, "bytes", stat(s->data[i], &sb) == 0 ? (double)sb.st_size : -1);
        add_hash(f, "fnv1a64", h);
    }
    return NNT_OK;
}

nnt_status hv_identity(nnt_model *m, const nnt_harvest_spec *s, cJSON **out, nnt_error *err)
{
    cJSON *id = cJSON_CreateObject();
    *out = NULL;
    if (!id) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    cJSON_AddNumberToObject(id, "nnt_harvest", HV_FORMAT);
    nnt_status st = add_model(id, m, err);
    if (st == NNT_OK) st = add_request(id, s->request, err);
    if (st == NNT_OK) st = add_settings(id, s, err);
    if (st != NNT_OK) {
        cJSON_Delete(id);
        return st;
    }
    *out = id;
    return NNT_OK;
}

/* The first field of `want` that `have` holds otherwise, as "model.config.json" etc. */
static int differs(const cJSON *want, const cJSON *have, char *field, size_t n)
{
    const cJSON *w;
    cJSON_ArrayForEach(w, want) {
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(have, w->string);
        if (h && cJSON_Compare(w, h, 1)) continue;
        if (h && cJSON_IsObject(w) && cJSON_IsObject(h)) {
            char sub[192];
            if (differs(w, h, sub, sizeof sub)) {
                snprintf(field, n, "%s.%s", w->string, sub);
                return 1;
            }
        }
        snprintf(field, n, "%s", w->string);
        return 1;
    }
    return 0;
}

nnt_status hv_manifest_read(const char *dir, const cJSON *identity, cJSON **out, nnt_error *err)
{
    *out = NULL;
    char *path = nnt_path_join(dir, HV_MANIFEST);
    if (!path) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    if (!nnt_file_exists(path)) {
        free(path);
        DIR *d = opendir(dir);
        if (!d) return NNT_OK; /* made by the caller */
        const struct dirent *e;
        int others = 0;
        while ((e = readdir(d)) != NULL) others += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
        closedir(d);
        if (others)
            return nnt_err_set(err, NNT_ERR_CONFLICT, "out_dir %s: holds files but no %s; a harvest writes into an "
                                                      "empty folder or continues its own", dir, HV_MANIFEST);
        return NNT_OK;
    }
    char *text = NULL;
    size_t len = 0;
    nnt_status st = nnt_read_file(path, HV_MANIFEST_MAX, &text, &len, err);
    cJSON *doc = st == NNT_OK ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    if (st == NNT_OK && (!doc || !cJSON_IsObject(doc) || !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(doc, "shards"))))
        st = nnt_err_set(err, NNT_ERR_FORMAT, "%s: not a harvest manifest (expected a JSON object with \"shards\")",
                         path);
    char field[256];
    if (st == NNT_OK && differs(identity, doc, field, sizeof field))
        st = nnt_err_set(err, NNT_ERR_CONFLICT, "out_dir %s: its %s was made by another run (its %s differs from "
                                                "this one's); harvest into a new folder, or rerun with the same "
                                                "model, request and settings to continue it", dir, HV_MANIFEST, field);
    free(path);
    if (st != NNT_OK) {
        cJSON_Delete(doc);
        return st;
    }
    *out = doc;
    return NNT_OK;
}

nnt_status hv_manifest_write(const char *dir, const cJSON *doc, nnt_error *err)
{
    char *json = cJSON_Print(doc), *path = nnt_path_join(dir, HV_MANIFEST);
    nnt_status st = json && path ? nnt_write_file(path, json, strlen(json), err)
                                 : nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    free(json);
    free(path);
    return st;
}

nnt_status hv_make_dir(const char *dir, nnt_error *err)
{
    if (!dir || !*dir) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "out_dir: empty (expected a folder)");
    if (mkdir(dir, 0777) == 0 || errno == EEXIST) {
        struct stat sb;
        if (stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) return NNT_OK;
        return nnt_err_set(err, NNT_ERR_IO, "out_dir %s: exists and is not a folder", dir);
    }
    return nnt_err_set(err, NNT_ERR_IO, "out_dir %s: cannot make it: %s", dir, strerror(errno));
}

/* safetensors.c - reading (memory-mapped, validated) and writing of safetensors files, and the
 * same format held in memory (a request's attachment of tensors).
 * Format: 8-byte little-endian header length N, N bytes of JSON mapping tensor names to
 * {dtype, shape, data_offsets}, then the data section the offsets index. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define MAX_HEADER_BYTES (100u << 20)

static int cmp_begin(const void *a, const void *b)
{
    const nnt_st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* JSON numbers are doubles: an integer field is accepted only when it is finite, whole, and at
 * most 2^53 (every integer up to there has an exact double), so the casts below never overflow. */
#define MAX_EXACT_INT 9007199254740992.0

static int json_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!isfinite(d) || d < 0 || d > MAX_EXACT_INT || d != floor(d)) return 0;
    *out = (uint64_t)d;
    return 1;
}

/* JSON's whitespace (RFC 8259): space, tab, line feed, carriage return */
static int is_json_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* The optional "__metadata__" entry: at most one, an object of strings (or null), as the format
 * defines it. */
static nnt_status check_metadata(const char *path, const cJSON *meta, int nth, nnt_error *err)
{
    if (nth > 1) return nnt_err_set(err, NNT_ERR_FORMAT, "%s: '__metadata__' appears twice in the header", path);
    if (cJSON_IsNull(meta)) return NNT_OK;
    if (!cJSON_IsObject(meta))
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: '__metadata__' is not an object of strings", path);
    for (const cJSON *v = meta->child; v; v = v->next)
        if (!cJSON_IsString(v))
            return nnt_err_set(err, NNT_ERR_FORMAT, "%s: '__metadata__' value '%s' is not a string", path, v->string);
    return NNT_OK;
}

/* A field the format defines (dtype, shape, data_offsets) given twice in one entry: cJSON keeps
 * both and its look-up finds the first, while other readers may take the last. Other fields are
 * ignored, as the format's reference reader ignores them. */
static nnt_status known_fields_once(const char *path, const cJSON *item, nnt_error *err)
{
    static const char *const known[3] = {"dtype", "shape", "data_offsets"};
    int seen[3] = {0, 0, 0};
    for (const cJSON *f = item->child; f; f = f->next)
        for (int k = 0; k < 3; k++)
            if (f->string && strcmp(f->string, known[k]) == 0 && ++seen[k] > 1)
                return nnt_err_set(err, NNT_ERR_FORMAT, "%s: tensor '%s' gives '%s' twice in the header", path,
                                   item->string, known[k]);
    return NNT_OK;
}

/* The format's shape and data_offsets hold integers, and its reference reader refuses a
 * number written with a fraction or an exponent ("8.0", "1e3") even when its value is whole.
 * cJSON keeps only values, so this scans the header text (already parsed, so well formed): a
 * number in an array under the key "shape" or "data_offsets" of an entry of the top object
 * must be digits only. */
static nnt_status integer_notation(const char *path, const char *h, size_t n, nnt_error *err)
{
    /* per depth 1..3 (top object, entry, array): container kind, whether a key comes next,
     * and the last key read */
    char kind[4] = {0};
    int expect_key[4] = {0};
    const char *key[4] = {NULL};
    size_t key_len[4] = {0};
    int depth = 0;
    for (size_t i = 0; i < n; i++) {
        char c = h[i];
        if (c == '"') {
            size_t b = ++i;
            while (i < n && h[i] != '"') i += h[i] == '\\' ? 2 : 1;
            if (depth >= 1 && depth <= 3 && kind[depth] == '{' && expect_key[depth]) {
                key[depth] = h + b;
                key_len[depth] = i - b;
                expect_key[depth] = 0;
            }
        } else if (c == '{' || c == '[') {
            depth++;
            if (depth <= 3) {
                kind[depth] = c;
                expect_key[depth] = c == '{';
            }
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == ',') {
            if (depth >= 1 && depth <= 3 && kind[depth] == '{') expect_key[depth] = 1;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t b = i, digits = 1;
            while (i + 1 < n && strchr("0123456789+-.eE", h[i + 1])) {
                digits &= h[i + 1] >= '0' && h[i + 1] <= '9';
                i++;
            }
            digits &= c != '-';
            if (digits || depth != 3 || kind[1] != '{' || kind[2] != '{' || kind[3] != '[') continue;
            int shape = key_len[2] == 5 && strncmp(key[2], "shape", 5) == 0;
            int offs = key_len[2] == 12 && strncmp(key[2], "data_offsets", 12) == 0;
            if (shape || offs)
                return nnt_err_set(err, NNT_ERR_FORMAT,
                                   "%s: tensor '%.*s' has %s entry '%.*s' written with a fraction or exponent; the "
                                   "format takes integers written as digits",
                                   path, (int)key_len[1], key[1], shape ? "a shape" : "a data_offsets", (int)(i + 1 - b),
                                   h + b);
        }
    }
    return NNT_OK;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static nnt_status parse_entries(nnt_st_file *f, const cJSON *root, nnt_error *err);
static nnt_status names_unique(const nnt_st_file *f, nnt_error *err);
static nnt_status entries_tile(const nnt_st_file *f, nnt_error *err);

static nnt_status parse_entry(const char *path, const cJSON *item, nnt_st_entry *e,
                              uint64_t data_size, nnt_error *err)
{
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: header entry '%s' is not an object", path, name);
    nnt_status dup = known_fields_once(path, item, err);
    if (dup != NNT_OK) return dup;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs))
        return nnt_err_set(err, NNT_ERR_FORMAT,
                           "%s: tensor '%s' needs a string 'dtype', a list 'shape' and a list "
                           "'data_offsets' in the header", path, name);
    e->dtype = nnt_dtype_from_name(dt->valuestring);
    if (e->dtype == NNT_DTYPE_INVALID)
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: tensor '%s' has unknown dtype '%s'", path,
                           name, dt->valuestring);
    int nd = cJSON_GetArraySize(shape);
    if (nd > NNT_MAX_DIMS)
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: tensor '%s' has %d dimensions, at most %d supported",
                           path, name, nd, NNT_MAX_DIMS);
    e->ndim = nd;
    /* the product of the nonzero extents must fit in int64 (then every partial product taken in
     * any order does, and nnt_tensor_numel cannot overflow); numel is 0 when an extent is 0 */
    int64_t nonzero = 1, numel = 1;
    for (int i = 0; i < nd; i++) {
        uint64_t v;
        if (!json_uint(cJSON_GetArrayItem(shape, i), &v))
            return nnt_err_set(err, NNT_ERR_FORMAT,
                               "%s: tensor '%s' shape entry %d is not an integer in [0, 2^53]", path, name, i);
        e->shape[i] = (int64_t)v;
        if (v == 0) {
            numel = 0;
            continue;
        }
        if (__builtin_mul_overflow(nonzero, (int64_t)v, &nonzero))
            return nnt_err_set(err, NNT_ERR_FORMAT, "%s: tensor '%s' has a shape whose element count overflows 64 bits",
                               path, name);
    }
    if (numel) numel = nonzero;
    if (cJSON_GetArraySize(offs) != 2)
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: tensor '%s' data_offsets must hold two numbers", path, name);
    if (!json_uint(cJSON_GetArrayItem(offs, 0), &e->begin) || !json_uint(cJSON_GetArrayItem(offs, 1), &e->end))
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: tensor '%s' data_offsets are not integers in [0, 2^53]", path,
                           name);
    if (e->begin > e->end || e->end > data_size)
        return nnt_err_set(err, NNT_ERR_FORMAT,
                           "%s: tensor '%s' data_offsets [%llu, %llu] fall outside the data section "
                           "(%llu bytes; is the file truncated?)",
                           path, name, (unsigned long long)e->begin, (unsigned long long)e->end,
                           (unsigned long long)data_size);
    /* bytes needed: numel * bits / 8, whole (F4 packs two per byte); numel < 2^63, bits <= 64 */
    unsigned __int128 bits = (unsigned __int128)(uint64_t)numel * (unsigned)nnt_dtype_bits(e->dtype);
    int whole = bits % 8 == 0;
    unsigned __int128 need = bits / 8;
    if (!whole || need != (unsigned __int128)(e->end - e->begin)) {
        char sh[96];
        return nnt_err_set(err, NNT_ERR_FORMAT,
                           "%s: tensor '%s' spans %llu bytes but dtype %s and shape %s need %.0f%s",
                           path, name, (unsigned long long)(e->end - e->begin), nnt_dtype_name(e->dtype),
                           nnt_dims_str(e->ndim, e->shape, sh, sizeof sh), (double)need,
                           whole ? "" : " and a half (a whole number of bytes is required)");
    }
    e->name = nnt_strdup(name);
    if (!e->name) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    return NNT_OK;
}

/* The header of the safetensors bytes [size] f holds (its map, or a caller's buffer), checked
 * as nnt_st_open documents; fills f's data, data_size and entries. Messages name f->path. */
static nnt_status parse_bytes(nnt_st_file *f, const uint8_t *bytes, size_t size, nnt_error *err)
{
    const char *path = f->path ? f->path : "safetensors";
    if (size < 8)
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: truncated: %zu bytes, shorter than the 8-byte header length", path,
                           size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | bytes[i];
    nnt_status status = NNT_OK;
    cJSON *root = NULL;
    if (hlen > size - 8)
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: header length %llu runs past the end of the file (%zu bytes)",
                           path, (unsigned long long)hlen, size);
    if (hlen > MAX_HEADER_BYTES)
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: header length %llu exceeds the %u-byte limit", path,
                           (unsigned long long)hlen, MAX_HEADER_BYTES);
    /* the header is UTF-8 JSON text: valid UTF-8, and no control byte (JSON escapes those
     * inside strings; outside them only whitespace may stand) */
    size_t valid = nnt_utf8_valid_prefix((const char *)bytes + 8, (size_t)hlen);
    if (valid < hlen)
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: header byte %zu is not valid UTF-8 (the header is UTF-8 JSON)",
                           path, valid);
    for (size_t i = 0; i < hlen; i++) {
        uint8_t c = bytes[8 + i];
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
            return nnt_err_set(err, NNT_ERR_FORMAT, "%s: header byte %zu is the control byte 0x%02x (not JSON text)",
                               path, i, (unsigned)c);
    }
    /* the header is one JSON object; the format lets JSON whitespace pad it (its writers pad
     * with spaces to a multiple of 8 bytes), and nothing else may stand before or after it */
    const char *htext = (const char *)bytes + 8;
    size_t lead = 0;
    while (lead < hlen && is_json_space(htext[lead])) lead++;
    if (lead == hlen || htext[lead] != '{')
        return nnt_err_set(err, NNT_ERR_FORMAT,
                           "%s: malformed header JSON (expected an object; header byte %zu is not '{')", path, lead);
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(htext + lead, (size_t)hlen - lead, &end, 0);
    if (!root || !cJSON_IsObject(root)) {
        long off = (root || !end) ? 0 : (long)(end - htext);
        cJSON_Delete(root);
        return nnt_err_set(err, NNT_ERR_FORMAT,
                           "%s: malformed header JSON (expected an object; parse stopped near header byte %ld)", path,
                           off);
    }
    for (size_t i = (size_t)(end - htext); i < hlen; i++)
        if (!is_json_space(htext[i])) {
            cJSON_Delete(root);
            return nnt_err_set(err, NNT_ERR_FORMAT,
                               "%s: header byte %zu (0x%02x) follows the header's JSON object; only JSON "
                               "whitespace may pad the header",
                               path, i, (unsigned)(uint8_t)htext[i]);
        }
    f->data = bytes + 8 + hlen;
    f->data_size = size - 8 - hlen;
    status = parse_entries(f, root, err);
    /* every number passed as a whole one; now its spelling */
    if (status == NNT_OK) status = integer_notation(path, htext + lead, (size_t)(end - htext) - lead, err);
    if (status == NNT_OK) status = names_unique(f, err);
    if (status == NNT_OK) status = entries_tile(f, err);
    cJSON_Delete(root);
    return status;
}

/* The entries of the header object root (and its __metadata__) into f->entries. */
static nnt_status parse_entries(nnt_st_file *f, const cJSON *root, nnt_error *err)
{
    const char *path = f->path ? f->path : "safetensors";
    int n = cJSON_GetArraySize(root);
    f->entries = calloc((size_t)(n ? n : 1), sizeof *f->entries);
    if (!f->entries) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    int n_meta = 0;
    for (const cJSON *item = root->child; item; item = item->next) {
        nnt_status status;
        if (item->string && strcmp(item->string, "__metadata__") == 0) {
            status = check_metadata(path, item, ++n_meta, err);
            if (status != NNT_OK) return status;
            continue;
        }
        status = parse_entry(path, item, &f->entries[f->n_entries], f->data_size, err);
        if (status != NNT_OK) return status;
        f->n_entries++;
    }
    return NNT_OK;
}

/* A name given twice (JSON allows it; the format does not). */
static nnt_status names_unique(const nnt_st_file *f, nnt_error *err)
{
    if (f->n_entries < 2) return NNT_OK;
    const char **names = malloc((size_t)f->n_entries * sizeof *names);
    if (!names) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    for (int i = 0; i < f->n_entries; i++) names[i] = f->entries[i].name;
    qsort(names, (size_t)f->n_entries, sizeof *names, cmp_name);
    nnt_status status = NNT_OK;
    for (int i = 1; i < f->n_entries && status == NNT_OK; i++)
        if (strcmp(names[i], names[i - 1]) == 0)
            status = nnt_err_set(err, NNT_ERR_FORMAT, "%s: tensor '%s' is named twice in the header",
                                 f->path ? f->path : "safetensors", names[i]);
    free(names);
    return status;
}

/* The tensors tile the data section, as the format requires: sorted by offset, each begins
 * where the previous one ends (no overlap, no unused gap; an empty tensor sits at the offset
 * where it stands), and the last ends at the end of the file. */
static nnt_status entries_tile(const nnt_st_file *f, nnt_error *err)
{
    const char *path = f->path ? f->path : "safetensors";
    uint64_t reach = 0;
    const char *last = NULL; /* the tensor ending at reach (an entry's name, owned by f) */
    nnt_status status = NNT_OK;
    if (f->n_entries > 0) {
        nnt_st_entry *sorted = malloc((size_t)f->n_entries * sizeof *sorted);
        if (!sorted) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        memcpy(sorted, f->entries, (size_t)f->n_entries * sizeof *sorted);
        qsort(sorted, (size_t)f->n_entries, sizeof *sorted, cmp_begin);
        int prev = -1; /* the last tensor with bytes, whose end is reach */
        for (int i = 0; i < f->n_entries && status == NNT_OK; i++) {
            const nnt_st_entry *e = &sorted[i];
            if (e->begin < reach)
                status = nnt_err_set(err, NNT_ERR_FORMAT,
                                     "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap in the data section",
                                     path, sorted[prev].name, (unsigned long long)sorted[prev].begin,
                                     (unsigned long long)sorted[prev].end, e->name, (unsigned long long)e->begin,
                                     (unsigned long long)e->end);
            else if (e->begin > reach)
                status = nnt_err_set(err, NNT_ERR_FORMAT,
                                     "%s: data-section bytes [%llu, %llu) before tensor '%s' belong to no tensor "
                                     "(the format leaves no gaps)",
                                     path, (unsigned long long)reach, (unsigned long long)e->begin, e->name);
            else if (e->end > e->begin) {
                reach = e->end;
                prev = i;
                last = e->name;
            }
        }
        free(sorted);
        if (status != NNT_OK) return status;
    }
    if (reach != f->data_size)
        return nnt_err_set(err, NNT_ERR_FORMAT,
                           "%s: the data section holds %llu bytes but its tensors end at byte %llu%s%s%s; the "
                           "format allows no bytes after the last tensor",
                           path, (unsigned long long)f->data_size, (unsigned long long)reach, last ? " (tensor '" : "",
                           last ? last : "", last ? "')" : "");
    return NNT_OK;
}

nnt_status nnt_st_open(const char *path, nnt_st_file **out, nnt_error *err)
{
    *out = NULL;
    int fd;
    struct stat st;
    nnt_status opened = nnt_open_regular(path, &fd, &st, err);
    if (opened != NNT_OK) return opened;
    size_t size = (size_t)st.st_size;
    if (size < 8) {
        close(fd);
        return nnt_err_set(err, NNT_ERR_FORMAT,
                           "%s: truncated: %zu bytes, shorter than the 8-byte header length", path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        nnt_status st = nnt_err_set(err, NNT_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
        close(fd);
        return st;
    }
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC); /* kept open to check the mapped file for changes */
    nnt_st_file *f = calloc(1, sizeof *f);
    if (!f) {
        munmap(map, size);
        close(fd);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    f->path = nnt_strdup(path);
    f->map = map;
    f->map_size = size;
    f->fd = fd;
    f->mtime = st.st_mtim;
    f->guard = f->path ? nnt_guard_register(map, size, f->path) : -1;
    nnt_status status = f->path ? parse_bytes(f, map, size, err) : nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    /* the file as validated must be the file now (a truncation while the header was read
     * faults, with the guard installed, into zero bytes the checks above may have taken) */
    if (status == NNT_OK) status = nnt_st_check(f, err);
    if (status != NNT_OK) {
        if (nnt_guard_faulted(f->guard, NULL)) status = nnt_st_check(f, err); /* the fault explains the error */
        nnt_st_close(f);
        return status;
    }
    *out = f;
    return NNT_OK;
}

nnt_status nnt_st_open_memory(const char *name, const void *bytes, size_t size, nnt_st_file **out, nnt_error *err)
{
    *out = NULL;
    nnt_st_file *f = calloc(1, sizeof *f);
    if (!f) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    f->fd = -1;
    f->guard = -1;
    f->path = nnt_strdup(name ? name : "safetensors");
    nnt_status status = f->path ? parse_bytes(f, bytes, size, err) : nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    if (status != NNT_OK) {
        nnt_st_close(f);
        return status;
    }
    *out = f;
    return NNT_OK;
}

void nnt_st_close(nnt_st_file *f)
{
    if (!f) return;
    for (int i = 0; i < f->n_entries; i++) free(f->entries[i].name);
    free(f->entries);
    nnt_guard_unregister(f->guard);
    if (f->map) munmap(f->map, f->map_size);
    if (f->fd >= 0) close(f->fd);
    free(f->path);
    free(f);
}

nnt_status nnt_st_check(const nnt_st_file *f, nnt_error *err)
{
    uint64_t at = 0;
    if (f->fd < 0) return NNT_OK; /* bytes in memory (nnt_st_open_memory): nothing can change under them */
    if (nnt_guard_faulted(f->guard, &at))
        return nnt_err_set(err, NNT_ERR_IO,
                           "%s: reading the mapped file failed at byte %llu (SIGBUS): it was truncated, or could not "
                           "be read, while in use; results that depend on it are not valid",
                           f->path, (unsigned long long)at);
    struct stat st;
    if (fstat(f->fd, &st) != 0)
        return nnt_err_set(err, NNT_ERR_IO, "%s: cannot check the mapped file: %s", f->path, strerror(errno));
    if ((size_t)st.st_size != f->map_size)
        return nnt_err_set(err, NNT_ERR_IO,
                           "%s: changed on disk while in use (size %zu bytes at open, now %lld); results that depend "
                           "on it are not valid",
                           f->path, f->map_size, (long long)st.st_size);
    if (st.st_mtim.tv_sec != f->mtime.tv_sec || st.st_mtim.tv_nsec != f->mtime.tv_nsec)
        return nnt_err_set(err, NNT_ERR_IO,
                           "%s: changed on disk while in use (modified after it was opened); results that depend on "
                           "it may mix old and new bytes",
                           f->path);
    return NNT_OK;
}

const nnt_st_entry *nnt_st_find(const nnt_st_file *f, const char *name)
{
    for (int i = 0; i < f->n_entries; i++)
        if (strcmp(f->entries[i].name, name) == 0) return &f->entries[i];
    return NULL;
}

/* The header of n host tensors under keys (unique) with optional metadata, as the bytes that
 * precede the data: the 8-byte length and the JSON padded with spaces to a multiple of 8.
 * *out (malloc'd, *len bytes) is the caller's. Messages name `name`. */
static nnt_status st_header(const char *name, int n, const char *const *keys, const nnt_tensor *const *tensors,
                            const char *metadata_json, uint8_t **out, size_t *len, nnt_error *err)
{
    cJSON *root = cJSON_CreateObject();
    if (!root) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    if (metadata_json) {
        cJSON *meta = cJSON_Parse(metadata_json);
        if (meta) cJSON_AddItemToObject(root, "__metadata__", meta);
    }
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const nnt_tensor *t = tensors[i];
        if (t->device) {
            cJSON_Delete(root);
            return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "%s: tensor '%s' is not in host memory", name, keys[i]);
        }
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "dtype", nnt_dtype_name(t->dtype));
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t->ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        uint64_t bytes = nnt_tensor_nbytes(t);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)offset));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(offset + bytes)));
        offset += bytes;
        if (cJSON_GetObjectItemCaseSensitive(root, keys[i])) {
            cJSON_Delete(e);
            cJSON_Delete(root);
            return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "%s: key '%s' appears twice", name, keys[i]);
        }
        cJSON_AddItemToObject(root, keys[i], e);
    }
    char *header = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!header) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    size_t hlen = strlen(header), padded = (hlen + 7) & ~(size_t)7;
    *out = malloc(8 + padded);
    if (!*out) {
        free(header);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    for (int i = 0; i < 8; i++) (*out)[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(*out + 8, header, hlen);
    memset(*out + 8 + hlen, ' ', padded - hlen);
    *len = 8 + padded;
    free(header);
    return NNT_OK;
}

nnt_status nnt_st_serialize(int n, const char *const *keys, const nnt_tensor *const *tensors, const char *metadata_json,
                            void **out, size_t *out_len, nnt_error *err)
{
    *out = NULL;
    *out_len = 0;
    uint8_t *head;
    size_t hlen, total;
    nnt_status st = st_header("safetensors", n, keys, tensors, metadata_json, &head, &hlen, err);
    if (st != NNT_OK) return st;
    total = hlen;
    for (int i = 0; i < n; i++) total += nnt_tensor_nbytes(tensors[i]);
    uint8_t *buf = realloc(head, total ? total : 1);
    if (!buf) {
        free(head);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for %zu bytes of safetensors", total);
    }
    size_t at = hlen;
    for (int i = 0; i < n; i++) {
        size_t bytes = nnt_tensor_nbytes(tensors[i]);
        if (bytes) memcpy(buf + at, tensors[i]->data, bytes);
        at += bytes;
    }
    *out = buf;
    *out_len = total;
    return NNT_OK;
}

nnt_status nnt_st_write(const char *path, int n, const char *const *keys,
                        const nnt_tensor *const *tensors, const char *metadata_json,
                        nnt_error *err)
{
    uint8_t *header;
    size_t hbytes;
    nnt_status hst = st_header(path, n, keys, tensors, metadata_json, &header, &hbytes, err);
    if (hst != NNT_OK) return hst;

    /* the header, then each tensor's bytes, put in place whole (core/base/outfile.c) */
    const void **parts = malloc(sizeof *parts * (size_t)(n + 1));
    size_t *lens = malloc(sizeof *lens * (size_t)(n + 1));
    nnt_status st = parts && lens ? NNT_OK : nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    if (st == NNT_OK) {
        parts[0] = header;
        lens[0] = hbytes;
        for (int i = 0; i < n; i++) {
            parts[i + 1] = tensors[i]->data;
            lens[i + 1] = nnt_tensor_nbytes(tensors[i]);
        }
        st = nnt_write_parts(path, n + 1, parts, lens, err);
    }
    free(parts);
    free(lens);
    free(header);
    return st;
}

nnt_status nnt_st_emit(const nnt_st_sink *s, int n, const char *const *keys, const nnt_tensor *const *tensors,
                       const char *metadata_json, nnt_error *err)
{
    if (s->file) return nnt_st_write(s->file, n, keys, tensors, metadata_json, err);
    return nnt_st_serialize(n, keys, tensors, metadata_json, s->bytes, s->len, err);
}

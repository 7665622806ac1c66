/* plan.c - pipeline plans: which contiguous blocks each rank holds and what it costs in bytes
 * (weights in their stored encoding, caches for a context), from the safetensors headers and the
 * cost model of the family plugin serving config.json (its descriptor's `costs`), which also
 * gives the weights when the shards are absent. The core names no family. The split itself
 * (nnt_plan_split) takes any per-block costs, so distributed runs reuse it. See nnt.h. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define MAX_PLAN_BLOCKS 65536

struct nnt_plan {
    char *architecture;
    char *family;             /* the family plugin serving config.json, or NULL */
    int n_blocks, ranks, exact, n_files;
    int has_index;            /* model.safetensors.index.json present (its shards may not be) */
    int caches_known;         /* the family's cost model gave the caches */
    char why_unknown[160];    /* when not: why (no runtime, no family, a family without costs) */
    uint64_t *weight, *cache; /* [n_blocks] */
    uint64_t first_bytes, last_bytes, unused_bytes, index_total, memory, largest;
    int *first_block;         /* [ranks + 1] */
    nnt_plan_opts opts;
};

/* ---- the split ---- */

/* Greedy from the last block: each stage takes as many blocks as fit under cap. Returns the
 * number of stages (bounds written to starts[], from the last stage back, when not NULL), or
 * -1 when one block alone exceeds cap. Packing from the right leaves the shortest possible
 * prefix for the stage holding block 0, so no split uses fewer stages under cap. */
static int pack_right(const uint64_t *b, int n, uint64_t first, uint64_t last, uint64_t cap, int *starts)
{
    int count = 0, i = n - 1;
    while (i >= 0) {
        uint64_t cost = count == 0 ? last : 0;
        int taken = 0;
        while (i >= 0) {
            uint64_t add = b[i] + (i == 0 ? first : 0);
            if (cost + add > cap) break;
            cost += add;
            i--;
            taken++;
        }
        if (!taken) return -1;
        if (starts) starts[count] = i + 1;
        count++;
    }
    return count;
}

static uint64_t stage_cost(const uint64_t *b, int n, uint64_t first, uint64_t last, int lo, int hi)
{
    uint64_t c = 0;
    for (int i = lo; i < hi; i++) c += b[i];
    if (lo == 0) c += first;
    if (hi == n) c += last;
    return c;
}

nnt_status nnt_plan_split(const uint64_t *block_bytes, int n_blocks, uint64_t first_extra, uint64_t last_extra,
                          int ranks, int *first_block, uint64_t *largest)
{
    if (!block_bytes || !first_block || n_blocks < 1 || ranks < 1 || ranks > n_blocks) return NNT_ERR_INVALID_ARGUMENT;
    uint64_t lo = 0, hi = first_extra + last_extra;
    for (int i = 0; i < n_blocks; i++) hi += block_bytes[i];
    /* the smallest cap under which at most `ranks` stages cover every block */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int k = pack_right(block_bytes, n_blocks, first_extra, last_extra, mid, NULL);
        if (k > 0 && k <= ranks)
            hi = mid;
        else
            lo = mid + 1;
    }
    /* Among the splits whose stages all cost at most that cap, the most even one: the least
     * sum of squared stage costs, by dynamic programming over (stages, blocks) when that is
     * small enough; else the packing below, split further where stages are missing. */
    if ((double)ranks * n_blocks * n_blocks <= 2e8) {
        size_t cells = (size_t)(ranks + 1) * (size_t)(n_blocks + 1);
        long double *f = malloc(cells * sizeof *f);
        int *from = malloc(cells * sizeof *from);
        uint64_t *prefix = malloc((size_t)(n_blocks + 1) * sizeof *prefix);
        if (!f || !from || !prefix) {
            free(f);
            free(from);
            free(prefix);
            return NNT_ERR_OUT_OF_MEMORY;
        }
        prefix[0] = 0;
        for (int i = 0; i < n_blocks; i++) prefix[i + 1] = prefix[i] + block_bytes[i];
#define AT(r, j) ((size_t)(r) * (size_t)(n_blocks + 1) + (size_t)(j))
        for (size_t c = 0; c < cells; c++) f[c] = -1; /* unreachable */
        f[AT(0, 0)] = 0;
        for (int r = 1; r <= ranks; r++)
            for (int j = r; j <= n_blocks - (ranks - r); j++)
                for (int i = j - 1; i >= r - 1; i--) {
                    uint64_t c = prefix[j] - prefix[i] + (i == 0 ? first_extra : 0) + (j == n_blocks ? last_extra : 0);
                    if (c > lo) break; /* longer stages only cost more */
                    if (f[AT(r - 1, i)] < 0) continue;
                    long double v = f[AT(r - 1, i)] + (long double)c * (long double)c;
                    if (f[AT(r, j)] < 0 || v < f[AT(r, j)]) {
                        f[AT(r, j)] = v;
                        from[AT(r, j)] = i;
                    }
                }
        int ok = f[AT(ranks, n_blocks)] >= 0;
        if (ok) {
            first_block[ranks] = n_blocks;
            for (int r = ranks; r > 0; r--) first_block[r - 1] = from[AT(r, first_block[r])];
        }
#undef AT
        free(f);
        free(from);
        free(prefix);
        if (ok) goto done;
    }
    int *starts = malloc((size_t)n_blocks * sizeof *starts);
    if (!starts) return NNT_ERR_OUT_OF_MEMORY;
    int k = pack_right(block_bytes, n_blocks, first_extra, last_extra, lo, starts);
    /* ascending bounds */
    first_block[0] = 0;
    for (int s = 0; s < k; s++) first_block[s] = starts[k - 1 - s];
    first_block[k] = n_blocks;
    free(starts);
    /* fewer stages than ranks: split the costliest stage of two or more blocks where its halves
     * are most even (neither half costs more than the whole, so the largest stage stays) */
    while (k < ranks) {
        int best = -1;
        uint64_t best_cost = 0;
        for (int s = 0; s < k; s++) {
            if (first_block[s + 1] - first_block[s] < 2) continue;
            uint64_t c = stage_cost(block_bytes, n_blocks, first_extra, last_extra, first_block[s], first_block[s + 1]);
            if (best < 0 || c > best_cost) best = s, best_cost = c;
        }
        int lo_b = first_block[best], hi_b = first_block[best + 1], cut = lo_b + 1;
        uint64_t best_max = UINT64_MAX;
        for (int c = lo_b + 1; c < hi_b; c++) {
            uint64_t a = stage_cost(block_bytes, n_blocks, first_extra, last_extra, lo_b, c);
            uint64_t z = stage_cost(block_bytes, n_blocks, first_extra, last_extra, c, hi_b);
            uint64_t m = a > z ? a : z;
            if (m < best_max) best_max = m, cut = c;
        }
        memmove(first_block + best + 2, first_block + best + 1, (size_t)(k - best) * sizeof *first_block);
        first_block[best + 1] = cut;
        k++;
    }
done:
    if (largest) {
        uint64_t m = 0;
        for (int s = 0; s < ranks; s++) {
            uint64_t c = stage_cost(block_bytes, n_blocks, first_extra, last_extra, first_block[s], first_block[s + 1]);
            if (c > m) m = c;
        }
        *largest = m;
    }
    return NNT_OK;
}

/* ---- block membership from tensor names ---- */

/* The block a tensor belongs to: the number after a "layers" name segment; -1 outside the
 * blocks; -2 for a tensor nnt does not load (a segment starting "mtp": multi-token prediction). */
static long long block_of(const char *name)
{
    for (const char *p = name; *p;) {
        const char *seg = p;
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (len >= 3 && strncmp(seg, "mtp", 3) == 0) return -2;
        p = dot ? dot + 1 : p + len;
        if (!dot) break;
    }
    for (const char *p = name; (p = strstr(p, "layers.")) != NULL; p += 7) {
        if (p != name && p[-1] != '.') continue;
        const char *d = p + 7;
        if (*d < '0' || *d > '9') continue;
        long long v = 0;
        for (; *d >= '0' && *d <= '9'; d++) v = v < 100000000 ? v * 10 + (*d - '0') : v;
        if (*d == '.' || *d == '\0') return v;
    }
    return -1;
}

static int is_embedding(const char *name)
{
    return strstr(name, "embed") != NULL;
}

/* ---- weights from the headers ---- */

static nnt_status weights_from_headers(nnt_plan *p, const char *dir, nnt_error *err)
{
    nnt_checkpoint *ck = NULL;
    nnt_status st = nnt_checkpoint_open(dir, &ck, err);
    if (st != NNT_OK) return st;
    for (int f = 0; f < ck->n_files; f++)
        for (int i = 0; i < ck->files[f]->n_entries; i++) {
            const nnt_st_entry *e = &ck->files[f]->entries[i];
            uint64_t bytes = e->end - e->begin;
            long long b = block_of(e->name);
            if (b >= p->n_blocks || b == -2)
                p->unused_bytes += bytes;
            else if (b >= 0)
                p->weight[b] += bytes;
            else if (is_embedding(e->name))
                p->first_bytes += bytes;
            else
                p->last_bytes += bytes;
        }
    p->n_files = ck->n_files;
    p->exact = 1;
    nnt_checkpoint_close(ck);
    return NNT_OK;
}

/* ---- the plan ---- */

static uint64_t physical_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

/* Whether every shard model.safetensors.index.json names is present; *total gets its
 * metadata.total_size (0 when absent). Only those two members are built in memory; the rest of
 * the file is checked for syntax (nnt_json_pick). */
static nnt_status index_shards(const char *dir, const char *index, int *all_present, uint64_t *total, nnt_error *err)
{
    static const nnt_json_want metadata[] = {{"total_size", NULL}, {NULL, NULL}};
    static const nnt_json_want want[] = {{"weight_map", NULL}, {"metadata", metadata}, {NULL, NULL}};
    char *text = NULL;
    size_t len = 0;
    *all_present = 1;
    *total = 0;
    nnt_status st = nnt_read_file(index, (size_t)256 << 20, &text, &len, err);
    if (st != NNT_OK) return st;
    cJSON *root = NULL;
    st = nnt_json_pick(text, len, want, index, &root, err);
    free(text);
    if (st != NNT_OK) return st;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "metadata"), "total_size");
    if (cJSON_IsNumber(ts) && ts->valuedouble >= 0) *total = (uint64_t)ts->valuedouble;
    if (!cJSON_IsObject(map)) {
        cJSON_Delete(root);
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: expected an object field 'weight_map'", index);
    }
    for (const cJSON *e = map->child; e && *all_present; e = e->next) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/')) {
            cJSON_Delete(root);
            return nnt_err_set(err, NNT_ERR_FORMAT, "%s: weight_map['%s'] is not a file name in the directory", index,
                               e->string);
        }
        char *file = nnt_path_join(dir, e->valuestring);
        if (!file || !nnt_file_exists(file)) *all_present = 0;
        free(file);
    }
    cJSON_Delete(root);
    return NNT_OK;
}

/* config.json's architectures[0] and num_hidden_layers (keys every checkpoint has, read by the
 * core itself), and the plan's arrays. */
static nnt_status plan_blocks(nnt_plan *p, const nnt_checkpoint *ck, const nnt_plan_opts *o, nnt_error *err)
{
    const char *const *arch = nnt_cfg_architectures(ck);
    if (!arch || !arch[0])
        return nnt_err_set(err, NNT_ERR_CONFIG, "%s: expected a non-empty list 'architectures'", nnt_cfg_path(ck));
    p->architecture = nnt_strdup(arch[0]);
    int64_t layers = 0;
    nnt_status st = nnt_cfg_int(ck, "num_hidden_layers", 0, 1, &layers, err);
    if (st != NNT_OK) return st;
    if (layers < 1 || layers > MAX_PLAN_BLOCKS)
        return nnt_err_set(err, NNT_ERR_CONFIG, "%s: num_hidden_layers is %lld; expected 1 to %d", nnt_cfg_path(ck),
                           (long long)layers, MAX_PLAN_BLOCKS);
    if (o->ranks > layers)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                           "%d ranks for %lld blocks (%s: num_hidden_layers): every rank needs at least one block",
                           o->ranks, (long long)layers, nnt_cfg_path(ck));
    p->n_blocks = (int)layers;
    p->weight = calloc((size_t)layers, sizeof *p->weight);
    p->cache = calloc((size_t)layers, sizeof *p->cache);
    p->first_block = calloc((size_t)o->ranks + 1, sizeof *p->first_block);
    if (!p->architecture || !p->weight || !p->cache || !p->first_block)
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    return NNT_OK;
}

/* The family plugin serving ck when it has a cost model, else NULL with p->why_unknown saying
 * why there is none. */
static const nnt_plugin *plan_family(nnt_plan *p, const nnt_plan_opts *o, const nnt_checkpoint *ck)
{
    const nnt_plugin *fam = o->runtime ? nnt_runtime_find_family(o->runtime, ck) : NULL;
    if (fam) p->family = nnt_strdup(fam->family->header.name);
    if (!o->runtime)
        snprintf(p->why_unknown, sizeof p->why_unknown, "no runtime was given, so no family plugin's cost model");
    else if (!fam)
        snprintf(p->why_unknown, sizeof p->why_unknown, "no loaded family plugin serves %s", p->architecture);
    else if (!fam->family->costs)
        snprintf(p->why_unknown, sizeof p->why_unknown, "the family plugin '%s' has no cost model",
                 fam->family->header.name);
    return fam && fam->family->costs ? fam : NULL;
}

/* Weights and caches from the family's costs entry (nnt_cost_args), config.json alone. */
static nnt_status family_costs(nnt_plan *p, const nnt_plugin *fam, const nnt_checkpoint *ck, const nnt_plan_opts *o,
                               nnt_error *err)
{
    nnt_cost_args a = {.struct_size = sizeof a, .core = &o->runtime->core, .ckpt = ck, .n_blocks = p->n_blocks,
                       .context = o->context, .batch = o->batch, .weight_bytes = p->weight, .cache_bytes = p->cache};
    memset(p->weight, 0, (size_t)p->n_blocks * sizeof *p->weight);
    memset(p->cache, 0, (size_t)p->n_blocks * sizeof *p->cache);
    nnt_err_clear(err);
    nnt_status st = fam->family->costs(&a, err);
    if (st != NNT_OK) {
        if (!err->msg[0])
            nnt_err_set(err, st, "%s: the cost model of family '%s' failed (%s) without a message", nnt_cfg_path(ck),
                        fam->family->header.name, nnt_status_str(st));
        return st;
    }
    p->first_bytes = a.first_bytes;
    p->last_bytes = a.last_bytes;
    p->caches_known = 1;
    return NNT_OK;
}

/* Whether the safetensors headers can give the weights: model.safetensors, or every shard
 * model.safetensors.index.json names (its total_size kept). */
static nnt_status shards_present(nnt_plan *p, const char *dir, int *headers, nnt_error *err)
{
    char *index = nnt_path_join(dir, "model.safetensors.index.json");
    char *single = nnt_path_join(dir, "model.safetensors");
    nnt_status st = NNT_OK;
    *headers = 0;
    if (!index || !single)
        st = nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    else if ((p->has_index = nnt_file_exists(index)) != 0)
        st = index_shards(dir, index, headers, &p->index_total, err);
    else
        *headers = nnt_file_exists(single);
    free(index);
    free(single);
    return st;
}

static nnt_status plan_build(nnt_plan *p, const char *dir, const nnt_plan_opts *o, nnt_error *err)
{
    nnt_checkpoint *ck = NULL; /* config.json only, for the cfg_* readers and the costs */
    nnt_status st = nnt_checkpoint_open_config(dir, &ck, err);
    if (st == NNT_OK) st = plan_blocks(p, ck, o, err);
    const nnt_plugin *fam = st == NNT_OK ? plan_family(p, o, ck) : NULL;
    if (fam) st = family_costs(p, fam, ck, o, err);
    int headers = 0;
    if (st == NNT_OK && !o->from_config) st = shards_present(p, dir, &headers, err);
    if (st == NNT_OK && headers) { /* exact: the headers replace the computed weights */
        memset(p->weight, 0, (size_t)p->n_blocks * sizeof *p->weight);
        p->first_bytes = p->last_bytes = 0;
        st = weights_from_headers(p, dir, err);
    } else if (st == NNT_OK && !p->caches_known) {
        if (o->from_config)
            st = nnt_err_set(err, NNT_ERR_UNSUPPORTED, "%s: the weights were asked from config.json (from_config), but %s",
                             dir, p->why_unknown);
        else
            st = nnt_err_set(err, NNT_ERR_UNSUPPORTED,
                             "%s: no safetensors files to read the weights from (model.safetensors, or every shard "
                             "model.safetensors.index.json names), and no cost model to compute them from config.json: %s",
                             dir, p->why_unknown);
    }
    nnt_checkpoint_close(ck);
    return st;
}

nnt_status nnt_plan_new(const char *dir, const nnt_plan_opts *opts, nnt_plan **out, nnt_error *err)
{
    nnt_error local;
    if (!err) err = &local;
    nnt_err_clear(err);
    if (out) *out = NULL;
    if (!dir || !opts || !out) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "nnt_plan_new: NULL argument");
    if (opts->ranks < 1) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "ranks is %d; expected 1 or more", opts->ranks);
    if (opts->batch < 1 || opts->batch > ((int64_t)1 << 30))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "batch is %lld; expected 1 to 2^30", (long long)opts->batch);
    if (opts->context < 0 || opts->context > ((int64_t)1 << 30))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "context is %lld; expected 0 to 2^30 tokens",
                           (long long)opts->context);
    nnt_plan *p = calloc(1, sizeof *p);
    if (!p) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    p->opts = *opts;
    p->ranks = opts->ranks;
    nnt_status st = plan_build(p, dir, opts, err);
    if (st == NNT_OK) {
        st = nnt_plan_split(p->weight, p->n_blocks, p->first_bytes, p->last_bytes, p->ranks, p->first_block, &p->largest);
        if (st != NNT_OK) nnt_err_set(err, st, "cannot split %d blocks over %d ranks", p->n_blocks, p->ranks);
    }
    if (st != NNT_OK) {
        nnt_plan_free(p);
        return st;
    }
    p->memory = opts->memory_bytes ? opts->memory_bytes
                                   : opts->device == NNT_PLAN_CUDA ? (uint64_t)141000000000ULL : physical_memory();
    *out = p;
    return NNT_OK;
}

void nnt_plan_free(nnt_plan *p)
{
    if (!p) return;
    free(p->architecture);
    free(p->family);
    free(p->weight);
    free(p->cache);
    free(p->first_block);
    free(p);
}

int nnt_plan_get_stage(const nnt_plan *p, int r, nnt_plan_stage *out)
{
    if (!p || !out || r < 0 || r >= p->ranks) return 0;
    memset(out, 0, sizeof *out);
    out->first_block = p->first_block[r];
    out->n_blocks = p->first_block[r + 1] - p->first_block[r];
    for (int b = p->first_block[r]; b < p->first_block[r + 1]; b++) {
        out->weight_bytes += p->weight[b];
        out->cache_bytes += p->cache[b];
    }
    if (r == 0) out->weight_bytes += p->first_bytes;
    if (r == p->ranks - 1) out->weight_bytes += p->last_bytes;
    out->fits = out->weight_bytes + out->cache_bytes <= p->memory;
    return 1;
}

void nnt_plan_get_summary(const nnt_plan *p, nnt_plan_summary *out)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!p) return;
    out->architecture = p->architecture;
    out->n_blocks = p->n_blocks;
    out->ranks = p->ranks;
    out->exact = p->exact;
    out->n_files = p->n_files;
    out->first_bytes = p->first_bytes;
    out->last_bytes = p->last_bytes;
    out->unused_bytes = p->unused_bytes;
    out->index_total_bytes = p->index_total;
    out->memory_bytes = p->memory;
    out->largest_stage = p->largest;
    out->caches_known = p->caches_known;
    out->costs_from = p->caches_known ? "family" : "headers";
    out->family = p->family;
    out->all_fit = 1;
    nnt_plan_stage s;
    for (int r = 0; nnt_plan_get_stage(p, r, &s); r++) out->all_fit &= s.fits;
}

int nnt_plan_block(const nnt_plan *p, int b, uint64_t *weight_bytes, uint64_t *cache_bytes)
{
    if (!p || b < 0 || b >= p->n_blocks) return 0;
    if (weight_bytes) *weight_bytes = p->weight[b];
    if (cache_bytes) *cache_bytes = p->cache[b];
    return 1;
}

/* Decimal units: GB, MB, kB (1e9, 1e6, 1e3 bytes), two decimals; plain bytes below 1 kB. */
static const char *gb(uint64_t v, char *buf, size_t n)
{
    if (v >= 1000000000ULL)
        snprintf(buf, n, "%.2f GB", (double)v / 1e9);
    else if (v >= 1000000ULL)
        snprintf(buf, n, "%.2f MB", (double)v / 1e6);
    else if (v >= 1000ULL)
        snprintf(buf, n, "%.2f kB", (double)v / 1e3);
    else
        snprintf(buf, n, "%llu B", (unsigned long long)v);
    return buf;
}

/* The weights line of the printout. */
static void print_weights(const nnt_plan *p, const nnt_plan_summary *s, uint64_t total, FILE *out)
{
    char a[32], b[32], c[32];
    if (s->exact)
        fprintf(out, "weights: exact, from the safetensors headers (%d file%s): %s", s->n_files, s->n_files == 1 ? "" : "s",
                gb(total, a, sizeof a));
    else
        fprintf(out, "weights: computed from config.json's dimensions and quantization by the %s family's cost model (%s): %s",
                s->family, p->opts.from_config ? "as asked"
                           : p->has_index      ? "the index's shards are not all present"
                                               : "no safetensors present",
                gb(total, a, sizeof a));
    if (s->unused_bytes) fprintf(out, ", plus %s nnt does not load (multi-token prediction)", gb(s->unused_bytes, b, sizeof b));
    if (s->index_total_bytes) fprintf(out, "; the index's total_size: %s", gb(s->index_total_bytes, c, sizeof c));
    fputc('\n', out);
}

nnt_status nnt_plan_print(const nnt_plan *p, const char *dir, FILE *out)
{
    if (!p || !out) return NNT_ERR_INVALID_ARGUMENT;
    nnt_plan_summary s;
    nnt_plan_get_summary(p, &s);
    char a[32], b[32];
    uint64_t total = s.first_bytes + s.last_bytes, caches = 0;
    for (int i = 0; i < p->n_blocks; i++) total += p->weight[i], caches += p->cache[i];
    fprintf(out, "plan: %s (%s), %d blocks over %d rank%s on %s, %s per rank\n", dir ? dir : "", s.architecture,
            s.n_blocks, s.ranks, s.ranks == 1 ? "" : "s", p->opts.device == NNT_PLAN_CUDA ? "cuda" : "cpu",
            gb(s.memory_bytes, a, sizeof a));
    print_weights(p, &s, total, out);
    if (s.caches_known)
        fprintf(out, "caches: %lld token%s x %lld row%s, float32: %s in all (the %s family's cost model)\n",
                (long long)p->opts.context, p->opts.context == 1 ? "" : "s", (long long)p->opts.batch,
                p->opts.batch == 1 ? "" : "s", gb(caches, a, sizeof a), s.family);
    else
        fprintf(out, "caches: not known - %s; the ranks below are checked against their weights alone\n", p->why_unknown);
    fprintf(out, "rank 0 holds the embedding (%s); rank %d the final norm and lm_head (%s)\n",
            gb(s.first_bytes, a, sizeof a), s.ranks - 1, gb(s.last_bytes, b, sizeof b));
    fprintf(out, "%-5s %-9s %14s %14s %14s  %s\n", "rank", "blocks", "weights", "caches", "total", "fits");
    nnt_plan_stage st;
    for (int r = 0; nnt_plan_get_stage(p, r, &st); r++) {
        char blocks[32], t[32];
        snprintf(blocks, sizeof blocks, "%d-%d", st.first_block, st.first_block + st.n_blocks - 1);
        fprintf(out, "%-5d %-9s %14s %14s %14s  %s\n", r, blocks, gb(st.weight_bytes, a, sizeof a),
                s.caches_known ? gb(st.cache_bytes, b, sizeof b) : "not known", gb(st.weight_bytes + st.cache_bytes, t, sizeof t),
                st.fits ? "yes" : "NO");
    }
    if (s.caches_known)
        fprintf(out, "%s\n", s.all_fit ? "every rank fits" : "some ranks do not fit: more ranks, more memory, or a shorter context");
    else
        fprintf(out, "%s\n", s.all_fit ? "every rank's weights fit (the caches are not known)"
                                       : "some ranks' weights do not fit: more ranks or more memory");
    return NNT_OK;
}

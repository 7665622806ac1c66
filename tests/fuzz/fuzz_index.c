/* fuzz_index.c - libFuzzer harness for the sharded-checkpoint index
 * (model.safetensors.index.json, core/checkpoint/checkpoint.c). At start-up the example checkpoint
 * (examples/tiny-minimax-m2) is split into two shards in the harness's temporary folder,
 * model-00001-of-00002.safetensors (the first half of its tensors by name) and
 * model-00002-of-00002.safetensors (the rest), next to a link to its config.json. The input is
 * the index file; the checkpoint is opened from that folder. An index the reader accepts must
 * give a checkpoint in which every tensor its weight_map names can be found. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "fuzz_common.h"

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Writes entries [lo, hi) of f (names sorted in `order`) as shard `name` in the folder. */
static void write_shard(const nnt_st_file *f, const int *order, int lo, int hi, const char *name)
{
    const char **keys = calloc((size_t)(hi - lo) + 1, sizeof *keys);
    nnt_tensor *views = calloc((size_t)(hi - lo) + 1, sizeof *views);
    const nnt_tensor **ptrs = calloc((size_t)(hi - lo) + 1, sizeof *ptrs);
    if (!keys || !views || !ptrs) abort();
    for (int i = lo; i < hi; i++) {
        const nnt_st_entry *e = &f->entries[order[i]];
        nnt_tensor *t = &views[i - lo];
        t->dtype = e->dtype;
        t->ndim = e->ndim;
        memcpy(t->shape, e->shape, sizeof e->shape);
        t->data = (void *)(f->data + e->begin);
        keys[i - lo] = e->name;
        ptrs[i - lo] = t;
    }
    char path[1024];
    nnt_error err = {0};
    fuzz_file(name, path, sizeof path);
    if (nnt_st_write(path, hi - lo, keys, ptrs, NULL, &err) != NNT_OK) {
        fprintf(stderr, "nnt fuzz: cannot write %s: %s\n", path, err.msg);
        abort();
    }
    free(keys);
    free(views);
    free(ptrs);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *src = NNT_FUZZ_SOURCE_DIR "/examples/tiny-minimax-m2/model.safetensors";
    nnt_st_file *f = NULL;
    nnt_error err = {0};
    if (nnt_st_open(src, &f, &err) != NNT_OK) {
        fprintf(stderr, "nnt fuzz: %s\n", err.msg);
        abort();
    }
    const char **names = calloc((size_t)f->n_entries, sizeof *names);
    int *order = calloc((size_t)f->n_entries, sizeof *order);
    if (!names || !order) abort();
    for (int i = 0; i < f->n_entries; i++) names[i] = f->entries[i].name;
    qsort(names, (size_t)f->n_entries, sizeof *names, cmp_str);
    for (int i = 0; i < f->n_entries; i++)
        for (int j = 0; j < f->n_entries; j++)
            if (f->entries[j].name == names[i]) order[i] = j;
    int half = f->n_entries / 2;
    write_shard(f, order, 0, half, "model-00001-of-00002.safetensors");
    write_shard(f, order, half, f->n_entries, "model-00002-of-00002.safetensors");
    free(names);
    free(order);
    nnt_st_close(f);
    fuzz_link("config.json", NNT_FUZZ_SOURCE_DIR "/examples/tiny-minimax-m2/config.json");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024];
    fuzz_write("model.safetensors.index.json", data, size, path, sizeof path);
    nnt_error err = {0};
    nnt_checkpoint *ck = NULL;
    if (nnt_checkpoint_open(fuzz_dir(), &ck, &err) != NNT_OK) {
        fuzz_note("refused", err.msg);
        FUZZ_CHECK(err.msg[0], "a refusal without a message (status %d)", (int)err.status);
        return 0;
    }
    fuzz_note("accepted", "");
    /* every name the accepted index maps is in the checkpoint */
    cJSON *root = cJSON_ParseWithLength((const char *)data, size);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    for (const cJSON *e = map ? map->child : NULL; e; e = e->next)
        FUZZ_CHECK(nnt_ck_has_tensor(ck, e->string), "weight_map names '%s', which the checkpoint lacks", e->string);
    cJSON_Delete(root);
    nnt_checkpoint_close(ck);
    return 0;
}

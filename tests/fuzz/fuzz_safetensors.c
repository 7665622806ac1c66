/* fuzz_safetensors.c - libFuzzer harness for the safetensors reader (core/checkpoint/safetensors.c).
 * The input is a whole .safetensors file. A file the reader accepts is checked further: every
 * tensor's bytes lie inside the mapping (first and last byte read), its byte count matches its
 * dtype and shape, nnt_st_find finds it by name, and writing the tensors back with nnt_st_write
 * gives a file the reader accepts with the same names, dtypes and shapes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024], out_path[1024];
    fuzz_write("in.safetensors", data, size, path, sizeof path);
    nnt_error err = {0};
    nnt_st_file *f = NULL;
    if (nnt_st_open(path, &f, &err) != NNT_OK) {
        fuzz_note("refused", err.msg);
        FUZZ_CHECK(err.msg[0], "a refusal without a message (status %d)", (int)err.status);
        return 0;
    }
    fuzz_note("accepted", "");
    const uint8_t *map_end = (const uint8_t *)f->map + f->map_size;
    const char **keys = calloc((size_t)f->n_entries + 1, sizeof *keys);
    nnt_tensor *views = calloc((size_t)f->n_entries + 1, sizeof *views);
    const nnt_tensor **ptrs = calloc((size_t)f->n_entries + 1, sizeof *ptrs);
    if (!keys || !views || !ptrs) abort();
    volatile uint8_t sink = 0;
    for (int i = 0; i < f->n_entries; i++) {
        const nnt_st_entry *e = &f->entries[i];
        FUZZ_CHECK(nnt_st_find(f, e->name) == e, "tensor %d ('%s') not found by its name", i, e->name);
        nnt_tensor *t = &views[i];
        t->dtype = e->dtype;
        t->ndim = e->ndim;
        for (int d = 0; d < e->ndim; d++) t->shape[d] = e->shape[d];
        t->data = (void *)(f->data + e->begin);
        FUZZ_CHECK(nnt_tensor_nbytes(t) == e->end - e->begin, "tensor '%s': byte count differs from its shape's", e->name);
        FUZZ_CHECK(f->data + e->end <= map_end, "tensor '%s' ends past the mapping", e->name);
        if (e->end > e->begin) sink ^= f->data[e->begin] ^ f->data[e->end - 1];
        keys[i] = e->name;
        ptrs[i] = t;
    }
    (void)sink;
    fuzz_file("out.safetensors", out_path, sizeof out_path);
    nnt_status st = nnt_st_write(out_path, f->n_entries, keys, ptrs, "{\"format\":\"pt\"}", &err);
    FUZZ_CHECK(st == NNT_OK, "writing an accepted file back failed: %s", err.msg);
    nnt_st_file *g = NULL;
    st = nnt_st_open(out_path, &g, &err);
    FUZZ_CHECK(st == NNT_OK, "the rewritten file is refused: %s", err.msg);
    FUZZ_CHECK(g->n_entries == f->n_entries, "%d tensors read back, %d written", g->n_entries, f->n_entries);
    for (int i = 0; i < f->n_entries; i++) {
        const nnt_st_entry *a = &f->entries[i], *b = nnt_st_find(g, a->name);
        FUZZ_CHECK(b && b->dtype == a->dtype && b->ndim == a->ndim && b->end - b->begin == a->end - a->begin,
                   "tensor '%s' read back differs in name, dtype, rank or size", a->name);
        for (int d = 0; d < a->ndim; d++) FUZZ_CHECK(a->shape[d] == b->shape[d], "tensor '%s' axis %d differs", a->name, d);
        FUZZ_CHECK(a->end == a->begin || memcmp(f->data + a->begin, g->data + b->begin, a->end - a->begin) == 0,
                   "tensor '%s' bytes differ after the round trip", a->name);
    }
    nnt_st_close(g);
    fuzz_unlink("out.safetensors");
    free(keys);
    free(views);
    free(ptrs);
    nnt_st_close(f);
    return 0;
}

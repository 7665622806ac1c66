/* tensor_files.c - the C API's safetensors files of tensors given or saved by a caller
 * (nnt_safetensors_read, nnt_safetensors_write), as opposed to a checkpoint's shards. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

nnt_status nnt_safetensors_read(nnt_runtime *rt, const char *file, const char *key, nnt_tensor *out)
{
    if (!rt || !file || !out) return NNT_ERR_INVALID_ARGUMENT;
    nnt_st_file *f;
    nnt_status st = nnt_st_open(file, &f, &rt->err);
    if (st != NNT_OK) return st;
    const nnt_st_entry *e = NULL;
    if (key) {
        e = nnt_st_find(f, key);
        if (!e) {
            char names[512];
            size_t k = 0;
            names[0] = '\0';
            for (int i = 0; i < f->n_entries && i < 8 && k < sizeof names; i++)
                k += (size_t)snprintf(names + k, sizeof names - k, "%s'%s'", i ? ", " : "", f->entries[i].name);
            if (f->n_entries > 8 && k < sizeof names) snprintf(names + k, sizeof names - k, ", ... (%d in all)", f->n_entries);
            st = nnt_err_set(&rt->err, NNT_ERR_NOT_FOUND, "%s: no tensor named '%s'; it holds %s", file, key, names);
        }
    } else if (f->n_entries != 1) {
        st = nnt_err_set(&rt->err, NNT_ERR_INVALID_ARGUMENT, "%s: holds %d tensors; name the one to use", file,
                         f->n_entries);
    } else {
        e = &f->entries[0];
    }
    if (st == NNT_OK) {
        if (nnt_tensor_alloc(out, e->dtype, e->ndim, e->shape) != NNT_OK)
            st = nnt_err_set(&rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        else
            memcpy(out->data, f->data + e->begin, e->end - e->begin);
    }
    nnt_st_close(f);
    return st;
}

nnt_status nnt_safetensors_write(nnt_runtime *rt, const char *file, int n, const char *const *keys,
                                 const nnt_tensor *tensors)
{
    if (!rt || !file || n < 0 || (n > 0 && (!keys || !tensors))) return NNT_ERR_INVALID_ARGUMENT;
    const nnt_tensor **ptrs = calloc((size_t)n + 1, sizeof *ptrs);
    if (!ptrs) return nnt_err_set(&rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    for (int i = 0; i < n; i++) ptrs[i] = &tensors[i];
    nnt_status st = nnt_st_write(file, n, keys, ptrs, NULL, &rt->err);
    free(ptrs);
    return st;
}

/* sweep.c - what the methods that sweep a value over blocks and positions share (patch.c,
 * attribute.c): a block's path from a "layers.*" pattern, and the blocks that serve a value laid
 * out [batch seq ...]. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* path with its '*' replaced by block b. */
void nnt_sweep_block_path(const char *path, int b, char *buf, size_t n)
{
    const char *star = strchr(path, '*');
    if (!star)
        snprintf(buf, n, "%s", path);
    else
        snprintf(buf, n, "%.*s%d%s", (int)(star - path), path, b, star + 1);
}

/* The block a path without '*' names: the number after "layers." or "layers[" (negative counts
 * from the end). -1 when there is none. */
static int named_block(const char *path, int L)
{
    const char *p = strstr(path, "layers");
    if (!p) return -1;
    p += 6;
    if (*p != '.' && *p != '[') return -1;
    p++;
    errno = 0;
    char *end;
    long b = strtol(p, &end, 10);
    if (end == p || errno || (*end != '.' && *end != ']')) return -1;
    if (b < 0) b += L;
    return b >= 0 && b < L ? (int)b : -1;
}

/* The value of one block: served, writable, laid out [batch seq ...]. NNT_ERR_NOT_FOUND (reason
 * in err) when not served. */
static nnt_status check_block(nnt_model *m, const char *method, const char *p, int seq, int writable, nnt_error *err)
{
    nnt_value_info a, b;
    nnt_call_dims d1 = {.batch = 1, .seq = seq, .past = 0}, d2 = {.batch = 1, .seq = seq + 1, .past = 0};
    nnt_status st = nnt_model_value_info(m, p, &d1, &a);
    if (st == NNT_OK && !a.served) return nnt_err_set(err, NNT_ERR_NOT_FOUND, "%s is not served: %s", p, a.reason);
    if (st == NNT_OK) st = nnt_model_value_info(m, p, &d2, &b);
    if (st != NNT_OK) return st;
    if (a.ndim < 2 || a.shape[0] != 1 || a.shape[1] != seq || b.ndim < 2 || b.shape[1] != seq + 1)
        return nnt_err_set(err, NNT_ERR_SHAPE,
                           "%s: %s needs a value with a token axis after the batch axis ([batch seq ...]); this "
                           "one is laid out %s",
                           p, method, a.axes ? a.axes : "otherwise");
    if (writable && !a.writable)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "%s is read-only: an edit of it is not seen by the forward", p);
    return NNT_OK;
}

nnt_status nnt_sweep_blocks(nnt_model *m, const char *method, const char *value, int seq, int writable, int **blocks,
                            int *n_blocks, nnt_error *err)
{
    const int L = nnt_model_get_info(m)->num_layers;
    const char *star = strchr(value, '*');
    if (star && strchr(star + 1, '*')) return nnt_err_set(err, NNT_ERR_PATH, "%s: one '*' (the block) at most", value);
    int only = star ? -1 : named_block(value, L);
    if (!star && only < 0)
        return nnt_err_set(err, NNT_ERR_PATH,
                           "%s: %s needs a block value, 'layers.N.VALUE' or 'layers.*.VALUE' (N in 0..%d)", value,
                           method, L - 1);
    *blocks = malloc(sizeof(int) * (size_t)L);
    *n_blocks = 0;
    if (!*blocks) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    char p[256], first_reason[NNT_ERROR_MSG_MAX / 2] = "";
    for (int b = star ? 0 : only; b < (star ? L : only + 1); b++) {
        nnt_sweep_block_path(value, b, p, sizeof p);
        nnt_status st = check_block(m, method, p, seq, writable, err);
        if (st == NNT_ERR_NOT_FOUND && star) {
            if (!first_reason[0]) snprintf(first_reason, sizeof first_reason, "%.*s", (int)sizeof first_reason - 1, err->msg);
            continue;
        }
        if (st != NNT_OK) return st;
        (*blocks)[(*n_blocks)++] = b;
    }
    if (!*n_blocks) return nnt_err_set(err, NNT_ERR_NOT_FOUND, "%s: no block serves it (%s)", value, first_reason);
    return NNT_OK;
}


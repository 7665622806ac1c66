/* info.c - `nnt info`: what a checkpoint stores (bytes per encoding, from the safetensors
 * headers alone, printed before the load), then what loading it holds. */
#include <stdint.h>
#include <stdio.h>

#include "../cli.h"

/* "1.50 GB" */
static const char *human_bytes(uint64_t b, char *buf, size_t n)
{
    static const char *const unit[] = {"B", "KB", "MB", "GB", "TB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1000.0 && u < 4) {
        v /= 1000.0;
        u++;
    }
    snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", v, unit[u]);
    return buf;
}

/* nnt info, first half: the checkpoint's headers, before the (possibly long) load */
static int info_before_load(const cli_opts *o, nnt_runtime *rt, const char *dir)
{
    nnt_checkpoint_summary s;
    if (nnt_checkpoint_inspect(rt, dir, &s) != NNT_OK) return cli_fail(o, rt, "cannot read the checkpoint");
    char a[32];
    printf("checkpoint %s: %d file%s, %s on disk, %lld tensors\n", dir, s.n_files, s.n_files == 1 ? "" : "s",
           human_bytes(s.file_bytes, a, sizeof a), (long long)s.n_tensors);
    for (int e = 0; e < NNT_ENC_COUNT; e++)
        if (s.tensors[e])
            printf("  %-20s %6lld tensors %12s\n", nnt_encoding_name((nnt_encoding)e), (long long)s.tensors[e],
                   human_bytes(s.bytes[e], a, sizeof a));
    printf("weights stay in these encodings: a host backend reads them in place from the mapped files, a device\n"
           "backend holds them as stored (about %s)\n",
           human_bytes(s.file_bytes, a, sizeof a));
    fflush(stdout);
    return 0;
}

/* nnt info, second half: what loading held, and what re-encoding at load changed */
static int info_after_load(const nnt_model *m)
{
    nnt_memory mem;
    if (nnt_model_memory(m, &mem) != NNT_OK) return 1;
    char a[32], b[32], c[32];
    uint64_t held = mem.mapped_bytes + mem.allocated_bytes + mem.device_bytes;
    printf("loaded: family %s on backend %s, precision %s\n", nnt_model_family(m), nnt_model_backend(m),
           mem.precision ? "bf16" : "f32");
    printf("held: %s read in place, %s allocated, %s on the device (%.2f x the files)\n",
           human_bytes(mem.mapped_bytes, a, sizeof a), human_bytes(mem.allocated_bytes, b, sizeof b),
           human_bytes(mem.device_bytes, c, sizeof c), mem.file_bytes ? (double)held / (double)mem.file_bytes : 0.0);
    nnt_reencoding r = {.struct_size = sizeof r};
    if (nnt_model_reencoding(m, &r) == NNT_OK && r.tensors > 0) {
        printf("re-encoded at load (weights = fp8): %lld weights, %s as stored -> %s as FP8 e4m3 with 128x128 "
               "block scales\n",
               (long long)r.tensors, human_bytes(r.stored_bytes, a, sizeof a), human_bytes(r.encoded_bytes, b, sizeof b));
        printf("  error against the stored values: relative RMS %.3e over %llu values, largest %.3e; worst weight %s "
               "(relative RMS %.3e)\n",
               r.rel_rms, (unsigned long long)r.values, r.max_abs, r.worst, r.worst_rel_rms);
    }
    return 0;
}

int cmd_info(cli_run *c)
{
    int rc = info_before_load(c->o, c->rt, c->o->model);
    if (rc) return rc;
    if (nnt_model_load(c->rt, c->o->model, &c->m) != NNT_OK) return cli_fail(c->o, c->rt, "cannot load the model");
    return info_after_load(c->m);
}

/* dist.h - the nnt command's runs over several ranks (`mpirun -np N nnt trace|lens|generate`):
 * each rank runs one pipeline stage of the model, hands the residual stream to the next rank
 * through the transport plugin, and the values are gathered to the rank that prints. */
#ifndef NNT_CLI_DIST_H
#define NNT_CLI_DIST_H

#include <nnt/nnt.h>

typedef struct dist dist;

/* Joins a run over several ranks when a launcher started this process as one of them: returns
 * 0 with *out NULL (a single-process run: nothing loaded), 0 with *out set, or 1 with the error
 * printed (no transport, the transport failed to start). held_stderr: dist_hold_stderr_early's
 * result (restored here for a single-process run). */
int dist_start(nnt_runtime *rt, int held_stderr, dist **out);
int dist_rank(const dist *d);
int dist_size(const dist *d);
/* This rank's blocks [*first, *end) of checkpoint folder `dir`, before the model loads (from
 * config.json and the safetensors headers, as `nnt plan` reads them): the INI's [distributed]
 * stages, or the split balanced by the blocks' weight bytes in their stored encoding. Returns 0,
 * or 1 with the error printed (more ranks than blocks, cuts that do not match the ranks or the
 * blocks, a folder the plan cannot read). */
int dist_split(dist *d, nnt_runtime *rt, const char *dir, int *first, int *end);
/* The model this rank loaded with its stage's weights (nnt_model_load_stage); 0, or 1 with the
 * error printed when its block count is not the one the split was made for. */
int dist_set_model(dist *d, const nnt_model *m);
/* Every rank says whether its part so far went well (rc 0) and learns whether every rank's
 * did: returns 0 when all did, 1 otherwise (this rank's own failure is printed by its caller;
 * another rank's is reported there, not here). */
int dist_agree(dist *d, int rc);
/* Runs trace t's stage on ids [batch, seq] (mask as nnt_trace_run): checks every rank's
 * requests before any stage runs, takes the stream from the previous rank, hands it on, and
 * gathers every rank's saved values into the trace of rank `root` (nnt_trace_import_result).
 * Returns 0, or 1 (printed here when this rank failed; silent when another did). */
int dist_trace_run(dist *d, nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq, int root);
/* nnt_generate over the ranks: each runs its stage (nnt_generate_stage), the last picks the
 * tokens and every rank gets them, so out [batch, max_new_tokens] is filled alike everywhere;
 * the saved values are gathered to `root`. Returns as dist_trace_run. */
int dist_generate(dist *d, nnt_model *m, nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                  const nnt_generate_opts *g, int32_t *out, int root);
/* The rank that prints (stdout) and reports every rank's failure (stderr): rank 0, or the one
 * set here (lens prints on the last rank, which holds the readout). The others' stdout goes to
 * /dev/null and their stderr is held back, its last error line sent to the printing rank when
 * they fail. Call before anything is printed. */
void dist_set_root(dist *d, int root);
/* Before dist_start: a rank other than 0 of a launcher's run (its environment says so) holds
 * its stderr back from the start, so that errors every rank meets alike (a bad argument) are
 * printed once, by rank 0. Returns the descriptor to hand to dist_start, or -1. */
int dist_hold_stderr_early(void);
/* Sends this process's stdout to /dev/null (a rank that does not print). */
void dist_quiet_stdout(void);
/* Tells the other ranks that this one failed with rc != 0 (once, with its last held error line;
 * nothing when the failure came from another rank), leaves the run and frees d. NULL is allowed. */
void dist_finish(dist *d, int rc);

#endif /* NNT_CLI_DIST_H */

/* test_util.h - helpers shared by nnt's CUnit suites: paths of the build tree and fixtures,
 * runtime and model opening, reference look-up, and tolerance comparisons. */
#ifndef NNT_TEST_UTIL_H
#define NNT_TEST_UTIL_H

#include <CUnit/Basic.h>
#include <stdio.h>

#include "nnt/nnt.h"

/* Each suite file defines this; it adds its suites to the CUnit registry. */
int register_tests(void);

/* Path helpers: the generated build-tree INI, a fixture directory, a scratch directory. */
const char *t_ini(void);
const char *t_fixture(const char *rel, char *buf, size_t n); /* tests/fixtures/<rel> */
const char *t_tmpdir(void);                                  /* created once per process */
/* Removes the scratch directory and all in it, or with keep set leaves it and prints its path
 * (the runner keeps it when a test failed, for the files that test wrote). */
void t_tmpdir_finish(int keep);
const char *t_plugin(const char *name, char *buf, size_t n); /* build/tests/plugins/<name>.so */

/* Writes a copy of the build-tree INI as <scratch>/<name> with `key = value` in [section]
 * (replacing that key there, adding the section when it is missing; key NULL: no change) and
 * the [plugins] paths made absolute, since they resolve against the INI file's own directory.
 * `value` may go on with further "\nkey = value" lines, set in the same section (keys the
 * build-tree INI does not already hold there). Returns the path in buf, or NULL when it cannot
 * be written. */
const char *t_ini_with(const char *name, const char *section, const char *key, const char *value, char *buf, size_t n);

/* Writes text to a file; returns 0 on success. */
int t_write_file(const char *path, const char *text);
/* Copies a file. */
int t_copy_file(const char *from, const char *to);

/* A checkpoint folder <scratch>/<name>-ckpt for a test family (tests/plugins/broken_plugins.c):
 * a config.json naming architecture `arch` and model_type `name`, beside a link to the MiniMax-M2
 * fixture's safetensors file (which such a family never reads). Returns buf. */
const char *t_fake_checkpoint(const char *name, const char *arch, char *buf, size_t n);

/* The cpu backend's plugin of runtime rt, with its context (core/internal.h's nnt_plugin), or NULL
 * when rt has none; the suites that call its ops directly start from it. */
struct nnt_plugin *t_cpu_backend(nnt_runtime *rt);
/* Opens the build runtime (asserts on failure). */
nnt_runtime *t_runtime(void);
/* Loads tests/fixtures/<rel> (asserts on failure). */
nnt_model *t_model(nnt_runtime *rt, const char *rel);

/* A fixture's reference file. */
typedef struct t_ref {
    nnt_runtime *rt;
    char path[512];
    int batch, seq;
    int32_t ids[4096];
    int32_t mask[4096];
} t_ref;
/* fixture_rel: a fixture directory (its reference.safetensors) or "<dir>/<file>.safetensors". */
int t_ref_open(t_ref *r, nnt_runtime *rt, const char *fixture_rel);
/* Reads one reference tensor (caller frees). Returns 0 when present. */
int t_ref_get(const t_ref *r, const char *key, nnt_tensor *out);

/* Largest |a - b| over the entries where `sel` (NULL: all) is nonzero, relative to the largest
 * |b| there; infinities must coincide. Returns -1 on a shape mismatch or infinity mismatch. */
double t_rel_err(const nnt_tensor *a, const nnt_tensor *b, const unsigned char *sel);
/* Selection masks over a value's entries, from the padding mask: real tokens only (for
 * token-major values [B, T, ...]), heads-first values [B, H, T, ...], and patterns
 * [B, H, Q, K] (real query rows and real key columns). */
unsigned char *t_sel_tokens(const t_ref *r, const nnt_tensor *v);
unsigned char *t_sel_heads(const t_ref *r, const nnt_tensor *v);
unsigned char *t_sel_pattern(const t_ref *r, const nnt_tensor *v);

/* Tolerance for float values against a float32 transformers reference: relative to the
 * tensor's largest magnitude over the compared entries. */
#define T_TOL 1e-5

/* Saves, in trace t, every value the fixture's reference file holds (inputs and keys with a
 * '.'-free prefix other than layers/model values are skipped: input_ids, attention_mask,
 * bf16_compute.*, *.sinks). Returns the number of requests. */
int t_save_reference_values(nnt_runtime *rt, nnt_trace *t, const t_ref *r);
/* Compares one saved value with the reference: real tokens only, patterns on real rows and
 * columns, expert indices as sets per token, expert weights and outputs aligned to the
 * reference's slots. Asserts within T_TOL and reports the key on failure. */
void t_check_value(const t_ref *r, const nnt_trace *t, const char *key);
/* t_check_value on every key t_save_reference_values saved; returns how many were checked. */
int t_check_reference(const t_ref *r, const nnt_trace *t);
/* Runs the fixture's prompts with every reference value saved (asserts on failure). */
nnt_trace *t_run_reference(nnt_runtime *rt, nnt_model *m, const t_ref *r);
/* The block identity layer_input + <mixer>.attention_output + mlp.mlp_output == layer_output on
 * every block, and layer i's output == layer i+1's input; `mixer_of(layer)` names the host. */
void t_check_block_sum(const nnt_trace *t, int num_layers, const char *(*mixer_of)(int layer));
/* For every expert e of block `layer`: zeroing e's weight where expert_indices == e changes
 * mlp_output on exactly the tokens that chose e. */
void t_check_ablation(nnt_runtime *rt, nnt_model *m, const t_ref *r, int layer);

/* Rewrites a safetensors file tensor by tensor. For each tensor of `src` the callback fills
 * *out (a view of `in`, or a new host tensor it allocates and flags with *owned = 1) and may
 * rename it in `name` (preset to the source name); returning 0 drops the tensor. `extra`
 * tensors are appended. Returns 0 on success. */
typedef int (*t_tensor_fn)(void *user, char *name, size_t name_size, const nnt_tensor *in, nnt_tensor *out,
                           int *owned);
int t_rewrite_weights(const char *src, const char *dst, t_tensor_fn fn, void *user, int n_extra,
                      const char *const *extra_names, const nnt_tensor *extra);
/* Makes DIR (under the scratch directory) holding a copy of a fixture's config.json; returns
 * the directory's path in buf. */
const char *t_checkpoint_dir(const char *name, const char *fixture_rel, char *buf, size_t n);

/* ---- precision = bf16 ----
 * [family.NAME] precision = bf16 runs the family as torch runs the model in bfloat16. Its values
 * are held against two transformers runs of the same checkpoint on the same prompts: in
 * torch.bfloat16 (hf16, a reference_bf16 file) and in float32 (hf32). Distances are relative RMS
 * over real tokens, rms(x - y) / rms(hf32): bfloat16 leaves many small, nearly independent
 * rounding errors over every entry, whose typical size the RMS measures (a max picks the one entry
 * where two sets of roundings happen to add up worst); dividing by the reference's RMS puts
 * logits and block outputs on one scale. */

/* A runtime from the build INI with [family.<family>] precision = <precision> (NULL: left to the
 * default), written as a scratch INI named after both. */
nnt_runtime *t_runtime_with_precision(const char *family, const char *precision);
/* rms(a - b) over the real tokens of token-major values [batch, seq, ...] (b NULL: rms(a)). */
double t_rms_real(const t_ref *r, const nnt_tensor *a, const nnt_tensor *b);
/* 1 when two references hold the same prompts and padding. */
int t_same_inputs(const t_ref *a, const t_ref *b);
/* Real tokens whose index set (the last axis of token-major [batch, seq, K] values) differs. */
int64_t t_index_sets_differ(const t_ref *r, const nnt_tensor *a, const nnt_tensor *b);

/* One precision check: the model of `fixture` loaded under precision = bf16 (m16) and the default
 * precision (m32), the references ref16 (hf16) and ref32 (hf32), and traces of hf16's prompts on
 * both models saving every value hf16's file holds (its indexer selections aside) plus `extra`. */
typedef struct t_bf16 {
    nnt_runtime *rt16, *rt32;
    nnt_model *m16, *m32;
    t_ref hf16, hf32;
    nnt_trace *t16, *t32;
    char **keys; /* the compared values: logits, final_norm_output, then block by block */
    int n;
} t_bf16;
void t_bf16_open(t_bf16 *c, const char *family, const char *fixture, const char *ref16, const char *ref32,
                 const char *const *extra, int n_extra);
/* Prints, for every compared value, rms(nnt16 - hf16), rms(hf16 - hf32) and rms(nnt16 - nnt32)
 * (each over rms(hf32)); asserts rms(nnt16 - hf16) <= rms(hf16 - hf32) on logits and every
 * layer_output, and that bf16 moved every value (nnt16 - nnt32 above 1e-4). Expert indices are
 * context: the real tokens whose set differs from hf16's (and hf16's from hf32's). Returns how
 * many bound values came out above their bound. */
int t_bf16_report(const t_bf16 *c);
void t_bf16_close(t_bf16 *c);

/* Asserts a status with the runtime's message on failure. */
#define T_OK(rt, expr)                                                                                                 \
    do {                                                                                                               \
        nnt_status st_ = (expr);                                                                                       \
        if (st_ != NNT_OK) fprintf(stderr, "\n  %s:%d: %s -> %s\n", __FILE__, __LINE__, #expr, nnt_last_error(rt));   \
        CU_ASSERT_EQUAL_FATAL(st_, NNT_OK);                                                                            \
    } while (0)

/* Asserts that expr fails with `status` and that the message contains `needle`. */
#define T_FAILS(rt, expr, status, needle)                                                                              \
    do {                                                                                                               \
        nnt_status st_ = (expr);                                                                                       \
        const char *msg_ = nnt_last_error(rt);                                                                         \
        if (st_ != (status) || !strstr(msg_, needle))                                                                  \
            fprintf(stderr, "\n  %s:%d: expected %s with '%s', got %s: %s\n", __FILE__, __LINE__,                    \
                    nnt_status_str(status), needle, nnt_status_str(st_), msg_);                                        \
        CU_ASSERT_EQUAL(st_, status);                                                                                  \
        CU_ASSERT_PTR_NOT_NULL(strstr(msg_, needle));                                                                  \
    } while (0)

#endif

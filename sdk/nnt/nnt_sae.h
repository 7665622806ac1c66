/* nnt_sae.h - sparse autoencoders (SAEs) read from SAELens's saved folders and attached to a
 * value of a trace: the value's feature activations, reconstruction and error are served as
 * results, and features can be edited, the edited reconstruction plus the error then taking the
 * value's place.
 *
 * Axis names: N rows of activations (batch * seq flattened), D the SAE's input width (cfg d_in,
 * the value's last axis), F its features (cfg d_sae); B and S the value's batch and seq axes.
 *
 * The formulas are those of SAELens (github.com/jbloomAus/SAELens, sae_lens/saes: the standard,
 * JumpReLU and TopK inference SAEs) and the papers it follows: the standard ReLU SAE of Bricken
 * et al. 2023 ("Towards Monosemanticity"), JumpReLU of Rajamanoharan et al. 2024 ("Jumping
 * Ahead"), TopK of Gao et al. 2024 ("Scaling and evaluating sparse autoencoders"). For a row x:
 *   x'   = norm_in(x)                           (cfg normalize_activations, below)
 *   pre  = (x' - b_dec * apply_b_dec_to_input) @ W_enc + b_enc                       [F]
 *   standard: f = relu(pre); jumprelu: f = relu(pre) * (pre > threshold);
 *   topk: pre *= ||W_dec[j]|| when rescale_acts_by_decoder_norm, then the k largest entries
 *         of pre keep relu(value), the others 0
 *   recon = norm_out(f @ W_dec + b_dec)  (topk with rescale: f / ||W_dec[j]|| first)  [D]
 *   error = x - recon
 * normalize_activations: "none" and "expected_average_only_in" are the identity at run time (as
 * SAELens's inference SAE: the latter's factor is folded into the weights when a release is
 * loaded); "constant_norm_rescale": x' = x * c with c = sqrt(D) / ||x||, norm_out divides by c;
 * "layer_norm": x' = (x - mean) / (std + 1e-5) with std the unbiased standard deviation over D,
 * norm_out multiplies by std and adds the mean back. Everything is computed in float32. */
#ifndef NNT_SAE_H
#define NNT_SAE_H

#include <stdint.h>

#include "nnt_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nnt_runtime nnt_runtime;
typedef struct nnt_trace nnt_trace;
typedef struct nnt_sae nnt_sae;

typedef enum nnt_sae_arch { NNT_SAE_STANDARD = 0, NNT_SAE_JUMPRELU, NNT_SAE_TOPK } nnt_sae_arch;
typedef enum nnt_sae_norm {
    NNT_SAE_NORM_NONE = 0,
    NNT_SAE_NORM_EXPECTED_AVERAGE, /* "expected_average_only_in": the identity at run time */
    NNT_SAE_NORM_CONSTANT,         /* "constant_norm_rescale" */
    NNT_SAE_NORM_LAYER             /* "layer_norm" */
} nnt_sae_norm;

/* What cfg.json said. Owned by the SAE. */
typedef struct nnt_sae_info {
    nnt_sae_arch arch;
    int d_in, d_sae;
    int k;                      /* topk: features kept per row; 0 otherwise */
    int apply_b_dec_to_input;   /* cfg default true */
    int rescale_by_decoder_norm;/* topk's rescale_acts_by_decoder_norm (default false) */
    nnt_sae_norm norm;
    const char *dir;            /* the folder it was loaded from */
} nnt_sae_info;

/* Loads the SAE of folder `dir`: cfg.json (architecture "standard", "jumprelu" or "topk"; d_in,
 * d_sae; k for topk; apply_b_dec_to_input, normalize_activations, rescale_acts_by_decoder_norm
 * and reshape_activations where given) and sae_weights.safetensors (W_enc [D, F], W_dec [F, D],
 * b_enc [F], b_dec [D], threshold [F] for jumprelu; any float dtype, kept as float32). *out is
 * the caller's, released with nnt_sae_free; a trace the SAE is attached to holds its own
 * reference, so the caller may release it at once. Errors (nnt_last_error(rt) names the file and
 * the field): NNT_ERR_IO (a missing or unreadable file), NNT_ERR_FORMAT (cfg.json not a JSON
 * object, a field of the wrong type, a weights file that is not safetensors), NNT_ERR_CONFIG (a
 * missing cfg key, d_in or d_sae below 1, k outside 1..d_sae), NNT_ERR_UNSUPPORTED (another
 * architecture, normalize_activations or reshape_activations "hook_z"), NNT_ERR_NOT_FOUND (a
 * missing tensor), NNT_ERR_SHAPE (a tensor whose shape disagrees with d_in / d_sae),
 * NNT_ERR_INVALID_ARGUMENT (NULL arguments), NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_sae_load(nnt_runtime *rt, const char *dir, nnt_sae **out);
/* Drops the caller's reference (NULL: nothing); the weights go with the last one. */
void nnt_sae_free(nnt_sae *s);
/* The SAE's settings, owned by it; NULL for NULL. */
const nnt_sae_info *nnt_sae_get_info(const nnt_sae *s);

/* Encodes x float32 [N, D] (host) into feats float32 [N, F] and decodes them into recon float32
 * [N, D] (may be NULL: no decode), by the formulas above. Buffers are the caller's. Errors:
 * NNT_ERR_INVALID_ARGUMENT (NULL s, x or feats, N < 0), NNT_ERR_OUT_OF_MEMORY (err, may be NULL). */
nnt_status nnt_sae_encode(const nnt_sae *s, const float *x, int64_t n, float *feats, float *recon, nnt_error *err);
/* Decodes feats float32 [N, F] into recon float32 [N, D]; x [N, D] is the input the features
 * came from, read only by the constant_norm_rescale and layer_norm normalisations (may be NULL
 * for the others). Errors: as nnt_sae_encode's. */
nnt_status nnt_sae_decode(const nnt_sae *s, const float *x, const float *feats, int64_t n, float *recon,
                          nnt_error *err);

/* Attaches SAE s to the value `path` of trace t (one block, no wildcard, no slice, a writable
 * value laid out [batch seq D] - e.g. "layers.1.layer_output"). The SAE runs where the value is
 * emitted, at this place among the requests on it. The trace keeps a reference to s until
 * nnt_trace_free. Saves of its outputs (nnt_trace_save after this call) then give:
 *   PATH.sae.feature_acts   float32 [B, S, F]
 *   PATH.sae.reconstruction float32 [B, S, D]
 *   PATH.sae.error          float32 [B, S, D]   (value - reconstruction, before any feature edit)
 * keyed by that name ("@k" for the k-th emission of a session, as other saves); slices and rows
 * are not taken on them. Without a feature edit the value is left as it was, bit for bit.
 * Errors (nnt_last_error): NNT_ERR_PATH (a wildcard, a slice, an unknown path), NNT_ERR_NOT_SERVED,
 * NNT_ERR_READ_ONLY, NNT_ERR_CONFLICT (an SAE is attached to the value already),
 * NNT_ERR_INVALID_ARGUMENT (NULL arguments), NNT_ERR_OUT_OF_MEMORY; when the run starts,
 * NNT_ERR_SHAPE naming the SAE's cfg.json, d_in and the value's shape when the value is not
 * [batch seq d_in] or not a float value. */
nnt_status nnt_trace_sae(nnt_trace *t, const char *path, nnt_sae *s);

/* Feature edits, in feature space, on the features of the SAE attached to a value. */
typedef enum nnt_sae_edit_op {
    NNT_SAE_EDIT_ZERO = 0, /* f[..., j] := 0 */
    NNT_SAE_EDIT_SCALE,    /* f[..., j] *= value */
    NNT_SAE_EDIT_FILL      /* f[..., j] := value (a masked fill whose mask is the feature index) */
} nnt_sae_edit_op;
/* Edits features[n_features] (indices 0..F-1, any order) of the SAE attached to the value whose
 * features `path` names ("layers.1.layer_output.sae.feature_acts"), at every row and token.
 * Edits apply in the order made. With any edit, the value becomes
 *   decode(edited features) + error      (SAELens's spliced forward with its error term)
 * Errors: NNT_ERR_PATH (a path not ending in ".sae.feature_acts"), NNT_ERR_NOT_FOUND (no SAE
 * attached to that value), NNT_ERR_INDEX (a feature outside 0..F-1, naming it),
 * NNT_ERR_INVALID_ARGUMENT (n_features < 1, a NULL list, an unknown op, a value that is not
 * finite), NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_trace_sae_edit(nnt_trace *t, const char *path, nnt_sae_edit_op op, const int *features, int n_features,
                              float value);

#ifdef __cplusplus
}
#endif
#endif /* NNT_SAE_H */

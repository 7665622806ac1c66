/* sae_internal.h - the loaded sparse autoencoder (nnt_sae.h) as libnnt's SAE files share it: its
 * settings, its float32 weights and its reference count. Internal to libnnt. */
#ifndef NNT_SAE_INTERNAL_H
#define NNT_SAE_INTERNAL_H

#include "../internal.h"
#include "nnt/nnt_sae.h"

struct nnt_sae {
    nnt_sae_info info;
    char *dir;        /* info.dir points here */
    float *w_enc;     /* [d_in, d_sae] */
    float *w_dec;     /* [d_sae, d_in] */
    float *b_enc;     /* [d_sae] */
    float *b_dec;     /* [d_in] */
    float *threshold; /* [d_sae], jumprelu only */
    float *dec_norm;  /* [d_sae]: ||W_dec[j]||, topk with rescale_acts_by_decoder_norm only */
    int refs;         /* holders: the loader's caller and each trace it is attached to */
};

/* nnt_sae_load with its message in err (for a caller inside another call: a request's parse). */
nnt_status nnt_sae_load_err(const char *dir, nnt_sae **out, nnt_error *err);
/* One more holder of s (a trace it is attached to); nnt_sae_free drops one. */
void nnt_sae_retain(nnt_sae *s);

#endif /* NNT_SAE_INTERNAL_H */

/* fam_internal.h - what the family kit's own files share and a family never calls (the kit's
 * symbols are hidden inside each plugin). */
#ifndef FAM_INTERNAL_H
#define FAM_INTERNAL_H

#include <nnt/nnt_family_kit.h>

/* Hands host buffer b (from malloc) to env, which frees it at fam_env_release; on failure frees
 * b and returns NNT_ERR_OUT_OF_MEMORY (the list of env's buffers could not grow). */
nnt_status fam_keep_buffer(const fam_env *env, void *b, nnt_error *err);

#endif /* FAM_INTERNAL_H */

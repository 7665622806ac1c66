/* fam_internal.h - what the family kit's own files share and a family never calls (the kit's
 * symbols are hidden inside each plugin). */
#ifndef FAM_INTERNAL_H
#define FAM_INTERNAL_H

#include <nnt/nnt_family_kit.h>

/* Hands host buffer b (from malloc) to env, which frees it at fam_env_release; on failure frees
 * b and returns NNT_ERR_OUT_OF_MEMORY (the list of env's buffers could not grow). */
nnt_status fam_keep_buffer(const fam_env *env, void *b, nnt_error *err);

/* The architecture table's block row (-1: none), one past the last row under row i, and
 * whether row `row` exists on block `layer` (its traits and its ancestors'), *f then holding
 * the block's facts (fam_arch.c). */
int fam_arch_block_row(const fam_arch *a);
int fam_arch_subtree_end(const fam_arch *a, int i);
int fam_arch_row_on_block(const fam_arch *a, const void *self, int layer, int row, fam_block_facts *f);

#endif /* FAM_INTERNAL_H */

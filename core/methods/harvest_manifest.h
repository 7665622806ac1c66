/* harvest_manifest.h - a harvest folder's manifest (harvest_manifest.c): the identity of the run
 * that made it, read back, compared and written in place whole. */
#ifndef NNT_HARVEST_MANIFEST_H
#define NNT_HARVEST_MANIFEST_H

#include "harvest_internal.h"

struct cJSON;

#define HV_FORMAT 1 /* the manifest's "nnt_harvest" version */
#define HV_MANIFEST "manifest.json"

/* What a folder's manifest must match to be continued: the format, the model (architecture,
 * config.json and tokenizer files by 64-bit FNV-1a), the request's canonical document and the
 * hash of its tensors, the settings, the data files (name, bytes, hash). *out is the caller's
 * (cJSON_Delete). Errors: NNT_ERR_IO (a file that cannot be read), NNT_ERR_OUT_OF_MEMORY. */
nnt_status hv_identity(nnt_model *m, const nnt_harvest_spec *s, struct cJSON **out, nnt_error *err);
/* dir's manifest into *out (NULL when dir has none and holds no other file). Errors:
 * NNT_ERR_CONFLICT (a field of identity that the manifest holds otherwise, named; other files and
 * no manifest), NNT_ERR_FORMAT (not a manifest), NNT_ERR_IO. */
nnt_status hv_manifest_read(const char *dir, const struct cJSON *identity, struct cJSON **out, nnt_error *err);
/* Writes doc as dir's manifest, whole or not at all (nnt_write_file). */
nnt_status hv_manifest_write(const char *dir, const struct cJSON *doc, nnt_error *err);
/* Makes folder dir unless it is one. Errors: NNT_ERR_IO, NNT_ERR_INVALID_ARGUMENT (empty). */
nnt_status hv_make_dir(const char *dir, nnt_error *err);

#endif /* NNT_HARVEST_MANIFEST_H */

/* internal.h - types and functions shared by libnnt's own source files (core/ and plugins/).
 * Nothing here is part of the public API or of any plugin ABI. */
#ifndef NNT_INTERNAL_H
#define NNT_INTERNAL_H

#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "nnt/nnt.h"
#include "nnt/nnt_backend.h"
#include "nnt/nnt_family.h"
#include "nnt/nnt_transport.h"

/* ---- errors (status.c) ---- */
nnt_status nnt_err_set(nnt_error *err, nnt_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
nnt_status nnt_err_setv(nnt_error *err, nnt_status status, const char *fmt, va_list ap);
/* Prepends "prefix: " to an existing message. */
void nnt_err_prefix(nnt_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void nnt_err_clear(nnt_error *err);

/* ---- UTF-8 (base/utf8.c) ---- */
/* Length of the valid UTF-8 sequence at s (1..4), or -(length of the maximal invalid subpart)
 * when s does not start a valid sequence (Unicode's "maximal subpart" rule). n >= 1. */
int nnt_utf8_len(const uint8_t *s, size_t n);
/* The length of the longest valid UTF-8 prefix of text (n when all of it is valid). */
size_t nnt_utf8_valid_prefix(const char *text, size_t n);

/* ---- reading part of a JSON document (base/json_pick.c) ---- */
struct cJSON;
/* One member a reader wants from an object, by name. `only` NULL: the whole value; else, when
 * the value is an object, only its members that `only` names (a list ended by a NULL key; a
 * value of another type is taken whole). */
typedef struct nnt_json_want {
    const char *key;
    const struct nnt_json_want *only;
} nnt_json_want;
/* Whether text[0..len) is one JSON value by RFC 8259 (the grammar; UTF-8 is not checked), with
 * optional JSON whitespace around it, a UTF-8 byte order mark before it, and arrays and objects
 * nested at most 1000 deep (cJSON's limit). Allocates nothing. 0, or -1 with *err_at (may be
 * NULL) the offset of the first byte that cannot stand where it is (len when the text ends
 * early). */
int nnt_json_check(const char *text, size_t len, size_t *err_at);
/* Reads the JSON document text[0..len) (not kept; no NUL needed after it), which must be one
 * object, into *out: a new cJSON object, owned by the caller (cJSON_Delete), holding only the
 * members `want` names (a list ended by a NULL key), each built by cJSON from its own bytes.
 * Every other member is checked as nnt_json_check checks it and never built, so memory follows
 * the wanted members, not the file. A name given twice keeps its first value, as
 * cJSON_GetObjectItem does; names compare as cJSON decodes them. `name` starts each message
 * (a path). Errors, with *out NULL and the message in *err: NNT_ERR_FORMAT "malformed JSON near
 * byte N" (a syntax error anywhere in the document, or a wanted value cJSON refuses: a lone
 * surrogate, or cJSON out of memory, which it does not tell apart), NNT_ERR_FORMAT "expected a
 * JSON object at the top", NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_json_pick(const char *text, size_t len, const nnt_json_want *want, const char *name,
                         struct cJSON **out, nnt_error *err);

/* ---- dtypes (dtype.c) ---- */
nnt_dtype nnt_dtype_from_name(const char *name); /* safetensors spelling; INVALID if unknown */
int nnt_dtype_is_float(nnt_dtype dt);
float nnt_bf16_to_f32(uint16_t h);
uint16_t nnt_f32_to_bf16(float f); /* round to nearest even */
float nnt_f16_to_f32(uint16_t h);
uint16_t nnt_f32_to_f16(float f);
float nnt_fp8_e4m3_to_f32(uint8_t b);
uint8_t nnt_f32_to_fp8_e4m3(float v); /* nearest e4m3fn code, ties to even, saturating at 448 */
float nnt_e8m0_to_f32(uint8_t b);
/* Converts n elements between numeric dtypes (float and integer). */
nnt_status nnt_convert(const void *src, nnt_dtype sdt, void *dst, nnt_dtype ddt, int64_t n,
                       nnt_error *err);
size_t nnt_tensor_nbytes(const nnt_tensor *t);
/* "[2, 24, 64]" into buf. */
const char *nnt_shape_str(const nnt_tensor *t, char *buf, size_t n);
const char *nnt_dims_str(int ndim, const int64_t *shape, char *buf, size_t n);
int nnt_shape_equal(int nd_a, const int64_t *a, int nd_b, const int64_t *b);

/* ---- config.json (json_config.c) ---- */
typedef struct nnt_json nnt_json; /* a parsed config.json */
nnt_status nnt_json_load(const char *path, nnt_json **out, nnt_error *err);
void nnt_json_free(nnt_json *j);
nnt_status nnt_cfg_int(const nnt_checkpoint *ck, const char *key, int64_t dflt, int required,
                       int64_t *out, nnt_error *err);
nnt_status nnt_cfg_float(const nnt_checkpoint *ck, const char *key, double dflt, int required,
                         double *out, nnt_error *err);
nnt_status nnt_cfg_bool(const nnt_checkpoint *ck, const char *key, int dflt, int required,
                        int *out, nnt_error *err);
nnt_status nnt_cfg_string(const nnt_checkpoint *ck, const char *key, const char *dflt,
                          int required, const char **out, nnt_error *err);
int nnt_cfg_has(const nnt_checkpoint *ck, const char *key);
int nnt_cfg_is_null(const nnt_checkpoint *ck, const char *key);
nnt_status nnt_cfg_int_list(const nnt_checkpoint *ck, const char *key, const char *const *names,
                            int n_names, int64_t *out, int max, int *count, nnt_error *err);
const char *nnt_cfg_path(const nnt_checkpoint *ck);
/* config.json's `architectures` (all entries, NULL-terminated, owned by the checkpoint). */
const char *const *nnt_cfg_architectures(const nnt_checkpoint *ck);

/* ---- safetensors (safetensors.c) ---- */
typedef struct nnt_st_entry {
    char *name;
    nnt_dtype dtype;
    int ndim;
    int64_t shape[NNT_MAX_DIMS];
    uint64_t begin, end; /* byte offsets in the data section */
} nnt_st_entry;

typedef struct nnt_st_file {
    char *path;
    void *map;        /* the whole file, memory-mapped read-only */
    size_t map_size;
    const uint8_t *data; /* start of the data section */
    uint64_t data_size;
    nnt_st_entry *entries;
    int n_entries;
    int fd;                /* the file, kept open to compare its size and time with these */
    struct timespec mtime; /* st_mtim at open (the size at open is map_size) */
    int guard;             /* its slot in the SIGBUS guard's registry (mapguard.c); -1: none */
} nnt_st_file;

/* Opens and validates a safetensors file: header length within the file, header JSON one
 * object padded by JSON whitespace only, __metadata__ at most once and of strings, each entry's
 * dtype, shape and data_offsets given once, dtype known, shape and offsets whole numbers up to
 * 2^53, sizes equal to numel * dtype size, names unique, and the entries tiling the data section
 * (no overlap, no gap, no byte after the last). Errors name the file and the tensor. */
nnt_status nnt_st_open(const char *path, nnt_st_file **out, nnt_error *err);
/* nnt_st_open's checks on safetensors bytes held in memory [size] (not copied: they must outlive
 * *out, whose data points into them); messages name `name`. The file fields stay empty (fd -1,
 * no map, no guard) and nnt_st_check always passes. Errors: NNT_ERR_FORMAT, NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_st_open_memory(const char *name, const void *bytes, size_t size, nnt_st_file **out, nnt_error *err);
void nnt_st_close(nnt_st_file *f);
/* NNT_ERR_IO naming the file when a read of its mapping raised SIGBUS (caught by the handler
 * of nnt_protect_mapped_files), or when its size or modification time differ from those at
 * open. An in-place rewrite keeping size and time (within the file system's time resolution)
 * goes unseen. */
nnt_status nnt_st_check(const nnt_st_file *f, nnt_error *err);

/* ---- the SIGBUS guard's registry of mapped files (mapguard.c) ---- */
/* Registers [start, start + len) as the mapping of `path` (the string must outlive the slot);
 * returns the slot, or -1 when the table is full. */
int nnt_guard_register(const void *start, size_t len, const char *path);
void nnt_guard_unregister(int slot); /* -1: nothing */
/* 1 when a SIGBUS hit the slot's mapping, with the file offset of the first faulting read. */
int nnt_guard_faulted(int slot, uint64_t *offset);
const nnt_st_entry *nnt_st_find(const nnt_st_file *f, const char *name);

/* Writes tensors (host memory) as one safetensors file; keys[i] names tensors[i]. The file is
 * written to a temporary name and renamed, so an existing file is never left half-written. */
nnt_status nnt_st_write(const char *path, int n, const char *const *keys,
                        const nnt_tensor *const *tensors, const char *metadata_json,
                        nnt_error *err);
/* The bytes nnt_st_write would write, in one new buffer *out (*len bytes; the caller frees it).
 * Errors: NNT_ERR_INVALID_ARGUMENT (a device tensor, a key given twice), NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_st_serialize(int n, const char *const *keys, const nnt_tensor *const *tensors, const char *metadata_json,
                            void **out, size_t *len, nnt_error *err);
/* Where a result's safetensors go: a file (nnt_st_write), or, with file NULL, a new buffer
 * (*bytes, *len: nnt_st_serialize). */
typedef struct nnt_st_sink {
    const char *file;
    void **bytes;
    size_t *len;
} nnt_st_sink;
nnt_status nnt_st_emit(const nnt_st_sink *s, int n, const char *const *keys, const nnt_tensor *const *tensors,
                       const char *metadata_json, nnt_error *err);
/* A trace's saved values (as nnt_trace_write_safetensors writes them) and n_extra more tensors
 * after them, into sink s. */
nnt_status nnt_trace_emit(const nnt_trace *t, const nnt_st_sink *s, int n_extra, const char *const *extra_keys,
                          const nnt_tensor *const *extra);

/* ---- checkpoints (checkpoint.c) ---- */
/* What re-encoding at load did (reencode.c): sums over every re-encoded weight. */
typedef struct nnt_reencode_record {
    int64_t tensors;
    uint64_t values, stored_bytes, encoded_bytes;
    double err2, ref2, max_abs; /* sum of squared errors, of squared stored values; largest error */
    double worst_rel_rms;       /* the largest one tensor's relative RMS error, and its name */
    char worst[256];
} nnt_reencode_record;

struct nnt_checkpoint {
    char *dir;
    char *config_path;
    nnt_json *config;
    nnt_st_file **files;
    int n_files;
    /* name -> (file, entry) index, sorted by name for binary search */
    struct nnt_ck_index *index;
    int n_index;
    /* buffers the checkpoint made (re-laid scale grids) and owns */
    void **owned;
    int n_owned, cap_owned;
    /* accounting: which index entries a family bound (1 byte each), their stored bytes, and
     * the bytes of the owned buffers */
    uint8_t *bound;
    uint64_t mapped_bytes, owned_bytes;
    /* per index entry: an aligned copy of a tensor the mapping leaves misaligned (NULL: none
     * made; the array itself is made on the first copy) */
    void **aligned;
    nnt_reencode_record reencoded;
};
nnt_status nnt_checkpoint_open(const char *dir, nnt_checkpoint **out, nnt_error *err);
/* A checkpoint of config.json alone (no safetensors file is opened: has_tensor answers 0,
 * nnt_ck_tensor fails NOT_FOUND), for what needs only the configuration - the planner's costs,
 * the family a folder belongs to - and works on a release's folder without its weights. Errors:
 * those of nnt_json_load (NNT_ERR_IO, NNT_ERR_FORMAT), NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_checkpoint_open_config(const char *dir, nnt_checkpoint **out, nnt_error *err);
void nnt_checkpoint_close(nnt_checkpoint *ck);
int nnt_ck_has_tensor(const nnt_checkpoint *ck, const char *name);
nnt_status nnt_ck_tensor(const nnt_checkpoint *ck, const char *name, int ndim,
                         const int64_t *shape, nnt_tensor *out, nnt_error *err);
/* Takes ownership of p (bytes long, counted as allocated by the model). */
nnt_status nnt_ck_own(nnt_checkpoint *ck, void *p, size_t bytes, nnt_error *err);
/* The raw stored view of a tensor (no scales, no checks) and its file. NNT_ERR_NOT_FOUND, with
 * no message set, when absent; NNT_ERR_OUT_OF_MEMORY when a misaligned tensor cannot be copied
 * to an aligned buffer (see nnt_ck_tensor). */
nnt_status nnt_ck_lookup(const nnt_checkpoint *ck, const char *name, nnt_tensor *out, const char **file,
                         nnt_error *err);
/* Counts a tensor as bound (its stored bytes are read in place). */
void nnt_ck_mark_bound(nnt_checkpoint *ck, const char *name);
/* The name of `name`'s scale companion, written into buf; NULL when there is none (buf then
 * holds the first spelling looked for, for messages). */
const char *nnt_ck_scale_name(const nnt_checkpoint *ck, const char *name, char *buf, size_t n);
/* Bounds a count read from config.json by the tensors present, before a family allocates by
 * it: num_hidden_layers by the highest block number a tensor name holds ("layers.<i>."), an
 * expert count (n_routed_experts, num_local_experts, num_experts) by the highest expert number
 * ("experts.<e>.") or the leading extent of a fused expert tensor ("experts.<name>", 3-D or
 * more). Other keys, and checkpoints whose names follow neither scheme, pass. NNT_ERR_CONFIG
 * naming config.json, the field, its value and the tensor it disagrees with. */
nnt_status nnt_ck_bound_count(const nnt_checkpoint *ck, const char *key, int64_t value, nnt_error *err);
/* nnt_st_check on every file of the checkpoint: the first that changed or faulted. */
nnt_status nnt_ck_check_files(const nnt_checkpoint *ck, nnt_error *err);
/* The checkpoint's file bytes on disk, the stored bytes of the tensors bound so far, and the
 * bytes of the buffers it made. */
void nnt_ck_memory(const nnt_checkpoint *ck, uint64_t *file_bytes, uint64_t *mapped_bytes, uint64_t *owned_bytes);

/* ---- weights re-encoded at load (reencode.c) ---- */
/* nnt_core_api.tensor_fp8 (nnt_family.h says what it does and returns). */
nnt_status nnt_ck_tensor_fp8(const nnt_checkpoint *ck, const char *name, int ndim, const int64_t *shape,
                             nnt_tensor *out, nnt_error *err);
/* The record of every weight re-encoded so far, into the fields of *out after struct_size. */
void nnt_ck_reencoding(const nnt_checkpoint *ck, nnt_reencoding *out);

/* ---- encoded weights (quant.c) ---- */
/* Turns the stored view t of tensor `name` into an encoded weight when it is one: F8_E4M3 (its
 * scale companion s is then required), or FP4 (F4, or I8/U8 two per byte when `shape` asks for
 * twice the stored last axis) with its group scales s (U8 scales read as E8M0 bytes). An F8_E4M3
 * [n * rows, in] asked for as [n, rows, in] is n matrices quantised each on its own when its
 * scales have a multiple of n rows (MiMo-V2.5's fused qkv_proj). Sets *encoded; checks scale
 * dtypes and grid shapes and, for an encoded weight, the shape against shape[0..ndim). */
nnt_status nnt_quant_view(const nnt_checkpoint *ck, const char *file, const char *name, nnt_tensor *t,
                          const nnt_tensor *s, const char *sname, int ndim, const int64_t *shape, int *encoded,
                          nnt_error *err);
/* Scale i of a grid of dtype dt (F32, BF16, F16, F8_E8M0), read without alignment needs. */
float nnt_scale_get(nnt_dtype dt, const void *grid, int64_t i);
/* FP4 e2m1 code (bit 3 the sign) to float. */
float nnt_fp4_e2m1_to_f32(uint8_t code);
/* Reference decoder: rows [row0, row0 + nrows) of host weight w (rows counted over all leading
 * axes; F32, BF16, F16, or F8_E4M3 / F4_E2M1 with block scales) into dst F32 [nrows, cols],
 * each element times its block's scale. Errors: NNT_ERR_INVALID_ARGUMENT, NNT_ERR_INDEX,
 * NNT_ERR_SHAPE (encoded without scales), NNT_ERR_UNSUPPORTED (another dtype). */
nnt_status nnt_weight_decode(const nnt_tensor *w, int64_t row0, int64_t nrows, float *dst, nnt_error *err);

/* ---- INI configuration (plugins/ini_config.c) ---- */
typedef struct nnt_kv {
    char *key;
    char *value;
    int line;
} nnt_kv;

typedef struct nnt_ini_section {
    char *kind; /* "family" or "backend" */
    char *name;
    int line;
    nnt_kv *kv;
    int n_kv;
} nnt_ini_section;

typedef struct nnt_ini {
    char *path;
    char **dirs; /* [plugins] dir = ..., resolved against the INI file's directory */
    int *dir_lines;
    int n_dirs;
    char **files; /* [plugins] file = ... */
    int *file_lines;
    int n_files;
    nnt_ini_section *sections; /* [family.X] and [backend.Y] */
    int n_sections;
    /* [distributed]: read by runs over several ranks only */
    char *dist_transport;   /* transport = FILE, resolved; NULL when absent */
    double dist_timeout;    /* timeout = seconds; 0 when absent */
    int *dist_cuts;         /* stages = c1,c2,...: the first block of ranks 1.. (ascending) */
    int n_dist_cuts;        /* -1 when stages is absent */
    int dist_lines[3];      /* the lines of transport, timeout and stages (0: absent) */
    /* [grad]: the memory of a backward (docs/gradients.md, "Memory") */
    double grad_memory_gb;  /* memory_gb = GB (1e9 bytes) the kept activations may take; 0 when absent */
    int grad_mode;          /* mode = auto (0), keep (1) or recompute (2) */
    int grad_lines[2];      /* the lines of memory_gb and mode (0: absent) */
    /* [attention]: how attention runs on long prompts (the family kit's fam_attend) */
    uint64_t attention_block_bytes;   /* block_mb = MiB one block of scores may take; 0 when absent */
    uint64_t attention_pattern_bytes; /* pattern_mb = MiB a pattern a request reads may take; 0: absent */
    int attention_unfused;            /* fused = no: never the backend's attn_fused (default yes: 0) */
    int attention_lines[3];           /* the lines of block_mb, pattern_mb and fused (0: absent) */
    /* [prefill]: when a prompt runs in chunks (core/trace/trace_chunks.c) */
    uint64_t prefill_memory_bytes; /* memory_mb = MiB one forward's activations may take; 0 when absent */
    int prefill_chunk_tokens;      /* chunk_tokens = the chunks' length given outright; 0 when absent */
    int prefill_lines[2];          /* the lines of memory_mb and chunk_tokens (0: absent) */
    /* [trace]: what one call's saves may hold (core/trace/trace_save_bound.c) */
    uint64_t trace_save_bytes; /* save_mb = MiB the saved values of one call may take; 0 when absent */
    int trace_lines[1];        /* the line of save_mb (0: absent) */
} nnt_ini;

nnt_status nnt_ini_load(const char *path, nnt_ini **out, nnt_error *err);
void nnt_ini_free(nnt_ini *ini);
const nnt_ini_section *nnt_ini_section_find(const nnt_ini *ini, const char *kind,
                                            const char *name);
const char *nnt_ini_get(const nnt_ini_section *s, const char *key, int *line);

/* ---- plugin host (plugins/plugin_host.c) ---- */
typedef struct nnt_plugin {
    char *file;
    void *handle;
    nnt_plugin_kind kind;
    const nnt_family_descriptor *family; /* families: &family_desc */
    nnt_family_descriptor family_desc;   /* families: the plugin's descriptor up to its struct_size,
                                          * later fields zero */
    const nnt_backend_descriptor *backend;
    /* backends only: the created context */
    void *be_ctx;
    /* backends only: the backend's op table, copied up to its struct_size and zero past it, so
     * that every op this core knows reads as the backend's function or NULL; the core and the
     * families use this copy, never the backend's own table */
    nnt_backend_ops ops;
    /* families only: the ops the family calls (its ops_needed, or every ABI 3.0 op when its
     * descriptor predates the field) */
    uint64_t ops_needed;
    /* families only: the backend chosen by the INI file, and the precision */
    struct nnt_plugin *be;
    nnt_precision precision;
    nnt_weights weights; /* [family.NAME] weights = stored (the default) | fp8 */
    /* families only: why the family has no backend (be == NULL), NULL otherwise */
    char *no_backend;
    /* backends only: why creating the backend failed, NULL otherwise */
    char *create_failed;
    int explicit_file; /* loaded from a [plugins] file = line, not found by a directory scan */
} nnt_plugin;

/* A plugin file found by a directory scan that was skipped, or a family left without a backend:
 * kept by the runtime and listed by nnt_runtime_warning. */
typedef struct nnt_plugin_warning {
    char *file;
    char *reason;
    char *name;   /* the plugin's name when its descriptor header could be read, else NULL */
    char **archs; /* a family's architectures when readable (NULL-terminated), else NULL */
} nnt_plugin_warning;

typedef struct nnt_plugin_set {
    nnt_plugin **items;
    int n;
    nnt_plugin_warning *warnings;
    int n_warnings;
} nnt_plugin_set;

/* Loads one shared object and checks its descriptor; no plugin function is called. */
nnt_status nnt_plugin_load(const char *file, nnt_plugin **out, nnt_error *err);
void nnt_plugin_unload(nnt_plugin *p);
/* Loads every plugin the INI names (directories and files), checks names and architectures
 * for conflicts, creates the backends, and attaches each family to its backend. A file found
 * by a directory scan that fails to load or conflicts with one loaded before it is skipped and
 * recorded in set->warnings; so is a family that is not named in the INI and whose backend is
 * missing or cannot be created (it stays listed, with be == NULL and no_backend saying why).
 * What the INI names (file = lines, [family.X] and [backend.Y] sections, a family's backend)
 * must load: its failure is an error that names the file and the reason. */
/* Loads the transport plugin `file` (nnt_transport.h) and checks its descriptor; *handle is
 * for dlclose. Errors: NNT_ERR_IO (no such file), NNT_ERR_PLUGIN, NNT_ERR_ABI. */
nnt_status nnt_transport_load(const char *file, void **handle, const nnt_transport_descriptor **out, nnt_error *err);
nnt_status nnt_plugins_load_all(const nnt_ini *ini, nnt_plugin_set *set, nnt_error *err);
void nnt_plugins_free(nnt_plugin_set *set);
/* Writes into buf (size n) a hint about skipped plugin files that may be the one a caller
 * wanted: those whose plugin name, file stem (NAME.so) or architecture list matches `name` or
 * `arch` (either may be NULL); when none matches and any_if_none is set, a summary of every
 * skipped file. buf is "" when there is nothing to say; otherwise it starts with "; ". */
void nnt_plugins_skip_hint(const nnt_plugin_set *set, const char *name, const char *arch, int any_if_none,
                           char *buf, size_t n);

/* ---- the standard-value registry (registry.c) ---- */
typedef struct nnt_value_def {
    nnt_value_id slot;
    nnt_module module;
    const char *name;
    const char *layout;
    const char *axes;
    const char *description;
} nnt_value_def;
const nnt_value_def *nnt_value_def_get(nnt_value_id slot);
/* The value of (module, name), or -1. */
int nnt_value_find(nnt_module module, const char *name);

/* ---- paths (path.c) ---- */
#define NNT_LAYER_ALL (-1000000)
typedef struct nnt_path {
    nnt_value_id slot;
    int layer; /* -1: the model; NNT_LAYER_ALL: every block; else a block index */
    const nnt_native_info *via; /* a module's input or output that is this standard value, when
                                 * the path named it so (for refusing edits through it); else NULL */
} nnt_path;
/* Parses a value path against a model; fills err with suggestions on unknown names. */
nnt_status nnt_path_parse(const nnt_model *m, const char *text, nnt_path *out, nnt_error *err);
/* Canonical text of (slot, layer) into buf; m names a native slot's module (NULL: standard
 * slots only, a native one then written as "?"). */
const char *nnt_path_format(const nnt_model *m, nnt_value_id slot, int layer, char *buf, size_t n);
/* A wildcard over value names: "*" or "model.*" (every value: the model's and every block's),
 * "[model.]layers.N.*" or "layers.*.*" (every value of block N / of every block), and
 * "layers.N.HOST.*" (the values of one host module: self_attn, linear_attn, mlp or a native
 * spelling the family renames to one). */
typedef struct nnt_path_wild {
    int all;   /* 1: "*" */
    int layer; /* when not all: the block, or NNT_LAYER_ALL */
    int host;  /* when not all: an nnt_module, or -1 for every value of the block */
} nnt_path_wild;
/* 1 and *out when text (without a slice) is such a wildcard; 0 when it is not one (text is then
 * an ordinary path, or no path); -1 with err set when it ends in ".*" after a block whose index
 * is out of range or a host no block has (NNT_ERR_INDEX, NNT_ERR_PATH). */
int nnt_path_wildcard(const nnt_model *m, const char *text, nnt_path_wild *out, nnt_error *err);

/* ---- arena (arena.c) ---- */
typedef struct nnt_arena nnt_arena;
nnt_status nnt_arena_new(const nnt_backend_ops *be, void *be_ctx, nnt_arena **out,
                         nnt_error *err);
void nnt_arena_free(nnt_arena *a);
nnt_status nnt_arena_alloc(nnt_arena *a, size_t bytes, void **out, nnt_error *err);
size_t nnt_arena_mark(nnt_arena *a);
void nnt_arena_release(nnt_arena *a, size_t mark);
void nnt_arena_reset(nnt_arena *a);
size_t nnt_arena_high_water(const nnt_arena *a);

/* ---- runtime, model, trace (runtime/, model/, trace/, run/) ---- */
/* One call at a time per runtime (runtime/guard.c): the thread inside a call, how deeply its
 * calls nest, and how many user callbacks it is running. */
typedef struct nnt_guard {
    pthread_mutex_t mu;
    pthread_cond_t idle; /* signalled when depth returns to 0 */
    pthread_t owner;  /* valid while depth > 0 */
    int depth;        /* public calls entered and not yet left by owner */
    int callbacks;    /* user callbacks owner is running (a call from one is refused) */
    const char *call; /* the outermost call's name, for messages */
} nnt_guard;

struct nnt_runtime {
    nnt_error err;
    nnt_guard guard;
    char *config_path;
    nnt_ini *ini;
    nnt_plugin_set plugins;
    nnt_core_api core;
    void *transport_handle; /* the transport plugin, loaded by nnt_runtime_transport */
    nnt_progress_fn progress; /* nnt_runtime_set_progress's handler, or NULL */
    void *progress_user;
    const nnt_transport_descriptor *transport;
};

struct nnt_model {
    nnt_runtime *rt;
    nnt_plugin *family;
    nnt_checkpoint *ckpt;
    void *impl;
    nnt_model_info info;
    nnt_arena *arena;
    struct nnt_tape *tape; /* between the family and its backend (core/grad/tape.h) */
    nnt_memory memory; /* what the load took (nnt_model_memory) */
    int first_loaded, end_loaded; /* the blocks whose weights were loaded (every block: 0, num_layers) */
    nnt_tokenizer *tokenizer;     /* nnt_model_tokenizer's, loaded on its first call (NULL before) */
    nnt_native_info natives[NNT_NATIVE_MAX]; /* the family's native list (nnt_family_descriptor.native) */
    int n_natives;
};
/* Reads the family's native list into m (value_info.c); a malformed entry (no module name, io
 * not 0 or 1, an alias that is no standard value, more than NNT_NATIVE_MAX entries) is
 * NNT_ERR_PLUGIN naming the family and the entry. */
nnt_status nnt_model_read_natives(nnt_model *m, nnt_error *err);
/* Entry slot - NNT_VALUE_NATIVE of m's native list, or NULL (a standard slot, or past the list). */
const nnt_native_info *nnt_model_native(const nnt_model *m, nnt_value_id slot);
/* 1 when slot is a value of each block (a standard value whose host is not the model, or a
 * native value of a block module), 0 when it is the model's. */
int nnt_slot_in_block(const nnt_model *m, nnt_value_id slot);

/* The domain a config.json number read under `key` (a nested key: its last name) violates, as
 * text ("an integer >= 1"), or NULL when v lies in it: any float must be finite, and the fields of
 * checkpoint/config_domains.c's table must lie in their domains. */
const char *nnt_cfg_domain_violation(const char *key, double v);

/* ---- argument rules every front end shares (the C API, request files, the CLI, Python) ---- */
/* Factors of scale, add and steer edits, masked_fill's fill value, and the temperature's upper
 * bound: finite, |F| <= NNT_FACTOR_MAX. */
#define NNT_FACTOR_MAX 1e6
#define NNT_FACTOR_TEXT "a finite number with |F| <= 1e6"
static inline int nnt_factor_ok(double f)
{
    return f >= -NNT_FACTOR_MAX && f <= NNT_FACTOR_MAX; /* false for NaN */
}

/* ---- one call at a time per runtime (runtime/guard.c) ---- */
void nnt_guard_init(nnt_guard *g);
void nnt_guard_destroy(nnt_guard *g);
/* Enters rt's guard for public call `call` (a static string): NNT_OK when no call runs on rt, or
 * when this thread's own call makes it (nesting); NNT_ERR_BUSY, having changed nothing, when
 * another thread is inside a call of rt or when this thread makes it from a user callback of
 * the running call (then rt's error record says so). rt NULL: NNT_OK. */
nnt_status nnt_guard_enter(nnt_runtime *rt, const char *call);
/* As nnt_guard_enter, except that a call of another thread is waited for (a free, which cannot
 * report a refusal); from a user callback it is refused all the same. */
nnt_status nnt_guard_enter_wait(nnt_runtime *rt, const char *call);
/* Leaves what nnt_guard_enter entered (only after it returned NNT_OK). */
void nnt_guard_leave(nnt_runtime *rt);
/* Marks the start (entering 1) and end (0) of a user callback made by the running call. */
void nnt_guard_callback(nnt_runtime *rt, int entering);
/* Calls rt's progress handler, when it has one, with p (runtime/progress.c), marked as a
 * callback for the guard. Returns 1 when the handler asks the call to stop (the caller then
 * sets NNT_ERR_INTERRUPTED naming where, with nnt_progress_stopped), else 0. */
int nnt_progress_report(nnt_runtime *rt, const nnt_progress *p);
/* NNT_ERR_INTERRUPTED set on err, naming where the call stopped. */
nnt_status nnt_progress_stopped(nnt_error *err, const char *where);
/* The runtime of trace t's model (NULL for a NULL trace). */
nnt_runtime *nnt_guard_trace_rt(const nnt_trace *t);
/* The body of a public call: `call` (an nnt_status expression) run inside rt's guard, its status
 * returned, or NNT_ERR_BUSY with nothing run. */
#define NNT_GUARDED(rt, name, call)                                                                                    \
    do {                                                                                                               \
        nnt_runtime *guard_rt_ = (rt);                                                                                 \
        nnt_status guard_st_ = nnt_guard_enter(guard_rt_, name);                                                       \
        if (guard_st_ == NNT_OK) {                                                                                     \
            guard_st_ = (call);                                                                                        \
            nnt_guard_leave(guard_rt_);                                                                                \
        }                                                                                                              \
        return guard_st_;                                                                                              \
    } while (0)
/* The same for a call that returns nothing (a free): it waits for another thread's call, and
 * from a user callback it does nothing. */
#define NNT_GUARDED_VOID(rt, name, call)                                                                               \
    do {                                                                                                               \
        nnt_runtime *guard_rt_ = (rt);                                                                                 \
        if (nnt_guard_enter_wait(guard_rt_, name) == NNT_OK) {                                                         \
            call;                                                                                                      \
            nnt_guard_leave(guard_rt_);                                                                                \
        }                                                                                                              \
    } while (0)

/* The family plugin serving checkpoint ck (config.json's architectures, then its model_type), or
 * NULL (model/load.c). */
const nnt_plugin *nnt_runtime_find_family(const nnt_runtime *rt, const nnt_checkpoint *ck);

/* The routine table (core services) the core hands to plugins (model/core_api.c). */
void nnt_core_api_init(nnt_core_api *api);

/* A gradient trace over pipeline stages (trace_stage_grad.c), for the ranks of core/methods/
 * pipeline.c: each rank runs its stage [first, end) of t's model (0 <= first < end <= num_layers)
 * on the batch's ids / mask (int32 [batch, seq]; mask NULL: every token real), with streams
 * float32 host [batch, seq, streams, hidden] (streams = nnt_model_info.num_streams, at least 1).
 *
 * nnt_trace_grad_stage_forward, in rank order: the gradient request's checks
 * (nnt_trace_grad_check, and the memory bound for the stage's blocks: NNT_ERR_OUT_OF_MEMORY before
 * anything runs when even recomputation would exceed it), then the stage unrecorded, its saves made, the stream leaving it in
 * hidden_out; with check_only, the checks and the forward's own checks alone (nothing runs).
 * hidden_in: the stream entering (NULL exactly when first is 0); hidden_out: NULL exactly when
 * end is num_layers. The last stage runs nothing here (its backward's recorded forward makes its
 * saves and the metric).
 *
 * nnt_trace_grad_stage_backward, in reverse rank order, after the forward: the stage again on
 * the tape from hidden_in (the same stream), d_hidden_out (dL/d of the stream leaving; NULL
 * exactly when end is num_layers: the metric is seeded here) seeded, the reverse pass run; the
 * gradients asked of values the stage holds become its "grad:PATH" results (and "metric" on the
 * last stage), and dL/d hidden_in is written to d_hidden_in (NULL when first is 0). The stage's
 * record is kept whole, or block by block (recomputation from each block's input stream) when the
 * memory choice ([grad] mode / memory_gb, against the estimate for the stage's end - first blocks)
 * says so; both give the same gradients.
 * Errors: NNT_ERR_INVALID_ARGUMENT (a bad range, or buffers given or missing against it), the
 * checks' and the forward's errors, NNT_ERR_UNSUPPORTED (an op without a backward entry, a
 * family that does not emit the stage's end values). */
nnt_status nnt_trace_grad_stage_forward(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                                        int first, int end, const float *hidden_in, float *hidden_out, int check_only);
nnt_status nnt_trace_grad_stage_backward(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                                         int first, int end, const float *hidden_in, const float *d_hidden_out,
                                         float *d_hidden_in);
/* 1 when trace t asks for a gradient (a "grad" request, a metric or a cotangent). */
int nnt_trace_wants_grad(const nnt_trace *t);

/* Trace internals used by the run (trace.c). */
typedef struct nnt_trace_hooks nnt_trace_hooks;
struct nnt_run {
    nnt_model *model;
    nnt_trace *trace; /* may be NULL: no requests */
    nnt_arena *arena;
    nnt_error *err;
    nnt_call_dims dims;
    int step;
    const nnt_forward_args *args;
    int current_request; /* the save request being served, to number repeated emissions */
    int first_layer, end_layer; /* the call's pipeline stage: blocks [first, end); [0, L) for a whole call */
};
/* ---- what the sweeping methods share (methods/sweep.c) ---- */
/* path with its '*' replaced by block b, into buf [n]. */
void nnt_sweep_block_path(const char *path, int b, char *buf, size_t n);
/* The blocks value ("layers.*.VALUE" or "layers.N.VALUE") covers that serve it laid out
 * [batch seq ...] (and writable when asked) into a new array *blocks [*n_blocks] (the caller
 * frees it). method names the caller in messages. Errors: NNT_ERR_PATH, NNT_ERR_NOT_FOUND (no
 * block serves it, with the family's reason), NNT_ERR_SHAPE (no token axis), NNT_ERR_INVALID_ARGUMENT
 * (read-only), NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_sweep_blocks(nnt_model *m, const char *method, const char *value, int seq, int writable, int **blocks,
                            int *n_blocks, nnt_error *err);

/* The trace's side of an emission (trace.c): saves and edits on (slot, layer). */
nnt_status nnt_run_emit(nnt_run *run, nnt_value_id slot, int layer, nnt_tensor *t);
int nnt_run_wants(const nnt_run *run, nnt_value_id slot, int layer);
/* The run services the routine table hands families (run/forward.c): emission as a family sees
 * it (the stage's check, the trace, then next_token_probs derived from logits), wants, and
 * allocation in the run's arena (backend memory; F32 flagged bf16-valued in bf16 precision). */
nnt_status nnt_run_api_emit(nnt_run *run, nnt_value_id slot, int layer, nnt_tensor *t);
int nnt_run_api_wants(const nnt_run *run, nnt_value_id slot, int layer);
/* nnt_core_api.parts_wanted and emit_part (since ABI 3.11): core/trace/trace_parts.c behind
 * the stage check emit makes. */
int nnt_run_api_parts_wanted(const nnt_run *run, nnt_value_id slot, int layer, int axis, int64_t extent, int64_t *lo,
                             int64_t *hi);
nnt_status nnt_run_api_emit_part(nnt_run *run, nnt_value_id slot, int layer, const nnt_tensor *part, int axis,
                                 int64_t first, int64_t extent);
nnt_status nnt_run_alloc(nnt_run *run, nnt_dtype dtype, int ndim, const int64_t *shape, nnt_tensor *out,
                         nnt_error *err);
size_t nnt_run_mark(nnt_run *run);
void nnt_run_release(nnt_run *run, size_t mark);

/* A generation session: the family's caches and the mask history of a batch (session.c). */
struct nnt_session {
    nnt_model *m;
    int batch, capacity, len, step;
    int keep_results; /* results accumulate across calls (a generation) */
    int32_t *mask_hist; /* [batch, capacity] */
    int32_t *count;     /* real tokens so far per row */
    void *cache;        /* the family's */
    int first_layer, end_layer; /* the pipeline stage its first call ran (every later call runs the same) */
};

/* A pipeline stage of one call (nnt_trace_run_stage, nnt_session_forward_stage): blocks
 * [first_layer, end_layer) and the caller's host buffers of the residual stream, F32 [batch,
 * seq, num_streams, hidden_size] (hidden_in NULL when first_layer is 0, hidden_out NULL when
 * end_layer is the block count). */
typedef struct nnt_stage_call {
    int first_layer, end_layer;
    const float *hidden_in;
    float *hidden_out;
    int check_only; /* make every check of the call, then return before the forward */
} nnt_stage_call;

/* Runs one forward of model m under trace t (NULL: none), continuing session ss (NULL: a
 * stateless call), over the blocks of `stage` (NULL: the whole model, the stage [0, L)). The
 * stage is checked first (NNT_ERR_INVALID_ARGUMENT naming the argument; NNT_ERR_UNSUPPORTED for
 * a family built before ABI 3.2). */
nnt_status nnt_model_forward(nnt_model *m, nnt_trace *t, nnt_session *ss, const int32_t *ids, const int32_t *mask,
                             int batch, int seq, const nnt_stage_call *stage, nnt_error *err);
/* 1 when a call running blocks [first, end) of a model of L blocks holds value (slot, layer):
 * a block's values on the stage running the block; token_embeddings and the inputs (input_ids,
 * attention_mask, input_size) on the stage holding block 0; the readout (final_norm_output,
 * lm_head_output, logits, next_token_probs) on the stage holding block L - 1. */
int nnt_stage_holds(int L, int first, int end, nnt_value_id slot, int layer);
/* (layer, slot) info from the family, with registry defaults filled in. */
nnt_status nnt_model_slot_info(const nnt_model *m, int layer, nnt_value_id slot,
                               const nnt_call_dims *dims, nnt_value_info *out, nnt_error *err);
/* Trace hooks called by nnt_model_forward. */
/* Builds the look-up table for a call of dims at generation step `step` running blocks
 * [first, end) (a whole call: [0, L)); keep_results keeps what earlier calls saved. Requests on
 * values the stage does not hold (nnt_stage_holds) are left for the stages that hold them; a
 * skip_layers copy whose source value lies outside the stage is refused (NNT_ERR_UNSUPPORTED). */
nnt_status nnt_trace_prepare(nnt_trace *t, const nnt_call_dims *dims, int step, int keep_results, int first, int end,
                             nnt_error *err);
nnt_model *nnt_trace_model(const nnt_trace *t);
/* After a forward that returned NNT_OK: every (value, block) a request of the call covered was
 * emitted at least once, or NNT_ERR_PLUGIN naming the family, the value and its declared dtype
 * and shape. (nnt_run_emit checks each emission's dtype and shape as it comes.) */
nnt_status nnt_trace_check_emitted(nnt_trace *t, nnt_error *err);
/* Checks, before a run, that every steering position of t names a token some call of the run
 * processes: rows of lens[0..B) real prompt tokens, the prompt's call at step 0 and, at each
 * step 1..n_steps-1, one more token per row (n_steps 1: a single forward). NNT_ERR_INDEX
 * naming the request and the position otherwise. */
nnt_status nnt_trace_check_positions(nnt_trace *t, const int *lens, int B, int n_steps, nnt_error *err);
/* nnt_trace_save at every step, whatever nnt_trace_steps chose for the caller's requests. */
nnt_status nnt_trace_save_every_step(nnt_trace *t, const char *path);
/* Removes every result the most recent request saved; the latest non-None one moves into *out
 * (freed first; the caller owns it then). Returns 1 when one was moved. */
int nnt_trace_take_last_result(nnt_trace *t, nnt_tensor *out);
/* Removes the most recent request (one generation added for its own reading). */
void nnt_trace_drop_last_request(nnt_trace *t);
/* Requests of a request document (core/request/request_apply.c). One C API call adds one or
 * more requests (a steer one per block, a masked fill a kept mask and the fill); `first` is
 * nnt_trace_request_count before the call, and each function below applies to the requests
 * added since. */
int nnt_trace_request_count(const nnt_trace *t);
/* Removes the requests added since `first` (after a document's entry failed). */
void nnt_trace_drop_since(nnt_trace *t, int first);
/* Names the requests' field in their document ("request.json: edits[2]", copied; whole: the
 * label names the value path itself, as an entry of "saves" does, and no sub-field such as
 * ".path" is added to it): the checks
 * made when a run starts then name it, e.g. "request.json: edits[2].positions[0]: position -7
 * names no token of this forward (before every row's first token): ...", "request.json:
 * edits[0].tensor: set '...': the tensor has shape ...". Requests without a label keep the C
 * API's messages. */
nnt_status nnt_trace_label_since(nnt_trace *t, int first, const char *label, int whole);
/* Restricts the requests to batch rows rows [n] (each >= 0, each once; copied) of their value's
 * leading batch axis; checked when a run starts (a value laid out [batch ...], every row in the
 * batch: NNT_ERR_INDEX naming "rows[k]"). A save keeps those rows, [n, ...] in the order given,
 * before its slice; scale, zero, masked fill and steer edit only them; a callback sees them only,
 * [n, ...]; a set or add writes them with a tensor of the value's axes after the batch axis
 * (the same for every row; an add also takes trailing axes of it) or [n, ...] of those (row
 * rows[k] gets entry k). Kept masks (REQ_KEEP) are not restricted; skip_layers refuses rows.
 * Errors: NNT_ERR_INVALID_ARGUMENT (n < 1, a negative or repeated row), NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_trace_limit_rows(nnt_trace *t, int first, const int *rows, int n);
/* Makes the requests (sets and adds only) write at token positions [n] of each chosen row
 * (nnt.h's "token positions", words included; copied) rather than the whole value: the value
 * must be laid out [batch seq ...], and the tensor holds the axes after [batch, seq] (written
 * at every token a position names; an add also takes trailing axes of them) or [n, ...] of those
 * (entry k at the tokens positions[k] names), entries applied in list order. Positions that no
 * row has are refused when a run starts, like steer's. Errors: NNT_ERR_INVALID_ARGUMENT (n < 1,
 * a request other than set or add), NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_trace_limit_positions(nnt_trace *t, int first, const int *positions, int n);
/* nnt_request_apply for one of several requests sharing a forward (core/methods/share.c): r's
 * rows are rows row0 .. row0 + n_rows - 1 of the batch, so every edit and save of r is limited to
 * them (an edit's own "rows" counted from row0). No callbacks. Errors: those of
 * nnt_request_apply, NNT_ERR_INVALID_ARGUMENT (n_rows < 1). */
nnt_status nnt_request_apply_rows(const nnt_request *r, nnt_trace *t, int row0, int n_rows);
/* A trace method's result made of a batch and a trace that ran (core/methods/run.c): both move
 * into *out (b is left zeroed; t is the result's). Errors: NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_result_of_trace(nnt_runtime *rt, nnt_batch *b, nnt_trace *t, nnt_result **out);
/* Makes res (of nnt_result_of_trace) a generation's: tokens [res's batch, max_new] and the stop
 * ids [n_stops] used, both copied (run.c). Errors: NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_result_add_tokens(nnt_result *res, const int32_t *tokens, int max_new, const int32_t *stops, int n_stops);
/* The stop ids generation request r uses on model m (run.c): the tokenizer's eos unless
 * ignore_eos, then the request's own, into a new array *stops (the caller frees it). Errors:
 * NNT_ERR_INVALID_ARGUMENT (a stop id outside the vocabulary, naming it), NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_generation_stops(nnt_model *m, const nnt_request *r, int32_t **stops, int *n_stops);
/* Parts src's results among n requesters (core/trace/trace_split.c): requester j made src's
 * requests [first_request[j], first_request[j + 1]) (first_request has n + 1 entries), and
 * each result goes to dst[j] under the key it would have had in a trace of j's requests alone
 * (its "#r" counting j's own earlier requests of the same value only). Values are copied.
 * Errors: NNT_ERR_OUT_OF_MEMORY, NNT_ERR_INTERNAL (a result no requester made). */
nnt_status nnt_trace_split(const nnt_trace *src, const int *first_request, int n, nnt_trace *const *dst,
                           nnt_error *err);

/* ---- module tree (tree.c) ---- */
nnt_tree *nnt_tree_new(void);
void nnt_tree_free(nnt_tree *t);
int nnt_tree_node(nnt_tree *tree, int parent, const char *native, const char *standard,
                  const char *cls, const char *detail, int module, int layer);
nnt_status nnt_tree_print(const nnt_tree *tree, const nnt_model *m, FILE *out, nnt_error *err);

/* ---- small helpers (util.c) ---- */
char *nnt_strdup(const char *s);
char *nnt_path_join(const char *dir, const char *name);
char *nnt_dirname(const char *path);
/* 1 when something exists at path, whatever its kind (stat follows links, and a link that leads
 * nowhere - dangling, or a loop - counts too; nothing is opened):
 * a reader then opens it with nnt_open_regular, which names what is wrong with a FIFO or a
 * directory, rather than the caller skipping it as absent. */
int nnt_file_exists(const char *path);
/* The one way libnnt opens an input file to read it (config.json, the safetensors index and
 * shards, tokenizer files, the INI, tensors given to the CLI): open(2) read-only with
 * O_NONBLOCK, O_CLOEXEC and O_NOCTTY, so that a FIFO or a device never blocks the call; fstat
 * on the descriptor; anything but a regular file is closed and refused; O_NONBLOCK is then
 * cleared. On NNT_OK *fd is a blocking descriptor the caller closes and *st (may be NULL) the
 * fstat of that same file. Errors: NNT_ERR_IO "PATH: cannot open: REASON" or "PATH: not a
 * regular file (a FIFO)" (or a directory, device, socket). */
struct stat;
nnt_status nnt_open_regular(const char *path, int *fd, struct stat *st, nnt_error *err);
/* nnt_write_file (nnt.h) of the bytes of n parts written one after the other: parts[i] holds
 * lens[i] bytes (a part of 0 bytes may be NULL). outfile.c. */
nnt_status nnt_write_parts(const char *path, int n, const void *const *parts, const size_t *lens, nnt_error *err);
/* Levenshtein distance, for "did you mean". */
int nnt_edit_distance(const char *a, const char *b);
/* Bytes the C library's allocator has handed out and not had back (glibc: mallinfo2's in-use
 * and mapped-chunk totals), or 0 where it cannot tell. */
uint64_t nnt_heap_in_use(void);
/* 64-bit FNV-1a (Fowler, Noll and Vo's published 64-bit offset basis and prime), continued from
 * h over n bytes (start from NNT_FNV1A64_BASIS); an identity check, not a cryptographic hash. */
#define NNT_FNV1A64_BASIS 0xcbf29ce484222325ULL
uint64_t nnt_fnv1a64(uint64_t h, const void *bytes, size_t n);
/* nnt_fnv1a64 of a whole file's bytes, read as nnt_open_regular opens inputs. Errors: NNT_ERR_IO
 * naming the file. */
nnt_status nnt_file_fnv1a64(const char *path, uint64_t *h, nnt_error *err);

#endif /* NNT_INTERNAL_H */

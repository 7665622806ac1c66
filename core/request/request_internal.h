/* request_internal.h - the parsed request document (nnt_request.h) as libnnt's request files
 * share it: its rows, saves, edits, tensors and method settings, the parse's context and the
 * JSON helpers that check fields and name their path in messages. */
#ifndef NNT_REQUEST_INTERNAL_H
#define NNT_REQUEST_INTERNAL_H

#include <cjson/cJSON.h>

#include "../internal.h"

/* ---- limits (docs/requests.md, "limits") ---- */
#define REQ_MAX_BYTES ((size_t)256 << 20) /* a document, and a prompt file's text */
#define REQ_MAX_DEPTH 64                 /* nesting of arrays and objects */
#define REQ_MAX_ITEMS 65536              /* rows, saves, edits, and the entries of any list but a row's ids */
#define REQ_MAX_TOKENS (1 << 22)         /* a row's token ids (inline or from a tokens file) */
#define REQ_FACTOR_MAX NNT_FACTOR_MAX    /* |factor|, |fill|, temperature (core/internal.h) */
#define REQ_INT_MAX 2147483647LL         /* blocks, experts, steps, token ids, rows */
#define REQ_POS_MIN (-2147483645LL)      /* the least integer position (NNT_POS_* lie below) */
#define REQ_EXACT_MAX 9007199254740992.0 /* 2^53: the largest integer every double above holds */
#define REQ_MAX_SAES 64                  /* "saes" entries */

/* ---- rows ---- */
typedef enum req_row_kind { REQ_ROW_TOKENS = 0, REQ_ROW_TEXT, REQ_ROW_FILE } req_row_kind;
typedef struct req_row {
    req_row_kind kind;
    int32_t *tokens; /* TOKENS: the ids [n_tokens] (given inline, or read from the tokens_file `file`) */
    int n_tokens;
    char *text;      /* TEXT: as given; FILE: the file's content, read by the parse (text_len bytes) */
    size_t text_len;
    char *file;      /* FILE: the name as given; TOKENS: the tokens_file as given, or NULL (inline ids) */
    char field[32];  /* its place in the document: "rows[3]", "patch.clean" */
} req_row;

/* ---- tensors ---- */
typedef enum req_tensor_source { REQ_TENSOR_FILE = 0, REQ_TENSOR_KEY, REQ_TENSOR_INLINE } req_tensor_source;
typedef struct req_tensor {
    nnt_tensor t;             /* a host copy, owned */
    req_tensor_source source; /* how the document gave it */
    char *file, *key;         /* FILE: the file as given and its key (NULL: its one tensor); KEY: the key */
} req_tensor;

/* ---- edits ---- */
typedef enum req_op {
    REQ_OP_SAVE = 0,
    REQ_OP_ZERO,
    REQ_OP_SCALE,
    REQ_OP_SET,
    REQ_OP_ADD,
    REQ_OP_MASKED_FILL,
    REQ_OP_ABLATE_EXPERT,
    REQ_OP_SKIP_LAYERS,
    REQ_OP_STEER,
    REQ_OP_STEPS,
    REQ_OP_CALLBACK,
    REQ_OP_COUNT
} req_op;
/* The "op" words, indexed by req_op (request_names.c). */
extern const char *const req_op_names[REQ_OP_COUNT];
/* The word of a position (NNT_POS_*: "prompt", "generated", "all"), or NULL for an integer. */
const char *req_position_word(int p);

typedef struct req_edit {
    req_op op;
    char *path;       /* save, zero, scale, set, add, masked_fill, callback */
    char *where;      /* masked_fill: the mask's path */
    int64_t equals;   /* masked_fill */
    double factor;    /* scale; add and steer (default 1) */
    double fill;      /* masked_fill */
    int a, b;         /* ablate_expert: layer, expert; skip_layers: start, end; steer: first, last;
                       * steps: from, to (-1: every later step) */
    int callback;     /* callback: the index into nnt_request_apply's callbacks */
    int has_tensor;   /* set, add, steer */
    req_tensor tensor;
    int *positions;   /* steer: the tokens (NULL / 0: every token); set, add: the tokens written
                       * when has_positions (absent: the whole value) */
    int n_positions;
    int has_positions;
    int *rows;        /* the batch rows it applies to; NULL / 0: every row */
    int n_rows;
    int *features;    /* zero, scale, masked_fill on "VALUE.sae.feature_acts": the SAE features edited */
    int n_features;   /* 0: not a feature edit */
} req_edit;

/* An entry of "saes": a SAELens folder attached to a value (request_sae.c). */
typedef struct req_sae {
    char *path;   /* the value, as given */
    char *dir;    /* the folder, resolved against the document's folder */
    nnt_sae *sae; /* loaded by the parse */
} req_sae;

/* A cotangent of a trace's "grad" section: dL/dV on the value at path. */
typedef struct req_cotangent {
    char *path;
    req_tensor tensor;
} req_cotangent;

struct nnt_request {
    char *name; /* the document's name in messages */
    nnt_method method;
    int add_special;
    req_row *rows; /* trace, lens, generate: "rows"; patch: its clean and corrupted prompts */
    int n_rows;
    char **saves;
    int n_saves;
    req_edit *edits;
    int n_edits;
    req_sae *saes; /* "saes": attached before the edits */
    int n_saes;
    /* generate */
    nnt_generate_opts gen; /* stop_ids points into gen_stop */
    int32_t *gen_stop;
    int ignore_eos;
    /* lens */
    int *lens_positions; /* NULL / 0: every position */
    int n_lens_positions;
    int lens_probs;
    /* patch */
    nnt_request_patch_opts patch; /* its strings and positions point into the fields below */
    char *patch_value, *patch_metric;
    int *patch_positions;
    /* attribute (its rows are rows[0] and rows[1], as patch's) */
    nnt_request_attribute_opts attr; /* its strings point into the fields below */
    char *attr_value, *attr_metric;
    /* trace: "grad" (request_grad.c) */
    int has_grad;
    char **grad_paths;
    int n_grad_paths;
    char *grad_metric;   /* NULL: none */
    int *grad_positions; /* NULL / 0: the last token */
    int n_grad_positions;
    req_cotangent *cotangents;
    int n_cotangents;
};

/* ---- the parse's context (request_json.c) ---- */
typedef struct req_ctx {
    nnt_error *err;
    const char *name;     /* the document's name in messages */
    const char *base_dir; /* relative "file" fields resolve here; NULL: the working directory */
    nnt_st_file *attachment; /* the tensors beside the document, or NULL */
    int no_files;         /* NNT_REQUEST_NO_FILES: a field naming a file is refused */
} req_ctx;

/* NNT_OK when the document may name files; else an error naming `field` (NNT_REQUEST_NO_FILES). */
nnt_status req_may_name_files(const req_ctx *c, const char *field);

/* Sets err to "NAME: FIELD: message" and returns st. */
nnt_status req_fail(const req_ctx *c, nnt_status st, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* "parent.key" / "parent[i]" into buf (size REQ_FIELD_MAX); parent "" gives "key". */
#define REQ_FIELD_MAX 160
const char *req_field(char *buf, const char *parent, const char *key);
const char *req_index(char *buf, const char *parent, int i);
/* A short rendering of a JSON value for "got ..." (at most 60 characters). */
const char *req_got(const cJSON *v, char *buf, size_t n);
/* The document's bytes before cJSON reads them: valid UTF-8, no raw control byte, no "\u0000"
 * escape, nesting at most REQ_MAX_DEPTH. NNT_ERR_FORMAT naming the byte otherwise. */
nnt_status req_scan(const req_ctx *c, const char *json, size_t len);
/* Every member of object obj (at `field`) is one of known[n] and given once; else NNT_ERR_FORMAT
 * naming the member and listing the known ones. */
nnt_status req_members(const req_ctx *c, const cJSON *obj, const char *field, const char *const *known, int n);
/* obj's member key, or NULL when absent. */
const cJSON *req_member(const cJSON *obj, const char *key);
/* Typed members: each checks the member `key` of obj (at parent) - required, or left at the
 * default already in *out when absent - and names it in messages. */
nnt_status req_int(const req_ctx *c, const cJSON *obj, const char *parent, const char *key, int required, long long min,
                   long long max, long long *out);
nnt_status req_number(const req_ctx *c, const cJSON *obj, const char *parent, const char *key, int required, double min,
                      double max, const char *expected, double *out);
nnt_status req_bool(const req_ctx *c, const cJSON *obj, const char *parent, const char *key, int *out);
/* A string member (non-empty; *out NULL when absent and not required), copied. */
nnt_status req_string(const req_ctx *c, const cJSON *obj, const char *parent, const char *key, int required, char **out);
/* An integer value v at `field` in [min, max]: NNT_ERR_FORMAT for a non-number or a fraction,
 * NNT_ERR_INVALID_ARGUMENT outside the range. */
nnt_status req_int_value(const req_ctx *c, const cJSON *v, const char *field, long long min, long long max,
                         long long *out);
/* A list member of integers in [min, max] (at most max_items, at least one; each once when
 * unique), copied into *out [*n]. */
nnt_status req_int_list(const req_ctx *c, const cJSON *v, const char *field, long long min, long long max, int unique,
                        int max_items, int **out, int *n);
/* A list of token positions: integers in -2147483645..2147483647 and the words "prompt",
 * "generated", "all" (as NNT_POS_*), at least one. */
nnt_status req_positions(const req_ctx *c, const cJSON *v, const char *field, int **out, int *n);

/* ---- parts of the parse ---- */
/* The tensor field v at `field` into *t (request_tensor.c). */
nnt_status req_tensor_parse(const req_ctx *c, const cJSON *v, const char *field, req_tensor *t);
void req_tensor_free(req_tensor *t);
/* The "edits" entry v (at `field`) of a request of method m into *e (request_edits.c). */
nnt_status req_edit_parse(const req_ctx *c, const cJSON *v, const char *field, nnt_method m, req_edit *e);
void req_edit_free(req_edit *e);

/* The "grad" section gs of a trace request into r; what it owns freed; two requests' sections
 * compared; applied to trace t after the saves (request_grad.c). */
nnt_status req_grad_parse(const req_ctx *c, const cJSON *gs, nnt_request *r);
void req_grad_free(nnt_request *r);
int req_grad_equal(const nnt_request *a, const nnt_request *b);
nnt_status req_grad_apply(const nnt_request *r, nnt_trace *t, nnt_error *err);

/* The "saes" list v into r (each folder loaded); what they own freed; two requests' lists
 * compared; attached to trace t before the edits (request_sae.c). */
nnt_status req_saes_parse(const req_ctx *c, const cJSON *v, nnt_request *r);
void req_saes_free(nnt_request *r);
int req_saes_equal(const nnt_request *a, const nnt_request *b);
nnt_status req_saes_apply(const nnt_request *r, nnt_trace *t, nnt_error *err);

/* ---- the request (request.c) ---- */
void req_row_free(req_row *r);
/* 1 when a and b ask the same thing: equal fields, the tensors equal in dtype, shape and bytes
 * whatever their source, a row of a file equal to a row of its text (nnt_request_write turns
 * the one into the other); the document's name is not compared. */
int nnt_request_equal(const nnt_request *a, const nnt_request *b);

#endif /* NNT_REQUEST_INTERNAL_H */

/* cli.h - what the nnt command's files share: the command table, the parsed command line, and
 * each part's functions (options, numbers, the request the options make, messages, token text,
 * --out, runs over ranks, pictures). The commands themselves live in cli/commands/, one file
 * each; everything a command computes comes from libnnt's methods (nnt_methods.h). */
#ifndef NNT_CLI_H
#define NNT_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "nnt/nnt.h"

#define CLI_MAX_ROWS 64  /* batch rows */
#define CLI_MAX_STOP 64  /* --stop-id */
#define CLI_MAX_POSITIONS 256
#define CLI_BLOCK_MAX 2147483647L /* block, expert, step and token numbers: 0..CLI_BLOCK_MAX */
#define CLI_FACTOR_MAX 1e6        /* --scale, --steer-factor and --temperature: |F| <= 1e6 */
#define CLI_FACTOR_MAX_TEXT "1e6"
#define CLI_MAX_PROMPT_FILE ((size_t)1 << 30) /* bytes of a --prompt-file */

/* ---- the command line, parsed (options.c) ---- */

/* One batch row as given: token ids (--tokens), text (--prompt) or a file of text (--prompt-file). */
typedef enum cli_row_kind { ROW_TOKENS, ROW_PROMPT, ROW_FILE, ROW_TOKENS_FILE } cli_row_kind;
typedef struct cli_row {
    cli_row_kind kind;
    const char *arg; /* NULL: not given */
} cli_row;

/* One request option (--save, --zero, ...), in the order given. */
typedef enum cli_req_kind {
    R_SAVE, R_ZERO, R_SCALE, R_SET, R_ADD, R_ABLATE, R_SKIP, R_STEER, R_STEPS,
    R_FILL /* --fill: an SAE's features set (a masked fill by feature index) */
} cli_req_kind;
typedef struct cli_req {
    cli_req_kind kind;
    const char *flag;  /* the option, for messages */
    const char *text;  /* the argument as given */
    char *path;        /* a copy of the argument, cut at its separator: the value path or the numbers */
    char *arg;         /* what follows the separator (inside path's allocation), or NULL */
    long a, b;         /* R_ABLATE: layer, expert; R_SKIP: start, end; R_STEER: first, last; R_STEPS: from, to */
    float factor;      /* R_SCALE: F; R_STEER: the --steer-factor before it; R_FILL: V */
    char *file;        /* R_SET, R_ADD, R_STEER: FILE of FILE[:KEY] (owned) */
    const char *key;   /* its KEY (inside arg) or NULL */
    int *positions;    /* R_STEER: the --steer-positions before it (owned; NULL: every position) */
    int n_positions;
} cli_req;

typedef struct cli_command cli_command;

typedef struct cli_opts {
    const cli_command *cmd;
    const char *cmd_name;
    const char *model, *config, *out, *plot;
    const char *remote;       /* --remote URL: run on `nnt serve` there (remote.c) */
    const char *request_file; /* --request FILE: the request itself, instead of the options */
    int print_request;        /* --print-request: print the request the options make, run nothing */
    int tsv, ids_only, no_special, ignore_eos;
    const char *positions;    /* lens and patch --positions, as given */
    cli_row clean, corrupt;   /* patch: --clean/--clean-tokens, --corrupt/--corrupt-tokens */
    const char *value, *metric;
    int patch_rows;           /* --batch (0: not given) */
    const char **grads; /* trace --grad PATH, in order (owned array, grown as given) */
    int n_grads, cap_grads;
    const char **saes;  /* --sae PATH=DIR as given, in order (owned array, grown as given) */
    int n_saes, cap_saes;
    const char *metric_positions;   /* trace --metric-positions, as given */
    int ig_steps;                   /* attribute --ig-steps (0: AtP) */
    cli_row rows[CLI_MAX_ROWS];
    int n_rows, n_text_rows;  /* n_text_rows: --prompt and --prompt-file rows */
    const char *text;         /* tokenize's positional text */
    cli_req *reqs; /* owned array, grown as given: a command line holds as many as the kernel lets it */
    int n_reqs, cap_reqs;
    int max_new_tokens;       /* -1: not given */
    float temperature, top_p;
    int top_k;
    unsigned long long seed;
    int32_t stop_ids[CLI_MAX_STOP];
    int n_stop_ids;
    /* while parsing: the --steer-factor and --steer-positions the next --steer takes */
    float steer_factor;
    int *pending_positions, n_pending_positions, steer_pending;
    /* harvest (cli/commands/harvest.c) */
    const char **data;        /* --data FILE, in order (owned array) */
    int n_data, cap_data;
    const char **reduce;      /* --reduce PATH, in order (owned array) */
    int n_reduce, cap_reduce;
    const char *field, *format, *rows_layout, *dtype; /* --field, --format, --rows, --dtype as given */
    int context, skip_bad, routing_stats, top_tokens;  /* --context (0: not given), --skip-bad, ... */
    double shard_mb;          /* --shard-mb (0: not given) */
    long long max_tokens;     /* --max-tokens (0: the whole corpus) */
    char **top_paths;         /* --top-features and --top-contexts PATH=K: the paths (owned), */
    int *top_count, *top_context; /* their K, and 1 for --top-contexts (owned arrays) */
    int n_top, cap_top;
    const char *stats;        /* experts --stats FILE */
    unsigned long long given; /* bit i: option i of the option table was given */
} cli_opts;

/* Parses argv (argv[1] the command) into o. Returns 0, or 2 with the message printed (a usage
 * error). o must be released with cli_opts_free either way. */
int cli_parse(int argc, char **argv, cli_opts *o);
void cli_opts_free(cli_opts *o);

/* ---- the commands (the table in main.c; a file each in commands/) ---- */

typedef struct cli_run cli_run;
enum {
    CMD_MODEL = 1,      /* needs --model */
    CMD_LOADS = 2,      /* loads the model */
    CMD_REQUEST = 4,    /* runs a request (rows, requests, a method) */
    CMD_RANKS = 8,      /* runs under mpirun, one stage per rank */
    CMD_RUNTIME = 16,   /* opens a runtime */
};
struct cli_command {
    const char *name;
    unsigned flags;
    nnt_method method;  /* CMD_REQUEST commands */
    int (*run)(cli_run *c);
};
/* The command named name, or NULL. */
const cli_command *cli_command_find(const char *name);

/* What a command runs with. */
struct cli_run {
    const cli_opts *o;
    nnt_runtime *rt;
    nnt_model *m;          /* CMD_LOADS: this process's model (a stage of it under mpirun) */
    nnt_pipeline *p;       /* under mpirun: the run's pipeline, else NULL */
    nnt_request *req;      /* CMD_REQUEST: the request (from the options or --request) */
    nnt_tokenizer *tok;    /* CMD_REQUEST: the model folder's tokenizer, or NULL (ids only) */
    int *held_fd;          /* under mpirun: the real stderr while this rank's is held back, or -1 */
    int text_rows;         /* CMD_REQUEST: how many rows are text (their tokens are shown) */
};

int cmd_trace(cli_run *c);
int cmd_harvest(cli_run *c);
int cmd_experts(cli_run *c);
int cmd_lens(cli_run *c);
int cmd_patch(cli_run *c);
int cmd_attribute(cli_run *c);
/* A patch-shaped grid as a table: lines "pos" and "token" (of the corrupted prompt, batch row 1),
 * then one per block (commands/patch.c). Returns 0, or 1 out of memory. */
int cli_print_grid(const nnt_patch_result *res, const nnt_batch *b, const nnt_tokenizer *tok);
int cmd_generate(cli_run *c);
int cmd_tokenize(cli_run *c);
int cmd_info(cli_run *c);
int cmd_print(cli_run *c);
int cmd_support(cli_run *c);
int cmd_plugins(cli_run *c);
/* `nnt plan` (commands/plan.c) parses its own options: argv[0] is "plan". */
int cmd_plan(int argc, char **argv);
/* `nnt serve` (commands/serve.c, cli/serve/) parses its own options too: argv[0] is "serve". */
int cmd_serve(int argc, char **argv);

extern const char CLI_USAGE[];

/* ---- numbers and lists on the command line (numbers.c) ----
 * A number is the whole of its text: no blank before it, nothing after it. Each returns 0, or
 * -1 when text is not one (the caller words the message). */
int cli_parse_int(const char *text, long min, long max, long *out);
int cli_parse_u64(const char *text, unsigned long long *out);
int cli_parse_real(const char *text, double min, double max, float *out);
/* "A:B" (or "A": b = a; or, where open_end, "A:": b = -1) of integers in [0, CLI_BLOCK_MAX].
 * Returns 0, or 2 with a message naming the option, the argument and the bad part. */
int cli_parse_pair(const char *flag, const char *text, const char *what, int open_end, long *a, long *b);
/* "P,P,..." of token positions (libnnt's nnt_positions_parse) into a new array *out [*n].
 * Returns 0, or 2 with the message printed, naming flag. */
int cli_parse_positions(const char *flag, const char *text, int **out, int *n);
/* The ids of a --tokens row: integers in 0..CLI_BLOCK_MAX between blanks or commas, into a new
 * array. Returns 0, or -1 with the message printed. */
int cli_parse_tokens(const char *text, int32_t **out, int *n);

/* ---- the request the options make (request_build.c) ---- */

/* The request of a CMD_REQUEST command: --request FILE read as it is, or the options made into
 * a request document and parsed by libnnt. Returns 0, 1 (a library error, printed) or 2 (a usage
 * error, printed). */
int cli_request(const cli_opts *o, nnt_runtime *rt, nnt_request **out);
/* --print-request: the canonical document of r on stdout. Returns 0 or 1. */
int cli_print_request(nnt_runtime *rt, const nnt_request *r);

/* ---- what the command reads of a --request document itself (request_doc.c) ---- */

/* Called with each file a request field names (resolved as libnnt resolves it: against the
 * request file's folder) and the field's path ("rows[1]", "edits[0].tensor", "patch.clean");
 * a nonzero return stops the walk and is returned. */
typedef int (*cli_request_file_fn)(void *ctx, const char *file, const char *field);
int cli_request_files(const char *request_file, cli_request_file_fn fn, void *ctx);
/* How many of the document's rows (patch's clean and corrupt too) are text or a file of text. */
int cli_request_text_rows(const char *request_file);

/* ---- messages (messages.c) ---- */

/* "nnt: error: [what: ]MESSAGE" from the runtime's last error, the request's fields written as
 * the options that gave them ("edits[2]" as "--scale PATH=F"). Returns the exit status: 2 when
 * the error names an option's argument (a lens or patch setting), 1 otherwise. */
int cli_fail(const cli_opts *o, nnt_runtime *rt, const char *what);

/* ---- --remote (remote.c) ---- */
/* Runs c's request (trace, lens, generate) on the server --remote names and prints the answer
 * as the command prints a local result; --out gets the answer's bytes. Returns 0, 1 or 2
 * (printed). */
int cli_remote(cli_run *c);
/* "nnt: MESSAGE", the usage after it; returns 2. */
int cli_usage_error(const char *fmt, const char *arg);
/* "nnt: MESSAGE" for a bad argument; returns 2. */
int cli_arg_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The request document's name in messages: what the options made. */
#define CLI_OPTIONS_NAME "the options"

/* ---- token text (text.c) ---- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;
void sb_add(sbuf *b, const char *s, size_t n);
void sb_str(sbuf *b, const char *s);
/* bytes as a double-quoted string: printable text as is; \\, \", \n, \t, \r escaped; other
 * control bytes and bytes outside well-formed UTF-8 as \xNN; invisible and direction-changing
 * characters as \uNNNN. */
void sb_quoted(sbuf *b, const char *text, size_t len);
/* `ID "text"`, `ID ?` (an id the tokenizer has no token for) or `ID` (no tokenizer). */
void sb_token(sbuf *b, const nnt_tokenizer *tok, int32_t id);
void print_token(const nnt_tokenizer *tok, int32_t id);
/* A token's text for a picture's axis (escaped, unquoted) or its id; a new string or NULL. */
char *axis_token(const nnt_tokenizer *tok, int32_t id);
/* One line for a saved value: key, shape, dtype, min/mean/max of the finite entries. */
void describe_value(const char *key, const nnt_tensor *t);
/* Every saved value of t but `hidden` (may be NULL), a describe_value line each, `header` before
 * the first. Returns how many values t holds that are not None (what --out writes). */
int print_saved(const nnt_trace *t, const char *header, const char *hidden);
/* cells [rows][cols] in columns as wide as their widest cell, each line led by labels[r]. */
void print_table(char **cells, int rows, int cols, const char *const *labels);
/* The k most probable entries of p [V] in decreasing order (k <= 8); returns how many. */
int top_tokens(const float *p, int64_t V, int k, int *top);
/* "top 5 next tokens, row R: ..." for each row of probs [rows, vocab] (F32). */
void print_top_tokens(const nnt_tokenizer *tok, const nnt_tensor *probs);
/* Generated row r: its ids [N] (NNT_TOKEN_STOPPED after a stop); with a tokenizer each id's
 * text and the continuation decoded, noting which of stops [n_stops] ended it. */
void print_generated(const nnt_tokenizer *tok, int r, const int32_t *ids, int N, const int32_t *stops, int n_stops);
/* Each text row's tokens with their text ("prompt, row R (N tokens): ..."), so that positions
 * can be read off; nothing when the rows are ids. */
void print_prompt_tokens(int text_rows, const nnt_batch *b, const nnt_tokenizer *tok);
/* The ids of row r of b without its left padding, and their number. */
const int32_t *batch_row(const nnt_batch *b, int r, int *n);
void free_strings(char **v, size_t n);

/* ---- --out (outfile.c) ---- */

/* --out and --plot checked before any forward (and --out again before its write): each one's
 * directory exists and is writable, an existing path is a regular file, it is no file the run
 * reads or has mapped, and the two are not the same file. Returns 0 or 2. */
int cli_check_out(const cli_opts *o, nnt_runtime *rt);
/* Writes the result of a request run to --out (interrupting signals held until the file is
 * whole or removed). Returns 0, 1 or 2. */
int cli_write_out(const cli_opts *o, nnt_runtime *rt, const nnt_result *res);

/* ---- runs over ranks (ranks.c) ---- */

/* Before anything is printed: a rank other than 0 of a launcher's run (its environment says so)
 * holds its stderr back, so that errors every rank meets alike (a bad argument) are printed once,
 * by rank 0. Returns the descriptor of the real stderr, or -1. */
int ranks_hold_stderr_early(void);
/* The printing rank (root) gets the real stderr back; the others send stdout to /dev/null and
 * keep stderr held. */
void ranks_set_root(nnt_pipeline *p, int root, int *held_fd);
/* After a failed step of a run over ranks: prints the error as this rank should (its own: named;
 * another rank's: only on the printing rank), ends the job after a timeout. Returns 1. */
int ranks_fail(nnt_pipeline *p, const cli_opts *o, nnt_runtime *rt, int root, int *held_fd);
/* The real stderr back (held_fd >= 0). */
void ranks_release_stderr(int *held_fd);
/* Leaves the run (p may be NULL): a rank ending with rc != 0 whose failure the others were not
 * told of tells them now, with its last held error line; then the real stderr comes back. */
void ranks_finish(nnt_pipeline *p, int rc, int *held_fd);
/* Sends stdout to /dev/null (a rank that does not print). */
void ranks_quiet_stdout(void);

/* ---- pictures (pictures.c; plot.c draws) ---- */

int picture_trace(const cli_opts *o, const nnt_model *m, const nnt_batch *b, const nnt_tokenizer *tok,
                  const nnt_trace *t);
int picture_lens(const cli_opts *o, const nnt_batch *b, const nnt_tokenizer *tok, const nnt_lens_result *l);
int picture_patch(const cli_opts *o, const nnt_batch *b, const nnt_tokenizer *tok, const nnt_patch_result *res,
                  const char *value, const char *metric);
/* The same grid for attribute: title "attribution ..." (the estimated change of the metric). */
int picture_attribute(const cli_opts *o, const nnt_batch *b, const nnt_tokenizer *tok, const nnt_patch_result *res,
                      const char *value, const char *metric);

#endif /* NNT_CLI_H */

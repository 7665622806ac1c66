/* nnt.c - the `nnt` command line: print a model's module tree, list the standard values it
 * serves, trace a forward pass (saving and editing values by path), the logit lens, and
 * generation with edits at every step; prompts are token ids or text (encoded with the model
 * folder's tokenizer), and tokens are shown with their text wherever the folder has one. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnt/nnt.h"
#include "plan_cmd.h"
#include "dist.h"
#include "patch.h"
#include "plot.h"

#define MAX_REQ 256
#define MAX_ROWS 64
#define MAX_STOP 64
#define MAX_PROMPT_FILE ((size_t)1 << 30) /* bytes of a --prompt-file */

static const char USAGE[] =
    "usage: nnt COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  print    --model DIR                module tree with native and standard names, value layouts\n"
    "  support  --model DIR [--tsv]        every standard value per host and block, served or not and why\n"
    "  trace    --model DIR ROWS           run the forward and print the top next tokens of each row\n"
    "  lens     --model DIR ROWS           the logit lens: for every block and chosen position of each row,\n"
    "           the top token of the block's output read through the final norm and lm_head, with its\n"
    "           probability, a table per row; --positions P,P,... chooses the tokens (default: all);\n"
    "           --out FILE writes lens_probs [rows, layers, columns, vocab] and lens_positions [rows,\n"
    "           columns] (each column's position, -1 past a row's own); --plot FILE.png|FILE.svg draws\n"
    "           blocks x positions per row, the top token and its probability in each cell\n"
    "  patch    --model DIR --clean \"text\" --corrupt \"text\" (or --clean-tokens/--corrupt-tokens \"ID ...\",\n"
    "           same length) --metric logit-diff:A,B|prob:T   activation patching: the clean prompt's value\n"
    "           (--value PATH, default layers.*.layer_output; '*' is every block) put into the corrupted\n"
    "           prompt's forward at one block and one position (--positions, default all) at a time, and\n"
    "           the metric read at the last position (logit[A] - logit[B], or token T's probability), a\n"
    "           table of blocks x positions; --batch N patched rows per forward (default 16); --out FILE\n"
    "           writes patch_metric [blocks, positions] (F64), patch_blocks, patch_positions, clean_metric\n"
    "           and corrupt_metric; --plot FILE.png|FILE.svg draws the grid as a heatmap\n"
    "  generate --model DIR ROWS --max-new-tokens N   print the new token ids and, with a tokenizer, their text\n"
    "           --temperature T (0: greedy, the default)  --top-k K  --top-p P  --seed S\n"
    "           a row stops at the tokenizer's eos token (tokenizer_config.json's eos_token), unless\n"
    "           --ignore-eos; --stop-id ID (repeatable) stops rows at ID too\n"
    "  tokenize --model DIR \"text\"        each token of the text: its id, a tab, its text (quoted, escaped);\n"
    "           --ids prints only the ids, on one line; special tokens are added as the tokenizer adds\n"
    "           them (a BOS where the release adds one) unless --no-special; reads no weights\n"
    "  info     --model DIR                what the checkpoint stores (bytes per encoding, from the file\n"
    "           headers), then what loading it holds: bytes read in place, allocated, on the device\n"
    "  plugins                             loaded plugins and the backend of each family\n"
    "  under mpirun -np N, trace, lens and generate run one pipeline stage per rank (each holding its\n"
    "           blocks' weights; the INI's [distributed] sets the transport, the timeout and the split);\n"
    "           rank 0 prints and writes --out (lens: the last rank)\n"
    "  plan     --model DIR --ranks N      each rank's contiguous blocks and bytes (weights, caches) and whether\n"
    "           it fits: [--device cpu|cuda] [--memory GB per rank] [--context T] [--batch B]; reads only\n"
    "           config.json and the safetensors headers or index\n"
    "\n"
    "rows (trace, lens and generate; all token ids or all text, one row per option, shorter rows\n"
    "left-padded):\n"
    "  --tokens \"ID ID ...\"   a row of token ids\n"
    "  --prompt \"text\"        a row of text, encoded with the model folder's tokenizer (tokenizer.json or\n"
    "                         tiktoken.model) with its special tokens added, as tokenize does (--no-special:\n"
    "                         without them)\n"
    "  --prompt-file FILE     a row of text: the file's whole content, final newline included\n"
    "token text is shown quoted, with \\\\, \\\", \\n, \\t, \\r, \\xNN (other control bytes and bytes that are\n"
    "not valid UTF-8) and \\uNNNN (invisible and direction-changing characters) escaped\n"
    "\n"
    "requests (trace, lens and generate; applied in order, at every generation step):\n"
    "  --save PATH        save a value (repeatable; 'layers.*.layer_output' saves every block);\n"
    "           'PATH[:, -1]', 'PATH[..., 3]', 'PATH[0, 2:8:2]': keep only that slice of it, in its layout\n"
    "  --zero PATH        zero a value before the forward uses it\n"
    "  --scale PATH=F     multiply a value by F (|F| <= 1e6)\n"
    "  --set PATH=FILE[:KEY]  replace a value by a tensor from a safetensors file\n"
    "  --add PATH=FILE[:KEY]  add a tensor (broadcast over leading axes) to a value\n"
    "  --ablate-expert LAYER:E  zero expert E's weight wherever block LAYER routes to it\n"
    "  --skip-layers START:END  skip blocks START..END (block END's output is block START's input)\n"
    "  --steer FIRST[:LAST]=FILE[:KEY]  add a [hidden_size] vector to layer_output of blocks FIRST..LAST\n"
    "           (--steer-factor F and --steer-positions P,P,... given before it scale it and choose\n"
    "           the tokens; see positions below)\n"
    "  --steps FROM[:TO]  the requests after it apply only at generation steps FROM..TO (no TO: every step\n"
    "           from FROM on; step 0 is the prompt)\n"
    "  --plot FILE.png|FILE.svg  (trace) draw the first saved attention_probabilities (query x key, a panel\n"
    "           per head) or expert_weights (tokens x experts; expert_indices of its block is saved with it)\n"
    "           of batch row 0; (lens, patch) see above; axes show token text with a tokenizer, else ids\n"
    "  --out FILE.safetensors   write every saved value under its key: path, path@k (its k-th save by the\n"
    "           request: a later step, or a value emitted again in one call), path#r (saved by the r-th\n"
    "           later request of the same value); a value that is None is listed in the metadata's none_values\n"
    "\n"
    "positions (--steer-positions, lens --positions): a row's real tokens counted from its prompt's\n"
    "first token (0-based) across the prompt and the generated tokens, left padding never counted;\n"
    "a negative P counts back from the row's newest token as of each forward call (-1: the prompt's\n"
    "last token in the prompt's call, the newly fed token in each generation step); the words\n"
    "prompt, generated and all name those tokens; e.g. 0,generated\n"
    "  --out is never a file the run reads (the model folder's files, the INI, plugins, --set/--add/--steer\n"
    "           and --prompt-file inputs); it is written under a temporary name and renamed: SIGINT, SIGTERM or\n"
    "           SIGHUP during the write take effect once it is complete or removed\n"
    "numbers: integers in decimal, nothing after them; block, expert and step numbers 0..2147483647,\n"
    "positions -2147483645..2147483647 or a word above; --scale, --steer-factor and --temperature finite,\n"
    "|F| <= 1e6\n"
    "\n"
    "common options: --config FILE (else $NNT_CONFIG, else the nnt.ini of this build or installation)\n";

typedef struct req {
    enum { R_SAVE, R_ZERO, R_SCALE, R_SET, R_ADD, R_ABLATE, R_SKIP, R_STEER, R_STEPS } kind;
    const char *flag;    /* the option, for messages */
    const char *text;    /* the argument as given */
    char *path;          /* a copy of the argument, cut at its separator: the value path or the numbers */
    char *arg;           /* what follows the separator (inside path's allocation), or NULL */
    long a, b;           /* R_ABLATE: layer, expert; R_SKIP: start, end; R_STEER: first, last; R_STEPS: from, to */
    float factor;        /* R_SCALE: F; R_STEER: the --steer-factor before it */
    char *file;          /* R_SET, R_ADD, R_STEER: FILE of FILE[:KEY] (owned) */
    const char *key;     /* its KEY (inside arg) or NULL */
    int *positions;      /* R_STEER: the --steer-positions before it (owned; NULL: every position) */
    int n_positions;
    const char *positions_text;
} req;

/* One batch row as given: token ids (--tokens), text (--prompt) or a file of text (--prompt-file). */
typedef struct row_arg {
    enum { ROW_TOKENS, ROW_PROMPT, ROW_FILE } kind;
    const char *arg;
} row_arg;

typedef struct opts {
    const char *cmd, *model, *config, *out;
    const char *lens_positions; /* lens and patch --positions */
    /* patch */
    row_arg clean, corrupt;      /* --clean/--clean-tokens, --corrupt/--corrupt-tokens (arg NULL: not given) */
    const char *value, *metric;  /* --value, --metric */
    int patch_rows;              /* --batch (0: not given) */
    const char *plot;            /* --plot FILE.png|FILE.svg */
    int tsv;
    row_arg rows[MAX_ROWS];
    int n_rows, n_text_rows; /* n_text_rows: --prompt and --prompt-file rows */
    /* tokenize */
    const char *text;        /* its positional argument */
    int ids_only, no_special;
    req reqs[MAX_REQ];
    int n_reqs;
    /* generate */
    int max_new_tokens;
    float temperature, top_p;
    int top_k;
    unsigned long long seed;
    int ignore_eos;
    int32_t stop_ids[MAX_STOP]; /* --stop-id */
    int n_stop_ids;
    int *pending_positions; /* the last --steer-positions read (owned; each --steer gets a copy) */
    int n_pending_positions;
} opts;

static int fail(nnt_runtime *rt, const char *what)
{
    fprintf(stderr, "nnt: error: %s%s%s\n", what ? what : "", what ? ": " : "", nnt_last_error(rt));
    return 1;
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "nnt: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n%s", USAGE);
    return 2;
}

/* Prints "nnt: MESSAGE" for a bad argument; returns 2 (the exit status of a usage error). */
static int arg_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int arg_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "nnt: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 2;
}

/* ---- numbers: the one place the command line's numbers are read ----
 * A number is the whole of its text: no blank before it, nothing after it. */

/* A decimal integer in [min, max]; 0, or -1 when text is not one. */
static int parse_int(const char *text, long min, long max, long *out)
{
    if (!*text || isspace((unsigned char)*text)) return -1;
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < min || v > max) return -1;
    *out = v;
    return 0;
}

/* A decimal integer in 0..2^64-1 (a seed); 0, or -1 when text is not one. */
static int parse_u64(const char *text, unsigned long long *out)
{
    if (!isdigit((unsigned char)*text)) return -1; /* strtoull would take a blank, a sign, "-1" */
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (*end || errno) return -1;
    *out = v;
    return 0;
}

/* A finite number in [min, max]; 0, or -1 when text is not one (nan, inf and values that
 * overflow or underflow a double are not). */
static int parse_real(const char *text, double min, double max, float *out)
{
    if (!*text || isspace((unsigned char)*text)) return -1;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno || !isfinite(v) || v < min || v > max) return -1;
    *out = (float)v;
    return 0;
}

/* The limits the options are checked against. */
#define BLOCK_MAX 2147483647L  /* block, expert, step and token numbers: 0..BLOCK_MAX */
#define FACTOR_MAX 1e6         /* --scale, --steer-factor and --temperature: |F| <= FACTOR_MAX */
#define FACTOR_MAX_TEXT "1e6"

/* "A:B" (or "A", then b = a; or, where open_end, "A:", then b = -1) of integers in [0, BLOCK_MAX].
 * Returns 0, or 2 with a message naming the option, the argument and the bad part. */
static int parse_pair(const char *flag, const char *text, const char *what, int open_end, long *a, long *b)
{
    const char *colon = strchr(text, ':');
    size_t n = colon ? (size_t)(colon - text) : strlen(text);
    char *first = malloc(n + 1);
    if (!first) return arg_error("%s", "out of memory");
    memcpy(first, text, n);
    first[n] = '\0';
    int bad = parse_int(first, 0, BLOCK_MAX, a) != 0;
    if (bad) {
        arg_error("%s %s: '%s' is not an integer in 0..%ld (expected %s)", flag, text, first, BLOCK_MAX, what);
        free(first);
        return 2;
    }
    free(first);
    if (!colon) { /* "A": A alone, or from A on where an open end is allowed (--steps) */
        *b = open_end ? -1 : *a;
        return 0;
    }
    if (open_end && !colon[1]) {
        *b = -1;
        return 0;
    }
    if (parse_int(colon + 1, 0, BLOCK_MAX, b) != 0)
        return arg_error("%s %s: '%s' is not an integer in 0..%ld (expected %s)", flag, text, colon + 1, BLOCK_MAX,
                         what);
    return 0;
}

/* "P,P,..." of token positions (integers, or the words prompt, generated, all as NNT_POS_*) into a new
 * array. Returns 0 or 2. */
static int parse_positions(const char *text, int **out, int *n_out)
{
    size_t n = 1;
    for (const char *c = text; *c; c++) n += *c == ',';
    int *pos = malloc(n * sizeof *pos);
    char *copy = strdup(text);
    if (!pos || !copy) {
        free(pos);
        free(copy);
        return arg_error("%s", "out of memory");
    }
    int k = 0;
    char *item = copy;
    for (;;) {
        char *comma = strchr(item, ',');
        if (comma) *comma = '\0';
        long p;
        if (strcmp(item, "prompt") == 0) { /* the words of nnt.h's "token positions" */
            p = NNT_POS_PROMPT;
        } else if (strcmp(item, "generated") == 0) {
            p = NNT_POS_GENERATED;
        } else if (strcmp(item, "all") == 0) {
            p = NNT_POS_ALL;
        } else if (parse_int(item, NNT_POS_ALL + 1, BLOCK_MAX, &p) != 0) {
            arg_error("--steer-positions %s: '%s' is neither an integer in %ld..%ld nor one of prompt, generated, all",
                      text, item, (long)NNT_POS_ALL + 1, BLOCK_MAX);
            free(pos);
            free(copy);
            return 2;
        }
        pos[k++] = (int)p;
        if (!comma) break;
        item = comma + 1;
    }
    free(copy);
    *out = pos;
    *n_out = k;
    return 0;
}

/* Frees what parse_args allocated for the requests of o (also after it failed). */
static void opts_free(opts *o)
{
    for (int i = 0; i < o->n_reqs; i++) {
        free(o->reqs[i].path);
        free(o->reqs[i].file);
        free(o->reqs[i].positions);
        o->reqs[i].path = o->reqs[i].file = NULL;
        o->reqs[i].positions = NULL;
    }
    o->n_reqs = 0;
    free(o->pending_positions);
    o->pending_positions = NULL;
}

/* FILE[:KEY] of --set, --add and --steer: KEY is what follows the last ':' unless that part
 * names a .safetensors file (a file name with a colon and no key). */
static int split_file_key(req *r)
{
    const char *colon = strrchr(r->arg, ':');
    int has_key = colon && strstr(colon, ".safetensors") == NULL;
    size_t n = has_key ? (size_t)(colon - r->arg) : strlen(r->arg);
    r->file = malloc(n + 1);
    if (!r->file) return arg_error("%s", "out of memory");
    memcpy(r->file, r->arg, n);
    r->file[n] = '\0';
    r->key = has_key ? colon + 1 : NULL;
    if (!*r->file) return arg_error("%s %s: no file before the key", r->flag, r->text);
    return 0;
}

/* Reads the numbers and files of a request given as `flag text`; 0 or 2 (message printed). */
static int parse_request(req *r)
{
    switch (r->kind) {
    case R_SCALE:
        if (parse_real(r->arg, -FACTOR_MAX, FACTOR_MAX, &r->factor) != 0)
            return arg_error("--scale %s: '%s' is not a finite number with |F| <= " FACTOR_MAX_TEXT, r->text, r->arg);
        return 0;
    case R_ABLATE: {
        /* LAYER:EXPERT, both required */
        if (!r->arg) return arg_error("--ablate-expert %s: expected LAYER:EXPERT", r->text);
        int rc = parse_pair("--ablate-expert", r->text, "LAYER:EXPERT", 0, &r->a, &r->b);
        if (rc == 0 && strchr(r->arg, ':')) return arg_error("--ablate-expert %s: expected LAYER:EXPERT", r->text);
        return rc;
    }
    case R_SKIP: return parse_pair("--skip-layers", r->path, "START:END", 0, &r->a, &r->b);
    case R_STEPS: return parse_pair("--steps", r->path, "FROM[:TO]", 1, &r->a, &r->b);
    case R_STEER: {
        int rc = parse_pair("--steer", r->path, "block numbers FIRST[:LAST]", 0, &r->a, &r->b);
        return rc ? rc : split_file_key(r);
    }
    case R_SET:
    case R_ADD: return split_file_key(r);
    default: return 0;
    }
}

/* Options that take a value, other than the requests. */
static const char *const VALUE_OPTIONS[] = {"--model", "--config", "--out", "--tokens", "--prompt", "--prompt-file",
                                            "--max-new-tokens", "--temperature", "--top-k", "--top-p", "--seed",
                                            "--stop-id", "--steer-factor", "--steer-positions", "--positions",
                                            "--clean", "--corrupt", "--clean-tokens", "--corrupt-tokens", "--value",
                                            "--metric", "--batch", "--plot", NULL};
/* Options without a value. */
static const char *const FLAG_OPTIONS[] = {"--tsv", "--ids", "--no-special", "--ignore-eos", NULL};

/* The requests, in the order given: flag, kind, and the separator of their argument. */
static const struct {
    const char *flag;
    int kind;
    char sep;
} REQUESTS[] = {
    {"--save", R_SAVE, 0},        {"--zero", R_ZERO, 0},        {"--scale", R_SCALE, '='},
    {"--set", R_SET, '='},        {"--add", R_ADD, '='},        {"--ablate-expert", R_ABLATE, ':'},
    {"--skip-layers", R_SKIP, 0}, {"--steer", R_STEER, '='},    {"--steps", R_STEPS, 0},
};
#define N_REQUESTS (sizeof REQUESTS / sizeof *REQUESTS)

static int is_flag(const char *a)
{
    for (int i = 0; FLAG_OPTIONS[i]; i++)
        if (strcmp(a, FLAG_OPTIONS[i]) == 0) return 1;
    return 0;
}

static int known_option(const char *a)
{
    if (is_flag(a)) return 1;
    for (int i = 0; VALUE_OPTIONS[i]; i++)
        if (strcmp(a, VALUE_OPTIONS[i]) == 0) return 1;
    for (size_t k = 0; k < N_REQUESTS; k++)
        if (strcmp(a, REQUESTS[k].flag) == 0) return 1;
    return 0;
}

/* Sets a single-valued option once; giving it twice is an error. */
static int set_once(const char **slot, const char *flag, const char *v)
{
    if (*slot) return usage_error("%s is given twice", flag);
    *slot = v;
    return 0;
}

static int parse_args(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    o->top_p = 1.0f;
    o->max_new_tokens = -1;
    float steer_factor = 1.0f;
    const char *steer_positions = NULL;
    int steer_pending = 0; /* --steer-factor / --steer-positions given and no --steer after them yet */
    if (argc < 2) return usage_error("%s", "missing command");
    o->cmd = argv[1];
    int tokenize = strcmp(o->cmd, "tokenize") == 0, options_end = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        /* tokenize's text: its one positional argument ("--" first when it starts with '-') */
        if (tokenize && (options_end || a[0] != '-' || !a[1])) {
            if (o->text) return usage_error("%s", "tokenize reads one text (quote it to pass spaces)");
            o->text = a;
            continue;
        }
        if (tokenize && strcmp(a, "--") == 0) {
            options_end = 1;
            continue;
        }
        if (!known_option(a)) return usage_error(a[0] == '-' ? "unknown option %s" : "unexpected argument '%s'", a);
        if (is_flag(a)) {
            if (strcmp(a, "--tsv") == 0) o->tsv = 1;
            else if (strcmp(a, "--ids") == 0) o->ids_only = 1;
            else if (strcmp(a, "--no-special") == 0) o->no_special = 1;
            else o->ignore_eos = 1;
            continue;
        }
        if (i + 1 >= argc) return usage_error("option %s needs a value", a);
        const char *v = argv[++i];
        long n;
        int rc = 0;
        if (strcmp(a, "--model") == 0)
            rc = set_once(&o->model, a, v);
        else if (strcmp(a, "--config") == 0)
            rc = set_once(&o->config, a, v);
        else if (strcmp(a, "--out") == 0) {
            rc = set_once(&o->out, a, v);
            if (!rc && !*v) rc = arg_error("%s", "--out: the path is empty (expected FILE.safetensors)");
        } else if (strcmp(a, "--positions") == 0)
            rc = set_once(&o->lens_positions, a, v);
        else if (strcmp(a, "--value") == 0)
            rc = set_once(&o->value, a, v);
        else if (strcmp(a, "--metric") == 0)
            rc = set_once(&o->metric, a, v);
        else if (strcmp(a, "--plot") == 0) {
            rc = set_once(&o->plot, a, v);
            if (!rc && plot_format(v) < 0) rc = arg_error("--plot %s: expected a file name ending in .png or .svg", v);
        } else if (strcmp(a, "--batch") == 0) {
            if (parse_int(v, 1, 4096, &n) != 0) return arg_error("--batch: '%s' is not an integer in 1..4096", v);
            o->patch_rows = (int)n;
        } else if (!strncmp(a, "--clean", 7) || !strncmp(a, "--corrupt", 9)) {
            row_arg *ra = a[3] == 'l' ? &o->clean : &o->corrupt;
            if (ra->arg) return usage_error("the %s prompt is given twice", a[3] == 'l' ? "clean" : "corrupted");
            *ra = (row_arg){strstr(a, "-tokens") ? ROW_TOKENS : ROW_PROMPT, v};
        }
        else if (strcmp(a, "--tokens") == 0 || strcmp(a, "--prompt") == 0 || strcmp(a, "--prompt-file") == 0) {
            if (o->n_rows == MAX_ROWS) return usage_error("at most %s rows (--tokens, --prompt, --prompt-file)", "64");
            int kind = strcmp(a, "--tokens") == 0 ? ROW_TOKENS : strcmp(a, "--prompt") == 0 ? ROW_PROMPT : ROW_FILE;
            o->rows[o->n_rows++] = (row_arg){kind, v};
            o->n_text_rows += kind != ROW_TOKENS;
        } else if (strcmp(a, "--stop-id") == 0) {
            if (parse_int(v, 0, BLOCK_MAX, &n) != 0)
                return arg_error("--stop-id: '%s' is not a token id (an integer in 0..%ld)", v, BLOCK_MAX);
            if (o->n_stop_ids == MAX_STOP) return usage_error("at most %s --stop-id options", "64");
            o->stop_ids[o->n_stop_ids++] = (int32_t)n;
        } else if (strcmp(a, "--max-new-tokens") == 0) {
            if (parse_int(v, 1, 1000000, &n) != 0)
                return arg_error("--max-new-tokens: '%s' is not an integer in 1..1000000", v);
            o->max_new_tokens = (int)n;
        } else if (strcmp(a, "--temperature") == 0) {
            if (parse_real(v, 0, FACTOR_MAX, &o->temperature) != 0)
                return arg_error("--temperature: '%s' is not a number in 0.." FACTOR_MAX_TEXT, v);
        } else if (strcmp(a, "--top-k") == 0) {
            if (parse_int(v, 0, BLOCK_MAX, &n) != 0)
                return arg_error("--top-k: '%s' is not an integer in 0..%ld", v, BLOCK_MAX);
            o->top_k = (int)n;
        } else if (strcmp(a, "--top-p") == 0) {
            if (parse_real(v, 0, 1, &o->top_p) != 0 || o->top_p <= 0)
                return arg_error("--top-p: '%s' is not a number in (0, 1]", v);
        } else if (strcmp(a, "--seed") == 0) {
            if (parse_u64(v, &o->seed) != 0)
                return arg_error("--seed: '%s' is not an integer in 0..%llu", v, (unsigned long long)ULLONG_MAX);
        } else if (strcmp(a, "--steer-factor") == 0) {
            if (parse_real(v, -FACTOR_MAX, FACTOR_MAX, &steer_factor) != 0)
                return arg_error("--steer-factor: '%s' is not a finite number with |F| <= " FACTOR_MAX_TEXT, v);
            steer_pending = 1;
        } else if (strcmp(a, "--steer-positions") == 0) {
            free(o->pending_positions);
            o->pending_positions = NULL;
            if ((rc = parse_positions(v, &o->pending_positions, &o->n_pending_positions)) != 0) return rc;
            steer_positions = v;
            steer_pending = 1;
        } else {
            req r = {0};
            size_t k = 0;
            while (strcmp(a, REQUESTS[k].flag) != 0) k++;
            if (o->n_reqs == MAX_REQ) return usage_error("too many requests (max %s)", "256");
            r.kind = REQUESTS[k].kind;
            r.flag = REQUESTS[k].flag;
            r.text = v;
            r.path = strdup(v);
            if (!r.path) return usage_error("%s", "out of memory");
            o->reqs[o->n_reqs++] = r; /* owned by o from here (freed by opts_free) */
            req *q = &o->reqs[o->n_reqs - 1];
            if (REQUESTS[k].sep) {
                char *eq = strchr(q->path, REQUESTS[k].sep);
                if (!eq) {
                    fprintf(stderr, "nnt: %s needs %s, got '%s'\n", a,
                            q->kind == R_ABLATE ? "LAYER:EXPERT" : q->kind == R_STEER ? "FIRST[:LAST]=FILE[:KEY]" : "PATH=VALUE", v);
                    return 2;
                }
                *eq = '\0';
                q->arg = eq + 1;
            }
            if (q->kind == R_STEER) {
                q->factor = steer_factor;
                q->positions_text = steer_positions;
                if (o->pending_positions) {
                    q->positions = malloc((size_t)o->n_pending_positions * sizeof *q->positions);
                    if (!q->positions) return usage_error("%s", "out of memory");
                    memcpy(q->positions, o->pending_positions, (size_t)o->n_pending_positions * sizeof *q->positions);
                    q->n_positions = o->n_pending_positions;
                }
                steer_pending = 0;
            }
            if ((rc = parse_request(q)) != 0) return rc; /* opts_free frees what is held */
        }
        if (rc) return rc;
    }
    free(o->pending_positions);
    o->pending_positions = NULL;
    if (steer_pending)
        return usage_error("%s", "--steer-factor and --steer-positions apply to the --steer options after them; none follows");
    if (o->n_text_rows && o->n_text_rows < o->n_rows)
        return usage_error("%s", "--tokens cannot be mixed with --prompt or --prompt-file: give every row as token ids "
                                 "or every row as text");
    if (tokenize) {
        if (o->n_rows > o->n_text_rows) return usage_error("%s", "tokenize reads text; --tokens gives ids already");
        if (o->n_rows + (o->text != NULL) != 1)
            return usage_error("%s", (o->n_rows + (o->text != NULL)) ? "tokenize reads one text"
                                                                   : "tokenize needs a text: nnt tokenize --model DIR \"text\"");
        if (o->n_reqs || o->out) return usage_error("%s", "tokenize takes no requests and no --out");
    } else if (o->ids_only) {
        return usage_error("%s", "--ids is an option of tokenize");
    }
    if (o->no_special && !tokenize && !o->n_text_rows && !(o->clean.arg && o->clean.kind == ROW_PROMPT))
        return usage_error("%s", "--no-special applies to text: tokenize, --prompt and --prompt-file");
    if (strcmp(o->cmd, "generate") != 0) {
        const char *only[] = {"--max-new-tokens", "--temperature", "--top-k", "--top-p", "--seed", "--steps",
                              "--ignore-eos", "--stop-id"};
        int given[] = {o->max_new_tokens >= 0, o->temperature != 0.0f, o->top_k != 0, o->top_p != 1.0f, o->seed != 0, 0,
                       o->ignore_eos, o->n_stop_ids > 0};
        for (int q = 0; q < o->n_reqs; q++) given[5] |= o->reqs[q].kind == R_STEPS;
        for (int q = 0; q < 8; q++)
            if (given[q]) return usage_error("%s is an option of generate", only[q]);
    } else if (o->temperature == 0.0f && (o->top_k != 0 || o->top_p != 1.0f)) {
        return usage_error("%s", "--top-k and --top-p filter sampling: give --temperature > 0 too (0 is greedy)");
    }
    int patch = strcmp(o->cmd, "patch") == 0;
    if (o->lens_positions && strcmp(o->cmd, "lens") != 0 && !patch)
        return usage_error("%s", "--positions is an option of lens and patch (steering takes --steer-positions)");
    if (!patch && (o->clean.arg || o->corrupt.arg || o->value || o->metric || o->patch_rows))
        return usage_error("%s", "--clean, --corrupt, --clean-tokens, --corrupt-tokens, --value, --metric and --batch "
                                 "are options of patch");
    if (o->plot && patch + !strcmp(o->cmd, "lens") + !strcmp(o->cmd, "trace") == 0)
        return usage_error("%s", "--plot is an option of lens, patch and trace");
    if (patch) {
        if (o->n_rows) return usage_error("%s", "patch reads --clean and --corrupt (or --clean-tokens and --corrupt-tokens), "
                                                "not --tokens, --prompt or --prompt-file");
        if (o->n_reqs) return usage_error("%s", "patch takes no requests (--save, --set, ...): it makes its own edits");
        if (!o->clean.arg || !o->corrupt.arg)
            return usage_error("%s", "patch needs a clean and a corrupted prompt: --clean \"text\" --corrupt \"text\" or "
                                     "--clean-tokens \"ID ...\" --corrupt-tokens \"ID ...\"");
        if (o->clean.kind != o->corrupt.kind)
            return usage_error("%s", "patch: give both prompts as text (--clean, --corrupt) or both as token ids "
                                     "(--clean-tokens, --corrupt-tokens)");
        if (!o->metric) return usage_error("%s", "patch needs --metric logit-diff:A,B or --metric prob:T");
        o->rows[0] = o->clean;
        o->rows[1] = o->corrupt;
        o->n_rows = 2;
        o->n_text_rows = o->clean.kind == ROW_PROMPT ? 2 : 0;
    }
    if (strcmp(o->cmd, "lens") == 0)
        for (int q = 0; q < o->n_reqs; q++)
            if (o->reqs[q].kind == R_SAVE)
                return usage_error("%s", "lens saves every block's output itself; --save belongs to trace and generate");
    return 0;
}

/* The ids of a --tokens row: integers in 0..BLOCK_MAX between blanks or commas. */
#define TOKEN_SEPARATORS " ,\t\n"
static int parse_tokens(const char *text, int32_t **out, int *n)
{
    int cap = 64, k = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return -1;
    const char *p = text;
    while (*p) {
        p += strspn(p, TOKEN_SEPARATORS);
        if (!*p) break;
        size_t len = strcspn(p, TOKEN_SEPARATORS);
        char *item = malloc(len + 1);
        long v = 0;
        int bad = !item;
        if (item) {
            memcpy(item, p, len);
            item[len] = '\0';
            bad = parse_int(item, 0, BLOCK_MAX, &v) != 0;
        }
        if (bad) {
            fprintf(stderr, "nnt: --tokens: '%s' is not a token id (an integer in 0..%ld)\n", item ? item : "?", BLOCK_MAX);
            free(item);
            free(ids);
            return -1;
        }
        free(item);
        if (k == cap) {
            cap *= 2;
            int32_t *g = realloc(ids, (size_t)cap * sizeof *g);
            if (!g) {
                free(ids);
                return -1;
            }
            ids = g;
        }
        ids[k++] = (int32_t)v;
        p += len;
    }
    if (k == 0) {
        fprintf(stderr, "nnt: --tokens: no token ids in '%s'\n", text);
        free(ids);
        return -1;
    }
    *out = ids;
    *n = k;
    return 0;
}

static void describe(const char *path, const nnt_tensor *t)
{
    if (!t) {
        printf("%-44s None\n", path);
        return;
    }
    char shape[96];
    size_t k = 0;
    k += (size_t)snprintf(shape + k, sizeof shape - k, "[");
    for (int i = 0; i < t->ndim && k < sizeof shape; i++)
        k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (k < sizeof shape) snprintf(shape + k, sizeof shape - k, "]");
    int64_t n = nnt_tensor_numel(t), finite = 0;
    double mn = INFINITY, mx = -INFINITY, sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double v = nnt_tensor_get_f64(t, i);
        if (!isfinite(v)) continue;
        finite++;
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
        sum += v;
    }
    printf("%-44s %-20s %-4s", path, shape, nnt_dtype_name(t->dtype));
    if (finite)
        printf(" min %.6g  mean %.6g  max %.6g", mn, sum / (double)finite, mx);
    if (finite < n) printf("  (%lld masked or non-finite)", (long long)(n - finite));
    printf("\n");
}

/* ---- token text ---- */

/* A growing string. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *g = realloc(b->p, cap);
        if (!g) {
            b->oom = 1;
            return;
        }
        b->p = g;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* The length of the well-formed UTF-8 sequence at s (n bytes available) and its code point, or
 * 0 when s[0] does not start one (overlong forms, surrogates and values past U+10FFFF are not
 * well-formed). */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) len = 2, v = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef) len = 3, v = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, v = c & 0x07, min = 0x10000;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return len;
}

/* Characters written as \uNNNN: C1 controls, and characters that are invisible or change the
 * direction or the lines of what follows them on a terminal. */
static int escaped_code_point(uint32_t cp)
{
    return (cp >= 0x80 && cp <= 0x9f) || cp == 0xad || cp == 0x61c || (cp >= 0x200b && cp <= 0x200f) ||
           (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x2069) || cp == 0xfeff;
}

/* Appends bytes as a double-quoted string: printable text as is; backslash, the double quote,
 * \n, \t and \r escaped; other control bytes and every byte that is not part of well-formed
 * UTF-8 as \xNN; the characters escaped_code_point names as \uNNNN. */
static void sb_quoted(sbuf *b, const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    char esc[16];
    sb_add(b, "\"", 1);
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = utf8_seq(s + i, len - i, &cp);
        if (n == 0) { /* a byte that is not well-formed UTF-8 */
            snprintf(esc, sizeof esc, "\\x%02x", s[i]);
            sb_str(b, esc);
            i++;
            continue;
        }
        if (cp == '\\' || cp == '"') {
            esc[0] = '\\', esc[1] = (char)cp, esc[2] = '\0';
            sb_str(b, esc);
        } else if (cp == '\n' || cp == '\t' || cp == '\r') {
            sb_str(b, cp == '\n' ? "\\n" : cp == '\t' ? "\\t" : "\\r");
        } else if (cp < 0x20 || cp == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", (unsigned)cp);
            sb_str(b, esc);
        } else if (escaped_code_point(cp)) {
            snprintf(esc, sizeof esc, "\\u%04x", (unsigned)cp);
            sb_str(b, esc);
        } else {
            sb_add(b, text + i, n);
        }
        i += n;
    }
    sb_add(b, "\"", 1);
}

/* Appends `ID "text"` (or `ID ?` for an id the tokenizer has no token for, or `ID` without a
 * tokenizer). */
static void sb_token(sbuf *b, const nnt_tokenizer *tok, int32_t id)
{
    char num[16];
    snprintf(num, sizeof num, "%d", id);
    sb_str(b, num);
    if (!tok) return;
    size_t len;
    const char *bytes = nnt_tokenizer_token_bytes(tok, id, &len);
    sb_add(b, " ", 1);
    if (bytes)
        sb_quoted(b, bytes, len);
    else
        sb_add(b, "?", 1);
}

static void print_token(const nnt_tokenizer *tok, int32_t id)
{
    sbuf b = {0};
    sb_token(&b, tok, id);
    fputs(b.oom ? "?" : b.p, stdout);
    free(b.p);
}

/* Characters on screen: code points (wide characters count one). */
static int display_width(const char *s)
{
    int w = 0;
    for (; *s; s++) w += ((unsigned char)*s & 0xc0) != 0x80;
    return w;
}

/* ---- batch rows ---- */

/* The rows of a command, as ids: parsed from --tokens or encoded from text; and the tokenizer
 * of the model folder (NULL when it has none, or none could be loaded and no row is text). */
typedef struct input {
    nnt_tokenizer *tok;
    int n;
    int32_t *ids[MAX_ROWS];
    int len[MAX_ROWS];
} input;

static void input_free(input *in)
{
    for (int r = 0; r < in->n; r++) free(in->ids[r]);
    nnt_tokenizer_free(in->tok);
    memset(in, 0, sizeof *in);
}

/* How a row was given, for messages: "--prompt row 2" or "--prompt-file FILE (row 2)". */
static const char *row_name(const row_arg *a, int r, char *buf, size_t n)
{
    if (a->kind == ROW_FILE)
        snprintf(buf, n, "--prompt-file %s (row %d)", a->arg, r);
    else
        snprintf(buf, n, "%s row %d", a->kind == ROW_PROMPT ? "--prompt" : "--tokens", r);
    return buf;
}

/* Encodes one row of text with the tokenizer's special tokens unless --no-special. Returns 0,
 * or 1 with the message printed. */
static int encode_text(nnt_tokenizer *tok, const opts *o, const row_arg *a, int r, int32_t **ids, int *n)
{
    char name[1200];
    size_t len = 0;
    char *file = NULL;
    const char *text = a->arg;
    if (a->kind == ROW_FILE) {
        nnt_error err = {0};
        if (nnt_read_file(a->arg, MAX_PROMPT_FILE, &file, &len, &err) != NNT_OK) {
            fprintf(stderr, "nnt: error: --prompt-file %s\n", err.msg);
            return 1;
        }
        text = file;
    } else {
        len = strlen(text);
    }
    int64_t count = 0;
    nnt_status st = nnt_tokenizer_encode(tok, text, len, o->no_special ? 0 : NNT_TOKENIZE_ADD_SPECIAL, ids, &count);
    free(file);
    if (st != NNT_OK) {
        fprintf(stderr, "nnt: error: %s: %s\n", row_name(a, r, name, sizeof name), nnt_tokenizer_last_error(tok));
        return 1;
    }
    if (count > 0x7fffffff) {
        fprintf(stderr, "nnt: error: %s: %lld tokens is too many\n", row_name(a, r, name, sizeof name), (long long)count);
        free(*ids);
        return 1;
    }
    *n = (int)count;
    return 0;
}

/* Loads the model folder's tokenizer, then reads every row. A folder without a tokenizer is an
 * error only when a row is text; otherwise token text is simply not shown. Returns 0, 1 (error,
 * printed) or 2 (usage error, printed). */
static int read_input(nnt_runtime *rt, const opts *o, input *in)
{
    memset(in, 0, sizeof *in);
    if (o->n_rows == 0)
        return usage_error("%s needs at least one row: --tokens \"ID ...\", --prompt \"text\" or --prompt-file FILE", o->cmd);
    nnt_tokenizer *tok = NULL;
    nnt_status st = nnt_runtime_tokenizer(rt, o->model, &tok);
    if (st != NNT_OK) {
        if (o->n_text_rows) {
            fprintf(stderr, "nnt: error: --prompt needs the model's tokenizer: %s\n", nnt_tokenizer_last_error(tok));
            nnt_tokenizer_free(tok);
            return 1;
        }
        if (st != NNT_ERR_NOT_FOUND) /* a tokenizer the build cannot read: ids are still fine */
            fprintf(stderr, "nnt: warning: token text not shown: %s\n", nnt_tokenizer_last_error(tok));
        nnt_tokenizer_free(tok);
        tok = NULL;
    }
    in->tok = tok;
    for (int r = 0; r < o->n_rows; r++) {
        const row_arg *a = &o->rows[r];
        int rc = 0;
        if (a->kind == ROW_TOKENS)
            rc = parse_tokens(a->arg, &in->ids[r], &in->len[r]) != 0 ? 2 : 0;
        else if ((rc = encode_text(tok, o, a, r, &in->ids[r], &in->len[r])) == 0 && in->len[r] == 0) {
            char name[1200];
            fprintf(stderr, "nnt: error: %s encodes to no token\n", row_name(a, r, name, sizeof name));
            free(in->ids[r]);
            rc = 1;
        }
        if (rc) {
            input_free(in);
            return rc;
        }
        in->n = r + 1;
    }
    return 0;
}

/* Text rows must give ids the model has: a tokenizer and a checkpoint that disagree are named
 * before anything runs. (Ids given with --tokens are checked by the forward.) Returns 0 or 1. */
static int check_vocab(const opts *o, const input *in, const nnt_model *m)
{
    int64_t V = nnt_model_get_info(m)->vocab_size;
    for (int r = 0; r < in->n; r++) {
        if (o->rows[r].kind == ROW_TOKENS) continue;
        for (int i = 0; i < in->len[r]; i++)
            if (in->ids[r][i] >= V) {
                char name[1200];
                size_t len;
                const char *bytes = nnt_tokenizer_token_bytes(in->tok, in->ids[r][i], &len);
                sbuf b = {0};
                if (bytes) sb_quoted(&b, bytes, len);
                fprintf(stderr,
                        "nnt: error: %s: the tokenizer gives token id %d (%s) at position %d, outside the model's "
                        "vocabulary (vocab_size %lld): the tokenizer does not belong to this checkpoint\n",
                        row_name(&o->rows[r], r, name, sizeof name), in->ids[r][i], b.p ? b.p : "?", i, (long long)V);
                free(b.p);
                return 1;
            }
    }
    for (int k = 0; k < o->n_stop_ids; k++)
        if (o->stop_ids[k] >= V) {
            fprintf(stderr, "nnt: error: --stop-id %d is outside the model's vocabulary (vocab_size %lld)\n", o->stop_ids[k],
                    (long long)V);
            return 1;
        }
    return 0;
}

/* The rows as one left-padded batch: ids and mask [batch, seq]. */
typedef struct batch {
    int B, seq;
    int32_t *ids, *mask;
} batch;

static void batch_free(batch *b)
{
    free(b->ids);
    free(b->mask);
}

/* 0 on success, 1 when out of memory (message printed). Padded slots hold id 0 and mask 0,
 * whether the rows were ids or text. */
static int build_batch(const input *in, batch *b)
{
    memset(b, 0, sizeof *b);
    for (int r = 0; r < in->n; r++) b->seq = in->len[r] > b->seq ? in->len[r] : b->seq;
    b->B = in->n;
    b->ids = calloc((size_t)b->B * b->seq, sizeof *b->ids);
    b->mask = calloc((size_t)b->B * b->seq, sizeof *b->mask);
    if (!b->ids || !b->mask) {
        fprintf(stderr, "nnt: out of memory for %d x %d tokens\n", b->B, b->seq);
        batch_free(b);
        return 1;
    }
    for (int r = 0; r < b->B; r++)
        for (int s = 0; s < in->len[r]; s++) {
            b->ids[r * b->seq + b->seq - in->len[r] + s] = in->ids[r][s];
            b->mask[r * b->seq + b->seq - in->len[r] + s] = 1;
        }
    return 0;
}

/* For rows of text: each row's tokens with their text, so positions can be read off. */
static void print_prompt_tokens(const opts *o, const input *in)
{
    if (!o->n_text_rows) return;
    for (int r = 0; r < in->n; r++) {
        printf("prompt, row %d (%d token%s):", r, in->len[r], in->len[r] == 1 ? "" : "s");
        for (int i = 0; i < in->len[r]; i++) {
            printf("  ");
            print_token(in->tok, in->ids[r][i]);
        }
        printf("\n");
    }
}

/* Tensors read for --set/--add/--steer; they must outlive the run. */
typedef struct loaded_set {
    nnt_tensor t[MAX_REQ];
    int n;
} loaded_set;

static void loaded_free(loaded_set *l)
{
    for (int i = 0; i < l->n; i++) nnt_tensor_free(&l->t[i]);
    l->n = 0;
}

/* Reads the request's FILE[:KEY] into the next slot of `l`. */
static const nnt_tensor *load_arg(nnt_runtime *rt, const req *q, loaded_set *l)
{
    if (nnt_safetensors_read(rt, q->file, q->key, &l->t[l->n]) != NNT_OK) return NULL;
    return &l->t[l->n++];
}

/* Adds the command line's requests to t in order; *saves_path is set when the user saved
 * `watch` (may be NULL). Returns 0, 1 (library error, printed) or 2 (bad argument). */
static int add_requests(nnt_runtime *rt, nnt_trace *t, const opts *o, loaded_set *l, const char *watch, int *saves_watch)
{
    for (int i = 0; i < o->n_reqs; i++) {
        const req *q = &o->reqs[i];
        nnt_status st = NNT_OK;
        switch (q->kind) {
        case R_SAVE:
            st = nnt_trace_save(t, q->path);
            if (watch && saves_watch && (strcmp(q->path, watch) == 0 || (strncmp(q->path, "model.", 6) == 0 && strcmp(q->path + 6, watch) == 0)))
                *saves_watch = 1;
            break;
        case R_ZERO: st = nnt_trace_zero(t, q->path); break;
        case R_SCALE: st = nnt_trace_scale(t, q->path, q->factor); break;
        case R_SET:
        case R_ADD: {
            const nnt_tensor *v = load_arg(rt, q, l);
            if (!v) return fail(rt, q->kind == R_SET ? "--set" : "--add");
            st = q->kind == R_SET ? nnt_trace_set(t, q->path, v) : nnt_trace_add(t, q->path, v, 1.0f);
            if (st != NNT_OK) {
                fprintf(stderr, "nnt: error: %s %s=%s: %s\n", q->kind == R_SET ? "--set" : "--add", q->path, q->arg,
                        nnt_last_error(rt));
                return 1;
            }
            break;
        }
        case R_ABLATE: st = nnt_trace_ablate_expert(t, (int)q->a, (int)q->b); break;
        case R_SKIP: st = nnt_trace_skip_layers(t, (int)q->a, (int)q->b); break;
        case R_STEER: {
            const nnt_tensor *v = load_arg(rt, q, l);
            if (!v) return fail(rt, "--steer");
            st = nnt_trace_steer(t, (int)q->a, (int)q->b, q->positions, q->n_positions, v, q->factor);
            if (st != NNT_OK) {
                fprintf(stderr, "nnt: error: --steer %s=%s: %s\n", q->path, q->arg, nnt_last_error(rt));
                return 1;
            }
            break;
        }
        case R_STEPS: st = nnt_trace_steps(t, (int)q->a, (int)q->b); break;
        }
        if (st != NNT_OK) return fail(rt, NULL);
    }
    return 0;
}

/* --out against one input of the run: 0, or 2 with a message naming both when --out is that
 * same file (same device and inode: the same file under another name or link too). */
static int out_is_not(const char *out, const struct stat *os, const char *input, const char *what)
{
    struct stat sb;
    if (stat(input, &sb) != 0 || sb.st_dev != os->st_dev || sb.st_ino != os->st_ino) return 0;
    if (strcmp(out, input) == 0)
        return arg_error("--out %s: is %s, an input of this run; write the values to another file", out, what);
    return arg_error("--out %s: is the same file as %s (%s), an input of this run; write the values to another file", out,
                     input, what);
}

/* --out, checked before any forward runs and again just before the write: its directory must
 * exist, an existing path must be a regular file (the writer refuses to replace anything else),
 * and it must not be a file the run reads: any file of the model folder (config.json, the
 * index, the shards, the tokenizer's files), the INI, a loaded plugin, a --set/--add/--steer
 * file or a --prompt-file. Returns 0 or 2. */
static int check_out(const nnt_runtime *rt, const opts *o)
{
    const char *out = o->out;
    if (!out) return 0;
    struct stat os;
    if (stat(out, &os) == 0) {
        if (!S_ISREG(os.st_mode)) return arg_error("--out %s: exists and is not a regular file", out);
        int rc = 0;
        if (o->model) { /* every file of the folder (shard names in an index hold no '/') */
            DIR *d = opendir(o->model);
            for (struct dirent *e; d && !rc && (e = readdir(d));) {
                size_t n = strlen(o->model) + strlen(e->d_name) + 2;
                char *p = malloc(n);
                if (!p) {
                    rc = arg_error("%s", "out of memory");
                    break;
                }
                snprintf(p, n, "%s/%s", o->model, e->d_name);
                struct stat sb;
                if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) rc = out_is_not(out, &os, p, "a file of the model folder");
                free(p);
            }
            if (d) closedir(d);
        }
        if (!rc && rt && nnt_runtime_config_path(rt)) rc = out_is_not(out, &os, nnt_runtime_config_path(rt), "the INI configuration");
        const char *kind, *name, *file, *detail;
        for (int i = 0; !rc && rt && nnt_runtime_plugin(rt, i, &kind, &name, &file, &detail); i++)
            rc = out_is_not(out, &os, file, "a loaded plugin");
        for (int i = 0; !rc && i < o->n_reqs; i++)
            if (o->reqs[i].file) {
                char what[48];
                snprintf(what, sizeof what, "the %s file", o->reqs[i].flag);
                rc = out_is_not(out, &os, o->reqs[i].file, what);
            }
        for (int r = 0; !rc && r < o->n_rows; r++)
            if (o->rows[r].kind == ROW_FILE) rc = out_is_not(out, &os, o->rows[r].arg, "the --prompt-file file");
        if (rc) return rc;
    }
    size_t n = strlen(out);
    char *dir = malloc(n + 2);
    if (!dir) return arg_error("%s", "out of memory");
    memcpy(dir, out, n + 1);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        strcpy(dir, ".");
    struct stat sb;
    int rc = 0;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(dir, W_OK) != 0)
        rc = arg_error("--out %s: the directory '%s' does not exist or is not writable", out, dir);
    free(dir);
    return rc;
}

/* ---- the write of --out: interrupting signals held off until it is over ----
 * The library writes --out under a temporary name beside it and renames it into place, removing
 * the temporary file on every error. A SIGINT, SIGTERM or SIGHUP that came in the middle would
 * end the process between the two and leave the temporary file behind; while the write runs,
 * these signals are only noted (by whichever thread receives them), and the first one noted is
 * raised again, with the disposition it had before, once the file is complete or removed. The
 * flag is the one piece of global state: a signal handler can reach no other. */
static volatile sig_atomic_t held_signal;

static void note_signal(int sig)
{
    if (!held_signal) held_signal = sig;
}

static const int HELD_SIGNALS[] = {SIGINT, SIGTERM, SIGHUP};
#define N_HELD (sizeof HELD_SIGNALS / sizeof *HELD_SIGNALS)

static void hold_signals(struct sigaction *old)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = note_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < N_HELD; i++) sigaddset(&sa.sa_mask, HELD_SIGNALS[i]);
    held_signal = 0;
    for (size_t i = 0; i < N_HELD; i++) {
        sigaction(HELD_SIGNALS[i], NULL, &old[i]);
        if (old[i].sa_handler != SIG_IGN) sigaction(HELD_SIGNALS[i], &sa, NULL); /* an ignored one stays ignored */
    }
}

static void release_signals(const struct sigaction *old)
{
    for (size_t i = 0; i < N_HELD; i++) sigaction(HELD_SIGNALS[i], &old[i], NULL);
    int sig = held_signal;
    held_signal = 0;
    if (sig) {
        fflush(stdout);
        raise(sig);
    }
}

/* Writes --out: the trace's saved values (t), or n tensors under keys. Returns 0, 1 or 2. */
static int write_out(nnt_runtime *rt, const opts *o, const nnt_trace *t, int n, const char *const *keys,
                     const nnt_tensor *tensors)
{
    int rc = check_out(rt, o); /* again: the files may have changed while the forward ran */
    if (rc) return rc;
    struct sigaction old[N_HELD];
    hold_signals(old);
    nnt_status st = t ? nnt_trace_write_safetensors(t, o->out) : nnt_safetensors_write(rt, o->out, n, keys, tensors);
    release_signals(old);
    return st == NNT_OK ? 0 : fail(rt, "--out");
}

/* Prints one line per saved value (skipping `hidden`) and writes them with --out. */
static int report_saved(nnt_runtime *rt, const nnt_trace *t, const opts *o, const char *hidden, const char *header)
{
    int shown = 0;
    for (int i = 0; i < nnt_trace_result_count(t); i++) {
        const char *path;
        const nnt_tensor *v;
        nnt_trace_result(t, i, &path, &v);
        if (hidden && strcmp(path, hidden) == 0) continue;
        if (!shown++) printf("%s", header);
        describe(path, v);
    }
    if (o->out) {
        int written = 0; /* every value that is not None, the hidden one included */
        for (int i = 0; i < nnt_trace_result_count(t); i++) {
            const char *path;
            const nnt_tensor *v;
            nnt_trace_result(t, i, &path, &v);
            written += v != NULL;
        }
        int rc = write_out(rt, o, t, 0, NULL, NULL);
        if (rc) return rc;
        printf("wrote %d values to %s\n", written, o->out);
    }
    return 0;
}

/* The k most probable entries of p[0..V) in decreasing order (k <= 8). */
static int top_tokens(const float *p, int64_t V, int k, int *top)
{
    int n = 0;
    for (int64_t v = 0; v < V; v++) {
        int at = n < k ? n++ : k;
        if (at == k && p[v] <= p[top[k - 1]]) continue;
        if (at == k) at = k - 1;
        while (at > 0 && p[top[at - 1]] < p[v]) {
            top[at] = top[at - 1];
            at--;
        }
        top[at] = (int)v;
    }
    return n;
}

/* A token's text for a plot's axis: the tokenizer's text (escaped as in the tables, without
 * quotes) or the id. A new string, or NULL when out of memory. */
static char *axis_token(const nnt_tokenizer *tok, int32_t id)
{
    sbuf b = {0};
    size_t len;
    const char *bytes = tok ? nnt_tokenizer_token_bytes(tok, id, &len) : NULL;
    if (bytes) {
        sb_quoted(&b, bytes, len);
        if (b.p && b.n >= 2) { /* drop the quotes */
            memmove(b.p, b.p + 1, b.n - 2);
            b.p[b.n - 2] = 0;
        }
    } else {
        char num[16];
        snprintf(num, sizeof num, "%d", id);
        sb_str(&b, num);
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* Frees n strings and the array. */
static void free_strings(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

/* Writes g with --plot; 0, or 1 with the message printed. */
static int write_plot(const opts *o, const plot_grid *g)
{
    char err[1200];
    if (plot_write(o->plot, g, err, sizeof err) != 0) {
        fprintf(stderr, "nnt: error: %s\n", err);
        return 1;
    }
    printf("wrote the picture to %s\n", o->plot);
    return 0;
}


/* The label of column/row token position p of batch row r in the left-padded batch. */
static char *batch_token(const input *in, const batch *b, int r, int col, int with_pos)
{
    int pad = b->seq - in->len[r];
    if (col < pad) return strdup("pad");
    char *t = axis_token(in->tok, in->ids[r][col - pad]);
    if (!t || !with_pos) return t;
    size_t len = strlen(t) + 16;
    char *s = malloc(len);
    if (s) snprintf(s, len, "%d %s", col - pad, t);
    free(t);
    return s;
}

/* --plot of trace: the first saved attention_probabilities (query x key per head, a panel per
 * head) or expert_weights (tokens x experts, the weight each token gives each expert; 0 where it
 * is not routed; expert_indices of the same block saved alongside), batch row 0. Returns 0, 1 or
 * 2, the message printed. */
static int plot_trace(const nnt_model *m, const opts *o, const input *in, const batch *b, const nnt_trace *t)
{
    const char *key = NULL;
    const nnt_tensor *v = NULL;
    int attn = 0;
    for (int i = 0; i < nnt_trace_result_count(t) && !key; i++) {
        const char *k;
        const nnt_tensor *x;
        nnt_trace_result(t, i, &k, &x);
        if (!x || strchr(k, '@') || strchr(k, '#')) continue;
        attn = strstr(k, ".attention_probabilities") != NULL;
        if (attn || strstr(k, ".expert_weights")) {
            key = k;
            v = x;
        }
    }
    if (!key)
        return usage_error("%s", "trace --plot draws a saved attention_probabilities or expert_weights value: save one "
                                 "(e.g. --save layers.0.self_attn.attention_probabilities or --save layers.0.mlp.expert_weights)");
    int S = b->seq, rc = 1;
    if (v->ndim != (attn ? 4 : 3) || v->shape[attn ? 2 : 1] != S)
        return arg_error("trace --plot: %s was saved as a slice ([%d axes]); --plot draws the whole value", key, v->ndim);
    char title[512], **rows = NULL, **cols = NULL, **ptitles = NULL;
    double *vals = NULL;
    plot_grid g = {.title = title, .cell_w = PLOT_CELL, .cell_h = PLOT_CELL, .vmin = 0};
    if (attn) {
        int H = (int)v->shape[1], K = (int)v->shape[3];
        snprintf(title, sizeof title, "%s, batch row 0: query x key per head", key);
        g.panels = H;
        g.panel_cols = H < 4 ? H : 4;
        g.rows = S;
        g.cols = K;
        g.row_axis = "query";
        g.col_axis = "key";
        vals = malloc(sizeof(double) * (size_t)H * S * K);
        rows = calloc((size_t)S, sizeof *rows);
        cols = calloc((size_t)K, sizeof *cols);
        ptitles = calloc((size_t)H, sizeof *ptitles);
        int ok = vals && rows && cols && ptitles;
        for (int64_t i = 0; ok && i < (int64_t)H * S * K; i++) {
            vals[i] = nnt_tensor_get_f64(v, i);
            g.vmax = vals[i] > g.vmax ? vals[i] : g.vmax;
        }
        for (int q = 0; ok && q < S; q++) ok = (rows[q] = batch_token(in, b, 0, q, 1)) != NULL;
        for (int k = 0; ok && k < K; k++) {
            char buf[32];
            snprintf(buf, sizeof buf, "entry %d", k);
            ok = (cols[k] = k < S ? batch_token(in, b, 0, k, 1) : strdup(buf)) != NULL;
        }
        for (int h = 0; ok && h < H; h++) {
            char buf[32];
            snprintf(buf, sizeof buf, "head %d", h);
            ok = (ptitles[h] = strdup(buf)) != NULL;
        }
        if (ok) {
            g.values = vals;
            g.row_labels = (const char *const *)rows;
            g.col_labels = (const char *const *)cols;
            g.panel_titles = (const char *const *)ptitles;
            rc = write_plot(o, &g);
        } else {
            fprintf(stderr, "nnt: trace --plot: out of memory\n");
        }
        free_strings(rows, (size_t)S);
        free_strings(cols, (size_t)K);
        free_strings(ptitles, (size_t)H);
        free(vals);
        return rc;
    }
    /* routing: the indices saved with the weights */
    char ikey[256];
    const char *at = strstr(key, "expert_weights");
    snprintf(ikey, sizeof ikey, "%.*sexpert_indices%s", (int)(at - key), key, at + 14);
    const nnt_tensor *idx = nnt_trace_get(t, ikey);
    int E = nnt_model_get_info(m)->num_experts, K = (int)v->shape[2];
    if (!idx || nnt_tensor_numel(idx) != nnt_tensor_numel(v))
        return arg_error("trace --plot: %s was not saved alongside %s", ikey, key);
    snprintf(title, sizeof title, "%s, batch row 0: each token's weight per expert", key);
    g.panels = g.panel_cols = 1;
    g.rows = S;
    g.cols = E;
    g.row_axis = "token";
    g.col_axis = "expert";
    vals = calloc((size_t)S * E, sizeof *vals);
    rows = calloc((size_t)S, sizeof *rows);
    cols = calloc((size_t)E, sizeof *cols);
    int ok = vals && rows && cols;
    for (int s = 0; ok && s < S; s++)
        for (int k = 0; k < K; k++) {
            double e = nnt_tensor_get_f64(idx, (int64_t)s * K + k), w = nnt_tensor_get_f64(v, (int64_t)s * K + k);
            if (e < 0 || e >= E) continue;
            vals[(size_t)s * E + (size_t)e] = w;
            g.vmax = w > g.vmax ? w : g.vmax;
        }
    for (int s = 0; ok && s < S; s++) ok = (rows[s] = batch_token(in, b, 0, s, 1)) != NULL;
    for (int e = 0; ok && e < E; e++) {
        char buf[32];
        snprintf(buf, sizeof buf, "%d", e);
        ok = (cols[e] = strdup(buf)) != NULL;
    }
    if (ok) {
        g.values = vals;
        g.row_labels = (const char *const *)rows;
        g.col_labels = (const char *const *)cols;
        rc = write_plot(o, &g);
    } else {
        fprintf(stderr, "nnt: trace --plot: out of memory\n");
    }
    free_strings(rows, (size_t)S);
    free_strings(cols, (size_t)E);
    free(vals);
    return rc;
}

static int cmd_trace(nnt_runtime *rt, nnt_model *m, const opts *o, const input *in, dist *d)
{
    batch b;
    int rc = check_out(rt, o);
    if (rc) return rc;
    rc = build_batch(in, &b);
    if (rc) return rc;
    print_prompt_tokens(o, in);
    nnt_trace *t = NULL;
    loaded_set l = {.n = 0};
    int user_saved_probs = 0;
    rc = 1;
    if (nnt_trace_new(m, &t) != NNT_OK) {
        fail(rt, "trace");
        goto out;
    }
    if ((rc = add_requests(rt, t, o, &l, "next_token_probs", &user_saved_probs)) != 0) goto out;
    rc = 1;
    if (!user_saved_probs && nnt_trace_save(t, "next_token_probs") != NNT_OK) {
        fail(rt, NULL);
        goto out;
    }
    /* a routing picture reads expert_indices beside the first saved expert_weights */
    char ipath[300] = "";
    for (int q = 0; o->plot && q < o->n_reqs && !ipath[0]; q++) {
        const char *sp = o->reqs[q].path, *at;
        if (o->reqs[q].kind != R_SAVE) continue;
        if ((at = strstr(sp, ".expert_weights")) != NULL && !strchr(sp, '['))
            snprintf(ipath, sizeof ipath, "%.*s.expert_indices%s", (int)(at - sp), sp, at + 15);
    }
    if (ipath[0] && nnt_trace_save(t, ipath) != NNT_OK) {
        fail(rt, NULL);
        goto out;
    }
    if (d) { /* one stage per rank; rank 0 gets every value and prints */
        if (dist_trace_run(d, t, b.ids, b.mask, b.B, b.seq, 0) != 0) goto out;
        rc = 0;
        if (dist_rank(d) != 0) goto out;
        rc = 1;
    } else if (nnt_trace_run(t, b.ids, b.mask, b.B, b.seq) != NNT_OK) {
        fail(rt, "forward");
        goto out;
    }
    char header[96];
    snprintf(header, sizeof header, "saved values (%d rows, %d positions):\n", b.B, b.seq);
    if (report_saved(rt, t, o, user_saved_probs ? NULL : "next_token_probs", header) != 0) goto out;
    const nnt_tensor *probs = nnt_trace_get(t, "next_token_probs");
    if (probs) {
        int64_t V = probs->shape[1];
        for (int r = 0; r < b.B; r++) {
            const float *p = (const float *)probs->data + (int64_t)r * V;
            int top[5], n = top_tokens(p, V, 5, top);
            printf("top 5 next tokens, row %d:", r);
            for (int k = 0; k < n; k++) {
                printf("  ");
                print_token(in->tok, top[k]);
                printf(" (%.4f)", p[top[k]]);
            }
            printf("\n");
        }
    }
    rc = o->plot ? plot_trace(m, o, in, &b, t) : 0;
out:
    loaded_free(&l);
    nnt_trace_free(t);
    batch_free(&b);
    return rc;
}

/* In-place softmax over each row of n entries. */
static void softmax_rows(float *x, int64_t rows, int64_t n)
{
    for (int64_t r = 0; r < rows; r++) {
        float *v = x + r * n;
        float mx = -INFINITY;
        for (int64_t i = 0; i < n; i++) mx = v[i] > mx ? v[i] : mx;
        double sum = 0;
        for (int64_t i = 0; i < n; i++) sum += (v[i] = expf(v[i] - mx));
        for (int64_t i = 0; i < n; i++) v[i] = (float)(v[i] / sum);
    }
}

/* The lens table with token text: cells [rows][S] are laid out in columns as wide as their
 * widest cell. */
static void print_table(char **cells, int rows, int S, const char *const *labels)
{
    int *width = calloc((size_t)S, sizeof *width);
    for (int s = 0; width && s < S; s++)
        for (int r = 0; r < rows; r++) {
            int w = display_width(cells[(size_t)r * S + s]);
            width[s] = w > width[s] ? w : width[s];
        }
    for (int r = 0; r < rows; r++) {
        printf("%-6s", labels[r]);
        for (int s = 0; s < S; s++) {
            const char *c = cells[(size_t)r * S + s];
            printf("  %s", c);
            if (s + 1 < S && width)
                for (int w = display_width(c); w < width[s]; w++) putchar(' ');
        }
        printf("\n");
    }
    free(width);
}

/* The tokens lens reads: for each chosen (row, position), in row order and ascending positions
 * (each once), the position and its column in the left-padded batch. */
typedef struct lens_sel {
    int n, *row, *pos, *col;
    int per_row[MAX_ROWS]; /* how many of them each row has */
    int width;             /* the most any row has */
} lens_sel;

static void lens_sel_free(lens_sel *ls)
{
    free(ls->row);
    free(ls->pos);
    free(ls->col);
}

/* Chooses the tokens from --positions (NULL: every token; see "positions" in the usage). Returns
 * 0, or 2 with the message printed. */
static int lens_choose(nnt_runtime *rt, const char *text, const batch *b, const input *in, lens_sel *ls)
{
    memset(ls, 0, sizeof *ls);
    int q[MAX_REQ], nq = 0, every = text == NULL, longest = 0;
    if (text && nnt_positions_parse(rt, text, q, MAX_REQ, &nq) != NNT_OK) {
        fprintf(stderr, "nnt: lens --positions: %s\n", nnt_last_error(rt));
        return 2;
    }
    for (int r = 0; r < in->n; r++) longest = in->len[r] > longest ? in->len[r] : longest;
    for (int k = 0; k < nq; k++) {
        if (q[k] == NNT_POS_GENERATED) {
            fprintf(stderr, "nnt: lens --positions %s: 'generated' names tokens after the prompt; lens runs one "
                            "forward over the prompt\n", text);
            return 2;
        }
        every |= q[k] == NNT_POS_PROMPT || q[k] == NNT_POS_ALL;
        if (q[k] >= longest || (q[k] < 0 && q[k] != NNT_POS_PROMPT && q[k] != NNT_POS_ALL && q[k] < -longest)) {
            fprintf(stderr, "nnt: lens --positions %s: position %d names no token: the longest row has %d tokens "
                            "(positions 0..%d, or -%d..-1 from the row's end)\n", text, q[k], longest, longest - 1,
                    longest);
            return 2;
        }
    }
    size_t cap = (size_t)b->B * (size_t)b->seq;
    ls->row = malloc(cap * sizeof *ls->row);
    ls->pos = malloc(cap * sizeof *ls->pos);
    ls->col = malloc(cap * sizeof *ls->col);
    if (!ls->row || !ls->pos || !ls->col) {
        fprintf(stderr, "nnt: lens: out of memory\n");
        lens_sel_free(ls);
        return 1;
    }
    for (int r = 0; r < in->n; r++) {
        int len = in->len[r];
        for (int p = 0; p < len; p++) {
            int chosen = every;
            for (int k = 0; k < nq && !chosen; k++) chosen = q[k] >= 0 ? q[k] == p : len + q[k] == p;
            if (!chosen) continue;
            ls->row[ls->n] = r;
            ls->pos[ls->n] = p;
            ls->col[ls->n++] = b->seq - len + p;
            ls->per_row[r]++;
        }
        ls->width = ls->per_row[r] > ls->width ? ls->per_row[r] : ls->width;
    }
    return 0;
}

/* --plot of lens: a panel per batch row, blocks x chosen positions, each cell coloured by the top
 * token's probability (0..1) with the token's text in it. top and prob: [layers, n] over the
 * chosen tokens of every row (ls). Returns 0 or 1, the message printed. */
static int plot_lens(const opts *o, const input *in, const lens_sel *ls, int L, const int *top, const float *prob)
{
    int B = in->n, W = ls->width, n = ls->n, rc = 1;
    size_t cells = (size_t)B * L * W;
    double *vals = malloc(sizeof(double) * cells);
    char **text = calloc(cells, sizeof *text), **rows = calloc((size_t)L, sizeof *rows);
    char **cols = calloc((size_t)B * W, sizeof *cols), **ptitles = calloc((size_t)B, sizeof *ptitles);
    int ok = vals && text && rows && cols && ptitles;
    for (size_t k = 0; ok && k < cells; k++) vals[k] = NAN; /* past a row's own positions */
    for (int i = 0, j = 0; ok && i < n; i++) {
        int r = ls->row[i];
        j = i > 0 && ls->row[i - 1] == r ? j + 1 : 0;
        for (int layer = 0; ok && layer < L; layer++) {
            size_t c = ((size_t)r * L + layer) * W + j;
            vals[c] = prob[(size_t)layer * n + i];
            char *tk = axis_token(in->tok, top[(size_t)layer * n + i]);
            size_t len = tk ? strlen(tk) + 16 : 0;
            ok = tk && (text[c] = malloc(len)) != NULL;
            if (ok) snprintf(text[c], len, "%s %.2f", tk, vals[c]);
            free(tk);
        }
        char *t = ok ? axis_token(in->tok, in->ids[r][ls->pos[i]]) : NULL;
        size_t len = t ? strlen(t) + 16 : 0;
        ok = t && (cols[(size_t)r * W + j] = malloc(len)) != NULL;
        if (ok) snprintf(cols[(size_t)r * W + j], len, "%d %s", ls->pos[i], t);
        free(t);
    }
    for (int layer = 0; ok && layer < L; layer++) {
        char buf[32];
        snprintf(buf, sizeof buf, "block %d", layer);
        ok = (rows[layer] = strdup(buf)) != NULL;
    }
    for (int r = 0; ok && r < B; r++) {
        char buf[32];
        snprintf(buf, sizeof buf, "row %d", r);
        ok = (ptitles[r] = strdup(buf)) != NULL;
    }
    if (ok) {
        plot_grid g = {.title = "logit lens: top token of each block's output (colour: its probability)", .panels = B,
                       .panel_cols = 1, .panel_titles = (const char *const *)ptitles, .rows = L, .cols = W,
                       .values = vals, .cell_text = (const char *const *)text, .row_labels = (const char *const *)rows,
                       .col_labels = (const char *const *)cols, .col_labels_per_panel = 1, .row_axis = "block",
                       .col_axis = "position", .vmin = 0, .vmax = 1, .cell_w = PLOT_TEXT_CELL_W,
                       .cell_h = PLOT_TEXT_CELL_H};
        rc = write_plot(o, &g);
    } else {
        fprintf(stderr, "nnt: lens --plot: out of memory\n");
    }
    free(vals);
    free_strings(text, cells);
    free_strings(rows, (size_t)L);
    free_strings(cols, (size_t)B * W);
    free_strings(ptitles, (size_t)B);
    return rc;
}

static int cmd_lens(nnt_runtime *rt, nnt_model *m, const opts *o, const input *in, dist *d)
{
    batch b;
    int rc = check_out(rt, o);
    if (rc) return rc;
    rc = build_batch(in, &b);
    if (rc) return rc;
    lens_sel ls;
    if ((rc = lens_choose(rt, o->lens_positions, &b, in, &ls)) != 0) {
        batch_free(&b);
        return rc;
    }
    const nnt_model_info *mi = nnt_model_get_info(m);
    int L = mi->num_layers, B = b.B, S = b.seq, n = ls.n, W = ls.width;
    int64_t V = mi->vocab_size;
    nnt_trace *t = NULL;
    loaded_set l = {.n = 0};
    nnt_tensor all = {0}, pos_out = {0}, sel = {0};
    int *top = malloc(sizeof(int) * (size_t)L * (size_t)n);
    float *prob = malloc(sizeof(float) * (size_t)L * (size_t)n);
    rc = 1;
    if (!top || !prob) {
        fprintf(stderr, "nnt: lens: out of memory\n");
        goto out;
    }
    if (nnt_trace_new(m, &t) != NNT_OK) {
        fail(rt, "lens");
        goto out;
    }
    if ((rc = add_requests(rt, t, o, &l, NULL, NULL)) != 0) goto out;
    rc = 1;
    if (nnt_trace_save(t, "layers.*.layer_output") != NNT_OK) {
        fail(rt, NULL);
        goto out;
    }
    if (d) { /* one stage per rank; the last, which holds the readout, gets every block's output */
        if (dist_trace_run(d, t, b.ids, b.mask, B, S, dist_size(d) - 1) != 0) goto out;
        rc = 0;
        if (dist_rank(d) != dist_size(d) - 1) goto out;
        rc = 1;
    } else if (nnt_trace_run(t, b.ids, b.mask, B, S) != NNT_OK) {
        fail(rt, "forward");
        goto out;
    }
    /* --out: probabilities [batch, layers, width, vocab] and the position of each column [batch,
     * width] (-1 past a row's own columns, whose probabilities stay 0) */
    if (o->out && (nnt_tensor_alloc(&all, NNT_F32, 4, (int64_t[]){B, L, W, V}) != NNT_OK ||
                   nnt_tensor_alloc(&pos_out, NNT_I32, 2, (int64_t[]){B, W}) != NNT_OK)) {
        fprintf(stderr, "nnt: lens: no memory for [%d, %d, %d, %lld] probabilities\n", B, L, W, (long long)V);
        goto out;
    }
    for (int i = 0; pos_out.data && i < B * W; i++) ((int32_t *)pos_out.data)[i] = -1;
    for (int layer = 0; layer < L; layer++) {
        char path[64];
        snprintf(path, sizeof path, "layers.%d.layer_output", layer);
        const nnt_tensor *x = nnt_trace_get(t, path);
        if (!x) {
            fprintf(stderr, "nnt: lens: %s is None\n", path);
            goto out;
        }
        /* the chosen tokens as one row [1, n, ...] (every stream of a Streams value kept) */
        nnt_tensor_free(&sel);
        int64_t shape[8] = {1, n};
        for (int d = 2; d < x->ndim && d < 8; d++) shape[d] = x->shape[d];
        if (nnt_tensor_alloc(&sel, x->dtype, x->ndim, shape) != NNT_OK) {
            fprintf(stderr, "nnt: lens: out of memory\n");
            goto out;
        }
        size_t inner = (size_t)(nnt_tensor_numel(x) / ((int64_t)B * S)) * nnt_dtype_size(x->dtype);
        for (int i = 0; i < n; i++)
            memcpy((char *)sel.data + (size_t)i * inner, (const char *)x->data + ((size_t)ls.row[i] * S + ls.col[i]) * inner,
                   inner);
        nnt_tensor lg = {0};
        if (nnt_project_on_vocab(m, &sel, &lg) != NNT_OK) {
            fail(rt, "lens");
            goto out;
        }
        float *p = (float *)lg.data;
        softmax_rows(p, n, V);
        for (int i = 0, j = 0; i < n; i++) {
            j = i > 0 && ls.row[i] == ls.row[i - 1] ? j + 1 : 0; /* the column within its row */
            int k;
            top_tokens(p + (int64_t)i * V, V, 1, &k);
            top[(size_t)layer * n + i] = k;
            prob[(size_t)layer * n + i] = p[(int64_t)i * V + k];
            if (!all.data) continue;
            memcpy((float *)all.data + (((int64_t)ls.row[i] * L + layer) * W + j) * V, p + (int64_t)i * V, sizeof(float) * (size_t)V);
            ((int32_t *)pos_out.data)[ls.row[i] * W + j] = ls.pos[i];
        }
        nnt_tensor_free(&lg);
    }
    printf("logit lens: top token (probability) of each block's output, by position\n");
    for (int r = 0, first = 0; r < B; first += ls.per_row[r], r++) {
        int N = ls.per_row[r];
        printf("row %d (%d token%s, %d shown):\n", r, in->len[r], in->len[r] == 1 ? "" : "s", N);
        char **cells = calloc((size_t)(L + 2) * (size_t)(N ? N : 1), sizeof *cells);
        char *labels[2] = {"block", "input"};
        char **lab = calloc((size_t)(L + 2), sizeof *lab);
        int ok = cells && lab;
        for (int c = 0; ok && c < N; c++) {
            int i = first + c;
            char buf[48];
            snprintf(buf, sizeof buf, "%d", ls.pos[i]);
            cells[c] = strdup(buf);
            sbuf tk = {0};
            sb_token(&tk, in->tok, in->ids[r][ls.pos[i]]);
            cells[N + c] = tk.p;
            for (int layer = 0; layer < L; layer++) {
                sbuf cell = {0};
                sb_token(&cell, in->tok, top[(size_t)layer * n + i]);
                snprintf(buf, sizeof buf, " (%.4f)", prob[(size_t)layer * n + i]);
                sb_str(&cell, buf);
                cells[(size_t)(layer + 2) * N + c] = cell.p;
            }
        }
        for (int k = 0; ok && k < L + 2; k++) {
            char buf[16];
            snprintf(buf, sizeof buf, "%d", k - 2);
            lab[k] = strdup(k < 2 ? labels[k] : buf);
            ok = lab[k] != NULL;
        }
        for (size_t k = 0; ok && k < (size_t)(L + 2) * N; k++) ok = cells[k] != NULL;
        if (ok) print_table(cells, L + 2, N, (const char *const *)lab);
        for (size_t k = 0; cells && k < (size_t)(L + 2) * N; k++) free(cells[k]);
        for (int k = 0; lab && k < L + 2; k++) free(lab[k]);
        free(cells);
        free(lab);
        if (!ok) {
            fprintf(stderr, "nnt: lens: out of memory\n");
            goto out;
        }
    }
    if (o->plot && (rc = plot_lens(o, in, &ls, L, top, prob)) != 0) goto out;
    rc = 1;
    if (o->out) {
        const char *names[] = {"lens_probs", "lens_positions"};
        nnt_tensor both[2] = {all, pos_out};
        if ((rc = write_out(rt, o, NULL, 2, names, both)) != 0) goto out;
        printf("wrote lens_probs [%d, %d, %d, %lld] and lens_positions [%d, %d] to %s\n", B, L, W, (long long)V, B, W,
               o->out);
    }
    rc = 0;
out:
    free(top);
    free(prob);
    nnt_tensor_free(&sel);
    nnt_tensor_free(&all);
    nnt_tensor_free(&pos_out);
    lens_sel_free(&ls);
    loaded_free(&l);
    nnt_trace_free(t);
    batch_free(&b);
    return rc;
}

/* Resolves patch --positions (NULL: every token) against a prompt of S tokens into ascending,
 * distinct positions 0..S-1. Returns 0, or 2 with the message printed. */
static int patch_positions(nnt_runtime *rt, const char *text, int S, int *out, int *n)
{
    int q[MAX_REQ], nq = 0, every = text == NULL;
    if (text && nnt_positions_parse(rt, text, q, MAX_REQ, &nq) != NNT_OK) {
        fprintf(stderr, "nnt: patch --positions: %s\n", nnt_last_error(rt));
        return 2;
    }
    for (int k = 0; k < nq; k++) {
        if (q[k] == NNT_POS_GENERATED)
            return arg_error("patch --positions %s: 'generated' names tokens after the prompt; patch runs forwards over "
                             "the prompts only", text);
        every |= q[k] == NNT_POS_PROMPT || q[k] == NNT_POS_ALL;
        if (q[k] != NNT_POS_PROMPT && q[k] != NNT_POS_ALL && (q[k] >= S || q[k] < -S))
            return arg_error("patch --positions %s: position %d names no token: the prompts have %d tokens (positions "
                             "0..%d, or -%d..-1 from the end)", text, q[k], S, S - 1, S);
    }
    *n = 0;
    for (int p = 0; p < S; p++) {
        int chosen = every;
        for (int k = 0; k < nq && !chosen; k++) chosen = q[k] >= 0 ? q[k] == p : S + q[k] == p;
        if (chosen) out[(*n)++] = p;
    }
    return 0;
}

/* --plot of patch: blocks x positions, the metric in each cell. */
static int plot_patch(const opts *o, const input *in, const patch_spec *s, const patch_result *res)
{
    int NB = res->n_blocks, P = s->n_positions, rc = 1;
    char **rows = calloc((size_t)NB, sizeof *rows), **cols = calloc((size_t)P, sizeof *cols);
    char **text = calloc((size_t)NB * P, sizeof *text);
    double lo = INFINITY, hi = -INFINITY;
    int ok = rows && cols && text;
    for (int b = 0; ok && b < NB; b++) {
        char buf[32];
        snprintf(buf, sizeof buf, "block %d", res->blocks[b]);
        ok = (rows[b] = strdup(buf)) != NULL;
        for (int c = 0; ok && c < P; c++) {
            double v = res->grid[(size_t)b * P + c];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
            snprintf(buf, sizeof buf, "%.3f", v);
            ok = (text[(size_t)b * P + c] = strdup(buf)) != NULL;
        }
    }
    for (int c = 0; ok && c < P; c++) {
        char *t = axis_token(in->tok, in->ids[1][s->positions[c]]);
        size_t len = t ? strlen(t) + 16 : 0;
        ok = t && (cols[c] = malloc(len)) != NULL;
        if (ok) snprintf(cols[c], len, "%d %s", s->positions[c], t);
        free(t);
    }
    char title[512];
    snprintf(title, sizeof title, "patching %s: %s (clean %.3f, corrupted %.3f)", s->path, o->metric, res->clean_metric,
             res->corrupt_metric);
    if (ok) {
        plot_grid g = {.title = title, .panels = 1, .panel_cols = 1, .rows = NB, .cols = P, .values = res->grid,
                       .cell_text = (const char *const *)text, .row_labels = (const char *const *)rows,
                       .col_labels = (const char *const *)cols, .row_axis = "block", .col_axis = "position (corrupted)",
                       .vmin = lo, .vmax = hi, .cell_w = PLOT_TEXT_CELL_W, .cell_h = PLOT_TEXT_CELL_H};
        rc = write_plot(o, &g);
    } else {
        fprintf(stderr, "nnt: patch --plot: out of memory\n");
    }
    free_strings(rows, (size_t)NB);
    free_strings(cols, (size_t)P);
    free_strings(text, (size_t)NB * P);
    return rc;
}

static int cmd_patch(nnt_runtime *rt, nnt_model *m, const opts *o, const input *in)
{
    int rc = check_out(rt, o);
    if (rc) return rc;
    const int S = in->len[0];
    if (in->len[1] != S) {
        fprintf(stderr, "nnt: error: patch: the clean prompt has %d tokens and the corrupted one %d; patching needs "
                        "prompts of the same length (token by token)\n", in->len[0], in->len[1]);
        return 2;
    }
    patch_spec s = {.path = o->value ? o->value : "layers.*.layer_output", .clean = in->ids[0], .corrupt = in->ids[1],
                    .seq = S, .rows = o->patch_rows ? o->patch_rows : 16};
    char err[1024];
    if (patch_metric_parse(o->metric, &s.metric, err, sizeof err) != 0) return arg_error("%s", err);
    int64_t V = nnt_model_get_info(m)->vocab_size;
    if (s.metric.a >= V || (s.metric.kind == PATCH_LOGIT_DIFF && s.metric.b >= V))
        return arg_error("--metric %s: token %d is outside the model's vocabulary (vocab_size %lld)", o->metric,
                         s.metric.a >= V ? s.metric.a : s.metric.b, (long long)V);
    int *pos = malloc(sizeof(int) * (size_t)S), P = 0;
    if (!pos) return arg_error("%s", "out of memory");
    if ((rc = patch_positions(rt, o->lens_positions, S, pos, &P)) != 0) {
        free(pos);
        return rc;
    }
    s.positions = pos;
    s.n_positions = P;
    print_prompt_tokens(o, in);
    patch_result res;
    if (patch_sweep(rt, m, &s, &res, err, sizeof err) != NNT_OK) {
        fprintf(stderr, "nnt: error: patch: %s\n", err);
        free(pos);
        return 1;
    }
    const int NB = res.n_blocks;
    printf("activation patching of %s: metric %s with the clean value at one block and one position\n", s.path, o->metric);
    printf("clean %.6f, corrupted %.6f (%d forwards, up to %d patched rows each)\n", res.clean_metric,
           res.corrupt_metric, res.forwards, s.rows);
    char **cells = calloc((size_t)(NB + 2) * (size_t)P, sizeof *cells);
    char **lab = calloc((size_t)(NB + 2), sizeof *lab);
    int ok = cells && lab;
    for (int c = 0; ok && c < P; c++) {
        char buf[48];
        snprintf(buf, sizeof buf, "%d", pos[c]);
        cells[c] = strdup(buf);
        sbuf tk = {0};
        sb_token(&tk, in->tok, in->ids[1][pos[c]]);
        cells[P + c] = tk.p;
        for (int b = 0; b < NB; b++) {
            snprintf(buf, sizeof buf, "%.6f", res.grid[(size_t)b * P + c]);
            cells[(size_t)(b + 2) * P + c] = strdup(buf);
        }
    }
    for (int k = 0; ok && k < NB + 2; k++) {
        char buf[16];
        snprintf(buf, sizeof buf, "%d", k < 2 ? 0 : res.blocks[k - 2]);
        lab[k] = strdup(k == 0 ? "pos" : k == 1 ? "token" : buf);
        ok = lab[k] != NULL;
    }
    for (size_t k = 0; ok && k < (size_t)(NB + 2) * P; k++) ok = cells[k] != NULL;
    if (ok) {
        printf("block \\ position (token of the corrupted prompt):\n");
        print_table(cells, NB + 2, P, (const char *const *)lab);
    }
    for (size_t k = 0; cells && k < (size_t)(NB + 2) * P; k++) free(cells[k]);
    for (int k = 0; lab && k < NB + 2; k++) free(lab[k]);
    free(cells);
    free(lab);
    rc = ok ? 0 : arg_error("%s", "out of memory");
    if (!rc && o->plot) rc = plot_patch(o, in, &s, &res);
    if (!rc && o->out) {
        nnt_tensor ts[5] = {{0}};
        const char *names[5] = {"patch_metric", "patch_blocks", "patch_positions", "clean_metric", "corrupt_metric"};
        int okw = nnt_tensor_alloc(&ts[0], NNT_F64, 2, (int64_t[]){NB, P}) == NNT_OK &&
                  nnt_tensor_alloc(&ts[1], NNT_I32, 1, (int64_t[]){NB}) == NNT_OK &&
                  nnt_tensor_alloc(&ts[2], NNT_I32, 1, (int64_t[]){P}) == NNT_OK &&
                  nnt_tensor_alloc(&ts[3], NNT_F64, 1, (int64_t[]){1}) == NNT_OK &&
                  nnt_tensor_alloc(&ts[4], NNT_F64, 1, (int64_t[]){1}) == NNT_OK;
        if (okw) {
            memcpy(ts[0].data, res.grid, sizeof(double) * (size_t)NB * P);
            memcpy(ts[1].data, res.blocks, sizeof(int) * (size_t)NB);
            for (int c = 0; c < P; c++) ((int32_t *)ts[2].data)[c] = pos[c];
            *(double *)ts[3].data = res.clean_metric;
            *(double *)ts[4].data = res.corrupt_metric;
            rc = write_out(rt, o, NULL, 5, names, ts);
            if (!rc) printf("wrote patch_metric [%d, %d], patch_blocks, patch_positions, clean_metric and corrupt_metric to %s\n",
                            NB, P, o->out);
        } else {
            rc = arg_error("%s", "out of memory");
        }
        for (int k = 0; k < 5; k++) nnt_tensor_free(&ts[k]);
    }
    patch_result_free(&res);
    free(pos);
    return rc;
}

/* Prints a generated row: its ids; with a tokenizer, each id with its text and the decoded
 * continuation (without the stop token that ended it). */
static void print_generated(nnt_tokenizer *tok, int r, const int32_t *ids, int N,
                            const int32_t *stops, int n_stops)
{
    int n = 0;
    while (n < N && ids[n] != NNT_TOKEN_STOPPED) n++;
    int stopped = 0;
    for (int k = 0; n > 0 && k < n_stops; k++) stopped |= ids[n - 1] == stops[k];
    printf("new tokens, row %d:", r);
    for (int i = 0; i < n; i++) printf(" %d", ids[i]);
    printf("\n");
    if (!tok) return;
    printf("tokens, row %d:", r);
    for (int i = 0; i < n; i++) {
        printf("  ");
        print_token(tok, ids[i]);
    }
    printf("\ntext, row %d: ", r);
    char *text = NULL;
    size_t len = 0;
    if (nnt_tokenizer_decode(tok, ids, n - stopped, 0, &text, &len) == NNT_OK) {
        sbuf q = {0};
        sb_quoted(&q, text, len);
        fputs(q.p ? q.p : "?", stdout);
        free(q.p);
        free(text);
    } else {
        printf("? (%s)", nnt_tokenizer_last_error(tok));
    }
    if (stopped) {
        printf(" (stopped at ");
        print_token(tok, ids[n - 1]);
        printf(")");
    }
    printf("\n");
}

static int cmd_generate(nnt_runtime *rt, nnt_model *m, const opts *o, const input *in, dist *d)
{
    if (o->max_new_tokens < 0) return usage_error("%s", "generate needs --max-new-tokens N");
    batch b;
    int rc = check_out(rt, o);
    if (rc) return rc;
    rc = build_batch(in, &b);
    if (rc) return rc;
    print_prompt_tokens(o, in);
    /* stop ids: the tokenizer's eos unless --ignore-eos, and every --stop-id */
    int32_t stops[MAX_STOP + 1];
    int n_stops = 0;
    int32_t eos = in->tok && !o->ignore_eos ? nnt_tokenizer_eos_id(in->tok) : -1;
    if (eos >= 0) stops[n_stops++] = eos;
    for (int k = 0; k < o->n_stop_ids; k++) stops[n_stops++] = o->stop_ids[k];
    nnt_trace *t = NULL;
    loaded_set l = {.n = 0};
    int N = o->max_new_tokens;
    int32_t *out = calloc((size_t)b.B * N, sizeof *out);
    rc = 1;
    if (!out) {
        fprintf(stderr, "nnt: out of memory\n");
        goto out;
    }
    if (nnt_trace_new(m, &t) != NNT_OK) {
        fail(rt, "generate");
        goto out;
    }
    if ((rc = add_requests(rt, t, o, &l, NULL, NULL)) != 0) goto out;
    rc = 1;
    nnt_generate_opts g = {
        .max_new_tokens = N,
        .temperature = o->temperature,
        .top_k = o->top_k,
        .top_p = o->top_p,
        .seed = o->seed,
        .stop_ids = n_stops ? stops : NULL,
        .n_stop_ids = n_stops,
    };
    if (d) { /* one stage per rank; every rank gets the tokens, rank 0 every value, and prints */
        if (dist_generate(d, m, t, b.ids, b.mask, b.B, b.seq, &g, out, 0) != 0) goto out;
        rc = 0;
        if (dist_rank(d) != 0) goto out;
        rc = 1;
    } else if (nnt_generate(m, t, b.ids, b.mask, b.B, b.seq, &g, out) != NNT_OK) {
        fail(rt, "generate");
        goto out;
    }
    if (report_saved(rt, t, o, NULL,
                     "saved values (\"path@k\": the k-th time the request saved it, one per step; \"#r\": saved by "
                     "the r-th later request of the same value):\n") != 0)
        goto out;
    for (int r = 0; r < b.B; r++) print_generated(in->tok, r, out + (size_t)r * N, N, stops, n_stops);
    rc = 0;
out:
    free(out);
    loaded_free(&l);
    nnt_trace_free(t);
    batch_free(&b);
    return rc;
}

/* nnt tokenize: needs the tokenizer and the family plugin serving the folder's config.json
 * (its tokenizer hints), not the weights. */
static int cmd_tokenize(const opts *o)
{
    nnt_runtime *rt = NULL;
    if (nnt_runtime_open(o->config, &rt) != NNT_OK) {
        int rc = fail(rt, "cannot start");
        nnt_runtime_close(rt);
        return rc;
    }
    nnt_tokenizer *tok = NULL;
    nnt_status st = nnt_runtime_tokenizer(rt, o->model, &tok);
    nnt_runtime_close(rt); /* the tokenizer keeps nothing of the runtime */
    if (st != NNT_OK) {
        fprintf(stderr, "nnt: error: %s\n", nnt_tokenizer_last_error(tok));
        nnt_tokenizer_free(tok);
        return 1;
    }
    int32_t *ids = NULL;
    int n = 0, rc;
    if (o->text) {
        row_arg a = {ROW_PROMPT, o->text};
        rc = encode_text(tok, o, &a, 0, &ids, &n);
    } else {
        rc = encode_text(tok, o, &o->rows[0], 0, &ids, &n);
    }
    if (rc == 0) {
        for (int i = 0; i < n; i++) {
            if (o->ids_only) {
                printf(i ? " %d" : "%d", ids[i]);
                continue;
            }
            size_t len;
            const char *bytes = nnt_tokenizer_token_bytes(tok, ids[i], &len);
            sbuf q = {0};
            if (bytes) sb_quoted(&q, bytes, len);
            printf("%d\t%s\n", ids[i], q.p ? q.p : "?");
            free(q.p);
        }
        if (o->ids_only) printf("\n");
    }
    free(ids);
    nnt_tokenizer_free(tok);
    return rc;
}

/* "1.50 GB" */
static const char *human_bytes(uint64_t b, char *buf, size_t n)
{
    static const char *const unit[] = {"B", "KB", "MB", "GB", "TB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1000.0 && u < 4) {
        v /= 1000.0;
        u++;
    }
    snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", v, unit[u]);
    return buf;
}

/* nnt info, first half: the checkpoint's headers, before the (possibly long) load */
static int info_before_load(nnt_runtime *rt, const char *dir)
{
    nnt_checkpoint_summary s;
    if (nnt_checkpoint_inspect(rt, dir, &s) != NNT_OK) return fail(rt, "cannot read the checkpoint");
    char a[32];
    printf("checkpoint %s: %d file%s, %s on disk, %lld tensors\n", dir, s.n_files, s.n_files == 1 ? "" : "s",
           human_bytes(s.file_bytes, a, sizeof a), (long long)s.n_tensors);
    for (int e = 0; e < NNT_ENC_COUNT; e++)
        if (s.tensors[e])
            printf("  %-20s %6lld tensors %12s\n", nnt_encoding_name((nnt_encoding)e), (long long)s.tensors[e],
                   human_bytes(s.bytes[e], a, sizeof a));
    printf("weights stay in these encodings: a host backend reads them in place from the mapped files, a device\n"
           "backend holds them as stored (about %s)\n",
           human_bytes(s.file_bytes, a, sizeof a));
    fflush(stdout);
    return 0;
}

/* nnt info, second half: what loading held */
static int info_after_load(const nnt_model *m)
{
    nnt_memory mem;
    if (nnt_model_memory(m, &mem) != NNT_OK) return 1;
    char a[32], b[32], c[32];
    uint64_t held = mem.mapped_bytes + mem.allocated_bytes + mem.device_bytes;
    printf("loaded: family %s on backend %s, precision %s\n", nnt_model_family(m), nnt_model_backend(m),
           mem.precision ? "bf16" : "f32");
    printf("held: %s read in place, %s allocated, %s on the device (%.2f x the files)\n",
           human_bytes(mem.mapped_bytes, a, sizeof a), human_bytes(mem.allocated_bytes, b, sizeof b),
           human_bytes(mem.device_bytes, c, sizeof c), mem.file_bytes ? (double)held / (double)mem.file_bytes : 0.0);
    return 0;
}

/* The commands a run over several ranks serves. */
static int runs_over_ranks(const char *cmd)
{
    return !strcmp(cmd, "trace") || !strcmp(cmd, "lens") || !strcmp(cmd, "generate");
}

int main(int argc, char **argv)
{
    int held_stderr = dist_hold_stderr_early(); /* ranks > 0 of an mpirun job: rank 0 reports */
    if (argc > 1 && strcmp(argv[1], "plan") == 0) { /* under mpirun, rank 0 prints the plan once */
        if (held_stderr >= 0) dist_quiet_stdout();
        return nnt_cli_plan(argc - 1, argv + 1);
    }
    opts o;
    nnt_runtime *rt = NULL;
    nnt_model *m = NULL;
    input in = {0};
    dist *d = NULL;
    int rc = parse_args(argc, argv, &o);
    if (rc != 0) goto done;
    if (strcmp(o.cmd, "help") == 0 || strcmp(o.cmd, "--help") == 0 || strcmp(o.cmd, "-h") == 0) {
        fputs(USAGE, stdout);
        goto done;
    }
    if (strcmp(o.cmd, "print") && strcmp(o.cmd, "support") && strcmp(o.cmd, "trace") && strcmp(o.cmd, "lens") &&
        strcmp(o.cmd, "patch") && strcmp(o.cmd, "generate") && strcmp(o.cmd, "plugins") && strcmp(o.cmd, "info") && strcmp(o.cmd, "tokenize")) {
        rc = usage_error("unknown command '%s'", o.cmd);
        goto done;
    }
    int runs = !strcmp(o.cmd, "trace") || !strcmp(o.cmd, "lens") || !strcmp(o.cmd, "generate") || !strcmp(o.cmd, "patch");
    if (!runs && strcmp(o.cmd, "tokenize") && o.n_rows) {
        rc = usage_error("%s takes no --tokens, --prompt or --prompt-file", o.cmd);
        goto done;
    }
    if (!runs && strcmp(o.cmd, "tokenize") && o.no_special) {
        rc = usage_error("%s", "--no-special applies to text: tokenize, --prompt and --prompt-file");
        goto done;
    }
    if (strcmp(o.cmd, "tokenize") == 0) {
        rc = o.model ? cmd_tokenize(&o) : usage_error("%s needs --model DIR", o.cmd);
        goto done;
    }
    if (nnt_runtime_open(o.config, &rt) != NNT_OK) {
        rc = fail(rt, "cannot start");
        goto done;
    }
    nnt_protect_mapped_files(); /* a checkpoint truncated under the run: an error naming it, not SIGBUS */
    /* under mpirun: one pipeline stage per rank (cli/dist.c) */
    rc = dist_start(rt, held_stderr, &d);
    held_stderr = -1;
    if (rc) goto done;
    if (d && !runs_over_ranks(o.cmd)) {
        rc = usage_error("%s runs in one process; over several ranks (mpirun) nnt runs trace, lens and generate", o.cmd);
        goto done;
    }
    dist_set_root(d, d && strcmp(o.cmd, "lens") == 0 ? dist_size(d) - 1 : 0);
    if (strcmp(o.cmd, "plugins") == 0) {
        printf("configuration: %s\n", nnt_runtime_config_path(rt));
        const char *kind, *name, *file, *detail;
        for (int i = 0; nnt_runtime_plugin(rt, i, &kind, &name, &file, &detail); i++)
            printf("  %-8s %-16s %-10s %s\n", kind, name, detail ? detail : "", file);
        for (int i = 0; nnt_runtime_warning(rt, i, &file, &detail); i++) printf("  skipped  %s: %s\n", file, detail);
        rc = 0;
        goto done;
    }
    if (!o.model) {
        rc = usage_error("%s needs --model DIR", o.cmd);
        goto done;
    }
    if (strcmp(o.cmd, "info") == 0 && (rc = info_before_load(rt, o.model)) != 0) goto done;
    /* the rows (and the tokenizer) before the weights: a prompt that cannot be read fails fast */
    if (runs && (rc = read_input(rt, &o, &in)) != 0) goto done;
    /* over several ranks: each loads only its stage's weights */
    int first = 0, end = 0;
    if (d && (rc = dist_split(d, rt, o.model, &first, &end)) != 0) goto done;
    if ((d ? nnt_model_load_stage(rt, o.model, first, end, &m) : nnt_model_load(rt, o.model, &m)) != NNT_OK) {
        rc = fail(rt, "cannot load the model");
        goto done;
    }
    if (d && (rc = dist_set_model(d, m)) != 0) goto done;
    if (runs && (rc = check_vocab(&o, &in, m)) != 0) goto done;
    if (strcmp(o.cmd, "info") == 0)
        rc = info_after_load(m);
    else if (strcmp(o.cmd, "print") == 0)
        rc = nnt_model_print(m, stdout) == NNT_OK ? 0 : fail(rt, NULL);
    else if (strcmp(o.cmd, "support") == 0)
        rc = nnt_model_support(m, stdout, o.tsv) == NNT_OK ? 0 : fail(rt, NULL);
    else if (strcmp(o.cmd, "lens") == 0)
        rc = cmd_lens(rt, m, &o, &in, d);
    else if (strcmp(o.cmd, "generate") == 0)
        rc = cmd_generate(rt, m, &o, &in, d);
    else if (strcmp(o.cmd, "patch") == 0)
        rc = cmd_patch(rt, m, &o, &in);
    else
        rc = cmd_trace(rt, m, &o, &in, d);
done:
    dist_finish(d, rc);
    if (held_stderr >= 0) { /* stopped before dist_start: the real stderr back */
        fflush(stderr);
        dup2(held_stderr, 2);
        close(held_stderr);
    }
    input_free(&in);
    nnt_model_free(m);
    nnt_runtime_close(rt);
    opts_free(&o);
    return rc;
}

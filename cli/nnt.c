/* nnt.c - the `nnt` command line: print a model's module tree, list the standard values it
 * serves, trace a forward pass (saving and editing values by path), the logit lens, and
 * generation with edits at every step; prompts are token ids or text (encoded with the model
 * folder's tokenizer), and tokens are shown with their text wherever the folder has one. */
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnt/nnt.h"

#define MAX_REQ 256
#define MAX_ROWS 64
#define MAX_STOP 64

static const char USAGE[] =
    "usage: nnt COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  print    --model DIR                module tree with native and standard names, value layouts\n"
    "  support  --model DIR [--tsv]        every standard value per host and block, served or not and why\n"
    "  trace    --model DIR ROWS           run the forward and print the top next tokens of each row\n"
    "  lens     --model DIR ROW            the logit lens: for every block and position, the top\n"
    "           token of the block's output read through the final norm and lm_head, with its probability;\n"
    "           --out FILE writes the probabilities [layers, seq, vocab] as key lens_probs\n"
    "  generate --model DIR ROWS --max-new-tokens N   print the new token ids and, with a tokenizer, their text\n"
    "           --temperature T (0: greedy, the default)  --top-k K  --top-p P  --seed S\n"
    "           a row stops at the tokenizer's eos token (tokenizer_config.json's eos_token), unless\n"
    "           --ignore-eos; --stop-id ID (repeatable) stops rows at ID too\n"
    "  tokenize --model DIR \"text\"        each token of the text: its id, a tab, its text (quoted, escaped);\n"
    "           --ids prints only the ids, on one line; special tokens are added as the tokenizer adds\n"
    "           them (a BOS where the release adds one) unless --no-special; reads only the tokenizer\n"
    "  info     --model DIR                what the checkpoint stores (bytes per encoding, from the file\n"
    "           headers), then what loading it holds: bytes read in place, allocated, on the device\n"
    "  plugins                             loaded plugins and the backend of each family\n"
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
    "  --save PATH        save a value (repeatable; 'layers.*.layer_output' saves every block)\n"
    "  --zero PATH        zero a value before the forward uses it\n"
    "  --scale PATH=F     multiply a value by F\n"
    "  --set PATH=FILE[:KEY]  replace a value by a tensor from a safetensors file\n"
    "  --add PATH=FILE[:KEY]  add a tensor (broadcast over leading axes) to a value\n"
    "  --ablate-expert LAYER:E  zero expert E's weight wherever block LAYER routes to it\n"
    "  --skip-layers START:END  skip blocks START..END (block END's output is block START's input)\n"
    "  --steer FIRST[:LAST]=FILE[:KEY]  add a [hidden_size] vector to layer_output of blocks FIRST..LAST\n"
    "           (--steer-factor F and --steer-positions P,P,... given before it scale it and choose\n"
    "           positions; negative positions count from the end)\n"
    "  --steps FROM[:TO]  the requests after it apply only at generation steps FROM..TO (0: the prompt)\n"
    "  --out FILE.safetensors   write every saved value under its path\n"
    "\n"
    "common options: --config FILE (else $NNT_CONFIG, else the nnt.ini of this build or installation)\n";

typedef struct req {
    enum { R_SAVE, R_ZERO, R_SCALE, R_SET, R_ADD, R_ABLATE, R_SKIP, R_STEER, R_STEPS } kind;
    char *path;
    char *arg;
    float factor;        /* R_STEER */
    char *positions;     /* R_STEER: "P,P,..." or NULL */
} req;

/* One batch row as given: token ids (--tokens), text (--prompt) or a file of text (--prompt-file). */
typedef struct row_arg {
    enum { ROW_TOKENS, ROW_PROMPT, ROW_FILE } kind;
    const char *arg;
} row_arg;

typedef struct opts {
    const char *cmd, *model, *config, *out;
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

/* Parses a whole string as a number; 0 on success. */
static int parse_long(const char *text, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno) return -1;
    *out = v;
    return 0;
}

static int parse_float(const char *text, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno || !isfinite(v)) return -1;
    *out = (float)v;
    return 0;
}

/* Splits "A:B" (or "A") into two integers; b defaults to a (or to `b_default` when given). */
static int parse_range(const char *text, long *a, long *b, long b_default, int use_default)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", text);
    char *colon = strchr(buf, ':');
    if (colon) *colon = '\0';
    if (parse_long(buf, a) != 0) return -1;
    if (!colon || (use_default && !colon[1])) { /* "A" or, where an open end is allowed, "A:" */
        *b = use_default ? b_default : *a;
        return 0;
    }
    return parse_long(colon + 1, b);
}

/* Options that take a value, other than the requests. */
static const char *const VALUE_OPTIONS[] = {"--model", "--config", "--out", "--tokens", "--prompt", "--prompt-file",
                                            "--max-new-tokens", "--temperature", "--top-k", "--top-p", "--seed",
                                            "--stop-id", "--steer-factor", "--steer-positions", NULL};
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
        else if (strcmp(a, "--out") == 0)
            rc = set_once(&o->out, a, v);
        else if (strcmp(a, "--tokens") == 0 || strcmp(a, "--prompt") == 0 || strcmp(a, "--prompt-file") == 0) {
            if (o->n_rows == MAX_ROWS) return usage_error("at most %s rows (--tokens, --prompt, --prompt-file)", "64");
            int kind = strcmp(a, "--tokens") == 0 ? ROW_TOKENS : strcmp(a, "--prompt") == 0 ? ROW_PROMPT : ROW_FILE;
            o->rows[o->n_rows++] = (row_arg){kind, v};
            o->n_text_rows += kind != ROW_TOKENS;
        } else if (strcmp(a, "--stop-id") == 0) {
            if (parse_long(v, &n) != 0 || n < 0 || n > 0x7fffffff)
                return usage_error("--stop-id: '%s' is not a token id (a non-negative integer)", v);
            if (o->n_stop_ids == MAX_STOP) return usage_error("at most %s --stop-id options", "64");
            o->stop_ids[o->n_stop_ids++] = (int32_t)n;
        } else if (strcmp(a, "--max-new-tokens") == 0) {
            if (parse_long(v, &n) != 0 || n < 1 || n > 1000000)
                return usage_error("--max-new-tokens: '%s' is not an integer in 1..1000000", v);
            o->max_new_tokens = (int)n;
        } else if (strcmp(a, "--temperature") == 0) {
            if (parse_float(v, &o->temperature) != 0 || o->temperature < 0)
                return usage_error("--temperature: '%s' is not a number >= 0", v);
        } else if (strcmp(a, "--top-k") == 0) {
            if (parse_long(v, &n) != 0 || n < 0 || n > 0x7fffffff)
                return usage_error("--top-k: '%s' is not an integer >= 0", v);
            o->top_k = (int)n;
        } else if (strcmp(a, "--top-p") == 0) {
            if (parse_float(v, &o->top_p) != 0 || o->top_p <= 0 || o->top_p > 1)
                return usage_error("--top-p: '%s' is not a number in (0, 1]", v);
        } else if (strcmp(a, "--seed") == 0) {
            char *end;
            errno = 0;
            o->seed = strtoull(v, &end, 10);
            if (end == v || *end || errno || v[0] == '-') return usage_error("--seed: '%s' is not a non-negative integer", v);
        } else if (strcmp(a, "--steer-factor") == 0) {
            if (parse_float(v, &steer_factor) != 0) return usage_error("--steer-factor: '%s' is not a number", v);
            steer_pending = 1;
        } else if (strcmp(a, "--steer-positions") == 0) {
            steer_positions = v;
            steer_pending = 1;
        } else {
            req r = {0};
            size_t k = 0;
            while (strcmp(a, REQUESTS[k].flag) != 0) k++;
            if (o->n_reqs == MAX_REQ) return usage_error("too many requests (max %s)", "256");
            r.kind = REQUESTS[k].kind;
            r.path = strdup(v);
            if (!r.path) return usage_error("%s", "out of memory");
            if (REQUESTS[k].sep) {
                char *eq = strchr(r.path, REQUESTS[k].sep);
                if (!eq) {
                    fprintf(stderr, "nnt: %s needs %s, got '%s'\n", a,
                            r.kind == R_ABLATE ? "LAYER:EXPERT" : r.kind == R_STEER ? "FIRST[:LAST]=FILE[:KEY]" : "PATH=VALUE", v);
                    free(r.path);
                    return 2;
                }
                *eq = '\0';
                r.arg = eq + 1;
            }
            if (r.kind == R_STEER) {
                r.factor = steer_factor;
                r.positions = (char *)steer_positions;
                steer_pending = 0;
            }
            o->reqs[o->n_reqs++] = r;
        }
        if (rc) return rc;
    }
    if (steer_pending)
        return usage_error("%s", "--steer-factor and --steer-positions apply to the --steer options after them; none follows");
    if (o->n_text_rows && o->n_text_rows < o->n_rows)
        return usage_error("%s", "--tokens cannot be mixed with --prompt or --prompt-file: give every row as token ids "
                                 "or every row as text");
    if (tokenize) {
        if (o->n_rows > o->n_text_rows) return usage_error("%s", "tokenize reads text; --tokens gives ids already");
        if (o->n_rows + (o->text != NULL) != 1)
            return usage_error("%s", o->n_rows + (o->text != NULL) ? "tokenize reads one text"
                                                                   : "tokenize needs a text: nnt tokenize --model DIR \"text\"");
        if (o->n_reqs || o->out) return usage_error("%s", "tokenize takes no requests and no --out");
    } else if (o->ids_only) {
        return usage_error("%s", "--ids is an option of tokenize");
    }
    if (o->no_special && !tokenize && !o->n_text_rows)
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
    if (strcmp(o->cmd, "lens") == 0)
        for (int q = 0; q < o->n_reqs; q++)
            if (o->reqs[q].kind == R_SAVE)
                return usage_error("%s", "lens saves every block's output itself; --save belongs to trace and generate");
    return 0;
}

static int parse_tokens(const char *text, int32_t **out, int *n)
{
    int cap = 64, k = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return -1;
    const char *p = text;
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 0x7fffffff || (*end && *end != ' ' && *end != ',' && *end != '\t' && *end != '\n')) {
            fprintf(stderr, "nnt: --tokens: '%.20s' is not a token id (a non-negative integer)\n", p);
            free(ids);
            return -1;
        }
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
        p = end;
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

/* Reads a whole file into a new buffer; NULL (errno set) on failure. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *g = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap *= 2);
        if (!g) {
            free(buf);
            buf = NULL;
            errno = ENOMEM;
        }
        buf = g;
    }
    int bad = buf && ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    *len = n;
    return buf;
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
        if (!(file = read_file(a->arg, &len))) {
            fprintf(stderr, "nnt: error: --prompt-file %s: %s\n", a->arg, strerror(errno));
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
static int read_input(const opts *o, input *in)
{
    memset(in, 0, sizeof *in);
    if (o->n_rows == 0)
        return usage_error("%s needs at least one row: --tokens \"ID ...\", --prompt \"text\" or --prompt-file FILE", o->cmd);
    nnt_tokenizer *tok = NULL;
    nnt_status st = nnt_tokenizer_load(o->model, &tok);
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

/* Reads FILE[:KEY] into the next slot of `l`. */
static const nnt_tensor *load_arg(nnt_runtime *rt, const char *arg, loaded_set *l)
{
    char file[1024];
    snprintf(file, sizeof file, "%s", arg);
    char *key = strrchr(file, ':');
    if (key && strstr(key, ".safetensors") == NULL)
        *key++ = '\0';
    else
        key = NULL;
    if (nnt_safetensors_read(rt, file, key, &l->t[l->n]) != NNT_OK) return NULL;
    return &l->t[l->n++];
}

/* Adds the command line's requests to t in order; *saves_path is set when the user saved
 * `watch` (may be NULL). Returns 0, 1 (library error, printed) or 2 (bad argument). */
static int add_requests(nnt_runtime *rt, nnt_trace *t, const opts *o, loaded_set *l, const char *watch, int *saves_watch)
{
    for (int i = 0; i < o->n_reqs; i++) {
        const req *q = &o->reqs[i];
        nnt_status st = NNT_OK;
        long a, b;
        float f;
        switch (q->kind) {
        case R_SAVE:
            st = nnt_trace_save(t, q->path);
            if (watch && saves_watch && (strcmp(q->path, watch) == 0 || (strncmp(q->path, "model.", 6) == 0 && strcmp(q->path + 6, watch) == 0)))
                *saves_watch = 1;
            break;
        case R_ZERO: st = nnt_trace_zero(t, q->path); break;
        case R_SCALE:
            if (parse_float(q->arg, &f) != 0) {
                fprintf(stderr, "nnt: --scale %s=%s: '%s' is not a number\n", q->path, q->arg, q->arg);
                return 2;
            }
            st = nnt_trace_scale(t, q->path, f);
            break;
        case R_SET:
        case R_ADD: {
            const nnt_tensor *v = load_arg(rt, q->arg, l);
            if (!v) return fail(rt, q->kind == R_SET ? "--set" : "--add");
            st = q->kind == R_SET ? nnt_trace_set(t, q->path, v) : nnt_trace_add(t, q->path, v, 1.0f);
            if (st != NNT_OK) {
                fprintf(stderr, "nnt: error: %s %s=%s: %s\n", q->kind == R_SET ? "--set" : "--add", q->path, q->arg,
                        nnt_last_error(rt));
                return 1;
            }
            break;
        }
        case R_ABLATE:
            if (parse_long(q->path, &a) != 0 || parse_long(q->arg, &b) != 0) {
                fprintf(stderr, "nnt: --ablate-expert %s:%s: expected integers LAYER:EXPERT\n", q->path, q->arg);
                return 2;
            }
            st = nnt_trace_ablate_expert(t, (int)a, (int)b);
            break;
        case R_SKIP:
            if (parse_range(q->path, &a, &b, 0, 0) != 0) {
                fprintf(stderr, "nnt: --skip-layers %s: expected integers START:END\n", q->path);
                return 2;
            }
            st = nnt_trace_skip_layers(t, (int)a, (int)b);
            break;
        case R_STEER: {
            if (parse_range(q->path, &a, &b, 0, 0) != 0) {
                fprintf(stderr, "nnt: --steer %s=...: expected block numbers FIRST[:LAST]\n", q->path);
                return 2;
            }
            int pos[MAX_REQ], np = 0;
            if (q->positions) {
                char buf[1024];
                snprintf(buf, sizeof buf, "%s", q->positions);
                for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                    long p;
                    if (parse_long(tok, &p) != 0 || np == MAX_REQ) {
                        fprintf(stderr, "nnt: --steer-positions %s: expected integers P,P,... (at most %d)\n", q->positions, MAX_REQ);
                        return 2;
                    }
                    pos[np++] = (int)p;
                }
            }
            const nnt_tensor *v = load_arg(rt, q->arg, l);
            if (!v) return fail(rt, "--steer");
            st = nnt_trace_steer(t, (int)a, (int)b, np ? pos : NULL, np, v, q->factor);
            if (st != NNT_OK) {
                fprintf(stderr, "nnt: error: --steer %s=%s: %s\n", q->path, q->arg, nnt_last_error(rt));
                return 1;
            }
            break;
        }
        case R_STEPS:
            if (parse_range(q->path, &a, &b, -1, 1) != 0) {
                fprintf(stderr, "nnt: --steps %s: expected FROM[:TO] step numbers\n", q->path);
                return 2;
            }
            st = nnt_trace_steps(t, (int)a, (int)b);
            break;
        }
        if (st != NNT_OK) return fail(rt, NULL);
    }
    return 0;
}

/* --out, checked before any forward runs: its directory must exist, and an existing path must be
 * a regular file (the writer refuses to replace anything else). Returns 0 or 2. */
static int check_out(const char *out)
{
    if (!out) return 0;
    struct stat sb;
    if (stat(out, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        fprintf(stderr, "nnt: --out %s: exists and is not a regular file\n", out);
        return 2;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", out);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(dir, W_OK) != 0) {
        fprintf(stderr, "nnt: --out %s: the directory '%s' does not exist or is not writable\n", out, dir);
        return 2;
    }
    return 0;
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
        if (nnt_trace_write_safetensors(t, o->out) != NNT_OK) return fail(rt, "--out");
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

static int cmd_trace(nnt_runtime *rt, nnt_model *m, const opts *o, const input *in)
{
    batch b;
    int rc = check_out(o->out);
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
    if (nnt_trace_run(t, b.ids, b.mask, b.B, b.seq) != NNT_OK) {
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
    rc = 0;
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

static int cmd_lens(nnt_runtime *rt, nnt_model *m, const opts *o, const input *in)
{
    if (o->n_rows > 1) return usage_error("%s", "lens reads one row (one --tokens, --prompt or --prompt-file)");
    batch b;
    int rc = check_out(o->out);
    if (rc) return rc;
    rc = build_batch(in, &b);
    if (rc) return rc;
    const nnt_model_info *mi = nnt_model_get_info(m);
    int L = mi->num_layers, S = b.seq;
    int64_t V = mi->vocab_size;
    nnt_trace *t = NULL;
    loaded_set l = {.n = 0};
    nnt_tensor all = {0};
    /* with a tokenizer the table is built first (cells of any width), else printed as it goes */
    const nnt_tokenizer *tok = in->tok;
    int n_cells = (L + 2) * S;
    char **cells = tok ? calloc((size_t)n_cells, sizeof *cells) : NULL;
    char **labels = tok ? calloc((size_t)(L + 2), sizeof *labels) : NULL;
    rc = 1;
    if (tok && (!cells || !labels)) {
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
    if (nnt_trace_run(t, b.ids, b.mask, 1, S) != NNT_OK) {
        fail(rt, "forward");
        goto out;
    }
    if (o->out && nnt_tensor_alloc(&all, NNT_F32, 3, (int64_t[]){L, S, V}) != NNT_OK) {
        fprintf(stderr, "nnt: lens: no memory for [%d, %d, %lld] probabilities\n", L, S, (long long)V);
        goto out;
    }
    printf("logit lens: top token (probability) of each block's output, by position\n");
    if (tok) {
        char num[32];
        labels[0] = strdup("block");
        labels[1] = strdup("input");
        for (int s = 0; s < S; s++) {
            snprintf(num, sizeof num, "%d", s);
            cells[s] = strdup(num);
            sbuf c = {0};
            sb_token(&c, tok, b.ids[s]);
            cells[S + s] = c.p;
        }
    } else {
        printf("%-6s", "block");
        for (int s = 0; s < S; s++) printf(" %14d", s);
        printf("\n%-6s", "input");
        for (int s = 0; s < S; s++) printf(" %14d", b.ids[s]);
        printf("\n");
    }
    for (int layer = 0; layer < L; layer++) {
        char path[64];
        snprintf(path, sizeof path, "layers.%d.layer_output", layer);
        const nnt_tensor *x = nnt_trace_get(t, path);
        nnt_tensor lg = {0};
        if (!x) {
            fprintf(stderr, "nnt: lens: %s is None\n", path);
            goto out;
        }
        if (nnt_project_on_vocab(m, x, &lg) != NNT_OK) {
            fail(rt, "lens");
            goto out;
        }
        float *p = (float *)lg.data;
        softmax_rows(p, S, V);
        if (tok) {
            char num[32];
            snprintf(num, sizeof num, "%d", layer);
            labels[layer + 2] = strdup(num);
        } else {
            printf("%-6d", layer);
        }
        for (int s = 0; s < S; s++) {
            int top[1];
            top_tokens(p + (int64_t)s * V, V, 1, top);
            if (tok) {
                char prob[32];
                sbuf c = {0};
                sb_token(&c, tok, top[0]);
                snprintf(prob, sizeof prob, " (%.4f)", p[(int64_t)s * V + top[0]]);
                sb_str(&c, prob);
                cells[(size_t)(layer + 2) * S + s] = c.p;
            } else {
                printf(" %6d (%.4f)", top[0], p[(int64_t)s * V + top[0]]);
            }
        }
        if (!tok) printf("\n");
        if (all.data) memcpy((float *)all.data + (int64_t)layer * S * V, p, sizeof(float) * (size_t)(S * V));
        nnt_tensor_free(&lg);
    }
    if (tok) {
        for (int i = 0; i < n_cells; i++)
            if (!cells[i]) cells[i] = strdup("?");
        for (int r = 0; r < L + 2; r++)
            if (!labels[r]) labels[r] = strdup("?");
        for (int i = 0; i < n_cells; i++)
            if (!cells[i]) {
                fprintf(stderr, "nnt: lens: out of memory\n");
                goto out;
            }
        for (int r = 0; r < L + 2; r++)
            if (!labels[r]) {
                fprintf(stderr, "nnt: lens: out of memory\n");
                goto out;
            }
        print_table(cells, L + 2, S, (const char *const *)labels);
    }
    if (o->out) {
        const char *names[] = {"lens_probs"};
        if (nnt_safetensors_write(rt, o->out, 1, names, &all) != NNT_OK) {
            fail(rt, "--out");
            goto out;
        }
        printf("wrote lens_probs [%d, %d, %lld] to %s\n", L, S, (long long)V, o->out);
    }
    rc = 0;
out:
    for (int i = 0; cells && i < n_cells; i++) free(cells[i]);
    for (int r = 0; labels && r < L + 2; r++) free(labels[r]);
    free(cells);
    free(labels);
    nnt_tensor_free(&all);
    loaded_free(&l);
    nnt_trace_free(t);
    batch_free(&b);
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

static int cmd_generate(nnt_runtime *rt, nnt_model *m, const opts *o, const input *in)
{
    if (o->max_new_tokens < 0) return usage_error("%s", "generate needs --max-new-tokens N");
    batch b;
    int rc = check_out(o->out);
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
    if (nnt_generate(m, t, b.ids, b.mask, b.B, b.seq, &g, out) != NNT_OK) {
        fail(rt, "generate");
        goto out;
    }
    if (report_saved(rt, t, o, NULL, "saved values (\"path@k\": the k-th time the request saved it, one per step):\n") != 0) goto out;
    for (int r = 0; r < b.B; r++) print_generated(in->tok, r, out + (size_t)r * N, N, stops, n_stops);
    rc = 0;
out:
    free(out);
    loaded_free(&l);
    nnt_trace_free(t);
    batch_free(&b);
    return rc;
}

/* nnt tokenize: needs only the tokenizer (no runtime, no plugins, no weights). */
static int cmd_tokenize(const opts *o)
{
    nnt_tokenizer *tok = NULL;
    if (nnt_tokenizer_load(o->model, &tok) != NNT_OK) {
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

int main(int argc, char **argv)
{
    opts o;
    nnt_runtime *rt = NULL;
    nnt_model *m = NULL;
    input in = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc != 0) goto done;
    if (strcmp(o.cmd, "help") == 0 || strcmp(o.cmd, "--help") == 0 || strcmp(o.cmd, "-h") == 0) {
        fputs(USAGE, stdout);
        goto done;
    }
    if (strcmp(o.cmd, "print") && strcmp(o.cmd, "support") && strcmp(o.cmd, "trace") && strcmp(o.cmd, "lens") &&
        strcmp(o.cmd, "generate") && strcmp(o.cmd, "plugins") && strcmp(o.cmd, "info") && strcmp(o.cmd, "tokenize")) {
        rc = usage_error("unknown command '%s'", o.cmd);
        goto done;
    }
    int runs = !strcmp(o.cmd, "trace") || !strcmp(o.cmd, "lens") || !strcmp(o.cmd, "generate");
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
    if (runs && (rc = read_input(&o, &in)) != 0) goto done;
    if (nnt_model_load(rt, o.model, &m) != NNT_OK) {
        rc = fail(rt, "cannot load the model");
        goto done;
    }
    if (runs && (rc = check_vocab(&o, &in, m)) != 0) goto done;
    if (strcmp(o.cmd, "info") == 0)
        rc = info_after_load(m);
    else if (strcmp(o.cmd, "print") == 0)
        rc = nnt_model_print(m, stdout) == NNT_OK ? 0 : fail(rt, NULL);
    else if (strcmp(o.cmd, "support") == 0)
        rc = nnt_model_support(m, stdout, o.tsv) == NNT_OK ? 0 : fail(rt, NULL);
    else if (strcmp(o.cmd, "lens") == 0)
        rc = cmd_lens(rt, m, &o, &in);
    else if (strcmp(o.cmd, "generate") == 0)
        rc = cmd_generate(rt, m, &o, &in);
    else
        rc = cmd_trace(rt, m, &o, &in);
done:
    input_free(&in);
    nnt_model_free(m);
    nnt_runtime_close(rt);
    for (int i = 0; i < o.n_reqs; i++) free(o.reqs[i].path);
    return rc;
}

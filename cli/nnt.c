/* nnt.c - the `nnt` command line: print a model's module tree, list the standard values it
 * serves, trace a forward pass (saving and editing values by path), the logit lens, and
 * generation with edits at every step. */
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnt/nnt.h"

#define MAX_REQ 256
#define MAX_ROWS 64

static const char USAGE[] =
    "usage: nnt COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  print    --model DIR                module tree with native and standard names, value layouts\n"
    "  support  --model DIR [--tsv]        every standard value per host and block, served or not and why\n"
    "  trace    --model DIR --tokens \"ID ID ...\" [--tokens ...]   run the forward (one --tokens per row;\n"
    "           shorter rows are left-padded) and print the top next tokens\n"
    "  lens     --model DIR --tokens \"ID ...\"   the logit lens: for every block and position, the top\n"
    "           token of the block's output read through the final norm and lm_head, with its probability;\n"
    "           --out FILE writes the probabilities [layers, seq, vocab] as key lens_probs\n"
    "  generate --model DIR --tokens \"ID ...\" [--tokens ...] --max-new-tokens N   print the new token ids\n"
    "           --temperature T (0: greedy, the default)  --top-k K  --top-p P  --seed S\n"
    "  info     --model DIR                what the checkpoint stores (bytes per encoding, from the file\n"
    "           headers), then what loading it holds: bytes read in place, allocated, on the device\n"
    "  plugins                             loaded plugins and the backend of each family\n"
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
    "common options: --config FILE (else $NNT_CONFIG, else the build tree's nnt.ini)\n";

typedef struct req {
    enum { R_SAVE, R_ZERO, R_SCALE, R_SET, R_ADD, R_ABLATE, R_SKIP, R_STEER, R_STEPS } kind;
    char *path;
    char *arg;
    float factor;        /* R_STEER */
    char *positions;     /* R_STEER: "P,P,..." or NULL */
} req;

typedef struct opts {
    const char *cmd, *model, *config, *out;
    int tsv;
    const char *tokens[MAX_ROWS];
    int n_rows;
    req reqs[MAX_REQ];
    int n_reqs;
    /* generate */
    int max_new_tokens;
    float temperature, top_p;
    int top_k;
    unsigned long long seed;
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
static const char *const VALUE_OPTIONS[] = {"--model", "--config", "--out", "--tokens", "--max-new-tokens",
                                            "--temperature", "--top-k", "--top-p", "--seed", "--steer-factor",
                                            "--steer-positions", NULL};

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

static int known_option(const char *a)
{
    if (strcmp(a, "--tsv") == 0) return 1;
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
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!known_option(a)) return usage_error(a[0] == '-' ? "unknown option %s" : "unexpected argument '%s'", a);
        if (strcmp(a, "--tsv") == 0) {
            o->tsv = 1;
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
        else if (strcmp(a, "--tokens") == 0) {
            if (o->n_rows == MAX_ROWS) return usage_error("at most %s --tokens rows", "64");
            o->tokens[o->n_rows++] = v;
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
    if (strcmp(o->cmd, "generate") != 0) {
        const char *only[] = {"--max-new-tokens", "--temperature", "--top-k", "--top-p", "--seed", "--steps"};
        int given[] = {o->max_new_tokens >= 0, o->temperature != 0.0f, o->top_k != 0, o->top_p != 1.0f, o->seed != 0, 0};
        for (int q = 0; q < o->n_reqs; q++) given[5] |= o->reqs[q].kind == R_STEPS;
        for (int q = 0; q < 6; q++)
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

/* The rows of --tokens as one left-padded batch: ids and mask [batch, seq]. */
typedef struct batch {
    int B, seq;
    int32_t *ids, *mask;
} batch;

static void batch_free(batch *b)
{
    free(b->ids);
    free(b->mask);
}

/* 0 on success, 2 on bad token text (message printed). */
static int build_batch(const opts *o, batch *b)
{
    memset(b, 0, sizeof *b);
    if (o->n_rows == 0) return usage_error("%s needs at least one --tokens row", o->cmd);
    int32_t *rows[MAX_ROWS];
    int lens[MAX_ROWS];
    for (int r = 0; r < o->n_rows; r++) {
        if (parse_tokens(o->tokens[r], &rows[r], &lens[r]) != 0) {
            for (int q = 0; q < r; q++) free(rows[q]);
            return 2;
        }
        b->seq = lens[r] > b->seq ? lens[r] : b->seq;
    }
    b->B = o->n_rows;
    b->ids = calloc((size_t)b->B * b->seq, sizeof *b->ids);
    b->mask = calloc((size_t)b->B * b->seq, sizeof *b->mask);
    int rc = 0;
    if (!b->ids || !b->mask) {
        fprintf(stderr, "nnt: out of memory for %d x %d tokens\n", b->B, b->seq);
        rc = 1;
    } else
        for (int r = 0; r < b->B; r++)
            for (int s = 0; s < lens[r]; s++) {
                b->ids[r * b->seq + b->seq - lens[r] + s] = rows[r][s];
                b->mask[r * b->seq + b->seq - lens[r] + s] = 1;
            }
    for (int r = 0; r < o->n_rows; r++) free(rows[r]);
    if (rc) batch_free(b);
    return rc;
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

static int cmd_trace(nnt_runtime *rt, nnt_model *m, const opts *o)
{
    batch b;
    int rc = check_out(o->out);
    if (rc) return rc;
    rc = build_batch(o, &b);
    if (rc) return rc;
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
            for (int k = 0; k < n; k++) printf("  %d (%.4f)", top[k], p[top[k]]);
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

static int cmd_lens(nnt_runtime *rt, nnt_model *m, const opts *o)
{
    if (o->n_rows > 1) return usage_error("%s", "lens reads one --tokens row");
    batch b;
    int rc = check_out(o->out);
    if (rc) return rc;
    rc = build_batch(o, &b);
    if (rc) return rc;
    const nnt_model_info *mi = nnt_model_get_info(m);
    int L = mi->num_layers, S = b.seq;
    int64_t V = mi->vocab_size;
    nnt_trace *t = NULL;
    loaded_set l = {.n = 0};
    nnt_tensor all = {0};
    rc = 1;
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
    printf("logit lens: top token (probability) of each block's output, by position\n%-6s", "block");
    for (int s = 0; s < S; s++) printf(" %14d", s);
    printf("\n%-6s", "input");
    for (int s = 0; s < S; s++) printf(" %14d", b.ids[s]);
    printf("\n");
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
        printf("%-6d", layer);
        for (int s = 0; s < S; s++) {
            int top[1];
            top_tokens(p + (int64_t)s * V, V, 1, top);
            printf(" %6d (%.4f)", top[0], p[(int64_t)s * V + top[0]]);
        }
        printf("\n");
        if (all.data) memcpy((float *)all.data + (int64_t)layer * S * V, p, sizeof(float) * (size_t)(S * V));
        nnt_tensor_free(&lg);
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
    nnt_tensor_free(&all);
    loaded_free(&l);
    nnt_trace_free(t);
    batch_free(&b);
    return rc;
}

static int cmd_generate(nnt_runtime *rt, nnt_model *m, const opts *o)
{
    if (o->max_new_tokens < 0) return usage_error("%s", "generate needs --max-new-tokens N");
    batch b;
    int rc = check_out(o->out);
    if (rc) return rc;
    rc = build_batch(o, &b);
    if (rc) return rc;
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
        /* .max_new_tokens = */ N,
        /* .temperature = */ o->temperature,
        /* .top_k = */ o->top_k,
        /* .top_p = */ o->top_p,
        /* .seed = */ o->seed,
    };
    if (nnt_generate(m, t, b.ids, b.mask, b.B, b.seq, &g, out) != NNT_OK) {
        fail(rt, "generate");
        goto out;
    }
    if (report_saved(rt, t, o, NULL, "saved values (\"path@k\": the k-th time the request saved it, one per step):\n") != 0) goto out;
    for (int r = 0; r < b.B; r++) {
        printf("new tokens, row %d:", r);
        for (int i = 0; i < N; i++) printf(" %d", out[r * N + i]);
        printf("\n");
    }
    rc = 0;
out:
    free(out);
    loaded_free(&l);
    nnt_trace_free(t);
    batch_free(&b);
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
    int rc = parse_args(argc, argv, &o);
    if (rc != 0) goto done;
    if (strcmp(o.cmd, "help") == 0 || strcmp(o.cmd, "--help") == 0 || strcmp(o.cmd, "-h") == 0) {
        fputs(USAGE, stdout);
        goto done;
    }
    if (strcmp(o.cmd, "print") && strcmp(o.cmd, "support") && strcmp(o.cmd, "trace") && strcmp(o.cmd, "lens") &&
        strcmp(o.cmd, "generate") && strcmp(o.cmd, "plugins") && strcmp(o.cmd, "info")) {
        rc = usage_error("unknown command '%s'", o.cmd);
        goto done;
    }
    if (nnt_runtime_open(o.config, &rt) != NNT_OK) {
        rc = fail(rt, "cannot start");
        goto done;
    }
    if (strcmp(o.cmd, "plugins") == 0) {
        printf("configuration: %s\n", nnt_runtime_config_path(rt));
        const char *kind, *name, *file, *detail;
        for (int i = 0; nnt_runtime_plugin(rt, i, &kind, &name, &file, &detail); i++)
            printf("  %-8s %-16s %-10s %s\n", kind, name, detail ? detail : "", file);
        rc = 0;
        goto done;
    }
    if (!o.model) {
        rc = usage_error("%s needs --model DIR", o.cmd);
        goto done;
    }
    if (strcmp(o.cmd, "info") == 0 && (rc = info_before_load(rt, o.model)) != 0) goto done;
    if (nnt_model_load(rt, o.model, &m) != NNT_OK) {
        rc = fail(rt, "cannot load the model");
        goto done;
    }
    if (strcmp(o.cmd, "info") == 0)
        rc = info_after_load(m);
    else if (strcmp(o.cmd, "print") == 0)
        rc = nnt_model_print(m, stdout) == NNT_OK ? 0 : fail(rt, NULL);
    else if (strcmp(o.cmd, "support") == 0)
        rc = nnt_model_support(m, stdout, o.tsv) == NNT_OK ? 0 : fail(rt, NULL);
    else if (strcmp(o.cmd, "lens") == 0)
        rc = cmd_lens(rt, m, &o);
    else if (strcmp(o.cmd, "generate") == 0)
        rc = cmd_generate(rt, m, &o);
    else
        rc = cmd_trace(rt, m, &o);
done:
    nnt_model_free(m);
    nnt_runtime_close(rt);
    for (int i = 0; i < o.n_reqs; i++) free(o.reqs[i].path);
    return rc;
}

/* options.c - the nnt command's options: one table (name, value or flag, the commands that take
 * it, how it is read), the parse of argv into cli_opts, and the rules that hold between options
 * (each checked once, after every option is read). */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "plot.h"

typedef struct cli_option {
    const char *name;
    int takes_value;
    const char *commands; /* the commands that take it, space-separated; NULL: every command */
    int (*set)(cli_opts *o, const char *flag, const char *v);
    const char *elsewhere; /* the message when another command is given it */
} cli_option;

/* ---- setters: each returns 0 or 2 (message printed) ---- */

static int set_once(const char **slot, const char *flag, const char *v)
{
    if (*slot) return cli_usage_error("%s is given twice", flag);
    *slot = v;
    return 0;
}

static int set_model(cli_opts *o, const char *f, const char *v) { return set_once(&o->model, f, v); }
static int set_config(cli_opts *o, const char *f, const char *v) { return set_once(&o->config, f, v); }
static int set_remote(cli_opts *o, const char *f, const char *v) { return set_once(&o->remote, f, v); }
static int set_value(cli_opts *o, const char *f, const char *v) { return set_once(&o->value, f, v); }
static int set_metric(cli_opts *o, const char *f, const char *v) { return set_once(&o->metric, f, v); }
static int set_positions(cli_opts *o, const char *f, const char *v) { return set_once(&o->positions, f, v); }
static int set_request(cli_opts *o, const char *f, const char *v) { return set_once(&o->request_file, f, v); }
static int set_metric_positions(cli_opts *o, const char *f, const char *v) { return set_once(&o->metric_positions, f, v); }

/* Room for one more entry of *a (n used of *cap, each `size` bytes); 0 when there is no memory. */
static int grow(void **a, int n, int *cap, size_t size)
{
    if (n < *cap) return 1;
    int c = *cap ? 2 * *cap : 16;
    void *g = realloc(*a, (size_t)c * size);
    if (!g) return 0;
    *a = g;
    *cap = c;
    return 1;
}

static int set_grad(cli_opts *o, const char *f, const char *v)
{
    if (!*v) return cli_usage_error("%s: the value path is empty", f);
    if (!grow((void **)&o->grads, o->n_grads, &o->cap_grads, sizeof *o->grads)) return cli_usage_error("%s", "out of memory");
    o->grads[o->n_grads++] = v;
    return 0;
}

static int set_sae(cli_opts *o, const char *f, const char *v)
{
    const char *eq = strchr(v, '=');
    (void)f;
    if (!eq || eq == v || !eq[1])
        return cli_arg_error("--sae needs PATH=DIR (a value and a SAELens folder), got '%s'", v);
    if (!grow((void **)&o->saes, o->n_saes, &o->cap_saes, sizeof *o->saes))
        return cli_usage_error("%s", "out of memory");
    o->saes[o->n_saes++] = v;
    return 0;
}

static int set_out(cli_opts *o, const char *f, const char *v)
{
    int rc = set_once(&o->out, f, v);
    return rc ? rc : *v ? 0 : cli_arg_error("%s", "--out: the path is empty (expected FILE.safetensors)");
}

static int set_plot(cli_opts *o, const char *f, const char *v)
{
    int rc = set_once(&o->plot, f, v);
    if (rc) return rc;
    if (plot_format(v) < 0)
        return cli_arg_error("--plot %s: expected a file name ending in .png or .svg", v);
    return 0;
}

static int set_ig_steps(cli_opts *o, const char *f, const char *v)
{
    long n;
    if (cli_parse_int(v, 0, 1024, &n) != 0) return cli_arg_error("--ig-steps: '%s' is not an integer in 0..1024", v);
    o->ig_steps = (int)n;
    return 0;
}

static int set_batch(cli_opts *o, const char *f, const char *v)
{
    long n;
    if (cli_parse_int(v, 1, 4096, &n) != 0) return cli_arg_error("--batch: '%s' is not an integer in 1..4096", v);
    o->patch_rows = (int)n;
    return 0;
}

/* A repeatable option's value appended to *list. */
static int set_listed(const char ***list, int *n, int *cap, const char *f, const char *v)
{
    if (!*v) return cli_usage_error("%s: the value is empty", f);
    if (!grow((void **)list, *n, cap, sizeof **list)) return cli_usage_error("%s", "out of memory");
    (*list)[(*n)++] = v;
    return 0;
}

static int set_data(cli_opts *o, const char *f, const char *v) { return set_listed(&o->data, &o->n_data, &o->cap_data, f, v); }
static int set_reduce(cli_opts *o, const char *f, const char *v)
{
    return set_listed(&o->reduce, &o->n_reduce, &o->cap_reduce, f, v);
}
static int set_field(cli_opts *o, const char *f, const char *v) { return set_once(&o->field, f, v); }
static int set_stats(cli_opts *o, const char *f, const char *v) { return set_once(&o->stats, f, v); }

/* --format, --rows, --dtype: one word of a list. */
static int set_word(cli_opts *o, const char *f, const char *v)
{
    const char **slot = !strcmp(f, "--format") ? &o->format : !strcmp(f, "--rows") ? &o->rows_layout : &o->dtype;
    const char *words = !strcmp(f, "--format") ? "lines file jsonl" : !strcmp(f, "--rows") ? "pack split truncate"
                                                                                          : "f32 bf16 f16";
    int rc = set_once(slot, f, v);
    if (rc) return rc;
    size_t n = strlen(v);
    for (const char *p = words; *p;) {
        size_t w = strcspn(p, " ");
        if (w == n && !strncmp(p, v, n)) return 0;
        p += w + (p[w] == ' ');
    }
    return cli_arg_error("%s: '%s' is not one of: %s", f, v, words);
}

static int set_harvest_number(cli_opts *o, const char *f, const char *v)
{
    long n;
    if (!strcmp(f, "--context")) {
        if (cli_parse_int(v, 1, 1048576, &n) != 0) return cli_arg_error("--context: '%s' is not an integer in 1..1048576", v);
        o->context = (int)n;
    } else if (!strcmp(f, "--top-tokens")) {
        if (cli_parse_int(v, 1, 65536, &n) != 0) return cli_arg_error("--top-tokens: '%s' is not an integer in 1..65536", v);
        o->top_tokens = (int)n;
    } else if (!strcmp(f, "--max-tokens")) {
        if (cli_parse_int(v, 1, CLI_BLOCK_MAX, &n) != 0)
            return cli_arg_error("--max-tokens: '%s' is not an integer in 1..%ld", v, CLI_BLOCK_MAX);
        o->max_tokens = n;
    } else {
        float mb;
        if (cli_parse_real(v, 0, 1048576, &mb) != 0 || !(mb > 0))
            return cli_arg_error("--shard-mb: '%s' is not a number of MiB in (0, 1048576]", v);
        o->shard_mb = mb;
    }
    return 0;
}

/* --top-features / --top-contexts PATH=K. */
static int set_top(cli_opts *o, const char *f, const char *v)
{
    const char *eq = strrchr(v, '=');
    long k;
    int contexts = !strcmp(f, "--top-contexts");
    if (!eq || eq == v || cli_parse_int(eq + 1, 1, contexts ? 4096 : 65536, &k) != 0)
        return cli_arg_error("%s %s: expected PATH=K, K an integer in 1..%d", f, v, contexts ? 4096 : 65536);
    if (o->n_top == o->cap_top) {
        int cap = o->cap_top ? 2 * o->cap_top : 8;
        char **p = realloc(o->top_paths, (size_t)cap * sizeof *p);
        if (p) o->top_paths = p;
        int *a = p ? realloc(o->top_count, (size_t)cap * sizeof *a) : NULL;
        if (a) o->top_count = a;
        int *b = a ? realloc(o->top_context, (size_t)cap * sizeof *b) : NULL;
        if (b) o->top_context = b;
        if (!b) return cli_usage_error("%s", "out of memory");
        o->cap_top = cap;
    }
    o->top_paths[o->n_top] = strndup(v, (size_t)(eq - v));
    if (!o->top_paths[o->n_top]) return cli_usage_error("%s", "out of memory");
    o->top_count[o->n_top] = (int)k;
    o->top_context[o->n_top++] = contexts;
    return 0;
}

static int set_prompt_pair(cli_opts *o, const char *f, const char *v)
{
    int clean = f[3] == 'l';
    cli_row *ra = clean ? &o->clean : &o->corrupt;
    if (ra->arg) return cli_usage_error("the %s prompt is given twice", clean ? "clean" : "corrupted");
    *ra = (cli_row){strstr(f, "-tokens") ? ROW_TOKENS : ROW_PROMPT, v};
    return 0;
}

static int set_row(cli_opts *o, const char *f, const char *v)
{
    if (o->n_rows == CLI_MAX_ROWS)
        return cli_usage_error("at most %s rows (--tokens, --tokens-file, --prompt, --prompt-file)", "64");
    cli_row_kind kind = !strcmp(f, "--tokens")        ? ROW_TOKENS
                        : !strcmp(f, "--tokens-file") ? ROW_TOKENS_FILE
                        : !strcmp(f, "--prompt")      ? ROW_PROMPT
                                                      : ROW_FILE;
    o->rows[o->n_rows++] = (cli_row){kind, v};
    o->n_text_rows += kind == ROW_PROMPT || kind == ROW_FILE;
    return 0;
}

static int set_stop_id(cli_opts *o, const char *f, const char *v)
{
    long n;
    if (cli_parse_int(v, 0, CLI_BLOCK_MAX, &n) != 0)
        return cli_arg_error("--stop-id: '%s' is not a token id (an integer in 0..%ld)", v, CLI_BLOCK_MAX);
    if (o->n_stop_ids == CLI_MAX_STOP) return cli_usage_error("at most %s --stop-id options", "64");
    o->stop_ids[o->n_stop_ids++] = (int32_t)n;
    return 0;
}

static int set_max_new(cli_opts *o, const char *f, const char *v)
{
    long n;
    if (cli_parse_int(v, 1, 1000000, &n) != 0)
        return cli_arg_error("--max-new-tokens: '%s' is not an integer in 1..1000000", v);
    o->max_new_tokens = (int)n;
    return 0;
}

static int set_temperature(cli_opts *o, const char *f, const char *v)
{
    if (cli_parse_real(v, 0, CLI_FACTOR_MAX, &o->temperature) != 0)
        return cli_arg_error("--temperature: '%s' is not a number in 0.." CLI_FACTOR_MAX_TEXT, v);
    return 0;
}

static int set_top_k(cli_opts *o, const char *f, const char *v)
{
    long n;
    if (cli_parse_int(v, 0, CLI_BLOCK_MAX, &n) != 0)
        return cli_arg_error("--top-k: '%s' is not an integer in 0..%ld", v, CLI_BLOCK_MAX);
    o->top_k = (int)n;
    return 0;
}

static int set_top_p(cli_opts *o, const char *f, const char *v)
{
    if (cli_parse_real(v, 0, 1, &o->top_p) != 0 || o->top_p <= 0)
        return cli_arg_error("--top-p: '%s' is not a number in (0, 1]", v);
    return 0;
}

static int set_seed(cli_opts *o, const char *f, const char *v)
{
    if (cli_parse_u64(v, &o->seed) != 0)
        return cli_arg_error("--seed: '%s' is not an integer in 0..18446744073709551615", v);
    return 0;
}

static int set_steer_factor(cli_opts *o, const char *f, const char *v)
{
    if (cli_parse_real(v, -CLI_FACTOR_MAX, CLI_FACTOR_MAX, &o->steer_factor) != 0)
        return cli_arg_error("--steer-factor: '%s' is not a finite number with |F| <= " CLI_FACTOR_MAX_TEXT, v);
    o->steer_pending = 1;
    return 0;
}

static int set_steer_positions(cli_opts *o, const char *f, const char *v)
{
    free(o->pending_positions);
    o->pending_positions = NULL;
    o->steer_pending = 1;
    return cli_parse_positions(f, v, &o->pending_positions, &o->n_pending_positions);
}

static int set_flag(cli_opts *o, const char *f, const char *v)
{
    if (!strcmp(f, "--tsv")) o->tsv = 1;
    else if (!strcmp(f, "--ids")) o->ids_only = 1;
    else if (!strcmp(f, "--no-special")) o->no_special = 1;
    else if (!strcmp(f, "--print-request")) o->print_request = 1;
    else if (!strcmp(f, "--skip-bad")) o->skip_bad = 1;
    else if (!strcmp(f, "--routing-stats")) o->routing_stats = 1;
    else o->ignore_eos = 1;
    return 0;
}

/* ---- the requests (--save, --zero, ...), in the order given ---- */

/* FILE[:KEY] of --set, --add and --steer: KEY is what follows the last ':' unless that part
 * names a .safetensors file (a file name with a colon and no key). */
static int split_file_key(cli_req *r)
{
    const char *colon = strrchr(r->arg, ':');
    int has_key = colon && strstr(colon, ".safetensors") == NULL;
    size_t n = has_key ? (size_t)(colon - r->arg) : strlen(r->arg);
    r->file = malloc(n + 1);
    if (!r->file) return cli_arg_error("%s", "out of memory");
    memcpy(r->file, r->arg, n);
    r->file[n] = '\0';
    r->key = has_key ? colon + 1 : NULL;
    if (!*r->file) return cli_arg_error("%s %s: no file before the key", r->flag, r->text);
    return 0;
}

/* Reads the numbers and files of a request given as `flag text`. */
static int read_request(cli_req *r)
{
    switch (r->kind) {
    case R_SCALE:
        if (cli_parse_real(r->arg, -CLI_FACTOR_MAX, CLI_FACTOR_MAX, &r->factor) != 0)
            return cli_arg_error("--scale %s: '%s' is not a finite number with |F| <= " CLI_FACTOR_MAX_TEXT, r->text,
                                 r->arg);
        return 0;
    case R_ABLATE: {
        if (!r->arg) return cli_arg_error("--ablate-expert %s: expected LAYER:EXPERT", r->text);
        int rc = cli_parse_pair("--ablate-expert", r->text, "LAYER:EXPERT", 0, &r->a, &r->b);
        if (rc == 0 && strchr(r->arg, ':')) return cli_arg_error("--ablate-expert %s: expected LAYER:EXPERT", r->text);
        return rc;
    }
    case R_SKIP: return cli_parse_pair("--skip-layers", r->path, "START:END", 0, &r->a, &r->b);
    case R_STEPS: return cli_parse_pair("--steps", r->path, "FROM[:TO]", 1, &r->a, &r->b);
    case R_STEER: {
        int rc = cli_parse_pair("--steer", r->path, "block numbers FIRST[:LAST]", 0, &r->a, &r->b);
        return rc ? rc : split_file_key(r);
    }
    case R_SET:
    case R_ADD: return split_file_key(r);
    case R_FILL:
        if (cli_parse_real(r->arg, -CLI_FACTOR_MAX, CLI_FACTOR_MAX, &r->factor) != 0)
            return cli_arg_error("--fill %s: '%s' is not a finite number with |F| <= " CLI_FACTOR_MAX_TEXT, r->text,
                                 r->arg);
        return 0;
    default: return 0;
    }
}

static const struct {
    const char *flag;
    cli_req_kind kind;
    char sep; /* the separator of the argument, 0: none */
} REQUESTS[] = {
    {"--save", R_SAVE, 0},        {"--zero", R_ZERO, 0},        {"--scale", R_SCALE, '='},
    {"--set", R_SET, '='},        {"--add", R_ADD, '='},        {"--ablate-expert", R_ABLATE, ':'},
    {"--skip-layers", R_SKIP, 0}, {"--steer", R_STEER, '='},    {"--steps", R_STEPS, 0},
    {"--fill", R_FILL, '='},
};

static int set_req(cli_opts *o, const char *f, const char *v)
{
    size_t k = 0;
    while (strcmp(f, REQUESTS[k].flag) != 0) k++;
    if (!grow((void **)&o->reqs, o->n_reqs, &o->cap_reqs, sizeof *o->reqs)) return cli_usage_error("%s", "out of memory");
    cli_req *q = &o->reqs[o->n_reqs++];
    *q = (cli_req){.kind = REQUESTS[k].kind, .flag = REQUESTS[k].flag, .text = v, .path = strdup(v)};
    if (!q->path) return cli_usage_error("%s", "out of memory");
    if (REQUESTS[k].sep) {
        char *sep = strchr(q->path, REQUESTS[k].sep);
        if (!sep) {
            fprintf(stderr, "nnt: %s needs %s, got '%s'\n", f,
                    q->kind == R_ABLATE ? "LAYER:EXPERT" : q->kind == R_STEER ? "FIRST[:LAST]=FILE[:KEY]" : "PATH=VALUE", v);
            return 2;
        }
        *sep = '\0';
        q->arg = sep + 1;
    }
    if (q->kind == R_STEER) {
        q->factor = o->steer_factor;
        if (o->pending_positions) {
            q->positions = malloc((size_t)o->n_pending_positions * sizeof *q->positions);
            if (!q->positions) return cli_usage_error("%s", "out of memory");
            memcpy(q->positions, o->pending_positions, (size_t)o->n_pending_positions * sizeof *q->positions);
            q->n_positions = o->n_pending_positions;
        }
        o->steer_pending = 0;
    }
    return read_request(q);
}

/* ---- the table ---- */

#define RUNS "trace lens patch generate attribute harvest"
#define HARVEST_ONLY "is an option of harvest"
#define ROWS_TAKERS "trace lens generate tokenize"
#define GEN_ONLY "is an option of generate"
#define PATCH_ONLY "--clean, --corrupt, --clean-tokens, --corrupt-tokens and --value are options of patch and attribute"

static const cli_option OPTIONS[] = {
    {"--model", 1, NULL, set_model, NULL},
    {"--config", 1, NULL, set_config, NULL},
    {"--remote", 1, "trace lens generate", set_remote, "--remote is an option of trace, lens and generate"},
    {"--out", 1, NULL, set_out, NULL},
    {"--tokens", 1, NULL, set_row, NULL},
    {"--prompt", 1, NULL, set_row, NULL},
    {"--prompt-file", 1, NULL, set_row, NULL},
    {"--tokens-file", 1, NULL, set_row, NULL},
    {"--max-new-tokens", 1, "generate", set_max_new, GEN_ONLY},
    {"--temperature", 1, "generate", set_temperature, GEN_ONLY},
    {"--top-k", 1, "generate", set_top_k, GEN_ONLY},
    {"--top-p", 1, "generate", set_top_p, GEN_ONLY},
    {"--seed", 1, "generate", set_seed, GEN_ONLY},
    {"--stop-id", 1, "generate", set_stop_id, GEN_ONLY},
    {"--ignore-eos", 0, "generate", set_flag, GEN_ONLY},
    {"--steer-factor", 1, NULL, set_steer_factor, NULL},
    {"--steer-positions", 1, NULL, set_steer_positions, NULL},
    {"--positions", 1, "lens patch harvest", set_positions,
     "--positions is an option of lens, patch and harvest (steering takes --steer-positions)"},
    {"--clean", 1, "patch attribute", set_prompt_pair, PATCH_ONLY},
    {"--corrupt", 1, "patch attribute", set_prompt_pair, PATCH_ONLY},
    {"--clean-tokens", 1, "patch attribute", set_prompt_pair, PATCH_ONLY},
    {"--corrupt-tokens", 1, "patch attribute", set_prompt_pair, PATCH_ONLY},
    {"--value", 1, "patch attribute", set_value, PATCH_ONLY},
    {"--metric", 1, "patch attribute trace", set_metric,
     "--metric is an option of patch, attribute and trace (with --grad)"},
    {"--ig-steps", 1, "attribute", set_ig_steps, "--ig-steps is an option of attribute"},
    {"--grad", 1, "trace", set_grad, "--grad is an option of trace"},
    {"--metric-positions", 1, "trace", set_metric_positions, "--metric-positions is an option of trace (with --grad)"},
    {"--batch", 1, "patch harvest", set_batch, "--batch is an option of patch and harvest"},
    {"--data", 1, "harvest", set_data, HARVEST_ONLY},
    {"--field", 1, "harvest", set_field, HARVEST_ONLY},
    {"--format", 1, "harvest", set_word, HARVEST_ONLY},
    {"--rows", 1, "harvest", set_word, HARVEST_ONLY},
    {"--dtype", 1, "harvest", set_word, HARVEST_ONLY},
    {"--context", 1, "harvest", set_harvest_number, HARVEST_ONLY},
    {"--shard-mb", 1, "harvest", set_harvest_number, HARVEST_ONLY},
    {"--max-tokens", 1, "harvest", set_harvest_number, HARVEST_ONLY},
    {"--top-tokens", 1, "harvest", set_harvest_number, HARVEST_ONLY},
    {"--skip-bad", 0, "harvest", set_flag, HARVEST_ONLY},
    {"--reduce", 1, "harvest", set_reduce, HARVEST_ONLY},
    {"--routing-stats", 0, "harvest", set_flag, HARVEST_ONLY},
    {"--top-features", 1, "harvest", set_top, HARVEST_ONLY},
    {"--top-contexts", 1, "harvest", set_top, HARVEST_ONLY},
    {"--stats", 1, "experts", set_stats, "--stats is an option of experts"},
    {"--plot", 1, "lens patch attribute trace experts", set_plot,
     "--plot is an option of lens, patch, attribute, trace and experts"},
    {"--request", 1, RUNS, set_request, "--request is an option of trace, lens, patch, attribute and generate"},
    {"--print-request", 0, RUNS, set_flag,
     "--print-request is an option of trace, lens, patch, attribute and generate"},
    {"--tsv", 0, NULL, set_flag, NULL},
    {"--ids", 0, "tokenize", set_flag, "--ids is an option of tokenize"},
    {"--no-special", 0, NULL, set_flag, NULL},
    {"--save", 1, NULL, set_req, NULL},
    {"--zero", 1, NULL, set_req, NULL},
    {"--scale", 1, NULL, set_req, NULL},
    {"--set", 1, NULL, set_req, NULL},
    {"--add", 1, NULL, set_req, NULL},
    {"--ablate-expert", 1, NULL, set_req, NULL},
    {"--skip-layers", 1, NULL, set_req, NULL},
    {"--steer", 1, NULL, set_req, NULL},
    {"--steps", 1, "generate", set_req, "--steps " GEN_ONLY},
    {"--sae", 1, "trace lens generate harvest", set_sae, "--sae is an option of trace, lens, generate and harvest"},
    {"--fill", 1, NULL, set_req, NULL},
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof *OPTIONS))
/* cli_opts.given has a bit per option */
_Static_assert(sizeof OPTIONS / sizeof *OPTIONS <= 64, "more options than bits in cli_opts.given");

static int option_index(const char *a)
{
    for (int i = 0; i < N_OPTIONS; i++)
        if (!strcmp(a, OPTIONS[i].name)) return i;
    return -1;
}

/* 1 when cmd is one of the space-separated words of list. */
static int listed(const char *list, const char *cmd)
{
    size_t n = strlen(cmd);
    for (const char *p = list; (p = strstr(p, cmd)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || !p[n])) return 1;
    return 0;
}

/* ---- rules between options ---- */

/* Options given to a command that does not take them. */
static int check_commands(const cli_opts *o)
{
    for (int i = 0; i < N_OPTIONS; i++) {
        const cli_option *op = &OPTIONS[i];
        if (!(o->given >> i & 1) || !op->commands || listed(op->commands, o->cmd_name)) continue;
        if (!strcmp(op->elsewhere, GEN_ONLY)) return cli_usage_error("%s " GEN_ONLY, op->name);
        if (!strcmp(op->elsewhere, HARVEST_ONLY)) return cli_usage_error("%s " HARVEST_ONLY, op->name);
        return cli_usage_error("%s", op->elsewhere);
    }
    return 0;
}

/* The rows: all ids or all text, and only for the commands that read rows. */
static int check_rows(cli_opts *o, int tokenize)
{
    if (o->n_text_rows && o->n_text_rows < o->n_rows)
        return cli_usage_error("%s", "--tokens and --tokens-file cannot be mixed with --prompt or --prompt-file: give "
                                     "every row as token ids or every row as text");
    if (tokenize) {
        if (o->n_rows > o->n_text_rows)
            return cli_usage_error("%s", "tokenize reads text; --tokens and --tokens-file give ids already");
        if (o->n_rows + (o->text != NULL) != 1)
            return cli_usage_error("%s", (o->n_rows + (o->text != NULL)) ? "tokenize reads one text"
                                                                        : "tokenize needs a text: nnt tokenize --model DIR \"text\"");
        if (o->n_reqs || o->out) return cli_usage_error("%s", "tokenize takes no requests and no --out");
    }
    if (o->n_rows && !listed(ROWS_TAKERS, o->cmd_name) && strcmp(o->cmd_name, "patch") && strcmp(o->cmd_name, "attribute"))
        return cli_usage_error("%s takes no --tokens, --tokens-file, --prompt or --prompt-file", o->cmd_name);
    int text = o->n_text_rows || (o->clean.arg && o->clean.kind == ROW_PROMPT);
    if (o->no_special && !text && !tokenize && strcmp(o->cmd_name, "harvest"))
        return cli_usage_error("%s", "--no-special applies to text: tokenize, --prompt and --prompt-file");
    return 0;
}

/* patch's and attribute's own rules; their prompts become rows 0 and 1. */
static int check_patch(cli_opts *o)
{
    const char *cmd = o->cmd_name;
    if (o->n_rows) return cli_usage_error("%s reads --clean and --corrupt (or --clean-tokens and --corrupt-tokens), "
                                          "not --tokens, --tokens-file, --prompt or --prompt-file", cmd);
    if (o->n_reqs) return cli_usage_error("%s takes no requests (--save, --set, ...): it makes its own edits", cmd);
    if (o->request_file) return 0;
    if (!o->clean.arg || !o->corrupt.arg)
        return cli_usage_error("%s needs a clean and a corrupted prompt: --clean \"text\" --corrupt \"text\" or "
                               "--clean-tokens \"ID ...\" --corrupt-tokens \"ID ...\"", cmd);
    if (o->clean.kind != o->corrupt.kind)
        return cli_usage_error("%s: give both prompts as text (--clean, --corrupt) or both as token ids "
                               "(--clean-tokens, --corrupt-tokens)", cmd);
    if (!o->metric) return cli_usage_error("%s needs --metric logit-diff:A,B, --metric prob:T or --metric logprob:T", cmd);
    o->rows[0] = o->clean;
    o->rows[1] = o->corrupt;
    o->n_rows = 2;
    o->n_text_rows = o->clean.kind == ROW_PROMPT ? 2 : 0;
    return 0;
}

/* harvest's own rules. */
static int check_harvest(const cli_opts *o)
{
    if (!o->n_data) return cli_usage_error("%s", "harvest needs --data FILE (repeatable): the corpus");
    if (!o->out && !o->print_request) return cli_usage_error("%s", "harvest needs --out DIR: the folder it writes");
    if (!o->context) return cli_usage_error("%s", "harvest needs --context T: the tokens per row");
    if (o->field && o->format && strcmp(o->format, "jsonl"))
        return cli_usage_error("%s", "--field names the text member of JSON Lines records: give --format jsonl");
    if (o->top_tokens && !o->routing_stats)
        return cli_usage_error("%s", "--top-tokens sizes the routing statistics: give --routing-stats too");
    return 0;
}

/* --request gives the whole request: rows, requests and method settings are not also given. */
static int check_request_file(const cli_opts *o)
{
    if (!o->request_file) return 0;
    int harvest = !strcmp(o->cmd_name, "harvest"); /* its --positions, --batch, --no-special are its own */
    if (o->n_rows || o->n_reqs || o->n_saes || o->clean.arg || o->corrupt.arg || o->value || o->metric ||
        (o->patch_rows && !harvest) || o->n_grads || o->metric_positions || o->ig_steps ||
        (o->positions && !harvest) || o->max_new_tokens >= 0 || o->given >> option_index("--temperature") & 1 ||
        o->top_k || o->given >> option_index("--top-p") & 1 || o->seed || o->n_stop_ids || o->ignore_eos ||
        (o->no_special && !harvest))
        return cli_usage_error("--request %s gives the whole request (rows, requests, the method's settings): leave out "
                               "the options that would give them again",
                               o->request_file);
    return 0;
}

static int check_rules(cli_opts *o)
{
    int tokenize = !strcmp(o->cmd_name, "tokenize"), rc;
    if (o->steer_pending)
        return cli_usage_error("%s", "--steer-factor and --steer-positions apply to the --steer options after them; none follows");
    if ((rc = check_commands(o)) || (rc = check_rows(o, tokenize))) return rc;
    if (!strcmp(o->cmd_name, "generate") && o->temperature == 0.0f && (o->top_k != 0 || o->top_p != 1.0f))
        return cli_usage_error("%s", "--top-k and --top-p filter sampling: give --temperature > 0 too (0 is greedy)");
    if ((!strcmp(o->cmd_name, "patch") || !strcmp(o->cmd_name, "attribute")) && (rc = check_patch(o))) return rc;
    if (!strcmp(o->cmd_name, "trace") && !o->request_file && (o->n_grads > 0) != (o->metric != NULL))
        return cli_usage_error("%s", o->n_grads ? "--grad needs the scalar it differentiates: --metric logit-diff:A,B, "
                                                  "prob:T, logprob:T or loss"
                                                : "trace --metric is the scalar of a gradient: give --grad PATH too");
    if (o->metric_positions && !o->metric)
        return cli_usage_error("%s", "--metric-positions says where --metric is read: give --metric too");
    if (!strcmp(o->cmd_name, "generate") && o->max_new_tokens < 0 && !o->request_file)
        return cli_usage_error("%s", "generate needs --max-new-tokens N");
    if (!strcmp(o->cmd_name, "lens"))
        for (int q = 0; q < o->n_reqs; q++)
            if (o->reqs[q].kind == R_SAVE)
                return cli_usage_error("%s", "lens saves every block's output itself; --save belongs to trace and generate");
    if (!strcmp(o->cmd_name, "harvest") && (rc = check_harvest(o))) return rc;
    return check_request_file(o);
}

/* ---- the parse ---- */

int cli_parse(int argc, char **argv, cli_opts *o)
{
    memset(o, 0, sizeof *o);
    o->top_p = 1.0f;
    o->max_new_tokens = -1;
    o->steer_factor = 1.0f;
    if (argc < 2) return cli_usage_error("%s", "missing command");
    o->cmd_name = argv[1];
    o->cmd = cli_command_find(o->cmd_name);
    if (!o->cmd) return cli_usage_error("unknown command '%s'", o->cmd_name);
    int tokenize = !strcmp(o->cmd_name, "tokenize"), options_end = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        /* tokenize's text: its one positional argument ("--" first when it starts with '-') */
        if (tokenize && (options_end || a[0] != '-' || !a[1])) {
            if (o->text) return cli_usage_error("%s", "tokenize reads one text (quote it to pass spaces)");
            o->text = a;
            continue;
        }
        if (tokenize && !strcmp(a, "--")) {
            options_end = 1;
            continue;
        }
        int k = option_index(a);
        if (k < 0) return cli_usage_error(a[0] == '-' ? "unknown option %s" : "unexpected argument '%s'", a);
        o->given |= 1ull << k;
        const char *v = NULL;
        if (OPTIONS[k].takes_value) {
            if (i + 1 >= argc) return cli_usage_error("option %s needs a value", a);
            v = argv[++i];
        }
        int rc = OPTIONS[k].set(o, a, v);
        if (rc) return rc;
    }
    free(o->pending_positions);
    o->pending_positions = NULL;
    return check_rules(o);
}

void cli_opts_free(cli_opts *o)
{
    for (int i = 0; i < o->n_reqs; i++) {
        free(o->reqs[i].path);
        free(o->reqs[i].file);
        free(o->reqs[i].positions);
    }
    o->n_reqs = 0;
    free(o->reqs);
    free(o->saes);
    o->reqs = NULL;
    o->cap_reqs = 0;
    free(o->grads);
    o->grads = NULL;
    for (int i = 0; i < o->n_top; i++) free(o->top_paths[i]);
    free(o->top_paths);
    free(o->top_count);
    free(o->top_context);
    o->top_paths = NULL;
    o->top_count = o->top_context = NULL;
    o->n_top = o->cap_top = 0;
    free(o->data);
    free(o->reduce);
    o->data = o->reduce = NULL;
    o->n_data = o->n_reduce = 0;
    o->n_grads = o->cap_grads = 0;
    free(o->pending_positions);
    o->pending_positions = NULL;
}

/* nnt.c - the `nnt` command line: print a model's module tree, list the standard values it
 * serves, and trace a forward pass, saving and editing values by path. */
#include <errno.h>
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
    "  print   --model DIR                 module tree with native and standard names, value layouts\n"
    "  support --model DIR [--tsv]         every standard value per host and block, served or not and why\n"
    "  trace   --model DIR --tokens \"ID ID ...\" [--tokens ...]   run the forward (one --tokens per row;\n"
    "          shorter rows are left-padded)\n"
    "          --save PATH        save a value (repeatable; 'layers.*.layer_output' saves every block)\n"
    "          --zero PATH        zero a value before the forward uses it\n"
    "          --scale PATH=F     multiply a value by F\n"
    "          --set PATH=FILE[:KEY]  replace a value by a tensor from a safetensors file\n"
    "          --add PATH=FILE[:KEY]  add a tensor (broadcast over leading axes) to a value\n"
    "          --ablate-expert LAYER:E  zero expert E's weight wherever block LAYER routes to it\n"
    "          --out FILE.safetensors   write every saved value under its path\n"
    "  plugins                             loaded plugins and the backend of each family\n"
    "\n"
    "common options: --config FILE (else $NNT_CONFIG, else the build tree's nnt.ini)\n";

typedef struct req {
    enum { R_SAVE, R_ZERO, R_SCALE, R_SET, R_ADD, R_ABLATE } kind;
    char *path;
    char *arg;
} req;

typedef struct opts {
    const char *cmd, *model, *config, *out;
    int tsv;
    const char *tokens[MAX_ROWS];
    int n_rows;
    req reqs[MAX_REQ];
    int n_reqs;
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

static int parse_args(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    if (argc < 2) return usage_error("%s", "missing command");
    o->cmd = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int has_next = i + 1 < argc;
#define NEXT()                                                                                                         \
    (has_next ? argv[++i] : NULL)
        if (strcmp(a, "--tsv") == 0) {
            o->tsv = 1;
            continue;
        }
        if (!has_next) return usage_error("option %s needs a value", a);
        const char *v = NEXT();
        if (strcmp(a, "--model") == 0)
            o->model = v;
        else if (strcmp(a, "--config") == 0)
            o->config = v;
        else if (strcmp(a, "--out") == 0)
            o->out = v;
        else if (strcmp(a, "--tokens") == 0) {
            if (o->n_rows == MAX_ROWS) return usage_error("at most %s --tokens rows", "64");
            o->tokens[o->n_rows++] = v;
        } else {
            req r = {0};
            if (strcmp(a, "--save") == 0)
                r.kind = R_SAVE;
            else if (strcmp(a, "--zero") == 0)
                r.kind = R_ZERO;
            else if (strcmp(a, "--scale") == 0)
                r.kind = R_SCALE;
            else if (strcmp(a, "--set") == 0)
                r.kind = R_SET;
            else if (strcmp(a, "--add") == 0)
                r.kind = R_ADD;
            else if (strcmp(a, "--ablate-expert") == 0)
                r.kind = R_ABLATE;
            else
                return usage_error("unknown option %s", a);
            if (o->n_reqs == MAX_REQ) return usage_error("too many requests (max %s)", "256");
            r.path = strdup(v);
            if (r.kind == R_SCALE || r.kind == R_SET || r.kind == R_ADD || r.kind == R_ABLATE) {
                char *eq = strchr(r.path, r.kind == R_ABLATE ? ':' : '=');
                if (!eq) {
                    const char *form = r.kind == R_ABLATE ? "--ablate-expert needs LAYER:EXPERT, got '%s'" : "%s needs PATH=VALUE";
                    int rc = usage_error(form, r.kind == R_ABLATE ? v : a);
                    free(r.path);
                    return rc;
                }
                *eq = '\0';
                r.arg = eq + 1;
            }
            o->reqs[o->n_reqs++] = r;
        }
#undef NEXT
    }
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

static int cmd_trace(nnt_runtime *rt, nnt_model *m, const opts *o)
{
    if (o->n_rows == 0) return usage_error("%s", "trace needs at least one --tokens row");
    int32_t *rows[MAX_ROWS];
    int lens[MAX_ROWS], seq = 0, rc = 1;
    for (int r = 0; r < o->n_rows; r++) {
        if (parse_tokens(o->tokens[r], &rows[r], &lens[r]) != 0) {
            for (int q = 0; q < r; q++) free(rows[q]);
            return 2;
        }
        seq = lens[r] > seq ? lens[r] : seq;
    }
    int B = o->n_rows;
    int32_t *ids = calloc((size_t)B * seq, sizeof *ids), *mask = calloc((size_t)B * seq, sizeof *mask);
    nnt_trace *t = NULL;
    nnt_tensor loaded[MAX_REQ];
    int n_loaded = 0;
    int user_saved_probs = 0;
    if (!ids || !mask) goto out;
    for (int r = 0; r < B; r++) /* left padding */
        for (int s = 0; s < lens[r]; s++) {
            ids[r * seq + seq - lens[r] + s] = rows[r][s];
            mask[r * seq + seq - lens[r] + s] = 1;
        }
    if (nnt_trace_new(m, &t) != NNT_OK) {
        fail(rt, "trace");
        goto out;
    }
    for (int i = 0; i < o->n_reqs; i++) {
        const req *q = &o->reqs[i];
        nnt_status st = NNT_OK;
        switch (q->kind) {
        case R_SAVE:
            st = nnt_trace_save(t, q->path);
            if (strcmp(q->path, "next_token_probs") == 0 || strcmp(q->path, "model.next_token_probs") == 0)
                user_saved_probs = 1;
            break;
        case R_ZERO: st = nnt_trace_zero(t, q->path); break;
        case R_SCALE: {
            char *end;
            double f = strtod(q->arg, &end);
            if (end == q->arg || *end) {
                fprintf(stderr, "nnt: --scale %s=%s: '%s' is not a number\n", q->path, q->arg, q->arg);
                rc = 2;
                goto out;
            }
            st = nnt_trace_scale(t, q->path, (float)f);
            break;
        }
        case R_SET:
        case R_ADD: {
            char file[1024];
            snprintf(file, sizeof file, "%s", q->arg);
            char *key = strrchr(file, ':');
            if (key && strstr(key, ".safetensors") == NULL) *key++ = '\0';
            else key = NULL;
            if (nnt_safetensors_read(rt, file, key, &loaded[n_loaded]) != NNT_OK) {
                fail(rt, q->kind == R_SET ? "--set" : "--add");
                goto out;
            }
            const nnt_tensor *v = &loaded[n_loaded++];
            st = q->kind == R_SET ? nnt_trace_set(t, q->path, v) : nnt_trace_add(t, q->path, v, 1.0f);
            break;
        }
        case R_ABLATE: {
            char *end;
            long layer = strtol(q->path, &end, 10);
            long e = strtol(q->arg, &end, 10);
            if (*end || end == q->arg) {
                fprintf(stderr, "nnt: --ablate-expert %s:%s: expected integers LAYER:EXPERT\n", q->path, q->arg);
                rc = 2;
                goto out;
            }
            char wpath[64], ipath[64];
            snprintf(wpath, sizeof wpath, "layers.%ld.mlp.expert_weights", layer);
            snprintf(ipath, sizeof ipath, "layers.%ld.mlp.expert_indices", layer);
            st = nnt_trace_masked_fill(t, wpath, ipath, e, 0.0f);
            break;
        }
        }
        if (st != NNT_OK) {
            fail(rt, NULL);
            goto out;
        }
    }
    if (!user_saved_probs && nnt_trace_save(t, "next_token_probs") != NNT_OK) {
        fail(rt, NULL);
        goto out;
    }
    if (nnt_trace_run(t, ids, mask, B, seq) != NNT_OK) {
        fail(rt, "forward");
        goto out;
    }
    const nnt_tensor *probs = NULL;
    int shown = 0;
    for (int i = 0; i < nnt_trace_result_count(t); i++) {
        const char *path;
        const nnt_tensor *v;
        nnt_trace_result(t, i, &path, &v);
        if (strcmp(path, "next_token_probs") == 0) {
            probs = v;
            if (!user_saved_probs) continue;
        }
        if (!shown++) printf("saved values (%d rows, %d positions):\n", B, seq);
        describe(path, v);
    }
    if (o->out) {
        if (nnt_trace_write_safetensors(t, o->out) != NNT_OK) {
            fail(rt, "--out");
            goto out;
        }
        printf("wrote %d values to %s\n", shown, o->out);
    }
    if (probs) {
        int64_t V = probs->shape[1];
        for (int r = 0; r < B; r++) {
            const float *p = (const float *)probs->data + (int64_t)r * V;
            int top[5] = {-1, -1, -1, -1, -1};
            for (int k = 0; k < 5 && k < V; k++)
                for (int64_t v = 0; v < V; v++) {
                    int taken = 0;
                    for (int q = 0; q < k; q++) taken |= top[q] == v;
                    if (!taken && (top[k] < 0 || p[v] > p[top[k]])) top[k] = (int)v;
                }
            printf("top 5 next tokens, row %d:", r);
            for (int k = 0; k < 5 && top[k] >= 0; k++) printf("  %d (%.4f)", top[k], p[top[k]]);
            printf("\n");
        }
    }
    rc = 0;
out:
    for (int i = 0; i < n_loaded; i++) nnt_tensor_free(&loaded[i]);
    nnt_trace_free(t);
    free(ids);
    free(mask);
    for (int r = 0; r < o->n_rows; r++) free(rows[r]);
    return rc;
}

int main(int argc, char **argv)
{
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc != 0) return rc;
    if (strcmp(o.cmd, "help") == 0 || strcmp(o.cmd, "--help") == 0 || strcmp(o.cmd, "-h") == 0) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (strcmp(o.cmd, "print") && strcmp(o.cmd, "support") && strcmp(o.cmd, "trace") && strcmp(o.cmd, "plugins"))
        return usage_error("unknown command '%s'", o.cmd);
    nnt_runtime *rt = NULL;
    if (nnt_runtime_open(o.config, &rt) != NNT_OK) {
        rc = fail(rt, "cannot start");
        nnt_runtime_close(rt);
        return rc;
    }
    nnt_model *m = NULL;
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
    if (nnt_model_load(rt, o.model, &m) != NNT_OK) {
        rc = fail(rt, "cannot load the model");
        goto done;
    }
    if (strcmp(o.cmd, "print") == 0)
        rc = nnt_model_print(m, stdout) == NNT_OK ? 0 : fail(rt, NULL);
    else if (strcmp(o.cmd, "support") == 0)
        rc = nnt_model_support(m, stdout, o.tsv) == NNT_OK ? 0 : fail(rt, NULL);
    else
        rc = cmd_trace(rt, m, &o);
done:
    nnt_model_free(m);
    nnt_runtime_close(rt);
    for (int i = 0; i < o.n_reqs; i++) free(o.reqs[i].path);
    return rc;
}

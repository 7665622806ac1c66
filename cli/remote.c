/* remote.c - `nnt trace|lens|generate --remote URL`: the request the options make is sent to a
 * model that `nnt serve` holds (docs/server.md) instead of run here, through libcurl; the answer's
 * safetensors become --out byte for byte and are printed much as the local command prints its
 * results (token text when --model names a folder with the model's tokenizer, ids otherwise; the
 * lens table without the prompt's own tokens, which the answer does not hold). A generation is
 * asked for as server-sent events, so each step's tokens are printed as they come. */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#ifndef NNT_HAVE_CURL
int cli_remote(cli_run *c)
{
    (void)c;
    fprintf(stderr, "nnt: error: --remote: this nnt was built without libcurl (Debian: libcurl4-gnutls-dev, "
                    "installed by scripts/install-deps.sh)\n");
    return 1;
}
#else
#include <curl/curl.h>
#include <gnutls/gnutls.h>

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("nnt: error: --remote: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

/* An answer as it arrives: the body, and for a stream how far its events were printed. */
typedef struct answer {
    sbuf body;
    int stream;
    size_t parsed; /* where the next unprinted event starts */
    int steps;
} answer;

/* Prints the "tokens" events complete so far: "step K: ID ID ...". */
static void print_steps(answer *a)
{
    char *end;
    while ((end = strstr(a->body.p + a->parsed, "\n\n")) != NULL) {
        char *ev = a->body.p + a->parsed;
        a->parsed = (size_t)(end - a->body.p) + 2;
        if (strncmp(ev, "event: tokens\ndata: ", 20) != 0) continue;
        cJSON *d = cJSON_ParseWithLength(ev + 20, (size_t)(end - ev - 20));
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(d, "step");
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(d, "tokens"), *it;
        if (cJSON_IsNumber(step) && cJSON_IsArray(ids)) {
            if (!a->steps++) printf("new tokens as the server picks them (one per row, -1: stopped):\n");
            printf("step %d:", step->valueint);
            cJSON_ArrayForEach(it, ids) printf(" %d", it->valueint);
            printf("\n");
            fflush(stdout);
        }
        cJSON_Delete(d);
    }
}

static size_t on_data(char *data, size_t size, size_t n, void *user)
{
    answer *a = user;
    sb_add(&a->body, data, size * n);
    if (a->stream && !a->body.oom) print_steps(a);
    return a->body.oom ? 0 : size * n;
}

/* GET or POST url; *status gets the HTTP status. Returns 0, or 1 (printed). */
static int http(const char *url, const char *token, const char *json, size_t json_len, const void *tensors, size_t tn,
                int stream, answer *a, long *status)
{
    CURL *h = curl_easy_init();
    if (!h) return fail("cannot start libcurl");
    struct curl_slist *hd = NULL;
    char auth[600];
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        hd = curl_slist_append(hd, auth);
    }
    if (stream) hd = curl_slist_append(hd, "Accept: text/event-stream");
    curl_mime *mime = NULL;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (json && tensors) { /* the document and its tensors as two parts */
        mime = curl_mime_init(h);
        curl_mimepart *p = curl_mime_addpart(mime);
        curl_mime_name(p, "request");
        curl_mime_data(p, json, json_len);
        curl_mime_type(p, "application/json");
        p = curl_mime_addpart(mime);
        curl_mime_name(p, "tensors");
        curl_mime_filename(p, "tensors");
        curl_mime_data(p, tensors, tn);
        curl_mime_type(p, "application/octet-stream");
        curl_easy_setopt(h, CURLOPT_MIMEPOST, mime);
    } else if (json) {
        hd = curl_slist_append(hd, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, json);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)json_len);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl_mime_free(mime);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    if (a->body.oom) return fail("%s: no memory for the answer", url);
    if (rc != CURLE_OK) return fail("%s: %s", url, curl_easy_strerror(rc));
    return 0;
}

/* The message of a JSON error answer, or the start of the body. */
static int http_error(const char *url, long status, const char *body)
{
    cJSON *d = body ? cJSON_Parse(body) : NULL;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(d, "error"), *m = cJSON_GetObjectItemCaseSensitive(e, "message");
    int rc = fail("%s: HTTP %ld: %.500s", url, status, cJSON_IsString(m) ? m->valuestring : body ? body : "");
    cJSON_Delete(d);
    return rc;
}

/* The model's request URL from --remote: "BASE/v1/models/NAME" as given, or BASE with the
 * server's only model. Returns a new string, or NULL (printed). */
static char *request_url(const char *remote, const char *token)
{
    size_t n = strlen(remote);
    while (n && remote[n - 1] == '/') n--;
    char *url = NULL;
    if (strstr(remote, "/v1/models/")) {
        if ((url = malloc(n + 9)) != NULL) snprintf(url, n + 9, "%.*s/request", (int)n, remote);
        return url;
    }
    char list[1024];
    snprintf(list, sizeof list, "%.*s/v1/models", (int)n, remote);
    answer a = {0};
    long status = 0;
    if (http(list, token, NULL, 0, NULL, 0, 0, &a, &status) != 0) return free(a.body.p), NULL;
    if (status != 200) {
        http_error(list, status, a.body.p);
        free(a.body.p);
        return NULL;
    }
    cJSON *d = cJSON_Parse(a.body.p ? a.body.p : "");
    free(a.body.p);
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(d, "models");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(models, 0), "name");
    if (cJSON_GetArraySize(models) == 1 && cJSON_IsString(name)) {
        size_t len = n + strlen(name->valuestring) + 32;
        char *esc = curl_easy_escape(NULL, name->valuestring, 0);
        if (esc && (url = malloc(len + strlen(esc))) != NULL)
            snprintf(url, len + strlen(esc), "%.*s/v1/models/%s/request", (int)n, remote, esc);
        curl_free(esc);
    } else {
        fail("%s holds %d models; name one: --remote %.*s/v1/models/NAME", remote, cJSON_GetArraySize(models), (int)n,
             remote);
    }
    cJSON_Delete(d);
    return url;
}

/* The bearer token: $NNT_TOKEN, or the first line of the file $NNT_TOKEN_FILE names; NULL when
 * neither is set (a server without tokens). Returns 0, or 1 (printed). */
static int find_token(char *buf, size_t n, const char **token)
{
    *token = getenv("NNT_TOKEN");
    const char *file = getenv("NNT_TOKEN_FILE");
    if (*token || !file) return 0;
    FILE *f = fopen(file, "r");
    if (!f || !fgets(buf, (int)n, f)) {
        if (f) fclose(f);
        return fail("NNT_TOKEN_FILE %s: cannot read a token from it", file);
    }
    fclose(f);
    buf[strcspn(buf, "\r\n")] = '\0';
    *token = buf;
    return 0;
}

/* ---- the answer's safetensors ---- */

typedef struct values {
    cJSON *header;
    int n;
    const char **keys;
    nnt_tensor *t; /* views into the answer's bytes */
} values;

static nnt_dtype dtype_named(const char *s)
{
    for (int d = 1; d < 64; d++) {
        const char *name = nnt_dtype_name((nnt_dtype)d);
        if (name && !strcmp(name, s)) return (nnt_dtype)d;
    }
    return NNT_DTYPE_INVALID;
}

/* The tensors of safetensors bytes p [len]. Returns 0, or 1 (printed). */
static int read_values(const char *p, size_t len, values *v)
{
    memset(v, 0, sizeof *v);
    uint64_t hn = 0;
    if (len >= 8) memcpy(&hn, p, 8);
    if (len < 8 || hn > len - 8 || !(v->header = cJSON_ParseWithLength(p + 8, (size_t)hn)))
        return fail("the server's answer is not a safetensors file (%zu bytes)", len);
    int count = cJSON_GetArraySize(v->header);
    v->keys = calloc((size_t)count + 1, sizeof *v->keys);
    v->t = calloc((size_t)count + 1, sizeof *v->t);
    if (!v->keys || !v->t) return fail("no memory");
    const char *data = p + 8 + hn;
    size_t data_len = len - 8 - hn;
    const cJSON *it;
    cJSON_ArrayForEach(it, v->header) {
        if (!strcmp(it->string, "__metadata__")) continue;
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype"), *sh = cJSON_GetObjectItemCaseSensitive(it, "shape"),
                    *off = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
        nnt_tensor *t = &v->t[v->n];
        t->dtype = cJSON_IsString(dt) ? dtype_named(dt->valuestring) : NNT_DTYPE_INVALID;
        t->ndim = cJSON_GetArraySize(sh);
        double b = cJSON_GetNumberValue(cJSON_GetArrayItem(off, 0)), e = cJSON_GetNumberValue(cJSON_GetArrayItem(off, 1));
        if (!t->dtype || t->ndim > NNT_MAX_DIMS || !(b >= 0 && b <= e && e <= (double)data_len))
            return fail("the server's answer: tensor '%s' has a bad dtype, shape or offsets", it->string);
        for (int d = 0; d < t->ndim; d++) t->shape[d] = (int64_t)cJSON_GetNumberValue(cJSON_GetArrayItem(sh, d));
        t->data = (void *)(data + (size_t)b);
        v->keys[v->n++] = it->string;
    }
    return 0;
}

static void free_values(values *v)
{
    cJSON_Delete(v->header);
    free(v->keys);
    free(v->t);
}

static const nnt_tensor *value(const values *v, const char *key)
{
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->keys[i], key)) return &v->t[i];
    return NULL;
}

/* Every value but those the command adds or prints its own way. */
static void print_values(const values *v, const char *header, const char *hidden)
{
    int shown = 0;
    for (int i = 0; i < v->n; i++) {
        if ((hidden && !strcmp(v->keys[i], hidden)) || !strcmp(v->keys[i], "generated_tokens")) continue;
        if (!shown++) fputs(header, stdout);
        describe_value(v->keys[i], &v->t[i]);
    }
}

static void print_generated_all(const nnt_tokenizer *tok, const nnt_tensor *g)
{
    if (!g || g->dtype != NNT_I32 || g->ndim != 2) return;
    int N = (int)g->shape[1];
    for (int r = 0; r < g->shape[0]; r++) print_generated(tok, r, (const int32_t *)g->data + (int64_t)r * N, N, NULL, 0);
}

/* The lens table per row: each block's top token (probability) at each position shown. */
static void print_lens(const nnt_tokenizer *tok, const nnt_tensor *probs, const nnt_tensor *pos)
{
    if (!probs || !pos || probs->ndim != 4 || probs->dtype != NNT_F32 || pos->dtype != NNT_I32) return;
    int B = (int)probs->shape[0], L = (int)probs->shape[1], W = (int)probs->shape[2];
    int64_t V = probs->shape[3];
    printf("logit lens: top token (probability) of each block's output, by position\n");
    for (int r = 0; r < B; r++) {
        const int32_t *p = (const int32_t *)pos->data + (int64_t)r * W;
        int N = 0;
        while (N < W && p[N] >= 0) N++;
        printf("row %d (%d shown):\n", r, N);
        printf("%-6s", "block");
        for (int j = 0; j < N; j++) printf("  %d", p[j]);
        printf("\n");
        for (int l = 0; l < L; l++) {
            printf("%-6d", l);
            for (int j = 0; j < N; j++) {
                const float *row = (const float *)probs->data + (((int64_t)r * L + l) * W + j) * V;
                int top;
                top_tokens(row, V, 1, &top);
                printf("  ");
                print_token(tok, top);
                printf(" (%.4f)", row[top]);
            }
            printf("\n");
        }
    }
}

/* The request document to send: the options' (or --request's), with trace's own save of
 * next_token_probs added as the local command adds it, and a lens's whole distribution asked for
 * (the table is made from it here). *hidden: the added save's key, or NULL. */
static int document(cli_run *c, char **json, size_t *n, void **tensors, size_t *tn, const char **hidden)
{
    *hidden = NULL;
    if (nnt_request_write(c->req, json, n, tensors, tn) != NNT_OK) return cli_fail(c->o, c->rt, NULL);
    nnt_method method = c->o->cmd->method;
    if (method != NNT_METHOD_TRACE && method != NNT_METHOD_LENS) return 0;
    cJSON *d = cJSON_ParseWithLength(*json, *n), *saves = cJSON_GetObjectItemCaseSensitive(d, "saves"), *it;
    if (method == NNT_METHOD_LENS) {
        cJSON *lens = cJSON_GetObjectItemCaseSensitive(d, "lens");
        if (!lens) lens = cJSON_AddObjectToObject(d, "lens");
        cJSON_DeleteItemFromObjectCaseSensitive(lens, "probs");
        cJSON_AddBoolToObject(lens, "probs", 1);
    }
    int has = method == NNT_METHOD_LENS;
    cJSON_ArrayForEach(it, saves) has |= cJSON_IsString(it) && !strcmp(it->valuestring, "next_token_probs");
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(d, "edits")) {
        const cJSON *path = cJSON_GetObjectItemCaseSensitive(it, "path");
        has |= cJSON_IsString(path) && !strcmp(path->valuestring, "next_token_probs");
    }
    if (!has) {
        if (!saves) saves = cJSON_AddArrayToObject(d, "saves");
        cJSON_AddItemToArray(saves, cJSON_CreateString("next_token_probs"));
        *hidden = "next_token_probs";
    }
    char *text = cJSON_PrintUnformatted(d);
    if (text) {
        free(*json);
        *json = text;
        *n = strlen(text);
    }
    cJSON_Delete(d);
    return 0;
}

int cli_remote(cli_run *c)
{
    const cli_opts *o = c->o;
    nnt_method method = o->cmd->method;
    if (method != NNT_METHOD_TRACE && method != NNT_METHOD_LENS && method != NNT_METHOD_GENERATE)
        return cli_usage_error("--remote runs trace, lens and generate; %s runs here only", o->cmd_name);
    if (o->plot) return cli_usage_error("%s", "--plot draws here from the model's own run: it cannot go with --remote");
    nnt_tokenizer *tok = NULL; /* --model DIR with --remote: that folder's tokenizer, for token text */
    if (o->model && nnt_runtime_tokenizer(c->rt, o->model, &tok) != NNT_OK)
        return cli_fail(o, c->rt, "--remote with --model: the folder's tokenizer");
    char tokbuf[600];
    const char *token = NULL;
    char *url = NULL, *json = NULL;
    void *tensors = NULL;
    size_t n = 0, tn = 0;
    const char *hidden = NULL;
    answer a = {.stream = method == NNT_METHOD_GENERATE};
    long status = 0;
    int rc = find_token(tokbuf, sizeof tokbuf, &token);
    if (!rc) rc = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : fail("cannot start libcurl");
    if (!rc && !(url = request_url(o->remote, token))) rc = 1;
    if (!rc) rc = document(c, &json, &n, &tensors, &tn, &hidden);
    if (!rc) rc = http(url, token, json, n, tn ? tensors : NULL, tn, a.stream, &a, &status);
    if (!rc && status != 200) rc = http_error(url, status, a.body.p);
    /* a stream's last event: the result (base64 safetensors) or an error */
    char *bytes = a.body.p;
    size_t len = a.body.n;
    unsigned char *decoded = NULL;
    if (!rc && a.stream) {
        const char *all = a.body.p ? a.body.p : "";
        const char *res = strstr(all, "event: result\ndata: "), *err = strstr(all, "event: error\ndata: ");
        if (err && !res) {
            rc = http_error(url, 200, err + 19);
        } else if (!res) {
            rc = fail("%s: the event stream ended without a result", url);
        } else {
            const char *b64 = res + 20;
            size_t bl = strcspn(b64, "\n");
            gnutls_datum_t in = {(unsigned char *)b64, (unsigned)bl}, out = {0};
            if (bl > 0xffffffffu || gnutls_base64_decode2(&in, &out) != 0) {
                rc = fail("%s: the result event is not base64", url);
            } else {
                decoded = out.data;
                bytes = (char *)decoded;
                len = out.size;
            }
        }
    }
    values v = {0};
    if (!rc) rc = read_values(bytes, len, &v);
    if (!rc && o->out) {
        nnt_error e = {0};
        if (nnt_write_file(o->out, bytes, len, &e) != NNT_OK) rc = fail("--out: %s", e.msg);
    }
    if (!rc) {
        if (method == NNT_METHOD_LENS) {
            print_lens(tok, value(&v, "lens_probs"), value(&v, "lens_positions"));
        } else {
            print_values(&v, "saved values:\n", hidden);
            const nnt_tensor *probs = value(&v, "next_token_probs");
            if (method == NNT_METHOD_TRACE && probs && probs->dtype == NNT_F32 && probs->ndim == 2)
                print_top_tokens(tok, probs);
            else if (method == NNT_METHOD_GENERATE)
                print_generated_all(tok, value(&v, "generated_tokens"));
        }
        if (o->out) printf("wrote the server's answer (%zu bytes) to %s\n", len, o->out);
    }
    free_values(&v);
    gnutls_free(decoded);
    free(a.body.p);
    free(url);
    free(json);
    free(tensors);
    nnt_tokenizer_free(tok);
    curl_global_cleanup();
    return rc;
}
#endif /* NNT_HAVE_CURL */

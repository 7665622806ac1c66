/* metric.c - the metrics patching and attribution read off a forward's logits (nnt_methods.h):
 * "logit-diff:A,B", "prob:T" and "logprob:T", parsed and evaluated. */
#include <math.h>
#include <string.h>

#include "internal.h"

/* A token id written as decimal digits only, 0..2147483647, filling [s, end); 0 or -1. */
static int parse_id(const char *s, const char *end, int32_t *out)
{
    if (s == end) return -1;
    long long v = 0;
    for (const char *c = s; c < end; c++) {
        if (*c < '0' || *c > '9') return -1;
        v = v * 10 + (*c - '0');
        if (v > 2147483647LL) return -1;
    }
    *out = (int32_t)v;
    return 0;
}

nnt_status nnt_metric_parse(const char *text, nnt_metric *out, nnt_error *err)
{
    if (!text || !out) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "metric: NULL argument");
    if (strncmp(text, "logit-diff:", 11) == 0) {
        const char *a = text + 11, *comma = strchr(a, ',');
        if (comma && parse_id(a, comma, &out->a) == 0 && parse_id(comma + 1, comma + 1 + strlen(comma + 1), &out->b) == 0) {
            out->kind = NNT_METRIC_LOGIT_DIFF;
            return NNT_OK;
        }
    } else if (strncmp(text, "prob:", 5) == 0 || strncmp(text, "logprob:", 8) == 0) {
        int log = text[0] == 'l';
        if (parse_id(text + (log ? 8 : 5), text + strlen(text), &out->a) == 0) {
            out->kind = log ? NNT_METRIC_LOGPROB : NNT_METRIC_PROB;
            out->b = 0;
            return NNT_OK;
        }
    }
    return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                       "expected logit-diff:A,B (logit[A] - logit[B]), prob:T (token T's probability) or logprob:T (its "
                       "logarithm), with A, B and T token ids in 0..2147483647 written as digits; got '%.200s'",
                       text);
}

double nnt_metric_eval(const nnt_metric *m, const nnt_tensor *logits, int row)
{
    int64_t V = logits->shape[logits->ndim - 1], base = (int64_t)row * V;
    if (m->kind == NNT_METRIC_LOGIT_DIFF)
        return nnt_tensor_get_f64(logits, base + m->a) - nnt_tensor_get_f64(logits, base + m->b);
    /* softmax over the vocabulary, shifted by the row's largest logit so exp never overflows */
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; v++) {
        double x = nnt_tensor_get_f64(logits, base + v);
        mx = x > mx ? x : mx;
    }
    for (int64_t v = 0; v < V; v++) sum += exp(nnt_tensor_get_f64(logits, base + v) - mx);
    if (m->kind == NNT_METRIC_LOGPROB) return nnt_tensor_get_f64(logits, base + m->a) - mx - log(sum);
    return exp(nnt_tensor_get_f64(logits, base + m->a) - mx) / sum;
}

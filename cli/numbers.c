/* numbers.c - the one place the nnt command reads numbers and lists from its arguments: whole
 * decimal integers, finite reals, "A:B" pairs, position lists (libnnt's rule) and token lists. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_parse_int(const char *text, long min, long max, long *out)
{
    if (!*text || isspace((unsigned char)*text)) return -1;
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < min || v > max) return -1;
    *out = v;
    return 0;
}

int cli_parse_u64(const char *text, unsigned long long *out)
{
    if (!isdigit((unsigned char)*text)) return -1; /* strtoull would take a blank, a sign, "-1" */
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (*end || errno) return -1;
    *out = v;
    return 0;
}

int cli_parse_real(const char *text, double min, double max, float *out)
{
    if (!*text || isspace((unsigned char)*text)) return -1;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno || !isfinite(v) || v < min || v > max) return -1;
    *out = (float)v;
    return 0;
}

int cli_parse_pair(const char *flag, const char *text, const char *what, int open_end, long *a, long *b)
{
    const char *colon = strchr(text, ':');
    size_t n = colon ? (size_t)(colon - text) : strlen(text);
    char *first = malloc(n + 1);
    if (!first) return cli_arg_error("%s", "out of memory");
    memcpy(first, text, n);
    first[n] = '\0';
    if (cli_parse_int(first, 0, CLI_BLOCK_MAX, a) != 0) {
        cli_arg_error("%s %s: '%s' is not an integer in 0..%ld (expected %s)", flag, text, first, CLI_BLOCK_MAX, what);
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
    if (cli_parse_int(colon + 1, 0, CLI_BLOCK_MAX, b) != 0)
        return cli_arg_error("%s %s: '%s' is not an integer in 0..%ld (expected %s)", flag, text, colon + 1,
                             CLI_BLOCK_MAX, what);
    return 0;
}

int cli_parse_positions(const char *flag, const char *text, int **out, int *n)
{
    *out = NULL;
    *n = 0;
    int *pos = malloc(sizeof *pos * CLI_MAX_POSITIONS);
    if (!pos) return cli_arg_error("%s", "out of memory");
    nnt_error err = {0};
    if (nnt_positions_read(text, pos, CLI_MAX_POSITIONS, n, &err) != NNT_OK) {
        cli_arg_error("%s %s: %s", flag, text, err.msg);
        free(pos);
        *n = 0;
        return 2;
    }
    *out = pos;
    return 0;
}

/* The ids of a --tokens row. */
#define TOKEN_SEPARATORS " ,\t\n"
int cli_parse_tokens(const char *text, int32_t **out, int *n)
{
    int cap = 64, k = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return -1;
    for (const char *p = text; *p;) {
        p += strspn(p, TOKEN_SEPARATORS);
        if (!*p) break;
        size_t len = strcspn(p, TOKEN_SEPARATORS);
        char *item = strndup(p, len);
        long v = 0;
        if (!item || cli_parse_int(item, 0, CLI_BLOCK_MAX, &v) != 0) {
            fprintf(stderr, "nnt: --tokens: '%s' is not a token id (an integer in 0..%ld)\n", item ? item : "?",
                    CLI_BLOCK_MAX);
            free(item);
            free(ids);
            return -1;
        }
        free(item);
        if (k == cap) {
            int32_t *g = realloc(ids, (size_t)(cap *= 2) * sizeof *g);
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

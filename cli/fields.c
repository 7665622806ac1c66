/* fields.c - how the nnt command's options map onto the fields of the request they make: which
 * requests go to "edits" and which to "saves", and, for messages, the option that gave a field
 * ("edits[2]" is "--scale PATH=F", "rows[1]" is "--prompt row 1"). */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "fields.h"

int cli_first_trailing_save(const cli_opts *o)
{
    /* after --steps, a save applies at the steps it names: in order among the edits */
    for (int q = 0; q < o->n_reqs; q++)
        if (o->reqs[q].kind == R_STEPS) return o->n_reqs;
    int k = o->n_reqs;
    while (k > 0 && o->reqs[k - 1].kind == R_SAVE) k--;
    return k;
}

/* The index of request option q that gave "edits[i]" (below the trailing saves) or "saves[i]". */
static int request_of(const cli_opts *o, int saves, long i)
{
    int first = cli_first_trailing_save(o);
    long q = saves ? first + i : i;
    return q >= 0 && q < (saves ? o->n_reqs : first) ? (int)q : -1;
}

/* The option of row r as messages name it: "--tokens row 1", "--prompt row 0",
 * "--prompt-file FILE (row 2)"; patch's rows are its --clean and --corrupt prompts. */
static void row_option(const cli_opts *o, long r, char *buf, size_t n)
{
    const cli_row *a = &o->rows[r];
    if (!strcmp(o->cmd_name, "patch") || !strcmp(o->cmd_name, "attribute")) {
        const char *which = r == 0 ? "clean" : "corrupt";
        snprintf(buf, n, "--%s%s", which, a->kind == ROW_TOKENS ? "-tokens" : "");
    } else if (a->kind == ROW_FILE || a->kind == ROW_TOKENS_FILE) {
        snprintf(buf, n, "%s %s (row %ld)", a->kind == ROW_FILE ? "--prompt-file" : "--tokens-file", a->arg, r);
    } else {
        snprintf(buf, n, "%s row %ld", a->kind == ROW_PROMPT ? "--prompt" : "--tokens", r);
    }
}

int cli_field_option(const cli_opts *o, const char *field, size_t len, char *buf, size_t n)
{
    char *end;
    if ((len > 6 && !strncmp(field, "edits[", 6)) || (len > 6 && !strncmp(field, "saves[", 6))) {
        long i = strtol(field + 6, &end, 10);
        int q = end > field + 6 && *end == ']' ? request_of(o, field[0] == 's', i) : -1;
        if (q < 0) return 0;
        snprintf(buf, n, "%s %s", o->reqs[q].flag, o->reqs[q].text);
        return 1;
    }
    if (len > 5 && !strncmp(field, "rows[", 5)) {
        long r = strtol(field + 5, &end, 10);
        if (end == field + 5 || *end != ']' || r < 0 || r >= o->n_rows) return 0;
        row_option(o, r, buf, n);
        return 1;
    }
    if (len > 5 && !strncmp(field, "saes[", 5)) {
        long i = strtol(field + 5, &end, 10);
        if (end == field + 5 || *end != ']' || i < 0 || i >= o->n_saes) return 0;
        snprintf(buf, n, "--sae %s", o->saes[i]);
        return 1;
    }
    if (len > 11 && !strncmp(field, "grad.paths[", 11)) {
        long i = strtol(field + 11, &end, 10);
        if (end == field + 11 || *end != ']' || i < 0 || i >= o->n_grads) return 0;
        snprintf(buf, n, "--grad %s", o->grads[i]);
        return 1;
    }
    size_t sec = !strncmp(field, "patch.", 6) ? 6 : !strncmp(field, "attribute.", 10) ? 10 : 0;
    if (sec && ((len >= sec + 5 && !strncmp(field + sec, "clean", 5)) || (len >= sec + 7 && !strncmp(field + sec, "corrupt", 7)))) {
        int clean = field[sec + 1] == 'l';
        size_t fl = sec + (clean ? 5 : 7);
        if (len > fl && field[fl] != '.') return 0;
        row_option(o, clean ? 0 : 1, buf, n);
        return 1;
    }
    static const struct {
        const char *field, *option;
    } NAMED[] = {
        {"patch.metric", "--metric"},      {"patch.value", "--value"},     {"patch.positions", "--positions"},
        {"patch.batch", "--batch"},        {"lens.positions", "--positions"},
        {"attribute.metric", "--metric"},  {"attribute.value", "--value"}, {"attribute.ig_steps", "--ig-steps"},
        {"grad.metric", "--metric"},       {"grad.positions", "--metric-positions"},
        {"generate.max_new_tokens", "--max-new-tokens"}, {"generate.temperature", "--temperature"},
        {"generate.top_k", "--top-k"},     {"generate.top_p", "--top-p"},  {"generate.seed", "--seed"},
        {"generate.stop_ids", "--stop-id"},
    };
    for (size_t k = 0; k < sizeof NAMED / sizeof *NAMED; k++) {
        size_t fl = strlen(NAMED[k].field);
        if (len < fl || strncmp(field, NAMED[k].field, fl) || (len > fl && field[fl] != '[' && field[fl] != '.')) continue;
        const char *arg = !strcmp(NAMED[k].option, "--metric")      ? o->metric
                          : !strcmp(NAMED[k].option, "--value")     ? o->value
                          : !strcmp(NAMED[k].option, "--positions") ? o->positions
                                                                    : NULL;
        if (arg)
            snprintf(buf, n, "%s %s", NAMED[k].option, arg);
        else
            snprintf(buf, n, "%s", NAMED[k].option);
        return 1;
    }
    return 0;
}

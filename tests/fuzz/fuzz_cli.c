/* fuzz_cli.c - libFuzzer harness for the nnt command line's argument parsing (cli/nnt.c).
 * cli/nnt.c is compiled into this harness with its main renamed, so that its static parser
 * runs exactly as the command runs it, with no copy to drift from. The input is the argument
 * list after "nnt", the arguments separated by NUL bytes. parse_args reads them; then the
 * token lists of --tokens rows are parsed, and the requests are added to a trace of the
 * example model (the ones that read files - --set, --add, --steer - are left out: their file
 * names would come from the input). Nothing is run. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define main nnt_cli_main
#include "cli/nnt.c"
#undef main

#include "fuzz_common.h"

#define MAX_ARGS 1024

static nnt_runtime *rt;
static nnt_model *model;

static void unload(void)
{
    nnt_model_free(model);
    nnt_runtime_close(rt);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    rt = fuzz_runtime_open();
    if (nnt_model_load(rt, NNT_FUZZ_SOURCE_DIR "/examples/tiny-minimax-m2", &model) != NNT_OK) {
        fprintf(stderr, "nnt fuzz: %s\n", nnt_last_error(rt));
        abort();
    }
    atexit(unload);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = fuzz_cstr(data, size);
    char *args[MAX_ARGS + 2];
    int argc = 0;
    args[argc++] = "nnt";
    for (size_t i = 0; i <= size && argc < MAX_ARGS; ) {
        args[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    args[argc] = NULL;

    opts o;
    int rc = parse_args(argc, args, &o);
    char note[32];
    snprintf(note, sizeof note, "%d args, status %d", argc, rc);
    fuzz_note("parse_args", note);
    if (rc == 0) {
        for (int r = 0; r < o.n_rows; r++) {
            if (o.rows[r].kind != ROW_TOKENS) continue;
            int32_t *ids = NULL;
            int n = 0;
            if (parse_tokens(o.rows[r].arg, &ids, &n) == 0) {
                FUZZ_CHECK(n > 0, "a token list with no ids was accepted");
                for (int k = 0; k < n; k++) FUZZ_CHECK(ids[k] >= 0, "a negative token id %d", ids[k]);
                free(ids);
            }
        }
        int reads_files = 0;
        for (int q = 0; q < o.n_reqs; q++)
            reads_files |= o.reqs[q].kind == R_SET || o.reqs[q].kind == R_ADD || o.reqs[q].kind == R_STEER;
        if (!reads_files) {
            nnt_trace *t = NULL;
            if (nnt_trace_new(model, &t) != NNT_OK) abort();
            int added = add_requests(rt, t, &o, NULL, NULL, NULL);
            fuzz_note("add_requests", added == 0 ? "ok" : nnt_last_error(rt));
            nnt_trace_free(t);
        }
    }
    opts_free(&o);
    free(buf);
    return 0;
}

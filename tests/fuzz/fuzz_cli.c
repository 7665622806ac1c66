/* fuzz_cli.c - libFuzzer harness for the nnt command line's argument parsing (cli/options.c,
 * cli/numbers.c) and the request the options make (cli/request_build.c, parsed by libnnt's
 * core/request/). The command's files are linked in (nnt_cli_parts) so that its parser runs
 * exactly as the command runs it. The input is the argument list after "nnt", the arguments
 * separated by NUL bytes. cli_parse reads them; for the commands that run a request, the request
 * is made and applied to a trace of the example model (inputs naming files - --set, --add,
 * --steer, --prompt-file, --request - are left out: their names would come from the input).
 * Nothing is run. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

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

    cli_opts o;
    int rc = cli_parse(argc, args, &o);
    char note[32];
    snprintf(note, sizeof note, "%d args, status %d", argc, rc);
    fuzz_note("cli_parse", note);
    int reads_files = o.request_file != NULL;
    for (int q = 0; q < o.n_reqs; q++) reads_files |= o.reqs[q].file != NULL;
    for (int r = 0; r < o.n_rows; r++) reads_files |= o.rows[r].kind == ROW_FILE;
    if (rc == 0 && o.cmd && (o.cmd->flags & CMD_REQUEST) && !reads_files) {
        nnt_request *req = NULL;
        int made = cli_request(&o, rt, &req);
        fuzz_note("cli_request", made == 0 ? "ok" : nnt_last_error(rt));
        if (made == 0) {
            nnt_trace *t = NULL;
            if (nnt_trace_new(model, &t) != NNT_OK) abort();
            nnt_status st = nnt_request_apply(req, t, NULL, 0);
            fuzz_note("nnt_request_apply", st == NNT_OK ? "ok" : nnt_last_error(rt));
            nnt_trace_free(t);
        }
        nnt_request_free(req);
    }
    cli_opts_free(&o);
    free(buf);
    return 0;
}

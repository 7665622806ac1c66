/* generate.c - `nnt generate`: new tokens after each row of the request, its edits applied at
 * every step; prints the values saved at each step, each row's new ids and, with a tokenizer,
 * their text and the continuation decoded (noting the stop token that ended it). */
#include <stdlib.h>
#include <string.h>

#include "../cli.h"

int cmd_generate(cli_run *c)
{
    nnt_run_opts ro = {.struct_size = sizeof ro, .pipeline = c->p};
    nnt_result *res = NULL;
    if (nnt_request_run(c->m, c->req, &ro, &res) != NNT_OK)
        return c->p ? ranks_fail(c->p, c->o, c->rt, 0, c->held_fd) : cli_fail(c->o, c->rt, NULL);
    int rc = 0;
    if (nnt_result_holds(res)) {
        const nnt_batch *b = nnt_result_batch(res);
        const nnt_trace *t = nnt_result_trace(res);
        print_prompt_tokens(c->text_rows, b, c->tok);
        int written = print_saved(t, "saved values (\"path@k\": the k-th time the request saved it, one per step; "
                                     "\"#r\": saved by the r-th later request of the same value):\n", NULL);
        if (c->o->out && (rc = cli_write_out(c->o, c->rt, res)) == 0) printf("wrote %d values to %s\n", written, c->o->out);
        int N = 0, n_stops = 0;
        const int32_t *stops = NULL, *tokens = nnt_result_tokens(res, &N, &stops, &n_stops);
        for (int r = 0; !rc && r < b->batch; r++) print_generated(c->tok, r, tokens + (size_t)r * N, N, stops, n_stops);
    }
    nnt_result_free(res);
    return rc;
}

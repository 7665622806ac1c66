/* main.c - the nnt command's main: what every command of the table (command_table.c) runs with - the
 * options, a runtime, under mpirun the run's pipeline (one stage per rank), the request a
 * command runs, the model (a stage of it under mpirun) and its tokenizer. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* The request: rank 0 (or the one process) makes it from the options or --request; under
 * mpirun every other rank receives rank 0's. Returns 0, 1 or 2 (printed). */
static int get_request(cli_run *c, int *held_fd)
{
    int rc = 0;
    if (nnt_pipeline_rank(c->p) == 0) rc = cli_request(c->o, c->rt, &c->req);
    /* the rows of text, whose tokens the run shows: the options', or the document's */
    c->text_rows = c->o->request_file ? cli_request_text_rows(c->o->request_file) : c->o->n_text_rows;
    if (!c->p) return rc;
    if (rc) return rc; /* the others learn of it when this rank leaves the run */
    if (nnt_pipeline_share_request(c->p, &c->req) != NNT_OK) return ranks_fail(c->p, c->o, c->rt, 0, held_fd);
    return 0;
}

/* The model: the whole of it, or this rank's stage. Returns 0 or 1 (printed). */
static int load_model(cli_run *c, int root, int *held_fd)
{
    int first = 0, end = 0;
    if (c->p && nnt_pipeline_split(c->p, c->o->model, &first, &end) != NNT_OK)
        return ranks_fail(c->p, c->o, c->rt, root, held_fd);
    nnt_status st = c->p ? nnt_model_load_stage(c->rt, c->o->model, first, end, &c->m) : nnt_model_load(c->rt, c->o->model, &c->m);
    if (st != NNT_OK) return cli_fail(c->o, c->rt, "cannot load the model");
    if (c->p && nnt_pipeline_attach(c->p, c->m) != NNT_OK) return ranks_fail(c->p, c->o, c->rt, root, held_fd);
    return 0;
}

/* The model folder's tokenizer, for token text: NULL when the folder has none (ids only) or it
 * cannot be read (said once; a text row then fails in the request's run, naming the reason). */
static void find_tokenizer(cli_run *c)
{
    nnt_status st = nnt_model_tokenizer(c->m, &c->tok);
    if (st == NNT_OK) return;
    c->tok = NULL;
    if (st != NNT_ERR_NOT_FOUND && !c->text_rows)
        fprintf(stderr, "nnt: warning: token text not shown: %s\n", nnt_last_error(c->rt));
}

static int run(cli_run *c, int *held_fd)
{
    const cli_opts *o = c->o;
    unsigned f = o->cmd->flags;
    if ((f & CMD_MODEL) && !o->model && !o->remote)
        return cli_usage_error("%s needs --model DIR (or --remote URL)", o->cmd_name);
    if (!(f & CMD_RUNTIME)) return o->cmd->run(c);
    if (nnt_runtime_open(o->config, &c->rt) != NNT_OK) return cli_fail(o, c->rt, "cannot start");
    nnt_protect_mapped_files(); /* a checkpoint truncated under the run: an error naming it, not SIGBUS */
    if (nnt_pipeline_open(c->rt, &c->p) != NNT_OK) {
        ranks_release_stderr(held_fd);
        return cli_fail(o, c->rt, NULL);
    }
    if (c->p && !(f & CMD_RANKS))
        return cli_usage_error("%s runs in one process; over several ranks (mpirun) nnt runs trace, lens and generate",
                               o->cmd_name);
    if (!c->p) ranks_release_stderr(held_fd);
    int root = c->p && o->cmd->method == NNT_METHOD_LENS ? nnt_pipeline_size(c->p) - 1 : 0;
    ranks_set_root(c->p, root, held_fd);
    int rc = 0;
    if ((f & CMD_REQUEST) && (rc = get_request(c, held_fd)) != 0) return rc;
    if (o->print_request) return nnt_pipeline_rank(c->p) == 0 ? cli_print_request(c->rt, c->req) : 0;
    if ((f & CMD_REQUEST) && (rc = cli_check_out(o, c->rt)) != 0) return rc;
    if (o->remote) {
        if (c->p) return cli_usage_error("%s", "--remote sends the request to a server: run it without mpirun");
        return cli_remote(c);
    }
    if (!(f & CMD_LOADS)) return o->cmd->run(c);
    if ((rc = load_model(c, root, held_fd)) != 0) return rc;
    if (f & CMD_REQUEST) find_tokenizer(c);
    return o->cmd->run(c);
}

int main(int argc, char **argv)
{
    int held_fd = ranks_hold_stderr_early(); /* ranks > 0 of an mpirun job: rank 0 reports */
    if (argc > 1 && !strcmp(argv[1], "plan")) {   /* under mpirun, rank 0 prints the plan once */
        if (held_fd >= 0) ranks_quiet_stdout();
        return cmd_plan(argc - 1, argv + 1);
    }
    if (argc > 1 && !strcmp(argv[1], "serve")) return cmd_serve(argc - 1, argv + 1);
    cli_opts o;
    cli_run c = {.o = &o, .held_fd = &held_fd};
    int rc = cli_parse(argc, argv, &o);
    if (rc == 0) rc = run(&c, &held_fd);
    ranks_finish(c.p, rc, &held_fd);
    ranks_release_stderr(&held_fd);
    nnt_request_free(c.req);
    nnt_model_free(c.m);
    nnt_runtime_close(c.rt);
    cli_opts_free(&o);
    return rc;
}

/* plan_cmd.h - the `nnt plan` command (cli/plan.c), called from the CLI's main. */
#ifndef NNT_CLI_PLAN_CMD_H
#define NNT_CLI_PLAN_CMD_H
/* Runs `nnt plan` on argv[0] == "plan" and its options; returns the exit status (0, 1 for a
 * plan that cannot be made, 2 for a usage error), having printed the plan or the error. */
int nnt_cli_plan(int argc, char **argv);
#endif

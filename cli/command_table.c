/* command_table.c - the nnt command's table of commands: each one's name, what it needs (a model
 * folder, a loaded model, a request, a runtime; whether it runs under mpirun), its method and the
 * function that runs it (cli/commands/). */
#include <string.h>

#include "cli.h"

static int cmd_help(cli_run *c)
{
    fputs(CLI_USAGE, stdout);
    return 0;
}

static const cli_command COMMANDS[] = {
    {"trace", CMD_MODEL | CMD_LOADS | CMD_REQUEST | CMD_RANKS | CMD_RUNTIME, NNT_METHOD_TRACE, cmd_trace},
    {"lens", CMD_MODEL | CMD_LOADS | CMD_REQUEST | CMD_RANKS | CMD_RUNTIME, NNT_METHOD_LENS, cmd_lens},
    {"patch", CMD_MODEL | CMD_LOADS | CMD_REQUEST | CMD_RUNTIME, NNT_METHOD_PATCH, cmd_patch},
    {"attribute", CMD_MODEL | CMD_LOADS | CMD_REQUEST | CMD_RUNTIME, NNT_METHOD_ATTRIBUTE, cmd_attribute},
    {"generate", CMD_MODEL | CMD_LOADS | CMD_REQUEST | CMD_RANKS | CMD_RUNTIME, NNT_METHOD_GENERATE, cmd_generate},
    {"harvest", CMD_MODEL | CMD_LOADS | CMD_RUNTIME, NNT_METHOD_TRACE, cmd_harvest},
    {"experts", CMD_RUNTIME, NNT_METHOD_COUNT, cmd_experts},
    {"print", CMD_MODEL | CMD_LOADS | CMD_RUNTIME, NNT_METHOD_COUNT, cmd_print},
    {"support", CMD_MODEL | CMD_LOADS | CMD_RUNTIME, NNT_METHOD_COUNT, cmd_support},
    {"info", CMD_MODEL | CMD_RUNTIME, NNT_METHOD_COUNT, cmd_info},
    {"tokenize", CMD_MODEL | CMD_RUNTIME, NNT_METHOD_COUNT, cmd_tokenize},
    {"plugins", CMD_RUNTIME, NNT_METHOD_COUNT, cmd_plugins},
    {"help", 0, NNT_METHOD_COUNT, cmd_help},
    {"--help", 0, NNT_METHOD_COUNT, cmd_help},
    {"-h", 0, NNT_METHOD_COUNT, cmd_help},
};

const cli_command *cli_command_find(const char *name)
{
    for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++)
        if (!strcmp(name, COMMANDS[i].name)) return &COMMANDS[i];
    return NULL;
}

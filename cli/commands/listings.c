/* listings.c - `nnt print` (the module tree with native and standard names and every value's
 * layout), `nnt support` (every standard value per block, served or why not) and `nnt plugins`
 * (the plugins loaded and each family's backend). */
#include "../cli.h"

int cmd_print(cli_run *c)
{
    return nnt_model_print(c->m, stdout) == NNT_OK ? 0 : cli_fail(c->o, c->rt, NULL);
}

int cmd_support(cli_run *c)
{
    return nnt_model_support(c->m, stdout, c->o->tsv) == NNT_OK ? 0 : cli_fail(c->o, c->rt, NULL);
}

int cmd_plugins(cli_run *c)
{
    printf("configuration: %s\n", nnt_runtime_config_path(c->rt));
    const char *kind, *name, *file, *detail;
    for (int i = 0; nnt_runtime_plugin(c->rt, i, &kind, &name, &file, &detail); i++)
        printf("  %-8s %-16s %-10s %s\n", kind, name, detail ? detail : "", file);
    for (int i = 0; nnt_runtime_warning(c->rt, i, &file, &detail); i++) printf("  skipped  %s: %s\n", file, detail);
    return 0;
}

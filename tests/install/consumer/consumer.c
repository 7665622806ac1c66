/* consumer.c - a program built against an installed nnt (nnt::nnt). Usage:
 *   nnt_consumer PREFIX MODEL_DIR SCRATCH_DIR
 * Checks that the default configuration is PREFIX's installed nnt.ini, loads MODEL_DIR with it,
 * then opens a second runtime whose INI adds the probe plugin (built with nnt_add_plugin) to the
 * installed plugin directories and checks it is listed. Prints what it found; exit 0 on success. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nnt/nnt.h>

static int fail(nnt_runtime *rt, const char *what)
{
    fprintf(stderr, "nnt_consumer: %s: %s\n", what, rt ? nnt_last_error(rt) : "no runtime");
    nnt_runtime_close(rt);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: nnt_consumer PREFIX MODEL_DIR SCRATCH_DIR\n");
        return 2;
    }
    char want[PATH_MAX], have[PATH_MAX], cfg[PATH_MAX + 32];
    snprintf(cfg, sizeof cfg, "%s/share/nnt/nnt.ini", argv[1]);
    if (!realpath(cfg, want) || !realpath(CONSUMER_CONFIG_FILE, have) || strcmp(want, have) != 0) {
        fprintf(stderr, "nnt_consumer: nnt_CONFIG_FILE is %s, expected %s\n", CONSUMER_CONFIG_FILE, cfg);
        return 1;
    }

    nnt_runtime *rt = NULL;
    if (nnt_runtime_open(NULL, &rt) != NNT_OK) return fail(rt, "default runtime");
    printf("configuration: %s\n", nnt_runtime_config_path(rt));
    if (!realpath(nnt_runtime_config_path(rt), have) || strcmp(want, have) != 0) {
        fprintf(stderr, "nnt_consumer: the default configuration is not %s\n", want);
        return fail(rt, "default runtime");
    }
    const char *file, *reason;
    for (int i = 0; nnt_runtime_warning(rt, i, &file, &reason); i++) printf("warning: %s: %s\n", file, reason);
    nnt_model *m = NULL;
    if (nnt_model_load(rt, argv[2], &m) != NNT_OK) return fail(rt, "model load");
    printf("model: family %s on backend %s\n", nnt_model_family(m), nnt_model_backend(m));
    nnt_model_free(m);
    nnt_runtime_close(rt);

    /* the plugin recipe: the probe next to the installed plugins */
    char ini[PATH_MAX + 16];
    snprintf(ini, sizeof ini, "%s/probe.ini", argv[3]);
    FILE *f = fopen(ini, "w");
    if (!f) {
        perror(ini);
        return 1;
    }
    fprintf(f, "[plugins]\ndir = %s\ndir = %s\nfile = %s\n", CONSUMER_FAMILY_DIR, CONSUMER_BACKEND_DIR,
            CONSUMER_PROBE);
    fclose(f);
    rt = NULL;
    if (nnt_runtime_open(ini, &rt) != NNT_OK) return fail(rt, "runtime with the probe plugin");
    const char *kind, *name, *detail;
    int found = 0;
    for (int i = 0; nnt_runtime_plugin(rt, i, &kind, &name, &file, &detail); i++)
        if (strcmp(kind, "family") == 0 && strcmp(name, "consumer_probe") == 0) {
            printf("probe: %s on backend %s\n", file, detail);
            found = strcmp(detail, "cpu") == 0;
        }
    nnt_runtime_close(rt);
    if (!found) {
        fprintf(stderr, "nnt_consumer: the probe plugin is not listed on backend cpu\n");
        return 1;
    }
    printf("ok\n");
    return 0;
}

/* ranks.c - the nnt command's side of a run over several ranks (`mpirun -np N nnt ...`; the
 * stages themselves are libnnt's, nnt_methods.h): only the printing rank prints - the others'
 * stdout goes to /dev/null and their stderr is held back in an unnamed file, whose last error
 * line is what they tell the others when they fail - and a failure is printed once. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* The rank the launcher's environment gives this process, or -1. */
static int env_rank(void)
{
    static const char *const VARS[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++) {
        const char *v = getenv(VARS[i]);
        if (v && *v) return atoi(v);
    }
    return -1;
}

/* Points fd 2 at an unnamed file; returns a descriptor of the real stderr, or -1. */
static int hold_stderr(void)
{
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = tmp ? dup(2) : -1;
    if (saved >= 0 && dup2(fileno(tmp), 2) < 0) {
        close(saved);
        saved = -1;
    }
    if (tmp) fclose(tmp); /* fd 2 keeps the file open */
    return saved;
}

void ranks_release_stderr(int *held_fd)
{
    if (*held_fd < 0) return;
    fflush(stderr);
    dup2(*held_fd, 2);
    close(*held_fd);
    *held_fd = -1;
}

/* The last "nnt: ..." line written to the held stderr, without "nnt: " and "error: ". */
static void last_held_error(char *out, size_t n)
{
    fflush(stderr);
    out[0] = '\0';
    struct stat sb;
    char buf[4096];
    if (fstat(2, &sb) != 0 || sb.st_size <= 0) return;
    off_t from = sb.st_size > (off_t)sizeof buf - 1 ? sb.st_size - (off_t)(sizeof buf - 1) : 0;
    ssize_t got = pread(2, buf, sizeof buf - 1, from);
    if (got <= 0) return;
    buf[got] = '\0';
    const char *best = NULL;
    for (char *line = buf; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (strncmp(line, "nnt: ", 5) == 0) best = line + 5;
        line = nl ? nl + 1 : NULL;
    }
    if (best && strncmp(best, "error: ", 7) == 0) best += 7;
    snprintf(out, n, "%s", best ? best : "stopped with an error (see its own output)");
}

int ranks_hold_stderr_early(void) { return env_rank() > 0 ? hold_stderr() : -1; }

void ranks_quiet_stdout(void)
{
    fflush(stdout);
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) {
        dup2(null, 1);
        close(null);
    }
}

void ranks_set_root(nnt_pipeline *p, int root, int *held_fd)
{
    if (!p) return;
    if (nnt_pipeline_rank(p) == root) {
        ranks_release_stderr(held_fd);
        return;
    }
    if (*held_fd < 0) *held_fd = hold_stderr();
    ranks_quiet_stdout();
}

int ranks_fail(nnt_pipeline *p, const cli_opts *o, nnt_runtime *rt, int root, int *held_fd)
{
    switch (nnt_pipeline_fault_of(p)) {
    case NNT_PIPELINE_FAULT_REMOTE: /* another rank's failure: the printing rank reports it */
        if (nnt_pipeline_rank(p) == root) fprintf(stderr, "nnt: error: %s\n", nnt_last_error(rt));
        return 1;
    case NNT_PIPELINE_FAULT_TRANSPORT: /* a wait ran out of time: the peer may never answer */
        ranks_release_stderr(held_fd);
        fprintf(stderr, "nnt: error: %s\n", nnt_last_error(rt));
        nnt_pipeline_abort(p, 1);
        return 1;
    default: /* this rank's own error, told to the others */
        cli_fail(o, rt, NULL);
        return 1;
    }
}

void ranks_finish(nnt_pipeline *p, int rc, int *held_fd)
{
    if (!p) return;
    char msg[1000];
    if (rc && *held_fd >= 0)
        last_held_error(msg, sizeof msg);
    else
        snprintf(msg, sizeof msg, "stopped with an error");
    nnt_pipeline_close(p, rc ? msg : NULL);
    ranks_release_stderr(held_fd);
}

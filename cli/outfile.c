/* outfile.c - the nnt command's --out: checked before any forward runs and again before the
 * write (its folder exists, it is a regular file or nothing, and no file the run reads), and
 * written with the interrupting signals held off until the file is whole or removed. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* --out against one input of the run: 0, or 2 with a message naming both when --out is that
 * same file (same device and inode: the same file under another name or link too). */
static int out_is_not(const char *flag, const char *out, const struct stat *os, const char *input, const char *what)
{
    struct stat sb;
    if (stat(input, &sb) != 0 || sb.st_dev != os->st_dev || sb.st_ino != os->st_ino) return 0;
    if (strcmp(out, input) == 0)
        return cli_arg_error("%s %s: is %s, an input of this run; write the values to another file", flag, out, what);
    return cli_arg_error("%s %s: is the same file as %s (%s), an input of this run; write the values to another file", flag,
                         out, input, what);
}

/* --out against every file mapped into this process (the nnt binary, libnnt, the plugins, the C
 * library; /proc/self/maps on Linux) and the binary itself (/proc/self/exe): replacing one of
 * them under a running program breaks the next run ("invalid ELF header"). 0, or 2. */
static int out_is_not_mapped(const char *flag, const char *out, const struct stat *os)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) exe[n] = '\0';
    int rc = out_is_not(flag, out, os, n > 0 ? exe : "/proc/self/exe", "the nnt program running");
    FILE *f = rc ? NULL : fopen("/proc/self/maps", "r");
    char line[4352];
    while (f && !rc && fgets(line, sizeof line, f)) {
        char *path = strchr(line, '/'); /* a mapping of a file names it from its first '/' */
        if (!path) continue;
        path[strcspn(path, "\n")] = '\0';
        if (strstr(path, " (deleted)")) continue;
        rc = out_is_not(flag, out, os, path, "a file this run has mapped (a program or library)");
    }
    if (f) fclose(f);
    return rc;
}

typedef struct out_ctx {
    const char *flag, *out;
    const struct stat *os;
} out_ctx;

/* cli_request_files' callback: --out against the file of one field of the --request document. */
static int out_is_not_field(void *ctx, const char *file, const char *field)
{
    const out_ctx *x = ctx;
    char what[300];
    snprintf(what, sizeof what, "the file of %s", field);
    return out_is_not(x->flag, x->out, x->os, file, what);
}

/* --out, checked before any forward runs and again just before the write: its directory must
 * exist, an existing path must be a regular file (the writer refuses to replace anything else),
 * and it must not be a file the run reads: any file of the model folder (config.json, the
 * index, the shards, the tokenizer's files), the INI, a loaded plugin, any file mapped into the
 * process (the nnt binary, libnnt, the C library), a --set/--add/--steer file or a --prompt-file,
 * the --request file and every file its fields name. Returns 0 or 2. */
static int check_output(const cli_opts *o, nnt_runtime *rt, const char *flag, const char *out)
{
    if (!out) return 0;
    struct stat os;
    if (stat(out, &os) == 0) {
        if (!S_ISREG(os.st_mode)) return cli_arg_error("%s %s: exists and is not a regular file", flag, out);
        int rc = 0;
        if (o->model) { /* every file of the folder (shard names in an index hold no '/') */
            DIR *d = opendir(o->model);
            for (struct dirent *e; d && !rc && (e = readdir(d));) {
                size_t n = strlen(o->model) + strlen(e->d_name) + 2;
                char *p = malloc(n);
                if (!p) {
                    rc = cli_arg_error("%s", "out of memory");
                    break;
                }
                snprintf(p, n, "%s/%s", o->model, e->d_name);
                struct stat sb;
                if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) rc = out_is_not(flag, out, &os, p, "a file of the model folder");
                free(p);
            }
            if (d) closedir(d);
        }
        if (!rc && rt && nnt_runtime_config_path(rt))
            rc = out_is_not(flag, out, &os, nnt_runtime_config_path(rt), "the INI configuration");
        if (!rc) rc = out_is_not_mapped(flag, out, &os);
        const char *kind, *name, *file, *detail;
        for (int i = 0; !rc && rt && nnt_runtime_plugin(rt, i, &kind, &name, &file, &detail); i++)
            rc = out_is_not(flag, out, &os, file, "a loaded plugin");
        for (int i = 0; !rc && i < o->n_reqs; i++)
            if (o->reqs[i].file) {
                char what[48];
                snprintf(what, sizeof what, "the %s file", o->reqs[i].flag);
                rc = out_is_not(flag, out, &os, o->reqs[i].file, what);
            }
        for (int r = 0; !rc && r < o->n_rows; r++)
            if (o->rows[r].kind == ROW_FILE || o->rows[r].kind == ROW_TOKENS_FILE)
                rc = out_is_not(flag, out, &os, o->rows[r].arg,
                                o->rows[r].kind == ROW_FILE ? "the --prompt-file file" : "the --tokens-file file");
        if (!rc && o->request_file) rc = out_is_not(flag, out, &os, o->request_file, "the --request file");
        out_ctx x = {.flag = flag, .out = out, .os = &os};
        if (!rc && o->request_file) rc = cli_request_files(o->request_file, out_is_not_field, &x);
        if (rc) return rc;
    }
    size_t n = strlen(out);
    char *dir = malloc(n + 2);
    if (!dir) return cli_arg_error("%s", "out of memory");
    memcpy(dir, out, n + 1);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        strcpy(dir, ".");
    struct stat sb;
    int rc = 0;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(dir, W_OK) != 0)
        rc = cli_arg_error("%s %s: the directory '%s' does not exist or is not writable", flag, out, dir);
    free(dir);
    return rc;
}

/* The file a path would name: its folder resolved (links, "..") and its last name, so that two
 * spellings of one new file compare equal; NULL when the folder does not resolve. */
static char *target_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[4096], real[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1, slash ? path : ".");
    if (!realpath(dir, real)) return NULL;
    size_t n = strlen(real) + strlen(slash ? slash + 1 : path) + 2;
    char *out = malloc(n);
    if (out) snprintf(out, n, "%s/%s", real, slash ? slash + 1 : path);
    return out;
}

/* The run's outputs (--out and --plot), checked before any forward runs: each as check_output
 * says, and never both the same file (one would silently replace the other). Returns 0 or 2. */
int cli_check_out(const cli_opts *o, nnt_runtime *rt)
{
    int rc = check_output(o, rt, "--out", o->out);
    if (!rc) rc = check_output(o, rt, "--plot", o->plot);
    if (!rc && o->out && o->plot) {
        char *a = target_of(o->out), *b = target_of(o->plot);
        if (a && b && strcmp(a, b) == 0)
            rc = cli_arg_error("--plot %s: is the file --out %s writes too; give the picture and the values two files",
                               o->plot, o->out);
        free(a);
        free(b);
    }
    return rc;
}

/* ---- the write of --out: interrupting signals held off until it is over ----
 * The library writes --out into an unnamed file in its folder and links it into place
 * (nnt_write_file), falling back to a named temporary file where the file system has no unnamed
 * files. A SIGINT, SIGTERM or SIGHUP that came in the middle of that fallback would leave the
 * temporary file behind, and one in the middle of any write abandons it; while the write runs,
 * these signals are only noted (by whichever thread receives them), and the first one noted is
 * raised again, with the disposition it had before, once the file is complete or removed. The
 * flag is the one piece of global state: a signal handler can reach no other. */
static volatile sig_atomic_t held_signal;

static void note_signal(int sig)
{
    if (!held_signal) held_signal = sig;
}

static const int HELD_SIGNALS[] = {SIGINT, SIGTERM, SIGHUP};
#define N_HELD (sizeof HELD_SIGNALS / sizeof *HELD_SIGNALS)

static void hold_signals(struct sigaction *old)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = note_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < N_HELD; i++) sigaddset(&sa.sa_mask, HELD_SIGNALS[i]);
    held_signal = 0;
    for (size_t i = 0; i < N_HELD; i++) {
        sigaction(HELD_SIGNALS[i], NULL, &old[i]);
        if (old[i].sa_handler != SIG_IGN) sigaction(HELD_SIGNALS[i], &sa, NULL); /* an ignored one stays ignored */
    }
}

static void release_signals(const struct sigaction *old)
{
    for (size_t i = 0; i < N_HELD; i++) sigaction(HELD_SIGNALS[i], &old[i], NULL);
    int sig = held_signal;
    held_signal = 0;
    if (sig) {
        fflush(stdout);
        raise(sig);
    }
}

int cli_write_out(const cli_opts *o, nnt_runtime *rt, const nnt_result *res)
{
    int rc = cli_check_out(o, rt); /* again: the files may have changed while the forward ran */
    if (rc) return rc;
    struct sigaction old[N_HELD];
    hold_signals(old);
    nnt_status st = nnt_result_write_safetensors(res, o->out);
    release_signals(old);
    return st == NNT_OK ? 0 : cli_fail(o, rt, "--out");
}

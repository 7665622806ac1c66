/* runtime.c - opening a runtime: finding the INI file, loading and checking the plugins, and
 * the routine table handed to them. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr */
#endif
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

/* Compile definitions from CMakeLists.txt:
 *   NNT_BUILD_LIBDIR    the build tree's directory of libnnt (where this library is built)
 *   NNT_BUILD_CONFIG    the build tree's nnt.ini
 *   NNT_LIBDIR_TO_CONFIG the installed nnt.ini relative to the installed libnnt's directory
 *                        (e.g. "../share/nnt/nnt.ini"), or an absolute path when the install
 *                        directories were given as absolute paths
 *   NNT_INSTALL_CONFIG  the installed nnt.ini under the prefix given at configure time, used
 *                        only when this library cannot find its own file */
#ifndef NNT_BUILD_LIBDIR
#define NNT_BUILD_LIBDIR ""
#endif
#ifndef NNT_BUILD_CONFIG
#define NNT_BUILD_CONFIG ""
#endif
#ifndef NNT_LIBDIR_TO_CONFIG
#define NNT_LIBDIR_TO_CONFIG ""
#endif
#ifndef NNT_INSTALL_CONFIG
#define NNT_INSTALL_CONFIG ""
#endif

static int same_dir(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* The configuration that belongs to the running libnnt (a new string, or NULL when out of
 * memory): the build tree's nnt.ini when this library is the one in the build tree, else the
 * nnt.ini installed next to it (<libdir>/<NNT_LIBDIR_TO_CONFIG>, normalised). The decision
 * follows the library's own file, found with dladdr, so an installed copy never reads the build
 * tree's configuration, and an installation moved to another prefix still finds its own. */
static char *default_config(void)
{
    Dl_info info;
    char lib[PATH_MAX];
    if (dladdr((const void *)&nnt_runtime_open, &info) && info.dli_fname && realpath(info.dli_fname, lib)) {
        char *dir = nnt_dirname(lib);
        if (!dir) return NULL;
        if (*NNT_BUILD_LIBDIR && same_dir(dir, NNT_BUILD_LIBDIR)) {
            free(dir);
            return nnt_strdup(NNT_BUILD_CONFIG);
        }
        char *path = *NNT_LIBDIR_TO_CONFIG ? nnt_path_join(dir, NNT_LIBDIR_TO_CONFIG) : nnt_strdup(NNT_INSTALL_CONFIG);
        free(dir);
        char real[PATH_MAX];
        if (path && realpath(path, real)) { /* "<prefix>/lib/../share/..." -> "<prefix>/share/..." */
            free(path);
            path = nnt_strdup(real);
        }
        return path;
    }
    /* dladdr found no file for this code: the build tree's INI when present, else the install's */
    if (*NNT_BUILD_CONFIG && nnt_file_exists(NNT_BUILD_CONFIG)) return nnt_strdup(NNT_BUILD_CONFIG);
    return nnt_strdup(NNT_INSTALL_CONFIG);
}

/* --config FILE, then NNT_CONFIG, then the configuration that belongs to this library. */
static char *choose_config(const char *arg)
{
    if (arg && *arg) return nnt_strdup(arg);
    const char *env = getenv("NNT_CONFIG");
    if (env && *env) return nnt_strdup(env);
    return default_config();
}

nnt_status nnt_runtime_open(const char *ini_path, nnt_runtime **out)
{
    if (!out) return NNT_ERR_INVALID_ARGUMENT;
    nnt_runtime *rt = calloc(1, sizeof *rt);
    *out = rt;
    if (!rt) return NNT_ERR_OUT_OF_MEMORY;
    nnt_guard_init(&rt->guard);
    nnt_core_api_init(&rt->core);
    char *path = choose_config(ini_path);
    rt->config_path = path;
    if (!path || !*path)
        return nnt_err_set(&rt->err, NNT_ERR_CONFIG,
                           "no configuration file: pass --config FILE or set NNT_CONFIG");
    nnt_status st = nnt_ini_load(path, &rt->ini, &rt->err);
    if (st == NNT_ERR_IO && !(ini_path && *ini_path) && !(getenv("NNT_CONFIG") && *getenv("NNT_CONFIG")))
        nnt_err_prefix(&rt->err, "the default configuration of this libnnt (pass --config FILE or set NNT_CONFIG)");
    if (st != NNT_OK) return st;
    return nnt_plugins_load_all(rt->ini, &rt->plugins, &rt->err);
}

static void runtime_close_held(nnt_runtime *rt)
{
    if (!rt) return;
    if (rt->transport_handle) dlclose(rt->transport_handle);
    nnt_plugins_free(&rt->plugins);
    nnt_ini_free(rt->ini);
    free(rt->config_path);
    nnt_guard_destroy(&rt->guard);
    free(rt);
}

void nnt_runtime_close(nnt_runtime *rt)
{
    /* the guard is freed with the runtime: entered only to see that no call runs */
    if (nnt_guard_enter_wait(rt, "nnt_runtime_close") != NNT_OK) return; /* from a callback: nothing is freed */
    nnt_guard_leave(rt);
    runtime_close_held(rt);
}

const char *nnt_last_error(const nnt_runtime *rt)
{
    if (!rt) return "no runtime (out of memory)";
    return rt->err.msg[0] ? rt->err.msg : nnt_status_str(rt->err.status);
}

nnt_status nnt_last_status(const nnt_runtime *rt)
{
    return rt ? rt->err.status : NNT_ERR_OUT_OF_MEMORY;
}

const char *nnt_runtime_config_path(const nnt_runtime *rt)
{
    return rt ? rt->config_path : NULL;
}

int nnt_runtime_plugin(const nnt_runtime *rt, int i, const char **kind, const char **name,
                       const char **file, const char **detail)
{
    if (!rt || i < 0 || i >= rt->plugins.n) return 0;
    const nnt_plugin *p = rt->plugins.items[i];
    const nnt_plugin_header *h = p->kind == NNT_PLUGIN_FAMILY ? &p->family->header : &p->backend->header;
    if (kind) *kind = p->kind == NNT_PLUGIN_FAMILY ? "family" : "backend";
    if (name) *name = h->name;
    if (file) *file = p->file;
    if (detail)
        *detail = p->kind == NNT_PLUGIN_FAMILY ? (p->be ? p->be->backend->header.name : "none") : h->summary;
    return 1;
}

int nnt_runtime_warning(const nnt_runtime *rt, int i, const char **file, const char **reason)
{
    if (!rt || i < 0 || i >= rt->plugins.n_warnings) return 0;
    if (file) *file = rt->plugins.warnings[i].file;
    if (reason) *reason = rt->plugins.warnings[i].reason;
    return 1;
}

/* A launcher's mark in the environment: Open MPI's mpirun, or a PMI / PMIx one (MPICH, Slurm). */
static int under_launcher(void)
{
    static const char *const VARS[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++)
        if (getenv(VARS[i])) return 1;
    return 0;
}

nnt_status nnt_runtime_transport(nnt_runtime *rt, const nnt_transport_descriptor **out)
{
    if (!rt || !out) return NNT_ERR_INVALID_ARGUMENT;
    nnt_err_clear(&rt->err);
    *out = NULL;
    if (!rt->transport) {
        if (!under_launcher()) return NNT_OK;
        if (!rt->ini->dist_transport)
            return nnt_err_set(&rt->err, NNT_ERR_CONFIG,
                               "%s: started by a launcher (mpirun), but the file has no [distributed] transport = FILE",
                               rt->config_path);
        nnt_status st = nnt_transport_load(rt->ini->dist_transport, &rt->transport_handle, &rt->transport, &rt->err);
        if (st != NNT_OK) return st;
    }
    if (rt->transport->launched()) *out = rt->transport;
    return NNT_OK;
}

void nnt_runtime_distributed(const nnt_runtime *rt, double *timeout_s, const int **stage_cuts, int *n_stage_cuts)
{
    const nnt_ini *ini = rt ? rt->ini : NULL;
    if (timeout_s) *timeout_s = ini && ini->dist_timeout > 0 ? ini->dist_timeout : 600.0;
    if (stage_cuts) *stage_cuts = ini ? ini->dist_cuts : NULL;
    if (n_stage_cuts) *n_stage_cuts = ini ? ini->n_dist_cuts : -1;
}

/* plugin_host.c - loading family and backend plugins: dlopen, the descriptor checks made
 * before any plugin function runs, conflict checks, backend creation and the family-to-backend
 * wiring the INI file asks for. */
#include <dirent.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/internal.h"

static int valid_name(const char *s)
{
    if (!s || !*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_')) return 0;
    return 1;
}

/* Checks the header shared by both descriptor kinds. `min_size` is the descriptor size of ABI
 * minor 0, `size` the size this core knows. */
static nnt_status check_header(const char *file, const char *symbol, const nnt_plugin_header *h,
                               nnt_plugin_kind kind, size_t min_size, size_t size, nnt_error *err)
{
    if (h->magic != NNT_PLUGIN_MAGIC)
        return nnt_err_set(err, NNT_ERR_PLUGIN,
                           "%s: symbol '%s' does not start with an nnt plugin header (magic 0x%08x)", file,
                           symbol, h->magic);
    if (h->abi_major != NNT_ABI_MAJOR)
        return nnt_err_set(err, NNT_ERR_ABI,
                           "%s: built for nnt plugin ABI %u.%u, but this core speaks ABI %d.%d (majors must be "
                           "equal); rebuild the plugin against this SDK",
                           file, h->abi_major, h->abi_minor, NNT_ABI_MAJOR, NNT_ABI_MINOR);
    if (h->abi_minor > NNT_ABI_MINOR)
        return nnt_err_set(err, NNT_ERR_ABI,
                           "%s: built for nnt plugin ABI %u.%u, newer than this core's %d.%d; update nnt or "
                           "rebuild the plugin against this SDK",
                           file, h->abi_major, h->abi_minor, NNT_ABI_MAJOR, NNT_ABI_MINOR);
    if (h->kind != (uint32_t)kind)
        return nnt_err_set(err, NNT_ERR_PLUGIN, "%s: symbol '%s' declares plugin kind %u, expected %d", file,
                           symbol, h->kind, (int)kind);
    if (h->struct_size < min_size || h->struct_size > size)
        return nnt_err_set(err, NNT_ERR_ABI,
                           "%s: descriptor '%s' is %u bytes; ABI %d.%d expects between %zu and %zu",
                           file, symbol, h->struct_size, NNT_ABI_MAJOR, NNT_ABI_MINOR, min_size, size);
    if (!valid_name(h->name))
        return nnt_err_set(err, NNT_ERR_PLUGIN, "%s: plugin name '%s' is not of the form [a-z0-9_]+", file,
                           h->name ? h->name : "(null)");
    return NNT_OK;
}

static nnt_status check_family(const char *file, const nnt_family_descriptor *d, nnt_error *err)
{
    nnt_status st = check_header(file, NNT_FAMILY_SYMBOL, &d->header, NNT_PLUGIN_FAMILY,
                                 sizeof(nnt_family_descriptor), sizeof(nnt_family_descriptor), err);
    if (st != NNT_OK) return st;
    if (!d->architectures || !d->architectures[0])
        return nnt_err_set(err, NNT_ERR_PLUGIN, "%s: family '%s' lists no architectures", file, d->header.name);
    for (const char *const *a = d->architectures; *a; a++)
        if (!**a) return nnt_err_set(err, NNT_ERR_PLUGIN, "%s: family '%s' lists an empty architecture", file, d->header.name);
    const struct {
        const void *fn;
        const char *name;
    } fns[] = {{(const void *)d->load, "load"},
               {(const void *)d->unload, "unload"},
               {(const void *)d->info, "info"},
               {(const void *)d->value_info, "value_info"},
               {(const void *)d->build_tree, "build_tree"},
               {(const void *)d->forward, "forward"},
               {(const void *)d->project, "project"}};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        if (!fns[i].fn)
            return nnt_err_set(err, NNT_ERR_PLUGIN, "%s: family '%s' leaves '%s' NULL", file, d->header.name,
                               fns[i].name);
    return NNT_OK;
}

static nnt_status check_backend(const char *file, const nnt_backend_descriptor *d, nnt_error *err)
{
    nnt_status st = check_header(file, NNT_BACKEND_SYMBOL, &d->header, NNT_PLUGIN_BACKEND,
                                 sizeof(nnt_backend_descriptor), sizeof(nnt_backend_descriptor), err);
    if (st != NNT_OK) return st;
    if (!d->create || !d->destroy || !d->ops)
        return nnt_err_set(err, NNT_ERR_PLUGIN, "%s: backend '%s' leaves create, destroy or ops NULL", file,
                           d->header.name);
    /* every op of the table must be present */
    const void *const *ops = (const void *const *)d->ops;
    size_t n = sizeof(nnt_backend_ops) / sizeof(void *);
    for (size_t i = 0; i < n; i++)
        if (!ops[i])
            return nnt_err_set(err, NNT_ERR_PLUGIN, "%s: backend '%s' leaves operation %zu of its table NULL", file,
                               d->header.name, i);
    return NNT_OK;
}

nnt_status nnt_plugin_load(const char *file, nnt_plugin **out, nnt_error *err)
{
    *out = NULL;
    struct stat sb;
    if (stat(file, &sb) != 0 || !S_ISREG(sb.st_mode))
        return nnt_err_set(err, NNT_ERR_IO, "%s: plugin file does not exist", file);
    /* RTLD_NODELETE: a backend may leave worker threads (OpenMP, OpenBLAS) that must never
     * outlive their code, so plugin code stays mapped after dlclose. */
    void *h = dlopen(file, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        const char *why = dlerror();
        return nnt_err_set(err, NNT_ERR_PLUGIN, "%s: cannot be loaded as a shared object: %s", file,
                           why ? why : "unknown reason");
    }
    const nnt_family_descriptor *fam = dlsym(h, NNT_FAMILY_SYMBOL);
    const nnt_backend_descriptor *be = dlsym(h, NNT_BACKEND_SYMBOL);
    nnt_status st = NNT_OK;
    if (!fam && !be)
        st = nnt_err_set(err, NNT_ERR_PLUGIN, "%s: not an nnt plugin: it exports neither '%s' nor '%s'", file,
                         NNT_FAMILY_SYMBOL, NNT_BACKEND_SYMBOL);
    else if (fam && be)
        st = nnt_err_set(err, NNT_ERR_PLUGIN, "%s: exports both '%s' and '%s'; a plugin is one or the other", file,
                         NNT_FAMILY_SYMBOL, NNT_BACKEND_SYMBOL);
    else if (fam)
        st = check_family(file, fam, err);
    else
        st = check_backend(file, be, err);
    if (st != NNT_OK) {
        dlclose(h);
        return st;
    }
    nnt_plugin *p = calloc(1, sizeof *p);
    if (!p) {
        dlclose(h);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    p->file = nnt_strdup(file);
    p->handle = h;
    p->kind = fam ? NNT_PLUGIN_FAMILY : NNT_PLUGIN_BACKEND;
    p->family = fam;
    p->backend = be;
    *out = p;
    return NNT_OK;
}

void nnt_plugin_unload(nnt_plugin *p)
{
    if (!p) return;
    if (p->be_ctx) p->backend->destroy(p->be_ctx);
    if (p->handle) dlclose(p->handle);
    free(p->file);
    free(p);
}

static const char *pname(const nnt_plugin *p)
{
    return p->kind == NNT_PLUGIN_FAMILY ? p->family->header.name : p->backend->header.name;
}

static nnt_status add_plugin(nnt_plugin_set *set, const char *file, nnt_error *err)
{
    for (int i = 0; i < set->n; i++)
        if (strcmp(set->items[i]->file, file) == 0) return NNT_OK; /* listed twice: load once */
    nnt_plugin *p;
    nnt_status st = nnt_plugin_load(file, &p, err);
    if (st != NNT_OK) return st;
    for (int i = 0; i < set->n; i++) {
        nnt_plugin *q = set->items[i];
        if (q->kind != p->kind) continue;
        if (strcmp(pname(q), pname(p)) == 0) {
            st = nnt_err_set(err, NNT_ERR_CONFLICT, "two %s plugins are named '%s': %s and %s",
                             p->kind == NNT_PLUGIN_FAMILY ? "family" : "backend", pname(p), q->file, p->file);
            break;
        }
        if (p->kind != NNT_PLUGIN_FAMILY) continue;
        for (const char *const *a = p->family->architectures; *a && st == NNT_OK; a++)
            for (const char *const *b = q->family->architectures; *b; b++)
                if (strcmp(*a, *b) == 0) {
                    st = nnt_err_set(err, NNT_ERR_CONFLICT,
                                     "architecture '%s' is claimed by two family plugins: '%s' (%s) and '%s' (%s)", *a,
                                     pname(q), q->file, pname(p), p->file);
                    break;
                }
        if (st != NNT_OK) break;
    }
    if (st != NNT_OK) {
        nnt_plugin_unload(p);
        return st;
    }
    nnt_plugin **g = realloc(set->items, (size_t)(set->n + 1) * sizeof *g);
    if (!g) {
        nnt_plugin_unload(p);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    set->items = g;
    set->items[set->n++] = p;
    return NNT_OK;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static nnt_status load_dir(nnt_plugin_set *set, const nnt_ini *ini, const char *dir, int line,
                           nnt_error *err)
{
    DIR *d = opendir(dir);
    if (!d) return nnt_err_set(err, NNT_ERR_IO, "%s:%d: plugin directory '%s' cannot be opened", ini->path, line, dir);
    char **names = NULL;
    int n = 0;
    nnt_status st = NNT_OK;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".so") != 0) continue;
        char **g = realloc(names, (size_t)(n + 1) * sizeof *g);
        if (!g) {
            st = nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
            break;
        }
        names = g;
        names[n++] = nnt_path_join(dir, e->d_name);
    }
    closedir(d);
    if (names) qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n && st == NNT_OK; i++) st = add_plugin(set, names[i], err);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return st;
}

static nnt_plugin *find(const nnt_plugin_set *set, nnt_plugin_kind kind, const char *name)
{
    for (int i = 0; i < set->n; i++)
        if (set->items[i]->kind == kind && strcmp(pname(set->items[i]), name) == 0) return set->items[i];
    return NULL;
}

static void list_names(const nnt_plugin_set *set, nnt_plugin_kind kind, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < set->n && k < n; i++)
        if (set->items[i]->kind == kind)
            k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? ", " : "", pname(set->items[i]));
    if (k == 0) snprintf(buf, n, "none");
}

static nnt_status create_backend(nnt_plugin *be, const nnt_ini *ini, nnt_error *err)
{
    if (be->be_ctx) return NNT_OK;
    const nnt_ini_section *s = nnt_ini_section_find(ini, "backend", pname(be));
    int n = s ? s->n_kv : 0;
    const char **keys = calloc((size_t)n + 1, sizeof *keys), **vals = calloc((size_t)n + 1, sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    for (int i = 0; i < n; i++) {
        keys[i] = s->kv[i].key;
        vals[i] = s->kv[i].value;
    }
    nnt_backend_options opt = {keys, vals, n, ini->path};
    nnt_status st = be->backend->create(&opt, &be->be_ctx, err);
    free(keys);
    free(vals);
    if (st != NNT_OK) {
        be->be_ctx = NULL;
        nnt_err_prefix(err, "%s: backend '%s' (%s)", ini->path, pname(be), be->file);
    }
    return st;
}

nnt_status nnt_plugins_load_all(const nnt_ini *ini, nnt_plugin_set *set, nnt_error *err)
{
    nnt_status st = NNT_OK;
    for (int i = 0; i < ini->n_dirs && st == NNT_OK; i++) st = load_dir(set, ini, ini->dirs[i], ini->dir_lines[i], err);
    for (int i = 0; i < ini->n_files && st == NNT_OK; i++) {
        st = add_plugin(set, ini->files[i], err);
        if (st != NNT_OK) nnt_err_prefix(err, "%s:%d", ini->path, ini->file_lines[i]);
    }
    if (st != NNT_OK) return st;
    char have[512];
    /* sections must name loaded plugins */
    for (int i = 0; i < ini->n_sections; i++) {
        const nnt_ini_section *s = &ini->sections[i];
        nnt_plugin_kind kind = strcmp(s->kind, "family") == 0 ? NNT_PLUGIN_FAMILY : NNT_PLUGIN_BACKEND;
        if (!find(set, kind, s->name)) {
            list_names(set, kind, have, sizeof have);
            return nnt_err_set(err, NNT_ERR_NOT_FOUND, "%s:%d: [%s.%s] names no loaded %s plugin (loaded: %s)",
                               ini->path, s->line, s->kind, s->name, s->kind, have);
        }
    }
    /* attach every family to its backend, creating the backends that are used */
    for (int i = 0; i < set->n; i++) {
        nnt_plugin *p = set->items[i];
        if (p->kind != NNT_PLUGIN_FAMILY) continue;
        const nnt_ini_section *s = nnt_ini_section_find(ini, "family", pname(p));
        int line = s ? s->line : 0;
        const char *want = nnt_ini_get(s, "backend", &line);
        if (!want) want = "cpu";
        nnt_plugin *be = find(set, NNT_PLUGIN_BACKEND, want);
        if (!be) {
            list_names(set, NNT_PLUGIN_BACKEND, have, sizeof have);
            if (s && nnt_ini_get(s, "backend", NULL))
                return nnt_err_set(err, NNT_ERR_NOT_FOUND,
                                   "%s:%d: family '%s' is configured to use backend '%s', which no loaded plugin provides "
                                   "(loaded backends: %s)",
                                   ini->path, line, pname(p), want, have);
            return nnt_err_set(err, NNT_ERR_NOT_FOUND,
                               "%s: family '%s' uses the default backend 'cpu', which no loaded plugin provides "
                               "(loaded backends: %s); add its directory under [plugins]",
                               ini->path, pname(p), have);
        }
        st = create_backend(be, ini, err);
        if (st != NNT_OK) return st;
        p->be = be;
        /* precision = f32 (the default) | bf16 */
        int pline = s ? s->line : 0;
        const char *prec = nnt_ini_get(s, "precision", &pline);
        p->precision = NNT_PRECISION_F32;
        if (prec && strcmp(prec, "bf16") == 0)
            p->precision = NNT_PRECISION_BF16;
        else if (prec && strcmp(prec, "f32") != 0)
            return nnt_err_set(err, NNT_ERR_CONFIG, "%s:%d: family '%s' has precision = '%s'; expected f32 or bf16",
                               ini->path, pline, pname(p), prec);
    }
    return NNT_OK;
}

void nnt_plugins_free(nnt_plugin_set *set)
{
    /* families first: their models are gone by now, backends after */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < set->n; i++) {
            nnt_plugin *p = set->items[i];
            if (!p || (pass == 0) != (p->kind == NNT_PLUGIN_FAMILY)) continue;
            nnt_plugin_unload(p);
            set->items[i] = NULL;
        }
    free(set->items);
    set->items = NULL;
    set->n = 0;
}

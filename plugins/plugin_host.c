/* plugin_host.c - loading family and backend plugins: dlopen, the descriptor checks made
 * before any plugin function runs, conflict checks, backend creation and the family-to-backend
 * wiring the INI file asks for.
 *
 * What fails is an error only where it is needed: a file found by scanning a [plugins] dir that
 * cannot be used (not loadable, not a plugin, another ABI, a bad descriptor, a name or
 * architecture already taken) is skipped and kept as a warning, and so is a family the INI does
 * not name whose backend is missing or fails to start (a model load that picks it then fails with
 * the reason). A `file =` plugin, a [family.X] or [backend.Y] section and the backend a family
 * section asks for must work, or the runtime does not open; such errors, and a model load that
 * finds no family, say which skipped file was probably meant (nnt_plugins_skip_hint). */
#include <dirent.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
                                 NNT_FAMILY_DESCRIPTOR_MIN_SIZE, sizeof(nnt_family_descriptor), err);
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

/* The backend ops: name and offset, in nnt_op order (table order up to indexer_scores; the
 * forward ops appended after the backward entries come last). */
#define OP(name) {#name, offsetof(nnt_backend_ops, name)}
static const struct {
    const char *name;
    size_t offset;
} OPS[] = {OP(alloc),          OP(free),           OP(upload),         OP(download),         OP(prepare_weight),
           OP(release_weight), OP(weight_bytes),   OP(linear),         OP(rms_norm),         OP(embedding),
           OP(add),            OP(swap12),         OP(copy),           OP(fill),             OP(scale),
           OP(rope),           OP(attn_scores),    OP(softmax),        OP(attn_mix),         OP(swiglu),
           OP(route),          OP(gather_rows),    OP(scatter_add_rows), OP(scatter_rows),   OP(sum_axis1),
           OP(conv1d_causal),  OP(kda_gate),       OP(sigmoid),        OP(delta_rule),       OP(rms_norm_gated),
           OP(copy_cols),      OP(zero_rows),      OP(hyper_connection), OP(hyper_mix),      OP(hyper_head),
           OP(compress),       OP(indexer_scores),   OP(scale_rows),     OP(attn_fused)};
#undef OP
_Static_assert(sizeof OPS / sizeof OPS[0] == NNT_OP_COUNT, "OPS lists every nnt_op");
_Static_assert(NNT_OP_COUNT <= 64, "ops_needed is one 64-bit set");
_Static_assert(offsetof(nnt_backend_ops, linear_backward) == offsetof(nnt_backend_ops, indexer_scores) + sizeof(void (*)(void)),
               "the backward entries of ABI 3.5 follow indexer_scores");
/* The backward entries (ABI 3.5) follow the forward ops of 3.0; they are not nnt_op capabilities
 * (a missing one is refused by name when a gradient needs it), and a table shorter than them
 * reads them as NULL like any other entry past struct_size. ABI 3.6 appended scale_rows (an
 * nnt_op) and its backward after them. */
_Static_assert(offsetof(nnt_backend_ops, scale_rows) == offsetof(nnt_backend_ops, copy_cols_backward) + sizeof(void (*)(void)),
               "scale_rows (ABI 3.6) follows the backward entries of 3.5");
/* ABI 3.7 appended the backward entries of DeepSeek-V4's hyper-connections and compressors. */
_Static_assert(offsetof(nnt_backend_ops, hyper_connection_backward) ==
                   offsetof(nnt_backend_ops, scale_rows_backward) + sizeof(void (*)(void)),
               "the backward entries of ABI 3.7 follow scale_rows_backward");
/* ABI 3.8 appended the backward entries of Kimi Delta Attention's recurrent ops. */
_Static_assert(offsetof(nnt_backend_ops, conv1d_causal_backward) ==
                   offsetof(nnt_backend_ops, compress_backward) + sizeof(void (*)(void)),
               "the backward entries of ABI 3.8 follow compress_backward");
/* ABI 3.11 appended attn_fused (an nnt_op) after them. */
_Static_assert(offsetof(nnt_backend_ops, attn_fused) ==
                   offsetof(nnt_backend_ops, rms_norm_gated_backward) + sizeof(void (*)(void)),
               "attn_fused (ABI 3.11) follows the backward entries of 3.8");
/* ABI 3.15 appended `features`, not an op, after it. */
_Static_assert(offsetof(nnt_backend_ops, features) == offsetof(nnt_backend_ops, attn_fused) + sizeof(void (*)(void)),
               "features (ABI 3.15) follows attn_fused");
_Static_assert(sizeof(nnt_backend_ops) == offsetof(nnt_backend_ops, features) + sizeof(uint64_t),
               "features is the table's last entry; append new forward ops to OPS and nnt_op");

/* Op `op` of a table copied by check_backend (NULL when absent). */
static const void *op_fn(const nnt_backend_ops *t, int op)
{
    const void *fn;
    memcpy(&fn, (const char *)t + OPS[op].offset, sizeof fn);
    return fn;
}

/* Checks a backend descriptor and copies its op table into *ops: the first struct_size bytes,
 * the rest zero. Every required op must be present; the optional ones may be NULL. */
static nnt_status check_backend(const char *file, const nnt_backend_descriptor *d, nnt_backend_ops *ops,
                                nnt_error *err)
{
    nnt_status st = check_header(file, NNT_BACKEND_SYMBOL, &d->header, NNT_PLUGIN_BACKEND,
                                 sizeof(nnt_backend_descriptor), sizeof(nnt_backend_descriptor), err);
    if (st != NNT_OK) return st;
    if (!d->create || !d->destroy || !d->ops)
        return nnt_err_set(err, NNT_ERR_PLUGIN, "%s: backend '%s' leaves create, destroy or ops NULL", file,
                           d->header.name);
    uint32_t size = d->ops->struct_size;
    if (size < NNT_BACKEND_OPS_MIN_SIZE || size > sizeof(nnt_backend_ops))
        return nnt_err_set(err, NNT_ERR_ABI,
                           "%s: backend '%s' has an op table of %u bytes (struct_size); ABI %d.%d expects between %zu "
                           "(the required ops) and %zu",
                           file, d->header.name, size, NNT_ABI_MAJOR, NNT_ABI_MINOR, (size_t)NNT_BACKEND_OPS_MIN_SIZE,
                           sizeof(nnt_backend_ops));
    memset(ops, 0, sizeof *ops);
    memcpy(ops, d->ops, size);
    for (int i = NNT_OP_LINEAR; i < NNT_OP_COUNT; i++) /* an op the size covers only in part is absent */
        if (OPS[i].offset < size && OPS[i].offset + sizeof(void (*)(void)) > size)
            memset((char *)ops + OPS[i].offset, 0, sizeof(void (*)(void)));
    for (int i = 0; i < NNT_OP_LINEAR; i++)
        if (!op_fn(ops, i))
            return nnt_err_set(err, NNT_ERR_PLUGIN, "%s: backend '%s' leaves required operation '%s' NULL", file,
                               d->header.name, OPS[i].name);
    return NNT_OK;
}

/* Lists in buf (", "-separated, quoted) the ops of `needed` that the table lacks; returns their
 * number. */
static int missing_ops(uint64_t needed, const nnt_backend_ops *ops, char *buf, size_t n)
{
    int count = 0;
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < NNT_OP_COUNT; i++) {
        if (!(needed & NNT_OP_BIT(i)) || op_fn(ops, i)) continue;
        if (k < n) k += (size_t)snprintf(buf + k, n - k, "%s'%s'", count ? ", " : "", OPS[i].name);
        count++;
    }
    return count;
}

/* Copies what can safely be read from a descriptor whose header passed check_header: the name
 * and, for a family, its architectures. Used to say which skipped file a caller wanted. */
static void capture_identity(const nnt_plugin_header *h, const char *const *archs, nnt_plugin_warning *w)
{
    if (!w) return;
    w->name = nnt_strdup(h->name);
    if (!archs) return;
    int n = 0;
    while (n < 64 && archs[n]) n++;
    w->archs = calloc((size_t)n + 1, sizeof *w->archs);
    if (!w->archs) return;
    for (int i = 0; i < n; i++) w->archs[i] = nnt_strdup(archs[i]);
}

/* dlopens `file` (RTLD_NOW, local) once it is known to exist and to be a regular file - checked as
 * every input is, without blocking on a FIFO; dlopen then maps it by name and runs its
 * initialisers, as it does for any shared object. RTLD_NODELETE: a backend may leave worker
 * threads (OpenMP, OpenBLAS) that must never outlive their code, so plugin code stays mapped
 * after dlclose. `missing` completes the message for a file that does not exist. Errors:
 * NNT_ERR_IO (missing, not regular, unreadable), NNT_ERR_PLUGIN (dlopen refused it; its reason). */
static nnt_status open_shared(const char *file, const char *missing, void **out, nnt_error *err)
{
    *out = NULL;
    struct stat sb;
    if (stat(file, &sb) != 0) return nnt_err_set(err, NNT_ERR_IO, "%s: %s", file, missing);
    int fd;
    nnt_status regular = nnt_open_regular(file, &fd, NULL, err);
    if (regular != NNT_OK) return regular;
    close(fd);
    void *h = dlopen(file, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        const char *why = dlerror();
        size_t n = strlen(file);
        if (why && strncmp(why, file, n) == 0 && why[n] == ':' && why[n + 1] == ' ') why += n + 2; /* said once */
        return nnt_err_set(err, NNT_ERR_PLUGIN, "%s: cannot be loaded as a shared object: %s", file,
                           why ? why : "unknown reason");
    }
    *out = h;
    return NNT_OK;
}

/* nnt_plugin_load, also filling *who (when not NULL) with the name and architectures of a
 * plugin whose header was readable but which failed a later check. */
static nnt_status plugin_open(const char *file, nnt_plugin **out, nnt_plugin_warning *who, nnt_error *err)
{
    *out = NULL;
    void *h;
    nnt_status opened = open_shared(file, "plugin file does not exist", &h, err);
    if (opened != NNT_OK) return opened;
    const nnt_family_descriptor *fam = dlsym(h, NNT_FAMILY_SYMBOL);
    const nnt_backend_descriptor *be = dlsym(h, NNT_BACKEND_SYMBOL);
    nnt_status st = NNT_OK;
    nnt_backend_ops ops;
    if (!fam && !be)
        st = nnt_err_set(err, NNT_ERR_PLUGIN, "%s: not an nnt plugin: it exports neither '%s' nor '%s'", file,
                         NNT_FAMILY_SYMBOL, NNT_BACKEND_SYMBOL);
    else if (fam && be)
        st = nnt_err_set(err, NNT_ERR_PLUGIN, "%s: exports both '%s' and '%s'; a plugin is one or the other", file,
                         NNT_FAMILY_SYMBOL, NNT_BACKEND_SYMBOL);
    else if (fam)
        st = check_family(file, fam, err);
    else
        st = check_backend(file, be, &ops, err);
    if (st != NNT_OK) {
        /* the header was sound when the failure came from a later check: keep the identity */
        nnt_error scratch = {0};
        if (fam && check_header(file, NNT_FAMILY_SYMBOL, &fam->header, NNT_PLUGIN_FAMILY,
                                NNT_FAMILY_DESCRIPTOR_MIN_SIZE, sizeof(nnt_family_descriptor), &scratch) == NNT_OK)
            capture_identity(&fam->header, fam->architectures, who);
        else if (be && check_header(file, NNT_BACKEND_SYMBOL, &be->header, NNT_PLUGIN_BACKEND,
                                    sizeof(nnt_backend_descriptor), sizeof(nnt_backend_descriptor), &scratch) == NNT_OK)
            capture_identity(&be->header, NULL, who);
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
    if (fam) {
        /* a descriptor shorter than this core's (an older minor's): its fields up to
         * struct_size, the later ones absent */
        memcpy(&p->family_desc, fam, fam->header.struct_size);
        p->family = &p->family_desc;
        p->ops_needed = NNT_STRUCT_HAS(&fam->header, nnt_family_descriptor, ops_needed) && fam->ops_needed
                            ? fam->ops_needed
                            : NNT_OPS_ALL_3_0;
    }
    p->backend = be;
    if (be) p->ops = ops;
    *out = p;
    return NNT_OK;
}

nnt_status nnt_transport_load(const char *file, void **handle, const nnt_transport_descriptor **out, nnt_error *err)
{
    *handle = NULL;
    *out = NULL;
    void *h;
    nnt_status st = open_shared(file,
                                "the transport plugin does not exist (nnt was built without MPI - Debian: "
                                "libopenmpi-dev - or [distributed] transport names another file)",
                                &h, err);
    if (st != NNT_OK) return st;
    const nnt_transport_descriptor *d = dlsym(h, NNT_TRANSPORT_SYMBOL);
    if (!d)
        st = nnt_err_set(err, NNT_ERR_PLUGIN, "%s: not an nnt transport: it does not export '%s'", file, NNT_TRANSPORT_SYMBOL);
    else
        st = check_header(file, NNT_TRANSPORT_SYMBOL, &d->header, NNT_PLUGIN_TRANSPORT, sizeof *d, sizeof *d, err);
    if (st == NNT_OK && (!d->launched || !d->open || !d->rank || !d->size || !d->send || !d->recv || !d->notify_failure || !d->failed_rank ||
                         !d->abort || !d->close))
        st = nnt_err_set(err, NNT_ERR_PLUGIN, "%s: transport '%s' leaves a function of its descriptor NULL", file, d->header.name);
    if (st != NNT_OK) {
        dlclose(h);
        return st;
    }
    *handle = h;
    *out = d;
    return NNT_OK;
}

nnt_status nnt_plugin_load(const char *file, nnt_plugin **out, nnt_error *err)
{
    return plugin_open(file, out, NULL, err);
}

void nnt_plugin_unload(nnt_plugin *p)
{
    if (!p) return;
    if (p->be_ctx) p->backend->destroy(p->be_ctx);
    if (p->handle) dlclose(p->handle);
    free(p->no_backend);
    free(p->create_failed);
    free(p->file);
    free(p);
}

static const char *pname(const nnt_plugin *p)
{
    return p->kind == NNT_PLUGIN_FAMILY ? p->family->header.name : p->backend->header.name;
}

/* The reason part of an error message "FILE: reason" (the whole message if it does not start so). */
static const char *reason_of(const char *msg, const char *file)
{
    size_t n = strlen(file);
    if (strncmp(msg, file, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ') return msg + n + 2;
    return msg;
}

/* Records a warning; takes ownership of w's name and archs. Returns nonzero when out of memory. */
static int add_warning(nnt_plugin_set *set, const char *file, const char *reason, nnt_plugin_warning *who)
{
    nnt_plugin_warning *g = realloc(set->warnings, (size_t)(set->n_warnings + 1) * sizeof *g);
    if (!g) return -1;
    set->warnings = g;
    nnt_plugin_warning *w = &set->warnings[set->n_warnings++];
    w->file = nnt_strdup(file);
    w->reason = nnt_strdup(reason);
    w->name = who ? who->name : NULL;
    w->archs = who ? who->archs : NULL;
    return 0;
}

static void free_warning(nnt_plugin_warning *w)
{
    free(w->file);
    free(w->reason);
    free(w->name);
    if (w->archs)
        for (char **a = w->archs; *a; a++) free(*a);
    free(w->archs);
}

/* Loads `file` into the set. A file the INI names (explicit) must load and must not conflict
 * with a plugin loaded before it; a file found by a directory scan that fails either way is
 * skipped and recorded as a warning, and the call returns NNT_OK. */
static nnt_status add_plugin(nnt_plugin_set *set, const char *file, int explicit_file, nnt_error *err)
{
    for (int i = 0; i < set->n; i++)
        if (strcmp(set->items[i]->file, file) == 0) { /* listed twice: load once */
            if (explicit_file) set->items[i]->explicit_file = 1;
            return NNT_OK;
        }
    nnt_plugin *p;
    nnt_plugin_warning who = {0};
    nnt_status st = plugin_open(file, &p, explicit_file ? NULL : &who, err);
    if (st != NNT_OK) {
        if (explicit_file || st == NNT_ERR_OUT_OF_MEMORY) return st;
        if (add_warning(set, file, reason_of(err->msg, file), &who) != 0) {
            free_warning(&who);
            return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        }
        nnt_err_clear(err);
        return NNT_OK;
    }
    p->explicit_file = explicit_file;
    char why[NNT_ERROR_MSG_MAX] = "";
    for (int i = 0; i < set->n; i++) {
        nnt_plugin *q = set->items[i];
        if (q->kind != p->kind) continue;
        if (strcmp(pname(q), pname(p)) == 0) {
            st = nnt_err_set(err, NNT_ERR_CONFLICT, "two %s plugins are named '%s': %s and %s",
                             p->kind == NNT_PLUGIN_FAMILY ? "family" : "backend", pname(p), q->file, p->file);
            snprintf(why, sizeof why, "%s plugin name '%s' is already taken by %s (loaded first); skipped",
                     p->kind == NNT_PLUGIN_FAMILY ? "family" : "backend", pname(p), q->file);
            break;
        }
        if (p->kind != NNT_PLUGIN_FAMILY) continue;
        for (const char *const *a = p->family->architectures; *a && st == NNT_OK; a++)
            for (const char *const *b = q->family->architectures; *b; b++)
                if (strcmp(*a, *b) == 0) {
                    st = nnt_err_set(err, NNT_ERR_CONFLICT,
                                     "architecture '%s' is claimed by two family plugins: '%s' (%s) and '%s' (%s)", *a,
                                     pname(q), q->file, pname(p), p->file);
                    snprintf(why, sizeof why,
                             "family '%s' claims architecture '%s', already served by family '%s' (%s, loaded "
                             "first); skipped",
                             pname(p), *a, pname(q), q->file);
                    break;
                }
        if (st != NNT_OK) break;
    }
    if (st != NNT_OK) {
        if (!explicit_file) {
            capture_identity(p->kind == NNT_PLUGIN_FAMILY ? &p->family->header : &p->backend->header,
                             p->kind == NNT_PLUGIN_FAMILY ? p->family->architectures : NULL, &who);
            if (add_warning(set, file, why, &who) != 0) {
                free_warning(&who);
                st = nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
            } else {
                nnt_err_clear(err);
                st = NNT_OK;
            }
        }
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
    for (int i = 0; i < n && st == NNT_OK; i++) st = add_plugin(set, names[i], 0, err);
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

/* Does warning w concern plugin `name` (by recorded name or file stem NAME.so) or `arch`? */
static int warning_matches(const nnt_plugin_warning *w, const char *name, const char *arch)
{
    if (name) {
        if (w->name && strcmp(w->name, name) == 0) return 1;
        const char *base = strrchr(w->file, '/');
        base = base ? base + 1 : w->file;
        size_t n = strlen(name);
        if (strncmp(base, name, n) == 0 && strcmp(base + n, ".so") == 0) return 1;
    }
    if (arch && w->archs)
        for (char **a = w->archs; *a; a++)
            if (strcmp(*a, arch) == 0) return 1;
    return 0;
}

void nnt_plugins_skip_hint(const nnt_plugin_set *set, const char *name, const char *arch, int any_if_none,
                           char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = '\0';
    int matched = 0;
    for (int i = 0; i < set->n_warnings && k < n; i++) {
        const nnt_plugin_warning *w = &set->warnings[i];
        if (!warning_matches(w, name, arch)) continue;
        k += (size_t)snprintf(buf + k, n - k, "; %s was skipped: %s", w->file, w->reason);
        matched++;
    }
    if (matched || !any_if_none || set->n_warnings == 0) return;
    k += (size_t)snprintf(buf + k, n - k, "; %d plugin file%s skipped:", set->n_warnings,
                          set->n_warnings == 1 ? " was" : "s were");
    for (int i = 0; i < set->n_warnings && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s %s (%s)", i ? ";" : "", set->warnings[i].file,
                              set->warnings[i].reason);
}

static nnt_status create_backend(nnt_plugin *be, const nnt_ini *ini, nnt_error *err)
{
    if (be->be_ctx) return NNT_OK;
    if (be->create_failed) return nnt_err_set(err, NNT_ERR_PLUGIN, "%s", be->create_failed);
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
    nnt_backend_options opt = {
        .struct_size = sizeof(nnt_backend_options), .keys = keys, .values = vals, .count = n, .ini_path = ini->path};
    nnt_status st = be->backend->create(&opt, &be->be_ctx, err);
    free(keys);
    free(vals);
    if (st != NNT_OK) {
        be->be_ctx = NULL;
        nnt_err_prefix(err, "%s: backend '%s' (%s)", ini->path, pname(be), be->file);
        be->create_failed = nnt_strdup(err->msg);
    }
    return st;
}

/* A family the INI does not name whose backend is unusable: kept without a backend, with the
 * reason recorded on the family and as a warning; a model load that picks it fails with it. */
static nnt_status leave_without_backend(nnt_plugin_set *set, nnt_plugin *p, nnt_error *err)
{
    p->no_backend = nnt_strdup(err->msg);
    if (!p->no_backend || add_warning(set, p->file, err->msg, NULL) != 0)
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    nnt_err_clear(err);
    return NNT_OK;
}

nnt_status nnt_plugins_load_all(const nnt_ini *ini, nnt_plugin_set *set, nnt_error *err)
{
    nnt_status st = NNT_OK;
    for (int i = 0; i < ini->n_dirs && st == NNT_OK; i++) st = load_dir(set, ini, ini->dirs[i], ini->dir_lines[i], err);
    for (int i = 0; i < ini->n_files && st == NNT_OK; i++) {
        st = add_plugin(set, ini->files[i], 1, err);
        if (st != NNT_OK) nnt_err_prefix(err, "%s:%d", ini->path, ini->file_lines[i]);
    }
    if (st != NNT_OK) return st;
    char have[512], hint[NNT_ERROR_MSG_MAX];
    /* sections must name loaded plugins */
    for (int i = 0; i < ini->n_sections; i++) {
        const nnt_ini_section *s = &ini->sections[i];
        nnt_plugin_kind kind = strcmp(s->kind, "family") == 0 ? NNT_PLUGIN_FAMILY : NNT_PLUGIN_BACKEND;
        if (!find(set, kind, s->name)) {
            list_names(set, kind, have, sizeof have);
            nnt_plugins_skip_hint(set, s->name, NULL, 0, hint, sizeof hint);
            return nnt_err_set(err, NNT_ERR_NOT_FOUND, "%s:%d: [%s.%s] names no loaded %s plugin (loaded: %s)%s",
                               ini->path, s->line, s->kind, s->name, s->kind, have, hint);
        }
    }
    /* attach every family to its backend, creating the backends that are used */
    for (int i = 0; i < set->n; i++) {
        nnt_plugin *p = set->items[i];
        if (p->kind != NNT_PLUGIN_FAMILY) continue;
        const nnt_ini_section *s = nnt_ini_section_find(ini, "family", pname(p));
        /* the INI names this family: its own section, or a file = line */
        int named = s != NULL || p->explicit_file;
        int line = s ? s->line : 0;
        const char *want = nnt_ini_get(s, "backend", &line);
        if (!want) want = "cpu";
        nnt_plugin *be = find(set, NNT_PLUGIN_BACKEND, want);
        if (!be) {
            list_names(set, NNT_PLUGIN_BACKEND, have, sizeof have);
            nnt_plugins_skip_hint(set, want, NULL, 0, hint, sizeof hint);
            if (s && nnt_ini_get(s, "backend", NULL))
                return nnt_err_set(err, NNT_ERR_NOT_FOUND,
                                   "%s:%d: family '%s' is configured to use backend '%s', which no loaded plugin provides "
                                   "(loaded backends: %s)%s",
                                   ini->path, line, pname(p), want, have, hint);
            nnt_err_set(err, NNT_ERR_NOT_FOUND,
                        "%s: family '%s' uses the default backend 'cpu', which no loaded plugin provides "
                        "(loaded backends: %s); add its directory under [plugins]%s",
                        ini->path, pname(p), have, hint);
            if (named) return err->status;
            if ((st = leave_without_backend(set, p, err)) != NNT_OK) return st;
            continue;
        }
        /* the capability check: every op the family calls must be in the backend's table */
        char miss[NNT_ERROR_MSG_MAX / 2];
        int n_miss = missing_ops(p->ops_needed, &be->ops, miss, sizeof miss);
        if (n_miss) {
            char where[600];
            if (s && nnt_ini_get(s, "backend", NULL))
                snprintf(where, sizeof where, "%s:%d: ", ini->path, line);
            else
                snprintf(where, sizeof where, "%s: ", ini->path);
            nnt_err_set(err, NNT_ERR_UNSUPPORTED,
                        "%sfamily '%s' (%s) needs backend operation%s %s, which backend '%s' (%s) does not provide",
                        where, pname(p), p->file, n_miss == 1 ? "" : "s", miss, pname(be), be->file);
            if (named) return err->status;
            if ((st = leave_without_backend(set, p, err)) != NNT_OK) return st;
            continue;
        }
        st = create_backend(be, ini, err);
        if (st != NNT_OK) {
            /* an error when the INI names the family or the backend ([backend.NAME] or file =) */
            if (named || be->explicit_file || nnt_ini_section_find(ini, "backend", pname(be))) return st;
            if ((st = leave_without_backend(set, p, err)) != NNT_OK) return st;
            continue;
        }
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
        /* weights = stored (the default) | fp8 */
        int wline = s ? s->line : 0;
        const char *wts = nnt_ini_get(s, "weights", &wline);
        p->weights = NNT_WEIGHTS_STORED;
        if (wts && strcmp(wts, "fp8") == 0)
            p->weights = NNT_WEIGHTS_FP8;
        else if (wts && strcmp(wts, "stored") != 0)
            return nnt_err_set(err, NNT_ERR_CONFIG, "%s:%d: family '%s' has weights = '%s'; expected stored or fp8",
                               ini->path, wline, pname(p), wts);
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
    for (int i = 0; i < set->n_warnings; i++) free_warning(&set->warnings[i]);
    free(set->warnings);
    set->warnings = NULL;
    set->n_warnings = 0;
}

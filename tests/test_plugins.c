/* test_plugins.c - the INI file and the plugin host: every error a broken configuration or
 * plugin must produce, shown with deliberately broken plugins built for the purpose. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

/* Writes an INI file into the scratch directory and opens a runtime from it. */
static nnt_status open_with(const char *name, const char *text, nnt_runtime **rt)
{
    char path[768];
    snprintf(path, sizeof path, "%s/%s", t_tmpdir(), name);
    CU_ASSERT_FATAL(t_write_file(path, text) == 0);
    return nnt_runtime_open(path, rt);
}

static void ini_for(char *buf, size_t n, const char *extra_plugin, const char *tail)
{
    char plug[600] = "";
    if (extra_plugin) {
        char p[512];
        snprintf(plug, sizeof plug, "file = %s\n", t_plugin(extra_plugin, p, sizeof p));
    }
    snprintf(buf, n, "[plugins]\ndir = %s/families\ndir = %s/kernels\n%s%s", NNT_TEST_BUILD_DIR, NNT_TEST_BUILD_DIR,
             plug, tail ? tail : "");
}

static void expect(const char *name, const char *text, nnt_status status, const char *needle)
{
    nnt_runtime *rt = NULL;
    nnt_status st = open_with(name, text, &rt);
    const char *msg = nnt_last_error(rt);
    if (st != status || !strstr(msg, needle))
        fprintf(stderr, "\n  %s: expected %s containing '%s', got %s: %s\n", name, nnt_status_str(status), needle,
                nnt_status_str(st), msg);
    CU_ASSERT_EQUAL(st, status);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, needle));
    nnt_runtime_close(rt);
}

static void test_build_config_loads(void)
{
    nnt_runtime *rt = t_runtime();
    int families = 0, backends = 0;
    const char *kind, *name, *file, *detail;
    for (int i = 0; nnt_runtime_plugin(rt, i, &kind, &name, &file, &detail); i++) {
        if (strcmp(kind, "family") == 0 && strcmp(name, "minimax_m2") == 0) {
            families++;
            CU_ASSERT_STRING_EQUAL(detail, "cpu");
        }
        if (strcmp(kind, "backend") == 0 && strcmp(name, "cpu") == 0) backends++;
    }
    CU_ASSERT_EQUAL(families, 1);
    CU_ASSERT_EQUAL(backends, 1);
    nnt_runtime_close(rt);
}

static void test_missing_file(void)
{
    expect("missing.ini", "[plugins]\nfile = /nonexistent/nnt/plugin.so\n", NNT_ERR_IO, "plugin file does not exist");
    expect("missing2.ini", "[plugins]\nfile = /nonexistent/nnt/plugin.so\n", NNT_ERR_IO, "missing2.ini:2");
    expect("nodir.ini", "[plugins]\ndir = /nonexistent/nnt\n", NNT_ERR_IO, "nodir.ini:2: plugin directory");
    nnt_runtime *rt = NULL;
    CU_ASSERT_EQUAL(nnt_runtime_open("/nonexistent/nnt.ini", &rt), NNT_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_last_error(rt), "/nonexistent/nnt.ini"));
    nnt_runtime_close(rt);
}

static void test_not_a_plugin(void)
{
    char ini[2048];
    ini_for(ini, sizeof ini, "not_a_plugin", NULL);
    expect("notplugin.ini", ini, NNT_ERR_PLUGIN, "not an nnt plugin");
    /* a file that is not even a shared object */
    char junk[768], text[1024];
    snprintf(junk, sizeof junk, "%s/junk.so", t_tmpdir());
    CU_ASSERT_FATAL(t_write_file(junk, "this is not an ELF file\n") == 0);
    snprintf(text, sizeof text, "[plugins]\nfile = %s\n", junk);
    expect("junk.ini", text, NNT_ERR_PLUGIN, "cannot be loaded as a shared object");
}

/* NNT_SHAPE (nnt_types.h) counts its extents and converts each to int64_t: the shapes the
 * family kit's fam_served / fam_alloc / fam_view take. Expected values written out by hand. */
static void test_shape_macro(void)
{
    int B = 2, T = 3;
    int64_t big = (int64_t)1 << 40;
    nnt_shape one = NNT_SHAPE(7), three = NNT_SHAPE(B, T, big), six = NNT_SHAPE(1, 2, 3, 4, 5, 6);
    CU_ASSERT_EQUAL(one.ndim, 1);
    CU_ASSERT_EQUAL(one.dim[0], 7);
    CU_ASSERT_EQUAL(three.ndim, 3);
    CU_ASSERT_EQUAL(three.dim[0], 2);
    CU_ASSERT_EQUAL(three.dim[1], 3);
    CU_ASSERT_EQUAL(three.dim[2], 1099511627776LL);
    CU_ASSERT_EQUAL(six.ndim, NNT_MAX_DIMS);
    CU_ASSERT_EQUAL(six.dim[5], 6);
}

static void test_abi_checks(void)
{
    char ini[2048];
    ini_for(ini, sizeof ini, "abi_major", NULL);
    expect("major.ini", ini, NNT_ERR_ABI, "majors must be equal");
    ini_for(ini, sizeof ini, "abi_minor", NULL);
    expect("minor.ini", ini, NNT_ERR_ABI, "newer than this core");
    ini_for(ini, sizeof ini, "bad_size", NULL);
    expect("size.ini", ini, NNT_ERR_ABI, "bytes; ABI");
    ini_for(ini, sizeof ini, "bad_name", NULL);
    expect("name.ini", ini, NNT_ERR_PLUGIN, "'Bad Name!' is not of the form");
    ini_for(ini, sizeof ini, "no_forward", NULL);
    expect("nofwd.ini", ini, NNT_ERR_PLUGIN, "leaves 'forward' NULL");
    ini_for(ini, sizeof ini, "null_op", NULL);
    expect("nullop.ini", ini, NNT_ERR_PLUGIN, "backend 'null_op' leaves required operation 'download' NULL");
    ini_for(ini, sizeof ini, "bad_ops_size", NULL);
    expect("opsize.ini", ini, NNT_ERR_ABI, "backend 'bad_ops_size' has an op table of 8 bytes (struct_size)");
}

static void test_conflicts(void)
{
    char ini[2048];
    ini_for(ini, sizeof ini, "dup_arch", NULL);
    expect("dup.ini", ini, NNT_ERR_CONFLICT, "architecture 'MiniMaxM2ForCausalLM' is claimed by two family plugins");
    ini_for(ini, sizeof ini, "second_cpu", NULL);
    expect("cpu2.ini", ini, NNT_ERR_CONFLICT, "two backend plugins are named 'cpu'");
}

/* The warning recorded for `file` (a path ending in /<base>), or NULL. */
static const char *warning_for(const nnt_runtime *rt, const char *base)
{
    const char *file, *reason;
    size_t n = strlen(base);
    for (int i = 0; nnt_runtime_warning(rt, i, &file, &reason); i++) {
        size_t m = strlen(file);
        if (m > n && strcmp(file + m - n, base) == 0 && file[m - n - 1] == '/') return reason;
    }
    return NULL;
}

static void expect_warning(const nnt_runtime *rt, const char *base, const char *needle)
{
    const char *reason = warning_for(rt, base);
    if (!reason || !strstr(reason, needle))
        fprintf(stderr, "\n  %s: expected a warning containing '%s', got %s\n", base, needle, reason ? reason : "none");
    CU_ASSERT_PTR_NOT_NULL(reason);
    CU_ASSERT_PTR_NOT_NULL(reason ? strstr(reason, needle) : NULL);
}

/* The backend of a loaded family ("none" without one), or NULL when it is not loaded. */
static const char *family_backend(const nnt_runtime *rt, const char *family)
{
    const char *kind, *name, *file, *detail;
    for (int i = 0; nnt_runtime_plugin(rt, i, &kind, &name, &file, &detail); i++)
        if (strcmp(kind, "family") == 0 && strcmp(name, family) == 0) return detail;
    return NULL;
}

/* <scratch>/<name>: a directory holding `link` -> `target` (and junk.so when `junk`). */
static const char *scratch_dir(const char *name, const char *link, const char *target, int junk, char *buf, size_t n)
{
    char path[1024];
    snprintf(buf, n, "%s/%s", t_tmpdir(), name);
    mkdir(buf, 0755);
    if (link) {
        snprintf(path, sizeof path, "%s/%s", buf, link);
        unlink(path);
        CU_ASSERT_FATAL(symlink(target, path) == 0);
    }
    if (junk) {
        snprintf(path, sizeof path, "%s/junk.so", buf);
        CU_ASSERT_FATAL(t_write_file(path, "this is not an ELF file\n") == 0);
    }
    return buf;
}

static void test_missing_backend(void)
{
    char ini[2048];
    ini_for(ini, sizeof ini, NULL, "\n[family.minimax_m2]\nbackend = cuda\n");
    expect("nobackend.ini", ini, NNT_ERR_NOT_FOUND, "nobackend.ini:6: family 'minimax_m2' is configured to use backend 'cuda'");
    /* families the INI does not name open without their default backend, each with a warning;
     * loading a model of one is the error */
    char text[1024];
    snprintf(text, sizeof text, "[plugins]\ndir = %s/families\n", NNT_TEST_BUILD_DIR);
    nnt_runtime *rt = NULL;
    T_OK(rt, open_with("nokernels.ini", text, &rt));
    char base[64];
    snprintf(base, sizeof base, "minimax_m2.so");
    expect_warning(rt, base, "uses the default backend 'cpu', which no loaded plugin provides");
    CU_ASSERT_STRING_EQUAL(family_backend(rt, "minimax_m2"), "none");
    nnt_model *m = NULL;
    char dir[512];
    T_FAILS(rt, nnt_model_load(rt, t_fixture("minimax_m2/fp32", dir, sizeof dir), &m), NNT_ERR_NOT_FOUND,
            "family 'minimax_m2'");
    T_FAILS(rt, nnt_model_load(rt, t_fixture("minimax_m2/fp32", dir, sizeof dir), &m), NNT_ERR_NOT_FOUND,
            "cannot load models: ");
    T_FAILS(rt, nnt_model_load(rt, t_fixture("minimax_m2/fp32", dir, sizeof dir), &m), NNT_ERR_NOT_FOUND,
            "uses the default backend 'cpu'");
    CU_ASSERT_PTR_NULL(m);
    nnt_runtime_close(rt);
    /* a [family.NAME] section names the family: then its missing backend fails the open */
    snprintf(text, sizeof text, "[plugins]\ndir = %s/families\n[family.minimax_m2]\nprecision = f32\n", NNT_TEST_BUILD_DIR);
    expect("nokernels2.ini", text, NNT_ERR_NOT_FOUND, "family 'minimax_m2' uses the default backend 'cpu'");
}

/* Every broken plugin in a scanned directory is skipped with its reason; the good ones load and
 * run a model. */
static void test_scanned_dir_skips_broken(void)
{
    char junkdir[768], text[4096];
    scratch_dir("scan-junk", NULL, NULL, 1, junkdir, sizeof junkdir);
    snprintf(text, sizeof text, "[plugins]\ndir = %s/families\ndir = %s/kernels\ndir = %s\ndir = %s\n",
             NNT_TEST_BUILD_DIR, NNT_TEST_BUILD_DIR, NNT_TEST_PLUGIN_DIR, junkdir);
    nnt_runtime *rt = NULL;
    T_OK(rt, open_with("scan.ini", text, &rt));
    expect_warning(rt, "not_a_plugin.so", "not an nnt plugin");
    expect_warning(rt, "junk.so", "cannot be loaded as a shared object");
    expect_warning(rt, "abi_major.so", "majors must be equal");
    expect_warning(rt, "abi_minor.so", "newer than this core");
    expect_warning(rt, "bad_size.so", "bytes; ABI");
    expect_warning(rt, "bad_name.so", "'Bad Name!' is not of the form");
    expect_warning(rt, "no_forward.so", "leaves 'forward' NULL");
    expect_warning(rt, "dup_arch.so", "claims architecture 'MiniMaxM2ForCausalLM', already served by family 'minimax_m2'");
    expect_warning(rt, "second_cpu.so", "backend plugin name 'cpu' is already taken by");
    expect_warning(rt, "old_backend.so", "majors must be equal");
    expect_warning(rt, "null_op.so", "backend 'null_op' leaves required operation 'download' NULL");
    expect_warning(rt, "bad_ops_size.so", "has an op table of 8 bytes (struct_size)");
    /* the reason does not repeat the file */
    const char *r = warning_for(rt, "junk.so");
    CU_ASSERT(r && !strstr(r, "junk.so"));
    int n = 0;
    while (nnt_runtime_warning(rt, n, NULL, NULL)) n++;
    CU_ASSERT_EQUAL(n, 12);
    CU_ASSERT_EQUAL(nnt_runtime_warning(rt, -1, NULL, NULL), 0);
    CU_ASSERT_EQUAL(nnt_runtime_warning(NULL, 0, NULL, NULL), 0);
    /* nothing broken was kept, and the good plugins work */
    const char *kind, *name, *file, *detail;
    for (int i = 0; nnt_runtime_plugin(rt, i, &kind, &name, &file, &detail); i++)
        CU_ASSERT_PTR_NULL(strstr(file, NNT_TEST_PLUGIN_DIR));
    CU_ASSERT_STRING_EQUAL(family_backend(rt, "minimax_m2"), "cpu");
    nnt_model *m = t_model(rt, "minimax_m2/fp32");
    CU_ASSERT_STRING_EQUAL(nnt_model_family(m), "minimax_m2");
    nnt_model_free(m);

    /* a checkpoint whose architecture only a skipped plugin claims: the error names it */
    char ckpt[768], path[1024], fx[512];
    snprintf(ckpt, sizeof ckpt, "%s/broken-ckpt", t_tmpdir());
    mkdir(ckpt, 0755);
    snprintf(path, sizeof path, "%s/config.json", ckpt);
    CU_ASSERT_FATAL(t_write_file(path, "{\"architectures\": [\"BrokenForCausalLM\"], \"model_type\": \"nothing\"}\n") == 0);
    snprintf(path, sizeof path, "%s/model.safetensors", ckpt);
    unlink(path);
    CU_ASSERT_FATAL(symlink(t_fixture("minimax_m2/fp32/model.safetensors", fx, sizeof fx), path) == 0);
    T_FAILS(rt, nnt_model_load(rt, ckpt, &m), NNT_ERR_NOT_FOUND, "no installed family plugin serves architecture 'BrokenForCausalLM'");
    T_FAILS(rt, nnt_model_load(rt, ckpt, &m), NNT_ERR_NOT_FOUND, "no_forward.so was skipped: family 'broken' leaves 'forward' NULL");
    nnt_runtime_close(rt);

    /* an INI that names a skipped plugin (a family's backend, a section) fails, with the
     * skipped file and its reason */
    char ini[sizeof text + 64];
    snprintf(ini, sizeof ini, "%s[family.minimax_m2]\nbackend = old_backend\n", text);
    expect("scan-oldbe.ini", ini, NNT_ERR_NOT_FOUND, "family 'minimax_m2' is configured to use backend 'old_backend'");
    expect("scan-oldbe2.ini", ini, NNT_ERR_NOT_FOUND, "old_backend.so was skipped: built for nnt plugin ABI");
    snprintf(ini, sizeof ini, "%s[family.broken]\nprecision = f32\n", text);
    expect("scan-fam.ini", ini, NNT_ERR_NOT_FOUND, "[family.broken] names no loaded family plugin");
    expect("scan-fam2.ini", ini, NNT_ERR_NOT_FOUND, "no_forward.so was skipped: family 'broken' leaves 'forward' NULL");
    snprintf(ini, sizeof ini, "%s[backend.old_backend]\nthreads = 1\n", text);
    expect("scan-be.ini", ini, NNT_ERR_NOT_FOUND, "old_backend.so was skipped");
}

/* A broken default backend: every family the INI leaves unnamed opens without it, and a model
 * load (or a family section) reports the backend's file and reason. */
static void test_broken_default_backend(void)
{
    char kdir[768], target[512], text[2048];
    scratch_dir("stale-kernels", "cpu.so", t_plugin("old_backend", target, sizeof target), 0, kdir, sizeof kdir);
    snprintf(text, sizeof text, "[plugins]\ndir = %s/families\ndir = %s\n", NNT_TEST_BUILD_DIR, kdir);
    nnt_runtime *rt = NULL;
    T_OK(rt, open_with("stale.ini", text, &rt));
    expect_warning(rt, "cpu.so", "majors must be equal");
    expect_warning(rt, "minimax_m2.so", "cpu.so was skipped: built for nnt plugin ABI");
    nnt_model *m = NULL;
    char dir[512];
    T_FAILS(rt, nnt_model_load(rt, t_fixture("minimax_m2/fp32", dir, sizeof dir), &m), NNT_ERR_NOT_FOUND,
            "cpu.so was skipped: built for nnt plugin ABI");
    nnt_runtime_close(rt);
    char ini[sizeof text + 64];
    snprintf(ini, sizeof ini, "%s[family.kimi_linear]\nbackend = cpu\n", text);
    expect("stale2.ini", ini, NNT_ERR_NOT_FOUND, "family 'kimi_linear' is configured to use backend 'cpu'");
    expect("stale3.ini", ini, NNT_ERR_NOT_FOUND, "cpu.so was skipped: built for nnt plugin ABI");
}

/* <build>/tests/plugins-ok/<name>.so: the test plugins that load. */
static const char *ok_plugin(const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s-ok/%s.so", NNT_TEST_PLUGIN_DIR, name);
    return buf;
}

/* The in-tree families and kernels, the test plugins `a` and `b` (NULL: none) by file =, then tail. */
static void ini_with(char *buf, size_t n, const char *a, const char *b, const char *tail)
{
    char pa[512], pb[512];
    snprintf(buf, n, "[plugins]\ndir = %s/families\ndir = %s/kernels\n%s%s%s%s%s%s%s", NNT_TEST_BUILD_DIR,
             NNT_TEST_BUILD_DIR, a ? "file = " : "", a ? ok_plugin(a, pa, sizeof pa) : "", a ? "\n" : "",
             b ? "file = " : "", b ? ok_plugin(b, pb, sizeof pb) : "", b ? "\n" : "", tail ? tail : "");
}

/* A descriptor that ends where an older minor's did (at `project`) loads; its absent fields
 * read as absent: no sessions, and it is taken to need every op. */
static void test_older_minor_accepted(void)
{
    char ini[4096];
    ini_with(ini, sizeof ini, "old_minor", NULL, NULL);
    nnt_runtime *rt = NULL;
    T_OK(rt, open_with("oldminor.ini", ini, &rt));
    CU_ASSERT_STRING_EQUAL(family_backend(rt, "old_minor"), "cpu");
    nnt_runtime_close(rt);
    /* taken to need every op: a backend without the optional ones cannot take it */
    ini_with(ini, sizeof ini, "old_minor", "few_ops", "[family.old_minor]\nbackend = few_ops\n");
    expect("oldminor2.ini", ini, NNT_ERR_UNSUPPORTED, "family 'old_minor'");
    expect("oldminor3.ini", ini, NNT_ERR_UNSUPPORTED, "'conv1d_causal', 'kda_gate', 'sigmoid', 'delta_rule'");
}

/* A backend without the optional ops loads, and so do the families that do not call them on it;
 * a family that calls one fails, naming the family, every missing op and the backend. */
static void test_capabilities(void)
{
    char ini[4096];
    ini_with(ini, sizeof ini, "few_ops", NULL, "[family.minimax_m2]\nbackend = few_ops\n");
    nnt_runtime *rt = NULL;
    T_OK(rt, open_with("few.ini", ini, &rt));
    CU_ASSERT_STRING_EQUAL(family_backend(rt, "minimax_m2"), "few_ops");
    CU_ASSERT_STRING_EQUAL(family_backend(rt, "kimi_linear"), "cpu");
    nnt_runtime_close(rt);
    /* an in-tree family mapped onto it by the INI: the open fails, at the INI line */
    ini_with(ini, sizeof ini, "few_ops", NULL, "[family.kimi_linear]\nbackend = few_ops\n");
    expect("fewkimi.ini", ini, NNT_ERR_UNSUPPORTED, "fewkimi.ini:6: family 'kimi_linear'");
    expect("fewkimi2.ini", ini, NNT_ERR_UNSUPPORTED,
           "needs backend operations 'conv1d_causal', 'kda_gate', 'sigmoid', 'delta_rule', 'rms_norm_gated', "
           "'zero_rows', which backend 'few_ops'");
    ini_with(ini, sizeof ini, "few_ops", NULL, "[family.deepseek_v4]\nbackend = few_ops\n");
    expect("fewdsv4.ini", ini, NNT_ERR_UNSUPPORTED,
           "family 'deepseek_v4'");
    expect("fewdsv42.ini", ini, NNT_ERR_UNSUPPORTED,
           "'hyper_connection', 'hyper_mix', 'hyper_head', 'compress', 'indexer_scores', which backend 'few_ops'");
    /* a family that declares one op the backend lacks: one op, named alone */
    ini_with(ini, sizeof ini, "few_ops", "needs_op", "[family.needs_op]\nbackend = few_ops\n");
    expect("needsop.ini", ini, NNT_ERR_UNSUPPORTED,
           "family 'needs_op' (");
    expect("needsop2.ini", ini, NNT_ERR_UNSUPPORTED, "needs backend operation 'delta_rule', which backend 'few_ops' (");
    /* a table whose struct_size ends before conv1d_causal (an older minor's): the ops past it are
     * absent even though the plugin's memory holds them; minimax_m2 misses only copy_cols */
    ini_with(ini, sizeof ini, "short_table", NULL, "[family.kimi_linear]\nbackend = short_table\n");
    expect("short.ini", ini, NNT_ERR_UNSUPPORTED, "'conv1d_causal', 'kda_gate', 'sigmoid', 'delta_rule', "
                                                  "'rms_norm_gated', 'copy_cols', 'zero_rows', which backend 'short_table'");
    ini_with(ini, sizeof ini, "short_table", NULL, "[family.minimax_m2]\nbackend = short_table\n");
    expect("short2.ini", ini, NNT_ERR_UNSUPPORTED,
           "family 'minimax_m2' (");
    expect("short3.ini", ini, NNT_ERR_UNSUPPORTED, "needs backend operation 'copy_cols', which backend 'short_table'");
    ini_with(ini, sizeof ini, "short_table", NULL, NULL);
    T_OK(rt, open_with("short4.ini", ini, &rt));
    nnt_runtime_close(rt);
    /* on the full cpu backend the same family is fine */
    ini_with(ini, sizeof ini, "needs_op", NULL, NULL);
    T_OK(rt, open_with("needsop3.ini", ini, &rt));
    CU_ASSERT_STRING_EQUAL(family_backend(rt, "needs_op"), "cpu");
    nnt_runtime_close(rt);

    /* not named by the INI: the family stays without a backend, with a warning, and a model
     * load names the family, the ops and the backend */
    char kdir[768], target[512], text[2048];
    scratch_dir("few-kernels", "cpu.so", ok_plugin("few_cpu", target, sizeof target), 0, kdir, sizeof kdir);
    snprintf(text, sizeof text, "[plugins]\ndir = %s/families\ndir = %s\n", NNT_TEST_BUILD_DIR, kdir);
    T_OK(rt, open_with("fewcpu.ini", text, &rt));
    expect_warning(rt, "kimi_linear.so", "family 'kimi_linear'");
    expect_warning(rt, "kimi_linear.so", "needs backend operations 'conv1d_causal'");
    CU_ASSERT_STRING_EQUAL(family_backend(rt, "kimi_linear"), "none");
    CU_ASSERT_STRING_EQUAL(family_backend(rt, "minimax_m2"), "cpu");
    nnt_model *m = NULL;
    char dir[512];
    T_FAILS(rt, nnt_model_load(rt, t_fixture("kimi_linear/fp32", dir, sizeof dir), &m), NNT_ERR_NOT_FOUND,
            "family 'kimi_linear'");
    T_FAILS(rt, nnt_model_load(rt, t_fixture("kimi_linear/fp32", dir, sizeof dir), &m), NNT_ERR_NOT_FOUND,
            "'delta_rule', 'rms_norm_gated', 'zero_rows', which backend 'cpu'");
    CU_ASSERT_PTR_NULL(m);
    nnt_runtime_close(rt);
}

/* Runs layers.0.layer_output (and logits) through the test family `name`; returns the status. */
static nnt_status run_fake(nnt_runtime *rt, const char *name, const char *arch, const char *save, nnt_model **mp)
{
    char ckpt[768];
    nnt_model *m = NULL;
    T_OK(rt, nnt_model_load(rt, t_fake_checkpoint(name, arch, ckpt, sizeof ckpt), &m));
    *mp = m;
    if (!m) return NNT_ERR_INTERNAL;
    nnt_trace *t = NULL;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, save));
    int32_t ids[3] = {1, 2, 3};
    nnt_status st = nnt_trace_run(t, ids, NULL, 1, 3);
    nnt_trace_free(t);
    return st;
}

/* The forward contract: a requested value the family declares served must be emitted, with the
 * declared dtype and shape; otherwise the call fails naming the family, the value and shapes. */
static void test_forward_contract(void)
{
    char ini[4096];
    ini_with(ini, sizeof ini, "no_emit", "wrong_shape", NULL);
    nnt_runtime *rt = NULL;
    T_OK(rt, open_with("contract.ini", ini, &rt));
    nnt_model *m = NULL;
    /* a value it does emit as declared is fine */
    CU_ASSERT_EQUAL(run_fake(rt, "no_emit", "NoEmitForCausalLM", "logits", &m), NNT_OK);
    /* its descriptor leaves `note` NULL: no notes */
    const char *note = "unset";
    CU_ASSERT_EQUAL(nnt_model_note(m, 0, &note), 0);
    CU_ASSERT_PTR_NULL(note);
    nnt_model_free(m);
    CU_ASSERT_EQUAL(run_fake(rt, "no_emit", "NoEmitForCausalLM", "layers.0.layer_output", &m), NNT_ERR_PLUGIN);
    const char *msg = nnt_last_error(rt);
    if (!strstr(msg, "family 'no_emit' did not emit layers.0.layer_output") || !strstr(msg, "served as F32 [1, 3, 4]"))
        fprintf(stderr, "\n  no_emit: %s\n", msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "family 'no_emit' did not emit layers.0.layer_output"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "served as F32 [1, 3, 4]"));
    nnt_model_free(m);
    CU_ASSERT_EQUAL(run_fake(rt, "wrong_shape", "WrongShapeForCausalLM", "layers.0.layer_output", &m), NNT_ERR_PLUGIN);
    msg = nnt_last_error(rt);
    if (!strstr(msg, "family 'wrong_shape' emitted layers.0.layer_output as F32 [1, 3, 5], but its value_info declares "
                     "F32 [1, 3, 4]"))
        fprintf(stderr, "\n  wrong_shape: %s\n", msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "family 'wrong_shape' emitted layers.0.layer_output as F32 [1, 3, 5], but its "
                                       "value_info declares F32 [1, 3, 4]"));
    nnt_model_free(m);
    /* the same through a "*" request */
    CU_ASSERT_EQUAL(run_fake(rt, "wrong_shape", "WrongShapeForCausalLM", "layers.*.layer_output", &m), NNT_ERR_PLUGIN);
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_last_error(rt), "F32 [1, 3, 5]"));
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* [distributed]: each key's syntax errors with file and line; good values read back; the
 * transport loaded (only under a launcher's environment) with the reason it cannot be. */
static void test_distributed_section(void)
{
    char ini[2048];
    ini_for(ini, sizeof ini, NULL, "[distributed]\nranks = 2\n");
    expect("dist_key.ini", ini, NNT_ERR_CONFIG,
           "dist_key.ini:5: unknown key 'ranks' in [distributed] (expected transport, timeout or stages)");
    ini_for(ini, sizeof ini, NULL, "[distributed]\ntimeout = 5\ntimeout = 6\n");
    expect("dist_twice.ini", ini, NNT_ERR_CONFIG, "dist_twice.ini:6: key 'timeout' appears twice in [distributed] (first at line 5)");
    ini_for(ini, sizeof ini, NULL, "[distributed]\ntransport =\n");
    expect("dist_path.ini", ini, NNT_ERR_CONFIG, "dist_path.ini:5: [distributed] transport needs a path");
    static const char *const timeouts[] = {"0", "-1", "x", "5s", "2e6", "nan", "inf", ""};
    for (size_t i = 0; i < sizeof timeouts / sizeof timeouts[0]; i++) {
        char tail[128], want[160];
        snprintf(tail, sizeof tail, "[distributed]\ntimeout = %s\n", timeouts[i]);
        ini_for(ini, sizeof ini, NULL, tail);
        snprintf(want, sizeof want, "dist_timeout.ini:5: [distributed] timeout = '%s': expected seconds, a number > 0 and <= 1e6",
                 timeouts[i]);
        expect("dist_timeout.ini", ini, NNT_ERR_CONFIG, want);
    }
    static const char *const stages[] = {"0", "3,2", "2,2", "2;3", "2,", "", "1x", "-4", "99999999999"};
    for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++) {
        char tail[128], want[200];
        snprintf(tail, sizeof tail, "[distributed]\nstages = %s\n", stages[i]);
        ini_for(ini, sizeof ini, NULL, tail);
        snprintf(want, sizeof want,
                 "dist_stages.ini:5: [distributed] stages = '%s': expected ascending block indices >= 1 separated by commas",
                 stages[i]);
        expect("dist_stages.ini", ini, NNT_ERR_CONFIG, want);
    }

    /* good values, read back; the defaults without the section */
    nnt_runtime *rt;
    ini_for(ini, sizeof ini, NULL, "[distributed]\ntimeout = 2.5\nstages = 1, 3\ntransport = none.so\n");
    CU_ASSERT_EQUAL_FATAL(open_with("dist_good.ini", ini, &rt), NNT_OK);
    double timeout = 0;
    const int *cuts = NULL;
    int n_cuts = 0;
    nnt_runtime_distributed(rt, &timeout, &cuts, &n_cuts);
    CU_ASSERT_DOUBLE_EQUAL(timeout, 2.5, 0);
    CU_ASSERT_EQUAL_FATAL(n_cuts, 2);
    CU_ASSERT(cuts[0] == 1 && cuts[1] == 3);
    const nnt_transport_descriptor *tp = (const void *)1;
    /* no launcher: no transport, none loaded (none.so does not exist) */
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMI_SIZE");
    unsetenv("PMIX_RANK");
    CU_ASSERT_EQUAL(nnt_runtime_transport(rt, &tp), NNT_OK);
    CU_ASSERT_PTR_NULL(tp);
    /* under a launcher: the transport file must load */
    setenv("PMI_SIZE", "2", 1);
    T_FAILS(rt, nnt_runtime_transport(rt, &tp), NNT_ERR_IO, "none.so: the transport plugin does not exist");
    nnt_runtime_close(rt);
    ini_for(ini, sizeof ini, NULL, "");
    CU_ASSERT_EQUAL_FATAL(open_with("dist_none.ini", ini, &rt), NNT_OK);
    nnt_runtime_distributed(rt, &timeout, &cuts, &n_cuts);
    CU_ASSERT_DOUBLE_EQUAL(timeout, 600.0, 0);
    CU_ASSERT_EQUAL(n_cuts, -1);
    T_FAILS(rt, nnt_runtime_transport(rt, &tp), NNT_ERR_CONFIG,
            "dist_none.ini: started by a launcher (mpirun), but the file has no [distributed] transport = FILE");
    nnt_runtime_close(rt);
    /* a shared object that is not a transport (a family plugin), a file that is not one at all */
    char tail[700], junk[600];
    snprintf(tail, sizeof tail, "[distributed]\ntransport = %s/families/minimax_m2.so\n", NNT_TEST_BUILD_DIR);
    ini_for(ini, sizeof ini, NULL, tail);
    CU_ASSERT_EQUAL_FATAL(open_with("dist_family.ini", ini, &rt), NNT_OK);
    T_FAILS(rt, nnt_runtime_transport(rt, &tp), NNT_ERR_PLUGIN,
            "minimax_m2.so: not an nnt transport: it does not export 'nnt_transport_plugin'");
    nnt_runtime_close(rt);
    snprintf(junk, sizeof junk, "%s/not-a-transport.so", t_tmpdir());
    CU_ASSERT_FATAL(t_write_file(junk, "text, not ELF\n") == 0);
    snprintf(tail, sizeof tail, "[distributed]\ntransport = %s\n", junk);
    ini_for(ini, sizeof ini, NULL, tail);
    CU_ASSERT_EQUAL_FATAL(open_with("dist_junk.ini", ini, &rt), NNT_OK);
    T_FAILS(rt, nnt_runtime_transport(rt, &tp), NNT_ERR_PLUGIN, "not-a-transport.so: cannot be loaded as a shared object: ");
    nnt_runtime_close(rt);
    unsetenv("PMI_SIZE");
}

static void test_ini_errors(void)
{
    expect("key.ini", "; comment\n[plugins]\ndirectory = x\n", NNT_ERR_CONFIG, "key.ini:3: unknown key 'directory' in [plugins]");
    expect("section.ini", "[plugins]\n\n[famly.minimax_m2]\nbackend = cpu\n", NNT_ERR_CONFIG, "section.ini:3: unknown section [famly.minimax_m2]");
    expect("syntax.ini", "[plugins]\nthis line has no equals sign\n", NNT_ERR_CONFIG, "syntax.ini:2:");
    expect("twice.ini", "[family.x]\nbackend = cpu\nbackend = cuda\n", NNT_ERR_CONFIG, "twice.ini:3: key 'backend' appears twice");
    char ini[2048];
    ini_for(ini, sizeof ini, NULL, "[family.nosuch]\nbackend = cpu\n");
    expect("nosuch.ini", ini, NNT_ERR_NOT_FOUND, "nosuch.ini:4: [family.nosuch] names no loaded family plugin (loaded: ");
    expect("nosuch2.ini", ini, NNT_ERR_NOT_FOUND, "minimax_m2");
    ini_for(ini, sizeof ini, NULL, "[backend.cpu]\nthreads = many\n");
    expect("threads.ini", ini, NNT_ERR_CONFIG, "threads = 'many' is not a thread count");
    ini_for(ini, sizeof ini, NULL, "[backend.cpu]\nturbo = 1\n");
    expect("option.ini", ini, NNT_ERR_CONFIG, "unknown option 'turbo'");
}

/* Lines longer than inih's buffer, and files with more than one error (issue 14) */
static void test_ini_long_lines_and_first_error(void)
{
    /* a 300-character comment ending in `file = x.so`: read in 200-byte pieces, its tail was a
     * line of its own and the plugin it names was loaded; a comment line of any length is
     * nothing */
    char text[1024], tail[400];
    memset(tail, 'c', 300 - strlen("; ") - strlen(" file = /nonexistent/x.so"));
    tail[300 - strlen("; ") - strlen(" file = /nonexistent/x.so")] = '\0';
    snprintf(text, sizeof text, "[plugins]\n; %s file = /nonexistent/x.so\n# %s file = /nonexistent/x.so\n", tail, tail);
    CU_ASSERT_EQUAL(strcspn(strchr(text, ';'), "\n"), 300); /* the comment line: 300 characters */
    nnt_runtime *rt = NULL;
    nnt_status st = open_with("longcomment.ini", text, &rt);
    if (st != NNT_OK) fprintf(stderr, "\n  longcomment.ini: %s\n", nnt_last_error(rt));
    CU_ASSERT_EQUAL(st, NNT_OK);
    const char *kind, *name, *file, *detail;
    CU_ASSERT_FALSE(nnt_runtime_plugin(rt, 0, &kind, &name, &file, &detail)); /* no plugin at all */
    nnt_runtime_close(rt);
    /* any other line that does not fit is refused with its number, never cut into lines */
    snprintf(text, sizeof text, "[plugins]\n\ndir = /%s\n", tail);
    char want[128];
    snprintf(want, sizeof want, "longvalue.ini:3: line of %zu characters; the INI reader takes lines of at most 198",
             strlen("dir = /") + strlen(tail));
    expect("longvalue.ini", text, NNT_ERR_CONFIG, want);
    /* 198 characters and the newline is the longest line inih reads whole: accepted (an unknown
     * key, reported as such, shows that it was parsed as one line) */
    memset(tail, 'k', 198 - strlen(" = 1"));
    tail[198 - strlen(" = 1")] = '\0';
    snprintf(text, sizeof text, "[plugins]\n%s = 1\n", tail);
    snprintf(want, sizeof want, "fits.ini:2: unknown key '%.20s", tail);
    expect("fits.ini", text, NNT_ERR_CONFIG, want);
    /* a NUL byte (written by hand: the text helper stops at one) */
    char path[768];
    snprintf(path, sizeof path, "%s/nul.ini", t_tmpdir());
    FILE *f = fopen(path, "wb");
    CU_ASSERT_FATAL(f != NULL);
    fwrite("[plugins]\nfile = a\0b\n", 1, 21, f);
    fclose(f);
    rt = NULL;
    CU_ASSERT_EQUAL(nnt_runtime_open(path, &rt), NNT_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_last_error(rt), "nul.ini:2: the line holds a NUL byte"));
    nnt_runtime_close(rt);
    /* two errors: the first one's own line and its own message */
    expect("twoerrors.ini", "[plugins]\nbad = 1\nworse = 2\n", NNT_ERR_CONFIG,
           "twoerrors.ini:2: unknown key 'bad' in [plugins]");
    expect("syntaxfirst.ini", "[plugins]\nno equals sign\n[bogus]\nx = 1\n", NNT_ERR_CONFIG,
           "syntaxfirst.ini:2: syntax error");
    expect("keyfirst.ini", "[bogus]\nx = 1\nno equals sign\n", NNT_ERR_CONFIG, "keyfirst.ini:1: unknown section [bogus]");
    expect("dupline.ini", "[family.x]\nbackend = cpu\n\nbackend = cuda\n", NNT_ERR_CONFIG,
           "dupline.ini:4: key 'backend' appears twice in [family.x] (first at line 2)");
}

/* The INI and a plugin named by `file =` that are FIFOs are refused at once (issue 14) */
static void test_ini_fifo(void)
{
    char fifo[768];
    snprintf(fifo, sizeof fifo, "%s/fifo.ini", t_tmpdir());
    unlink(fifo);
    CU_ASSERT_FATAL(mkfifo(fifo, 0600) == 0);
    nnt_runtime *rt = NULL;
    CU_ASSERT_EQUAL(nnt_runtime_open(fifo, &rt), NNT_ERR_IO);
    char want[900];
    snprintf(want, sizeof want, "%s: not a regular file (a FIFO)", fifo);
    if (!strstr(nnt_last_error(rt), want)) fprintf(stderr, "\n  fifo.ini: %s\n", nnt_last_error(rt));
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_last_error(rt), want));
    nnt_runtime_close(rt);
    char text[1024];
    snprintf(text, sizeof text, "[plugins]\nfile = %s\n", fifo);
    snprintf(want, sizeof want, "fifoplugin.ini:2: %s: not a regular file (a FIFO)", fifo);
    expect("fifoplugin.ini", text, NNT_ERR_IO, want);
    unlink(fifo);
}

/* NNT_CONFIG is used when no path is given */
static void test_env_config(void)
{
    char path[768];
    snprintf(path, sizeof path, "%s/env.ini", t_tmpdir());
    CU_ASSERT_FATAL(t_write_file(path, "[plugins]\nbogus = 1\n") == 0);
    setenv("NNT_CONFIG", path, 1);
    nnt_runtime *rt = NULL;
    CU_ASSERT_EQUAL(nnt_runtime_open(NULL, &rt), NNT_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_last_error(rt), "env.ini:2"));
    nnt_runtime_close(rt);
    unsetenv("NNT_CONFIG");
    /* without it, the build tree's configuration is found */
    CU_ASSERT_EQUAL(nnt_runtime_open(NULL, &rt), NNT_OK);
    CU_ASSERT_STRING_EQUAL(nnt_runtime_config_path(rt), t_ini());
    nnt_runtime_close(rt);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("plugins", NULL, NULL);
    if (!s) return -1;
    if (!CU_add_test(s, "the build tree's nnt.ini loads minimax_m2 on cpu", test_build_config_loads) ||
        !CU_add_test(s, "missing plugin file, directory or INI", test_missing_file) ||
        !CU_add_test(s, "a shared object that is not a plugin", test_not_a_plugin) ||
        !CU_add_test(s, "ABI major, minor, size, name and table checks", test_abi_checks) ||
        !CU_add_test(s, "an older minor's shorter descriptor is accepted", test_older_minor_accepted) ||
        !CU_add_test(s, "optional ops and the capability check", test_capabilities) ||
        !CU_add_test(s, "the forward contract: declared values emitted with their shapes", test_forward_contract) ||
        !CU_add_test(s, "two plugins claiming one architecture or name", test_conflicts) ||
        !CU_add_test(s, "a family whose backend is absent", test_missing_backend) ||
        !CU_add_test(s, "broken plugins in a scanned directory are skipped with their reasons",
                     test_scanned_dir_skips_broken) ||
        !CU_add_test(s, "a broken default backend fails only where it is needed", test_broken_default_backend) ||
        !CU_add_test(s, "INI errors name the file and line", test_ini_errors) ||
        !CU_add_test(s, "[distributed]: its keys, their errors and the transport's", test_distributed_section) ||
        !CU_add_test(s, "INI lines of any length; the first error reported", test_ini_long_lines_and_first_error) ||
        !CU_add_test(s, "an INI or a plugin that is a FIFO", test_ini_fifo) ||
        !CU_add_test(s, "NNT_CONFIG and the build-tree default", test_env_config) ||
        !CU_add_test(s, "NNT_SHAPE counts and converts its extents", test_shape_macro))
        return -1;
    return 0;
}

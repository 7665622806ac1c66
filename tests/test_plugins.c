/* test_plugins.c - the INI file and the plugin host: every error a broken configuration or
 * plugin must produce, shown with deliberately broken plugins built for the purpose. */
#include <stdlib.h>
#include <string.h>

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
}

static void test_conflicts(void)
{
    char ini[2048];
    ini_for(ini, sizeof ini, "dup_arch", NULL);
    expect("dup.ini", ini, NNT_ERR_CONFLICT, "architecture 'MiniMaxM2ForCausalLM' is claimed by two family plugins");
    ini_for(ini, sizeof ini, "second_cpu", NULL);
    expect("cpu2.ini", ini, NNT_ERR_CONFLICT, "two backend plugins are named 'cpu'");
}

static void test_missing_backend(void)
{
    char ini[2048];
    ini_for(ini, sizeof ini, NULL, "\n[family.minimax_m2]\nbackend = cuda\n");
    expect("nobackend.ini", ini, NNT_ERR_NOT_FOUND, "nobackend.ini:6: family 'minimax_m2' is configured to use backend 'cuda'");
    char text[1024];
    snprintf(text, sizeof text, "[plugins]\ndir = %s/families\n", NNT_TEST_BUILD_DIR);
    expect("nokernels.ini", text, NNT_ERR_NOT_FOUND, "uses the default backend 'cpu'");
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
        !CU_add_test(s, "two plugins claiming one architecture or name", test_conflicts) ||
        !CU_add_test(s, "a family whose backend is absent", test_missing_backend) ||
        !CU_add_test(s, "INI errors name the file and line", test_ini_errors) ||
        !CU_add_test(s, "NNT_CONFIG and the build-tree default", test_env_config))
        return -1;
    return 0;
}

/* test_files.c - how libnnt opens its input files (issue 14): every reader goes through one
 * opener that never blocks and reads only regular files, so a FIFO, a directory or a device in
 * the place of config.json, the safetensors index, a shard, a tokenizer file or a tensor file
 * gives an error naming the path instead of a hang. An alarm turns a hang into a failure. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"
#include "test_util.h"

/* A fresh directory under the scratch directory (path in buf). */
static const char *fresh_dir(const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", t_tmpdir(), name);
    mkdir(buf, 0755);
    return buf;
}

/* <dir>/<name> made a FIFO (path in buf). */
static const char *make_fifo(const char *dir, const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", dir, name);
    unlink(buf);
    CU_ASSERT_FATAL(mkfifo(buf, 0600) == 0);
    return buf;
}

/* <dir>/<name> as a link to fixture file minimax_m2/fp32/<name>. */
static void link_fixture(const char *dir, const char *name)
{
    char from[600], rel[128], to[900];
    snprintf(rel, sizeof rel, "minimax_m2/fp32/%s", name);
    t_fixture(rel, from, sizeof from);
    snprintf(to, sizeof to, "%s/%s", dir, name);
    unlink(to);
    CU_ASSERT_FATAL(symlink(from, to) == 0);
}

static void test_open_regular(void)
{
    char dir[700], fifo[900], file[900];
    fresh_dir("open", dir, sizeof dir);
    nnt_error err = {0};
    int fd = 123;
    make_fifo(dir, "fifo", fifo, sizeof fifo);
    CU_ASSERT_EQUAL(nnt_open_regular(fifo, &fd, NULL, &err), NNT_ERR_IO);
    CU_ASSERT_EQUAL(fd, -1);
    char want[1000];
    snprintf(want, sizeof want, "%s: not a regular file (a FIFO)", fifo);
    CU_ASSERT_STRING_EQUAL(err.msg, want);
    CU_ASSERT_EQUAL(nnt_open_regular(dir, &fd, NULL, &err), NNT_ERR_IO);
    snprintf(want, sizeof want, "%s: not a regular file (a directory)", dir);
    CU_ASSERT_STRING_EQUAL(err.msg, want);
    CU_ASSERT_EQUAL(nnt_open_regular("/dev/null", &fd, NULL, &err), NNT_ERR_IO);
    CU_ASSERT_STRING_EQUAL(err.msg, "/dev/null: not a regular file (a character device)");
    snprintf(file, sizeof file, "%s/missing", dir);
    CU_ASSERT_EQUAL(nnt_open_regular(file, &fd, NULL, &err), NNT_ERR_IO);
    snprintf(want, sizeof want, "%s: cannot open: %s", file, strerror(ENOENT));
    CU_ASSERT_STRING_EQUAL(err.msg, want);
    /* a regular file: a blocking, close-on-exec descriptor and its fstat */
    snprintf(file, sizeof file, "%s/five", dir);
    CU_ASSERT_FATAL(t_write_file(file, "12345") == 0);
    struct stat st;
    CU_ASSERT_EQUAL_FATAL(nnt_open_regular(file, &fd, &st, &err), NNT_OK);
    CU_ASSERT_EQUAL(st.st_size, 5);
    CU_ASSERT_EQUAL(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    CU_ASSERT_NOT_EQUAL(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
    close(fd);
}

static void test_read_file(void)
{
    char dir[700], file[900], fifo[900];
    fresh_dir("read", dir, sizeof dir);
    snprintf(file, sizeof file, "%s/text", dir);
    CU_ASSERT_FATAL(t_write_file(file, "hello\n") == 0);
    nnt_error err = {0};
    char *text = NULL;
    size_t len = 0;
    CU_ASSERT_EQUAL_FATAL(nnt_read_file(file, 6, &text, &len, &err), NNT_OK);
    CU_ASSERT_EQUAL(len, 6);
    CU_ASSERT_STRING_EQUAL(text, "hello\n");
    free(text);
    CU_ASSERT_EQUAL(nnt_read_file(file, 5, &text, &len, &err), NNT_ERR_FORMAT);
    CU_ASSERT_PTR_NULL(text);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "text: 6 bytes, more than the 5 expected at most"));
    make_fifo(dir, "fifo", fifo, sizeof fifo);
    CU_ASSERT_EQUAL(nnt_read_file(fifo, 100, &text, &len, &err), NNT_ERR_IO);
    char want[1000];
    snprintf(want, sizeof want, "%s: not a regular file (a FIFO)", fifo);
    CU_ASSERT_STRING_EQUAL(err.msg, want);
}

/* A model folder whose `fifo_name` is a FIFO and whose other files are the fixture's. */
static void expect_model_fifo(const char *folder, const char *fifo_name, const char *index_text)
{
    char dir[700], fifo[900], want[1000];
    fresh_dir(folder, dir, sizeof dir);
    const char *files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++)
        if (strcmp(files[i], fifo_name) != 0 && !(index_text && strcmp(files[i], "model.safetensors") == 0))
            link_fixture(dir, files[i]);
    if (index_text) {
        char p[900];
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
        if (strcmp(fifo_name, "model.safetensors.index.json") != 0) CU_ASSERT_FATAL(t_write_file(p, index_text) == 0);
    }
    make_fifo(dir, fifo_name, fifo, sizeof fifo);
    snprintf(want, sizeof want, "%s: not a regular file (a FIFO)", fifo);
    nnt_runtime *rt = t_runtime();
    nnt_model *m = NULL;
    T_FAILS(rt, nnt_model_load(rt, dir, &m), NNT_ERR_IO, want);
    CU_ASSERT_PTR_NULL(m);
    nnt_runtime_close(rt);
}

static void test_model_files(void)
{
    expect_model_fifo("fifo_config", "config.json", NULL);
    expect_model_fifo("fifo_single", "model.safetensors", NULL);
    expect_model_fifo("fifo_index", "model.safetensors.index.json", "{}");
    expect_model_fifo("fifo_shard", "part-1.safetensors", "{\"weight_map\": {\"model.norm.weight\": \"part-1.safetensors\"}}");
}

static void test_tokenizer_and_tensor_files(void)
{
    char dir[700], fifo[900], want[1000];
    fresh_dir("fifo_tokenizer", dir, sizeof dir);
    make_fifo(dir, "tokenizer.json", fifo, sizeof fifo);
    nnt_tokenizer *tok = NULL;
    CU_ASSERT_EQUAL(nnt_tokenizer_load(dir, &tok), NNT_ERR_IO);
    snprintf(want, sizeof want, "%s: not a regular file (a FIFO)", fifo);
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_tokenizer_last_error(tok), want));
    nnt_tokenizer_free(tok);
    unlink(fifo);
    make_fifo(dir, "tiktoken.model", fifo, sizeof fifo);
    tok = NULL;
    CU_ASSERT_EQUAL(nnt_tokenizer_load(dir, &tok), NNT_ERR_IO);
    snprintf(want, sizeof want, "%s: not a regular file (a FIFO)", fifo);
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_tokenizer_last_error(tok), want));
    nnt_tokenizer_free(tok);
    /* a tensor file (the CLI's --set, --add and --steer read through this) */
    make_fifo(dir, "v.safetensors", fifo, sizeof fifo);
    nnt_runtime *rt = t_runtime();
    nnt_tensor t = {0};
    snprintf(want, sizeof want, "%s: not a regular file (a FIFO)", fifo);
    T_FAILS(rt, nnt_safetensors_read(rt, fifo, NULL, &t), NNT_ERR_IO, want);
    nnt_runtime_close(rt);
}

int register_tests(void)
{
    alarm(120); /* a reader that blocks on a FIFO fails the suite instead of hanging it */
    CU_pSuite s = CU_add_suite("files", NULL, NULL);
    if (!s) return -1;
    if (!CU_add_test(s, "nnt_open_regular: FIFO, directory, device, missing, regular", test_open_regular) ||
        !CU_add_test(s, "nnt_read_file: content, size limit, FIFO", test_read_file) ||
        !CU_add_test(s, "a FIFO as config.json, model.safetensors, the index or a shard", test_model_files) ||
        !CU_add_test(s, "a FIFO as tokenizer.json, tiktoken.model or a tensor file", test_tokenizer_and_tensor_files))
        return -1;
    return 0;
}

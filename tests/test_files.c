/* test_files.c - how libnnt opens its input files (issue 14): every reader goes through one
 * opener that never blocks and reads only regular files, so a FIFO, a directory or a device in
 * the place of config.json, the safetensors index, a shard, a tokenizer file or a tensor file
 * gives an error naming the path instead of a hang. An alarm turns a hang into a failure. And how
 * it writes its outputs (issue 32): whole or not at all, nothing left behind by a killed writer. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

/* A link loop in the place of config.json or tokenizer.json is named as one, not reported as a
 * missing file (the trial's "does the checkpoint directory hold a config.json?"). */
static void test_link_loops(void)
{
    char dir[700], path[900], want[1100];
    fresh_dir("loops", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    CU_ASSERT_FATAL(symlink("config.json", path) == 0);
    nnt_runtime *rt = t_runtime();
    nnt_model *m = NULL;
    snprintf(want, sizeof want, "%s: cannot open: %s", path, strerror(ELOOP));
    T_FAILS(rt, nnt_model_load(rt, dir, &m), NNT_ERR_IO, want);
    nnt_runtime_close(rt);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    CU_ASSERT_FATAL(symlink("tokenizer.json", path) == 0);
    nnt_tokenizer *tok = NULL;
    CU_ASSERT_EQUAL(nnt_tokenizer_load(dir, &tok), NNT_ERR_IO);
    snprintf(want, sizeof want, "%s: cannot open: %s", path, strerror(ELOOP));
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_tokenizer_last_error(tok), want));
    nnt_tokenizer_free(tok);
}

/* The names in dir, sorted and joined by spaces, into buf. */
static const char *listing(const char *dir, char *buf, size_t n)
{
    struct dirent **names;
    int k = scandir(dir, &names, NULL, alphasort);
    buf[0] = '\0';
    for (int i = 0; i < k; i++) {
        if (strcmp(names[i]->d_name, ".") && strcmp(names[i]->d_name, ".."))
            snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", buf[0] ? " " : "", names[i]->d_name);
        free(names[i]);
    }
    free(names);
    return buf;
}

/* path's bytes equal text. */
static int holds(const char *path, const char *text)
{
    size_t len = 0;
    char *got = NULL;
    nnt_error err = {0};
    if (nnt_read_file(path, 1 << 20, &got, &len, &err) != NNT_OK) return 0;
    int same = len == strlen(text) && memcmp(got, text, len) == 0;
    free(got);
    return same;
}

/* Writes, replacement, a link followed, the refusals. */
static void test_write_file(void)
{
    char dir[700], path[900], link[900], want[1200];
    fresh_dir("write", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/a.txt", dir);
    nnt_error err = {0};
    mode_t old = umask(022);
    CU_ASSERT_EQUAL(nnt_write_file(path, "first", 5, &err), NNT_OK);
    CU_ASSERT(holds(path, "first"));
    struct stat sb;
    CU_ASSERT(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0644);
    CU_ASSERT_EQUAL(nnt_write_file(path, "second, longer", 14, &err), NNT_OK);
    CU_ASSERT(holds(path, "second, longer"));
    CU_ASSERT_EQUAL(nnt_write_file(path, NULL, 0, &err), NNT_OK);
    CU_ASSERT(holds(path, ""));
    umask(old);
    /* through a link: the file it names is replaced, the link stays a link */
    snprintf(link, sizeof link, "%s/b.txt", dir);
    CU_ASSERT_FATAL(symlink("a.txt", link) == 0);
    CU_ASSERT_EQUAL(nnt_write_file(link, "via link", 8, &err), NNT_OK);
    CU_ASSERT(holds(path, "via link") && lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
    char names[256];
    CU_ASSERT_STRING_EQUAL(listing(dir, names, sizeof names), "a.txt b.txt");
    /* refusals name the file */
    CU_ASSERT_EQUAL(nnt_write_file(dir, "x", 1, &err), NNT_ERR_IO);
    snprintf(want, sizeof want, "%s: exists and is not a regular file; not replacing it", dir);
    CU_ASSERT_STRING_EQUAL(err.msg, want);
    snprintf(path, sizeof path, "%s/missing/a.txt", dir);
    CU_ASSERT_EQUAL(nnt_write_file(path, "x", 1, &err), NNT_ERR_IO);
    snprintf(want, sizeof want, "%s: cannot create: No such file or directory", path);
    CU_ASSERT_STRING_EQUAL(err.msg, want);
    CU_ASSERT_EQUAL(nnt_write_file("", "x", 1, &err), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(nnt_write_file(path, NULL, 1, &err), NNT_ERR_INVALID_ARGUMENT);
}

/* A writer killed in the middle of its write (the file size limit's SIGXFSZ, as deterministic a
 * stand-in as any for mpirun's SIGKILL): the old file is whole and nothing else is in the folder.
 * Both entry points: nnt_write_file and the safetensors writer behind every --out. */
static void test_killed_writer(void)
{
    char dir[700], path[900], names[256];
    fresh_dir("killed", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/out.safetensors", dir);
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(nnt_write_file(path, "old", 3, &err), NNT_OK);
    for (int how = 0; how < 2; how++) {
        pid_t pid = fork();
        CU_ASSERT_FATAL(pid >= 0);
        if (pid == 0) {
            signal(SIGXFSZ, SIG_DFL);
            struct rlimit lim = {.rlim_cur = 1 << 20, .rlim_max = 1 << 20};
            setrlimit(RLIMIT_FSIZE, &lim);
            static float data[1 << 20]; /* 4 MiB: past the limit */
            nnt_error e = {0};
            if (how == 0) {
                nnt_write_file(path, data, sizeof data, &e);
            } else {
                nnt_tensor t = {.dtype = NNT_F32, .ndim = 1, .shape = {1 << 20}, .data = data};
                const nnt_tensor *ts[1] = {&t};
                const char *keys[1] = {"x"};
                nnt_st_write(path, 1, keys, ts, NULL, &e);
            }
            _exit(0); /* not reached: the write past the limit ends the process */
        }
        int status = 0;
        CU_ASSERT_EQUAL_FATAL(waitpid(pid, &status, 0), pid);
        CU_ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ);
        CU_ASSERT(holds(path, "old"));
        CU_ASSERT_STRING_EQUAL(listing(dir, names, sizeof names), "out.safetensors");
    }
}

int register_tests(void)
{
    alarm(120); /* a reader that blocks on a FIFO fails the suite instead of hanging it */
    CU_pSuite s = CU_add_suite("files", NULL, NULL);
    if (!s) return -1;
    if (!CU_add_test(s, "nnt_open_regular: FIFO, directory, device, missing, regular", test_open_regular) ||
        !CU_add_test(s, "nnt_read_file: content, size limit, FIFO", test_read_file) ||
        !CU_add_test(s, "a FIFO as config.json, model.safetensors, the index or a shard", test_model_files) ||
        !CU_add_test(s, "a FIFO as tokenizer.json, tiktoken.model or a tensor file", test_tokenizer_and_tensor_files) ||
        !CU_add_test(s, "a link loop as config.json or tokenizer.json is named as one", test_link_loops) ||
        !CU_add_test(s, "nnt_write_file: written, replaced, through a link, refusals", test_write_file) ||
        !CU_add_test(s, "a writer killed mid-write leaves the old file and nothing else", test_killed_writer))
        return -1;
    return 0;
}

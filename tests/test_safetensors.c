/* test_safetensors.c - the safetensors reader rejects every malformed file with a message that
 * names the file and the problem, and the writer produces files the reader (and Python's
 * safetensors, whose header rules it follows) accepts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"
#include "test_util.h"

/* Writes a file: 8-byte length (hlen_override if >= 0), header text, then nbytes of data. */
static const char *raw_file(const char *name, const char *header, long long hlen_override, size_t nbytes)
{
    static char path[768];
    snprintf(path, sizeof path, "%s/%s", t_tmpdir(), name);
    FILE *f = fopen(path, "wb");
    CU_ASSERT_FATAL(f != NULL);
    uint64_t h = hlen_override >= 0 ? (uint64_t)hlen_override : strlen(header);
    for (int i = 0; i < 8; i++) fputc((int)((h >> (8 * i)) & 0xff), f);
    fputs(header, f);
    for (size_t i = 0; i < nbytes; i++) fputc((int)(i & 0xff), f);
    fclose(f);
    return path;
}

static void expect_bad(const char *path, const char *needle)
{
    nnt_st_file *f = NULL;
    nnt_error err = {0};
    nnt_status st = nnt_st_open(path, &f, &err);
    if (st != NNT_ERR_FORMAT || !strstr(err.msg, needle) || !strstr(err.msg, path))
        fprintf(stderr, "\n  expected FORMAT error with '%s' for %s, got %s: %s\n", needle, path, nnt_status_str(st), err.msg);
    CU_ASSERT_EQUAL(st, NNT_ERR_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, needle));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, path));
    CU_ASSERT_PTR_NULL(f);
    nnt_st_close(f); /* when it wrongly opened */
}

static void test_truncated(void)
{
    char path[768];
    snprintf(path, sizeof path, "%s/short.safetensors", t_tmpdir());
    CU_ASSERT_FATAL(t_write_file(path, "abc") == 0);
    expect_bad(path, "truncated: 3 bytes");
}

static void test_header_past_end(void)
{
    expect_bad(raw_file("past.safetensors", "{}", 1000, 0), "header length 1000 runs past the end");
}

static void test_malformed_json(void)
{
    expect_bad(raw_file("json.safetensors", "{\"w\": {\"dtype\": \"F32\", \"shape\": [2", -1, 0), "malformed header JSON");
    expect_bad(raw_file("array.safetensors", "[1, 2]", -1, 0), "malformed header JSON");
    expect_bad(raw_file("fields.safetensors", "{\"w\": {\"dtype\": \"F32\"}}", -1, 0), "needs a string 'dtype'");
}

static void test_offsets(void)
{
    expect_bad(raw_file("range.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 4),
               "data_offsets [0, 8] fall outside the data section (4 bytes");
    expect_bad(raw_file("overlap.safetensors",
                        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                        -1, 12),
               "overlap");
    expect_bad(raw_file("size.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", -1, 8),
               "spans 8 bytes but dtype F32 and shape [3] need 12");
    expect_bad(raw_file("dtype.safetensors", "{\"w\":{\"dtype\":\"Q7\",\"shape\":[3],\"data_offsets\":[0,3]}}", -1, 3),
               "unknown dtype 'Q7'");
    expect_bad(raw_file("neg.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[-3],\"data_offsets\":[0,3]}}", -1, 3),
               "shape entry 0 is not an integer in [0, 2^53]");
    /* numbers past what a double holds exactly, or infinite, are refused before any cast */
    expect_bad(raw_file("huge_dim.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1e19],\"data_offsets\":[0,3]}}", -1, 3),
               "shape entry 0 is not an integer in [0, 2^53]");
    expect_bad(raw_file("inf_dim.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1e999],\"data_offsets\":[0,3]}}", -1, 3),
               "shape entry 0 is not an integer in [0, 2^53]");
    expect_bad(raw_file("huge_off.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,1e30]}}", -1, 3),
               "data_offsets are not integers in [0, 2^53]");
    expect_bad(raw_file("frac_off.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0.5,3]}}", -1, 3),
               "data_offsets are not integers in [0, 2^53]");
    /* 2^62 * 4 * 0: zero elements, but the nonzero extents overflow 64 bits */
    expect_bad(raw_file("overflow.safetensors",
                        "{\"w\":{\"dtype\":\"U8\",\"shape\":[4611686018427387904,4,0],\"data_offsets\":[0,0]}}", -1, 0),
               "shape entry 0 is not an integer in [0, 2^53]");
    expect_bad(raw_file("overflow2.safetensors",
                        "{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,0],\"data_offsets\":[0,0]}}", -1, 0),
               "element count overflows 64 bits");
    /* an empty tensor sorted between two overlapping ones does not hide the overlap */
    expect_bad(raw_file("overlap_empty.safetensors",
                        "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                        "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[5,5]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                        -1, 16),
               "overlap");
    /* a name given twice */
    expect_bad(raw_file("dup.safetensors",
                        "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                        "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}",
                        -1, 4),
               "named twice");
}

static int opens(const char *path)
{
    nnt_st_file *f = NULL;
    nnt_error err = {0};
    nnt_status st = nnt_st_open(path, &f, &err);
    if (st != NNT_OK) fprintf(stderr, "\n  %s: %s\n", path, err.msg);
    nnt_st_close(f);
    return st == NNT_OK;
}

/* The header and data lengths are exact, as the format (and its reference reader, safetensors
 * 0.8) defines them: JSON whitespace may pad the header's object, nothing else may; the tensors
 * tile the data section with no gap and no byte after the last; a field the format defines is
 * given once; __metadata__ is one object of strings. */
static void test_exact_lengths(void)
{
#define W8 "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}"
    /* accepted: padding by spaces, a newline, a tab (header lengths 8k+1..8k+7 included) */
    CU_ASSERT(opens(raw_file("pad_space.safetensors", W8 "   ", -1, 8)));
    CU_ASSERT(opens(raw_file("pad_nl.safetensors", W8 "\n", -1, 8)));
    CU_ASSERT(opens(raw_file("pad_lead.safetensors", " \t" W8, -1, 8)));
    /* refused: bytes other than whitespace after or before the object */
    expect_bad(raw_file("trail_x.safetensors", W8 " x", -1, 8),
               "header byte 55 (0x78) follows the header's JSON object; only JSON whitespace may pad the header");
    expect_bad(raw_file("trail_obj.safetensors", W8 "{}", -1, 8), "header byte 54 (0x7b) follows");
    expect_bad(raw_file("lead_x.safetensors", "x" W8, -1, 8), "header byte 0 is not '{'");
    /* the data section: a gap before a tensor, bytes after the last, bytes with no tensor */
    expect_bad(raw_file("gap.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", -1, 8),
               "data-section bytes [0, 4) before tensor 'a' belong to no tensor");
    expect_bad(raw_file("gap2.safetensors",
                        "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                        "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]}}",
                        -1, 5),
               "data-section bytes [2, 3) before tensor 'b' belong to no tensor");
    expect_bad(raw_file("extra.safetensors", W8, -1, 16),
               "the data section holds 16 bytes but its tensors end at byte 8 (tensor 'a'); the format allows no "
               "bytes after the last tensor");
    expect_bad(raw_file("empty_extra.safetensors", "{}", -1, 8),
               "the data section holds 8 bytes but its tensors end at byte 0; the format");
    CU_ASSERT(opens(raw_file("empty.safetensors", "{}", -1, 0)));
    /* an empty tensor may stand between two others, at the offset where one ends */
    CU_ASSERT(opens(raw_file("mid_empty.safetensors",
                             "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                             "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]},"
                             "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}",
                             -1, 4)));
    /* the header is UTF-8 JSON text: a byte that is not UTF-8, a raw control byte (padding
     * with NUL bytes included) */
    expect_bad(raw_file("latin1.safetensors", "{\"caf\xe9\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", -1, 0),
               "header byte 5 is not valid UTF-8 (the header is UTF-8 JSON)");
    expect_bad(raw_file("ctrl.safetensors", "{\"a\x01\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", -1, 0),
               "header byte 3 is the control byte 0x01 (not JSON text)");
    {
        /* NUL padding: the file written byte by byte, since the helper writes C strings */
        char path[768];
        snprintf(path, sizeof path, "%s/nul_pad.safetensors", t_tmpdir());
        FILE *f = fopen(path, "wb");
        CU_ASSERT_FATAL(f != NULL);
        const char *h = "{}";
        uint64_t n = 8;
        for (int i = 0; i < 8; i++) fputc((int)((n >> (8 * i)) & 0xff), f);
        fputs(h, f);
        for (int i = 2; i < 8; i++) fputc(0, f);
        fclose(f);
        expect_bad(path, "header byte 2 is the control byte 0x00 (not JSON text)");
    }
    CU_ASSERT(opens(raw_file("utf8_name.safetensors", "{\"caf\xc3\xa9\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", -1, 0)));
    /* whole numbers written with a fraction or an exponent, as the reference reader refuses
     * them; a field the format does not define may hold any number */
    expect_bad(raw_file("point_zero.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.0]}}", -1, 8),
               "tensor 'a' has a data_offsets entry '8.0' written with a fraction or exponent; the format takes integers "
               "written as digits");
    expect_bad(raw_file("exp_shape.safetensors", "{\"__metadata__\":{\"k\":\"[1.5]\"},\"b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
                                                 "\"a\":{\"z\":[1.5],\"dtype\":\"F32\",\"shape\":[1, 2E0],\"data_offsets\":[0,8]}}", -1, 8),
               "tensor 'a' has a shape entry '2E0' written with a fraction or exponent");
    CU_ASSERT(opens(raw_file("other_float.safetensors", "{\"a\":{\"z\":[1.5,{\"shape\":[2.5]}],\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8)));
    /* fractional offsets */
    expect_bad(raw_file("frac_end.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.5]}}", -1, 9),
               "tensor 'a' data_offsets are not integers in [0, 2^53]");
    /* a defined field twice; __metadata__ twice or not strings */
    expect_bad(raw_file("dup_field.safetensors",
                        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"dtype\":\"I32\"}}", -1, 8),
               "tensor 'a' gives 'dtype' twice in the header");
    expect_bad(raw_file("dup_meta.safetensors", "{\"__metadata__\":{\"x\":\"1\"},\"__metadata__\":{},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8),
               "'__metadata__' appears twice in the header");
    expect_bad(raw_file("meta_num.safetensors", "{\"__metadata__\":{\"x\":1},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8),
               "'__metadata__' value 'x' is not a string");
    /* a field the format does not define is ignored, as the reference reader ignores it */
    CU_ASSERT(opens(raw_file("extra_field.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"z\":1}}", -1, 8)));
#undef W8
}

static void test_round_trip(void)
{
    nnt_runtime *rt = t_runtime();
    char path[768];
    snprintf(path, sizeof path, "%s/rt.safetensors", t_tmpdir());
    nnt_tensor a, b;
    int64_t sa[2] = {2, 3}, sb[1] = {5};
    CU_ASSERT_FATAL(nnt_tensor_alloc(&a, NNT_F32, 2, sa) == NNT_OK && nnt_tensor_alloc(&b, NNT_I32, 1, sb) == NNT_OK);
    for (int i = 0; i < 6; i++) ((float *)a.data)[i] = 0.5f * (float)i - 1.0f;
    for (int i = 0; i < 5; i++) ((int32_t *)b.data)[i] = 7 - 3 * i;
    const char *keys[2] = {"layers.1.mlp.expert_weights", "x"};
    const nnt_tensor *vals[2] = {&a, &b};
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(nnt_st_write(path, 2, keys, vals, "{\"producer\":\"test\"}", &err), NNT_OK);
    nnt_st_file *f;
    CU_ASSERT_EQUAL_FATAL(nnt_st_open(path, &f, &err), NNT_OK);
    CU_ASSERT_EQUAL(f->n_entries, 2);
    CU_ASSERT_EQUAL((f->data - (const uint8_t *)f->map) % 8, 0); /* header padded to 8 bytes */
    nnt_st_close(f);
    nnt_tensor a2, b2;
    T_OK(rt, nnt_safetensors_read(rt, path, "layers.1.mlp.expert_weights", &a2));
    T_OK(rt, nnt_safetensors_read(rt, path, "x", &b2));
    CU_ASSERT(a2.dtype == NNT_F32 && a2.ndim == 2 && a2.shape[0] == 2 && a2.shape[1] == 3);
    CU_ASSERT(memcmp(a2.data, a.data, 24) == 0 && memcmp(b2.data, b.data, 20) == 0);
    T_FAILS(rt, nnt_safetensors_read(rt, path, "nope", &b2), NNT_ERR_NOT_FOUND, "no tensor named 'nope'");
    T_FAILS(rt, nnt_safetensors_read(rt, path, NULL, &b2), NNT_ERR_INVALID_ARGUMENT, "holds 2 tensors");
    /* a write that cannot happen leaves nothing behind and reports the path */
    char bad[800];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.safetensors", t_tmpdir());
    CU_ASSERT_EQUAL(nnt_st_write(bad, 2, keys, vals, NULL, &err), NNT_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, bad));
    /* a duplicate key is refused before anything is written, and the old file stays intact */
    const char *dup[2] = {"x", "x"};
    CU_ASSERT_EQUAL(nnt_st_write(path, 2, dup, vals, NULL, &err), NNT_ERR_INVALID_ARGUMENT);
    nnt_tensor_free(&b2);
    T_OK(rt, nnt_safetensors_read(rt, path, "x", &b2));
    CU_ASSERT(memcmp(b2.data, b.data, 20) == 0);
    nnt_tensor_free(&a);
    nnt_tensor_free(&b);
    nnt_tensor_free(&a2);
    nnt_tensor_free(&b2);
    nnt_runtime_close(rt);
}

/* The writer replaces the file a path names: through a symbolic link (even to a file not there
 * yet), never a device, and with the process's umask like any created file. */
static void test_write_targets(void)
{
    float v[4] = {1, 2, 3, 4};
    nnt_tensor t = {.dtype = NNT_F32, .ndim = 1, .shape = {4}, .data = v};
    const nnt_tensor *ts[1] = {&t};
    const char *keys[1] = {"v"};
    char link[512], target[512];
    snprintf(link, sizeof link, "%s/link.safetensors", t_tmpdir());
    snprintf(target, sizeof target, "%s/linked_target.safetensors", t_tmpdir());
    unlink(link);
    unlink(target);
    CU_ASSERT_FATAL(symlink("linked_target.safetensors", link) == 0);
    nnt_error err = {0};
    mode_t old = umask(022);
    CU_ASSERT_EQUAL(nnt_st_write(link, 1, keys, ts, NULL, &err), NNT_OK);
    umask(old);
    struct stat sl, st;
    CU_ASSERT(lstat(link, &sl) == 0 && S_ISLNK(sl.st_mode));
    CU_ASSERT(stat(target, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0644);
    CU_ASSERT_EQUAL(nnt_st_write("/dev/null", 1, keys, ts, NULL, &err), NNT_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "not a regular file"));
    struct stat dn;
    CU_ASSERT(stat("/dev/null", &dn) == 0 && S_ISCHR(dn.st_mode));
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("safetensors", NULL, NULL);
    if (!s) return -1;
    if (!CU_add_test(s, "a truncated file", test_truncated) ||
        !CU_add_test(s, "a header length past the end", test_header_past_end) ||
        !CU_add_test(s, "malformed header JSON", test_malformed_json) ||
        !CU_add_test(s, "offsets out of range, overlapping, or of the wrong size", test_offsets) ||
        !CU_add_test(s, "header and data lengths exact, fields once", test_exact_lengths) ||
        !CU_add_test(s, "write then read back", test_round_trip) ||
        !CU_add_test(s, "writes through links, never over a device, with the umask", test_write_targets))
        return -1;
    return 0;
}

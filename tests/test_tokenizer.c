/* test_tokenizer.c - the tokenizer against its references. Each fixture of
 * tests/fixtures/tokenizer (made by make_tokenizer_refs.py with Hugging Face tokenizers 0.23.3
 * and tiktoken 0.14.0 on real vocabularies: DeepSeek-V4's tokenizer.json, Qwen's tiktoken files
 * with Kimi-Linear's split pattern or Qwen's) lists texts and the ids the reference gives;
 * every id must match, and decoding the ids must give the text back (or what the reference's
 * decoder gives, where a normalizer changes the text). Then hand-computed cases: the pattern
 * rewrite, UTF-8 repair, the byte-level alphabet, merge order, batches and error messages. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/tokenizer/tok_internal.h"
#include "test_util.h"

#ifndef NNT_TEST_TOKENIZER_VOCAB
#error "NNT_TEST_TOKENIZER_VOCAB must name the unpacked vocabularies (tests/CMakeLists.txt)"
#endif

static char *slurp(const char *path, size_t *len)
{
    char *text = NULL;
    nnt_error err = {0};
    if (nnt_read_file(path, 1u << 30, &text, len, &err) != NNT_OK) fprintf(stderr, "\n  %s\n", err.msg);
    return text;
}

static int hex_decode(const char *hex, char **out, size_t *len)
{
    size_t n = strlen(hex);
    if (n % 2) return -1;
    char *b = malloc(n / 2 + 1);
    if (!b) return -1;
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) {
            free(b);
            return -1;
        }
        b[i] = (char)v;
    }
    b[n / 2] = 0;
    *out = b;
    *len = n / 2;
    return 0;
}

/* The folder a fixture names; with a patch, a copy of its tokenizer.json with the patch
 * applied (top-level keys replaced, "added_tokens_append" appended) in a scratch folder. */
static int fixture_folder(const cJSON *fx, const char *name, char *dir, size_t n)
{
    const cJSON *tk = cJSON_GetObjectItem(fx, "tokenizer"), *src = cJSON_GetObjectItem(fx, "source");
    if (!cJSON_IsString(tk)) return -1;
    if (cJSON_IsString(src) && strcmp(src->valuestring, "repo") == 0)
        snprintf(dir, n, "%s/%s", NNT_TEST_SOURCE_DIR, tk->valuestring);
    else
        snprintf(dir, n, "%s/%s", NNT_TEST_TOKENIZER_VOCAB, tk->valuestring);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "\n  the tokenizer folder %s is missing (are the vocabularies unpacked? see tests/CMakeLists.txt)\n", dir);
        return -1;
    }
    const cJSON *patch = cJSON_GetObjectItem(fx, "patch");
    if (!patch) return 0;
    char path[1200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    size_t len;
    char *text = slurp(path, &len);
    cJSON *base = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!base) return -1;
    for (const cJSON *e = patch->child; e; e = e->next) {
        if (strcmp(e->string, "added_tokens_append") == 0) {
            cJSON *list = cJSON_GetObjectItem(base, "added_tokens");
            for (const cJSON *a = e->child; a; a = a->next) cJSON_AddItemToArray(list, cJSON_Duplicate(a, 1));
        } else {
            cJSON_ReplaceItemInObjectCaseSensitive(base, e->string, cJSON_Duplicate(e, 1));
        }
    }
    char out[900];
    snprintf(out, sizeof out, "%s/tok_%.100s", t_tmpdir(), name);
    mkdir(out, 0755);
    char *printed = cJSON_PrintUnformatted(base);
    cJSON_Delete(base);
    snprintf(path, sizeof path, "%s/tokenizer.json", out);
    int rc = printed ? t_write_file(path, printed) : -1;
    free(printed);
    char cfg_from[1200], cfg_to[1200];
    snprintf(cfg_from, sizeof cfg_from, "%s/tokenizer_config.json", dir);
    snprintf(cfg_to, sizeof cfg_to, "%s/tokenizer_config.json", out);
    if (rc == 0 && access(cfg_from, R_OK) == 0) rc = t_copy_file(cfg_from, cfg_to);
    snprintf(dir, n, "%s", out);
    return rc;
}

static int ids_equal(const int32_t *got, int64_t n, const cJSON *want, int64_t *first_diff)
{
    int64_t i = 0;
    const cJSON *e = want ? want->child : NULL;
    for (; e && i < n; e = e->next, i++)
        if (!cJSON_IsNumber(e) || got[i] != (int32_t)e->valuedouble) break;
    *first_diff = i;
    return !e && i == n;
}

/* Runs every case of fixture `fx` (file: its name, for messages) on tok; returns the number of
 * mismatches. */
static int check_cases(const char *file, const cJSON *fx, nnt_tokenizer *tok)
{
    int bad = 0, cases = 0;
    nnt_status st;
    for (const cJSON *c = cJSON_GetObjectItem(fx, "cases")->child; c; c = c->next, cases++) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        char *raw;
        size_t n;
        CU_ASSERT_FATAL(hex_decode(cJSON_GetObjectItem(c, "text_hex")->valuestring, &raw, &n) == 0);
        const char *keys[2] = {"ids", "ids_special"};
        for (int k = 0; k < 2; k++) {
            const cJSON *want = cJSON_GetObjectItem(c, keys[k]);
            if (!want) continue;
            int32_t *ids = NULL;
            int64_t m = 0, at = 0;
            st = nnt_tokenizer_encode(tok, raw, n, k ? NNT_TOKENIZE_ADD_SPECIAL : 0, &ids, &m);
            if (st || !ids_equal(ids, m, want, &at)) {
                if (bad++ < 5)
                    fprintf(stderr, "\n  %s / %s / %s: %s at id %lld (got %d ids, want %d)", file, name, keys[k],
                            st ? nnt_tokenizer_last_error(tok) : "ids differ", (long long)at, (int)m,
                            cJSON_GetArraySize(want));
            } else if (k == 0 && cJSON_IsTrue(cJSON_GetObjectItem(c, "valid_utf8"))) {
                const cJSON *dh = cJSON_GetObjectItem(c, "decoded_hex");
                char *expect = raw, *alloc = NULL, *back = NULL;
                size_t expect_n = n, back_n = 0;
                if (cJSON_IsString(dh) && hex_decode(dh->valuestring, &alloc, &expect_n) == 0) expect = alloc;
                st = nnt_tokenizer_decode(tok, ids, m, 0, &back, &back_n);
                if (st || back_n != expect_n || memcmp(back, expect, expect_n) != 0) {
                    if (bad++ < 5) fprintf(stderr, "\n  %s / %s: decode(encode(text)) differs", file, name);
                }
                free(back);
                free(alloc);
            }
            free(ids);
        }
        free(raw);
    }
    if (bad) fprintf(stderr, "\n  %s: %d mismatches over %d cases\n", file, bad, cases);
    CU_ASSERT(cases > 0);
    return bad;
}

/* How run_fixture loads the fixture's folder. */
typedef enum fixture_load {
    LOAD_PLAIN,  /* nnt_tokenizer_load: the files alone */
    LOAD_FAMILY, /* nnt_runtime_tokenizer on a copy of the folder with a config.json naming `arch`:
                  * the hints of the family plugin serving it (the runtime closed before encoding) */
    LOAD_HINTS,  /* nnt_tokenizer_load_hinted with `hints` */
} fixture_load;

/* A scratch folder holding links to dir's tokenizer files and a config.json naming architecture
 * arch (the folder a release ships, its weights left out); returns out. */
static const char *folder_with_config(const char *dir, const char *name, const char *arch, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", t_tmpdir(), name);
    mkdir(out, 0755);
    const char *files[3] = {"tiktoken.model", "tokenizer.json", "tokenizer_config.json"};
    char from[2048], to[2048];
    for (int i = 0; i < 3; i++) {
        snprintf(from, sizeof from, "%s/%s", dir, files[i]);
        snprintf(to, sizeof to, "%s/%s", out, files[i]);
        unlink(to);
        if (access(from, R_OK) == 0) CU_ASSERT_FATAL(symlink(from, to) == 0);
    }
    char config[256];
    snprintf(config, sizeof config, "{\"architectures\": [\"%s\"]}", arch);
    snprintf(to, sizeof to, "%s/config.json", out);
    CU_ASSERT_FATAL(t_write_file(to, config) == 0);
    return out;
}

/* Runs every case of one fixture on its folder's tokenizer, loaded as `how` says (arch and hints
 * for LOAD_FAMILY and LOAD_HINTS); returns the number of mismatches. */
static int run_fixture_as(const char *file, fixture_load how, const char *arch, const nnt_tokenizer_hints *hints)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer/%s.json", NNT_TEST_FIXTURES, file);
    size_t len;
    char *text = slurp(path, &len);
    cJSON *fx = text ? cJSON_Parse(text) : NULL;
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fx);
    char dir[1024], with_config[1200];
    if (fixture_folder(fx, file, dir, sizeof dir) != 0) {
        cJSON_Delete(fx);
        CU_FAIL("the fixture's tokenizer folder is not there");
        return 1;
    }
    nnt_tokenizer *tok = NULL;
    nnt_status st;
    if (how == LOAD_FAMILY) {
        nnt_runtime *rt = t_runtime();
        st = nnt_runtime_tokenizer(rt, folder_with_config(dir, "tok_family", arch, with_config, sizeof with_config), &tok);
        nnt_runtime_close(rt);
    } else {
        st = how == LOAD_HINTS ? nnt_tokenizer_load_hinted(dir, hints, &tok) : nnt_tokenizer_load(dir, &tok);
    }
    if (st) fprintf(stderr, "\n  %s: %s\n", file, nnt_tokenizer_last_error(tok));
    CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    int bad = check_cases(file, fx, tok);
    nnt_tokenizer_free(tok);
    cJSON_Delete(fx);
    return bad;
}

static int run_fixture(const char *file) { return run_fixture_as(file, LOAD_PLAIN, NULL, NULL); }

/* The main references: DeepSeek-V4's tokenizer.json; Qwen3.6's ranks with Kimi-Linear's
 * pattern (its && classes rewritten), specials and chunking, which the kimi_linear plugin
 * supplies (its tokenizer hints) to a folder whose config.json names KimiLinearForCausalLM;
 * Qwen's ranks with a pat_str. */
static void test_deepseek_v4(void) { CU_ASSERT_EQUAL(run_fixture("deepseek_v4"), 0); }
static void test_kimi_tiktoken(void)
{
    CU_ASSERT_EQUAL(run_fixture_as("kimi_qwen3_6", LOAD_FAMILY, "KimiLinearForCausalLM", NULL), 0);
}
static void test_qwen_tiktoken(void) { CU_ASSERT_EQUAL(run_fixture("qwen"), 0); }
/* DeepSeek-V4's vocabulary under other components: TemplateProcessing and added-token flags;
 * ByteLevel's own regex and prefix space after Digits; every Split behaviour; NFKD, Lowercase,
 * Strip, Prepend with WhitespaceSplit; NFD with the Whitespace pre-tokenizer. */
static void test_variant_template(void) { CU_ASSERT_EQUAL(run_fixture("deepseek_v4_template"), 0); }
static void test_variant_bytelevel(void) { CU_ASSERT_EQUAL(run_fixture("deepseek_v4_bytelevel"), 0); }
static void test_variant_split(void) { CU_ASSERT_EQUAL(run_fixture("deepseek_v4_split"), 0); }
static void test_variant_norms(void) { CU_ASSERT_EQUAL(run_fixture("deepseek_v4_norms"), 0); }
static void test_variant_whitespace(void) { CU_ASSERT_EQUAL(run_fixture("deepseek_v4_whitespace"), 0); }
/* The embedded example model's tokenizer (merges spelt as pairs) and a byte-fallback BPE. */
static void test_tiny(void) { CU_ASSERT_EQUAL(run_fixture("tiny"), 0); }
static void test_fallback(void) { CU_ASSERT_EQUAL(run_fixture("fallback"), 0); }

/* ---- hand-computed cases ---- */

static pcre2_code *compile(const char *pattern)
{
    nnt_error err = {0};
    pcre2_code *re = tok_regex_compile(pattern, strlen(pattern), "test", &err);
    if (!re) fprintf(stderr, "\n  %s\n", err.msg);
    return re;
}

/* The first match of pattern in s, as a new string ("" when none). */
static char *first_match(const char *pattern, const char *s)
{
    pcre2_code *re = compile(pattern);
    tok_matcher m;
    CU_ASSERT_FATAL(re && tok_matcher_init(&m) == 0);
    nnt_error err = {0};
    size_t a = 0, b = 0;
    int r = tok_regex_next(re, &m, s, strlen(s), 0, &a, &b, &err);
    char *out = calloc(1, b - a + 1);
    if (r == 1) memcpy(out, s + a, b - a);
    tok_matcher_free(&m);
    pcre2_code_free(re);
    return out;
}

static void expect_match(const char *pattern, const char *s, const char *want)
{
    char *got = first_match(pattern, s);
    if (strcmp(got, want) != 0) fprintf(stderr, "\n  /%s/ on '%s': got '%s', want '%s'", pattern, s, got, want);
    CU_ASSERT_STRING_EQUAL(got, want);
    free(got);
}

static void test_pattern_rewrite(void)
{
    /* the intersection becomes a lookahead on the same character; script names mean Script */
    char *r = tok_regex_rewrite("[\\p{Lu}&&[^\\p{Han}]]+", strlen("[\\p{Lu}&&[^\\p{Han}]]+"));
    CU_ASSERT_STRING_EQUAL(r, "(?:(?=[^\\p{sc:Han}])[\\p{Lu}])+");
    free(r);
    /* Lo letters that are not Han: kana passes, Han stops the run */
    expect_match("[\\p{Lo}&&[^\\p{Han}]]+", "\xe3\x81\x8b\xe3\x81\xaa\xe4\xb8\xad", "\xe3\x81\x8b\xe3\x81\xaa");
    /* U+3002 (ideographic full stop) is Script=Common, though its Script_Extensions hold Han */
    expect_match("[\\p{Han}]+", "\xe4\xb8\xad\xe3\x80\x82", "\xe4\xb8\xad");
    /* \s is White_Space: U+0085 (NEXT LINE) and U+3000 are spaces, U+200B is not */
    expect_match("\\s+", "a\xc2\x85\xe3\x80\x80" "b", "\xc2\x85\xe3\x80\x80");
    expect_match("[^\\s]+", "\xe2\x80\x8b x", "\xe2\x80\x8b");
    /* \w holds marks: a Devanagari consonant with its vowel sign is one word */
    expect_match("\\w+", "\xe0\xa4\x95\xe0\xa4\xbf x", "\xe0\xa4\x95\xe0\xa4\xbf");
    /* Oniguruma's \u escape */
    expect_match("\\u0041+", "xAAy", "AA");
}

static void test_utf8_repair(void)
{
    /* Unicode's maximal-subpart rule, as Python's bytes.decode("utf-8", "replace") applies it:
     * ED A0 80 (an encoded surrogate) is three errors, a truncated E2 82 one, C0 80 two */
    const char in[] = "a\xed\xa0\x80" "b\xe2\x82" "c\xc0\x80" "d\xff";
    const char want[] = "a\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" "b\xef\xbf\xbd" "c\xef\xbf\xbd\xef\xbf\xbd" "d\xef\xbf\xbd";
    tok_buf out = {0};
    long bad = tok_utf8_repair(in, sizeof in - 1, &out);
    CU_ASSERT_EQUAL(bad, 7);
    CU_ASSERT_EQUAL(out.n, sizeof want - 1);
    CU_ASSERT(out.p && memcmp(out.p, want, sizeof want - 1) == 0);
    tok_buf_free(&out);
}

static void test_bytelevel_alphabet(void)
{
    /* GPT-2's table: space -> U+0120 'Ġ', newline -> U+010A 'Ċ', printable ASCII unchanged,
     * 0xAD -> U+0143 (the 68th and last remapped byte is 0xAD: 256 + 67) */
    tok_bytelevel bl;
    tok_bytelevel_init(&bl);
    CU_ASSERT_EQUAL(bl.cp[' '], 0x120);
    CU_ASSERT_EQUAL(bl.cp['\n'], 0x10A);
    CU_ASSERT_EQUAL(bl.cp['a'], 'a');
    CU_ASSERT_EQUAL(bl.cp[0xAD], 0x143);
    tok_buf out = {0};
    CU_ASSERT_EQUAL(tok_bytelevel_unmap(&bl, "\xc4\xa0the", 5, &out), 1);
    CU_ASSERT(out.n == 4 && memcmp(out.p, " the", 4) == 0);
    tok_buf_free(&out);
}

/* Writes a tokenizer.json in a scratch folder; returns the folder. */
static const char *write_tokenizer(const char *name, const char *json, char *dir, size_t n)
{
    snprintf(dir, n, "%s/%s", t_tmpdir(), name);
    mkdir(dir, 0755);
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    CU_ASSERT_FATAL(t_write_file(path, json) == 0);
    return dir;
}

static void expect_ids(const char *dir, const char *text, const int32_t *want, int64_t n)
{
    nnt_tokenizer *tok = NULL;
    nnt_status st = nnt_tokenizer_load(dir, &tok);
    if (st) fprintf(stderr, "\n  %s\n", nnt_tokenizer_last_error(tok));
    CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    int32_t *ids;
    int64_t m;
    CU_ASSERT_EQUAL_FATAL(nnt_tokenizer_encode(tok, text, strlen(text), 0, &ids, &m), NNT_OK);
    CU_ASSERT_EQUAL(m, n);
    for (int64_t i = 0; i < n && i < m; i++) CU_ASSERT_EQUAL(ids[i], want[i]);
    free(ids);
    nnt_tokenizer_free(tok);
}

static void test_merge_order(void)
{
    /* merges by rank, not left to right: "b c" (rank 0) before "a b" (rank 1), so "abc" is
     * a + bc, then "a bc" (rank 2) gives abc; "ab" alone is one merge */
    char dir[1024];
    write_tokenizer("bpe_rank",
                    "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"bc\":4,\"abc\":5},"
                    "\"merges\":[\"b c\",\"a b\",[\"a\",\"bc\"]]}}",
                    dir, sizeof dir);
    expect_ids(dir, "abc", (const int32_t[]){5}, 1);
    expect_ids(dir, "ab", (const int32_t[]){3}, 1);
    expect_ids(dir, "cab", (const int32_t[]){2, 3}, 2);
    /* without a merge to it, a vocabulary word is reached only with ignore_merges */
    write_tokenizer("bpe_plain",
                    "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"abc\":4},"
                    "\"merges\":[\"a b\"]}}",
                    dir, sizeof dir);
    expect_ids(dir, "abc", (const int32_t[]){3, 2}, 2);
    write_tokenizer("bpe_ignore",
                    "{\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,"
                    "\"abc\":4},\"merges\":[\"a b\"]}}",
                    dir, sizeof dir);
    expect_ids(dir, "abc", (const int32_t[]){4}, 1);
    /* equal ranks go leftmost first: "aaa" with only "a a" is aa + a */
    write_tokenizer("bpe_left",
                    "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"aa\":1},\"merges\":[\"a a\"]}}", dir, sizeof dir);
    expect_ids(dir, "aaa", (const int32_t[]){1, 0}, 2);
}

static void test_tiny_batch(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/examples/tiny-minimax-m2", NNT_TEST_SOURCE_DIR);
    nnt_tokenizer *tok = NULL;
    CU_ASSERT_EQUAL_FATAL(nnt_tokenizer_load(dir, &tok), NNT_OK);
    CU_ASSERT_EQUAL(nnt_tokenizer_vocab_size(tok), 256); /* the model's vocab_size */
    CU_ASSERT_EQUAL(nnt_tokenizer_eos_id(tok), 0);
    CU_ASSERT_EQUAL(nnt_tokenizer_pad_id(tok), 0);
    const char *texts[2] = {"The", "The people of the United States"};
    int32_t *row[2];
    int64_t len[2];
    for (int r = 0; r < 2; r++)
        CU_ASSERT_EQUAL_FATAL(nnt_tokenizer_encode(tok, texts[r], strlen(texts[r]), NNT_TOKENIZE_ADD_SPECIAL, &row[r], &len[r]),
                              NNT_OK);
    CU_ASSERT_FATAL(len[1] > len[0]);
    nnt_token_batch b;
    CU_ASSERT_EQUAL_FATAL(nnt_tokenizer_encode_batch(tok, texts, 2, NNT_TOKENIZE_ADD_SPECIAL, &b), NNT_OK);
    CU_ASSERT_EQUAL(b.batch, 2);
    CU_ASSERT_EQUAL(b.seq, len[1]);
    for (int r = 0; r < 2; r++) {
        CU_ASSERT_EQUAL(b.lengths[r], len[r]);
        int64_t lead = b.seq - len[r];
        for (int64_t j = 0; j < b.seq; j++) {
            CU_ASSERT_EQUAL(b.attention_mask[r * b.seq + j], j >= lead);
            CU_ASSERT_EQUAL(b.ids[r * b.seq + j], j < lead ? 0 : row[r][j - lead]);
        }
        free(row[r]);
    }
    nnt_token_batch_free(&b);
    /* an empty row is refused by index */
    const char *bad[2] = {"The", ""};
    CU_ASSERT_EQUAL(nnt_tokenizer_encode_batch(tok, bad, 2, 0, &b), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_tokenizer_last_error(tok), "texts[1]"));
    /* decode: an id past the vocabulary names its position */
    char *text;
    size_t tl;
    CU_ASSERT_EQUAL(nnt_tokenizer_decode(tok, (const int32_t[]){5, 256}, 2, 0, &text, &tl), NNT_ERR_INDEX);
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_tokenizer_last_error(tok), "ids[1]"));
    nnt_tokenizer_free(tok);
}

static void test_special_lookup(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/deepseek_v4", NNT_TEST_TOKENIZER_VOCAB);
    nnt_tokenizer *tok = NULL;
    CU_ASSERT_EQUAL_FATAL(nnt_tokenizer_load(dir, &tok), NNT_OK);
    /* tokenizer_config.json: bos <｜begin▁of▁sentence｜> (id 0), eos and pad <｜end▁of▁sentence｜> (1) */
    CU_ASSERT_EQUAL(nnt_tokenizer_bos_id(tok), 0);
    CU_ASSERT_EQUAL(nnt_tokenizer_eos_id(tok), 1);
    CU_ASSERT_EQUAL(nnt_tokenizer_pad_id(tok), 1);
    CU_ASSERT(nnt_tokenizer_is_special(tok, 0));
    int32_t the = nnt_tokenizer_token_id(tok, "\xc4\xa0the"); /* "Ġthe", a byte-level spelling */
    CU_ASSERT(the > 0);
    CU_ASSERT(!nnt_tokenizer_is_special(tok, the));
    size_t n;
    const char *b = nnt_tokenizer_token_bytes(tok, the, &n);
    CU_ASSERT(b && n == 4 && memcmp(b, " the", 4) == 0);
    /* decoding can leave special tokens out */
    char *text;
    size_t tl;
    CU_ASSERT_EQUAL_FATAL(nnt_tokenizer_decode(tok, (const int32_t[]){0, the}, 2, NNT_DECODE_SKIP_SPECIAL, &text, &tl), NNT_OK);
    CU_ASSERT_STRING_EQUAL(text, " the");
    free(text);
    nnt_tokenizer_free(tok);
}

static void expect_load_error(const char *dir, nnt_status want, const char *needle1, const char *needle2)
{
    nnt_tokenizer *tok = NULL;
    nnt_status st = nnt_tokenizer_load(dir, &tok);
    const char *msg = nnt_tokenizer_last_error(tok);
    if (st != want || !strstr(msg, needle1) || (needle2 && !strstr(msg, needle2)))
        fprintf(stderr, "\n  expected %s with '%s' and '%s', got %s: %s\n", nnt_status_str(want), needle1,
                needle2 ? needle2 : "", nnt_status_str(st), msg);
    CU_ASSERT_EQUAL(st, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, needle1));
    if (needle2) CU_ASSERT_PTR_NOT_NULL(strstr(msg, needle2));
    nnt_tokenizer_free(tok);
}

static void test_errors(void)
{
    char dir[1024], path[1200];
    /* a folder without a tokenizer */
    snprintf(dir, sizeof dir, "%s/no_tokenizer", t_tmpdir());
    mkdir(dir, 0755);
    expect_load_error(dir, NNT_ERR_NOT_FOUND, "tokenizer.json", "tiktoken.model");
    /* malformed JSON names the file */
    write_tokenizer("bad_json", "{\"model\": {", dir, sizeof dir);
    expect_load_error(dir, NNT_ERR_FORMAT, "bad_json/tokenizer.json", "malformed JSON");
    /* an unknown model type, pre-tokenizer, normalizer, each named with its field */
    write_tokenizer("wordpiece", "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", dir, sizeof dir);
    expect_load_error(dir, NNT_ERR_UNSUPPORTED, "model.type", "WordPiece");
    write_tokenizer("metaspace",
                    "{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Metaspace\"}]},"
                    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                    dir, sizeof dir);
    expect_load_error(dir, NNT_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[0]", "Metaspace");
    write_tokenizer("nmt", "{\"normalizer\":{\"type\":\"Nmt\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                    dir, sizeof dir);
    expect_load_error(dir, NNT_ERR_UNSUPPORTED, "normalizer", "Nmt");
    /* a merge naming a token the vocabulary lacks */
    write_tokenizer("bad_merge", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}}", dir,
                    sizeof dir);
    expect_load_error(dir, NNT_ERR_FORMAT, "model.merges[0]", "'ab' is not in model.vocab");
    /* an unknown token that names no entry: empty, or cut to empty by a NUL (JSON \u0000), where the
     * vocabulary leaves an id unassigned (1 here) - no unassigned id may stand for it (fuzz_tokenizer
     * found encode giving such an id, which decode then refused) */
    write_tokenizer("unk_empty", "{\"model\":{\"type\":\"BPE\",\"unk_token\":\"\",\"vocab\":{\"a\":0,\"b\":2},\"merges\":[]}}",
                    dir, sizeof dir);
    expect_load_error(dir, NNT_ERR_FORMAT, "model.unk_token", "is not in model.vocab");
    write_tokenizer("unk_nul",
                    "{\"model\":{\"type\":\"BPE\",\"unk_token\":\"\\u0000x\",\"vocab\":{\"a\":0,\"b\":2},\"merges\":[]}}",
                    dir, sizeof dir);
    expect_load_error(dir, NNT_ERR_FORMAT, "model.unk_token", "is not in model.vocab");
    /* ids far past the tokens a file lists (each id costs the per-id tables; fuzz_tokenizer's id of
     * ~2^31 asked for gigabytes): the bound is twice the entries plus 1024, so 1028 for the two
     * entries here - 1027 loads, 1028 is refused naming the entry, and so is an added token's */
    write_tokenizer("id_edge", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1027},\"merges\":[]}}", dir,
                    sizeof dir);
    nnt_tokenizer *edge = NULL;
    CU_ASSERT_EQUAL(nnt_tokenizer_load(dir, &edge), NNT_OK);
    CU_ASSERT_EQUAL(nnt_tokenizer_vocab_size(edge), 1028);
    nnt_tokenizer_free(edge);
    write_tokenizer("id_far", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1028},\"merges\":[]}}", dir,
                    sizeof dir);
    expect_load_error(dir, NNT_ERR_FORMAT, "model.vocab['b']: id 1028 is beyond", "ids below 1028");
    write_tokenizer("added_far",
                    "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
                    "\"added_tokens\":[{\"id\":2000000000,\"content\":\"<x>\"}]}",
                    dir, sizeof dir);
    expect_load_error(dir, NNT_ERR_FORMAT, "added_tokens[0]: id 2000000000 is beyond", "ids below 1028");
    /* a template's special token with a fractional id (once cut to 0) */
    write_tokenizer("template_fraction",
                    "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"<s>\":1},\"merges\":[]},"
                    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\","
                    "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],"
                    "\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[0.5],\"tokens\":[\"<s>\"]}}}}",
                    dir, sizeof dir);
    expect_load_error(dir, NNT_ERR_FORMAT, "post_processor.special_tokens['<s>'].ids", "integer ids");
    /* a template id that names no token: past the vocabulary, or a hole in it (id 1 here; fuzz_tokenizer
     * found encode then giving the hole, which decode refused) */
    const char *template_ids[2] = {"5", "1"};
    for (int k = 0; k < 2; k++) {
        char json[700];
        snprintf(json, sizeof json,
                 "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"<s>\":2},\"merges\":[]},"
                 "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\","
                 "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],"
                 "\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[%s],\"tokens\":[\"<s>\"]}}}}",
                 template_ids[k]);
        write_tokenizer(k ? "template_hole" : "template_past", json, dir, sizeof dir);
        char want[64];
        snprintf(want, sizeof want, "the template's token id %s is not in the vocabulary", template_ids[k]);
        expect_load_error(dir, NNT_ERR_FORMAT, "post_processor", want);
    }
    /* a broken split pattern quotes it */
    write_tokenizer("bad_regex",
                    "{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(a\"},\"behavior\":\"Isolated\"},"
                    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                    dir, sizeof dir);
    expect_load_error(dir, NNT_ERR_FORMAT, "pre_tokenizer.pattern", "(a");
    /* tiktoken: a malformed line, and a folder with no pattern */
    snprintf(dir, sizeof dir, "%s/tik_bad", t_tmpdir());
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    CU_ASSERT_FATAL(t_write_file(path, "YQ== 0\nYg== 1\n!!! 2\n") == 0);
    expect_load_error(dir, NNT_ERR_FORMAT, "line 3", "base64");
    CU_ASSERT_FATAL(t_write_file(path, "YQ== 0\nYg== 1\n") == 0);
    expect_load_error(dir, NNT_ERR_UNSUPPORTED, "without a split pattern: the folder's tokenizer_config.json gives no "
                      "\"pat_str\"", "a family plugin can: load the tokenizer through nnt_runtime_tokenizer");
    /* a rank far past the file's lines (the fuzzer's 2^30, which once overflowed the table's
     * growth) is refused; the bound for 2 lines is 1024 + 2 x 2 + 2 = 1030, and 1029 still loads
     * (up to the missing pattern) */
    CU_ASSERT_FATAL(t_write_file(path, "YQ== 0\nYg== 1073741824\n") == 0);
    expect_load_error(dir, NNT_ERR_FORMAT, "line 2: rank 1073741824 is beyond this file's table", "ranks below 1030");
    CU_ASSERT_FATAL(t_write_file(path, "YQ== 0\nYg== 1030\n") == 0);
    expect_load_error(dir, NNT_ERR_FORMAT, "line 2: rank 1030 is beyond", "ranks below 1030");
    CU_ASSERT_FATAL(t_write_file(path, "YQ== 0\nYg== 1029\n") == 0);
    expect_load_error(dir, NNT_ERR_UNSUPPORTED, "pat_str", NULL);
    /* a tiktoken folder with its own pattern, specials and add_bos_token: "ab" merges (rank 2 is
     * the bytes "ab"), <s> (id 3) is added before the text only with NNT_TOKENIZE_ADD_SPECIAL */
    CU_ASSERT_FATAL(t_write_file(path, "YQ== 0\nYg== 1\nYWI= 2\n") == 0);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    CU_ASSERT_FATAL(t_write_file(path, "{\"pat_str\": \"[a-z]+| \", \"bos_token\": \"<s>\", \"add_bos_token\": true,"
                                       " \"added_tokens_decoder\": {\"3\": {\"content\": \"<s>\", \"special\": true}}}") == 0);
    nnt_tokenizer *tik = NULL;
    CU_ASSERT_EQUAL_FATAL(nnt_tokenizer_load(dir, &tik), NNT_OK);
    CU_ASSERT_EQUAL(nnt_tokenizer_bos_id(tik), 3);
    int32_t *ids;
    int64_t m;
    CU_ASSERT_EQUAL_FATAL(nnt_tokenizer_encode(tik, "ab<s>b", 6, NNT_TOKENIZE_ADD_SPECIAL, &ids, &m), NNT_OK);
    CU_ASSERT_EQUAL(m, 4);
    if (m == 4) CU_ASSERT(ids[0] == 3 && ids[1] == 2 && ids[2] == 3 && ids[3] == 1);
    free(ids);
    CU_ASSERT_EQUAL_FATAL(nnt_tokenizer_encode(tik, "ab<s>b", 6, 0, &ids, &m), NNT_OK);
    CU_ASSERT(m == 3 && ids[0] == 2 && ids[1] == 3 && ids[2] == 1);
    free(ids);
    /* bytes the vocabulary lacks ('c', ' '), with no unknown token, are dropped as a BPE model
     * without unk_token drops them: no ids at all for "c c" (twice, the second time from the word
     * cache), and "cab" is "ab"; found by tests/fuzz (UBSan: an offset applied to the still-NULL
     * id array) */
    for (int rep = 0; rep < 2; rep++) {
        CU_ASSERT_EQUAL_FATAL(nnt_tokenizer_encode(tik, "c c", 3, 0, &ids, &m), NNT_OK);
        CU_ASSERT_EQUAL(m, 0);
        free(ids);
    }
    CU_ASSERT_EQUAL_FATAL(nnt_tokenizer_encode(tik, "cab", 3, 0, &ids, &m), NNT_OK);
    CU_ASSERT(m == 1 && ids[0] == 2);
    free(ids);
    nnt_tokenizer_free(tik);
    /* a special token far past the 3 ranks and 1 special token listed (4 lines counted, the last
     * one empty: bound 2 x 5 + 1024) */
    CU_ASSERT_FATAL(t_write_file(path, "{\"pat_str\": \"[a-z]+\", \"added_tokens_decoder\": {\"2000000000\": "
                                       "{\"content\": \"<s>\"}}}") == 0);
    expect_load_error(dir, NNT_ERR_FORMAT, "added_tokens_decoder['2000000000']: id 2000000000 is beyond", "ids below 1034");
    /* a NULL folder */
    nnt_tokenizer *tok = NULL;
    CU_ASSERT_EQUAL(nnt_tokenizer_load(NULL, &tok), NNT_ERR_INVALID_ARGUMENT);
    nnt_tokenizer_free(tok);
}

/* ---- tokenizer hints (nnt_tokenizer_hints) ---- */

/* The Kimi-Linear folder without its family: its files give no split pattern, so the plain load
 * and a runtime load of the folder without a config.json (no family to ask) both refuse it,
 * saying a family plugin can supply one. */
static void test_kimi_without_hints(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/kimi_qwen3_6", NNT_TEST_TOKENIZER_VOCAB);
    expect_load_error(dir, NNT_ERR_UNSUPPORTED, "kimi_qwen3_6/tiktoken.model: a tiktoken vocabulary without a split pattern",
                      "no family plugin supplied one");
    nnt_runtime *rt = t_runtime();
    nnt_tokenizer *tok = NULL;
    CU_ASSERT_EQUAL(nnt_runtime_tokenizer(rt, dir, &tok), NNT_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_tokenizer_last_error(tok), "no family plugin supplied one"));
    nnt_tokenizer_free(tok);
    nnt_runtime_close(rt);
}

/* The same folder with hints given by hand, the values of moonshotai's tokenization_kimi.py in
 * the Kimi-Linear release (its pat_str, 256 reserved special tokens, 400000-code-point pieces,
 * runs of at most 25000), gives every reference id. */
static void test_kimi_hints_by_hand(void)
{
    nnt_tokenizer_hints hints = {
        .struct_size = sizeof hints,
        .split_pattern =
            "[\\p{Han}]+"
            "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+"
            "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
            "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*"
            "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
            "|\\p{N}{1,3}"
            "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
            "|\\s*[\\r\\n]+"
            "|\\s+(?!\\S)"
            "|\\s+",
        .reserved_special_tokens = 256,
        .piece_chars = 400000,
        .piece_run = 25000,
    };
    CU_ASSERT_EQUAL(run_fixture_as("kimi_qwen3_6", LOAD_HINTS, NULL, &hints), 0);
}

/* Loads dir with hints (asserting success) and checks the ids of text. */
static void expect_hinted_ids(const char *dir, const nnt_tokenizer_hints *hints, const char *text, const int32_t *want,
                              int64_t n)
{
    nnt_tokenizer *tok = NULL;
    nnt_status st = nnt_tokenizer_load_hinted(dir, hints, &tok);
    if (st) fprintf(stderr, "\n  %s\n", nnt_tokenizer_last_error(tok));
    CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    int32_t *ids;
    int64_t m;
    CU_ASSERT_EQUAL_FATAL(nnt_tokenizer_encode(tok, text, strlen(text), 0, &ids, &m), NNT_OK);
    if (m != n) fprintf(stderr, "\n  '%s': %lld ids, want %lld\n", text, (long long)m, (long long)n);
    CU_ASSERT_EQUAL(m, n);
    for (int64_t i = 0; i < n && i < m; i++) CU_ASSERT_EQUAL(ids[i], want[i]);
    free(ids);
    nnt_tokenizer_free(tok);
}

static void expect_hints_refused(const char *dir, const nnt_tokenizer_hints *hints, const char *needle)
{
    nnt_tokenizer *tok = NULL;
    CU_ASSERT_EQUAL(nnt_tokenizer_load_hinted(dir, hints, &tok), NNT_ERR_INVALID_ARGUMENT);
    if (!strstr(nnt_tokenizer_last_error(tok), needle))
        fprintf(stderr, "\n  expected '%s' in: %s\n", needle, nnt_tokenizer_last_error(tok));
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_tokenizer_last_error(tok), needle));
    nnt_tokenizer_free(tok);
}

/* Each hint on a small folder, ids computed by hand. The ranks: a 0, b 1, ab 2, ' ' 3; the
 * pattern "[a-z]+| " makes "ab" one word that merges to 2. */
static void test_hints(void)
{
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/tik_hints", t_tmpdir());
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    CU_ASSERT_FATAL(t_write_file(path, "YQ== 0\nYg== 1\nYWI= 2\nIA== 3\n") == 0);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    unlink(path);
    nnt_tokenizer_hints h = {.struct_size = sizeof h, .split_pattern = "[a-z]+| ", .reserved_special_tokens = 2};
    expect_hinted_ids(dir, &h, "ab", (const int32_t[]){2}, 1);
    /* the reserved tokens take ids 4 and 5 (after the 4 ranks), named <|reserved_token_ID|>, special */
    nnt_tokenizer *tok = NULL;
    CU_ASSERT_EQUAL_FATAL(nnt_tokenizer_load_hinted(dir, &h, &tok), NNT_OK);
    CU_ASSERT_EQUAL(nnt_tokenizer_vocab_size(tok), 6);
    CU_ASSERT_EQUAL(nnt_tokenizer_token_id(tok, "<|reserved_token_5|>"), 5);
    CU_ASSERT(nnt_tokenizer_is_special(tok, 4));
    nnt_tokenizer_free(tok);
    expect_hinted_ids(dir, &h, "ab<|reserved_token_4|>b", (const int32_t[]){2, 4, 1}, 3);
    /* piece_chars 3: "abab" is encoded as "aba" (ab + a) and "b", not ab + ab */
    expect_hinted_ids(dir, &h, "abab", (const int32_t[]){2, 2}, 2);
    h.piece_chars = 3;
    expect_hinted_ids(dir, &h, "abab", (const int32_t[]){2, 0, 1}, 3);
    /* piece_run 1 alone: no run of letters longer than 1, so "ab" is a + b; a space ends a run */
    h.piece_chars = 0;
    h.piece_run = 1;
    expect_hinted_ids(dir, &h, "ab a", (const int32_t[]){0, 1, 3, 0}, 4);
    h.piece_run = 2;
    expect_hinted_ids(dir, &h, "ab a", (const int32_t[]){2, 3, 0}, 3);
    /* the tokenizer keeps no pointer into the hints: their pattern overwritten and freed after
     * loading, the tokenizer still splits with the one it was given */
    char *pattern = nnt_strdup("[a-z]+| ");
    nnt_tokenizer_hints owned = {.struct_size = sizeof owned, .split_pattern = pattern};
    CU_ASSERT_EQUAL_FATAL(nnt_tokenizer_load_hinted(dir, &owned, &tok), NNT_OK);
    memset(pattern, 'x', strlen(pattern));
    free(pattern);
    int32_t *ids;
    int64_t m;
    CU_ASSERT_EQUAL_FATAL(nnt_tokenizer_encode(tok, "ab", 2, 0, &ids, &m), NNT_OK);
    CU_ASSERT(m == 1 && ids[0] == 2);
    free(ids);
    nnt_tokenizer_free(tok);
    /* added_tokens_decoder names a reserved id (5 here) and bos_token finds it */
    CU_ASSERT_FATAL(t_write_file(path, "{\"bos_token\": \"<s>\", \"added_tokens_decoder\": {\"5\": {\"content\": \"<s>\"}}}") ==
                    0);
    h = (nnt_tokenizer_hints){.struct_size = sizeof h, .split_pattern = "[a-z]+| ", .reserved_special_tokens = 2};
    CU_ASSERT_EQUAL_FATAL(nnt_tokenizer_load_hinted(dir, &h, &tok), NNT_OK);
    CU_ASSERT_EQUAL(nnt_tokenizer_bos_id(tok), 5);
    CU_ASSERT_EQUAL(nnt_tokenizer_token_id(tok, "<|reserved_token_4|>"), 4);
    CU_ASSERT_EQUAL(nnt_tokenizer_token_id(tok, "<|reserved_token_5|>"), -1);
    nnt_tokenizer_free(tok);
    /* a pat_str wins over the hints: single letters, and only the listed special token (id 4) */
    CU_ASSERT_FATAL(t_write_file(path, "{\"pat_str\": \"[a-z]\", \"added_tokens_decoder\": {\"4\": {\"content\": \"<x>\"}}}") ==
                    0);
    expect_hinted_ids(dir, &h, "ab<x>", (const int32_t[]){0, 1, 4}, 3);
    CU_ASSERT_EQUAL_FATAL(nnt_tokenizer_load_hinted(dir, &h, &tok), NNT_OK);
    CU_ASSERT_EQUAL(nnt_tokenizer_vocab_size(tok), 5);
    CU_ASSERT_EQUAL(nnt_tokenizer_token_id(tok, "<|reserved_token_4|>"), -1);
    nnt_tokenizer_free(tok);
    /* the cuts apply to a tokenizer.json too: "abc" merges whole to abc (5), cut after 2
     * characters to ab (3) + c (2) */
    write_tokenizer("json_hints",
                    "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"bc\":4,\"abc\":5},"
                    "\"merges\":[\"b c\",\"a b\",[\"a\",\"bc\"]]}}",
                    dir, sizeof dir);
    nnt_tokenizer_hints cut = {.struct_size = sizeof cut, .piece_chars = 2};
    expect_hinted_ids(dir, &cut, "abc", (const int32_t[]){3, 2}, 2);
    /* bad hints name their field */
    nnt_tokenizer_hints bad = {.struct_size = sizeof bad, .reserved_special_tokens = -1};
    expect_hints_refused(dir, &bad, "tokenizer hints: reserved_special_tokens is -1; expected 0 or more");
    bad = (nnt_tokenizer_hints){.struct_size = sizeof bad, .piece_run = -5};
    expect_hints_refused(dir, &bad, "tokenizer hints: piece_run is -5");
    bad = (nnt_tokenizer_hints){.struct_size = 0};
    expect_hints_refused(dir, &bad, "tokenizer hints: struct_size is 0");
}

/* ---- JSON: the syntax scanner, picking members, and memory for fields no one reads ---- */

static void expect_json(const char *text, int valid, size_t bad_at)
{
    size_t at = 0;
    int rc = nnt_json_check(text, strlen(text), &at);
    if (rc != (valid ? 0 : -1) || (!valid && at != bad_at))
        fprintf(stderr, "\n  '%.60s': expected %s at %zu, got rc %d at %zu\n", text, valid ? "valid" : "an error",
                bad_at, rc, at);
    CU_ASSERT_EQUAL(rc, valid ? 0 : -1);
    if (!valid) CU_ASSERT_EQUAL(at, bad_at);
}

/* `n` arrays opened, one number, `n` closed */
static char *nested_arrays(int n)
{
    char *s = malloc(2 * (size_t)n + 2);
    if (!s) return NULL;
    memset(s, '[', (size_t)n);
    s[n] = '1';
    memset(s + n + 1, ']', (size_t)n);
    s[2 * n + 1] = 0;
    return s;
}

static void test_json_scanner(void)
{
    /* accepted: nesting, every escape, numbers of every form, the literals, whitespace, a BOM */
    const char *good[] = {"{}", "[]", "0", "-0", "1e-5", "1E+2", "-12.5e3", "0.0", "123456789012345678901234567890",
                          "\"\"", "true", "false", "null", " \t\r\n{ \"a\" : [ 1 , 2 ] } \n",
                          "{\"a\":{\"b\":[{\"c\":[[],{}]}]},\"d\":\"x\"}",
                          "\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\uD83D\\uDE00 \\uABcd\"",
                          "\"\xc3\xa9 bytes from 0x80 up\"", "\xEF\xBB\xBF{\"bom\":1}", "[1,-1,0.5,true,null,\"s\"]"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) expect_json(good[i], 1, 0);
    /* refused, at the first byte that cannot stand where it is (the length when the text ends) */
    static const struct {
        const char *text;
        size_t bad_at;
    } bad[] = {
        {"", 0},
        {"   ", 3},
        {"01", 1}, /* a leading zero */
        {"[-01]", 3},
        {"1.", 2}, /* a point without digits after it */
        {"1.e5", 2},
        {".5", 0},
        {"-", 1},
        {"+1", 0},
        {"1e", 2},
        {"1e+", 3},
        {"[1,]", 3}, /* a trailing comma */
        {"{\"a\":1,}", 7},
        {"[,1]", 1},
        {"{\"a\" 1}", 5}, /* no colon */
        {"{a:1}", 1}, /* a name without quotes */
        {"\"abc", 4}, /* an unterminated string */
        {"[\"a\\q\"]", 4}, /* an escape JSON lacks */
        {"\"\\u12G4\"", 5}, /* a \\u without four hex digits */
        {"\"\\u12\"", 5},
        {"\"a\tb\"", 2}, /* a raw control byte in a string */
        {"\"a\nb\"", 2},
        {"{\"a\":1} x", 8}, /* something after the document */
        {"[1] [2]", 4},
        {"tru", 3},
        {"nul1", 3},
        {"[1 2]", 3},
        {"{\"a\":1]", 6},
        {"[\x01]", 1},
        {"\x0c{}", 0}, /* a form feed is not JSON whitespace */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) expect_json(bad[i].text, 0, bad[i].bad_at);
    CU_ASSERT_EQUAL(nnt_json_check("[1] \0", 5, NULL), -1); /* nor is a NUL byte */
    /* 1000 arrays deep is accepted, 1001 is refused at the 1001st '[' (cJSON's limit) */
    char *deep = nested_arrays(1000);
    CU_ASSERT_FATAL(deep != NULL);
    expect_json(deep, 1, 0);
    free(deep);
    deep = nested_arrays(1001);
    CU_ASSERT_FATAL(deep != NULL);
    expect_json(deep, 0, 1000);
    free(deep);
}

static void test_json_pick(void)
{
    static const nnt_json_want inner[] = {{"x", NULL}, {NULL, NULL}};
    static const nnt_json_want want[] = {{"a", NULL}, {"m", inner}, {"caf\xc3\xa9", NULL}, {NULL, NULL}};
    const char *doc = "\xEF\xBB\xBF {\"skip\": [1, {\"a\": 2}], \"a\": [1, 2], \"m\": {\"y\": [3], \"x\": \"kept\", "
                      "\"x\": \"second\"}, \"a\": \"second\", \"caf\\u00e9\": true, \"mo\\u0000re\": 0}\n";
    cJSON *out = NULL;
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(nnt_json_pick(doc, strlen(doc), want, "doc", &out, &err), NNT_OK);
    char *printed = cJSON_PrintUnformatted(out);
    CU_ASSERT_STRING_EQUAL(printed, "{\"a\":[1,2],\"m\":{\"x\":\"kept\"},\"caf\xc3\xa9\":true}");
    free(printed);
    cJSON_Delete(out);
    /* a name cut by an escaped NUL matches what is before it, as cJSON's C-string names do */
    static const nnt_json_want mo[] = {{"mo", NULL}, {NULL, NULL}};
    CU_ASSERT_EQUAL_FATAL(nnt_json_pick(doc, strlen(doc), mo, "doc", &out, &err), NNT_OK);
    CU_ASSERT(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(out, "mo")));
    cJSON_Delete(out);
    /* a wanted member that is not an object is taken whole */
    const char *flat = "{\"m\": [1, 2]}";
    CU_ASSERT_EQUAL_FATAL(nnt_json_pick(flat, strlen(flat), want, "flat", &out, &err), NNT_OK);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(out, "m")), 2);
    cJSON_Delete(out);
    /* errors: malformed in a member no one wants, or after the object; a top that is no object */
    const char *bad = "{\"skip\": [1, 2,, 3], \"a\": 1}";
    CU_ASSERT_EQUAL(nnt_json_pick(bad, strlen(bad), want, "bad", &out, &err), NNT_ERR_FORMAT);
    CU_ASSERT_PTR_NULL(out);
    CU_ASSERT_STRING_EQUAL(err.msg, "bad: malformed JSON near byte 15");
    const char *tail = "{\"a\": 1} {";
    CU_ASSERT_EQUAL(nnt_json_pick(tail, strlen(tail), want, "tail", &out, &err), NNT_ERR_FORMAT);
    CU_ASSERT_STRING_EQUAL(err.msg, "tail: malformed JSON near byte 9");
    const char *lone = "{\"a\": \"\\uDC00\"}"; /* valid JSON that cJSON refuses, in a wanted member */
    CU_ASSERT_EQUAL(nnt_json_pick(lone, strlen(lone), want, "lone", &out, &err), NNT_ERR_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "lone: malformed JSON near byte"));
    CU_ASSERT_EQUAL(nnt_json_pick("[1]", 3, want, "arr", &out, &err), NNT_ERR_FORMAT);
    CU_ASSERT_STRING_EQUAL(err.msg, "arr: expected a JSON object at the top");
    CU_ASSERT_EQUAL(nnt_json_pick("[1,]", 4, want, "arr", &out, &err), NNT_ERR_FORMAT);
    CU_ASSERT_STRING_EQUAL(err.msg, "arr: malformed JSON near byte 3");
    CU_ASSERT_EQUAL(nnt_json_pick("", 0, want, "empty", &out, &err), NNT_ERR_FORMAT);
    CU_ASSERT_STRING_EQUAL(err.msg, "empty: malformed JSON near byte 0");
}

/* Writes the example model's tokenizer.json with two members nnt does not read: "junk" at the
 * top holding `junk` zeros (and, when bad_at is not NULL, an 'x' in the middle of them, whose
 * offset *bad_at gets), and "unread_extra" inside "model" holding `extra` zeros. The folder gets
 * the example's tokenizer_config.json too. The file's size into *size. */
static void write_padded_tokenizer(const char *name, long junk, long extra, long *bad_at, char *dir, size_t n,
                                   long *size)
{
    char src[1024], path[1200];
    snprintf(src, sizeof src, "%s/examples/tiny-minimax-m2/tokenizer.json", NNT_TEST_SOURCE_DIR);
    size_t len = 0;
    char *text = slurp(src, &len);
    CU_ASSERT_FATAL(text != NULL);
    char *open = strchr(text, '{'), *model = strstr(text, "\"model\"");
    CU_ASSERT_FATAL(open && model && strchr(model, '{'));
    char *model_open = strchr(model, '{');
    snprintf(dir, n, "%s/%s", t_tmpdir(), name);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "wb");
    CU_ASSERT_FATAL(f != NULL);
    fwrite(text, 1, (size_t)(open - text + 1), f);
    fputs("\n \"junk\": [", f);
    for (long i = 0; i < junk; i++) {
        if (bad_at && i == junk / 2) {
            *bad_at = ftell(f);
            fputs("x,", f);
        }
        fputs(i + 1 < junk ? "0," : "0", f);
    }
    fputs("],", f);
    fwrite(open + 1, 1, (size_t)(model_open - open), f);
    fputs("\"unread_extra\": [", f);
    for (long i = 0; i < extra; i++) fputs(i + 1 < extra ? "0," : "0", f);
    fputs("],", f);
    fwrite(model_open + 1, 1, len - (size_t)(model_open + 1 - text), f);
    *size = ftell(f);
    CU_ASSERT_FATAL(fclose(f) == 0);
    free(text);
    snprintf(src, sizeof src, "%s/examples/tiny-minimax-m2/tokenizer_config.json", NNT_TEST_SOURCE_DIR);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    CU_ASSERT_FATAL(t_copy_file(src, path) == 0);
}

static long peak_rss_kb(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

/* A tokenizer.json of some 18 MB, nearly all of it in members the loader never reads: loading it
 * must cost memory in proportion to the file (its bytes, read whole, and the members read), not
 * a cJSON node of some 80 bytes per unread number (over 700 MB here), and give the ids the file
 * without those members gives. The load runs in a child process, so that its peak resident size
 * (ru_maxrss) is measured from the child's start; the bound leaves room for AddressSanitizer's
 * shadow memory and redzones. */
static void test_unread_fields_memory(void)
{
    const char *text = "The people of the United States, in order to form a more perfect Union";
    char orig[1024], dir[1024];
    snprintf(orig, sizeof orig, "%s/examples/tiny-minimax-m2", NNT_TEST_SOURCE_DIR);
    nnt_tokenizer *tok = NULL;
    int32_t *want = NULL;
    int64_t n_want = 0;
    CU_ASSERT_EQUAL_FATAL(nnt_tokenizer_load(orig, &tok), NNT_OK);
    CU_ASSERT_EQUAL_FATAL(nnt_tokenizer_encode(tok, text, strlen(text), NNT_TOKENIZE_ADD_SPECIAL, &want, &n_want),
                          NNT_OK);
    nnt_tokenizer_free(tok);
    long size = 0;
    write_padded_tokenizer("tok_unread", 8L << 20, 1L << 20, NULL, dir, sizeof dir, &size);
    CU_ASSERT_FATAL(size > (16L << 20));
    /* and a tokenizer_config.json with a long chat template and 4M zeros it does not read either */
    char cfg_path[1200], cfg_src[1100];
    snprintf(cfg_src, sizeof cfg_src, "%s/tokenizer_config.json", orig);
    snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", dir);
    char *cfg_text = slurp(cfg_src, NULL), *brace = cfg_text ? strchr(cfg_text, '{') : NULL;
    FILE *cf = fopen(cfg_path, "wb");
    CU_ASSERT_FATAL(brace && cf);
    fputs("{\"chat_template\": \"", cf);
    for (long i = 0; i < (2L << 20); i++) fputc('x', cf);
    fputs("\", \"junk\": [", cf);
    for (long i = 0; i < (4L << 20); i++) fputs(i ? ",0" : "0", cf);
    fputs("],", cf);
    fputs(brace + 1, cf);
    size += ftell(cf);
    fclose(cf);
    free(cfg_text);
    int fds[2];
    CU_ASSERT_FATAL(pipe(fds) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) { /* the child: load, encode, report {status, same ids, peak growth in KiB} */
        close(fds[0]);
        long report[3] = {-1, 0, 0};
        long before = peak_rss_kb();
        nnt_tokenizer *big = NULL;
        report[0] = nnt_tokenizer_load(dir, &big);
        report[2] = peak_rss_kb() - before;
        int32_t *ids = NULL;
        int64_t n = 0;
        if (report[0] == NNT_OK &&
            nnt_tokenizer_encode(big, text, strlen(text), NNT_TOKENIZE_ADD_SPECIAL, &ids, &n) == NNT_OK)
            report[1] = n == n_want && memcmp(ids, want, (size_t)n * sizeof *ids) == 0;
        ssize_t w = write(fds[1], report, sizeof report);
        _exit(w == (ssize_t)sizeof report ? 0 : 1);
    }
    close(fds[1]);
    long report[3] = {-1, 0, 0};
    ssize_t got = read(fds[0], report, sizeof report);
    close(fds[0]);
    int wst = 0;
    CU_ASSERT_EQUAL(waitpid(pid, &wst, 0), pid);
    CU_ASSERT(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    CU_ASSERT_EQUAL_FATAL(got, (ssize_t)sizeof report);
    long bound_kb = 4 * size / 1024;
    fprintf(stderr, "\n  %ld bytes of tokenizer.json and tokenizer_config.json (nearly all unread): peak RSS grew by "
            "%ld KiB at load (bound %ld)\n",
            size, report[2], bound_kb);
    CU_ASSERT_EQUAL(report[0], NNT_OK);
    CU_ASSERT(report[1]); /* the same ids as without the unread members */
    CU_ASSERT(report[2] < bound_kb);
    free(want);
    char big_file[1100];
    snprintf(big_file, sizeof big_file, "%s/tokenizer.json", dir);
    unlink(big_file); /* 18 MB the folder need not keep */
    unlink(cfg_path);
    /* a malformed byte inside the unread member is refused, at its offset */
    long bad_at = -1;
    write_padded_tokenizer("tok_unread_bad", 1000, 10, &bad_at, dir, sizeof dir, &size);
    char needle[64];
    snprintf(needle, sizeof needle, "malformed JSON near byte %ld", bad_at);
    expect_load_error(dir, NNT_ERR_FORMAT, "tok_unread_bad/tokenizer.json", needle);
    /* a name given twice: the first counts, as cJSON_GetObjectItem had it */
    write_tokenizer("twice_first",
                    "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
                    "\"model\":{\"type\":\"WordPiece\"}}",
                    dir, sizeof dir);
    expect_ids(dir, "a", (const int32_t[]){0}, 1);
    write_tokenizer("twice_second",
                    "{\"m\\u006fdel\":{\"type\":\"WordPiece\"},"
                    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                    dir, sizeof dir);
    expect_load_error(dir, NNT_ERR_UNSUPPORTED, "model.type", "WordPiece");
    /* a top that is no object, and text after the object */
    write_tokenizer("top_array", "[{\"model\":{}}]", dir, sizeof dir);
    expect_load_error(dir, NNT_ERR_FORMAT, "top_array/tokenizer.json", "expected a JSON object at the top");
    write_tokenizer("tail", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}} ,", dir, sizeof dir);
    expect_load_error(dir, NNT_ERR_FORMAT, "tail/tokenizer.json", "malformed JSON near byte 53");
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("tokenizer", NULL, NULL);
    if (!s) return -1;
    if (!CU_add_test(s, "DeepSeek-V4 tokenizer.json vs tokenizers", test_deepseek_v4) ||
        !CU_add_test(s, "Kimi-Linear tiktoken (Qwen3.6 ranks) vs tiktoken", test_kimi_tiktoken) ||
        !CU_add_test(s, "Qwen tiktoken with pat_str vs tiktoken", test_qwen_tiktoken) ||
        !CU_add_test(s, "variant: TemplateProcessing and added-token flags", test_variant_template) ||
        !CU_add_test(s, "variant: ByteLevel regex and prefix space, Digits", test_variant_bytelevel) ||
        !CU_add_test(s, "variant: every Split behaviour", test_variant_split) ||
        !CU_add_test(s, "variant: NFKD, Lowercase, Strip, Prepend", test_variant_norms) ||
        !CU_add_test(s, "variant: NFD and Whitespace", test_variant_whitespace) ||
        !CU_add_test(s, "example model's tokenizer vs tokenizers", test_tiny) ||
        !CU_add_test(s, "byte fallback vs tokenizers", test_fallback) ||
        !CU_add_test(s, "pattern rewrite for PCRE2", test_pattern_rewrite) ||
        !CU_add_test(s, "UTF-8 repair", test_utf8_repair) ||
        !CU_add_test(s, "byte-level alphabet", test_bytelevel_alphabet) ||
        !CU_add_test(s, "merge order", test_merge_order) ||
        !CU_add_test(s, "batches and decode errors", test_tiny_batch) ||
        !CU_add_test(s, "special tokens and token bytes", test_special_lookup) ||
        !CU_add_test(s, "load errors name file and field", test_errors) ||
        !CU_add_test(s, "Kimi-Linear tiktoken without its family: no split pattern", test_kimi_without_hints) ||
        !CU_add_test(s, "Kimi-Linear tiktoken with hints by hand vs tiktoken", test_kimi_hints_by_hand) ||
        !CU_add_test(s, "tokenizer hints: pattern, reserved tokens, cuts, precedence, errors", test_hints) ||
        !CU_add_test(s, "JSON syntax scanner: accepted and refused documents, error offsets", test_json_scanner) ||
        !CU_add_test(s, "JSON members picked by name: nested, first of two, escaped names, errors", test_json_pick) ||
        !CU_add_test(s, "tokenizer.json: unread members cost no parse tree, malformed ones still refused",
                     test_unread_fields_memory))
        return -1;
    return 0;
}

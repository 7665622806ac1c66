/* fuzz_tokenizer.c - libFuzzer harness for the tokenizer loaders (core/tokenizer/tok_load_json.c,
 * core/tokenizer/tok_load_tiktoken.c, tokenizer_config.json in core/tokenizer/tokenizer.c) and the encoder and
 * decoder they set up. The input holds up to three parts separated by the line
 * "\n#nnt-fuzz-part#\n": the tokenizer file, tokenizer_config.json (absent when there is no
 * second part) and a text to encode. The tokenizer file is written as tokenizer.json when it
 * starts with '{' (after blanks), else as tiktoken.model. The folder is loaded twice: as it is
 * (nnt_tokenizer_load), and with the harness's tokenizer hints (nnt_tokenizer_load_hinted: the
 * split pattern and reserved special tokens a family gives a tiktoken folder without "pat_str",
 * and encode cuts small enough for fuzzed texts to reach). A tokenizer that loads must encode
 * the text to ids inside its vocabulary, and decode them again. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nnt/nnt_tokenizer.h"
#include "fuzz_common.h"

#define SEP "\n#nnt-fuzz-part#\n"

/* A pattern with a class intersection (rewritten for PCRE2), 4 reserved special tokens, pieces
 * of 16 code points and runs of at most 5. */
static const nnt_tokenizer_hints HINTS = {
    .struct_size = sizeof(nnt_tokenizer_hints),
    .split_pattern = "[\\p{L}&&[^\\p{Han}]]+|\\p{Han}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s+(?!\\S)|\\s+",
    .reserved_special_tokens = 4,
    .piece_chars = 16,
    .piece_run = 5,
};

/* Loads the fuzz folder (with hints, or none) and checks what it gives for text. */
static void check_folder(const nnt_tokenizer_hints *hints, const uint8_t *text, size_t text_n)
{
    nnt_tokenizer *tok = NULL;
    nnt_status st = nnt_tokenizer_load_hinted(fuzz_dir(), hints, &tok);
    fuzz_note(st == NNT_OK ? "loaded" : "refused", nnt_tokenizer_last_error(tok));
    if (st != NNT_OK) {
        FUZZ_CHECK(nnt_tokenizer_last_error(tok)[0], "a refusal without a message (status %d)", (int)st);
        nnt_tokenizer_free(tok);
        return;
    }
    int32_t vocab = nnt_tokenizer_vocab_size(tok);
    for (int flags = 0; flags <= NNT_TOKENIZE_ADD_SPECIAL; flags++) {
        int32_t *ids = NULL;
        int64_t n = 0;
        if (nnt_tokenizer_encode(tok, (const char *)text, text_n, flags, &ids, &n) != NNT_OK) {
            FUZZ_CHECK(nnt_tokenizer_last_error(tok)[0], "an encode refusal without a message");
            continue;
        }
        for (int64_t i = 0; i < n; i++)
            FUZZ_CHECK(ids[i] >= 0 && ids[i] < vocab, "id %d at %lld outside the vocabulary of %d", ids[i], (long long)i,
                       vocab);
        char *back = NULL;
        size_t back_n = 0;
        st = nnt_tokenizer_decode(tok, ids, n, NNT_DECODE_REPLACE_INVALID, &back, &back_n);
        FUZZ_CHECK(st == NNT_OK, "the ids encode gave do not decode: %s", nnt_tokenizer_last_error(tok));
        free(back);
        free(ids);
    }
    nnt_tokenizer_free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *file, *rest, *config, *text;
    size_t file_n, rest_n, config_n, text_n;
    int has_config = fuzz_split(data, size, SEP, &file, &file_n, &rest, &rest_n);
    fuzz_split(rest, rest_n, SEP, &config, &config_n, &text, &text_n);

    size_t lead = 0;
    while (lead < file_n && (file[lead] == ' ' || file[lead] == '\t' || file[lead] == '\n' || file[lead] == '\r')) lead++;
    int json = lead < file_n && file[lead] == '{';
    char path[1024];
    fuzz_unlink(json ? "tiktoken.model" : "tokenizer.json");
    fuzz_write(json ? "tokenizer.json" : "tiktoken.model", file, file_n, path, sizeof path);
    if (has_config)
        fuzz_write("tokenizer_config.json", config, config_n, path, sizeof path);
    else
        fuzz_unlink("tokenizer_config.json");

    check_folder(NULL, text, text_n);
    check_folder(&HINTS, text, text_n);
    return 0;
}

/* nnt_tokenizer.h - text to token ids and back, with the tokenizer a checkpoint folder ships.
 *
 * Two formats are read, whichever the folder holds:
 *   tokenizer.json  Hugging Face tokenizers: a BPE model (byte-level alphabet or plain, merges
 *                   spelt "a b" or ["a", "b"], ignore_merges, byte_fallback, unk_token and
 *                   fuse_unk), normalizers (NFC, NFKC, NFD, NFKD, Lowercase, Strip, Replace,
 *                   Prepend, Sequence),
 *                   pre-tokenizers (ByteLevel, Split, Digits, Whitespace, WhitespaceSplit,
 *                   Sequence), added tokens with their special / normalized / lstrip / rstrip /
 *                   single_word flags, the TemplateProcessing, ByteLevel and Sequence
 *                   post-processors and the ByteLevel, ByteFallback, Fuse, Replace and
 *                   Sequence decoders (no decoder: tokens joined by spaces, as tokenizers does).
 *                   Split patterns are Oniguruma's syntax; they run on PCRE2 after a rewrite
 *                   (see core/tokenizer/tok_regex.c) that keeps \s, \w and script names meaning what
 *                   the references' engines make them mean.
 *   tiktoken.model  base64 token bytes and their rank, one per line (the rank is the id), with
 *                   the split pattern of a "pat_str" string in tokenizer_config.json and the
 *                   special tokens of its added_tokens_decoder, or else the split pattern and
 *                   special tokens the family plugin serving the checkpoint gives for the
 *                   release's tokenization code (nnt_tokenizer_hints, passed by
 *                   nnt_runtime_tokenizer).
 * tokenizer_config.json, when present, gives bos_token, eos_token, pad_token and add_bos_token.
 *
 * Text is UTF-8. A byte sequence that is not valid UTF-8 is encoded as if each maximal invalid
 * subpart were U+FFFD (Python's bytes.decode("utf-8", "replace") does the same), so a prompt
 * with stray bytes still encodes; decode(encode(x)) == x holds for valid UTF-8 x.
 *
 * Errors follow the runtime's model: every call that can fail returns an nnt_status, and the
 * tokenizer keeps the message of its latest failure (nnt_tokenizer_last_error). A tokenizer may
 * be shared by threads: its tables are read-only after loading, and its encode and decode calls
 * (whose caches and scratch change) take turns on a lock of its own; the message of a failure is
 * then that of the latest failed call of any thread, so a program that reads messages from
 * several threads serialises the call and the read itself. */
#ifndef NNT_TOKENIZER_H
#define NNT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "nnt_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nnt_tokenizer nnt_tokenizer;

/* What a checkpoint's tokenizer files can leave to the release's own tokenization code, given
 * instead by the family plugin that serves the checkpoint (nnt_family_descriptor.tokenizer) and
 * applied by nnt_tokenizer_load_hinted. A field left 0 or NULL changes nothing. Versioned by
 * struct_size: a reader uses only the fields that fit in it. */
typedef struct nnt_tokenizer_hints {
    uint32_t struct_size;       /* sizeof(nnt_tokenizer_hints) as the writer saw it */
    /* A tiktoken.model folder whose tokenizer_config.json gives no "pat_str": the split pattern
     * (Rust regex syntax, as tiktoken's Python writes it; rewritten for PCRE2 like a pat_str). */
    const char *split_pattern;
    /* A tiktoken.model folder without "pat_str": this many special tokens take the ids right
     * after the ranks, named by tokenizer_config.json's added_tokens_decoder where it names
     * them, else "<|reserved_token_ID|>". */
    int32_t reserved_special_tokens;
    /* Encode (of either format) cuts a text into pieces of at most piece_chars characters, then
     * cuts each piece so that no run of white space (as Python's str.isspace counts it), or of
     * other characters, is longer than piece_run; each cut is encoded on its own. Characters
     * are code points. 0: no such cut (both 0: the text is encoded whole). Negative values are
     * refused. */
    int64_t piece_chars;
    int64_t piece_run;
} nnt_tokenizer_hints;

/* Flags of nnt_tokenizer_encode and nnt_tokenizer_encode_batch. */
enum {
    /* Add the special tokens the tokenizer adds around a text: the TemplateProcessing
     * post-processor's (e.g. BOS), or bos_token when tokenizer_config.json sets add_bos_token.
     * Special tokens written inside the text are matched with or without this flag. */
    NNT_TOKENIZE_ADD_SPECIAL = 1,
};

/* Flags of nnt_tokenizer_decode. */
enum {
    NNT_DECODE_SKIP_SPECIAL = 1,    /* leave out tokens marked special */
    NNT_DECODE_REPLACE_INVALID = 2, /* replace bytes that are not valid UTF-8 with U+FFFD, as
                                     * the reference decoders do; without it the bytes are
                                     * returned exactly as the tokens hold them */
};

/* Loads the tokenizer of the model folder `dir`: tokenizer.json if present, else
 * tiktoken.model, plus tokenizer_config.json if present. *out is set even on failure (like
 * nnt_runtime_open) so nnt_tokenizer_last_error can say why; free it either way.
 * Errors: NNT_ERR_NOT_FOUND (the folder has no tokenizer file), NNT_ERR_IO (unreadable file),
 * NNT_ERR_FORMAT (malformed JSON or tiktoken line: the message names the file and the field or
 * line), NNT_ERR_UNSUPPORTED (a model type, normalizer, pre-tokenizer, post-processor or
 * decoder this build does not implement, named; a tiktoken folder with no "pat_str", whose
 * split pattern only a family plugin's hints can give: see nnt_tokenizer_load_hinted),
 * NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_tokenizer_load(const char *dir, nnt_tokenizer **out);
/* nnt_tokenizer_load with the hints of the family that serves the folder's checkpoint (see
 * nnt_tokenizer_hints; NULL: none), for what the files leave out. nnt_runtime_tokenizer (nnt.h)
 * finds the family from config.json and passes its hints. The tokenizer keeps no pointer into
 * `hints`: it may outlive them. Errors: those of nnt_tokenizer_load, NNT_ERR_INVALID_ARGUMENT
 * (a struct_size below 4, a negative count; the message names the field). */
nnt_status nnt_tokenizer_load_hinted(const char *dir, const nnt_tokenizer_hints *hints, nnt_tokenizer **out);
void nnt_tokenizer_free(nnt_tokenizer *tok);
/* The message of the latest failure ("" when none). Owned by the tokenizer. */
const char *nnt_tokenizer_last_error(const nnt_tokenizer *tok);
/* "tokenizer.json (BPE)" or "tiktoken", for listings. */
const char *nnt_tokenizer_kind(const nnt_tokenizer *tok);

/* One more than the largest id the tokenizer can produce (model vocabulary and added tokens). */
int32_t nnt_tokenizer_vocab_size(const nnt_tokenizer *tok);
/* The ids of the bos, eos and pad tokens tokenizer_config.json names (-1 when it names none or
 * there is no such file). */
int32_t nnt_tokenizer_bos_id(const nnt_tokenizer *tok);
int32_t nnt_tokenizer_eos_id(const nnt_tokenizer *tok);
int32_t nnt_tokenizer_pad_id(const nnt_tokenizer *tok);
/* The id of the token spelt exactly `text` (NUL-terminated; a vocabulary entry in its stored
 * spelling or an added token), or -1. */
int32_t nnt_tokenizer_token_id(const nnt_tokenizer *tok, const char *text);
/* The bytes token `id` stands for in decoded text (byte-level tokens mapped back to their
 * bytes; may be an incomplete UTF-8 sequence): *len bytes at the returned pointer, owned by
 * the tokenizer. NULL (and *len 0) for an id out of range or with no token. */
const char *nnt_tokenizer_token_bytes(const nnt_tokenizer *tok, int32_t id, size_t *len);
/* Nonzero when token `id` is an added token marked special. */
int nnt_tokenizer_is_special(const nnt_tokenizer *tok, int32_t id);

/* Encodes `len` bytes of UTF-8 `text` (need not be NUL-terminated; len 0 gives no ids unless
 * special tokens are added). *ids receives a new array of *n_ids I32 token ids the caller frees
 * with free(); on failure *ids is NULL and *n_ids 0. flags: NNT_TOKENIZE_ADD_SPECIAL.
 * Errors: NNT_ERR_INVALID_ARGUMENT (NULL arguments), NNT_ERR_OUT_OF_MEMORY, NNT_ERR_INTERNAL
 * (the split pattern's matcher failed, e.g. it ran out of its match budget). */
nnt_status nnt_tokenizer_encode(nnt_tokenizer *tok, const char *text, size_t len, int flags,
                                int32_t **ids, int64_t *n_ids);

/* Decodes n_ids ids into text: *text receives a new NUL-terminated buffer of *len bytes the
 * caller frees with free(). flags: NNT_DECODE_SKIP_SPECIAL, NNT_DECODE_REPLACE_INVALID.
 * Errors: NNT_ERR_INVALID_ARGUMENT (NULL arguments), NNT_ERR_INDEX (an id outside
 * [0, vocab_size) or with no token; the message gives its position), NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_tokenizer_decode(nnt_tokenizer *tok, const int32_t *ids, int64_t n_ids, int flags,
                                char **text, size_t *len);

/* A batch of encoded texts, left-padded to the longest row (the layout nnt_trace_run and
 * nnt_generate take). ids and attention_mask are [batch, seq] I32, row-major; a padded slot
 * holds pad_id (the pad token, else the eos token, else 0) and mask 0, a real token mask 1. */
typedef struct nnt_token_batch {
    int batch;
    int seq;
    int32_t *ids;            /* [batch, seq] */
    int32_t *attention_mask; /* [batch, seq]: 1 real, 0 padding */
    int32_t *lengths;        /* [batch]: real tokens per row */
} nnt_token_batch;

/* Encodes n_texts NUL-terminated texts into *out (its arrays are new; release them with
 * nnt_token_batch_free). A text that encodes to no token is an error, as is a batch whose
 * rows exceed INT32_MAX tokens. flags: NNT_TOKENIZE_ADD_SPECIAL.
 * Errors: those of nnt_tokenizer_encode, NNT_ERR_INVALID_ARGUMENT (n_texts < 1, an empty
 * row: the message gives its index). */
nnt_status nnt_tokenizer_encode_batch(nnt_tokenizer *tok, const char *const *texts, int n_texts,
                                      int flags, nnt_token_batch *out);
void nnt_token_batch_free(nnt_token_batch *b);

#ifdef __cplusplus
}
#endif
#endif /* NNT_TOKENIZER_H */

/* tok_internal.h - the tokenizer's internal types and functions, shared by core/tokenizer/tokenizer.c
 * (the public API), core/tokenizer/tok_load_json.c, core/tokenizer/tok_load_tiktoken.c and the pieces they use:
 * tok_table.c (string tables and hash maps), tok_bpe.c (merging), tok_text.c (UTF-8 and
 * Unicode normalisation), tok_regex.c (split patterns), tok_added.c (added tokens),
 * tok_pretok.c (pre-tokenizers). Nothing here is part of the public API. */
#ifndef NNT_TOK_INTERNAL_H
#define NNT_TOK_INTERNAL_H

#include <stddef.h>
#include <pthread.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "../internal.h"
#include "nnt/nnt_tokenizer.h"

/* ---- growable arrays (tok_table.c) ---- */
typedef struct tok_buf { /* bytes */
    char *p;
    size_t n, cap;
} tok_buf;
int tok_buf_put(tok_buf *b, const void *s, size_t n); /* 0 or -1 (no memory) */
/* The first occurrence of needle[0..nn) in hay[0..hn), or NULL (nn 0: NULL). */
const char *tok_find(const char *hay, size_t hn, const char *needle, size_t nn);
int tok_buf_reserve(tok_buf *b, size_t n);
void tok_buf_free(tok_buf *b);

typedef struct tok_ids { /* I32 token ids */
    int32_t *p;
    int64_t n, cap;
} tok_ids;
int tok_ids_put(tok_ids *v, int32_t id);
int tok_ids_put_n(tok_ids *v, const int32_t *ids, int64_t n);

/* A piece of a working buffer: bytes [off, off + len). */
typedef struct tok_span {
    uint32_t off, len;
} tok_span;
typedef struct tok_spans {
    tok_span *p;
    size_t n, cap;
} tok_spans;
int tok_spans_put(tok_spans *v, uint32_t off, uint32_t len);

/* ---- regex matching state (tok_regex.c) ---- */
/* What one matching thread needs: PCRE2's match data, a match context with a bounded budget
 * and a JIT stack large enough for the long runs of text a tokenizer meets. */
typedef struct tok_matcher {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
} tok_matcher;
int tok_matcher_init(tok_matcher *m); /* 0 or -1 (no memory) */
void tok_matcher_free(tok_matcher *m);

/* ---- string tables and maps (tok_table.c) ---- */
/* Byte strings numbered 0..n-1, stored back to back in one pool. */
typedef struct tok_strtab {
    tok_buf pool;
    uint64_t *off;
    uint32_t *len;
    int32_t n, cap;
} tok_strtab;
/* Appends s; returns its index or -1 (no memory). */
int32_t tok_strtab_add(tok_strtab *t, const char *s, size_t n);
/* Sets string i (growing the table with empty strings up to i). 0 or -1. */
int tok_strtab_set(tok_strtab *t, int32_t i, const char *s, size_t n);
static inline const char *tok_strtab_get(const tok_strtab *t, int32_t i, size_t *n)
{
    *n = t->len[i];
    return t->pool.p + t->off[i];
}
void tok_strtab_free(tok_strtab *t);

/* Open-addressing map from a table's strings to their index (the first of equal strings). */
typedef struct tok_strmap {
    uint32_t *slot; /* index + 1; 0 empty */
    uint64_t mask;
    uint64_t used;
} tok_strmap;
uint64_t tok_hash(const void *s, size_t n);
/* Builds the map over every string of t. 0 or -1 (no memory). */
int tok_strmap_build(tok_strmap *m, const tok_strtab *t);
/* Adds string i of t (grows as needed). 0 or -1. */
int tok_strmap_add(tok_strmap *m, const tok_strtab *t, int32_t i);
int32_t tok_strmap_find(const tok_strmap *m, const tok_strtab *t, const char *s, size_t n);
void tok_strmap_free(tok_strmap *m);

/* Map from a pair of ids to a merge: its rank (lower merges first) and the merged id. */
typedef struct tok_pair {
    uint64_t key; /* (left << 32) | right, + 1; 0 empty */
    uint32_t rank;
    int32_t merged;
} tok_pair;
typedef struct tok_pairmap {
    tok_pair *slot;
    uint64_t mask, used;
} tok_pairmap;
/* Adds a pair; an existing pair keeps its first (lower) rank. 0 or -1. */
int tok_pairmap_add(tok_pairmap *m, int32_t left, int32_t right, uint32_t rank, int32_t merged);
const tok_pair *tok_pairmap_find(const tok_pairmap *m, int32_t left, int32_t right);
void tok_pairmap_free(tok_pairmap *m);

/* ---- UTF-8 and Unicode (tok_text.c) ---- */
/* (nnt_utf8_len and nnt_utf8_valid_prefix: internal.h) */
/* Decodes the valid sequence at s of length len (from nnt_utf8_len). */
uint32_t tok_utf8_decode(const uint8_t *s, int len);
int tok_utf8_encode(uint32_t cp, char out[4]);
/* Copies `text` into out with every maximal invalid subpart replaced by U+FFFD. Returns the
 * number of replacements, or -1 (no memory). */
long tok_utf8_repair(const char *text, size_t n, tok_buf *out);
/* Unicode's White_Space property (what \s means in the references' regex engines). */
int tok_is_white_space(uint32_t cp);
/* Python's str.isspace(): bidirectional class WS, B or S, or general category Zs. */
int tok_is_py_space(uint32_t cp);
/* General category N* (Rust's char::is_numeric). */
int tok_is_numeric(uint32_t cp);
/* A word character as Rust's regex \w has it: Alphabetic (letters, Nl, and the Other_Alphabetic
 * symbols such as circled letters), marks, decimal digits, connector punctuation, ZWNJ, ZWJ. */
int tok_is_word(uint32_t cp);

/* The GPT-2 byte-level alphabet: each byte's stand-in character, and back. */
typedef struct tok_bytelevel {
    uint32_t cp[256];      /* byte -> code point */
    int16_t byte_of[324];  /* code point (< 324) -> byte, or -1 */
} tok_bytelevel;
void tok_bytelevel_init(tok_bytelevel *bl);
/* The bytes a string of byte-level characters stands for, appended to out. Returns 1 when
 * every character is in the alphabet, 0 when one is not (then out gets the string's own UTF-8
 * bytes, as the ByteLevel decoder does), -1 (no memory). */
int tok_bytelevel_unmap(const tok_bytelevel *bl, const char *s, size_t n, tok_buf *out);

/* ---- normalizers (tok_text.c) ---- */
typedef enum tok_norm_kind {
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
    TOK_NORM_REPLACE, /* every match of a literal or a regex -> content */
    TOK_NORM_PREPEND, /* content before a non-empty text */
    TOK_NORM_LOWERCASE,
    TOK_NORM_STRIP,   /* White_Space off the left and/or right end */
} tok_norm_kind;
typedef struct tok_norm_op {
    tok_norm_kind kind;
    char *literal;        /* REPLACE with a String pattern */
    size_t literal_len;
    pcre2_code *re;       /* REPLACE with a Regex pattern */
    char *content;
    size_t content_len;
    int strip_left, strip_right;
} tok_norm_op;
typedef struct tok_normalizer {
    tok_norm_op *ops;
    int n;
} tok_normalizer;
/* Applies every op of nz to s[0..n) into out (cleared first). 0, or -1 with err set. */
int tok_normalize(const tok_normalizer *nz, const char *s, size_t n, tok_buf *out, tok_buf *tmp,
                  const tok_matcher *m, nnt_error *err);
void tok_normalizer_free(tok_normalizer *nz);

/* ---- split patterns (tok_regex.c) ---- */
/* Compiles a pattern written for the references' engines (Oniguruma in tokenizers, Rust's
 * fancy-regex in tiktoken) for PCRE2: \s and \S become Unicode's White_Space set (PCRE2's
 * own \s leaves out U+0085), and a class intersection [X&&[Y]] (which PCRE2 lacks) becomes
 * (?:(?=[Y])[X]). UTF and UCP are on; the JIT is used when available. NULL with err set (the
 * message quotes `what`, e.g. the file and field, and PCRE2's reason) on failure. */
pcre2_code *tok_regex_compile(const char *pattern, size_t len, const char *what, nnt_error *err);
/* The rewritten pattern alone, for tests: a new string the caller frees, or NULL. */
char *tok_regex_rewrite(const char *pattern, size_t len);
/* Finds the next non-empty match of re in s[0..n) starting at `from` (s must be valid UTF-8;
 * it is not checked again). Returns 1 and [*start, *end) on a match, 0 when there is none, -1
 * with err set when PCRE2 fails (e.g. its match budget runs out). */
int tok_regex_next(pcre2_code *re, const tok_matcher *m, const char *s, size_t n, size_t from, size_t *start,
                   size_t *end, nnt_error *err);

/* ---- added and special tokens (tok_added.c) ---- */
typedef struct tok_added {
    int32_t id;
    char *content;
    size_t len;
    unsigned special : 1, normalized : 1, lstrip : 1, rstrip : 1, single_word : 1;
} tok_added;
/* A byte trie over some added tokens, for leftmost-longest matching. */
typedef struct tok_trie {
    int32_t *term;  /* per node: index of the added token ending here, or -1 */
    int32_t n_nodes, cap_nodes;
    uint64_t *edge_key; /* (node << 8 | byte) + 1, 0 empty */
    int32_t *edge_child;
    uint64_t edge_mask, edge_used;
    uint8_t first[256]; /* nonzero for bytes that start some token */
} tok_trie;
int tok_trie_add(tok_trie *t, const char *s, size_t n, int32_t index);
void tok_trie_free(tok_trie *t);
/* Splits s[0..n) around the matches of trie t, with the flags of tokens[] (single_word, lstrip,
 * rstrip) applied as Hugging Face tokenizers applies them. Appends to out segments whose
 * `index` is the matched token's index in tokens[], or -1 for text between matches. */
typedef struct tok_seg {
    size_t start, end;
    int32_t index;
} tok_seg;
typedef struct tok_segs {
    tok_seg *p;
    size_t n, cap;
} tok_segs;
int tok_trie_split(const tok_trie *t, const tok_added *tokens, const char *s, size_t n, tok_segs *out);

/* ---- pre-tokenizers (tok_pretok.c) ---- */
typedef enum tok_split_behavior {
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_WITH_PREVIOUS,
    TOK_SPLIT_MERGED_WITH_NEXT,
    TOK_SPLIT_CONTIGUOUS,
} tok_split_behavior;
typedef enum tok_pretok_kind {
    TOK_PRE_SPLIT,            /* a regex or a literal, with a behaviour and invert */
    TOK_PRE_DIGITS,           /* numeric characters: each alone, or runs together */
    TOK_PRE_BYTELEVEL,        /* optional prefix space and GPT-2 regex; bytes mapped at the end */
    TOK_PRE_WHITESPACE_SPLIT, /* split on White_Space, dropping it */
} tok_pretok_kind;
typedef struct tok_pretok_step {
    tok_pretok_kind kind;
    pcre2_code *re;      /* SPLIT (regex, or the escaped literal), BYTELEVEL with use_regex */
    tok_split_behavior behavior;
    int invert;
    int individual_digits;
    int add_prefix_space;
} tok_pretok_step;
typedef struct tok_pretok {
    tok_pretok_step *steps;
    int n;
} tok_pretok;
/* Pre-tokenizes text[0..n) (valid UTF-8): work is cleared and receives the text and any piece
 * built anew; pieces receives the final pieces as spans of work. 0, or -1 with err set. */
int tok_pretokenize(const tok_pretok *pt, const char *text, size_t n, tok_buf *work, tok_spans *pieces,
                    tok_spans *tmp, const tok_matcher *m, nnt_error *err);
void tok_pretok_free(tok_pretok *pt);

/* ---- byte-pair merging (tok_bpe.c) ---- */
typedef enum tok_bpe_mode {
    TOK_BPE_MERGES, /* Hugging Face BPE: a ranked list of merges of id pairs */
    TOK_BPE_RANKS,  /* tiktoken: merge the adjacent pair whose joined bytes rank lowest */
} tok_bpe_mode;
typedef struct tok_heap_entry {
    uint32_t rank;
    uint32_t pos;
    uint32_t span; /* bytes of the pair when pushed: a stale entry no longer matches */
    int32_t merged;
} tok_heap_entry;
typedef struct tok_symbol {
    int32_t id;
    uint32_t start, len;
    int32_t prev, next;
} tok_symbol;
typedef struct tok_bpe {
    tok_bpe_mode mode;
    int byte_units;       /* a word starts as its bytes (byte-level, tiktoken), else its chars */
    tok_strtab vocab;     /* id -> the bytes a word holds for it (byte-level: raw bytes) */
    tok_strmap vocab_map;
    tok_pairmap merges;   /* MERGES mode */
    int32_t byte_id[256]; /* byte_units: the id of each single byte, -1 when absent */
    int ignore_merges;    /* a word that is itself in the vocabulary is that token */
    int32_t unk_id;       /* -1: unknown characters are dropped */
    int fuse_unk;
    int byte_fallback;
    int32_t fallback_id[256]; /* byte_fallback: the <0xNN> tokens */
    /* the word cache: word bytes -> ids */
    tok_strtab cache_words;
    tok_strmap cache_map;
    tok_ids cache_ids;
    int64_t *cache_at; /* per cached word: start in cache_ids; its count is the next start */
    int32_t cache_cap;
    /* scratch */
    tok_symbol *sym;
    size_t sym_cap;
    tok_heap_entry *heap;
    size_t heap_cap;
} tok_bpe;
/* Encodes one pre-tokenized word, appending its ids. 0 or -1 (no memory). */
int tok_bpe_word(tok_bpe *b, const char *s, size_t n, tok_ids *out);
void tok_bpe_free(tok_bpe *b);
/* Resets the word cache (after the vocabulary or merges change). */
void tok_bpe_cache_clear(tok_bpe *b);

/* ---- the tokenizer ---- */
typedef enum tok_format { TOK_FORMAT_JSON, TOK_FORMAT_TIKTOKEN } tok_format;

struct nnt_tokenizer {
    pthread_mutex_t mu; /* one encode or decode at a time: the scratch, cache and err below are shared */
    nnt_error err;
    /* the family's, as nnt_tokenizer_load_hinted was given them (zero: none); split_pattern is
     * cleared once the loader has compiled it, so the tokenizer keeps no pointer into the
     * caller's hints (it may outlive them, and the plugin that holds them) */
    nnt_tokenizer_hints hints;
    tok_format format;
    char *dir;
    tok_bpe bpe;
    tok_bytelevel bl;
    int byte_level; /* the model's strings are byte-level characters */
    tok_normalizer norm;
    tok_pretok pre;
    /* tiktoken: the split pattern; pieces between matches are dropped, as tiktoken does */
    pcre2_code *tik_re;
    /* added tokens (tokenizer.json) or special tokens (tiktoken) */
    tok_added *added;
    int32_t n_added;
    tok_trie trie_raw;  /* added tokens matched in the text as given */
    tok_trie trie_norm; /* added tokens matched in normalized text */
    /* post-processing with NNT_TOKENIZE_ADD_SPECIAL */
    tok_ids prefix, suffix;
    int32_t vocab_size;
    int64_t id_entries; /* the tokens the files list (vocabulary and added): bounds the ids, tok_id_reach */
    tok_strtab dec;   /* id -> the bytes it decodes to */
    uint8_t *flags;   /* [vocab_size]: TOK_ID_* */
    int join_space;   /* no decoder: decoded tokens are joined with spaces, as tokenizers does */
    int32_t bos_id, eos_id, pad_id;
    int want_bos; /* tokenizer_config.json's add_bos_token */
    int add_bos;  /* ... where the post-processor does not add the bos token itself */
    /* scratch reused across calls */
    tok_matcher m;
    tok_buf text, normed, tmp, work;
    tok_segs segs, segs2;
    tok_spans pieces, pieces_tmp;
};

enum { TOK_ID_PRESENT = 1, TOK_ID_SPECIAL = 2 };

/* Loaders: fill tok from the folder's files; on failure set tok->err and return its status. */
nnt_status tok_load_json(nnt_tokenizer *tok, const char *path);
nnt_status tok_load_tiktoken(nnt_tokenizer *tok, const char *path);
/* Reads tokenizer_config.json of the folder if present (bos, eos, pad, add_bos_token) and
 * sizes the id flags; called by the loaders last. cfg receives the parsed file (NULL when
 * absent; the caller frees it with cJSON_Delete) so a loader can read more of it. */
struct cJSON;
nnt_status tok_read_config(nnt_tokenizer *tok, struct cJSON **cfg);
/* The ids of the added tokens marked normalized decode to their normalized content, as
 * tokenizers stores them. */
/* The id of vocabulary entry s[0 .. n) of the model, or -1: ids the vocabulary leaves unassigned
 * (holes, empty strings in the table) are never found, so an empty or NUL-cut string cannot name one. */
int32_t tok_vocab_find(const nnt_tokenizer *tok, const char *s, size_t n);
/* The id of a token by its stored spelling (added tokens first), or -1. */
int32_t tok_lookup(const nnt_tokenizer *tok, const char *s, size_t n);
/* The id space the loaded files may span: ids below twice tok->id_entries plus 1024. Released
 * vocabularies number their tokens from 0 with few or no gaps, and every id, used or not, costs
 * the per-id tables ~25 bytes, so an id far past the count of tokens listed (2^31 would ask for
 * ~50 GB) is refused by the loaders, naming the field, before anything is allocated for it. */
int64_t tok_id_reach(const nnt_tokenizer *tok);
/* 1 when id is a token of the loaded files (the vocabulary or the added tokens), not a hole. */
int tok_id_assigned(const nnt_tokenizer *tok, int64_t id);
/* The words after "id N is " in that refusal; its arguments are tok_id_reach and tok->id_entries. */
#define TOK_ID_REACH_WHY "beyond this tokenizer's id space (ids below %lld: twice the %lld tokens its files list, plus 1024)"
/* Grows the per-id arrays to hold id. 0, or -1 when out of memory or id >= tok_id_reach(tok). */
int tok_reserve_ids(nnt_tokenizer *tok, int32_t id);

#endif /* NNT_TOK_INTERNAL_H */

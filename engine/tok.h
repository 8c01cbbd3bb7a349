/* tok.h - the byte-level BPE tokenizer: train, save, load, encode, decode.
 *
 * Text is split into chunks by a GPT-4-style regular expression (PCRE2, UTF-8
 * with invalid sequences allowed); bytes that no match covers (invalid UTF-8)
 * form chunks of their own, so every byte string round-trips. Each chunk starts
 * as its bytes (token ids 0..255) and merges are applied by rank inside it;
 * merge number r creates token id 256 + r. After the merges come the special
 * tokens <|bos|>, <|eos|>, <|pad|>, <|reserved|>. Encoding never produces a
 * special token: text that spells "<|bos|>" is encoded as ordinary bytes.
 *
 * Sizes: tok_train's n_vocab counts the 256 byte tokens plus the merges
 * (256 = bytes only); tok_vocab_size is that plus TOK_N_SPECIAL.
 *
 * Ownership: tok_train, tok_trainer_finish and tok_load return a tokenizer the
 * caller frees with tok_free. tok_encode appends to a caller-owned tok_ids_t
 * (free its ids with tok_ids_free). A tok_t holds an encode cache, so use one
 * tok_t from one thread at a time. */
#ifndef NIGHTSHIFT_TOK_H
#define NIGHTSHIFT_TOK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TOK_N_BYTES   256
#define TOK_N_SPECIAL 4

/* The split pattern every tokenizer trained here uses (stored in tokenizer.json). */
#define TOK_PATTERN                                                                                \
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}{1,3}| "                           \
    "?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"

/* Offsets of the special tokens after the merges: id = tok_n_regular + offset. */
typedef enum { TOK_BOS = 0, TOK_EOS = 1, TOK_PAD = 2, TOK_RESERVED = 3 } tok_special;

typedef struct tok tok_t;
typedef struct tok_trainer tok_trainer_t;

/* A growable vector of token ids. Zero-initialise; tok_ids_free releases it. */
typedef struct {
    int32_t *ids;
    size_t n, cap;
} tok_ids_t;

void tok_ids_free(tok_ids_t *v);
/* Append one id. Returns 0, or -1 on allocation failure (v unchanged). */
int tok_ids_push(tok_ids_t *v, int32_t id);

/* --- training ----------------------------------------------------------- */

/* A trainer collects the chunk counts of any number of documents, then runs
 * the merges. Documents never share a chunk. Returns NULL with err on failure;
 * the caller frees it with tok_trainer_free. */
tok_trainer_t *tok_trainer_new(char *err, size_t errlen);

/* Split one document and count its chunks. The text is not kept. */
int tok_trainer_add(tok_trainer_t *tr, const void *text, size_t len, char *err, size_t errlen);

/* Bytes and distinct chunks counted so far (the chunk count is 0 once finished). */
uint64_t tok_trainer_bytes(const tok_trainer_t *tr);
size_t tok_trainer_unique_chunks(const tok_trainer_t *tr);

/* Merge the most frequent adjacent pair (ties: smallest first id, then
 * smallest second id) until there are n_vocab - 256 merges. Fails if
 * n_vocab < 256, if n_vocab > tok_max_vocab, or if the text runs out of pairs
 * before that many merges. log, if not NULL, receives progress lines. The
 * trainer may be freed afterwards, and cannot be finished twice. Returns a new
 * tokenizer (caller frees with tok_free) or NULL with err. */
tok_t *tok_trainer_finish(tok_trainer_t *tr, int n_vocab, FILE *log, char *err, size_t errlen);

/* After tok_trainer_finish: how often merge number rank's pair occurred in
 * the training text when it was merged (chunks weighted by their counts),
 * which falls as rank rises; 0 for a rank out of range. */
int64_t tok_trainer_merge_count(const tok_trainer_t *tr, int rank);

void tok_trainer_free(tok_trainer_t *tr);

/* One-shot training over n_docs documents (docs[i] of lens[i] bytes). */
tok_t *tok_train(const char *const *docs, const size_t *lens, size_t n_docs, int n_vocab, FILE *log,
                 char *err, size_t errlen);

/* The largest n_vocab tok_train accepts (ids must fit an int32 comfortably). */
#define TOK_MAX_VOCAB (1 << 24)

/* --- persistence -------------------------------------------------------- */

/* Write tokenizer.json: {"version":1,"type":"byte-level-bpe","pattern":...,
 * "n_bytes":256,"merges":[[a,b],...] in rank order,"specials":[{"name","id"}]}.
 * The output depends only on the tokenizer, so equal tokenizers give equal
 * files. Returns 0 or -1 with err. */
int tok_save(const tok_t *t, const char *path, char *err, size_t errlen);

/* Read a file written by tok_save and check it (each merge may only use ids
 * that exist before it, specials in order right after the merges). Returns a
 * new tokenizer (caller frees with tok_free) or NULL with err. */
tok_t *tok_load(const char *path, char *err, size_t errlen);

void tok_free(tok_t *t);

/* --- use ---------------------------------------------------------------- */

/* All ids: bytes + merges + specials. */
int tok_vocab_size(const tok_t *t);
/* Bytes + merges: the ids below this are ordinary tokens. */
int tok_n_regular(const tok_t *t);
int tok_n_merges(const tok_t *t);
int tok_bos_id(const tok_t *t);
/* The id of a special token (offset from tok_special). */
int tok_special_id(const tok_t *t, tok_special which);
/* The two ids merge number rank joins (0 <= rank < tok_n_merges); new id = 256 + rank. */
void tok_merge(const tok_t *t, int rank, int32_t *a, int32_t *b);

/* The bytes of token id: for ordinary tokens what it decodes to, for a
 * special its name (e.g. "<|bos|>"). Returns a pointer into t (valid while
 * t lives) and sets *len, or NULL for an id out of range. */
const uint8_t *tok_token_bytes(const tok_t *t, int id, size_t *len);
int tok_is_special(const tok_t *t, int id);

/* Append the ids of text[0..len) to out. Any byte string is accepted. Returns
 * 0, or -1 with err on allocation or regex engine failure (out then holds a
 * prefix of the ids; the caller still frees it). */
int tok_encode(tok_t *t, const void *text, size_t len, tok_ids_t *out, char *err, size_t errlen);

/* Decode n ids into a new buffer *out of *outlen bytes (NUL-terminated for
 * convenience; caller frees). Specials decode to their names. Returns 0, or
 * -1 with err for an id out of range or on allocation failure. */
int tok_decode(const tok_t *t, const int32_t *ids, size_t n, char **out, size_t *outlen, char *err,
               size_t errlen);

#endif

/* data.h - prepared datasets: `nightshift prep` writes them, training reads them.
 *
 * A dataset is a directory STATE/datasets/NAME holding
 *     tokenizer.json   the BPE tokenizer (tok.h)
 *     token_bytes.bin  int32 LE per token id: UTF-8 bytes it stands for, 0 for specials
 *     train.bin        uint16 LE token stream; every document is BOS + its tokens
 *     val.bin          the same for the pinned validation documents
 *     test.bin         the same for the sealed test documents (none in datasets
 *                      prepared before test splits, or with --test-fraction 0)
 *     manifest.json    sizes, counts, the splits and the sources with their SHA-256
 * The test split is read once per run, after training, for a figure the
 * daemon keeps apart from val_bpb (train.c, the store's test_results): no
 * ranking, pruning or proposal reads it.
 * A dataset is written under a temporary name and renamed into place, so a
 * reader never sees half of one.
 *
 * Ownership: data_open fills a caller-owned data_set_t whose arrays are
 * mmapped or malloc'd; data_close releases them. The token arrays are
 * read-only (mapped PROT_READ). */
#ifndef NIGHTSHIFT_DATA_H
#define NIGHTSHIFT_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/rng.h"

#define DATA_MAX_TOKENS 65536 /* vocabulary incl. specials: ids must fit uint16 */
/* One input document or dataset file read whole; prep holds its input in memory. */
#define DATA_MAX_FILE_BYTES ((size_t)1 << 34)

typedef struct {
    char dir[4096]; /* the dataset directory */
    char name[256];
    int vocab_size; /* incl. specials */
    int n_special;
    int bos_id;
    const uint16_t *train, *val, *test; /* token streams, n_train / n_val / n_test tokens */
    size_t n_train, n_val, n_test;      /* n_test 0: no test split (test NULL) */
    size_t train_docs, val_docs, test_docs;
    uint64_t train_bytes, val_bytes, test_bytes; /* UTF-8 bytes of non-special tokens */
    int32_t *token_bytes;                        /* vocab_size entries (malloc'd) */
    /* Why there is no test split (n_test 0): "" when there is one. */
    char no_test[512];
    /* mmap bookkeeping */
    void *train_map, *val_map, *test_map;
    size_t train_map_len, val_map_len, test_map_len;
} data_set_t;

/* A dataset name is 1-63 of [A-Za-z0-9_.-], not starting with '.' (as the spec requires). */
bool data_name_ok(const char *name);

/* Open STATE_DIR/datasets/NAME: read manifest.json and token_bytes.bin, map
 * train.bin, val.bin and test.bin (when the manifest has test tokens), and
 * check that sizes match the manifest and that every id is below
 * vocab_size. Returns 0, or a negative code with err naming the file:
 * NS_ERR_NOMEM when a file cannot be mapped for want of address space
 * (RLIMIT_AS), -1 otherwise; ds then holds nothing to release. */
int data_open(const char *state_dir, const char *name, data_set_t *ds, char *err, size_t errlen);
void data_close(data_set_t *ds);

/* Where training rows come from. A row is T+1 consecutive tokens of the
 * training stream (T inputs, their T next-token targets).
 *   random      every row starts at an independent uniform offset in
 *               [0, n - T - 1]: rows come from the whole stream from the
 *               first step on, whatever order the corpus was written in
 *   sequential  rows are consecutive (stride T) from one seeded starting
 *               point, wrapping to 0 at the end (the old behaviour; a short
 *               run then sees one region of an ordered corpus)
 * Both are a pure function of the seed: no clock, no thread count. */
typedef enum { DATA_SAMPLE_RANDOM, DATA_SAMPLE_SEQUENTIAL } data_sample_kind;

typedef struct {
    data_sample_kind kind;
    size_t n;      /* tokens in the stream, at least T + 1 */
    size_t T;      /* row length minus one */
    size_t cursor; /* sequential: the next row's offset */
    rng_t rng;     /* random: the offsets' generator */
} data_sampler_t;

/* Start a sampler over a stream of n tokens (n >= T + 1) for rows of T + 1. */
void data_sampler_init(data_sampler_t *s, data_sample_kind kind, size_t n, size_t T, uint64_t seed);
/* The offset of the next row: it covers tokens [offset, offset + T]. */
size_t data_sampler_next(data_sampler_t *s);
/* What a dataset's manifest says, without opening its token files: for
 * sizing a run before it starts (cost, the daemon's submit check). */
typedef struct {
    int vocab_size; /* incl. specials */
    double train_tokens, val_tokens, test_tokens;
} data_info_t;

/* Read STATE_DIR/datasets/NAME/manifest.json into *info. Returns 0, or -1
 * with err naming the file, or saying "no dataset named 'NAME' (prepare it
 * with nightshift prep)" when there is none, as the daemon's submit does. */
int data_info(const char *state_dir, const char *name, data_info_t *info, char *err, size_t errlen);

#endif

/* fuzz_tok.c - the tokenizer's encode and decode (engine/tok.c) with a
 * tokenizer trained at start-up on the golden text of the tests. Properties:
 * any bytes encode, every id is in range, and decoding gives the bytes back;
 * the input read as int32 ids decodes or is refused, never read out of
 * bounds. */
#include "tests/fuzz/fuzz.h"
#include "engine/tok.h"

static tok_t *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    static const char *const docs[] = {
        "The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary "
        "election produced no evidence that any irregularities took place.",
        "It's 12:30 -- the jury's 'presentments' said; naïve café, 東京, emoji \xf0\x9f\x98\x80 "
        "and "
        "tabs\tand\nnewlines\r\n   spaces   ",
        "def f(x):\n    return x ** 2  # squared\n\n\nprint(f(3))\n",
    };
    size_t lens[3];
    for (int i = 0; i < 3; i++) lens[i] = strlen(docs[i]);
    char err[256];
    tok = tok_train(docs, lens, 3, 300, NULL, err, sizeof err);
    if (!tok) {
        fprintf(stderr, "fuzz_tok: %s\n", err);
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    tok_ids_t ids = {0};
    FUZZ_CHECK(tok_encode(tok, data, size, &ids, err, sizeof err) == 0, "encode failed: %s", err);
    int vocab = tok_vocab_size(tok);
    for (size_t i = 0; i < ids.n; i++)
        FUZZ_CHECK(ids.ids[i] >= 0 && ids.ids[i] < tok_n_regular(tok), "id %d out of range",
                   ids.ids[i]);
    char *text = NULL;
    size_t len = 0;
    FUZZ_CHECK(tok_decode(tok, ids.ids, ids.n, &text, &len, err, sizeof err) == 0,
               "decode failed: %s", err);
    FUZZ_CHECK(len == size && (size == 0 || !memcmp(text, data, size)),
               "decode(encode(x)) != x (%zu bytes in, %zu out)", size, len);
    free(text);
    tok_ids_free(&ids);

    /* The bytes as ids, some of them out of range. */
    size_t n = size / sizeof(int32_t);
    int32_t *raw = malloc(n ? n * sizeof *raw : 1);
    if (!raw) return 0;
    memcpy(raw, data, n * sizeof *raw);
    for (size_t i = 0; i < n; i++)
        if (raw[i] > 0) raw[i] %= vocab + 3;
    if (tok_decode(tok, raw, n, &text, &len, err, sizeof err) == 0) free(text);
    free(raw);
    return 0;
}

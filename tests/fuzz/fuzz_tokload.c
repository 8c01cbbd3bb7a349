/* fuzz_tokload.c - the tokenizer.json loader (engine/tok.c, tok_load). A
 * tokenizer it accepts must also work: a sample encodes and decodes back, and
 * saving it writes a file that loads again. */
#include "tests/fuzz/fuzz.h"
#include "engine/tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[128], saved[128];
    char err[256];
    if (!path[0]) {
        snprintf(path, sizeof path, "%s/tokenizer.json", fuzz_dir());
        snprintf(saved, sizeof saved, "%s/saved.json", fuzz_dir());
    }
    fuzz_write(path, data, size);
    tok_t *t = tok_load(path, err, sizeof err);
    if (!t) return 0;
    static const char sample[] = "The jury's report, 1961: na\xc3\xafve <|bos|> text.\n";
    tok_ids_t ids = {0};
    FUZZ_CHECK(tok_encode(t, sample, sizeof sample - 1, &ids, err, sizeof err) == 0,
               "encode failed: %s", err);
    char *text = NULL;
    size_t len = 0;
    FUZZ_CHECK(tok_decode(t, ids.ids, ids.n, &text, &len, err, sizeof err) == 0,
               "decode failed: %s", err);
    FUZZ_CHECK(len == sizeof sample - 1 && !memcmp(text, sample, len),
               "decode(encode(x)) != x with a loaded tokenizer");
    free(text);
    tok_ids_free(&ids);
    FUZZ_CHECK(tok_save(t, saved, err, sizeof err) == 0, "save failed: %s", err);
    tok_t *again = tok_load(saved, err, sizeof err);
    FUZZ_CHECK(again, "a saved tokenizer does not load: %s", err);
    FUZZ_CHECK(tok_vocab_size(again) == tok_vocab_size(t), "vocab size changed on save/load");
    tok_free(again);
    tok_free(t);
    return 0;
}

/* fuzz_manifest.c - the dataset loader (engine/data.c, data_open): the
 * input is manifest.json, then a NUL byte, then train.bin (uint16 tokens);
 * the tokenizer byte counts, val.bin and test.bin are fixed (vocabulary 260,
 * BOS 256, val.bin one document "HI", test.bin one document "YO"; a manifest
 * without test counts has no test split). Whatever it accepts must hold:
 * every token is below vocab_size and each stream starts with BOS. */
#include "engine/data.h"
#include "tests/fuzz/fuzz.h"
#include "engine/util.h"

#define VOCAB 260
#define BOS   256

static char state[128];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char dir[256], path[300], err[256];
    snprintf(state, sizeof state, "%s", fuzz_dir());
    snprintf(dir, sizeof dir, "%s/datasets/fz", state);
    if (util_mkdirs(dir, err, sizeof err) < 0) {
        fprintf(stderr, "fuzz_manifest: %s\n", err);
        abort();
    }
    int32_t bytes[VOCAB];
    for (int i = 0; i < VOCAB; i++) bytes[i] = i < 256 ? 1 : 0;
    snprintf(path, sizeof path, "%s/token_bytes.bin", dir);
    fuzz_write(path, bytes, sizeof bytes);
    const uint16_t val[] = {BOS, 'H', 'I'}, test[] = {BOS, 'Y', 'O'};
    snprintf(path, sizeof path, "%s/val.bin", dir);
    fuzz_write(path, val, sizeof val);
    snprintf(path, sizeof path, "%s/test.bin", dir);
    fuzz_write(path, test, sizeof test);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[300], err[512];
    const uint8_t *nul = memchr(data, 0, size);
    size_t mlen = nul ? (size_t)(nul - data) : size;
    snprintf(path, sizeof path, "%s/datasets/fz/manifest.json", state);
    fuzz_write(path, data, mlen);
    snprintf(path, sizeof path, "%s/datasets/fz/train.bin", state);
    fuzz_write(path, nul ? nul + 1 : data, nul ? size - mlen - 1 : 0);
    data_set_t ds;
    if (data_open(state, "fz", &ds, err, sizeof err) < 0) return 0;
    FUZZ_CHECK(ds.n_train > 0 && ds.train[0] == ds.bos_id, "train.bin does not start with BOS");
    FUZZ_CHECK(ds.n_val > 0 && ds.val[0] == ds.bos_id, "val.bin does not start with BOS");
    FUZZ_CHECK(!ds.n_test || ds.test[0] == ds.bos_id, "test.bin does not start with BOS");
    FUZZ_CHECK(ds.n_test || ds.no_test[0], "no test split, and no reason");
    for (size_t i = 0; i < ds.n_train; i++)
        FUZZ_CHECK(ds.train[i] < ds.vocab_size, "token %zu out of range", i);
    data_close(&ds);
    return 0;
}

/* data.c - data_open, which maps a dataset that `nightshift prep` (prep.c)
 * wrote, for training; the dataset's metadata; the training-row samplers. */
#include "engine/data.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/tok.h"
#include "engine/util.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the dataset files are little-endian and are mapped as they are"
#endif

bool data_name_ok(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > 63 || name[0] == '.') return false; /* spec.h: dataset[64] */
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

/* ---- data_open ---------------------------------------------------------------------- */

static int map_tokens(const char *dir, const char *file, size_t n_expect, void **map, size_t *len,
                      char *err, size_t errlen) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int rc = -1, fd = util_open_regular(path, err, errlen); /* never a FIFO that blocks */
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st)) {
        util_errorf(err, errlen, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if ((uint64_t)st.st_size != (uint64_t)n_expect * 2 || n_expect == 0) {
        util_errorf(err, errlen, "%s: %lld bytes, the manifest says %zu uint16 tokens", path,
                    (long long)st.st_size, n_expect);
        goto fail;
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
        /* ENOMEM: no address space left for it (RLIMIT_AS, a slot's memory
         * limit), which is the caller's out-of-memory, not a bad dataset */
        rc = errno == ENOMEM ? NS_ERR_NOMEM : NS_ERR_IO;
        util_errorf(err, errlen, "%s: mmap of %lld bytes: %s", path, (long long)st.st_size,
                    strerror(errno));
        goto fail;
    }
    close(fd);
    *map = m;
    *len = (size_t)st.st_size;
    return 0;
fail:
    close(fd);
    return rc;
}

/* Every id below vocab, the stream starts with BOS and holds one BOS per document. */
static int check_tokens(const uint16_t *t, size_t n, size_t docs, const data_set_t *ds,
                        const char *file, char *err, size_t errlen) {
    size_t bos = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] >= ds->vocab_size) {
            util_errorf(err, errlen, "%s/%s: token %zu is %u, not below vocab_size %d", ds->dir,
                        file, i, t[i], ds->vocab_size);
            return -1;
        }
        bos += t[i] == ds->bos_id;
    }
    if (t[0] != ds->bos_id || bos != docs) {
        util_errorf(err, errlen,
                    "%s/%s: %zu BOS tokens (first token %u), the manifest says %zu documents",
                    ds->dir, file, bos, t[0], docs);
        return -1;
    }
    return 0;
}

static bool manifest_count(const cJSON *m, const char *key, double max, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > max ||
        v->valuedouble != floor(v->valuedouble))
        return false;
    *out = v->valuedouble;
    return true;
}

/* The test split's counts from manifest m (at path), or the reason there is
 * none: a manifest without "test_tokens" was written before test splits. */
static int test_split(const cJSON *m, data_set_t *ds, const char *path, char *err, size_t errlen) {
    static const char *const keys[3] = {"test_tokens", "test_docs", "test_bytes"};
    double v[3];
    if (!cJSON_GetObjectItemCaseSensitive(m, keys[0])) {
        snprintf(ds->no_test, sizeof ds->no_test,
                 "dataset %s was prepared without a test split (prepare it again to get one)",
                 ds->name);
        return 0;
    }
    for (int k = 0; k < 3; k++)
        if (!manifest_count(m, keys[k], 9007199254740992.0, &v[k])) {
            util_errorf(err, errlen, "%s: \"%s\" missing or not a count", path, keys[k]);
            return -1;
        }
    ds->n_test = (size_t)v[0];
    ds->test_docs = (size_t)v[1];
    ds->test_bytes = (uint64_t)v[2];
    if (!ds->n_test) {
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(m, "test_split");
        const char *why = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ts, "reason"));
        snprintf(ds->no_test, sizeof ds->no_test, "dataset %s has no test split (%.200s)", ds->name,
                 why ? why : "none was prepared");
    }
    return 0;
}

/* ds's counts from its manifest.json. */
static int read_manifest(data_set_t *ds, char *err, size_t errlen) {
    static const char *const keys[9] = {"vocab_size",   "n_special",   "bos_id",
                                        "train_tokens", "val_tokens",  "train_docs",
                                        "val_docs",     "train_bytes", "val_bytes"};
    char path[4400];
    size_t len;
    double v[9];
    int rc = -1;
    snprintf(path, sizeof path, "%s/manifest.json", ds->dir);
    char *text = util_read_file(path, DATA_MAX_FILE_BYTES, &len, err, errlen);
    if (!text) return -1;
    cJSON *m = cJSON_ParseWithLength(text, len);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(m, "dtype");
    if (!cJSON_IsObject(m)) {
        util_errorf(err, errlen, "%s: not a JSON object", path);
        goto done;
    }
    if (!cJSON_IsString(dtype) || strcmp(dtype->valuestring, "uint16")) {
        util_errorf(err, errlen, "%s: \"dtype\" must be \"uint16\"", path);
        goto done;
    }
    for (int k = 0; k < 9; k++)
        if (!manifest_count(m, keys[k], k < 3 ? DATA_MAX_TOKENS : 9007199254740992.0, &v[k])) {
            util_errorf(err, errlen, "%s: \"%s\" missing or not a count", path, keys[k]);
            goto done;
        }
    ds->vocab_size = (int)v[0];
    ds->n_special = (int)v[1];
    ds->bos_id = (int)v[2];
    ds->n_train = (size_t)v[3];
    ds->n_val = (size_t)v[4];
    ds->train_docs = (size_t)v[5];
    ds->val_docs = (size_t)v[6];
    ds->train_bytes = (uint64_t)v[7];
    ds->val_bytes = (uint64_t)v[8];
    if (ds->vocab_size < TOK_N_BYTES || ds->bos_id >= ds->vocab_size ||
        ds->n_special > ds->vocab_size) {
        util_errorf(err, errlen,
                    "%s: vocab_size %d, bos_id %d and n_special %d do not fit together", path,
                    ds->vocab_size, ds->bos_id, ds->n_special);
        goto done;
    }
    if (test_split(m, ds, path, err, errlen)) goto done;
    rc = 0;
done:
    cJSON_Delete(m);
    free(text);
    return rc;
}

/* ds->token_bytes from token_bytes.bin: one non-negative int32 a token. */
static int read_token_bytes(data_set_t *ds, char *err, size_t errlen) {
    char path[4400];
    size_t tl;
    snprintf(path, sizeof path, "%s/token_bytes.bin", ds->dir);
    if (!(ds->token_bytes = (int32_t *)util_read_file(path, DATA_MAX_FILE_BYTES, &tl, err, errlen)))
        return -1;
    if (tl != (size_t)ds->vocab_size * sizeof(int32_t))
        return util_errorf(err, errlen, "%s: %zu bytes, expected %d int32 values", path, tl,
                           ds->vocab_size);
    for (int i = 0; i < ds->vocab_size; i++)
        if (ds->token_bytes[i] < 0)
            return util_errorf(err, errlen, "%s: entry %d is negative", path, i);
    return 0;
}

int data_open(const char *state_dir, const char *name, data_set_t *ds, char *err, size_t errlen) {
    memset(ds, 0, sizeof *ds);
    if (!data_name_ok(name))
        return util_errorf(err, errlen, "dataset name '%s' is not a valid name", name);
    if (snprintf(ds->dir, sizeof ds->dir, "%s/datasets/%s", state_dir, name) >= (int)sizeof ds->dir)
        return util_errorf(err, errlen, "dataset path too long");
    snprintf(ds->name, sizeof ds->name, "%s", name);
    int rc = -1;
    if (read_manifest(ds, err, errlen) || read_token_bytes(ds, err, errlen)) goto fail;
    if ((rc = map_tokens(ds->dir, "train.bin", ds->n_train, &ds->train_map, &ds->train_map_len, err,
                         errlen)) < 0 ||
        (rc = map_tokens(ds->dir, "val.bin", ds->n_val, &ds->val_map, &ds->val_map_len, err,
                         errlen)) < 0 ||
        (ds->n_test && (rc = map_tokens(ds->dir, "test.bin", ds->n_test, &ds->test_map,
                                        &ds->test_map_len, err, errlen)) < 0))
        goto fail;
    rc = -1;
    ds->train = ds->train_map;
    ds->val = ds->val_map;
    ds->test = ds->test_map;
    if (check_tokens(ds->train, ds->n_train, ds->train_docs, ds, "train.bin", err, errlen) ||
        check_tokens(ds->val, ds->n_val, ds->val_docs, ds, "val.bin", err, errlen) ||
        (ds->n_test &&
         check_tokens(ds->test, ds->n_test, ds->test_docs, ds, "test.bin", err, errlen)))
        goto fail;
    return 0;
fail:
    data_close(ds);
    return rc;
}

int data_info(const char *state_dir, const char *name, data_info_t *info, char *err,
              size_t errlen) {
    char path[4400];
    size_t len;
    int rc = -1;
    memset(info, 0, sizeof *info);
    if (!data_name_ok(name)) {
        util_errorf(err, errlen, "dataset name '%s' is not a valid name", name);
        return -1;
    }
    snprintf(path, sizeof path, "%s/datasets/%s/manifest.json", state_dir, name);
    if (access(path, F_OK) != 0 && errno == ENOENT) { /* in the daemon's words at submission */
        util_errorf(err, errlen, "no dataset named '%s' (prepare it with nightshift prep)", name);
        return -1;
    }
    char *text = util_read_file(path, DATA_MAX_FILE_BYTES, &len, err, errlen);
    if (!text) return -1;
    cJSON *m = cJSON_ParseWithLength(text, len);
    double v[4] = {0};
    static const char *const keys[4] = {"vocab_size", "train_tokens", "val_tokens", "test_tokens"};
    for (int k = 0; k < 4; k++)
        if (!manifest_count(m, keys[k], k == 0 ? DATA_MAX_TOKENS : 9007199254740992.0, &v[k]) &&
            !(k == 3 && !cJSON_GetObjectItemCaseSensitive(m, keys[k]))) { /* test: optional */
            util_errorf(err, errlen, "%s: \"%s\" missing or not a count", path, keys[k]);
            goto done;
        }
    info->vocab_size = (int)v[0];
    info->train_tokens = v[1];
    info->val_tokens = v[2];
    info->test_tokens = v[3];
    rc = 0;
done:
    cJSON_Delete(m);
    free(text);
    return rc;
}

void data_close(data_set_t *ds) {
    if (ds->train_map) munmap(ds->train_map, ds->train_map_len);
    if (ds->val_map) munmap(ds->val_map, ds->val_map_len);
    if (ds->test_map) munmap(ds->test_map, ds->test_map_len);
    free(ds->token_bytes);
    memset(ds, 0, sizeof *ds);
}

/* ---------------------------------------------------------------- sampling */

/* Uniform window offsets rather than autoresearch's per-epoch document
 * shuffle packed from BOS boundaries: they need no document index, work the
 * same on a stream of one huge document as on many small ones, make every
 * row an independent draw (so a run's rows do not depend on how long it ran
 * or where an epoch boundary fell), and are what the measured fix used.
 * Windows may span a document boundary, as the sequential walk's always did:
 * the BOS token between them marks it. The cost is sampling with replacement:
 * within one epoch's worth of rows some windows repeat and some tokens are
 * missed (about 1/e of them per epoch of draws). */
void data_sampler_init(data_sampler_t *s, data_sample_kind kind, size_t n, size_t T,
                       uint64_t seed) {
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->n = n;
    s->T = T;
    /* The sequential start is the one training has always used for a seed. */
    rng_seed(&s->rng, seed ^ 0x9e3779b97f4a7c15ULL);
    if (kind == DATA_SAMPLE_SEQUENTIAL) s->cursor = rng_below(&s->rng, n - T);
}

size_t data_sampler_next(data_sampler_t *s) {
    if (s->kind == DATA_SAMPLE_RANDOM) return rng_below(&s->rng, s->n - s->T);
    if (s->cursor + s->T + 1 > s->n) s->cursor = 0;
    size_t off = s->cursor;
    s->cursor += s->T;
    return off;
}

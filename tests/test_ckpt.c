/* test_ckpt.c - safetensors checkpoints: round trips, metadata, atomic writes,
 * and a reader that rejects every malformed file with a message naming what
 * is wrong. Most tests use a small hand-built tensor table so they do not
 * depend on the model; one round trip goes through gpt_new. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/ckpt.h"
#include "engine/gpt.h"
#include "engine/rng.h"
#include "engine/spec.h"
#include "tests/testutil.h"

/* Every test works in its own directory, tu_dir(). */
TestSuite(ckpt, .init = tu_dir_init, .fini = tu_dir_fini);

/* ---------------------------------------------------------- a toy model */

typedef struct {
    const char *name;
    int rows, cols; /* cols = 0: a 1-D tensor */
} toy_spec_t;

static const toy_spec_t TOY[] = {
    {"transformer.wte.weight", 16, 8},
    {"transformer.h.0.attn.c_q.weight", 8, 8},
    {"resid_lambdas", 2, 0},
    {"lm_head.weight", 16, 8},
};
#define N_TOY ((int)(sizeof TOY / sizeof TOY[0]))

/* A gpt_t with only a tensor table, params and grads, filled with random
 * float bit patterns from seed. Free with toy_free. */
static gpt_t *toy_new(const toy_spec_t *spec, int n, uint64_t seed) {
    gpt_t *m = calloc(1, sizeof *m);
    cr_assert_not_null(m);
    m->tensors = calloc((size_t)n, sizeof *m->tensors);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        gpt_tensor_t *t = &m->tensors[i];
        snprintf(t->name, sizeof t->name, "%s", spec[i].name);
        t->ndim = spec[i].cols ? 2 : 1;
        t->rows = spec[i].rows;
        t->cols = spec[i].cols ? spec[i].cols : 1;
        t->layer = -1;
        t->offset = off;
        t->numel = (size_t)t->rows * t->cols;
        off += t->numel;
    }
    m->n_tensors = n;
    m->n_params = off;
    m->params = malloc(off * sizeof(float));
    m->grads = malloc(off * sizeof(float));
    rng_t r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < off; i++) {
        uint32_t bits = (uint32_t)rng_next(&r);
        memcpy(&m->params[i], &bits, 4);
        m->grads[i] = (float)i;
    }
    /* Awkward values must survive too. */
    uint32_t special[] = {0x80000000u, 0x00000001u, 0x7fc00001u, 0xff800000u};
    for (size_t i = 0; i < 4 && i < off; i++) memcpy(&m->params[i], &special[i], 4);
    return m;
}

static void toy_free(gpt_t *m) {
    free(m->tensors);
    free(m->params);
    free(m->grads);
    free(m);
}

/* ---------------------------------------------------------- raw files */

/* Writes a file with the given header length field, header text and data. */
static void write_raw(const char *path, uint64_t hlen, const char *header, const void *data,
                      size_t dlen) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(hlen >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    if (dlen) fwrite(data, 1, dlen, f);
    cr_assert_eq(fclose(f), 0);
}

/* A valid header + data with the header text given. */
static void write_file(const char *path, const char *header, size_t dlen) {
    static const float zeros[64];
    cr_assert(dlen <= sizeof zeros);
    write_raw(path, strlen(header), header, zeros, dlen);
}

static void expect_read_error(const char *path, const char *needle) {
    ckpt_file_t f;
    char err[512] = "";
    cr_assert_eq(ckpt_read(path, &f, err, sizeof err), -1, "expected an error containing '%s'",
                 needle);
    cr_assert_not_null(strstr(err, needle), "error '%s' lacks '%s'", err, needle);
    cr_assert_eq(f.n, 0);
    cr_assert_null(f.buf);
}

/* write_file, then expect_read_error. */
static void expect_header_error(const char *path, const char *header, size_t dlen,
                                const char *needle) {
    write_file(path, header, dlen);
    expect_read_error(path, needle);
}

/* A file with one F32 tensor "a" of the given shape and data_offsets (JSON
 * text; NULL leaves the field out) over dlen bytes of data: reading it must
 * fail with needle. */
static void expect_tensor_error(const char *path, const char *shape, const char *offsets,
                                size_t dlen, const char *needle) {
    char header[256];
    if (offsets)
        snprintf(header, sizeof header,
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":%s}}", shape, offsets);
    else
        snprintf(header, sizeof header, "{\"a\":{\"dtype\":\"F32\",\"shape\":%s}}", shape);
    expect_header_error(path, header, dlen, needle);
}

static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

/* Count of entries in tu_dir() whose name contains s. */
static int count_files(const char *s) {
    DIR *d = opendir(tu_dir());
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && strstr(e->d_name, s)) n++;
    closedir(d);
    return n;
}

/* Load path into m: its params must then equal want's, bit for bit. */
static void expect_loads(gpt_t *m, const char *path, const gpt_t *want) {
    char err[512] = "";
    cr_assert_eq(ckpt_load(m, path, err, sizeof err), 0, "%s", err);
    cr_assert_eq(m->n_params, want->n_params);
    cr_assert_eq(memcmp(m->params, want->params, want->n_params * 4), 0, "%s: params differ", path);
}

/* ---------------------------------------------------------- round trips */

Test(ckpt, round_trip_bit_exact) {
    gpt_t *a = toy_new(TOY, N_TOY, 1), *b = toy_new(TOY, N_TOY, 2);
    char err[512] = "";
    const char *p = tu_dir_path("w.safetensors");
    cr_assert_eq(ckpt_write(a, a->params, NULL, p, err, sizeof err), 0, "%s", err);
    cr_assert_neq(memcmp(a->params, b->params, a->n_params * 4), 0);
    expect_loads(b, p, a);
    /* The data section starts 8-byte aligned and holds exactly the floats. */
    FILE *f = fopen(p, "rb");
    uint64_t hlen = 0;
    cr_assert_eq(fread(&hlen, 8, 1, f), 1);
    fclose(f);
    cr_assert_eq((8 + hlen) % 8, 0);
    cr_assert_eq((uint64_t)file_size(p), 8 + hlen + a->n_params * 4);
    toy_free(a);
    toy_free(b);
}

Test(ckpt, read_reports_names_shapes_and_data) {
    gpt_t *a = toy_new(TOY, N_TOY, 3);
    char err[512] = "";
    const char *p = tu_dir_path("g.safetensors");
    cr_assert_eq(ckpt_write(a, a->grads, NULL, p, err, sizeof err), 0, "%s", err);
    ckpt_file_t f;
    cr_assert_eq(ckpt_read(p, &f, err, sizeof err), 0, "%s", err);
    cr_assert_eq(f.n, N_TOY);
    cr_assert_null(f.metadata);
    for (int i = 0; i < N_TOY; i++) {
        const gpt_tensor_t *t = &a->tensors[i];
        const ckpt_tensor_t *c = ckpt_file_find(&f, t->name);
        cr_assert_not_null(c, "%s", t->name);
        cr_assert_eq(c->ndim, t->ndim);
        cr_assert_eq(c->shape[0], t->rows);
        if (t->ndim == 2) cr_assert_eq(c->shape[1], t->cols);
        cr_assert_eq(c->numel, t->numel);
        cr_assert_eq(memcmp(c->data, a->grads + t->offset, t->numel * 4), 0, "%s", t->name);
    }
    cr_assert_null(ckpt_file_find(&f, "nope"));
    ckpt_file_close(&f);
    toy_free(a);
}

Test(ckpt, metadata_round_trip) {
    gpt_t *a = toy_new(TOY, N_TOY, 4);
    char err[512] = "";
    const char *p = tu_dir_path("m.safetensors");
    const char *meta = "{\"step\":\"120\",\"spec\":\"{\\\"depth\\\":2}\",\"note\":\"a b\"}";
    cr_assert_eq(ckpt_write(a, a->params, meta, p, err, sizeof err), 0, "%s", err);
    ckpt_file_t f;
    cr_assert_eq(ckpt_read(p, &f, err, sizeof err), 0, "%s", err);
    cr_assert_eq(f.n, N_TOY);
    cr_assert_not_null(f.metadata);
    cJSON *j = cJSON_Parse(f.metadata);
    cr_assert_not_null(j);
    cr_assert_eq(cJSON_GetArraySize(j), 3);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "step")->valuestring, "120");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "spec")->valuestring, "{\"depth\":2}");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "note")->valuestring, "a b");
    cJSON_Delete(j);
    ckpt_file_close(&f);
    /* Loading ignores metadata. */
    gpt_t *b = toy_new(TOY, N_TOY, 5);
    expect_loads(b, p, a);
    toy_free(a);
    toy_free(b);
}

Test(ckpt, write_rejects_bad_metadata) {
    gpt_t *a = toy_new(TOY, N_TOY, 6);
    char err[512] = "";
    const char *p = tu_dir_path("bad.safetensors");
    cr_assert_eq(ckpt_write(a, a->params, "{\"step\":12}", p, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "step"), "%s", err);
    cr_assert_eq(ckpt_write(a, a->params, "[1,2]", p, err, sizeof err), -1);
    cr_assert_eq(ckpt_write(a, a->params, "{oops", p, err, sizeof err), -1);
    cr_assert_eq(access(p, F_OK), -1);
    cr_assert_eq(count_files(".tmp."), 0);
    toy_free(a);
}

/* ---------------------------------------------------------- atomic writes */

Test(ckpt, atomic_write_leaves_no_temp_file) {
    gpt_t *a = toy_new(TOY, N_TOY, 7), *b = toy_new(TOY, N_TOY, 8);
    char err[512] = "";
    const char *p = tu_dir_path("w.safetensors");
    cr_assert_eq(ckpt_write(a, a->params, NULL, p, err, sizeof err), 0, "%s", err);
    /* Overwriting replaces the file whole. */
    cr_assert_eq(ckpt_write(b, b->params, NULL, p, err, sizeof err), 0, "%s", err);
    cr_assert_eq(count_files("w.safetensors"), 1);
    cr_assert_eq(count_files(".tmp."), 0);
    expect_loads(a, p, b);
    toy_free(a);
    toy_free(b);
}

Test(ckpt, failed_write_removes_temp_file) {
    gpt_t *a = toy_new(TOY, N_TOY, 9);
    char err[512] = "";
    /* The target is a directory: the rename fails after the temp file is written. */
    const char *p = tu_dir_path("adir");
    cr_assert_eq(mkdir(p, 0755), 0);
    cr_assert_eq(ckpt_write(a, a->params, NULL, p, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "rename"), "%s", err);
    cr_assert_eq(count_files(".tmp."), 0);
    rmdir(p);
    /* A directory that does not exist: nothing is created. */
    cr_assert_eq(
        ckpt_write(a, a->params, NULL, tu_dir_path("no/such/dir/w.safetensors"), err, sizeof err),
        -1);
    cr_assert_not_null(strstr(err, "cannot create"), "%s", err);
    toy_free(a);
}

/* ---------------------------------------------------------- load mismatches */

/* Writes a toy model with the given table; returns its path (a tu_dir_path buffer). */
static const char *write_toy(const toy_spec_t *spec, int n, const char *name) {
    gpt_t *a = toy_new(spec, n, 10);
    char err[512] = "";
    const char *p = tu_dir_path(name);
    cr_assert_eq(ckpt_write(a, a->params, NULL, p, err, sizeof err), 0, "%s", err);
    toy_free(a);
    return p;
}

/* Loads path into the TOY model and expects err to contain needle; the
 * model's params must be untouched. */
static void expect_load_error(const char *path, const char *needle) {
    gpt_t *m = toy_new(TOY, N_TOY, 11);
    float *before = malloc(m->n_params * 4);
    memcpy(before, m->params, m->n_params * 4);
    char err[512] = "";
    cr_assert_eq(ckpt_load(m, path, err, sizeof err), -1, "expected '%s'", needle);
    cr_assert_not_null(strstr(err, needle), "error '%s' lacks '%s'", err, needle);
    cr_assert_eq(memcmp(before, m->params, m->n_params * 4), 0, "params changed on failure");
    free(before);
    toy_free(m);
}

Test(ckpt, load_rejects_wrong_shape) {
    toy_spec_t s[N_TOY];
    memcpy(s, TOY, sizeof s);
    s[1].rows = 4; /* c_q is (4, 8) in the file, (8, 8) in the model */
    expect_load_error(write_toy(s, N_TOY, "shape.safetensors"),
                      "ckpt: tensor transformer.h.0.attn.c_q.weight has shape [4,8], model "
                      "expects [8,8]");
    memcpy(s, TOY, sizeof s);
    s[2].cols = 1; /* resid_lambdas 2-D in the file */
    expect_load_error(write_toy(s, N_TOY, "ndim.safetensors"),
                      "ckpt: tensor resid_lambdas has shape [2,1], model expects [2]");
}

Test(ckpt, load_rejects_missing_tensor) {
    /* lm_head is last in TOY: leave it out. */
    expect_load_error(write_toy(TOY, N_TOY - 1, "missing.safetensors"),
                      "ckpt: missing tensor lm_head.weight");
}

Test(ckpt, load_rejects_extra_tensor) {
    toy_spec_t s[N_TOY + 1];
    memcpy(s, TOY, sizeof TOY);
    s[N_TOY] = (toy_spec_t){"transformer.wpe.weight", 4, 8};
    expect_load_error(write_toy(s, N_TOY + 1, "extra.safetensors"),
                      "ckpt: unexpected tensor transformer.wpe.weight");
}

Test(ckpt, failed_load_leaves_params_unchanged) {
    /* Every tensor but the last matches, so a loader that copied as it went
     * would have overwritten them before noticing. */
    toy_spec_t s[N_TOY];
    memcpy(s, TOY, sizeof s);
    s[N_TOY - 1].rows = 15;
    expect_load_error(write_toy(s, N_TOY, "late.safetensors"), "lm_head.weight has shape [15,8]");
    /* A file that fails to parse at all. */
    const char *p = tu_dir_path("junk.safetensors");
    write_raw(p, 3, "{{{", NULL, 0);
    expect_load_error(p, "not a valid JSON object");
}

/* ---------------------------------------------------------- malformed files */

Test(ckpt, rejects_f16_dtype) {
    const char *p = tu_dir_path("f16.safetensors");
    expect_header_error(p,
                        "{\"x.weight\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}",
                        4, "tensor x.weight has dtype F16, only F32 is supported");
    expect_load_error(p, "dtype F16");
}

Test(ckpt, rejects_truncated_file) {
    const char *p = write_toy(TOY, N_TOY, "t.safetensors");
    long n = file_size(p);
    cr_assert_eq(truncate(p, n - 4), 0);
    expect_read_error(p, "past the data section");
    expect_load_error(p, "past the data section");
    cr_assert_eq(truncate(p, 20), 0);
    expect_read_error(p, "header length");
    cr_assert_eq(truncate(p, 5), 0);
    expect_read_error(p, "file too short");
    cr_assert_eq(truncate(p, 0), 0);
    expect_read_error(p, "file too short");
}

Test(ckpt, rejects_header_length_past_file) {
    const char *p = tu_dir_path("hlen.safetensors");
    const char *h = "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    float one = 1;
    write_raw(p, strlen(h) + 5, h, &one, 4); /* claims 5 bytes more than there are */
    expect_read_error(p, "header length");
    write_raw(p, (uint64_t)1 << 62, h, &one, 4);
    expect_read_error(p, "header length");
    write_raw(p, 0, h, &one, 4);
    expect_read_error(p, "header length 0");
}

Test(ckpt, rejects_bad_offsets) {
    const char *p = tu_dir_path("off.safetensors");
    /* Out of bounds: the data section has 8 bytes. */
    expect_header_error(p,
                        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                        8, "tensor b: data_offsets end 12 is past the data section (8 bytes)");
    /* Overlapping. */
    expect_header_error(p,
                        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                        12, "overlaps a");
    /* Two tensors on the same bytes. */
    expect_header_error(p,
                        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                        8, "overlaps");
    /* A gap. */
    expect_tensor_error(p, "[1]", "[4,8]", 8, "unused bytes [0,4)");
    /* Trailing bytes. */
    expect_tensor_error(p, "[1]", "[0,4]", 12, "8 trailing bytes");
    /* Size disagreeing with the shape. */
    expect_tensor_error(p, "[3]", "[0,8]", 8, "do not hold [3] F32 (12 bytes)");
    /* end < begin */
    expect_tensor_error(p, "[0]", "[8,0]", 8, "tensor a: data_offsets");
    /* Not numbers / wrong arity. */
    expect_tensor_error(p, "[1]", "[0]", 4, "two non-negative integers");
    expect_tensor_error(p, "[1]", "[-4,0]", 4, "two non-negative integers");
    expect_tensor_error(p, "[1]", NULL, 4, "two non-negative integers");
}

Test(ckpt, rejects_bad_shapes) {
    const char *p = tu_dir_path("shape.safetensors");
    expect_tensor_error(p, "[-1]", "[0,4]", 4, "shape entries must be non-negative integers");
    expect_tensor_error(p, "[1.5]", "[0,4]", 4, "shape entries must be non-negative integers");
    expect_tensor_error(p, "[1,1,1,1,1]", "[0,4]", 4, "at most 4 dims");
    expect_tensor_error(p, "\"1\"", "[0,4]", 4, "shape must be an array");
    /* 0-4 dims are fine, including scalars and empty tensors. */
    write_file(p,
               "{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
               "\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[4,4]},"
               "\"q\":{\"dtype\":\"F32\",\"shape\":[1,2,1,1],\"data_offsets\":[4,12]}}",
               12);
    ckpt_file_t f;
    char err[512] = "";
    cr_assert_eq(ckpt_read(p, &f, err, sizeof err), 0, "%s", err);
    cr_assert_eq(f.n, 3);
    cr_assert_eq(ckpt_file_find(&f, "s")->ndim, 0);
    cr_assert_eq(ckpt_file_find(&f, "s")->numel, 1);
    cr_assert_eq(ckpt_file_find(&f, "e")->numel, 0);
    cr_assert_eq(ckpt_file_find(&f, "q")->numel, 2);
    cr_assert_eq(ckpt_file_find(&f, "q")->shape[1], 2);
    ckpt_file_close(&f);
}

Test(ckpt, rejects_garbage_json) {
    const char *p = tu_dir_path("json.safetensors");
    expect_header_error(p, "this is not json at all", 0, "header is not a valid JSON object");
    expect_header_error(p, "[1,2,3]", 0, "header is not a valid JSON object");
    expect_header_error(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4,
                        "header is not a valid JSON object");
    /* Trailing garbage after the object (padding spaces are fine). */
    expect_header_error(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}xx", 4,
                        "header is not a valid JSON object");
    write_file(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}     ", 4);
    ckpt_file_t f;
    char err[512] = "";
    cr_assert_eq(ckpt_read(p, &f, err, sizeof err), 0, "%s", err);
    ckpt_file_close(&f);
    /* Entries of the wrong kind. */
    expect_header_error(p, "{\"a\":7}", 0, "entry a is not an object");
    expect_header_error(p,
                        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}",
                        4, "unknown field \"x\"");
    expect_header_error(p, "{\"__metadata__\":{\"k\":1}}", 0,
                        "__metadata__ value \"k\" is not a string");
    expect_header_error(p,
                        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                        8, "duplicate tensor a");
    expect_read_error(tu_dir_path("does-not-exist"), "cannot open");
}

/* ---------------------------------------------------------- the real model */

Test(ckpt, gpt_round_trip) {
    spec_t s;
    char err[512] = "";
    const char *json = "{\"model\":{\"vocab_size\":64,\"depth\":2,\"n_embd\":32,\"n_head\":2,"
                       "\"n_kv_head\":1,\"seq_len\":16,\"pos\":\"learned\"}}";
    cr_assert_eq(spec_parse(json, strlen(json), &s, err, sizeof err), 0, "%s", err);
    gpt_t *a = gpt_new(&s.model, err, sizeof err);
    gpt_t *b = gpt_new(&s.model, err, sizeof err);
    cr_assert(a && b, "%s", err);
    gpt_init_weights(a, 42);
    const char *p = tu_dir_path("gpt.safetensors");
    cr_assert_eq(ckpt_write(a, a->params, NULL, p, err, sizeof err), 0, "%s", err);
    ckpt_file_t f;
    cr_assert_eq(ckpt_read(p, &f, err, sizeof err), 0, "%s", err);
    cr_assert_eq(f.n, a->n_tensors);
    for (int i = 0; i < a->n_tensors; i++) {
        const ckpt_tensor_t *c = ckpt_file_find(&f, a->tensors[i].name);
        cr_assert_not_null(c, "%s", a->tensors[i].name);
        cr_assert_eq(c->ndim, a->tensors[i].ndim);
        cr_assert_eq(c->shape[0], a->tensors[i].rows);
    }
    cr_assert_not_null(ckpt_file_find(&f, "transformer.wpe.weight"));
    ckpt_file_close(&f);
    expect_loads(b, p, a);
    gpt_free(a);
    gpt_free(b);
    spec_free(&s);
}

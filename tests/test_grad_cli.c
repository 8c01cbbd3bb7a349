/* test_grad_cli.c - `nightshift grad`, run as a separate process: loss and
 * gradient file for a tiny model, agreement with the in-process engine, and
 * the error paths (bad token file, ids out of range, missing checkpoint). */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/ckpt.h"
#include "engine/gpt.h"
#include "engine/spec.h"
#include "tests/testutil.h"

#define V 32
#define T 8

/* Tiny: GQA, value embeddings on layer 1, sliding window on layer 0. The
 * dropout only shows if grad wrongly runs the training-mode forward. */
static const char SPEC_JSON[] =
    "{\"model\":{\"vocab_size\":32,\"depth\":2,\"n_embd\":16,\"n_head\":2,\"n_kv_head\":1,"
    "\"seq_len\":8,\"window_pattern\":\"SL\",\"ve_gate_channels\":8,\"embed_dropout\":0.5},"
    "\"train\":{\"batch_size\":1,\"total_batch_tokens\":8}}";

/* Four files in the test's directory, tu_dir(). */
static char *spec_path, *ckpt_path, *tok_path, *out_path;

static void teardown(void) {
    free(spec_path);
    free(ckpt_path);
    free(tok_path);
    free(out_path);
    tu_dir_fini();
}

/* Two rows of T+1 ids; the second row's last target is ignored. */
static int32_t TOKENS[2][T + 1] = {
    {1, 5, 9, 2, 31, 0, 7, 7, 3},
    {4, 4, 30, 12, 6, 18, 25, 11, -1},
};

/* Builds a model from SPEC_JSON with autoresearch init. Free with gpt_free;
 * *s is filled and must be released with spec_free. */
static gpt_t *make_model(spec_t *s, uint64_t seed) {
    char err[256] = "";
    cr_assert_eq(spec_parse(SPEC_JSON, strlen(SPEC_JSON), s, err, sizeof err), 0, "%s", err);
    gpt_t *m = gpt_new(&s->model, err, sizeof err);
    cr_assert_not_null(m, "%s", err);
    gpt_init_weights(m, seed);
    /* Zero-initialised projections and gates make many gradients vanish;
     * perturb every weight so that each tensor's gradient is exercised. */
    for (size_t i = 0; i < m->n_params; i++)
        m->params[i] += 0.01f * (float)((int)((i * 7919) % 13) - 6);
    return m;
}

static void setup(void) {
    tu_dir_init();
    spec_path = tu_path("%s/spec.json", tu_dir());
    ckpt_path = tu_path("%s/w.safetensors", tu_dir());
    tok_path = tu_path("%s/batch.bin", tu_dir());
    out_path = tu_path("%s/grads.safetensors", tu_dir());
    tu_write(spec_path, SPEC_JSON);
    tu_write_n(tok_path, TOKENS, sizeof TOKENS);
    spec_t s;
    gpt_t *m = make_model(&s, 7);
    char err[512] = "";
    cr_assert_eq(ckpt_write(m, m->params, NULL, ckpt_path, err, sizeof err), 0, "%s", err);
    gpt_free(m);
    spec_free(&s);
}

TestSuite(grad_cli, .init = setup, .fini = teardown, .timeout = 60);

/* Runs `nightshift grad ARGS...` into r (a tu_run_t released here first, so
 * that one r serves several runs; the test frees the last) with a 30 s limit. */
#define GRAD(r, ...) (tu_run_free(r), tu_run_bin(r, 30, "grad", __VA_ARGS__, NULL))

Test(grad_cli, loss_and_gradients) {
    tu_run_t r = {0};
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path, "--out",
         out_path);
    cr_assert_eq(r.exit_code, 0, "exit %d, stderr: %s", r.exit_code, r.err);
    float loss = NAN;
    cr_assert_eq(sscanf(r.out, "loss: %f", &loss), 1, "stdout: %s", r.out);
    cr_assert(isfinite(loss) && fabsf(loss - logf(V)) < 1.0f, "loss %g vs ln V %g", loss, logf(V));

    /* The same forward/backward in this process must agree. */
    spec_t s;
    gpt_t *m = make_model(&s, 7);
    int in[2 * T], tg[2 * T];
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < T; t++) {
            in[b * T + t] = TOKENS[b][t];
            tg[b * T + t] = TOKENS[b][t + 1];
        }
    gpt_zero_grad(m);
    float want;
    cr_assert_eq(gpt_forward(m, in, tg, 2, T, GPT_EVAL, &want), 0);
    gpt_backward(m, 1.0f);
    cr_assert(fabsf(loss - want) <= 1e-6f * fabsf(want), "cli %.9g in-process %.9g", loss, want);

    ckpt_file_t f;
    char err[512] = "";
    cr_assert_eq(ckpt_read(out_path, &f, err, sizeof err), 0, "%s", err);
    cr_assert_eq(f.n, m->n_tensors);
    cr_assert_not_null(f.metadata);
    cJSON *meta = cJSON_Parse(f.metadata);
    cr_assert_str_eq(cJSON_GetObjectItem(meta, "batch_rows")->valuestring, "2");
    cJSON_Delete(meta);
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor_t *t = &m->tensors[i];
        const ckpt_tensor_t *c = ckpt_file_find(&f, t->name);
        cr_assert_not_null(c, "grads file lacks %s", t->name);
        cr_assert_eq(c->numel, t->numel, "%s", t->name);
        double diff = 0, norm = 0;
        for (size_t k = 0; k < t->numel; k++) {
            double g = m->grads[t->offset + k];
            diff = fmax(diff, fabs(c->data[k] - g));
            norm = fmax(norm, fabs(g));
        }
        cr_assert(diff <= 1e-5 * norm + 1e-9, "%s: max diff %g (max |g| %g)", t->name, diff, norm);
        cr_assert(norm > 0, "%s: gradient is all zero", t->name);
    }
    ckpt_file_close(&f);
    gpt_free(m);
    spec_free(&s);

    /* Without --out nothing is written. */
    unlink(out_path);
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert_eq(access(out_path, F_OK), -1);
    tu_run_free(&r);
}

/* Value of `key: X` on its own line of out; fails the test when absent. */
static double output_value(const char *out, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\n%s: ", key);
    const char *p = strstr(out, pat);
    cr_assert_not_null(p, "no %s in stdout: %s", key, out);
    char *end = NULL;
    double v = strtod(p + strlen(pat), &end);
    cr_assert(end != p + strlen(pat) && *end == '\n', "bad %s value in: %s", key, out);
    return v;
}

Test(grad_cli, repeat_prints_timings) {
    tu_run_t r = {0};
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    float once = NAN;
    cr_assert_eq(sscanf(r.out, "loss: %f", &once), 1, "%s", r.out);
    cr_assert_null(strstr(r.out, "_ms_"), "timings without --repeat: %s", r.out);

    /* Repeating the pass on the same batch changes neither the loss nor the
     * gradients (each pass starts from zero), and adds the three timings in
     * order after the loss line. */
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path, "--repeat", "5",
         "--out", out_path);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    float loss = NAN;
    cr_assert_eq(sscanf(r.out, "loss: %f", &loss), 1, "%s", r.out);
    cr_assert_eq(loss, once, "repeat loss %.9g vs single %.9g", loss, once);
    double med = output_value(r.out, "fwd_bwd_ms_median");
    double min = output_value(r.out, "fwd_bwd_ms_min");
    double fwd = output_value(r.out, "forward_ms_median");
    cr_assert(min > 0 && min <= med && med < 10000, "min %g median %g", min, med);
    cr_assert(fwd > 0 && fwd <= med, "forward %g vs pass %g", fwd, med);
    const char *a = strstr(r.out, "fwd_bwd_ms_median"), *b = strstr(r.out, "fwd_bwd_ms_min"),
               *c = strstr(r.out, "forward_ms_median");
    cr_assert(a < b && b < c, "timings out of order: %s", r.out);

    ckpt_file_t f;
    char err[512] = "";
    cr_assert_eq(ckpt_read(out_path, &f, err, sizeof err), 0, "%s", err);
    spec_t s;
    gpt_t *m = make_model(&s, 7);
    int in[2 * T], tg[2 * T];
    for (int bi = 0; bi < 2; bi++)
        for (int t = 0; t < T; t++) {
            in[bi * T + t] = TOKENS[bi][t];
            tg[bi * T + t] = TOKENS[bi][t + 1];
        }
    gpt_zero_grad(m);
    cr_assert_eq(gpt_forward(m, in, tg, 2, T, GPT_EVAL, NULL), 0);
    gpt_backward(m, 1.0f);
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor_t *t = &m->tensors[i];
        const ckpt_tensor_t *ct = ckpt_file_find(&f, t->name);
        cr_assert_not_null(ct, "%s", t->name);
        for (size_t k = 0; k < t->numel; k++) {
            float g = m->grads[t->offset + k];
            cr_assert(fabsf(ct->data[k] - g) <= 1e-5f * fabsf(g) + 1e-9f, "%s[%zu]: %g vs %g",
                      t->name, k, ct->data[k], g);
        }
    }
    ckpt_file_close(&f);
    gpt_free(m);
    spec_free(&s);

    /* --repeat 1 times the single pass (no warm-up) and prints the keys too. */
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path, "--repeat=1");
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert_eq(output_value(r.out, "fwd_bwd_ms_min"), output_value(r.out, "fwd_bwd_ms_median"));

    const char *bad[] = {"0", "-3", "2x", "", "1000001"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path, "--repeat",
             bad[i]);
        cr_assert_eq(r.exit_code, 2, "--repeat '%s': exit %d", bad[i], r.exit_code);
        cr_assert_not_null(strstr(r.err, "grad: --repeat"), "%s", r.err);
    }
    GRAD(&r, "--help");
    cr_assert_not_null(strstr(r.out, "--repeat N"), "%s", r.out);
    tu_run_free(&r);
}

Test(grad_cli, rejects_bad_token_file_size) {
    tu_run_t r = {0};
    unsigned char junk[4 * (T + 1) + 2] = {0};
    tu_write_n(tok_path, junk, sizeof junk);
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path);
    cr_assert_eq(r.exit_code, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "grad: "), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "not a positive multiple of 36"), "%s", r.err);
    cr_assert_eq(r.out[0], '\0', "%s", r.out);
    tu_write_n(tok_path, junk, 0);
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path);
    cr_assert_eq(r.exit_code, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "not a positive multiple"), "%s", r.err);
    tu_run_free(&r);
}

Test(grad_cli, rejects_token_ids_out_of_range) {
    tu_run_t r = {0};
    int32_t rows[2][T + 1];
    memcpy(rows, TOKENS, sizeof rows);
    rows[1][3] = V; /* one past the vocabulary */
    tu_write_n(tok_path, rows, sizeof rows);
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path);
    cr_assert_eq(r.exit_code, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "token id 32 at row 1, position 3 is out of range [0, 32)"),
                       "%s", r.err);
    /* -1 is only allowed where it is purely a target (the last position). */
    memcpy(rows, TOKENS, sizeof rows);
    rows[0][2] = -1;
    tu_write_n(tok_path, rows, sizeof rows);
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path);
    cr_assert_eq(r.exit_code, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "token id -1 at row 0, position 2"), "%s", r.err);
    tu_run_free(&r);
}

Test(grad_cli, rejects_missing_or_mismatched_checkpoint) {
    tu_run_t r = {0};
    const char *missing = tu_dir_path("nope.safetensors");
    GRAD(&r, "--spec", spec_path, "--checkpoint", missing, "--tokens", tok_path);
    cr_assert_eq(r.exit_code, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "grad: ckpt: cannot open"), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "nope.safetensors"), "%s", r.err);

    /* Weights of a wider model. */
    const char *wide = "{\"model\":{\"vocab_size\":32,\"depth\":2,\"n_embd\":32,\"n_head\":2,"
                       "\"n_kv_head\":1,\"seq_len\":8,\"window_pattern\":\"SL\","
                       "\"ve_gate_channels\":8},"
                       "\"train\":{\"batch_size\":1,\"total_batch_tokens\":8}}";
    spec_t s;
    char err[512] = "";
    cr_assert_eq(spec_parse(wide, strlen(wide), &s, err, sizeof err), 0, "%s", err);
    gpt_t *m = gpt_new(&s.model, err, sizeof err);
    cr_assert_not_null(m, "%s", err);
    cr_assert_eq(ckpt_write(m, m->params, NULL, ckpt_path, err, sizeof err), 0, "%s", err);
    gpt_free(m);
    spec_free(&s);
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path);
    cr_assert_eq(r.exit_code, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "has shape [32,32], model expects [32,16]"), "%s", r.err);
    tu_run_free(&r);
}

Test(grad_cli, usage_and_spec_errors) {
    tu_run_t r = {0};
    GRAD(&r, "--help");
    cr_assert_eq(r.exit_code, 0);
    cr_assert_not_null(strstr(r.out, "usage: nightshift grad"), "%s", r.out);
    GRAD(&r, "--spec", spec_path, "--tokens", tok_path);
    cr_assert_eq(r.exit_code, 2, "%s", r.err);
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path, "--bogus");
    cr_assert_eq(r.exit_code, 2, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "--bogus"), "%s", r.err);
    GRAD(&r, "--spec", spec_path, "--checkpoint");
    cr_assert_eq(r.exit_code, 2, "%s", r.err);

    const char *novocab = "{\"model\":{\"depth\":2}}";
    tu_write(spec_path, novocab);
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path);
    cr_assert_eq(r.exit_code, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "grad: model.vocab_size is required"), "%s", r.err);
    tu_run_free(&r);
}

/* test_quiet.c - a run's quiet reference (engine/quiet.c): the bench leaves
 * the model and optimiser as they were made (the oracle: a model that never
 * ran a bench, stepped alike, has the same bits), the shape's key follows
 * only what sets a step's speed, and the cache keeps the first quiet bench
 * of each key. The bench in a real run (stored when quiet, not when hogged)
 * is test_share.c's. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gemm.h"
#include "engine/gemm_bf16.h"
#include "engine/gpt.h"
#include "engine/optim.h"
#include "engine/quiet.h"
#include "engine/rng.h"
#include "engine/spec.h"
#include "tests/testutil.h"

TestSuite(quiet, .init = tu_dir_init, .fini = tu_dir_fini, .timeout = 60);

#define MODEL                                                                                      \
    "\"model\":{\"vocab_size\":50,\"depth\":3,\"n_embd\":48,\"n_head\":4,\"n_kv_head\":2,"         \
    "\"seq_len\":16,\"ve_layers\":\"alternate\"}"
#define TRAIN "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128}"

/* A small model's spec (MODEL, TRAIN: two micro-batches of 4 x 16 per step,
 * seed 7) with fields' members added, each in place of the one named alike. */
static void small_spec(spec_t *s, const char *fields) {
    char json[768], err[256];
    const bool model = strstr(fields, "\"model\""), train = strstr(fields, "\"train\""),
               seed = strstr(fields, "\"seed\"");
    snprintf(json, sizeof json, "{\"dataset\":\"x\",%s%s%s%s%s%s}", fields, model ? "" : ",",
             model ? "" : MODEL, train ? "" : ",", train ? "" : TRAIN, seed ? "" : ",\"seed\":7");
    cr_assert_eq(spec_parse(json, strlen(json), s, err, sizeof err), 0, "%s: %s", json, err);
}

/* Three training steps of s's model, with a bench first or not; the losses
 * and the final weights out. */
static void steps(const spec_t *s, int bench, float *losses, float **params, size_t *n) {
    char err[256] = "";
    gpt_t *m = gpt_new(&s->model, err, sizeof err);
    cr_assert_not_null(m, "gpt_new: %s", err);
    gpt_init_weights(m, s->seed);
    optim_t *o = optim_new(m, &s->train, err, sizeof err);
    cr_assert_not_null(o, "optim_new: %s", err);
    const int B = s->train.batch_size, T = s->model.seq_len;
    const int accum = s->train.total_batch_tokens / (B * T);
    cr_assert_eq(gpt_reserve(m, B, T, err, sizeof err), 0, "%s", err);
    gemm_bf16_cache_weights(m->params, m->n_params);
    if (bench) {
        quiet_bench_t b;
        cr_assert_eq(quiet_bench(m, &o, s, 0.05, &b, err, sizeof err), 0, "%s", err);
        cr_assert_not_null(o);
        cr_expect_gt(b.tok_s, 0, "the bench timed its steps");
    }
    int in[4 * 16], tg[4 * 16];
    rng_t r;
    rng_seed(&r, 11);
    for (int step = 0; step < 3; step++) {
        losses[step] = 0;
        for (int micro = 0; micro < accum; micro++) {
            for (int i = 0; i < B * T; i++) {
                in[i] = (int)rng_below(&r, 50);
                tg[i] = (int)rng_below(&r, 50);
            }
            float loss;
            cr_assert_eq(gpt_forward(m, in, tg, B, T, GPT_TRAIN, &loss), 0);
            gpt_backward(m, 1.0f / (float)accum);
            losses[step] += loss / (float)accum;
        }
        optim_step(o, m, 1.0, s->train.muon_momentum_start, s->train.weight_decay);
        gpt_zero_grad(m);
    }
    gemm_bf16_cache_weights(NULL, 0);
    *n = m->n_params;
    *params = malloc(*n * sizeof(float));
    cr_assert_not_null(*params);
    memcpy(*params, m->params, *n * sizeof(float));
    optim_free(o);
    gpt_free(m);
}

static void same_steps_with_and_without_a_bench(const spec_t *s) {
    float loss[2][3], *p[2];
    size_t n[2];
    steps(s, 1, loss[0], &p[0], &n[0]);
    steps(s, 0, loss[1], &p[1], &n[1]);
    cr_assert_eq(n[0], n[1]);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(loss[0][i], loss[1][i], "step %d: after a bench %.9g, without %.9g", i,
                     loss[0][i], loss[1][i]);
    cr_expect(loss[1][2] != loss[1][0], "the steps changed the weights");
    cr_expect(!memcmp(p[0], p[1], n[0] * sizeof(float)), "the weights after 3 steps differ");
    free(p[0]), free(p[1]);
}

/* Weights, optimiser state (Adam's step counts and moments, Muon's momentum)
 * and the dropout stream are as setup made them: a run is the same run with
 * or without its bench. */
Test(quiet, a_bench_leaves_the_run_as_it_was_made) {
    spec_t s;
    small_spec(&s, "\"name\":\"dropout\"");
    s.model.embed_dropout = 0.1; /* its stream must start again too */
    same_steps_with_and_without_a_bench(&s);
    spec_free(&s);
}

/* In bf16 the weights' packed forms are cached until optim_step; the bench's
 * re-initialised weights must not be read through the bench's packing. */
Test(quiet, a_bench_leaves_a_bf16_run_as_it_was_made) {
    if (!tu_select_bf16(1)) return;
    spec_t s;
    small_spec(&s, "\"name\":\"bf16\"");
    same_steps_with_and_without_a_bench(&s);
    spec_free(&s);
    tu_select_isa_auto();
}

static void key_of(const char *extra, int threads, char *key) {
    spec_t s;
    small_spec(&s, extra);
    cr_assert_eq(quiet_shape_key(&s, threads, "avx2", "fp32", key, 256), 0);
    spec_free(&s);
}

Test(quiet, the_key_follows_what_sets_a_steps_speed) {
    char base[256], k[256];
    key_of("\"name\":\"base\"", 1, base);
    const char *same[] = {"\"name\":\"base\",\"seed\":9", "\"time_budget_s\":60",
                          "\"name\":\"other\"",
                          "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128,"
                          "\"matrix_lr\":0.01,\"warmdown_ratio\":0.2,\"weight_decay\":0}"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        key_of(same[i], 1, k);
        cr_expect_str_eq(k, base, "%s changes the key", same[i]);
    }
    const char *other[] = {"\"train\":{\"batch_size\":2,\"total_batch_tokens\":128}",
                           "\"train\":{\"batch_size\":4,\"total_batch_tokens\":256}",
                           "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128,\"ns_steps\":3}",
                           "\"model\":{\"vocab_size\":50,\"depth\":2,\"n_embd\":48,\"n_head\":4,"
                           "\"n_kv_head\":2,\"seq_len\":16}"};
    for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
        key_of(other[i], 1, k);
        cr_expect_str_neq(k, base, "%s keeps the key", other[i]);
    }
    key_of("\"name\":\"base\"", 2, k);
    cr_expect_str_neq(k, base, "the thread count keeps the key");
}

/* The first bench of a key is kept; other keys beside it; a damaged file is
 * no reference and is rewritten. */
Test(quiet, a_bench_is_cached_once_per_key) {
    char err[256];
    quiet_bench_t a = {.tok_s = 1000, .share = {1, 0, 0}, .quiet = true};
    quiet_bench_t a2 = a, b = a;
    a2.tok_s = 10;
    b.tok_s = 2000;
    cr_expect_eq(quiet_cached(tu_dir(), "a"), 0, "nothing cached yet");
    cr_assert_eq(quiet_store(tu_dir(), "a", &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(quiet_store(tu_dir(), "a", &a2, err, sizeof err), 0, "%s", err);
    cr_assert_eq(quiet_store(tu_dir(), "b", &b, err, sizeof err), 0, "%s", err);
    cr_expect_eq(quiet_cached(tu_dir(), "a"), 1000);
    cr_expect_eq(quiet_cached(tu_dir(), "b"), 2000);
    cr_expect_eq(quiet_cached(tu_dir(), "c"), 0);
    tu_write(tu_dir_path("quiet_bench.json"), "not json");
    cr_expect_eq(quiet_cached(tu_dir(), "a"), 0, "a damaged cache is no reference");
    cr_assert_eq(quiet_store(tu_dir(), "a", &a2, err, sizeof err), 0, "%s", err);
    cr_expect_eq(quiet_cached(tu_dir(), "a"), 10, "a damaged cache is rewritten");
}

/* Quiet is: threads that did not wait, others under the calibration's
 * threshold, no steal to speak of; an unknown share is not quiet. */
Test(quiet, quiet_is_what_the_kernel_counted) {
    for (int whole = 0; whole < 2; whole++) {
        cr_expect(quiet_is(&(share_t){1, 0, 0.02, 0.05}, whole));
        cr_expect(quiet_is(&(share_t){0.97, 0, 0.05, 0.1}, whole));
        cr_expect(!quiet_is(&(share_t){0.85, 0, 0, 0}, whole), "threads waited 15%%");
        cr_expect(!quiet_is(&(share_t){1, 0, 0.3, 0.3}, whole), "others used 30%%");
        cr_expect(!quiet_is(&(share_t){1, 0.2, 0, 0}, whole), "steal 20%%");
        cr_expect(!quiet_is(&(share_t){-1, -1, -1, -1}, whole), "unknown");
    }
    /* its CPUs quiet, the other half of the machine busy */
    cr_expect(!quiet_is(&(share_t){1, 0, 0.02, 0.5}, true), "the machine is busy");
    cr_expect(quiet_is(&(share_t){1, 0, 0.02, 0.5}, false), "its CPUs are quiet");
    cr_expect(!quiet_is(&(share_t){1, 0, 0.02, -1}, true), "the machine unknown");
    cr_expect_eq(quiet_bench_seconds(300), 3);
    cr_expect_eq(quiet_bench_seconds(3), QUIET_BENCH_MIN_S);
    cr_expect_eq(quiet_bench_seconds(100), 1);
}

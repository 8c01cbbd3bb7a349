/* test_spec.c - the spec parser: defaults, every error message, per-layer
 * derivations, canonical JSON, and the example specs under experiments/.
 * Error messages are compared as exact strings: they are the HTTP API's
 * messages, so a change here is an API change. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/gpt.h"
#include "engine/optim.h"
#include "engine/spec.h"
#include "tests/testutil.h"

/* Parse text that must be valid; the caller frees s. */
static void parse_ok(const char *json, spec_t *s) {
    char err[SPEC_ERR_LEN] = "";
    int rc = spec_parse(json, strlen(json), s, err, sizeof err);
    cr_assert_eq(rc, 0, "spec %s was rejected: %s", json, err);
}

/* Parse text that must fail with exactly msg; s must need no freeing after. */
static void expect_error(const char *json, const char *msg) {
    char err[SPEC_ERR_LEN] = "";
    spec_t s;
    int rc = spec_parse(json, strlen(json), &s, err, sizeof err);
    cr_expect_eq(rc, -1, "spec %s was accepted", json);
    cr_expect_str_eq(err, msg, "spec %s: got \"%s\", want \"%s\"", json, err, msg);
    cr_expect_null(s.name, "spec %s left a name behind", json);
    cr_expect_eq(s.n_tags, 0, "spec %s left tags behind", json);
    if (rc == 0) spec_free(&s);
}

/* Canonical JSON of text that must be valid; the caller frees it. */
static char *canonical_of(const char *json) {
    spec_t s;
    parse_ok(json, &s);
    char *c = spec_canonical_json(&s);
    spec_free(&s);
    cr_assert_not_null(c);
    return c;
}

Test(spec, defaults) {
    spec_t s;
    parse_ok("{}", &s);
    cr_expect_null(s.name);
    cr_expect_eq(s.n_tags, 0);
    cr_expect_eq(s.seed, 42);
    cr_expect_eq(s.priority, 0);
    cr_expect_eq(s.parent, 0);
    cr_expect_str_eq(s.dataset, "default");
    cr_expect_eq(s.time_budget_s, 300);
    cr_expect_eq(s.token_budget, 0);
    cr_expect_eq(s.train.sampler, SAMPLER_RANDOM);

    const spec_model_t *m = &s.model;
    cr_expect_eq(m->vocab_size, 0);
    cr_expect_eq(m->depth, 4);
    cr_expect_eq(m->n_embd, 128);
    cr_expect_eq(m->n_head, 2);
    cr_expect_eq(m->n_kv_head, 2);
    cr_expect_eq(m->head_dim, 64);
    cr_expect_eq(m->mlp_ratio, 4);
    cr_expect_eq(m->mlp_hidden, 512);
    cr_expect_eq(m->mlp, MLP_RELU2);
    cr_expect_eq(m->seq_len, 256);
    cr_expect_eq(m->pos, POS_ROPE);
    cr_expect_eq(m->max_pos, 256);
    cr_expect_eq(m->tie_embeddings, false);
    cr_expect_eq(m->embed_dropout, 0);
    cr_expect_eq(m->softcap, 15);
    cr_expect_str_eq(m->window_pattern, "SSSL");
    cr_expect_str_eq(m->ve_layers, "alternate");
    cr_expect_eq(m->ve_gate_channels, 32);
    int win[] = {128, 128, 128, 256};
    bool ve[] = {false, true, false, true};
    for (int i = 0; i < 4; i++) {
        cr_expect_eq(m->window[i], win[i], "window[%d]", i);
        cr_expect_eq(m->has_ve[i], ve[i], "has_ve[%d]", i);
    }

    const spec_train_t *t = &s.train;
    cr_expect_eq(t->batch_size, 16);
    cr_expect_eq(t->total_batch_tokens, 4096);
    cr_expect_eq(t->matrix_lr, 0.04);
    cr_expect_eq(t->embedding_lr, 0.6);
    cr_expect_eq(t->value_embedding_lr, 0.6);
    cr_expect_eq(t->unembedding_lr, 0.004);
    cr_expect_eq(t->scalar_lr, 0.5);
    cr_expect_eq(t->weight_decay, 0.2);
    cr_expect_eq(t->adam_beta1, 0.8);
    cr_expect_eq(t->adam_beta2, 0.95);
    cr_expect_eq(t->x0_beta1, 0.96);
    cr_expect_eq(t->warmup_ratio, 0);
    cr_expect_eq(t->warmdown_ratio, 0.5);
    cr_expect_eq(t->final_lr_frac, 0);
    cr_expect_eq(t->muon_momentum_start, 0.85);
    cr_expect_eq(t->muon_momentum_end, 0.95);
    cr_expect_eq(t->muon_momentum_steps, 300);
    cr_expect_eq(t->ns_steps, 5);
    cr_expect_eq(t->muon_beta2, 0.95);

    cr_expect_eq(s.resources.threads, 0);
    cr_expect_eq(s.resources.memory_mb, 0);
    cr_expect_eq(s.resources.peak_gflops, 0);

    /* spec_defaults alone gives the same spec as parsing "{}". */
    spec_t d;
    spec_defaults(&d);
    char *a = spec_canonical_json(&s), *b = spec_canonical_json(&d);
    cr_assert(a && b);
    cr_expect_str_eq(a, b);
    free(a);
    free(b);
    spec_free(&s);
}

Test(spec, defaults_that_follow_other_fields) {
    spec_t s;
    parse_ok("{\"model\":{\"n_head\":8}}", &s);
    cr_expect_eq(s.model.n_kv_head, 8);
    cr_expect_eq(s.model.head_dim, 16);
    parse_ok("{\"model\":{\"seq_len\":128,\"pos\":\"learned\"}}", &s);
    cr_expect_eq(s.model.max_pos, 128);
    parse_ok("{\"model\":{\"n_embd\":96,\"mlp_ratio\":2.6666666666666665}}", &s);
    cr_expect_eq(s.model.mlp_hidden, 256);
    parse_ok("{\"model\":{\"mlp_ratio\":2.5},\"parent\":null,\"name\":null}", &s);
    cr_expect_eq(s.model.mlp_hidden, 320);
    cr_expect_eq(s.parent, 0);
    cr_expect_null(s.name);
    /* RoPE ignores max_pos, so a shorter table is no error there. */
    parse_ok("{\"model\":{\"seq_len\":2048,\"max_pos\":1024},"
             "\"train\":{\"total_batch_tokens\":32768}}",
             &s);
    /* Integers written as whole doubles are integers. */
    parse_ok("{\"model\":{\"depth\":4.0,\"n_embd\":2.56e2},\"seed\":7e0}", &s);
    cr_expect_eq(s.model.depth, 4);
    cr_expect_eq(s.model.n_embd, 256);
    cr_expect_eq(s.seed, 7);
    parse_ok("{\"seed\":9007199254740991,\"parent\":12,\"priority\":-3}", &s);
    cr_expect_eq(s.seed, 9007199254740991ULL);
    cr_expect_eq(s.parent, 12);
    cr_expect_eq(s.priority, -3);
    parse_ok("{\"name\":\"x\",\"tags\":[\"a\",\"b\"],\"model\":{\"vocab_size\":8192,"
             "\"mlp\":\"gelu\",\"tie_embeddings\":true}}",
             &s);
    cr_expect_str_eq(s.name, "x");
    cr_expect_eq(s.n_tags, 2);
    cr_expect_str_eq(s.tags[1], "b");
    cr_expect_eq(s.model.vocab_size, 8192);
    cr_expect_eq(s.model.mlp, MLP_GELU);
    cr_expect_eq(s.model.tie_embeddings, true);
    spec_free(&s);
}

typedef struct {
    const char *json, *msg;
} error_case;

static void run_cases(const error_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++) expect_error(cases[i].json, cases[i].msg);
}

Test(spec, cross_field_messages) {
    static const error_case cases[] = {
        {"{\"model\":{\"n_embd\":128,\"n_head\":7}}", "model.n_head: 7 does not divide n_embd 128"},
        {"{\"model\":{\"n_head\":4,\"n_kv_head\":3}}",
         "model.n_kv_head: 3 does not divide n_head 4"},
        {"{\"model\":{\"n_head\":2,\"n_kv_head\":4}}",
         "model.n_kv_head: 4 does not divide n_head 2"},
        {"{\"model\":{\"n_embd\":256,\"ve_gate_channels\":300}}",
         "model.ve_gate_channels: 300 exceeds n_embd 256"},
        {"{\"model\":{\"pos\":\"learned\",\"seq_len\":2048,\"max_pos\":1024},"
         "\"train\":{\"total_batch_tokens\":32768}}",
         "model.seq_len: 2048 exceeds max_pos 1024"},
        {"{\"model\":{\"ve_layers\":[0,9]}}",
         "model.ve_layers[1]: layer 9 out of range for depth 4"},
        {"{\"model\":{\"ve_layers\":[0,1,70]}}",
         "model.ve_layers[2]: layer 70 out of range for depth 4"},
        {"{\"model\":{\"ve_layers\":[-1]}}",
         "model.ve_layers[0]: layer -1 out of range for depth 4"},
        {"{\"model\":{\"ve_layers\":[2,1,2]}}", "model.ve_layers[2]: layer 2 listed twice"},
        {"{\"model\":{\"n_embd\":132,\"n_head\":4}}",
         "model.head_dim: RoPE needs an even head_dim, got 33"},
        {"{\"train\":{\"total_batch_tokens\":5000}}",
         "train.total_batch_tokens: 5000 is not a multiple of batch_size*seq_len 4096"},
        {"{\"train\":{\"total_batch_tokens\":2048}}",
         "train.total_batch_tokens: 2048 is not a multiple of batch_size*seq_len 4096"},
        {"{\"model\":{\"n_embd\":256,\"mlp_ratio\":4.3}}",
         "model.mlp_ratio: 4.3 * n_embd 256 = 1100.8 is not a whole number"},
        {"{\"model\":{\"n_embd\":256,\"mlp_ratio\":0.001}}",
         "model.mlp_ratio: 0.001 * n_embd 256 = 0.256 is below 1"},
        {"{\"model\":{\"n_embd\":256,\"mlp_ratio\":8192}}",
         "model.mlp_ratio: hidden width 2097152 exceeds 1048576"},
        {"{\"train\":{\"warmup_ratio\":0.6}}",
         "train.warmdown_ratio: warmup_ratio + warmdown_ratio = 1.1 exceeds 1"},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);

    /* The same model with learned positions has no RoPE constraint. */
    spec_t s;
    parse_ok("{\"model\":{\"n_embd\":132,\"n_head\":4,\"pos\":\"learned\"}}", &s);
    cr_expect_eq(s.model.head_dim, 33);
    spec_free(&s);
}

Test(spec, range_messages) {
    static const error_case cases[] = {
        {"{\"model\":{\"vocab_size\":-1}}", "model.vocab_size: must be in [0, 16777216], got -1"},
        {"{\"model\":{\"vocab_size\":16777217}}",
         "model.vocab_size: must be in [0, 16777216], got 16777217"},
        {"{\"model\":{\"depth\":0}}", "model.depth: must be in [1, 64], got 0"},
        {"{\"model\":{\"depth\":65}}", "model.depth: must be in [1, 64], got 65"},
        {"{\"model\":{\"n_embd\":0}}", "model.n_embd: must be in [1, 65536], got 0"},
        {"{\"model\":{\"n_head\":0}}", "model.n_head: must be in [1, 65536], got 0"},
        {"{\"model\":{\"n_kv_head\":-2}}", "model.n_kv_head: must be in [1, 65536], got -2"},
        {"{\"model\":{\"mlp_ratio\":0}}", "model.mlp_ratio: must be > 0, got 0"},
        {"{\"model\":{\"seq_len\":0}}", "model.seq_len: must be in [1, 1048576], got 0"},
        {"{\"model\":{\"max_pos\":0}}", "model.max_pos: must be in [1, 1048576], got 0"},
        {"{\"model\":{\"embed_dropout\":1}}", "model.embed_dropout: must be in [0, 1), got 1"},
        {"{\"model\":{\"embed_dropout\":-0.1}}",
         "model.embed_dropout: must be in [0, 1), got -0.1"},
        {"{\"model\":{\"softcap\":-1}}", "model.softcap: must be >= 0, got -1"},
        {"{\"model\":{\"window_pattern\":\"\"}}", "model.window_pattern: must not be empty"},
        {"{\"model\":{\"window_pattern\":\"SxL\"}}",
         "model.window_pattern: \"SXL\" has a character other than S or L"},
        {"{\"model\":{\"window_pattern\":"
         "\"SSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSS\"}}",
         "model.window_pattern: longer than 64 characters"},
        {"{\"model\":{\"ve_gate_channels\":0}}",
         "model.ve_gate_channels: must be in [1, 65536], got 0"},
        {"{\"model\":{\"ve_layers\":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,"
         "23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,"
         "51,52,53,54,55,56,57,58,59,60,61,62,63,0]}}",
         "model.ve_layers: more than 64 layers listed"},
        {"{\"time_budget_s\":0}",
         "time_budget_s: 0, token_budget 0 and flops_budget 0: one of them must be > 0"},
        {"{\"time_budget_s\":-5}", "time_budget_s: must be in [0, 604800] (a week), got -5"},
        {"{\"time_budget_s\":604801}",
         "time_budget_s: must be in [0, 604800] (a week), got 604801"},
        {"{\"token_budget\":0,\"time_budget_s\":0}",
         "time_budget_s: 0, token_budget 0 and flops_budget 0: one of them must be > 0"},
        {"{\"token_budget\":-1}", "token_budget: must be in [0, 1000000000000], got -1"},
        {"{\"token_budget\":1000000000001}",
         "token_budget: must be in [0, 1000000000000], got 1000000000001"},
        {"{\"token_budget\":1e300}", "token_budget: must be in [0, 1000000000000], got 1e+300"},
        {"{\"token_budget\":4096,\"time_budget_s\":300}",
         "time_budget_s: 300 and token_budget 4096 are both set; a run has one budget (leave "
         "time_budget_s out or set it to 0)"},
        {"{\"seed\":-1}", "seed: must be in [0, 9007199254740991], got -1"},
        {"{\"seed\":9007199254740992}",
         "seed: must be in [0, 9007199254740991], got a larger number"},
        /* read as 9007199254740992: the message must not quote a number never sent */
        {"{\"seed\":9007199254740993}",
         "seed: must be in [0, 9007199254740991], got a larger number"},
        {"{\"parent\":1e20}", "parent: must be a positive id or null, got 1e+20"},
        {"{\"parent\":0}", "parent: must be a positive id or null, got 0"},
        {"{\"dataset\":\"a/b\"}",
         "dataset: \"a/b\" is not a plain name (letters, digits, _ . - only)"},
        {"{\"dataset\":\"..\"}", "dataset: \"..\" must not start with '.'"},
        {"{\"dataset\":\".\"}", "dataset: \".\" must not start with '.'"},
        {"{\"dataset\":\".x.tmp.1\"}", "dataset: \".x.tmp.1\" must not start with '.'"},
        {"{\"dataset\":\"\"}", "dataset: must not be empty"},
        {"{\"dataset\":\"0123456789012345678901234567890123456789012345678901234567890123\"}",
         "dataset: longer than 63 characters"},
        {"{\"train\":{\"batch_size\":0}}", "train.batch_size: must be in [1, 65536], got 0"},
        {"{\"train\":{\"total_batch_tokens\":0}}",
         "train.total_batch_tokens: must be in [1, 2147483647], got 0"},
        {"{\"train\":{\"matrix_lr\":-0.1}}", "train.matrix_lr: must be >= 0, got -0.1"},
        {"{\"train\":{\"embedding_lr\":-1}}", "train.embedding_lr: must be >= 0, got -1"},
        {"{\"train\":{\"value_embedding_lr\":-1}}",
         "train.value_embedding_lr: must be >= 0, got -1"},
        {"{\"train\":{\"unembedding_lr\":-1}}", "train.unembedding_lr: must be >= 0, got -1"},
        {"{\"train\":{\"scalar_lr\":-1}}", "train.scalar_lr: must be >= 0, got -1"},
        {"{\"train\":{\"weight_decay\":-1}}", "train.weight_decay: must be >= 0, got -1"},
        {"{\"train\":{\"adam_betas\":[0.8,1]}}", "train.adam_betas[1]: must be in [0, 1), got 1"},
        {"{\"train\":{\"adam_betas\":[-0.5,0.9]}}",
         "train.adam_betas[0]: must be in [0, 1), got -0.5"},
        {"{\"train\":{\"x0_beta1\":1}}", "train.x0_beta1: must be in [0, 1), got 1"},
        {"{\"train\":{\"warmup_ratio\":1.5}}", "train.warmup_ratio: must be in [0, 1], got 1.5"},
        {"{\"train\":{\"warmdown_ratio\":-0.5}}",
         "train.warmdown_ratio: must be in [0, 1], got -0.5"},
        {"{\"train\":{\"final_lr_frac\":1.5}}", "train.final_lr_frac: must be in [0, 1], got 1.5"},
        {"{\"train\":{\"muon_momentum_start\":1}}",
         "train.muon_momentum_start: must be in [0, 1), got 1"},
        {"{\"train\":{\"muon_momentum_end\":-1}}",
         "train.muon_momentum_end: must be in [0, 1), got -1"},
        {"{\"train\":{\"muon_momentum_steps\":-1}}",
         "train.muon_momentum_steps: must be in [0, 2147483647], got -1"},
        {"{\"train\":{\"ns_steps\":0}}", "train.ns_steps: must be in [1, 5], got 0"},
        {"{\"train\":{\"ns_steps\":6}}", "train.ns_steps: must be in [1, 5], got 6"},
        {"{\"train\":{\"muon_beta2\":1}}", "train.muon_beta2: must be in [0, 1), got 1"},
        {"{\"resources\":{\"threads\":1025}}", "resources.threads: must be in [0, 1024], got 1025"},
        {"{\"resources\":{\"threads\":-1}}", "resources.threads: must be in [0, 1024], got -1"},
        {"{\"resources\":{\"memory_mb\":-1}}",
         "resources.memory_mb: must be in [0, 2147483647], got -1"},
        {"{\"resources\":{\"peak_gflops\":-1}}", "resources.peak_gflops: must be >= 0, got -1"},
        {"{\"model\":{\"mlp\":\"tanh\"}}",
         "model.mlp: unknown value \"tanh\" (expected relu2, gelu, swiglu or geglu)"},
        {"{\"model\":{\"pos\":\"alibi\"}}",
         "model.pos: unknown value \"alibi\" (expected rope or learned)"},
        {"{\"model\":{\"ve_layers\":\"odd\"}}",
         "model.ve_layers: unknown value \"odd\" (expected alternate, all, none, first_half, "
         "last_half or a list of layers)"},
        {"{\"tags\":[\"\"]}", "tags[0]: must not be empty"},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

Test(spec, unknown_fields) {
    static const error_case cases[] = {
        {"{\"bogus\":1}", "bogus: unknown field"},
        {"{\"Name\":\"x\"}", "Name: unknown field (did you mean name?)"},
        {"{\"model\":{\"n_embed\":128}}",
         "model.n_embed: unknown field (did you mean model.n_embd?)"},
        {"{\"model\":{\"depth\":4,\"layers\":{\"x\":1}}}", "model.layers: unknown field"},
        {"{\"train\":{\"lr\":0.1}}", "train.lr: unknown field"},
        {"{\"train\":{\"adam_beta1\":0.9}}",
         "train.adam_beta1: unknown field (did you mean train.adam_betas?)"},
        {"{\"resources\":{\"gpus\":1}}", "resources.gpus: unknown field"},
        {"{\"model\":{\"window\":[1]}}", "model.window: unknown field"},
        {"{\"model\":{\"head_dim\":64}}", "model.head_dim: unknown field"},
        {"{\"model\":{\"depth\":4,\"depth\":5}}", "model.depth: duplicate field"},
        {"{\"seed\":1,\"seed\":1}", "seed: duplicate field"},
        /* input quoted as valid UTF-8: a byte that starts no sequence is '?' */
        {"{\"train\":{\"\xdd"
         "0_beta1\":0.9}}",
         "train.?0_beta1: unknown field (did you mean train.x0_beta1?)"},
        {"{\"model\":{\"mlp\":\"\xff\xfe\xc3\xa9\"}}",
         "model.mlp: unknown value \"??\xc3\xa9\" (expected relu2, gelu, swiglu or geglu)"},
        /* every unknown field at once, the root's and the sections', in order */
        {"{\"bogus\":1,\"model\":{\"n_embed\":128,\"depth\":2,\"layers\":3},\"Name\":\"x\","
         "\"train\":{\"lr\":0.1}}",
         "bogus: unknown field; model.n_embed: unknown field (did you mean model.n_embd?); "
         "model.layers: unknown field; Name: unknown field (did you mean name?); train.lr: "
         "unknown field"},
        /* an unknown field beside a bad value: the unknown field first */
        {"{\"model\":{\"depth\":-1},\"bogus\":1}", "bogus: unknown field"},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

Test(spec, type_errors) {
    static const error_case cases[] = {
        {"[]", "spec: expected a JSON object"},
        {"42", "spec: expected a JSON object"},
        {"{\"name\":5}", "name: expected a string"},
        {"{\"tags\":\"x\"}", "tags: expected an array of strings"},
        {"{\"tags\":[\"a\",1]}", "tags[1]: expected a string"},
        {"{\"seed\":\"42\"}", "seed: expected an integer"},
        {"{\"seed\":1.5}", "seed: expected an integer"},
        {"{\"priority\":true}", "priority: expected an integer"},
        {"{\"parent\":\"3\"}", "parent: expected an integer id or null"},
        {"{\"parent\":1.5}", "parent: expected an integer"},
        {"{\"dataset\":7}", "dataset: expected a string"},
        {"{\"time_budget_s\":\"300\"}", "time_budget_s: expected a number"},
        {"{\"time_budget_s\":1e999}", "time_budget_s: number out of range"},
        {"{\"token_budget\":\"4096\"}", "token_budget: expected an integer"},
        {"{\"token_budget\":4096.5}", "token_budget: expected an integer"},
        {"{\"train\":{\"sampler\":\"shuffled\"}}",
         "train.sampler: unknown value \"shuffled\" (expected random or sequential)"},
        {"{\"train\":{\"sampler\":1}}", "train.sampler: expected a string"},
        {"{\"train\":{\"precision\":\"fp16\"}}",
         "train.precision: unknown value \"fp16\" (expected fp32, bf16 or auto)"},
        {"{\"model\":[]}", "model: expected an object"},
        {"{\"model\":null}", "model: expected an object"},
        {"{\"train\":1}", "train: expected an object"},
        {"{\"resources\":\"x\"}", "resources: expected an object"},
        {"{\"model\":{\"depth\":\"4\"}}", "model.depth: expected an integer"},
        {"{\"model\":{\"depth\":4.5}}", "model.depth: expected an integer"},
        {"{\"model\":{\"depth\":null}}", "model.depth: expected an integer"},
        {"{\"model\":{\"depth\":true}}", "model.depth: expected an integer"},
        {"{\"model\":{\"depth\":1e10}}", "model.depth: 10000000000 is out of range"},
        {"{\"model\":{\"vocab_size\":[1]}}", "model.vocab_size: expected an integer"},
        {"{\"model\":{\"mlp_ratio\":\"4\"}}", "model.mlp_ratio: expected a number"},
        {"{\"model\":{\"mlp\":1}}", "model.mlp: expected a string"},
        {"{\"model\":{\"pos\":null}}", "model.pos: expected a string"},
        {"{\"model\":{\"tie_embeddings\":1}}", "model.tie_embeddings: expected a boolean"},
        {"{\"model\":{\"embed_dropout\":false}}", "model.embed_dropout: expected a number"},
        {"{\"model\":{\"window_pattern\":[\"S\"]}}", "model.window_pattern: expected a string"},
        {"{\"model\":{\"ve_layers\":3}}",
         "model.ve_layers: expected a string or an array of layer indices"},
        {"{\"model\":{\"ve_layers\":[0.5]}}", "model.ve_layers[0]: expected an integer"},
        {"{\"model\":{\"ve_layers\":[\"1\"]}}", "model.ve_layers[0]: expected an integer"},
        {"{\"model\":{\"ve_gate_channels\":32.5}}", "model.ve_gate_channels: expected an integer"},
        {"{\"train\":{\"batch_size\":\"16\"}}", "train.batch_size: expected an integer"},
        {"{\"train\":{\"matrix_lr\":null}}", "train.matrix_lr: expected a number"},
        {"{\"train\":{\"adam_betas\":0.9}}", "train.adam_betas: expected an array of two numbers"},
        {"{\"train\":{\"adam_betas\":[0.9]}}",
         "train.adam_betas: expected an array of two numbers"},
        {"{\"train\":{\"adam_betas\":[0.9,0.9,0.9]}}",
         "train.adam_betas: expected an array of two numbers"},
        {"{\"train\":{\"adam_betas\":[0.8,\"x\"]}}", "train.adam_betas[1]: expected a number"},
        {"{\"train\":{\"ns_steps\":2.5}}", "train.ns_steps: expected an integer"},
        {"{\"resources\":{\"threads\":\"all\"}}", "resources.threads: expected an integer"},
        {"{\"resources\":{\"peak_gflops\":{}}}", "resources.peak_gflops: expected a number"},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

Test(spec, input_limits) {
    static const error_case cases[] = {
        {"", "spec: invalid JSON at line 1, column 1"},
        {"{", "spec: invalid JSON at line 1, column 1"},
        {"{\"seed\": 1,}", "spec: invalid JSON at line 1, column 12"},
        {"{\n\"name\":\"x\"\n\"seed\":1}", "spec: invalid JSON at line 3, column 1"},
        {"{\n  \"seed\": ,\n}", "spec: invalid JSON at line 2, column 11"},
        {"{} x", "spec: unexpected text after the JSON value at line 1, column 4"},
        {"{}{}", "spec: unexpected text after the JSON value at line 1, column 3"},
        {"{\"model\":{\"ve_layers\":[[[[[[[[1]]]]]]]]}}", "spec: nested deeper than 8 levels"},
        {"{\"name\":\"\xff\"}", "name: not valid UTF-8"},
        {"{\"name\":\"\xc0\xaf\"}", "name: not valid UTF-8"},
        {"{\"tags\":[\"ok\",\"\xed\xa0\x80\"]}", "tags[1]: not valid UTF-8"},
        {"{\"tags\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\","
         "\"13\",\"14\",\"15\",\"16\",\"17\",\"18\",\"19\",\"20\",\"21\",\"22\",\"23\",\"24\","
         "\"25\",\"26\",\"27\",\"28\",\"29\",\"30\",\"31\",\"32\",\"33\"]}",
         "tags: more than 32 tags"},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);

    char err[SPEC_ERR_LEN];
    spec_t s;
    cr_expect_eq(spec_parse(NULL, 0, &s, err, sizeof err), -1);
    cr_expect_str_eq(err, "spec: no input");

    /* Nesting inside strings does not count. */
    parse_ok("{\"name\":\"[[[[[[[[[[{{{{{{{{{\"}", &s);
    spec_free(&s);

    /* Exactly SPEC_MAX_TEXT bytes is accepted, one more is not. */
    char *big = malloc(SPEC_MAX_TEXT + 2);
    cr_assert_not_null(big);
    memset(big, ' ', SPEC_MAX_TEXT + 1);
    big[0] = '{';
    big[SPEC_MAX_TEXT - 1] = '}';
    big[SPEC_MAX_TEXT + 1] = '\0';
    cr_expect_eq(spec_parse(big, SPEC_MAX_TEXT, &s, err, sizeof err), 0, "%s", err);
    spec_free(&s);
    big[SPEC_MAX_TEXT - 1] = ' ';
    big[SPEC_MAX_TEXT] = '}';
    cr_expect_eq(spec_parse(big, SPEC_MAX_TEXT + 1, &s, err, sizeof err), -1);
    cr_expect_str_eq(err, "spec: larger than 1048576 bytes");
    free(big);

    /* name: 200 characters (2-byte UTF-8 each) pass, 201 do not. */
    char json[1024];
    size_t n = (size_t)snprintf(json, sizeof json, "{\"name\":\"");
    for (int i = 0; i < 200; i++) n += (size_t)snprintf(json + n, sizeof json - n, "\xc3\xa9");
    snprintf(json + n, sizeof json - n, "\"}");
    parse_ok(json, &s);
    cr_expect_eq(strlen(s.name), 400);
    spec_free(&s);
    snprintf(json + n, sizeof json - n, "x\"}");
    expect_error(json, "name: longer than 200 characters");

    /* A tag of 64 characters passes, 65 do not. */
    n = (size_t)snprintf(json, sizeof json, "{\"tags\":[\"");
    for (int i = 0; i < 64; i++) json[n++] = 't';
    snprintf(json + n, sizeof json - n, "\"]}");
    parse_ok(json, &s);
    spec_free(&s);
    snprintf(json + n, sizeof json - n, "t\"]}");
    expect_error(json, "tags[0]: longer than 64 characters");

    /* A short error buffer is truncated, never overrun. */
    char small[8];
    cr_expect_eq(spec_parse("{\"x\":1}", 7, &s, small, sizeof small), -1);
    cr_expect_str_eq(small, "x: unkn");
}

/* has_ve for ve_layers = name at depth L, as a string of 0/1 per layer. */
static void expect_ve(const char *ve_json, int depth, const char *expected) {
    char json[256], got[SPEC_MAX_DEPTH + 1] = "";
    snprintf(json, sizeof json,
             "{\"model\":{\"depth\":%d,\"window_pattern\":\"L\",\"ve_layers\":%s}}", depth,
             ve_json);
    spec_t s;
    parse_ok(json, &s);
    for (int i = 0; i < depth; i++) got[i] = s.model.has_ve[i] ? '1' : '0';
    for (int i = depth; i < SPEC_MAX_DEPTH; i++)
        cr_expect_not(s.model.has_ve[i], "%s: has_ve[%d] set beyond depth", json, i);
    cr_expect_str_eq(got, expected, "ve_layers %s at depth %d", ve_json, depth);
    spec_free(&s);
}

Test(spec, has_ve_patterns) {
    expect_ve("\"alternate\"", 1, "1");
    expect_ve("\"alternate\"", 4, "0101");
    expect_ve("\"alternate\"", 5, "10101");
    expect_ve("\"all\"", 1, "1");
    expect_ve("\"all\"", 4, "1111");
    expect_ve("\"all\"", 5, "11111");
    expect_ve("\"none\"", 1, "0");
    expect_ve("\"none\"", 4, "0000");
    expect_ve("\"none\"", 5, "00000");
    expect_ve("\"first_half\"", 1, "0");
    expect_ve("\"first_half\"", 4, "1100");
    expect_ve("\"first_half\"", 5, "11000");
    expect_ve("\"last_half\"", 1, "1");
    expect_ve("\"last_half\"", 4, "0011");
    expect_ve("\"last_half\"", 5, "00111");
    expect_ve("[0]", 1, "1");
    expect_ve("[]", 1, "0");
    expect_ve("[0,2]", 4, "1010");
    expect_ve("[3,0]", 4, "1001");
    expect_ve("[4,1,2]", 5, "01101");
    expect_ve("[1.0]", 5, "01000");
}

/* Windows for pattern at depth with seq_len T, compared to expected[]. */
static void expect_windows(const char *pattern, int depth, int T, const int *expected) {
    char json[256];
    snprintf(json, sizeof json,
             "{\"model\":{\"depth\":%d,\"seq_len\":%d,\"window_pattern\":\"%s\"},"
             "\"train\":{\"batch_size\":1,\"total_batch_tokens\":%d}}",
             depth, T, pattern, T);
    spec_t s;
    parse_ok(json, &s);
    for (int i = 0; i < depth; i++)
        cr_expect_eq(s.model.window[i], expected[i], "%s depth %d: window[%d] = %d, want %d",
                     pattern, depth, i, s.model.window[i], expected[i]);
    spec_free(&s);
}

Test(spec, windows) {
    expect_windows("SSSL", 4, 256, (int[]){128, 128, 128, 256});
    expect_windows("SSSL", 5, 256, (int[]){128, 128, 128, 256, 256});
    expect_windows("SSSL", 6, 256, (int[]){128, 128, 128, 256, 128, 256});
    expect_windows("S", 1, 256, (int[]){256});
    expect_windows("s", 3, 256, (int[]){128, 128, 256});
    expect_windows("L", 3, 64, (int[]){64, 64, 64});
    expect_windows("sL", 5, 100, (int[]){50, 100, 50, 100, 100});
    expect_windows("LS", 4, 255, (int[]){255, 127, 255, 255});

    spec_t s;
    parse_ok("{\"model\":{\"window_pattern\":\"sLsL\"}}", &s);
    cr_expect_str_eq(s.model.window_pattern, "SLSL");
    spec_free(&s);
}

/* Every object in the tree has its keys in strictly increasing byte order. */
static void expect_sorted(const cJSON *node, const char *where) {
    const cJSON *prev = NULL;
    for (const cJSON *c = node->child; c; c = c->next) {
        if (cJSON_IsObject(node) && prev)
            cr_expect(strcmp(prev->string, c->string) < 0, "%s: \"%s\" before \"%s\"", where,
                      prev->string, c->string);
        prev = c;
        expect_sorted(c, c->string ? c->string : where);
    }
}

Test(spec, canonical_default_golden) {
    char *c = canonical_of("{}");
    cr_expect_str_eq(
        c,
        "{\"dataset\":\"default\",\"model\":{\"depth\":4,\"embed_dropout\":0,\"max_pos\":256,"
        "\"mlp\":\"relu2\",\"mlp_ratio\":4,\"n_embd\":128,\"n_head\":2,\"n_kv_head\":2,"
        "\"pos\":\"rope\",\"seq_len\":256,\"softcap\":15,\"tie_embeddings\":false,"
        "\"ve_gate_channels\":32,\"ve_layers\":\"alternate\",\"vocab_size\":0,"
        "\"window_pattern\":\"SSSL\"},\"name\":null,\"parent\":null,\"priority\":0,\"prune\":true,"
        "\"resources\":{\"memory_mb\":0,\"peak_gflops\":0,\"threads\":0},\"seed\":42,"
        "\"tags\":[],\"time_budget_s\":300,\"token_budget\":0,\"train\":{\"adam_betas\":[0.8,0.95],"
        "\"batch_size\":16,\"embedding_lr\":0.6,\"final_lr_frac\":0,\"matrix_lr\":0.04,"
        "\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,\"muon_momentum_start\":0.85,"
        "\"muon_momentum_steps\":300,\"ns_steps\":5,\"sampler\":\"random\",\"scalar_lr\":0.5,"
        "\"total_batch_tokens\":4096,\"unembedding_lr\":0.004,\"value_embedding_lr\":0.6,"
        "\"warmdown_ratio\":0.5,\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}");
    free(c);
}

Test(spec, canonical_round_trip) {
    static const char *const specs[] = {
        "{}",
        "{\"name\":\"tab\\there \\\"q\\\" \\u00e9\",\"tags\":[\"b\",\"a\"],\"seed\":0,"
        "\"priority\":-7,\"parent\":3,\"dataset\":\"brown-1.v2\",\"time_budget_s\":12.5}",
        "{\"model\":{\"vocab_size\":50257,\"depth\":6,\"n_embd\":384,\"n_head\":6,"
        "\"n_kv_head\":2,\"mlp_ratio\":2.6666666666666665,\"mlp\":\"geglu\",\"seq_len\":128,"
        "\"pos\":\"learned\",\"max_pos\":512,\"tie_embeddings\":true,\"embed_dropout\":0.1,"
        "\"softcap\":0,\"window_pattern\":\"ssl\",\"ve_layers\":[5,0,3],"
        "\"ve_gate_channels\":384},\"train\":{\"batch_size\":4,\"total_batch_tokens\":1024}}",
        "{\"train\":{\"matrix_lr\":0.1,\"embedding_lr\":0.30000000000000004,"
        "\"value_embedding_lr\":1e-7,\"unembedding_lr\":0.3333333333333333,\"scalar_lr\":2,"
        "\"weight_decay\":0,\"adam_betas\":[0,0.999],\"x0_beta1\":0.5,\"warmup_ratio\":0.25,"
        "\"warmdown_ratio\":0.75,\"final_lr_frac\":1,\"muon_momentum_start\":0.5,"
        "\"muon_momentum_end\":0.99,\"muon_momentum_steps\":0,\"ns_steps\":1,"
        "\"muon_beta2\":0},\"resources\":{\"threads\":2,\"memory_mb\":4096,"
        "\"peak_gflops\":123.456}}",
        "{\"seed\":9007199254740991,\"time_budget_s\":604800,\"model\":{\"ve_layers\":[]}}",
        "{\"token_budget\":1000000000000,\"train\":{\"sampler\":\"sequential\"}}",
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        char *c1 = canonical_of(specs[i]);
        char *c2 = canonical_of(c1);
        cr_expect_str_eq(c2, c1, "round trip of %s", specs[i]);

        /* Keys sorted at every level, every field present, no whitespace
         * outside strings (these specs have none inside their keys). */
        cJSON *root = cJSON_Parse(c1);
        cr_assert_not_null(root);
        expect_sorted(root, "root");
        cr_expect_eq(cJSON_GetArraySize(root), 12);
        cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, "model")), 16);
        cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, "train")), 19);
        cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, "resources")), 3);
        cr_expect_null(strchr(c1, '\n'));
        cJSON_Delete(root);
        free(c1);
        free(c2);
    }
}

Test(spec, canonical_equal_values_print_equal) {
    static const char *const same[][2] = {
        {"{\"model\":{\"mlp_ratio\":4}}", "{\"model\":{\"mlp_ratio\":4.0}}"},
        {"{\"model\":{\"mlp_ratio\":4}}", "{\"model\":{\"mlp_ratio\":40e-1}}"},
        {"{\"train\":{\"matrix_lr\":0.1}}", "{\"train\":{\"matrix_lr\":1e-1}}"},
        {"{\"model\":{\"embed_dropout\":0}}", "{\"model\":{\"embed_dropout\":-0.0}}"},
        {"{\"model\":{\"window_pattern\":\"sssl\"}}", "{}"},
        {"{\"model\":{\"ve_layers\":[2,0]}}", "{\"model\":{\"ve_layers\":[0,2]}}"},
        {"{\"model\":{\"n_head\":8,\"n_kv_head\":8}}", "{\"model\":{\"n_head\":8}}"},
        {"{\"parent\":null,\"name\":null,\"tags\":[]}", "{}"},
        {"{\"seed\":42,\"model\":{\"depth\":4.0}}", "{ \"model\" : { \"depth\" : 4 } }"},
        {"{\"train\":{\"adam_betas\":[0.8,0.95]}}", "{\"train\":{\"adam_betas\":[8e-1,0.950]}}"},
    };
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        char *a = canonical_of(same[i][0]), *b = canonical_of(same[i][1]);
        cr_expect_str_eq(a, b, "%s vs %s", same[i][0], same[i][1]);
        free(a);
        free(b);
    }
    /* And different values print differently. */
    char *a = canonical_of("{\"train\":{\"matrix_lr\":0.1}}");
    char *b = canonical_of("{\"train\":{\"matrix_lr\":0.10000000000000002}}");
    cr_expect_str_neq(a, b);
    cr_expect_not_null(strstr(a, "\"matrix_lr\":0.1,"));
    cr_expect_not_null(strstr(b, "\"matrix_lr\":0.10000000000000002,"));
    free(a);
    free(b);
    a = canonical_of("{\"model\":{\"ve_layers\":[2,0]},\"seed\":9007199254740991}");
    cr_expect_not_null(strstr(a, "\"ve_layers\":[0,2]"));
    cr_expect_not_null(strstr(a, "\"seed\":9007199254740991"));
    free(a);
    /* A list that selects what a name selects prints as the name. */
    a = canonical_of("{\"model\":{\"ve_layers\":[3,1]}}");
    b = canonical_of("{\"model\":{\"ve_layers\":\"alternate\"}}");
    cr_expect_str_eq(a, b);
    free(a);
    free(b);
    a = canonical_of("{\"model\":{\"ve_layers\":[]}}");
    cr_expect_not_null(strstr(a, "\"ve_layers\":\"none\""));
    free(a);
}

/* NIGHTSHIFT_SRC/experiments/<name>; the caller frees. */
static char *experiments_path(const char *name) {
    return tu_path("%s/experiments/specs%s%s", tu_src(), name ? "/" : "", name ? name : "");
}

Test(spec, experiments_files_validate) {
    char *dir_path = experiments_path(NULL);
    DIR *dir = opendir(dir_path);
    cr_assert_not_null(dir, "cannot open %s", dir_path);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".json")) continue;
        char *path = experiments_path(e->d_name), err[SPEC_ERR_LEN] = "";
        spec_t s;
        cr_expect_eq(spec_load(path, &s, err, sizeof err), 0, "%s: %s", e->d_name, err);
        char *c = spec_canonical_json(&s);
        cr_expect_not_null(c);
        free(c);
        spec_free(&s);
        free(path);
        n++;
    }
    closedir(dir);
    free(dir_path);
    cr_expect_geq(n, 3, "only %d example specs", n);
}

Test(spec, default_json_is_the_defaults) {
    char *path = experiments_path("default.json"), err[SPEC_ERR_LEN] = "";
    spec_t s;
    cr_assert_eq(spec_load(path, &s, err, sizeof err), 0, "%s", err);
    char *from_file = spec_canonical_json(&s);
    char *defaults = canonical_of("{\"name\":\"default\",\"tags\":[\"baseline\"]}");
    cr_expect_str_eq(from_file, defaults);
    free(from_file);
    free(defaults);
    spec_free(&s);
    free(path);
}

Test(spec, load_files) {
    char *dir = tu_tmpdir(), *path = tu_path("%s/a.json", dir), err[SPEC_ERR_LEN];
    spec_t s;

    tu_write(path, "{\"name\":\"from file\",\"model\":{\"depth\":2}}\n");
    cr_expect_eq(spec_load(path, &s, err, sizeof err), 0, "%s", err);
    cr_expect_str_eq(s.name, "from file");
    cr_expect_eq(s.model.depth, 2);
    spec_free(&s);

    /* Parse errors are reported as spec_parse reports them. */
    tu_write(path, "{\"model\":{\"n_embd\":128,\"n_head\":7}}");
    cr_expect_eq(spec_load(path, &s, err, sizeof err), NS_ERR_INVALID);
    cr_expect_str_eq(err, "model.n_head: 7 does not divide n_embd 128");

    /* Too large. */
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputc('{', f);
    for (int i = 0; i < SPEC_MAX_TEXT; i++) fputc(' ', f);
    fputc('}', f);
    fclose(f);
    cr_expect_eq(spec_load(path, &s, err, sizeof err), NS_ERR_IO);
    char want[PATH_MAX + 64];
    snprintf(want, sizeof want, "%s: larger than 1048576 bytes", path);
    cr_expect_str_eq(err, want);
    unlink(path);

    /* Missing. */
    cr_expect_eq(spec_load(path, &s, err, sizeof err), NS_ERR_IO);
    snprintf(want, sizeof want, "%s: No such file or directory", path);
    cr_expect_str_eq(err, want);
    cr_expect_eq(rmdir(dir), 0);
    free(path);
    free(dir);
}

Test(spec, validate_after_changes_by_hand) {
    char err[SPEC_ERR_LEN];
    spec_t s;
    parse_ok("{\"model\":{\"ve_layers\":[0,3]}}", &s);
    cr_expect_str_eq(s.model.ve_layers, "[0,3]");

    s.model.depth = 2;
    cr_expect_eq(spec_validate(&s, err, sizeof err), -1);
    cr_expect_str_eq(err, "model.ve_layers[1]: layer 3 out of range for depth 2");

    s.model.depth = 4;
    s.model.n_embd = 128;
    s.model.n_head = 7;
    cr_expect_eq(spec_validate(&s, err, sizeof err), -1);
    cr_expect_str_eq(err, "model.n_head: 7 does not divide n_embd 128");

    s.model.n_head = 8;
    s.model.n_kv_head = 8;
    strcpy(s.model.window_pattern, "ls");
    strcpy(s.model.ve_layers, "first_half");
    cr_expect_eq(spec_validate(&s, err, sizeof err), 0, "%s", err);
    cr_expect_eq(s.model.head_dim, 16);
    cr_expect_eq(s.model.mlp_hidden, 512);
    cr_expect_str_eq(s.model.window_pattern, "LS");
    cr_expect(s.model.has_ve[0] && s.model.has_ve[1] && !s.model.has_ve[2]);

    strcpy(s.model.ve_layers, "[1,x]");
    cr_expect_eq(spec_validate(&s, err, sizeof err), -1);
    cr_expect_str_eq(err, "model.ve_layers: \"[1,x]\" is not alternate, all, none, first_half, "
                          "last_half or a list");
    strcpy(s.model.ve_layers, "alternate");

    s.model.mlp = (spec_mlp_kind)9;
    cr_expect_eq(spec_validate(&s, err, sizeof err), -1);
    cr_expect_str_eq(err, "model.mlp: unknown kind 9");
    s.model.mlp = MLP_SWIGLU;

    s.train.sampler = (spec_sampler_kind)5;
    cr_expect_eq(spec_validate(&s, err, sizeof err), -1);
    cr_expect_str_eq(err, "train.sampler: unknown kind 5");
    s.train.sampler = SAMPLER_SEQUENTIAL;

    s.seed = 1ULL << 60;
    cr_expect_eq(spec_validate(&s, err, sizeof err), -1);
    cr_expect_str_eq(err, "seed: must be in [0, 9007199254740991], got 1152921504606846976");
    s.seed = 1;
    cr_expect_eq(spec_validate(&s, err, sizeof err), 0, "%s", err);
    spec_free(&s);
}

Test(spec, copy_free_and_names) {
    spec_t a, b;
    parse_ok("{\"name\":\"orig\",\"tags\":[\"x\",\"y\"]}", &a);
    cr_assert_eq(spec_copy(&b, &a), 0);
    cr_expect_neq(a.name, b.name);
    cr_expect_neq(a.tags[1], b.tags[1]);
    a.name[0] = 'O';
    cr_expect_str_eq(b.name, "orig");
    cr_expect_str_eq(b.tags[1], "y");
    spec_free(&a);
    spec_free(&a); /* idempotent */
    char *c = spec_canonical_json(&b);
    cr_expect_not_null(strstr(c, "\"name\":\"orig\""));
    cr_expect_not_null(strstr(c, "\"tags\":[\"x\",\"y\"]"));
    free(c);
    spec_free(&b);

    cr_expect_str_eq(spec_mlp_name(MLP_RELU2), "relu2");
    cr_expect_str_eq(spec_mlp_name(MLP_GELU), "gelu");
    cr_expect_str_eq(spec_mlp_name(MLP_SWIGLU), "swiglu");
    cr_expect_str_eq(spec_mlp_name(MLP_GEGLU), "geglu");
    cr_expect_str_eq(spec_pos_name(POS_ROPE), "rope");
    cr_expect_str_eq(spec_pos_name(POS_LEARNED), "learned");
}

/* One budget in the canonical form: a token budget without time_budget_s
 * makes time_budget_s 0; an explicit 0 beside it is the same spec. */
Test(spec, budget_canonical_form) {
    spec_t s;
    parse_ok("{\"token_budget\":5000}", &s);
    cr_expect_eq(s.time_budget_s, 0);
    cr_expect_eq(s.token_budget, 5000);
    spec_free(&s);

    char *a = canonical_of("{\"token_budget\":5000}");
    char *b = canonical_of("{\"time_budget_s\":0,\"token_budget\":5000}");
    char *c = canonical_of("{\"token_budget\":5e3,\"time_budget_s\":0.0}");
    cr_expect_str_eq(a, b);
    cr_expect_str_eq(a, c);
    cr_expect(strstr(a, "\"time_budget_s\":0,\"token_budget\":5000,"), "%s", a);

    /* A time budget: token_budget 0 given or not is the same spec. */
    char *d = canonical_of("{\"time_budget_s\":60}");
    char *e = canonical_of("{\"time_budget_s\":60,\"token_budget\":0}");
    cr_expect_str_eq(d, e);
    cr_expect(strstr(d, "\"time_budget_s\":60,\"token_budget\":0,"), "%s", d);
    free(a);
    free(b);
    free(c);
    free(d);
    free(e);

    /* The sampler prints by name. */
    char *f = canonical_of("{\"train\":{\"sampler\":\"sequential\"}}");
    cr_expect(strstr(f, "\"sampler\":\"sequential\""), "%s", f);
    free(f);

    /* Changed by hand, the rules are the same. */
    char err[SPEC_ERR_LEN];
    parse_ok("{}", &s);
    s.token_budget = 100;
    cr_expect_eq(spec_validate(&s, err, sizeof err), -1);
    cr_expect(strstr(err, "time_budget_s") && strstr(err, "token_budget"), "%s", err);
    s.time_budget_s = 0;
    cr_expect_eq(spec_validate(&s, err, sizeof err), 0, "%s", err);
    spec_free(&s);
}

/* Fields without a natural bound have one: a budget of 1e17 s overflowed the
 * worker's deadline, and an agent re-proposing it ran 37 experiments in 2 s. */
Test(spec, upper_bounds) {
    static const error_case cases[] = {
        {"{\"time_budget_s\":1e17}", "time_budget_s: must be in [0, 604800] (a week), got 1e+17"},
        {"{\"time_budget_s\":604801}",
         "time_budget_s: must be in [0, 604800] (a week), got 604801"},
        {"{\"train\":{\"matrix_lr\":1e300}}", "train.matrix_lr: must be at most 1e+06, got 1e+300"},
        {"{\"train\":{\"embedding_lr\":2e6}}",
         "train.embedding_lr: must be at most 1e+06, got 2e+06"},
        {"{\"train\":{\"value_embedding_lr\":2e6}}",
         "train.value_embedding_lr: must be at most 1e+06, got 2e+06"},
        {"{\"train\":{\"unembedding_lr\":2e6}}",
         "train.unembedding_lr: must be at most 1e+06, got 2e+06"},
        {"{\"train\":{\"scalar_lr\":2e6}}", "train.scalar_lr: must be at most 1e+06, got 2e+06"},
        {"{\"train\":{\"weight_decay\":2e6}}",
         "train.weight_decay: must be at most 1e+06, got 2e+06"},
        {"{\"model\":{\"softcap\":1e7}}", "model.softcap: must be at most 1e+06, got 1e+07"},
        {"{\"resources\":{\"peak_gflops\":1e10}}",
         "resources.peak_gflops: must be at most 1e+09, got 1e+10"},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
    spec_t s;
    parse_ok("{\"time_budget_s\":604800}", &s);
    cr_expect_eq(s.time_budget_s, 604800);
    spec_free(&s);
}

/* Golden canonical forms, recorded once as literals: the canonical JSON,
 * spec_hash and spec_config_hash of varied specs, among them every example
 * under experiments/ and every parity fixture's spec.json as they were when
 * this was recorded (copied here, so an edit of an example does not move
 * them). The daemon stores spec_config_hash, ranks configurations by it and
 * deduplicates new submissions against it and the seed, so if any of these
 * changes, stored experiments stop matching new ones: fix the code, never
 * these strings. The configuration hashes replaced spec_identity's when the
 * daemon's two identities became one (schema/009): each is the SHA-256 of the
 * canonical JSON without the labels and the seed, which is what the store's
 * config_hash was before, except where an equivalent spelling is now written
 * one way (window_pattern "sLl" at depth 4, the default "SSSL" at depths 3
 * and 6, max_pos 1024 with rope). */
typedef struct {
    const char *spec, *canonical, *hash, *config;
} golden_case;

static const golden_case golden[] = {
    {"{}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":4,\"embed_dropout\":0,"
     "\"max_pos\":256,\"mlp\":\"relu2\",\"mlp_ratio\":4,"
     "\"n_embd\":128,\"n_head\":2,\"n_kv_head\":2,\"pos\":\"rope\","
     "\"seq_len\":256,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":32,\"ve_layers\":\"alternate\","
     "\"vocab_size\":0,\"window_pattern\":\"SSSL\"},\"name\":null,"
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[],"
     "\"time_budget_s\":300,\"token_budget\":0,\"train\":{\"adam_betas\":[0.8,"
     "0.95],\"batch_size\":16,\"embedding_lr\":0.6,\"final_lr_frac\":0,"
     "\"matrix_lr\":0.04,\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,"
     "\"muon_momentum_start\":0.85,\"muon_momentum_steps\":300,"
     "\"ns_steps\":5,\"sampler\":\"random\",\"scalar_lr\":0.5,"
     "\"total_batch_tokens\":4096,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "53a06c2b6ac36f18cfc7b79391670a10ff6af2da6ba18e322815f1123d1542d4",
     "5e38df4da4a532b17cbe01935530fd50e5fa952a274cceb3290943f38724efa7"},
    {"{\"name\":\"tab\\there \\\"q\\\" \\u00e9\",\"tags\":[\"b\","
     "\"a\"],\"seed\":0,\"priority\":-7,\"parent\":3,\"dataset\":\"brown-1.v2\","
     "\"time_budget_s\":12.5}",
     "{\"dataset\":\"brown-1.v2\",\"model\":{\"depth\":4,"
     "\"embed_dropout\":0,\"max_pos\":256,\"mlp\":\"relu2\","
     "\"mlp_ratio\":4,\"n_embd\":128,\"n_head\":2,\"n_kv_head\":2,"
     "\"pos\":\"rope\",\"seq_len\":256,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":32,\"ve_layers\":\"alternate\","
     "\"vocab_size\":0,\"window_pattern\":\"SSSL\"},\"name\":\"tab\\there \\\"q\\\" \303\251\","
     "\"parent\":3,\"priority\":-7,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":0,\"tags\":[\"b\","
     "\"a\"],\"time_budget_s\":12.5,\"token_budget\":0,"
     "\"train\":{\"adam_betas\":[0.8,0.95],\"batch_size\":16,"
     "\"embedding_lr\":0.6,\"final_lr_frac\":0,\"matrix_lr\":0.04,"
     "\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,\"muon_momentum_start\":0.85,"
     "\"muon_momentum_steps\":300,\"ns_steps\":5,\"sampler\":\"random\","
     "\"scalar_lr\":0.5,\"total_batch_tokens\":4096,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "adc8b59066d1fa1681e7ad0d3c64c0bd059f600947ecb6e01537dfbae3754e4e",
     "d0ee4bd172a87e9a54ca461fe648884700807a6a676d08e095efe0e95cf6fb91"},
    {"{\"model\":{\"vocab_size\":50257,\"depth\":6,\"n_embd\":384,"
     "\"n_head\":6,\"n_kv_head\":2,\"mlp_ratio\":2.6666666666666665,"
     "\"mlp\":\"geglu\",\"seq_len\":128,\"pos\":\"learned\","
     "\"max_pos\":512,\"tie_embeddings\":true,\"embed_dropout\":0.1,"
     "\"softcap\":0,\"window_pattern\":\"ssl\",\"ve_layers\":[5,"
     "0,3],\"ve_gate_channels\":384},\"train\":{\"batch_size\":4,"
     "\"total_batch_tokens\":1024}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":6,\"embed_dropout\":0.1,"
     "\"max_pos\":512,\"mlp\":\"geglu\",\"mlp_ratio\":2.6666666666666665,"
     "\"n_embd\":384,\"n_head\":6,\"n_kv_head\":2,\"pos\":\"learned\","
     "\"seq_len\":128,\"softcap\":0,\"tie_embeddings\":true,"
     "\"ve_gate_channels\":384,\"ve_layers\":[0,3,5],\"vocab_size\":50257,"
     "\"window_pattern\":\"SSL\"},\"name\":null,\"parent\":null,"
     "\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[],"
     "\"time_budget_s\":300,\"token_budget\":0,\"train\":{\"adam_betas\":[0.8,"
     "0.95],\"batch_size\":4,\"embedding_lr\":0.6,\"final_lr_frac\":0,"
     "\"matrix_lr\":0.04,\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,"
     "\"muon_momentum_start\":0.85,\"muon_momentum_steps\":300,"
     "\"ns_steps\":5,\"sampler\":\"random\",\"scalar_lr\":0.5,"
     "\"total_batch_tokens\":1024,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "e2f8218de185ed079d3719d89f34e7ba11f532a5cee93e1bdbf934b1c34dbc5b",
     "aaa83b444d6ada96fffeecc425dfc1ad5e2fbe0522a4412bea9ba4218d463e2e"},
    {"{\"train\":{\"matrix_lr\":0.1,\"embedding_lr\":0.30000000000000004,"
     "\"value_embedding_lr\":1e-7,\"unembedding_lr\":0.3333333333333333,"
     "\"scalar_lr\":2,\"weight_decay\":0,\"adam_betas\":[0,"
     "0.999],\"x0_beta1\":0.5,\"warmup_ratio\":0.25,\"warmdown_ratio\":0.75,"
     "\"final_lr_frac\":1,\"muon_momentum_start\":0.5,\"muon_momentum_end\":0.99,"
     "\"muon_momentum_steps\":0,\"ns_steps\":1,\"muon_beta2\":0},"
     "\"resources\":{\"threads\":2,\"memory_mb\":4096,\"peak_gflops\":123.456}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":4,\"embed_dropout\":0,"
     "\"max_pos\":256,\"mlp\":\"relu2\",\"mlp_ratio\":4,"
     "\"n_embd\":128,\"n_head\":2,\"n_kv_head\":2,\"pos\":\"rope\","
     "\"seq_len\":256,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":32,\"ve_layers\":\"alternate\","
     "\"vocab_size\":0,\"window_pattern\":\"SSSL\"},\"name\":null,"
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":4096,"
     "\"peak_gflops\":123.456,\"threads\":2},\"seed\":42,"
     "\"tags\":[],\"time_budget_s\":300,\"token_budget\":0,"
     "\"train\":{\"adam_betas\":[0,0.999],\"batch_size\":16,"
     "\"embedding_lr\":0.30000000000000004,\"final_lr_frac\":1,"
     "\"matrix_lr\":0.1,\"muon_beta2\":0,\"muon_momentum_end\":0.99,"
     "\"muon_momentum_start\":0.5,\"muon_momentum_steps\":0,"
     "\"ns_steps\":1,\"sampler\":\"random\",\"scalar_lr\":2,"
     "\"total_batch_tokens\":4096,\"unembedding_lr\":0.3333333333333333,"
     "\"value_embedding_lr\":1e-07,\"warmdown_ratio\":0.75,"
     "\"warmup_ratio\":0.25,\"weight_decay\":0,\"x0_beta1\":0.5}}",
     "d53ac5ac37f7e3125e6a37324917bcd407808b11ac584e02e8332bb842b38c83",
     "6f5082f49c60ae6a8d0b2528e7b3cee1af959fc13f3b1356e47f150ce263031d"},
    {"{\"seed\":9007199254740991,\"time_budget_s\":604800,"
     "\"model\":{\"ve_layers\":[]}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":4,\"embed_dropout\":0,"
     "\"max_pos\":256,\"mlp\":\"relu2\",\"mlp_ratio\":4,"
     "\"n_embd\":128,\"n_head\":2,\"n_kv_head\":2,\"pos\":\"rope\","
     "\"seq_len\":256,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":32,\"ve_layers\":\"none\",\"vocab_size\":0,"
     "\"window_pattern\":\"SSSL\"},\"name\":null,\"parent\":null,"
     "\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":9007199254740991,"
     "\"tags\":[],\"time_budget_s\":604800,\"token_budget\":0,"
     "\"train\":{\"adam_betas\":[0.8,0.95],\"batch_size\":16,"
     "\"embedding_lr\":0.6,\"final_lr_frac\":0,\"matrix_lr\":0.04,"
     "\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,\"muon_momentum_start\":0.85,"
     "\"muon_momentum_steps\":300,\"ns_steps\":5,\"sampler\":\"random\","
     "\"scalar_lr\":0.5,\"total_batch_tokens\":4096,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "4371920ce37b4d620b8f9c7a1bfbc359205cd1da58e3a5a67876548b8dd8879c",
     "8dcd6d3c25a4765b59587e0531e405e7348db670ae409e4e4b6fc3ccbccd7d1d"},
    {"{\"token_budget\":1000000000000,\"train\":{\"sampler\":\"sequential\"}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":4,\"embed_dropout\":0,"
     "\"max_pos\":256,\"mlp\":\"relu2\",\"mlp_ratio\":4,"
     "\"n_embd\":128,\"n_head\":2,\"n_kv_head\":2,\"pos\":\"rope\","
     "\"seq_len\":256,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":32,\"ve_layers\":\"alternate\","
     "\"vocab_size\":0,\"window_pattern\":\"SSSL\"},\"name\":null,"
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[],"
     "\"time_budget_s\":0,\"token_budget\":1000000000000,"
     "\"train\":{\"adam_betas\":[0.8,0.95],\"batch_size\":16,"
     "\"embedding_lr\":0.6,\"final_lr_frac\":0,\"matrix_lr\":0.04,"
     "\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,\"muon_momentum_start\":0.85,"
     "\"muon_momentum_steps\":300,\"ns_steps\":5,\"sampler\":\"sequential\","
     "\"scalar_lr\":0.5,\"total_batch_tokens\":4096,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "f0eba4ee6ecd86442b70226194c65a0fd0079c942739a3f6fec2ce6651b89bb2",
     "abd3b51ad2a2d0ed837aafc098f68ba3b14c62df1666a2e64b930121daf281f6"},
    {"{\"token_budget\":5e3,\"time_budget_s\":0.0,\"prune\":false,"
     "\"model\":{\"n_head\":8,\"window_pattern\":\"sLl\","
     "\"embed_dropout\":-0.0,\"mlp_ratio\":40e-1}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":4,\"embed_dropout\":0,"
     "\"max_pos\":256,\"mlp\":\"relu2\",\"mlp_ratio\":4,"
     "\"n_embd\":128,\"n_head\":8,\"n_kv_head\":8,\"pos\":\"rope\","
     "\"seq_len\":256,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":32,\"ve_layers\":\"alternate\","
     "\"vocab_size\":0,\"window_pattern\":\"SLL\"},\"name\":null,"
     "\"parent\":null,\"priority\":0,\"prune\":false,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[],"
     "\"time_budget_s\":0,\"token_budget\":5000,\"train\":{\"adam_betas\":[0.8,"
     "0.95],\"batch_size\":16,\"embedding_lr\":0.6,\"final_lr_frac\":0,"
     "\"matrix_lr\":0.04,\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,"
     "\"muon_momentum_start\":0.85,\"muon_momentum_steps\":300,"
     "\"ns_steps\":5,\"sampler\":\"random\",\"scalar_lr\":0.5,"
     "\"total_batch_tokens\":4096,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "29b09a66467347ca22e41e49af05047b284ecce46e9502c48bab4f6af747799f",
     "3728bf1fd7d4c00ffcf6aa1eff922dab81c05431fd7706c8d7553919576caea9"},
    {"{\"model\":{\"depth\":6,\"ve_layers\":[5,1,3]}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":6,\"embed_dropout\":0,"
     "\"max_pos\":256,\"mlp\":\"relu2\",\"mlp_ratio\":4,"
     "\"n_embd\":128,\"n_head\":2,\"n_kv_head\":2,\"pos\":\"rope\","
     "\"seq_len\":256,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":32,\"ve_layers\":\"alternate\","
     "\"vocab_size\":0,\"window_pattern\":\"SSSL\"},\"name\":null,"
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[],"
     "\"time_budget_s\":300,\"token_budget\":0,\"train\":{\"adam_betas\":[0.8,"
     "0.95],\"batch_size\":16,\"embedding_lr\":0.6,\"final_lr_frac\":0,"
     "\"matrix_lr\":0.04,\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,"
     "\"muon_momentum_start\":0.85,\"muon_momentum_steps\":300,"
     "\"ns_steps\":5,\"sampler\":\"random\",\"scalar_lr\":0.5,"
     "\"total_batch_tokens\":4096,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "16d3e422ab51ec882b81b74c646fdac4908aa51696ed1b2bc80eb1f061386cfa",
     "070a5d1348e14e62865fada11e9d5aa60ca3c3bb1361d6d7870baf4b1bc168ae"},
    {"{\"model\":{\"depth\":6,\"ve_layers\":[4,0]}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":6,\"embed_dropout\":0,"
     "\"max_pos\":256,\"mlp\":\"relu2\",\"mlp_ratio\":4,"
     "\"n_embd\":128,\"n_head\":2,\"n_kv_head\":2,\"pos\":\"rope\","
     "\"seq_len\":256,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":32,\"ve_layers\":[0,4],\"vocab_size\":0,"
     "\"window_pattern\":\"SSSL\"},\"name\":null,\"parent\":null,"
     "\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[],"
     "\"time_budget_s\":300,\"token_budget\":0,\"train\":{\"adam_betas\":[0.8,"
     "0.95],\"batch_size\":16,\"embedding_lr\":0.6,\"final_lr_frac\":0,"
     "\"matrix_lr\":0.04,\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,"
     "\"muon_momentum_start\":0.85,\"muon_momentum_steps\":300,"
     "\"ns_steps\":5,\"sampler\":\"random\",\"scalar_lr\":0.5,"
     "\"total_batch_tokens\":4096,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "42c7c23f49f00a8cf119d354d28c9529447c4e2fc125ce6f05cdf0bf06f834e2",
     "7ea8ec082da4c44fe6f539b2447f55c7853a7ff03b0e364bc6092e045deabb06"},
    {"{\"model\":{\"seq_len\":2048,\"max_pos\":1024},\"train\":{\"total_batch_tokens\":32768}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":4,\"embed_dropout\":0,"
     "\"max_pos\":1024,\"mlp\":\"relu2\",\"mlp_ratio\":4,"
     "\"n_embd\":128,\"n_head\":2,\"n_kv_head\":2,\"pos\":\"rope\","
     "\"seq_len\":2048,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":32,\"ve_layers\":\"alternate\","
     "\"vocab_size\":0,\"window_pattern\":\"SSSL\"},\"name\":null,"
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[],"
     "\"time_budget_s\":300,\"token_budget\":0,\"train\":{\"adam_betas\":[0.8,"
     "0.95],\"batch_size\":16,\"embedding_lr\":0.6,\"final_lr_frac\":0,"
     "\"matrix_lr\":0.04,\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,"
     "\"muon_momentum_start\":0.85,\"muon_momentum_steps\":300,"
     "\"ns_steps\":5,\"sampler\":\"random\",\"scalar_lr\":0.5,"
     "\"total_batch_tokens\":32768,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "b3be4c9e6609783de4605eeadd7a89360a1a5a8ac851aebf1a394074988ccc3d",
     "07f8ceb7a77d23e4b3c91789bd71a8693410010b3178ef0b0d28506755b40f4b"},
    {"{\"train\":{\"matrix_lr\":0.10000000000000002,\"scalar_lr\":1e-300,"
     "\"weight_decay\":1e6},\"resources\":{\"peak_gflops\":1e9,"
     "\"threads\":1024,\"memory_mb\":2147483647}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":4,\"embed_dropout\":0,"
     "\"max_pos\":256,\"mlp\":\"relu2\",\"mlp_ratio\":4,"
     "\"n_embd\":128,\"n_head\":2,\"n_kv_head\":2,\"pos\":\"rope\","
     "\"seq_len\":256,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":32,\"ve_layers\":\"alternate\","
     "\"vocab_size\":0,\"window_pattern\":\"SSSL\"},\"name\":null,"
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":2147483647,"
     "\"peak_gflops\":1000000000,\"threads\":1024},\"seed\":42,"
     "\"tags\":[],\"time_budget_s\":300,\"token_budget\":0,"
     "\"train\":{\"adam_betas\":[0.8,0.95],\"batch_size\":16,"
     "\"embedding_lr\":0.6,\"final_lr_frac\":0,\"matrix_lr\":0.10000000000000002,"
     "\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,\"muon_momentum_start\":0.85,"
     "\"muon_momentum_steps\":300,\"ns_steps\":5,\"sampler\":\"random\","
     "\"scalar_lr\":1e-300,\"total_batch_tokens\":4096,"
     "\"unembedding_lr\":0.004,\"value_embedding_lr\":0.6,"
     "\"warmdown_ratio\":0.5,\"warmup_ratio\":0,\"weight_decay\":1000000,"
     "\"x0_beta1\":0.96}}",
     "d9b26af0009fac5483c95cda15995414a6d5d332eb9dff52198ff77670de3d65",
     "17dece26b0eee18633ab0a990b79ee5e017632cbc05de34fafa969d32a3f6996"},
    {"{\"name\":\"h\\u00e9llo \\u2603 \\ud83d\\ude00\","
     "\"tags\":[\"x\",\"y\",\"z\"],\"model\":{\"depth\":64,"
     "\"n_embd\":64,\"n_head\":1,\"n_kv_head\":1,\"ve_layers\":\"first_half\","
     "\"window_pattern\":\"SSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSL\"}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":64,"
     "\"embed_dropout\":0,\"max_pos\":256,\"mlp\":\"relu2\","
     "\"mlp_ratio\":4,\"n_embd\":64,\"n_head\":1,\"n_kv_head\":1,"
     "\"pos\":\"rope\",\"seq_len\":256,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":32,\"ve_layers\":\"first_half\","
     "\"vocab_size\":0,\"window_pattern\":\"SSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSS"
     "SSSSSSSSSSSL\"},\"name\":\"h\303\251llo \342\230\203 \360\237\230\200\","
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[\"x\","
     "\"y\",\"z\"],\"time_budget_s\":300,\"token_budget\":0,"
     "\"train\":{\"adam_betas\":[0.8,0.95],\"batch_size\":16,"
     "\"embedding_lr\":0.6,\"final_lr_frac\":0,\"matrix_lr\":0.04,"
     "\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,\"muon_momentum_start\":0.85,"
     "\"muon_momentum_steps\":300,\"ns_steps\":5,\"sampler\":\"random\","
     "\"scalar_lr\":0.5,\"total_batch_tokens\":4096,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "3207c4820e68d81d38640c420659e430bf4620c8a71eea5274aea58965cb3d62",
     "3393fe3b210e674488504d67d130327a3b5efc62476eee5ecc20882f6dd71bc1"},
    /* experiments/specs/baseline.json */
    {"{\"name\":\"baseline\",\"tags\":[\"baseline\"],\"seed\":42,"
     "\"dataset\":\"default\",\"time_budget_s\":300,\"model\":{\"depth\":4,"
     "\"n_embd\":128,\"n_head\":2,\"n_kv_head\":2,\"mlp\":\"relu2\","
     "\"mlp_ratio\":4,\"seq_len\":256,\"window_pattern\":\"SSSL\","
     "\"ve_layers\":\"alternate\",\"ve_gate_channels\":32},"
     "\"train\":{\"batch_size\":16,\"total_batch_tokens\":4096}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":4,\"embed_dropout\":0,"
     "\"max_pos\":256,\"mlp\":\"relu2\",\"mlp_ratio\":4,"
     "\"n_embd\":128,\"n_head\":2,\"n_kv_head\":2,\"pos\":\"rope\","
     "\"seq_len\":256,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":32,\"ve_layers\":\"alternate\","
     "\"vocab_size\":0,\"window_pattern\":\"SSSL\"},\"name\":\"baseline\","
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[\"baseline\"],"
     "\"time_budget_s\":300,\"token_budget\":0,\"train\":{\"adam_betas\":[0.8,"
     "0.95],\"batch_size\":16,\"embedding_lr\":0.6,\"final_lr_frac\":0,"
     "\"matrix_lr\":0.04,\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,"
     "\"muon_momentum_start\":0.85,\"muon_momentum_steps\":300,"
     "\"ns_steps\":5,\"sampler\":\"random\",\"scalar_lr\":0.5,"
     "\"total_batch_tokens\":4096,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "eeefc1d1bd0694b075dfbef25afdc4c1c298eb6fc693fb82b708b986b58a482c",
     "5e38df4da4a532b17cbe01935530fd50e5fa952a274cceb3290943f38724efa7"},
    /* experiments/specs/deep_narrow.json */
    {"{\"name\":\"deep-narrow\",\"tags\":[\"depth\"],\"model\":{\"depth\":8,"
     "\"n_embd\":128,\"n_head\":2,\"mlp\":\"geglu\",\"window_pattern\":\"SL\","
     "\"ve_layers\":[1,3,5,7]},\"train\":{\"batch_size\":8,"
     "\"total_batch_tokens\":8192,\"warmup_ratio\":0.05}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":8,\"embed_dropout\":0,"
     "\"max_pos\":256,\"mlp\":\"geglu\",\"mlp_ratio\":4,"
     "\"n_embd\":128,\"n_head\":2,\"n_kv_head\":2,\"pos\":\"rope\","
     "\"seq_len\":256,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":32,\"ve_layers\":\"alternate\","
     "\"vocab_size\":0,\"window_pattern\":\"SL\"},\"name\":\"deep-narrow\","
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[\"depth\"],"
     "\"time_budget_s\":300,\"token_budget\":0,\"train\":{\"adam_betas\":[0.8,"
     "0.95],\"batch_size\":8,\"embedding_lr\":0.6,\"final_lr_frac\":0,"
     "\"matrix_lr\":0.04,\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,"
     "\"muon_momentum_start\":0.85,\"muon_momentum_steps\":300,"
     "\"ns_steps\":5,\"sampler\":\"random\",\"scalar_lr\":0.5,"
     "\"total_batch_tokens\":8192,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0.05,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "f44a22e597bfa7e2e28516276eba7ba9459226c27d9f458ea751d8ded62ac36f",
     "109ed765cf80b2846f491221c79bbd71bcfb3fac2b2ce3bae052d5d87c44983a"},
    /* experiments/specs/default.json */
    {"{\"name\":\"default\",\"tags\":[\"baseline\"],\"seed\":42,"
     "\"priority\":0,\"parent\":null,\"dataset\":\"default\","
     "\"time_budget_s\":300,\"token_budget\":0,\"prune\":true,"
     "\"model\":{\"vocab_size\":0,\"depth\":4,\"n_embd\":128,"
     "\"n_head\":2,\"n_kv_head\":2,\"mlp_ratio\":4,\"mlp\":\"relu2\","
     "\"seq_len\":256,\"pos\":\"rope\",\"max_pos\":256,"
     "\"tie_embeddings\":false,\"embed_dropout\":0,\"softcap\":15,"
     "\"window_pattern\":\"SSSL\",\"ve_layers\":\"alternate\","
     "\"ve_gate_channels\":32},\"train\":{\"batch_size\":16,"
     "\"total_batch_tokens\":4096,\"matrix_lr\":0.04,\"embedding_lr\":0.6,"
     "\"value_embedding_lr\":0.6,\"unembedding_lr\":0.004,"
     "\"scalar_lr\":0.5,\"weight_decay\":0.2,\"adam_betas\":[0.8,"
     "0.95],\"x0_beta1\":0.96,\"warmup_ratio\":0,\"warmdown_ratio\":0.5,"
     "\"final_lr_frac\":0,\"muon_momentum_start\":0.85,"
     "\"muon_momentum_end\":0.95,\"muon_momentum_steps\":300,"
     "\"ns_steps\":5,\"muon_beta2\":0.95,\"sampler\":\"random\"},"
     "\"resources\":{\"threads\":0,\"memory_mb\":0,\"peak_gflops\":0}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":4,\"embed_dropout\":0,"
     "\"max_pos\":256,\"mlp\":\"relu2\",\"mlp_ratio\":4,"
     "\"n_embd\":128,\"n_head\":2,\"n_kv_head\":2,\"pos\":\"rope\","
     "\"seq_len\":256,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":32,\"ve_layers\":\"alternate\","
     "\"vocab_size\":0,\"window_pattern\":\"SSSL\"},\"name\":\"default\","
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[\"baseline\"],"
     "\"time_budget_s\":300,\"token_budget\":0,\"train\":{\"adam_betas\":[0.8,"
     "0.95],\"batch_size\":16,\"embedding_lr\":0.6,\"final_lr_frac\":0,"
     "\"matrix_lr\":0.04,\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,"
     "\"muon_momentum_start\":0.85,\"muon_momentum_steps\":300,"
     "\"ns_steps\":5,\"sampler\":\"random\",\"scalar_lr\":0.5,"
     "\"total_batch_tokens\":4096,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "8d545428672e746890f99f73bffe2d658a237c4e41b34d4750644051abdbdbe8",
     "5e38df4da4a532b17cbe01935530fd50e5fa952a274cceb3290943f38724efa7"},
    /* experiments/specs/gqa_swiglu.json */
    {"{\"name\":\"gqa-swiglu\",\"tags\":[\"gqa\",\"mlp\"],"
     "\"model\":{\"n_head\":4,\"n_kv_head\":2,\"mlp\":\"swiglu\","
     "\"mlp_ratio\":2.5}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":4,\"embed_dropout\":0,"
     "\"max_pos\":256,\"mlp\":\"swiglu\",\"mlp_ratio\":2.5,"
     "\"n_embd\":128,\"n_head\":4,\"n_kv_head\":2,\"pos\":\"rope\","
     "\"seq_len\":256,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":32,\"ve_layers\":\"alternate\","
     "\"vocab_size\":0,\"window_pattern\":\"SSSL\"},\"name\":\"gqa-swiglu\","
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[\"gqa\","
     "\"mlp\"],\"time_budget_s\":300,\"token_budget\":0,"
     "\"train\":{\"adam_betas\":[0.8,0.95],\"batch_size\":16,"
     "\"embedding_lr\":0.6,\"final_lr_frac\":0,\"matrix_lr\":0.04,"
     "\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,\"muon_momentum_start\":0.85,"
     "\"muon_momentum_steps\":300,\"ns_steps\":5,\"sampler\":\"random\","
     "\"scalar_lr\":0.5,\"total_batch_tokens\":4096,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "a5791004ae64e9bf0c9ce24b55b0430a5dfd64ec001ecb6c3f9266f3863c9c03",
     "eb77ed05152b761128d2e4965f8a808dfb84b10f8f99225217b87b56d4dbff80"},
    /* experiments/specs/learned_pos_tied.json */
    {"{\"name\":\"learned-pos-tied\",\"tags\":[\"positions\","
     "\"tied\"],\"model\":{\"pos\":\"learned\",\"max_pos\":512,"
     "\"tie_embeddings\":true,\"ve_layers\":\"none\",\"embed_dropout\":0.1},"
     "\"train\":{\"embedding_lr\":0.3}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":4,\"embed_dropout\":0.1,"
     "\"max_pos\":512,\"mlp\":\"relu2\",\"mlp_ratio\":4,"
     "\"n_embd\":128,\"n_head\":2,\"n_kv_head\":2,\"pos\":\"learned\","
     "\"seq_len\":256,\"softcap\":15,\"tie_embeddings\":true,"
     "\"ve_gate_channels\":32,\"ve_layers\":\"none\",\"vocab_size\":0,"
     "\"window_pattern\":\"SSSL\"},\"name\":\"learned-pos-tied\","
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[\"positions\","
     "\"tied\"],\"time_budget_s\":300,\"token_budget\":0,"
     "\"train\":{\"adam_betas\":[0.8,0.95],\"batch_size\":16,"
     "\"embedding_lr\":0.3,\"final_lr_frac\":0,\"matrix_lr\":0.04,"
     "\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,\"muon_momentum_start\":0.85,"
     "\"muon_momentum_steps\":300,\"ns_steps\":5,\"sampler\":\"random\","
     "\"scalar_lr\":0.5,\"total_batch_tokens\":4096,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "9e5fbc5e368f9a088715166f88452eba8bec63293c4b068579463132b3fa872f",
     "318c08f11c00663edb3268ebec5da9939d42e5fd8dcd5302e9b44e5a2203eccd"},
    /* experiments/specs/long_context.json */
    {"{\"name\":\"long-context\",\"tags\":[\"context\","
     "\"attention\"],\"model\":{\"seq_len\":512,\"window_pattern\":\"SSSL\"},"
     "\"train\":{\"batch_size\":8,\"total_batch_tokens\":4096}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":4,\"embed_dropout\":0,"
     "\"max_pos\":512,\"mlp\":\"relu2\",\"mlp_ratio\":4,"
     "\"n_embd\":128,\"n_head\":2,\"n_kv_head\":2,\"pos\":\"rope\","
     "\"seq_len\":512,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":32,\"ve_layers\":\"alternate\","
     "\"vocab_size\":0,\"window_pattern\":\"SSSL\"},\"name\":\"long-context\","
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[\"context\","
     "\"attention\"],\"time_budget_s\":300,\"token_budget\":0,"
     "\"train\":{\"adam_betas\":[0.8,0.95],\"batch_size\":8,"
     "\"embedding_lr\":0.6,\"final_lr_frac\":0,\"matrix_lr\":0.04,"
     "\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,\"muon_momentum_start\":0.85,"
     "\"muon_momentum_steps\":300,\"ns_steps\":5,\"sampler\":\"random\","
     "\"scalar_lr\":0.5,\"total_batch_tokens\":4096,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "3c9d208a42b647a867bfac75e2de53fffd672889abc101b9f3f026647bec0f59",
     "e5cb0ed6534bc0bfe450e28e0037147a50261b62613e8f6ce76924bfe2d05931"},
    /* experiments/specs/more_steps.json */
    {"{\"name\":\"more-steps\",\"tags\":[\"batch\",\"schedule\"],"
     "\"train\":{\"batch_size\":8,\"total_batch_tokens\":2048,"
     "\"warmup_ratio\":0.02}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":4,\"embed_dropout\":0,"
     "\"max_pos\":256,\"mlp\":\"relu2\",\"mlp_ratio\":4,"
     "\"n_embd\":128,\"n_head\":2,\"n_kv_head\":2,\"pos\":\"rope\","
     "\"seq_len\":256,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":32,\"ve_layers\":\"alternate\","
     "\"vocab_size\":0,\"window_pattern\":\"SSSL\"},\"name\":\"more-steps\","
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[\"batch\","
     "\"schedule\"],\"time_budget_s\":300,\"token_budget\":0,"
     "\"train\":{\"adam_betas\":[0.8,0.95],\"batch_size\":8,"
     "\"embedding_lr\":0.6,\"final_lr_frac\":0,\"matrix_lr\":0.04,"
     "\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,\"muon_momentum_start\":0.85,"
     "\"muon_momentum_steps\":300,\"ns_steps\":5,\"sampler\":\"random\","
     "\"scalar_lr\":0.5,\"total_batch_tokens\":2048,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0.02,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "907c0ed60beaeb6e09cb56785cd35a53329ab76cad1963218c84e81557236881",
     "1364a09d65759ea1597512b81ee1bb8b47f9bdafbc88c9ec8a8eb7c94f3bc98e"},
    /* experiments/specs/ve_everywhere.json */
    {"{\"name\":\"ve-everywhere\",\"tags\":[\"value-embeddings\"],"
     "\"model\":{\"ve_layers\":\"all\",\"ve_gate_channels\":64}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":4,\"embed_dropout\":0,"
     "\"max_pos\":256,\"mlp\":\"relu2\",\"mlp_ratio\":4,"
     "\"n_embd\":128,\"n_head\":2,\"n_kv_head\":2,\"pos\":\"rope\","
     "\"seq_len\":256,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":64,\"ve_layers\":\"all\",\"vocab_size\":0,"
     "\"window_pattern\":\"SSSL\"},\"name\":\"ve-everywhere\","
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[\"value-embeddings\"],"
     "\"time_budget_s\":300,\"token_budget\":0,\"train\":{\"adam_betas\":[0.8,"
     "0.95],\"batch_size\":16,\"embedding_lr\":0.6,\"final_lr_frac\":0,"
     "\"matrix_lr\":0.04,\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,"
     "\"muon_momentum_start\":0.85,\"muon_momentum_steps\":300,"
     "\"ns_steps\":5,\"sampler\":\"random\",\"scalar_lr\":0.5,"
     "\"total_batch_tokens\":4096,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "624e8e4a62c0e12d1cf25a5b0445e09a7c564c597f39d691d6b8ad42cf96b93f",
     "2d73b814aedd5f6889912570063dfb70f6f84d08809c9cf4edf428b6ed90cc58"},
    /* experiments/specs/wide_shallow.json */
    {"{\"name\":\"wide-shallow\",\"tags\":[\"width\",\"depth\"],"
     "\"model\":{\"depth\":2,\"n_embd\":256,\"n_head\":4,"
     "\"n_kv_head\":4,\"window_pattern\":\"L\",\"ve_layers\":\"all\"}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":2,\"embed_dropout\":0,"
     "\"max_pos\":256,\"mlp\":\"relu2\",\"mlp_ratio\":4,"
     "\"n_embd\":256,\"n_head\":4,\"n_kv_head\":4,\"pos\":\"rope\","
     "\"seq_len\":256,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":32,\"ve_layers\":\"all\",\"vocab_size\":0,"
     "\"window_pattern\":\"L\"},\"name\":\"wide-shallow\","
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[\"width\","
     "\"depth\"],\"time_budget_s\":300,\"token_budget\":0,"
     "\"train\":{\"adam_betas\":[0.8,0.95],\"batch_size\":16,"
     "\"embedding_lr\":0.6,\"final_lr_frac\":0,\"matrix_lr\":0.04,"
     "\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,\"muon_momentum_start\":0.85,"
     "\"muon_momentum_steps\":300,\"ns_steps\":5,\"sampler\":\"random\","
     "\"scalar_lr\":0.5,\"total_batch_tokens\":4096,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "41dfc6c89e3bf68a15502e63ddfb587d3699710b2bad5a1b03a39701925811fb",
     "fa193e63eee9d6d670f758836a9ca7a79bf6d9ff74ff7376de9e0f4e6bb3c3e8"},
    /* tests/fixtures/parity/geglu_list_last/spec.json */
    {"{\"model\":{\"vocab_size\":64,\"depth\":3,\"n_embd\":16,"
     "\"n_head\":2,\"n_kv_head\":1,\"mlp_ratio\":2.5,\"mlp\":\"geglu\","
     "\"seq_len\":24,\"pos\":\"rope\",\"window_pattern\":\"S\","
     "\"ve_layers\":[0,2],\"ve_gate_channels\":12,\"softcap\":0},"
     "\"train\":{\"batch_size\":2,\"total_batch_tokens\":48}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":3,\"embed_dropout\":0,"
     "\"max_pos\":24,\"mlp\":\"geglu\",\"mlp_ratio\":2.5,"
     "\"n_embd\":16,\"n_head\":2,\"n_kv_head\":1,\"pos\":\"rope\","
     "\"seq_len\":24,\"softcap\":0,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":12,\"ve_layers\":\"alternate\","
     "\"vocab_size\":64,\"window_pattern\":\"S\"},\"name\":null,"
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[],"
     "\"time_budget_s\":300,\"token_budget\":0,\"train\":{\"adam_betas\":[0.8,"
     "0.95],\"batch_size\":2,\"embedding_lr\":0.6,\"final_lr_frac\":0,"
     "\"matrix_lr\":0.04,\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,"
     "\"muon_momentum_start\":0.85,\"muon_momentum_steps\":300,"
     "\"ns_steps\":5,\"sampler\":\"random\",\"scalar_lr\":0.5,"
     "\"total_batch_tokens\":48,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "c2565a4e88ed0c67ff9dacbdf76bf3ebf68d8828e78fea3702ecce1d62b946da",
     "ecf17c9421521ad717e71871bcea73f3869967f04bb3bb76e234e8037f6ca58a"},
    /* tests/fixtures/parity/gqa_sliding_ve_alternate/spec.json */
    {"{\"model\":{\"vocab_size\":64,\"depth\":4,\"n_embd\":32,"
     "\"n_head\":4,\"n_kv_head\":2,\"mlp_ratio\":1,\"mlp\":\"relu2\","
     "\"seq_len\":16,\"pos\":\"rope\",\"window_pattern\":\"SSSL\","
     "\"ve_layers\":\"alternate\",\"ve_gate_channels\":32},"
     "\"train\":{\"batch_size\":2,\"total_batch_tokens\":32}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":4,\"embed_dropout\":0,"
     "\"max_pos\":16,\"mlp\":\"relu2\",\"mlp_ratio\":1,"
     "\"n_embd\":32,\"n_head\":4,\"n_kv_head\":2,\"pos\":\"rope\","
     "\"seq_len\":16,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":32,\"ve_layers\":\"alternate\","
     "\"vocab_size\":64,\"window_pattern\":\"SSSL\"},\"name\":null,"
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[],"
     "\"time_budget_s\":300,\"token_budget\":0,\"train\":{\"adam_betas\":[0.8,"
     "0.95],\"batch_size\":2,\"embedding_lr\":0.6,\"final_lr_frac\":0,"
     "\"matrix_lr\":0.04,\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,"
     "\"muon_momentum_start\":0.85,\"muon_momentum_steps\":300,"
     "\"ns_steps\":5,\"sampler\":\"random\",\"scalar_lr\":0.5,"
     "\"total_batch_tokens\":32,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "e509e1d20032ad5e81972aeec14ae6d309b90e4d374f2ba08a04d5a14b099a02",
     "4210527f3bddd99b1d97ec30b3b06ae9578020433ae0781676c813f23904e9ed"},
    /* tests/fixtures/parity/learned_tied_gelu/spec.json */
    {"{\"model\":{\"vocab_size\":80,\"depth\":2,\"n_embd\":24,"
     "\"n_head\":2,\"n_kv_head\":2,\"mlp_ratio\":1,\"mlp\":\"gelu\","
     "\"seq_len\":16,\"pos\":\"learned\",\"max_pos\":24,"
     "\"tie_embeddings\":true,\"window_pattern\":\"L\","
     "\"ve_layers\":\"all\",\"ve_gate_channels\":16},\"train\":{\"batch_size\":3,"
     "\"total_batch_tokens\":48}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":2,\"embed_dropout\":0,"
     "\"max_pos\":24,\"mlp\":\"gelu\",\"mlp_ratio\":1,\"n_embd\":24,"
     "\"n_head\":2,\"n_kv_head\":2,\"pos\":\"learned\","
     "\"seq_len\":16,\"softcap\":15,\"tie_embeddings\":true,"
     "\"ve_gate_channels\":16,\"ve_layers\":\"all\",\"vocab_size\":80,"
     "\"window_pattern\":\"L\"},\"name\":null,\"parent\":null,"
     "\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[],"
     "\"time_budget_s\":300,\"token_budget\":0,\"train\":{\"adam_betas\":[0.8,"
     "0.95],\"batch_size\":3,\"embedding_lr\":0.6,\"final_lr_frac\":0,"
     "\"matrix_lr\":0.04,\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,"
     "\"muon_momentum_start\":0.85,\"muon_momentum_steps\":300,"
     "\"ns_steps\":5,\"sampler\":\"random\",\"scalar_lr\":0.5,"
     "\"total_batch_tokens\":48,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "e2949ee4d88e802ac47d6856a29906f0da17262862b2b573baa1eab3ce74b088",
     "26a99da5a2113a6526da65ccc3d654bbf95cd68a300fea76f7f5bf35bf28d084"},
    /* tests/fixtures/parity/relu2_last_half_learned/spec.json */
    {"{\"model\":{\"vocab_size\":96,\"depth\":3,\"n_embd\":24,"
     "\"n_head\":4,\"n_kv_head\":2,\"mlp_ratio\":1,\"mlp\":\"relu2\","
     "\"seq_len\":16,\"pos\":\"learned\",\"tie_embeddings\":false,"
     "\"window_pattern\":\"SSSL\",\"ve_layers\":\"last_half\","
     "\"ve_gate_channels\":24},\"train\":{\"batch_size\":3,"
     "\"total_batch_tokens\":48}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":3,\"embed_dropout\":0,"
     "\"max_pos\":16,\"mlp\":\"relu2\",\"mlp_ratio\":1,"
     "\"n_embd\":24,\"n_head\":4,\"n_kv_head\":2,\"pos\":\"learned\","
     "\"seq_len\":16,\"softcap\":15,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":24,\"ve_layers\":\"last_half\","
     "\"vocab_size\":96,\"window_pattern\":\"SSSL\"},\"name\":null,"
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[],"
     "\"time_budget_s\":300,\"token_budget\":0,\"train\":{\"adam_betas\":[0.8,"
     "0.95],\"batch_size\":3,\"embedding_lr\":0.6,\"final_lr_frac\":0,"
     "\"matrix_lr\":0.04,\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,"
     "\"muon_momentum_start\":0.85,\"muon_momentum_steps\":300,"
     "\"ns_steps\":5,\"sampler\":\"random\",\"scalar_lr\":0.5,"
     "\"total_batch_tokens\":48,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "1f82112c01d10fc4c527b2395a59b992813768fc2cf989e7aec304872335f7be",
     "b10c4dc506caf6f1b8fd9e9cc8302031ad8551cfffcd4eccbb9c25a1227699b2"},
    /* tests/fixtures/parity/swiglu_mqa_first_half/spec.json */
    {"{\"model\":{\"vocab_size\":72,\"depth\":3,\"n_embd\":24,"
     "\"n_head\":4,\"n_kv_head\":1,\"mlp_ratio\":1,\"mlp\":\"swiglu\","
     "\"seq_len\":20,\"pos\":\"rope\",\"window_pattern\":\"SL\","
     "\"ve_layers\":\"first_half\",\"ve_gate_channels\":8,"
     "\"softcap\":30},\"train\":{\"batch_size\":2,\"total_batch_tokens\":40}}",
     "{\"dataset\":\"default\",\"model\":{\"depth\":3,\"embed_dropout\":0,"
     "\"max_pos\":20,\"mlp\":\"swiglu\",\"mlp_ratio\":1,"
     "\"n_embd\":24,\"n_head\":4,\"n_kv_head\":1,\"pos\":\"rope\","
     "\"seq_len\":20,\"softcap\":30,\"tie_embeddings\":false,"
     "\"ve_gate_channels\":8,\"ve_layers\":\"first_half\","
     "\"vocab_size\":72,\"window_pattern\":\"SL\"},\"name\":null,"
     "\"parent\":null,\"priority\":0,\"prune\":true,\"resources\":{\"memory_mb\":0,"
     "\"peak_gflops\":0,\"threads\":0},\"seed\":42,\"tags\":[],"
     "\"time_budget_s\":300,\"token_budget\":0,\"train\":{\"adam_betas\":[0.8,"
     "0.95],\"batch_size\":2,\"embedding_lr\":0.6,\"final_lr_frac\":0,"
     "\"matrix_lr\":0.04,\"muon_beta2\":0.95,\"muon_momentum_end\":0.95,"
     "\"muon_momentum_start\":0.85,\"muon_momentum_steps\":300,"
     "\"ns_steps\":5,\"sampler\":\"random\",\"scalar_lr\":0.5,"
     "\"total_batch_tokens\":40,\"unembedding_lr\":0.004,"
     "\"value_embedding_lr\":0.6,\"warmdown_ratio\":0.5,"
     "\"warmup_ratio\":0,\"weight_decay\":0.2,\"x0_beta1\":0.96}}",
     "b3a1501efe4eb880c9c0e3e91c74f68d0103bf920b2d72f5b77f1317ad71ac52",
     "e4a969e24f3924efe493f4f945ff5930943619507b9508d8cee6934234367f43"},
};

Test(spec, canonical_golden_hashes) {
    for (size_t i = 0; i < sizeof golden / sizeof golden[0]; i++) {
        spec_t s;
        char hash[SPEC_HASH_HEX], config[SPEC_HASH_HEX];
        parse_ok(golden[i].spec, &s);
        char *c = spec_canonical_json(&s);
        cr_assert_not_null(c);
        cr_expect_str_eq(c, golden[i].canonical, "canonical JSON of %s", golden[i].spec);
        cr_assert_eq(spec_hash(&s, hash), 0);
        cr_expect_str_eq(hash, golden[i].hash, "spec_hash of %s", golden[i].spec);
        cr_assert_eq(spec_config_hash(&s, config), 0);
        cr_expect_str_eq(config, golden[i].config, "spec_config_hash of %s", golden[i].spec);
        free(c);
        spec_free(&s);
    }
}

/* ------------------------------------------------- configuration, scope -- */

/* The canonical form's keys when it was fixed. A field added since must be
 * CANON_UNLESS_DEFAULT (spec.c): printed at its default it would change the
 * canonical JSON, spec_hash and spec_config_hash of every stored experiment.
 * Never add to this list; give the new field .canon = CANON_UNLESS_DEFAULT. */
static const char *const canonical_keys[] = {"dataset",
                                             "model",
                                             "model.depth",
                                             "model.embed_dropout",
                                             "model.max_pos",
                                             "model.mlp",
                                             "model.mlp_ratio",
                                             "model.n_embd",
                                             "model.n_head",
                                             "model.n_kv_head",
                                             "model.pos",
                                             "model.seq_len",
                                             "model.softcap",
                                             "model.tie_embeddings",
                                             "model.ve_gate_channels",
                                             "model.ve_layers",
                                             "model.vocab_size",
                                             "model.window_pattern",
                                             "name",
                                             "parent",
                                             "priority",
                                             "prune",
                                             "resources",
                                             "resources.memory_mb",
                                             "resources.peak_gflops",
                                             "resources.threads",
                                             "seed",
                                             "tags",
                                             "time_budget_s",
                                             "token_budget",
                                             "train",
                                             "train.adam_betas",
                                             "train.batch_size",
                                             "train.embedding_lr",
                                             "train.final_lr_frac",
                                             "train.matrix_lr",
                                             "train.muon_beta2",
                                             "train.muon_momentum_end",
                                             "train.muon_momentum_start",
                                             "train.muon_momentum_steps",
                                             "train.ns_steps",
                                             "train.sampler",
                                             "train.scalar_lr",
                                             "train.total_batch_tokens",
                                             "train.unembedding_lr",
                                             "train.value_embedding_lr",
                                             "train.warmdown_ratio",
                                             "train.warmup_ratio",
                                             "train.weight_decay",
                                             "train.x0_beta1"};

static void expect_known_keys(const cJSON *o, const char *section) {
    for (const cJSON *c = o->child; c; c = c->next) {
        char path[128];
        snprintf(path, sizeof path, "%s%s%s", section, *section ? "." : "", c->string);
        size_t i = 0;
        while (i < sizeof canonical_keys / sizeof *canonical_keys &&
               strcmp(canonical_keys[i], path))
            i++;
        cr_expect(i < sizeof canonical_keys / sizeof *canonical_keys,
                  "%s is printed at its default: a field added after the canonical form was "
                  "fixed must be CANON_UNLESS_DEFAULT (engine/spec.c), or every stored "
                  "experiment's hashes change",
                  path);
        if (cJSON_IsObject(c) && !*section) expect_known_keys(c, c->string);
    }
}

Test(spec, a_new_field_is_printed_only_when_it_is_not_its_default) {
    char *c = canonical_of("{}");
    cJSON *o = cJSON_Parse(c);
    cr_assert_not_null(o);
    expect_known_keys(o, "");
    cJSON_Delete(o);
    free(c);
}

static void config_of(const char *json, char out[SPEC_HASH_HEX]) {
    spec_t s;
    parse_ok(json, &s);
    cr_assert_eq(spec_config_hash(&s, out), 0);
    spec_free(&s);
}

/* Spellings of one configuration (spec.h lists the rules), and neighbours
 * that are another one. */
static const char *const same_config[][2] = {
    {"{\"model\":{\"depth\":8,\"window_pattern\":\"SL\"}}",
     "{\"model\":{\"depth\":8,\"window_pattern\":\"SLSLSLSL\"}}"},
    {"{\"model\":{\"depth\":4,\"window_pattern\":\"SSSL\"}}",
     "{\"model\":{\"depth\":4,\"window_pattern\":\"S\"}}"},
    {"{\"model\":{\"depth\":4,\"window_pattern\":\"SSSL\"}}",
     "{\"model\":{\"depth\":4,\"window_pattern\":\"SSSSLLLL\"}}"},
    {"{\"model\":{\"depth\":1,\"window_pattern\":\"S\"}}",
     "{\"model\":{\"depth\":1,\"window_pattern\":\"L\"}}"},
    {"{\"model\":{\"depth\":1,\"ve_layers\":\"first_half\"}}",
     "{\"model\":{\"depth\":1,\"ve_layers\":\"none\"}}"},
    {"{\"model\":{\"depth\":1,\"ve_layers\":\"all\"}}",
     "{\"model\":{\"depth\":1,\"ve_layers\":\"last_half\"}}"},
    {"{\"model\":{\"depth\":2,\"ve_layers\":\"last_half\"}}",
     "{\"model\":{\"depth\":2,\"ve_layers\":\"alternate\"}}"},
    {"{\"model\":{\"depth\":4,\"ve_layers\":[1,3]}}", "{\"model\":{\"depth\":4}}"},
    {"{\"model\":{\"seq_len\":128,\"max_pos\":1024},\"train\":{\"batch_size\":32}}",
     "{\"model\":{\"seq_len\":128},\"train\":{\"batch_size\":32}}"},
    {"{\"model\":{\"ve_layers\":\"none\",\"ve_gate_channels\":8},"
     "\"train\":{\"value_embedding_lr\":0.1}}",
     "{\"model\":{\"ve_layers\":\"none\"}}"},
    {"{\"model\":{\"tie_embeddings\":true},\"train\":{\"embedding_lr\":0.2}}",
     "{\"model\":{\"tie_embeddings\":true}}"},
    {"{\"name\":\"a\",\"tags\":[\"x\"],\"priority\":3,\"parent\":7,\"prune\":false,\"seed\":5}",
     "{\"seed\":6}"},
};
static const char *const other_config[][2] = {
    {"{\"model\":{\"depth\":8,\"window_pattern\":\"SL\"}}",
     "{\"model\":{\"depth\":8,\"window_pattern\":\"LS\"}}"},
    {"{\"model\":{\"depth\":2,\"ve_layers\":\"first_half\"}}",
     "{\"model\":{\"depth\":2,\"ve_layers\":\"none\"}}"},
    {"{\"model\":{\"pos\":\"learned\",\"max_pos\":1024}}", "{\"model\":{\"pos\":\"learned\"}}"},
    {"{\"model\":{\"ve_gate_channels\":8}}", "{}"},
    {"{\"model\":{\"tie_embeddings\":true,\"pos\":\"learned\"},\"train\":{\"embedding_lr\":0.2}}",
     "{\"model\":{\"tie_embeddings\":true,\"pos\":\"learned\"}}"},
    {"{\"dataset\":\"other\"}", "{}"},
    {"{\"time_budget_s\":60}", "{}"},
};

Test(spec, equivalent_spellings_are_one_configuration) {
    char a[SPEC_HASH_HEX], b[SPEC_HASH_HEX];
    for (size_t i = 0; i < sizeof same_config / sizeof *same_config; i++) {
        config_of(same_config[i][0], a);
        config_of(same_config[i][1], b);
        cr_expect_str_eq(a, b, "%s and %s", same_config[i][0], same_config[i][1]);
    }
    for (size_t i = 0; i < sizeof other_config / sizeof *other_config; i++) {
        config_of(other_config[i][0], a);
        config_of(other_config[i][1], b);
        cr_expect_str_neq(a, b, "%s and %s", other_config[i][0], other_config[i][1]);
    }
}

/* Spec json made tiny (the spellings it tests kept): a context of T = 8,
 * so S (T/2) and L windows differ, width 32, vocabulary 32. */
static void tiny_of(const char *json, spec_t *s) {
    char err[SPEC_ERR_LEN];
    parse_ok(json, s);
    s->model.vocab_size = 32;
    s->model.n_embd = 32;
    s->model.n_head = s->model.n_kv_head = 2;
    s->model.seq_len = 8;
    s->train.batch_size = 2;
    s->train.total_batch_tokens = 16;
    cr_assert_eq(spec_validate(s, err, sizeof err), 0, "%s: %s", json, err);
}

/* Two steps of training s's model: the losses, to compare. */
static void train_two_steps(spec_t *s, float loss[2]) {
    char err[256];
    gpt_t *m = gpt_new(&s->model, err, sizeof err);
    cr_assert_not_null(m, "%s", err);
    gpt_init_weights(m, 7);
    optim_t *o = optim_new(m, &s->train, err, sizeof err);
    cr_assert_not_null(o, "%s", err);
    enum { B = 2, T = 8 };
    cr_assert_eq(gpt_reserve(m, B, T, err, sizeof err), 0, "%s", err);
    int in[B * T], tg[B * T];
    for (int i = 0; i < B * T; i++) in[i] = (i * 7) % 32, tg[i] = (i * 11 + 3) % 32;
    for (int step = 0; step < 2; step++) {
        cr_assert_eq(gpt_forward(m, in, tg, B, T, GPT_TRAIN, &loss[step]), 0);
        gpt_backward(m, 1.0f);
        optim_step(o, m, 1.0, 0.9, 0.1);
        gpt_zero_grad(m);
    }
    optim_free(o);
    gpt_free(m);
}

/* What the configuration writes one way trains the same model the same way:
 * the same losses to the bit (a field the engine starts to read where the
 * rule calls it unused fails here). */
Test(spec, equivalent_spellings_train_identically) {
    for (size_t i = 0; i < sizeof same_config / sizeof *same_config; i++) {
        spec_t a, b;
        char ha[SPEC_HASH_HEX], hb[SPEC_HASH_HEX];
        float la[2], lb[2];
        tiny_of(same_config[i][0], &a);
        tiny_of(same_config[i][1], &b);
        cr_assert(spec_config_hash(&a, ha) == 0 && spec_config_hash(&b, hb) == 0);
        cr_assert_str_eq(ha, hb, "made tiny, %s is another configuration", same_config[i][0]);
        train_two_steps(&a, la);
        train_two_steps(&b, lb);
        cr_expect(!memcmp(la, lb, sizeof la), "%s: %.9g %.9g, %s: %.9g %.9g", same_config[i][0],
                  la[0], la[1], same_config[i][1], lb[0], lb[1]);
        spec_free(&a);
        spec_free(&b);
    }
}

Test(spec, scope_and_budget_rule) {
    spec_t s;
    spec_scope_t sc;
    parse_ok("{\"dataset\":\"book\",\"token_budget\":5000}", &s);
    spec_scope(&s, &sc);
    cr_expect_str_eq(sc.dataset, "book");
    cr_expect_str_eq(sc.budget_kind, SPEC_BUDGET_TOKENS);
    cr_expect_eq(sc.budget, 5000);
    cr_expect_str_eq(spec_budget_field(&s), "token_budget");
    spec_free(&s);
    parse_ok("{\"time_budget_s\":60}", &s);
    spec_scope(&s, &sc);
    cr_expect_str_eq(sc.dataset, "default");
    cr_expect_str_eq(sc.budget_kind, SPEC_BUDGET_TIME);
    cr_expect_eq(sc.budget, 60);
    cr_expect_str_eq(spec_budget_field(&s), "time_budget_s");
    spec_free(&s);
    spec_default_scope(NULL, &sc);
    cr_expect_str_eq(sc.dataset, "default");
    cr_expect_str_eq(sc.budget_kind, SPEC_BUDGET_TIME);
    cr_expect_eq(sc.budget, 300);
    spec_default_scope("book", &sc);
    cr_expect_str_eq(sc.dataset, "book");

    static const struct {
        const char *text, *kind;
        double budget;
    } ok[] = {{"300", "time", 300},          {"300s", "time", 300},
              {"time:60", "time", 60},       {"time:60s", "time", 60},
              {"tokens:5e6", "tokens", 5e6}, {"tokens:1000000000000000", "tokens", 1e15}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        cr_expect_eq(spec_scope_set_budget(&sc, ok[i].text), 0, "%s", ok[i].text);
        cr_expect_str_eq(sc.budget_kind, ok[i].kind, "%s", ok[i].text);
        cr_expect_eq(sc.budget, ok[i].budget, "%s", ok[i].text);
    }
    static const char *const bad[] = {"",  "0",     "-5",      "time:", "tokens:5s", "tokens:1e16",
                                      "x", "300 s", "time:nan"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_expect_eq(spec_scope_set_budget(&sc, bad[i]), -1, "'%s'", bad[i]);
}

/* flops_budget: a budget kind of its own (its scope never mixes with time or
 * tokens), left out of the canonical form at 0, replacing the default time
 * budget, exclusive of the other two; spec_set_budget keeps it a FLOPs budget
 * and "flops:N" names its scope. */
Test(spec, flops_budget_is_a_scope_kind_of_its_own) {
    spec_t s;
    spec_scope_t sc;
    char err[SPEC_ERR_LEN];
    parse_ok("{\"dataset\":\"book\",\"flops_budget\":2.5e12}", &s);
    cr_expect_eq(s.time_budget_s, 0);
    cr_expect_eq(s.token_budget, 0);
    spec_scope(&s, &sc);
    cr_expect_str_eq(sc.budget_kind, SPEC_BUDGET_FLOPS);
    cr_expect_eq(sc.budget, 2.5e12);
    cr_expect_str_eq(spec_budget_field(&s), "flops_budget");
    char *canon = spec_canonical_json(&s);
    cr_expect(strstr(canon, "\"flops_budget\":2500000000000"), "%s", canon);
    free(canon);
    spec_set_budget(&s, 1e11);
    spec_scope(&s, &sc);
    cr_expect_str_eq(sc.budget_kind, SPEC_BUDGET_FLOPS);
    cr_expect_eq(s.flops_budget, 1e11);
    cr_expect_eq(s.time_budget_s, 0);
    spec_free(&s);
    parse_ok("{\"time_budget_s\":60}", &s);
    canon = spec_canonical_json(&s);
    cr_expect_null(strstr(canon, "flops_budget"), "0 is left out: %s", canon);
    free(canon);
    spec_free(&s);

    static const char *const bad[] = {
        "{\"flops_budget\":1e9,\"time_budget_s\":60}",
        "{\"flops_budget\":1e9,\"token_budget\":100}",
        "{\"flops_budget\":-1}",
        "{\"flops_budget\":1e22}",
        "{\"flops_budget\":0,\"time_budget_s\":0}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_expect_eq(spec_parse(bad[i], strlen(bad[i]), &s, err, sizeof err), NS_ERR_INVALID, "%s",
                     bad[i]);
        cr_expect(strstr(err, "budget"), "%s: %s", bad[i], err);
    }
    cr_expect_eq(spec_scope_set_budget(&sc, "flops:1e18"), 0);
    cr_expect_str_eq(sc.budget_kind, SPEC_BUDGET_FLOPS);
    cr_expect_eq(sc.budget, 1e18);
    static const char *const bad_text[] = {"flops:", "flops:0", "flops:1e22", "flops:5s"};
    for (size_t i = 0; i < sizeof bad_text / sizeof *bad_text; i++)
        cr_expect_eq(spec_scope_set_budget(&sc, bad_text[i]), -1, "'%s'", bad_text[i]);
}

/* eval_tokens: a count (0 = the whole split), left out of the canonical form
 * at its default, no part of an experiment's configuration (its scope holds it),
 * and in the scope as given unless it covers the dataset's split. */
Test(spec, eval_tokens_is_in_the_scope_not_the_configuration) {
    spec_t a, b;
    char err[SPEC_ERR_LEN], ha[SPEC_HASH_HEX], hb[SPEC_HASH_HEX];
    const char *ja = "{\"eval_tokens\":65536}", *jb = "{\"eval_tokens\":1000}";
    cr_assert_eq(spec_parse(ja, strlen(ja), &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(spec_parse(jb, strlen(jb), &b, err, sizeof err), 0, "%s", err);
    char *canon = spec_canonical_json(&a);
    cr_expect_null(strstr(canon, "eval_tokens"), "the default is left out: %s", canon);
    free(canon);
    canon = spec_canonical_json(&b);
    cr_expect(strstr(canon, "\"eval_tokens\":1000"), "%s", canon);
    free(canon);
    cr_assert_eq(spec_config_hash(&a, ha), 0);
    cr_assert_eq(spec_config_hash(&b, hb), 0);
    cr_expect_str_eq(ha, hb, "the evaluation is the scope's, not the configuration's");
    spec_scope_t sc;
    spec_scope_on(&b, 50000, &sc);
    cr_expect_eq(sc.eval_tokens, 1000);
    cr_expect_str_eq(sc.budget_kind, "time");
    cr_expect_eq(sc.budget, 300);
    spec_scope_on(&b, 1001, &sc);
    cr_expect_eq(sc.eval_tokens, 0, "1000 targets are the whole of a 1001-token split");
    spec_scope_on(&b, -1, &sc);
    cr_expect_eq(sc.eval_tokens, 1000, "an unknown split: as given");
    spec_scope(&b, &sc);
    cr_expect_eq(sc.eval_tokens, 1000);
    spec_free(&a);
    spec_free(&b);
    const char *bad = "{\"eval_tokens\":-1}";
    cr_expect_eq(spec_parse(bad, strlen(bad), &a, err, sizeof err), NS_ERR_INVALID);
    cr_expect(strstr(err, "eval_tokens: "), "%s", err);
}

/* spec_set_budget keeps the kind the spec has (the scheduler's rungs set their
 * budget through it): tokens round and stay at least 1, seconds pass as they are. */
Test(spec, set_budget_keeps_the_kind) {
    spec_t s;
    spec_scope_t sc;
    parse_ok("{\"token_budget\": 65536}", &s);
    spec_set_budget(&s, 7281.5);
    spec_scope(&s, &sc);
    cr_expect_str_eq(sc.budget_kind, SPEC_BUDGET_TOKENS);
    cr_expect_eq(s.token_budget, 7282);
    cr_expect_eq(s.time_budget_s, 0);
    spec_set_budget(&s, 0.2);
    cr_expect_eq(s.token_budget, 1);
    spec_free(&s);
    parse_ok("{\"time_budget_s\": 300}", &s);
    spec_set_budget(&s, 33.3);
    spec_scope(&s, &sc);
    cr_expect_str_eq(sc.budget_kind, SPEC_BUDGET_TIME);
    cr_expect_float_eq(s.time_budget_s, 33.3, 1e-12);
    cr_expect_eq(s.token_budget, 0);
    spec_free(&s);
}

/* train.precision belongs to the configuration: left out of the canonical
 * JSON at its default (fp32), so every spec written before it keeps its
 * hash, and printed otherwise, so bf16 and auto are other configurations. */
Test(spec, precision_is_part_of_the_identity) {
    char *fp32 = canonical_of("{\"train\":{\"precision\":\"fp32\"}}");
    char *none = canonical_of("{}");
    char *bf16 = canonical_of("{\"train\":{\"precision\":\"bf16\"}}");
    char *autop = canonical_of("{\"train\":{\"precision\":\"auto\"}}");
    cr_expect_str_eq(fp32, none);
    cr_expect_null(strstr(none, "precision"));
    cr_expect(strstr(bf16, "\"precision\":\"bf16\""), "%s", bf16);
    cr_expect(strstr(autop, "\"precision\":\"auto\""), "%s", autop);
    cr_expect_str_neq(bf16, none);
    cr_expect_str_neq(bf16, autop);
    char *again = canonical_of(bf16);
    cr_expect_str_eq(again, bf16);
    free(again);
    free(fp32), free(none), free(bf16), free(autop);
}

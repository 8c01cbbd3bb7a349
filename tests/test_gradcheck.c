/* test_gradcheck.c - finite-difference checks of gpt_backward, no torch.
 *
 * For a few tiny models that together switch every model option on, and for
 * every parameter tensor W with analytic gradient g (from gpt_backward), the
 * loss is evaluated at W + h u and W - h u for three unit directions u:
 *     u = g / |g|          checks the gradient's magnitude and sign
 *     u = two random units  check the rest of its direction
 * and the directional derivative estimated from central differences
 * (L(W + h u) - L(W - h u)) / 2h is compared with g . u. Everything runs in
 * float32, as the engine does; bf16 gradients are checked against the same
 * float32 differences with bf16's tolerances (TOL_BF16 below).
 *
 * Step: h = min(LOSS_STEP / |g|, STEP_CAP |W|) (|W| the Frobenius norm), so
 * that along g the loss moves by ~3e-3 nats, about 1000 times the float32
 * rounding of the loss (~4 nats, one ulp 5e-7, and a forward adds a few),
 * but no tensor moves by more than 3% of its norm. The derivative is the
 * Richardson extrapolation of central differences with steps h and h/2,
 * (4 D(h/2) - D(h)) / 3, whose error is O(h^4): plain central differences
 * with a step of 1% of |W| were off by up to 8% on the most curved tensors
 * (c_q and c_fc of a head_dim-4 model), and with small enough steps for those
 * the rounding of the loss swamped the small gradients (gates, lambdas). It
 * is taken against the perturbation actually stored (W + h u rounded to
 * float32), so the rounding of the weights themselves does not count.
 *
 * Tolerances, on |derivative - g . u| / |g|: TOL_ALONG_G for u = g/|g| (a
 * relative error: there g . u = |g|) and TOL_RANDOM for random u. The worst
 * values measured over all configs and tensors are quoted next to the
 * constants; the bounds are several times those. A wrong sign anywhere, a
 * missing factor (e.g. 1/(1-p) of dropout, 2 of the gate, 1/sqrt(hd)), or a
 * wrong row or head of a tensor holding a few percent of its gradient moves
 * the along-g error to >= 0.05; the corrupted_gradient_is_caught test shows
 * that for a scaled and a partly negated gradient. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gemm.h"
#include "engine/gemm_bf16.h"
#include "engine/gpt.h"
#include "engine/rng.h"
#include "engine/spec.h"
#include "tests/testutil.h"

#define LOSS_STEP   3e-3 /* nats: first-order loss change along g/|g| */
#define STEP_CAP    3e-2 /* largest step, relative to |W| */
#define TOL_ALONG_G 5e-3 /* measured worst 4.6e-4 (x0_lambdas, no_ve config) */
#define TOL_RANDOM  5e-3 /* measured worst 5.9e-4 (x0_lambdas, no_ve config) */
#define N_RANDOM    2

/* With bf16 products (train.precision bf16) the loss is a function of
 * operands rounded to bf16: it moves in steps as the weights move, by ~1e-3
 * nats on these models, so its finite differences say little (0.02-0.1 of
 * |g| on the matrices with a step of 0.3 nats, and nothing on the lambdas
 * and gates). The bf16 gradient is checked instead against the finite
 * differences of the float32 loss, the derivative it approximates: it may
 * differ from it by what rounding every operand of the backward's products
 * to bf16 costs (the parity fixtures measure up to 5.5e-2 of a tensor's
 * largest value against float64), far less than a wrong sign, a missing
 * factor of 2 or a wrong head. */
#define TOL_BF16 (8 * 0x1p-8) /* 8 bf16 unit roundoffs; measured worst 1.2e-2 (lambdas) */

/* One tiny model and batch. Together the configs cover relu2/gelu/swiglu/
 * geglu, rope/learned positions, tied/untied head, softcap on/off (and two
 * values), MHA/GQA/MQA, S and L windows (and the forced-long last layer),
 * every ve_layers form but last_half (the parity fixtures have it), gates
 * reading fewer channels than n_embd, embedding dropout (training mode, with
 * the mask pinned), ignored targets, and T shorter than seq_len. */
typedef struct {
    const char *name;
    int vocab, depth, n_embd, n_head, n_kv_head;
    double mlp_ratio;
    spec_mlp_kind mlp;
    int seq_len, max_pos; /* max_pos 0 = seq_len */
    spec_pos_kind pos;
    bool tie;
    double dropout, softcap;
    const char *window, *ve;
    int gate_channels;
    int B, T; /* batch rows and positions (T <= seq_len) */
    gpt_mode mode;
} gc_config_t;

/* Kept out of clang-format, which would give every field a line of its own. */
/* clang-format off */
static const gc_config_t configs[] = {
    {.name = "gqa_relu2_rope_alternate", .vocab = 48, .depth = 4, .n_embd = 32, .n_head = 4,
     .n_kv_head = 2, .mlp_ratio = 2, .mlp = MLP_RELU2, .seq_len = 12, .pos = POS_ROPE,
     .softcap = 15, .window = "SSSL", .ve = "alternate", .gate_channels = 32, .B = 2, .T = 12,
     .mode = GPT_EVAL},
    {.name = "mha_gelu_learned_tied_all_dropout", .vocab = 40, .depth = 2, .n_embd = 24,
     .n_head = 2, .n_kv_head = 2, .mlp_ratio = 2, .mlp = MLP_GELU, .seq_len = 12, .max_pos = 16,
     .pos = POS_LEARNED, .tie = true, .dropout = 0.25, .softcap = 15, .window = "L", .ve = "all",
     .gate_channels = 8, .B = 2, .T = 10, .mode = GPT_TRAIN},
    {.name = "mqa_swiglu_rope_first_half", .vocab = 40, .depth = 3, .n_embd = 24, .n_head = 4,
     .n_kv_head = 1, .mlp_ratio = 1.5, .mlp = MLP_SWIGLU, .seq_len = 12, .pos = POS_ROPE,
     .softcap = 30, .window = "SL", .ve = "first_half", .gate_channels = 8, .B = 2, .T = 12,
     .mode = GPT_EVAL},
    {.name = "gqa_geglu_learned_list_nocap", .vocab = 48, .depth = 3, .n_embd = 16, .n_head = 4,
     .n_kv_head = 2, .mlp_ratio = 2.5, .mlp = MLP_GEGLU, .seq_len = 10, .pos = POS_LEARNED,
     .softcap = 0, .window = "S", .ve = "[0,2]", .gate_channels = 12, .B = 3, .T = 10,
     .mode = GPT_EVAL},
    {.name = "mqa_relu2_rope_no_ve", .vocab = 40, .depth = 3, .n_embd = 16, .n_head = 2,
     .n_kv_head = 1, .mlp_ratio = 2, .mlp = MLP_RELU2, .seq_len = 12, .pos = POS_ROPE,
     .softcap = 15, .window = "SSL", .ve = "none", .gate_channels = 16, .B = 2, .T = 12,
     .mode = GPT_EVAL},
};
/* clang-format on */

/* A model at a generic point, a batch, and the analytic gradient there. */
typedef struct {
    const gc_config_t *c;
    gpt_t *m;
    int *inputs, *targets; /* (B, T) */
    uint64_t dropout_seed; /* every forward starts from it: same dropout mask */
    float *g;              /* analytic gradient, a copy of m->grads (n_params) */
} gc_case_t;

/* Worst |difference - g . u| / |g| seen, and where. */
typedef struct {
    double along_g, random;
    char along_g_at[64], random_at[64];
} gc_worst_t;

/* Moves the weights from autoresearch's init to a generic point: zero-
 * initialised tensors (output projections, gates) and the tiny lm_head get
 * values of their natural scale, the lambdas are spread, and every other
 * tensor gets 10% noise, so that no gradient vanishes and no symmetry (equal
 * heads, equal layers) hides a swapped index. */
static void perturb(gpt_t *m, uint64_t seed) {
    rng_t r;
    rng_seed(&r, seed);
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor_t *t = &m->tensors[i];
        float *w = m->params + t->offset;
        float s = sqrtf(3.0f / (float)t->cols); /* uniform(-s, s): unit output variance */
        for (size_t j = 0; j < t->numel; j++) {
            float u = 2.0f * rng_uniform(&r) - 1.0f;
            switch (t->kind) {
            case GPT_ATTN_PROJ:
            case GPT_MLP_PROJ:
            case GPT_VE_GATE:
                w[j] = s * u;
                break;
            case GPT_LM_HEAD:
                w[j] = 1.5f * s * u;
                break;
            case GPT_RESID:
                w[j] = 1.0f + 0.4f * u;
                break;
            case GPT_X0:
                w[j] = 0.2f + 0.15f * u;
                break;
            case GPT_WPE:
                w[j] += 0.3f * rng_normal(&r);
                break;
            default:
                w[j] += 0.1f * s * u;
                break;
            }
        }
    }
}

static double loss_at(const gc_case_t *k) {
    k->m->dropout_seed = k->dropout_seed;
    float loss = NAN;
    if (gpt_forward(k->m, k->inputs, k->targets, k->c->B, k->c->T, k->c->mode, &loss) < 0)
        return NAN;
    return (double)loss;
}

static void case_init(gc_case_t *k, const gc_config_t *c, uint64_t seed) {
    char err[SPEC_ERR_LEN];
    spec_t s;
    spec_defaults(&s);
    spec_model_t *mc = &s.model;
    mc->vocab_size = c->vocab;
    mc->depth = c->depth;
    mc->n_embd = c->n_embd;
    mc->n_head = c->n_head;
    mc->n_kv_head = c->n_kv_head;
    mc->mlp_ratio = c->mlp_ratio;
    mc->mlp = c->mlp;
    mc->seq_len = c->seq_len;
    mc->pos = c->pos;
    mc->max_pos = c->max_pos ? c->max_pos : c->seq_len;
    mc->tie_embeddings = c->tie;
    mc->embed_dropout = c->dropout;
    mc->softcap = c->softcap;
    snprintf(mc->window_pattern, sizeof mc->window_pattern, "%s", c->window);
    snprintf(mc->ve_layers, sizeof mc->ve_layers, "%s", c->ve);
    mc->ve_gate_channels = c->gate_channels;
    s.train.batch_size = c->B; /* total_batch_tokens must be a multiple of B * seq_len */
    s.train.total_batch_tokens = c->B * c->seq_len;
    cr_assert(spec_validate(&s, err, sizeof err) == 0, "%s: spec_validate: %s", c->name, err);

    memset(k, 0, sizeof *k);
    k->c = c;
    k->m = gpt_new(mc, err, sizeof err);
    spec_free(&s);
    cr_assert(k->m != NULL, "%s: gpt_new: %s", c->name, err);
    gpt_init_weights(k->m, seed);
    perturb(k->m, seed + 1);
    k->dropout_seed = seed + 2;

    /* Random ids; two targets in the middle of rows are ignored. */
    int N = c->B * c->T;
    k->inputs = malloc(sizeof(int) * (size_t)N);
    k->targets = malloc(sizeof(int) * (size_t)N);
    k->g = malloc(sizeof(float) * k->m->n_params);
    cr_assert(k->inputs && k->targets && k->g);
    rng_t r;
    rng_seed(&r, seed + 3);
    for (int i = 0; i < N; i++) {
        k->inputs[i] = (int)rng_below(&r, (uint64_t)c->vocab);
        k->targets[i] = (int)rng_below(&r, (uint64_t)c->vocab);
    }
    k->targets[3] = -1;
    k->targets[N - 4] = -1;

    gpt_zero_grad(k->m);
    double loss = loss_at(k);
    cr_assert(isfinite(loss) && loss > 0, "%s: loss %g", c->name, loss);
    gpt_backward(k->m, 1.0f);
    memcpy(k->g, k->m->grads, sizeof(float) * k->m->n_params);
    /* Finite differences need a deterministic loss (dropout mask included). */
    double again = loss_at(k);
    cr_assert(again == loss, "%s: the same forward gave %.9g then %.9g", c->name, loss, again);
}

static void case_free(gc_case_t *k) {
    gpt_free(k->m);
    free(k->inputs);
    free(k->targets);
    free(k->g);
}

/* Central difference along unit u (double, numel) of tensor t with step h,
 * minus g . (W+ - W-) / 2h for the perturbations actually stored (W +- h u
 * rounded to float32). Restores the weights from saved. */
static double central_error(const gc_case_t *k, const gpt_tensor_t *t, const float *g,
                            const double *u, double h, const float *saved) {
    float *w = k->m->params + t->offset;
    double dot = 0;
    for (size_t j = 0; j < t->numel; j++) w[j] = (float)(saved[j] + h * u[j]);
    double lp = loss_at(k);
    for (size_t j = 0; j < t->numel; j++) {
        float wm = (float)(saved[j] - h * u[j]);
        dot += (double)g[j] * ((double)w[j] - (double)wm);
        w[j] = wm;
    }
    double lm = loss_at(k);
    memcpy(w, saved, sizeof(float) * t->numel);
    return (lp - lm) / (2 * h) - dot / (2 * h);
}

/* |d/ds L(W + s u) - g . u| / |g|, the derivative by Richardson extrapolation
 * of central differences with steps h and h/2 (error O(h^4)). */
static double directional_error(const gc_case_t *k, const gpt_tensor_t *t, const float *g,
                                const double *u, double h, double gnorm, float *saved) {
    memcpy(saved, k->m->params + t->offset, sizeof(float) * t->numel);
    double e1 = central_error(k, t, g, u, h, saved);
    double e2 = central_error(k, t, g, u, h / 2, saved);
    return fabs((4 * e2 - e1) / 3) / gnorm;
}

/* Checks tensor t against gradient g (t->numel floats). Writes the along-g
 * error and the worst random-direction error. */
static void check_tensor(const gc_case_t *k, const gpt_tensor_t *t, const float *g, double *along_g,
                         double *random) {
    size_t n = t->numel;
    double *u = malloc(sizeof(double) * n);
    float *saved = malloc(sizeof(float) * n);
    cr_assert(u && saved);
    const float *w = k->m->params + t->offset;
    double gnorm = 0, wnorm = 0;
    for (size_t j = 0; j < n; j++) {
        gnorm += (double)g[j] * g[j];
        wnorm += (double)w[j] * w[j];
    }
    gnorm = sqrt(gnorm);
    wnorm = sqrt(wnorm);
    cr_assert(gnorm > 0, "%s: %s: the analytic gradient is zero", k->c->name, t->name);
    double h = fmin(LOSS_STEP / gnorm, STEP_CAP * wnorm);

    for (size_t j = 0; j < n; j++) u[j] = g[j] / gnorm;
    *along_g = directional_error(k, t, g, u, h, gnorm, saved);

    rng_t r;
    rng_seed(&r, 0x9e37u + t->offset);
    *random = 0;
    for (int d = 0; d < N_RANDOM; d++) {
        double norm = 0;
        for (size_t j = 0; j < n; j++) {
            u[j] = rng_normal(&r);
            norm += u[j] * u[j];
        }
        norm = sqrt(norm);
        for (size_t j = 0; j < n; j++) u[j] /= norm;
        double e = directional_error(k, t, g, u, h, gnorm, saved);
        if (e > *random || isnan(e)) *random = e;
    }
    free(u);
    free(saved);
}

/* Every tensor of config c (weights from seed) against finite differences
 * of the float32 loss, the analytic gradient from the products' precision
 * `grad` (then float32 restored for the differences), within tol_g along
 * g/|g| and tol_r along random directions. */
static void run_case(const gc_config_t *c, uint64_t seed, gemm_precision grad, double tol_g,
                     double tol_r) {
    char why[256];
    cr_assert_eq(gemm_set_precision(grad, why, sizeof why), 0, "%s", why);
    gc_case_t k;
    case_init(&k, c, seed);
    cr_assert_eq(gemm_set_precision(GEMM_FP32, why, sizeof why), 0, "%s", why);
    gc_worst_t worst = {0};
    for (int i = 0; i < k.m->n_tensors; i++) {
        const gpt_tensor_t *t = &k.m->tensors[i];
        double along_g, random;
        check_tensor(&k, t, k.g + t->offset, &along_g, &random);
        cr_expect(along_g <= tol_g,
                  "%s: %s: along g/|g| the finite difference is off by %.3g |g| (limit %g)",
                  k.c->name, t->name, along_g, tol_g);
        cr_expect(random <= tol_r,
                  "%s: %s: along a random direction the finite difference is off by %.3g |g| "
                  "(limit %g)",
                  k.c->name, t->name, random, tol_r);
        if (along_g > worst.along_g || isnan(along_g)) {
            worst.along_g = along_g;
            snprintf(worst.along_g_at, sizeof worst.along_g_at, "%s", t->name);
        }
        if (random > worst.random || isnan(random)) {
            worst.random = random;
            snprintf(worst.random_at, sizeof worst.random_at, "%s", t->name);
        }
    }
    fprintf(stderr, "gradcheck %-34s %s worst along g %.2e (%s), random %.2e (%s)\n", k.c->name,
            grad == GEMM_BF16 ? (gemm_bf16_uses_amx() ? "bf16 amx" : "bf16") : "fp32",
            worst.along_g, worst.along_g_at, worst.random, worst.random_at);
    case_free(&k);
}

static void run_config(int ci) {
    run_case(&configs[ci], 1000 + (uint64_t)ci, GEMM_FP32, TOL_ALONG_G, TOL_RANDOM);
}

Test(gradcheck, gqa_relu2_rope_alternate) {
    run_config(0);
}
Test(gradcheck, mha_gelu_learned_tied_all_dropout) {
    run_config(1);
}
Test(gradcheck, mqa_swiglu_rope_first_half) {
    run_config(2);
}
Test(gradcheck, gqa_geglu_learned_list_nocap) {
    run_config(3);
}
Test(gradcheck, mqa_relu2_rope_no_ve) {
    run_config(4);
}

/* bf16 products, on AMX where the CPU has it and on vdpbf16ps alone: the
 * first config (head size 8: the linear layers in bf16, the attention in
 * float32) and one of head size 32, whose attention runs in bf16 too
 * (engine/attn_bf16.c). */
/* clang-format off */
static const gc_config_t bf16_hd32 = {
    .name = "bf16_hd32_gqa_relu2_rope", .vocab = 48, .depth = 2, .n_embd = 64, .n_head = 2,
    .n_kv_head = 1, .mlp_ratio = 2, .mlp = MLP_RELU2, .seq_len = 20, .pos = POS_ROPE,
    .softcap = 15, .window = "SL", .ve = "alternate", .gate_channels = 32, .B = 2, .T = 20,
    .mode = GPT_EVAL};
/* clang-format on */

Test(gradcheck, bf16_gradients_within_bf16_tolerances) {
    if (!tu_select_bf16(1)) return;
    for (int amx = gemm_bf16_amx_cpu(); amx >= 0; amx--) {
        gemm_bf16_set_amx(amx);
        run_case(&configs[0], 1000, GEMM_BF16, TOL_BF16, TOL_BF16);
        run_case(&bf16_hd32, 1100, GEMM_BF16, TOL_BF16, TOL_BF16);
    }
    gemm_bf16_set_amx(1);
    tu_select_isa_auto();
}

/* The check itself must fail on a wrong gradient: a tensor's gradient scaled
 * by 1.05 (a missing factor), and one with its largest row (or element)
 * negated (a sign error in one head or one scalar). */
Test(gradcheck, corrupted_gradient_is_caught) {
    gc_case_t k;
    case_init(&k, &configs[0], 1000);
    const char *names[] = {"transformer.h.1.attn.c_k.weight", "x0_lambdas"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const gpt_tensor_t *t = gpt_find_tensor(k.m, names[i]);
        cr_assert(t != NULL, "no tensor %s", names[i]);
        float *bad = malloc(sizeof(float) * t->numel);
        cr_assert(bad != NULL);
        const float *g = k.g + t->offset;
        double along_g, random;

        for (size_t j = 0; j < t->numel; j++) bad[j] = 1.05f * g[j];
        check_tensor(&k, t, bad, &along_g, &random);
        cr_expect(along_g > TOL_ALONG_G, "%s scaled by 1.05 passed (along g %.3g)", t->name,
                  along_g);

        int best = 0;
        double best_norm = -1;
        for (int r = 0; r < t->rows; r++) {
            double s = 0;
            for (int c = 0; c < t->cols; c++) s += (double)g[r * t->cols + c] * g[r * t->cols + c];
            if (s > best_norm) {
                best_norm = s;
                best = r;
            }
        }
        memcpy(bad, g, sizeof(float) * t->numel);
        for (int c = 0; c < t->cols; c++) bad[best * t->cols + c] = -bad[best * t->cols + c];
        check_tensor(&k, t, bad, &along_g, &random);
        cr_expect(along_g > TOL_ALONG_G || random > TOL_RANDOM,
                  "%s with row %d negated passed (along g %.3g, random %.3g)", t->name, best,
                  along_g, random);
        free(bad);
    }
    case_free(&k);
}

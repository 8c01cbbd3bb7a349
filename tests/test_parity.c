/* test_parity.c - the C engine against the PyTorch reference.
 *
 * Every directory under $NIGHTSHIFT_SRC/tests/fixtures/parity holds one tiny
 * model (spec.json), its weights, a batch (tokens.bin) and what
 * tests/torch/reference.py computed for it in float64 (expected.json: the mean
 * loss; grads.safetensors: every parameter's gradient). The engine runs the
 * same forward (evaluation mode) and backward in float32 and must agree:
 *     |loss - ref| <= 1e-5 |ref|
 *     max|g - g_ref| <= 1e-4 max|g_ref|, per tensor
 * and the model and the reference must have exactly the same tensors. torch
 * itself in float32 stays within ~1e-7 (loss) and ~2e-6 (gradients) of its
 * float64 run on these fixtures (expected.json records both), so the bounds
 * leave the engine's float32 rounding plenty of room and still catch a wrong
 * formula. Regenerate the fixtures with `make fixtures`.
 *
 * With bf16 products (train.precision bf16, where the CPU has AVX512_BF16;
 * on AMX tiles and on vdpbf16ps alone) the same batch is checked against
 * two more references (tests/torch/gen_bf16_fixtures.py, bf16.json):
 * `rounded`, float64 with every linear layer's operands rounded to bf16 as
 * the engine rounds them (and, where the head size is a multiple of 32, the
 * attention's products' operands as engine/attn_bf16.c rounds them: the
 * fixture hd32_gqa_sliding takes that path), and `autocast`, PyTorch's CPU
 * bf16 autocast (which also rounds the layers' outputs and runs the
 * element-wise work in bf16).
 * The bounds are in bf16's unit roundoff u = 2^-8: one rounded operand is
 * off by up to u of itself, a product of two by 2u, and a gradient passes
 * through several products. Measured against the float64 run, autocast's
 * gradients are off by 2.0-4.9e-2 of a tensor's largest value on these
 * models (5-13 u), the rounded run's by 1.2-1.8e-2. Per tensor, with
 * e(a, b) = max|a - b| / max|g_float64|:
 *     e(engine, rounded)  <= 2.5 u  (float32 against float64 arithmetic, and
 *                                    an operand within float32 rounding of a
 *                                    bf16 boundary that the two round apart:
 *                                    the rounded run itself moves its loss by
 *                                    6e-5 between float32 and float64 on the
 *                                    16-wide geglu model; engine: up to 6.0e-3)
 *     e(engine, autocast) <= 16 u   (two bf16 schemes of one model; up to 4.3e-2)
 *     e(engine, float64)  >= u / 4  (somewhere: bf16 did run; 1.3-1.8e-2)
 * and the loss within 2e-4 of the rounded run's (up to 6.5e-5 measured) and
 * within u / 4 of autocast's (up to 5.1e-4). hd32_gqa_sliding (bf16
 * attention) is within these: against rounded 3.1e-3 (AMX) and 6.3e-3
 * (vdpbf16ps alone; x0_lambdas, a 2-element sum that cancels heavily),
 * against autocast 4.9e-2, float64 5.5-6.2e-2 (autocast's own 1.0e-1, all
 * on x0_lambdas), loss 2.2e-6 of the rounded run's. Those bounds alone
 * barely tell a bf16 attention from a float32 one (with the attention's
 * products in float32 the engine is 2.4e-4 from rounded's loss and 1.0e-2 on
 * x0_lambdas), so where the attention is in bf16 bf16.json also holds the
 * rounded run's loss with the attention left in float64, and the engine's
 * loss must be within 1/8 of the way from the rounded run's to it: measured
 * 0.009 (AMX) and 0.004 (vdpbf16ps), so the limit is 14x the larger; 1.0
 * with the attention's products in float32, 0.16-0.26 with its
 * probabilities rounded after the softmax's normalisation instead of before
 * (which also fails the rounded bound, up to 4.0e-2 on x0_lambdas). Below
 * this fixture's resolution: the row dot D taking dO unrounded (worst
 * gradient 4.4e-3 from rounded; the attn suite's window-0 case catches it). */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/ckpt.h"
#include "engine/gemm.h"
#include "engine/gemm_bf16.h"
#include "engine/gpt.h"
#include "engine/spec.h"
#include "tests/testutil.h"

#define LOSS_RTOL               1e-5
#define GRAD_RTOL               1e-4
#define BF16_U                  0x1p-8 /* bf16's unit roundoff */
#define BF16_ROUNDED_TOL        (2.5 * BF16_U)
#define BF16_AUTOCAST_TOL       (16 * BF16_U)
#define BF16_MOVED              (BF16_U / 4)
#define BF16_LOSS_RTOL          2e-4
#define BF16_AUTOCAST_LOSS_RTOL (BF16_U / 4)
#define BF16_ATTN_SHARE         (1.0 / 8)
#define MIN_CONFIGS             6 /* gen_fixtures.py writes six; fewer means files went missing */
#define MAX_CONFIGS             64
#define ROOT_LEN                1024 /* the fixture root; a config dir adds a file name (<= 256) */
#define PATH_LEN                2048

static const char *fixture_root(char *buf, size_t len) {
    snprintf(buf, len, "%s/tests/fixtures/parity", tu_src());
    return buf;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The config directories under root, sorted. Returns their count; names[i]
 * are malloc'd (caller frees each). */
static int list_configs(const char *root, char **names, int max) {
    DIR *d = opendir(root);
    cr_assert(d != NULL, "cannot open %s: %s", root, strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[PATH_LEN];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", root, e->d_name);
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        cr_assert(n < max, "more than %d fixture directories", max);
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_names);
    return n;
}

static double expected_loss(const char *dir) {
    char path[PATH_LEN];
    size_t len;
    snprintf(path, sizeof path, "%s/expected.json", dir);
    char *text = tu_read_all(path, &len);
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    cr_assert(root != NULL, "%s: not valid JSON", path);
    const cJSON *loss = cJSON_GetObjectItemCaseSensitive(root, "loss");
    cr_assert(cJSON_IsNumber(loss), "%s: no numeric \"loss\"", path);
    double v = loss->valuedouble;
    cJSON_Delete(root);
    return v;
}

/* Runs one fixture directory; every mismatch is a (non-fatal) expectation
 * failure naming the config and tensor, so one run reports all of them. */
/* The fixture's tokens.bin (rows of T + 1 little-endian int32) as inputs
 * and targets of *B rows; the caller frees both. */
static void read_rows(const char *dir, int T, int *B, int **inputs, int **targets) {
    char path[PATH_LEN];
    size_t len;
    snprintf(path, sizeof path, "%s/tokens.bin", dir);
    char *raw = tu_read_all(path, &len);
    size_t row = 4 * ((size_t)T + 1);
    cr_assert(len > 0 && len % row == 0, "%s: %zu bytes is not rows of %d int32", path, len, T + 1);
    *B = (int)(len / row);
    *inputs = malloc(sizeof(int) * (size_t)*B * T);
    *targets = malloc(sizeof(int) * (size_t)*B * T);
    cr_assert(*inputs && *targets);
    for (int b = 0; b < *B; b++)
        for (int t = 0; t <= T; t++) {
            const unsigned char *p = (const unsigned char *)raw + row * b + 4 * (size_t)t;
            uint32_t u = p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            int id = (int)(int32_t)u; /* little-endian int32 */
            if (t < T) (*inputs)[b * T + t] = id;
            if (t > 0) (*targets)[b * T + t - 1] = id;
        }
    free(raw);
}

/* Every model tensor's gradient against its reference in g (same shape,
 * within GRAD_RTOL of the tensor's largest reference magnitude). Returns the
 * worst ratio, its tensor in *worst_name. */
static double compare_grads(const char *name, const gpt_t *m, const ckpt_file_t *g,
                            const char **worst_name) {
    double worst = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor_t *t = &m->tensors[i];
        const ckpt_tensor_t *r = ckpt_file_find(g, t->name);
        cr_expect(r != NULL, "%s: model tensor %s has no reference gradient", name, t->name);
        if (!r) continue;
        int shape_ok = r->numel == t->numel && r->ndim == t->ndim && r->shape[0] == t->rows &&
                       (t->ndim == 1 || r->shape[1] == t->cols);
        cr_expect(shape_ok, "%s: %s: reference shape differs from the model's (%d, %d)", name,
                  t->name, t->rows, t->cols);
        if (!shape_ok) continue;
        const float *gc = m->grads + t->offset;
        double scale = 0, maxerr = 0;
        size_t at = 0;
        for (size_t j = 0; j < t->numel; j++) {
            double e = fabs((double)gc[j] - (double)r->data[j]);
            if (fabs((double)r->data[j]) > scale) scale = fabs((double)r->data[j]);
            if (e > maxerr || isnan(e)) {
                maxerr = e;
                at = j;
            }
        }
        double ratio = scale > 0 ? maxerr / scale : maxerr;
        if (ratio > worst || isnan(ratio)) {
            worst = ratio;
            *worst_name = t->name;
        }
        cr_expect(maxerr <= GRAD_RTOL * scale,
                  "%s: gradient of %s differs: max |g - ref| = %.3g at element %zu (%.6g vs "
                  "%.6g), %.3g of the tensor's largest reference magnitude %.3g (limit %g)",
                  name, t->name, maxerr, at, (double)gc[at], (double)r->data[at], ratio, scale,
                  GRAD_RTOL);
    }
    return worst;
}

static void check_config(const char *root, const char *name) {
    char dir[PATH_LEN - 64], path[PATH_LEN], err[512];
    snprintf(dir, sizeof dir, "%s/%s", root, name);

    spec_t spec;
    snprintf(path, sizeof path, "%s/spec.json", dir);
    cr_assert(spec_load(path, &spec, err, sizeof err) == 0, "%s: %s", path, err);
    gpt_t *m = gpt_new(&spec.model, err, sizeof err);
    cr_assert(m != NULL, "%s: gpt_new: %s", name, err);
    snprintf(path, sizeof path, "%s/weights.safetensors", dir);
    cr_assert(ckpt_load(m, path, err, sizeof err) == 0, "%s: %s", path, err);

    int T = spec.model.seq_len, B, *inputs, *targets;
    read_rows(dir, T, &B, &inputs, &targets);

    double ref = expected_loss(dir);
    gpt_zero_grad(m);
    float loss;
    cr_assert_eq(gpt_forward(m, inputs, targets, B, T, GPT_EVAL, &loss), 0, "%s: forward", name);
    gpt_backward(m, 1.0f);
    double loss_err = fabs((double)loss - ref);
    cr_expect(loss_err <= LOSS_RTOL * fabs(ref),
              "%s: loss %.9g, reference %.9g (relative error %.3g > %g)", name, (double)loss, ref,
              loss_err / fabs(ref), LOSS_RTOL);

    ckpt_file_t g;
    snprintf(path, sizeof path, "%s/grads.safetensors", dir);
    cr_assert(ckpt_read(path, &g, err, sizeof err) == 0, "%s: %s", path, err);

    /* Every model tensor has a reference gradient of the same shape... */
    const char *worst_name = "(none)";
    double worst = compare_grads(name, m, &g, &worst_name);
    /* ...and the reference has no tensor the model lacks. */
    for (int i = 0; i < g.n; i++)
        cr_expect(gpt_find_tensor(m, g.tensors[i].name) != NULL,
                  "%s: reference tensor %s is not in the model", name, g.tensors[i].name);

    fprintf(stderr,
            "parity %-26s loss %.7f ref %.7f rel err %.2e | worst grad err %.2e of max|g| (%s)\n",
            name, (double)loss, ref, loss_err / fabs(ref), worst, worst_name);

    /* The forward-only mode the evaluation runs gives every token's loss
     * bit for bit, and leaves nothing for a backward to use. */
    float *losses = malloc(sizeof(float) * (size_t)B * T);
    cr_assert(losses);
    memcpy(losses, gpt_token_losses(m), sizeof(float) * (size_t)B * T);
    float score_loss;
    cr_assert_eq(gpt_forward(m, inputs, targets, B, T, GPT_SCORE, &score_loss), 0);
    cr_expect(!memcmp(losses, gpt_token_losses(m), sizeof(float) * (size_t)B * T),
              "%s: GPT_SCORE's token losses differ from GPT_EVAL's", name);
    cr_expect(fabs((double)score_loss - (double)loss) <= 1e-6 * fabs((double)loss),
              "%s: GPT_SCORE's mean loss %.9g, GPT_EVAL's %.9g", name, (double)score_loss,
              (double)loss);
    gpt_zero_grad(m);
    gpt_backward(m, 1.0f);
    for (size_t j = 0; j < m->n_params; j++)
        if (m->grads[j] != 0.0f) {
            cr_expect(0, "%s: a backward after GPT_SCORE changed gradient %zu", name, j);
            break;
        }
    free(losses);

    ckpt_file_close(&g);
    free(inputs);
    free(targets);
    gpt_free(m);
    spec_free(&spec);
}

Test(parity, fixtures_present) {
    char root[ROOT_LEN];
    char *names[MAX_CONFIGS];
    int n = list_configs(fixture_root(root, sizeof root), names, MAX_CONFIGS);
    cr_expect(n >= MIN_CONFIGS, "%s: %d configs, expected at least %d", root, n, MIN_CONFIGS);
    const char *files[] = {"spec.json",
                           "weights.safetensors",
                           "tokens.bin",
                           "expected.json",
                           "grads.safetensors",
                           "bf16.json",
                           "grads_rounded.safetensors",
                           "grads_autocast.safetensors"};
    for (int i = 0; i < n; i++) {
        for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
            char path[PATH_LEN];
            struct stat st;
            snprintf(path, sizeof path, "%s/%s/%s", root, names[i], files[f]);
            cr_expect(stat(path, &st) == 0 && st.st_size > 0, "missing or empty: %s", path);
        }
        free(names[i]);
    }
}

Test(parity, loss_and_gradients_match_torch) {
    char root[ROOT_LEN];
    char *names[MAX_CONFIGS];
    int n = list_configs(fixture_root(root, sizeof root), names, MAX_CONFIGS);
    cr_assert(n > 0, "no fixtures under %s", root);
    for (int i = 0; i < n; i++) {
        check_config(root, names[i]);
        free(names[i]);
    }
}

/* ------------------------------------------------------------------ bf16 */

/* A number of bf16.json. */
static double bf16_number(const char *dir, const char *key) {
    char path[PATH_LEN];
    size_t len;
    snprintf(path, sizeof path, "%s/bf16.json", dir);
    char *text = tu_read_all(path, &len);
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    cr_assert(root != NULL, "%s: not valid JSON", path);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    cr_assert(cJSON_IsNumber(v), "%s: no numeric \"%s\"", path, key);
    double x = v->valuedouble;
    cJSON_Delete(root);
    return x;
}

/* max|a - b| over max|scale| of one tensor, a from the model's grads. */
static double tensor_ratio(const float *a, const ckpt_tensor_t *b, const ckpt_tensor_t *scale) {
    double m = 0, e = 0;
    for (size_t j = 0; j < scale->numel; j++) {
        m = fmax(m, fabs((double)scale->data[j]));
        double d = fabs((double)a[j] - (double)b->data[j]);
        if (d > e || isnan(d)) e = d;
    }
    return m > 0 ? e / m : e;
}

static void check_config_bf16(const char *root, const char *name, const char *kernel) {
    char dir[PATH_LEN - 64], path[PATH_LEN], err[512];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    spec_t spec;
    snprintf(path, sizeof path, "%s/spec.json", dir);
    cr_assert(spec_load(path, &spec, err, sizeof err) == 0, "%s: %s", path, err);
    gpt_t *m = gpt_new(&spec.model, err, sizeof err);
    cr_assert(m != NULL, "%s: gpt_new: %s", name, err);
    snprintf(path, sizeof path, "%s/weights.safetensors", dir);
    cr_assert(ckpt_load(m, path, err, sizeof err) == 0, "%s: %s", path, err);
    int T = spec.model.seq_len, B, *inputs, *targets;
    read_rows(dir, T, &B, &inputs, &targets);

    gpt_zero_grad(m);
    float loss;
    cr_assert_eq(gpt_forward(m, inputs, targets, B, T, GPT_EVAL, &loss), 0, "%s: forward", name);
    gpt_backward(m, 1.0f);
    const double rounded = bf16_number(dir, "rounded_loss");
    const double autocast = bf16_number(dir, "autocast_loss");
    cr_expect(fabs(loss - rounded) <= BF16_LOSS_RTOL * fabs(rounded),
              "%s (%s): loss %.9g, rounded-operand reference %.9g", name, kernel, (double)loss,
              rounded);
    cr_expect(fabs(loss - autocast) <= BF16_AUTOCAST_LOSS_RTOL * fabs(autocast),
              "%s (%s): loss %.9g, autocast %.9g", name, kernel, (double)loss, autocast);
    if (spec.model.head_dim % 32 == 0) { /* the attention's products ran in bf16 */
        const double unrounded = bf16_number(dir, "rounded_float_attention_loss");
        const double share = fabs(loss - rounded) / fabs(unrounded - rounded);
        cr_expect(share <= BF16_ATTN_SHARE,
                  "%s (%s): loss %.9g is %.3g of the way from the rounded-operand reference %.9g "
                  "to its run with the attention unrounded %.9g (limit %g)",
                  name, kernel, (double)loss, share, rounded, unrounded, BF16_ATTN_SHARE);
        fprintf(stderr,
                "parity bf16 %-11s %-26s attention rounded: loss %.3g of the way to "
                "unrounded %.7f\n",
                kernel, name, share, unrounded);
    }

    ckpt_file_t g64, grd, gac;
    const char *files[] = {"grads.safetensors", "grads_rounded.safetensors",
                           "grads_autocast.safetensors"};
    ckpt_file_t *gs[] = {&g64, &grd, &gac};
    for (int k = 0; k < 3; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[k]);
        cr_assert(ckpt_read(path, gs[k], err, sizeof err) == 0, "%s: %s", path, err);
    }
    double worst_rd = 0, worst_ac = 0, moved = 0;
    const char *at_rd = "", *at_ac = "";
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor_t *t = &m->tensors[i];
        const ckpt_tensor_t *r64 = ckpt_file_find(&g64, t->name);
        const ckpt_tensor_t *rrd = ckpt_file_find(&grd, t->name);
        const ckpt_tensor_t *rac = ckpt_file_find(&gac, t->name);
        cr_assert(r64 && rrd && rac && r64->numel == t->numel && rrd->numel == t->numel &&
                      rac->numel == t->numel,
                  "%s: %s: missing or misshapen in the bf16 fixtures", name, t->name);
        const float *gc = m->grads + t->offset;
        const double e_rd = tensor_ratio(gc, rrd, r64), e_ac = tensor_ratio(gc, rac, r64);
        moved = fmax(moved, tensor_ratio(gc, r64, r64));
        cr_expect(e_rd <= BF16_ROUNDED_TOL,
                  "%s (%s): gradient of %s: %.3g of its largest value from the rounded-operand "
                  "reference (limit %g)",
                  name, kernel, t->name, e_rd, BF16_ROUNDED_TOL);
        cr_expect(e_ac <= BF16_AUTOCAST_TOL,
                  "%s (%s): gradient of %s: %.3g of its largest value from autocast's (limit %g)",
                  name, kernel, t->name, e_ac, BF16_AUTOCAST_TOL);
        if (e_rd > worst_rd) worst_rd = e_rd, at_rd = t->name;
        if (e_ac > worst_ac) worst_ac = e_ac, at_ac = t->name;
    }
    cr_expect(moved >= BF16_MOVED, "%s (%s): gradients within %.3g of float64's: not bf16", name,
              kernel, moved);
    fprintf(stderr,
            "parity bf16 %-11s %-26s loss %.7f rounded %.7f autocast %.7f | worst grad err vs "
            "rounded %.2e (%s), vs autocast %.2e (%s), vs float64 %.2e\n",
            kernel, name, (double)loss, rounded, autocast, worst_rd, at_rd, worst_ac, at_ac, moved);
    for (int k = 0; k < 3; k++) ckpt_file_close(gs[k]);
    free(inputs);
    free(targets);
    gpt_free(m);
    spec_free(&spec);
}

/* Every fixture with bf16 products, on AMX tiles where the CPU has them and
 * on vdpbf16ps alone; where the CPU has no bf16 (or NIGHTSHIFT_ISA forces a
 * path without it) the test says so and checks nothing else. */
Test(parity, bf16_loss_and_gradients_match_torch_autocast) {
    char root[ROOT_LEN];
    char *names[MAX_CONFIGS];
    if (!tu_select_bf16(2)) return;
    int n = list_configs(fixture_root(root, sizeof root), names, MAX_CONFIGS);
    cr_assert(n > 0, "no fixtures under %s", root);
    int attn = 0; /* fixtures whose attention runs in bf16 (head_dim % 32 == 0) */
    for (int i = 0; i < n; i++) {
        char path[PATH_LEN], err[512];
        spec_t spec;
        snprintf(path, sizeof path, "%s/%s/spec.json", root, names[i]);
        cr_assert(spec_load(path, &spec, err, sizeof err) == 0, "%s: %s", path, err);
        attn += spec.model.head_dim % 32 == 0;
        spec_free(&spec);
    }
    cr_expect(attn > 0, "no fixture has a head size the bf16 attention takes (a multiple of 32)");
    for (int amx = gemm_bf16_amx_cpu(); amx >= 0; amx--) {
        gemm_bf16_set_amx(amx);
        for (int i = 0; i < n; i++) check_config_bf16(root, names[i], amx ? "amx" : "avx512-bf16");
    }
    gemm_bf16_set_amx(1);
    for (int i = 0; i < n; i++) free(names[i]);
    tu_select_isa_auto();
}

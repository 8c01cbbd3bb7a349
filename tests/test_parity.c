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
 * formula. Regenerate the fixtures with `make fixtures`. */
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
#include "engine/gpt.h"
#include "engine/spec.h"
#include "tests/testutil.h"

#define LOSS_RTOL   1e-5
#define GRAD_RTOL   1e-4
#define MIN_CONFIGS 5 /* gen_fixtures.py writes five; fewer means files went missing */
#define MAX_CONFIGS 64
#define ROOT_LEN    1024 /* the fixture root; a config dir adds a file name (<= 256) */
#define PATH_LEN    2048

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
    const char *files[] = {"spec.json", "weights.safetensors", "tokens.bin", "expected.json",
                           "grads.safetensors"};
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

/* quiet.c - a run's quiet reference: the shape's key, its bench, and the
 * cache of benches (quiet.h). */
#include "engine/quiet.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/calibrate.h"
#include "engine/gemm_bf16.h"
#include "engine/rng.h"
#include "engine/util.h"

/* A bench is quiet when its threads waited under QUIET_MAX_WAIT of their
 * runnable time (the real-time throttling of a pinned test takes 5%), others
 * used at most CALIBRATE_QUIET_OTHERS of its CPUs and of the whole machine,
 * and steal stayed under QUIET_MAX_STEAL (a VM whose host is busy). */
#define QUIET_MAX_WAIT  0.10
#define QUIET_MAX_STEAL 0.05

/* Timings kept (a tiny model's micro-batch takes well under a millisecond). */
#define QUIET_BENCH_MAX_TIMINGS 8192

int quiet_shape_key(const spec_t *s, int threads, const char *isa, const char *precision, char *key,
                    size_t len) {
    /* The spec with everything that does not set a step's speed at its
     * default; the labels (name, tags) are not part of a configuration. */
    spec_t shape;
    spec_defaults(&shape);
    shape.model = s->model;
    shape.train.batch_size = s->train.batch_size;
    shape.train.total_batch_tokens = s->train.total_batch_tokens;
    shape.train.ns_steps = s->train.ns_steps;
    shape.train.precision = s->train.precision;
    char hash[SPEC_HASH_HEX];
    int rc = spec_config_hash(&shape, hash);
    spec_free(&shape);
    if (rc < 0) return -1;
    char cpu[96];
    calibrate_cpu_model(cpu, sizeof cpu);
    snprintf(key, len, "%.16s, %d threads, %s kernels, %s, %s", hash, threads, isa, precision, cpu);
    return 0;
}

double quiet_bench_seconds(double time_budget_s) {
    return fmin(QUIET_BENCH_MAX_S, fmax(QUIET_BENCH_MIN_S, QUIET_BENCH_SHARE * time_budget_s));
}

bool quiet_is(const share_t *sh, bool whole_machine) {
    return sh->cpu >= 1 - QUIET_MAX_WAIT && sh->others >= 0 &&
           sh->others <= CALIBRATE_QUIET_OTHERS && sh->steal >= 0 && sh->steal <= QUIET_MAX_STEAL &&
           (!whole_machine ||
            (sh->machine_others >= 0 && sh->machine_others <= CALIBRATE_QUIET_OTHERS));
}

bool quiet_whole_machine(void) {
    const char *scope = getenv("NIGHTSHIFT_QUIET_SCOPE");
    return !scope || strcmp(scope, "cpus") != 0;
}

bool quiet_bench_enabled(void) {
    const char *scope = getenv("NIGHTSHIFT_QUIET_SCOPE");
    return !scope || strcmp(scope, "steps") != 0;
}

/* One micro-batch forward and backward; NS_ERR_NOMEM with err when it fails. */
static int micro_batch(gpt_t *m, const int *in, const int *tg, int B, int T, float scale, char *err,
                       size_t errlen) {
    float loss;
    if (gpt_forward(m, in, tg, B, T, GPT_TRAIN, &loss) < 0) {
        snprintf(err, errlen, "quiet bench: out of memory in the forward pass");
        return NS_ERR_NOMEM;
    }
    gpt_backward(m, scale);
    return 0;
}

/* The update at the schedule's start (its cost does not depend on the values). */
static void update(gpt_t *m, optim_t *o, const spec_t *s) {
    optim_step(o, m, 1.0, s->train.muon_momentum_start, s->train.weight_decay);
    gpt_zero_grad(m);
}

int quiet_bench(gpt_t *m, optim_t **o, const spec_t *s, double seconds, quiet_bench_t *out,
                char *err, size_t errlen) {
    const int B = s->train.batch_size, T = s->model.seq_len, V = s->model.vocab_size;
    const int accum = s->train.total_batch_tokens / (B * T);
    memset(out, 0, sizeof *out);
    double t_start = util_now();
    int *in = malloc((size_t)B * T * sizeof *in), *tg = malloc((size_t)B * T * sizeof *tg);
    double *micro_s = malloc(QUIET_BENCH_MAX_TIMINGS * sizeof *micro_s);
    double *update_s = malloc(QUIET_BENCH_MAX_TIMINGS * sizeof *update_s);
    int rc = NS_ERR_NOMEM;
    snprintf(err, errlen, "quiet bench: out of memory");
    if (!in || !tg || !micro_s || !update_s) goto done;
    /* random tokens: a step's time does not depend on them, and the run's
     * sampler is left where it is */
    rng_t r;
    rng_seed(&r, 0x9e3779b97f4a7c15ull);
    for (int i = 0; i < B * T; i++) {
        in[i] = (int)rng_below(&r, (uint64_t)V);
        tg[i] = (int)rng_below(&r, (uint64_t)V);
    }
    /* warm-up: first touches of the activations, the weights' bf16 cache */
    if ((rc = micro_batch(m, in, tg, B, T, 1.0f / (float)accum, err, errlen)) < 0) goto done;
    update(m, *o, s);

    /* Micro-batches and updates in the step's proportion (an update after
     * each accum micro-batches) until the time is spent, at least one each,
     * each timed alone: the step is accum times the median micro-batch plus
     * the median update, so that one interruption does not set the reference. */
    share_snap_t a, b;
    share_snap(&a);
    double t0 = util_now();
    int n_micro = 0, n_update = 0;
    while ((n_micro == 0 || n_update == 0 || util_now() - t0 < seconds) &&
           n_micro < QUIET_BENCH_MAX_TIMINGS && n_update < QUIET_BENCH_MAX_TIMINGS) {
        double t = util_now();
        if (n_micro < (n_update + 1) * accum) {
            if ((rc = micro_batch(m, in, tg, B, T, 1.0f / (float)accum, err, errlen)) < 0)
                goto done;
            micro_s[n_micro++] = util_now() - t;
        } else {
            update(m, *o, s);
            update_s[n_update++] = util_now() - t;
        }
    }
    share_snap(&b);
    share_between(&a, &b, &out->share);
    out->quiet = quiet_is(&out->share, quiet_whole_machine());
    double step_s = accum * util_median(micro_s, n_micro) + util_median(update_s, n_update);
    out->tok_s = step_s > 0 ? (double)s->train.total_batch_tokens / step_s : 0;

    /* as setup made them: the same weights, a new optimiser */
    gpt_zero_grad(m);
    gpt_init_weights(m, s->seed);
    gemm_bf16_weights_changed();
    optim_free(*o);
    *o = optim_new(m, &s->train, err, errlen);
    rc = *o ? 0 : NS_ERR_NOMEM;
done:
    free(in);
    free(tg);
    free(micro_s);
    free(update_s);
    out->seconds = util_now() - t_start;
    return rc;
}

/* ------------------------------------------------------------------ cache */

static char *cache_path(const char *dir) {
    char *p = NULL;
    if (asprintf(&p, "%s/quiet_bench.json", dir) < 0) return NULL;
    return p;
}

static cJSON *read_cache(const char *path) {
    size_t len = 0;
    char *text = path ? util_read_file(path, 1 << 20, &len, NULL, 0) : NULL;
    cJSON *o = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    return o;
}

double quiet_cached(const char *dir, const char *key) {
    char *path = cache_path(dir);
    cJSON *o = read_cache(path);
    free(path);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, "tokens_per_second");
    double tok_s = cJSON_IsNumber(v) && v->valuedouble > 0 ? v->valuedouble : 0;
    cJSON_Delete(o);
    return tok_s;
}

int quiet_store(const char *dir, const char *key, const quiet_bench_t *b, char *err,
                size_t errlen) {
    char *path = cache_path(dir), *out = NULL;
    cJSON *o = read_cache(path);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        o = cJSON_CreateObject();
    }
    int rc = 0;
    if (o && !cJSON_GetObjectItemCaseSensitive(o, key)) {
        cJSON *e = cJSON_AddObjectToObject(o, key);
        char at[32];
        time_t now = time(NULL);
        strftime(at, sizeof at, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
        if (e) {
            cJSON_AddNumberToObject(e, "tokens_per_second", b->tok_s);
            cJSON_AddStringToObject(e, "measured_at", at);
            cJSON_AddNumberToObject(e, "cpu_share", b->share.cpu);
            cJSON_AddNumberToObject(e, "others_cpu_share", b->share.others);
            cJSON_AddNumberToObject(e, "steal_share", b->share.steal);
        }
        out = cJSON_Print(o);
        rc = out && path ? util_write_file_atomic(path, out, strlen(out), err, errlen) : -1;
        if (!out || !path) snprintf(err, errlen, "quiet bench: out of memory");
    } else if (!o) {
        snprintf(err, errlen, "quiet bench: out of memory");
        rc = -1;
    }
    free(out);
    cJSON_Delete(o);
    free(path);
    return rc;
}

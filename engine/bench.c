/* bench.c - `nightshift bench`: the speed of full training steps.
 *
 *     nightshift bench --spec SPEC.json [--steps N] [--warmup W] [--seed S]
 *
 * Builds the spec's model (vocab_size must be given) with the training
 * initialisation and its optimiser, draws one batch of train.batch_size rows
 * of random token ids, and runs W untimed then N timed training steps on it:
 * zero_grad, forward (training mode), backward, optimiser step, exactly what
 * `train` does per micro-step without the data loader. Prints `key: value`
 * lines: the median and fastest step in ms, tokens per second at the median,
 * the process's CPU time per timed step (all threads: on a shared machine it
 * moves less with other work than the wall time does), the training FLOPs
 * per token (`cost`), each phase's share of the timed steps from the
 * engine's timers (prof.h: attention, matmul, elementwise = the rest of
 * forward and backward, optim), the kernel path that ran (gemm.h; forced by
 * NIGHTSHIFT_ISA), the precision of its products (train.precision) and
 * OpenBLAS's kernels, and the process's peak RSS in MiB.
 * tests/bench/bench.py runs it beside the PyTorch reference. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/calibrate.h"
#include "engine/cli.h"
#include "engine/cost.h"
#include "engine/gemm.h"
#include "engine/gemm_bf16.h"
#include "engine/gpt.h"
#include "engine/optim.h"
#include "engine/prof.h"
#include "engine/rng.h"
#include "engine/spec.h"
#include "engine/threads.h"
#include "engine/util.h"

#define BENCH_MAX_STEPS 100000

static void usage(FILE *out) {
    fprintf(out, "usage: nightshift bench --spec SPEC.json [--steps N] [--warmup W] [--seed S]\n"
                 "Times N full training steps (forward, backward, optimiser; default 10) of the\n"
                 "spec's model on one random batch of train.batch_size rows, after W untimed\n"
                 "steps (default 2), and prints step_ms_median, tokens_per_second, the share\n"
                 "of each phase and peak_rss_mb. model.vocab_size is required.\n");
}

static int parse_count(const char *text, int lo, int *out) {
    char *end = NULL;
    errno = 0;
    long n = strtol(text, &end, 10);
    if (errno || end == text || *end != '\0' || n < lo || n > BENCH_MAX_STEPS) return -1;
    *out = (int)n;
    return 0;
}

typedef struct {
    const char *spec_path;
    int steps, warmup, seed;
} bench_args_t;

/* Returns 0, 1 for --help (printed), or 2 after a usage error (printed). */
static int bench_parse(int argc, char **argv, bench_args_t *a) {
    static const struct option opts[] = {
        {"spec", required_argument, 0, 'p'},   {"steps", required_argument, 0, 'n'},
        {"warmup", required_argument, 0, 'w'}, {"seed", required_argument, 0, 's'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    int ch;
    *a = (bench_args_t){.steps = 10, .warmup = 2, .seed = 1};
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int bad = 0;
        switch (ch) {
        case 'p':
            a->spec_path = optarg;
            break;
        case 'n':
            bad = parse_count(optarg, 1, &a->steps);
            break;
        case 'w':
            bad = parse_count(optarg, 0, &a->warmup);
            break;
        case 's':
            bad = parse_count(optarg, 0, &a->seed);
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            bad = 1;
        }
        if (bad) {
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc || !a->spec_path) {
        usage(stderr);
        return 2;
    }
    return 0;
}

/* warmup untimed steps, then steps timed into step_s (their sum in *total),
 * the phases' timers reset in between; *loss the last step's. Returns 0, or
 * -1 after saying why on stderr. */
static int bench_steps(gpt_t *m, optim_t *o, const spec_t *spec, const int *in, const int *tg,
                       const bench_args_t *a, double *step_s, double *total, double *cpu,
                       float *loss) {
    const int B = spec->train.batch_size, T = spec->model.seq_len;
    *total = 0.0;
    *cpu = util_cpu_seconds(); /* again at the first timed step */
    for (int s = -a->warmup; s < a->steps; s++) {
        if (s == 0) {
            prof_reset();
            *cpu = util_cpu_seconds();
        }
        double t0 = util_now();
        gpt_zero_grad(m);
        if (gpt_forward(m, in, tg, B, T, GPT_TRAIN, loss) < 0) {
            fprintf(stderr, "bench: out of memory in the forward pass at step %d\n", s);
            return -1;
        }
        if (isnan(*loss)) {
            fprintf(stderr, "bench: forward pass gave NaN at step %d\n", s);
            return -1;
        }
        gpt_backward(m, 1.0f);
        double t1 = util_now();
        optim_step(o, m, 1.0, spec->train.muon_momentum_end, spec->train.weight_decay);
        prof_seconds[PROF_OPTIM] += util_now() - t1;
        if (s >= 0) {
            step_s[s] = util_now() - t0;
            *total += step_s[s];
        }
    }
    *cpu = util_cpu_seconds() - *cpu;
    return 0;
}

int bench_main(int argc, char **argv) {
    bench_args_t a;
    int rc = bench_parse(argc, argv, &a);
    if (rc) return rc == 1 ? 0 : 2;
    char err[512];
    spec_t spec;
    gpt_t *m = NULL;
    optim_t *o = NULL;
    int *in = NULL, *tg = NULL, steps = a.steps;
    double *step_s = NULL;
    rc = 1;
    if (spec_load(a.spec_path, &spec, err, sizeof err) != 0) {
        fprintf(stderr, "bench: %s\n", err);
        return 1;
    }
    const spec_model_t *cfg = &spec.model;
    const int B = spec.train.batch_size, T = cfg->seq_len, V = cfg->vocab_size;
    if (V <= 0) {
        fprintf(stderr, "bench: model.vocab_size is required (no dataset to take it from)\n");
        goto fail;
    }
    int threads = threads_set(spec.resources.threads);
    if (gemm_set_precision_named(spec_precision_name(spec.train.precision), err, sizeof err) < 0) {
        fprintf(stderr, "bench: %s\n", err);
        goto fail;
    }
    in = malloc((size_t)B * T * sizeof *in);
    tg = malloc((size_t)B * T * sizeof *tg);
    step_s = malloc((size_t)steps * sizeof *step_s);
    m = gpt_new(cfg, err, sizeof err);
    if (!in || !tg || !step_s || !m) {
        fprintf(stderr, "bench: %s\n", m ? "out of memory" : err);
        goto fail;
    }
    gpt_init_weights(m, (uint64_t)a.seed);
    o = optim_new(m, &spec.train, err, sizeof err);
    if (!o || gpt_reserve(m, B, T, err, sizeof err) != 0) {
        fprintf(stderr, "bench: %s\n", err);
        goto fail;
    }
    gemm_bf16_cache_weights(m->params, m->n_params); /* optim_step invalidates */
    rng_t r;
    rng_seed(&r, (uint64_t)a.seed + 1);
    for (int i = 0; i < B * T; i++) {
        in[i] = (int)rng_below(&r, (uint64_t)V);
        tg[i] = (int)rng_below(&r, (uint64_t)V);
    }
    float loss = 0.0f;
    double total, cpu;
    if (bench_steps(m, o, &spec, in, tg, &a, step_s, &total, &cpu, &loss) < 0) goto fail;
    cost_t cost;
    cost_compute(cfg, B, &cost);
    double med = util_median(step_s, steps); /* step_s sorted: step_s[0] the fastest */
    double other = total;
    for (int p = 0; p < PROF_PHASES; p++) other -= prof_seconds[p];
    printf("threads: %d\n", threads);
    /* the team's wait between regions (libgomp reads both once, at load) */
    printf("omp_wait_policy: %s\n",
           getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "(unset)");
    printf("gomp_spincount: %s\n", getenv("GOMP_SPINCOUNT") ? getenv("GOMP_SPINCOUNT") : "(unset)");
    printf("isa: %s\n", gemm_isa_name(gemm_current()));
    printf("precision: %s\n", gemm_precision_name(gemm_current_precision()));
    if (gemm_current_precision() == GEMM_BF16) printf("bf16_kernel: %s\n", calibrate_bf16_kernel());
    printf("blas_core: %s\n", calibrate_blas_core());
    printf("loss: %.6f\n", loss);
    printf("step_ms_median: %.3f\n", 1e3 * med);
    printf("step_ms_min: %.3f\n", 1e3 * step_s[0]);
    printf("tokens_per_second: %.1f\n", (double)B * T / med);
    printf("cpu_ms_per_step: %.3f\n", 1e3 * cpu / a.steps);
    printf("flops_per_token: %.0f\n", cost.flops_per_token);
    /* outside MFU's count (one optimiser step per B x T tokens here) */
    printf("optim_flops_per_token: %.0f\n", optim_flops_per_step(o, m) / ((double)B * T));
    printf("attention_share: %.4f\n", prof_seconds[PROF_ATTENTION] / total);
    printf("matmul_share: %.4f\n", prof_seconds[PROF_MATMUL] / total);
    printf("elementwise_share: %.4f\n", other / total);
    printf("optim_share: %.4f\n", prof_seconds[PROF_OPTIM] / total);
    printf("peak_rss_mb: %.1f\n", util_peak_rss_mb());
    rc = 0;
fail:
    optim_free(o);
    gemm_bf16_cache_weights(NULL, 0);
    gpt_free(m);
    free(in);
    free(tg);
    free(step_s);
    spec_free(&spec);
    return rc;
}

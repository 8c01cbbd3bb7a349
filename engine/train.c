/* train.c - `nightshift train`: one experiment in the foreground.
 *
 * Load the spec and its dataset, build and initialise the model, then train
 * until the spec's budget is spent (the step in flight completes), evaluate
 * val_bpb on the dataset's pinned validation tokens and print autoresearch's
 * summary block. The budget is either measured training wall time
 * (time_budget_s), training tokens (token_budget) or model FLOPs
 * (flops_budget, a token budget of flops_budget / flops_per_token); the
 * learning-rate and weight-decay schedules follow progress through that
 * budget, so with a token or FLOPs budget no clock enters the arithmetic and
 * a run is bit-identical for a seed
 * and thread count. This is exactly what a daemon worker runs, so its outputs
 * are a contract (engine/protocol.h writes it down):
 *
 *   stdout    the summary, `key: value` lines after a `---` line
 *   stderr    human progress (redrawn in place on a terminal, a line every
 *             few seconds otherwise) and errors
 *   --progress PATH | --progress-fd N
 *             the protocol's JSON lines: start, a step line per optimiser
 *             step, eval, test (the sealed test split's figure, or null and
 *             why), then the result line (a succeeded run's reason notes a
 *             checkpoint --save could not write)
 *   exit      the protocol's exit codes (PROTO_EXIT_*)
 *
 * Timing: startup (loading, building) and evaluation are reported but are not
 * part of the budget; only optimiser steps are. Rows are drawn by the spec's
 * train.sampler (data.h); epochs are tokens seen / training tokens. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/calibrate.h"
#include "engine/floor.h"
#include "engine/threads.h"
#include "engine/ckpt.h"
#include "engine/cli.h"
#include "engine/cost.h"
#include "engine/data.h"
#include "engine/gemm.h"
#include "engine/gemm_bf16.h"
#include "engine/gpt.h"
#include "engine/optim.h"
#include "engine/protocol.h"
#include "engine/quiet.h"
#include "engine/result_fields.h"
#include "engine/share.h"
#include "engine/spec.h"
#include "engine/util.h"

/* A loss above this (nats) counts as exploding, as in autoresearch. */
#define DIVERGED_LOSS 100.0

typedef struct {
    const char *dir;
    const char *spec_path;
    const char *progress_path;
    int progress_fd;
    const char *save_path;
    double peak_gflops; /* 0 = from spec, cache or measurement */
} train_opts_t;

/* Everything one run owns; released by run_close. */
typedef struct {
    spec_t spec;
    data_set_t data;
    int data_open;
    gpt_t *model;
    optim_t *opt;
    cost_t cost;
    FILE *progress; /* JSON lines, or NULL */
    int *inputs, *targets;
    int B, T, accum;
    data_sampler_t sampler;
    int threads;
    calibrate_peak_t peak; /* the MFU denominator and its circumstances */
    const char *peak_source;
    double t_start;
    int tty;
} run_t;

/* ------------------------------------------------------------ JSON progress */

static void emit(run_t *r, cJSON *obj) {
    if (r->progress) {
        char *line = cJSON_PrintUnformatted(obj);
        if (line) {
            fprintf(r->progress, "%s\n", line);
            fflush(r->progress);
            free(line);
        }
    }
    cJSON_Delete(obj);
}

static cJSON *event(const char *name) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, PROTO_KEY_EVENT, name);
    return o;
}

/* The parameter counts of the result fields (result_fields.h), from the cost model. */
static void params_from_cost(result_values_t *v, const cost_t *c) {
    v->params_wte = c->wte;
    v->params_wpe = c->wpe;
    v->params_value_embeds = c->value_embeds;
    v->params_lm_head = c->lm_head;
    v->params_blocks = c->blocks;
    v->params_scalars = c->scalars;
    v->params_total = c->total;
}

/* Adds the result fields of the line (result_fields.h) to o in the table's
 * order: the top-level ones, or (params) those of the "params" object. */
static void add_result_fields(cJSON *o, const result_values_t *v, int params) {
    for (int i = 0; i < RESULT_N_FIELDS; i++) {
        const result_field_t *f = &result_fields[i];
        const char *p = (const char *)v + f->offset;
        if (f->where == RESULT_SUMMARY || (f->where == RESULT_PARAMS) != params) continue;
        if (f->type == RESULT_REAL)
            cJSON_AddNumberToObject(o, f->key, *(const double *)p);
        else if (f->type == RESULT_INTEGER)
            cJSON_AddNumberToObject(o, f->key, (double)*(const int64_t *)p);
        else
            cJSON_AddStringToObject(o, f->key, *(const char *const *)p);
    }
}

static void add_params(cJSON *o, const result_values_t *v) {
    add_result_fields(cJSON_AddObjectToObject(o, "params"), v, 1);
}

/* autoresearch's summary block on stdout: `---`, then `label: value` lines,
 * the labels padded to 20 columns. */
static void print_summary(const result_values_t *v) {
    printf("---\n");
    for (int i = 0; i < RESULT_N_FIELDS; i++) {
        const result_field_t *f = &result_fields[i];
        const char *p = (const char *)v + f->offset;
        char label[64];
        snprintf(label, sizeof label, "%s:", f->label);
        printf("%-19s ", label);
        if (f->type == RESULT_REAL)
            printf(f->fmt, *(const double *)p / f->div);
        else if (f->type == RESULT_INTEGER)
            printf(f->fmt, (long long)*(const int64_t *)p);
        else
            printf(f->fmt, *(const char *const *)p);
        putchar('\n');
    }
    fflush(stdout);
}

/* A failure after the progress stream is open: report it there and on stderr. */
static int fail_run(run_t *r, int code, const char *status, const char *fmt, ...) {
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%strain: %s\n", r->tty ? "\n" : "", reason);
    cJSON *o = event(PROTO_EV_RESULT);
    cJSON_AddStringToObject(o, PROTO_KEY_STATUS, status);
    cJSON_AddStringToObject(o, PROTO_KEY_REASON, reason);
    emit(r, o);
    return code;
}

/* --------------------------------------------------------------- batches */

/* Fill r->inputs/targets with B rows of T+1 consecutive training tokens,
 * each row where the sampler says. */
static void next_train_batch(run_t *r) {
    size_t T = (size_t)r->T;
    for (int b = 0; b < r->B; b++) {
        const uint16_t *src = r->data.train + data_sampler_next(&r->sampler);
        for (size_t t = 0; t < T; t++) {
            r->inputs[b * T + t] = src[t];
            r->targets[b * T + t] = src[t + 1];
        }
    }
}

/* Bits per byte over the full (T+1)-token windows of a held-out stream of n
 * tokens (stride T): summed nats / (ln 2 * summed bytes) over targets that
 * are not special tokens (token_bytes 0), as autoresearch's evaluate_bpb. The
 * spec's eval_tokens (0 = all) caps the targets at the stream's first ones,
 * whatever T is: the rows that hold them, the last one's targets past the cap
 * masked; the validation and the test split are scored alike. The model runs
 * forward only (GPT_SCORE: nothing kept for a backward, the logits straight
 * into the loss) on the whole team, batch_size rows at a time. NAN when the
 * activations cannot be allocated. */
static double evaluate_bpb(run_t *r, const uint16_t *stream, size_t n, size_t *tokens_out) {
    size_t T = (size_t)r->T, rows = n > T ? (n - 1) / T : 0;
    size_t cap = r->spec.eval_tokens > 0 ? (size_t)r->spec.eval_tokens : SIZE_MAX;
    if (cap < rows * T) rows = (cap + T - 1) / T;
    double nats = 0.0, bytes = 0.0;
    size_t counted = 0;
    for (size_t row = 0; row < rows; row += (size_t)r->B) {
        int B = (int)((rows - row) < (size_t)r->B ? rows - row : (size_t)r->B);
        for (int b = 0; b < B; b++) {
            const uint16_t *src = stream + (row + b) * T;
            for (size_t t = 0; t < T; t++) {
                r->inputs[b * T + t] = src[t];
                int tg = src[t + 1];
                int scored = r->data.token_bytes[tg] > 0 && (row + b) * T + t < cap;
                r->targets[b * T + t] = scored ? tg : -1;
            }
        }
        if (gpt_forward(r->model, r->inputs, r->targets, B, r->T, GPT_SCORE, NULL) < 0) return NAN;
        const float *loss = gpt_token_losses(r->model);
        for (size_t i = 0; i < (size_t)B * T; i++) {
            if (r->targets[i] < 0) continue;
            nats += loss[i];
            bytes += r->data.token_bytes[r->targets[i]];
            counted++;
        }
    }
    *tokens_out = counted;
    return bytes > 0 ? nats / (M_LN2 * bytes) : NAN;
}

/* ------------------------------------------------------------------ setup */

static int open_progress(run_t *r, const train_opts_t *o, char *err, size_t errlen) {
    if (o->progress_path) {
        r->progress = fopen(o->progress_path, "w");
        if (!r->progress) {
            snprintf(err, errlen, "%s: %s", o->progress_path, strerror(errno));
            return -1;
        }
    } else if (o->progress_fd >= 0) {
        r->progress = fdopen(o->progress_fd, "w");
        if (!r->progress) {
            snprintf(err, errlen, "--progress-fd %d: %s", o->progress_fd, strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* A bf16 run's MFU is against the bf16 products' peak, named by the kernel
 * that measured it (calibrate.h); a float32 run keeps the sgemm peak. */
static void peak_of_precision(calibrate_peak_t *p) {
    if (gemm_current_precision() != GEMM_BF16 || p->bf16_gflops <= 0) return;
    p->gflops = p->bf16_gflops;
    snprintf(p->isa, sizeof p->isa, "%s", p->bf16_kernel);
}

/* The MFU denominator: a flag, the spec, the calibration cache, or a short
 * measurement, stored when the machine was quiet during it (calibrate.h). A
 * measurement taken while other processes used the CPUs serves this run
 * only, and says so in the run's summary. */
static void choose_peak(run_t *r, const train_opts_t *o) {
    calibrate_peak_t *p = &r->peak;
    double given = o->peak_gflops > 0 ? o->peak_gflops : r->spec.resources.peak_gflops;
    if (given > 0) {
        memset(p, 0, sizeof *p);
        p->gflops = given;
        p->threads = r->threads;
        p->quiet = true;
        snprintf(p->isa, sizeof p->isa, "given");
        r->peak_source = o->peak_gflops > 0 ? "flag" : "spec";
        return;
    }
    const bool bf16 = gemm_current_precision() == GEMM_BF16;
    if (calibrate_cached_peak(o->dir, r->threads, bf16, p) == 0) {
        r->peak_source = p->quiet ? "calibration" : "calibration, accepted under load";
        peak_of_precision(p);
        return;
    }
    char err[256], desc[256];
    fprintf(stderr, "train: no calibrated peak for %d threads and %s kernels; measuring sgemm\n",
            r->threads, calibrate_blas_core());
    if (calibrate_measure_quiet(r->threads, 1024, 0.5, 2, 1.0, p)) {
        r->peak_source = "measured";
        if (calibrate_store_peak(o->dir, p, err, sizeof err) < 0)
            fprintf(stderr, "train: could not store the peak: %s\n", err);
        peak_of_precision(p);
        return;
    }
    r->peak_source = "measured under load, this run only";
    calibrate_describe(p, desc, sizeof desc);
    peak_of_precision(p);
    fprintf(stderr,
            "train: the machine was busy while the sgemm peak was measured (%s): it is used "
            "for this run's MFU only and not stored; `nightshift calibrate` on a quiet machine "
            "stores one\n",
            desc);
}

/* Load the spec and the dataset, build the model and the optimizer. Returns
 * 0, NS_ERR_NOMEM with err when an allocation fails, or another negative code
 * with err. */
static int setup(run_t *r, const train_opts_t *o, char *err, size_t errlen) {
    spec_model_t *mc = &r->spec.model;
    int rc = spec_load(o->spec_path, &r->spec, err, errlen);
    if (rc < 0) return rc;
    if ((rc = data_open(o->dir, r->spec.dataset, &r->data, err, errlen)) < 0) return rc;
    r->data_open = 1;
    if (mc->vocab_size == 0) {
        mc->vocab_size = r->data.vocab_size;
    } else if (mc->vocab_size != r->data.vocab_size) {
        snprintf(err, errlen, "model.vocab_size: %d differs from dataset %s's vocab %d",
                 mc->vocab_size, r->spec.dataset, r->data.vocab_size);
        return -1;
    }
    r->B = r->spec.train.batch_size;
    r->T = mc->seq_len;
    r->accum = r->spec.train.total_batch_tokens / (r->B * r->T);
    if (r->data.n_train < (size_t)r->T + 1) {
        snprintf(err, errlen, "dataset %s: %zu training tokens, fewer than seq_len+1 = %d",
                 r->spec.dataset, r->data.n_train, r->T + 1);
        return -1;
    }
    if (r->data.n_val < (size_t)r->T + 1) {
        snprintf(err, errlen, "dataset %s: %zu validation tokens, fewer than seq_len+1 = %d",
                 r->spec.dataset, r->data.n_val, r->T + 1);
        return -1;
    }
    r->threads = threads_set(r->spec.resources.threads);
    /* the kernel path is selected (main.c): bf16 runs on it, or is refused */
    if (gemm_set_precision_named(spec_precision_name(r->spec.train.precision), err, errlen) < 0)
        return -1;
    floor_reserve(r->threads); /* out of memory within seconds rather than a hang */
    r->model = gpt_new(mc, err, errlen);
    if (!r->model) return NS_ERR_NOMEM;
    gpt_init_weights(r->model, r->spec.seed);
    /* spec_validate has checked the settings optim_new checks: what is left
     * is allocation. */
    r->opt = optim_new(r->model, &r->spec.train, err, errlen);
    if (!r->opt) return NS_ERR_NOMEM;
    gemm_bf16_cache_weights(r->model->params, r->model->n_params); /* optim_step invalidates */
    if ((rc = gpt_reserve(r->model, r->B, r->T, err, errlen)) < 0) return rc;
    r->inputs = malloc((size_t)r->B * r->T * sizeof(int));
    r->targets = malloc((size_t)r->B * r->T * sizeof(int));
    if (!r->inputs || !r->targets) {
        snprintf(err, errlen, "out of memory");
        return NS_ERR_NOMEM;
    }
    cost_compute(mc, r->B, &r->cost);
    data_sampler_init(&r->sampler,
                      r->spec.train.sampler == SAMPLER_SEQUENTIAL ? DATA_SAMPLE_SEQUENTIAL
                                                                  : DATA_SAMPLE_RANDOM,
                      r->data.n_train, (size_t)r->T, r->spec.seed);
    choose_peak(r, o);
    return 0;
}

static void run_close(run_t *r) {
    free(r->inputs);
    free(r->targets);
    optim_free(r->opt);
    gemm_bf16_cache_weights(NULL, 0);
    gpt_free(r->model);
    if (r->data_open) data_close(&r->data);
    if (r->progress) fclose(r->progress);
    spec_free(&r->spec);
}

/* --------------------------------------------------------------- progress */

static void print_progress(run_t *r, int step, double pct, double loss, double lrm, double dt,
                           double tok_s, double mfu, double epochs, double remaining, int final) {
    static double last_print;
    double now = util_now();
    if (!final && !r->tty && now - last_print < 5.0) return;
    if (!final && r->tty && now - last_print < 0.1) return;
    last_print = now;
    fprintf(stderr,
            "%sstep %05d (%5.1f%%) | loss: %.6f | lrm: %.2f | dt: %.0fms | tok/sec: %.0f | "
            "mfu: %.1f%% | epoch: %.2f | remaining: %.0fs   %s",
            r->tty ? "\r" : "", step, pct, loss, lrm, dt * 1000.0, tok_s, mfu, epochs, remaining,
            r->tty ? "" : "\n");
}

/* ------------------------------------------------------------------- train */

/* The budget and the counters of the step loop. Exactly one of the two
 * budgets is nonzero (spec_validate); a FLOPs budget is the token budget
 * flops_budget / flops_per_token, so the run stops at the first step whose
 * model FLOPs reach it. */
typedef struct {
    double time_budget;     /* seconds of training, or 0 */
    double token_budget;    /* training tokens, or 0 */
    double flops_budget;    /* the spec's FLOPs budget (token_budget follows it), or 0 */
    double tokens_per_step; /* accum x B x T */
    double training_time;   /* seconds spent in optimiser steps so far */
    int step;               /* optimiser steps done */
    /* The run's share of the machine (share.h): the counters at the loop's
     * start, and per step the smoothed loss and, for a quiet step, its
     * throughput (NAN otherwise); the arrays stop growing if memory does. */
    share_snap_t at_start;
    double *curve_loss, *step_tok_s;
    int n_curve, cap_curve;
    share_t share;            /* over the loop */
    double quiet_tok_s;       /* the quiet reference (quiet.h), or 0 */
    const char *quiet_source; /* where it came from: a QUIET_FROM_ name, or NULL */
    double slowdown;          /* quiet_tok_s / the run's tokens per second; 0 = unknown */
} loop_t;

/* The start line on stderr and the "start" event. */
static void announce(run_t *r, const loop_t *l) {
    const spec_t *s = &r->spec;
    fprintf(stderr,
            "train: %s | dataset %s (%zu train / %zu val tokens, vocab %d) | %.2fM params | "
            "%d threads | %s kernels, %s products, %s BLAS | peak %.1f GFLOP/s (%s, %s) | budget "
            "%.6g%s | %s "
            "sampler | "
            "%d x %d x %d tokens/step\n",
            s->name ? s->name : "(unnamed)", s->dataset, r->data.n_train, r->data.n_val,
            s->model.vocab_size, r->cost.total / 1e6, r->threads, gemm_isa_name(gemm_current()),
            gemm_precision_name(gemm_current_precision()), calibrate_blas_core(), r->peak.gflops,
            r->peak.isa, r->peak_source,
            l->flops_budget > 0   ? l->flops_budget
            : l->token_budget > 0 ? l->token_budget
                                  : l->time_budget,
            l->flops_budget > 0   ? " FLOPs"
            : l->token_budget > 0 ? " tokens"
                                  : "s",
            spec_sampler_name(s->train.sampler), r->accum, r->B, r->T);
    cJSON *start = event(PROTO_EV_START);
    cJSON_AddNumberToObject(start, "pid", getpid());
    result_values_t counts = {0};
    params_from_cost(&counts, &r->cost);
    add_params(start, &counts);
    cJSON_AddNumberToObject(start, "flops_per_token", r->cost.flops_per_token);
    cJSON_AddNumberToObject(start, "peak_gflops", r->peak.gflops);
    cJSON_AddStringToObject(start, "peak_source", r->peak_source);
    cJSON_AddStringToObject(start, "peak_isa", r->peak.isa);
    cJSON_AddStringToObject(start, "peak_cpu", r->peak.cpu);
    cJSON_AddStringToObject(start, "peak_measured_at", r->peak.measured_at);
    cJSON_AddNumberToObject(start, "peak_others_cpu", r->peak.others_cpu);
    cJSON_AddStringToObject(start, "isa", gemm_isa_name(gemm_current()));
    cJSON_AddStringToObject(start, "precision", gemm_precision_name(gemm_current_precision()));
    cJSON_AddStringToObject(start, "blas_core", calibrate_blas_core());
    cJSON_AddNumberToObject(start, "threads", r->threads);
    cJSON_AddNumberToObject(start, "time_budget_s", l->time_budget);
    cJSON_AddNumberToObject(start, "token_budget", l->token_budget);
    cJSON_AddNumberToObject(start, "flops_budget", l->flops_budget);
    cJSON_AddNumberToObject(start, "tokens_per_step", l->tokens_per_step);
    cJSON_AddNumberToObject(start, "vocab_size", s->model.vocab_size);
    emit(r, start);
}

/* One optimiser step: accum micro-batches forward and backward, then the
 * update at the schedules' values for the progress before this step (as
 * autoresearch computes it). Sets the mean loss and the lr multiplier used;
 * returns PROTO_EXIT_OK, or PROTO_EXIT_DIVERGED or PROTO_EXIT_OOM after reporting a diverged
 * micro-batch or a failed allocation. */
static int train_step(run_t *r, const loop_t *l, double *loss_out, double *lrm_out) {
    const spec_train_t *tr = &r->spec.train;
    double loss_sum = 0.0;
    for (int micro = 0; micro < r->accum; micro++) {
        next_train_batch(r);
        float loss;
        if (gpt_forward(r->model, r->inputs, r->targets, r->B, r->T, GPT_TRAIN, &loss) < 0)
            return fail_run(r, PROTO_EXIT_OOM, PROTO_OOM, "out of memory at step %d", l->step + 1);
        /* Any one bad micro-batch fails the run: averaged over the
         * accumulation it could look harmless. */
        if (!isfinite(loss) || loss > DIVERGED_LOSS)
            return fail_run(r, PROTO_EXIT_DIVERGED, PROTO_DIVERGED,
                            "diverged: loss %g at step %d (micro-batch %d)", loss, l->step + 1,
                            micro + 1);
        loss_sum += loss;
        gpt_backward(r->model, 1.0f / (float)r->accum);
    }
    double progress = l->token_budget > 0
                          ? fmin(l->step * l->tokens_per_step / l->token_budget, 1.0)
                          : fmin(l->training_time / l->time_budget, 1.0);
    double lrm =
        optim_lr_multiplier(progress, tr->warmup_ratio, tr->warmdown_ratio, tr->final_lr_frac);
    double momentum = optim_muon_momentum(l->step, tr->muon_momentum_start, tr->muon_momentum_end,
                                          tr->muon_momentum_steps);
    optim_step(r->opt, r->model, lrm, momentum, optim_weight_decay(progress, tr->weight_decay));
    gpt_zero_grad(r->model);
    *loss_out = loss_sum / r->accum;
    *lrm_out = lrm;
    return PROTO_EXIT_OK;
}

/* After a step of dt seconds: the progress line on stderr and the "step"
 * event. Returns whether the budget is spent. */
static bool report_step(run_t *r, const loop_t *l, double loss, double smooth_loss, double lrm,
                        double dt) {
    double tok_s = l->tokens_per_step / dt;
    double mfu = 100.0 * r->cost.flops_per_token * tok_s / (r->peak.gflops * 1e9);
    /* The fraction of the chosen budget spent, and the seconds left (for a
     * token budget, estimated at the mean rate). */
    double done = l->step * l->tokens_per_step, epochs = done / (double)r->data.n_train;
    double remaining, pct;
    if (l->token_budget > 0) {
        pct = 100.0 * fmin(done / l->token_budget, 1.0);
        remaining = fmax(0.0, l->token_budget - done) * l->training_time / done;
    } else {
        pct = 100.0 * fmin(l->training_time / l->time_budget, 1.0);
        remaining = fmax(0.0, l->time_budget - l->training_time);
    }
    bool spent = l->token_budget > 0 ? done >= l->token_budget : l->training_time >= l->time_budget;
    print_progress(r, l->step, pct, smooth_loss, lrm, dt, tok_s, mfu, epochs, remaining, 0);
    cJSON *e = event(PROTO_EV_STEP);
    cJSON_AddNumberToObject(e, PROTO_STEP_STEP, l->step);
    cJSON_AddNumberToObject(e, PROTO_STEP_PROGRESS, pct / 100.0);
    cJSON_AddNumberToObject(e, PROTO_STEP_SECONDS, l->training_time);
    cJSON_AddNumberToObject(e, PROTO_STEP_LOSS, loss);
    cJSON_AddNumberToObject(e, PROTO_STEP_SMOOTH_LOSS, smooth_loss);
    cJSON_AddNumberToObject(e, PROTO_STEP_LRM, lrm);
    cJSON_AddNumberToObject(e, "dt_ms", dt * 1000.0);
    cJSON_AddNumberToObject(e, PROTO_STEP_TOK_S, tok_s);
    cJSON_AddNumberToObject(e, PROTO_STEP_MFU, mfu);
    cJSON_AddNumberToObject(e, PROTO_STEP_REMAINING_S, remaining);
    cJSON_AddNumberToObject(e, "epoch", epochs);
    emit(r, e);
    if (spent)
        print_progress(r, l->step, pct, smooth_loss, lrm, dt, tok_s, mfu, epochs, remaining, 1);
    return spent;
}

/* The step just done into l's curve: its smoothed loss, and its throughput
 * when its threads waited under SHARE_QUIET_WAIT of their runnable time (a
 * quiet step; the first two warm up and never count). */
static void record_step(loop_t *l, const share_snap_t *before, const share_snap_t *after,
                        double smooth_loss, double tok_s) {
    if (l->n_curve == l->cap_curve) {
        int cap = l->cap_curve ? 2 * l->cap_curve : 256;
        double *a = realloc(l->curve_loss, (size_t)cap * sizeof *a);
        if (a) l->curve_loss = a;
        double *b = a ? realloc(l->step_tok_s, (size_t)cap * sizeof *b) : NULL;
        if (b) l->step_tok_s = b;
        if (!a || !b) return;
        l->cap_curve = cap;
    }
    share_t sh;
    share_between(before, after, &sh);
    l->curve_loss[l->n_curve] = smooth_loss;
    l->step_tok_s[l->n_curve] = l->step > 2 && sh.cpu >= 1 - SHARE_QUIET_WAIT ? tok_s : NAN;
    l->n_curve++;
}

/* Before the loop, the quiet reference (quiet.h): the shape's cached bench,
 * else for a time budget a bench now, cached when the machine was quiet. A
 * token or FLOPs budget loses no val_bpb to a slowdown, so it does not pay
 * for a bench. Returns PROTO_EXIT_OK, or PROTO_EXIT_OOM (already reported). */
static int quiet_reference(run_t *r, loop_t *l, const char *dir) {
    char key[256], err[256];
    if (!quiet_bench_enabled()) return PROTO_EXIT_OK;
    if (quiet_shape_key(&r->spec, r->threads, gemm_isa_name(gemm_current()),
                        gemm_precision_name(gemm_current_precision()), key, sizeof key) < 0)
        return PROTO_EXIT_OK;
    if ((l->quiet_tok_s = quiet_cached(dir, key)) > 0) {
        l->quiet_source = QUIET_FROM_CACHE;
        return PROTO_EXIT_OK;
    }
    if (l->token_budget > 0) return PROTO_EXIT_OK;
    double seconds = quiet_bench_seconds(l->time_budget);
    fprintf(stderr,
            "train: timing this shape on a quiet machine (%.2g s, once per machine and "
            "shape)\n",
            seconds);
    quiet_bench_t b;
    if (quiet_bench(r->model, &r->opt, &r->spec, seconds, &b, err, sizeof err) < 0)
        return fail_run(r, PROTO_EXIT_OOM, PROTO_OOM, "%s", err);
    if (!b.quiet) {
        fprintf(stderr,
                "train: the machine was not quiet while this shape was timed (its threads waited "
                "%.0f%% of their runnable time, others used %.0f%% of its CPUs and %.0f%% of the "
                "machine, steal %.0f%%): not cached; this run's own quiet steps are its "
                "reference\n",
                100 * (1 - b.share.cpu), 100 * b.share.others, 100 * b.share.machine_others,
                100 * b.share.steal);
        return PROTO_EXIT_OK;
    }
    fprintf(stderr,
            "train: this shape trains %.0f tok/s on this machine when it is quiet (%.2g s)\n",
            b.tok_s, b.seconds);
    l->quiet_tok_s = b.tok_s;
    l->quiet_source = QUIET_FROM_BENCH;
    if (quiet_store(dir, key, &b, err, sizeof err) < 0)
        fprintf(stderr, "train: quiet throughput not cached: %s\n", err);
    return PROTO_EXIT_OK;
}

/* After the loop: the run's share of the machine and its slowdown against
 * the quiet reference; without a bench's, the throughput of the run's own
 * quiet steps (never cached: contention that does not make the threads wait,
 * such as memory bandwidth, slows those too), else the CPU share alone. */
static void measure_share(loop_t *l) {
    share_snap_t end;
    share_snap(&end);
    share_between(&l->at_start, &end, &l->share);
    if (!(l->quiet_tok_s > 0)) {
        /* the quiet steps' tokens over their time (as tokens_per_second is
         * the run's), so that a quiet run's slowdown is 1 however its steps vary */
        int n = 0;
        double quiet_time = 0;
        for (int i = 0; i < l->n_curve; i++)
            if (!isnan(l->step_tok_s[i])) {
                quiet_time += l->tokens_per_step / l->step_tok_s[i];
                n++;
            }
        if (n >= SHARE_QUIET_STEPS) {
            l->quiet_tok_s = n * l->tokens_per_step / quiet_time;
            l->quiet_source = QUIET_FROM_STEPS;
        }
    }
    double tok_s = l->step * l->tokens_per_step / l->training_time;
    if (l->quiet_tok_s > 0 && tok_s > 0) {
        l->slowdown = l->quiet_tok_s / tok_s;
        if (l->slowdown >= SHARE_SLOWED && quiet_is(&l->share, quiet_whole_machine())) {
            /* a slowdown the machine's counters do not show is not the
             * machine's: a one-hour night's runs read 1.21-1.31 against a
             * cached bench at a 99.6% CPU share, and were re-run for it */
            fprintf(stderr,
                    "train: %.0f tokens/s against a quiet reference of %.0f (%s) on a machine "
                    "its counters show quiet: not a slowdown\n",
                    tok_s, l->quiet_tok_s, l->quiet_source ? l->quiet_source : "?");
            l->quiet_tok_s = tok_s;
            l->quiet_source = QUIET_FROM_RUN;
            l->slowdown = 1;
        }
    } else if (l->share.cpu > 0) {
        l->slowdown = 1 / l->share.cpu;
        l->quiet_source = QUIET_FROM_SHARE;
    }
}

/* Steps until the budget is spent (the step in flight completes). Returns
 * PROTO_EXIT_OK, or PROTO_EXIT_DIVERGED or PROTO_EXIT_OOM (already reported). */
static int train_loop(run_t *r, loop_t *l) {
    double smooth = 0.0;
    share_snap(&l->at_start);
    share_snap_t s0 = l->at_start, s1;
    for (;;) {
        double t0 = util_now(), loss = 0.0, lrm = 0.0;
        int code = train_step(r, l, &loss, &lrm);
        if (code != PROTO_EXIT_OK) return code;
        double dt = util_now() - t0;
        share_snap_sched(&s1);
        l->training_time += dt;
        l->step++;
        /* debiased EMA of the loss, as autoresearch prints */
        smooth = 0.9 * smooth + 0.1 * loss;
        record_step(l, &s0, &s1, smooth / (1.0 - pow(0.9, l->step)), l->tokens_per_step / dt);
        if (report_step(r, l, loss, smooth / (1.0 - pow(0.9, l->step)), lrm, dt)) break;
        share_snap_sched(&s0); /* the report's time is no step's */
    }
    if (r->tty) fputc('\n', stderr);
    return PROTO_EXIT_OK;
}

/* The val_bpb the slowdown cost (share.h): only a time budget loses tokens
 * to it; a token or FLOPs budget trains the same tokens, only later. */
static double slowdown_cost(const loop_t *l, double val_bpb) {
    if (l->token_budget > 0 || !(l->slowdown > 1) || l->n_curve < 4) return 0;
    double *tokens = malloc((size_t)l->n_curve * sizeof *tokens);
    if (!tokens) return 0;
    for (int i = 0; i < l->n_curve; i++) tokens[i] = (i + 1) * l->tokens_per_step;
    double c = share_slowdown_cost_bpb(tokens, l->curve_loss, l->n_curve, l->slowdown, val_bpb);
    free(tokens);
    return c;
}

/* val_bpb with the "eval" event; sets the target tokens counted and the
 * seconds the evaluation took. */
static double run_eval(run_t *r, size_t *tokens, double *seconds) {
    double t_eval = util_now();
    double val_bpb = evaluate_bpb(r, r->data.val, r->data.n_val, tokens);
    *seconds = util_now() - t_eval;
    cJSON *ev = event(PROTO_EV_EVAL);
    cJSON_AddNumberToObject(ev, "tokens", (double)*tokens);
    cJSON_AddNumberToObject(ev, "seconds", *seconds);
    emit(r, ev);
    return val_bpb;
}

/* The sealed test figure: bits per byte on the dataset's test split, once,
 * after val_bpb, as a test line of its own (never in the summary or the
 * result line, so nothing that reads a result can rank by it; the daemon
 * stores it apart, in test_results). Without a test split, or one too short
 * for a window, the event says why and test_bpb is null. The activations
 * were reserved for this batch shape, so the evaluation allocates nothing. */
static void run_test_eval(run_t *r) {
    size_t need = (size_t)r->T + 1, tokens = 0;
    char why[sizeof r->data.no_test] = "";
    double t0 = util_now(), test_bpb = NAN;
    if (!r->data.n_test)
        snprintf(why, sizeof why, "%s", r->data.no_test);
    else if (r->data.n_test < need)
        snprintf(why, sizeof why, "the test split of %zu tokens is shorter than seq_len + 1 = %zu",
                 r->data.n_test, need);
    else if (!isfinite(test_bpb = evaluate_bpb(r, r->data.test, r->data.n_test, &tokens)))
        snprintf(why, sizeof why, "test_bpb is not finite (%g)", test_bpb);
    cJSON *ev = event(PROTO_EV_TEST);
    if (why[0]) {
        cJSON_AddNullToObject(ev, PROTO_TEST_BPB);
        cJSON_AddStringToObject(ev, PROTO_KEY_REASON, why);
    } else {
        cJSON_AddNumberToObject(ev, PROTO_TEST_BPB, test_bpb);
        cJSON_AddNumberToObject(ev, PROTO_TEST_TOKENS, (double)tokens);
        cJSON_AddNumberToObject(ev, PROTO_TEST_SECONDS, util_now() - t0);
    }
    emit(r, ev);
}

/* The trained weights to path, with the canonical spec as metadata.
 * Returns 0, or -1 with why in err: a checkpoint that cannot be written (a
 * full disk) is a note on the run, not its failure, since val_bpb is known. */
static int save_checkpoint(run_t *r, const char *path, char *err, size_t errlen) {
    char *spec_json = spec_canonical_json(&r->spec);
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "nightshift_spec", spec_json ? spec_json : "{}");
    char *meta_json = cJSON_PrintUnformatted(meta);
    int rc = ckpt_write(r->model, r->model->params, meta_json, path, err, errlen);
    free(meta_json);
    cJSON_Delete(meta);
    free(spec_json);
    if (rc < 0)
        fprintf(stderr, "train: the checkpoint was not saved (the result stands): %s\n", err);
    return rc < 0 ? -1 : 0;
}

/* The summary block on stdout and the "result" event of a succeeded run,
 * with note (may be NULL) as its "reason". */
static void report_result(run_t *r, const loop_t *l, double startup, double val_bpb,
                          size_t eval_tokens, double eval_seconds, const char *note) {
    double tokens = l->tokens_per_step * l->step, training_time = l->training_time;
    result_values_t v = {
        .val_bpb = val_bpb,
        .training_seconds = training_time,
        .total_seconds = util_now() - r->t_start,
        .startup_seconds = startup,
        .eval_seconds = eval_seconds,
        .peak_rss_mb = util_peak_rss_mb(),
        .mfu_percent =
            100.0 * r->cost.flops_per_token * tokens / training_time / (r->peak.gflops * 1e9),
        .peak_gflops = r->peak.gflops,
        .peak_source = r->peak_source,
        .peak_isa = r->peak.isa,
        .peak_cpu = r->peak.cpu,
        .peak_measured_at = r->peak.measured_at,
        .peak_others_cpu = r->peak.others_cpu,
        .isa = gemm_isa_name(gemm_current()),
        .precision = gemm_precision_name(gemm_current_precision()),
        .blas_core = calibrate_blas_core(),
        .total_tokens = tokens,
        .tokens_per_second = tokens / training_time,
        .num_steps = l->step,
        .num_params = (double)r->cost.total,
        .depth = r->spec.model.depth,
        .flops_per_token = r->cost.flops_per_token,
        .eval_tokens = (int64_t)eval_tokens,
        .time_budget_s = l->time_budget,
        .token_budget = r->spec.token_budget,
        .epochs = tokens / (double)r->data.n_train,
        .cpu_share = fmax(0, l->share.cpu),
        .steal_share = fmax(0, l->share.steal),
        .others_cpu_share = fmax(0, l->share.others),
        .quiet_tokens_per_second = l->quiet_tok_s,
        .quiet_source = l->quiet_source,
        .slowdown = l->slowdown,
        .slowdown_cost_bpb = slowdown_cost(l, val_bpb),
    };
    params_from_cost(&v, &r->cost);
    print_summary(&v);

    cJSON *res = event(PROTO_EV_RESULT);
    cJSON_AddStringToObject(res, PROTO_KEY_STATUS, PROTO_SUCCEEDED);
    if (note) cJSON_AddStringToObject(res, PROTO_KEY_REASON, note);
    add_result_fields(res, &v, 0);
    add_params(res, &v);
    emit(r, res);
}

static int train_run(const train_opts_t *o) {
    run_t r = {0};
    loop_t l = {0};
    char err[512];
    int code = PROTO_EXIT_FAILED;
    r.t_start = util_now();
    r.tty = isatty(STDERR_FILENO);
    if (open_progress(&r, o, err, sizeof err) < 0) {
        fprintf(stderr, "train: %s\n", err);
        goto done;
    }
    int setup_rc = setup(&r, o, err, sizeof err);
    if (setup_rc < 0) {
        if (setup_rc == NS_ERR_NOMEM)
            code = fail_run(&r, PROTO_EXIT_OOM, PROTO_OOM, "%s", err);
        else
            code = fail_run(&r, PROTO_EXIT_FAILED, PROTO_FAILED, "%s", err);
        goto done;
    }
    l = (loop_t){.time_budget = r.spec.time_budget_s,
                 .token_budget = r.spec.flops_budget > 0
                                     ? r.spec.flops_budget / r.cost.flops_per_token
                                     : (double)r.spec.token_budget,
                 .flops_budget = r.spec.flops_budget,
                 .tokens_per_step = (double)r.spec.train.total_batch_tokens};
    announce(&r, &l);
    if ((code = quiet_reference(&r, &l, o->dir)) != PROTO_EXIT_OK) goto done;

    double t_train_start = util_now();
    if ((code = train_loop(&r, &l)) != PROTO_EXIT_OK) goto done;
    measure_share(&l);
    double startup = t_train_start - r.t_start;

    size_t eval_tokens = 0;
    double eval_seconds;
    double val_bpb = run_eval(&r, &eval_tokens, &eval_seconds);
    if (!isfinite(val_bpb)) {
        code = fail_run(&r, PROTO_EXIT_DIVERGED, PROTO_DIVERGED, "diverged: val_bpb %g", val_bpb);
        goto done;
    }
    run_test_eval(&r);
    char ckpt_err[512], note[600];
    int saved = !o->save_path || save_checkpoint(&r, o->save_path, ckpt_err, sizeof ckpt_err) == 0;
    snprintf(note, sizeof note, "checkpoint not saved: %s", saved ? "" : ckpt_err);
    report_result(&r, &l, startup, val_bpb, eval_tokens, eval_seconds, saved ? NULL : note);
    code = PROTO_EXIT_OK;
done:
    free(l.curve_loss);
    free(l.step_tok_s);
    run_close(&r);
    return code;
}

static void train_usage(FILE *out) {
    fprintf(out, "usage: nightshift train [--dir DIR] [--progress PATH | --progress-fd N]\n"
                 "                        [--save CKPT.safetensors] [--peak-gflops G] SPEC.json\n"
                 "Trains SPEC's model on DIR/datasets/<spec.dataset> (DIR default: state) for\n"
                 "spec.time_budget_s seconds, spec.token_budget tokens or spec.flops_budget\n"
                 "model FLOPs of training, then prints val_bpb and the summary.\n"
                 "Exit: " PROTO_EXIT_HELP ".\n");
}

int train_main(int argc, char **argv) {
    train_opts_t o = {.dir = "state", .progress_fd = -1};
    static const struct option opts[] = {{"dir", required_argument, 0, 'd'},
                                         {"progress", required_argument, 0, 'p'},
                                         {"progress-fd", required_argument, 0, 'f'},
                                         {"save", required_argument, 0, 's'},
                                         {"peak-gflops", required_argument, 0, 'g'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int ch;
    char *end;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'd':
            o.dir = optarg;
            break;
        case 'p':
            o.progress_path = optarg;
            break;
        case 'f':
            o.progress_fd = (int)strtol(optarg, &end, 10);
            if (*end || o.progress_fd < 0) {
                fprintf(stderr, "train: --progress-fd: not a descriptor: %s\n", optarg);
                return PROTO_EXIT_USAGE;
            }
            break;
        case 's':
            o.save_path = optarg;
            break;
        case 'g':
            o.peak_gflops = strtod(optarg, &end);
            if (*end || !(o.peak_gflops > 0)) {
                fprintf(stderr, "train: --peak-gflops: expected a positive number: %s\n", optarg);
                return PROTO_EXIT_USAGE;
            }
            break;
        case 'h':
            train_usage(stdout);
            return PROTO_EXIT_OK;
        default:
            train_usage(stderr);
            return PROTO_EXIT_USAGE;
        }
    }
    if (argc - optind != 1 || (o.progress_path && o.progress_fd >= 0)) {
        train_usage(stderr);
        return PROTO_EXIT_USAGE;
    }
    o.spec_path = argv[optind];
    return train_run(&o);
}

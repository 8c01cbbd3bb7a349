/* sched.c - slots, the queue and the workers (see sched.h). */
#include "daemon/exec/sched.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/exec/executor.h"
#include "daemon/exec/worker.h"
#include "daemon/shared/log.h"
#include "engine/cost.h"
#include "engine/protocol.h"
#include "engine/spec.h"
#include "engine/util.h"

#define METRICS_BATCH       256    /* rows buffered per slot before a forced flush */
#define METRICS_FLUSH_MS    1000   /* and at least this often */
#define RETRY_START_MS      5000   /* after a start failed for want of resources */
#define RETRY_MAX_MS        300000 /* the back-off after failed starts doubles up to this */
#define MAX_METRICS_PER_RUN 100000 /* metrics rows per run; a 5-minute run has hundreds */
#define PRUNE_CHECK_S       1.0    /* at most one pruning check per slot per second */
#define PRUNE_RUNGS         3      /* comparisons per run: at the warm-up and evenly after */
#define PRUNE_MAX_RUNS      100    /* the median is over the last this many finished runs */
/* DIR/runs/<id> and the files in it; DIR itself is at most PATH_MAX. */
#define RUN_DIR_MAX  (PATH_MAX + 32)
#define RUN_PATH_MAX (RUN_DIR_MAX + 32)

typedef struct {
    sched_t *s;
    int index;
    char cpus[256]; /* CPU list for the shim, e.g. "0-3" or "0,2,4" */
    int ncpus;      /* how many CPUs that is */
    int threads;
    executor_job_t *worker; /* the run; NULL when the slot is free */
    int64_t id;
    char *name;
    double budget_s;
    cJSON *progress; /* the last step line, or NULL */
    store_metric_t pending[METRICS_BATCH];
    size_t n_pending;
    int64_t pending_id;        /* the experiment the pending rows belong to */
    int64_t n_metrics;         /* rows taken from this run so far (capped) */
    store_scope_t scope;       /* the run's dataset and budget */
    int prunable;              /* pruning is on and the spec allows it */
    double last_prune_check;   /* util_now() of the last check */
    int next_rung;             /* the next of the PRUNE_RUNGS comparisons (rung_progress) */
    char *pruned;              /* the reason, once the run is being stopped as pruned */
    struct ending *unrecorded; /* an ending the store refused so far; retried */
    int test_pending;          /* test holds a figure the store has not taken yet */
    store_test_t test;         /* the run's sealed test figure (its "test" line) */
    char test_reason[256];     /* test.reason points here */
} slot_t;

/* How a worker ended, as the store records it. */
typedef struct ending {
    executor_status status;
    int pruned; /* recorded as STORE_PRUNED instead of status */
    char reason[1024];
    int exit_code, term_signal;
    int has_result;
    store_result_t r;
    char peak_source[128]; /* r.peak_source points here (the engine's longest: 34 bytes) */
    double wall_seconds;
} ending_t;

struct sched {
    uv_loop_t *loop;
    store_t *store;
    sched_opts_t o;
    executor_t *x; /* o.executor, or a local one of its own (own_x) */
    int own_x;
    char state_dir[PATH_MAX];
    char exe[PATH_MAX];
    slot_t *slots;
    uv_timer_t flush_timer;
    uv_timer_t retry_timer;   /* re-kick after a start that failed for system reasons */
    uint64_t backoff_ms;      /* after a run that did not start: the wait, doubling; 0 = none */
    uint64_t hold_until;      /* uv_now before which nothing starts */
    int open_handles;         /* timers not yet closed; the last close frees s */
    int queue_empty_notified; /* on_queue_empty already said so since the last start */
    int shutting_down;
    void (*shutdown_done)(void *arg);
    void *shutdown_arg;
};

/* ---------------------------------------------------------------- metrics */

/* Write the slot's buffered metrics, under the experiment they came from
 * (pending_id). On failure they stay buffered for the next flush, unless the
 * buffer is full: then this batch is dropped (and logged) so that progress
 * keeps flowing. */
static void flush_metrics(slot_t *sl) {
    assert(sl->n_pending <= METRICS_BATCH);
    if (sl->n_pending == 0) return;
    char err[256];
    if (store_add_metrics(sl->s->store, sl->pending_id, sl->pending, sl->n_pending, err,
                          sizeof err) == 0) {
        sl->n_pending = 0;
        return;
    }
    log_error("experiment %lld: metrics not recorded yet: %s", (long long)sl->pending_id, err);
    if (sl->n_pending == METRICS_BATCH) {
        log_error("experiment %lld: %d metrics rows dropped", (long long)sl->pending_id,
                  METRICS_BATCH);
        sl->n_pending = 0;
    }
}

/* Rows still buffered when their run leaves the slot are dropped, never
 * written under another experiment (or none). */
static void drop_pending_metrics(slot_t *sl) {
    if (sl->n_pending == 0) return;
    log_error("experiment %lld: %zu metrics rows could not be recorded; dropped",
              (long long)sl->pending_id, sl->n_pending);
    sl->n_pending = 0;
}

static void flush_timer_cb(uv_timer_t *t) {
    sched_t *s = t->data;
    for (int i = 0; i < s->o.slots; i++) flush_metrics(&s->slots[i]);
}

static double jnum(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) ? v->valuedouble : 0.0;
}

/* An integer from a worker's JSON, clamped: the worker is not trusted. */
static int64_t jint(const cJSON *o, const char *key) {
    double d = jnum(o, key);
    return d <= -9e18 ? INT64_MIN + 1 : d >= 9e18 ? INT64_MAX : (int64_t)d;
}

/* --------------------------------------------------------------- pruning */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The progress of rung k: prune_warmup, then evenly spaced before the end.
 * A run is compared at a few rungs, not at every step line: each comparison
 * of a noisy loss with the median is a chance to prune a run that is not
 * worse, and a check a second over a 300 s budget gave a run as good as the
 * median some 200 such chances. */
static double rung_progress(const sched_t *s, int k) {
    double w = s->o.prune_warmup;
    return w + k * (1 - w) / PRUNE_RUNGS;
}

/* The median rule (sched.h) for the run in sl at progress p, at or past its
 * next rung. */
static void maybe_prune(slot_t *sl, double p) {
    sched_t *s = sl->s;
    double now = util_now(), *v = NULL, loss = 0;
    int64_t rows = 0;
    size_t n = 0;
    char err[256];
    if (now - sl->last_prune_check < PRUNE_CHECK_S) return;
    sl->last_prune_check = now;
    flush_metrics(sl); /* the run's own rows up to now */
    if (store_prune_losses(s->store, &sl->scope, p, SCHED_PRUNE_WINDOW, PRUNE_MAX_RUNS, &v, &n, err,
                           sizeof err) < 0 ||
        store_run_loss(s->store, sl->id, p, SCHED_PRUNE_WINDOW, &loss, &rows, err, sizeof err) <
            0) {
        log_warn("experiment %lld: pruning check skipped: %s", (long long)sl->id, err);
        goto done;
    }
    if (rows == 0) goto done; /* none of its own losses in the window yet: try again */
    while (sl->next_rung < PRUNE_RUNGS && rung_progress(s, sl->next_rung) <= p) sl->next_rung++;
    if (n < (size_t)s->o.prune_startup) goto done;
    qsort(v, n, sizeof *v, cmp_double);
    double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    if (!(loss > median)) {
        log_info("experiment %lld: kept at progress %.3f: training loss %.4f, median %.4f of %zu "
                 "finished runs",
                 (long long)sl->id, p, loss, median, n);
        goto done;
    }
    char reason[256];
    snprintf(reason, sizeof reason,
             "pruned at progress %.3f: training loss %.4f is worse than the median %.4f of %zu "
             "finished runs at that progress",
             p, loss, median, n);
    if (!(sl->pruned = strdup(reason))) goto done;
    log_info("experiment %lld: %s", (long long)sl->id, reason);
    sl->s->x->stop(sl->worker, EXECUTOR_CANCELLED);
done:
    free(v);
}

/* ---------------------------------------------------- successive halving */

double sched_asha_budget(double full, int by_tokens, int eta, int rungs, int rung) {
    double b = full;
    for (int k = rung; k < rungs - 1; k++) b /= eta;
    if (!by_tokens) return b;
    b = round(b);
    return b < 1 ? 1 : b;
}

/* Set spec's budget (the kind it already has; spec.c's rule) to rung r's. */
static void set_rung_budget(spec_t *spec, const store_asha_t *a, int r) {
    spec_scope_t sc;
    spec_scope(spec, &sc);
    int by_tokens = !strcmp(sc.budget_kind, SPEC_BUDGET_TOKENS);
    spec_set_budget(spec, sched_asha_budget(a->full_budget, by_tokens, a->eta, a->rungs, r));
}

int sched_asha_file(const sched_t *s, spec_t *spec, store_asha_t *out, char hash[SPEC_HASH_HEX],
                    char *err, size_t errlen) {
    if (s->o.prune != SCHED_PRUNE_ASHA || !spec->prune) return 0;
    if (spec_config_hash(spec, hash) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    spec_scope_t sc;
    spec_scope(spec, &sc);
    *out = (store_asha_t){.rung = 0,
                          .rungs = s->o.asha_rungs,
                          .eta = s->o.asha_eta,
                          .full_budget = sc.budget,
                          .full_config_hash = hash};
    set_rung_budget(spec, out, 0);
    return 1;
}

/* Queue the promotion of d: its spec at the next rung's budget, parent d. */
static int promote_one(sched_t *s, const store_asha_due_t *d, int64_t ended, int64_t *id, char *err,
                       size_t errlen) {
    spec_t spec;
    char hash[SPEC_HASH_HEX];
    if (spec_parse(d->spec_json, strlen(d->spec_json), &spec, err, errlen) < 0) return -1;
    store_asha_t a = {.rung = d->rung + 1,
                      .rungs = d->rungs,
                      .eta = d->eta,
                      .full_budget = d->full_budget,
                      .full_config_hash = d->full_config_hash};
    set_rung_budget(&spec, &a, a.rung);
    spec.parent = d->id;
    char *canon = spec_canonical_json(&spec);
    int rc = -1;
    if (!canon || spec_config_hash(&spec, hash) < 0) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    store_new_experiment_t e = {.name = d->name,
                                .tags_json = d->tags_json,
                                .spec_json = canon,
                                .config_hash = hash,
                                .seed = d->seed,
                                .parent = d->id,
                                .source = d->source,
                                .via = d->via,
                                .priority = d->priority,
                                .asha = &a};
    spec_scope(&spec, &e.scope);
    e.scope.eval_tokens = d->scope.eval_tokens; /* as its dataset filed it */
    rc = store_asha_promote(s->store, d->id, ended, &e, id, err, errlen);
done:
    free(canon);
    spec_free(&spec);
    return rc;
}

int sched_asha_promote(sched_t *s, int64_t ended) {
    store_asha_due_t *due;
    size_t n;
    char err[512];
    int queued = 0;
    if (store_asha_due(s->store, &due, &n, err, sizeof err) < 0) {
        log_error("asha: promotions not decided: %s", err);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t id = 0;
        int rc = promote_one(s, &due[i], ended, &id, err, sizeof err);
        if (rc < 0)
            log_error("asha: experiment %lld not promoted: %s", (long long)due[i].id, err);
        else if (rc == 0 && ++queued)
            log_info("asha: experiment %lld promoted to rung %d (of 0..%d) as experiment %lld",
                     (long long)due[i].id, due[i].rung + 1, due[i].rungs - 1, (long long)id);
    }
    store_asha_due_free(due, n);
    return queued;
}

/* --------------------------------------------------------- the test figure */

/* Hand the slot's pending test figure to the store; on failure it stays
 * pending for the next try (the ending tries again before it is recorded). */
static void flush_test(slot_t *sl) {
    char err[256];
    if (!sl->test_pending) return;
    if (store_set_test(sl->s->store, sl->id, &sl->test, err, sizeof err) == 0)
        sl->test_pending = 0;
    else
        log_error("experiment %lld: test figure not recorded yet: %s", (long long)sl->id, err);
}

/* The worker's test line: the sealed test split's figure (or null and why).
 * It goes to the store as it is and nowhere else: the scheduler's pruning,
 * the hook and the live progress never see it. */
static void take_test(slot_t *sl, const cJSON *line) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(line, PROTO_TEST_BPB);
    const char *why =
        cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(line, PROTO_KEY_REASON));
    int measured = cJSON_IsNumber(v) && isfinite(v->valuedouble);
    snprintf(sl->test_reason, sizeof sl->test_reason, "%s",
             measured ? ""
             : why    ? why
                      : "the worker reported no test figure");
    sl->test = (store_test_t){.test_bpb = measured ? v->valuedouble : NAN,
                              .tokens = jint(line, PROTO_TEST_TOKENS),
                              .seconds = jnum(line, PROTO_TEST_SECONDS),
                              .reason = measured ? NULL : sl->test_reason};
    sl->test_pending = 1;
    flush_test(sl);
}

/* --------------------------------------------------------------- workers */

static void on_progress(const cJSON *line, void *user) {
    slot_t *sl = user;
    const char *ev = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(line, PROTO_KEY_EVENT));
    if (ev && !strcmp(ev, PROTO_EV_TEST)) take_test(sl, line);
    if (!ev || strcmp(ev, PROTO_EV_STEP) != 0) return;
    cJSON_Delete(sl->progress);
    sl->progress = cJSON_Duplicate(line, 1);
    /* A worker that floods step lines must not grow the table without end. */
    if (sl->n_metrics++ == MAX_METRICS_PER_RUN)
        log_warn("experiment %lld: more than %d step lines; recording no more metrics",
                 (long long)sl->id, MAX_METRICS_PER_RUN);
    if (sl->n_metrics > MAX_METRICS_PER_RUN) return;
    if (sl->n_pending > 0 && sl->pending_id != sl->id) drop_pending_metrics(sl);
    assert(sl->id > 0 && sl->n_pending < METRICS_BATCH); /* a busy slot, room in the batch */
    sl->pending_id = sl->id;
    store_metric_t *m = &sl->pending[sl->n_pending++];
    m->step = jint(line, PROTO_STEP_STEP);
    m->time_s = jnum(line, PROTO_STEP_SECONDS);
    m->loss = jnum(line, PROTO_STEP_LOSS);
    m->lr_mult = jnum(line, PROTO_STEP_LRM);
    m->tok_s = jnum(line, PROTO_STEP_TOK_S);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(line, PROTO_STEP_PROGRESS);
    m->progress = cJSON_IsNumber(p) && isfinite(p->valuedouble) ? p->valuedouble : -1;
    if (sl->n_pending == METRICS_BATCH) flush_metrics(sl);
    if (sl->prunable && !sl->pruned && sl->next_rung < PRUNE_RUNGS &&
        m->progress >= rung_progress(sl->s, sl->next_rung))
        maybe_prune(sl, m->progress);
}

/* The numbers of a succeeded run, from the worker's final result line: the
 * stored fields of result_fields.h. out's text points into r. */
static void result_from_json(const cJSON *r, store_result_t *out) {
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(r, "params");
    memset(out, 0, sizeof *out);
    for (int i = 0; i < RESULT_N_FIELDS; i++) {
        const result_field_t *f = &result_fields[i];
        if (!result_is_stored(f)) continue;
        const cJSON *o = f->where == RESULT_PARAMS ? params : r;
        char *p = (char *)out + f->offset;
        if (f->type == RESULT_REAL)
            *(double *)p = jnum(o, f->key);
        else if (f->type == RESULT_INTEGER)
            *(int64_t *)p = jint(o, f->key);
        else
            *(const char **)p = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, f->key));
    }
}

static void release_slot(slot_t *sl) {
    drop_pending_metrics(sl);
    sl->test_pending = 0;
    sl->worker = NULL;
    sl->id = 0;
    free(sl->pruned);
    sl->pruned = NULL;
    free(sl->name);
    sl->name = NULL;
    cJSON_Delete(sl->progress);
    sl->progress = NULL;
}

static void arm_retry(sched_t *s);

/* Record sl's ending in the store. On success: log it, free the slot, tell
 * the hook, and return 0. On failure (e.g. the database is locked by a long
 * reader) the ending is kept in the slot, which stays busy, and retried from
 * the retry timer: nothing that finished is ever lost. */
static int record_ending(slot_t *sl, const ending_t *e) {
    sched_t *s = sl->s;
    assert(sl->id > 0 && !sl->worker); /* the slot's run has ended, and only once */
    char err[256];
    int64_t id = sl->id;
    executor_status st = e->status; /* e may be sl->unrecorded, freed below */
    double wall_s = e->wall_seconds;
    const char *status = e->pruned ? STORE_PRUNED : executor_status_name(st);
    flush_metrics(sl);
    if (st != EXECUTOR_INTERRUPTED) flush_test(sl);
    int rc = e->status == EXECUTOR_INTERRUPTED
                 ? store_interrupt(s->store, id, s->o.max_attempts, err, sizeof err)
                 : store_finish(s->store, id, status, e->reason[0] ? e->reason : NULL, e->exit_code,
                                e->term_signal, e->has_result ? &e->r : NULL, err, sizeof err);
    if (rc < 0) {
        log_error("experiment %lld %s, but the store refused it (%s); retrying", (long long)id,
                  status, err);
        if (!sl->unrecorded && (sl->unrecorded = malloc(sizeof *sl->unrecorded))) {
            *sl->unrecorded = *e;
            sl->unrecorded->r.peak_source = sl->unrecorded->peak_source;
        }
        arm_retry(s);
        return -1;
    }
    if (e->status == EXECUTOR_SUCCEEDED)
        log_info("experiment %lld succeeded: val_bpb %.6f (slot %d, %.1f s)", (long long)id,
                 e->r.val_bpb, sl->index, e->wall_seconds);
    else
        log_warn("experiment %lld %s: %s (slot %d, %.1f s)", (long long)id, status, e->reason,
                 sl->index, e->wall_seconds);
    free(sl->unrecorded);
    sl->unrecorded = NULL;
    release_slot(sl);
    /* Promotions first, so the hook's event already says where this run went. */
    if (s->o.prune == SCHED_PRUNE_ASHA && st != EXECUTOR_INTERRUPTED) sched_asha_promote(s, id);
    if (s->o.on_finished && st != EXECUTOR_INTERRUPTED)
        s->o.on_finished(s->o.user, id, status, wall_s);
    return 0;
}

static void back_off(sched_t *s);

/* A run that never started (executor_exit_t.not_started, or a start that
 * failed for system reasons): back to the queue at no attempt's cost, and
 * nothing starts before the back-off has passed. */
static void not_started(sched_t *s, int64_t id, const char *why) {
    char reason[1200], err[256];
    back_off(s);
    snprintf(reason, sizeof reason, "not started: %.1000s; re-queued, next try in %llu s", why,
             (unsigned long long)(s->backoff_ms / 1000));
    log_error("experiment %lld %s", (long long)id, reason);
    if (store_requeue_unstarted(s->store, id, reason, err, sizeof err) < 0)
        log_error("experiment %lld: %s", (long long)id, err);
}

static void on_exit_cb(const executor_exit_t *ex, void *user) {
    slot_t *sl = user;
    sched_t *s = sl->s;
    ending_t e = {.status = ex->status,
                  .exit_code = ex->exit_code,
                  .term_signal = ex->term_signal,
                  .wall_seconds = ex->wall_seconds};
    snprintf(e.reason, sizeof e.reason, "%s", ex->reason);
    if (sl->pruned && ex->status == EXECUTOR_CANCELLED) {
        e.pruned = 1;
        snprintf(e.reason, sizeof e.reason, "%s", sl->pruned);
    }
    if (ex->status == EXECUTOR_SUCCEEDED && ex->result) {
        /* a succeeded run's note (a checkpoint it could not save) */
        const char *note =
            cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ex->result, PROTO_KEY_REASON));
        if (note && !e.reason[0]) snprintf(e.reason, sizeof e.reason, "%s", note);
        result_from_json(ex->result, &e.r);
        snprintf(e.peak_source, sizeof e.peak_source, "%s", e.r.peak_source ? e.r.peak_source : "");
        e.r.peak_source = e.peak_source;
        e.has_result = 1;
    }
    sl->worker = NULL; /* the process is gone; the slot stays busy until recorded */
    if (ex->not_started) {
        not_started(s, sl->id, ex->reason);
        release_slot(sl);
    } else if (ex->detached) {
        log_info("experiment %lld left running (%s); a restarted daemon re-attaches to it",
                 (long long)sl->id, ex->reason);
        release_slot(sl);
    } else {
        record_ending(sl, &e);
    }

    if (s->shutting_down) {
        if (sched_running(s) == 0 && s->shutdown_done) {
            void (*done)(void *) = s->shutdown_done;
            s->shutdown_done = NULL;
            done(s->shutdown_arg);
        }
        return;
    }
    sched_kick(s);
}

/* The run's handle outside the daemon, for the store (a restarted daemon
 * finds a Slurm job through it). */
static void on_started_cb(int pid, int64_t slurm_job_id, void *user) {
    slot_t *sl = user;
    char err[256];
    sl->s->backoff_ms = 0; /* starts work again */
    int rc = slurm_job_id > 0 ? store_set_executor(sl->s->store, sl->id, sl->s->x->name,
                                                   slurm_job_id, err, sizeof err)
                              : store_set_pid(sl->s->store, sl->id, pid, err, sizeof err);
    if (rc < 0)
        log_warn("experiment %lld: %s not recorded: %s", (long long)sl->id,
                 slurm_job_id > 0 ? "slurm job id" : "pid", err);
    if (slurm_job_id > 0)
        log_info("experiment %lld is slurm job %lld", (long long)sl->id, (long long)slurm_job_id);
}

/* Write DIR/runs/<id>/spec.json; run_dir gets the directory. */
static int make_run_dir(sched_t *s, const store_experiment_t *e, char run_dir[RUN_DIR_MAX],
                        char *err, size_t errlen) {
    char path[RUN_PATH_MAX];
    snprintf(run_dir, RUN_DIR_MAX, "%s/runs/%lld", s->state_dir, (long long)e->id);
    if (util_mkdirs(run_dir, err, errlen) < 0) return -1;
    snprintf(path, sizeof path, "%s/spec.json", run_dir);
    /* A plain write, no fsync: this runs on the loop, and the spec's durable
     * copy is the database row; this file is the worker's input. */
    FILE *f = fopen(path, "we");
    size_t len = strlen(e->spec_json);
    int ok = f && fwrite(e->spec_json, 1, len, f) == len;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) snprintf(err, errlen, "%.200s: %s", path, strerror(errno));
    return ok ? 0 : -1;
}

/* The worker command into argv (64 entries): the command, then the train
 * options and the spec (the strings are borrowed from s and spec_path). */
static void worker_argv(const sched_t *s, char *spec_path, char **argv) {
    int n = 0;
    if (s->o.worker_cmd) {
        for (int i = 0; s->o.worker_cmd[i] && n < 48; i++) argv[n++] = s->o.worker_cmd[i];
    } else {
        argv[n++] = (char *)s->exe;
        argv[n++] = "train";
    }
    argv[n++] = "--dir";
    argv[n++] = (char *)s->state_dir;
    argv[n++] = "--progress-fd";
    argv[n++] = "3";
    argv[n++] = "--save";
    argv[n++] = "model.safetensors";
    argv[n++] = spec_path;
    argv[n] = NULL;
}

/* What start_one did. */
enum { START_FAILED_RUN = -1, START_EMPTY = 0, START_OK = 1, START_RETRY_LATER = -2 };

/* Whether sc's budget has no wall-clock length: tokens or FLOPs. */
static int budget_is_work(const spec_scope_t *sc) {
    return !strcmp(sc->budget_kind, SPEC_BUDGET_TOKENS) ||
           !strcmp(sc->budget_kind, SPEC_BUDGET_FLOPS);
}

/* The wall-clock seconds a run may train: its time budget, or for a token or
 * FLOPs budget, which has no wall-clock length, the token-run limit. */
static double run_budget_s(const sched_t *s, const spec_scope_t *sc) {
    return budget_is_work(sc) ? s->o.token_run_limit_s : sc->budget;
}

/* Claim the next experiment and start it in sl. START_FAILED_RUN: the
 * experiment itself could not start (bad spec, run directory) and is
 * recorded as failed; START_RETRY_LATER: the store or the system failed
 * (nothing is charged to the experiment, not even an attempt; try again
 * later). */
static int start_one(sched_t *s, slot_t *sl) {
    store_experiment_t e = {0};
    /* Only a free slot takes an experiment: a busy one would lose its run. */
    assert(!sl->worker && !sl->unrecorded && sl->id == 0);
    spec_t spec;
    char err[512], serr[256], run_dir[RUN_DIR_MAX], spec_path[RUN_PATH_MAX], log_path[RUN_PATH_MAX];
    int rc = store_claim_next(s->store, &e, err, sizeof err);
    if (rc < 0) {
        log_error("queue: %s", err);
        return START_RETRY_LATER;
    }
    if (rc == 0) return START_EMPTY;
    if (spec_parse(e.spec_json, strlen(e.spec_json), &spec, err, sizeof err) < 0) goto fail_run;
    sl->scope = e.scope; /* as filed: its evaluation is the one its dataset made it */
    if (make_run_dir(s, &e, run_dir, err, sizeof err) < 0) {
        spec_free(&spec);
        goto retry_later;
    }
    snprintf(spec_path, sizeof spec_path, "%s/spec.json", run_dir);
    snprintf(log_path, sizeof log_path, "%s/train.log", run_dir);

    char *argv[64];
    worker_argv(s, spec_path, argv);

    int threads = spec.resources.threads > 0 ? spec.resources.threads : sl->threads;
    int by_tokens = budget_is_work(&sl->scope);
    double budget_s = run_budget_s(s, &sl->scope);
    executor_run_t run = {
        .id = e.id,
        .shim = s->exe,
        .argv = argv,
        .run_dir = run_dir,
        .log_path = log_path,
        .cpus = sl->cpus,
        .threads = threads,
        .memory_mb = cost_worker_limit_mb(spec.resources.memory_mb, s->o.memory_mb),
        .budget_s = budget_s,
        .slack_s = s->o.deadline_slack_s,
        .deadline_s = by_tokens ? budget_s : budget_s * 1.25 + s->o.deadline_slack_s,
        .kill_grace_s = s->o.kill_grace_s,
    };
    executor_callbacks_t cb = {
        .on_progress = on_progress, .on_exit = on_exit_cb, .on_started = on_started_cb, .user = sl};
    sl->prunable = s->o.prune == SCHED_PRUNE_MEDIAN && spec.prune;
    sl->last_prune_check = 0;
    sl->next_rung = 0;
    sl->id = e.id;
    sl->n_metrics = 0;
    sl->name = e.name ? strdup(e.name) : NULL;
    sl->budget_s = spec.time_budget_s;
    char budget[64]; /* the budget the run has: seconds, training tokens or model FLOPs */
    if (spec.token_budget > 0)
        snprintf(budget, sizeof budget, "%.15g tokens", (double)spec.token_budget);
    else if (spec.flops_budget > 0)
        snprintf(budget, sizeof budget, "%.15g FLOPs", spec.flops_budget);
    else
        snprintf(budget, sizeof budget, "%.15g s", spec.time_budget_s);
    spec_free(&spec);
    if (store_set_executor(s->store, e.id, s->x->name, 0, serr, sizeof serr) < 0)
        log_warn("experiment %lld: executor not recorded: %s", (long long)e.id, serr);
    if (s->x->start(s->x, &run, &cb, &sl->worker, err, sizeof err) < 0) {
        release_slot(sl);
        goto retry_later;
    }
    log_info("experiment %lld started (attempt %d, slot %d, %s, cpus %s, %d threads, "
             "budget %s)",
             (long long)e.id, e.attempt, sl->index, s->x->name, sl->cpus, threads, budget);
    s->queue_empty_notified = 0;
    store_experiment_clear(&e);
    return START_OK;

retry_later:
    /* Not the experiment's fault (a full disk, process limits), and none of
     * it ran: queue it again as it was, attempt and all, and try later
     * rather than fail the queue. */
    not_started(s, e.id, err);
    store_experiment_clear(&e);
    return START_RETRY_LATER;
fail_run:
    log_error("experiment %lld could not start: %s", (long long)e.id, err);
    if (store_finish(s->store, e.id, STORE_FAILED, err, -1, 0, NULL, serr, sizeof serr) < 0)
        log_error("experiment %lld: %s", (long long)e.id, serr);
    store_experiment_clear(&e);
    return START_FAILED_RUN;
}

static void retry_timer_cb(uv_timer_t *t) {
    sched_kick(t->data);
}

/* Kick again in RETRY_START_MS (a record that failed for system reasons),
 * or when the back-off ends. */
static void arm_retry(sched_t *s) {
    uint64_t now = uv_now(s->loop), ms = RETRY_START_MS;
    if (s->hold_until > now) ms = s->hold_until - now;
    if (!uv_is_active((uv_handle_t *)&s->retry_timer) || ms > uv_timer_get_due_in(&s->retry_timer))
        uv_timer_start(&s->retry_timer, retry_timer_cb, ms, 0);
}

/* One more run did not start: wait twice as long as last time (from
 * RETRY_START_MS, at most RETRY_MAX_MS) before starting anything. */
static void back_off(sched_t *s) {
    s->backoff_ms = s->backoff_ms ? s->backoff_ms * 2 : RETRY_START_MS;
    if (s->backoff_ms > RETRY_MAX_MS) s->backoff_ms = RETRY_MAX_MS;
    s->hold_until = uv_now(s->loop) + s->backoff_ms;
    arm_retry(s);
}

/* --------------------------------------------------------------- public */

void sched_kick(sched_t *s) {
    if (s->shutting_down) return;
    for (int i = 0; i < s->o.slots; i++) {
        slot_t *sl = &s->slots[i];
        if (sl->unrecorded && record_ending(sl, sl->unrecorded) < 0) continue;
        if (sl->worker) continue;
        if (uv_now(s->loop) < s->hold_until) { /* backing off: the retry timer kicks again */
            arm_retry(s);
            return;
        }
        int rc;
        while ((rc = start_one(s, sl)) == START_FAILED_RUN) {
        } /* a failed start is recorded; try the next */
        if (rc == START_RETRY_LATER) {
            arm_retry(s);
            return;
        }
        if (rc == START_EMPTY) {
            if (!s->queue_empty_notified && s->o.on_queue_empty) {
                s->queue_empty_notified = 1;
                s->o.on_queue_empty(s->o.user);
            }
            return;
        }
    }
}

int sched_cancel(sched_t *s, int64_t id) {
    for (int i = 0; i < s->o.slots; i++)
        if (s->slots[i].worker && s->slots[i].id == id) {
            s->x->stop(s->slots[i].worker, EXECUTOR_CANCELLED);
            return 1;
        }
    return 0;
}

int sched_running(const sched_t *s) {
    int n = 0;
    for (int i = 0; i < s->o.slots; i++) n += s->slots[i].worker != NULL;
    return n;
}

int sched_slots(const sched_t *s) {
    return s->o.slots;
}

executor_t *sched_executor(const sched_t *s) {
    return s->x;
}

int sched_max_threads(const sched_t *s) {
    if (strcmp(s->x->name, "local")) return 0; /* a cluster's nodes are not this machine's */
    const slot_t *sl = &s->slots[0];
    return sl->threads > sl->ncpus ? sl->threads : sl->ncpus;
}

int sched_default_threads(const sched_t *s) {
    return s->slots[0].threads;
}

static cJSON *progress_json(const slot_t *sl) {
    const cJSON *p = sl->progress;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "step", jnum(p, PROTO_STEP_STEP));
    cJSON_AddNumberToObject(o, "percent", 100.0 * jnum(p, PROTO_STEP_PROGRESS));
    cJSON_AddNumberToObject(o, "loss", jnum(p, PROTO_STEP_SMOOTH_LOSS));
    cJSON_AddNumberToObject(o, "tok_s", jnum(p, PROTO_STEP_TOK_S));
    cJSON_AddNumberToObject(o, "mfu", jnum(p, PROTO_STEP_MFU));
    cJSON_AddNumberToObject(o, "eta_s", jnum(p, PROTO_STEP_REMAINING_S));
    cJSON_AddNumberToObject(o, "training_seconds", jnum(p, PROTO_STEP_SECONDS));
    cJSON_AddNumberToObject(o, "time_budget_s", sl->budget_s);
    return o;
}

cJSON *sched_progress(sched_t *s, int64_t id) {
    for (int i = 0; i < s->o.slots; i++)
        if (s->slots[i].worker && s->slots[i].id == id && s->slots[i].progress)
            return progress_json(&s->slots[i]);
    return NULL;
}

cJSON *sched_status(sched_t *s) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < s->o.slots; i++) {
        const slot_t *sl = &s->slots[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "slot", i);
        cJSON_AddStringToObject(o, "cpus", sl->cpus);
        cJSON_AddNumberToObject(o, "threads", sl->threads);
        if (sl->worker) {
            cJSON *e = cJSON_AddObjectToObject(o, "experiment");
            cJSON_AddNumberToObject(e, "id", (double)sl->id);
            if (sl->name)
                cJSON_AddStringToObject(e, "name", sl->name);
            else
                cJSON_AddNullToObject(e, "name");
            s->x->describe(sl->worker, e);
        } else {
            cJSON_AddNullToObject(o, "experiment");
        }
        if (sl->worker && sl->progress)
            cJSON_AddItemToObject(o, "progress", progress_json(sl));
        else
            cJSON_AddNullToObject(o, "progress");
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

/* Hand experiment j, which a previous daemon left running, to the
 * executor's attach in slot sl. */
static int attach_one(sched_t *s, slot_t *sl, const store_job_t *j, char *err, size_t errlen) {
    spec_t spec;
    char run_dir[RUN_DIR_MAX], log_path[RUN_PATH_MAX];
    spec_scope_t scope;
    if (spec_parse(j->e.spec_json, strlen(j->e.spec_json), &spec, err, errlen) < 0) return -1;
    spec_scope(&spec, &scope);
    snprintf(run_dir, sizeof run_dir, "%s/runs/%lld", s->state_dir, (long long)j->e.id);
    snprintf(log_path, sizeof log_path, "%s/train.log", run_dir);
    executor_run_t run = {.id = j->e.id,
                          .shim = s->exe,
                          .run_dir = run_dir,
                          .log_path = log_path,
                          .memory_mb =
                              cost_worker_limit_mb(spec.resources.memory_mb, s->o.memory_mb),
                          .budget_s = run_budget_s(s, &scope),
                          .slack_s = s->o.deadline_slack_s};
    spec_free(&spec);
    executor_callbacks_t cb = {
        .on_progress = on_progress, .on_exit = on_exit_cb, .on_started = on_started_cb, .user = sl};
    sl->id = j->e.id;
    sl->n_metrics = 0;
    sl->name = j->e.name ? strdup(j->e.name) : NULL;
    sl->budget_s = spec.time_budget_s;
    sl->scope = scope;
    if (s->x->attach(s->x, &run, j->slurm_job_id, &cb, &sl->worker, err, errlen) < 0) {
        release_slot(sl);
        return -1;
    }
    log_info("experiment %lld re-attached (slot %d, %s job %lld)", (long long)j->e.id, sl->index,
             s->x->name, (long long)j->slurm_job_id);
    return 0;
}

int sched_reattach(sched_t *s, int *attached, int *requeued, char *err, size_t errlen) {
    store_job_t *jobs;
    size_t n;
    int slot = 0;
    *attached = *requeued = 0;
    if (store_running_jobs(s->store, &jobs, &n, err, errlen) < 0) return -1;
    for (size_t i = 0; i < n; i++) {
        const store_job_t *j = &jobs[i];
        char e2[512];
        while (slot < s->o.slots && s->slots[slot].worker) slot++;
        if (s->x->attach && !strcmp(j->executor, s->x->name)) {
            if (slot == s->o.slots)
                log_warn("experiment %lld (%s job %lld): no free slot to re-attach it; "
                         "re-queued (cancel the old job by hand)",
                         (long long)j->e.id, s->x->name, (long long)j->slurm_job_id);
            else if (attach_one(s, &s->slots[slot], j, e2, sizeof e2) == 0) {
                (*attached)++;
                continue;
            } else
                log_warn("experiment %lld: cannot re-attach: %s", (long long)j->e.id, e2);
        }
        if (store_interrupt(s->store, j->e.id, s->o.max_attempts, e2, sizeof e2) < 0)
            log_error("experiment %lld: %s", (long long)j->e.id, e2);
        else
            (*requeued)++;
    }
    store_jobs_free(jobs, n);
    return 0;
}

/* Give slot i an even share of the CPUs this process may use. */
static void assign_cpus(slot_t *sl, int i, int slots, int threads_per_slot) {
    cpu_set_t set;
    int cpus[CPU_SETSIZE], n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set)) cpus[n++] = c;
    if (n == 0) cpus[n++] = 0;
    int per = n / slots > 0 ? n / slots : 1;
    int first = (i * per) % n, last = first + per - 1;
    /* The allowed CPUs need not be contiguous (taskset -c 0,2,4,6): list
     * them, with runs of consecutive numbers as ranges. */
    size_t len = 0;
    sl->cpus[0] = '\0';
    for (int j = first; j <= last && len < sizeof sl->cpus - 24; j++) {
        int run_end = j;
        while (run_end < last && cpus[run_end + 1] == cpus[run_end] + 1) run_end++;
        len += (size_t)snprintf(sl->cpus + len, sizeof sl->cpus - len, "%s%d", len ? "," : "",
                                cpus[j]);
        if (run_end > j)
            len += (size_t)snprintf(sl->cpus + len, sizeof sl->cpus - len, "-%d", cpus[run_end]);
        j = run_end;
    }
    sl->ncpus = per;
    sl->threads = threads_per_slot > 0 ? threads_per_slot : per;
    if (n / slots == 0)
        log_warn("slot %d shares cpu %d: %d slots on %d cpus", i, cpus[first], slots, n);
}

sched_t *sched_new(uv_loop_t *loop, store_t *store, const sched_opts_t *o, char *err,
                   size_t errlen) {
    sched_t *s = calloc(1, sizeof *s);
    if (!s || o->slots < 1) {
        snprintf(err, errlen, s ? "sched: need at least one slot" : "sched: out of memory");
        free(s);
        return NULL;
    }
    s->loop = loop;
    s->store = store;
    s->o = *o;
    if (s->o.deadline_slack_s <= 0) s->o.deadline_slack_s = SCHED_DEFAULT_DEADLINE_SLACK_S;
    if (s->o.kill_grace_s <= 0) s->o.kill_grace_s = SCHED_DEFAULT_KILL_GRACE_S;
    if (s->o.max_attempts < 1) s->o.max_attempts = 1;
    if (s->o.prune_startup < 1) s->o.prune_startup = SCHED_DEFAULT_PRUNE_STARTUP;
    if (!(s->o.prune_warmup > 0)) s->o.prune_warmup = SCHED_DEFAULT_PRUNE_WARMUP;
    if (!(s->o.token_run_limit_s > 0)) s->o.token_run_limit_s = SCHED_DEFAULT_TOKEN_RUN_LIMIT_S;
    if (s->o.asha_eta < 2) s->o.asha_eta = SCHED_DEFAULT_ASHA_ETA;
    if (s->o.asha_rungs < 1 || s->o.asha_rungs > SCHED_MAX_ASHA_RUNGS)
        s->o.asha_rungs = SCHED_DEFAULT_ASHA_RUNGS;
    /* Workers run in their run directory: every path they get is absolute. */
    if (!realpath(o->state_dir, s->state_dir) || !realpath(o->exe, s->exe)) {
        snprintf(err, errlen, "sched: %s: %s", o->state_dir, strerror(errno));
        free(s);
        return NULL;
    }
    s->slots = calloc((size_t)o->slots, sizeof *s->slots);
    s->x = o->executor;
    s->own_x = !o->executor;
    if (!s->slots || (!s->x && !(s->x = executor_local_new(loop)))) {
        snprintf(err, errlen, "sched: out of memory");
        free(s->slots);
        free(s);
        return NULL;
    }
    for (int i = 0; i < o->slots; i++) {
        s->slots[i].s = s;
        s->slots[i].index = i;
        assign_cpus(&s->slots[i], i, o->slots, o->threads_per_slot);
    }
    uv_timer_init(loop, &s->flush_timer);
    uv_timer_init(loop, &s->retry_timer);
    s->flush_timer.data = s->retry_timer.data = s;
    s->open_handles = 2;
    uv_timer_start(&s->flush_timer, flush_timer_cb, METRICS_FLUSH_MS, METRICS_FLUSH_MS);
    uv_unref((uv_handle_t *)&s->flush_timer);
    /* A daemon that stopped between a run's end and the rule left its
     * promotions due: they are queued now. */
    if (s->o.prune == SCHED_PRUNE_ASHA) sched_asha_promote(s, 0);
    return s;
}

void sched_shutdown(sched_t *s, void (*done)(void *arg), void *arg) {
    s->shutting_down = 1;
    s->shutdown_done = done;
    s->shutdown_arg = arg;
    int running = 0;
    for (int i = 0; i < s->o.slots; i++)
        if (s->slots[i].worker) {
            s->x->stop(s->slots[i].worker, EXECUTOR_INTERRUPTED);
            running++;
        }
    if (running == 0 && done) {
        s->shutdown_done = NULL;
        done(arg);
    }
}

static void free_after_close(uv_handle_t *h) {
    sched_t *s = h->data;
    if (--s->open_handles > 0) return;
    free(s->slots);
    free(s);
}

void sched_free(sched_t *s) {
    if (!s) return;
    for (int i = 0; i < s->o.slots; i++) {
        if (s->slots[i].unrecorded)
            log_error("experiment %lld: its end was never recorded; it will be re-queued at the "
                      "next start",
                      (long long)s->slots[i].id);
        free(s->slots[i].unrecorded);
        release_slot(&s->slots[i]);
    }
    if (s->own_x) s->x->free(s->x);
    uv_close((uv_handle_t *)&s->flush_timer, free_after_close);
    uv_close((uv_handle_t *)&s->retry_timer, free_after_close);
}

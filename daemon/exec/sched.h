/* sched.h - the scheduler: slots, the queue, and one worker per running
 * experiment.
 *
 * Each slot owns a fixed CPU set and thread count, so two runs never share
 * cores and a time budget means the same in every slot. When a slot is free
 * the scheduler claims the next queued experiment from the store, writes its
 * run directory (DIR/runs/<id>/spec.json; the worker appends train.log and
 * saves model.safetensors there), and hands `nightshift train` to the
 * executor (executor.h) under the slot's limits. Progress lines update the
 * slot's live progress and are written to the metrics table in batches (one
 * transaction per batch); the "test" line (the sealed test split's figure)
 * goes to the store as it is (store_set_test), and nothing here reads it
 * back; the ending, classified by the executor, is recorded with store_finish.
 *
 * Pruning (opt-in, prune = SCHED_PRUNE_MEDIAN): at three rungs of a run's
 * progress (the worker's fraction of its budget: prune_warmup and two evenly
 * spaced after it, 0.3, 0.53 and 0.77 by default), its training loss at that
 * progress is compared with the median over the finished (succeeded) runs of
 * its scope (dataset, budget) at the same progress; with at least
 * prune_startup of them to compare against, a run whose loss is worse than the
 * median is stopped and recorded as `pruned`, with the progress, its loss and
 * the median in its reason. The
 * loss of a run at progress p is the mean of its recorded training losses with
 * progress in [p - SCHED_PRUNE_WINDOW, p] (store_prune_losses). A spec with
 * "prune": false is never pruned.
 *
 * Successive halving (prune = SCHED_PRUNE_ASHA: asynchronous successive
 * halving, ASHA, over budgets). Rungs r = 0 .. R-1 (R = asha_rungs, default
 * 3) have budgets B / eta^(R-1-r) (eta = asha_eta, default 3: B/9, B/3, B)
 * where B is the budget the spec was submitted with: a time budget in
 * seconds as it is, a token budget rounded to the nearest token (at least 1;
 * the run stops after the step reaching it). Every submission whose spec
 * allows pruning (API, CLI, the agent hook's proposals) is queued at rung 0's
 * budget (sched_asha_file). When a run of a rung ends, the finished runs of
 * that rung (same dataset, evaluation, full budget and rung) are ranked by
 * val_bpb, every run that did not succeed (failed, crashed, timed out, out of
 * memory, diverged, pruned) counting as worst (cancelled and interrupted ones
 * say nothing about the configuration and are left out); each succeeded run
 * in the first floor(n / eta) that is below the top rung and not yet
 * promoted is promoted: a new experiment at the next rung's budget, parent =
 * the promoted run, the same configuration and seed, queued in the same
 * transaction that records the promotion (store_asha_promote), so a crash
 * loses no promotion and makes none twice. The rule is re-applied when the
 * scheduler starts. Queue order: among equal priorities a higher rung first
 * (a promotion goes ahead of new rung-0 work), then a person's before the
 * agent's, then the oldest; a higher priority still goes first.
 *
 * A promotion trains from scratch; it does not continue the lower rung's
 * checkpoint. The learning rate and weight decay follow progress through the
 * run's own budget (engine/train.c: warmup, then warmdown over the last
 * warmdown_ratio to final_lr_frac), so a rung-0 run has already decayed its
 * learning rate to the floor at B/9: continuing it at B/3 would be a run with
 * a second warmdown, not the run B/3 trains, and its val_bpb would not
 * compare with the scope it lands in. Restarted, the top rung's run is
 * exactly a full-budget run (bit-identical for a token budget and a thread
 * count) and ranks with them as one; the cost is the lower rungs' budget
 * again, 1/eta + 1/eta^2 + ... < 1/(eta-1) of the full budget for a run
 * that reaches the top rung.
 *
 * Deadlines: a time-budgeted run is killed as a timeout at budget * 1.25 +
 * deadline_slack_s; a token-budgeted run, which has no wall-clock budget, at
 * token_run_limit_s.
 *
 * A run that does not start (a Slurm submission refused, a process that
 * cannot be spawned) goes back to the queue without spending an attempt
 * (store_requeue_unstarted), and nothing starts for a back-off of 5 s that doubles
 * with each such run up to 5 minutes and ends with the next start.
 *
 * Everything runs on the loop thread. */
#ifndef NIGHTSHIFT_SCHED_H
#define NIGHTSHIFT_SCHED_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/exec/executor.h"
#include "daemon/store/store.h"

typedef struct sched sched_t;

enum { SCHED_PRUNE_OFF = 0, SCHED_PRUNE_MEDIAN = 1, SCHED_PRUNE_ASHA = 2 };
#define SCHED_PRUNE_WINDOW 0.05 /* of progress: the loss at p averages [p - 0.05, p] */

/* The defaults of sched_opts_t's fields: an unset one (0) takes its own. */
#define SCHED_DEFAULT_DEADLINE_SLACK_S  120.0
#define SCHED_DEFAULT_KILL_GRACE_S      5.0
#define SCHED_DEFAULT_PRUNE_STARTUP     5
#define SCHED_DEFAULT_PRUNE_WARMUP      0.3
#define SCHED_DEFAULT_TOKEN_RUN_LIMIT_S 3600.0
#define SCHED_DEFAULT_ASHA_ETA          3
#define SCHED_DEFAULT_ASHA_RUNGS        3
#define SCHED_MAX_ASHA_RUNGS            8

typedef struct {
    const char *state_dir;    /* DIR: datasets/, runs/ */
    const char *exe;          /* the nightshift binary (the exec shim and `train`) */
    char *const *worker_cmd;  /* NULL = `exe train`; tests put a stand-in program here
                                 (NULL-terminated; the spec path and options are appended) */
    int slots;                /* concurrent workers, >= 1 */
    int threads_per_slot;     /* <= 0 = the slot's share of the CPUs */
    int memory_mb;            /* default per-worker limit when the spec has none; 0 = none */
    double deadline_slack_s;  /* deadline = budget * 1.25 + slack; default 120 */
    double kill_grace_s;      /* SIGTERM -> SIGKILL; default 5 */
    int max_attempts;         /* interrupted runs are retried up to this many attempts */
    int prune;                /* SCHED_PRUNE_OFF (default), _MEDIAN or _ASHA */
    int prune_startup;        /* finished runs to compare against first; default 5 */
    double prune_warmup;      /* progress before a run may be pruned; default 0.3 */
    double token_run_limit_s; /* wall-clock deadline of a token-budgeted run; default 3600 */
    int asha_eta;             /* successive halving's eta, >= 2; default 3 */
    int asha_rungs;           /* its rungs, 1..SCHED_MAX_ASHA_RUNGS; default 3 */
    executor_t *executor;     /* where runs execute (executor.h); NULL = a local one of its
                                 own. Borrowed: free it after sched_free. */
    /* Events for the agent hook and the metrics (may be NULL); seconds is
     * the run's wall time from its start. */
    void (*on_finished)(void *user, int64_t id, const char *status, double seconds);
    void (*on_queue_empty)(void *user); /* a slot is free and nothing is queued */
    void *user;
} sched_opts_t;

/* Create the scheduler (does not start anything yet). Returns NULL with err. */
sched_t *sched_new(uv_loop_t *loop, store_t *store, const sched_opts_t *o, char *err,
                   size_t errlen);

/* At startup, in place of store_recover for an executor that re-attaches:
 * every experiment a previous daemon left running on this executor is handed
 * to the executor's attach while slots are free (a Slurm job that is still
 * running is watched again, not submitted again); every other one is
 * recorded as interrupted and re-queued (store_interrupt). Counts go to
 * *attached and *requeued. */
int sched_reattach(sched_t *s, int *attached, int *requeued, char *err, size_t errlen);

/* The budget of rung `rung` of a ladder of `rungs` rungs over full budget
 * `full` (seconds, or tokens when by_tokens: then rounded, at least 1). */
double sched_asha_budget(double full, int by_tokens, int eta, int rungs, int rung);

/* Put a submission on the ladder: when successive halving is on and spec
 * allows pruning, set spec's budget to rung 0's and fill *out (rung 0, the
 * ladder, the full budget, and full_config_hash pointing into hash, the
 * configuration at the full budget): returns 1. Returns 0 (spec untouched)
 * when it runs as submitted, -1 with err when spec cannot be hashed. */
int sched_asha_file(const sched_t *s, spec_t *spec, store_asha_t *out, char hash[SPEC_HASH_HEX],
                    char *err, size_t errlen);

/* Apply the rule of successive halving now (sched.h): queue every promotion
 * due, recorded as decided at the end of experiment ended (0 = none). The
 * scheduler calls it when a run ends and when it starts; returns how many
 * were queued. */
int sched_asha_promote(sched_t *s, int64_t ended);

/* Start queued experiments while slots are free. Call after submissions; the
 * scheduler calls it itself whenever a worker ends. */
void sched_kick(sched_t *s);

/* Cancel experiment id if it runs here: 1 = its worker is being stopped,
 * 0 = not running here. */
int sched_cancel(sched_t *s, int64_t id);

/* The slots with their running experiment and live progress (new tree). */
cJSON *sched_status(sched_t *s);

/* Live progress of a running experiment (new tree), or NULL. */
cJSON *sched_progress(sched_t *s, int64_t id);

/* Number of slots with a running worker, and of slots in all. */
int sched_running(const sched_t *s);
int sched_slots(const sched_t *s);

/* The most threads a run may ask for (resources.threads): the CPUs of a
 * local slot, or --threads-per-slot when that is more; 0 = no bound (a Slurm
 * job gets the CPUs it asks for on its node). */
int sched_max_threads(const sched_t *s);

/* The executor runs go to (the one given in sched_opts_t, or the local one
 * the scheduler made). */
executor_t *sched_executor(const sched_t *s);

/* The threads a run gets when its spec does not say (resources.threads 0). */
int sched_default_threads(const sched_t *s);

/* Stop every worker (recorded as interrupted and re-queued), start nothing
 * new; done is called once all have exited. */
void sched_shutdown(sched_t *s, void (*done)(void *arg), void *arg);

/* Free the scheduler; only after sched_shutdown's done, or if nothing ran. */
void sched_free(sched_t *s);

#endif

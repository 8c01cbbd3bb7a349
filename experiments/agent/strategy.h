/* strategy.h - the reference agent's search strategy: what to run next.
 *
 * A search over the axes of a search space (space.h) by one of three
 * strategies (climb, random, tpe; below), judged by one rule: a variant is
 * adopted as the night's best only when it beats the best by more than the
 * measured seed-to-seed noise. The state is the
 * current best (id, mean val_bpb, spec, configuration), every configuration
 * seen in the agent's scope with the mean and spread of its seeds, the
 * identities of every spec already proposed or seen (so nothing is proposed
 * twice), and the mutation RNG. Each hook event goes through strategy_decide,
 * which logs one line per decision with the numbers behind it and returns the
 * specs to propose. Everything here is synchronous and does no I/O except
 * strategy_save/strategy_load, so the agent's server (agent.c) and the tests
 * drive it the same way; replacing the strategy means replacing this file.
 *
 * Like with like: only succeeded runs on the baseline's dataset and budget
 * are ranked (others are logged and ignored); mutations never change a spec's
 * dataset or budget. A configuration is a spec identity without its seed.
 *
 * Decisions, in order:
 *   - no success yet and the baseline has not been run: propose the baseline
 *     with noise_seeds seeds (seed .. seed + k - 1) to measure the noise;
 *   - a run that did not succeed (failed, diverged, pruned, ...) is discarded
 *     (one that diverged in the scope is a bad result for tpe's model);
 *   - a run of the best configuration updates the best mean;
 *   - a run of another scope is logged and ignored;
 *   - otherwise its configuration's mean (over its n_c seeds) is compared with
 *     the best mean (over n_b) by strategy_compare: adopted when it is lower by
 *     more than two standard errors of the difference, 2 * s * sqrt(1/n_b +
 *     1/n_c), s the pooled within-configuration sample standard deviation over
 *     every configuration with two or more seeds (or by more than a noise floor
 *     given by hand); re-run with a new seed while it is lower but not by that
 *     much and has fewer than max_seeds seeds (climb; random and tpe only
 *     under the confirmation rule below); discarded otherwise;
 *   - then, while fewer than queue_target proposals are queued (the payload's
 *     queue_depth), propose the strategy's next point: climb a mutation of
 *     the best (the baseline until something succeeds) along one or two axes,
 *     random a uniform draw, tpe its model's pick; each written into the
 *     baseline (climb: into the best) by space_write, validated with
 *     spec_parse and never a spec whose identity was already seen.
 *
 * Confirmation (random and tpe): the noise rule decides what the night calls
 * its best, but re-running every variant that beats the best by a hair spends
 * the night on noise. Before each new point, the configuration with the
 * lowest mean seen (the one that would become the best by its mean), when it
 * is not the best, gets one more seed only when (1) its mean beats the best's
 * by more than one standard error of the difference (half the adoption
 * threshold; any gain while the noise is not measured), (2) it has fewer than
 * max_seeds seeds and none queued, and (3) confirmation seeds stay within
 * confirm_frac of the proposals (counting this one). Any other variant is
 * left as it is: its seed still informs the model. Runs of the baseline's
 * noise are not confirmations. When the night's end is known (max_proposals,
 * or strategy_set_runs_left from the agent's --until),
 * its last proposals, as many as are kept queued, give the lowest mean a
 * second seed whatever its gain and the budget: the morning's answer is the
 * lowest mean (GET /v1/best), and the night's last new leader would otherwise
 * rest on one seed, the one most likely lucky (make bench-search: each of
 * five 16-run nights' answers was among its last runs, one re-measured 0.07
 * worse than it read).
 *
 * The mix of tpe: a quarter of its proposals (local_frac) move one or two
 * axes of the lowest mean seen to neighbouring values, the rest are the
 * model's. The model scores each axis on its own (tpe.h), so it cannot see
 * that two axes must move together, and it spreads its draws over every good
 * result; a local move spends a few runs polishing the leader, which is what
 * a short night's answer is made of. Measured on the scripted surfaces of
 * the tests (mean gap to the optimum after 40 runs, 5 seeds, near / far):
 * local_frac 0: 0.050 / 0.049; 0.25: 0.020 / 0.059; 0.5: 0.034 / 0.019. Any
 * mix beats none; between a quarter and a half, five seeds do not decide, so
 * the default leaves the model most of the night (--local-frac to change it).
 * A startup of 10 (Optuna's) instead of 5: 0.034 / 0.102.
 *
 * Identity: the canonical spec without name, tags, priority and parent (the
 * daemon's dedup key) with the per-layer choices written out, so that
 * ve_layers "alternate" and [1,3] at depth 4 are the same spec.
 *
 * Ownership: strategy_new returns a strategy the caller frees with
 * strategy_free; it copies the baseline. strategy_decide returns a new cJSON
 * array the caller frees with cJSON_Delete. */
#ifndef NIGHTSHIFT_STRATEGY_H
#define NIGHTSHIFT_STRATEGY_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/rng.h"
#include "engine/spec.h"
#include "experiments/agent/space.h"

typedef struct strategy strategy_t;

/* The strategies (what to try next; the judge is the same for all):
 *   climb   mutate the best one or two axes at a time; every variant that
 *           beats the best is re-run up to max_seeds before it is adopted or
 *           discarded (the agent's first rule, kept as it was);
 *   random  uniform draws from the space (the baseline a researcher would
 *           run), confirmation seeds bounded as below;
 *   tpe     a model of val_bpb over everything the night has seen (tpe.h),
 *           mixed with local moves of the lowest mean seen, after a startup
 *           design (a Latin hypercube of n_startup draws: every axis's range
 *           covered evenly, space_sample_stratified); confirmation seeds
 *           bounded as below. On the scripted surfaces' 16-run nights the
 *           design took tpe's answer from 0.151 / 0.209 of the optimum
 *           (uniform startup draws) to 0.132 / 0.197 (30 nights each). */
typedef enum { STRATEGY_CLIMB, STRATEGY_TPE, STRATEGY_RANDOM } strategy_kind;

/* "climb", "tpe", "random"; static strings. */
const char *strategy_kind_name(strategy_kind k);
/* 0 with *k, or -1 when name is none of them. */
int strategy_kind_parse(const char *name, strategy_kind *k);

/* What one mutation changed, for the log and the proposal's name. */
typedef struct {
    char desc[192]; /* "n_embd 128 -> 192" */
    char label[96]; /* "n_embd=192" */
} strategy_change_t;

/* One line per decision; line has no trailing newline. */
typedef void (*strategy_log_fn)(void *user, const char *line);

#define STRATEGY_DEFAULT_SEED      1
#define STRATEGY_NOISE_SEEDS_AUTO  (-1) /* noise_seeds: strategy_default_noise_seeds */
#define STRATEGY_DEFAULT_MAX_SEEDS 4
#define STRATEGY_QUEUE_AUTO        (-1)   /* queue_target: one per experiment seen running */
#define STRATEGY_DEFAULT_CONFIRM   0.25   /* confirm_frac of random, and of tpe from 32 runs */
#define STRATEGY_CONFIRM_FRAC_AUTO (-1.0) /* confirm_frac: the plan's */
#define STRATEGY_DEFAULT_STARTUP   5    /* results before tpe's model, the night's length unknown */
#define STRATEGY_STARTUP_AUTO      (-1) /* n_startup: the plan's (strategy_plan) */
#define STRATEGY_CONFIRM_AUTO      (-1) /* confirm_seeds: the plan's */
#define STRATEGY_FINAL_AUTO        (-1) /* final_runs: the plan's */
#define STRATEGY_FINAL_RUNS        16   /* final_runs of a long tpe night, at most a sixth */
#define STRATEGY_NOISE_KNOWN_DF                                                                    \
    2                               /* degrees of freedom of earlier nights' noise that make       \
                                       the baseline's noise seeds unnecessary */
#define STRATEGY_DEFAULT_LOCAL 0.25 /* local_frac of tpe */

typedef struct {
    strategy_kind kind;   /* default STRATEGY_CLIMB */
    const space_t *space; /* the axes (required; borrowed: it must outlive the strategy) */
    double confirm_frac;  /* random, tpe: mid-night confirmation seeds at most this fraction
                             of the proposals; default STRATEGY_CONFIRM_FRAC_AUTO (the
                             plan's) */
    int n_startup;        /* tpe: startup draws until this many configurations have results;
                             default STRATEGY_STARTUP_AUTO (the plan's) */
    int confirm_seeds;    /* further seeds the night's answer gets among its last proposals;
                             default STRATEGY_CONFIRM_AUTO (the plan's) */
    int final_runs;       /* random, tpe: the night's last proposals re-measure the best few
                             configurations; default STRATEGY_FINAL_AUTO (the plan's) */
    double local_frac;    /* tpe: this fraction of proposals moves the lowest mean locally;
                             default STRATEGY_DEFAULT_LOCAL */
    double noise_floor;   /* > 0: a fixed val_bpb gain to adopt instead of 2 SE; 0: none */
    int noise_seeds;      /* seeds of the baseline run first to measure the noise; 0 = the
                             baseline is not run first; default STRATEGY_NOISE_SEEDS_AUTO
                             (the plan's) */
    int max_seeds;        /* seeds a promising variant gets before it is discarded; default 4 */
    int queue_target;     /* proposals kept queued; STRATEGY_QUEUE_AUTO (the default) = the
                             most experiments seen running at once (at least 1), i.e. one
                             for every busy slot */
    uint64_t seed;        /* seeds the mutation RNG (a loaded state keeps its own) */
    int max_proposals;    /* stop proposing after this many; 0 = no limit (and no last
                             proposals for the confirmation rule) */
    int max_rejections;   /* rejected proposals in a row before pausing; default 5 */
    strategy_log_fn log;  /* NULL = stderr */
    void *log_user;
} strategy_opts_t;

void strategy_opts_default(strategy_opts_t *o);

/* The baseline's seeds when noise_seeds is STRATEGY_NOISE_SEEDS_AUTO: 3 for
 * climb, whose every adoption waits on the measured noise; 1 for random and
 * tpe, whose noise comes from the confirmation seeds of the lowest mean (runs
 * the night needs anyway). On nights of 16 runs, two slots, seed noise 0.025,
 * the scripted surfaces of test_strategy (50 nights each; the gap to the
 * optimum of the configuration with the lowest mean, the daemon's answer):
 * tpe 0.134 / 0.203 (near / far) with one baseline seed, 0.151 / 0.221 with
 * three; random search 0.175 / 0.286. In make bench-search's nights of 8
 * runs, three baseline seeds and five startup draws left tpe's model no run
 * at all. */
int strategy_default_noise_seeds(strategy_kind k);

/* The night's plan: what a night of `runs` runs spends on what, so that a
 * short night spends nothing it cannot use and a long one buys certainty.
 *   noise_seeds    seeds of the baseline run first (its noise): none when
 *                  earlier nights of the scope measured the noise (the
 *                  payload's noise, at least STRATEGY_NOISE_KNOWN_DF degrees
 *                  of freedom: that noise is pooled with the night's own);
 *                  climb, whose every adoption waits on the noise, 2 below 24
 *                  runs and 3 from there; random and tpe 1 below 64 runs, 2
 *                  below 128, 3 from there (about 2% of a long night: the
 *                  confirmation seeds measure the rest of the noise);
 *   startup        tpe: results before the model, 5/8 of the night in [5,
 *                  10] (5 at 8 runs, 10 from 16; the baseline's result
 *                  counts; 0 for climb and random). On the surrogate of the
 *                  Brown landscape (experiments/search/bench/
 *                  2026-12-06-surrogate-refit.md; 100 replayed nights of 16
 *                  runs, paired with Optuna's random search, negative is
 *                  better): the rule before (5 at 16, 6 at 32, mid-night
 *                  confirmations) -0.010 +- 0.010 at 16 runs and -0.026 +-
 *                  0.007 at 32; startup 10 alone -0.018 +- 0.008 / -0.025 +-
 *                  0.006; startup 10 and no mid-night confirmations -0.021
 *                  +- 0.008 / -0.030 +- 0.005 (8 at 16: -0.020 +- 0.009). On
 *                  the scripted surfaces of test_strategy a startup below 5
 *                  hurt 8-run nights (3: +0.018 / +0.078 near / far, SE
 *                  0.013 / 0.032);
 *   confirm_frac   random and tpe: mid-night confirmation seeds (a lowest
 *                  mean past one standard error gets a second seed before
 *                  the night's last proposals) at most this fraction of the
 *                  proposals: STRATEGY_DEFAULT_CONFIRM, but none for tpe up
 *                  to 32 runs, where they took 2-3 of a 16-run night's runs
 *                  from the model (numbers above);
 *   confirm_seeds  further seeds the night's answer (the lowest mean) gets
 *                  among the last proposals, whatever its gain: 0 below 6
 *                  runs, 1 below 32, 2 below 64, 3 from there (capped at
 *                  max_seeds - 1), so the answer of a 96-run night rests on 4
 *                  seeds; random and tpe only (climb re-runs every promising
 *                  variant by its own rule). tpe below 16 runs gives it
 *                  only when the scope's noise is unknown: that one repeat
 *                  gives a first night's answer a second seed and its gains
 *                  a unit, which costs a model run that counts (100 replayed
 *                  nights, seeds 401-500, paired, Brown / fortunes
 *                  surrogates: +0.012 +- 0.004 / +0.007 +- 0.003 at 8 runs,
 *                  +0.003 +- 0.003 / +0.004 +- 0.004 at 11); at 16 runs it
 *                  is level over 300 nights (seeds 1-100, 201-300, 401-500:
 *                  +0.001 +- 0.002 on both);
 *   final_runs     tpe from 64 runs: the night's last min(16, runs / 6)
 *                  proposals re-measure the best few configurations, not
 *                  only the lowest mean: each goes to the configuration with
 *                  fewer than 1 + confirm_seeds seeds (counting those queued)
 *                  whose mean - sd / sqrt(n) is lowest, so a contender read
 *                  on one lucky seed meets a second before it can be the
 *                  answer (50 replayed 96-run nights, seeds 201-250, paired:
 *                  0.009 +- 0.003 lower on Brown, 0.006 +- 0.002 on
 *                  fortunes); 0 otherwise;
 *   model          the runs left to the strategy's own points (startup draws,
 *                  the model, local moves), before mid-night confirmations
 *                  (the final runs or the confirmation seeds, whichever are
 *                  more, come out of it).
 * runs < 0 (the length unknown) is the rule before plans: the baseline's
 * seeds strategy_default_noise_seeds, startup STRATEGY_DEFAULT_STARTUP, one
 * confirmation seed, confirm_frac STRATEGY_DEFAULT_CONFIRM. */
typedef struct {
    int runs; /* the night's length in runs; -1 = unknown */
    bool noise_known;
    int noise_seeds, startup, confirm_seeds, final_runs, model;
    double confirm_frac;
} strategy_plan_t;

void strategy_plan(strategy_kind k, int runs, bool noise_known, strategy_plan_t *p);

/* The plan the strategy follows now: strategy_plan for the night's length as
 * it knows it (max_proposals, the caller's estimate from
 * strategy_set_runs_left, whichever ends first) and for the noise it knows,
 * with the options that were given (not AUTO) in place of the plan's. The
 * noise seeds are the ones decided at the night's first proposal. */
void strategy_current_plan(const strategy_t *s, strategy_plan_t *p);
/* p as {"runs","noise_known","noise_seeds","startup","confirm_seeds","confirm_frac",
 * "final_runs","model"}
 * (runs and model null when unknown); a new tree, NULL when out of memory. */
cJSON *strategy_plan_json(const strategy_plan_t *p);
/* "night of 16 runs: 1 baseline seed (noise), 4 startup results, 11 runs of
 * the model, 1 confirmation seed" into buf. */
void strategy_plan_text(strategy_kind k, const strategy_plan_t *p, char *buf, size_t n);

/* Earlier nights' noise of the scope (as the hook payload's "noise" and GET
 * /v1/noise give it): when it matches the baseline's scope, has at least
 * STRATEGY_NOISE_KNOWN_DF degrees of freedom and nothing has been proposed
 * yet, the plan runs no noise seeds and the noise is pooled with the night's
 * own. Returns 1 when taken, 0 when not. strategy_decide calls it with each
 * payload's noise. */
int strategy_set_known_noise(strategy_t *s, const cJSON *noise);

/* baseline must be a validated spec (spec_parse/spec_load). Returns NULL with
 * err on allocation failure or an invalid option. */
strategy_t *strategy_new(const spec_t *baseline, const strategy_opts_t *o, char *err,
                         size_t errlen);
void strategy_free(strategy_t *s);

/* The night's end as the caller estimates it (the agent's --until): `runs`
 * more experiments, counted from the next proposal, can end before it; < 0 =
 * unknown (the default). Like max_proposals, whichever ends first: the last
 * proposals confirm the lowest mean, and at 0 nothing is proposed. */
void strategy_set_runs_left(strategy_t *s, int runs);

/* Runs that can still end within seconds_left at the pace of the recent
 * ones: finished holds the times (seconds, any clock) of the last n
 * experiments that ended, oldest first; running and queued experiments come
 * out of the count. -1 when the pace is unknown (fewer than 3 times, or no
 * time between them). */
int strategy_runs_before(double seconds_left, const double *finished, int n, int running,
                         int queued);

/* Decide on one hook event (hook.h's payload). Returns 0 with *reply a new
 * JSON array of zero or more specs to propose, or -1 with err when the event
 * is not a hook event (no type). */
int strategy_decide(strategy_t *s, const cJSON *event, cJSON **reply, char *err, size_t errlen);

/* The adoption rule (see above), without state, for the tests and the log. */
typedef enum { STRATEGY_ADOPT, STRATEGY_RERUN, STRATEGY_DISCARD } strategy_verdict;
typedef struct {
    double best_mean;   /* the best configuration's mean val_bpb */
    int best_n;         /* over this many seeds */
    double cand_mean;   /* the candidate's */
    int cand_n;         /* over this many seeds */
    double sd;          /* the pooled sample standard deviation; < 0 = not measured */
    double noise_floor; /* > 0: adopt past this gain instead of 2 SE */
    int max_seeds;      /* re-run only while cand_n < max_seeds */
} strategy_compare_t;

/* ADOPT when best_mean - cand_mean > the threshold (*threshold: noise_floor,
 * or 2 * sd * sqrt(1/best_n + 1/cand_n), or NAN when sd is not measured),
 * RERUN when the candidate is lower but not by that much and has fewer than
 * max_seeds seeds, DISCARD otherwise. */
strategy_verdict strategy_compare(const strategy_compare_t *c, double *threshold);

/* The guard on a verdict against runs their neighbours slowed: a time
 * budget's slowed run lost val_bpb to the machine (its result's
 * slowdown_cost_bpb), so a gain of at most the difference the two
 * configurations' mean costs make (*explained, |best_cost - cand_cost|) may
 * be the machine's. Returns verdict, except RERUN while the candidate has
 * one seed (and max_seeds allows a second) for an ADOPT on such a gain, and
 * for a DISCARD whose shortfall (-gain) the candidate's own larger cost
 * covers: a configuration a neighbour slowed is not thrown away on that run.
 * A slowdown buys one re-run, not more: a second seed slowed alike says the
 * gap is the configuration's or the machine's for good, and further seeds
 * of it would only repeat that (a one-hour night re-ran one configuration
 * three times in eleven runs for a slowdown every run of it showed). */
strategy_verdict strategy_guard_slowed(strategy_verdict verdict, double gain, double best_cost,
                                       double cand_cost, int cand_n, int max_seeds,
                                       double *explained);

/* The pooled within-configuration standard deviation the strategy measured
 * (NAN before any configuration has two seeds); *df = sum (n - 1). */
double strategy_noise(const strategy_t *s, int *df);

/* The configuration of sp as the strategy knows it: 1 with its number of
 * succeeded seeds and mean, or 0 when it has none. */
int strategy_config(const strategy_t *s, const spec_t *sp, int *n, double *mean);

/* Mutate sp (a validated spec) in place along axis a of space, to a
 * neighbour drawn from rng (space_neighbour), written with space_write: on
 * success sp is validated again, differs in identity from what it was, and
 * ch says how; name, tags, seed and parent are untouched. Returns 0, or -1
 * when the axis has no valid move from sp (sp is unchanged). */
int strategy_mutate(const space_t *space, spec_t *sp, int a, rng_t *rng, strategy_change_t *ch);

/* The agent's identity of a run of a validated spec: its configuration
 * (spec_config_hash, which writes equivalent spellings one way) and its seed,
 * "<64 hex>:<seed>". Returns 0, or -1 on failure. */
#define STRATEGY_IDENT_LEN (SPEC_HASH_HEX + 21)
int strategy_identity(const spec_t *sp, char out[STRATEGY_IDENT_LEN]);

/* Has a spec with this identity been proposed or seen? */
int strategy_has_seen(const strategy_t *s, const spec_t *sp);

/* The current best: returns 1 and fills whichever pointers are not NULL (the
 * spec stays owned by the strategy), or 0 when nothing has been adopted. */
int strategy_best(const strategy_t *s, int64_t *id, double *val_bpb, const spec_t **spec);

/* The configuration with the lowest mean val_bpb over its succeeded seeds,
 * as the agent has seen them (what the daemon's GET /v1/best answers, unless
 * the daemon ran more than the agent saw): returns 1 and fills *id (its first
 * succeeded run), *mean and *seeds, or 0 when nothing has succeeded. It is
 * not the best until its gain passes the noise (strategy_best): on a first
 * night the noise is unknown until a configuration has two seeds, and the
 * best stays the baseline while this is already far below it. */
int strategy_lowest(const strategy_t *s, int64_t *id, double *mean, int *seeds);

int strategy_n_pending(const strategy_t *s);   /* re-runs proposed and not yet judged */
int strategy_n_proposals(const strategy_t *s); /* specs proposed so far */

/* The whole state as JSON (a new tree the caller frees), and back. Load
 * replaces the state of s; on failure s is unchanged. */
cJSON *strategy_state_json(const strategy_t *s);
int strategy_load_json(strategy_t *s, const cJSON *state, char *err, size_t errlen);

/* The state in a file, written atomically. strategy_load returns 0 when
 * loaded, 1 when the file does not exist (s unchanged), -1 with err. */
int strategy_save(const strategy_t *s, const char *path, char *err, size_t errlen);
int strategy_load(strategy_t *s, const char *path, char *err, size_t errlen);

#endif

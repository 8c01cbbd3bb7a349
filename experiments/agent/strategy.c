/* strategy.c - the reference agent's search strategy (see strategy.h).
 *
 * Three parts: the mutation axes (each a small table of candidate moves, tried
 * in a random order until one validates and changes the spec's identity), the
 * judge (configurations with the mean and spread of their seeds, the pooled
 * noise, adopt past two standard errors or re-run), and the state (best,
 * configurations, seen identities, judged ids, RNG) with its JSON form for
 * --state. Every decision is one log line saying what and why, with the
 * numbers behind it. */
#include "experiments/agent/strategy.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/util.h"
#include "experiments/agent/tpe.h"

#define STR_(x) #x
#define STR(x)  STR_(x)
#define STATE_VERSION                                                                              \
    4                      /* 1: before configurations (its pending re-runs are dropped);          \
                              2: before spec_config_hash (its identities are dropped);             \
                              3: before points (its configurations inform no model) */
#define MAX_DRAWS      200 /* mutation attempts before giving up for this event */
#define MAX_RERUN_SEED 64  /* seeds past the highest known one tried for a re-run */
#define MAX_STATE      (64 << 20)
#define TPE_SHORTLIST  8 /* tpe's best candidates tried in turn (invalid or seen ones skipped) */
#define JSON_MAX_SAFE  9007199254740991.0

typedef struct {
    char key[STRATEGY_IDENT_LEN];
} ident_t;

/* One configuration (a spec identity without its seed) in the agent's scope,
 * with the val_bpb of its succeeded seeds as a running mean and sum of
 * squared deviations (Welford). */
typedef struct {
    ident_t config;
    int64_t first_id;  /* its first succeeded run: the id the daemon ranks it by */
    int n;             /* succeeded seeds */
    double mean, m2;   /* of their val_bpb; m2 = sum of squared deviations */
    uint64_t max_seed; /* the highest seed run or proposed */
    int outstanding;   /* re-runs proposed and not judged yet */
    int n_bad;         /* runs that diverged: a bad result for the model */
    bool has_x;        /* x is known (a state before version 4 has none) */
    space_point_t x;   /* where it is in the space */
    double slow_cost;  /* its runs' slowdown_cost_bpb summed (kept in the state) */
} config_t;

struct strategy {
    strategy_opts_t o;
    spec_t baseline;
    rng_t rng;
    bool have_best;
    int64_t best_id; /* 0 when the daemon does not know it (proposals get no parent) */
    double best_val; /* the mean over the best configuration's seeds */
    spec_t best;
    ident_t best_config;
    char scope[192]; /* the baseline's dataset, budget and evaluation: only these rank */
    ident_t *seen;   /* sorted */
    size_t n_seen, cap_seen;
    int64_t *judged; /* ids whose experiment.finished was decided, in arrival order */
    size_t n_judged, cap_judged;
    config_t *configs;
    size_t n_configs, cap_configs;
    int max_running;       /* the most experiments the payloads said were running */
    int queue_target;      /* proposals kept queued, as last computed (at least 1) */
    int horizon;           /* n_proposals at which the caller's night ends; -1 = unknown */
    int n_proposals;       /* every spec proposed */
    int n_mutations;       /* points proposed: the N of "mut#N", "tpe#N", "random#N" */
    int n_confirmations;   /* re-runs proposed by the confirmation rule (random, tpe) */
    int rejections_in_row; /* reset by a finished experiment */
    int noise_decided;     /* the baseline's seeds, decided at the first proposal; -1 before */
    bool noise_known;      /* earlier nights of the scope measured the noise */
    double prior_m2;       /* their noise as a sum of squared deviations ... */
    int prior_df;          /* ... over these degrees of freedom, pooled with the night's */
    strategy_plan_t said;  /* the plan last logged */
};

static const char *const kind_names[] = {
    [STRATEGY_CLIMB] = "climb", [STRATEGY_TPE] = "tpe", [STRATEGY_RANDOM] = "random"};

const char *strategy_kind_name(strategy_kind k) {
    return (unsigned)k < sizeof kind_names / sizeof *kind_names ? kind_names[k] : "?";
}

int strategy_kind_parse(const char *name, strategy_kind *k) {
    for (size_t i = 0; i < sizeof kind_names / sizeof *kind_names; i++)
        if (name && !strcmp(name, kind_names[i])) {
            *k = (strategy_kind)i;
            return 0;
        }
    return -1;
}

void strategy_opts_default(strategy_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->seed = STRATEGY_DEFAULT_SEED;
    o->max_rejections = 5;
    o->noise_seeds = STRATEGY_NOISE_SEEDS_AUTO;
    o->max_seeds = STRATEGY_DEFAULT_MAX_SEEDS;
    o->queue_target = STRATEGY_QUEUE_AUTO;
    o->kind = STRATEGY_CLIMB;
    o->confirm_frac = STRATEGY_CONFIRM_FRAC_AUTO;
    o->n_startup = STRATEGY_STARTUP_AUTO;
    o->confirm_seeds = STRATEGY_CONFIRM_AUTO;
    o->final_runs = STRATEGY_FINAL_AUTO;
    o->local_frac = STRATEGY_DEFAULT_LOCAL;
}

int strategy_default_noise_seeds(strategy_kind k) {
    return k == STRATEGY_CLIMB ? 3 : 1;
}

static void say(strategy_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(strategy_t *s, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (s->o.log)
        s->o.log(s->o.log_user, line);
    else
        fprintf(stderr, "%s\n", line);
}

/* ----------------------------------------------------------------- plan */

static int clamp_int(int x, int lo, int hi) {
    return x < lo ? lo : x > hi ? hi : x;
}

/* The plan's model runs: what the rest leaves (see strategy.h). */
static void plan_model(strategy_plan_t *p) {
    if (p->runs < 0) {
        p->model = -1;
        return;
    }
    int draws = p->startup > 0 ? p->startup - (p->noise_seeds > 0) : 0;
    int last = p->final_runs > p->confirm_seeds ? p->final_runs : p->confirm_seeds;
    p->model = p->runs - p->noise_seeds - draws - last;
    if (p->model < 0) p->model = 0;
}

void strategy_plan(strategy_kind k, int runs, bool noise_known, strategy_plan_t *p) {
    memset(p, 0, sizeof *p);
    p->runs = runs < 0 ? -1 : runs;
    p->noise_known = noise_known;
    p->confirm_frac = k == STRATEGY_CLIMB ? 0 : STRATEGY_DEFAULT_CONFIRM;
    if (runs < 0) {
        p->noise_seeds = noise_known ? 0 : strategy_default_noise_seeds(k);
        p->startup = k == STRATEGY_TPE ? STRATEGY_DEFAULT_STARTUP : 0;
        p->confirm_seeds = k == STRATEGY_CLIMB ? 0 : 1;
        plan_model(p);
        return;
    }
    if (noise_known)
        p->noise_seeds = 0;
    else if (k == STRATEGY_CLIMB)
        p->noise_seeds = runs < 24 ? 2 : 3;
    else
        p->noise_seeds = runs < 64 ? 1 : runs < 128 ? 2 : 3;
    if (p->noise_seeds > runs) p->noise_seeds = runs;
    /* climb confirms by its own rule: every promising variant is re-run */
    p->confirm_seeds = k == STRATEGY_CLIMB ? 0 : runs < 6 ? 0 : runs < 32 ? 1 : runs < 64 ? 2 : 3;
    if (k == STRATEGY_TPE) {
        p->startup = clamp_int((int)lround(runs * 5 / 8.0), 5, 10);
        if (runs <= 32) p->confirm_frac = 0; /* the model's runs are too few to give away */
        /* below 16 runs a second seed of the answer costs a model run that
           counts; it is worth it only where it gives the night's gains a unit */
        if (runs < 16 && noise_known) p->confirm_seeds = 0;
        if (runs >= 64)
            p->final_runs = runs / 6 < STRATEGY_FINAL_RUNS ? runs / 6 : STRATEGY_FINAL_RUNS;
    }
    plan_model(p);
}

/* The night's length in runs as the strategy knows it; -1 when unknown. */
static int night_runs(const strategy_t *s) {
    int left = s->o.max_proposals ? s->o.max_proposals - s->n_proposals : INT_MAX;
    if (s->horizon >= 0 && s->horizon - s->n_proposals < left) left = s->horizon - s->n_proposals;
    return left == INT_MAX ? -1 : s->n_proposals + (left > 0 ? left : 0);
}

void strategy_current_plan(const strategy_t *s, strategy_plan_t *p) {
    strategy_plan(s->o.kind, night_runs(s), s->noise_known, p);
    if (s->noise_decided >= 0)
        p->noise_seeds = s->noise_decided;
    else if (s->o.noise_seeds != STRATEGY_NOISE_SEEDS_AUTO)
        p->noise_seeds = s->o.noise_seeds;
    if (s->o.n_startup != STRATEGY_STARTUP_AUTO) p->startup = s->o.n_startup;
    if (s->o.confirm_seeds != STRATEGY_CONFIRM_AUTO) p->confirm_seeds = s->o.confirm_seeds;
    if (s->o.final_runs != STRATEGY_FINAL_AUTO) p->final_runs = s->o.final_runs;
    if (s->o.confirm_frac != STRATEGY_CONFIRM_FRAC_AUTO) p->confirm_frac = s->o.confirm_frac;
    if (p->confirm_seeds > s->o.max_seeds - 1) p->confirm_seeds = s->o.max_seeds - 1;
    if (s->o.kind != STRATEGY_TPE) p->startup = 0;
    plan_model(p);
}

cJSON *strategy_plan_json(const strategy_plan_t *p) {
    cJSON *o = cJSON_CreateObject();
    bool ok = o &&
              (p->runs < 0 ? cJSON_AddNullToObject(o, "runs") != NULL
                           : cJSON_AddNumberToObject(o, "runs", p->runs) != NULL) &&
              cJSON_AddBoolToObject(o, "noise_known", p->noise_known) &&
              cJSON_AddNumberToObject(o, "noise_seeds", p->noise_seeds) &&
              cJSON_AddNumberToObject(o, "startup", p->startup) &&
              cJSON_AddNumberToObject(o, "confirm_seeds", p->confirm_seeds) &&
              cJSON_AddNumberToObject(o, "confirm_frac", p->confirm_frac) &&
              cJSON_AddNumberToObject(o, "final_runs", p->final_runs) &&
              (p->model < 0 ? cJSON_AddNullToObject(o, "model") != NULL
                            : cJSON_AddNumberToObject(o, "model", p->model) != NULL);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

void strategy_plan_text(strategy_kind k, const strategy_plan_t *p, char *buf, size_t n) {
    char len[48], noise[96], start[64] = "", model[64] = "";
    if (p->runs < 0)
        snprintf(len, sizeof len, "night of unknown length");
    else
        snprintf(len, sizeof len, "night of %d runs", p->runs);
    if (p->noise_seeds == 0 && p->noise_known)
        snprintf(noise, sizeof noise, "no baseline noise seeds (earlier nights measured it)");
    else
        snprintf(noise, sizeof noise, "%d baseline seed%s (noise)", p->noise_seeds,
                 p->noise_seeds == 1 ? "" : "s");
    if (k == STRATEGY_TPE) snprintf(start, sizeof start, ", %d startup results", p->startup);
    if (p->model >= 0)
        snprintf(model, sizeof model, ", %d run%s of the %s", p->model, p->model == 1 ? "" : "s",
                 k == STRATEGY_TPE ? "model" : "search");
    char final[96] = "";
    if (p->final_runs > 0)
        snprintf(final, sizeof final, " (the last %d runs re-measure the best few, up to %d seeds)",
                 p->final_runs, 1 + p->confirm_seeds);
    snprintf(buf, n, "%s: %s%s%s, %d confirmation seed%s for the answer%s%s", len, noise, start,
             model, p->confirm_seeds, p->confirm_seeds == 1 ? "" : "s", final,
             k != STRATEGY_CLIMB && p->confirm_frac == 0 ? " and none before" : "");
}

/* Log the plan the first time, and when what it spends changes (not every
 * time --until's count of the runs left moves by one). */
static void say_plan(strategy_t *s) {
    strategy_plan_t p;
    char text[320];
    strategy_current_plan(s, &p);
    if (s->said.runs != 0 && p.noise_seeds == s->said.noise_seeds && p.startup == s->said.startup &&
        p.confirm_seeds == s->said.confirm_seeds && p.final_runs == s->said.final_runs &&
        p.noise_known == s->said.noise_known && (p.runs < 0) == (s->said.runs < 0))
        return;
    s->said = p;
    strategy_plan_text(s->o.kind, &p, text, sizeof text);
    say(s, "plan: %s", text);
}

/* ------------------------------------------------------------- identity */

int strategy_identity(const spec_t *sp, char out[STRATEGY_IDENT_LEN]) {
    char config[SPEC_HASH_HEX];
    if (spec_config_hash(sp, config) < 0) return -1;
    snprintf(out, STRATEGY_IDENT_LEN, "%s:%llu", config, (unsigned long long)sp->seed);
    return 0;
}

static int ident_cmp(const void *a, const void *b) {
    return strcmp(((const ident_t *)a)->key, ((const ident_t *)b)->key);
}

static bool seen_has(const strategy_t *s, const char *hex) {
    ident_t key;
    snprintf(key.key, sizeof key.key, "%s", hex);
    return s->n_seen && bsearch(&key, s->seen, s->n_seen, sizeof key, ident_cmp);
}

/* Insert hex into the sorted set. Returns 0 (also when present) or -1 (OOM). */
static int seen_add(strategy_t *s, const char *hex) {
    size_t lo = 0, hi = s->n_seen;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(s->seen[mid].key, hex);
        if (c == 0) return 0;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (s->n_seen == s->cap_seen) {
        size_t cap = s->cap_seen ? 2 * s->cap_seen : 64;
        ident_t *p = realloc(s->seen, cap * sizeof *p);
        if (!p) return -1;
        s->seen = p;
        s->cap_seen = cap;
    }
    memmove(s->seen + lo + 1, s->seen + lo, (s->n_seen - lo) * sizeof *s->seen);
    snprintf(s->seen[lo].key, sizeof s->seen[lo].key, "%s", hex);
    s->n_seen++;
    return 0;
}

/* Remove hex from the sorted set, if it is there. */
static void seen_remove(strategy_t *s, const char *hex) {
    ident_t key, *at;
    snprintf(key.key, sizeof key.key, "%s", hex);
    if (!s->n_seen || !(at = bsearch(&key, s->seen, s->n_seen, sizeof key, ident_cmp))) return;
    size_t i = (size_t)(at - s->seen);
    memmove(at, at + 1, (s->n_seen - i - 1) * sizeof *at);
    s->n_seen--;
}

int strategy_has_seen(const strategy_t *s, const spec_t *sp) {
    char hex[STRATEGY_IDENT_LEN];
    return strategy_identity(sp, hex) == 0 && seen_has(s, hex);
}

static bool judged_has(const strategy_t *s, int64_t id) {
    for (size_t i = 0; i < s->n_judged; i++)
        if (s->judged[i] == id) return true;
    return false;
}

static int judged_add(strategy_t *s, int64_t id) {
    if (s->n_judged == s->cap_judged) {
        size_t cap = s->cap_judged ? 2 * s->cap_judged : 64;
        int64_t *p = realloc(s->judged, cap * sizeof *p);
        if (!p) return -1;
        s->judged = p;
        s->cap_judged = cap;
    }
    s->judged[s->n_judged++] = id;
    return 0;
}

/* The identity of sp's configuration (spec.h). */
static int config_identity(const spec_t *sp, char out[SPEC_HASH_HEX]) {
    return spec_config_hash(sp, out) < 0 ? -1 : 0;
}

/* sp's scope (spec_scope: dataset, budget and evaluation) as the CLI names a
 * scope, "dataset D, budget time:300, eval_tokens 65536". The agent
 * knows no dataset's size, so a cap is compared as written: the baseline's
 * variants keep its cap. */
static void scope_of(const spec_t *sp, char *out, size_t n) {
    spec_scope_t sc;
    spec_scope(sp, &sc);
    snprintf(out, n, "dataset %s, budget %s:%.17g, eval_tokens %lld", sc.dataset, sc.budget_kind,
             sc.budget, (long long)sc.eval_tokens);
}

static config_t *config_find(strategy_t *s, const char *hex) {
    for (size_t i = 0; i < s->n_configs; i++)
        if (!strcmp(s->configs[i].config.key, hex)) return &s->configs[i];
    return NULL;
}

/* The configuration hex, added (empty) when new. NULL when out of memory. */
static config_t *config_get(strategy_t *s, const char *hex) {
    config_t *c = config_find(s, hex);
    if (c) return c;
    if (s->n_configs == s->cap_configs) {
        size_t cap = s->cap_configs ? 2 * s->cap_configs : 16;
        config_t *q = realloc(s->configs, cap * sizeof *q);
        if (!q) return NULL;
        s->configs = q;
        s->cap_configs = cap;
    }
    c = &s->configs[s->n_configs++];
    memset(c, 0, sizeof *c);
    snprintf(c->config.key, sizeof c->config.key, "%s", hex);
    return c;
}

static void config_add_value(config_t *c, double v) {
    c->n++;
    double d = v - c->mean;
    c->mean += d / c->n;
    c->m2 += d * (v - c->mean);
}

/* The pooled within-configuration sample standard deviation over the
 * configurations with at least two seeds, and earlier nights' noise when it
 * was known at the start, sqrt(sum m2 / sum (n - 1)); NAN
 * when there is none. *df gets sum (n - 1). */
static double pooled_sd(const strategy_t *s, int *df) {
    double m2 = s->prior_m2; /* earlier nights' (strategy_set_known_noise) */
    int d = s->prior_df;
    for (size_t i = 0; i < s->n_configs; i++)
        if (s->configs[i].n >= 2) {
            m2 += s->configs[i].m2;
            d += s->configs[i].n - 1;
        }
    if (df) *df = d;
    return d > 0 ? sqrt(m2 / d) : NAN;
}

strategy_verdict strategy_compare(const strategy_compare_t *c, double *threshold) {
    double gain = c->best_mean - c->cand_mean, t = NAN;
    if (c->noise_floor > 0)
        t = c->noise_floor;
    else if (c->sd >= 0 && c->best_n > 0 && c->cand_n > 0)
        t = 2.0 * c->sd * sqrt(1.0 / c->best_n + 1.0 / c->cand_n);
    if (threshold) *threshold = t;
    if (!isnan(t) && gain > t) return STRATEGY_ADOPT;
    if (gain > 0 && c->cand_n < c->max_seeds) return STRATEGY_RERUN;
    return STRATEGY_DISCARD;
}

/* ----------------------------------------------------------------- axes */

int strategy_mutate(const space_t *space, spec_t *sp, int a, rng_t *rng, strategy_change_t *ch) {
    char before[STRATEGY_IDENT_LEN], after[STRATEGY_IDENT_LEN], err[SPEC_ERR_LEN];
    char from[64], to[64];
    space_point_t p, q;
    bool which[SPACE_MAX_AXES] = {false};
    if (a < 0 || a >= space->n_axes || strategy_identity(sp, before) < 0 ||
        space_read(space, sp, &p) < 0)
        return -1;
    which[a] = true;
    /* A list has few neighbours, a range two: a few draws find a valid one. */
    for (int tries = 0; tries < 8; tries++) {
        spec_t t;
        if (space_neighbour(space, a, &p, rng, &q) < 0) return -1;
        if (space_write(space, &q, which, sp, &t, err, sizeof err) < 0) continue;
        if (strategy_identity(&t, after) < 0 || !strcmp(before, after)) {
            spec_free(&t);
            continue;
        }
        space_value_text(space, a, &p, from, sizeof from);
        space_value_text(space, a, &q, to, sizeof to);
        snprintf(ch->desc, sizeof ch->desc, "%s %.60s -> %.60s", space->axes[a].name, from, to);
        snprintf(ch->label, sizeof ch->label, "%s=%.60s", space->axes[a].name, to);
        spec_free(sp);
        *sp = t;
        return 0;
    }
    return -1;
}

/* ------------------------------------------------------------ proposals */

/* Replace sp's name and tags (sp owns its strings). */
static int set_label(spec_t *sp, const char *name, const char *const *tags, int n_tags) {
    free(sp->name);
    sp->name = NULL;
    for (int i = 0; i < sp->n_tags; i++) {
        free(sp->tags[i]);
        sp->tags[i] = NULL;
    }
    sp->n_tags = 0;
    if (name && !(sp->name = strdup(name))) return -1;
    for (int i = 0; i < n_tags && i < SPEC_MAX_TAGS; i++) {
        if (!(sp->tags[i] = strdup(tags[i]))) return -1;
        sp->n_tags = i + 1;
    }
    return 0;
}

/* Validate sp through spec_parse of its canonical JSON, record its identity
 * and append the JSON to reply. Returns 0, or -1 (logged) when it does not
 * validate or memory runs out. */
static int propose(strategy_t *s, const spec_t *sp, cJSON *reply) {
    char err[SPEC_ERR_LEN], hex[STRATEGY_IDENT_LEN];
    spec_t check;
    char *canon = spec_canonical_json(sp);
    if (!canon) goto oom;
    if (spec_parse(canon, strlen(canon), &check, err, sizeof err) < 0) {
        say(s, "internal error: a candidate failed validation (%s); not proposing it", err);
        free(canon);
        return -1;
    }
    int rc = strategy_identity(&check, hex);
    spec_free(&check);
    cJSON *obj = rc == 0 ? cJSON_Parse(canon) : NULL;
    free(canon);
    if (!obj || seen_add(s, hex) < 0 || !cJSON_AddItemToArray(reply, obj)) {
        cJSON_Delete(obj);
        goto oom;
    }
    s->n_proposals++;
    return 0;
oom:
    say(s, "out of memory while building a proposal");
    return -1;
}

/* Proposals the night has left: --max-proposals' and the caller's estimate
 * (strategy_set_runs_left), whichever ends first; INT_MAX when neither is
 * known. */
static int proposals_remaining(const strategy_t *s) {
    int left = s->o.max_proposals ? s->o.max_proposals - s->n_proposals : INT_MAX;
    if (s->horizon >= 0 && s->horizon - s->n_proposals < left) left = s->horizon - s->n_proposals;
    return left;
}

static bool proposals_left(strategy_t *s) {
    if (proposals_remaining(s) > 0) return true;
    if (s->o.max_proposals && s->n_proposals >= s->o.max_proposals)
        say(s, "reached --max-proposals %d: proposing nothing", s->o.max_proposals);
    else
        say(s, "no run proposed now would end before the night does: proposing nothing");
    return false;
}

int strategy_runs_before(double seconds_left, const double *finished, int n, int running,
                         int queued) {
    if (n < 3 || !(finished[n - 1] - finished[0] > 0)) return -1;
    if (!(seconds_left > 0)) return 0;
    double pace = (n - 1) / (finished[n - 1] - finished[0]); /* runs ended a second */
    double fit = floor(pace * seconds_left) - running - queued;
    return fit <= 0 ? 0 : fit >= INT_MAX / 2 ? INT_MAX / 2 : (int)fit;
}

void strategy_set_runs_left(strategy_t *s, int runs) {
    s->horizon = runs < 0 ? -1 : s->n_proposals + runs;
}

static void propose_baseline(strategy_t *s, cJSON *reply, const char *why) {
    spec_t b;
    const char *tags[SPEC_MAX_TAGS];
    int n = 0;
    if (spec_copy(&b, &s->baseline) < 0) {
        say(s, "out of memory while building a proposal");
        return;
    }
    bool has_agent = false;
    for (int i = 0; i < b.n_tags && n < SPEC_MAX_TAGS; i++) {
        tags[n++] = s->baseline.tags[i];
        has_agent |= !strcmp(s->baseline.tags[i], "agent");
    }
    if (!has_agent && n < SPEC_MAX_TAGS) tags[n++] = "agent";
    b.parent = 0;
    /* Runs that measure noise are never pruned: a prune on one early loss
     * reading would drop the very spread they are there to measure. */
    b.prune = false;
    /* Its noise first: the plan's noise seeds, seeds seed .. seed + k - 1. */
    int k = s->noise_decided > 0 ? s->noise_decided : 1, proposed = 0;
    if (set_label(&b, s->baseline.name ? s->baseline.name : "baseline", tags, n) == 0)
        for (int i = 0; i < k && (double)(s->baseline.seed + i) <= JSON_MAX_SAFE; i++) {
            b.seed = s->baseline.seed + (uint64_t)i;
            if (propose(s, &b, reply) < 0) break;
            proposed++;
        }
    if (proposed == 1)
        say(s, "proposing the baseline \"%s\": %s", b.name, why);
    else if (proposed > 1)
        say(s, "proposing the baseline \"%s\" with seeds %llu..%llu to measure the noise: %s",
            b.name, (unsigned long long)s->baseline.seed,
            (unsigned long long)(s->baseline.seed + (uint64_t)proposed - 1), why);
    spec_free(&b);
}

static void propose_mutation(strategy_t *s, cJSON *reply) {
    const spec_t *ref = s->have_best ? &s->best : &s->baseline;
    const space_t *sp = s->o.space;
    char about[96], hex[STRATEGY_IDENT_LEN];
    if (s->have_best)
        snprintf(about, sizeof about, "#%lld (val_bpb %.4f)", (long long)s->best_id, s->best_val);
    else
        snprintf(about, sizeof about, "the baseline (nothing has succeeded yet)");
    for (int attempt = 0; attempt < MAX_DRAWS; attempt++) {
        spec_t c;
        if (spec_copy(&c, ref) < 0) break;
        int n_axes = rng_below(&s->rng, 10) < 7 || sp->n_axes < 2 ? 1 : 2, axes[2];
        strategy_change_t ch[2];
        axes[0] = (int)rng_below(&s->rng, (uint64_t)sp->n_axes);
        axes[1] = sp->n_axes < 2
                      ? axes[0]
                      : (int)((axes[0] + 1 + (int)rng_below(&s->rng, (uint64_t)sp->n_axes - 1)) %
                              sp->n_axes);
        bool ok = true;
        for (int j = 0; j < n_axes && ok; j++)
            ok = strategy_mutate(sp, &c, axes[j], &s->rng, &ch[j]) == 0;
        if (!ok || strategy_identity(&c, hex) < 0 || seen_has(s, hex)) {
            spec_free(&c);
            continue;
        }
        char name[256]; /* at most 4 + 11 + 2 + 2 * 90 characters: under SPEC_MAX_NAME */
        const char *tags[3] = {"agent", sp->axes[axes[0]].name, sp->axes[axes[1]].name};
        snprintf(name, sizeof name, "mut#%d %.90s%s%.90s", s->n_mutations + 1, ch[0].label,
                 n_axes == 2 ? " " : "", n_axes == 2 ? ch[1].label : "");
        c.parent = s->have_best ? s->best_id : 0;
        c.priority = 0;
        c.prune = true; /* a new variant may be pruned, even when its parent was exempt */
        int rc = set_label(&c, name, tags, 1 + n_axes);
        if (rc == 0) rc = propose(s, &c, reply);
        spec_free(&c);
        if (rc < 0) return;
        s->n_mutations++;
        say(s, "proposing mutation of %s: %s%s%s", about, ch[0].desc, n_axes == 2 ? ", " : "",
            n_axes == 2 ? ch[1].desc : "");
        return;
    }
    say(s, "no new valid variant of %s in %d draws: proposing nothing", about, MAX_DRAWS);
}

/* -------------------------------------------------- random and tpe points */

/* The configuration with the lowest mean seen (a result, a point), or NULL. */
static config_t *leader(strategy_t *s) {
    config_t *best = NULL;
    for (size_t i = 0; i < s->n_configs; i++) {
        config_t *c = &s->configs[i];
        if (c->n > 0 && c->has_x && (!best || c->mean < best->mean)) best = c;
    }
    return best;
}

/* Write x into the baseline (the axes it has values for). Returns 0 with
 * out validated, or -1. */
static int point_spec(const strategy_t *s, const space_point_t *x, spec_t *out) {
    const space_t *sp = s->o.space;
    bool which[SPACE_MAX_AXES];
    char err[SPEC_ERR_LEN];
    for (int i = 0; i < sp->n_axes; i++)
        which[i] = sp->axes[i].n_values ? x->v[i] >= 0 : !isnan(x->v[i]);
    return space_write(sp, x, which, &s->baseline, out, err, sizeof err);
}

/* "depth=3 n_embd=256 ..." for the axes where x differs from the baseline. */
static void point_label(const strategy_t *s, const space_point_t *x, char *buf, size_t n) {
    const space_t *sp = s->o.space;
    space_point_t b;
    size_t len = 0;
    buf[0] = '\0';
    if (space_read(sp, &s->baseline, &b) < 0) return;
    for (int i = 0; i < sp->n_axes && len + 1 < n; i++) {
        char v[64];
        if (!space_active(sp, x, i) || space_same(sp, i, x, &b)) continue;
        space_value_text(sp, i, x, v, sizeof v);
        int w = snprintf(buf + len, n - len, "%s%s=%s", len ? " " : "", sp->axes[i].name, v);
        if (w < 0 || (size_t)w >= n - len) { /* cut at the last whole item */
            buf[len] = '\0';
            break;
        }
        len += (size_t)w;
    }
}

/* Propose x written into the baseline, when valid and not seen. kind names
 * the tag and the name's prefix; why is logged. Returns 0 when proposed, 1
 * when x is invalid or seen, -1 when out of memory. */
static int propose_point(strategy_t *s, const space_point_t *x, const char *kind, int64_t parent,
                         const char *why, cJSON *reply) {
    char hex[STRATEGY_IDENT_LEN], label[160], name[SPEC_MAX_NAME];
    spec_t c;
    if (point_spec(s, x, &c) < 0) return 1;
    c.seed = s->baseline.seed;
    if (strategy_identity(&c, hex) < 0 || seen_has(s, hex)) {
        spec_free(&c);
        return 1;
    }
    char cfg[SPEC_HASH_HEX];
    const config_t *known = config_identity(&c, cfg) == 0 ? config_find(s, cfg) : NULL;
    if (known && (known->n > 0 || known->n_bad > 0)) { /* run with another seed */
        spec_free(&c);
        return 1;
    }
    point_label(s, x, label, sizeof label);
    snprintf(name, sizeof name, "%s#%d%s%s", kind, s->n_mutations + 1, label[0] ? " " : "",
             label[0] ? label : "(the baseline's values)");
    const char *tags[2] = {"agent", kind};
    c.parent = parent;
    c.priority = 0;
    c.prune = true;
    int rc = set_label(&c, name, tags, 2);
    if (rc == 0) rc = propose(s, &c, reply);
    spec_free(&c);
    if (rc < 0) return -1;
    s->n_mutations++;
    say(s, "proposing %s: %s", name, why);
    return 0;
}

/* A uniform draw from the space. */
static void propose_random(strategy_t *s, const char *why, cJSON *reply) {
    for (int attempt = 0; attempt < MAX_DRAWS; attempt++) {
        space_point_t x;
        space_sample(s->o.space, &s->rng, &x);
        int rc = propose_point(s, &x, strategy_kind_name(s->o.kind), 0, why, reply);
        if (rc <= 0) return;
    }
    say(s, "no new valid point in %d random draws: proposing nothing", MAX_DRAWS);
}

/* tpe's startup: draw number n_mutations of a Latin hypercube design of
 * the plan's startup points (space_sample_stratified), so the results the model first
 * sees cover every axis's range; a draw the spec refuses or one already seen
 * is drawn again within its strata, then uniformly. */
static void propose_startup(strategy_t *s, int n_startup, const char *why, cJSON *reply) {
    for (int attempt = 0; attempt < MAX_DRAWS; attempt++) {
        space_point_t x;
        if (attempt < MAX_DRAWS / 2)
            space_sample_stratified(s->o.space, &s->rng, s->o.seed, s->n_mutations, n_startup, &x);
        else
            space_sample(s->o.space, &s->rng, &x);
        int rc = propose_point(s, &x, strategy_kind_name(s->o.kind), 0, why, reply);
        if (rc <= 0) return;
    }
    say(s, "no new valid point in %d draws: proposing nothing", MAX_DRAWS);
}

/* The observations for the model: every configuration with a point and a
 * result (its mean) or only diverged runs (+inf). Returns how many (a new
 * array in *out, the caller frees), or -1 when out of memory. */
static int observations(const strategy_t *s, tpe_obs_t **out) {
    tpe_obs_t *o = malloc((s->n_configs ? s->n_configs : 1) * sizeof *o);
    int n = 0;
    if (!o) return -1;
    for (size_t i = 0; i < s->n_configs; i++) {
        const config_t *c = &s->configs[i];
        if (!c->has_x || (c->n == 0 && c->n_bad == 0)) continue;
        o[n].x = c->x;
        o[n++].y = c->n > 0 ? c->mean : INFINITY;
    }
    *out = o;
    return n;
}

/* A move of one or two axes from the lowest mean seen. Returns 0 when
 * proposed. */
static int propose_local(strategy_t *s, const config_t *lead, cJSON *reply) {
    const space_t *sp = s->o.space;
    char why[160];
    snprintf(why, sizeof why, "a local move from the lowest mean, #%lld (%.4f over %d)",
             (long long)lead->first_id, lead->mean, lead->n);
    for (int attempt = 0; attempt < 32; attempt++) {
        space_point_t x = lead->x, y;
        int n_axes = rng_below(&s->rng, 10) < 7 || sp->n_axes < 2 ? 1 : 2;
        for (int j = 0; j < n_axes; j++) {
            int on[SPACE_MAX_AXES], n_on = 0; /* an inactive axis is not part of the point */
            for (int a = 0; a < sp->n_axes; a++)
                if (space_active(sp, &x, a)) on[n_on++] = a;
            if (n_on > 0 &&
                space_neighbour(sp, on[rng_below(&s->rng, (uint64_t)n_on)], &x, &s->rng, &y) == 0)
                x = y;
        }
        int rc = propose_point(s, &x, "tpe", lead->first_id, why, reply);
        if (rc <= 0) return rc;
    }
    return 1;
}

/* tpe: after the startup, a local move (local_frac of the time) or the
 * model's best candidate that is valid and new; random draws otherwise. */
static void propose_tpe(strategy_t *s, cJSON *reply) {
    tpe_obs_t *obs = NULL;
    int n = observations(s, &obs);
    char why[160];
    if (n < 0) {
        say(s, "out of memory while building a proposal");
        return;
    }
    strategy_plan_t plan;
    strategy_current_plan(s, &plan);
    if (n < plan.startup || n < 2) {
        free(obs);
        snprintf(why, sizeof why,
                 "a draw of the startup design (%d of %d results before the model)", n,
                 plan.startup);
        propose_startup(s, plan.startup, why, reply);
        return;
    }
    const config_t *lead = leader(s);
    double r = (double)(rng_next(&s->rng) >> 11) * 0x1.0p-53;
    if (lead && r < s->o.local_frac && propose_local(s, lead, reply) == 0) {
        free(obs);
        return;
    }
    space_point_t cand[TPE_SHORTLIST];
    double score[TPE_SHORTLIST];
    for (int round = 0; round < 4; round++) {
        int k = tpe_suggest(s->o.space, obs, n, tpe_gamma(n), TPE_DEFAULT_CANDIDATES, &s->rng, cand,
                            score, TPE_SHORTLIST);
        for (int i = 0; i < k; i++) {
            snprintf(why, sizeof why, "the model's pick over %d results (log l/g %.2f)", n,
                     score[i]);
            int rc = propose_point(s, &cand[i], "tpe", 0, why, reply);
            if (rc <= 0) {
                free(obs);
                return;
            }
        }
    }
    free(obs);
    propose_random(s, "a random draw (the model's candidates were invalid or seen)", reply);
}

/* A promising configuration: propose sp again with the next unseen seed (its
 * result joins the configuration's mean when it is judged). Returns 0 when
 * proposed. */
static int propose_rerun(strategy_t *s, config_t *c, int64_t id, const spec_t *sp, cJSON *reply) {
    char hex[STRATEGY_IDENT_LEN];
    if (!proposals_left(s)) return -1;
    uint64_t from = c->max_seed > sp->seed ? c->max_seed : sp->seed;
    for (uint64_t d = 1; d <= MAX_RERUN_SEED; d++) {
        if ((double)(from + d) > JSON_MAX_SAFE) break;
        spec_t r;
        if (spec_copy(&r, sp) < 0) break;
        r.seed = from + d;
        if (strategy_identity(&r, hex) < 0 || seen_has(s, hex)) {
            spec_free(&r);
            continue;
        }
        char name[SPEC_MAX_NAME];
        const char *tags[2] = {"agent", "rerun"};
        snprintf(name, sizeof name, "rerun of #%lld seed=%llu", (long long)c->first_id,
                 (unsigned long long)r.seed);
        r.parent = id;
        r.priority = 0;
        r.prune = false; /* it measures the configuration's seed noise (see propose_baseline) */
        int rc = set_label(&r, name, tags, 2);
        if (rc == 0) rc = propose(s, &r, reply);
        if (rc == 0) {
            c->max_seed = r.seed;
            c->outstanding++;
        }
        spec_free(&r);
        return rc;
    }
    say(s, "every re-run seed of #%lld was already run", (long long)c->first_id);
    return -1;
}

/* Whether the next proposal is among the night's last ones, as many as are
 * kept queued or the plan's confirmation seeds, whichever is more, when the
 * night's end is known. */
static bool in_last_proposals(const strategy_t *s, const strategy_plan_t *plan) {
    int last = s->queue_target > plan->confirm_seeds ? s->queue_target : plan->confirm_seeds;
    if (plan->final_runs > last) last = plan->final_runs;
    return proposals_remaining(s) <= last;
}

/* The final phase's pick: of the configurations with fewer than `target`
 * seeds (counting those queued), the one with the lowest optimistic bound
 * mean - sd / sqrt(n + queued): a contender with one seed is re-measured
 * before the leader's fourth seed; NULL when none. sd not measured: the
 * lowest mean. */
static config_t *final_pick(strategy_t *s, int target) {
    int df = 0;
    double sd = pooled_sd(s, &df), best_lcb = INFINITY;
    config_t *pick = NULL;
    for (size_t i = 0; i < s->n_configs; i++) {
        config_t *c = &s->configs[i];
        if (c->n <= 0 || !c->has_x || c->n + c->outstanding >= target) continue;
        double lcb = c->mean - (isnan(sd) ? 0 : sd / sqrt(c->n + c->outstanding));
        if (lcb < best_lcb) {
            best_lcb = lcb;
            pick = c;
        }
    }
    return pick;
}

/* The confirmation rule (strategy.h): one more seed for the lowest mean
 * seen when it beats the best by more than one standard error, within the
 * budget; among the night's last proposals, a second seed for the lowest
 * mean whatever its gain. Returns 0 when a re-run was proposed. */
static int try_confirm(strategy_t *s, cJSON *reply) {
    config_t *c = leader(s), *lead = c;
    strategy_plan_t plan;
    strategy_current_plan(s, &plan);
    if (plan.final_runs > 0 && in_last_proposals(s, &plan)) {
        config_t *f = final_pick(s, 1 + plan.confirm_seeds);
        if (f) c = f;
    }
    if (!c || c->n >= s->o.max_seeds) return -1;
    /* The morning's answer is the lowest mean (GET /v1/best); a night's last
     * new leader would otherwise rest on its one, possibly lucky, seed: among
     * the last proposals it gets the plan's confirmation seeds (counting
     * those still queued). */
    bool last = plan.confirm_seeds > 0 && in_last_proposals(s, &plan) &&
                c->n + c->outstanding < 1 + plan.confirm_seeds;
    if (!last && c->outstanding > 0) return -1;
    if (!last &&
        (!s->have_best || !strcmp(c->config.key, s->best_config.key) || !(c->mean < s->best_val)))
        return -1;
    int df = 0;
    double sd = pooled_sd(s, &df), t;
    const config_t *b = config_find(s, s->best_config.key);
    strategy_compare_t in = {.best_mean = s->best_val,
                             .best_n = b && b->n > 0 ? b->n : 1,
                             .cand_mean = c->mean,
                             .cand_n = c->n,
                             .sd = isnan(sd) ? -1 : sd,
                             .noise_floor = s->o.noise_floor,
                             .max_seeds = s->o.max_seeds};
    strategy_compare(&in, &t);
    double gain = s->best_val - c->mean, one_se = isnan(t) ? 0 : t / 2;
    if (!last && !(gain > one_se)) return -1;
    if (!last && plan.confirm_frac == 0) return -1; /* the plan line says "and none before" */
    if (!last && s->n_confirmations + 1 > plan.confirm_frac * (s->n_proposals + 1)) {
        say(s,
            "not confirming #%lld (mean %.4f over %d, gain %.4f): confirmation seeds would pass "
            "%.0f%% of the proposals (%d of %d)",
            (long long)c->first_id, c->mean, c->n, gain, 100 * plan.confirm_frac,
            s->n_confirmations + 1, s->n_proposals + 1);
        return -1;
    }
    spec_t sp;
    char cfg[SPEC_HASH_HEX];
    if (point_spec(s, &c->x, &sp) < 0) return -1;
    if (config_identity(&sp, cfg) < 0 || strcmp(cfg, c->config.key)) {
        spec_free(&sp); /* its point does not spell it out (a field outside the space) */
        return -1;
    }
    sp.seed = s->baseline.seed;
    int rc = propose_rerun(s, c, c->first_id, &sp, reply);
    spec_free(&sp);
    if (rc < 0) return -1;
    s->n_confirmations++;
    if (last && c != lead) {
        say(s,
            "re-measuring #%lld (%.4f over %d seed%s; the lowest mean is %.4f): in the night's "
            "last %d proposals the contender with the lowest mean - sd/sqrt(n) gets a seed, so "
            "that no lucky seed is the answer; re-running with seed %llu",
            (long long)c->first_id, c->mean, c->n, c->n == 1 ? "" : "s", lead->mean,
            plan.final_runs, (unsigned long long)c->max_seed);
        return 0;
    }
    if (last && plan.confirm_seeds == 1) {
        say(s,
            "confirming #%lld, the lowest mean (%.4f over one seed): %d or fewer proposals "
            "left, and the answer gets a second seed whatever its gain; re-running with seed %llu",
            (long long)c->first_id, c->mean, s->queue_target, (unsigned long long)c->max_seed);
        return 0;
    }
    if (last) {
        say(s,
            "confirming #%lld, the lowest mean (%.4f over %d seed%s, %d queued): among the "
            "night's last proposals the answer gets %d confirmation seeds whatever its gain; "
            "re-running with seed %llu",
            (long long)c->first_id, c->mean, c->n, c->n == 1 ? "" : "s", c->outstanding - 1,
            plan.confirm_seeds, (unsigned long long)c->max_seed);
        return 0;
    }
    char one[64] = "any gain: the noise is not measured yet";
    if (!isnan(t)) snprintf(one, sizeof one, "one SE %.4f", one_se);
    say(s,
        "confirming #%lld, the lowest mean: %.4f over %d seed%s beats best %.4f (#%lld) by %.4f > "
        "%s; re-running with seed %llu (confirmation %d, at most %.0f%% of the proposals)",
        (long long)c->first_id, c->mean, c->n, c->n == 1 ? "" : "s", s->best_val,
        (long long)s->best_id, gain, one, (unsigned long long)c->max_seed, s->n_confirmations,
        100 * plan.confirm_frac);
    return 0;
}

static void propose_next(strategy_t *s, cJSON *reply) {
    if (!proposals_left(s)) return;
    if (s->noise_decided < 0) { /* the night's first proposal: its noise seeds */
        strategy_plan_t plan;
        strategy_current_plan(s, &plan);
        s->noise_decided = plan.noise_seeds;
    }
    say_plan(s);
    if (!s->have_best && s->noise_decided > 0) {
        char hex[STRATEGY_IDENT_LEN];
        if (strategy_identity(&s->baseline, hex) == 0 && !seen_has(s, hex)) {
            propose_baseline(s, reply, "nothing has run yet");
            return;
        }
    }
    switch (s->o.kind) {
    case STRATEGY_CLIMB:
        propose_mutation(s, reply);
        break;
    case STRATEGY_RANDOM:
        if (try_confirm(s, reply) < 0) propose_random(s, "a uniform draw from the space", reply);
        break;
    case STRATEGY_TPE:
        if (try_confirm(s, reply) < 0) propose_tpe(s, reply);
        break;
    }
}

/* ---------------------------------------------------------------- judge */

static int adopt(strategy_t *s, int64_t id, double v, const spec_t *sp) {
    spec_t c;
    if (spec_copy(&c, sp) < 0 || config_identity(sp, s->best_config.key) < 0) return -1;
    spec_free(&s->best);
    s->best = c;
    s->have_best = true;
    s->best_id = id;
    s->best_val = v;
    return 0;
}

/* A spec in a payload: an object, or a string holding one. Returns 0 with
 * out parsed (release with spec_free), or -1. */
static int payload_spec(const cJSON *j, spec_t *out, char *err, size_t errlen) {
    if (cJSON_IsString(j) && j->valuestring)
        return spec_parse(j->valuestring, strlen(j->valuestring), out, err, errlen);
    if (!cJSON_IsObject(j)) {
        snprintf(err, errlen, "spec: not a JSON object");
        return -1;
    }
    return spec_from_json(j, out, err, errlen);
}

static int64_t payload_id(const cJSON *obj) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(obj, "id");
    if (!cJSON_IsNumber(id) || !(id->valuedouble >= 1) || id->valuedouble > JSON_MAX_SAFE ||
        id->valuedouble != floor(id->valuedouble))
        return 0;
    return (int64_t)id->valuedouble;
}

/* val_bpb of an experiment object: result.val_bpb, else a top-level val_bpb. */
static bool payload_val_bpb(const cJSON *obj, double *v) {
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(obj, "result");
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(res, "val_bpb");
    if (!cJSON_IsNumber(x)) x = cJSON_GetObjectItemCaseSensitive(obj, "val_bpb");
    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble <= 0) return false;
    *v = x->valuedouble;
    return true;
}

/* The val_bpb a run's slowdown cost it (its result's slowdown_cost_bpb,
 * engine/share.h), or 0. */
static double payload_slow_cost(const cJSON *obj) {
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(obj, "result");
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(res, "slowdown_cost_bpb");
    return cJSON_IsNumber(x) && isfinite(x->valuedouble) && x->valuedouble > 0 ? x->valuedouble : 0;
}

static const char *payload_string(const cJSON *obj, const char *key, const char *dflt) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(x) && x->valuestring ? x->valuestring : dflt;
}

/* Record the identity of obj's spec, if it has a valid one. */
static void see(strategy_t *s, const cJSON *spec_json) {
    spec_t sp;
    char err[SPEC_ERR_LEN], hex[STRATEGY_IDENT_LEN];
    if (!spec_json || payload_spec(spec_json, &sp, err, sizeof err) < 0) return;
    if (strategy_identity(&sp, hex) == 0 && seen_add(s, hex) < 0)
        say(s, "out of memory while recording a seen spec");
    spec_free(&sp);
}

/* "2 SE 0.0123 (pooled sd 0.0050 over 4 df; SE = sd * sqrt(1/3 + 1/2))", or
 * the noise floor when one is set, into buf. */
static void describe_threshold(const strategy_t *s, double t, double sd, int df, int nb, int nc,
                               char *buf, size_t n) {
    if (s->o.noise_floor > 0)
        snprintf(buf, n, "the noise floor %g", s->o.noise_floor);
    else if (isnan(t))
        snprintf(buf, n, "2 SE (noise not measured yet: no configuration has two seeds)");
    else
        snprintf(buf, n, "2 SE %.4f (pooled sd %.4f over %d df; SE = sd * sqrt(1/%d + 1/%d))", t,
                 sd, df, nb, nc);
}

strategy_verdict strategy_guard_slowed(strategy_verdict verdict, double gain, double best_cost,
                                       double cand_cost, int cand_n, int max_seeds,
                                       double *explained) {
    *explained = fabs(best_cost - cand_cost);
    if (cand_n >= 2 || cand_n >= max_seeds || !(*explained > 0)) return verdict;
    if (verdict == STRATEGY_ADOPT && gain <= *explained) return STRATEGY_RERUN;
    if (verdict == STRATEGY_DISCARD && cand_cost > best_cost && -gain < *explained)
        return STRATEGY_RERUN;
    return verdict;
}

/* The mean slowdown cost of c's runs (0 when none was slowed). */
static double config_slow_cost(const config_t *c) {
    return c && c->n > 0 ? c->slow_cost / c->n : 0;
}

/* Run id of configuration c (not the best's) scored v: adopt c, re-run it,
 * or discard it, by strategy_compare against the best; sd and df are the
 * measured noise. */
static void judge_against_best(strategy_t *s, config_t *c, int64_t id, double v, const spec_t *sp,
                               double sd, int df, cJSON *reply) {
    char why[256];
    const config_t *b = config_find(s, s->best_config.key);
    int nb = b && b->n > 0 ? b->n : 1;
    strategy_compare_t in = {.best_mean = s->best_val,
                             .best_n = nb,
                             .cand_mean = c->mean,
                             .cand_n = c->n,
                             .sd = isnan(sd) ? -1 : sd,
                             .noise_floor = s->o.noise_floor,
                             .max_seeds = s->o.max_seeds};
    double t;
    strategy_verdict verdict = strategy_compare(&in, &t);
    describe_threshold(s, t, sd, df, nb, c->n, why, sizeof why);
    double gain = s->best_val - c->mean, explained;
    strategy_verdict guarded = strategy_guard_slowed(
        verdict, gain, config_slow_cost(b), config_slow_cost(c), c->n, s->o.max_seeds, &explained);
    const bool slowed = guarded != verdict;
    if (slowed && verdict == STRATEGY_ADOPT)
        say(s,
            "not adopting #%lld: its gain %.4f over best %.4f (#%lld) is within the %.4f val_bpb "
            "their runs' slowdowns explain (neighbours took their CPUs); a re-run decides",
            (long long)c->first_id, gain, s->best_val, (long long)s->best_id, explained);
    else if (slowed)
        say(s,
            "not discarding #%lld: it is %.4f behind best %.4f (#%lld), within the %.4f val_bpb "
            "its runs' slowdowns cost it (neighbours took their CPUs); a re-run decides",
            (long long)c->first_id, -gain, s->best_val, (long long)s->best_id, explained);
    verdict = guarded;
    if (verdict == STRATEGY_ADOPT) {
        double old = s->best_val;
        int64_t old_id = s->best_id;
        if (adopt(s, c->first_id, c->mean, sp) < 0)
            say(s, "out of memory while adopting #%lld", (long long)c->first_id);
        else
            say(s,
                "keeping #%lld: mean val_bpb %.4f over %d seed%s beats best %.4f over %d (#%lld) "
                "by %.4f > %s",
                (long long)c->first_id, c->mean, c->n, c->n == 1 ? "" : "s", old, nb,
                (long long)old_id, gain, why);
    } else if (verdict == STRATEGY_RERUN && s->o.kind != STRATEGY_CLIMB && !slowed) {
        say(s,
            "promising #%lld: mean val_bpb %.4f over %d seed%s vs best %.4f over %d (#%lld): "
            "gain %.4f is within %s; a further seed is the confirmation rule's to give",
            (long long)c->first_id, c->mean, c->n, c->n == 1 ? "" : "s", s->best_val, nb,
            (long long)s->best_id, gain, why);
    } else if (verdict == STRATEGY_RERUN && c->outstanding == 0) {
        /* climb re-runs what is promising; every strategy re-runs what a
         * neighbour slowed (a repair of the measurement, not a confirmation) */
        if (propose_rerun(s, c, id, sp, reply) == 0)
            say(s,
                "promising #%lld: mean val_bpb %.4f over %d seed%s vs best %.4f over %d (#%lld): "
                "gain %.4f is within %s; re-running with seed %llu before adopting",
                (long long)c->first_id, c->mean, c->n, c->n == 1 ? "" : "s", s->best_val, nb,
                (long long)s->best_id, gain, slowed ? "what the slowdowns explain" : why,
                (unsigned long long)c->max_seed);
    } else if (verdict == STRATEGY_RERUN) {
        say(s, "promising #%lld: mean val_bpb %.4f over %d seeds; its re-run is still queued",
            (long long)c->first_id, c->mean, c->n);
    } else if (gain > 0) {
        say(s,
            "discarding #%lld: mean val_bpb %.4f over %d seeds beats best %.4f over %d (#%lld) "
            "by only %.4f, not more than %s, after %d seeds",
            (long long)c->first_id, c->mean, c->n, s->best_val, nb, (long long)s->best_id, gain,
            why, c->n);
    } else {
        say(s, "discarding #%lld: val_bpb %.4f (mean %.4f over %d) does not beat best %.4f (#%lld)",
            (long long)id, v, c->mean, c->n, s->best_val, (long long)s->best_id);
    }
}

/* Where c is in the space, read from one of its runs' spec once. */
static int place(strategy_t *s, config_t *c, const spec_t *sp) {
    if (c->has_x) return 0;
    if (space_read(s->o.space, sp, &c->x) < 0) return -1;
    c->has_x = true;
    return 0;
}

static void judge(strategy_t *s, const cJSON *exp, cJSON *reply) {
    int64_t id = payload_id(exp);
    const char *status = payload_string(exp, "status", "unknown");
    const char *reason = payload_string(exp, "reason", NULL);
    char err[SPEC_ERR_LEN], hex[STRATEGY_IDENT_LEN], cfg[SPEC_HASH_HEX], scope[192];
    spec_t sp;
    double v = 0;
    if (id && judged_has(s, id)) {
        say(s, "#%lld was already judged: ignoring the repeated event", (long long)id);
        return;
    }
    if (id && judged_add(s, id) < 0) say(s, "out of memory while recording #%lld", (long long)id);
    s->rejections_in_row = 0;
    if (payload_spec(cJSON_GetObjectItemCaseSensitive(exp, "spec"), &sp, err, sizeof err) < 0) {
        say(s, "discarding #%lld: its spec does not parse (%s)", (long long)id, err);
        return;
    }
    if (strategy_identity(&sp, hex) < 0 || seen_add(s, hex) < 0 || config_identity(&sp, cfg) < 0) {
        say(s, "out of memory while judging #%lld", (long long)id);
        goto done;
    }
    scope_of(&sp, scope, sizeof scope);
    config_t *c = config_find(s, cfg);
    if (c && c->outstanding > 0) c->outstanding--;
    if (strcmp(status, "succeeded") || !payload_val_bpb(exp, &v)) {
        /* failed, crashed, pruned, ...: nothing to rank; a divergence is a
         * bad result for the model (its learning rates, most often) */
        say(s, "discarding #%lld: %s%s%s", (long long)id, status, reason ? ": " : "",
            reason ? reason : "");
        if (!strcmp(status, "diverged") && !strcmp(scope, s->scope) && (c = config_get(s, cfg)) &&
            place(s, c, &sp) == 0)
            c->n_bad++;
        goto done;
    }
    if (strcmp(scope, s->scope)) {
        say(s, "not ranking #%lld: it ran on %s, the agent compares only %s", (long long)id, scope,
            s->scope);
        goto done;
    }
    if (!(c = config_get(s, cfg)) || place(s, c, &sp) < 0) {
        say(s, "out of memory while judging #%lld", (long long)id);
        goto done;
    }
    if (!c->first_id) c->first_id = id;
    if (sp.seed > c->max_seed) c->max_seed = sp.seed;
    config_add_value(c, v);
    c->slow_cost += payload_slow_cost(exp);
    int df = 0;
    double sd = pooled_sd(s, &df);

    if (!s->have_best) {
        if (adopt(s, c->first_id, c->mean, &sp) < 0)
            say(s, "out of memory while adopting #%lld", (long long)id);
        else
            say(s, "keeping #%lld: the first successful run (val_bpb %.4f)", (long long)id, v);
        goto done;
    }
    if (!strcmp(cfg, s->best_config.key)) {
        s->best_val = c->mean;
        say(s,
            "#%lld is seed %llu of the best #%lld: val_bpb %.4f, best mean now %.4f over %d "
            "seeds; measured noise: sd %.4f over %d df",
            (long long)id, (unsigned long long)sp.seed, (long long)s->best_id, v, c->mean, c->n, sd,
            df);
        goto done;
    }
    judge_against_best(s, c, id, v, &sp, sd, df, reply);
done:
    spec_free(&sp);
}

static void note_rejection(strategy_t *s, const cJSON *rej) {
    const cJSON *prop = cJSON_GetObjectItemCaseSensitive(rej, "proposal");
    const char *why = payload_string(rej, "error", "no reason given");
    const char *code = payload_string(rej, "code", "");
    char err[SPEC_ERR_LEN], hex[STRATEGY_IDENT_LEN], cfg[SPEC_HASH_HEX];
    spec_t sp;
    /* Refused for what it is (or for a reason the payload does not say):
     * never again. Refused for the moment (rate limit, the daemon's own
     * failure) or for its parent (proposed without one next): it may come
     * back. */
    bool for_now = !strcmp(code, "rate_limited") || !strcmp(code, "internal") ||
                   !strcmp(code, "unknown_parent");
    s->rejections_in_row++;
    say(s, "the daemon rejected a proposal: %s", why);
    if (cJSON_IsObject(prop) && payload_spec(prop, &sp, err, sizeof err) == 0) {
        if (strategy_identity(&sp, hex) == 0) {
            if (for_now)
                seen_remove(s, hex);
            else if (seen_add(s, hex) < 0)
                say(s, "out of memory while recording a rejected spec");
        }
        config_t *c = config_identity(&sp, cfg) == 0 ? config_find(s, cfg) : NULL;
        if (c && c->outstanding > 0) {
            c->outstanding--;
            say(s, "the re-run of #%lld was rejected", (long long)c->first_id);
        }
        if (!strcmp(code, "unknown_parent") && s->have_best && s->best_id &&
            sp.parent == s->best_id) {
            say(s, "the daemon does not know #%lld: proposing without a parent from now on",
                (long long)s->best_id);
            s->best_id = 0;
        }
        spec_free(&sp);
    }
}

int strategy_set_known_noise(strategy_t *s, const cJSON *noise) {
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(noise, "sd");
    const cJSON *df = cJSON_GetObjectItemCaseSensitive(noise, "df");
    const cJSON *budget = cJSON_GetObjectItemCaseSensitive(noise, "budget");
    const cJSON *eval = cJSON_GetObjectItemCaseSensitive(noise, "eval_tokens");
    const char *dataset = payload_string(noise, "dataset", NULL);
    const char *kind = payload_string(noise, "budget_kind", NULL);
    char scope[192];
    if (s->noise_known || s->n_proposals > 0 || !cJSON_IsObject(noise) || !dataset || !kind ||
        !cJSON_IsNumber(sd) || !(sd->valuedouble > 0) || !isfinite(sd->valuedouble) ||
        !cJSON_IsNumber(df) || !(df->valuedouble >= STRATEGY_NOISE_KNOWN_DF) ||
        df->valuedouble > INT32_MAX || !cJSON_IsNumber(budget) || !cJSON_IsNumber(eval))
        return 0;
    /* The daemon writes a cap that covers the whole validation split as 0
     * (spec_scope_on); the agent knows no split's size, so 0 matches its cap. */
    snprintf(scope, sizeof scope, "dataset %s, budget %s:%.17g, eval_tokens %lld", dataset, kind,
             budget->valuedouble, (long long)eval->valuedouble);
    size_t at = strlen(s->scope);
    while (at > 0 && s->scope[at - 1] != ' ') at--;
    if (strcmp(scope, s->scope) && !(eval->valuedouble == 0 && !strncmp(scope, s->scope, at)))
        return 0;
    s->noise_known = true;
    s->prior_df = (int)df->valuedouble;
    s->prior_m2 = sd->valuedouble * sd->valuedouble * s->prior_df;
    say(s,
        "earlier nights measured this scope's noise: sd %.4f over %d df; the night runs no "
        "noise seeds of the baseline and pools that noise with its own",
        sd->valuedouble, s->prior_df);
    return 1;
}

int strategy_decide(strategy_t *s, const cJSON *ev, cJSON **reply, char *err, size_t errlen) {
    const char *type = payload_string(ev, "type", NULL);
    *reply = NULL;
    if (!cJSON_IsObject(ev) || !type) {
        snprintf(err, errlen, "not a hook event: no \"type\"");
        return -1;
    }
    cJSON *out = cJSON_CreateArray();
    if (!out) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* Everything the payload shows has been run (or is queued): never again. */
    const cJSON *best = cJSON_GetObjectItemCaseSensitive(ev, "best");
    const cJSON *exp = cJSON_GetObjectItemCaseSensitive(ev, "experiment");
    const cJSON *item;
    see(s, cJSON_GetObjectItemCaseSensitive(best, "spec"));
    cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(ev, "recent")) {
        see(s, cJSON_GetObjectItemCaseSensitive(item, "spec"));
    }
    /* Noise that earlier nights measured in the scope is not measured again. */
    strategy_set_known_noise(s, cJSON_GetObjectItemCaseSensitive(ev, "noise"));
    /* A fresh agent on a daemon with history starts from the daemon's best. */
    double v;
    int64_t bid = payload_id(best);
    if (!s->have_best && bid && bid != payload_id(exp) && !judged_has(s, bid) &&
        payload_val_bpb(best, &v)) {
        spec_t sp;
        char e2[SPEC_ERR_LEN];
        char scope[192];
        if (payload_spec(cJSON_GetObjectItemCaseSensitive(best, "spec"), &sp, e2, sizeof e2) == 0) {
            scope_of(&sp, scope, sizeof scope);
            if (strcmp(scope, s->scope))
                say(s, "not starting from the daemon's best #%lld: it ran on %s, not %s",
                    (long long)bid, scope, s->scope);
            else if (adopt(s, bid, v, &sp) == 0)
                say(s, "starting from the daemon's best #%lld (val_bpb %.4f)", (long long)bid, v);
            spec_free(&sp);
        }
    }

    /* Keep `target` proposals queued: a slot that frees up starts the next
     * one at once instead of waiting for this agent's answer. */
    const cJSON *depth = cJSON_GetObjectItemCaseSensitive(ev, "queue_depth");
    const cJSON *running = cJSON_GetObjectItemCaseSensitive(ev, "running");
    int queued = cJSON_IsNumber(depth) && depth->valuedouble > 0 ? (int)depth->valuedouble : 0;
    if (cJSON_IsNumber(running) && running->valuedouble > s->max_running &&
        running->valuedouble < 1e6)
        s->max_running = (int)running->valuedouble;
    int target = s->o.queue_target > 0 ? s->o.queue_target
                 : s->max_running > 1  ? s->max_running
                                       : 1;
    s->queue_target = target;
    bool fill = true;
    if (!strcmp(type, "experiment.finished")) {
        if (!cJSON_IsObject(exp))
            say(s, "experiment.finished without an experiment: ignoring it");
        else
            judge(s, exp, out);
    } else if (!strcmp(type, "queue.empty")) {
        if (target < 1) target = 1;
    } else if (!strcmp(type, "experiment.rejected")) {
        note_rejection(s, cJSON_GetObjectItemCaseSensitive(ev, "rejected"));
        if (s->o.max_rejections > 0 && s->rejections_in_row >= s->o.max_rejections) {
            say(s,
                "%d proposals in a row were rejected: proposing nothing until an experiment "
                "finishes",
                s->rejections_in_row);
            fill = false;
        }
    } else {
        fill = false;
        say(s, "ignoring an event of type \"%.64s\"", type);
    }
    while (fill && queued + cJSON_GetArraySize(out) < target) {
        int before = cJSON_GetArraySize(out);
        propose_next(s, out);
        if (cJSON_GetArraySize(out) == before) break;
    }
    *reply = out;
    return 0;
}

/* ------------------------------------------------------------- lifetime */

strategy_t *strategy_new(const spec_t *baseline, const strategy_opts_t *o, char *err,
                         size_t errlen) {
    char e2[SPEC_ERR_LEN];
    strategy_t *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->o = *o;
    s->horizon = -1;
    s->noise_decided = -1;
    if (!(o->noise_floor >= 0) || !isfinite(o->noise_floor) || o->max_proposals < 0 ||
        (o->noise_seeds < 0 && o->noise_seeds != STRATEGY_NOISE_SEEDS_AUTO) || o->max_seeds < 1 ||
        (o->queue_target < 1 && o->queue_target != STRATEGY_QUEUE_AUTO) ||
        (!(o->confirm_frac >= 0 && o->confirm_frac <= 1) &&
         o->confirm_frac != STRATEGY_CONFIRM_FRAC_AUTO) ||
        (o->n_startup < 0 && o->n_startup != STRATEGY_STARTUP_AUTO) ||
        (o->confirm_seeds < 0 && o->confirm_seeds != STRATEGY_CONFIRM_AUTO) ||
        (o->final_runs < 0 && o->final_runs != STRATEGY_FINAL_AUTO) ||
        !(o->local_frac >= 0 && o->local_frac <= 1) || strategy_kind_name(o->kind)[0] == '?') {
        snprintf(err, errlen,
                 "the noise floor, noise_seeds, n_startup, confirm_seeds (each or its AUTO) and "
                 "max_proposals must be >= 0, "
                 "queue_target >= 1 (or STRATEGY_QUEUE_AUTO), max_seeds >= 1, confirm_frac (or "
                 "its AUTO) and local_frac in [0, 1], the kind climb, tpe or random");
        free(s);
        return NULL;
    }
    if (!o->space || o->space->n_axes < 1) {
        snprintf(err, errlen, "no search space");
        free(s);
        return NULL;
    }
    if (spec_copy(&s->baseline, baseline) < 0) {
        free(s);
        goto oom;
    }
    if (spec_validate(&s->baseline, e2, sizeof e2) < 0) {
        snprintf(err, errlen, "baseline: %s", e2);
        strategy_free(s);
        return NULL;
    }
    scope_of(&s->baseline, s->scope, sizeof s->scope);
    rng_seed(&s->rng, o->seed);
    return s;
oom:
    snprintf(err, errlen, "out of memory");
    return NULL;
}

void strategy_free(strategy_t *s) {
    if (!s) return;
    spec_free(&s->baseline);
    spec_free(&s->best);
    free(s->configs);
    free(s->seen);
    free(s->judged);
    free(s);
}

int strategy_best(const strategy_t *s, int64_t *id, double *val_bpb, const spec_t **spec) {
    if (!s->have_best) return 0;
    if (id) *id = s->best_id;
    if (val_bpb) *val_bpb = s->best_val;
    if (spec) *spec = &s->best;
    return 1;
}

int strategy_lowest(const strategy_t *s, int64_t *id, double *mean, int *seeds) {
    const config_t *low = NULL;
    for (size_t i = 0; i < s->n_configs; i++) {
        const config_t *c = &s->configs[i];
        if (c->n > 0 && (!low || c->mean < low->mean)) low = c;
    }
    if (!low) return 0;
    *id = low->first_id;
    *mean = low->mean;
    *seeds = low->n;
    return 1;
}

int strategy_n_pending(const strategy_t *s) {
    int n = 0;
    for (size_t i = 0; i < s->n_configs; i++) n += s->configs[i].outstanding;
    return n;
}

double strategy_noise(const strategy_t *s, int *df) {
    return pooled_sd(s, df);
}

int strategy_config(const strategy_t *s, const spec_t *sp, int *n, double *mean) {
    char hex[STRATEGY_IDENT_LEN];
    if (config_identity(sp, hex) < 0) return 0;
    for (size_t i = 0; i < s->n_configs; i++)
        if (!strcmp(s->configs[i].config.key, hex) && s->configs[i].n > 0) {
            if (n) *n = s->configs[i].n;
            if (mean) *mean = s->configs[i].mean;
            return 1;
        }
    return 0;
}

int strategy_n_proposals(const strategy_t *s) {
    return s->n_proposals;
}

/* ---------------------------------------------------------------- state */

/* A spec as a JSON tree (its canonical form), or NULL. */
static cJSON *spec_tree(const spec_t *sp) {
    char *canon = spec_canonical_json(sp);
    cJSON *j = canon ? cJSON_Parse(canon) : NULL;
    free(canon);
    return j;
}

cJSON *strategy_state_json(const strategy_t *s) {
    cJSON *root = cJSON_CreateObject(), *arr, *obj;
    char buf[24];
    if (!root || !cJSON_AddNumberToObject(root, "version", STATE_VERSION)) goto fail;
    if (!(arr = cJSON_AddArrayToObject(root, "rng"))) goto fail;
    for (int i = 0; i < 4; i++) {
        snprintf(buf, sizeof buf, "%016llx", (unsigned long long)s->rng.s[i]);
        if (!cJSON_AddItemToArray(arr, cJSON_CreateString(buf))) goto fail;
    }
    if (!cJSON_AddNumberToObject(root, "proposals", s->n_proposals) ||
        !cJSON_AddNumberToObject(root, "mutations", s->n_mutations) ||
        !cJSON_AddNumberToObject(root, "confirmations", s->n_confirmations) ||
        !cJSON_AddStringToObject(root, "strategy", strategy_kind_name(s->o.kind)) ||
        !cJSON_AddNumberToObject(root, "rejections_in_row", s->rejections_in_row))
        goto fail;
    if (!s->have_best) {
        if (!cJSON_AddNullToObject(root, "best")) goto fail;
    } else {
        if (!(obj = cJSON_AddObjectToObject(root, "best")) ||
            !cJSON_AddNumberToObject(obj, "id", (double)s->best_id) ||
            !cJSON_AddNumberToObject(obj, "val_bpb", s->best_val) ||
            !cJSON_AddStringToObject(obj, "config", s->best_config.key) ||
            !cJSON_AddItemToObject(obj, "spec", spec_tree(&s->best)))
            goto fail;
    }
    if (!cJSON_AddNumberToObject(root, "max_running", s->max_running) ||
        !cJSON_AddNumberToObject(root, "noise_seeds", s->noise_decided))
        goto fail;
    if (s->noise_known && (!(obj = cJSON_AddObjectToObject(root, "known_noise")) ||
                           !cJSON_AddNumberToObject(obj, "sd", sqrt(s->prior_m2 / s->prior_df)) ||
                           !cJSON_AddNumberToObject(obj, "df", s->prior_df)))
        goto fail;
    if (!(arr = cJSON_AddArrayToObject(root, "configs"))) goto fail;
    for (size_t i = 0; i < s->n_configs; i++) {
        const config_t *c = &s->configs[i];
        if (!(obj = cJSON_CreateObject()) || !cJSON_AddItemToArray(arr, obj) ||
            !cJSON_AddStringToObject(obj, "config", c->config.key) ||
            !cJSON_AddNumberToObject(obj, "first_id", (double)c->first_id) ||
            !cJSON_AddNumberToObject(obj, "n", c->n) ||
            !cJSON_AddNumberToObject(obj, "mean", c->mean) ||
            !cJSON_AddNumberToObject(obj, "m2", c->m2) ||
            !cJSON_AddNumberToObject(obj, "max_seed", (double)c->max_seed) ||
            !cJSON_AddNumberToObject(obj, "outstanding", c->outstanding) ||
            !cJSON_AddNumberToObject(obj, "diverged", c->n_bad) ||
            !cJSON_AddNumberToObject(obj, "slowdown_cost_bpb", c->slow_cost))
            goto fail;
        if (c->has_x && !cJSON_AddItemToObject(obj, "point", space_point_json(s->o.space, &c->x)))
            goto fail;
    }
    if (!(arr = cJSON_AddArrayToObject(root, "judged"))) goto fail;
    for (size_t i = 0; i < s->n_judged; i++)
        if (!cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)s->judged[i]))) goto fail;
    if (!(arr = cJSON_AddArrayToObject(root, "seen"))) goto fail;
    for (size_t i = 0; i < s->n_seen; i++)
        if (!cJSON_AddItemToArray(arr, cJSON_CreateString(s->seen[i].key))) goto fail;
    return root;
fail:
    cJSON_Delete(root);
    return NULL;
}

static bool is_hex64(const char *h) {
    if (!h || strlen(h) != 64) return false;
    for (const char *p = h; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
    return true;
}

/* A whole number in [lo, JSON_MAX_SAFE]. */
static bool get_count(const cJSON *obj, const char *key, double lo, double *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(x) || x->valuedouble < lo || x->valuedouble > JSON_MAX_SAFE ||
        x->valuedouble != floor(x->valuedouble))
        return false;
    *out = x->valuedouble;
    return true;
}

/* An identity of this version: "<64 hex>:<seed>". */
static bool is_identity(const char *h) {
    char config[SPEC_HASH_HEX];
    if (!h || strlen(h) < 66 || h[64] != ':' || strspn(h + 65, "0123456789") != strlen(h + 65))
        return false;
    snprintf(config, sizeof config, "%.64s", h);
    return is_hex64(config);
}

/* The parts of a saved state; each returns 0, or -1 with *what saying what
 * was expected (or err set, *what NULL). */

static int load_counters(strategy_t *t, const cJSON *st, const char **what) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(st, "rng"), *it;
    double d;
    int i = 0;
    *what = "rng: expected 4 hex strings";
    if (cJSON_GetArraySize(arr) != 4) return -1;
    cJSON_ArrayForEach(it, arr) {
        char *end;
        if (!cJSON_IsString(it) || !it->valuestring[0]) return -1;
        t->rng.s[i++] = strtoull(it->valuestring, &end, 16);
        if (*end) return -1;
    }
    *what = "proposals, mutations, rejections_in_row: expected counts";
    if (!get_count(st, "proposals", 0, &d) || d > INT32_MAX) return -1;
    t->n_proposals = (int)d;
    if (!get_count(st, "mutations", 0, &d) || d > INT32_MAX) return -1;
    t->n_mutations = (int)d;
    *what = "confirmations: expected a count";
    if (cJSON_GetObjectItemCaseSensitive(st, "confirmations")) {
        if (!get_count(st, "confirmations", 0, &d) || d > INT32_MAX) return -1;
        t->n_confirmations = (int)d;
    }
    *what = "proposals, mutations, rejections_in_row: expected counts";
    if (!get_count(st, "rejections_in_row", 0, &d) || d > INT32_MAX) return -1;
    t->rejections_in_row = (int)d;
    *what = "max_running: expected a count";
    if (cJSON_GetObjectItemCaseSensitive(st, "max_running")) {
        if (!get_count(st, "max_running", 0, &d) || d > INT32_MAX) return -1;
        t->max_running = (int)d;
    }
    /* The plan's noise seeds, once decided (-1 before; absent before plans:
     * decided by then when anything was proposed). */
    *what = "noise_seeds: expected -1 or a count";
    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(st, "noise_seeds");
    t->noise_decided = t->n_proposals > 0 ? 0 : -1;
    if (ns) {
        if (!cJSON_IsNumber(ns) || ns->valuedouble < -1 || ns->valuedouble > 64 ||
            ns->valuedouble != floor(ns->valuedouble))
            return -1;
        t->noise_decided = (int)ns->valuedouble;
    }
    *what = "known_noise: expected {sd > 0, df >= 1}";
    const cJSON *kn = cJSON_GetObjectItemCaseSensitive(st, "known_noise");
    if (kn) {
        const cJSON *sd = cJSON_GetObjectItemCaseSensitive(kn, "sd");
        if (!cJSON_IsNumber(sd) || !(sd->valuedouble > 0) || !isfinite(sd->valuedouble) ||
            !get_count(kn, "df", 1, &d) || d > INT32_MAX)
            return -1;
        t->noise_known = true;
        t->prior_df = (int)d;
        t->prior_m2 = sd->valuedouble * sd->valuedouble * d;
    }
    return 0;
}

/* The best; *old_config gets the configuration it was saved under ("" when
 * none), which a state before version 3 named otherwise. */
static int load_best(strategy_t *t, const cJSON *st, char old_config[SPEC_HASH_HEX],
                     const char **what, char *err, size_t errlen) {
    const cJSON *best = cJSON_GetObjectItemCaseSensitive(st, "best");
    char e2[SPEC_ERR_LEN];
    double d;
    old_config[0] = '\0';
    *what = "best: expected null or {id, val_bpb, spec}";
    if (cJSON_IsNull(best)) return 0;
    if (!cJSON_IsObject(best) || !get_count(best, "id", 0, &d) ||
        !payload_val_bpb(best, &t->best_val))
        return -1;
    t->best_id = (int64_t)d;
    if (payload_spec(cJSON_GetObjectItemCaseSensitive(best, "spec"), &t->best, e2, sizeof e2) < 0) {
        snprintf(err, errlen, "best.spec: %s", e2);
        *what = NULL;
        return -1;
    }
    t->have_best = true;
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(best, "config");
    if (cJSON_IsString(h) && is_hex64(h->valuestring))
        snprintf(old_config, SPEC_HASH_HEX, "%s", h->valuestring);
    *what = "out of memory";
    return config_identity(&t->best, t->best_config.key);
}

/* The configurations. One saved before version 3 is kept under its old name
 * (nothing finds it again but the pooled noise), except the best's, which is
 * filed under the best's configuration now (old_best). */
static int load_configs(strategy_t *t, const cJSON *st, int version, const char *old_best,
                        const char **what) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(st, "configs"), *it;
    *what = "configs: expected [{config, first_id, n, mean, m2, max_seed, outstanding}]";
    if (version >= 2 && !cJSON_IsArray(arr)) return -1;
    cJSON_ArrayForEach(it, arr) {
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(it, "config");
        const cJSON *mean = cJSON_GetObjectItemCaseSensitive(it, "mean");
        const cJSON *m2 = cJSON_GetObjectItemCaseSensitive(it, "m2");
        double fid, n, ms, out;
        if (!cJSON_IsString(h) || !is_hex64(h->valuestring) ||
            !get_count(it, "first_id", 0, &fid) || !get_count(it, "n", 0, &n) || n > INT32_MAX ||
            !cJSON_IsNumber(mean) || !isfinite(mean->valuedouble) || !cJSON_IsNumber(m2) ||
            !(m2->valuedouble >= 0) || !isfinite(m2->valuedouble) ||
            !get_count(it, "max_seed", 0, &ms) || !get_count(it, "outstanding", 0, &out) ||
            out > INT32_MAX)
            return -1;
        const char *name = h->valuestring;
        if (version < 3 && old_best[0] && !strcmp(name, old_best)) name = t->best_config.key;
        config_t *c = config_get(t, name);
        *what = "out of memory";
        if (!c) return -1;
        *what = "configs: expected [{config, first_id, n, mean, m2, max_seed, outstanding}]";
        c->first_id = (int64_t)fid;
        c->n = (int)n;
        c->mean = mean->valuedouble;
        c->m2 = m2->valuedouble;
        c->max_seed = (uint64_t)ms;
        c->outstanding = (int)out;
        double bad = 0;
        if (cJSON_GetObjectItemCaseSensitive(it, "diverged") &&
            (!get_count(it, "diverged", 0, &bad) || bad > INT32_MAX))
            return -1;
        c->n_bad = (int)bad;
        /* absent in a state saved before slowdowns were measured: none */
        const cJSON *slow = cJSON_GetObjectItemCaseSensitive(it, "slowdown_cost_bpb");
        if (slow &&
            (!cJSON_IsNumber(slow) || !(slow->valuedouble >= 0) || !isfinite(slow->valuedouble)))
            return -1;
        c->slow_cost = slow ? slow->valuedouble : 0;
        /* A point is read in the space of now: an axis added since is unknown. */
        const cJSON *pt = cJSON_GetObjectItemCaseSensitive(it, "point");
        if (cJSON_IsObject(pt)) {
            space_point_from_json(t->o.space, pt, &c->x);
            c->has_x = true;
        }
    }
    return 0;
}

/* The judged ids and the identities seen (those of a state before version 3
 * are dropped: no identity of now matches them). */
static int load_seen(strategy_t *t, const cJSON *st, int version, const char **what) {
    const cJSON *arr, *it;
    /* Version 1 kept near ties waiting for a re-run; they are dropped (the
     * near tie is judged again if it is ever re-run). */
    *what = "pending: expected an array";
    arr = cJSON_GetObjectItemCaseSensitive(st, "pending");
    if (version == 1 && !cJSON_IsArray(arr)) return -1;
    *what = "judged: expected an array of ids";
    arr = cJSON_GetObjectItemCaseSensitive(st, "judged");
    if (!cJSON_IsArray(arr)) return -1;
    cJSON_ArrayForEach(it, arr) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 1 || it->valuedouble > JSON_MAX_SAFE)
            return -1;
        if (judged_add(t, (int64_t)it->valuedouble) < 0) return *what = "out of memory", -1;
    }
    *what = "seen: expected an array of identities (configuration:seed)";
    arr = cJSON_GetObjectItemCaseSensitive(st, "seen");
    if (!cJSON_IsArray(arr)) return -1;
    cJSON_ArrayForEach(it, arr) {
        if (version < 3) continue;
        if (!cJSON_IsString(it) || !is_identity(it->valuestring)) return -1;
        if (seen_add(t, it->valuestring) < 0) return *what = "out of memory", -1;
    }
    return 0;
}

int strategy_load_json(strategy_t *s, const cJSON *st, char *err, size_t errlen) {
    /* Build the new state in t, then swap it in, so a failure changes nothing. */
    strategy_t t = {.o = s->o, .horizon = -1}; /* the caller tells the night's end again */
    char old_best[SPEC_HASH_HEX];
    double d;
    const char *what = "not a JSON object";
    if (!cJSON_IsObject(st)) goto fail;
    what = "version: expected 1 to " STR(STATE_VERSION);
    if (!get_count(st, "version", 0, &d) || d < 1 || d > STATE_VERSION) goto fail;
    int version = (int)d;
    if (load_counters(&t, st, &what) < 0 || load_best(&t, st, old_best, &what, err, errlen) < 0 ||
        load_configs(&t, st, version, old_best, &what) < 0 || load_seen(&t, st, version, &what) < 0)
        goto fail;
    /* Swap: t takes the old state and frees it; the baseline stays. */
    t.baseline = s->baseline;
    snprintf(t.scope, sizeof t.scope, "%s", s->scope);
    strategy_t old = *s;
    *s = t;
    old.baseline = (spec_t){0};
    spec_free(&old.best);
    free(old.configs);
    free(old.seen);
    free(old.judged);
    return 0;
fail:
    if (what) snprintf(err, errlen, "%s", what);
    spec_free(&t.best);
    free(t.configs);
    free(t.seen);
    free(t.judged);
    return -1;
}

int strategy_save(const strategy_t *s, const char *path, char *err, size_t errlen) {
    cJSON *st = strategy_state_json(s);
    char *text = st ? util_json_print(st, 1) : NULL;
    cJSON_Delete(st);
    if (!text) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = util_write_file_atomic(path, text, strlen(text), err, errlen);
    free(text);
    return rc;
}

int strategy_load(strategy_t *s, const char *path, char *err, size_t errlen) {
    struct stat sb;
    char e2[256];
    size_t len;
    if (stat(path, &sb) < 0 && errno == ENOENT) return 1;
    char *text = util_read_file(path, MAX_STATE, &len, e2, sizeof e2);
    if (!text) {
        snprintf(err, errlen, "%s", e2);
        return -1;
    }
    cJSON *st = cJSON_ParseWithLength(text, len);
    free(text);
    int rc = strategy_load_json(s, st, e2, sizeof e2);
    if (rc < 0) snprintf(err, errlen, "%s: %s", path, e2);
    cJSON_Delete(st);
    return rc;
}

/* test_strategy.c - the reference agent's strategy, driven with hook events
 * built here: the baseline first, keep/discard with the noise floor, near-tie
 * re-runs adopted by their mean, rejected specs never proposed again, every
 * axis valid over many seeded draws, no repeats over long runs, and the state
 * surviving a save/load round trip. The decision log is captured so that the
 * reasons can be checked too. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/rng.h"
#include "engine/spec.h"
#include "experiments/agent/space.h"
#include "experiments/agent/strategy.h"
#include "experiments/agent/tpe.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------- helpers */

typedef struct {
    char *text; /* every logged line, '\n'-separated */
    size_t len;
} log_t;

static void log_cb(void *user, const char *line) {
    log_t *l = user;
    size_t n = strlen(line);
    l->text = realloc(l->text, l->len + n + 2);
    cr_assert(l->text);
    memcpy(l->text + l->len, line, n);
    l->len += n;
    l->text[l->len++] = '\n';
    l->text[l->len] = '\0';
}

static int logged(const log_t *l, const char *needle) {
    return l->text && strstr(l->text, needle) != NULL;
}

static void load_example(const char *name, spec_t *s) {
    char err[SPEC_ERR_LEN];
    char *path = tu_path("%s/experiments/specs/%s", tu_src(), name);
    cr_assert_eq(spec_load(path, s, err, sizeof err), 0, "%s: %s", path, err);
    free(path);
}

/* The night's search space (experiments/search/space.json), loaded once per
 * test process and freed by the suite's fini. */
static space_t *the_space;

static const space_t *space(void) {
    char err[512];
    if (the_space) return the_space;
    char *path = tu_path("%s/experiments/search/space.json", tu_src());
    the_space = space_load(path, err, sizeof err);
    cr_assert_not_null(the_space, "%s", err);
    free(path);
    return the_space;
}

/* The space the scripted objective below is written over, fixed here so that
 * the search-quality tests do not move with the night's file: the night's
 * axes before the optimiser-step lever, with the tokens per optimiser step
 * in place of the micro-batch they used to move (4 x 256 = 1,024 to
 * 32 x 256 = 8,192; the micro-batch is derived from it). */
static space_t *the_scripted;

static const space_t *scripted_space(void) {
    static const char text[] =
        "{\"axes\":["
        "{\"path\":\"model.depth\",\"type\":\"int\",\"low\":2,\"high\":8},"
        "{\"path\":\"model.n_embd\",\"type\":\"int\",\"values\":[64,96,128,192,256]},"
        "{\"path\":\"model.n_head\",\"type\":\"int\",\"values\":[1,2,4,8],"
        "\"also\":[\"model.n_kv_head\"]},"
        "{\"path\":\"model.ve_layers\",\"type\":\"choice\",\"values\":[\"none\","
        "\"alternate\",\"all\",\"first_half\",\"last_half\"]},"
        "{\"path\":\"model.ve_gate_channels\",\"type\":\"int\",\"values\":[8,16,32,64,128]},"
        "{\"path\":\"model.mlp\",\"type\":\"choice\",\"values\":[\"relu2\",\"gelu\","
        "\"swiglu\",\"geglu\"]},"
        "{\"path\":\"model.window_pattern\",\"type\":\"choice\",\"values\":[\"L\",\"SL\","
        "\"SSL\",\"SSSL\"]},"
        "{\"path\":\"train.matrix_lr\",\"type\":\"float\",\"low\":0.01,\"high\":0.16,"
        "\"log\":true},"
        "{\"path\":\"train.embedding_lr\",\"type\":\"float\",\"low\":0.15,\"high\":2.4,"
        "\"log\":true},"
        "{\"path\":\"train.total_batch_tokens\",\"type\":\"int\","
        "\"values\":[1024,2048,4096,8192]}]}";
    char err[512];
    if (the_scripted) return the_scripted;
    the_scripted = space_parse(text, strlen(text), "scripted.json", err, sizeof err);
    cr_assert_not_null(the_scripted, "%s", err);
    return the_scripted;
}

static void free_space(void) {
    space_free(the_space);
    the_space = NULL;
    space_free(the_scripted);
    the_scripted = NULL;
}

TestSuite(strategy, .fini = free_space);

static strategy_t *new_strategy_of(log_t *l, int max_proposals, strategy_kind kind) {
    strategy_opts_t o;
    spec_t base;
    char err[256];
    strategy_opts_default(&o);
    o.space = space();
    o.seed = 7;
    o.max_proposals = max_proposals;
    o.kind = kind;
    /* The older cases: one baseline run and a fixed noise floor (the manual
     * override); the measured-noise rule has its own tests below. */
    o.noise_seeds = 1;
    o.noise_floor = 0.005;
    o.log = log_cb;
    o.log_user = l;
    load_example("baseline.json", &base);
    strategy_t *s = strategy_new(&base, &o, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    spec_free(&base);
    return s;
}

static strategy_t *new_strategy(log_t *l, int max_proposals) {
    return new_strategy_of(l, max_proposals, STRATEGY_CLIMB);
}

/* A spec object as JSON (canonical form). */
static cJSON *spec_json(const spec_t *sp) {
    char *c = spec_canonical_json(sp);
    cr_assert_not_null(c);
    cJSON *j = cJSON_Parse(c);
    free(c);
    cr_assert_not_null(j);
    return j;
}

/* A finished event for experiment id with spec (taken) and val_bpb (NAN: no result). */
static cJSON *finished(int64_t id, const char *status, cJSON *spec, double val_bpb, int depth) {
    cJSON *ev = cJSON_CreateObject(), *exp = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", "experiment.finished");
    cJSON_AddNumberToObject(exp, "id", (double)id);
    cJSON_AddStringToObject(exp, "status", status);
    cJSON_AddItemToObject(exp, "spec", spec);
    if (isnan(val_bpb)) {
        cJSON_AddNullToObject(exp, "result");
    } else {
        cJSON *res = cJSON_AddObjectToObject(exp, "result");
        cJSON_AddNumberToObject(res, "val_bpb", val_bpb);
    }
    cJSON_AddItemToObject(ev, "experiment", exp);
    cJSON_AddNullToObject(ev, "best");
    cJSON_AddItemToObject(ev, "recent", cJSON_CreateArray());
    cJSON_AddNumberToObject(ev, "queue_depth", depth);
    return ev;
}

static cJSON *queue_empty(void) {
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", "queue.empty");
    cJSON_AddNullToObject(ev, "experiment");
    cJSON_AddNullToObject(ev, "best");
    cJSON_AddItemToObject(ev, "recent", cJSON_CreateArray());
    cJSON_AddNumberToObject(ev, "queue_depth", 0);
    return ev;
}

/* Decide on ev (freed here); returns the reply array. */
static cJSON *decide(strategy_t *s, cJSON *ev) {
    cJSON *reply = NULL;
    char err[256];
    cr_assert_eq(strategy_decide(s, ev, &reply, err, sizeof err), 0, "%s", err);
    cJSON_Delete(ev);
    cr_assert(cJSON_IsArray(reply));
    return reply;
}

/* The only proposal of reply, parsed (must validate); reply is freed. */
static void only_proposal(cJSON *reply, spec_t *out) {
    char err[SPEC_ERR_LEN];
    cr_assert_eq(cJSON_GetArraySize(reply), 1, "expected one proposal, got %d",
                 cJSON_GetArraySize(reply));
    char *text = cJSON_PrintUnformatted(reply->child);
    cr_assert_eq(spec_parse(text, strlen(text), out, err, sizeof err), 0, "%s: %s", text, err);
    free(text);
    cJSON_Delete(reply);
}

static int has_tag(const spec_t *sp, const char *tag) {
    for (int i = 0; i < sp->n_tags; i++)
        if (!strcmp(sp->tags[i], tag)) return 1;
    return 0;
}

static char *identity(const spec_t *sp) {
    char *hex = malloc(STRATEGY_IDENT_LEN);
    cr_assert(hex && strategy_identity(sp, hex) == 0);
    return hex;
}

/* A strategy whose best is #1 at val_bpb v (the baseline, run). */
static strategy_t *with_best_of(log_t *l, double v, spec_t *base, strategy_kind kind) {
    strategy_t *s = new_strategy_of(l, 0, kind);
    spec_t p;
    only_proposal(decide(s, queue_empty()), &p); /* the baseline */
    spec_free(&p);
    load_example("baseline.json", base);
    only_proposal(decide(s, finished(1, "succeeded", spec_json(base), v, 0)), &p);
    spec_free(&p);
    int64_t id;
    double bv;
    cr_assert(strategy_best(s, &id, &bv, NULL));
    cr_assert_eq(id, 1);
    cr_assert_eq(bv, v);
    return s;
}

static strategy_t *with_best(log_t *l, double v, spec_t *base) {
    return with_best_of(l, v, base, STRATEGY_CLIMB);
}

/* ---------------------------------------------------------------- tests */

Test(strategy, baseline_first_then_mutations_of_it) {
    log_t l = {0};
    strategy_t *s = new_strategy(&l, 0);
    spec_t p, base;
    only_proposal(decide(s, queue_empty()), &p);
    load_example("baseline.json", &base);
    char *a = identity(&p), *b = identity(&base);
    cr_expect_str_eq(a, b, "the first proposal is not the baseline");
    cr_expect_str_eq(p.name, "baseline");
    cr_expect_eq(p.parent, 0);
    cr_expect(has_tag(&p, "agent"));
    cr_expect(logged(&l, "proposing the baseline"));
    free(a);
    spec_free(&p);

    /* Nothing has finished yet: the next one varies the baseline, no parent. */
    only_proposal(decide(s, queue_empty()), &p);
    a = identity(&p);
    cr_expect_str_neq(a, b);
    cr_expect_eq(p.parent, 0);
    cr_expect(!strncmp(p.name, "mut#1 ", 6), "name %s", p.name);
    cr_expect(has_tag(&p, "agent"));
    cr_expect(p.n_tags >= 2 && p.n_tags <= 3);
    cr_expect(logged(&l, "proposing mutation of the baseline"));
    cr_expect_eq(strategy_n_proposals(s), 2);
    free(a);
    free(b);
    spec_free(&p);
    spec_free(&base);
    strategy_free(s);
    free(l.text);
}

Test(strategy, keep_and_discard_with_the_noise_floor) {
    log_t l = {0};
    spec_t base, p;
    strategy_t *s = with_best(&l, 2.5, &base);
    cr_expect(logged(&l, "keeping #1: the first successful run (val_bpb 2.5000)"));

    /* 0.01 better than the best: more than the floor, kept; the next varies it. */
    spec_t v2;
    spec_copy(&v2, &base);
    v2.model.n_embd = 192;
    cr_assert_eq(spec_validate(&v2, NULL, 0), 0);
    only_proposal(decide(s, finished(2, "succeeded", spec_json(&v2), 2.49, 0)), &p);
    int64_t id;
    double v;
    cr_assert(strategy_best(s, &id, &v, NULL));
    cr_expect_eq(id, 2);
    cr_expect_eq(v, 2.49);
    cr_expect_eq(p.parent, 2);
    cr_expect(logged(&l, "keeping #2: mean val_bpb 2.4900 over 1 seed beats best 2.5000 over 1 "
                         "(#1) by 0.0100 > the noise floor 0.005"));
    cr_expect(logged(&l, "proposing mutation of #2 (val_bpb 2.4900)"));
    spec_free(&p);

    /* Equal, and worse: discarded. */
    only_proposal(decide(s, finished(3, "succeeded", spec_json(&base), 2.49, 0)), &p);
    spec_free(&p);
    only_proposal(decide(s, finished(4, "succeeded", spec_json(&base), 2.7, 0)), &p);
    spec_free(&p);
    cr_assert(strategy_best(s, &id, &v, NULL));
    cr_expect_eq(id, 2);
    /* #3 and #4 are more seeds of #1's configuration: mean 2.495, then 2.5633 */
    cr_expect(logged(&l, "discarding #3: val_bpb 2.4900 (mean 2.4950 over 2) does not beat best "
                         "2.4900 (#2)"));
    cr_expect(logged(&l, "discarding #4: val_bpb 2.7000 (mean 2.5633 over 3) does not beat best "
                         "2.4900 (#2)"));

    /* A failure is discarded with its reason. */
    only_proposal(decide(s, finished(5, "failed", spec_json(&base), NAN, 0)), &p);
    spec_free(&p);
    cr_expect(logged(&l, "discarding #5: failed"));

    /* With a queue, a finished run is judged but nothing new is proposed. */
    cJSON *r = decide(s, finished(6, "succeeded", spec_json(&base), 2.6, 3));
    cr_expect_eq(cJSON_GetArraySize(r), 0);
    cJSON_Delete(r);

    /* The same event again is not judged twice. */
    r = decide(s, finished(2, "succeeded", spec_json(&v2), 2.49, 3));
    cr_expect_eq(cJSON_GetArraySize(r), 0);
    cJSON_Delete(r);
    cr_expect(logged(&l, "#2 was already judged"));

    spec_free(&v2);
    spec_free(&base);
    strategy_free(s);
    free(l.text);
}

Test(strategy, promising_variant_is_rerun_then_adopted_by_its_mean) {
    log_t l = {0};
    spec_t base, p, v2;
    strategy_t *s = with_best(&l, 2.5, &base);
    spec_copy(&v2, &base);
    v2.model.mlp = MLP_SWIGLU;
    cr_assert_eq(spec_validate(&v2, NULL, 0), 0);

    /* 0.003 better: within the floor, so re-run with a new seed first. */
    only_proposal(decide(s, finished(2, "succeeded", spec_json(&v2), 2.497, 0)), &p);
    cr_expect(logged(&l, "promising #2: mean val_bpb 2.4970 over 1 seed vs best 2.5000 over 1 "
                         "(#1): gain 0.0030 is within the noise floor 0.005; re-running with "
                         "seed 43 before adopting"));
    cr_expect_eq(p.seed, v2.seed + 1);
    cr_expect_eq(p.parent, 2);
    cr_expect(has_tag(&p, "rerun"));
    cr_expect(!p.prune, "a re-run measures noise: the daemon must not prune it");
    cr_expect_eq(p.model.mlp, MLP_SWIGLU);
    cr_expect_eq(strategy_n_pending(s), 1);
    int64_t id;
    double v;
    cr_assert(strategy_best(s, &id, &v, NULL));
    cr_expect_eq(id, 1, "a promising variant was adopted before its re-run");

    /* The re-run gives 2.489: mean 2.493 over two seeds beats 2.5 by 0.007. */
    spec_t q;
    only_proposal(decide(s, finished(3, "succeeded", spec_json(&p), 2.489, 0)), &q);
    cr_assert(strategy_best(s, &id, &v, NULL));
    cr_expect_eq(id, 2, "the configuration is known by its first run");
    cr_expect(fabs(v - 2.493) < 1e-12, "best val_bpb %g", v);
    cr_expect_eq(strategy_n_pending(s), 0);
    cr_expect_eq(q.parent, 2);
    cr_expect(q.prune, "a new variant may be pruned, though the re-run it follows was exempt");
    cr_expect(logged(&l, "keeping #2: mean val_bpb 2.4930 over 2 seeds beats best 2.5000 over 1 "
                         "(#1) by 0.0070 > the noise floor 0.005"));
    spec_free(&q);
    spec_free(&p);
    spec_free(&v2);
    spec_free(&base);
    strategy_free(s);
    free(l.text);
}

Test(strategy, promising_variant_not_confirmed) {
    log_t l = {0};
    spec_t base, p, v2, q;
    strategy_t *s = with_best(&l, 2.5, &base);
    spec_copy(&v2, &base);
    v2.model.depth = 5;
    cr_assert_eq(spec_validate(&v2, NULL, 0), 0);
    only_proposal(decide(s, finished(2, "succeeded", spec_json(&v2), 2.498, 0)), &p);
    /* The re-run gives 2.51: mean 2.504 does not beat 2.5. */
    only_proposal(decide(s, finished(3, "succeeded", spec_json(&p), 2.51, 0)), &q);
    int64_t id;
    cr_assert(strategy_best(s, &id, NULL, NULL));
    cr_expect_eq(id, 1);
    cr_expect_eq(q.parent, 1);
    cr_expect(logged(&l, "discarding #3: val_bpb 2.5100 (mean 2.5040 over 2) does not beat best "
                         "2.5000 (#1)"));
    spec_free(&q);
    spec_free(&p);

    /* A promising variant whose re-run fails is not adopted either. */
    spec_t v4;
    spec_copy(&v4, &base);
    v4.model.depth = 3;
    cr_assert_eq(spec_validate(&v4, NULL, 0), 0);
    only_proposal(decide(s, finished(4, "succeeded", spec_json(&v4), 2.499, 0)), &p);
    cr_expect_eq(strategy_n_pending(s), 1);
    only_proposal(decide(s, finished(5, "crashed", spec_json(&p), NAN, 0)), &q);
    cr_expect_eq(strategy_n_pending(s), 0);
    cr_assert(strategy_best(s, &id, NULL, NULL));
    cr_expect_eq(id, 1);
    cr_expect(logged(&l, "discarding #5: crashed"));
    spec_free(&q);
    spec_free(&p);

    /* A pruned run is discarded like any run that did not succeed. */
    only_proposal(decide(s, finished(6, "pruned", spec_json(&v4), NAN, 0)), &q);
    cr_expect(logged(&l, "discarding #6: pruned"));
    spec_free(&q);
    spec_free(&v4);
    spec_free(&v2);
    spec_free(&base);
    strategy_free(s);
    free(l.text);
}

/* The adoption rule itself: adopt past two standard errors of the
 * difference of means, 2 * sd * sqrt(1/n_best + 1/n_cand). */
Test(strategy, adopts_only_past_two_standard_errors) {
    static const struct {
        double best_mean;
        int best_n;
        double cand_mean;
        int cand_n;
        double sd, floor;
        strategy_verdict want;
        double threshold; /* NAN = not measured */
    } cases[] = {
        /* 2 SE = 0.04 * sqrt(1/3 + 1) = 0.046188 */
        {2.50, 3, 2.45, 1, 0.02, 0, STRATEGY_ADOPT, 0.0461880215},
        {2.50, 3, 2.46, 1, 0.02, 0, STRATEGY_RERUN, 0.0461880215},
        /* more seeds, a smaller SE: 0.04 * sqrt(1/3 + 1/4) = 0.030551 */
        {2.50, 3, 2.46, 4, 0.02, 0, STRATEGY_ADOPT, 0.0305505046},
        {2.50, 3, 2.48, 4, 0.02, 0, STRATEGY_DISCARD, 0.0305505046},
        {2.50, 3, 2.48, 3, 0.02, 0, STRATEGY_RERUN, 0.0326598632},
        /* worse or equal: never */
        {2.50, 3, 2.51, 1, 0.02, 0, STRATEGY_DISCARD, 0.0461880215},
        {2.50, 3, 2.50, 1, 0.02, 0, STRATEGY_DISCARD, 0.0461880215},
        /* no measured noise yet: re-run, never adopt */
        {2.50, 1, 2.00, 1, -1, 0, STRATEGY_RERUN, NAN},
        {2.50, 1, 2.00, 4, -1, 0, STRATEGY_DISCARD, NAN},
        /* identical seeds (sd 0): any gain */
        {2.50, 2, 2.4999, 1, 0, 0, STRATEGY_ADOPT, 0},
        /* the manual noise floor replaces 2 SE */
        {2.50, 1, 2.494, 1, 0.02, 0.005, STRATEGY_ADOPT, 0.005},
        {2.50, 1, 2.496, 1, 0.02, 0.005, STRATEGY_RERUN, 0.005},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        strategy_compare_t in = {.best_mean = cases[i].best_mean,
                                 .best_n = cases[i].best_n,
                                 .cand_mean = cases[i].cand_mean,
                                 .cand_n = cases[i].cand_n,
                                 .sd = cases[i].sd,
                                 .noise_floor = cases[i].floor,
                                 .max_seeds = 4};
        double t = 0;
        strategy_verdict got = strategy_compare(&in, &t);
        cr_expect_eq(got, cases[i].want, "case %zu: verdict %d, want %d", i, got, cases[i].want);
        if (isnan(cases[i].threshold))
            cr_expect(isnan(t), "case %zu: threshold %g, want none", i, t);
        else
            cr_expect(fabs(t - cases[i].threshold) < 1e-9, "case %zu: threshold %.10f, want %.10f",
                      i, t, cases[i].threshold);
    }
}

/* The guard against slowed runs: an adoption on a gain no larger than the
 * difference of the two sides' slowdown costs becomes a re-run of a
 * one-seed candidate, and so does a discard whose shortfall the candidate's
 * own larger cost covers; other verdicts, margins past it, and candidates
 * re-run once already stand. */
Test(strategy, guard_slowed_reruns_an_adoption_the_slowdown_explains) {
    static const struct {
        strategy_verdict in;
        double gain, best_cost, cand_cost;
        int cand_n;
        strategy_verdict want;
        double explained;
    } cases[] = {
        {STRATEGY_ADOPT, 0.05, 0, 0, 1, STRATEGY_ADOPT, 0},          /* nobody slowed */
        {STRATEGY_ADOPT, 0.05, 0, 0.08, 1, STRATEGY_RERUN, 0.08},    /* the candidate was */
        {STRATEGY_ADOPT, 0.05, 0.08, 0, 1, STRATEGY_RERUN, 0.08},    /* the best was */
        {STRATEGY_ADOPT, 0.05, 0.08, 0.07, 1, STRATEGY_ADOPT, 0.01}, /* both, alike */
        {STRATEGY_ADOPT, 0.09, 0, 0.08, 1, STRATEGY_ADOPT, 0.08},    /* past what it explains */
        {STRATEGY_ADOPT, 0.05, 0, 0.08, 4, STRATEGY_ADOPT, 0.08},    /* no seeds left */
        {STRATEGY_ADOPT, 0.05, 0, 0.08, 2, STRATEGY_ADOPT, 0.08},    /* re-run once already */
        {STRATEGY_RERUN, 0.05, 0, 0.08, 1, STRATEGY_RERUN, 0.08},
        {STRATEGY_DISCARD, -0.01, 0, 0.08, 1, STRATEGY_RERUN, 0.08},   /* its slowdown explains */
        {STRATEGY_DISCARD, -0.10, 0, 0.08, 1, STRATEGY_DISCARD, 0.08}, /* past what it explains */
        {STRATEGY_DISCARD, -0.01, 0.08, 0, 1, STRATEGY_DISCARD, 0.08}, /* the best was slowed */
        {STRATEGY_DISCARD, -0.01, 0, 0.08, 4, STRATEGY_DISCARD, 0.08}, /* no seeds left */
        {STRATEGY_DISCARD, -0.01, 0, 0.08, 2, STRATEGY_DISCARD, 0.08}, /* re-run once already */
        {STRATEGY_DISCARD, -0.01, 0, 0, 1, STRATEGY_DISCARD, 0},       /* nobody slowed */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double explained = -1;
        strategy_verdict got =
            strategy_guard_slowed(cases[i].in, cases[i].gain, cases[i].best_cost,
                                  cases[i].cand_cost, cases[i].cand_n, 4, &explained);
        cr_expect_eq(got, cases[i].want, "case %zu: verdict %d, want %d", i, got, cases[i].want);
        cr_expect_float_eq(explained, cases[i].explained, 1e-12, "case %zu", i);
    }
}

/* In the flow: a variant that beats the best by 0.1 (past the 0.005 noise
 * floor) but was slowed by 0.2 val_bpb is not adopted: the log says why and
 * the reply re-runs it; one slowed by 0.05 is adopted. */
Test(strategy, a_slowed_variant_is_rerun_not_adopted) {
    for (int k = 0; k < 2; k++) {
        log_t l = {0};
        spec_t base, v2;
        strategy_t *s = with_best(&l, 2.5, &base);
        spec_copy(&v2, &base);
        v2.model.n_embd = 192;
        cr_assert_eq(spec_validate(&v2, NULL, 0), 0);
        cJSON *ev = finished(2, "succeeded", spec_json(&v2), 2.4, 0);
        cJSON_AddNumberToObject(
            cJSON_GetObjectItem(cJSON_GetObjectItem(ev, "experiment"), "result"),
            "slowdown_cost_bpb", k == 0 ? 0.2 : 0.05);
        cJSON *reply = decide(s, ev);
        int64_t id;
        double bv;
        cr_assert(strategy_best(s, &id, &bv, NULL));
        if (k == 0) {
            cr_expect_eq(id, 1, "the slowed variant was adopted");
            cr_expect(logged(&l, "not adopting #2: its gain 0.1000 over best 2.5000 (#1) is within "
                                 "the 0.2000 val_bpb their runs' slowdowns explain"),
                      "no log line says why: %s", l.text);
            cr_expect(logged(&l, "re-running with seed"), "no re-run: %s", l.text);
            const cJSON *sp;
            int reruns = 0;
            cJSON_ArrayForEach(sp, reply) {
                const cJSON *m = cJSON_GetObjectItem(sp, "model");
                reruns += tu_jnum(m, "n_embd") == 192;
            }
            cr_expect_eq(reruns, 1, "the variant is not re-run");
        } else {
            cr_expect_eq(id, 2, "a variant slowed by less than its gain was not adopted");
            cr_expect(!logged(&l, "not adopting"));
        }
        cJSON_Delete(reply);
        spec_free(&v2);
        spec_free(&base);
        strategy_free(s);
        free(l.text);
    }
}

/* Under tpe on a first night (no noise measured, no floor): a variant far
 * below the baseline is not adopted, so the best stays the baseline while
 * the lowest mean, what the morning's answer would be, is the variant's;
 * before any result there is no lowest mean. */
Test(strategy, the_lowest_mean_is_not_the_best_before_the_noise_is_known) {
    log_t l = {0};
    strategy_opts_t o;
    spec_t base, p, v2, v3;
    char err[256];
    strategy_opts_default(&o);
    o.space = space();
    o.seed = 7;
    o.kind = STRATEGY_TPE;
    o.log = log_cb;
    o.log_user = &l;
    load_example("baseline.json", &base);
    strategy_t *s = strategy_new(&base, &o, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    int64_t id;
    double v;
    int seeds;
    cr_expect_eq(strategy_lowest(s, &id, &v, &seeds), 0, "nothing has run");
    only_proposal(decide(s, queue_empty()), &p); /* the baseline, one seed */
    spec_free(&p);
    cJSON_Delete(decide(s, finished(1, "succeeded", spec_json(&base), 2.5, 0)));
    spec_copy(&v2, &base);
    v2.model.n_embd = 192;
    spec_copy(&v3, &base);
    v3.model.n_embd = 256;
    cr_assert_eq(spec_validate(&v2, NULL, 0), 0);
    cr_assert_eq(spec_validate(&v3, NULL, 0), 0);
    cJSON_Delete(decide(s, finished(2, "succeeded", spec_json(&v2), 2.3, 0)));
    cJSON_Delete(decide(s, finished(3, "succeeded", spec_json(&v3), 2.4, 0)));
    cr_assert(strategy_best(s, &id, &v, NULL));
    cr_expect_eq(id, 1, "adopted without a unit: %s", l.text);
    cr_assert(strategy_lowest(s, &id, &v, &seeds));
    cr_expect_eq(id, 2);
    cr_expect_float_eq(v, 2.3, 1e-12);
    cr_expect_eq(seeds, 1);
    spec_free(&v3);
    spec_free(&v2);
    spec_free(&base);
    strategy_free(s);
    free(l.text);
}

/* Under tpe too: a variant 0.05 behind the best whose own run was slowed by
 * 0.2 val_bpb is not discarded but re-run at once (its slowdown explains the
 * shortfall); one slowed by 0.02 is discarded. A re-run slowed alike settles
 * it: the variant is discarded, not re-run again. */
Test(strategy, a_slowed_variant_behind_the_best_is_rerun_not_discarded) {
    for (int k = 0; k < 2; k++) {
        log_t l = {0};
        spec_t base, v2;
        strategy_t *s = with_best_of(&l, 2.5, &base, STRATEGY_TPE);
        spec_copy(&v2, &base);
        v2.model.n_embd = 192;
        cr_assert_eq(spec_validate(&v2, NULL, 0), 0);
        cJSON *ev = finished(2, "succeeded", spec_json(&v2), 2.55, 0);
        cJSON_AddNumberToObject(
            cJSON_GetObjectItem(cJSON_GetObjectItem(ev, "experiment"), "result"),
            "slowdown_cost_bpb", k == 0 ? 0.2 : 0.02);
        cJSON *reply = decide(s, ev);
        const cJSON *sp;
        int reruns = 0;
        cJSON_ArrayForEach(sp, reply) reruns +=
            tu_jnum(cJSON_GetObjectItem(sp, "model"), "n_embd") == 192;
        if (k == 0) {
            cr_expect(logged(&l, "not discarding #2: it is 0.0500 behind best 2.5000 (#1), within "
                                 "the 0.2000 val_bpb"),
                      "%s", l.text);
            cr_expect_eq(reruns, 1, "the slowed variant is not re-run: %s", l.text);
            cJSON *again = NULL;
            cJSON_ArrayForEach(sp, reply) if (tu_jnum(cJSON_GetObjectItem(sp, "model"), "n_embd") ==
                                              192) again = cJSON_Duplicate(sp, 1);
            cr_assert(again);
            ev = finished(3, "succeeded", again, 2.55, 0);
            cJSON_AddNumberToObject(
                cJSON_GetObjectItem(cJSON_GetObjectItem(ev, "experiment"), "result"),
                "slowdown_cost_bpb", 0.2);
            cJSON *second = decide(s, ev);
            int more = 0;
            cJSON_ArrayForEach(sp, second) more +=
                tu_jnum(cJSON_GetObjectItem(sp, "model"), "n_embd") == 192;
            cr_expect_eq(more, 0, "re-run again after a re-run slowed alike: %s", l.text);
            cr_expect(logged(&l, "discarding #3: val_bpb 2.5500 (mean 2.5500 over 2)"), "%s",
                      l.text);
            cJSON_Delete(second);
        } else {
            cr_expect(logged(&l, "discarding #2"), "%s", l.text);
            cr_expect(!logged(&l, "not discarding"), "%s", l.text);
            cr_expect_eq(reruns, 0);
        }
        cJSON_Delete(reply);
        spec_free(&v2);
        spec_free(&base);
        strategy_free(s);
        free(l.text);
    }
}

/* The slowdown costs survive a restart: a best whose run was slowed by 0.2
 * val_bpb, saved and loaded into a new strategy, still explains a variant's
 * 0.1 gain (without the cost in the state the new process would adopt it). */
Test(strategy, a_restarted_agent_remembers_a_slowed_best) {
    log_t l = {0};
    spec_t base, v2;
    char err[256];
    strategy_t *s = new_strategy(&l, 0);
    spec_t p;
    only_proposal(decide(s, queue_empty()), &p); /* the baseline */
    spec_free(&p);
    load_example("baseline.json", &base);
    cJSON *ev = finished(1, "succeeded", spec_json(&base), 2.5, 0);
    cJSON_AddNumberToObject(cJSON_GetObjectItem(cJSON_GetObjectItem(ev, "experiment"), "result"),
                            "slowdown_cost_bpb", 0.2);
    cJSON_Delete(decide(s, ev));
    cJSON *st = strategy_state_json(s);
    strategy_free(s);
    s = new_strategy(&l, 0);
    cr_assert_eq(strategy_load_json(s, st, err, sizeof err), 0, "%s", err);
    cJSON_Delete(st);
    spec_copy(&v2, &base);
    v2.model.n_embd = 192;
    cr_assert_eq(spec_validate(&v2, NULL, 0), 0);
    cJSON_Delete(decide(s, finished(2, "succeeded", spec_json(&v2), 2.4, 0)));
    int64_t id;
    double bv;
    cr_assert(strategy_best(s, &id, &bv, NULL));
    cr_expect_eq(id, 1, "the restarted agent adopted on a gain the best's slowdown explains");
    cr_expect(logged(&l, "not adopting #2: its gain 0.1000 over best 2.5000 (#1) is within the "
                         "0.2000 val_bpb"),
              "%s", l.text);
    spec_free(&v2);
    spec_free(&base);
    strategy_free(s);
    free(l.text);
}

/* The whole flow with measured noise: three seeds of the baseline, a variant
 * re-run until its mean is past two standard errors, the numbers logged. */
Test(strategy, measures_the_baseline_noise_then_adopts_past_two_standard_errors) {
    log_t l = {0};
    strategy_opts_t o;
    spec_t base, p, v2;
    char err[256];
    strategy_opts_default(&o);
    o.space = space();
    o.seed = 7;
    o.log = log_cb;
    o.log_user = &l;
    load_example("baseline.json", &base);
    strategy_t *s = strategy_new(&base, &o, err, sizeof err);
    cr_assert_not_null(s, "%s", err);

    cJSON *r = decide(s, queue_empty());
    cr_assert_eq(cJSON_GetArraySize(r), 3, "the baseline with three seeds");
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(r, i), "seed")->valuedouble,
                     base.seed + i);
        cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetArrayItem(r, i), "prune")),
                  "the noise runs are never pruned");
    }
    cJSON_Delete(r);
    const double seeds[] = {2.50, 2.52, 2.48};
    for (int i = 0; i < 3; i++) {
        spec_t b;
        spec_copy(&b, &base);
        b.seed = base.seed + i;
        r = decide(s, finished(1 + i, "succeeded", spec_json(&b), seeds[i], 5));
        cr_expect_eq(cJSON_GetArraySize(r), 0, "the queue is full: nothing new");
        cJSON_Delete(r);
        spec_free(&b);
    }
    int64_t id;
    double v;
    int df;
    cr_assert(strategy_best(s, &id, &v, NULL));
    cr_expect_eq(id, 1);
    cr_expect(fabs(v - 2.50) < 1e-12, "best mean %g", v);
    cr_expect(fabs(strategy_noise(s, &df) - 0.02) < 1e-12);
    cr_expect_eq(df, 2);
    cr_expect(logged(&l, "#3 is seed 44 of the best #1: val_bpb 2.4800, best mean now 2.5000 over "
                         "3 seeds; measured noise: sd 0.0200 over 2 df"));

    /* 0.03 better over one seed: 2 SE is 0.0462, so re-run. */
    spec_copy(&v2, &base);
    v2.model.mlp = MLP_GELU;
    cr_assert_eq(spec_validate(&v2, NULL, 0), 0);
    only_proposal(decide(s, finished(4, "succeeded", spec_json(&v2), 2.47, 5)), &p);
    cr_expect(has_tag(&p, "rerun"));
    cr_expect(logged(&l, "gain 0.0300 is within 2 SE 0.0462 (pooled sd 0.0200 over 2 df; SE = "
                         "sd * sqrt(1/3 + 1/1))"));
    /* its re-run gives 2.45: mean 2.46 over two seeds, pooled sd
     * sqrt((0.0008 + 0.0002) / 3) = 0.018257, 2 SE = 0.0333 < 0.04: adopted */
    r = decide(s, finished(5, "succeeded", spec_json(&p), 2.45, 5));
    cJSON_Delete(r);
    cr_assert(strategy_best(s, &id, &v, NULL));
    cr_expect_eq(id, 4);
    cr_expect(fabs(v - 2.46) < 1e-12, "best mean %g", v);
    cr_expect(logged(&l, "keeping #4: mean val_bpb 2.4600 over 2 seeds beats best 2.5000 over 3 "
                         "(#1) by 0.0400 > 2 SE 0.0333 (pooled sd 0.0183 over 3 df; SE = sd * "
                         "sqrt(1/3 + 1/2))"));
    int n;
    double mean;
    cr_assert(strategy_config(s, &v2, &n, &mean));
    cr_expect_eq(n, 2);

    /* Queue keeping: with two experiments running and nothing queued, two
     * proposals; with two queued, none. */
    r = decide(s, cJSON_Parse("{\"type\":\"queue.empty\",\"queue_depth\":0,\"running\":2}"));
    cr_expect_eq(cJSON_GetArraySize(r), 2);
    cJSON_Delete(r);
    r = decide(s, cJSON_Parse("{\"type\":\"queue.empty\",\"queue_depth\":2,\"running\":2}"));
    cr_expect_eq(cJSON_GetArraySize(r), 0);
    cJSON_Delete(r);

    /* Another dataset never ranks. */
    spec_t other;
    spec_copy(&other, &base);
    snprintf(other.dataset, sizeof other.dataset, "elsewhere");
    r = decide(s, finished(9, "succeeded", spec_json(&other), 1.0, 5));
    cJSON_Delete(r);
    cr_assert(strategy_best(s, &id, NULL, NULL));
    cr_expect_eq(id, 4);
    cr_expect(logged(&l, "not ranking #9: it ran on dataset elsewhere, budget time:"));
    spec_free(&other);
    spec_free(&p);
    spec_free(&v2);
    spec_free(&base);
    strategy_free(s);
    free(l.text);
}

Test(strategy, rejected_specs_are_not_proposed_again) {
    log_t l = {0};
    spec_t base, x, p;
    strategy_t *s = with_best(&l, 2.5, &base);
    /* A variant the strategy might well draw: ve_layers all. */
    spec_copy(&x, &base);
    snprintf(x.model.ve_layers, sizeof x.model.ve_layers, "all");
    cr_assert_eq(spec_validate(&x, NULL, 0), 0);
    cr_expect(!strategy_has_seen(s, &x));
    cJSON *ev = cJSON_CreateObject(), *rej = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", "experiment.rejected");
    cJSON_AddItemToObject(rej, "proposal", spec_json(&x));
    cJSON_AddStringToObject(rej, "error", "dataset: no dataset named 'default'");
    cJSON_AddItemToObject(ev, "rejected", rej);
    cJSON_AddNumberToObject(ev, "queue_depth", 0);
    only_proposal(decide(s, ev), &p);
    cr_expect(strategy_has_seen(s, &x));
    cr_expect(logged(&l, "the daemon rejected a proposal: dataset: no dataset named 'default'"));
    char *xid = identity(&x);
    char *pid = identity(&p);
    cr_expect_str_neq(xid, pid);
    free(pid);
    spec_free(&p);
    /* A proposal refused for the moment (rate limit, the daemon's own
     * failure) may be proposed again; one refused without a code may not. */
    static const char *const for_now[] = {"rate_limited", "internal"};
    for (size_t i = 0; i < 2; i++) {
        spec_t y;
        only_proposal(decide(s, queue_empty()), &y);
        cr_expect(strategy_has_seen(s, &y), "a proposal is recorded as seen");
        cJSON *ev2 = cJSON_CreateObject(), *rej2 = cJSON_AddObjectToObject(ev2, "rejected");
        cJSON_AddStringToObject(ev2, "type", "experiment.rejected");
        cJSON_AddItemToObject(rej2, "proposal", spec_json(&y));
        cJSON_AddStringToObject(rej2, "code", for_now[i]);
        cJSON_AddStringToObject(rej2, "error", "later");
        cJSON *r = decide(s, ev2);
        char *yid = identity(&y);
        bool again = false; /* it may even be the next proposal */
        for (cJSON *it = r->child; it; it = it->next) {
            spec_t z;
            char *text = cJSON_PrintUnformatted(it), *zid;
            cr_assert_eq(spec_parse(text, strlen(text), &z, NULL, 0), 0);
            again |= !strcmp(zid = identity(&z), yid);
            free(zid), free(text), spec_free(&z);
        }
        cr_expect(again || !strategy_has_seen(s, &y), "a proposal refused as %s may come back",
                  for_now[i]);
        cJSON_Delete(r);
        free(yid);
        spec_free(&y);
    }
    /* Many proposals later it has still not come back. */
    for (int i = 0; i < 150; i++) {
        only_proposal(decide(s, queue_empty()), &p);
        pid = identity(&p);
        cr_expect_str_neq(xid, pid, "proposal %d repeats the rejected spec", i);
        free(pid);
        spec_free(&p);
    }
    free(xid);

    /* Five rejections in a row pause the proposals until a run finishes. */
    only_proposal(decide(s, finished(8, "succeeded", spec_json(&base), 2.6, 0)), &p);
    spec_free(&p);
    for (int i = 0; i < 5; i++) {
        ev = cJSON_CreateObject();
        cJSON_AddStringToObject(ev, "type", "experiment.rejected");
        rej = cJSON_AddObjectToObject(ev, "rejected");
        cJSON_AddStringToObject(rej, "error", "not JSON");
        cJSON *r = decide(s, ev);
        cr_expect_eq(cJSON_GetArraySize(r), i < 4 ? 1 : 0, "rejection %d", i);
        cJSON_Delete(r);
    }
    cr_expect(logged(&l, "5 proposals in a row were rejected"));
    only_proposal(decide(s, finished(9, "succeeded", spec_json(&base), 2.6, 0)), &p);
    spec_free(&p);
    spec_free(&x);
    spec_free(&base);
    strategy_free(s);
    free(l.text);
}

/* Whether path is the axis' path, one of its "also" paths, or the derived
 * micro-batch (train.batch_size). */
static int axis_may_move(const space_axis_t *ax, const char *path) {
    if (!strcmp(path, ax->path) || !strcmp(path, "train.batch_size")) return 1;
    for (int i = 0; i < ax->n_also; i++)
        if (!strcmp(path, ax->also[i])) return 1;
    return 0;
}

/* Every leaf of a (a spec's canonical tree) equals b's, except those ax may
 * move; prefix is the path so far. */
static void same_but_axis(const cJSON *a, const cJSON *b, const char *prefix,
                          const space_axis_t *ax) {
    for (const cJSON *x = a->child; x; x = x->next) {
        char path[128];
        snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", x->string);
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
        cr_assert_not_null(y, "%s is gone", path);
        if (cJSON_IsObject(x))
            same_but_axis(x, y, path, ax);
        else if (!axis_may_move(ax, path))
            cr_assert(cJSON_Compare(x, y, 1), "moving %s changed %s", ax->path, path);
    }
}

static cJSON *canonical_tree(const spec_t *sp) {
    char *text = spec_canonical_json(sp);
    cJSON *t = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(t);
    return t;
}

/* The invariants of a valid variant: it parses, it is another spec, and only
 * the axis (with its "also" paths and the derived micro-batch) moved, to a
 * value of the space. */
static void check_variant(const spec_t *parent, const spec_t *v, int a) {
    const space_t *sp = space();
    const space_axis_t *ax = &sp->axes[a];
    char err[SPEC_ERR_LEN];
    spec_t copy;
    char *text = spec_canonical_json(v);
    cr_assert_eq(spec_parse(text, strlen(text), &copy, err, sizeof err), 0, "axis %s: %s: %s",
                 ax->path, text, err);
    spec_free(&copy);
    free(text);
    cr_assert_eq(v->train.total_batch_tokens % (v->train.batch_size * v->model.seq_len), 0);
    cr_assert_eq(
        v->train.batch_size,
        space_micro_batch(parent->train.batch_size, v->train.total_batch_tokens, v->model.seq_len),
        "the micro-batch is derived from the parent's");
    char *a_id = identity(parent), *b_id = identity(v);
    cr_assert_str_neq(a_id, b_id, "axis %s changed nothing", ax->path);
    free(a_id);
    free(b_id);
    cJSON *pt = canonical_tree(parent), *vt = canonical_tree(v);
    same_but_axis(pt, vt, "", ax);
    cJSON_Delete(pt);
    cJSON_Delete(vt);
    space_point_t x;
    cr_assert_eq(space_read(sp, v, &x), 0);
    if (ax->n_values)
        cr_assert(x.v[a] >= 0 && x.v[a] < ax->n_values, "axis %s: not a listed value", ax->path);
    else
        cr_assert(x.v[a] >= ax->low && x.v[a] <= ax->high, "axis %s: %g outside %g..%g", ax->path,
                  x.v[a], ax->low, ax->high);
    cr_assert_eq(v->seed, parent->seed);
}

Test(strategy, every_axis_gives_valid_variants) {
    const char *examples[] = {"baseline.json", "gqa_swiglu.json", "deep_narrow.json",
                              "learned_pos_tied.json"};
    const space_t *sp = space();
    rng_t rng;
    rng_seed(&rng, 12345);
    int moved[SPACE_MAX_AXES] = {0};
    for (size_t e = 0; e < sizeof examples / sizeof examples[0]; e++) {
        spec_t parent;
        load_example(examples[e], &parent);
        /* Each example, and a chain of random variants of it: many shapes of best. */
        for (int step = 0; step < 30; step++) {
            for (int a = 0; a < sp->n_axes; a++) {
                spec_t v;
                strategy_change_t ch;
                cr_assert_eq(spec_copy(&v, &parent), 0);
                if (strategy_mutate(sp, &v, a, &rng, &ch) == 0) {
                    check_variant(&parent, &v, a);
                    cr_assert(ch.desc[0] && ch.label[0]);
                    cr_assert(strstr(ch.label, sp->axes[a].name) == ch.label, "%s", ch.label);
                    moved[a]++;
                } else {
                    char *x = identity(&parent), *y = identity(&v);
                    cr_assert_str_eq(x, y, "a failed mutation changed the spec");
                    free(x);
                    free(y);
                }
                spec_free(&v);
            }
            /* Walk on: the parent becomes a random variant of itself. */
            strategy_change_t ch;
            strategy_mutate(sp, &parent, (int)rng_below(&rng, (uint64_t)sp->n_axes), &rng, &ch);
        }
        spec_free(&parent);
    }
    for (int a = 0; a < sp->n_axes; a++)
        cr_expect_gt(moved[a], 40, "axis %s moved only %d times", sp->axes[a].path, moved[a]);
}

/* Long runs: every proposal validates and no spec is ever proposed twice,
 * while results move the best around. */
Test(strategy, two_thousand_proposals_never_repeat) {
    log_t l = {0};
    spec_t base;
    strategy_t *s = with_best(&l, 3.0, &base);
    spec_free(&base);
    rng_t rng;
    rng_seed(&rng, 99);
    size_t n = 0, cap = 2100;
    char **ids = calloc(cap, sizeof *ids);
    cr_assert(ids);
    double best = 3.0;
    int64_t next_id = 2;
    for (int i = 0; i < 2000; i++) {
        spec_t p;
        only_proposal(decide(s, queue_empty()), &p);
        char *id = identity(&p);
        for (size_t k = 0; k < n; k++) cr_assert_str_neq(ids[k], id, "proposal %d repeats", i);
        ids[n++] = id;
        /* Every tenth proposal "ran" and sometimes improved on the best. */
        if (i % 10 == 0) {
            double v = best + 0.02 * (rng_uniform(&rng) - 0.7);
            if (v < best - 0.005) best = v;
            cJSON *r = decide(s, finished(next_id++, "succeeded", spec_json(&p), v, 1));
            cJSON_Delete(r);
        }
        spec_free(&p);
    }
    int64_t id;
    cr_assert(strategy_best(s, &id, NULL, NULL));
    cr_expect_gt(id, 1, "the best never moved");
    for (size_t k = 0; k < n; k++) free(ids[k]);
    free(ids);
    strategy_free(s);
    free(l.text);
}

Test(strategy, starts_from_the_daemons_best_and_skips_what_it_saw) {
    log_t l = {0};
    strategy_t *s = new_strategy(&l, 0);
    spec_t base, p, r;
    load_example("baseline.json", &base);
    spec_copy(&r, &base);
    r.model.depth = 6;
    cr_assert_eq(spec_validate(&r, NULL, 0), 0);
    cJSON *ev = queue_empty();
    cJSON *best = cJSON_CreateObject();
    cJSON_AddNumberToObject(best, "id", 7);
    cJSON_AddNumberToObject(best, "val_bpb", 2.3);
    cJSON_AddItemToObject(best, "spec", spec_json(&base));
    cJSON_ReplaceItemInObject(ev, "best", best);
    cJSON *item = cJSON_CreateObject();
    cJSON_AddNumberToObject(item, "id", 8);
    cJSON_AddItemToObject(item, "spec", spec_json(&r));
    cJSON_AddItemToArray(cJSON_GetObjectItem(ev, "recent"), item);
    only_proposal(decide(s, ev), &p);
    cr_expect_eq(p.parent, 7, "the proposal does not vary the daemon's best");
    cr_expect(strategy_has_seen(s, &base));
    cr_expect(strategy_has_seen(s, &r));
    cr_expect(logged(&l, "starting from the daemon's best #7 (val_bpb 2.3000)"));
    spec_free(&p);
    spec_free(&r);
    spec_free(&base);
    strategy_free(s);
    free(l.text);
}

Test(strategy, max_proposals) {
    log_t l = {0};
    strategy_t *s = new_strategy(&l, 3);
    for (int i = 0; i < 5; i++) {
        cJSON *r = decide(s, queue_empty());
        cr_expect_eq(cJSON_GetArraySize(r), i < 3 ? 1 : 0, "event %d", i);
        cJSON_Delete(r);
    }
    cr_expect(logged(&l, "reached --max-proposals 3"));
    strategy_free(s);
    free(l.text);
}

Test(strategy, not_an_event) {
    log_t l = {0};
    strategy_t *s = new_strategy(&l, 0);
    cJSON *ev = cJSON_Parse("{\"hello\":1}"), *reply = (cJSON *)1;
    char err[256];
    cr_expect_eq(strategy_decide(s, ev, &reply, err, sizeof err), -1);
    cr_expect_null(reply);
    cJSON_Delete(ev);
    cJSON *r = decide(s, cJSON_Parse("{\"type\":\"something.else\"}"));
    cr_expect_eq(cJSON_GetArraySize(r), 0);
    cJSON_Delete(r);
    strategy_free(s);
    free(l.text);
}

Test(strategy, state_round_trip) {
    log_t l = {0}, l2 = {0};
    spec_t base, p, v2;
    char err[512];
    strategy_t *s = with_best(&l, 2.5, &base);
    /* A pending near tie, some seen specs, judged ids and a moved RNG. */
    spec_copy(&v2, &base);
    v2.model.n_embd = 96;
    cr_assert_eq(spec_validate(&v2, NULL, 0), 0);
    only_proposal(decide(s, finished(2, "succeeded", spec_json(&v2), 2.498, 0)), &p);
    spec_free(&p);
    for (int i = 0; i < 5; i++) {
        only_proposal(decide(s, queue_empty()), &p);
        spec_free(&p);
    }
    char *dir = tu_tmpdir();
    char *path = tu_path("%s/agent-state.json", dir);
    cr_assert_eq(strategy_save(s, path, err, sizeof err), 0, "%s", err);

    strategy_t *t = new_strategy(&l2, 0);
    cr_assert_eq(strategy_load(t, path, err, sizeof err), 0, "%s", err);
    cJSON *a = strategy_state_json(s), *b = strategy_state_json(t);
    char *ta = cJSON_PrintUnformatted(a), *tb = cJSON_PrintUnformatted(b);
    cr_expect_str_eq(ta, tb, "the loaded state differs from the saved one");
    free(ta);
    free(tb);
    cJSON_Delete(a);
    cJSON_Delete(b);
    cr_expect_eq(strategy_n_pending(t), 1);
    cr_expect_eq(strategy_n_proposals(t), strategy_n_proposals(s));

    /* Both continue identically: same RNG, same best, same seen set. */
    for (int i = 0; i < 5; i++) {
        spec_t x, y;
        only_proposal(decide(s, queue_empty()), &x);
        only_proposal(decide(t, queue_empty()), &y);
        char *ix = identity(&x), *iy = identity(&y);
        cr_expect_str_eq(ix, iy, "proposal %d differs after the reload", i);
        cr_expect_str_eq(x.name, y.name);
        free(ix);
        free(iy);
        spec_free(&x);
        spec_free(&y);
    }

    /* A missing file is "no state yet"; a corrupt one is an error and changes nothing. */
    char *missing = tu_path("%s/none.json", dir);
    cr_expect_eq(strategy_load(t, missing, err, sizeof err), 1);
    tu_write(path, "{\"version\":1,\"rng\":[\"1\",\"2\",\"3\"]}");
    int before = strategy_n_proposals(t);
    cr_expect_eq(strategy_load(t, path, err, sizeof err), -1);
    cr_expect(strstr(err, "rng"), "%s", err);
    cr_expect_eq(strategy_n_proposals(t), before);
    tu_write(path, "not json");
    cr_expect_eq(strategy_load(t, path, err, sizeof err), -1);

    free(missing);
    tu_rmrf(dir);
    free(dir);
    free(path);
    spec_free(&v2);
    spec_free(&base);
    strategy_free(s);
    strategy_free(t);
    free(l.text);
    free(l2.text);
}

Test(strategy, identity_ignores_labels_and_spellings) {
    spec_t a, b;
    const char *x = "{\"name\":\"a\",\"tags\":[\"t\"],\"parent\":3,\"priority\":5}";
    const char *y = "{\"model\":{\"ve_layers\":[1,3],\"window_pattern\":\"SSSS\"}}";
    char err[SPEC_ERR_LEN], ha[STRATEGY_IDENT_LEN], hb[STRATEGY_IDENT_LEN];
    cr_assert_eq(spec_parse(x, strlen(x), &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(spec_parse(y, strlen(y), &b, err, sizeof err), 0, "%s", err);
    cr_assert_eq(strategy_identity(&a, ha), 0);
    cr_assert_eq(strategy_identity(&b, hb), 0);
    /* At depth 4, [1,3] is "alternate" and SSSS is SSSL (the last layer is full). */
    cr_expect_str_eq(ha, hb);
    b.seed = 43;
    cr_assert_eq(strategy_identity(&b, hb), 0);
    cr_expect_str_neq(ha, hb, "the seed is part of the identity");
    spec_free(&a);
    spec_free(&b);
}

/* The agent's identity of varied specs, recorded once as literals: the agent
 * saves identities in its state and skips what it has seen, so a change here
 * would make it propose again what it already ran. Fix the code, never these.
 * (Recorded again when the agent's identity became the daemon's
 * configuration and the seed, state version 3.) */
static const struct {
    const char *spec, *identity;
} identity_golden[] = {
    {"{}", "5e38df4da4a532b17cbe01935530fd50e5fa952a274cceb3290943f38724efa7:42"},
    {"{\"model\":{\"vocab_size\":50257,\"depth\":6,\"n_embd\":384,"
     "\"n_head\":6,\"n_kv_head\":2,\"mlp_ratio\":2.6666666666666665,"
     "\"mlp\":\"geglu\",\"seq_len\":128,\"pos\":\"learned\","
     "\"max_pos\":512,\"tie_embeddings\":true,\"embed_dropout\":0.1,"
     "\"softcap\":0,\"window_pattern\":\"ssl\",\"ve_layers\":[5,"
     "0,3],\"ve_gate_channels\":384},\"train\":{\"batch_size\":4,"
     "\"total_batch_tokens\":1024}}",
     "aaa83b444d6ada96fffeecc425dfc1ad5e2fbe0522a4412bea9ba4218d463e2e:42"},
    {"{\"seed\":9007199254740991,\"time_budget_s\":604800,"
     "\"model\":{\"ve_layers\":[]}}",
     "8dcd6d3c25a4765b59587e0531e405e7348db670ae409e4e4b6fc3ccbccd7d1d:9007199254740991"},
    {"{\"token_budget\":5e3,\"time_budget_s\":0.0,\"prune\":false,"
     "\"model\":{\"n_head\":8,\"window_pattern\":\"sLl\","
     "\"embed_dropout\":-0.0,\"mlp_ratio\":40e-1}}",
     "3728bf1fd7d4c00ffcf6aa1eff922dab81c05431fd7706c8d7553919576caea9:42"},
    {"{\"model\":{\"depth\":6,\"ve_layers\":[5,1,3]}}",
     "070a5d1348e14e62865fada11e9d5aa60ca3c3bb1361d6d7870baf4b1bc168ae:42"},
    {"{\"model\":{\"depth\":6,\"ve_layers\":[4,0]}}",
     "7ea8ec082da4c44fe6f539b2447f55c7853a7ff03b0e364bc6092e045deabb06:42"},
    {"{\"model\":{\"seq_len\":2048,\"max_pos\":1024},\"train\":{\"total_batch_tokens\":32768}}",
     "07f8ceb7a77d23e4b3c91789bd71a8693410010b3178ef0b0d28506755b40f4b:42"},
    {"{\"name\":\"h\\u00e9llo \\u2603 \\ud83d\\ude00\","
     "\"tags\":[\"x\",\"y\",\"z\"],\"model\":{\"depth\":64,"
     "\"n_embd\":64,\"n_head\":1,\"n_kv_head\":1,\"ve_layers\":\"first_half\","
     "\"window_pattern\":\"SSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSL\"}}",
     "3393fe3b210e674488504d67d130327a3b5efc62476eee5ecc20882f6dd71bc1:42"},
    {"{\"name\":\"deep-narrow\",\"tags\":[\"depth\"],\"model\":{\"depth\":8,"
     "\"n_embd\":128,\"n_head\":2,\"mlp\":\"geglu\",\"window_pattern\":\"SL\","
     "\"ve_layers\":[1,3,5,7]},\"train\":{\"batch_size\":8,"
     "\"total_batch_tokens\":8192,\"warmup_ratio\":0.05}}",
     "109ed765cf80b2846f491221c79bbd71bcfb3fac2b2ce3bae052d5d87c44983a:42"},
    {"{\"name\":\"learned-pos-tied\",\"tags\":[\"positions\","
     "\"tied\"],\"model\":{\"pos\":\"learned\",\"max_pos\":512,"
     "\"tie_embeddings\":true,\"ve_layers\":\"none\",\"embed_dropout\":0.1},"
     "\"train\":{\"embedding_lr\":0.3}}",
     "318c08f11c00663edb3268ebec5da9939d42e5fd8dcd5302e9b44e5a2203eccd:42"},
    {"{\"name\":\"wide-shallow\",\"tags\":[\"width\",\"depth\"],"
     "\"model\":{\"depth\":2,\"n_embd\":256,\"n_head\":4,"
     "\"n_kv_head\":4,\"window_pattern\":\"L\",\"ve_layers\":\"all\"}}",
     "fa193e63eee9d6d670f758836a9ca7a79bf6d9ff74ff7376de9e0f4e6bb3c3e8:42"},
    {"{\"model\":{\"vocab_size\":64,\"depth\":3,\"n_embd\":16,"
     "\"n_head\":2,\"n_kv_head\":1,\"mlp_ratio\":2.5,\"mlp\":\"geglu\","
     "\"seq_len\":24,\"pos\":\"rope\",\"window_pattern\":\"S\","
     "\"ve_layers\":[0,2],\"ve_gate_channels\":12,\"softcap\":0},"
     "\"train\":{\"batch_size\":2,\"total_batch_tokens\":48}}",
     "ecf17c9421521ad717e71871bcea73f3869967f04bb3bb76e234e8037f6ca58a:42"},
    {"{\"model\":{\"vocab_size\":72,\"depth\":3,\"n_embd\":24,"
     "\"n_head\":4,\"n_kv_head\":1,\"mlp_ratio\":1,\"mlp\":\"swiglu\","
     "\"seq_len\":20,\"pos\":\"rope\",\"window_pattern\":\"SL\","
     "\"ve_layers\":\"first_half\",\"ve_gate_channels\":8,"
     "\"softcap\":30},\"train\":{\"batch_size\":2,\"total_batch_tokens\":40}}",
     "e4a969e24f3924efe493f4f945ff5930943619507b9508d8cee6934234367f43:42"},
};

Test(strategy, identity_golden) {
    for (size_t i = 0; i < sizeof identity_golden / sizeof identity_golden[0]; i++) {
        spec_t s;
        char err[SPEC_ERR_LEN], hex[STRATEGY_IDENT_LEN];
        const char *text = identity_golden[i].spec;
        cr_assert_eq(spec_parse(text, strlen(text), &s, err, sizeof err), 0, "%s: %s", text, err);
        cr_assert_eq(strategy_identity(&s, hex), 0);
        cr_expect_str_eq(hex, identity_golden[i].identity, "identity of %s", text);
        spec_free(&s);
    }
}

/* Specs that train one model but are stored as two canonical specs (the
 * canonical form keeps these fields as written): the agent's identity, the
 * configuration's (spec_config_hash) with the seed, is one for each pair. */
Test(strategy, identity_merges_spellings_the_canonical_form_keeps) {
    static const char *const pairs[][2] = {
        {"{\"model\":{\"depth\":8,\"window_pattern\":\"SL\"},"
         "\"train\":{\"batch_size\":8,\"total_batch_tokens\":8192}}",
         "{\"model\":{\"depth\":8,\"window_pattern\":\"SLSLSLSL\"},"
         "\"train\":{\"batch_size\":8,\"total_batch_tokens\":8192}}"},
        {"{\"model\":{\"depth\":1,\"ve_layers\":\"first_half\"}}",
         "{\"model\":{\"depth\":1,\"ve_layers\":\"none\"}}"},
        {"{\"model\":{\"seq_len\":128,\"max_pos\":1024},\"train\":{\"batch_size\":32}}",
         "{\"model\":{\"seq_len\":128},\"train\":{\"batch_size\":32}}"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        spec_t a, b;
        char err[SPEC_ERR_LEN], sa[SPEC_HASH_HEX], sb[SPEC_HASH_HEX], ia[STRATEGY_IDENT_LEN],
            ib[STRATEGY_IDENT_LEN];
        cr_assert_eq(spec_parse(pairs[i][0], strlen(pairs[i][0]), &a, err, sizeof err), 0, "%s",
                     err);
        cr_assert_eq(spec_parse(pairs[i][1], strlen(pairs[i][1]), &b, err, sizeof err), 0, "%s",
                     err);
        cr_assert(spec_hash(&a, sa) == 0 && spec_hash(&b, sb) == 0);
        cr_assert(strategy_identity(&a, ia) == 0 && strategy_identity(&b, ib) == 0);
        cr_expect_str_neq(sa, sb, "%s", pairs[i][0]);
        cr_expect_str_eq(ia, ib, "%s", pairs[i][0]);
        spec_free(&a);
        spec_free(&b);
    }
}

/* ------------------------------------------------------------- the space */

/* A space file's text with one axis (the JSON of an axis object). */
static space_t *space_of(const char *axes, char *err, size_t errlen) {
    char *text = tu_path("{\"axes\":[%s]}", axes);
    space_t *sp = space_parse(text, strlen(text), "test.json", err, errlen);
    free(text);
    return sp;
}

/* Every refusal names the file, the axis and what is wrong with it. */
Test(strategy, space_load_errors_say_what_and_where) {
    static const struct {
        const char *axes, *want;
    } cases[] = {
        {"{\"path\":\"model.dept\",\"type\":\"int\",\"low\":1,\"high\":4}",
         "test.json: axes[0]: model.dept is not a field of a spec"},
        {"{\"path\":\"model\",\"type\":\"int\",\"low\":1,\"high\":4}",
         "axes[0]: model is not a field of a spec"},
        {"{\"path\":\"seed\",\"type\":\"int\",\"low\":1,\"high\":4}",
         "axes[0]: seed labels the run or sets its scope"},
        {"{\"path\":\"time_budget_s\",\"type\":\"float\",\"low\":1,\"high\":4}",
         "time_budget_s labels the run or sets its scope"},
        {"{\"path\":\"model.depth\",\"type\":\"int\",\"low\":4,\"high\":4}",
         "axes[0]: low 4 is not below high 4"},
        {"{\"path\":\"model.depth\",\"type\":\"int\",\"low\":8,\"high\":2}",
         "axes[0]: low 8 is not below high 2"},
        {"{\"path\":\"model.depth\",\"type\":\"int\",\"low\":1.5,\"high\":4}",
         "an int range has integer bounds"},
        {"{\"path\":\"train.matrix_lr\",\"type\":\"float\",\"low\":0,\"high\":0.1,\"log\":true}",
         "a log range needs low > 0"},
        {"{\"path\":\"train.matrix_lr\",\"type\":\"float\",\"low\":0.01}",
         "expected \"values\", or numbers \"low\" and \"high\""},
        {"{\"path\":\"model.depth\",\"type\":\"integer\",\"low\":1,\"high\":4}",
         "axes[0].type: expected \"int\", \"float\" or \"choice\""},
        {"{\"path\":\"model.depth\",\"type\":\"int\",\"low\":1,\"hgih\":4}",
         "axes[0]: unknown key \"hgih\""},
        {"{\"path\":\"model.n_embd\",\"type\":\"int\",\"values\":[64,96.5]}",
         "axes[0].values[1]: expected an integer"},
        {"{\"path\":\"model.n_embd\",\"type\":\"int\",\"values\":[64,64]}",
         "axes[0].values[1]: repeats values[0]"},
        {"{\"path\":\"model.n_embd\",\"type\":\"int\",\"values\":[]}",
         "axes[0].values: expected an array of 1 to 64 values"},
        {"{\"path\":\"model.mlp\",\"type\":\"choice\",\"values\":[\"gelu\",\"bogus\"]}",
         "axes[0].values[1]: the spec refuses it (model.mlp: "},
        {"{\"path\":\"model.mlp\",\"type\":\"choice\",\"low\":1,\"high\":2}",
         "a choice lists its \"values\""},
        {"{\"path\":\"model.depth\",\"type\":\"int\",\"values\":[2,3],\"low\":1,\"high\":4}",
         "either \"values\" or \"low\"/\"high\", not both"},
        {"{\"path\":\"model.n_head\",\"type\":\"int\",\"values\":[1,2],\"also\":[\"model.kv\"]}",
         "axes[0].also[0]: model.kv is not a field of a spec"},
        {"{\"path\":\"model.depth\",\"type\":\"int\",\"low\":1,\"high\":4},"
         "{\"path\":\"model.depth\",\"type\":\"int\",\"low\":1,\"high\":4}",
         "axes[1]: model.depth is already axes[0]"},
        {"3", "axes[0]: expected an object"},
    };
    char err[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        space_t *sp = space_of(cases[i].axes, err, sizeof err);
        cr_expect_null(sp, "case %zu was accepted", i);
        space_free(sp);
        if (!sp) cr_expect(strstr(err, cases[i].want), "case %zu: %s", i, err);
    }
    const char *empty = "{\"axes\":[]}";
    cr_expect_null(space_parse(empty, strlen(empty), "e.json", err, sizeof err));
    cr_expect(strstr(err, "e.json: axes: expected an array of 1 to 32 axes"), "%s", err);
    cr_expect_null(space_parse("nope", 4, "n.json", err, sizeof err));
    cr_expect(strstr(err, "n.json: not a JSON object"), "%s", err);
    cr_expect_null(space_load("/nonexistent/space.json", err, sizeof err));
    cr_expect(strstr(err, "/nonexistent/space.json"), "%s", err);
    /* and the night's own file loads */
    cr_expect_geq(space()->n_axes, 10);
}

/* A startup design of n draws covers every axis evenly: a range's n strata
 * of equal probability (on its log scale for a log range) each hold exactly
 * one draw, a list's value gets every stratum inside it and at most those
 * it overlaps, a conditional axis is left out where it is inactive, the same
 * seed gives the same design, and another seed another. */
Test(strategy, a_startup_design_takes_every_stratum_once) {
    const space_t *sp = space();
    enum { N = 5 };
    rng_t rng;
    rng_seed(&rng, 11);
    space_point_t x[N], again;
    for (int d = 0; d < N; d++) space_sample_stratified(sp, &rng, 42, d, N, &x[d]);
    for (int a = 0; a < sp->n_axes; a++) {
        const space_axis_t *ax = &sp->axes[a];
        int count[SPACE_MAX_VALUES > N ? SPACE_MAX_VALUES : N] = {0};
        /* A conditional axis takes its strata only where it is active. */
        bool conditional = ax->when.kind != SPACE_WHEN_ALWAYS;
        for (int d = 0; d < N; d++) {
            if (!space_active(sp, &x[d], a)) {
                cr_assert(conditional, "%s is inactive with no condition", ax->path);
                cr_assert(ax->n_values ? x[d].v[a] == -1 : isnan(x[d].v[a]),
                          "%s: an inactive axis is not part of the point", ax->path);
                continue;
            }
            if (ax->n_values) {
                count[(int)x[d].v[a]]++;
                continue;
            }
            cr_assert(x[d].v[a] >= ax->low && x[d].v[a] <= ax->high);
            if (ax->type == SPACE_INT) continue; /* rounding moves a stratum's edge */
            double u = space_unit(ax, x[d].v[a]);
            count[u >= 1 ? N - 1 : (int)(u * N)]++;
        }
        int k_max = conditional ? 0 : ax->n_values ? ax->n_values : ax->type == SPACE_INT ? 0 : N;
        for (int k = 0; k < k_max; k++) {
            /* a listed value k holds [k/K, (k+1)/K) of the draw's scale: it gets
             * every stratum inside it, and may get those it shares */
            int lo = 1, hi = 1;
            if (ax->n_values) {
                int K = ax->n_values;
                lo = hi = 0;
                for (int j = 0; j < N; j++) {
                    double s0 = (double)j / N, s1 = (double)(j + 1) / N;
                    lo += s0 >= (double)k / K && s1 <= (double)(k + 1) / K;
                    hi += s0 < (double)(k + 1) / K && s1 > (double)k / K;
                }
            }
            cr_expect(count[k] >= lo && count[k] <= hi, "%s: stratum/value %d has %d draws of %d",
                      ax->path, k, count[k], N);
        }
    }
    /* depth 2..8 over 5 draws: the lowest stratum gives 2 or 3, the highest 7 or 8 */
    for (int a = 0; a < sp->n_axes; a++)
        if (!strcmp(sp->axes[a].path, "model.depth")) {
            double lo = 99, hi = 0;
            for (int d = 0; d < N; d++) lo = fmin(lo, x[d].v[a]), hi = fmax(hi, x[d].v[a]);
            cr_expect(lo <= 3 && hi >= 7, "depths from %g to %g", lo, hi);
        }
    rng_seed(&rng, 11);
    int same = 1, other = 0;
    for (int d = 0; d < N; d++) {
        space_sample_stratified(sp, &rng, 42, d, N, &again);
        same &= space_point_equal(sp, &again, &x[d]);
    }
    rng_seed(&rng, 11);
    for (int d = 0; d < N; d++) {
        space_sample_stratified(sp, &rng, 43, d, N, &again);
        other |= !space_point_equal(sp, &again, &x[d]);
    }
    cr_expect(same, "the same seeds give the same design");
    cr_expect(other, "another design seed gives another design");
}

/* Uniform draws: every listed value comes up, ranges stay inside their
 * bounds, ints are whole, and a log range's median is near the geometric
 * mean of its bounds (a linear draw's would be near their mean). */
Test(strategy, random_draws_cover_the_space_and_stay_in_it) {
    const space_t *sp = space();
    rng_t rng;
    rng_seed(&rng, 3);
    enum { N = 4000 };
    int hits[SPACE_MAX_AXES][SPACE_MAX_VALUES] = {{0}}, below_geo[SPACE_MAX_AXES] = {0};
    int active[SPACE_MAX_AXES] = {0};
    for (int k = 0; k < N; k++) {
        space_point_t x;
        space_sample(sp, &rng, &x);
        for (int a = 0; a < sp->n_axes; a++) {
            const space_axis_t *ax = &sp->axes[a];
            if (!space_active(sp, &x, a)) {
                cr_assert(ax->n_values ? x.v[a] == -1 : isnan(x.v[a]));
                continue;
            }
            active[a]++;
            if (ax->n_values) {
                cr_assert(x.v[a] >= 0 && x.v[a] < ax->n_values && x.v[a] == floor(x.v[a]));
                hits[a][(int)x.v[a]]++;
                continue;
            }
            cr_assert(x.v[a] >= ax->low && x.v[a] <= ax->high, "%s: %g", ax->path, x.v[a]);
            if (ax->type == SPACE_INT) cr_assert_eq(x.v[a], floor(x.v[a]));
            if (ax->log) below_geo[a] += x.v[a] < sqrt(ax->low * ax->high);
        }
    }
    for (int a = 0; a < sp->n_axes; a++) {
        const space_axis_t *ax = &sp->axes[a];
        /* a conditional axis is drawn where it is active, here most of the time */
        cr_expect_gt(active[a], N / 2, "%s: active in %d of %d draws", ax->path, active[a], N);
        for (int k = 0; k < ax->n_values; k++) /* expected active/K, at least 400 */
            cr_expect_gt(hits[a][k], active[a] / ax->n_values / 2, "%s: value %d drawn %d times",
                         ax->path, k, hits[a][k]);
        if (ax->log)
            cr_expect(below_geo[a] > active[a] * 0.45 && below_geo[a] < active[a] * 0.55,
                      "%s: %d of %d below the geometric mean", ax->path, below_geo[a], active[a]);
    }
}

/* A space with axes the code has never heard of: the agent proposes them,
 * whatever the strategy. */
Test(strategy, an_axis_added_to_the_file_is_proposed) {
    char err[512];
    const char *axes =
        "{\"path\":\"train.unembedding_lr\",\"type\":\"float\",\"low\":0.001,"
        "\"high\":0.02,\"log\":true},"
        "{\"path\":\"model.mlp_ratio\",\"type\":\"float\",\"values\":[2,3,4,6]},"
        "{\"path\":\"model.mlp\",\"type\":\"choice\",\"values\":[\"relu2\",\"gelu\"]}";
    space_t *sp = space_of(axes, err, sizeof err);
    cr_assert_not_null(sp, "%s", err);
    static const strategy_kind kinds[] = {STRATEGY_CLIMB, STRATEGY_RANDOM, STRATEGY_TPE};
    for (size_t k = 0; k < 3; k++) {
        strategy_opts_t o;
        spec_t base;
        log_t l = {0};
        strategy_opts_default(&o);
        o.space = sp;
        o.kind = kinds[k];
        o.noise_seeds = 1;
        o.log = log_cb;
        o.log_user = &l;
        load_example("baseline.json", &base);
        strategy_t *s = strategy_new(&base, &o, err, sizeof err);
        cr_assert_not_null(s, "%s", err);
        int moved_lr = 0, ratios[4] = {0}, other = 0;
        for (int i = 0; i < 60; i++) {
            spec_t p;
            only_proposal(decide(s, queue_empty()), &p);
            moved_lr += p.train.unembedding_lr != base.train.unembedding_lr;
            for (int r = 0; r < 4; r++) ratios[r] += p.model.mlp_ratio == (double[]){2, 3, 4, 6}[r];
            cr_expect((p.train.unembedding_lr >= 0.001 && p.train.unembedding_lr <= 0.02) ||
                          p.train.unembedding_lr == base.train.unembedding_lr,
                      "unembedding_lr %g", p.train.unembedding_lr);
            /* nothing outside the space moves */
            other += p.model.depth != base.model.depth || p.model.n_embd != base.model.n_embd ||
                     p.train.matrix_lr != base.train.matrix_lr;
            /* the results: lower with a higher unembedding_lr, so the model has a slope */
            if (i % 2 == 0) {
                double v = 3.0 - 10 * p.train.unembedding_lr + 0.01 * (p.model.mlp_ratio == 3);
                cJSON_Delete(decide(s, finished(100 + i, "succeeded", spec_json(&p), v, 1)));
            }
            spec_free(&p);
        }
        const char *name = strategy_kind_name(kinds[k]);
        cr_expect_gt(moved_lr, 20, "%s: unembedding_lr moved in %d of 60", name, moved_lr);
        /* climb moves to neighbours of the best (4: 3 or 6); the others draw all */
        cr_expect_gt(ratios[1] + ratios[3], 0, "%s: mlp_ratio never moved", name);
        for (int r = 0; r < 4 && kinds[k] != STRATEGY_CLIMB; r++)
            cr_expect_gt(ratios[r], 0, "%s: mlp_ratio %d never proposed", name, r);
        cr_expect_eq(other, 0, "%s: a field outside the space moved", name);
        strategy_free(s);
        spec_free(&base);
        free(l.text);
    }
    space_free(sp);
}

/* --------------------------------------------------- a scripted objective */

/* Two known val_bpb surfaces over the scripted space, both lowest (2.0) at
 * one point: "near" at matrix_lr 0.06, swiglu, depth 5, embedding_lr 0.6 and
 * 2,048 tokens per step (the baseline, 0.04, relu2, 4, 0.6, 4,096, scores
 * 2.288); "far" at matrix_lr 0.12, geglu, depth 3, embedding_lr 1.2, 1,024
 * tokens per step and n_embd 256, several moves from the baseline (which scores 2.6), as the
 * night measured in the issue found its best. Every other axis does not
 * matter. */
static int far_objective;

static double objective(const spec_t *sp) {
    static const double near_mlp[] = {
        [MLP_RELU2] = 0.15, [MLP_GELU] = 0.10, [MLP_SWIGLU] = 0, [MLP_GEGLU] = 0.05};
    static const double far_mlp[] = {
        [MLP_RELU2] = 0.10, [MLP_GELU] = 0.10, [MLP_SWIGLU] = 0.05, [MLP_GEGLU] = 0};
    const spec_model_t *m = &sp->model;
    const spec_train_t *t = &sp->train;
    if (!far_objective) {
        double lr = log2(t->matrix_lr / 0.06), elr = log2(t->embedding_lr / 0.6);
        return 2.0 + 0.2 * lr * lr + near_mlp[m->mlp] + 0.04 * abs(m->depth - 5) +
               0.05 * elr * elr + 0.03 * fabs(log2(t->total_batch_tokens / 2048.0));
    }
    double lr = log2(t->matrix_lr / 0.12), elr = log2(t->embedding_lr / 1.2);
    return 2.0 + 0.2 * lr * lr + far_mlp[m->mlp] + 0.04 * abs(m->depth - 3) + 0.05 * elr * elr +
           0.05 * log2(t->total_batch_tokens / 1024.0) + 0.05 * log2(256.0 / m->n_embd);
}
#define OPTIMUM 2.0

static void quiet_cb(void *user, const char *line) {
    (void)user, (void)line;
}

typedef struct {
    double found;  /* the lowest true value among the runs */
    double called; /* the true value of what the strategy calls its best */
    int reruns;    /* runs that were re-runs of a configuration */
} night_t;

/* One night of runs of a strategy against the objective plus seed noise
 * (sd 0.01), one slot: every finished run is answered before the next
 * starts. */
static night_t run_night(strategy_kind kind, uint64_t seed, int runs) {
    strategy_opts_t o;
    spec_t base, queue[16];
    char err[256];
    int head = 0, n = 0;
    strategy_opts_default(&o);
    o.space = scripted_space();
    o.kind = kind;
    o.seed = seed;
    o.noise_seeds = 1;
    o.log = quiet_cb;
    load_example("baseline.json", &base);
    strategy_t *s = strategy_new(&base, &o, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    rng_t noise;
    rng_seed(&noise, 1000 + seed);
    night_t out = {INFINITY, NAN, 0};
    for (int run = 0; run < runs; run++) {
        cJSON *r = n ? NULL : decide(s, queue_empty());
        for (cJSON *it = r ? r->child : NULL; it; it = it->next) {
            char *text = cJSON_PrintUnformatted(it);
            cr_assert(n < 16 &&
                      !spec_parse(text, strlen(text), &queue[(head + n++) % 16], NULL, 0));
            free(text);
        }
        cJSON_Delete(r);
        cr_assert_gt(n, 0, "%s proposed nothing at run %d", strategy_kind_name(kind), run);
        spec_t p = queue[head];
        head = (head + 1) % 16, n--;
        double t = objective(&p);
        out.found = fmin(out.found, t);
        out.reruns += has_tag(&p, "rerun");
        r = decide(s,
                   finished(run + 1, "succeeded", spec_json(&p), t + 0.01 * rng_normal(&noise), n));
        for (cJSON *it = r->child; it; it = it->next) {
            char *text = cJSON_PrintUnformatted(it);
            cr_assert(n < 16 &&
                      !spec_parse(text, strlen(text), &queue[(head + n++) % 16], NULL, 0));
            free(text);
        }
        cJSON_Delete(r);
        spec_free(&p);
    }
    const spec_t *best;
    if (strategy_best(s, NULL, NULL, &best)) out.called = objective(best);
    while (n--) spec_free(&queue[head++ % 16]);
    strategy_free(s);
    spec_free(&base);
    return out;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A table row: the median and mean gap of found[] over the seeds. */
static double median_of(const double *x, int n) {
    double sorted[16];
    memcpy(sorted, x, (size_t)n * sizeof *x);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_double);
    return sorted[n / 2];
}

/* The oracle is the known optimum: after 40 runs on each of 5 seeds, TPE's
 * best is within half of random search's median distance to it on at least
 * 4 seeds, and closer on average, on both surfaces. The table (printed) is
 * the numbers the README quotes; climb is shown beside them. */
static void compare_on(int far) {
    enum { SEEDS = 5, RUNS = 40 };
    static const strategy_kind kinds[] = {STRATEGY_RANDOM, STRATEGY_TPE, STRATEGY_CLIMB};
    double found[3][SEEDS], called[3][SEEDS], mean[3] = {0};
    int reruns[3] = {0};
    far_objective = far;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < SEEDS; i++) {
            night_t nt = run_night(kinds[k], (uint64_t)i + 1, RUNS);
            found[k][i] = nt.found - OPTIMUM;
            called[k][i] = nt.called - OPTIMUM;
            reruns[k] += nt.reruns;
            mean[k] += found[k][i] / SEEDS;
        }
    fprintf(stderr, "%s surface, %d runs a night, 5 seeds, gap to the optimum:\n",
            far ? "far" : "near", RUNS);
    for (int k = 0; k < 3; k++) {
        double cmean = 0;
        for (int i = 0; i < SEEDS; i++) cmean += called[k][i] / SEEDS;
        fprintf(stderr,
                "  %-6s best run: median %.4f mean %.4f (%.4f %.4f %.4f %.4f %.4f); "
                "called best: mean %.4f; re-runs %d of %d\n",
                strategy_kind_name(kinds[k]), median_of(found[k], SEEDS), mean[k], found[k][0],
                found[k][1], found[k][2], found[k][3], found[k][4], cmean, reruns[k], SEEDS * RUNS);
    }
    double rmed = median_of(found[0], SEEDS);
    int wins = 0;
    for (int i = 0; i < SEEDS; i++) wins += found[1][i] < 0.5 * rmed;
    cr_expect_geq(wins, 4, "%s: tpe was within half of random's median gap %.4f on %d of %d seeds",
                  far ? "far" : "near", rmed, wins, SEEDS);
    cr_expect_lt(mean[1], mean[0], "%s: tpe's mean gap %.4f, random's %.4f", far ? "far" : "near",
                 mean[1], mean[0]);
}

Test(strategy, tpe_beats_random_search_on_a_scripted_objective, .timeout = 240) {
    compare_on(0);
    compare_on(1);
}

/* A short night as the daemon answers it: two slots, seed noise 0.025 (what
 * make bench-search measured on the engine), the baseline's seeds queued
 * first, and the night's answer the configuration with the lowest mean (GET
 * /v1/best), not the strategy's own. Returns the answer's true gap to the
 * optimum. */
typedef struct {
    char key[SPEC_HASH_HEX];
    double sum, truth;
    int n;
} sim_config_t;

static bool unplanned; /* short_night: the rule before plans (startup 5, one confirmation) */

static double short_night(strategy_kind kind, int noise_seeds, uint64_t seed, int runs,
                          bool end_known, double noise) {
    enum { QUEUE = 16, CONFIGS = 256 };
    strategy_opts_t o;
    spec_t base, queue[QUEUE];
    sim_config_t cf[CONFIGS];
    char err[256];
    int head = 0, n = 0, n_cf = 0;
    strategy_opts_default(&o);
    o.space = scripted_space();
    o.kind = kind;
    o.seed = seed;
    o.noise_seeds = noise_seeds;
    o.queue_target = 2;
    o.max_proposals = end_known ? runs : 0;
    o.log = quiet_cb;
    if (unplanned) {
        o.noise_seeds = strategy_default_noise_seeds(kind);
        o.n_startup = STRATEGY_DEFAULT_STARTUP;
        o.confirm_seeds = 1;
        o.confirm_frac = STRATEGY_DEFAULT_CONFIRM;
    }
    load_example("baseline.json", &base);
    strategy_t *s = strategy_new(&base, &o, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    rng_t rng;
    rng_seed(&rng, 1000 + seed);
    cJSON *r = decide(s, queue_empty());
    for (int run = 0; run < runs; run++) {
        for (cJSON *it = r ? r->child : NULL; it; it = it->next) {
            char *text = cJSON_PrintUnformatted(it);
            cr_assert(n < QUEUE &&
                      !spec_parse(text, strlen(text), &queue[(head + n++) % QUEUE], NULL, 0));
            free(text);
        }
        cJSON_Delete(r);
        cr_assert_gt(n, 0, "%s proposed nothing at run %d", strategy_kind_name(kind), run);
        spec_t p = queue[head];
        head = (head + 1) % QUEUE, n--;
        double t = objective(&p), v = t + noise * rng_normal(&rng);
        char key[SPEC_HASH_HEX];
        cr_assert_eq(spec_config_hash(&p, key), 0);
        int j = 0;
        while (j < n_cf && strcmp(cf[j].key, key)) j++;
        if (j == n_cf) {
            cr_assert_lt(n_cf, CONFIGS);
            cf[n_cf++] = (sim_config_t){.truth = t};
            memcpy(cf[j].key, key, sizeof key);
        }
        cf[j].sum += v, cf[j].n++;
        r = decide(s, finished(run + 1, "succeeded", spec_json(&p), v, n));
        spec_free(&p);
    }
    cJSON_Delete(r);
    int answer = 0;
    for (int j = 1; j < n_cf; j++)
        if (cf[j].sum / cf[j].n < cf[answer].sum / cf[answer].n) answer = j;
    while (n--) spec_free(&queue[head++ % QUEUE]);
    strategy_free(s);
    spec_free(&base);
    return cf[answer].truth - OPTIMUM;
}

/* The default of random and tpe, one baseline seed, against three on nights
 * of 16 runs (what strategy.h quotes): over 50 seeded nights per surface,
 * tpe with one seed ends nearer the optimum than random search on each
 * surface, and nearer than with three seeds over both. */
Test(strategy, one_baseline_seed_serves_a_short_night_better, .timeout = 120) {
    enum { NIGHTS = 50, RUNS = 16 };
    double one_both = 0, three_both = 0;
    for (int far = 0; far < 2; far++) {
        far_objective = far;
        double one = 0, three = 0, rnd = 0;
        for (int k = 1; k <= NIGHTS; k++) {
            one += short_night(STRATEGY_TPE, STRATEGY_NOISE_SEEDS_AUTO, (uint64_t)k, RUNS, false,
                               0.025) /
                   NIGHTS;
            three += short_night(STRATEGY_TPE, 3, (uint64_t)k, RUNS, false, 0.025) / NIGHTS;
            rnd += short_night(STRATEGY_RANDOM, STRATEGY_NOISE_SEEDS_AUTO, (uint64_t)k, RUNS, false,
                               0.025) /
                   NIGHTS;
        }
        fprintf(stderr,
                "%s surface, %d nights of %d runs, seed noise 0.025, the lowest mean's gap to the "
                "optimum: tpe %.4f (one baseline seed), %.4f (three); random %.4f\n",
                far ? "far" : "near", NIGHTS, RUNS, one, three, rnd);
        cr_expect_lt(one, rnd, "%s: tpe %.4f, random %.4f", far ? "far" : "near", one, rnd);
        one_both += one, three_both += three;
    }
    cr_expect_lt(one_both, three_both, "both surfaces: one seed %.4f, three %.4f", one_both,
                 three_both);
}

/* Proposals of a night of `max` runs (0: no end) with one slot and no
 * confirmation budget, whose seventh proposal reads the lowest val_bpb;
 * runs_left >= 0 is told before the eighth (strategy_set_runs_left). Returns
 * the eighth's name and whether a ninth was proposed. */
static char *eighth_proposal(strategy_kind kind, int max, int runs_left, bool *ninth) {
    strategy_opts_t o;
    spec_t base, p;
    char err[256];
    strategy_opts_default(&o);
    o.space = space();
    o.kind = kind;
    o.seed = 3;
    o.noise_seeds = 1;
    o.queue_target = 1;
    o.confirm_frac = 0;  /* only the night's last proposals confirm */
    o.confirm_seeds = 1; /* the rule itself, whatever the plan */
    o.max_proposals = max;
    o.log = quiet_cb;
    load_example("baseline.json", &base);
    strategy_t *s = strategy_new(&base, &o, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    for (int i = 0; i < 7; i++) {
        only_proposal(decide(s, queue_empty()), &p);
        double v = i == 6 ? 3.5 : 3.9 + 0.01 * i;
        cJSON_Delete(decide(s, finished(i + 1, "succeeded", spec_json(&p), v, 1)));
        spec_free(&p);
    }
    if (runs_left >= 0) strategy_set_runs_left(s, runs_left);
    only_proposal(decide(s, queue_empty()), &p);
    char *name = strdup(p.name);
    cJSON_Delete(decide(s, finished(8, "succeeded", spec_json(&p), 3.95, 1)));
    spec_free(&p);
    cJSON *next = decide(s, queue_empty());
    *ninth = cJSON_GetArraySize(next) > 0;
    cJSON_Delete(next);
    strategy_free(s);
    spec_free(&base);
    return name;
}

/* When the night's length is known (--max-proposals), its last proposal
 * gives the lowest mean, read on one seed, its second seed; when it is not,
 * that proposal explores. */
Test(strategy, the_nights_last_proposal_gives_its_answer_a_second_seed) {
    strategy_kind kinds[] = {STRATEGY_TPE, STRATEGY_RANDOM};
    for (int k = 0; k < 2; k++) {
        bool ninth;
        char *name = eighth_proposal(kinds[k], 8, -1, &ninth);
        cr_expect(!strncmp(name, "rerun of #7 ", 12), "%s, 8 runs: the last proposal is \"%s\"",
                  strategy_kind_name(kinds[k]), name);
        cr_expect_not(ninth, "%s: a ninth proposal past --max-proposals 8",
                      strategy_kind_name(kinds[k]));
        free(name);
        name = eighth_proposal(kinds[k], 0, -1, &ninth);
        cr_expect(strncmp(name, "rerun", 5), "%s, no end: the eighth proposal is \"%s\"",
                  strategy_kind_name(kinds[k]), name);
        cr_expect(ninth, "%s: no ninth proposal without --max-proposals",
                  strategy_kind_name(kinds[k]));
        free(name);
        /* The agent's --until: one run can still end in time. */
        name = eighth_proposal(kinds[k], 0, 1, &ninth);
        cr_expect(!strncmp(name, "rerun of #7 ", 12), "%s, one run left: the proposal is \"%s\"",
                  strategy_kind_name(kinds[k]), name);
        cr_expect_not(ninth, "%s: a proposal past the night's end", strategy_kind_name(kinds[k]));
        free(name);
    }
}

/* The pace --until counts with: runs ended a second over the last ones,
 * times the seconds left, less what is running and queued. */
Test(strategy, runs_that_can_end_before_the_night_does) {
    double ends[] = {100, 160, 220, 280}; /* a run ends every 60 s */
    cr_expect_eq(strategy_runs_before(600, ends, 4, 2, 1), 7, "10 fit, 3 taken");
    cr_expect_eq(strategy_runs_before(659, ends, 4, 0, 0), 10, "whole runs only");
    cr_expect_eq(strategy_runs_before(600, ends, 4, 8, 4), 0, "more running than fit");
    cr_expect_eq(strategy_runs_before(0, ends, 4, 0, 0), 0, "the night is over");
    cr_expect_eq(strategy_runs_before(-5, ends, 4, 0, 0), 0, "past the night's end");
    cr_expect_eq(strategy_runs_before(600, ends, 2, 0, 0), -1, "two ends set no pace");
    double same[] = {5, 5, 5};
    cr_expect_eq(strategy_runs_before(600, same, 3, 0, 0), -1, "no time between the ends");
}

/* Proposals of a seeded tpe night, as names: the same seed and results give
 * the same night. */
static char *tpe_names(uint64_t seed) {
    strategy_opts_t o;
    spec_t base;
    char err[256];
    strategy_opts_default(&o);
    o.space = space();
    o.kind = STRATEGY_TPE;
    o.seed = seed;
    o.noise_seeds = 1;
    o.log = quiet_cb;
    load_example("baseline.json", &base);
    strategy_t *s = strategy_new(&base, &o, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    far_objective = 1;
    size_t len = 0;
    char *names = calloc(1, 1);
    for (int i = 0; i < 20; i++) {
        spec_t p;
        only_proposal(decide(s, queue_empty()), &p);
        names = realloc(names, len + strlen(p.name) + 2);
        len += (size_t)sprintf(names + len, "%s\n", p.name);
        cJSON_Delete(decide(s, finished(i + 1, "succeeded", spec_json(&p), objective(&p), 1)));
        spec_free(&p);
    }
    strategy_free(s);
    spec_free(&base);
    return names;
}

Test(strategy, tpe_is_deterministic_given_the_seed) {
    char *a = tpe_names(5), *b = tpe_names(5), *c = tpe_names(6);
    cr_expect_str_eq(a, b);
    cr_expect_str_neq(a, c, "another seed, the same night");
    cr_expect(strstr(a, "tpe#"), "%s", a);
    free(a), free(b), free(c);
}

/* The confirmation rule: a variant that beats the best by less than one
 * standard error gets no further seed; the lowest mean past one SE gets one;
 * and confirmation seeds never pass confirm_frac of the proposals. */
Test(strategy, confirmation_seeds_are_bounded) {
    log_t l = {0};
    strategy_opts_t o;
    spec_t base, p, v;
    char err[256];
    strategy_opts_default(&o);
    o.space = space();
    o.kind = STRATEGY_RANDOM;
    o.noise_seeds = 3;
    o.seed = 3;
    o.log = log_cb;
    o.log_user = &l;
    load_example("baseline.json", &base);
    strategy_t *s = strategy_new(&base, &o, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    cJSON *r = decide(s, queue_empty());
    cr_assert_eq(cJSON_GetArraySize(r), 3, "the baseline's three noise seeds");
    cJSON_Delete(r);
    const double seeds[] = {2.50, 2.52, 2.48}; /* sd 0.02: one SE vs one seed 0.0231 */
    for (int i = 0; i < 3; i++) {
        spec_t b;
        spec_copy(&b, &base);
        b.seed = base.seed + i;
        cJSON_Delete(decide(s, finished(1 + i, "succeeded", spec_json(&b), seeds[i], 5)));
        spec_free(&b);
    }
    /* 0.01 better: within one SE, so the next proposal is a new point */
    spec_copy(&v, &base);
    v.model.mlp = MLP_GELU;
    cr_assert_eq(spec_validate(&v, NULL, 0), 0);
    only_proposal(decide(s, finished(4, "succeeded", spec_json(&v), 2.49, 0)), &p);
    cr_expect(!has_tag(&p, "rerun"), "a gain within one SE was confirmed: %s", p.name);
    cr_expect(has_tag(&p, "random"), "%s", p.name);
    cr_expect(logged(&l, "a further seed is the confirmation rule's to give"));
    spec_free(&p);
    /* 0.03 better: past one SE (0.0231), not past two (0.0462): one more seed */
    v.model.mlp = MLP_SWIGLU;
    cr_assert_eq(spec_validate(&v, NULL, 0), 0);
    only_proposal(decide(s, finished(5, "succeeded", spec_json(&v), 2.47, 0)), &p);
    cr_expect(has_tag(&p, "rerun"), "%s", p.name);
    cr_expect_eq(p.model.mlp, MLP_SWIGLU);
    cr_expect(logged(&l, "confirming #5, the lowest mean: 2.4700 over 1 seed beats best 2.5000 "
                         "(#1) by 0.0300 > one SE 0.0231"));
    spec_free(&p);
    spec_free(&v);
    /* A long night where every new point beats the best past one SE but not two:
     * re-runs stay within a quarter of the proposals. */
    int reruns = 0;
    for (int i = 0; i < 80; i++) {
        only_proposal(decide(s, queue_empty()), &p);
        reruns += has_tag(&p, "rerun");
        double val = has_tag(&p, "rerun") ? 2.50 : 2.469 - 0.0001 * i;
        cJSON_Delete(decide(s, finished(10 + i, "succeeded", spec_json(&p), val, 1)));
        spec_free(&p);
        cr_expect_leq(reruns + 1, 0.25 * (strategy_n_proposals(s)) + 1,
                      "%d re-runs in %d proposals", reruns + 1, strategy_n_proposals(s));
    }
    cr_expect_gt(reruns, 5, "the rule confirmed nothing");
    cr_expect(logged(&l, "confirmation seeds would pass 25% of the proposals"));
    strategy_free(s);
    spec_free(&base);
    free(l.text);
}

/* tpe's state: the points of its configurations survive a save and a load,
 * and both copies go on with the same proposals. */
Test(strategy, tpe_state_round_trip) {
    strategy_opts_t o;
    spec_t base;
    char err[512];
    strategy_opts_default(&o);
    o.space = space();
    o.kind = STRATEGY_TPE;
    o.noise_seeds = 1;
    o.log = quiet_cb;
    load_example("baseline.json", &base);
    strategy_t *s = strategy_new(&base, &o, err, sizeof err);
    strategy_t *t = strategy_new(&base, &o, err, sizeof err);
    cr_assert(s && t, "%s", err);
    far_objective = 1;
    for (int i = 0; i < 10; i++) {
        spec_t p;
        only_proposal(decide(s, queue_empty()), &p);
        const char *status = i == 3 ? "diverged" : "succeeded";
        cJSON_Delete(decide(s, finished(i + 1, status, spec_json(&p), objective(&p), 1)));
        spec_free(&p);
    }
    char *dir = tu_tmpdir(), *path = tu_path("%s/tpe-state.json", dir);
    cr_assert_eq(strategy_save(s, path, err, sizeof err), 0, "%s", err);
    cr_assert_eq(strategy_load(t, path, err, sizeof err), 0, "%s", err);
    char *text = tu_read(path);
    cr_expect(strstr(text, "\"point\"") && strstr(text, "\"train.matrix_lr\""), "%s", text);
    cr_expect(strstr(text, "\"diverged\":\t1") || strstr(text, "\"diverged\": 1") ||
                  strstr(text, "\"diverged\":1"),
              "the diverged run is not kept");
    free(text);
    for (int i = 0; i < 5; i++) {
        spec_t x, y;
        only_proposal(decide(s, queue_empty()), &x);
        only_proposal(decide(t, queue_empty()), &y);
        cr_expect_str_eq(x.name, y.name, "proposal %d differs after the reload", i);
        spec_free(&x);
        spec_free(&y);
    }
    tu_rmrf(dir);
    free(dir);
    free(path);
    strategy_free(s);
    strategy_free(t);
    spec_free(&base);
}

/* ------------------------------------- conditional axes, derived micro-batch */

/* A space where ve_gate_channels counts only when ve_layers is not none and
 * final_lr_frac only when warmdown_ratio is above 0. */
static const char COND_AXES[] =
    "{\"path\":\"model.ve_layers\",\"type\":\"choice\",\"values\":[\"none\",\"alternate\"],"
    "\"why\":\"value embeddings or not\"},"
    "{\"path\":\"model.ve_gate_channels\",\"type\":\"int\",\"values\":[8,16,32],"
    "\"when\":{\"path\":\"model.ve_layers\",\"not\":[\"none\"]},\"why\":\"the gate's width\"},"
    "{\"path\":\"train.warmdown_ratio\",\"type\":\"float\",\"values\":[0,0.5]},"
    "{\"path\":\"train.final_lr_frac\",\"type\":\"float\",\"values\":[0,0.1],"
    "\"when\":{\"path\":\"train.warmdown_ratio\",\"above\":0}},"
    "{\"path\":\"train.total_batch_tokens\",\"type\":\"int\",\"values\":[1024,2048,4096,8192]}";

/* A conditional axis is parsed; it is inactive (not part of the point, the
 * base spec's value kept) when its condition is false, active when true;
 * two points that differ only there are the same point and the same spec. */
Test(strategy, a_conditional_axis_is_inactive_when_its_condition_is_false) {
    char err[512];
    space_t *sp = space_of(COND_AXES, err, sizeof err);
    cr_assert_not_null(sp, "%s", err);
    cr_expect_eq(sp->axes[1].when.kind, SPACE_WHEN_NOT);
    cr_expect_eq(sp->axes[1].when.axis, 0);
    cr_expect_eq(sp->axes[3].when.kind, SPACE_WHEN_ABOVE);
    cr_expect_eq(sp->axes[3].when.above, 0);
    spec_t base, a, b;
    load_example("baseline.json", &base); /* ve_gate_channels 32, warmdown 0.5, final 0 */
    /* ve_layers none, gate 8 vs gate 16: the same point, the same spec */
    space_point_t x = {{0, 0, 0, 0, 2}}, y = {{0, 1, 0, 1, 2}};
    cr_expect(!space_active(sp, &x, 1), "ve_gate_channels is active without value embeddings");
    cr_expect(!space_active(sp, &x, 3), "final_lr_frac is active without a warmdown");
    cr_expect(space_active(sp, &x, 0) && space_active(sp, &x, 4));
    cr_expect(space_point_equal(sp, &x, &y), "points differing only in inactive axes differ");
    cr_assert_eq(space_write(sp, &x, NULL, &base, &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(space_write(sp, &y, NULL, &base, &b, err, sizeof err), 0, "%s", err);
    cr_expect_eq(a.model.ve_gate_channels, base.model.ve_gate_channels, "the base's value kept");
    cr_expect_eq(a.train.final_lr_frac, base.train.final_lr_frac);
    cr_expect_eq(a.train.warmdown_ratio, 0);
    char *ia = identity(&a), *ib = identity(&b);
    cr_expect_str_eq(ia, ib, "two points differing only in inactive axes are two specs");
    free(ia), free(ib);
    /* read back: the inactive axes are not part of the point */
    space_point_t r;
    cr_assert_eq(space_read(sp, &a, &r), 0);
    cr_expect(r.v[1] == -1 && r.v[3] == -1, "read: %g %g", r.v[1], r.v[3]);
    cr_expect(space_point_equal(sp, &r, &x));
    cJSON *j = space_point_json(sp, &x);
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(j, "model.ve_gate_channels"));
    cr_expect_not_null(cJSON_GetObjectItemCaseSensitive(j, "model.ve_layers"));
    cJSON_Delete(j);
    spec_free(&a), spec_free(&b);
    /* active: ve_layers alternate, warmdown 0.5: the values are written */
    space_point_t z = {{1, 0, 1, 1, 2}}, w = {{1, 1, 1, 1, 2}};
    cr_expect(space_active(sp, &z, 1) && space_active(sp, &z, 3));
    cr_expect(!space_point_equal(sp, &z, &w));
    cr_assert_eq(space_write(sp, &z, NULL, &base, &a, err, sizeof err), 0, "%s", err);
    cr_expect_eq(a.model.ve_gate_channels, 8);
    cr_expect_eq(a.train.final_lr_frac, 0.1);
    /* a neighbour of an inactive axis is refused; a move that switches the
     * condition off leaves the dependent axis out */
    rng_t rng;
    rng_seed(&rng, 5);
    space_point_t to;
    cr_expect_eq(space_neighbour(sp, 1, &x, &rng, &to), -1);
    cr_assert_eq(space_neighbour(sp, 0, &z, &rng, &to), 0);
    cr_expect(to.v[0] == 0 && to.v[1] == -1, "%g %g", to.v[0], to.v[1]);
    /* a mutation of the inactive axis changes nothing */
    spec_t m;
    strategy_change_t ch;
    cr_assert_eq(space_write(sp, &x, NULL, &base, &m, err, sizeof err), 0, "%s", err);
    cr_expect_eq(strategy_mutate(sp, &m, 1, &rng, &ch), -1);
    spec_free(&m);
    /* draws leave the inactive axes out, and tpe scores without them */
    int inactive = 0;
    for (int i = 0; i < 200; i++) {
        space_point_t d;
        space_sample(sp, &rng, &d);
        if (!space_active(sp, &d, 1)) {
            inactive++;
            cr_expect_eq(d.v[1], -1);
        }
    }
    cr_expect(inactive > 60 && inactive < 140, "ve_gate_channels inactive in %d of 200", inactive);
    tpe_obs_t obs[4] = {{z, 2.0}, {w, 2.5}, {x, 2.6}, {y, 2.7}};
    double s1 = tpe_score(sp, obs, 4, 0.25, &x), s2 = tpe_score(sp, obs, 4, 0.25, &y);
    cr_expect_eq(s1, s2, "tpe tells apart points that differ only in inactive axes");
    spec_free(&a);
    spec_free(&base);
    space_free(sp);
}

/* A condition must name an earlier axis, with values that axis holds. */
Test(strategy, a_condition_on_a_later_or_unknown_axis_is_refused) {
    static const struct {
        const char *axes, *want;
    } cases[] = {
        {"{\"path\":\"model.ve_gate_channels\",\"type\":\"int\",\"values\":[8,16],"
         "\"when\":{\"path\":\"model.ve_layers\",\"not\":[\"none\"]}},"
         "{\"path\":\"model.ve_layers\",\"type\":\"choice\",\"values\":[\"none\",\"all\"]}",
         "test.json: axes[0].when.path: model.ve_layers is a later axis; a condition names an "
         "axis before this one"},
        {"{\"path\":\"model.ve_gate_channels\",\"type\":\"int\",\"values\":[8,16],"
         "\"when\":{\"path\":\"model.ve_layers\",\"not\":[\"none\"]}}",
         "axes[0].when.path: model.ve_layers is not an axis of the file"},
        {"{\"path\":\"model.depth\",\"type\":\"int\",\"low\":1,\"high\":4,"
         "\"when\":{\"path\":\"model.depth\",\"above\":1}}",
         "axes[0].when.path: model.depth is this axis"},
        {"{\"path\":\"model.ve_layers\",\"type\":\"choice\",\"values\":[\"none\",\"all\"]},"
         "{\"path\":\"model.ve_gate_channels\",\"type\":\"int\",\"values\":[8,16],"
         "\"when\":{\"path\":\"model.ve_layers\",\"not\":[\"nnoe\"]}}",
         "axes[1].when.not[0]: not a value of model.ve_layers"},
        {"{\"path\":\"model.ve_layers\",\"type\":\"choice\",\"values\":[\"none\",\"all\"]},"
         "{\"path\":\"model.ve_gate_channels\",\"type\":\"int\",\"values\":[8,16],"
         "\"when\":{\"path\":\"model.ve_layers\",\"above\":0}}",
         "axes[1].when.above: expected a number, on a numeric axis"},
        {"{\"path\":\"model.ve_layers\",\"type\":\"choice\",\"values\":[\"none\",\"all\"]},"
         "{\"path\":\"model.ve_gate_channels\",\"type\":\"int\",\"values\":[8,16],"
         "\"when\":{\"path\":\"model.ve_layers\",\"in\":[\"all\"],\"not\":[\"none\"]}}",
         "axes[1].when: expected exactly one of \"not\", \"in\", \"above\""},
        {"{\"path\":\"model.ve_layers\",\"type\":\"choice\",\"values\":[\"none\",\"all\"]},"
         "{\"path\":\"model.ve_gate_channels\",\"type\":\"int\",\"values\":[8,16],"
         "\"when\":{\"path\":\"model.ve_layers\",\"is\":[\"all\"]}}",
         "axes[1].when: unknown key \"is\""},
        {"{\"path\":\"model.depth\",\"type\":\"int\",\"low\":1,\"high\":4,\"why\":3}",
         "axes[0].why: expected a sentence"},
        {"{\"path\":\"train.batch_size\",\"type\":\"int\",\"values\":[4,8]}",
         "axes[0]: train.batch_size is derived, never an axis"},
    };
    char err[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        space_t *sp = space_of(cases[i].axes, err, sizeof err);
        cr_expect_null(sp, "case %zu was accepted", i);
        space_free(sp);
        if (!sp) cr_expect(strstr(err, cases[i].want), "case %zu: %s", i, err);
    }
}

/* The micro-batch is derived: the largest power of two at most the base's
 * batch_size that divides total_batch_tokens / seq_len (an independent
 * count: try every power of two). */
Test(strategy, the_micro_batch_is_derived_from_tokens_per_step) {
    for (int bs = 1; bs <= 40; bs++)
        for (int rows = 1; rows <= 70; rows++) {
            int want = 1;
            for (int p = 1; p <= bs; p *= 2)
                if (rows % p == 0) want = p;
            cr_assert_eq(space_micro_batch(bs, (long long)rows * 256, 256), want,
                         "batch %d, %d rows", bs, rows);
        }
    cr_expect_eq(space_micro_batch(16, 1000, 256), 16, "not a whole number of rows: kept");
    char err[512];
    space_t *sp = space_of(COND_AXES, err, sizeof err);
    cr_assert_not_null(sp, "%s", err);
    spec_t base, out;
    load_example("baseline.json", &base); /* batch_size 16, seq_len 256 */
    static const int tokens[] = {1024, 2048, 4096, 8192}, micro[] = {4, 8, 16, 16};
    for (int k = 0; k < 4; k++) {
        space_point_t x = {{1, 0, 1, 0, k}};
        cr_assert_eq(space_write(sp, &x, NULL, &base, &out, err, sizeof err), 0, "%s", err);
        cr_expect_eq(out.train.total_batch_tokens, tokens[k], "tokens per step is not repaired");
        cr_expect_eq(out.train.batch_size, micro[k], "%d tokens: micro-batch %d", tokens[k],
                     out.train.batch_size);
        spec_free(&out);
    }
    spec_free(&base);
    space_free(sp);
}

/* ------------------------------------------------------ the night's plan */

/* tpe's good side: the best quarter up to 32 observations, then one more
 * for every ten (tpe.h). */
Test(strategy, a_long_nights_model_keeps_to_its_best_results) {
    static const int n[] = {8, 16, 32, 64, 96, 200}, good[] = {2, 4, 8, 12, 15, 25};
    for (size_t i = 0; i < sizeof n / sizeof *n; i++) {
        double g = tpe_gamma(n[i]);
        cr_expect_eq((int)ceil(g * n[i] - 1e-9), good[i], "%d observations: gamma %g", n[i], g);
    }
}

/* The plan for nights of 8, 16, 32, 96 and 200 runs (strategy.h's table),
 * with the noise known from earlier nights, and of unknown length (the rule
 * before plans). */
Test(strategy, the_plan_is_sized_to_the_night) {
    static const struct {
        strategy_kind k;
        int runs;
        bool known;
        int noise, startup, confirm, final, model;
    } rows[] = {
        {STRATEGY_TPE, 8, false, 1, 5, 1, 0, 2},      {STRATEGY_TPE, 16, false, 1, 10, 1, 0, 5},
        {STRATEGY_TPE, 32, false, 1, 10, 2, 0, 20},   {STRATEGY_TPE, 64, false, 2, 10, 3, 10, 43},
        {STRATEGY_TPE, 96, false, 2, 10, 3, 16, 69},  {STRATEGY_TPE, 200, false, 3, 10, 3, 16, 172},
        {STRATEGY_TPE, 8, true, 0, 5, 0, 0, 3},       {STRATEGY_TPE, 16, true, 0, 10, 1, 0, 5},
        {STRATEGY_TPE, 96, true, 0, 10, 3, 16, 70},   {STRATEGY_RANDOM, 8, false, 1, 0, 1, 0, 6},
        {STRATEGY_RANDOM, 96, false, 2, 0, 3, 0, 91}, {STRATEGY_CLIMB, 8, false, 2, 0, 0, 0, 6},
        {STRATEGY_CLIMB, 16, false, 2, 0, 0, 0, 14},  {STRATEGY_CLIMB, 96, false, 3, 0, 0, 0, 93},
        {STRATEGY_TPE, 4, false, 1, 5, 0, 0, 0},      {STRATEGY_TPE, -1, false, 1, 5, 1, 0, -1},
        {STRATEGY_CLIMB, -1, false, 3, 0, 0, 0, -1},  {STRATEGY_TPE, -1, true, 0, 5, 1, 0, -1},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        strategy_plan_t p;
        strategy_plan(rows[i].k, rows[i].runs, rows[i].known, &p);
        cr_expect(p.noise_seeds == rows[i].noise && p.startup == rows[i].startup &&
                      p.confirm_seeds == rows[i].confirm && p.final_runs == rows[i].final &&
                      p.model == rows[i].model,
                  "%s, %d runs%s: noise %d startup %d confirm %d final %d model %d",
                  strategy_kind_name(rows[i].k), rows[i].runs, rows[i].known ? ", noise known" : "",
                  p.noise_seeds, p.startup, p.confirm_seeds, p.final_runs, p.model);
        /* mid-night confirmations: none in a tpe night of up to 32 runs */
        double frac = rows[i].k == STRATEGY_CLIMB                                            ? 0
                      : rows[i].k == STRATEGY_TPE && rows[i].runs >= 0 && rows[i].runs <= 32 ? 0
                                                                                             : 0.25;
        cr_expect_eq(p.confirm_frac, frac, "%s, %d runs: confirm_frac %g",
                     strategy_kind_name(rows[i].k), rows[i].runs, p.confirm_frac);
    }
}

/* A night of `runs` (max_proposals) on one slot against the scripted
 * surface; returns the proposals' kinds in order ('b' baseline, 's' a
 * startup draw, 'm' the model's or a local move, 'r' a re-run) in out, and
 * the log in l. noise, when not NULL, is the first event's payload noise. */
static void planned_night(int runs, cJSON *noise, char *out, log_t *full) {
    log_t cur = {0}, *l = &cur; /* the lines of one decision */
    strategy_opts_t o;
    spec_t base;
    char err[256];
    strategy_opts_default(&o);
    o.space = scripted_space();
    o.kind = STRATEGY_TPE;
    o.seed = 3;
    o.queue_target = 1;
    o.confirm_frac = 0; /* the mid-night confirmations aside: the plan's own */
    o.max_proposals = runs;
    o.log = log_cb;
    o.log_user = l;
    load_example("baseline.json", &base);
    strategy_t *s = strategy_new(&base, &o, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    rng_t rng;
    rng_seed(&rng, 77);
    far_objective = 1;
    cJSON *ev = queue_empty();
    if (noise) cJSON_AddItemToObject(ev, "noise", noise);
    cJSON *r = decide(s, ev);
    enum { QUEUE = 8 };
    spec_t queue[QUEUE];
    int n = 0, head = 0, queued = 0;
    for (;;) {
        /* each proposal in turn, named by the log line that proposed it */
        const char *line = l->text;
        for (cJSON *it = r->child; it; it = it->next) {
            char *text = cJSON_PrintUnformatted(it);
            spec_t *p = &queue[(head + queued++) % QUEUE];
            cr_assert(queued <= QUEUE && !spec_parse(text, strlen(text), p, NULL, 0));
            free(text);
            cr_assert_lt(n, runs, "more proposals than the night's length");
            char kind = has_tag(p, "rerun") ? 'r' : has_tag(p, "baseline") ? 'b' : 'm';
            if (kind == 'm') { /* its "proposing tpe#N ...: why" line */
                const char *at = line ? strstr(line, "proposing tpe#") : NULL;
                cr_assert_not_null(at, "no line proposed %s", p->name);
                line = strchr(at, '\n');
                const char *why = strchr(at, ':');
                if (why && !strncmp(why, ": a draw of the startup design", 30)) kind = 's';
            }
            out[n++] = kind;
        }
        cJSON_Delete(r);
        if (l->text) log_cb(full, l->text);
        free(l->text); /* the next decision's lines alone */
        *l = (log_t){0};
        if (!queued) break;
        spec_t p = queue[head];
        head = (head + 1) % QUEUE, queued--;
        r = decide(s, finished(n + 100, "succeeded", spec_json(&p),
                               objective(&p) + 0.025 * rng_normal(&rng), queued));
        spec_free(&p);
    }
    out[n] = '\0';
    strategy_free(s);
    spec_free(&base);
}

/* What 8-, 16- and 96-run nights spend: the plan is logged, the baseline's
 * noise seeds, the startup draws and the last proposals' confirmation seeds
 * are what it says (one in a short night, so its answer has two seeds and
 * its noise a unit; a 96-run night's last 16 proposals re-measure the best
 * few), and the rest is the model's. */
Test(strategy, a_planned_night_spends_what_it_plans, .timeout = 60) {
    static const struct {
        int runs;
        const char *plan, *head, *tail;
    } cases[] = {
        {8,
         "plan: night of 8 runs: 1 baseline seed (noise), 5 startup results, 2 runs of the "
         "model, 1 confirmation seed for the answer and none before",
         "bssss", "mmr"},
        {16,
         "plan: night of 16 runs: 1 baseline seed (noise), 10 startup results, 5 runs of the "
         "model, 1 confirmation seed for the answer and none before",
         "bsssssssssm", "mmmmr"},
        {96,
         "plan: night of 96 runs: 2 baseline seeds (noise), 10 startup results, 69 runs of the "
         "model, 3 confirmation seeds for the answer (the last 16 runs re-measure the best few, "
         "up to 4 seeds) and none before",
         "bbsssssssssm", "mrrrrrrrrrrrrrrrr"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char kinds[256];
        log_t l = {0};
        planned_night(cases[i].runs, NULL, kinds, &l);
        cr_expect(logged(&l, cases[i].plan), "%d runs: %s", cases[i].runs, l.text);
        cr_expect_eq((int)strlen(kinds), cases[i].runs, "%d runs: %s", cases[i].runs, kinds);
        cr_expect(!strncmp(kinds, cases[i].head, strlen(cases[i].head)), "%d runs: %s",
                  cases[i].runs, kinds);
        size_t n = strlen(kinds), t = strlen(cases[i].tail);
        cr_expect(n >= t && !strcmp(kinds + n - t, cases[i].tail), "%d runs: %s", cases[i].runs,
                  kinds);
        /* nothing but the plan's re-runs: the startup and the model get the rest */
        int reruns = 0, planned = 0;
        for (size_t k = 0; k < n; k++) reruns += kinds[k] == 'r';
        for (size_t k = 0; k < t; k++) planned += cases[i].tail[k] == 'r';
        cr_expect_eq(reruns, planned, "%d runs: %s", cases[i].runs, kinds);
        /* the final phase re-measures contenders, not the leader alone */
        if (cases[i].runs == 96)
            cr_expect(logged(&l, "the contender with the lowest mean - sd/sqrt(n) gets a seed"),
                      "%s", l.text);
        free(l.text);
    }
}

/* The scope's noise as the payload carries it (GET /v1/noise's answer). */
static cJSON *noise_of(const char *dataset, double sd, int df) {
    spec_t base;
    spec_scope_t sc;
    load_example("baseline.json", &base);
    spec_scope(&base, &sc);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "dataset", dataset ? dataset : sc.dataset);
    cJSON_AddStringToObject(o, "budget_kind", sc.budget_kind);
    cJSON_AddNumberToObject(o, "budget", sc.budget);
    cJSON_AddNumberToObject(o, "eval_tokens", (double)sc.eval_tokens);
    cJSON_AddNumberToObject(o, "sd", sd);
    cJSON_AddNumberToObject(o, "configurations", 3);
    cJSON_AddNumberToObject(o, "runs", df + 3);
    cJSON_AddNumberToObject(o, "df", df);
    spec_free(&base);
    return o;
}

/* Noise that earlier nights measured in the scope is not measured again: no
 * baseline seed, the noise pooled with the night's own from the start; noise
 * of another scope, or of one degree of freedom, does not count. */
Test(strategy, noise_known_from_earlier_nights_is_reused, .timeout = 60) {
    char kinds[256];
    log_t l = {0};
    planned_night(16, noise_of(NULL, 0.02, 6), kinds, &l);
    cr_expect(logged(&l, "earlier nights measured this scope's noise: sd 0.0200 over 6 df"), "%s",
              l.text);
    cr_expect(logged(&l, "plan: night of 16 runs: no baseline noise seeds (earlier nights "
                         "measured it), 10 startup results, 5 runs of the model"),
              "%s", l.text);
    cr_expect(!strchr(kinds, 'b'), "the baseline was run: %s", kinds);
    cr_expect(!strncmp(kinds, "ssssssssssm", 11), "%s", kinds);
    free(l.text);
    l = (log_t){0};
    planned_night(16, noise_of("other", 0.02, 6), kinds, &l);
    cr_expect(kinds[0] == 'b' && !logged(&l, "earlier nights measured"), "another scope: %s",
              kinds);
    free(l.text);
    l = (log_t){0};
    planned_night(16, noise_of(NULL, 0.02, 1), kinds, &l);
    cr_expect(kinds[0] == 'b', "one df is not a measured noise: %s", kinds);
    free(l.text);
    /* the daemon's scope writes a cap covering the whole split as 0 */
    l = (log_t){0};
    cJSON *whole = noise_of(NULL, 0.02, 6);
    cJSON_ReplaceItemInObject(whole, "eval_tokens", cJSON_CreateNumber(0));
    planned_night(16, whole, kinds, &l);
    cr_expect(kinds[0] == 's', "eval_tokens 0 (the whole split): %s", kinds);
    free(l.text);
    l = (log_t){0};
    cJSON *other = noise_of(NULL, 0.02, 6);
    cJSON_ReplaceItemInObject(other, "budget", cJSON_CreateNumber(60));
    planned_night(16, other, kinds, &l);
    cr_expect(kinds[0] == 'b', "another budget: %s", kinds);
    free(l.text);
    /* the pooled noise: the known one until the night's own comes */
    strategy_opts_t o;
    spec_t base;
    char err[256];
    strategy_opts_default(&o);
    o.space = scripted_space();
    o.kind = STRATEGY_TPE;
    o.log = quiet_cb;
    load_example("baseline.json", &base);
    strategy_t *s = strategy_new(&base, &o, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    cJSON *ev = queue_empty();
    cJSON_AddItemToObject(ev, "noise", noise_of(NULL, 0.03, 4));
    cJSON_Delete(decide(s, ev));
    int df = 0;
    cr_expect(fabs(strategy_noise(s, &df) - 0.03) < 1e-12 && df == 4, "%g over %d",
              strategy_noise(s, &df), df);
    /* and it survives the state's round trip */
    cJSON *st = strategy_state_json(s);
    strategy_t *t = strategy_new(&base, &o, err, sizeof err);
    cr_assert_eq(strategy_load_json(t, st, err, sizeof err), 0, "%s", err);
    cr_expect(fabs(strategy_noise(t, &df) - 0.03) < 1e-12 && df == 4);
    strategy_plan_t p;
    strategy_current_plan(t, &p);
    cr_expect(p.noise_known && p.noise_seeds == 0);
    cJSON_Delete(st);
    strategy_free(t);
    strategy_free(s);
    spec_free(&base);
}

/* The plan against the rule before it (one baseline seed, startup 5, one
 * confirmation seed), tpe told the night's length, two slots, seed noise
 * 0.025, on both scripted surfaces: the mean true gap of the night's answer
 * (the lowest mean) to the optimum over NIGHTS nights per length, paired by
 * seed. Printed for strategy.h's numbers; the plan must not be worse summed
 * over the lengths and surfaces by more than two standard errors. */
Test(strategy, the_plan_against_the_rule_before_it, .timeout = 240) {
#if defined(__SANITIZE_ADDRESS__)
    enum { NIGHTS = 4 }; /* a sanitizer build checks the nights' memory, not their statistics */
    const bool judge = false;
#else
    enum { NIGHTS = 40 };
    const bool judge = true;
#endif
    static const int lengths[] = {8, 16, 32, 96};
    double planned_all = 0, before_all = 0, var_all = 0;
    for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++) {
        for (int far = 0; far < 2; far++) {
            far_objective = far;
            double sum_d = 0, sum_d2 = 0, p = 0, b = 0;
            for (int k = 1; k <= NIGHTS; k++) {
                unplanned = false;
                double gp = short_night(STRATEGY_TPE, STRATEGY_NOISE_SEEDS_AUTO, (uint64_t)k,
                                        lengths[li], true, 0.025);
                unplanned = true;
                double gb = short_night(STRATEGY_TPE, STRATEGY_NOISE_SEEDS_AUTO, (uint64_t)k,
                                        lengths[li], true, 0.025);
                unplanned = false;
                p += gp / NIGHTS, b += gb / NIGHTS;
                sum_d += gp - gb, sum_d2 += (gp - gb) * (gp - gb);
            }
            double md = sum_d / NIGHTS, sd = sqrt((sum_d2 - NIGHTS * md * md) / (NIGHTS - 1));
            fprintf(stderr,
                    "plan, %s surface, %d nights of %d runs: the answer's gap %.4f planned, "
                    "%.4f before plans (paired difference %+.4f, SE %.4f)\n",
                    far ? "far" : "near", NIGHTS, lengths[li], p, b, md, sd / sqrt(NIGHTS));
            planned_all += p, before_all += b, var_all += sd * sd / NIGHTS;
        }
    }
    if (judge)
        cr_expect_lt(planned_all - before_all, 2 * sqrt(var_all),
                     "the plan's gaps sum to %.4f, the rule before it %.4f", planned_all,
                     before_all);
}

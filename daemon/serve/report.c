/* report.c - what a night did and learned in one scope (see report.h): the
 * store's rows of the scope (every run, every configuration, the noise, the
 * sealed test figures of two configurations) summed up into one object. */
#include "daemon/serve/report.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/shared/jsonpath.h"
#include "engine/share.h"
#include "engine/spec.h"
#include "engine/util.h"

/* Statuses in the order the report lists them; a run's final statuses that
 * count as failures are flagged. */
static const struct {
    const char *name;
    bool failure;
} status_order[] = {
    {STORE_SUCCEEDED, false}, {STORE_PRUNED, false},     {STORE_FAILED, true},
    {STORE_CRASHED, true},    {STORE_TIMEOUT, true},     {STORE_OOM, true},
    {STORE_DIVERGED, true},   {STORE_INTERRUPTED, true}, {STORE_CANCELLED, false},
    {STORE_RUNNING, false},   {STORE_QUEUED, false},
};
#define N_STATUS_ORDER (sizeof status_order / sizeof status_order[0])

static bool is_failure(const char *status) {
    for (size_t i = 0; i < N_STATUS_ORDER; i++)
        if (!strcmp(status, status_order[i].name)) return status_order[i].failure;
    return false;
}

static double num(const cJSON *o, const char *key) {
    return jsonpath_num(o, key, NAN);
}

static const char *str(const cJSON *o, const char *key) {
    return jsonpath_str(o, key);
}

/* A number, or null when it is not finite. */
static void add_num(cJSON *o, const char *key, double v) {
    if (isfinite(v))
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

/* A copy of o[key] into to (null when absent). */
static void copy_item(cJSON *to, const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cJSON_AddItemToObject(to, key, v ? cJSON_Duplicate(v, 1) : cJSON_CreateNull());
}

/* ------------------------------------------------------------ run counts */

static void add_counts(cJSON *o, const cJSON *runs) {
    cJSON *r = cJSON_AddObjectToObject(o, "runs");
    cJSON_AddNumberToObject(r, "total", cJSON_GetArraySize(runs));
    cJSON *by = cJSON_AddObjectToObject(r, "by_status");
    for (size_t i = 0; i < N_STATUS_ORDER; i++) {
        int n = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, runs) n += !strcmp(str(e, "status"), status_order[i].name);
        if (n) cJSON_AddNumberToObject(by, status_order[i].name, n);
    }
}

/* The night's span: the first start, the last finish, and the runs' own
 * wall time summed. *t0 gets the first start (NAN when nothing started). */
static void add_time(cJSON *o, const cJSON *runs, double *t0) {
    double first = NAN, last = NAN, run_s = 0;
    const char *first_iso = NULL, *last_iso = NULL;
    const cJSON *e;
    cJSON_ArrayForEach(e, runs) {
        double s = num(e, "started_s"), f = num(e, "finished_s");
        if (isfinite(s) && !(s >= first)) first = s, first_iso = str(e, "started");
        if (isfinite(f) && !(f <= last)) last = f, last_iso = str(e, "finished");
        if (isfinite(s) && isfinite(f)) run_s += f - s;
    }
    cJSON *t = cJSON_AddObjectToObject(o, "time");
    if (first_iso)
        cJSON_AddStringToObject(t, "first_started", first_iso);
    else
        cJSON_AddNullToObject(t, "first_started");
    if (last_iso)
        cJSON_AddStringToObject(t, "last_finished", last_iso);
    else
        cJSON_AddNullToObject(t, "last_finished");
    add_num(t, "hours", (last - first) / 3600.0);
    cJSON_AddNumberToObject(t, "run_hours", run_s / 3600.0);
    *t0 = first;
}

/* ---------------------------------------------------------- anytime curve */

static int cmp_finish(const void *a, const void *b) {
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    int c = strcmp(str(x, "finished"), str(y, "finished"));
    return c ? c : (num(x, "id") > num(y, "id")) - (num(x, "id") < num(y, "id"));
}

/* One point per run that started and finished, in finish order. */
static int add_anytime(cJSON *o, const cJSON *runs, double t0) {
    int n = cJSON_GetArraySize(runs), k = 0;
    const cJSON **done = malloc((size_t)(n ? n : 1) * sizeof *done), *e;
    if (!done) return -1;
    cJSON_ArrayForEach(e, runs) if (isfinite(num(e, "started_s")) && isfinite(num(e, "finished_s")))
        done[k++] = e;
    qsort(done, (size_t)k, sizeof *done, cmp_finish);
    cJSON *arr = cJSON_AddArrayToObject(o, "anytime");
    double spent = 0, best = NAN;
    for (int i = 0; i < k; i++) {
        e = done[i];
        double f = num(e, "finished_s"), v = num(e, "val_bpb");
        spent += f - num(e, "started_s");
        if (isfinite(v) && !(v >= best)) best = v;
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "id", num(e, "id"));
        cJSON_AddStringToObject(p, "status", str(e, "status"));
        cJSON_AddStringToObject(p, "finished", str(e, "finished"));
        cJSON_AddNumberToObject(p, "elapsed_h", (f - t0) / 3600.0);
        cJSON_AddNumberToObject(p, "spent_h", spent / 3600.0);
        add_num(p, "val_bpb", v);
        add_num(p, "best", best);
        cJSON_AddItemToArray(arr, p);
    }
    free(done);
    return 0;
}

/* ---------------------------------------------------------------- failures */

/* The runs of the scope that `wanted` picks, [{id, name, status, reason}] by
 * id, at most REPORT_MAX_FAILURES, into o[key]; o[key_total] counts all. */
static void add_runs(cJSON *o, const cJSON *runs, bool (*wanted)(const char *status),
                     const char *key, const char *key_total) {
    cJSON *arr = cJSON_AddArrayToObject(o, key);
    int total = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, runs) {
        if (!wanted(str(e, "status"))) continue;
        if (total++ >= REPORT_MAX_FAILURES) continue;
        cJSON *f = cJSON_CreateObject();
        copy_item(f, e, "id");
        copy_item(f, e, "name");
        copy_item(f, e, "status");
        copy_item(f, e, "reason");
        cJSON_AddItemToArray(arr, f);
    }
    cJSON_AddNumberToObject(o, key_total, total);
}

static bool is_pruned(const char *status) {
    return !strcmp(status, STORE_PRUNED);
}

/* The succeeded runs their neighbours slowed (report.h's slowed): a ranking
 * they enter may follow the machine rather than the configuration. */
static void add_slowed(cJSON *o, const cJSON *runs) {
    static const char *const keys[] = {
        "id", "name", "val_bpb", "slowdown", "cpu_share", "others_cpu_share", "slowdown_cost_bpb"};
    cJSON *arr = cJSON_AddArrayToObject(o, "slowed");
    int total = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, runs) {
        if (strcmp(str(e, "status"), STORE_SUCCEEDED) || !(num(e, "slowdown") >= SHARE_SLOWED))
            continue;
        if (total++ >= REPORT_MAX_FAILURES || !arr) continue;
        cJSON *f = cJSON_CreateObject();
        for (size_t k = 0; f && k < sizeof keys / sizeof *keys; k++) copy_item(f, e, keys[k]);
        cJSON_AddItemToArray(arr, f);
    }
    cJSON_AddNumberToObject(o, "slowed_total", total);
}

/* ------------------------------------------------------------------- axes */

/* A configuration's spec as leaves: the value text (compact JSON) of every
 * path of the space, NULL where its spec has no such field. */
typedef struct {
    const cJSON *row; /* store_scope_configs' row, borrowed */
    double mean;
    int n;
    char **vals;    /* n_paths entries, malloc'd texts */
    uint64_t total; /* sum of its leaves' hashes */
} cfg_t;

typedef struct {
    char **paths; /* sorted, malloc'd */
    size_t n_paths, cap_paths;
    cfg_t *cfgs;
    size_t n_cfgs;
} space_t;

/* Visit the leaves of spec (objects are walked, anything else is a leaf),
 * without the top-level fields that label an experiment (spec_is_label). */
typedef int (*leaf_fn)(void *user, const char *path, const cJSON *v);

static int walk(const cJSON *o, const char *prefix, int top, leaf_fn fn, void *user) {
    const cJSON *c;
    cJSON_ArrayForEach(c, o) {
        if (top && spec_is_label(c->string)) continue; /* not part of a configuration */
        char path[256];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", c->string);
        int rc = cJSON_IsObject(c) ? walk(c, path, 0, fn, user) : fn(user, path, c);
        if (rc) return rc;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static long path_index(const space_t *sp, const char *path) {
    if (!sp->n_paths) return -1;
    char *const *hit = bsearch(&path, sp->paths, sp->n_paths, sizeof *sp->paths, cmp_str);
    return hit ? (long)(hit - sp->paths) : -1;
}

/* leaf_fn: add path to the space's sorted paths. */
static int collect_path(void *user, const char *path, const cJSON *v) {
    space_t *sp = user;
    (void)v;
    if (path_index(sp, path) >= 0) return 0;
    if (util_grow(&sp->paths, &sp->cap_paths, sp->n_paths + 1, sizeof *sp->paths)) return -1;
    char *copy = strdup(path);
    if (!copy) return -1;
    size_t at = sp->n_paths;
    while (at > 0 && strcmp(sp->paths[at - 1], path) > 0) at--;
    memmove(sp->paths + at + 1, sp->paths + at, (sp->n_paths - at) * sizeof *sp->paths);
    sp->paths[at] = copy;
    sp->n_paths++;
    return 0;
}

typedef struct {
    space_t *sp;
    cfg_t *c;
} fill_t;

/* leaf_fn: the value text of path into the configuration. */
static int fill_value(void *user, const char *path, const cJSON *v) {
    fill_t *f = user;
    long i = path_index(f->sp, path);
    if (i < 0) return 0;
    return (f->c->vals[i] = cJSON_PrintUnformatted(v)) ? 0 : -1;
}

/* FNV-1a over a path and a value text (NULL: absent), then mixed
 * (splitmix64's finaliser) so that sums of leaf hashes spread well. */
static uint64_t leaf_hash(const char *path, const char *val) {
    uint64_t h = 14695981039346656037ULL;
    for (const char *p = path; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    h = (h ^ 0xff) * 1099511628211ULL;
    for (const char *p = val ? val : "\x01"; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    h ^= h >> 30, h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27, h *= 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
}

static void space_free(space_t *sp) {
    for (size_t i = 0; i < sp->n_cfgs; i++) {
        for (size_t p = 0; sp->cfgs[i].vals && p < sp->n_paths; p++) free(sp->cfgs[i].vals[p]);
        free(sp->cfgs[i].vals);
    }
    free(sp->cfgs);
    for (size_t p = 0; p < sp->n_paths; p++) free(sp->paths[p]);
    free(sp->paths);
    memset(sp, 0, sizeof *sp);
}

/* The leaves of every configuration in configs. */
static int space_build(space_t *sp, const cJSON *configs) {
    const cJSON *row;
    memset(sp, 0, sizeof *sp);
    cJSON_ArrayForEach(row, configs) {
        if (walk(cJSON_GetObjectItemCaseSensitive(row, "spec"), "", 1, collect_path, sp)) return -1;
    }
    size_t n = (size_t)cJSON_GetArraySize(configs);
    if (n && !(sp->cfgs = calloc(n, sizeof *sp->cfgs))) return -1;
    cJSON_ArrayForEach(row, configs) {
        cfg_t *c = &sp->cfgs[sp->n_cfgs++];
        c->row = row;
        c->mean = num(row, "val_bpb");
        c->n = (int)num(row, "n_seeds");
        if (sp->n_paths && !(c->vals = calloc(sp->n_paths, sizeof *c->vals))) return -1;
        fill_t f = {sp, c};
        if (walk(cJSON_GetObjectItemCaseSensitive(row, "spec"), "", 1, fill_value, &f)) return -1;
        for (size_t p = 0; p < sp->n_paths; p++) c->total += leaf_hash(sp->paths[p], c->vals[p]);
    }
    return 0;
}

static bool same(const char *a, const char *b) {
    return a == b || (a && b && !strcmp(a, b));
}

/* Whether text is a JSON number; *v gets it. */
static bool number_text(const char *text, double *v) {
    char *end;
    if (!text || !*text) return false;
    *v = strtod(text, &end);
    return !*end && (text[0] == '-' || (text[0] >= '0' && text[0] <= '9'));
}

/* The order of two values of an axis: absent first, numbers by value,
 * false before true, anything else by its JSON text. */
static int value_cmp(const char *a, const char *b) {
    double x, y;
    if (!a || !b) return !!a - !!b;
    if (number_text(a, &x) && number_text(b, &y)) return (x > y) - (x < y);
    return strcmp(a, b); /* "false" < "true" as well */
}

/* One pair of configurations at one-axis distance, oriented low -> high. */
typedef struct {
    size_t path;
    const cfg_t *lo, *hi;
    double delta; /* hi's mean - lo's mean */
} pair_t;

typedef struct {
    const space_t *sp;
    size_t path;
} key_ctx_t;

typedef struct {
    uint64_t key;
    size_t cfg;
} keyed_t;

static int cmp_keyed(const void *a, const void *b) {
    const keyed_t *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->cfg > y->cfg) - (x->cfg < y->cfg);
}

/* Whether configurations a and b differ in path p and nowhere else. */
static bool one_axis_apart(const space_t *sp, const cfg_t *a, const cfg_t *b, size_t p) {
    if (same(a->vals[p], b->vals[p])) return false;
    for (size_t q = 0; q < sp->n_paths; q++)
        if (q != p && !same(a->vals[q], b->vals[q])) return false;
    return true;
}

/* Every pair of configurations that differ in exactly one leaf: for each
 * path, configurations whose other leaves hash alike are grouped (sorting
 * by the hash of all leaves but that one), and each candidate pair is then
 * compared leaf by leaf. *out is malloc'd (caller frees). */
static int find_pairs(const space_t *sp, pair_t **out, size_t *n_out) {
    keyed_t *k = malloc((sp->n_cfgs ? sp->n_cfgs : 1) * sizeof *k);
    pair_t *pairs = NULL;
    size_t n = 0, cap = 0;
    if (!k) return -1;
    for (size_t p = 0; p < sp->n_paths; p++) {
        for (size_t i = 0; i < sp->n_cfgs; i++) {
            const cfg_t *c = &sp->cfgs[i];
            k[i] = (keyed_t){c->total - leaf_hash(sp->paths[p], c->vals[p]), i};
        }
        qsort(k, sp->n_cfgs, sizeof *k, cmp_keyed);
        for (size_t i = 0; i < sp->n_cfgs; i++)
            for (size_t j = i + 1; j < sp->n_cfgs && k[j].key == k[i].key; j++) {
                const cfg_t *a = &sp->cfgs[k[i].cfg], *b = &sp->cfgs[k[j].cfg];
                if (!one_axis_apart(sp, a, b, p)) continue;
                if (util_grow(&pairs, &cap, n + 1, sizeof *pairs)) {
                    free(pairs);
                    free(k);
                    return -1;
                }
                if (value_cmp(a->vals[p], b->vals[p]) > 0) {
                    const cfg_t *t = a;
                    a = b, b = t;
                }
                pairs[n++] = (pair_t){p, a, b, b->mean - a->mean};
            }
    }
    free(k);
    *out = pairs;
    *n_out = n;
    return 0;
}

static int cmp_pair(const void *x, const void *y) {
    const pair_t *a = x, *b = y;
    if (a->path != b->path) return a->path < b->path ? -1 : 1;
    int c = value_cmp(a->lo->vals[a->path], b->lo->vals[b->path]);
    if (c) return c;
    return value_cmp(a->hi->vals[a->path], b->hi->vals[b->path]);
}

/* mean, se and se_from of the pairs' changes into o (report.h). */
static void add_effect(cJSON *o, const pair_t *p, size_t n, double noise_sd, bool with_mean) {
    double sum = 0, ss = 0;
    for (size_t i = 0; i < n; i++) sum += p[i].delta;
    double mean = sum / (double)n, se = NAN;
    for (size_t i = 0; i < n; i++) ss += (p[i].delta - mean) * (p[i].delta - mean);
    const char *from = NULL;
    if (n >= 2)
        se = sqrt(ss / (double)(n - 1) / (double)n), from = "pairs";
    else if (isfinite(noise_sd))
        se = noise_sd * sqrt(1.0 / p[0].lo->n + 1.0 / p[0].hi->n), from = "noise";
    cJSON_AddNumberToObject(o, "pairs", (double)n);
    add_num(o, "mean", with_mean ? mean : NAN);
    add_num(o, "se", with_mean ? se : NAN);
    if (with_mean && from)
        cJSON_AddStringToObject(o, "se_from", from);
    else
        cJSON_AddNullToObject(o, "se_from");
}

/* A value text as JSON (null when absent). */
static cJSON *value_json(const char *text) {
    cJSON *v = text ? cJSON_Parse(text) : NULL;
    return v ? v : cJSON_CreateNull();
}

static int add_axes(cJSON *o, const space_t *sp, double noise_sd) {
    pair_t *pairs;
    size_t n;
    if (find_pairs(sp, &pairs, &n)) return -1;
    if (n) qsort(pairs, n, sizeof *pairs, cmp_pair);
    cJSON_AddStringToObject(o, "axes_from", "spec fields");
    cJSON *axes = cJSON_AddArrayToObject(o, "axes");
    for (size_t i = 0, j; i < n; i = j) {
        size_t p = pairs[i].path;
        bool numbers = true;
        for (j = i; j < n && pairs[j].path == p; j++) {
            double v;
            numbers &=
                number_text(pairs[j].lo->vals[p], &v) && number_text(pairs[j].hi->vals[p], &v);
        }
        cJSON *a = cJSON_CreateObject();
        cJSON_AddStringToObject(a, "axis", sp->paths[p]);
        cJSON_AddStringToObject(a, "kind", numbers ? "number" : "category");
        add_effect(a, pairs + i, j - i, noise_sd, numbers);
        cJSON *moves = cJSON_AddArrayToObject(a, "moves");
        for (size_t m = i, e; m < j; m = e) {
            for (e = m + 1; e < j && !cmp_pair(&pairs[m], &pairs[e]); e++) {
            }
            cJSON *mv = cJSON_CreateObject();
            cJSON_AddItemToObject(mv, "from", value_json(pairs[m].lo->vals[p]));
            cJSON_AddItemToObject(mv, "to", value_json(pairs[m].hi->vals[p]));
            add_effect(mv, pairs + m, e - m, noise_sd, true);
            cJSON_AddItemToArray(moves, mv);
        }
        cJSON_AddItemToArray(axes, a);
    }
    free(pairs);
    return 0;
}

/* The leaves in which configuration b differs from a: [{axis, from, to}]. */
static cJSON *changes(const space_t *sp, const cfg_t *a, const cfg_t *b) {
    cJSON *arr = cJSON_CreateArray();
    for (size_t p = 0; p < sp->n_paths; p++) {
        if (same(a->vals[p], b->vals[p])) continue;
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "axis", sp->paths[p]);
        cJSON_AddItemToObject(c, "from", value_json(a->vals[p]));
        cJSON_AddItemToObject(c, "to", value_json(b->vals[p]));
        cJSON_AddItemToArray(arr, c);
    }
    return arr;
}

/* ------------------------------------------------------- best and baseline */

/* A configuration's summary with its sealed test figure; NULL on a store
 * failure (err set). */
static cJSON *config_summary(store_t *store, const store_scope_t *sc, const cfg_t *c, char *err,
                             size_t errlen) {
    cJSON *o = cJSON_CreateObject();
    copy_item(o, c->row, "id");
    copy_item(o, c->row, "name");
    copy_item(o, c->row, "config_hash");
    copy_item(o, c->row, "n_seeds");
    cJSON_AddNumberToObject(o, "mean_val_bpb", c->mean);
    copy_item(o, c->row, "val_bpb_sd");
    cJSON *t = store_test_of(store, sc, str(c->row, "config_hash"), err, errlen);
    if (!t) {
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddItemToObject(o, "test", t);
    return o;
}

/* The configuration that is the baseline: that of experiment id (0: the
 * scope's first succeeded run), or NULL (err set when id was asked for). */
static const cfg_t *find_baseline(const space_t *sp, const cJSON *runs, int64_t id, char *err,
                                  size_t errlen) {
    const char *hash = NULL;
    const cJSON *e;
    cJSON_ArrayForEach(e, runs) {
        if (id ? num(e, "id") != (double)id : strcmp(str(e, "status"), STORE_SUCCEEDED)) continue;
        hash = str(e, "config_hash");
        break;
    }
    for (size_t i = 0; hash && i < sp->n_cfgs; i++)
        if (same(str(sp->cfgs[i].row, "config_hash"), hash)) return &sp->cfgs[i];
    if (id)
        util_errorf(err, errlen,
                    "baseline: experiment %lld is not in this scope or its configuration has no "
                    "succeeded run",
                    (long long)id);
    return NULL;
}

/* The continued fraction of the regularized incomplete beta function
 * I_x(a, b) (modified Lentz's method; converges for x < (a + 1) / (a + b + 2)). */
static double beta_fraction(double a, double b, double x) {
    const double tiny = 1e-300;
    double c = 1, d = 1 - (a + b) * x / (a + 1);
    d = 1 / (fabs(d) < tiny ? tiny : d);
    double h = d;
    for (int m = 1; m <= 300; m++) {
        for (int odd = 0; odd < 2; odd++) {
            double aa = odd ? -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 1 + 2 * m))
                            : m * (b - m) * x / ((a - 1 + 2 * m) * (a + 2 * m));
            d = 1 + aa * d;
            d = 1 / (fabs(d) < tiny ? tiny : d);
            c = 1 + aa / c;
            if (fabs(c) < tiny) c = tiny;
            h *= d * c;
            if (odd && fabs(d * c - 1) < 1e-14) return h;
        }
    }
    return h;
}

/* Student's t with df degrees of freedom: the two-sided tail P(|T| >= |t|),
 * which is I_x(df / 2, 1 / 2) at x = df / (df + t^2). Written here because
 * none of the required libraries has it and the report needs it to say how
 * sure a difference in noise units is when the noise rests on few degrees
 * of freedom (tests/report_check.py checks it against the closed form for
 * whole degrees of freedom). NAN without degrees of freedom. */
static double t_two_sided(double t, double df) {
    if (!(df > 0) || isnan(t)) return NAN;
    double x = df / (df + t * t), a = df / 2, b = 0.5;
    if (x <= 0) return 0;
    if (x >= 1) return 1;
    double front = exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x));
    if (x < (a + 1) / (a + b + 2)) return front * beta_fraction(a, b, x) / a;
    return 1 - front * beta_fraction(b, a, 1 - x) / b;
}

/* The |t| whose two-sided tail is 5% with df degrees of freedom (12.71 for
 * 1, 4.30 for 2, 2.23 for 10, 1.96 in the limit), by bisection. */
static double t_at_5_percent(double df) {
    if (!(df > 0)) return NAN;
    double lo = 0, hi = 1e4;
    for (int i = 0; i < 100; i++) {
        double mid = (lo + hi) / 2;
        if (t_two_sided(mid, df) > 0.05)
            lo = mid;
        else
            hi = mid;
    }
    return (lo + hi) / 2;
}

static void add_versus(cJSON *o, const space_t *sp, const cfg_t *best, const cfg_t *base,
                       double noise_sd, double noise_df) {
    if (!best || !base) {
        cJSON_AddNullToObject(o, "versus_baseline");
        return;
    }
    cJSON *v = cJSON_AddObjectToObject(o, "versus_baseline");
    double delta = best->mean - base->mean;
    double se = noise_sd * sqrt(1.0 / best->n + 1.0 / base->n);
    cJSON_AddNumberToObject(v, "delta", delta);
    add_num(v, "noise_sd", noise_sd);
    add_num(v, "se", se);
    add_num(v, "z", best == base ? 0 : delta / se);
    add_num(v, "in_noise_sds", best == base ? 0 : delta / noise_sd);
    /* How sure: the noise sd is itself estimated, so z is a t with its
     * degrees of freedom (one from a single pair of seeds). */
    bool measured = isfinite(noise_sd) && noise_df > 0;
    add_num(v, "noise_df", measured ? noise_df : NAN);
    add_num(v, "p_two_sided", measured && best != base ? t_two_sided(delta / se, noise_df) : NAN);
    add_num(v, "t_at_5_percent", measured ? t_at_5_percent(noise_df) : NAN);
    cJSON_AddItemToObject(v, "changes", changes(sp, base, best));
}

/* ------------------------------------------------------------------ build */

cJSON *report_build(store_t *store, const store_scope_t *sc, int64_t baseline, int *code, char *err,
                    size_t errlen) {
    cJSON *runs = NULL, *configs = NULL, *noise = NULL, *o = NULL, *best = NULL, *base = NULL;
    space_t sp = {0};
    int rc = NS_ERR_IO;
    if (!(runs = store_scope_runs(store, sc, err, errlen)) ||
        !(configs = store_scope_configs(store, sc, err, errlen)) ||
        !(noise = store_noise(store, sc, err, errlen)))
        goto fail;
    rc = NS_ERR_NOMEM;
    if (space_build(&sp, configs)) goto oom;
    const cfg_t *top = sp.n_cfgs ? &sp.cfgs[0] : NULL;
    const cfg_t *first = find_baseline(&sp, runs, baseline, err, errlen);
    if (baseline && !first) {
        rc = NS_ERR_NOT_FOUND;
        goto fail;
    }
    double noise_sd = num(noise, "sd"), noise_df = num(noise, "df"), t0;
    rc = NS_ERR_IO;
    if (top && !(best = config_summary(store, sc, top, err, errlen))) goto fail;
    if (first && !(base = config_summary(store, sc, first, err, errlen))) goto fail;

    rc = NS_ERR_NOMEM;
    if (!(o = cJSON_CreateObject())) goto oom;
    cJSON_AddStringToObject(o, "dataset", sc->dataset);
    cJSON_AddStringToObject(o, "budget_kind", sc->budget_kind);
    cJSON_AddNumberToObject(o, "budget", sc->budget);
    cJSON_AddNumberToObject(o, "eval_tokens", (double)sc->eval_tokens);
    char now[STORE_TIME_LEN];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    store_format_time((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, now, sizeof now);
    cJSON_AddStringToObject(o, "generated", now);
    add_counts(o, runs);
    add_time(o, runs, &t0);
    cJSON_AddItemToObject(o, "noise", noise);
    noise = NULL;
    cJSON_AddNumberToObject(o, "configurations", (double)sp.n_cfgs);
    cJSON_AddItemToObject(o, "best", best ? best : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "baseline", base ? base : cJSON_CreateNull());
    best = base = NULL;
    add_versus(o, &sp, top, first, noise_sd, noise_df);
    if (add_anytime(o, runs, t0) || add_axes(o, &sp, noise_sd)) goto oom;
    add_runs(o, runs, is_failure, "failures", "failures_total");
    add_runs(o, runs, is_pruned, "pruned", "pruned_total");
    add_slowed(o, runs);
    cJSON_Delete(runs);
    cJSON_Delete(configs);
    space_free(&sp);
    return o;
oom:
    util_errorf(err, errlen, "report: out of memory");
fail:
    if (code) *code = rc;
    cJSON_Delete(o);
    cJSON_Delete(best);
    cJSON_Delete(base);
    cJSON_Delete(noise);
    cJSON_Delete(runs);
    cJSON_Delete(configs);
    space_free(&sp);
    return NULL;
}

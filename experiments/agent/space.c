/* space.c - the search space (see space.h): the file's parser and checks,
 * draws, neighbours, and points read from and written into specs through
 * the spec's canonical JSON, so any field of a spec can be an axis without
 * code here knowing it. */
#include "experiments/agent/space.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"

#define SIG_DIGITS 4 /* of a float value */
#define STEPS      8 /* a range's neighbour is 0.5/STEPS to 1.5/STEPS of its width away */

/* Fields that are not the configuration's to search: the labels and the
 * scope (a night compares runs of one dataset, budget and evaluation). */
static const char *const not_axes[] = {
    "name",    "tags",          "seed",         "priority",     "parent",     "prune",
    "dataset", "time_budget_s", "token_budget", "flops_budget", "eval_tokens"};

void space_free(space_t *sp) {
    if (!sp) return;
    for (int i = 0; i < sp->n_axes; i++) {
        for (int k = 0; k < sp->axes[i].n_values; k++) cJSON_Delete(sp->axes[i].values[k]);
        for (int k = 0; k < sp->axes[i].when.n_values; k++)
            cJSON_Delete(sp->axes[i].when.values[k]);
    }
    free(sp);
}

/* The value at a dotted path of a tree, or NULL. */
static cJSON *at_path(cJSON *root, const char *path) {
    char part[SPACE_PATH_LEN];
    const char *p = path;
    cJSON *node = root;
    while (node && *p) {
        size_t n = strcspn(p, ".");
        if (n == 0 || n >= sizeof part) return NULL;
        memcpy(part, p, n);
        part[n] = '\0';
        node = cJSON_IsObject(node) ? cJSON_GetObjectItemCaseSensitive(node, part) : NULL;
        p += n + (p[n] == '.');
    }
    return node;
}

/* The default spec's canonical form as a tree (the caller deletes it). */
static cJSON *default_tree(void) {
    spec_t d;
    spec_defaults(&d);
    char *text = spec_canonical_json(&d);
    cJSON *t = text ? cJSON_Parse(text) : NULL;
    free(text);
    spec_free(&d);
    return t;
}

/* Is path a searchable field of a spec? 0, or -1 with why in err. */
static int check_path(cJSON *defaults, const char *path, const char *where, char *err,
                      size_t errlen) {
    char top[SPACE_PATH_LEN];
    snprintf(top, sizeof top, "%.*s", (int)strcspn(path, "."), path);
    for (size_t i = 0; i < sizeof not_axes / sizeof *not_axes; i++)
        if (!strcmp(top, not_axes[i]))
            return util_errorf(err, errlen,
                               "%s: %s labels the run or sets its scope (dataset, budget, "
                               "evaluation); it is not an axis to search",
                               where, path);
    if (!strcmp(path, "train.batch_size"))
        return util_errorf(err, errlen,
                           "%s: train.batch_size is derived, never an axis (the largest power of "
                           "two at most the base spec's that divides total_batch_tokens / "
                           "seq_len): make train.total_batch_tokens the axis",
                           where);
    cJSON *f = at_path(defaults, path);
    if (!f || cJSON_IsObject(f))
        return util_errorf(err, errlen, "%s: %s is not a field of a spec", where, path);
    return 0;
}

/* Copy a string member into out; -1 with err when absent or too long. */
static int get_path(const cJSON *obj, const char *key, char *out, const char *where, char *err,
                    size_t errlen) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(x) || !x->valuestring[0] || strlen(x->valuestring) >= SPACE_PATH_LEN)
        return util_errorf(err, errlen, "%s.%s: expected a spec path like \"model.depth\"", where,
                           key);
    snprintf(out, SPACE_PATH_LEN, "%s", x->valuestring);
    return 0;
}

/* The listed values of an axis: the right type, no repeats. */
static int parse_values(space_axis_t *ax, const cJSON *vals, const char *where, char *err,
                        size_t errlen) {
    int n = cJSON_GetArraySize(vals);
    if (!cJSON_IsArray(vals) || n < 1 || n > SPACE_MAX_VALUES)
        return util_errorf(err, errlen, "%s.values: expected an array of 1 to %d values", where,
                           SPACE_MAX_VALUES);
    const cJSON *v;
    cJSON_ArrayForEach(v, vals) {
        int k = ax->n_values;
        bool ok = ax->type == SPACE_CHOICE
                      ? cJSON_IsString(v) || cJSON_IsBool(v) || cJSON_IsNumber(v)
                      : cJSON_IsNumber(v) && isfinite(v->valuedouble);
        if (ok && ax->type == SPACE_INT) ok = v->valuedouble == floor(v->valuedouble);
        if (!ok)
            return util_errorf(err, errlen, "%s.values[%d]: expected %s", where, k,
                               ax->type == SPACE_INT     ? "an integer"
                               : ax->type == SPACE_FLOAT ? "a number"
                                                         : "a string");
        for (int j = 0; j < k; j++)
            if (cJSON_Compare(ax->values[j], v, 1))
                return util_errorf(err, errlen, "%s.values[%d]: repeats values[%d]", where, k, j);
        if (!(ax->values[k] = cJSON_Duplicate(v, 1)))
            return util_errorf(err, errlen, "out of memory");
        ax->n_values++;
    }
    return 0;
}

/* A range: low < high, integers for an int, positive for a log scale. */
static int parse_range(space_axis_t *ax, const cJSON *obj, const char *where, char *err,
                       size_t errlen) {
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(obj, "low");
    const cJSON *hi = cJSON_GetObjectItemCaseSensitive(obj, "high");
    const cJSON *lg = cJSON_GetObjectItemCaseSensitive(obj, "log");
    if (ax->type == SPACE_CHOICE)
        return util_errorf(err, errlen, "%s: a choice lists its \"values\"", where);
    if (!cJSON_IsNumber(lo) || !cJSON_IsNumber(hi) || !isfinite(lo->valuedouble) ||
        !isfinite(hi->valuedouble))
        return util_errorf(err, errlen, "%s: expected \"values\", or numbers \"low\" and \"high\"",
                           where);
    if (lg && !cJSON_IsBool(lg))
        return util_errorf(err, errlen, "%s.log: expected true or false", where);
    ax->low = lo->valuedouble;
    ax->high = hi->valuedouble;
    ax->log = cJSON_IsTrue(lg);
    if (!(ax->low < ax->high))
        return util_errorf(err, errlen, "%s: low %g is not below high %g", where, ax->low,
                           ax->high);
    if (ax->type == SPACE_INT && (ax->low != floor(ax->low) || ax->high != floor(ax->high)))
        return util_errorf(err, errlen, "%s: an int range has integer bounds, not %g..%g", where,
                           ax->low, ax->high);
    if (ax->log && ax->low <= 0)
        return util_errorf(err, errlen, "%s: a log range needs low > 0, not %g", where, ax->low);
    return 0;
}

/* Is v one of axis ax's values (a listed axis), or a number in its range? */
static bool axis_holds(const space_axis_t *ax, const cJSON *v) {
    for (int k = 0; k < ax->n_values; k++)
        if (cJSON_Compare(ax->values[k], v, 1)) return true;
    return !ax->n_values && cJSON_IsNumber(v) && v->valuedouble >= ax->low &&
           v->valuedouble <= ax->high;
}

/* An axis' "when": {"path": an earlier axis, and one of "not": [values],
 * "in": [values] (each a value of that axis) or "above": a number (that axis
 * numeric)}. */
static int parse_when(space_t *sp, int i, const cJSON *w, const cJSON *all, const char *where,
                      char *err, size_t errlen) {
    space_when_t *wh = &sp->axes[i].when;
    char path[SPACE_PATH_LEN], ww[48];
    snprintf(ww, sizeof ww, "%s.when", where);
    if (!cJSON_IsObject(w))
        return util_errorf(err, errlen,
                           "%s: expected {\"path\": an earlier axis, and \"not\", \"in\" or "
                           "\"above\"}",
                           ww);
    if (get_path(w, "path", path, ww, err, errlen) < 0) return -1;
    wh->axis = -1;
    for (int j = 0; j < i; j++)
        if (!strcmp(sp->axes[j].path, path)) wh->axis = j;
    if (wh->axis < 0) {
        const char *what = "not an axis of the file", *p;
        const cJSON *a;
        cJSON_ArrayForEach(a, all) {
            p = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(a, "path"));
            if (p && !strcmp(p, path))
                what = !strcmp(p, sp->axes[i].path) ? "this axis" : "a later axis";
        }
        return util_errorf(err, errlen,
                           "%s.path: %s is %s; a condition names an axis before this one", ww, path,
                           what);
    }
    const space_axis_t *on = &sp->axes[wh->axis];
    const cJSON *not = NULL, *in = NULL, *above = NULL;
    int n_ops = 0;
    for (const cJSON *m = w->child; m; m = m->next) {
        if (!strcmp(m->string, "path")) continue;
        if (!strcmp(m->string, "not"))
            not = m;
        else if (!strcmp(m->string, "in"))
            in = m;
        else if (!strcmp(m->string, "above"))
            above = m;
        else
            return util_errorf(err, errlen, "%s: unknown key \"%.40s\" (path, not, in, above)", ww,
                               m->string);
        n_ops++;
    }
    if (n_ops != 1)
        return util_errorf(err, errlen, "%s: expected exactly one of \"not\", \"in\", \"above\"",
                           ww);
    if (above) {
        bool numeric = cJSON_IsNumber(above) && isfinite(above->valuedouble);
        for (int k = 0; numeric && k < on->n_values; k++) numeric = cJSON_IsNumber(on->values[k]);
        if (!numeric)
            return util_errorf(err, errlen, "%s.above: expected a number, on a numeric axis", ww);
        wh->kind = SPACE_WHEN_ABOVE;
        wh->above = above->valuedouble;
        return 0;
    }
    const cJSON *list = not ? not : in, *v;
    wh->kind = not ? SPACE_WHEN_NOT : SPACE_WHEN_IN;
    int n = cJSON_GetArraySize(list);
    if (!cJSON_IsArray(list) || n < 1 || n > SPACE_MAX_VALUES)
        return util_errorf(err, errlen, "%s.%s: expected an array of 1 to %d values", ww,
                           not ? "not" : "in", SPACE_MAX_VALUES);
    cJSON_ArrayForEach(v, list) {
        if (!axis_holds(on, v))
            return util_errorf(err, errlen, "%s.%s[%d]: not a value of %s", ww, not ? "not" : "in",
                               wh->n_values, on->path);
        if (!(wh->values[wh->n_values] = cJSON_Duplicate(v, 1)))
            return util_errorf(err, errlen, "out of memory");
        wh->n_values++;
    }
    return 0;
}

static int parse_axis(space_t *sp, cJSON *defaults, const cJSON *obj, const cJSON *all, int i,
                      char *err, size_t errlen) {
    static const char *const keys[] = {"path", "type", "values", "low", "high",
                                       "log",  "also", "why",    "when"};
    char where[32];
    space_axis_t *ax = &sp->axes[i];
    snprintf(where, sizeof where, "axes[%d]", i);
    if (!cJSON_IsObject(obj)) return util_errorf(err, errlen, "%s: expected an object", where);
    for (const cJSON *m = obj->child; m; m = m->next) {
        size_t k = 0;
        while (k < sizeof keys / sizeof *keys && strcmp(m->string, keys[k])) k++;
        if (k == sizeof keys / sizeof *keys)
            return util_errorf(err, errlen,
                               "%s: unknown key \"%.40s\" (path, type, values, low, "
                               "high, log, also, why, when)",
                               where, m->string);
    }
    if (get_path(obj, "path", ax->path, where, err, errlen) < 0 ||
        check_path(defaults, ax->path, where, err, errlen) < 0)
        return -1;
    ax->name = strrchr(ax->path, '.') ? strrchr(ax->path, '.') + 1 : ax->path;
    for (int j = 0; j < i; j++)
        if (!strcmp(sp->axes[j].path, ax->path))
            return util_errorf(err, errlen, "%s: %s is already axes[%d]", where, ax->path, j);
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, "type"));
    if (!type || (strcmp(type, "int") && strcmp(type, "float") && strcmp(type, "choice")))
        return util_errorf(err, errlen, "%s.type: expected \"int\", \"float\" or \"choice\"",
                           where);
    ax->type = !strcmp(type, "int")     ? SPACE_INT
               : !strcmp(type, "float") ? SPACE_FLOAT
                                        : SPACE_CHOICE;
    const cJSON *vals = cJSON_GetObjectItemCaseSensitive(obj, "values");
    if (vals && (cJSON_GetObjectItemCaseSensitive(obj, "low") ||
                 cJSON_GetObjectItemCaseSensitive(obj, "high")))
        return util_errorf(err, errlen, "%s: either \"values\" or \"low\"/\"high\", not both",
                           where);
    if ((vals ? parse_values(ax, vals, where, err, errlen)
              : parse_range(ax, obj, where, err, errlen)) < 0)
        return -1;
    const cJSON *also = cJSON_GetObjectItemCaseSensitive(obj, "also"), *a;
    if (also && (!cJSON_IsArray(also) || cJSON_GetArraySize(also) > SPACE_MAX_ALSO))
        return util_errorf(err, errlen, "%s.also: expected an array of at most %d paths", where,
                           SPACE_MAX_ALSO);
    cJSON_ArrayForEach(a, also) {
        char w[48];
        snprintf(w, sizeof w, "%s.also[%d]", where, ax->n_also);
        if (!cJSON_IsString(a) || strlen(a->valuestring) >= SPACE_PATH_LEN)
            return util_errorf(err, errlen, "%s: expected a spec path", w);
        if (check_path(defaults, a->valuestring, w, err, errlen) < 0) return -1;
        snprintf(ax->also[ax->n_also++], SPACE_PATH_LEN, "%s", a->valuestring);
    }
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(obj, "why");
    if (why && !cJSON_IsString(why))
        return util_errorf(err, errlen, "%s.why: expected a sentence (a string)", where);
    const cJSON *when = cJSON_GetObjectItemCaseSensitive(obj, "when");
    return when ? parse_when(sp, i, when, all, where, err, errlen) : 0;
}

/* Every listed choice is a value its field accepts: written alone into the
 * default spec, spec_parse does not refuse it by that field's name. */
static int check_choices(const space_t *sp, char *err, size_t errlen) {
    spec_t d, out;
    spec_defaults(&d);
    int rc = 0;
    for (int i = 0; i < sp->n_axes && rc == 0; i++) {
        const space_axis_t *ax = &sp->axes[i];
        if (ax->type != SPACE_CHOICE) continue;
        for (int k = 0; k < ax->n_values && rc == 0; k++) {
            space_point_t pt;
            bool which[SPACE_MAX_AXES] = {false};
            char e2[SPEC_ERR_LEN];
            which[i] = true;
            pt.v[i] = k;
            size_t n = strlen(ax->path);
            if (space_write(sp, &pt, which, &d, &out, e2, sizeof e2) == 0)
                spec_free(&out);
            else if (!strncmp(e2, ax->path, n) && e2[n] == ':')
                rc = util_errorf(err, errlen, "axes[%d].values[%d]: the spec refuses it (%s)", i, k,
                                 e2);
        }
    }
    spec_free(&d);
    return rc;
}

space_t *space_parse(const char *text, size_t len, const char *what, char *err, size_t errlen) {
    char e2[384];
    space_t *sp = calloc(1, sizeof *sp);
    cJSON *root = cJSON_ParseWithLength(text, len), *defaults = default_tree();
    const cJSON *axes, *it;
    int i = 0;
    if (!sp || !defaults) {
        util_errorf(e2, sizeof e2, "out of memory");
        goto fail;
    }
    if (!cJSON_IsObject(root)) {
        util_errorf(e2, sizeof e2, "not a JSON object");
        goto fail;
    }
    axes = cJSON_GetObjectItemCaseSensitive(root, "axes");
    if (!cJSON_IsArray(axes) || cJSON_GetArraySize(axes) < 1 ||
        cJSON_GetArraySize(axes) > SPACE_MAX_AXES) {
        util_errorf(e2, sizeof e2, "axes: expected an array of 1 to %d axes", SPACE_MAX_AXES);
        goto fail;
    }
    cJSON_ArrayForEach(it, axes) {
        sp->n_axes = i + 1;
        if (parse_axis(sp, defaults, it, axes, i++, e2, sizeof e2) < 0) goto fail;
    }
    if (check_choices(sp, e2, sizeof e2) < 0) goto fail;
    cJSON_Delete(root);
    cJSON_Delete(defaults);
    return sp;
fail:
    snprintf(err, errlen, "%s: %s", what, e2);
    cJSON_Delete(root);
    cJSON_Delete(defaults);
    space_free(sp);
    return NULL;
}

space_t *space_load(const char *path, char *err, size_t errlen) {
    size_t len;
    char e2[256];
    char *text = util_read_file(path, SPACE_MAX_BYTES, &len, e2, sizeof e2);
    if (!text) {
        snprintf(err, errlen, "search space: %s", e2);
        return NULL;
    }
    space_t *sp = space_parse(text, len, path, err, errlen);
    free(text);
    return sp;
}

/* ---------------------------------------------------------------- values */

static double uniform01(rng_t *rng) {
    return (double)(rng_next(rng) >> 11) * 0x1.0p-53;
}

/* x to SIG_DIGITS significant digits. */
static double round_sig(double x) {
    if (x == 0 || !isfinite(x)) return x;
    double scale = pow(10, SIG_DIGITS - 1 - (int)floor(log10(fabs(x))));
    return round(x * scale) / scale;
}

double space_unit(const space_axis_t *ax, double value) {
    if (ax->log)
        return value > 0 ? (log(value) - log(ax->low)) / (log(ax->high) - log(ax->low)) : -1;
    return (value - ax->low) / (ax->high - ax->low);
}

double space_from_unit(const space_axis_t *ax, double u) {
    double x = ax->log ? exp(log(ax->low) + u * (log(ax->high) - log(ax->low)))
                       : ax->low + u * (ax->high - ax->low);
    x = ax->type == SPACE_INT ? round(x) : round_sig(x);
    return x < ax->low ? ax->low : x > ax->high ? ax->high : x;
}

/* A log-scale int at u in [0, 1): the edges' halves rounded in. */
static double log_int_at(const space_axis_t *ax, double u) {
    double lo = log(ax->low - 0.5 > 0 ? ax->low - 0.5 : ax->low), hi = log(ax->high + 0.5);
    double x = round(exp(lo + u * (hi - lo)));
    return x < ax->low ? ax->low : x > ax->high ? ax->high : x;
}

/* ----------------------------------------------------------- conditions */

/* The value of axis ax at x as a new JSON item, or NULL (not listed / OOM). */
static cJSON *value_json(const space_axis_t *ax, double x) {
    if (ax->n_values) {
        int k = (int)x;
        return k >= 0 && k < ax->n_values ? cJSON_Duplicate(ax->values[k], 1) : NULL;
    }
    return isnan(x) ? NULL : cJSON_CreateNumber(x);
}

/* Does the condition hold on v (the condition axis's value; NULL: none)? */
static bool when_holds(const space_when_t *w, const cJSON *v) {
    if (w->kind == SPACE_WHEN_ALWAYS) return true;
    if (!v) return false;
    if (w->kind == SPACE_WHEN_ABOVE) return cJSON_IsNumber(v) && v->valuedouble > w->above;
    bool listed = false;
    for (int k = 0; k < w->n_values && !listed; k++) listed = cJSON_Compare(w->values[k], v, 1);
    return w->kind == SPACE_WHEN_IN ? listed : !listed;
}

bool space_active(const space_t *sp, const space_point_t *pt, int a) {
    const space_when_t *w = &sp->axes[a].when;
    if (w->kind == SPACE_WHEN_ALWAYS) return true;
    if (!space_active(sp, pt, w->axis)) return false;
    const space_axis_t *on = &sp->axes[w->axis];
    double x = pt->v[w->axis];
    if (on->n_values) {
        int k = (int)x;
        return k >= 0 && k < on->n_values && when_holds(w, on->values[k]);
    }
    if (isnan(x)) return false;
    cJSON num = {.type = cJSON_Number, .valuedouble = x, .valueint = (int)x};
    return when_holds(w, &num);
}

void space_canon(const space_t *sp, space_point_t *pt) {
    /* In the file's order: an axis's condition reads an earlier axis, already
     * decided. */
    for (int i = 0; i < sp->n_axes; i++)
        if (!space_active(sp, pt, i)) pt->v[i] = sp->axes[i].n_values ? -1 : NAN;
}

bool space_point_equal(const space_t *sp, const space_point_t *x, const space_point_t *y) {
    for (int i = 0; i < sp->n_axes; i++)
        if (!space_same(sp, i, x, y)) return false;
    return true;
}

/* --------------------------------------------------------------- draws */

void space_sample(const space_t *sp, rng_t *rng, space_point_t *pt) {
    for (int i = 0; i < sp->n_axes; i++) {
        const space_axis_t *ax = &sp->axes[i];
        if (ax->n_values)
            pt->v[i] = (double)rng_below(rng, (uint64_t)ax->n_values);
        else if (ax->type == SPACE_INT && !ax->log)
            pt->v[i] = ax->low + (double)rng_below(rng, (uint64_t)(ax->high - ax->low) + 1);
        else if (ax->type == SPACE_INT)
            pt->v[i] = log_int_at(ax, uniform01(rng));
        else
            pt->v[i] = space_from_unit(ax, uniform01(rng));
    }
    space_canon(sp, pt);
}

/* The value of axis ax at u in [0, 1), the inverse of a uniform draw's
 * distribution: a listed value's index, an int or a float on its scale. */
static double value_at(const space_axis_t *ax, double u) {
    if (ax->n_values) {
        int k = (int)floor(u * ax->n_values);
        return k < 0 ? 0 : k >= ax->n_values ? ax->n_values - 1 : k;
    }
    if (ax->type == SPACE_INT && !ax->log) {
        double x = ax->low + floor(u * (ax->high - ax->low + 1));
        return x > ax->high ? ax->high : x;
    }
    return ax->type == SPACE_INT ? log_int_at(ax, u) : space_from_unit(ax, u);
}

void space_sample_stratified(const space_t *sp, rng_t *rng, uint64_t seed, int draw, int n,
                             space_point_t *pt) {
    if (n < 2 || n > SPACE_MAX_STRATA || draw < 0) {
        space_sample(sp, rng, pt);
        return;
    }
    for (int i = 0; i < sp->n_axes; i++) {
        /* This axis's order of the strata: the same for every draw of a
         * design (seed and axis fix it), a new one for every axis. */
        int perm[SPACE_MAX_STRATA];
        rng_t r;
        rng_seed(&r, seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(i + 1)));
        for (int k = 0; k < n; k++) perm[k] = k;
        for (int k = n - 1; k > 0; k--) {
            int j = (int)rng_below(&r, (uint64_t)k + 1), t = perm[k];
            perm[k] = perm[j], perm[j] = t;
        }
        pt->v[i] = value_at(&sp->axes[i], (perm[draw % n] + uniform01(rng)) / n);
    }
    space_canon(sp, pt);
}

bool space_same(const space_t *sp, int a, const space_point_t *x, const space_point_t *y) {
    bool on_x = space_active(sp, x, a), on_y = space_active(sp, y, a);
    if (!on_x || !on_y) return on_x == on_y;
    return x->v[a] == y->v[a] || (isnan(x->v[a]) && isnan(y->v[a]));
}

int space_neighbour(const space_t *sp, int a, const space_point_t *from, rng_t *rng,
                    space_point_t *to) {
    const space_axis_t *ax = &sp->axes[a];
    int dir = rng_below(rng, 2) ? 1 : -1;
    *to = *from;
    if (!space_active(sp, from, a)) return -1;
    if (ax->n_values) {
        int k = (int)from->v[a], n = ax->n_values;
        if (n < 2 && k == 0) return -1;
        if (k < 0 || k >= n) /* not listed: any listed value */
            to->v[a] = (double)rng_below(rng, (uint64_t)n);
        else
            to->v[a] = k + (k + dir < 0 || k + dir >= n ? -dir : dir);
        space_canon(sp, to);
        return 0;
    }
    double x = from->v[a];
    if (isnan(x)) x = space_from_unit(ax, 0.5);
    double step = (0.5 + uniform01(rng)) / STEPS;
    for (int tries = 0; tries < 2; tries++, dir = -dir) {
        double y = space_from_unit(ax, space_unit(ax, x) + dir * step);
        if (ax->type == SPACE_INT && y == x) y = x + dir;
        if (y >= ax->low && y <= ax->high && y != x) {
            to->v[a] = y;
            space_canon(sp, to);
            return 0;
        }
    }
    return -1;
}

void space_value_text(const space_t *sp, int a, const space_point_t *pt, char *buf, size_t n) {
    const space_axis_t *ax = &sp->axes[a];
    double x = pt->v[a];
    if (ax->n_values) {
        int k = (int)x;
        const cJSON *v = k >= 0 && k < ax->n_values ? ax->values[k] : NULL;
        if (!v)
            snprintf(buf, n, "?");
        else if (cJSON_IsString(v))
            snprintf(buf, n, "%s", v->valuestring);
        else if (cJSON_IsBool(v))
            snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
        else
            snprintf(buf, n, "%.10g", v->valuedouble);
    } else if (isnan(x)) {
        snprintf(buf, n, "?");
    } else {
        snprintf(buf, n, "%.10g", x);
    }
}

/* ------------------------------------------------------- specs and points */

/* Read axis a's value from a tree into pt. */
static void read_axis(const space_axis_t *ax, const cJSON *v, double *x) {
    if (ax->n_values) {
        *x = -1;
        for (int k = 0; v && k < ax->n_values; k++)
            if (cJSON_Compare(ax->values[k], v, 1)) *x = k;
    } else {
        *x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    }
}

int space_read(const space_t *sp, const spec_t *spec, space_point_t *pt) {
    char *text = spec_canonical_json(spec);
    cJSON *tree = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!tree) return -1;
    for (int i = 0; i < sp->n_axes; i++)
        read_axis(&sp->axes[i], at_path(tree, sp->axes[i].path), &pt->v[i]);
    space_canon(sp, pt);
    cJSON_Delete(tree);
    return 0;
}

/* Replace the value at path in tree by a copy of v. */
static int set_path(cJSON *tree, const char *path, const cJSON *v) {
    const char *dot = strrchr(path, '.');
    char parent[SPACE_PATH_LEN];
    snprintf(parent, sizeof parent, "%.*s", dot ? (int)(dot - path) : 0, path);
    cJSON *obj = dot ? at_path(tree, parent) : tree, *copy = cJSON_Duplicate(v, 1);
    if (!cJSON_IsObject(obj) || !copy) {
        cJSON_Delete(copy);
        return -1;
    }
    const char *key = dot ? dot + 1 : path;
    if (cJSON_GetObjectItemCaseSensitive(obj, key))
        return cJSON_ReplaceItemInObjectCaseSensitive(obj, key, copy) ? 0 : -1;
    return cJSON_AddItemToObject(obj, key, copy) ? 0 : -1;
}

int space_micro_batch(int batch_size, long long total_batch_tokens, int seq_len) {
    if (batch_size < 1 || seq_len < 1 || total_batch_tokens < seq_len ||
        total_batch_tokens % seq_len)
        return batch_size;
    long long rows = total_batch_tokens / seq_len;
    int b = 1;
    while (b <= batch_size / 2) b *= 2;
    while (rows % b) b /= 2;
    return b;
}

/* The derived micro-batch (space_micro_batch) written into tree, from the
 * written-into spec's batch_size. */
static void derive_micro_batch(cJSON *tree, int batch_size) {
    cJSON *b = at_path(tree, "train.batch_size"), *t = at_path(tree, "train.total_batch_tokens");
    cJSON *T = at_path(tree, "model.seq_len");
    if (!cJSON_IsNumber(b) || !cJSON_IsNumber(t) || !cJSON_IsNumber(T) ||
        !(t->valuedouble >= 1 && t->valuedouble < 9e15) || !(T->valuedouble >= 1) ||
        T->valuedouble > INT_MAX)
        return;
    int m = space_micro_batch(batch_size, (long long)t->valuedouble, (int)T->valuedouble);
    if (m != b->valuedouble) cJSON_SetNumberValue(b, m);
}

/* Is axis a active in tree (its condition read from the tree's values, the
 * condition axis itself active)? */
static bool tree_active(const space_t *sp, cJSON *tree, int a) {
    const space_when_t *w = &sp->axes[a].when;
    if (w->kind == SPACE_WHEN_ALWAYS) return true;
    return tree_active(sp, tree, w->axis) && when_holds(w, at_path(tree, sp->axes[w->axis].path));
}

int space_write(const space_t *sp, const space_point_t *pt, const bool *which, const spec_t *in,
                spec_t *out, char *err, size_t errlen) {
    char *text = spec_canonical_json(in);
    cJSON *tree = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!tree) return util_errorf(err, errlen, "out of memory");
    for (int i = 0; i < sp->n_axes; i++) {
        const space_axis_t *ax = &sp->axes[i];
        if ((which && !which[i]) || !tree_active(sp, tree, i)) continue;
        cJSON *v = value_json(ax, pt->v[i]);
        int rc = v ? set_path(tree, ax->path, v) : -1;
        for (int j = 0; rc == 0 && j < ax->n_also; j++) rc = set_path(tree, ax->also[j], v);
        cJSON_Delete(v);
        if (rc < 0) {
            cJSON_Delete(tree);
            return util_errorf(err, errlen, "%s: no value to write", ax->path);
        }
    }
    derive_micro_batch(tree, in->train.batch_size);
    int rc = spec_from_json(tree, out, err, errlen);
    cJSON_Delete(tree);
    return rc < 0 ? -1 : 0;
}

cJSON *space_point_json(const space_t *sp, const space_point_t *pt) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; o && i < sp->n_axes; i++) {
        if (!space_active(sp, pt, i)) continue;
        cJSON *v = value_json(&sp->axes[i], pt->v[i]);
        if (!v) v = cJSON_CreateNull();
        if (!v || !cJSON_AddItemToObject(o, sp->axes[i].path, v)) {
            cJSON_Delete(v);
            cJSON_Delete(o);
            return NULL;
        }
    }
    return o;
}

void space_point_from_json(const space_t *sp, const cJSON *obj, space_point_t *pt) {
    for (int i = 0; i < sp->n_axes; i++)
        read_axis(&sp->axes[i], cJSON_GetObjectItemCaseSensitive(obj, sp->axes[i].path), &pt->v[i]);
    space_canon(sp, pt);
}

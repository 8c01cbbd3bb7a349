/* scope.c - the scope of a scoped query and its description (see scope.h). */
#include "daemon/serve/scope.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/shared/bytebuf.h"
#include "daemon/shared/log.h"
#include "engine/data.h"
#include "engine/spec.h"

#define NAMES_LISTED 20 /* datasets or scopes named in an error message */

/* "book (budget time:300, eval_tokens 65536)" appended to t. */
static void put_scope(bytebuf_t *t, const char *dataset, const char *kind, double budget,
                      double eval_tokens) {
    bytebuf_printf(t, "%s (budget %s:%.17g, eval_tokens %.0f%s)", dataset, kind, budget,
                   eval_tokens, eval_tokens == 0 ? ", the whole split" : "");
}

/* "; the scopes with results: A (...) 3 runs, B (...) 1 run" appended to t. */
static void put_scopes(store_t *store, bytebuf_t *t) {
    char err[256];
    cJSON *list = store_scopes(store, NAMES_LISTED, err, sizeof err);
    int n = 0;
    for (const cJSON *s = list ? list->child : NULL; s; s = s->next, n++) {
        bytebuf_puts(t, n ? ", " : "; the scopes with results: ");
        put_scope(t, cJSON_GetStringValue(cJSON_GetObjectItem(s, "dataset")),
                  cJSON_GetStringValue(cJSON_GetObjectItem(s, "budget_kind")),
                  cJSON_GetNumberValue(cJSON_GetObjectItem(s, "budget")),
                  cJSON_GetNumberValue(cJSON_GetObjectItem(s, "eval_tokens")));
        double runs = cJSON_GetNumberValue(cJSON_GetObjectItem(s, "runs"));
        bytebuf_printf(t, " %.0f run%s", runs, runs == 1 ? "" : "s");
    }
    if (!list) log_error("scope: %s", err);
    if (list && !n) bytebuf_puts(t, "; no scope has results yet");
    cJSON_Delete(list);
}

/* ", the datasets are: a, b (did you mean 'B'?)" for the prepared datasets
 * of state_dir appended to t. */
static void put_datasets(const char *state_dir, const char *asked, bytebuf_t *t) {
    char dir[PATH_MAX], hint[300] = "";
    struct dirent **names = NULL;
    snprintf(dir, sizeof dir, "%s/datasets", state_dir);
    int n = scandir(dir, &names, NULL, alphasort), listed = 0;
    for (int i = 0; i < n; i++) {
        data_info_t info;
        char derr[256];
        const char *name = names[i]->d_name;
        if (name[0] != '.' && listed < NAMES_LISTED &&
            data_info(state_dir, name, &info, derr, sizeof derr) == 0) {
            bytebuf_printf(t, "%s%s", listed++ ? ", " : "; the datasets are: ", name);
            if (!strcasecmp(name, asked))
                snprintf(hint, sizeof hint, " (did you mean '%s'?)", name);
        }
        free(names[i]);
    }
    free(names);
    if (!listed) bytebuf_puts(t, "; no dataset is prepared yet (nightshift prep)");
    bytebuf_puts(t, hint);
}

/* Answer 404 code with t's text (taken). */
static void not_found(http_response_t *res, const char *code, bytebuf_t *t) {
    char *msg = bytebuf_take(t, NULL);
    http_error(res, 404, code, "%s", msg ? msg : "the scope names nothing");
    free(msg);
}

/* The parts query gives into sc (budget_kind "" and eval_tokens -1 when it
 * gives none), pinned_dataset standing in for a missing dataset. Returns 0,
 * or -1 with res set (400) for a malformed part. */
static int parse_query(const char *query, const char *pinned_dataset, store_scope_t *sc,
                       http_response_t *res) {
    char dataset[sizeof sc->dataset] = "", budget[64] = "", eval[32] = "", *end;
    const char *q = query ? query : "";
    int got_ds = http_query_get(q, "dataset", dataset, sizeof dataset);
    int got_b = http_query_get(q, "budget", budget, sizeof budget);
    int got_e = http_query_get(q, "eval_tokens", eval, sizeof eval);
    memset(sc, 0, sizeof *sc);
    sc->eval_tokens = -1;
    if (got_ds < 0) {
        http_error(res, 400, "invalid_query", "dataset: at most %zu characters",
                   sizeof dataset - 1);
        return -1;
    }
    if (got_b < 0 || (budget[0] && spec_scope_set_budget(sc, budget) < 0)) {
        http_error(res, 400, "invalid_query",
                   "budget: expected time:SECONDS (or SECONDS, or SECONDSs), tokens:N or "
                   "flops:N");
        return -1;
    }
    if (eval[0] || got_e < 0) {
        errno = 0;
        long long v = got_e == 1 ? strtoll(eval, &end, 10) : -1;
        if (got_e < 0 || errno || end == eval || *end || v < 0 || v > INT_MAX) {
            http_error(res, 400, "invalid_query",
                       "eval_tokens: expected the validation tokens scored, 0 for the whole split");
            return -1;
        }
        sc->eval_tokens = v;
    }
    if (!dataset[0] && pinned_dataset) snprintf(dataset, sizeof dataset, "%s", pinned_dataset);
    snprintf(sc->dataset, sizeof sc->dataset, "%s", dataset);
    return 0;
}

/* No experiment matches what sc gives: a dataset that was never prepared,
 * or a budget or evaluation nothing used, names nothing (-1, res set: 404);
 * else the spec's defaults fill in what was not given (a prepared dataset
 * with no runs yet, or no run at all), scored on that dataset's split. */
static int no_match(store_t *store, const char *state_dir, store_scope_t *sc,
                    http_response_t *res) {
    spec_t d;
    data_info_t info;
    char derr[256];
    spec_defaults(&d);
    const char *ds = sc->dataset[0] ? sc->dataset : d.dataset;
    int prepared = data_info(state_dir, ds, &info, derr, sizeof derr) == 0;
    bytebuf_t t;
    bytebuf_init(&t, BYTEBUF_UNLIMITED);
    if (sc->dataset[0] && !prepared) {
        bytebuf_printf(&t, "no dataset '%s'", sc->dataset);
        put_datasets(state_dir, sc->dataset, &t);
        put_scopes(store, &t);
        not_found(res, "unknown_dataset", &t);
    } else if (sc->budget_kind[0] || sc->eval_tokens >= 0) {
        bytebuf_printf(&t, "no experiment ran in %s%s", sc->dataset[0] ? "dataset " : "any dataset",
                       sc->dataset);
        if (sc->budget_kind[0])
            bytebuf_printf(&t, " with budget %s:%.17g", sc->budget_kind, sc->budget);
        if (sc->eval_tokens >= 0)
            bytebuf_printf(&t, " %s eval_tokens %lld", sc->budget_kind[0] ? "and" : "with",
                           (long long)sc->eval_tokens);
        put_scopes(store, &t);
        not_found(res, "unknown_scope", &t);
    } else {
        bytebuf_free(&t);
        snprintf(d.dataset, sizeof d.dataset, "%s", ds);
        spec_scope_on(&d, prepared ? info.val_tokens : -1, sc);
        spec_free(&d);
        return 0;
    }
    spec_free(&d);
    return -1;
}

int scope_from_query(store_t *store, const char *state_dir, const char *pinned_dataset,
                     const char *query, store_scope_t *sc, const char **from,
                     http_response_t *res) {
    char err[256];
    if (parse_query(query, pinned_dataset, sc, res) < 0) return -1;
    int gave_all = sc->dataset[0] && sc->budget_kind[0] && sc->eval_tokens >= 0;
    int rc = store_default_scope(store, sc, err, sizeof err);
    if (rc < 0) {
        log_error("api: store: %s", err);
        http_error(res, 500, "store_error", "%s", err);
        return -1;
    }
    *from = gave_all  ? "query"
            : rc == 1 ? "latest_result"
            : rc == 2 ? "latest_experiment"
                      : "defaults";
    return rc > 0 ? 0 : no_match(store, state_dir, sc, res);
}

/* o[key] = item (consumed), replacing a member of that name: an answer that
 * already names its scope is described once. */
static int set_member(cJSON *o, const char *key, cJSON *item) {
    if (!item) return 0;
    if (cJSON_GetObjectItemCaseSensitive(o, key))
        return cJSON_ReplaceItemInObjectCaseSensitive(o, key, item);
    return cJSON_AddItemToObject(o, key, item);
}

int scope_describe(store_t *store, cJSON *o, const store_scope_t *sc, const char *from, char *err,
                   size_t errlen) {
    cJSON *list = store_scopes(store, SCOPE_LIST_MAX, err, errlen);
    if (!list) return -1;
    int ok = set_member(o, "dataset", cJSON_CreateString(sc->dataset)) &&
             set_member(o, "budget_kind", cJSON_CreateString(sc->budget_kind)) &&
             set_member(o, "budget", cJSON_CreateNumber(sc->budget)) &&
             set_member(o, "eval_tokens", cJSON_CreateNumber((double)sc->eval_tokens)) &&
             set_member(o, "scope_from", cJSON_CreateString(from)) && set_member(o, "scopes", list);
    if (!ok) {
        if (cJSON_GetObjectItem(o, "scopes") != list) cJSON_Delete(list);
        snprintf(err, errlen, "out of memory");
    }
    return ok ? 0 : -1;
}

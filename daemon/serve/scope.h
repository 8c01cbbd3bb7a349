/* scope.h - the scope a scoped query answers about: the leaderboard, best,
 * noise, status, the val_bpb-ordered list and the dashboard's first paint.
 *
 * val_bpb compares only within one dataset, budget and evaluation (a scope,
 * engine/spec.h). A query names it with ?dataset=, ?budget= (time:SECONDS,
 * SECONDS, SECONDSs, tokens:N or flops:N) and ?eval_tokens=; what it leaves out comes
 * from one rule, everywhere: the scope of the run that succeeded most
 * recently among those matching what it gave (serve --dataset pins the
 * dataset), else of the experiment submitted most recently among them, else
 * the spec's defaults. The latest result rather than the latest experiment:
 * a failure, a cancellation or a queued run says nothing about which results
 * a person is after, and its scope may have none. Every scoped reply names
 * the scope it used, how it was chosen, and every scope that has results, so
 * a person who asked the wrong question sees the right one. A dataset that
 * was never prepared, or a budget or evaluation no experiment used, is an
 * error that names the ones that exist. */
#ifndef NIGHTSHIFT_SCOPE_H
#define NIGHTSHIFT_SCOPE_H

#include <cjson/cJSON.h>

#include "daemon/shared/http.h"
#include "daemon/store/store.h"

#define SCOPE_LIST_MAX 50 /* scopes listed in a reply, the latest result first */

/* The scope of the query string query (may be NULL) into *sc and how it was
 * chosen into *from (a static string: "query" when it gave every part,
 * "latest_result", "latest_experiment" or "defaults"). pinned_dataset (serve
 * --dataset; NULL = none) stands in for a missing ?dataset=. Returns 0, or -1
 * with res set: 400 invalid_query for a malformed part, 404 unknown_dataset
 * or unknown_scope for one that names nothing, 500 for a store failure. */
int scope_from_query(store_t *store, const char *state_dir, const char *pinned_dataset,
                     const char *query, store_scope_t *sc, const char **from, http_response_t *res);

/* Add the scope to o: dataset, budget_kind, budget, eval_tokens, scope_from
 * (from) and scopes (store_scopes). Returns 0, or -1 with err (o may then
 * hold part of it). */
int scope_describe(store_t *store, cJSON *o, const store_scope_t *sc, const char *from, char *err,
                   size_t errlen);

#endif

/* api.h - the JSON HTTP API under /v1 (routes onto the store and the scheduler).
 *
 *   POST /v1/experiments               one spec or an array; 201 / 200 (duplicates);
 *                                      ?repeats=k queues seeds seed .. seed + k - 1 of each
 *   GET  /v1/experiments               ?status=&dataset=&order=&limit=&after=
 *   GET  /v1/experiments/{id}          spec, status, reason, result, metrics, progress
 *   GET  /v1/experiments/{id}/log      ?tail=BYTES, text/plain
 *   POST /v1/experiments/{id}/cancel
 *   GET  /v1/leaderboard               ?dataset=&budget=&eval_tokens=&limit= (one row per
 *                                      configuration)
 *   GET  /v1/best                      ?dataset=&budget=&eval_tokens=
 *   GET  /v1/noise                     ?dataset=&budget=&eval_tokens= (pooled seed-to-seed sd)
 *   GET  /v1/report                    ?dataset=&budget=&eval_tokens=&baseline=ID&format=json|md
 *                                      what the night did (report.h, report_doc.h)
 *   GET  /v1/status                    ?dataset=&budget=&eval_tokens= (for its noise)
 *
 * A scoped query's scope (dataset, budget "time:300" or "tokens:N", eval_tokens)
 * is what it names, the rest from the latest result (scope.h); its reply
 * names the scope and lists every scope with results. /v1/experiments ordered
 * by val_bpb is one scope's too.
 *   GET  /healthz
 *   GET  /v1/events                    ?after=N&limit= the event log (events.h)
 *   GET  /v1/events/stream             the same as Server-Sent Events
 *   GET  /v1/leaderboard?format=csv    the leaderboard as CSV
 *   GET  /  and /ui/...                the dashboard (daemon/serve/web, compiled in; the
 *                                      page carries its first paint's answers inline)
 *   GET  /report                       the night report as a page (the scope's query, &baseline=)
 *   GET  /metrics                      Prometheus' text format (metrics.h)
 *   POST /mcp                          the MCP endpoint (mcp_http.h; routed by serve.c)
 *
 * Errors are {"error":{"code":...,"message":...}}. Every request passes
 * api_guard first: the Host, Origin and Content-Type rules of
 * daemon/shared/origin.h (421, 403, 415), then the token: with one
 * configured, every request that may change state (POST) needs
 * `Authorization: Bearer TOKEN` (401 otherwise), and with guard_reads (a
 * daemon listening off loopback) every GET but /healthz too. */
#ifndef NIGHTSHIFT_API_H
#define NIGHTSHIFT_API_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/shared/http.h"
#include "daemon/core/core.h"
#include "daemon/serve/api_routes.h"
#include "daemon/exec/sched.h"
#include "daemon/serve/export.h"
#include "daemon/serve/report_lane.h"
#include "daemon/store/store.h"

typedef struct {
    uv_loop_t *loop; /* the daemon's (exports run their pages off it); NULL = no exports */
    store_t *store;
    sched_t *sched;
    const char *state_dir;
    const char *token;                  /* NULL = no token required */
    const struct origin_policy *origin; /* the Host and Origin rules (origin.h); NULL = none */
    int guard_reads;                    /* the token guards GETs too (all but /healthz) */
    const char *default_dataset;        /* pins the scoped queries' dataset; NULL = none */
    double started_at;                  /* util_now() at startup */
    struct events_hub *events;          /* the SSE hub (events.h); NULL = no stream */
    core_t *core;                       /* the daemon's rules: submissions (core.h) */
    /* The last leaderboard replies by query string, good while store_finishes
     * stays where it was (a run finishing is the only change the daemon makes
     * to them); owned here, freed by api_close. */
    struct api_cached_reply {
        char *query, *body;
        size_t len;
        const char *content_type;
        uint64_t finishes;
    } leaderboard_cache[4];
    unsigned leaderboard_cache_next; /* the entry to replace next */
    struct export_lane exports;      /* the exports streaming now (export.h) */
    struct report_lane reports;      /* the reports being built (report_lane.h) */
    struct metrics *metrics;         /* GET /metrics (metrics.h); NULL = not served */
} api_t;

/* Free what the API holds (its cached replies). */
void api_close(api_t *a);

/* The http_handler_fn of the daemon; user is an api_t. */
void api_handle(const http_request_t *req, http_response_t *res, void *user);

/* Whether req carries the daemon's token (always, when it has none). */
int api_authorized(const api_t *a, const http_request_t *req);

/* The gate in front of every route, and of any other front the daemon
 * serves over HTTP (call it before anything else): the Host, Origin and
 * Content-Type checks (origin.h), then the token. Returns 0 when req may go
 * on, else the status with res holding the refusal. */
int api_guard(const api_t *a, const http_request_t *req, http_response_t *res);

/* The http_authorize_fn of the daemon: api_guard, run as soon as a
 * request's headers are in (before its body is read). */
int api_authorize(const http_request_t *req, http_response_t *res, void *user);

#endif

/* api_routes.h - the routes of the daemon's port by path template: the
 * router (api.c) dispatches on them, and GET /metrics (metrics.c) counts
 * requests by them. */
#ifndef NIGHTSHIFT_API_ROUTES_H
#define NIGHTSHIFT_API_ROUTES_H

#include <stdint.h>

/* The routes of the daemon's port, by path template: the router dispatches
 * on them and GET /metrics counts requests by them (a path with an id is
 * one route, so ids do not make new series). API_ROUTES(X): X(enum suffix,
 * template). */
#define API_ROUTES(X)                                                                              \
    X(HEALTHZ, "/healthz")                                                                         \
    X(STATUS, "/v1/status")                                                                        \
    X(EXPERIMENTS, "/v1/experiments")                                                              \
    X(EXPERIMENT, "/v1/experiments/{id}")                                                          \
    X(EXPERIMENT_LOG, "/v1/experiments/{id}/log")                                                  \
    X(EXPERIMENT_CANCEL, "/v1/experiments/{id}/cancel")                                            \
    X(COST, "/v1/cost")                                                                            \
    X(DATASETS, "/v1/datasets")                                                                    \
    X(LEADERBOARD, "/v1/leaderboard")                                                              \
    X(BEST, "/v1/best")                                                                            \
    X(NOISE, "/v1/noise")                                                                          \
    X(REPORT, "/v1/report")                                                                        \
    X(EVENTS, "/v1/events")                                                                        \
    X(EVENTS_STREAM, "/v1/events/stream")                                                          \
    X(EXPORT, "/v1/export")                                                                        \
    X(REPORT_PAGE, "/report")                                                                      \
    X(PAGE, "/")                                                                                   \
    X(UI, "/ui/{file}")                                                                            \
    X(METRICS, "/metrics")                                                                         \
    X(MCP, "/mcp")                                                                                 \
    X(OTHER, "other") /* any other path, and a request whose path was never read */

typedef enum {
#define API_ROUTE_ENUM(name, tmpl) API_ROUTE_##name,
    API_ROUTES(API_ROUTE_ENUM)
#undef API_ROUTE_ENUM
        API_N_ROUTES
} api_route_t;

/* The route of path (NULL: API_ROUTE_OTHER); *id (may be NULL) gets the
 * experiment id of the /v1/experiments/{id} routes. */
api_route_t api_route(const char *path, int64_t *id);

/* The template of route r ("/v1/experiments/{id}"); static. */
const char *api_route_template(api_route_t r);

#endif

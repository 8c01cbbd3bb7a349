/* report_lane.h - GET /v1/report and /report answered off the loop.
 *
 * A report reads every run of its scope: at 100,000 experiments that is
 * seconds of SQLite and cJSON, and on the loop it held the API, the
 * scheduler and every event stream for all of it. Here each report is built
 * on libuv's thread pool, on a read-only connection of its own
 * (store_open_reader), one at a time for the whole daemon (the lane, as
 * exports have theirs: a report takes at most one core from the loop,
 * whatever the number asked for, at a lower priority), and its answer is
 * sent from the loop when it is done (http_defer). At most
 * REPORT_MAX_QUEUED reports are waiting or being built; more get 503. A
 * client that goes away before its turn leaves the queue; one that goes
 * away while its report is built is not answered. The memory a report took
 * is handed back to the system after it (malloc_trim), so the daemon's
 * resident size falls back after a report of a large night. */
#ifndef NIGHTSHIFT_REPORT_LANE_H
#define NIGHTSHIFT_REPORT_LANE_H

#include <stdint.h>
#include <uv.h>

#include "daemon/shared/http.h"
#include "daemon/store/store.h"

#define REPORT_MAX_QUEUED 4 /* reports waiting or being built; more get 503 */

typedef enum { REPORT_JSON, REPORT_MARKDOWN, REPORT_HTML } report_format_t;

/* What one report answers: the scope's query string, the baseline id (0:
 * the default) and the format; state_dir and pinned_dataset as for
 * scope_from_query (borrowed: they outlive the lane). */
typedef struct {
    const char *state_dir;
    const char *pinned_dataset;
    const char *query;
    int64_t baseline;
    report_format_t fmt;
} report_ask_t;

/* The whole answer of ask from store into res (synchronously, on the calling
 * thread): 200 with the report in ask's format, or the error envelope (400
 * for a malformed scope, 404 for a scope or baseline that names nothing, 500
 * for a store failure). */
void report_answer(store_t *store, const report_ask_t *ask, http_response_t *res);

/* The reports of one daemon. Zeroed by its owner, which keeps it until the
 * loop has ended. */
typedef struct report_lane {
    int queued;                      /* reports waiting or being built */
    int busy;                        /* one is on the thread pool */
    struct report_job *first, *last; /* waiting for the lane, in order */
} report_lane_t;

/* From the handler of req: build ask's report off the loop and answer req
 * with it once built (http_defer); res is an error when refused
 * (REPORT_MAX_QUEUED already queued, out of memory). */
void report_lane_answer(report_lane_t *lane, uv_loop_t *loop, store_t *store,
                        const report_ask_t *ask, const http_request_t *req, http_response_t *res);

#endif

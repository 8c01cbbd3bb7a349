/* report_lane.c - reports built on the thread pool (see report_lane.h).
 *
 * Life of a report: report_lane_answer copies what the request asks, defers
 * the answer and queues the job; when the lane is free the job goes to the
 * thread pool (report_work: a connection of its own, the report, its text),
 * and report_done, on the loop, sends the answer, gives the lane to the next
 * job and frees this one. A job whose client goes away while it waits leaves
 * the queue and is freed at once; one whose client goes away on the pool is
 * freed when it comes back. */
#include "daemon/serve/report_lane.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "daemon/serve/report.h"
#include "daemon/serve/report_doc.h"
#include "daemon/serve/scope.h"
#include "daemon/shared/log.h"
#include "engine/util.h"

#define REPORT_NICE 10 /* the nice value of a report's pool thread, as an export's */

static void reply_text(http_response_t *res, char *text, const char *content_type) {
    if (!text) {
        http_error(res, 500, "internal", "out of memory");
        return;
    }
    res->status = 200;
    res->content_type = content_type;
    res->body = text;
    res->body_len = strlen(text);
}

void report_answer(store_t *store, const report_ask_t *ask, http_response_t *res) {
    char err[256];
    store_scope_t sc;
    const char *from;
    int code = 0;
    if (scope_from_query(store, ask->state_dir, ask->pinned_dataset, ask->query, &sc, &from, res) <
        0)
        return;
    cJSON *o = report_build(store, &sc, ask->baseline, &code, err, sizeof err);
    if (!o) {
        if (code == NS_ERR_NOT_FOUND) {
            http_error(res, 404, "not_found", "%s", err);
        } else {
            log_error("api: store: %s", err);
            http_error(res, 500, "store_error", "%s", err);
        }
        return;
    }
    if (scope_describe(store, o, &sc, from, err, sizeof err) < 0) {
        cJSON_Delete(o);
        log_error("api: store: %s", err);
        http_error(res, 500, "store_error", "%s", err);
        return;
    }
    switch (ask->fmt) {
    case REPORT_JSON:
        reply_text(res, util_json_print(o, 0), "application/json");
        break;
    case REPORT_MARKDOWN:
        reply_text(res, report_markdown(o), "text/markdown; charset=utf-8");
        break;
    case REPORT_HTML:
        reply_text(res, report_html(o), "text/html; charset=utf-8");
        break;
    }
    cJSON_Delete(o);
}

/* ------------------------------------------------------------- the lane */

typedef struct report_job {
    report_lane_t *lane;
    uv_loop_t *loop;
    uv_work_t work;
    store_t *store;    /* the daemon's: the reader is opened from its path */
    http_stream_t *st; /* NULL once the client is gone */
    report_ask_t ask;  /* ask.query is the job's own copy */
    http_response_t res;
    struct report_job *next_waiting;
    int waiting; /* in the lane's queue */
} report_job_t;

static void job_free(report_job_t *j) {
    j->lane->queued--;
    free(j->res.body);
    free((char *)j->ask.query);
    free(j);
}

/* On the thread pool: the report on a connection of its own, then the
 * memory it took back to the system. */
static void report_work(uv_work_t *w) {
    report_job_t *j = w->data;
    char err[256];
    store_t *reader = NULL;
    setpriority(PRIO_PROCESS, (id_t)gettid(), REPORT_NICE); /* Linux: per thread */
    if (store_open_reader(j->store, &reader, err, sizeof err) < 0)
        http_error(&j->res, 500, "store_error", "%s", err);
    else
        report_answer(reader, &j->ask, &j->res);
    store_close(reader);
    malloc_trim(0);
}

static void report_done(uv_work_t *w, int status);

/* Give the lane to the next job waiting for it, if the lane is free. */
static void lane_next(report_lane_t *lane) {
    while (!lane->busy && lane->first) {
        report_job_t *j = lane->first;
        lane->first = j->next_waiting;
        if (!lane->first) lane->last = NULL;
        j->waiting = 0;
        if (uv_queue_work(j->loop, &j->work, report_work, report_done) == 0) {
            lane->busy = 1;
            return;
        }
        log_error("report: cannot queue work on the thread pool");
        http_error(&j->res, 503, "unavailable", "the report cannot be built now");
        http_deferred_reply(j->st, &j->res);
        job_free(j);
    }
}

static void report_done(uv_work_t *w, int status) {
    report_job_t *j = w->data;
    report_lane_t *lane = j->lane;
    lane->busy = 0;
    if (j->st) {
        if (status < 0) http_error(&j->res, 503, "unavailable", "%s", uv_strerror(status));
        http_deferred_reply(j->st, &j->res);
    }
    job_free(j);
    lane_next(lane);
}

/* The client went away: a waiting job leaves the queue and is freed; one on
 * the pool is freed when it comes back. */
static void client_gone(http_stream_t *st, void *arg) {
    report_job_t *j = arg;
    report_lane_t *lane = j->lane;
    (void)st;
    j->st = NULL;
    if (!j->waiting) return;
    report_job_t **p = &lane->first, *prev = NULL;
    while (*p && *p != j) prev = *p, p = &(*p)->next_waiting;
    if (*p) *p = j->next_waiting;
    if (lane->last == j) lane->last = prev;
    job_free(j);
}

void report_lane_answer(report_lane_t *lane, uv_loop_t *loop, store_t *store,
                        const report_ask_t *ask, const http_request_t *req, http_response_t *res) {
    if (lane->queued >= REPORT_MAX_QUEUED) {
        http_error(res, 503, "too_many_reports",
                   "at most %d reports are built or waiting at once; try again shortly",
                   REPORT_MAX_QUEUED);
        return;
    }
    report_job_t *j = calloc(1, sizeof *j);
    char *query = strdup(ask->query ? ask->query : "");
    if (!j || !query) {
        free(j);
        free(query);
        http_error(res, 503, "unavailable", "out of memory");
        return;
    }
    j->lane = lane;
    j->loop = loop;
    j->store = store;
    j->ask = *ask;
    j->ask.query = query;
    j->work.data = j;
    if (!(j->st = http_defer(req, res, client_gone, j))) {
        free(query);
        free(j);
        return;
    }
    lane->queued++;
    j->waiting = 1;
    if (lane->last)
        lane->last->next_waiting = j;
    else
        lane->first = j;
    lane->last = j;
    lane_next(lane);
}

/* events.c - the event log (see events.h): the events table on the store's
 * connection, and the hub that streams it to SSE clients from one timer on
 * the loop. */
#include "daemon/serve/events.h"

#include <errno.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/shared/bytebuf.h"
#include "daemon/shared/log.h"
#include "engine/util.h"

/* ------------------------------------------------------------ the table */

static int fail_db(sqlite3 *db, char *err, size_t errlen, const char *op) {
    snprintf(err, errlen, "events: %s: %s", op, sqlite3_errmsg(db));
    return -1;
}

/* Prepare sql on the store's connection; NULL with err. */
static sqlite3_stmt *prepare(store_t *s, const char *sql, const char *op, char *err,
                             size_t errlen) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(store_db(s), sql, -1, &st, NULL) != SQLITE_OK) {
        fail_db(store_db(s), err, errlen, op);
        sqlite3_finalize(st);
        return NULL;
    }
    return st;
}

/* Step a statement that returns no rows and finalize it. */
static int step_done(store_t *s, sqlite3_stmt *st, const char *op, char *err, size_t errlen) {
    int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : fail_db(store_db(s), err, errlen, op);
    sqlite3_finalize(st);
    return rc;
}

int events_add(store_t *s, const char *type, int64_t experiment_id, const char *payload_json,
               int64_t *id, char *err, size_t errlen) {
    sqlite3_stmt *st = prepare(s,
                               "INSERT INTO events (type, experiment_id, payload)"
                               " VALUES (?1, ?2, coalesce(?3, '{}'))",
                               "add", err, errlen);
    if (!st) return -1;
    sqlite3_bind_text(st, 1, type, -1, SQLITE_STATIC);
    if (experiment_id > 0)
        sqlite3_bind_int64(st, 2, experiment_id);
    else
        sqlite3_bind_null(st, 2);
    if (payload_json)
        sqlite3_bind_text(st, 3, payload_json, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 3);
    if (step_done(s, st, "add", err, errlen) < 0) return -1;
    if (id) *id = sqlite3_last_insert_rowid(store_db(s));
    return 0;
}

int events_ensure_finished(store_t *s, int64_t experiment_id, char *err, size_t errlen) {
    /* The payload as the trigger writes it (schema/006_events.sql). */
    sqlite3_stmt *st = prepare(
        s,
        "INSERT INTO events (type, experiment_id, payload)"
        " SELECT 'experiment.finished', e.id, json_object('experiment', json_object('id', e.id,"
        " 'name', e.name, 'status', e.status, 'reason', e.reason))"
        " FROM experiments e WHERE e.id = ?1 AND NOT EXISTS (SELECT 1 FROM events"
        " WHERE experiment_id = ?1 AND type = 'experiment.finished')",
        "ensure", err, errlen);
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, experiment_id);
    if (step_done(s, st, "ensure", err, errlen) < 0) return -1;
    return sqlite3_changes(store_db(s)) > 0;
}

/* Column i as parsed JSON (an object), or an empty object. */
static cJSON *column_json(sqlite3_stmt *st, int i) {
    const char *text = (const char *)sqlite3_column_text(st, i);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        j = cJSON_CreateObject();
    }
    return j;
}

cJSON *events_pending(store_t *s, int64_t after, int64_t experiment_id, int limit, char *err,
                      size_t errlen) {
    sqlite3_stmt *st = prepare(s,
                               "SELECT id, type, webhook_id, coalesce(experiment_id, 0), payload,"
                               " body, attempts FROM events WHERE state = 'pending' AND id > ?1"
                               " AND (?3 = 0 OR experiment_id = ?3) ORDER BY id LIMIT ?2",
                               "pending", err, errlen);
    if (!st) return NULL;
    sqlite3_bind_int64(st, 1, after);
    sqlite3_bind_int(st, 2, limit);
    sqlite3_bind_int64(st, 3, experiment_id);
    cJSON *arr = cJSON_CreateArray();
    int rc;
    while (arr && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, o);
        cJSON_AddNumberToObject(o, "id", (double)sqlite3_column_int64(st, 0));
        cJSON_AddStringToObject(o, "type", (const char *)sqlite3_column_text(st, 1));
        cJSON_AddStringToObject(o, "webhook_id", (const char *)sqlite3_column_text(st, 2));
        cJSON_AddNumberToObject(o, "experiment_id", (double)sqlite3_column_int64(st, 3));
        cJSON_AddItemToObject(o, "payload", column_json(st, 4));
        const char *body = (const char *)sqlite3_column_text(st, 5);
        if (body)
            cJSON_AddStringToObject(o, "body", body);
        else
            cJSON_AddNullToObject(o, "body");
        cJSON_AddNumberToObject(o, "attempts", sqlite3_column_int(st, 6));
    }
    if (!arr || rc != SQLITE_DONE) {
        if (arr)
            fail_db(store_db(s), err, errlen, "pending");
        else
            snprintf(err, errlen, "events: out of memory");
        cJSON_Delete(arr);
        arr = NULL;
    }
    sqlite3_finalize(st);
    return arr;
}

int events_set_body(store_t *s, int64_t id, const char *body, char *err, size_t errlen) {
    sqlite3_stmt *st = prepare(s, "UPDATE events SET body = ?2 WHERE id = ?1", "body", err, errlen);
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, body, -1, SQLITE_STATIC);
    return step_done(s, st, "body", err, errlen);
}

int events_attempted(store_t *s, int64_t id, char *err, size_t errlen) {
    sqlite3_stmt *st = prepare(s, "UPDATE events SET attempts = attempts + 1 WHERE id = ?1",
                               "attempt", err, errlen);
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, id);
    return step_done(s, st, "attempt", err, errlen);
}

int events_mark(store_t *s, int64_t id, const char *state, char *err, size_t errlen) {
    sqlite3_stmt *st = prepare(s,
                               "UPDATE events SET state = ?2, delivered = CASE WHEN ?2 ="
                               " 'delivered' THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now') END"
                               " WHERE id = ?1",
                               "mark", err, errlen);
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, state, -1, SQLITE_STATIC);
    return step_done(s, st, "mark", err, errlen);
}

cJSON *events_list(store_t *s, int64_t after, int limit, char *err, size_t errlen) {
    sqlite3_stmt *st = prepare(s,
                               "SELECT v.id, v.type, v.created, v.webhook_id, v.state, v.payload,"
                               " r.val_bpb, v.experiment_id FROM events v LEFT JOIN results r"
                               " ON r.experiment_id = v.experiment_id WHERE v.id > ?1"
                               " ORDER BY v.id LIMIT ?2",
                               "list", err, errlen);
    if (!st) return NULL;
    sqlite3_bind_int64(st, 1, after);
    sqlite3_bind_int(st, 2, limit);
    cJSON *arr = cJSON_CreateArray();
    int rc;
    while (arr && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, o);
        cJSON_AddNumberToObject(o, "id", (double)sqlite3_column_int64(st, 0));
        cJSON_AddStringToObject(o, "type", (const char *)sqlite3_column_text(st, 1));
        cJSON_AddStringToObject(o, "created", (const char *)sqlite3_column_text(st, 2));
        cJSON_AddStringToObject(o, "webhook_id", (const char *)sqlite3_column_text(st, 3));
        cJSON_AddStringToObject(o, "state", (const char *)sqlite3_column_text(st, 4));
        cJSON *payload = column_json(st, 5);
        /* the payload's members follow the fixed ones (which win on a clash) */
        while (payload->child) {
            cJSON *item = cJSON_DetachItemViaPointer(payload, payload->child);
            if (cJSON_GetObjectItemCaseSensitive(o, item->string))
                cJSON_Delete(item);
            else
                cJSON_AddItemToObject(o, item->string, item);
        }
        cJSON_Delete(payload);
        cJSON *exp = cJSON_GetObjectItemCaseSensitive(o, "experiment");
        if (cJSON_IsObject(exp) && !cJSON_GetObjectItemCaseSensitive(exp, "val_bpb")) {
            if (sqlite3_column_type(st, 6) == SQLITE_NULL)
                cJSON_AddNullToObject(exp, "val_bpb");
            else
                cJSON_AddNumberToObject(exp, "val_bpb", sqlite3_column_double(st, 6));
        }
    }
    if (!arr || rc != SQLITE_DONE) {
        if (arr)
            fail_db(store_db(s), err, errlen, "list");
        else
            snprintf(err, errlen, "events: out of memory");
        cJSON_Delete(arr);
        arr = NULL;
    }
    sqlite3_finalize(st);
    return arr;
}

int64_t events_last_id(store_t *s, char *err, size_t errlen) {
    sqlite3_stmt *st = prepare(s, "SELECT coalesce(max(id), 0) FROM events", "last", err, errlen);
    if (!st) return -1;
    int64_t v = -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    else
        fail_db(store_db(s), err, errlen, "last");
    sqlite3_finalize(st);
    return v;
}

/* ----------------------------------------------------------- the stream */

typedef struct client client_t;
struct client {
    events_hub_t *hub;
    http_stream_t *st;
    int64_t cursor; /* the last event id sent */
    int status;     /* wants the status snapshot every tick */
    client_t *prev, *next;
};

struct events_hub {
    uv_loop_t *loop;
    store_t *store;
    sched_t *sched;
    uv_timer_t tick;
    client_t *clients;
    int nclients;
    uint64_t last_beat_ms; /* uv_now of the last heartbeat */
    int closing;
};

static void client_closed_cb(http_stream_t *st, void *arg) {
    client_t *c = arg;
    events_hub_t *h = c->hub;
    (void)st;
    if (c->prev)
        c->prev->next = c->next;
    else
        h->clients = c->next;
    if (c->next) c->next->prev = c->prev;
    h->nclients--;
    free(c);
}

/* Append the SSE messages of the events after c->cursor (at most
 * EVENTS_BACKLOG_LIMIT) to text; advances c->cursor. Returns 0, or -1 on a
 * store error or out of memory. */
static int append_events(events_hub_t *h, client_t *c, bytebuf_t *text) {
    char err[256];
    cJSON *arr = events_list(h->store, c->cursor, EVENTS_BACKLOG_LIMIT, err, sizeof err);
    if (!arr) {
        log_error("events: stream: %s", err);
        return -1;
    }
    int rc = 0;
    for (cJSON *o = arr->child; o && rc == 0; o = o->next) {
        char *data = util_json_print(o, 0);
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "type"));
        int64_t id = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "id"));
        if (!data || bytebuf_printf(text, "id: %" PRId64 "\nevent: %s\ndata: %s\n\n", id,
                                    type ? type : "event", data) < 0)
            rc = -1;
        else
            c->cursor = id;
        cJSON_free(data);
    }
    cJSON_Delete(arr);
    return rc;
}

/* The status snapshot as one SSE message (malloc'd), or NULL. */
static char *status_message(events_hub_t *h) {
    char err[256];
    int64_t depth = store_queue_depth(h->store, err, sizeof err);
    if (depth < 0) {
        log_error("events: status: %s", err);
        return NULL;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "queue_depth", (double)depth);
    cJSON_AddNumberToObject(o, "running", h->sched ? sched_running(h->sched) : 0);
    cJSON_AddItemToObject(o, "slots", h->sched ? sched_status(h->sched) : cJSON_CreateArray());
    char *data = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!data) return NULL;
    size_t n = strlen(data) + 32;
    char *msg = malloc(n);
    if (msg) snprintf(msg, n, "event: status\ndata: %s\n\n", data);
    cJSON_free(data);
    return msg;
}

/* Send c what it has not seen; a client that cannot take it is dropped. */
static void client_send(events_hub_t *h, client_t *c, const char *status, int beat) {
    bytebuf_t text;
    bytebuf_init(&text, BYTEBUF_UNLIMITED);
    int rc = append_events(h, c, &text);
    if (rc == 0 && text.len) rc = http_stream_write(c->st, text.data, text.len);
    if (rc == 0 && status && c->status) rc = http_stream_write(c->st, status, strlen(status));
    if (rc == 0 && beat) rc = http_stream_write(c->st, ": hb\n\n", 6);
    bytebuf_free(&text);
    if (rc < 0) {
        log_warn("events: dropping a stream client that does not keep up");
        http_stream_end(c->st); /* client_closed_cb frees c */
    }
}

static void tick_cb(uv_timer_t *t) {
    events_hub_t *h = t->data;
    if (!h->clients) return;
    char err[256];
    int64_t last = events_last_id(h->store, err, sizeof err);
    if (last < 0) log_error("events: %s", err);
    int want_status = 0;
    for (client_t *c = h->clients; c; c = c->next) want_status |= c->status;
    char *status = want_status ? status_message(h) : NULL;
    uint64_t now = uv_now(h->loop);
    int beat = now - h->last_beat_ms >= EVENTS_HEARTBEAT_S * 1000;
    if (beat) h->last_beat_ms = now;
    client_t *next;
    for (client_t *c = h->clients; c; c = next) {
        next = c->next; /* c may be freed */
        if (last > c->cursor || (status && c->status) || beat) client_send(h, c, status, beat);
    }
    free(status);
}

static void hub_closed_cb(uv_handle_t *handle) {
    free(handle->data);
}

events_hub_t *events_hub_new(uv_loop_t *loop, store_t *store, sched_t *sched) {
    events_hub_t *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->loop = loop;
    h->store = store;
    h->sched = sched;
    uv_timer_init(loop, &h->tick);
    h->tick.data = h;
    h->last_beat_ms = uv_now(loop);
    uv_timer_start(&h->tick, tick_cb, EVENTS_TICK_MS, EVENTS_TICK_MS);
    return h;
}

/* A non-negative integer, or -1. */
static int64_t parse_id(const char *s) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < 0) return -1;
    return v;
}

void events_hub_stream(events_hub_t *hub, const http_request_t *req, http_response_t *res) {
    char buf[32], err[256];
    if (!hub || hub->closing) {
        http_error(res, 503, "unavailable", "the event stream is not available");
        return;
    }
    if (hub->nclients >= EVENTS_MAX_CLIENTS) {
        http_error(res, 503, "too_many_streams", "at most %d event streams at once",
                   EVENTS_MAX_CLIENTS);
        return;
    }
    int64_t cursor = -1;
    if (req->last_event_id && *req->last_event_id) {
        cursor = parse_id(req->last_event_id);
        if (cursor < 0) {
            http_error(res, 400, "invalid_header", "Last-Event-ID: expected an event id");
            return;
        }
    } else if (http_query_get(req->query, "after", buf, sizeof buf) != 0) {
        cursor = parse_id(buf);
        if (cursor < 0) {
            http_error(res, 400, "invalid_query", "after: expected an event id");
            return;
        }
    } else {
        cursor = events_last_id(hub->store, err, sizeof err);
        if (cursor < 0) {
            http_error(res, 500, "store_error", "%s", err);
            return;
        }
    }
    client_t *c = calloc(1, sizeof *c);
    if (!c) {
        http_error(res, 503, "unavailable", "out of memory");
        return;
    }
    c->hub = hub;
    c->cursor = cursor;
    c->status = http_query_get(req->query, "status", buf, sizeof buf) == 1 && strcmp(buf, "0");
    /* The backlog goes out with the head, so a reconnect resumes at once. */
    bytebuf_t text;
    bytebuf_init(&text, BYTEBUF_UNLIMITED);
    if (bytebuf_puts(&text, "retry: 2000\n\n") < 0 || append_events(hub, c, &text) < 0) goto oom;
    if (c->status) {
        char *status = status_message(hub);
        if (status) bytebuf_puts(&text, status); /* the stream opens without it if it fails */
        free(status);
    }
    c->st =
        http_stream_open(req, res, "text/event-stream", text.data, text.len, client_closed_cb, c);
    bytebuf_free(&text);
    if (!c->st) {
        free(c);
        return;
    }
    c->next = hub->clients;
    if (hub->clients) hub->clients->prev = c;
    hub->clients = c;
    hub->nclients++;
    return;
oom:
    bytebuf_free(&text);
    free(c);
    http_error(res, 503, "unavailable", "out of memory");
}

int events_hub_clients(const events_hub_t *hub) {
    return hub ? hub->nclients : 0;
}

void events_hub_close(events_hub_t *hub) {
    if (!hub || hub->closing) return;
    hub->closing = 1;
    while (hub->clients) http_stream_end(hub->clients->st); /* unlinks and frees it */
    uv_close((uv_handle_t *)&hub->tick, hub_closed_cb);
}

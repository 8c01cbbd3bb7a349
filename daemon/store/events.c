/* events.c - the event log (schema/006_events.sql): the outbox the webhook
 * delivers from, the feed of GET /v1/events, and the record of each hook
 * delivery. */
#define STORE_PART STORE_PART_EVENTS
#include "daemon/store/store_db.h"

enum {
    ST_EVENT_ADD,
    ST_EVENT_ENSURE_FINISHED,
    ST_EVENTS_PENDING,
    ST_EVENT_SET_BODY,
    ST_EVENT_ATTEMPTED,
    ST_EVENT_MARK,
    ST_EVENTS_LIST,
    ST_EVENTS_LAST_ID,
    ST_INSERT_DELIVERY,
    ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
    /* The event log (schema/006_events.sql). */
    [ST_EVENT_ADD] = "INSERT INTO events (type, experiment_id, payload)"
                     " VALUES (?1, ?2, coalesce(?3, '{}'))",
    /* The payload as the trigger writes it (schema/006_events.sql). */
    [ST_EVENT_ENSURE_FINISHED] =
        "INSERT INTO events (type, experiment_id, payload)"
        " SELECT 'experiment.finished', e.id, json_object('experiment', json_object('id', e.id,"
        " 'name', e.name, 'status', e.status, 'reason', e.reason))"
        " FROM experiments e WHERE e.id = ?1 AND NOT EXISTS (SELECT 1 FROM events"
        " WHERE experiment_id = ?1 AND type = 'experiment.finished')",
    [ST_EVENTS_PENDING] = "SELECT id, type, webhook_id, coalesce(experiment_id, 0), payload,"
                          " body, attempts FROM events WHERE state = 'pending' AND id > ?1"
                          " AND (?3 = 0 OR experiment_id = ?3) ORDER BY id LIMIT ?2",
    [ST_EVENT_SET_BODY] = "UPDATE events SET body = ?2 WHERE id = ?1",
    [ST_EVENT_ATTEMPTED] = "UPDATE events SET attempts = attempts + 1 WHERE id = ?1",
    [ST_EVENT_MARK] = "UPDATE events SET state = ?2, delivered = CASE WHEN ?2 ="
                      " 'delivered' THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now') END"
                      " WHERE id = ?1",
    [ST_EVENTS_LIST] = "SELECT v.id, v.type, v.created, v.webhook_id, v.state, v.payload,"
                       " r.val_bpb, v.experiment_id FROM events v LEFT JOIN results r"
                       " ON r.experiment_id = v.experiment_id WHERE v.id > ?1"
                       " ORDER BY v.id LIMIT ?2",
    [ST_EVENTS_LAST_ID] = "SELECT coalesce(max(id), 0) FROM events",
    [ST_INSERT_DELIVERY] = "INSERT INTO hook_deliveries (event_id, event_type, attempt,"
                           " http_status, latency_ms, error, created)"
                           " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
};
_Static_assert(ST_COUNT <= STORE_PART_MAX, "store_db.h's STORE_PART_MAX");

const store_part_t store_events_part = {"events", stmt_sql, ST_COUNT};

int store_event_add(store_t *s, const char *type, int64_t experiment_id, const char *payload_json,
                    int64_t *id, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[STORE_PART][ST_EVENT_ADD];
    int b = bind_text(st, 1, type);
    b |= experiment_id > 0 ? sqlite3_bind_int64(st, 2, experiment_id) : sqlite3_bind_null(st, 2);
    b |= bind_text(st, 3, payload_json);
    if (b) {
        reset(st);
        return fail_db(s->db, err, errlen, "event");
    }
    if (run(s, ST_EVENT_ADD, "event", err, errlen) < 0) return -1;
    if (id) *id = sqlite3_last_insert_rowid(s->db);
    return 0;
}

int store_event_ensure_finished(store_t *s, int64_t experiment_id, char *err, size_t errlen) {
    sqlite3_bind_int64(s->st[STORE_PART][ST_EVENT_ENSURE_FINISHED], 1, experiment_id);
    if (run(s, ST_EVENT_ENSURE_FINISHED, "finished event", err, errlen) < 0) return -1;
    return sqlite3_changes(s->db) > 0;
}

/* Column i (JSON object text) parsed, or an empty object; NULL when out of
 * memory. */
static cJSON *column_object(sqlite3_stmt *st, int i) {
    const char *text = (const char *)sqlite3_column_text(st, i);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        j = cJSON_CreateObject();
    }
    return j;
}

/* The outbox row of ST_EVENTS_PENDING as hook.c reads it. */
static cJSON *pending_row(sqlite3_stmt *st) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", (double)sqlite3_column_int64(st, 0));
    cJSON_AddStringToObject(o, "type", (const char *)sqlite3_column_text(st, 1));
    cJSON_AddStringToObject(o, "webhook_id", (const char *)sqlite3_column_text(st, 2));
    cJSON_AddNumberToObject(o, "experiment_id", (double)sqlite3_column_int64(st, 3));
    cJSON_AddItemToObject(o, "payload", column_object(st, 4));
    const char *body = (const char *)sqlite3_column_text(st, 5);
    if (body)
        cJSON_AddStringToObject(o, "body", body);
    else
        cJSON_AddNullToObject(o, "body");
    cJSON_AddNumberToObject(o, "attempts", sqlite3_column_int(st, 6));
    return o;
}

/* A feed item of ST_EVENTS_LIST: the fixed members, then the payload's (the
 * fixed ones win a clash), and the experiment's val_bpb when the payload
 * names an experiment without one. */
static cJSON *feed_row(sqlite3_stmt *st) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", (double)sqlite3_column_int64(st, 0));
    cJSON_AddStringToObject(o, "type", (const char *)sqlite3_column_text(st, 1));
    cJSON_AddStringToObject(o, "created", (const char *)sqlite3_column_text(st, 2));
    cJSON_AddStringToObject(o, "webhook_id", (const char *)sqlite3_column_text(st, 3));
    cJSON_AddStringToObject(o, "state", (const char *)sqlite3_column_text(st, 4));
    cJSON *payload = column_object(st, 5);
    while (payload && payload->child) {
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
    return o;
}

/* Every remaining row of st through make as an array; st is reset either
 * way. The caller owns the array; NULL with err on failure. */
static cJSON *rows_made(store_t *s, sqlite3_stmt *st, cJSON *(*make)(sqlite3_stmt *),
                        const char *op, char *err, size_t errlen) {
    cJSON *arr = cJSON_CreateArray();
    int rc = SQLITE_NOMEM;
    while (arr && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        cJSON *o = make(st);
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            rc = SQLITE_NOMEM;
            break;
        }
    }
    if (rc != SQLITE_DONE) {
        if (rc == SQLITE_NOMEM)
            fail(err, errlen, "store: %s: out of memory", op);
        else
            fail_db(s->db, err, errlen, op);
        cJSON_Delete(arr);
        arr = NULL;
    }
    reset(st);
    return arr;
}

cJSON *store_events_pending(store_t *s, int64_t after, int64_t experiment_id, int limit, char *err,
                            size_t errlen) {
    sqlite3_stmt *st = s->st[STORE_PART][ST_EVENTS_PENDING];
    sqlite3_bind_int64(st, 1, after);
    sqlite3_bind_int(st, 2, limit);
    sqlite3_bind_int64(st, 3, experiment_id);
    return rows_made(s, st, pending_row, "pending events", err, errlen);
}

int store_event_set_body(store_t *s, int64_t id, const char *body, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[STORE_PART][ST_EVENT_SET_BODY];
    sqlite3_bind_int64(st, 1, id);
    bind_text(st, 2, body);
    return run(s, ST_EVENT_SET_BODY, "event body", err, errlen);
}

int store_event_attempted(store_t *s, int64_t id, char *err, size_t errlen) {
    sqlite3_bind_int64(s->st[STORE_PART][ST_EVENT_ATTEMPTED], 1, id);
    return run(s, ST_EVENT_ATTEMPTED, "event attempt", err, errlen);
}

int store_event_mark(store_t *s, int64_t id, const char *state, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[STORE_PART][ST_EVENT_MARK];
    sqlite3_bind_int64(st, 1, id);
    bind_text(st, 2, state);
    return run(s, ST_EVENT_MARK, "event state", err, errlen);
}

cJSON *store_events(store_t *s, int64_t after, int limit, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[STORE_PART][ST_EVENTS_LIST];
    sqlite3_bind_int64(st, 1, after);
    sqlite3_bind_int(st, 2, limit);
    return rows_made(s, st, feed_row, "events", err, errlen);
}

int64_t store_events_last_id(store_t *s, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[STORE_PART][ST_EVENTS_LAST_ID];
    int64_t v = -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    else
        fail_db(s->db, err, errlen, "last event");
    reset(st);
    return v;
}

int store_add_hook_delivery(store_t *s, const store_hook_delivery_t *d, char *err, size_t errlen) {
    char now[STORE_TIME_LEN];
    now_iso(now);
    sqlite3_stmt *st = s->st[STORE_PART][ST_INSERT_DELIVERY];
    int b = bind_text(st, 1, d->event_id);
    b |= bind_text(st, 2, d->event_type);
    b |= sqlite3_bind_int(st, 3, d->attempt);
    b |= d->http_status > 0 ? sqlite3_bind_int(st, 4, d->http_status) : sqlite3_bind_null(st, 4);
    b |= sqlite3_bind_int64(st, 5, d->latency_ms);
    b |= bind_text(st, 6, d->error);
    b |= bind_text(st, 7, now);
    if (b) {
        reset(st);
        return fail_db(s->db, err, errlen, "hook delivery");
    }
    return run(s, ST_INSERT_DELIVERY, "hook delivery", err, errlen);
}

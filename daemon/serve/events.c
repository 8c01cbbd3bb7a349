/* events.c - the event stream (see events.h): the hub that streams the
 * store's event log to SSE clients from one timer on the loop. */
#include "daemon/serve/events.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/shared/bytebuf.h"
#include "daemon/shared/log.h"

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
    cJSON *arr = store_events(h->store, c->cursor, EVENTS_BACKLOG_LIMIT, err, sizeof err);
    if (!arr) {
        log_error("events: stream: %s", err);
        return -1;
    }
    int rc = 0;
    for (cJSON *o = arr->child; o && rc == 0; o = o->next) {
        char *data = cJSON_PrintUnformatted(o);
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
    int64_t last = store_events_last_id(h->store, err, sizeof err);
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
        cursor = store_events_last_id(hub->store, err, sizeof err);
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

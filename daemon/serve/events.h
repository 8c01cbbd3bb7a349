/* events.h - the event log: the events table (schema/006_events.sql), the feed
 * an agent catches up from, and its Server-Sent Events stream.
 *
 * Every event the daemon tells an agent about (experiment.finished,
 * queue.empty, experiment.rejected) is a row first: experiment.finished is
 * written by a trigger in the same transaction as the experiment's final
 * status, the others by the hook before it sends them. The hook (hook.c)
 * delivers pending rows and marks them delivered or failed; rows still
 * pending when the daemon stops are redelivered at the next start with their
 * webhook-id. Ids increase monotonically and are never reused, so
 * GET /v1/events?after=N resumes exactly where a reader left off.
 *
 * A feed item is {"id", "type", "created", "webhook_id", "state", ...payload}:
 * experiment.finished carries "experiment": {id, name, status, reason,
 * val_bpb}, experiment.rejected "rejected": {proposal, code, error}.
 *
 * The table functions are short statements on the store's connection (loop
 * thread only); they return 0 or -1 with err, or a new cJSON tree the caller
 * owns (NULL with err). */
#ifndef NIGHTSHIFT_EVENTS_H
#define NIGHTSHIFT_EVENTS_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/shared/http.h"
#include "daemon/exec/sched.h"
#include "daemon/store/store.h"

#define EVENTS_FINISHED "experiment.finished"
#define EVENTS_EMPTY    "queue.empty"
#define EVENTS_REJECTED "experiment.rejected"

/* ------------------------------------------------------------ the table */

/* Append an event; payload_json is a JSON object's text (NULL = {}),
 * experiment_id 0 for none. *id (may be NULL) gets the new id. */
int events_add(store_t *s, const char *type, int64_t experiment_id, const char *payload_json,
               int64_t *id, char *err, size_t errlen);

/* Make sure experiment id has its experiment.finished event (the trigger
 * writes it when the status changes; this covers a caller that announces an
 * experiment some other way). Returns 1 if it was added, 0 if it existed. */
int events_ensure_finished(store_t *s, int64_t experiment_id, char *err, size_t errlen);

/* The hook's outbox: pending events with id > after (and, when
 * experiment_id > 0, about that experiment), oldest first, at most limit:
 * [{"id", "type", "webhook_id", "experiment_id" (0 = none), "payload"
 * (object), "body" (the stored webhook body text, or null), "attempts"}]. */
cJSON *events_pending(store_t *s, int64_t after, int64_t experiment_id, int limit, char *err,
                      size_t errlen);

/* Store the webhook body built for event id (kept for every later attempt). */
int events_set_body(store_t *s, int64_t id, const char *body, char *err, size_t errlen);

/* One more delivery attempt of event id has started. */
int events_attempted(store_t *s, int64_t id, char *err, size_t errlen);

/* Event id is "delivered" (delivered = now) or "failed". */
int events_mark(store_t *s, int64_t id, const char *state, char *err, size_t errlen);

/* The feed: events with id > after, oldest first, at most limit (1..1000). */
cJSON *events_list(store_t *s, int64_t after, int limit, char *err, size_t errlen);

/* The newest event's id (0 when there is none), or -1 on error. */
int64_t events_last_id(store_t *s, char *err, size_t errlen);

/* ----------------------------------------------------------- the stream */

/* GET /v1/events/stream: each event as an SSE message
 *   id: 17\nevent: experiment.finished\ndata: {feed item}\n\n
 * starting after Last-Event-ID (a reconnecting EventSource sends it), or
 * ?after=N, or else after the newest event at connect time. With ?status=1 a
 * snapshot of the slots and the queue ({"queue_depth", "running", "slots"},
 * as in GET /v1/status) follows every second as "event: status" (no id, so a
 * reconnect still resumes from the last real event). A ": hb" comment every
 * EVENTS_HEARTBEAT_S keeps idle connections alive. One timer on the loop
 * serves every client; a client that stops reading is dropped once its
 * unsent bytes reach HTTP_STREAM_MAX_QUEUED, so a slow reader never holds up
 * the loop. */
#define EVENTS_HEARTBEAT_S   15
#define EVENTS_MAX_CLIENTS   32 /* more streams get 503 */
#define EVENTS_TICK_MS       1000
#define EVENTS_BACKLOG_LIMIT 500 /* events sent per client per tick (catch-up) */

typedef struct events_hub events_hub_t;

/* A hub serving the events of store (and, for status, sched: may be NULL).
 * Owned by the caller; released by events_hub_close. NULL when out of memory. */
events_hub_t *events_hub_new(uv_loop_t *loop, store_t *store, sched_t *sched);

/* The handler of GET /v1/events/stream (res is an error when refused). */
void events_hub_stream(events_hub_t *hub, const http_request_t *req, http_response_t *res);

/* Number of open streams. */
int events_hub_clients(const events_hub_t *hub);

/* End every stream and stop; the memory is freed once the timer has closed.
 * hub == NULL is a no-op. */
void events_hub_close(events_hub_t *hub);

#endif

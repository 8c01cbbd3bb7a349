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
 * The table is the store's (store_event_add, store_events, ... in
 * daemon/store/store.h); this module streams it. */
#ifndef NIGHTSHIFT_EVENTS_H
#define NIGHTSHIFT_EVENTS_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/shared/http.h"
#include "daemon/exec/sched.h"
#include "daemon/store/store.h"

#define EVENTS_FINISHED STORE_EVENT_FINISHED
#define EVENTS_EMPTY    STORE_EVENT_EMPTY
#define EVENTS_REJECTED STORE_EVENT_REJECTED

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
#define EVENTS_MAX_CLIENTS   32 /* a stream more ends the one furthest behind */
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

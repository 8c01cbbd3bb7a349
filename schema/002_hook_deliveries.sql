-- 002_hook_deliveries.sql - every attempt to deliver an agent hook event.
--
-- One row per HTTP attempt (daemon/hook.c): the event's id (the webhook-id
-- header, the same on every retry of one event), its type, the attempt number
-- (1, 2, ...), the HTTP status (NULL when no response arrived: a connection
-- error, a timeout, or the daemon shutting down), the latency in milliseconds
-- and the error (NULL when the agent answered 2xx).
--   sqlite3 DIR/nightshift.db "select * from hook_deliveries order by id desc limit 10"

CREATE TABLE hook_deliveries (
    id          INTEGER PRIMARY KEY,
    event_id    TEXT NOT NULL,
    event_type  TEXT NOT NULL
                CHECK (event_type IN ('experiment.finished', 'queue.empty',
                                      'experiment.rejected')),
    attempt     INTEGER NOT NULL CHECK (attempt >= 1),
    http_status INTEGER,
    latency_ms  INTEGER NOT NULL,
    error       TEXT,
    created     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;

CREATE INDEX hook_deliveries_event ON hook_deliveries (event_id);

-- 006_events.sql - the event log: every event the daemon tells an agent about,
-- in order, with its delivery state (the agent hook's persistent outbox).
--
-- id increases monotonically and is never reused (AUTOINCREMENT): it is the
-- cursor of GET /v1/events?after=N and the SSE stream's event id. payload is
-- the compact event as the feed shows it; body is the signed webhook body the
-- hook built at its first attempt (the same bytes on every later attempt, also
-- after a restart), and webhook_id the Standard Webhooks id it is sent with.
-- state: pending (not yet delivered: an event still pending when the daemon
-- stops is redelivered at the next start), delivered (the agent answered 2xx)
-- or failed (the hook gave up). attempts counts HTTP attempts (hook_deliveries
-- has one row per attempt, keyed by webhook_id).
--   sqlite3 DIR/nightshift.db "select id, type, state, created from events order by id desc limit 10"

CREATE TABLE events (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    type          TEXT NOT NULL,
    created       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    experiment_id INTEGER REFERENCES experiments(id),
    payload       TEXT NOT NULL DEFAULT '{}' CHECK (json_type(payload) = 'object'),
    webhook_id    TEXT NOT NULL UNIQUE DEFAULT ('evt_' || lower(hex(randomblob(16)))),
    body          TEXT,
    state         TEXT NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts      INTEGER NOT NULL DEFAULT 0,
    delivered     TEXT
) STRICT;

CREATE INDEX events_pending ON events (id) WHERE state = 'pending';
CREATE INDEX events_experiment ON events (experiment_id, type);

-- An experiment that stops running for good is announced in the same
-- transaction as its final status, so a crash between the two cannot lose it.
CREATE TRIGGER events_experiment_finished
AFTER UPDATE OF status ON experiments
WHEN old.status = 'running' AND new.status NOT IN ('queued', 'running')
BEGIN
    INSERT INTO events (type, experiment_id, payload)
    VALUES ('experiment.finished', new.id,
            json_object('experiment',
                        json_object('id', new.id, 'name', new.name,
                                    'status', new.status, 'reason', new.reason)));
END;

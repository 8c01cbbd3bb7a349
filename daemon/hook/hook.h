/* hook.h - the outbound agent hook: signed webhook events over libcurl multi,
 * driven by the daemon's libuv loop, delivered at least once.
 *
 * Events (JSON body):
 *   {"id":"evt_<32 hex>", "type":"experiment.finished"|"queue.empty"|"experiment.rejected",
 *    "created":"2026-11-29T19:37:00.123Z",
 *    "experiment": {id,name,status,reason,spec,result,asha} (experiment.finished; else null;
 *            asha: null, or under serve --prune asha the run's {rung, rungs, eta,
 *            full_budget, promoted_to, promotions}: promoted_to the experiment it was
 *            promoted to, or null; promotions [{id, rung, promoted_to}] the
 *            promotions its end decided, of this run or of others of its rung)
 *    "rejected": {"proposal": <what the agent sent>, "code": "invalid_spec",
 *                 "error": "model.n_head: ..."}          (experiment.rejected; else null)
 *    "best": {id,name,val_bpb,mean_val_bpb,val_bpb_sd,n_seeds,seeds,spec,result} | null
 *            (the best configuration of the scope the daemon last finished a run in:
 *            its first run, and the mean, sample sd (null with one seed) and
 *            number of its succeeded seeds),
 *    "noise": {dataset,budget_kind,budget,eval_tokens,sd,configurations,runs,df} | null
 *            (that scope's measured seed noise, as GET /v1/noise answers it),
 *    "recent": [{id,name,status,reason,val_bpb,spec}...] (the last HOOK_RECENT, newest first),
 *    "queue_depth": N, "running": N,
 *    "defaults": <the spec with every default filled in>}
 *
 * Headers (Standard Webhooks): webhook-id (the event id, the same on every
 * retry), webhook-timestamp (unix seconds of this attempt), webhook-signature:
 * "v1,<base64 HMAC-SHA256(secret, id + "." + timestamp + "." + body)>"; the
 * secret is used as given (its bytes are the key).
 *
 * Delivery: a 2xx ends it; timeouts, connection errors and 5xx are retried with
 * exponential backoff and full jitter (1 s, 2 s, 4 s ... capped at 60 s) up to
 * max_attempts; other statuses are not retried. Every attempt is a row in
 * hook_deliveries (event id, type, attempt, HTTP status, latency, error).
 *
 * Outbox: every event is first a row of the events table (events.h), in the
 * same transaction as the final status for experiment.finished. The hook
 * sends pending rows and marks them delivered or failed; the body is stored
 * at the first attempt. Rows still pending when the daemon stops (in flight,
 * waiting or backing off) are sent again at the next start with the same
 * webhook-id and body: delivery is at least once, across restarts too.
 *
 * A 2xx reply may carry one spec (an object), an array of specs, or nothing
 * (empty body, null, {} or []). Each proposal is queued through core_submit with
 * source "agent" (validation and dedup as for any submission); a proposal that
 * fails validation, or a reply that is not JSON, is recorded and answered with
 * an experiment.rejected event. A malformed reply never stops the loop.
 * Replies are parsed strictly (http_json_parse: one value, no raw control
 * characters or \u0000 in strings). Accepted proposals (queued as new, not
 * duplicates) are rate-limited by a token bucket of proposals_per_min tokens
 * refilled at proposals_per_min per minute; a proposal beyond it is not
 * queued and is answered with experiment.rejected ("rate limited: ..."), so
 * an agent that re-proposes in a loop cannot flood the queue.
 *
 * rejected.code says why, for an agent to decide on (error is for people and
 * may change wording):
 *   invalid_spec        the spec fails validation (a field, an unknown dataset)
 *   unknown_parent      its "parent" names no experiment of this daemon
 *   does_not_fit        its run needs more memory than a worker may use
 *   rate_limited        valid, but over proposals_per_min: not queued, propose it later
 *   too_many_proposals  the reply held more specs than are accepted at once (the
 *                       proposal is the whole reply)
 *   malformed_reply     the reply is not JSON, not a spec or an array of specs, or
 *                       too large (the proposal is its printable start, a string)
 *   internal            the daemon failed (store, memory): not the proposal's fault
 *
 * queue.empty is not sent while an experiment.finished event is still being
 * delivered: that event already carries the queue depth, and an agent answers
 * it with the next variant. While the queue is empty and a slot is idle,
 * queue.empty is re-sent every idle_resend_s, so that an agent that once
 * answered nothing is asked again. */
#ifndef NIGHTSHIFT_HOOK_H
#define NIGHTSHIFT_HOOK_H

#include <stdint.h>
#include <uv.h>

#include "daemon/core/core.h"

#define HOOK_RECENT            20
#define HOOK_PROPOSALS_PER_MIN 30

typedef struct hook hook_t;

typedef struct {
    const char *url;          /* the agent's endpoint */
    const char *secret;       /* HMAC key */
    int max_attempts;         /* default 8 */
    double timeout_s;         /* per attempt; default 30 */
    double idle_resend_s;     /* default 60 */
    double backoff_base_s;    /* the first retry's delay bound, doubling; default 1 (tests: less) */
    double proposals_per_min; /* accepted proposals per minute (and burst); 0: no
                                 limit; < 0: HOOK_PROPOSALS_PER_MIN */
    core_t *core;             /* the daemon's rules and store: submissions (core.h) */
    /* Called after each delivery attempt (ok: a 2xx), for GET /metrics; NULL = none. */
    void (*attempted)(int ok, void *user);
    void *user;
} hook_opts_t;

/* Parse the body of a 2xx reply. Returns 0 when nothing is proposed (an
 * empty body, null, {} or []), 1 with *proposals set to an object or a
 * non-empty array (caller deletes; the items are not validated yet), or -1
 * with err when the reply is malformed. */
int hook_parse_reply(const char *text, size_t len, cJSON **proposals, char *err, size_t errlen);

/* Returns NULL with err on failure (bad URL, no secret, libcurl init). */
hook_t *hook_new(uv_loop_t *loop, const hook_opts_t *o, char *err, size_t errlen);

/* Queue events for delivery (they are sent in the background). An
 * experiment's event is normally already in the outbox (the store's trigger
 * wrote it); one that is not gets written first. */
void hook_experiment_finished(hook_t *h, int64_t id);
void hook_queue_empty(hook_t *h);

/* Stop: cancel pending retries and transfers (recorded as such; the events
 * stay pending in the outbox for the next start), close every handle; done is
 * called when all are closed and the hook is freed. */
void hook_close(hook_t *h, void (*done)(void *arg), void *arg);

#endif

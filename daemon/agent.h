/* agent.h - `nightshift agent`, the reference search agent behind the webhook.
 *
 * A small HTTP server on the daemon's HTTP module. POST /hook (any path is
 * accepted) takes one hook event (hook.h), verifies its Standard Webhooks
 * signature, hands it to the strategy (strategy.h) and answers 200 with the
 * next spec, an array of specs, or []. A repeated webhook-id (at-least-once
 * delivery) gets the answer it got the first time. GET / answers a short
 * status. The strategy's state is saved to --state after every decision and
 * loaded at startup, so a restarted agent resumes. */
#ifndef NIGHTSHIFT_AGENT_H
#define NIGHTSHIFT_AGENT_H

#include <stddef.h>
#include <stdint.h>

#define AGENT_TOLERANCE_S 300 /* largest accepted |now - webhook-timestamp|, seconds */

/* The `agent` subcommand (also declared in cli.h). */
int agent_main(int argc, char **argv);

/* Check a delivery the Standard Webhooks way: signatures is the
 * webhook-signature header, one or more space-separated "v1,<base64>" of
 * HMAC-SHA256(secret, id + "." + timestamp + "." + body); one match is
 * enough (constant-time compare). timestamp is unix seconds and must be
 * within AGENT_TOLERANCE_S of now. Any argument but body may be NULL (a
 * missing header). Returns 0, or -1 with the reason in err. */
int agent_verify(const char *secret, size_t secret_len, const char *id, const char *timestamp,
                 const char *signatures, const char *body, size_t body_len, int64_t now, char *err,
                 size_t errlen);

#endif

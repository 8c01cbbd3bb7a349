/* agent.h - `nightshift agent`, the reference search agent behind the webhook.
 *
 * A small HTTP server on the daemon's HTTP module. POST /hook (any path is
 * accepted) takes one hook event (hook.h), verifies its Standard Webhooks
 * signature (webhook.h), hands it to the strategy (strategy.h) and answers 200 with the
 * next spec, an array of specs, or []. A repeated webhook-id (at-least-once
 * delivery) gets the answer it got the first time. GET / answers a short
 * status. The strategy's state is saved to --state after every decision and
 * loaded at startup, so a restarted agent resumes. */
#ifndef NIGHTSHIFT_AGENT_H
#define NIGHTSHIFT_AGENT_H

/* The `agent` subcommand (also declared in cli.h). */
int agent_main(int argc, char **argv);

#endif

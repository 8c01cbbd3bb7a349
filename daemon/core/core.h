/* core.h - the daemon's rules, whatever door a request comes in by: what a
 * submission must pass before it is queued, and the context the daemon's
 * entry points share to apply them. The HTTP API (serve/api.c, and through
 * it the CLI and /mcp) and the agent hook's replies (hook/) are adapters
 * over it: they read, translate errors to their protocol, and call here.
 *
 * The core sits beside the scheduler, above it and the store
 * (store < exec < core < hook, serve; the Makefile's include roots enforce
 * the order) and knows no HTTP. */
#ifndef NIGHTSHIFT_CORE_H
#define NIGHTSHIFT_CORE_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/spec.h"
#include "daemon/exec/sched.h"
#include "daemon/store/store.h"

/* What the rules need: owned by the daemon (serve.c), borrowed here. */
typedef struct {
    store_t *store;
    sched_t *sched; /* NULL = none (offline answers, tests): no slot to fit, no floor to count */
    const char *state_dir;
    int memory_mb; /* a worker's memory limit (MiB; 0 = none): what cannot fit is refused */
} core_t;

/* Whether dataset name has a manifest, a regular file: 1, 0 when there is
 * none, -1 when something else (a FIFO, a device) is in its place, which
 * nothing may open (it could block the loop or a worker). */
int core_dataset_exists(const core_t *c, const char *name);

/* Parse and check one submitted spec: the spec parser's rules, plus what
 * only the daemon knows (the dataset and the parent exist, the threads fit
 * a slot, and the run fits in a worker's memory with the floor the
 * executor names). Returns 0 with s holding the parsed spec (release with
 * spec_free) and sc its scope on its dataset (may be NULL), or with err set:
 * NS_ERR_NOT_FOUND when the parent does not exist, NS_ERR_DOES_NOT_FIT when
 * the run cannot fit, NS_ERR_IO when the store failed, -1 for any other
 * failure. A dataset whose manifest cannot be read is left to the worker to
 * report (its size unknown, the scope takes eval_tokens as given). */
int core_check_spec(const core_t *c, const cJSON *spec_json, spec_t *s, store_scope_t *sc,
                    char *err, size_t errlen);

/* Validate one spec (a JSON object) and queue it as `source` ("api", "cli",
 * "agent", or "mcp": an agent that came over MCP), with dedup unless force.
 * Returns 0 with *id and *duplicate set, or a negative code with
 * "field.path: reason" in err: NS_ERR_NOT_FOUND (the parent experiment does
 * not exist), NS_ERR_DOES_NOT_FIT (the run cannot fit in a worker's memory),
 * NS_ERR_IO (the store failed), NS_ERR_NOMEM, or -1 (any other invalid spec).
 * Every door submits through this, so every submission is validated alike;
 * the caller kicks the scheduler (sched_kick) once its batch is queued. */
int core_submit(core_t *c, const cJSON *spec, const char *source, int force, int64_t *id,
                int *duplicate, char *err, size_t errlen);

#endif

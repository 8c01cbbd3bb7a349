/* strategy.h - the reference agent's search strategy: what to run next.
 *
 * A hill climb over spec mutations with autoresearch's keep/discard rule. The
 * state is the current best (id, val_bpb, spec), the identities of every spec
 * already proposed or seen (so nothing is proposed twice), the near ties
 * waiting for a confirming re-run, and the mutation RNG. Each hook event goes
 * through strategy_decide, which logs one line per decision and returns the
 * specs to propose. Everything here is synchronous and does no I/O except
 * strategy_save/strategy_load, so the agent's server (agent.c) and the tests
 * drive it the same way; replacing the strategy means replacing this file.
 *
 * Decisions, in order:
 *   - no success yet and the baseline has not been run: propose the baseline;
 *   - a finished run that beats the best by more than the noise floor is kept;
 *   - one that beats it by less (a near tie) is re-run with seed + 1 and
 *     adopted only if the mean of the two runs beats the best;
 *   - anything else is discarded;
 *   - otherwise propose a mutation of the best (the baseline until something
 *     succeeds) along one or two axes, validated with spec_parse and never a
 *     spec whose identity was already seen.
 *
 * Identity: the canonical spec without name, tags, priority and parent (the
 * daemon's dedup key) with the per-layer choices written out, so that
 * ve_layers "alternate" and [1,3] at depth 4 are the same spec.
 *
 * Ownership: strategy_new returns a strategy the caller frees with
 * strategy_free; it copies the baseline. strategy_decide returns a new cJSON
 * array the caller frees with cJSON_Delete. */
#ifndef NIGHTSHIFT_STRATEGY_H
#define NIGHTSHIFT_STRATEGY_H

#include <cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "rng.h"
#include "spec.h"

typedef struct strategy strategy_t;

/* The mutation axes. Each names the tag its proposals carry. */
typedef enum {
    STRATEGY_VE_LAYERS, /* alternate/all/none/first_half/last_half or a list */
    STRATEGY_VE_GATE,   /* ve_gate_channels in 8..128, <= n_embd */
    STRATEGY_N_EMBD,    /* width x0.5..x2, head_dim a multiple of 8 and >= 16 */
    STRATEGY_DEPTH,     /* depth -2..+2 */
    STRATEGY_HEADS,     /* n_head / n_kv_head, valid splits only */
    STRATEGY_MLP,       /* relu2, gelu, swiglu, geglu */
    STRATEGY_WINDOW,    /* window_pattern */
    STRATEGY_LR,        /* one of matrix/embedding/unembedding/scalar lr, x0.5 or x2 */
    STRATEGY_BATCH,     /* batch_size or total_batch_tokens, x0.5 or x2 */
    STRATEGY_N_AXES
} strategy_axis;

/* "ve_layers", "ve_gate_channels", "n_embd", ...; static strings. */
const char *strategy_axis_name(strategy_axis a);

/* What one mutation changed, for the log and the proposal's name. */
typedef struct {
    char desc[192]; /* "n_embd 128 -> 192 (ve_gate_channels 32 -> 16)" */
    char label[96]; /* "n_embd=192" */
} strategy_change_t;

/* One line per decision; line has no trailing newline. */
typedef void (*strategy_log_fn)(void *user, const char *line);

typedef struct {
    double noise_floor;  /* val_bpb gain needed to adopt outright; default 0.005 */
    uint64_t seed;       /* seeds the mutation RNG (a loaded state keeps its own) */
    int max_proposals;   /* stop proposing after this many; 0 = no limit */
    int max_rejections;  /* rejected proposals in a row before pausing; default 5 */
    strategy_log_fn log; /* NULL = stderr */
    void *log_user;
} strategy_opts_t;

void strategy_opts_default(strategy_opts_t *o);

/* baseline must be a validated spec (spec_parse/spec_load). Returns NULL with
 * err on allocation failure or an invalid option. */
strategy_t *strategy_new(const spec_t *baseline, const strategy_opts_t *o, char *err,
                         size_t errlen);
void strategy_free(strategy_t *s);

/* Decide on one hook event (hook.h's payload). Returns 0 with *reply a new
 * JSON array of zero or more specs to propose, or -1 with err when the event
 * is not a hook event (no type). */
int strategy_decide(strategy_t *s, const cJSON *event, cJSON **reply, char *err, size_t errlen);

/* Mutate sp (a validated spec) in place along axis, with a move drawn from
 * rng: on success sp is validated again, differs in identity from what it
 * was, and ch says how; name, tags, seed and parent are untouched. Returns 0,
 * or -1 when the axis has no valid move from sp (sp is unchanged). */
int strategy_mutate(spec_t *sp, strategy_axis axis, rng_t *rng, strategy_change_t *ch);

/* The identity of a validated spec: hex SHA-256, 64 characters + NUL.
 * Returns 0, or -1 on allocation failure. */
int strategy_identity(const spec_t *sp, char out[65]);

/* Has a spec with this identity been proposed or seen? */
int strategy_has_seen(const strategy_t *s, const spec_t *sp);

/* The current best: returns 1 and fills whichever pointers are not NULL (the
 * spec stays owned by the strategy), or 0 when nothing has been adopted. */
int strategy_best(const strategy_t *s, int64_t *id, double *val_bpb, const spec_t **spec);

int strategy_n_pending(const strategy_t *s);   /* near ties awaiting their re-run */
int strategy_n_proposals(const strategy_t *s); /* specs proposed so far */

/* The whole state as JSON (a new tree the caller frees), and back. Load
 * replaces the state of s; on failure s is unchanged. */
cJSON *strategy_state_json(const strategy_t *s);
int strategy_load_json(strategy_t *s, const cJSON *state, char *err, size_t errlen);

/* The state in a file, written atomically. strategy_load returns 0 when
 * loaded, 1 when the file does not exist (s unchanged), -1 with err. */
int strategy_save(const strategy_t *s, const char *path, char *err, size_t errlen);
int strategy_load(strategy_t *s, const char *path, char *err, size_t errlen);

#endif

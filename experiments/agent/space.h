/* space.h - the search space of a night, read from a file
 * (experiments/search/space.json; the Optuna bridge and the search benchmark
 * read the same file).
 *
 * The file is {"about": "...", "axes": [axis, ...]}. An axis is a path into a
 * spec ("model.depth", "train.matrix_lr") and the values it may take:
 *   {"path": P, "type": "int"|"float"|"choice", "values": [v, ...]}  listed, in
 *       order, so a local move goes to a neighbour in the list;
 *   {"path": P, "type": "int"|"float", "low": L, "high": H, "log": true}  a
 *       range, drawn and moved on a log scale when "log" is true;
 *   "also": [P2, ...]  copies the axis' value to other paths (n_head to
 *       n_kv_head);
 *   "why": "..."  a sentence saying why the axis is in the space (read and
 *       ignored);
 *   "when": {"path": Q, "not": [v, ...]} | {"path": Q, "in": [v, ...]} |
 *       {"path": Q, "above": x}  makes the axis conditional on Q, which must
 *       be an EARLIER axis of the file: when the condition is false (or Q is
 *       itself inactive) the axis is INACTIVE.
 * Every path must be a field of a spec (present in the canonical form of the
 * default spec) that defines a configuration: not a label (name, tags, seed,
 * priority, parent, prune), not the scope (dataset, budget, eval_tokens), and
 * not train.batch_size (derived, below).
 *
 * A point is a value for every ACTIVE axis. An inactive axis is not part of
 * the point: a point holds it as not listed (-1) or NAN, writing the point
 * leaves the spec's value there, and two points that differ only in inactive
 * axes are the same point (space_same, and so the agent's duplicate check,
 * mutations and tpe's model). The micro-batch is derived, never an axis:
 * after the point is written, train.batch_size becomes the largest power of
 * two that is at most the written-into spec's batch_size and divides
 * total_batch_tokens / seq_len, so gradient accumulation divides evenly (the
 * micro-batch changes speed and memory, not what is learned). A point the
 * spec still refuses (spec_parse: n_head dividing n_embd into an even
 * head_dim, ve_gate_channels at most n_embd, ...) is refused with the spec's
 * message; the caller draws again.
 *
 * Floats are kept to 4 significant digits (0.05657), so that names stay short
 * and values that train alike are one configuration.
 *
 * Ownership: space_load/space_parse return a space the caller frees with
 * space_free; nothing else allocates. */
#ifndef NIGHTSHIFT_SPACE_H
#define NIGHTSHIFT_SPACE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "engine/rng.h"
#include "engine/spec.h"

#define SPACE_MAX_AXES   32
#define SPACE_MAX_VALUES 64
#define SPACE_MAX_ALSO   4
#define SPACE_PATH_LEN   64
#define SPACE_MAX_BYTES  (1 << 20) /* of a space file */

typedef enum { SPACE_INT, SPACE_FLOAT, SPACE_CHOICE } space_type;

/* An axis' condition on an earlier axis (its "when"). */
typedef enum { SPACE_WHEN_ALWAYS, SPACE_WHEN_NOT, SPACE_WHEN_IN, SPACE_WHEN_ABOVE } space_when_kind;
typedef struct {
    space_when_kind kind;
    int axis;                        /* the earlier axis it reads */
    int n_values;                    /* of not / in */
    cJSON *values[SPACE_MAX_VALUES]; /* not / in: the values (owned copies) */
    double above;                    /* above: the value must be greater than this */
} space_when_t;

typedef struct {
    char path[SPACE_PATH_LEN]; /* "model.n_embd" */
    const char *name;          /* its last component, "n_embd" (points into path) */
    space_type type;
    int n_values;                    /* > 0: the listed values; 0: a range */
    cJSON *values[SPACE_MAX_VALUES]; /* the listed values (owned copies) */
    double low, high;                /* a range's bounds */
    bool log;                        /* a range on a log scale */
    int n_also;                      /* paths that copy the value */
    char also[SPACE_MAX_ALSO][SPACE_PATH_LEN];
    space_when_t when; /* SPACE_WHEN_ALWAYS: not conditional */
} space_axis_t;

typedef struct {
    int n_axes;
    space_axis_t axes[SPACE_MAX_AXES];
} space_t;

/* A point: v[i] is the index of the value for a listed axis (-1 when a
 * spec's value is not listed, or the axis is inactive), the value itself for
 * a range (NAN when inactive). */
typedef struct {
    double v[SPACE_MAX_AXES];
} space_point_t;

/* Parse the text of a space file (what names it in the errors, e.g. its
 * path). Returns a new space, or NULL with "what: axes[2].low: ..." in err. */
space_t *space_parse(const char *text, size_t len, const char *what, char *err, size_t errlen);
/* Read and parse a file; NULL with err naming the file when it cannot be read. */
space_t *space_load(const char *path, char *err, size_t errlen);
void space_free(space_t *sp);

/* Is axis a active at pt: its condition holds on the earlier axis's value,
 * which is itself active (an axis without "when" always is)? */
bool space_active(const space_t *sp, const space_point_t *pt, int a);
/* Write every inactive axis of pt as not part of it (-1 or NAN), so that
 * points that differ only there compare equal. The draws, space_read and
 * space_point_from_json return points in this form. */
void space_canon(const space_t *sp, space_point_t *pt);
/* Whether x and y are the same point (space_same on every axis). */
bool space_point_equal(const space_t *sp, const space_point_t *x, const space_point_t *y);

/* A uniform draw: each listed value equally likely, a range uniform on its
 * (log) scale; inactive axes left out (space_canon). */
void space_sample(const space_t *sp, rng_t *rng, space_point_t *pt);

/* Draw number draw (0 .. n-1) of a Latin hypercube design of n points: every
 * axis cut into n strata of equal probability under the uniform draw, each
 * stratum taken by exactly one of the n draws (in an order that seed fixes
 * per axis), the value uniform within it; axes the draw makes inactive are
 * left out (space_canon). n draws then cover each axis's
 * range evenly (a range's top fifth, a list's every value when n is at
 * least its length), where n uniform draws leave gaps: the first results of
 * a model-based search see more of the space. draw is taken modulo n; n < 2
 * or above SPACE_MAX_STRATA is a uniform draw. */
#define SPACE_MAX_STRATA 256
void space_sample_stratified(const space_t *sp, rng_t *rng, uint64_t seed, int draw, int n,
                             space_point_t *pt);

/* The point a spec is at (a range takes the spec's value even outside it;
 * an axis whose condition the spec's values make false is inactive).
 * Returns 0, or -1 when out of memory. */
int space_read(const space_t *sp, const spec_t *spec, space_point_t *pt);

/* Write pt into a copy of in: every axis (which == NULL) or those with
 * which[i], in the file's order, each only when it is active (its condition
 * read from what is written so far), with its "also" paths; then the derived
 * micro-batch (space_micro_batch, from in's batch_size), then spec_parse.
 * Returns 0 with out a validated spec (release with spec_free), or -1 with
 * err (the spec's refusal). in's labels, seed and other fields are kept. */
int space_write(const space_t *sp, const space_point_t *pt, const bool *which, const spec_t *in,
                spec_t *out, char *err, size_t errlen);

/* The derived micro-batch: the largest power of two that is at most
 * batch_size and divides total_batch_tokens / seq_len; batch_size itself when
 * total_batch_tokens is not a whole number of rows (the spec refuses it). */
int space_micro_batch(int batch_size, long long total_batch_tokens, int seq_len);

/* A neighbour of from along axis a into to (to = from elsewhere): a listed
 * axis moves one place up or down its list (a value not listed moves to any
 * listed one); a range 1/16 to 3/16 of its (log) width (uniform), at least 1
 * for an int, staying inside it; axes that the move makes inactive are left
 * out (space_canon). Returns 0, or -1 when the axis has a single value or
 * is inactive at from. */
int space_neighbour(const space_t *sp, int a, const space_point_t *from, rng_t *rng,
                    space_point_t *to);

/* Whether two points have the same value on axis a (both inactive there
 * counts as the same). */
bool space_same(const space_t *sp, int a, const space_point_t *x, const space_point_t *y);

/* The value of axis a at pt as text ("192", "0.05657", "swiglu"; "?" when
 * not listed) into buf. */
void space_value_text(const space_t *sp, int a, const space_point_t *pt, char *buf, size_t n);

/* A range axis' position on its (log) scale, 0 at low and 1 at high (may be
 * outside [0, 1] for a spec's value outside the range); and back, rounded
 * (an int) or to 4 significant digits (a float), clamped into the range. */
double space_unit(const space_axis_t *ax, double value);
double space_from_unit(const space_axis_t *ax, double u);

/* The point as {path: value, ...} over its active axes (a new tree, NULL
 * when out of memory), and back: an axis the object does not name, or names
 * with a value not in the space, is -1 (listed) or NAN (range); inactive
 * axes are left out. */
cJSON *space_point_json(const space_t *sp, const space_point_t *pt);
void space_point_from_json(const space_t *sp, const cJSON *obj, space_point_t *pt);

#endif

/* spec.h - the experiment spec: parse, default, validate and canonicalise.
 *
 * A spec is the JSON document that describes one experiment (the README's
 * "The spec"; experiments/specs/default.json lists every field). Every field
 * has a default; unknown fields are an error;
 * invalid combinations are rejected with the field path and the reason and are
 * never silently corrected. The daemon validates submissions with this same
 * parser, so its messages are the API's messages.
 *
 * Ownership: spec_parse fills a caller-owned spec_t; spec_free releases the
 * strings it holds. spec_canonical_json returns a malloc'd string the caller
 * frees. */
#ifndef NIGHTSHIFT_SPEC_H
#define NIGHTSHIFT_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/util.h"

struct cJSON;

#define SPEC_MAX_DEPTH   64
#define SPEC_MAX_TAGS    32
#define SPEC_ERR_LEN     256
#define SPEC_MAX_TEXT    (1 << 20) /* bytes of spec JSON accepted */
#define SPEC_MAX_NESTING 8         /* levels of {} / [] accepted (the schema uses 3) */
#define SPEC_MAX_NAME    200       /* characters (UTF-8 code points) of `name` */
#define SPEC_MAX_TAG_LEN 64        /* characters of each tag */

typedef enum { MLP_RELU2, MLP_GELU, MLP_SWIGLU, MLP_GEGLU } spec_mlp_kind;
typedef enum { POS_ROPE, POS_LEARNED } spec_pos_kind;
/* How training rows are drawn (data.h, data_sampler_t). */
typedef enum { SAMPLER_RANDOM, SAMPLER_SEQUENTIAL } spec_sampler_kind;
/* The linear layers' products: float32, bf16 operands into float32
 * accumulators, or bf16 where the CPU multiplies it natively (gemm.h,
 * gemm_set_precision_named resolves it when a run starts). */
typedef enum { PRECISION_FP32, PRECISION_BF16, PRECISION_AUTO } spec_precision_kind;

#define SPEC_MAX_TIME_BUDGET_S 604800.0 /* a week */
/* eval_tokens' default: the validation tokens a run scores. A fixed count,
 * as autoresearch scores a fixed 40 x 524,288 tokens, so that a large text
 * costs no more to score than the default corpus. Which tokens are scored
 * moves the difference between two runs, and more seeds do not average it
 * away (every run of a scope is scored on the same ones): over disjoint blocks
 * of a 328,192-token split of the default corpus, two seeds of the baseline
 * (24 steps) differed by an sd of 0.022 bpb over blocks of 1,024 tokens,
 * 0.010 at 8,192, 0.006 at 32,768 and 0.003 at 65,536, against a seed-to-seed
 * sd of 0.0078 for 300 s runs. 65,536 is the smallest power of two at which
 * the choice moves a comparison by under half the seed noise. */
#define SPEC_DEFAULT_EVAL_TOKENS 65536
#define SPEC_MAX_TOKEN_BUDGET    1e12
#define SPEC_MAX_FLOPS_BUDGET    1e21 /* model FLOPs (cost.h's flops_per_token x tokens) */

/* The `model` section, resolved: per-layer choices are expanded to arrays. */
typedef struct {
    int vocab_size;       /* 0 = take it from the dataset (train); required by grad/cost */
    int depth;            /* number of transformer blocks */
    int n_embd;           /* model width D */
    int n_head;           /* query heads; head_dim = n_embd / n_head */
    int n_kv_head;        /* key/value heads (GQA); divides n_head */
    int head_dim;         /* derived: n_embd / n_head */
    double mlp_ratio;     /* hidden width = mlp_ratio * n_embd, must be a whole number */
    int mlp_hidden;       /* derived: mlp_ratio * n_embd */
    spec_mlp_kind mlp;    /* gated kinds make c_fc 2*mlp_hidden rows (gate half first) */
    int seq_len;          /* training context T */
    spec_pos_kind pos;    /* rope or a learned (max_pos, D) table */
    int max_pos;          /* rows of the learned table; default seq_len */
    bool tie_embeddings;  /* lm_head = wte^T */
    double embed_dropout; /* probability, training only */
    double softcap;       /* logits = c*tanh(logits/c); 0 disables */
    char window_pattern[SPEC_MAX_DEPTH + 1]; /* as given, uppercased, e.g. "SSSL" */
    int window[SPEC_MAX_DEPTH];              /* derived: key j visible from i when i-w <= j <= i */
    char ve_layers[256];                     /* as given: a name, or the list as "[0,2]" */
    bool has_ve[SPEC_MAX_DEPTH];             /* derived */
    int ve_gate_channels;                    /* C: the gate reads norm(x)[..., :C] */
} spec_model_t;

/* The `train` section: optimiser and schedule (autoresearch defaults). */
typedef struct {
    int batch_size;            /* rows per micro-batch */
    int total_batch_tokens;    /* tokens per optimiser step; multiple of batch_size*seq_len */
    double matrix_lr;          /* Muon */
    double embedding_lr;       /* AdamW, token table; scaled by (D/768)^-0.5 */
    double value_embedding_lr; /* AdamW, value embeddings; scaled likewise */
    double unembedding_lr;     /* AdamW, lm_head; scaled likewise */
    double scalar_lr;          /* AdamW; resid_lambdas use 0.01x */
    double weight_decay;       /* Muon cautious weight decay at progress 0 */
    double adam_beta1, adam_beta2;
    double x0_beta1; /* x0_lambdas use (x0_beta1, adam_beta2) */
    double warmup_ratio, warmdown_ratio, final_lr_frac;
    double muon_momentum_start, muon_momentum_end;
    int muon_momentum_steps;
    int ns_steps;
    double muon_beta2;
    spec_sampler_kind sampler;     /* random (default) or sequential */
    spec_precision_kind precision; /* fp32 (default), bf16 or auto */
} spec_train_t;

typedef struct {
    int threads;        /* BLAS + engine threads; 0 = OMP_NUM_THREADS, else every CPU allowed */
    int memory_mb;      /* 0 = the daemon's default */
    double peak_gflops; /* 0 = calibrated value; overrides the MFU denominator */
} spec_resources_t;

typedef struct {
    char *name; /* may be NULL */
    char *tags[SPEC_MAX_TAGS];
    int n_tags;
    uint64_t seed; /* JSON-safe: at most 2^53 - 1 */
    int priority;
    int64_t parent; /* 0 = none; ids are positive */
    char dataset[64];
    /* The budget: exactly one of the three is nonzero. A spec that sets
     * token_budget or flops_budget and leaves time_budget_s out gets
     * time_budget_s 0. */
    double time_budget_s; /* training wall-clock seconds, at most a week */
    int64_t token_budget; /* training tokens; the run stops after the step reaching it */
    double flops_budget;  /* model FLOPs (flops_per_token x tokens, as MFU counts them); the
                           * run stops after the step reaching it */
    bool prune;           /* the daemon may prune this run (serve --prune); default true */
    int eval_tokens;      /* validation tokens scored (the split's first ones); 0 = all */
    spec_model_t model;
    spec_train_t train;
    spec_resources_t resources;
} spec_t;

/* Fill s with every default (no vocab_size). */
void spec_defaults(spec_t *s);

/* Parse JSON text into s (defaults first, then the fields given), then validate.
 * Returns 0, or -1 with "path: reason" in err (e.g. "model.n_head: 7 does not
 * divide n_embd 128"). On failure s holds nothing that needs freeing. */
int spec_parse(const char *json, size_t len, spec_t *s, char *err, size_t errlen);

/* Read and parse a spec file. Same contract as spec_parse, except when the
 * file itself cannot be read (missing, unreadable, larger than
 * SPEC_MAX_TEXT): then NS_ERR_IO (NS_ERR_NOMEM when out of memory) with
 * "file: reason" in err. */
int spec_load(const char *path, spec_t *s, char *err, size_t errlen);

/* Validate cross-field rules and derive window/has_ve/head_dim/mlp_hidden.
 * spec_parse calls it; call it again after changing fields by hand. */
int spec_validate(spec_t *s, char *err, size_t errlen);

/* Canonical JSON of s: every field present with its value, keys sorted, no
 * whitespace. Two specs that mean the same thing give the same string.
 * Returns a malloc'd string (caller frees) or NULL on allocation failure. */
char *spec_canonical_json(const spec_t *s);

/* Parse a JSON value as a spec: spec_parse of its text (anything but an
 * object is "spec: expected a JSON object"). Same contract as spec_parse;
 * NS_ERR_NOMEM when the text cannot be printed. */
int spec_from_json(const struct cJSON *j, spec_t *s, char *err, size_t errlen);

/* The spec's JSON Schema (draft 2020-12), written from the field table: every
 * field's type, default, bounds, names and description, unknown fields
 * refused (additionalProperties false) like the parser refuses them.
 * Cross-field rules (n_head divides n_embd, exactly one budget, ...) are the
 * parser's alone. Returns a new cJSON object (caller deletes) or NULL when out
 * of memory. */
struct cJSON *spec_json_schema(void);

#define SPEC_HASH_HEX 65 /* bytes of a hex SHA-256 with its NUL */

/* Lowercase hex SHA-256 of s's canonical JSON into out. Returns 0, or
 * NS_ERR_NOMEM or -1 (the digest failed). */
int spec_hash(const spec_t *s, char out[SPEC_HASH_HEX]);

/* ------------------------------------------------ what a result is filed by */

/* The configuration, the one identity of "the same experiment up to its
 * seed": s's canonical JSON without the fields that label an experiment
 * rather than define it (name, tags, priority, parent, prune) and without
 * the seed, left out on purpose: the repeats of a configuration with other
 * seeds are one leaderboard row, and a run is (configuration, seed); and
 * without eval_tokens, which the scope holds (how a run is scored is not
 * what it trains).
 * Spellings that train the same model the same way are written one way:
 *   model.window_pattern  the shortest pattern that repeats to the layers'
 *                         windows ("SLSLSLSL" and "SL" at depth 8; "SSSL",
 *                         "S" and "SSS" at depth 4; any pattern at depth 1);
 *   model.ve_layers       the first of alternate, all, none, first_half,
 *                         last_half that selects the same layers, else the
 *                         sorted list ("first_half" and "none" at depth 1);
 *   model.max_pos         seq_len with rope (no position table);
 *   model.ve_gate_channels, train.value_embedding_lr
 *                         their defaults when no layer has a value embedding;
 *   train.embedding_lr    its default when the table is tied to the output
 *                         and there is no position table (unembedding_lr
 *                         trains the table then).
 * spec_config_json returns that text (malloc'd, the caller frees; NULL when
 * out of memory); spec_config_hash its lowercase hex SHA-256 (returns 0,
 * NS_ERR_NOMEM or -1). */
char *spec_config_json(const spec_t *s);
int spec_config_hash(const spec_t *s, char out[SPEC_HASH_HEX]);

/* Whether a top-level field of the canonical form is one of those left out
 * of the configuration above (the labels and the seed). */
bool spec_is_label(const char *field);

/* Where val_bpb values compare: one dataset, one budget and one evaluation;
 * results of different scopes are never ranked together. The budget rule:
 * a spec sets one budget, seconds of training (time_budget_s), training
 * tokens (token_budget) or model FLOPs (flops_budget); a token or FLOPs
 * budget makes the time budget 0. The
 * evaluation is eval_tokens, the validation tokens scored (0 = all). */
#define SPEC_BUDGET_TIME   "time"
#define SPEC_BUDGET_TOKENS "tokens"
#define SPEC_BUDGET_FLOPS  "flops"
typedef struct {
    char dataset[64];
    char budget_kind[8]; /* SPEC_BUDGET_TIME, SPEC_BUDGET_TOKENS or SPEC_BUDGET_FLOPS */
    double budget;       /* seconds, training tokens or model FLOPs */
    int64_t eval_tokens; /* validation tokens scored; 0 = the whole split */
} spec_scope_t;

/* s's scope, its eval_tokens as written (for who knows no dataset's size). */
void spec_scope(const spec_t *s, spec_scope_t *out);

/* s's scope on a dataset whose validation split holds val_tokens tokens
 * (< 0: not known), what the daemon files a run by: an eval_tokens that
 * covers the whole split is 0, since it scores exactly what 0 does. */
void spec_scope_on(const spec_t *s, double val_tokens, spec_scope_t *out);

/* The scope of the default spec on dataset (NULL or "" = the default one). */
void spec_default_scope(const char *dataset, spec_scope_t *out);

/* The spec field that holds s's budget: "token_budget", "flops_budget" or
 * "time_budget_s". */
const char *spec_budget_field(const spec_t *s);

/* Set s's budget to budget in the kind s already has: seconds of training,
 * training tokens (rounded, at least 1) or model FLOPs. The others stay 0. */
void spec_set_budget(spec_t *s, double budget);

/* Set sc's budget from text: "time:SECONDS" (or "SECONDS", or "SECONDSs"),
 * "tokens:N", a number in (0, 1e15], or "flops:N", a number in (0,
 * SPEC_MAX_FLOPS_BUDGET]. Returns 0, or -1 when text is not
 * one (sc unchanged). */
int spec_scope_set_budget(spec_scope_t *sc, const char *text);

/* Deep copy of src into dst (dst is overwritten, not freed first). Returns 0,
 * or -1 on allocation failure, when dst holds nothing that needs freeing. */
int spec_copy(spec_t *dst, const spec_t *src);

/* Release the strings s holds and reset them; s may be reused. Idempotent. */
void spec_free(spec_t *s);

/* The spec's spelling of an enum value ("relu2", "rope", ...); static strings. */
const char *spec_mlp_name(spec_mlp_kind k);
const char *spec_pos_name(spec_pos_kind k);
const char *spec_sampler_name(spec_sampler_kind k);
const char *spec_precision_name(spec_precision_kind k);

#endif

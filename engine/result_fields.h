/* result_fields.h - the numbers a finished run reports, named once.
 *
 * One row per field drives the trainer's summary block and its JSON "result"
 * line (engine/train.c), the scheduler's parser of that line (daemon/exec/sched.c),
 * the store's result struct and insert (daemon/store/store.h, daemon/store/store.c). The
 * API's read-back is `SELECT * FROM results`, so it follows the schema. A new
 * metric is one row here (set it in train.c) plus a migration adding its
 * column:
 *
 *     X(grad_norm, REAL, STORED, "grad_norm", "grad_norm", "%.4f", 1)
 *     schema/NNN_grad_norm.sql: ALTER TABLE results ADD COLUMN grad_norm REAL;
 *
 * Columns of RESULT_FIELDS(X), X(name, TYPE, where, key, label, fmt, div):
 *   name   the member of result_values_t, and for stored fields the column of
 *          `results` and the key of the API's "result" object
 *   TYPE   REAL (double), INTEGER (int64_t) or TEXT (const char *, borrowed)
 *   where  STORED  in the summary, the result line and the store
 *          PARAMS  the same, but in the result line inside its "params" object
 *          LINE    in the summary and the result line only
 *          SUMMARY in the summary only
 *   key    the result line's key (inside "params" for PARAMS)
 *   label  the summary line's key (autoresearch's names)
 *   fmt    the summary's printf format: for INTEGER a long long, for REAL a
 *          double (the value divided by div), for TEXT a string
 * The summary and the result line follow the rows' order (the "params" object
 * last in the line). */
#ifndef NIGHTSHIFT_RESULT_FIELDS_H
#define NIGHTSHIFT_RESULT_FIELDS_H

#include <stddef.h>
#include <stdint.h>

#define RESULT_FIELDS(X)                                                                           \
    X(val_bpb, REAL, STORED, "val_bpb", "val_bpb", "%.6f", 1)                                      \
    X(training_seconds, REAL, STORED, "training_seconds", "training_seconds", "%.1f", 1)           \
    X(total_seconds, REAL, STORED, "total_seconds", "total_seconds", "%.1f", 1)                    \
    X(startup_seconds, REAL, STORED, "startup_seconds", "startup_seconds", "%.1f", 1)              \
    X(eval_seconds, REAL, STORED, "eval_seconds", "eval_seconds", "%.1f", 1)                       \
    X(peak_rss_mb, REAL, STORED, "peak_rss_mb", "peak_rss_mb", "%.1f", 1)                          \
    X(mfu_percent, REAL, STORED, "mfu_percent", "mfu_percent", "%.2f", 1)                          \
    X(peak_gflops, REAL, STORED, "peak_gflops", "peak_gflops", "%.1f", 1)                          \
    X(peak_source, TEXT, STORED, "peak_source", "peak_source", "%s", 1)                            \
    X(peak_isa, TEXT, STORED, "peak_isa", "peak_isa", "%s", 1)                                     \
    X(peak_cpu, TEXT, STORED, "peak_cpu", "peak_cpu", "%s", 1)                                     \
    X(peak_measured_at, TEXT, STORED, "peak_measured_at", "peak_measured_at", "%s", 1)             \
    X(peak_others_cpu, REAL, STORED, "peak_others_cpu", "peak_others_cpu", "%.3f", 1)              \
    X(isa, TEXT, STORED, "isa", "isa", "%s", 1)                                                    \
    X(precision, TEXT, STORED, "precision", "precision", "%s", 1)                                  \
    X(blas_core, TEXT, STORED, "blas_core", "blas_core", "%s", 1)                                  \
    X(total_tokens, REAL, STORED, "total_tokens", "total_tokens_M", "%.1f", 1e6)                   \
    X(tokens_per_second, REAL, STORED, "tokens_per_second", "tokens_per_second", "%.0f", 1)        \
    X(num_steps, INTEGER, STORED, "num_steps", "num_steps", "%lld", 1)                             \
    X(num_params, REAL, SUMMARY, "", "num_params_M", "%.1f", 1e6)                                  \
    X(depth, INTEGER, SUMMARY, "", "depth", "%lld", 1)                                             \
    X(params_wte, INTEGER, PARAMS, "wte", "params_wte", "%lld", 1)                                 \
    X(params_wpe, INTEGER, PARAMS, "wpe", "params_wpe", "%lld", 1)                                 \
    X(params_value_embeds, INTEGER, PARAMS, "value_embeds", "params_value_embeds", "%lld", 1)      \
    X(params_lm_head, INTEGER, PARAMS, "lm_head", "params_lm_head", "%lld", 1)                     \
    X(params_blocks, INTEGER, PARAMS, "transformer_matrices", "params_transformer_matrices",       \
      "%lld", 1)                                                                                   \
    X(params_scalars, INTEGER, PARAMS, "scalars", "params_scalars", "%lld", 1)                     \
    X(params_total, INTEGER, PARAMS, "total", "params_total", "%lld", 1)                           \
    X(flops_per_token, REAL, STORED, "flops_per_token", "flops_per_token", "%.6g", 1)              \
    X(eval_tokens, INTEGER, STORED, "eval_tokens", "eval_tokens", "%lld", 1)                       \
    X(time_budget_s, REAL, STORED, "time_budget_s", "time_budget_s", "%g", 1)                      \
    X(token_budget, INTEGER, STORED, "token_budget", "token_budget", "%lld", 1)                    \
    X(epochs, REAL, STORED, "epochs", "epochs", "%.4f", 1)                                         \
    X(cpu_share, REAL, STORED, "cpu_share", "cpu_share", "%.3f", 1)                                \
    X(steal_share, REAL, STORED, "steal_share", "steal_share", "%.3f", 1)                          \
    X(others_cpu_share, REAL, STORED, "others_cpu_share", "others_cpu_share", "%.3f", 1)           \
    X(quiet_tokens_per_second, REAL, STORED, "quiet_tokens_per_second", "quiet_tokens_per_second", \
      "%.0f", 1)                                                                                   \
    X(quiet_source, TEXT, STORED, "quiet_source", "quiet_source", "%s", 1)                         \
    X(slowdown, REAL, STORED, "slowdown", "slowdown", "%.3f", 1)                                   \
    X(slowdown_cost_bpb, REAL, STORED, "slowdown_cost_bpb", "slowdown_cost_bpb", "%.4f", 1)

#define RESULT_CTYPE_REAL    double
#define RESULT_CTYPE_INTEGER int64_t
#define RESULT_CTYPE_TEXT    const char *

/* Every field's value; a TEXT value is borrowed (NULL = none). */
typedef struct {
#define RESULT_MEMBER_(name, type, where, key, label, fmt, div) RESULT_CTYPE_##type name;
    RESULT_FIELDS(RESULT_MEMBER_)
#undef RESULT_MEMBER_
} result_values_t;

typedef enum { RESULT_REAL, RESULT_INTEGER, RESULT_TEXT } result_type_t;
typedef enum { RESULT_STORED, RESULT_PARAMS, RESULT_LINE, RESULT_SUMMARY } result_where_t;

/* The rows as data, for code that loops over them. */
typedef struct {
    const char *name;
    result_type_t type;
    result_where_t where;
    const char *key, *label, *fmt;
    double div;
    size_t offset; /* of the value in result_values_t */
} result_field_t;

static const result_field_t result_fields[] = {
#define RESULT_ROW_(name, type, where, key, label, fmt, div)                                       \
    {#name, RESULT_##type, RESULT_##where, key, label, fmt, div, offsetof(result_values_t, name)},
    RESULT_FIELDS(RESULT_ROW_)
#undef RESULT_ROW_
};
enum { RESULT_N_FIELDS = sizeof result_fields / sizeof result_fields[0] };

/* Whether the store keeps a field (a column of `results`). */
static inline int result_is_stored(const result_field_t *f) {
    return f->where == RESULT_STORED || f->where == RESULT_PARAMS;
}

/* The stored fields' column list, ", val_bpb, training_seconds, ...", and one
 * ", ?" per stored field, as string literals for the store's INSERT. */
#define RESULT_SQL_STORED_(x) x
#define RESULT_SQL_PARAMS_(x) x
#define RESULT_SQL_LINE_(x)
#define RESULT_SQL_SUMMARY_(x)
#define RESULT_SQL_COLUMN_(name, type, where, key, label, fmt, div)                                \
    RESULT_SQL_##where##_(", " #name)
#define RESULT_SQL_PLACEHOLDER_(name, type, where, key, label, fmt, div)                           \
    RESULT_SQL_##where##_(", ?")
#define RESULT_SQL_COLUMNS      RESULT_FIELDS(RESULT_SQL_COLUMN_)
#define RESULT_SQL_PLACEHOLDERS RESULT_FIELDS(RESULT_SQL_PLACEHOLDER_)

#endif

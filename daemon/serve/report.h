/* report.h - what a night did and learned in one scope (dataset and budget),
 * built from the store's queries: GET /v1/report, which `nightshift report`
 * prints as Markdown and the daemon's /report page draws.
 *
 * The report is one JSON object:
 *   dataset, budget_kind, budget    the scope
 *   generated                       when it was built (ISO-8601 UTC)
 *   runs        {total, by_status: {status: count}}
 *   time        {first_started, last_finished, hours (the span between
 *               them), run_hours (the runs' own wall time, summed)}
 *   noise       store_noise's object (pooled seed-to-seed sd)
 *   configurations   how many configurations have a succeeded run
 *   best, baseline   {id, name, config_hash, n_seeds, mean_val_bpb,
 *               val_bpb_sd, test: store_test_of's figure}, or null. best
 *               ranks first by mean val_bpb (as GET /v1/best); the baseline
 *               is the configuration of the scope's first succeeded run
 *               (or of ?baseline=ID)
 *   versus_baseline  {delta (best - baseline mean val_bpb), noise_sd, se
 *               (noise_sd * sqrt(1/n_best + 1/n_baseline)), z (delta / se),
 *               in_noise_sds (delta / noise_sd), noise_df (the noise's degrees
 *               of freedom), p_two_sided (how often chance alone gives |z| or
 *               more: Student's t on noise_df, two-sided), t_at_5_percent (the
 *               |z| that takes 5% on noise_df), changes: [{axis, from, to}]
 *               (the spec fields the best changed)}, or null; se and the
 *               ratios are null until the noise is measured
 *   anytime     one point per run that started and finished, in finish
 *               order: {id, status, finished, elapsed_h (since the first
 *               start), spent_h (run hours so far), val_bpb, best (the
 *               lowest val_bpb of any run so far)}
 *   axes_from   where the axes come from ("spec fields": every field of the
 *               spec but seed, name, tags, priority, parent and prune)
 *   axes        per axis that moved between two configurations that differ
 *               in it alone: {axis, kind ("number" or "category"), pairs,
 *               mean, se, se_from, moves: [{from, to, pairs, mean, se,
 *               se_from}]}. A pair's change is the mean val_bpb of the
 *               configuration with the higher value minus that of the lower
 *               (numbers by value, else by their JSON text); a move groups
 *               the pairs of one (from, to), the axis all its pairs (its mean
 *               only for numbers: the change when the axis went up). se is
 *               the pairs' sd / sqrt(pairs) ("pairs"), or for one pair the
 *               noise's noise_sd * sqrt(1/n_from + 1/n_to) ("noise"), else
 *               null
 *   failures    the runs that failed, crashed, timed out, ran out of memory,
 *               diverged or were interrupted: [{id, name, status, reason}],
 *               by id, at most REPORT_MAX_FAILURES; failures_total counts all
 *   pruned      the same of the runs pruned (pruned_total: all of them)
 *   slowed      the succeeded runs whose neighbours slowed them (slowdown at
 *               least SHARE_SLOWED, engine/share.h): {id, name, val_bpb,
 *               slowdown, cpu_share, others_cpu_share, slowdown_cost_bpb} by
 *               id, at most REPORT_MAX_FAILURES; slowed_total counts all
 * Sealed: test figures are read for best and baseline only, after the
 * ranking; nothing here ranks by them. */
#ifndef NIGHTSHIFT_REPORT_H
#define NIGHTSHIFT_REPORT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/store/store.h"

#define REPORT_MAX_FAILURES 100

/* The report of scope sc; baseline is an experiment id whose configuration
 * is the baseline, 0 for the default. Returns a new object (the caller
 * owns it), or NULL with err: code (if not NULL) is NS_ERR_NOT_FOUND when
 * the baseline is not a succeeded configuration of the scope, NS_ERR_IO or
 * NS_ERR_NOMEM otherwise. */
cJSON *report_build(store_t *store, const store_scope_t *sc, int64_t baseline, int *code, char *err,
                    size_t errlen);

#endif

/* metrics.h - GET /metrics: the daemon's numbers in Prometheus' text
 * exposition format 0.0.4, for a Prometheus server to scrape.
 *
 * Two kinds of numbers:
 *   from the store   what survives a restart: experiments by status, the
 *                    tokens and training seconds of the runs that reported
 *                    a result, the store's size on disk (store_totals);
 *   in memory        what this process saw since it started: HTTP responses
 *                    by route and status code (counted by the HTTP server's
 *                    observer, http.h, one place for every response), the
 *                    handlers' durations and the runs' durations
 *                    (histograms), and the agent hook's delivery attempts
 *                    and failures. These start at zero with each daemon,
 *                    as Prometheus expects of a counter (rate() handles the
 *                    reset);
 *   the process      process_* as Prometheus' client libraries write them.
 *
 * What a scrape costs the loop: a dozen rows of running totals
 * (store_totals), one row a scope (store_scopes, the MAX_SCOPES latest),
 * /proc/self/statm and one directory entry per open descriptor; nothing
 * grows with the experiments' history.
 *
 * The families (every one with HELP and TYPE):
 *   nightshift_experiments_ended_total{status}    counter  ended experiments, by final status
 *   nightshift_run_duration_seconds{status}       histogram  runs' wall seconds, since start
 *   nightshift_best_val_bpb{dataset,budget,eval_tokens}  gauge  each scope's best mean
 *   nightshift_queue_depth                        gauge    experiments queued
 *   nightshift_experiments_running                gauge    experiments running (the store's count)
 *   nightshift_slots_in_use, nightshift_slots     gauge    slots with a run; slots configured
 *   nightshift_tokens_trained_total               counter
 *   nightshift_training_seconds_total             counter
 *   nightshift_hook_deliveries_total              counter  attempts to deliver an event
 *   nightshift_hook_delivery_failures_total       counter  attempts that got no 2xx
 *   nightshift_http_requests_total{route,code}    counter  route: api.h's templates
 *   nightshift_store_size_bytes{file="db"|"wal"}  gauge
 *   nightshift_http_request_duration_seconds{route}  histogram  handler seconds, since start
 *   nightshift_build_info{version,compiler}       gauge    1
 *   nightshift_start_time_seconds                 gauge    unix time this daemon started
 *   process_cpu_seconds_total, process_resident_memory_bytes,
 *   process_virtual_memory_bytes, process_open_fds, process_max_fds,
 *   process_start_time_seconds
 *
 * The writer (metrics_write_*) escapes label values as the format says
 * (backslash, double quote and newline) and HELP text (backslash, newline). */
#ifndef NIGHTSHIFT_METRICS_H
#define NIGHTSHIFT_METRICS_H

#include <stdint.h>

#include "daemon/exec/sched.h"
#include "daemon/shared/bytebuf.h"
#include "daemon/shared/http.h"
#include "daemon/store/store.h"

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef struct metrics metrics_t;

/* The counters of a daemon over store and sched (borrowed; sched may be
 * NULL: no slots to report). Returns NULL when out of memory; free with
 * metrics_free. */
metrics_t *metrics_new(store_t *store, sched_t *sched);
void metrics_free(metrics_t *m);

/* One response of the daemon's HTTP server (an http_observe_fn's
 * arguments): path is counted under its route's template. m may be NULL. */
void metrics_count_request(metrics_t *m, const char *path, int status);

/* How long the handler of a request to path took (its route's histogram).
 * m may be NULL. */
void metrics_observe_request(metrics_t *m, const char *path, double seconds);

/* A run that ended with status (a final one) after seconds of wall time.
 * m may be NULL. */
void metrics_observe_run(metrics_t *m, const char *status, double seconds);

/* One delivery attempt of the agent hook; ok when it got a 2xx. m may be
 * NULL. */
void metrics_count_hook_attempt(metrics_t *m, int ok);

/* The exposition into out. Returns 0, or -1 with err (the store failed, or
 * out of memory). */
int metrics_render(metrics_t *m, bytebuf_t *out, char *err, size_t errlen);

/* GET /metrics: res is the exposition (200), or the error envelope (500). */
void metrics_reply(metrics_t *m, http_response_t *res);

/* ------------------------------------------------------------ the writer */

/* "# HELP name help\n# TYPE name type\n" (type: counter, gauge, ...). */
void metrics_write_family(bytebuf_t *b, const char *name, const char *type, const char *help);

/* One sample: name, the labels as n name/value pairs (labels[2i] the name,
 * labels[2i+1] the value, escaped here; n may be 0), and the value
 * (NaN and infinities as the format spells them). */
void metrics_write_sample(bytebuf_t *b, const char *name, const char *const *labels, int n,
                          double value);

/* A label value as it goes between the double quotes. */
void metrics_write_label_value(bytebuf_t *b, const char *v);

#endif

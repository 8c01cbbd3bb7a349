/* export.h - experiments as tables for people and other tools: CSV (RFC
 * 4180), TSV, JSON lines, and autoresearch's results.tsv.
 *
 * The rows are JSON objects (all with the same keys, the first row's order
 * gives the columns). Strings are written as they are, numbers in their
 * shortest exact form, booleans as true/false, null as an empty field, arrays
 * and objects as their JSON text. Every function returns a malloc'd,
 * NUL-terminated text the caller frees, or NULL when out of memory. */
#ifndef NIGHTSHIFT_EXPORT_H
#define NIGHTSHIFT_EXPORT_H

#include <cjson/cJSON.h>

/* A header line and one line per row. sep ',' quotes a field that holds a
 * comma, a quote, CR or LF (quotes doubled); sep '\t' replaces tabs, CR and
 * LF inside a field by spaces (TSV has no quoting). Lines end in \n. */
char *export_table(const cJSON *rows, char sep);

/* One JSON object per line. */
char *export_jsonl(const cJSON *rows);

/* autoresearch's results.tsv: "commit val_bpb memory_gb status description"
 * (tab-separated), one line per finished experiment in the order they
 * finished; commit is the experiment id, val_bpb 6 decimals (0.000000 when it
 * did not succeed), memory_gb the worker's peak RSS in GB (1 decimal), status
 * keep (a success that beat every earlier one), discard (a success that did
 * not) or crash (failed, crashed, timeout, oom, diverged, interrupted, or any
 * other final status but cancelled, which is left out), description its name
 * (and the reason when it did not succeed). rows come from store_export_rows. */
char *export_results_tsv(const cJSON *rows);

#endif

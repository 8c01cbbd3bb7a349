/* export.h - experiments as tables for people and other tools: CSV (RFC
 * 4180), TSV, JSON lines and autoresearch's results.tsv, and GET /v1/export,
 * which streams every experiment in one of them.
 *
 * Values: strings as they are, numbers in their shortest exact form,
 * booleans as true/false, null as an empty field, arrays and objects as their
 * JSON text. Tables are made safe to open in a spreadsheet: a text field that
 * starts with = + - or @ (a formula; after any leading spaces) gets a
 * leading ' , and control characters (C0 with CR and LF, DEL, C1) become '?'
 * (a space for TSV's tab, CR and LF), so neither a formula nor a terminal
 * escape nor a line break in a name or a reason reaches whoever opens the
 * file. JSON lines escape what
 * JSON must and are left as they are.
 *
 * The export runs off the loop's critical path: each page of rows is read
 * from a snapshot on a connection of its own (store_export_page) and
 * formatted on libuv's thread pool, and the loop only writes the finished
 * page, the next one only once the client has taken the last one. A client
 * that goes away stops the export (nothing more is read or formatted); one
 * that stops reading is dropped after EXPORT_STALL_S. The body is chunked,
 * so a client can tell a complete export from one cut by a failure. */
#ifndef NIGHTSHIFT_EXPORT_H
#define NIGHTSHIFT_EXPORT_H

#include <cjson/cJSON.h>
#include <uv.h>

#include "daemon/shared/bytebuf.h"
#include "daemon/shared/http.h"
#include "daemon/store/store.h"

#define EXPORT_PAGE_ROWS   500 /* experiments read and formatted at a time */
#define EXPORT_MAX_STREAMS 4   /* exports at once; more get 503 */
#define EXPORT_STALL_S     60  /* a client that takes nothing for this long is dropped */

typedef enum { EXPORT_CSV, EXPORT_TSV, EXPORT_JSONL, EXPORT_RESULTS_TSV } export_format_t;

/* "csv", "tsv", "jsonl" or "results-tsv" into *fmt: 0, or -1 for any other. */
int export_format_parse(const char *name, export_format_t *fmt);

/* A header line of columns (an array of strings: the keys, in order) and
 * one line per row, so a table of no rows is its header line alone. sep ','
 * quotes a field that holds a comma or a quote (quotes doubled); sep
 * '\t' replaces tabs, CR and LF inside a field by spaces (TSV has no
 * quoting). Lines end in \n. A malloc'd text, or NULL when out of memory. */
char *export_table(const cJSON *rows, const cJSON *columns, char sep);

/* The formatting state of one export, page after page. */
typedef struct {
    export_format_t fmt;
    int header_done;
    int have_best; /* results-tsv: the best val_bpb so far (keep / discard) */
    double best;
} export_state_t;

/* Append the rows of one page to out in st's format: a header first on the
 * first page (columns, as export_table's; even when there are no rows), then
 * one line per row. For results-tsv: autoresearch's "commit val_bpb memory_gb status
 * description" (tab-separated), one line per finished experiment; commit is
 * the id, val_bpb 6 decimals (0.000000 unless it succeeded), memory_gb the
 * peak RSS in GB (1 decimal), status keep (a success that beat every earlier
 * one), discard (a success that did not) or crash (any other final status
 * but cancelled, which is left out), description its name (and the reason
 * when it did not succeed). Returns 0, or -1 when out of memory. */
int export_page(export_state_t *st, const cJSON *rows, const cJSON *columns, bytebuf_t *out);

/* What the exports of one daemon share: how many stream, and the one lane
 * their pages take through the thread pool, a page at a time, so that
 * exports never take more than one core from the loop. Zeroed by its owner,
 * which keeps it until the loop has ended. */
typedef struct export_lane {
    int active;                      /* exports streaming */
    int busy;                        /* a page is on the thread pool */
    struct export_job *first, *last; /* exports waiting for the lane, in order */
} export_lane_t;

/* GET /v1/export?format=...: open a streaming answer for every experiment in
 * fmt (see above); res is an error when refused (EXPORT_MAX_STREAMS already
 * running). */
void export_stream(uv_loop_t *loop, store_t *store, export_lane_t *lane, export_format_t fmt,
                   const http_request_t *req, http_response_t *res);

#endif

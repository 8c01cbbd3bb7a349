/* export.c - `nightshift export`: every experiment as CSV, TSV or JSON lines. */
#include "daemon/client/client.h"

#include <stdio.h>
#include <string.h>

#include "daemon/client/cmd.h"
#include "daemon/client/conn.h"
#include "daemon/client/fmt.h"

static const cmd_help_t export_help = {
    "export", "--format csv|tsv|jsonl|results-tsv",
    "Every experiment with its key spec fields and result, oldest first, to\n"
    "stdout: CSV (RFC 4180), TSV, JSON lines, or autoresearch's results.tsv\n"
    "(commit val_bpb memory_gb status description; commit is the experiment id,\n"
    "status keep / discard / crash).\n"};

int export_main(int argc, char **argv) {
    const cmd_help_t *h = &export_help;
    conn_opts_t o = {0};
    conn_t c = {0};
    const char *format = NULL;
    int rc;
    conn_reply_t r = {0};
    line_t path = {0};

    const cmd_opt_t opts[] = {{"--format", .value = &format}, {0}};
    if (!cmd_parse_args(argc, argv, h, &o, opts, NULL, &rc)) return rc;
    if (!format) return cmd_usage_error(h, "--format is required");
    if (strcmp(format, "csv") && strcmp(format, "tsv") && strcmp(format, "jsonl") &&
        strcmp(format, "results-tsv"))
        return cmd_usage_error(h, "--format: expected csv, tsv, jsonl or results-tsv, got '%s'",
                               format);
    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    line_add(&path, "/v1/export?format=%s", format);
    if ((rc = conn_request(&c, "GET", path.s, NULL, 0, &r)) != 0) goto fail;
    fwrite(r.body.data, 1, r.body.len, stdout);
    rc = fflush(stdout) == 0 ? 0 : CLIENT_EXIT_API;
fail:
    conn_reply_free(&r);
    conn_close(&c);
    return rc;
}

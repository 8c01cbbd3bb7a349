/* diff.c - `nightshift diff`: two experiments side by side. */
#include "daemon/client/client.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>

#include "daemon/client/cmd.h"
#include "daemon/client/conn.h"
#include "daemon/client/fmt.h"

static const cmd_help_t diff_help = {
    "diff", "ID ID",
    "Compare two experiments: every spec field that differs (`model.depth: 4 -> 6`),\n"
    "then both results and loss summaries side by side.\n"};

/* Print every leaf of a and b that differs, as "path: A -> B" (absent fields
 * show as -). Returns how many. */
static int spec_diff(const cJSON *a, const cJSON *b, const char *prefix) {
    int n = 0;
    char path[256], ta[128], tb[128];
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *from = pass ? b : a, *other = pass ? a : b;
        for (const cJSON *k = from ? from->child : NULL; k; k = k->next) {
            const cJSON *o = cJSON_GetObjectItemCaseSensitive(other, k->string);
            if (pass && o) continue; /* seen in the first pass */
            snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", k->string);
            if (cJSON_IsObject(k) && cJSON_IsObject(o)) {
                n += pass ? spec_diff(o, k, path) : spec_diff(k, o, path);
                continue;
            }
            if (o && cJSON_Compare(k, o, 1)) continue;
            const cJSON *va = pass ? o : k, *vb = pass ? k : o;
            if (!va || jtext(va, ta, sizeof ta) < 0) snprintf(ta, sizeof ta, "-");
            if (!vb || jtext(vb, tb, sizeof tb) < 0) snprintf(tb, sizeof tb, "-");
            printf("  %s: ", path);
            fmt_put_clean(stdout, ta);
            fputs(" -> ", stdout);
            fmt_put_clean(stdout, tb);
            fputc('\n', stdout);
            n++;
        }
    }
    return n;
}

/* The last and the lowest loss of an experiment's metrics (NAN when none). */
static void loss_summary(const cJSON *e, double *last, double *min) {
    *last = *min = NAN;
    const cJSON *m;
    cJSON_ArrayForEach(m, jget(e, "metrics")) {
        double l = jnum(m, "loss", NAN);
        if (!isfinite(l)) continue;
        *last = l;
        if (!isfinite(*min) || l < *min) *min = l;
    }
}

int diff_main(int argc, char **argv) {
    const cmd_help_t *h = &diff_help;
    conn_opts_t o = {0};
    conn_t c = {0};
    const char *ids[2] = {NULL, NULL};
    int rc;
    cJSON *e[2] = {NULL, NULL};

    cmd_args_t args = {.v = ids, .max = 2, .too_many = "two IDs, not more"};
    if (!cmd_parse_args(argc, argv, h, &o, NULL, &args, &rc)) return rc;
    if (args.n != 2) return cmd_usage_error(h, "two experiment IDs are needed");
    long long id[2];
    for (int k = 0; k < 2; k++)
        if ((id[k] = cmd_positive(ids[k])) < 0)
            return cmd_usage_error(h, "expected an experiment id, got '%s'", ids[k]);
    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    for (int k = 0; k < 2; k++) {
        line_t path = {0};
        line_add(&path, "/v1/experiments/%lld", id[k]);
        if ((rc = conn_json(&c, "GET", path.s, NULL, 0, &e[k])) != 0) goto fail;
    }
    printf("spec differences, %lld -> %lld:\n", id[0], id[1]);
    if (spec_diff(jget(e[0], "spec"), jget(e[1], "spec"), "") == 0) printf("  (none)\n");
    static const struct {
        const char *label, *path, *fmt;
    } rows[] = {
        {"val_bpb", "result.val_bpb", "%.6f"},     {"params", "result.params_total", "%.0f"},
        {"mfu %", "result.mfu_percent", "%.2f"},   {"tok/s", "result.tokens_per_second", "%.0f"},
        {"steps", "result.num_steps", "%.0f"},     {"train s", "result.training_seconds", "%.1f"},
        {"peak MB", "result.peak_rss_mb", "%.0f"},
    };
    char a[64], b[64];
    printf("\n  %-12s %14lld %14lld\n", "", id[0], id[1]);
    for (int k = 0; k < 2; k++)
        fmt_clean(k ? b : a, sizeof a, jstr(e[k], "status") ? jstr(e[k], "status") : "?", 14);
    printf("  %-12s %14s %14s\n", "status", a, b);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        for (int k = 0; k < 2; k++) {
            double v = jnum(e[k], rows[i].path, NAN);
            if (isfinite(v))
                snprintf(k ? b : a, sizeof a, rows[i].fmt, v);
            else
                snprintf(k ? b : a, sizeof a, "-");
        }
        printf("  %-12s %14s %14s\n", rows[i].label, a, b);
    }
    double last[2], min[2];
    for (int k = 0; k < 2; k++) loss_summary(e[k], &last[k], &min[k]);
    for (int row = 0; row < 2; row++) {
        for (int k = 0; k < 2; k++) {
            double v = row ? min[k] : last[k];
            if (isfinite(v))
                snprintf(k ? b : a, sizeof a, "%.4f", v);
            else
                snprintf(k ? b : a, sizeof a, "-");
        }
        printf("  %-12s %14s %14s\n", row ? "lowest loss" : "final loss", a, b);
    }
    rc = 0;
fail:
    cJSON_Delete(e[0]);
    cJSON_Delete(e[1]);
    conn_close(&c);
    return rc;
}

/* report.c - `nightshift report`: what the night did and learned in one
 * scope, as Markdown on stdout, from GET /v1/report (daemon/serve/report.h
 * describes every field; the daemon's /report page draws the same object). */

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "daemon/client/client.h"
#include "daemon/client/cmd.h"
#include "daemon/client/conn.h"
#include "daemon/client/fmt.h"

#define MAX_CURVE_ROWS 40 /* improvements of the anytime curve shown (the last ones) */

static const cmd_help_t report_help = {
    "report", "[--dataset D] [--budget B] [--baseline ID] [--json]",
    "The morning report of one dataset and budget, as Markdown: the hours and runs,\n"
    "the best configuration against the baseline in units of the measured noise,\n"
    "its val_bpb and its sealed test_bpb beside the baseline's, the best val_bpb so\n"
    "far against time, what each spec field did when it alone moved between two\n"
    "configurations (mean change of val_bpb, standard error, pairs), and what\n"
    "failed and why. The daemon serves the same report as a page at /report.\n\n"
    "  --dataset D       the dataset (default: the daemon's default scope)\n"
    "  --budget B        time:SECONDS or tokens:N (default: as --dataset)\n"
    "  --baseline ID     compare with the configuration of experiment ID (default:\n"
    "                    that of the scope's first succeeded run)\n"
    "  --json            the daemon's JSON as is\n"};

/* Text fit for a Markdown table cell: control characters cleaned (fmt_clean),
 * '|' escaped and at most max characters, into buf. */
static const char *cell(const char *s, char *buf, size_t len, size_t max) {
    char clean[512];
    size_t n = 0;
    fmt_clean(clean, sizeof clean, s ? s : "", max);
    for (const char *p = clean; *p && n + 3 < len; p++) {
        if (*p == '|') buf[n++] = '\\';
        buf[n++] = *p;
    }
    buf[n] = '\0';
    return buf;
}

/* A number with digits after the point, or "-" when v is not a number. */
static const char *number(const cJSON *v, int digits, char *buf, size_t len) {
    if (!cJSON_IsNumber(v)) return "-";
    snprintf(buf, len, "%.*f", digits, v->valuedouble);
    return buf;
}

/* A spec value (a leaf of an axis) as text, into buf. */
static const char *value(const cJSON *v, char *buf, size_t len) {
    char raw[256];
    if (jtext(v, raw, sizeof raw) < 0) snprintf(raw, sizeof raw, "(absent)");
    return cell(raw, buf, len, 60);
}

/* "#12 "name"" for a configuration, into buf. */
static const char *config_label(const cJSON *c, char *buf, size_t len) {
    char name[160];
    if (jstr(c, "name"))
        snprintf(buf, len, "#%" PRId64 " \"%s\"", (int64_t)jnum(c, "id", 0),
                 cell(jstr(c, "name"), name, sizeof name, 40));
    else
        snprintf(buf, len, "#%" PRId64, (int64_t)jnum(c, "id", 0));
    return buf;
}

static void print_title(const cJSON *r) {
    char ds[160], b[48];
    const char *kind = jstr(r, "budget_kind");
    double budget = jnum(r, "budget", 0);
    if (kind && !strcmp(kind, "tokens"))
        printf("# Night report: %s, %s tokens a run\n\n",
               cell(jstr(r, "dataset"), ds, sizeof ds, 60), fmt_commas(budget, b, sizeof b));
    else
        printf("# Night report: %s, %g s a run\n\n", cell(jstr(r, "dataset"), ds, sizeof ds, 60),
               budget);
}

static void print_summary(const cJSON *r) {
    char a[32], b[32], first[32], last[32];
    const cJSON *t = jget(r, "time");
    double hours = jnum(t, "hours", NAN);
    printf("%.0f runs", jnum(r, "runs.total", 0));
    if (isfinite(hours))
        printf(" from %s to %s: %s of night, %s of runs",
               fmt_local_time(jstr(t, "first_started"), first, sizeof first),
               fmt_local_time(jstr(t, "last_finished"), last, sizeof last),
               fmt_duration(hours * 3600, a, sizeof a),
               fmt_duration(jnum(t, "run_hours", 0) * 3600, b, sizeof b));
    printf(". %.0f configurations succeeded.", jnum(r, "configurations", 0));
    const cJSON *sd = jget(r, "noise.sd");
    if (cJSON_IsNumber(sd))
        printf(" The measured seed noise is sd %.6f (from %.0f configurations with repeats, %.0f "
               "runs).\n\n",
               sd->valuedouble, jnum(r, "noise.configurations", 0), jnum(r, "noise.runs", 0));
    else
        printf(" No configuration has two seeds yet, so the noise is not measured.\n\n");

    printf("| status | runs |\n|---|---:|\n");
    const cJSON *by = jget(r, "runs.by_status"), *s;
    cJSON_ArrayForEach(s, by) {
        char name[64];
        printf("| %s | %.0f |\n", cell(s->string, name, sizeof name, 20), s->valuedouble);
    }
    printf("\n");
}

/* A configuration's row of the outcome table. */
static void outcome_row(const char *role, const cJSON *c) {
    char label[200], m[32], sd[32], tb[32], tsd[32], why[300];
    if (!cJSON_IsObject(c)) {
        printf("| %s | - | - | - | - |\n", role);
        return;
    }
    const cJSON *t = jget(c, "test");
    printf("| %s | %s | %s", role, config_label(c, label, sizeof label),
           number(jget(c, "mean_val_bpb"), 6, m, sizeof m));
    if (cJSON_IsNumber(jget(c, "val_bpb_sd")))
        printf(" ± %s", number(jget(c, "val_bpb_sd"), 6, sd, sizeof sd));
    printf(" | %.0f | ", jnum(c, "n_seeds", 0));
    if (cJSON_IsNumber(jget(t, "test_bpb"))) {
        printf("%s", number(jget(t, "test_bpb"), 6, tb, sizeof tb));
        if (cJSON_IsNumber(jget(t, "test_bpb_sd")))
            printf(" ± %s", number(jget(t, "test_bpb_sd"), 6, tsd, sizeof tsd));
        printf(" (%.0f of %.0f runs)", jnum(t, "test_n", 0), jnum(t, "runs", 0));
    } else {
        printf("none: %s", cell(jstr(t, "test_reason"), why, sizeof why, 200));
    }
    printf(" |\n");
}

static void print_outcome(const cJSON *r) {
    const cJSON *best = jget(r, "best"), *base = jget(r, "baseline"),
                *v = jget(r, "versus_baseline");
    printf("## The answer\n\n");
    if (!cJSON_IsObject(best)) {
        printf("Nothing has succeeded in this scope yet.\n\n");
        return;
    }
    printf("| | configuration | mean val_bpb | seeds | test_bpb (sealed) |\n"
           "|---|---|---:|---:|---:|\n");
    outcome_row("best", best);
    outcome_row("baseline", base);
    printf("\n");
    if (!cJSON_IsObject(v)) return;
    double delta = jnum(v, "delta", 0), z = jnum(v, "z", NAN), sds = jnum(v, "in_noise_sds", NAN);
    if (jnum(best, "id", 0) == jnum(base, "id", -1)) {
        printf("The baseline is still the best configuration.\n\n");
    } else {
        printf("The best is %.6f bpb %s the baseline", fabs(delta), delta <= 0 ? "below" : "above");
        if (isfinite(z))
            printf(": %.2f noise sd, %.2f standard errors of the difference (z = %.2f; the "
                   "agent adopts past 2)",
                   fabs(sds), fabs(z), z);
        else
            printf(" (the noise is not measured yet: no unit to judge it in)");
        printf(".\n\n");
    }
    double tb = jnum(best, "test.test_bpb", NAN), tbase = jnum(base, "test.test_bpb", NAN);
    if (isfinite(tb) && isfinite(tbase) && jnum(best, "id", 0) != jnum(base, "id", -1))
        printf("On the sealed test split, which nothing ranked by, the best is %.6f %s the "
               "baseline (on val_bpb: %.6f %s). A test gain much smaller than the val gain says "
               "the night overfit its validation split.\n\n",
               fabs(tb - tbase), tb <= tbase ? "below" : "above", fabs(delta),
               delta <= 0 ? "below" : "above");
    const cJSON *ch = jget(v, "changes"), *c;
    if (cJSON_GetArraySize(ch) > 0) {
        printf("What the best changed from the baseline:\n\n");
        cJSON_ArrayForEach(c, ch) {
            char axis[128], from[128], to[128];
            printf("- %s: %s → %s\n", cell(jstr(c, "axis"), axis, sizeof axis, 60),
                   value(jget(c, "from"), from, sizeof from), value(jget(c, "to"), to, sizeof to));
        }
        printf("\n");
    }
}

/* The anytime curve's improvements (and its last point), the last
 * MAX_CURVE_ROWS of them. */
static void print_anytime(const cJSON *r) {
    const cJSON *pts = jget(r, "anytime"), *p;
    int n = cJSON_GetArraySize(pts), shown = 0, rows = 0;
    double prev = NAN;
    printf("## Best so far\n\n");
    if (!n) {
        printf("No run has finished.\n\n");
        return;
    }
    /* Count the rows first, so that only the last MAX_CURVE_ROWS print. */
    cJSON_ArrayForEach(p, pts) {
        double b = jnum(p, "best", NAN);
        if ((isfinite(b) && !(b == prev)) || !p->next) rows++;
        if (isfinite(b)) prev = b;
    }
    printf("The lowest val_bpb of any single run, against the time since the first run started "
           "and the run time spent; one row per improvement.\n\n"
           "| time | run time | run | val_bpb | best so far |\n|---:|---:|---:|---:|---:|\n");
    prev = NAN;
    cJSON_ArrayForEach(p, pts) {
        double b = jnum(p, "best", NAN);
        int row = (isfinite(b) && !(b == prev)) || !p->next;
        if (isfinite(b)) prev = b;
        if (!row || rows - shown++ > MAX_CURVE_ROWS) continue;
        char v[32], bb[32], at[32], spent[32];
        printf("| %s | %s | #%" PRId64 " | %s | %s |\n",
               fmt_duration(jnum(p, "elapsed_h", 0) * 3600, at, sizeof at),
               fmt_duration(jnum(p, "spent_h", 0) * 3600, spent, sizeof spent),
               (int64_t)jnum(p, "id", 0), number(jget(p, "val_bpb"), 6, v, sizeof v),
               number(jget(p, "best"), 6, bb, sizeof bb));
    }
    printf("\n");
}

/* mean ± se (where from) of an effect, or "-" parts. */
static void effect_cells(const cJSON *e) {
    char m[32], se[32];
    printf(" %.0f | %s | ", jnum(e, "pairs", 0), number(jget(e, "mean"), 4, m, sizeof m));
    if (cJSON_IsNumber(jget(e, "se")))
        printf("%s (%s)", number(jget(e, "se"), 4, se, sizeof se), jstr(e, "se_from"));
    else
        printf("-");
    printf(" |\n");
}

static void print_axes(const cJSON *r) {
    const cJSON *axes = jget(r, "axes"), *a;
    printf("## What each axis did\n\n");
    if (!cJSON_GetArraySize(axes)) {
        printf("No two configurations differ in one axis alone yet.\n\n");
        return;
    }
    printf("Every pair of configurations that differ in one spec field alone: the change of mean "
           "val_bpb from the lower value to the higher (negative is better), its standard error "
           "(over the pairs, or from the noise for one pair) and the number of pairs.\n\n"
           "| axis | move | pairs | mean change | se |\n|---|---|---:|---:|---:|\n");
    cJSON_ArrayForEach(a, axes) {
        char axis[128];
        cell(jstr(a, "axis"), axis, sizeof axis, 60);
        const cJSON *moves = jget(a, "moves"), *m;
        if (cJSON_IsNumber(jget(a, "mean")) && cJSON_GetArraySize(moves) > 1) {
            printf("| %s | any increase |", axis);
            effect_cells(a);
        }
        cJSON_ArrayForEach(m, moves) {
            char from[128], to[128];
            printf("| %s | %s → %s |", axis, value(jget(m, "from"), from, sizeof from),
                   value(jget(m, "to"), to, sizeof to));
            effect_cells(m);
        }
    }
    printf("\n");
}

static void print_failures(const cJSON *r) {
    const cJSON *f = jget(r, "failures"), *e;
    int total = (int)jnum(r, "failures_total", 0);
    printf("## What failed\n\n");
    if (!total) {
        printf("Nothing failed.\n\n");
        return;
    }
    printf("| run | name | status | reason |\n|---:|---|---|---|\n");
    cJSON_ArrayForEach(e, f) {
        char name[160], status[40], reason[600];
        printf("| #%" PRId64 " | %s | %s | %s |\n", (int64_t)jnum(e, "id", 0),
               cell(jstr(e, "name") ? jstr(e, "name") : "-", name, sizeof name, 40),
               cell(jstr(e, "status"), status, sizeof status, 20),
               cell(jstr(e, "reason") ? jstr(e, "reason") : "-", reason, sizeof reason, 240));
    }
    if (total > cJSON_GetArraySize(f))
        printf("\n%d failures in all; the first %d are listed.\n", total, cJSON_GetArraySize(f));
    printf("\n");
}

int report_main(int argc, char **argv) {
    const cmd_help_t *h = &report_help;
    conn_opts_t o = {0};
    conn_t c = {0};
    int json = 0, rc;
    cJSON *r = NULL;
    const char *dataset = NULL, *budget = NULL, *baseline = NULL;
    line_t path = {"/v1/report", 10};
    const cmd_opt_t opts[] = {{"--dataset", .value = &dataset},
                              {"--budget", .value = &budget},
                              {"--baseline", .value = &baseline},
                              {"--json", .flag = &json},
                              {0}};
    if (!cmd_parse_args(argc, argv, h, &o, opts, NULL, &rc)) return rc;
    if (baseline && cmd_positive(baseline) < 0)
        return cmd_usage_error(h, "--baseline: expected an experiment id, got '%s'", baseline);
    line_add_scope(&path, dataset, budget);
    if (baseline) line_add_query(&path, "baseline", baseline);
    if ((rc = conn_open(&c, &o, h)) != 0) goto done;
    if ((rc = conn_get_raw(&c, path.s, json, &r)) != 0 || json) goto done;
    if (!cJSON_IsObject(jget(r, "runs")) || !cJSON_IsArray(jget(r, "anytime"))) {
        conn_unexpected("not a report");
        rc = CLIENT_EXIT_API;
        goto done;
    }
    print_title(r);
    print_summary(r);
    print_outcome(r);
    print_anytime(r);
    print_axes(r);
    print_failures(r);
    rc = fflush(stdout) == 0 ? 0 : CLIENT_EXIT_API;
done:
    cJSON_Delete(r);
    conn_close(&c);
    return rc;
}

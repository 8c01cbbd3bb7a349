/* report_doc.c - the night report as Markdown or as an HTML page (see
 * report_doc.h). The sections are written once against a small writer
 * (headings, paragraphs, lists, tables); the writer escapes text for the
 * syntax it writes, so names and reasons from outside cannot break either. */
#include "daemon/serve/report_doc.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/shared/bytebuf.h"
#include "daemon/shared/jsonpath.h"
#include "engine/util.h"

#define MAX_CURVE_ROWS 40 /* improvements of the anytime curve shown (the last ones) */
#define MAX_DOC_BYTES  ((size_t)64 << 20)

/* ---------------------------------------------------------------- writer */

typedef struct {
    bytebuf_t b;
    bool html;
    bool failed;       /* out of memory on the way: no document */
    const char *align; /* the open table's columns: 'l' or 'r' each */
    int col;           /* the next cell's column */
} doc_t;

/* s escaped for the document: control characters as '?' (util_clean_text);
 * in Markdown '|', '\' and '<' escaped with '\' (cells, and no HTML from
 * outside), in HTML &, <, > and " as entities. */
static void text(doc_t *d, const char *s) {
    size_t n = strlen(s);
    char *clean = malloc(n + 1);
    if (!clean) {
        d->failed = true;
        return;
    }
    util_clean_text(clean, s, n, UTIL_CTRL_C1);
    for (const char *p = clean; *p; p++) {
        if (d->html && strchr("&<>\"", *p))
            bytebuf_puts(&d->b, *p == '&'   ? "&amp;"
                                : *p == '<' ? "&lt;"
                                : *p == '>' ? "&gt;"
                                            : "&quot;");
        else if (!d->html && strchr("|\\<", *p))
            bytebuf_putc(&d->b, '\\'), bytebuf_putc(&d->b, *p);
        else
            bytebuf_putc(&d->b, *p);
    }
    free(clean);
}

/* printf, then text(). */
static void vsay(doc_t *d, const char *fmt, va_list ap) {
    char buf[2048];
    vsnprintf(buf, sizeof buf, fmt, ap);
    text(d, buf);
}

static void say(doc_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(doc_t *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsay(d, fmt, ap);
    va_end(ap);
}

/* Markup as it is: md in Markdown, html in HTML (either may be NULL). */
static void mark(doc_t *d, const char *md, const char *html) {
    const char *s = d->html ? html : md;
    if (s) bytebuf_puts(&d->b, s);
}

/* A heading of level 1 (the title) or 2 (a section); in the page one level
 * lower, under the page's own h1. */
static void heading(doc_t *d, int level, const char *s) {
    if (d->html)
        bytebuf_printf(&d->b, "<h%d>", level + 1);
    else
        bytebuf_printf(&d->b, "%.*s ", level, "######");
    text(d, s);
    if (d->html)
        bytebuf_printf(&d->b, "</h%d>\n", level + 1);
    else
        bytebuf_puts(&d->b, "\n\n");
}

static void para(doc_t *d) {
    mark(d, NULL, "<p>");
}

static void para_end(doc_t *d) {
    mark(d, "\n\n", "</p>\n");
}

static void list(doc_t *d) {
    mark(d, NULL, "<ul>\n");
}

static void item(doc_t *d) {
    mark(d, "- ", "<li>");
}

static void item_end(doc_t *d) {
    mark(d, "\n", "</li>\n");
}

static void list_end(doc_t *d) {
    mark(d, "\n", "</ul>\n");
}

/* A table with the given header cells (NULL-terminated) and alignments
 * ('l' or 'r' per column). */
static void table(doc_t *d, const char *align, const char *const *head) {
    d->align = align;
    mark(d, NULL, "<div class=\"scroll\"><table>\n<thead><tr>");
    for (int i = 0; head[i]; i++) {
        if (d->html) {
            bytebuf_puts(&d->b, align[i] == 'r' ? "<th class=\"num\">" : "<th>");
            text(d, head[i]);
            bytebuf_puts(&d->b, "</th>");
        } else {
            bytebuf_puts(&d->b, "| ");
            text(d, head[i]);
            bytebuf_puts(&d->b, " ");
        }
    }
    mark(d, "|\n", "</tr></thead>\n<tbody>\n");
    for (int i = 0; !d->html && head[i]; i++)
        bytebuf_puts(&d->b, align[i] == 'r' ? "|---:" : "|---");
    mark(d, "|\n", NULL);
}

static void row(doc_t *d) {
    d->col = 0;
    mark(d, NULL, "<tr>");
}

/* Open the next cell; its text follows (say, text). */
static void cell(doc_t *d) {
    if (d->html)
        bytebuf_puts(&d->b, d->align[d->col] == 'r' ? "<td class=\"num\">" : "<td>");
    else
        bytebuf_puts(&d->b, "| ");
    d->col++;
}

static void cell_end(doc_t *d) {
    mark(d, " ", "</td>");
}

/* A whole cell of printf text. */
static void cellf(doc_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cellf(doc_t *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cell(d);
    vsay(d, fmt, ap);
    cell_end(d);
    va_end(ap);
}

static void row_end(doc_t *d) {
    mark(d, "|\n", "</tr>\n");
}

static void table_end(doc_t *d) {
    mark(d, "\n", "</tbody></table></div>\n");
}

/* --------------------------------------------------------------- values */

static const cJSON *get(const cJSON *o, const char *path) {
    return jsonpath_get(o, path);
}

static double num(const cJSON *o, const char *path) {
    return jsonpath_num(o, path, NAN);
}

static const char *str(const cJSON *o, const char *path) {
    return jsonpath_str(o, path);
}

/* v with digits after the point, or "-" (buf must hold 32 bytes). */
static const char *fixed(double v, int digits, char *buf) {
    if (!isfinite(v)) return "-";
    snprintf(buf, 32, "%.*f", digits, v);
    return buf;
}

/* Seconds as h:mm:ss (buf must hold 32 bytes). */
static const char *clock_text(double s, char *buf) {
    long t = isfinite(s) && s > 0 ? lround(s) : 0;
    snprintf(buf, 32, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    return buf;
}

/* An ISO-8601 UTC time as "2026-11-29 19:37:00 UTC" (buf: 32 bytes). */
static const char *utc_text(const char *iso, char *buf) {
    if (!iso || strlen(iso) < 19) return "-";
    snprintf(buf, 32, "%.10s %.8s UTC", iso, iso + 11);
    return buf;
}

/* A spec value (an axis's) as text: a string bare, anything else as JSON. */
static const char *value_text(const cJSON *v, char *buf, size_t len) {
    if (cJSON_IsString(v)) {
        snprintf(buf, len, "%s", v->valuestring);
    } else if (!v || cJSON_IsNull(v)) {
        snprintf(buf, len, "(absent)");
    } else {
        char *t = cJSON_PrintUnformatted(v);
        snprintf(buf, len, "%s", t ? t : "?");
        cJSON_free(t);
    }
    return buf;
}

/* "#12 "name"" for a configuration (buf: 256 bytes). */
static const char *label(const cJSON *c, char *buf) {
    if (str(c, "name"))
        snprintf(buf, 256, "#%.0f \"%.200s\"", num(c, "id"), str(c, "name"));
    else
        snprintf(buf, 256, "#%.0f", num(c, "id"));
    return buf;
}

/* -------------------------------------------------------------- sections */

static void title(doc_t *d, const cJSON *r) {
    char t[256];
    const char *kind = str(r, "budget_kind");
    if (kind && !strcmp(kind, "tokens"))
        snprintf(t, sizeof t, "Night report: %.64s, %.0f tokens a run", str(r, "dataset"),
                 num(r, "budget"));
    else if (kind && !strcmp(kind, "flops"))
        snprintf(t, sizeof t, "Night report: %.64s, %.3g FLOPs a run", str(r, "dataset"),
                 num(r, "budget"));
    else
        snprintf(t, sizeof t, "Night report: %.64s, %g s a run", str(r, "dataset"),
                 num(r, "budget"));
    heading(d, 1, t);
}

static void summary(doc_t *d, const cJSON *r) {
    char a[32], b[32], f[32], l[32];
    para(d);
    say(d, "%.0f runs", num(r, "runs.total"));
    if (isfinite(num(r, "time.hours")))
        say(d, " from %s to %s: %s of night, %s of runs", utc_text(str(r, "time.first_started"), f),
            utc_text(str(r, "time.last_finished"), l), clock_text(num(r, "time.hours") * 3600, a),
            clock_text(num(r, "time.run_hours") * 3600, b));
    say(d, "; %.0f configurations succeeded. ", num(r, "configurations"));
    if (isfinite(num(r, "noise.sd")))
        say(d,
            "The measured seed noise is sd %.6f (pooled over %.0f configurations with repeats, "
            "%.0f runs).",
            num(r, "noise.sd"), num(r, "noise.configurations"), num(r, "noise.runs"));
    else
        say(d, "No configuration has two seeds yet, so the noise is not measured.");
    para_end(d);
    static const char *const head[] = {"status", "runs", NULL};
    table(d, "lr", head);
    const cJSON *s;
    cJSON_ArrayForEach(s, get(r, "runs.by_status")) {
        row(d);
        cellf(d, "%s", s->string);
        cellf(d, "%.0f", s->valuedouble);
        row_end(d);
    }
    table_end(d);
}

/* A configuration's row of the answer's table. */
static void answer_row(doc_t *d, const char *role, const cJSON *c) {
    char lb[256], m[32], sd[32], t[32], tsd[32];
    row(d);
    cellf(d, "%s", role);
    if (!cJSON_IsObject(c)) {
        for (int i = 0; i < 4; i++) cellf(d, "-");
        row_end(d);
        return;
    }
    cellf(d, "%s", label(c, lb));
    if (isfinite(num(c, "val_bpb_sd")))
        cellf(d, "%s ± %s", fixed(num(c, "mean_val_bpb"), 6, m),
              fixed(num(c, "val_bpb_sd"), 6, sd));
    else
        cellf(d, "%s", fixed(num(c, "mean_val_bpb"), 6, m));
    cellf(d, "%.0f", num(c, "n_seeds"));
    if (isfinite(num(c, "test.test_bpb")) && isfinite(num(c, "test.test_bpb_sd")))
        cellf(d, "%s ± %s (%.0f of %.0f runs)", fixed(num(c, "test.test_bpb"), 6, t),
              fixed(num(c, "test.test_bpb_sd"), 6, tsd), num(c, "test.test_n"),
              num(c, "test.runs"));
    else if (isfinite(num(c, "test.test_bpb")))
        cellf(d, "%s (%.0f of %.0f runs)", fixed(num(c, "test.test_bpb"), 6, t),
              num(c, "test.test_n"), num(c, "test.runs"));
    else
        cellf(d, "none: %.300s", str(c, "test.test_reason") ? str(c, "test.test_reason") : "?");
    row_end(d);
}

static void answer(doc_t *d, const cJSON *r) {
    const cJSON *best = get(r, "best"), *base = get(r, "baseline"), *v = get(r, "versus_baseline");
    heading(d, 2, "The answer");
    if (!cJSON_IsObject(best)) {
        para(d);
        say(d, "Nothing has succeeded in this scope yet.");
        para_end(d);
        return;
    }
    static const char *const head[] = {"",      "configuration",     "mean val_bpb",
                                       "seeds", "test_bpb (sealed)", NULL};
    table(d, "llrrr", head);
    answer_row(d, "best", best);
    answer_row(d, "baseline", base);
    table_end(d);
    if (!cJSON_IsObject(v)) return;
    bool same = num(best, "id") == num(base, "id");
    double delta = num(v, "delta"), z = num(v, "z");
    para(d);
    if (same)
        say(d, "The baseline is still the best configuration.");
    else if (isfinite(z)) {
        say(d,
            "The best is %.6f bpb %s the baseline: %.2f noise sd, %.2f standard errors of the "
            "difference (z = %.2f; the agent adopts past 2).",
            fabs(delta), delta <= 0 ? "below" : "above", fabs(num(v, "in_noise_sds")), fabs(z), z);
        double df = num(v, "noise_df"), p = num(v, "p_two_sided");
        char often[32];
        if (100 * p < 0.01)
            snprintf(often, sizeof often, "under 0.01%%");
        else
            snprintf(often, sizeof often, "%.2g%%", 100 * p);
        if (isfinite(df) && isfinite(p))
            say(d,
                " The noise sd is itself measured, on %.0f degree%s of freedom: by chance alone "
                "a difference of %.2f standard errors comes up %s of the time (Student's t, "
                "two-sided), and 5%% takes %.2f.",
                df, df == 1 ? "" : "s", fabs(z), often, num(v, "t_at_5_percent"));
    } else
        say(d,
            "The best is %.6f bpb %s the baseline (the noise is not measured yet: there is no "
            "unit to judge it in).",
            fabs(delta), delta <= 0 ? "below" : "above");
    para_end(d);
    double tb = num(best, "test.test_bpb"), tbase = num(base, "test.test_bpb");
    if (!same && isfinite(tb) && isfinite(tbase)) {
        para(d);
        say(d,
            "On the sealed test split, which nothing ranked by, the best is %.6f %s the baseline "
            "(on val_bpb: %.6f %s). A test gain much smaller than the val gain says the night "
            "overfit its validation split.",
            fabs(tb - tbase), tb <= tbase ? "below" : "above", fabs(delta),
            delta <= 0 ? "below" : "above");
        para_end(d);
    }
    const cJSON *c;
    if (cJSON_GetArraySize(get(v, "changes")) > 0) {
        para(d);
        say(d, "What the best changed from the baseline:");
        para_end(d);
        list(d);
        cJSON_ArrayForEach(c, get(v, "changes")) {
            char from[128], to[128];
            item(d);
            say(d, "%s: %s → %s", str(c, "axis"), value_text(get(c, "from"), from, sizeof from),
                value_text(get(c, "to"), to, sizeof to));
            item_end(d);
        }
        list_end(d);
    }
}

/* The anytime curve's improvements and its last point, the last
 * MAX_CURVE_ROWS of them; in HTML the chart goes first. */
static void anytime(doc_t *d, const cJSON *r) {
    const cJSON *pts = get(r, "anytime"), *p;
    heading(d, 2, "Best so far");
    if (!cJSON_GetArraySize(pts)) {
        para(d);
        say(d, "No run has finished.");
        para_end(d);
        return;
    }
    mark(d, NULL, "<div id=\"anytime-chart\" class=\"chart\" data-points=\"0\"></div>\n");
    para(d);
    say(d, "The lowest val_bpb of any single run, against the time since the first run started "
           "and the run time spent; one row per improvement, then the last run that finished.");
    para_end(d);
    int rows = 0, shown = 0;
    double prev = NAN;
    cJSON_ArrayForEach(p, pts) { /* count the rows first: only the last ones print */
        double b = num(p, "best");
        rows += (isfinite(b) && !(b == prev)) || !p->next;
        if (isfinite(b)) prev = b;
    }
    static const char *const head[] = {"time", "run time", "run", "val_bpb", "best so far", NULL};
    table(d, "rrrrr", head);
    prev = NAN;
    cJSON_ArrayForEach(p, pts) {
        double b = num(p, "best");
        bool is_row = (isfinite(b) && !(b == prev)) || !p->next;
        if (isfinite(b)) prev = b;
        if (!is_row || rows - shown++ > MAX_CURVE_ROWS) continue;
        char at[32], spent[32], v[32], bb[32];
        row(d);
        cellf(d, "%s", clock_text(num(p, "elapsed_h") * 3600, at));
        cellf(d, "%s", clock_text(num(p, "spent_h") * 3600, spent));
        cellf(d, "#%.0f", num(p, "id"));
        cellf(d, "%s", fixed(num(p, "val_bpb"), 6, v));
        cellf(d, "%s", fixed(b, 6, bb));
        row_end(d);
    }
    table_end(d);
}

/* The pairs, mean and se cells of an effect. */
static void effect_cells(doc_t *d, const cJSON *e) {
    char m[32], se[32];
    cellf(d, "%.0f", num(e, "pairs"));
    cellf(d, "%s", fixed(num(e, "mean"), 4, m));
    if (isfinite(num(e, "se")))
        cellf(d, "%s (%s)", fixed(num(e, "se"), 4, se),
              str(e, "se_from") ? str(e, "se_from") : "?");
    else
        cellf(d, "-");
}

static void axes(doc_t *d, const cJSON *r) {
    const cJSON *a, *m;
    heading(d, 2, "What each axis did");
    para(d);
    if (!cJSON_GetArraySize(get(r, "axes"))) {
        say(d, "No two configurations differ in one axis alone yet.");
        para_end(d);
        return;
    }
    say(d, "Every pair of configurations that differ in one spec field alone: the change of mean "
           "val_bpb from the lower value to the higher (negative is better), its standard error "
           "(over the pairs, or from the noise for one pair) and the number of pairs.");
    para_end(d);
    static const char *const head[] = {"axis", "move", "pairs", "mean change", "se", NULL};
    table(d, "llrrr", head);
    cJSON_ArrayForEach(a, get(r, "axes")) {
        if (isfinite(num(a, "mean")) && cJSON_GetArraySize(get(a, "moves")) > 1) {
            row(d);
            cellf(d, "%s", str(a, "axis"));
            cellf(d, "any increase");
            effect_cells(d, a);
            row_end(d);
        }
        cJSON_ArrayForEach(m, get(a, "moves")) {
            char from[128], to[128];
            row(d);
            cellf(d, "%s", str(a, "axis"));
            cellf(d, "%s → %s", value_text(get(m, "from"), from, sizeof from),
                  value_text(get(m, "to"), to, sizeof to));
            effect_cells(d, m);
            row_end(d);
        }
    }
    table_end(d);
}

/* A table of the runs under key (report.h's failures or pruned), and how
 * many there are in all when not every one is listed. */
static void run_table(doc_t *d, const cJSON *r, const char *key, const char *key_total) {
    const cJSON *runs = get(r, key), *e;
    int total = (int)num(r, key_total);
    static const char *const head[] = {"run", "name", "status", "reason", NULL};
    table(d, "rlll", head);
    cJSON_ArrayForEach(e, runs) {
        row(d);
        cellf(d, "#%.0f", num(e, "id"));
        cellf(d, "%.200s", str(e, "name") ? str(e, "name") : "-");
        cellf(d, "%s", str(e, "status"));
        cellf(d, "%.600s", str(e, "reason") ? str(e, "reason") : "-");
        row_end(d);
    }
    table_end(d);
    if (total > cJSON_GetArraySize(runs)) {
        para(d);
        say(d, "%d in all; the first %d are listed.", total, cJSON_GetArraySize(runs));
        para_end(d);
    }
}

static void failures(doc_t *d, const cJSON *r) {
    heading(d, 2, "What failed");
    if (num(r, "failures_total") > 0) {
        run_table(d, r, "failures", "failures_total");
    } else {
        para(d);
        say(d, "Nothing failed.");
        para_end(d);
    }
    if (num(r, "pruned_total") > 0) {
        para(d);
        say(d, "Pruned, because their training loss lagged the median of the finished runs at the "
               "same progress (they never rank):");
        para_end(d);
        run_table(d, r, "pruned", "pruned_total");
    }
}

/* The runs their neighbours slowed, and what that may have cost them. */
static void slowed(doc_t *d, const cJSON *r) {
    if (!(num(r, "slowed_total") > 0)) return;
    heading(d, 2, "Slowed by the machine");
    para(d);
    say(d, "These runs trained well under this machine's quiet speed for their shape while "
           "their counters showed neighbours (other processes on their CPUs or elsewhere on the "
           "machine, or steal); a time budget's ranking of them follows the "
           "neighbours as much as the configuration. The cost is the val_bpb their own loss "
           "curve says the lost tokens were worth:");
    para_end(d);
    static const char *const head[] = {"run",           "name",        "val_bpb",    "slowdown",
                                       "its CPU share", "others' CPU", "cost (bpb)", NULL};
    table(d, "rlrrrrr", head);
    const cJSON *e;
    cJSON_ArrayForEach(e, get(r, "slowed")) {
        row(d);
        cellf(d, "#%.0f", num(e, "id"));
        cellf(d, "%.200s", str(e, "name") ? str(e, "name") : "-");
        cellf(d, "%.6f", num(e, "val_bpb"));
        cellf(d, "%.2f", num(e, "slowdown"));
        cellf(d, "%.0f%%", 100 * num(e, "cpu_share"));
        cellf(d, "%.0f%%", 100 * num(e, "others_cpu_share"));
        cellf(d, "%.4f", num(e, "slowdown_cost_bpb"));
        row_end(d);
    }
    table_end(d);
    if (num(r, "slowed_total") > cJSON_GetArraySize(get(r, "slowed"))) {
        para(d);
        say(d, "%.0f in all; the first %d are listed.", num(r, "slowed_total"),
            cJSON_GetArraySize(get(r, "slowed")));
        para_end(d);
    }
}

/* The sections in order into d. */
static void render(doc_t *d, const cJSON *r) {
    title(d, r);
    summary(d, r);
    answer(d, r);
    anytime(d, r);
    axes(d, r);
    failures(d, r);
    slowed(d, r);
}

/* The document written into d, or NULL when anything failed (b's own
 * failures are kept by it). */
static char *take(doc_t *d) {
    char *out = bytebuf_take(&d->b, NULL);
    if (d->failed) {
        free(out);
        out = NULL;
    }
    return out;
}

char *report_markdown(const cJSON *report) {
    doc_t d = {.html = false};
    bytebuf_init(&d.b, MAX_DOC_BYTES);
    render(&d, report);
    return take(&d);
}

char *report_html(const cJSON *report) {
    doc_t d = {.html = true};
    char *json = cJSON_PrintUnformatted(report);
    bytebuf_init(&d.b, MAX_DOC_BYTES);
    bytebuf_puts(&d.b, "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                       "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                       "<title>");
    say(&d, "nightshift report: %.64s", str(report, "dataset") ? str(report, "dataset") : "?");
    bytebuf_puts(&d.b, "</title>\n<link rel=\"icon\" href=\"data:,\">\n"
                       "<link rel=\"stylesheet\" href=\"/ui/uPlot.min.css\">\n"
                       "<link rel=\"stylesheet\" href=\"/ui/app.css\">\n</head>\n<body>\n"
                       "<header>\n  <h1><a href=\"/\">nightshift</a></h1>\n"
                       "  <p id=\"summary\">the morning report &middot; <a href=\"/\">the "
                       "dashboard</a></p>\n</header>\n<main id=\"report\">\n");
    render(&d, report);
    bytebuf_puts(&d.b, "</main>\n<script type=\"application/json\" id=\"report-data\">");
    /* JSON inside a script element: only "</" could end it early. */
    for (const char *p = json ? json : "null"; *p; p++) {
        if (p[0] == '<' && p[1] == '/')
            bytebuf_puts(&d.b, "<\\");
        else
            bytebuf_putc(&d.b, *p);
    }
    bytebuf_puts(&d.b, "</script>\n<script src=\"/ui/uPlot.iife.min.js\"></script>\n"
                       "<script src=\"/ui/report.js\"></script>\n</body>\n</html>\n");
    d.failed |= !json;
    cJSON_free(json);
    return take(&d);
}

/* show.c - `nightshift show`: one experiment, or its log. */
#include "daemon/client/client.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "daemon/client/cmd.h"
#include "daemon/client/conn.h"
#include "daemon/client/fmt.h"
#include "engine/share.h"
#include "engine/spec.h"

#define LOG_TAIL_DEFAULT 16384 /* bytes of the run's log for show --log */
#define METRICS_SHOWN    5     /* last metrics rows in show */

static const cmd_help_t show_help = {
    "show", "ID [--json] [--log [--tail BYTES]]",
    "One experiment: status and reason, times, the key spec fields, the result's\n"
    "key numbers, live progress while it runs, and the last metrics.\n\n"
    "  --json            the daemon's JSON as is (full spec, result and metrics)\n"
    "  --log             print the tail of the run's log instead\n"
    "  --tail BYTES      how much of the log (default 16384)\n" CMD_OFFLINE_HELP};

/* Append "key value" for each path present in o, comma-separated; the key
 * shown is the path's last component. */
static void add_fields(line_t *l, const cJSON *o, const char *const *paths) {
    char val[256];
    for (; *paths; paths++) {
        if (jtext(jget(o, *paths), val, sizeof val) < 0) continue;
        const char *dot = strrchr(*paths, '.');
        line_add(l, "%s%s %s", l->n ? ", " : "", dot ? dot + 1 : *paths, val);
    }
}

static void show_row(const char *label, const line_t *l) {
    if (l->n) printf("  %-10s %s\n", label, l->s);
}

/* The experiment line, its status, tags and origin. */
static void show_identity(const cJSON *e) {
    line_t l = {0};
    const cJSON *tags = jget(e, "tags");
    printf("experiment %" PRId64, (int64_t)jnum(e, "id", 0));
    if (jstr(e, "name")) {
        fputs(" \"", stdout);
        fmt_put_clean(stdout, jstr(e, "name"));
        fputc('"', stdout);
    }
    fputc('\n', stdout);
    line_add_clean(&l, jstr(e, "status") ? jstr(e, "status") : "?", 32);
    if (jstr(e, "reason")) {
        line_add(&l, " (");
        line_add_clean(&l, jstr(e, "reason"), 400);
        line_add(&l, ")");
    }
    show_row("status", &l);
    l.n = 0;
    for (const cJSON *t = cJSON_IsArray(tags) ? tags->child : NULL; t; t = t->next)
        if (cJSON_IsString(t)) {
            line_add(&l, "%s", l.n ? ", " : "");
            line_add_clean(&l, t->valuestring, 64);
        }
    show_row("tags", &l);
    l.n = 0;
    add_fields(&l, e,
               (const char *const[]){"source", "via", "priority", "attempt", "parent", NULL});
    show_row("origin", &l);
}

/* When it was created, started and finished, and its worker. */
static void show_times(const cJSON *e) {
    static const char *const times[] = {"created", "started", "finished"};
    char a[64], b[64];
    line_t l = {0};
    for (int i = 0; i < 3; i++) {
        if (!jstr(e, times[i])) continue;
        l.n = 0;
        line_add(&l, "%s", fmt_local_time(jstr(e, times[i]), a, sizeof a));
        double t0 = fmt_iso_seconds(jstr(e, "started")), t1 = fmt_iso_seconds(jstr(e, "finished"));
        if (i == 2 && isfinite(t0) && isfinite(t1))
            line_add(&l, " (ran %s)", fmt_duration(t1 - t0, b, sizeof b));
        show_row(times[i], &l);
    }
    l.n = 0;
    add_fields(&l, e, (const char *const[]){"pid", "exit_code", NULL});
    if (cJSON_IsNumber(jget(e, "term_signal"))) {
        int sig = (int)jnum(e, "term_signal", 0);
        line_add(&l, "%ssignal %d (%s)", l.n ? ", " : "", sig, strsignal(sig));
    }
    show_row("worker", &l);
}

/* The key fields of the spec; res (may be NULL) tells a dataset's vocabulary. */
static void show_spec(const cJSON *spec, const cJSON *res) {
    static const char *const model_f[] = {"model.depth",
                                          "model.n_embd",
                                          "model.n_head",
                                          "model.n_kv_head",
                                          "model.mlp",
                                          "model.mlp_ratio",
                                          "model.seq_len",
                                          "model.pos",
                                          "model.window_pattern",
                                          "model.ve_layers",
                                          "model.ve_gate_channels",
                                          "model.tie_embeddings",
                                          NULL};
    static const char *const train_f[] = {"train.batch_size",     "train.total_batch_tokens",
                                          "train.matrix_lr",      "train.embedding_lr",
                                          "train.unembedding_lr", NULL};
    line_t l = {0};
    /* the budget the run used, as the spec's rule says (the other one is 0) */
    spec_t parsed;
    char perr[SPEC_ERR_LEN];
    const char *budget = NULL;
    if (spec_from_json(spec, &parsed, perr, sizeof perr) == 0) {
        budget = spec_budget_field(&parsed);
        spec_free(&parsed);
    }
    add_fields(&l, spec, (const char *const[]){"dataset", NULL});
    add_fields(&l, spec,
               (const char *const[]){budget ? budget : "seed", budget ? "seed" : NULL, NULL});
    show_row("spec", &l);
    l.n = 0;
    add_fields(&l, spec, model_f);
    /* vocab_size 0 in a spec means the dataset's; a finished run tells which. */
    double vocab = jnum(spec, "model.vocab_size", 0), embd = jnum(spec, "model.n_embd", 0);
    if (!cJSON_IsObject(jget(spec, "model")))
        ;
    else if (vocab > 0)
        line_add(&l, "%svocab_size %.0f", l.n ? ", " : "", vocab);
    else if (cJSON_IsNumber(jget(res, "params_wte")) && embd > 0)
        line_add(&l, "%svocab_size %.0f (the dataset's)", l.n ? ", " : "",
                 jnum(res, "params_wte", 0) / embd);
    else
        line_add(&l, "%svocab_size from the dataset", l.n ? ", " : "");
    show_row("model", &l);
    l.n = 0;
    add_fields(&l, spec, train_f);
    show_row("train", &l);
}

/* The result's key numbers. */
static void show_result(const cJSON *res) {
    char a[64];
    line_t l = {0};
    if (cJSON_IsNumber(jget(res, "val_bpb"))) line_add(&l, "val_bpb %.6f", jnum(res, "val_bpb", 0));
    if (cJSON_IsNumber(jget(res, "params_total")))
        line_add(&l, "%sparams %s", l.n ? ", " : "",
                 fmt_commas(jnum(res, "params_total", 0), a, sizeof a));
    if (cJSON_IsNumber(jget(res, "num_steps")))
        line_add(&l, "%s%s steps", l.n ? ", " : "",
                 fmt_commas(jnum(res, "num_steps", 0), a, sizeof a));
    if (cJSON_IsNumber(jget(res, "training_seconds")))
        line_add(&l, "%s%.1f s training", l.n ? ", " : "", jnum(res, "training_seconds", 0));
    if (cJSON_IsNumber(jget(res, "tokens_per_second")))
        line_add(&l, "%s%s tok/s", l.n ? ", " : "",
                 fmt_commas(jnum(res, "tokens_per_second", 0), a, sizeof a));
    if (cJSON_IsNumber(jget(res, "mfu_percent"))) {
        line_add(&l, "%smfu %.2f%%", l.n ? ", " : "", jnum(res, "mfu_percent", 0));
        /* an MFU says little without the peak it divides by, and where that came from */
        if (cJSON_IsNumber(jget(res, "peak_gflops")))
            line_add(&l, " of %.1f GFLOP/s (%s)", jnum(res, "peak_gflops", 0),
                     jstr(res, "peak_source") ? jstr(res, "peak_source") : "peak");
        /* and the precision that ran: a bf16 run's peak is the bf16 one */
        if (jstr(res, "precision")) line_add(&l, ", %s", jstr(res, "precision"));
    }
    if (cJSON_IsNumber(jget(res, "peak_rss_mb")))
        line_add(&l, "%speak rss %.0f MiB", l.n ? ", " : "", jnum(res, "peak_rss_mb", 0));
    show_row("result", &l);
}

/* The run's share of the machine (engine/share.h): what its threads got,
 * what others took from its CPUs, its slowdown and what that cost. */
static void show_share(const cJSON *res) {
    line_t l = {0};
    if (!cJSON_IsNumber(jget(res, "slowdown"))) return;
    line_add(&l, "cpu %.0f%% of its runnable time, others %.0f%% and steal %.0f%% of its CPUs",
             100 * jnum(res, "cpu_share", 0), 100 * jnum(res, "others_cpu_share", 0),
             100 * jnum(res, "steal_share", 0));
    double slow = jnum(res, "slowdown", 0), cost = jnum(res, "slowdown_cost_bpb", 0);
    if (slow > 0) line_add(&l, ", slowdown %.2f", slow);
    const cJSON *from = jget(res, "quiet_source");
    if (jnum(res, "quiet_tokens_per_second", 0) > 0)
        line_add(&l, " (quiet %.0f tok/s, from %s)", jnum(res, "quiet_tokens_per_second", 0),
                 cJSON_IsString(from) ? from->valuestring : "its quiet steps");
    if (slow >= SHARE_SLOWED) line_add(&l, ": slowed by its neighbours");
    if (cost > 0) line_add(&l, ", costing about %.4f val_bpb", cost);
    show_row("share", &l);
}

/* The live progress of a running experiment. */
static void show_progress(const cJSON *prog) {
    char a[64], b[64];
    line_t l = {0};
    if (cJSON_IsNumber(jget(prog, "step")))
        line_add(&l, "step %" PRId64, (int64_t)jnum(prog, "step", 0));
    if (cJSON_IsNumber(jget(prog, "percent")))
        line_add(&l, "%s%.1f%% of the budget", l.n ? ", " : "", jnum(prog, "percent", 0));
    if (cJSON_IsNumber(jget(prog, "loss")))
        line_add(&l, "%sloss %.3f", l.n ? ", " : "", jnum(prog, "loss", 0));
    if (cJSON_IsNumber(jget(prog, "tok_s")))
        line_add(&l, "%s%s tok/s", l.n ? ", " : "",
                 fmt_commas(jnum(prog, "tok_s", 0), a, sizeof a));
    if (cJSON_IsNumber(jget(prog, "eta_s")))
        line_add(&l, "%sETA %s", l.n ? ", " : "",
                 fmt_duration(jnum(prog, "eta_s", 0), b, sizeof b));
    show_row("progress", &l);
}

/* The last METRICS_SHOWN metrics rows. */
static void show_metrics(const cJSON *metrics) {
    char a[64];
    int n = cJSON_GetArraySize(metrics);
    if (!cJSON_IsArray(metrics) || n == 0) return;
    int first = n > METRICS_SHOWN ? n - METRICS_SHOWN : 0;
    printf("  %-10s last %d of %d\n", "metrics", n - first, n);
    printf("  %10s %10s %10s %10s %10s\n", "step", "time_s", "loss", "lr_mult", "tok/s");
    for (int i = first; i < n; i++) {
        const cJSON *m = cJSON_GetArrayItem(metrics, i);
        printf("  %10" PRId64 " %10.1f %10.4f %10.3f %10s\n", (int64_t)jnum(m, "step", 0),
               jnum(m, "time_s", NAN), jnum(m, "loss", NAN), jnum(m, "lr_mult", NAN),
               fmt_commas(jnum(m, "tok_s", NAN), a, sizeof a));
    }
}

static void show_summary(const cJSON *e) {
    const cJSON *res = jget(e, "result"), *prog = jget(e, "progress");
    show_identity(e);
    show_times(e);
    show_spec(jget(e, "spec"), res);
    if (cJSON_IsObject(res)) {
        show_result(res);
        show_share(res);
    }
    if (cJSON_IsObject(prog)) show_progress(prog);
    show_metrics(jget(e, "metrics"));
}

int show_main(int argc, char **argv) {
    const cmd_help_t *h = &show_help;
    conn_opts_t o = {0};
    conn_t c = {.offline_ok = 1};
    const char *id_arg = NULL, *tail = NULL;
    int json = 0, log = 0, rc;
    cJSON *e = NULL;
    conn_reply_t r = {0};
    line_t path = {0};

    const cmd_opt_t opts[] = {
        {"--tail", .value = &tail}, {"--json", .flag = &json}, {"--log", .flag = &log}, {0}};
    cmd_args_t args = {.v = &id_arg, .max = 1, .too_many = "one ID at a time"};
    if (!cmd_parse_args(argc, argv, h, &o, opts, &args, &rc)) return rc;
    long long id = cmd_positive(id_arg);
    if (!id_arg) return cmd_usage_error(h, "no experiment ID given");
    if (id < 0) return cmd_usage_error(h, "expected an experiment id, got '%s'", id_arg);
    if (tail && (!log || cmd_positive(tail) < 0))
        return cmd_usage_error(h, "--tail needs --log and a positive number of bytes");
    if (json && log) return cmd_usage_error(h, "give --json or --log, not both");

    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    line_add(&path, "/v1/experiments/%lld", id);
    if (log) {
        line_add(&path, "/log?tail=%lld", tail ? cmd_positive(tail) : (long long)LOG_TAIL_DEFAULT);
        if ((rc = conn_request(&c, "GET", path.s, NULL, 0, &r)) != 0) goto fail;
        fwrite(r.body.data, 1, r.body.len, stdout);
        goto fail;
    }
    if ((rc = conn_get_raw(&c, path.s, json, &e)) != 0 || json) goto fail;
    if (!cJSON_IsObject(e)) {
        conn_unexpected("not an experiment object");
        rc = CLIENT_EXIT_API;
        goto fail;
    }
    show_summary(e);
fail:
    conn_reply_free(&r);
    cJSON_Delete(e);
    conn_close(&c);
    return rc;
}

/* best.c - `nightshift best` and `nightshift leaderboard`: one scope's best
 * configuration and its configurations by mean val_bpb. */

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "daemon/client/client.h"
#include "daemon/client/cmd.h"
#include "daemon/client/conn.h"
#include "daemon/client/fmt.h"

static const cmd_help_t best_help = {
    "best", "[--dataset D] [--budget B] [--json]",
    "The best configuration (lowest mean val_bpb over its seeds) on one dataset\n"
    "and budget. Its id, mean val_bpb and seeds go to stderr and its spec to\n"
    "stdout as indented JSON, ready to edit and resubmit:\n"
    "  nightshift best > next.json\n"
    "Says `nothing has succeeded yet` (exit 0) when no run has succeeded there.\n\n"
    "  --dataset D       the dataset (default: the default dataset)\n"
    "  --budget B        time:SECONDS or tokens:N (default: the budget most runs\n"
    "                    on the dataset used)\n"
    "  --json            the daemon's JSON as is\n"};

int best_main(int argc, char **argv) {
    const cmd_help_t *h = &best_help;
    conn_opts_t o = {0};
    conn_t c = {0};
    int json = 0, rc;
    cJSON *reply = NULL;
    const char *dataset = NULL, *budget = NULL;
    line_t path = {"/v1/best", 8};

    const cmd_opt_t opts[] = {{"--dataset", .value = &dataset},
                              {"--budget", .value = &budget},
                              {"--json", .flag = &json},
                              {0}};
    if (!cmd_parse_args(argc, argv, h, &o, opts, NULL, &rc)) return rc;
    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    line_add_scope(&path, dataset, budget);
    if ((rc = conn_get_raw(&c, path.s, json, &reply)) != 0 || json) goto fail;
    const cJSON *best = jget(reply, "best"), *spec = jget(best, "spec");
    rc = CLIENT_EXIT_API;
    if (cJSON_IsNull(best)) {
        fprintf(stderr, "nothing has succeeded yet\n");
        rc = 0;
        goto fail;
    }
    if (!cJSON_IsObject(spec)) {
        conn_unexpected(best ? "the best experiment has no spec" : "no best field");
        goto fail;
    }
    fprintf(stderr, "best: experiment %" PRId64, (int64_t)jnum(best, "id", 0));
    if (jstr(best, "name")) {
        fputs(" \"", stderr);
        fmt_put_clean(stderr, jstr(best, "name"));
        fputc('"', stderr);
    }
    /* val_bpb sits beside the id, or only in the result. */
    double bpb = jnum(best, "val_bpb", jnum(best, "result.val_bpb", NAN));
    double sd = jnum(best, "val_bpb_sd", NAN), n = jnum(best, "n_seeds", 1);
    if (isfinite(bpb)) fprintf(stderr, " val_bpb %.6f", bpb);
    if (isfinite(bpb) && isfinite(sd)) fprintf(stderr, " +- %.6f (sd of %.0f seeds)", sd, n);
    fputc('\n', stderr);
    fflush(stderr);
    if (fmt_json(stdout, spec, 0) < 0) {
        fprintf(stderr, "nightshift: out of memory\n");
        goto fail;
    }
    fputc('\n', stdout);
    rc = 0;
fail:
    cJSON_Delete(reply);
    conn_close(&c);
    return rc;
}

/* ------------------------------------------------------------ leaderboard */

static const cmd_help_t leaderboard_help = {
    "leaderboard", "[--dataset D] [--budget B] [--limit N] [--json]",
    "The leaderboard of one dataset and budget: one row per configuration (its\n"
    "repeats with different seeds together), best mean val_bpb first, with the\n"
    "standard deviation and number of seeds, and the measured noise.\n\n"
    "  --dataset D       the dataset (default: the default dataset)\n"
    "  --budget B        time:SECONDS or tokens:N (default: the budget most runs\n"
    "                    on the dataset used)\n"
    "  --limit N         at most N rows (default 20)\n"
    "  --json            the daemon's JSON as is\n"};

int leaderboard_main(int argc, char **argv) {
    const cmd_help_t *h = &leaderboard_help;
    conn_opts_t o = {0};
    conn_t c = {0};
    int json = 0, rc;
    cJSON *reply = NULL;
    const char *dataset = NULL, *budget = NULL, *limit = NULL;
    line_t path = {"/v1/leaderboard", 15};

    const cmd_opt_t opts[] = {{"--dataset", .value = &dataset},
                              {"--budget", .value = &budget},
                              {"--limit", .value = &limit},
                              {"--json", .flag = &json},
                              {0}};
    if (!cmd_parse_args(argc, argv, h, &o, opts, NULL, &rc)) return rc;
    if (limit && cmd_positive(limit) < 0)
        return cmd_usage_error(h, "--limit: expected a positive integer, got '%s'", limit);
    line_add_scope(&path, dataset, budget);
    if (limit) line_add_query(&path, "limit", limit);
    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    if ((rc = conn_get_raw(&c, path.s, json, &reply)) != 0 || json) goto fail;
    const cJSON *rows = jget(reply, "leaderboard");
    if (!cJSON_IsArray(rows)) {
        conn_unexpected("no leaderboard array");
        rc = CLIENT_EXIT_API;
        goto fail;
    }
    char scope[128];
    fmt_clean(scope, sizeof scope, jstr(reply, "dataset") ? jstr(reply, "dataset") : "?", 40);
    printf("dataset %s, budget %s %g\n", scope,
           jstr(reply, "budget_kind") ? jstr(reply, "budget_kind") : "?", jnum(reply, "budget", 0));
    if (!rows->child) {
        puts("nothing has succeeded yet");
        goto fail;
    }
    printf("%6s  %9s  %9s  %5s  %s\n", "ID", "MEAN_BPB", "SD", "SEEDS", "NAME");
    for (const cJSON *r = rows->child; r; r = r->next) {
        char name[NAME_WIDTH * 4 + 8], sd[32] = "-";
        double v = jnum(r, "val_bpb_sd", NAN);
        if (isfinite(v)) snprintf(sd, sizeof sd, "%.6f", v);
        fmt_clean(name, sizeof name, jstr(r, "name") ? jstr(r, "name") : "-", NAME_WIDTH);
        printf("%6" PRId64 "  %9.6f  %9s  %5.0f  %s\n", (int64_t)jnum(r, "id", 0),
               jnum(r, "val_bpb", NAN), sd, jnum(r, "n_seeds", 0), name);
    }
fail:
    cJSON_Delete(reply);
    conn_close(&c);
    return rc;
}

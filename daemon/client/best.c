/* best.c - `nightshift best` and `nightshift leaderboard`: one scope's best
 * configuration and its configurations by mean val_bpb. */

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "daemon/client/board.h"
#include "daemon/client/client.h"
#include "daemon/client/cmd.h"
#include "daemon/client/conn.h"
#include "daemon/client/fmt.h"

/* The scope options of best and leaderboard, and what they say about them. */
#define SCOPE_OPTIONS_HELP                                                                         \
    "val_bpb compares only within one scope: a dataset, a budget and an\n"                         \
    "evaluation. What the options leave out comes from the run that succeeded\n"                   \
    "most recently (among those matching what they give), else from the latest\n"                  \
    "experiment; the scope used is named first, and the other scopes with\n"                       \
    "results after. A dataset or scope nothing ran in is an error (exit 1)\n"                      \
    "that names the ones that exist.\n\n"                                                          \
    "  --dataset D       the dataset\n"                                                            \
    "  --budget B        time:SECONDS, tokens:N or flops:N\n"                                      \
    "  --eval-tokens N   the validation tokens scored (0: the whole split)\n"

static const cmd_help_t best_help = {
    "best", "[--dataset D] [--budget B] [--eval-tokens N] [--json]",
    "The best configuration (lowest mean val_bpb over its seeds) of one scope.\n"
    "Its scope, id, mean val_bpb and seeds go to stderr and its spec to stdout\n"
    "as indented JSON, ready to edit and resubmit:\n"
    "  nightshift best > next.json\n"
    "Which experiment it is stays out of stdout, so that it is the spec exactly:\n"
    "an \"id\" there is an unknown field to submit, and a \"parent\" would change\n"
    "what the resubmission records; `--json` has it as best.id.\n"
    "Says `nothing has succeeded yet` and which scopes have results (exit 0)\n"
    "when no run has succeeded in the scope.\n\n" SCOPE_OPTIONS_HELP
    "  --json            the daemon's JSON as is\n" CMD_OFFLINE_HELP};

/* "scope: dataset D, budget B, eval_tokens N (how it was chosen)" on f. */
static void print_scope(FILE *f, const char *lead, const cJSON *reply) {
    char scope[320];
    board_scope_text(reply, scope, sizeof scope);
    fprintf(f, "%s%s (%s)\n", lead, scope, board_scope_from(reply));
}
int best_main(int argc, char **argv) {
    const cmd_help_t *h = &best_help;
    conn_opts_t o = {0};
    conn_t c = {.offline_ok = 1};
    int json = 0, rc;
    cJSON *reply = NULL;
    const char *dataset = NULL, *budget = NULL, *eval = NULL;
    line_t path = {"/v1/best", 8};

    const cmd_opt_t opts[] = {{"--dataset", .value = &dataset},
                              {"--budget", .value = &budget},
                              {"--eval-tokens", .value = &eval},
                              {"--json", .flag = &json},
                              {0}};
    if (!cmd_parse_args(argc, argv, h, &o, opts, NULL, &rc)) return rc;
    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    line_add_scope(&path, dataset, budget, eval);
    if ((rc = conn_get_raw(&c, path.s, json, &reply)) != 0 || json) goto fail;
    const cJSON *best = jget(reply, "best"), *spec = jget(best, "spec");
    rc = CLIENT_EXIT_API;
    if (cJSON_IsNull(best)) {
        print_scope(stderr, "nothing has succeeded yet in ", reply);
        if (!board_print_other_scopes(stderr, reply, "the scopes with results:"))
            fprintf(stderr, "no scope has results yet\n");
        rc = 0;
        goto fail;
    }
    if (!cJSON_IsObject(spec)) {
        conn_unexpected(best ? "the best experiment has no spec" : "no best field");
        goto fail;
    }
    print_scope(stderr, "scope: ", reply);
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
    board_print_other_scopes(stderr, reply, "other scopes with results:");
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
    "leaderboard", "[--dataset D] [--budget B] [--eval-tokens N] [--limit N] [--json]",
    "The leaderboard of one scope: one row per configuration (its repeats with\n"
    "different seeds together), best mean val_bpb first, with the standard\n"
    "deviation and number of seeds; under serve --prune asha, RUNG: the\n"
    "highest rung the configuration was promoted to.\n\n" SCOPE_OPTIONS_HELP
    "  --limit N         at most N rows (default 20)\n"
    "  --json            the daemon's JSON as is\n" CMD_OFFLINE_HELP};

int leaderboard_main(int argc, char **argv) {
    const cmd_help_t *h = &leaderboard_help;
    conn_opts_t o = {0};
    conn_t c = {.offline_ok = 1};
    int json = 0, rc;
    cJSON *reply = NULL;
    const char *dataset = NULL, *budget = NULL, *eval = NULL, *limit = NULL;
    line_t path = {"/v1/leaderboard", 15};

    const cmd_opt_t opts[] = {{"--dataset", .value = &dataset},  {"--budget", .value = &budget},
                              {"--eval-tokens", .value = &eval}, {"--limit", .value = &limit},
                              {"--json", .flag = &json},         {0}};
    if (!cmd_parse_args(argc, argv, h, &o, opts, NULL, &rc)) return rc;
    if (limit && cmd_positive(limit) < 0)
        return cmd_usage_error(h, "--limit: expected a positive integer, got '%s'", limit);
    line_add_scope(&path, dataset, budget, eval);
    if (limit) line_add_query(&path, "limit", limit);
    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    if ((rc = conn_get_raw(&c, path.s, json, &reply)) != 0 || json) goto fail;
    const cJSON *rows = jget(reply, "leaderboard");
    if (!cJSON_IsArray(rows)) {
        conn_unexpected("no leaderboard array");
        rc = CLIENT_EXIT_API;
        goto fail;
    }
    print_scope(stdout, "", reply);
    if (!rows->child) {
        puts("nothing has succeeded yet in this scope");
    } else {
        /* RUNG (serve --prune asha): the highest rung the configuration reached */
        int rungs = 0;
        for (const cJSON *r = rows->child; r; r = r->next) rungs |= cJSON_IsNumber(jget(r, "rung"));
        printf("%6s  %9s  %9s  %5s  %s%s\n", "ID", "MEAN_BPB", "SD", "SEEDS", rungs ? "RUNG  " : "",
               "NAME");
        for (const cJSON *r = rows->child; r; r = r->next) {
            char name[NAME_WIDTH * 4 + 8], sd[32] = "-", rung[16] = "";
            double v = jnum(r, "val_bpb_sd", NAN);
            if (isfinite(v)) snprintf(sd, sizeof sd, "%.6f", v);
            if (rungs && cJSON_IsNumber(jget(r, "rung")))
                snprintf(rung, sizeof rung, "%4.0f  ", jnum(r, "rung", 0));
            else if (rungs)
                snprintf(rung, sizeof rung, "%4s  ", "-");
            fmt_clean(name, sizeof name, jstr(r, "name") ? jstr(r, "name") : "-", NAME_WIDTH);
            printf("%6" PRId64 "  %9.6f  %9s  %5.0f  %s%s\n", (int64_t)jnum(r, "id", 0),
                   jnum(r, "val_bpb", NAN), sd, jnum(r, "n_seeds", 0), rung, name);
        }
    }
    board_print_other_scopes(stdout, reply, "other scopes with results:");
fail:
    cJSON_Delete(reply);
    conn_close(&c);
    return rc;
}

/* ls.c - `nightshift ls`: experiments as a table. */
#include "daemon/client/client.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/client/board.h"
#include "daemon/client/cmd.h"
#include "daemon/client/conn.h"
#include "daemon/client/fmt.h"
#include "engine/share.h"

static const cmd_help_t ls_help = {
    "ls", "[--status S] [--dataset D] [--limit N] [--order O] [--after ID] [--json]",
    "List experiments as a table: id, status, val_bpb, its verdict (`best` when it\n"
    "is its scope's best configuration, with the scope's budget when there are\n"
    "several scopes, else how far behind that configuration's\n"
    "mean it is, over how many seeds), dataset, parameters, the parent it\n"
    "varies, name and creation time (local). When more rows exist than --limit,\n"
    "the next page's --after is printed on stderr.\n\n"
    "  --status S        only this status: queued, running, succeeded, failed,\n"
    "                    crashed, timeout, oom, diverged, cancelled, interrupted,\n"
    "                    pruned\n"
    "  --dataset D       only experiments on dataset D\n"
    "  --limit N         at most N rows (the daemon's default is 100, at most 1000)\n"
    "  --order O         id, -id (newest first, the default), val_bpb, created or\n"
    "                    queue (the queued runs, in the order they start). val_bpb ranks\n"
    "                    within one scope (a dataset, budget and evaluation, as\n"
    "                    `nightshift best` picks it: --budget and --eval-tokens\n"
    "                    choose another), named on the first line\n"
    "  --budget B        with --order val_bpb: time:SECONDS, tokens:N or flops:N\n"
    "  --eval-tokens N   with --order val_bpb: validation tokens scored\n"
    "  --after ID        the page after the row with id ID\n"
    "  --json            the daemon's JSON as is\n" CMD_OFFLINE_HELP};

typedef struct {
    char id[24], status[64], bpb[32], name[NAME_WIDTH * 4 + 8], created[32];
    char verdict[48], dataset[100], params[24], parent[24];
    size_t name_chars, dataset_chars;
} ls_row_t;

/* ranked: every row is of one scope, named above the table; else a row that
 * is the best of its scope says which budget (and evaluation, when the scopes
 * differ in it) that scope has, when there is more than one. */
static void ls_table(const cJSON *items, const cJSON *board, int ranked) {
    int n = cJSON_GetArraySize(items), i = 0;
    size_t w_id = 2, w_st = 6, w_bpb = 7, w_name = 4, w_v = 7, w_ds = 7, w_p = 6, w_par = 6;
    ls_row_t *rows = calloc(n > 0 ? (size_t)n : 1, sizeof *rows);
    board_best_t *bests = calloc(BOARD_MAX_SCOPES, sizeof *bests);
    if (!rows || !bests) {
        fprintf(stderr, "nightshift: out of memory\n");
        free(rows);
        free(bests);
        return;
    }
    int nbest = board ? board_bests(board, bests) : 0, evals_differ = 0, slowed = 0;
    for (int k = 1; k < nbest; k++) evals_differ |= bests[k].eval_tokens != bests[0].eval_tokens;
    for (const cJSON *e = items->child; e && i < n; e = e->next, i++) {
        ls_row_t *r = &rows[i];
        const cJSON *bpb = jget(e, "val_bpb"), *name = jget(e, "name");
        snprintf(r->id, sizeof r->id, "%" PRId64, (int64_t)jnum(e, "id", 0));
        fmt_clean(r->status, sizeof r->status, jstr(e, "status") ? jstr(e, "status") : "?", 16);
        /* a run its neighbours slowed (engine/share.h) is marked */
        int slow = jnum(e, "slowdown", 0) >= SHARE_SLOWED;
        slowed |= slow;
        if (cJSON_IsNumber(bpb))
            snprintf(r->bpb, sizeof r->bpb, "%.6f%s", bpb->valuedouble, slow ? "~" : "");
        else
            snprintf(r->bpb, sizeof r->bpb, "-");
        r->name_chars = fmt_clean(r->name, sizeof r->name,
                                  cJSON_IsString(name) ? name->valuestring : "-", NAME_WIDTH);
        fmt_local_time(jstr(e, "created"), r->created, sizeof r->created);
        board_verdict(e, bests, nbest, 0, r->verdict, sizeof r->verdict);
        const board_best_t *b = board_best_of(bests, nbest, e);
        if (!ranked && nbest > 1 && b && !strcmp(r->verdict, "best")) {
            char eval[40] = "";
            if (evals_differ) snprintf(eval, sizeof eval, " eval %" PRId64, b->eval_tokens);
            snprintf(r->verdict, sizeof r->verdict, "best %s:%.15g%s", b->budget_kind, b->budget,
                     eval);
        }
        if (!r->verdict[0]) snprintf(r->verdict, sizeof r->verdict, "-");
        r->dataset_chars = fmt_clean(r->dataset, sizeof r->dataset,
                                     jstr(e, "dataset") ? jstr(e, "dataset") : "-", 24);
        if (cJSON_IsNumber(jget(e, "params_total")))
            fmt_short_count(jnum(e, "params_total", 0), r->params, sizeof r->params);
        else
            snprintf(r->params, sizeof r->params, "-");
        if (cJSON_IsNumber(jget(e, "parent")))
            snprintf(r->parent, sizeof r->parent, "%" PRId64, (int64_t)jnum(e, "parent", 0));
        else
            snprintf(r->parent, sizeof r->parent, "-");
        if (strlen(r->verdict) > w_v) w_v = strlen(r->verdict);
        if (r->dataset_chars > w_ds) w_ds = r->dataset_chars;
        if (strlen(r->params) > w_p) w_p = strlen(r->params);
        if (strlen(r->parent) > w_par) w_par = strlen(r->parent);
        if (strlen(r->id) > w_id) w_id = strlen(r->id);
        if (strlen(r->status) > w_st) w_st = strlen(r->status);
        if (strlen(r->bpb) > w_bpb) w_bpb = strlen(r->bpb);
        if (r->name_chars > w_name) w_name = r->name_chars;
    }
    printf("%*s  %-*s  %*s  %-*s  %-*s  %*s  %*s  %-*s  %s\n", (int)w_id, "ID", (int)w_st, "STATUS",
           (int)w_bpb, "VAL_BPB", (int)w_v, "VERDICT", (int)w_ds, "DATASET", (int)w_p, "PARAMS",
           (int)w_par, "PARENT", (int)w_name, "NAME", "CREATED");
    for (i = 0; i < n; i++) {
        printf("%*s  %-*s  %*s  %-*s  ", (int)w_id, rows[i].id, (int)w_st, rows[i].status,
               (int)w_bpb, rows[i].bpb, (int)w_v, rows[i].verdict);
        fmt_padded(rows[i].dataset, rows[i].dataset_chars, w_ds);
        printf("  %*s  %*s  ", (int)w_p, rows[i].params, (int)w_par, rows[i].parent);
        fmt_padded(rows[i].name, rows[i].name_chars, w_name);
        printf("  %s\n", rows[i].created);
    }
    if (slowed)
        printf("~ slowed by its neighbours: trained at most 1/%.1f of its quiet speed "
               "(nightshift show ID)\n",
               SHARE_SLOWED);
    free(rows);
    free(bests);
}

int ls_main(int argc, char **argv) {
    const cmd_help_t *h = &ls_help;
    conn_opts_t o = {0};
    conn_t c = {.offline_ok = 1};
    const char *status = NULL, *limit = NULL, *order = NULL, *after = NULL, *dataset = NULL,
               *budget = NULL, *eval = NULL;
    int json = 0, rc;
    cJSON *list = NULL;
    line_t path = {"/v1/experiments", 15};

    const cmd_opt_t opts[] = {{"--status", .value = &status},
                              {"--limit", .value = &limit},
                              {"--order", .value = &order},
                              {"--dataset", .value = &dataset},
                              {"--budget", .value = &budget},
                              {"--eval-tokens", .value = &eval},
                              {"--after", .value = &after},
                              {"--json", .flag = &json},
                              {0}};
    if (!cmd_parse_args(argc, argv, h, &o, opts, NULL, &rc)) return rc;
    if (limit && cmd_positive(limit) < 0)
        return cmd_usage_error(h, "--limit: expected a positive integer, got '%s'", limit);
    if (after && cmd_positive(after) < 0)
        return cmd_usage_error(h, "--after: expected an experiment id, got '%s'", after);
    if ((status && strlen(status) > 32) || (order && strlen(order) > 32))
        return cmd_usage_error(h, "--status and --order take a single word");
    if (dataset && strlen(dataset) > 63)
        return cmd_usage_error(h, "--dataset: at most 63 characters");
    /* The queue's order is the queue's: only queued runs have a place in it. */
    if (order && !strcmp(order, "queue") && !status) status = "queued";
    if (status) line_add_query(&path, "status", status);
    int ranked = order && !strcmp(order, "val_bpb");
    if ((budget || eval) && !ranked)
        return cmd_usage_error(h, "--budget and --eval-tokens go with --order val_bpb");
    if (dataset) line_add_query(&path, "dataset", dataset);
    if (budget) line_add_query(&path, "budget", budget);
    if (eval) line_add_query(&path, "eval_tokens", eval);
    if (order) line_add_query(&path, "order", order);
    if (limit) line_add_query(&path, "limit", limit);
    if (after) line_add_query(&path, "after", after);

    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    if ((rc = conn_get_raw(&c, path.s, json, &list)) != 0 || json) goto fail;
    const cJSON *items = jget(list, "experiments"), *next = jget(list, "next_after");
    if (!cJSON_IsArray(items)) {
        conn_unexpected("no experiments array");
        rc = CLIENT_EXIT_API;
        goto fail;
    }
    if (ranked) {
        char scope[320];
        board_scope_text(list, scope, sizeof scope);
        printf("ranked within %s (%s)\n", scope, board_scope_from(list));
    }
    if (!items->child) {
        puts(ranked ? "no experiments in this scope" : "no experiments");
    } else if (ranked) {
        ls_table(items, list, 1); /* a scoped reply lists every scope's best */
    } else {
        /* The verdicts need the best of each scope, which any scoped reply
         * lists: best effort. */
        cJSON *board = NULL;
        c.quiet = 1;
        if (conn_json(&c, "GET", "/v1/leaderboard?limit=1", NULL, 0, &board) != 0) board = NULL;
        ls_table(items, board, 0);
        cJSON_Delete(board);
    }
    if (ranked) board_print_other_scopes(stdout, list, "other scopes with results:");
    if (cJSON_IsNumber(next))
        fprintf(stderr, "more: nightshift ls --after %" PRId64 "\n", (int64_t)next->valuedouble);
fail:
    cJSON_Delete(list);
    conn_close(&c);
    return rc;
}

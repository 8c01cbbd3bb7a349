/* board.c - scopes, their bests and verdicts against them (see board.h). */
#include "daemon/client/board.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/client/fmt.h"
#include "engine/spec.h"

/* o's scope fields into b (the best fields untouched). */
static void scope_of(const cJSON *o, board_best_t *b) {
    const char *ds = jstr(o, "dataset"), *kind = jstr(o, "budget_kind");
    fmt_clean(b->dataset, sizeof b->dataset, ds ? ds : "?", 24);
    snprintf(b->budget_kind, sizeof b->budget_kind, "%s", kind ? kind : "?");
    b->budget = jnum(o, "budget", 0);
    b->eval_tokens = (int64_t)jnum(o, "eval_tokens", -1);
}

static int same_scope(const board_best_t *a, const board_best_t *b) {
    return !strcmp(a->dataset, b->dataset) && !strcmp(a->budget_kind, b->budget_kind) &&
           a->budget == b->budget && a->eval_tokens == b->eval_tokens;
}

int board_bests(const cJSON *reply, board_best_t *best) {
    const cJSON *list = jget(reply, "scopes");
    int n = 0;
    for (const cJSON *s = cJSON_IsArray(list) ? list->child : NULL; s && n < BOARD_MAX_SCOPES;
         s = s->next) {
        if (!cJSON_IsNumber(jget(s, "best_val_bpb"))) continue;
        board_best_t *b = &best[n++];
        scope_of(s, b);
        b->id = (int64_t)jnum(s, "best_id", 0);
        b->val_bpb = jnum(s, "best_val_bpb", 0);
        b->n_seeds = (int)jnum(s, "best_n_seeds", 1);
        b->runs = (int)jnum(s, "runs", 0);
    }
    return n;
}

const board_best_t *board_best_of(const board_best_t *best, int n, const cJSON *o) {
    board_best_t want;
    scope_of(o, &want);
    for (int k = 0; k < n; k++)
        if (same_scope(&best[k], &want)) return &best[k];
    return NULL;
}

void board_scope_text(const cJSON *o, char *buf, size_t len) {
    board_best_t b;
    scope_of(o, &b);
    snprintf(buf, len, "dataset %s, budget %s:%.15g, eval_tokens %" PRId64 "%s", b.dataset,
             b.budget_kind, b.budget, b.eval_tokens,
             b.eval_tokens == 0 ? " (the whole split: 0, or a cap past its size such as the "
                                  "default 65536)"
                                : "");
}

void board_scope_label(const board_best_t *b, char *buf, size_t len) {
    char num[48], count[32], eval[48] = "";
    if (!strcmp(b->budget_kind, SPEC_BUDGET_TOKENS))
        snprintf(num, sizeof num, "%s tokens", fmt_short_count(b->budget, count, sizeof count));
    else if (!strcmp(b->budget_kind, SPEC_BUDGET_FLOPS))
        snprintf(num, sizeof num, "%.3g FLOPs", b->budget);
    else
        snprintf(num, sizeof num, "%.15g s", b->budget);
    if (b->eval_tokens && b->eval_tokens != SPEC_DEFAULT_EVAL_TOKENS)
        snprintf(eval, sizeof eval, " eval %" PRId64, b->eval_tokens);
    snprintf(buf, len, "%s %s%s", b->dataset, num, eval);
}

void board_best_text(const board_best_t *b, char *buf, size_t len) {
    if (b->n_seeds > 1)
        snprintf(buf, len, "config #%" PRId64 " mean of %d seeds", b->id, b->n_seeds);
    else
        snprintf(buf, len, "exp %" PRId64, b->id);
}

void board_verdict(const cJSON *e, const board_best_t *best, int n, int newest, char *buf,
                   size_t len) {
    buf[0] = '\0';
    if (!jstr(e, "status") || strcmp(jstr(e, "status"), "succeeded") ||
        !cJSON_IsNumber(jget(e, "val_bpb")))
        return;
    const board_best_t *b = board_best_of(best, n, e);
    if (!b) return;
    double d = jnum(e, "val_bpb", 0) - b->val_bpb;
    if (b->id == (int64_t)jnum(e, "id", 0))
        snprintf(buf, len, "%s", newest ? "new best" : "best");
    else if (b->n_seeds > 1)
        snprintf(buf, len, "%+.4f vs config #%" PRId64 " mean (%d seeds)", d, b->id, b->n_seeds);
    else
        snprintf(buf, len, "%+.4f vs exp %" PRId64, d, b->id);
}

const char *board_scope_from(const cJSON *reply) {
    const char *from = jstr(reply, "scope_from");
    if (!from) return "";
    if (!strcmp(from, "query")) return "as asked";
    if (!strcmp(from, "latest_result")) return "the scope of the latest result";
    if (!strcmp(from, "latest_experiment"))
        return "the scope of the latest experiment: nothing has a result yet";
    if (!strcmp(from, "defaults")) return "the spec's defaults: nothing has run yet";
    return from;
}

int board_print_other_scopes(FILE *f, const cJSON *reply, const char *title) {
    board_best_t *best = calloc(BOARD_MAX_SCOPES, sizeof *best), mine;
    if (!best) return 0;
    int n = board_bests(reply, best), listed = 0;
    scope_of(reply, &mine);
    for (int k = 0; k < n; k++) {
        if (same_scope(&best[k], &mine)) continue;
        char what[64];
        board_best_text(&best[k], what, sizeof what);
        if (!listed++) fprintf(f, "%s\n", title);
        fprintf(f,
                "  --dataset %s --budget %s:%.15g --eval-tokens %" PRId64
                ": %d run%s, best %.4f (%s)\n",
                best[k].dataset, best[k].budget_kind, best[k].budget, best[k].eval_tokens,
                best[k].runs, best[k].runs == 1 ? "" : "s", best[k].val_bpb, what);
    }
    free(best);
    return listed;
}

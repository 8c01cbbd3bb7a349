/* board.c - the best of each dataset and verdicts against it (see board.h). */
#include "daemon/client/board.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "daemon/client/fmt.h"

int board_bests(const cJSON *board, board_best_t *best) {
    const cJSON *rows = jget(board, "leaderboard");
    int n = 0;
    for (const cJSON *r = cJSON_IsArray(rows) ? rows->child : NULL; r; r = r->next) {
        const char *ds = jstr(r, "dataset");
        if (!ds || !cJSON_IsNumber(jget(r, "val_bpb"))) continue;
        int k = 0;
        while (k < n && strcmp(best[k].dataset, ds)) k++;
        if (k < n || n == MAX_DATASETS_SHOWN) continue;
        fmt_clean(best[n].dataset, sizeof best[n].dataset, ds, 24);
        best[n].id = (int64_t)jnum(r, "id", 0);
        best[n].val_bpb = jnum(r, "val_bpb", 0);
        n++;
    }
    return n;
}

const board_best_t *board_best_of(const board_best_t *best, int n, const char *dataset) {
    char clean[64];
    fmt_clean(clean, sizeof clean, dataset ? dataset : "", 24);
    for (int k = 0; k < n; k++)
        if (!strcmp(best[k].dataset, clean)) return &best[k];
    return NULL;
}

void board_verdict(const cJSON *e, const board_best_t *best, int n, int newest, char *buf,
                   size_t len) {
    buf[0] = '\0';
    if (!jstr(e, "status") || strcmp(jstr(e, "status"), "succeeded") ||
        !cJSON_IsNumber(jget(e, "val_bpb")))
        return;
    const board_best_t *b = board_best_of(best, n, jstr(e, "dataset"));
    if (!b) return;
    if (b->id == (int64_t)jnum(e, "id", 0))
        snprintf(buf, len, "%s", newest ? "new best" : "best");
    else
        snprintf(buf, len, "%+.4f vs %" PRId64, jnum(e, "val_bpb", 0) - b->val_bpb, b->id);
}

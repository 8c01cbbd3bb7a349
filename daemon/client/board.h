/* board.h - the best succeeded experiment of each dataset, read from a
 * leaderboard reply, and the verdict on a finished experiment against it
 * (`ls` and `watch`). */
#ifndef NIGHTSHIFT_CLIENT_BOARD_H
#define NIGHTSHIFT_CLIENT_BOARD_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#define MAX_DATASETS_SHOWN 8 /* datasets whose best watch and ls know */

/* The best succeeded experiment of a dataset (watch and ls, from the
 * leaderboard). */
typedef struct {
    char dataset[64];
    int64_t id;
    double val_bpb;
} board_best_t;

/* Fill best[] (at most MAX_DATASETS_SHOWN) from a leaderboard reply; returns the count. */
int board_bests(const cJSON *board, board_best_t *best);

/* The entry of dataset in best[0..n), or NULL; borrowed from best. */
const board_best_t *board_best_of(const board_best_t *best, int n, const char *dataset);

/* How a finished experiment e did: "new best" / "best" when it leads its
 * dataset, "+0.0123 vs 5" behind the best, else "" (not succeeded). */
void board_verdict(const cJSON *e, const board_best_t *best, int n, int newest, char *buf,
                   size_t len);

#endif

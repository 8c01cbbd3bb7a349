/* board.h - scopes for people: a scope named in the words of the options
 * that ask for it, the best configuration of every scope that has results
 * (read from the "scopes" list every scoped reply of the daemon carries),
 * and the verdict on a finished experiment against its scope's best (`ls`,
 * `watch`, `best`, `leaderboard`). */
#ifndef NIGHTSHIFT_CLIENT_BOARD_H
#define NIGHTSHIFT_CLIENT_BOARD_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define BOARD_MAX_SCOPES 50 /* scopes whose best watch and ls know (the daemon lists as many) */

/* The best configuration of one scope (dataset, budget, evaluation). */
typedef struct {
    char dataset[64];
    char budget_kind[8];
    double budget;
    int64_t eval_tokens;
    int64_t id;     /* the configuration's first run */
    double val_bpb; /* the mean over its seeds */
    int n_seeds;
    int runs; /* succeeded runs in the scope */
} board_best_t;

/* Fill best[] (at most BOARD_MAX_SCOPES), the latest result's scope first,
 * from a scoped reply's "scopes"; returns the count. */
int board_bests(const cJSON *reply, board_best_t *best);

/* The entry of o's scope (o has dataset, budget_kind, budget, eval_tokens:
 * an experiment of a list, or a reply) in best[0..n), or NULL; borrowed. */
const board_best_t *board_best_of(const board_best_t *best, int n, const cJSON *o);

/* o's scope as the options that ask for it: "dataset book, budget time:300,
 * eval_tokens 65536" (eval_tokens 0 adds "(the whole split)"). */
void board_scope_text(const cJSON *o, char *buf, size_t len);

/* A short label of b's scope for one line: "book 300 s" or "book 4.1M
 * tokens", with " eval N" when it scores a part of its split other than the
 * spec's default (the whole split, as most do, goes unsaid). */
void board_scope_label(const board_best_t *b, char *buf, size_t len);

/* What b's number is: "config #1 mean of 3 seeds", or "exp 1" for one seed. */
void board_best_text(const board_best_t *b, char *buf, size_t len);

/* How a finished experiment e did against its scope's best: "new best" /
 * "best" when it is the best configuration's first run, else "+0.0123 vs
 * config #5 mean (3 seeds)" (or "vs exp 5" for one seed), else "" (not
 * succeeded, or no best known for its scope). */
void board_verdict(const cJSON *e, const board_best_t *best, int n, int newest, char *buf,
                   size_t len);

/* What a scoped reply's "scope_from" means, for a line after its scope. */
const char *board_scope_from(const cJSON *reply);

/* The scopes of reply other than its own, one per line on f, each with its
 * runs and best, under a title line; nothing when there are none. Returns
 * how many were listed. */
int board_print_other_scopes(FILE *f, const cJSON *reply, const char *title);

#endif

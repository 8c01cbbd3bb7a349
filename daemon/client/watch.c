/* watch.c - `nightshift watch`: live progress of every slot. */
#include "daemon/client/client.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "daemon/client/board.h"
#include "daemon/client/cmd.h"
#include "daemon/client/conn.h"
#include "daemon/client/fmt.h"
#include "engine/util.h"

#define BAR_WIDTH 20

static const cmd_help_t watch_help = {
    "watch", "[--interval S] [--once]",
    "Live progress of every slot: a bar of the time budget, the experiment, its\n"
    "step, loss, tokens/s and time left, or `evaluating` once its budget is spent\n"
    "and it is scoring the validation split. Below: the last finished experiment\n"
    "and its board_verdict (a new best for its dataset, or how far behind the best),\n"
    "the best so far on each dataset, and the queue depth. On a terminal the\n"
    "lines are redrawn in place; otherwise a snapshot is printed every interval.\n"
    "When the daemon goes away (a restart), watch says `reconnecting` and carries\n"
    "on when it is back. Ctrl-C stops (exit 0).\n\n"
    "  --interval S      seconds between polls (default 2, at least 0.1)\n"
    "  --once            print one snapshot and exit\n"};

static volatile sig_atomic_t watch_stop;

static void watch_signal_cb(int sig) {
    (void)sig;
    watch_stop = 1;
}

/* slot 0 [#########...........]  45.2% ETA 2m44s exp 12 step 130 loss 3.214 2,810 tok/s "name"
 * slot 0 [####################] evaluating exp 12 step 400 loss 2.914 "name"
 * The name goes last: on a narrow terminal it is what gets cut. */
static void slot_line(const cJSON *slot, line_t *l) {
    const cJSON *exp = jget(slot, "experiment"), *p = jget(slot, "progress");
    char a[64];
    line_add(l, "slot %d ", (int)jnum(slot, "slot", 0));
    if (!cJSON_IsObject(exp)) {
        line_add(l, "idle");
        return;
    }
    double pct = cJSON_IsObject(p) ? jnum(p, "percent", 0) : 0;
    /* The worker's last step line says 100% exactly when the budget is spent;
     * evaluation follows, before the result. */
    int evaluating = pct >= 100;
    pct = pct < 0 ? 0 : pct > 100 ? 100 : pct;
    int fill = (int)lround(pct / 100 * BAR_WIDTH);
    line_add(l, "[");
    for (int i = 0; i < BAR_WIDTH; i++) line_add(l, "%c", i < fill ? '#' : '.');
    if (evaluating)
        line_add(l, "] evaluating");
    else
        line_add(l, "] %5.1f%%", pct);
    if (!evaluating && cJSON_IsObject(p) && cJSON_IsNumber(jget(p, "eta_s")))
        line_add(l, " ETA %s", fmt_duration(jnum(p, "eta_s", 0), a, sizeof a));
    line_add(l, " exp %" PRId64, (int64_t)jnum(exp, "id", 0));
    if (!cJSON_IsObject(p)) {
        line_add(l, " starting");
    } else {
        if (cJSON_IsNumber(jget(p, "step")))
            line_add(l, " step %" PRId64, (int64_t)jnum(p, "step", 0));
        if (cJSON_IsNumber(jget(p, "loss"))) line_add(l, " loss %.3f", jnum(p, "loss", 0));
        if (!evaluating && cJSON_IsNumber(jget(p, "tok_s")))
            line_add(l, " %s tok/s", fmt_commas(jnum(p, "tok_s", 0), a, sizeof a));
    }
    if (jstr(exp, "name")) {
        line_add(l, " \"");
        line_add_clean(l, jstr(exp, "name"), NAME_WIDTH);
        line_add(l, "\"");
    }
}

/* The best of each dataset: the leaderboard is ordered best first, so the
 * first row of a dataset is its best. */

/* "last: exp 11 "name" succeeded 1.8342, new best on book" or the status and
 * reason of a run that did not succeed. */
static void last_line(const cJSON *list, const board_best_t *best, int nbest, line_t *l) {
    const cJSON *items = jget(list, "experiments"), *e = NULL;
    for (const cJSON *it = cJSON_IsArray(items) ? items->child : NULL; it; it = it->next) {
        const char *st = jstr(it, "status");
        if (st && strcmp(st, "queued") && strcmp(st, "running")) {
            e = it;
            break;
        }
    }
    if (!e) return;
    line_add(l, "last: exp %" PRId64, (int64_t)jnum(e, "id", 0));
    if (jstr(e, "name")) {
        line_add(l, " \"");
        line_add_clean(l, jstr(e, "name"), 20);
        line_add(l, "\"");
    }
    line_add(l, " ");
    line_add_clean(l, jstr(e, "status"), 16);
    if (cJSON_IsNumber(jget(e, "val_bpb"))) {
        char v[64];
        board_verdict(e, best, nbest, 1, v, sizeof v);
        line_add(l, " val_bpb %.4f", jnum(e, "val_bpb", 0));
        if (v[0]) {
            line_add(l, ", %s", v);
            if (jstr(e, "dataset")) {
                line_add(l, " on ");
                line_add_clean(l, jstr(e, "dataset"), 24);
            }
        }
    } else if (jstr(e, "reason")) {
        line_add(l, ": ");
        line_add_clean(l, jstr(e, "reason"), 80);
    }
}

/* The snapshot's lines: one per slot, the last result and the best of each
 * dataset (when list and board are given), then the queue. *out is malloc'd
 * (the caller frees it); returns the count, or -1 when the reply is unusable. */
static int status_lines(const cJSON *st, const cJSON *list, const cJSON *board, line_t **out) {
    const cJSON *slots = jget(st, "slots");
    *out = NULL;
    if (!cJSON_IsArray(slots) || !cJSON_IsNumber(jget(st, "queue_depth"))) return -1;
    int n = cJSON_GetArraySize(slots), i = 0;
    line_t *lines = calloc((size_t)n + 3, sizeof *lines);
    if (!lines) return -1;
    for (const cJSON *s = slots->child; s && i < n; s = s->next) slot_line(s, &lines[i++]);
    board_best_t best[MAX_DATASETS_SHOWN];
    int nbest = board ? board_bests(board, best) : 0;
    if (list) {
        last_line(list, best, nbest, &lines[i]);
        if (lines[i].n) i++;
    }
    for (int k = 0; k < nbest; k++)
        line_add(&lines[i], "%s%s %.4f (exp %" PRId64 ")", k ? ", " : "best: ", best[k].dataset,
                 best[k].val_bpb, best[k].id);
    if (nbest) i++;
    line_add(&lines[i++], "queue: %" PRId64 " queued", (int64_t)jnum(st, "queue_depth", 0));
    *out = lines;
    return i;
}

/* Cut l to at most cols - 1 characters (so it never wraps). */
static void fit_width(line_t *l, int cols) {
    if (cols <= 1) return;
    size_t chars = 0;
    for (size_t i = 0; i < l->n; i++)
        if ((l->s[i] & 0xc0) != 0x80 && ++chars == (size_t)cols) {
            l->s[i] = '\0';
            l->n = i;
            return;
        }
}

/* One snapshot: /v1/status, then (best effort, quietly) the latest
 * experiments and the leaderboard. Returns 0 with the lines and their
 * count set, or the status request's exit code. */
static int watch_poll(conn_t *c, line_t **lines, int *n) {
    cJSON *st = NULL, *list = NULL, *board = NULL;
    int rc = conn_json(c, "GET", "/v1/status", NULL, 0, &st);
    if (rc) return rc;
    int quiet = c->quiet;
    c->quiet = 1;
    if (conn_json(c, "GET", "/v1/experiments?order=-id&limit=20", NULL, 0, &list) != 0) list = NULL;
    if (!watch_stop && conn_json(c, "GET", "/v1/leaderboard?limit=1000", NULL, 0, &board) != 0)
        board = NULL;
    c->quiet = quiet;
    c->said[0] = '\0';
    *n = status_lines(st, list, board, lines);
    cJSON_Delete(st);
    cJSON_Delete(list);
    cJSON_Delete(board);
    if (*n < 0) {
        conn_unexpected("no slots or queue_depth in /v1/status");
        return CLIENT_EXIT_API;
    }
    return 0;
}

/* The n lines, over the shown lines drawn last time on a terminal (cut to
 * its width), else below them. Returns how many are shown now. */
static int draw(line_t *lines, int n, int tty, int shown) {
    if (tty) {
        struct winsize ws;
        int cols = ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 ? ws.ws_col : 0;
        if (shown) printf("\x1b[%dA", shown); /* back to the first line drawn */
        for (int i = 0; i < n; i++) {
            fit_width(&lines[i], cols);
            printf("\r\x1b[2K%s\n", lines[i].s);
        }
        if (n < shown) fputs("\x1b[J", stdout); /* fewer lines than before */
    } else {
        for (int i = 0; i < n; i++) puts(lines[i].s);
    }
    fflush(stdout);
    return tty ? n : shown;
}

/* Sleep in short naps so a signal that lands between the check and the
 * sleep is still seen promptly. */
static void sleep_unless_stopped(double seconds) {
    for (double left = seconds; left > 0 && !watch_stop; left -= 0.1) {
        double nap = left < 0.1 ? left : 0.1;
        struct timespec ts = {0, (long)(nap * 1e9)};
        nanosleep(&ts, NULL);
    }
}

int watch_main(int argc, char **argv) {
    const cmd_help_t *h = &watch_help;
    conn_opts_t o = {0};
    conn_t c = {0};
    const char *interval_arg = NULL;
    double interval = 2, lost_at = 0;
    int once = 0, rc, tty = isatty(STDOUT_FILENO), shown = 0;
    struct sigaction sa, old_int, old_term;

    const cmd_opt_t opts[] = {
        {"--interval", .value = &interval_arg}, {"--once", .flag = &once}, {0}};
    if (!cmd_parse_args(argc, argv, h, &o, opts, NULL, &rc)) return rc;
    if (interval_arg) {
        char *end;
        interval = strtod(interval_arg, &end);
        if (end == interval_arg || *end || !(interval >= 0.1 && interval <= 86400))
            return cmd_usage_error(h, "--interval: expected seconds >= 0.1, got '%s'",
                                   interval_arg);
    }
    if ((rc = conn_open(&c, &o, h)) != 0) {
        conn_close(&c);
        return rc;
    }

    /* SIGINT/SIGTERM end the loop: no SA_RESTART, so a sleep returns early,
     * and the transfer in flight is aborted through c.stop. */
    watch_stop = 0;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = watch_signal_cb;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    c.stop = &watch_stop;
    if (tty && !once) fputs("\x1b[?25l", stdout); /* hide the cursor while redrawing */

    while (!watch_stop) {
        line_t *lines = NULL;
        int n = 0;
        /* Losing the daemon (a restart, a crash, not started yet) is not
         * the end: say so and keep asking. Only --once gives up; an HTTP
         * error (a bad token, a broken reply) ends the watch either way. */
        c.quiet = !once;
        rc = watch_poll(&c, &lines, &n);
        if (rc && rc != CONN_STOPPED && !once && c.http_status == 0) {
            if (lost_at == 0) lost_at = util_now();
            free(lines);
            lines = calloc(1, sizeof *lines);
            if (!lines) break;
            char d[32];
            line_add(&lines[0], "reconnecting to %s (no answer for %s)", c.base,
                     fmt_duration(util_now() - lost_at, d, sizeof d));
            n = 1;
            rc = 0;
        } else if (rc) {
            if (rc != CONN_STOPPED && c.said[0]) fputs(c.said, stderr);
            break;
        } else {
            lost_at = 0;
        }
        shown = draw(lines, n, tty, shown);
        free(lines);
        if (once) break;
        sleep_unless_stopped(interval);
    }
    if (rc == CONN_STOPPED) rc = 0;
    if (tty && !once) fputs("\x1b[?25h", stdout);
    fflush(stdout);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    conn_close(&c);
    return rc;
}

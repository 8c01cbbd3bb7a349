/* store_db.h - inside the store (the files of daemon/store only): the connection, the
 * statement table of each concern, and the helpers every concern's file
 * uses. Nothing outside daemon/store includes it; the store's interface is
 * store.h.
 *
 * Each concern's file keeps its statements beside the functions that run
 * them: a file-local enum and table of SQL, published as a store_part_t
 * (store_queue_part, ...) that store.c prepares at open into
 * s->st[STORE_PART_...] and finalizes at close. A file defines STORE_PART as
 * its own part before including this header, so s->st[STORE_PART][ST_X] and
 * run(s, ST_X, ...) name its own statements. Tables rather than statements
 * prepared lazily on first use: a statement SQLite refuses fails store_open,
 * as before, not the first request that needs it. */
#ifndef NIGHTSHIFT_STORE_DB_H
#define NIGHTSHIFT_STORE_DB_H

#include <assert.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "daemon/store/store.h"

/* Short: the store runs on the daemon's loop, so a lock held by an outside
 * writer (a sqlite3 shell) must not stall it for long. A refused write is
 * retried by the scheduler (endings) or kept for the next batch (metrics). */
#define BUSY_TIMEOUT_MS 200
#define LIST_MAX        1000

/* ------------------------------------------------------------ the statements */

/* The concerns, each with its statements (at most STORE_PART_MAX). */
enum {
    STORE_PART_TX, /* BEGIN, COMMIT, ROLLBACK (store.c) */
    STORE_PART_QUEUE,
    STORE_PART_RESULTS,
    STORE_PART_EXPERIMENTS,
    STORE_PART_BOARD,
    STORE_PART_ASHA,
    STORE_PART_EVENTS,
    STORE_PART_EXPORT,
    STORE_N_PARTS
};
#define STORE_PART_MAX 16

typedef struct {
    const char *name;       /* for errors: "queue" */
    const char *const *sql; /* the file's table, indexed by its enum */
    int n;
} store_part_t;

extern const store_part_t store_queue_part, store_results_part, store_experiments_part,
    store_board_part, store_asha_part, store_events_part, store_export_part;

enum { STORE_TX_BEGIN, STORE_TX_COMMIT, STORE_TX_ROLLBACK, STORE_TX_COUNT };

struct store {
    sqlite3 *db;
    int wal_lost;                  /* the WAL went from its path under the connection (wal_hook) */
    struct stat db_file, wal_file; /* what the connection opened (st_ino 0: not known) */
    char *path;                    /* the database file, for connections of their own (exports) */
    sqlite3_stmt *st[STORE_N_PARTS][STORE_PART_MAX];
    uint64_t finishes; /* store_finish commits on this connection */
    int readonly;      /* store_open_reader's and store_open_readonly's: SQLITE_OPEN_READONLY */
};

/* ------------------------------------------------------------------- helpers */

static inline int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Write the message into err; always returns -1. */
static inline int fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* "store: <op>: <sqlite's message>"; always returns -1. */
static inline int fail_db(sqlite3 *db, char *err, size_t errlen, const char *op) {
    return fail(err, errlen, "store: %s: %s", op, sqlite3_errmsg(db));
}

static inline void reset(sqlite3_stmt *st) {
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

/* Run a statement that returns no rows to completion, then reset it. A
 * statement is always reset after use: one still stepping here would be
 * another call's, cut off in the middle. */
static inline int run_stmt(store_t *s, sqlite3_stmt *st, const char *op, char *err, size_t errlen) {
    assert(!sqlite3_stmt_busy(st));
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) fail_db(s->db, err, errlen, op);
    reset(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

#ifdef STORE_PART
/* run_stmt of the file's own statement which. */
static inline int run(store_t *s, int which, const char *op, char *err, size_t errlen) {
    return run_stmt(s, s->st[STORE_PART][which], op, err, errlen);
}
#endif

/* Every change of more than one statement is one transaction, never nested. */
static inline int begin(store_t *s, char *err, size_t errlen) {
    assert(sqlite3_get_autocommit(s->db));
    return run_stmt(s, s->st[STORE_PART_TX][STORE_TX_BEGIN], "begin", err, errlen);
}

static inline int commit(store_t *s, char *err, size_t errlen) {
    return run_stmt(s, s->st[STORE_PART_TX][STORE_TX_COMMIT], "commit", err, errlen);
}

/* Roll back the open transaction, if any (a failed COMMIT may have ended it). */
static inline void rollback(store_t *s) {
    if (sqlite3_get_autocommit(s->db)) return;
    sqlite3_step(s->st[STORE_PART_TX][STORE_TX_ROLLBACK]);
    reset(s->st[STORE_PART_TX][STORE_TX_ROLLBACK]);
}

/* Bind text borrowed for the call, or NULL. */
static inline int bind_text(sqlite3_stmt *st, int i, const char *v) {
    return v ? sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(st, i);
}

/* One scope into ?1-?4: dataset, budget_kind, budget, eval_tokens. */
static inline int bind_scope(sqlite3_stmt *st, const store_scope_t *sc) {
    int b = bind_text(st, 1, sc->dataset);
    b |= bind_text(st, 2, sc->budget_kind);
    b |= sqlite3_bind_double(st, 3, sc->budget);
    b |= sqlite3_bind_int64(st, 4, sc->eval_tokens);
    return b;
}

/* Column i as a malloc'd string (NULL for NULL or out of memory). */
static inline char *dup_column(sqlite3_stmt *st, int i) {
    const char *t = (const char *)sqlite3_column_text(st, i);
    return t ? strdup(t) : NULL;
}

/* Columns i..i+3 of the current row (dataset, budget_kind, budget,
 * eval_tokens) into sc. */
static inline void column_scope(sqlite3_stmt *st, int i, store_scope_t *sc) {
    const char *ds = (const char *)sqlite3_column_text(st, i);
    const char *kind = (const char *)sqlite3_column_text(st, i + 1);
    memset(sc, 0, sizeof *sc);
    snprintf(sc->dataset, sizeof sc->dataset, "%s", ds ? ds : "");
    snprintf(sc->budget_kind, sizeof sc->budget_kind, "%s", kind ? kind : "");
    sc->budget = sqlite3_column_double(st, i + 2);
    sc->eval_tokens = sqlite3_column_int64(st, i + 3);
}

/* A final status (store_status_name's from index 2 on)? */
static inline bool is_terminal(const char *status) {
    for (int i = 2; i < STORE_N_STATUSES; i++)
        if (!strcmp(status, store_status_name(i))) return true;
    return false;
}

static inline bool is_status(const char *status) {
    for (int i = 0; i < STORE_N_STATUSES; i++)
        if (!strcmp(status, store_status_name(i))) return true;
    return false;
}

static inline void now_iso(char buf[STORE_TIME_LEN]) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    store_format_time((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, buf, STORE_TIME_LEN);
}

/* The database's (wal 0) or its WAL's path, and what is there now into
 * *st; 0, or -1 when nothing is (store.c). */
int store_stat_file(const store_t *s, int wal, struct stat *st);

/* After an UPDATE ... WHERE id = ? AND status = ? changed nothing: say why
 * in err; always -1 (queue.c). */
int store_explain_status(store_t *s, int64_t id, const char *want, char *err, size_t errlen);

/* ----------------------------------------------------- JSON rows (rows.c) */

/* How a row becomes JSON: ROW_TYPED parses the JSON text columns and makes
 * tie_embeddings (json_extract gives 0/1) a boolean; ROW_RAW keeps every
 * text as a string and every number as a number (the export's tables). */
typedef enum { ROW_TYPED, ROW_RAW } row_mode;

/* Columns [from, to) of the current row as a new object keyed by column name
 * (the caller owns it), or NULL when out of memory. */
cJSON *store_row_object(sqlite3_stmt *st, int from, int to, row_mode mode);

/* Every remaining row of st as an array of objects; st is reset either way.
 * The caller owns the array; NULL with err on failure. */
cJSON *store_rows_array_as(store_t *s, sqlite3_stmt *st, row_mode mode, const char *op, char *err,
                           size_t errlen);
cJSON *store_rows_array(store_t *s, sqlite3_stmt *st, const char *op, char *err, size_t errlen);

/* The column names of st, in order, as a new array of strings (NULL when
 * out of memory). */
cJSON *store_column_names(sqlite3_stmt *st);

#endif

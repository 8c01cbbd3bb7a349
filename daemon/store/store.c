/* store.c - the SQLite store's connection: schema migrations, open and close,
 * the files under the store, and the statements of every concern.
 *
 * A store_t owns one connection (WAL, synchronous=NORMAL, busy_timeout,
 * foreign keys) and every statement it will ever run, prepared once at open
 * from the statement table of each concern (queue.c, results.c,
 * experiments.c, board.c, asha.c, events.c, export.c: each file's table is
 * beside the functions that run its statements, store_db.h) and finalized in
 * store_close. Statements are reset and their bindings cleared after every
 * use, so text bound with SQLITE_STATIC only has to outlive the call. Changes
 * of more than one statement run inside BEGIN IMMEDIATE ... COMMIT; a failure
 * rolls back. */
#include "daemon/store/store_db.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- statements */

/* The transactions' own (store_db.h's begin, commit and rollback). */
static const char *const tx_sql[STORE_TX_COUNT] = {
    [STORE_TX_BEGIN] = "BEGIN IMMEDIATE",
    [STORE_TX_COMMIT] = "COMMIT",
    [STORE_TX_ROLLBACK] = "ROLLBACK",
};
static const store_part_t tx_part = {"transactions", tx_sql, STORE_TX_COUNT};

/* Every concern's statements, prepared at open in this order. */
static const store_part_t *const parts[STORE_N_PARTS] = {
    [STORE_PART_TX] = &tx_part,
    [STORE_PART_QUEUE] = &store_queue_part,
    [STORE_PART_RESULTS] = &store_results_part,
    [STORE_PART_EXPERIMENTS] = &store_experiments_part,
    [STORE_PART_BOARD] = &store_board_part,
    [STORE_PART_ASHA] = &store_asha_part,
    [STORE_PART_EVENTS] = &store_events_part,
    [STORE_PART_EXPORT] = &store_export_part,
};

/* ---------------------------------------------------------------- migrations */

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int user_version(sqlite3 *db, int *v, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        fail_db(db, err, errlen, "reading user_version");
        sqlite3_finalize(st);
        return -1;
    }
    *v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return 0;
}

static int exec_sql(sqlite3 *db, const char *sql, const char *op, char *err, size_t errlen) {
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK) return 0;
    fail(err, errlen, "store: %s: %s", op, msg ? msg : sqlite3_errmsg(db));
    sqlite3_free(msg);
    return -1;
}

/* PRAGMA foreign_key_check finds nothing: 0, else -1 with err. */
static int foreign_keys_intact(sqlite3 *db, const char *op, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "PRAGMA foreign_key_check", -1, &st, NULL) != SQLITE_OK)
        return fail_db(db, err, errlen, op);
    int rc = sqlite3_step(st), out = 0;
    if (rc == SQLITE_ROW)
        out = fail(err, errlen, "store: %s: a row of %s breaks a foreign key", op,
                   (const char *)sqlite3_column_text(st, 0));
    else if (rc != SQLITE_DONE)
        out = fail_db(db, err, errlen, op);
    sqlite3_finalize(st);
    return out;
}

/* Bring db up to m[n-1].version. Each pending migration runs in its own
 * IMMEDIATE transaction that re-reads user_version first, so two processes
 * opening the same new file never apply one twice. */
static int migrate(sqlite3 *db, const char *path, const store_migration_t *m, size_t n, char *err,
                   size_t errlen) {
    int known = n ? m[n - 1].version : 0, have;
    if (user_version(db, &have, err, errlen) < 0) return -1;
    for (size_t i = 0; i <= n; i++) {
        if (have > known)
            return fail(err, errlen, "store: %s has schema version %d, this build knows up to %d",
                        base_name(path), have, known);
        if (i == n) break;
        if (m[i].version <= have) continue;

        char op[128], set[64];
        snprintf(op, sizeof op, "migration %s", m[i].name);
        snprintf(set, sizeof set, "PRAGMA user_version = %d", m[i].version);
        /* Foreign keys off while a migration rebuilds a table (SQLite's
         * documented procedure; the pragma is a no-op inside a transaction),
         * and checked before the commit. */
        if (exec_sql(db, "PRAGMA foreign_keys = OFF", op, err, errlen) < 0) return -1;
        if (exec_sql(db, "BEGIN IMMEDIATE", op, err, errlen) < 0) goto fail;
        if (user_version(db, &have, err, errlen) < 0) goto fail;
        if (have < m[i].version) {
            if (exec_sql(db, m[i].sql, op, err, errlen) < 0) goto fail;
            if (foreign_keys_intact(db, op, err, errlen) < 0) goto fail;
            if (exec_sql(db, set, op, err, errlen) < 0) goto fail;
            have = m[i].version;
        }
        if (exec_sql(db, "COMMIT", op, err, errlen) < 0) goto fail;
        if (exec_sql(db, "PRAGMA foreign_keys = ON", op, err, errlen) < 0) return -1;
    }
    return 0;
fail:
    if (!sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_exec(db, "PRAGMA foreign_keys = ON", NULL, NULL, NULL);
    return -1;
}

/* nightshift_sha256(text): the hex SHA-256 of its argument (NULL for NULL).
 * Migration 004 filed the configurations of its time with it. */
static void sha256_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    (void)argc;
    const unsigned char *t = sqlite3_value_text(argv[0]);
    if (!t) {
        sqlite3_result_null(ctx);
        return;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    if (!EVP_Digest(t, (size_t)sqlite3_value_bytes(argv[0]), md, &n, EVP_sha256(), NULL)) {
        sqlite3_result_error(ctx, "nightshift_sha256: digest failed", -1);
        return;
    }
    for (unsigned int i = 0; i < n; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    sqlite3_result_text(ctx, hex, (int)(2 * n), SQLITE_TRANSIENT);
}

/* nightshift_spec_key(spec): what the store files an experiment by, from the
 * spec parser (spec_scope, spec_config_hash), as JSON text {"dataset",
 * "budget_kind", "budget", "config_hash"}; NULL for a spec that does not
 * parse. Migration 009 files the stored rows again with it. */
static void spec_key_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    (void)argc;
    const char *text = (const char *)sqlite3_value_text(argv[0]);
    spec_t sp;
    spec_scope_t sc;
    char err[SPEC_ERR_LEN], hash[SPEC_HASH_HEX];
    if (!text || spec_parse(text, strlen(text), &sp, err, sizeof err) < 0) {
        sqlite3_result_null(ctx);
        return;
    }
    spec_scope(&sp, &sc);
    int rc = spec_config_hash(&sp, hash);
    spec_free(&sp);
    cJSON *o = rc == 0 ? cJSON_CreateObject() : NULL;
    char *json = o && cJSON_AddStringToObject(o, "dataset", sc.dataset) &&
                         cJSON_AddStringToObject(o, "budget_kind", sc.budget_kind) &&
                         cJSON_AddNumberToObject(o, "budget", sc.budget) &&
                         cJSON_AddStringToObject(o, "config_hash", hash)
                     ? cJSON_PrintUnformatted(o)
                     : NULL;
    cJSON_Delete(o);
    if (json)
        sqlite3_result_text(ctx, json, -1, SQLITE_TRANSIENT);
    else
        sqlite3_result_error_nomem(ctx);
    cJSON_free(json);
}

/* Open path and configure the connection; readonly opens it with
 * SQLITE_OPEN_READONLY and changes nothing (the journal mode is the
 * writer's). *out is set even on failure (it may hold a handle that needs
 * sqlite3_close). */
static int open_db(const char *path, int readonly, sqlite3 **out, char *err, size_t errlen) {
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_open_v2(
        path, &db, readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
        NULL);
    *out = db;
    if (rc != SQLITE_OK) {
        if (!db) return fail(err, errlen, "store: %s: out of memory", base_name(path));
        return fail(err, errlen, "store: opening %s: %s", base_name(path), sqlite3_errmsg(db));
    }
    sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);
    if (sqlite3_create_function(db, "nightshift_sha256", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC,
                                NULL, sha256_fn, NULL, NULL) != SQLITE_OK ||
        sqlite3_create_function(db, "nightshift_spec_key", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC,
                                NULL, spec_key_fn, NULL, NULL) != SQLITE_OK) {
        fail_db(db, err, errlen, "registering functions");
        goto fail;
    }
    if (readonly) return 0;

    if (sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        fail_db(db, err, errlen, "setting journal_mode");
        goto fail;
    }
    const char *mode = (const char *)sqlite3_column_text(st, 0);
    if (!mode || strcmp(mode, "wal")) {
        fail(err, errlen, "store: %s: cannot use WAL mode (journal_mode is %s)", base_name(path),
             mode ? mode : "unknown");
        goto fail;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (exec_sql(db, "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON", "pragmas", err,
                 errlen) < 0)
        goto fail;
    return 0;
fail:
    sqlite3_finalize(st);
    return -1;
}

int store_migrate(const char *path, const store_migration_t *m, size_t n, char *err,
                  size_t errlen) {
    sqlite3 *db = NULL;
    int rc = open_db(path, 0, &db, err, errlen);
    if (rc == 0) rc = migrate(db, path, m, n, err, errlen);
    sqlite3_close(db);
    return rc;
}

/* ---------------------------------------------------------------- lifecycle */

/* ------------------------------------------------ the files under the store */

#define AUTOCHECKPOINT_FRAMES 1000 /* SQLite's own default, kept */

/* The database's (wal 0) or its WAL's path, and what is there now into
 * *st; 0, or -1 when nothing is. */
int store_stat_file(const store_t *s, int wal, struct stat *st) {
    char path[4096];
    snprintf(path, sizeof path, "%s%s", s->path, wal ? "-wal" : "");
    return stat(path, st);
}

/* Remember the files the connection has open: the WAL exists as long as any
 * connection is open (SQLite deletes it with the last), so from here on it
 * gone from its path, or another file there, means someone took it away. */
static void note_files(store_t *s) {
    if (store_stat_file(s, 0, &s->db_file) < 0) s->db_file.st_ino = 0;
    if (store_stat_file(s, 1, &s->wal_file) < 0) s->wal_file.st_ino = 0;
}

/* Has the database (wal 0) or its WAL gone from its path under the
 * connection (deleted, or another file put in its place)? */
static int file_moved(store_t *s, int wal) {
    const struct stat *had = wal ? &s->wal_file : &s->db_file;
    struct stat now;
    if (had->st_ino == 0) return 0;
    return store_stat_file(s, wal, &now) < 0 || now.st_ino != had->st_ino ||
           now.st_dev != had->st_dev;
}

/* After every commit (in place of SQLite's own auto-checkpoint, which it
 * keeps): when the WAL has been deleted under the connection, what the
 * commit wrote is only in a file nobody can open after a crash, so copy it
 * into the database at once. store_check_files then opens the connection
 * anew, which makes a new WAL. */
static int wal_hook(void *arg, sqlite3 *db, const char *name, int frames) {
    store_t *s = arg;
    if (s->wal_file.st_ino == 0) note_files(s); /* the first write made the WAL */
    if (file_moved(s, 1)) {
        s->wal_lost = 1;
        sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    } else if (frames >= AUTOCHECKPOINT_FRAMES) {
        sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    }
    return SQLITE_OK;
}

/* Open the connection and prepare every statement (the schema is there). */
static int connect_db(store_t *s, char *err, size_t errlen) {
    if (open_db(s->path, s->readonly, &s->db, err, errlen) < 0) return -1;
    sqlite3_wal_hook(s->db, wal_hook, s);
    note_files(s);
    for (int p = 0; p < STORE_N_PARTS; p++)
        for (int i = 0; i < parts[p]->n; i++)
            if (sqlite3_prepare_v3(s->db, parts[p]->sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                                   &s->st[p][i], NULL) != SQLITE_OK)
                return fail(err, errlen, "store: preparing statement %d of the %s: %s", i,
                            parts[p]->name, sqlite3_errmsg(s->db));
    return 0;
}

static void disconnect_db(store_t *s) {
    for (int p = 0; p < STORE_N_PARTS; p++)
        for (int i = 0; i < parts[p]->n; i++) {
            sqlite3_finalize(s->st[p][i]);
            s->st[p][i] = NULL;
        }
    sqlite3_close(s->db);
    s->db = NULL;
}

int store_check_files(store_t *s, char *err, size_t errlen) {
    if (s->wal_file.st_ino == 0) note_files(s);
    if (file_moved(s, 0))
        return fail(err, errlen,
                    "store: %s was deleted or replaced while the daemon ran: what it writes "
                    "now would be lost",
                    base_name(s->path));
    if (!s->wal_lost && !file_moved(s, 1)) return 0;
    /* Everything committed into the database file, then a connection with a
     * WAL of its own on disk. */
    int rc = sqlite3_wal_checkpoint_v2(s->db, "main", SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    if (rc != SQLITE_OK) { /* a reader in the way: the next call tries again */
        s->wal_lost = 1;
        snprintf(err, errlen, "store: the WAL of %s was deleted; saving it: %s; trying again",
                 base_name(s->path), sqlite3_errmsg(s->db));
        return 1;
    }
    disconnect_db(s);
    s->wal_lost = 0;
    if (connect_db(s, err, errlen) < 0) return -1;
    snprintf(err, errlen,
             "store: the WAL of %s was deleted under the daemon; everything committed was copied "
             "into the database, and a new WAL opened",
             base_name(s->path));
    return 1;
}

int store_open(const char *path, store_t **out, char *err, size_t errlen) {
    *out = NULL;
    /* No memory statistics: with them every SQLite allocation of every
     * connection takes one global mutex, and an export's connection on the
     * thread pool (store_export_page) would hold up the loop's. Only possible
     * before SQLite initialises (the process's first connection). */
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    store_t *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return fail(err, errlen, "store: out of memory");
    }
    /* The schema first, on a connection of its own; then the store's. */
    sqlite3 *db = NULL;
    int rc = open_db(path, 0, &db, err, errlen) < 0 ||
                     migrate(db, path, store_migrations, store_n_migrations, err, errlen) < 0
                 ? -1
                 : 0;
    sqlite3_close(db);
    if (rc < 0 || connect_db(s, err, errlen) < 0) goto fail;
    *out = s;
    return 0;
fail:
    store_close(s);
    return -1;
}

int store_open_reader(const store_t *s, store_t **out, char *err, size_t errlen) {
    *out = NULL;
    store_t *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(s->path))) {
        free(r);
        return fail(err, errlen, "store: out of memory");
    }
    r->readonly = 1;
    if (connect_db(r, err, errlen) < 0) {
        store_close(r);
        return -1;
    }
    *out = r;
    return 0;
}

int store_open_readonly(const char *path, store_t **out, char *err, size_t errlen) {
    *out = NULL;
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    store_t *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return fail(err, errlen, "store: out of memory");
    }
    s->readonly = 1;
    /* The schema must be this build's: an older one is migrated by the
     * daemon, not by a reader. */
    sqlite3 *db = NULL;
    int have = -1, want = store_migrations[store_n_migrations - 1].version;
    int rc =
        open_db(path, 1, &db, err, errlen) < 0 || user_version(db, &have, err, errlen) < 0 ? -1 : 0;
    sqlite3_close(db);
    if (rc == 0 && have != want)
        rc = fail(err, errlen, "store: %s has schema version %d, this build reads %d",
                  base_name(path), have, want);
    if (rc < 0 || connect_db(s, err, errlen) < 0) goto fail;
    *out = s;
    return 0;
fail:
    store_close(s);
    return -1;
}

void store_close(store_t *s) {
    if (!s) return;
    disconnect_db(s);
    free(s->path);
    free(s);
}

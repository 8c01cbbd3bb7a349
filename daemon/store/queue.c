/* queue.c - the experiment queue: insert, duplicates, claim in queue order,
 * the pid and executor of a running experiment, cancel, and the requeue of
 * runs a stopped daemon interrupted. */
#define STORE_PART STORE_PART_QUEUE
#include "daemon/store/store_db.h"

#include <stdlib.h>
#include <string.h>

/* The running experiments to requeue or give up on: ?2 one id, or 0 for
 * every one a local daemon's crash interrupted (a Slurm job runs on without
 * the daemon: a daemon with the Slurm executor re-attaches to it). ?1 is
 * max_attempts; ?3 the finished time of those given up. */
#define RUNNING_MATCH                                                                              \
    "status = 'running' AND (id = ?2 OR (?2 = 0 AND coalesce(executor, 'local') != 'slurm'))"

enum {
    ST_INSERT,
    ST_FIND_DUP,
    ST_CLAIM,
    ST_SET_PID,
    ST_STATUS_OF,
    ST_CANCEL,
    ST_REQUEUE_METRICS,
    ST_REQUEUE_TEST,
    ST_REQUEUE,
    ST_ABANDON,
    ST_UNSTARTED,
    ST_QUEUE_DEPTH,
    ST_SET_EXECUTOR,
    ST_RUNNING,
    ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
    [ST_INSERT] = "INSERT INTO experiments (name, tags, spec, config_hash, seed, parent, source,"
                  " priority, created, dataset, budget_kind, budget, eval_tokens, via, rung,"
                  " rungs, eta, full_budget, full_config_hash)"
                  " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,"
                  " ?16, ?17, ?18, ?19)",
    /* The one the user most likely wants back: a result first, then a live one. */
    [ST_FIND_DUP] = "SELECT id FROM experiments WHERE config_hash = ?1 AND seed = ?2"
                    " AND eval_tokens = ?3 AND status IN ('succeeded', 'running', 'queued',"
                    " 'timeout') ORDER BY CASE status WHEN 'succeeded' THEN 0 WHEN 'running'"
                    " THEN 1 WHEN 'queued' THEN 2 ELSE 3 END, id LIMIT 1",
    [ST_CLAIM] = "UPDATE experiments SET status = 'running', pid = 0, started = ?1,"
                 " finished = NULL, reason = NULL, exit_code = NULL, term_signal = NULL"
                 " WHERE id = (SELECT id FROM experiments WHERE status = 'queued'"
                 " ORDER BY priority DESC, coalesce(rung, 0) DESC, source IN ('agent', 'mcp'), id"
                 " LIMIT 1)"
                 " RETURNING id, name, spec, attempt, dataset, budget_kind, budget, eval_tokens",
    [ST_SET_PID] = "UPDATE experiments SET pid = ?2 WHERE id = ?1 AND status = 'running'",
    [ST_STATUS_OF] = "SELECT status FROM experiments WHERE id = ?1",
    [ST_CANCEL] = "UPDATE experiments SET status = 'cancelled', reason = 'cancelled while queued',"
                  " finished = ?2 WHERE id = ?1 AND status = 'queued'",
    /* A requeued experiment starts again from step 0: its old metrics go. */
    [ST_REQUEUE_METRICS] = "DELETE FROM metrics WHERE experiment_id IN (SELECT id FROM experiments"
                           " WHERE " RUNNING_MATCH " AND attempt < ?1)",
    [ST_REQUEUE_TEST] = "DELETE FROM test_results WHERE experiment_id IN (SELECT id FROM"
                        " experiments WHERE " RUNNING_MATCH " AND attempt < ?1)",
    [ST_REQUEUE] = "UPDATE experiments SET status = 'queued', attempt = attempt + 1, pid = NULL,"
                   " started = NULL, reason = 'the daemon stopped during attempt ' || attempt"
                   " || '; requeued' WHERE " RUNNING_MATCH " AND attempt < ?1",
    [ST_ABANDON] = "UPDATE experiments SET status = 'interrupted', finished = ?3,"
                   " reason = 'the daemon stopped during attempt ' || attempt"
                   " || '; not requeued (at most ' || ?1 || ' attempts)'"
                   " WHERE " RUNNING_MATCH,
    [ST_UNSTARTED] = "UPDATE experiments SET status = 'queued', pid = NULL, started = NULL,"
                     " reason = ?2 WHERE id = ?1 AND status = 'running'",
    [ST_QUEUE_DEPTH] = "SELECT count(*) FROM experiments WHERE status = 'queued'",
    [ST_SET_EXECUTOR] = "UPDATE experiments SET executor = ?2, slurm_job_id = ?3"
                        " WHERE id = ?1 AND status = 'running'",
    [ST_RUNNING] = "SELECT id, name, spec, attempt, executor, slurm_job_id FROM experiments"
                   " WHERE status = 'running' ORDER BY id",
};
_Static_assert(ST_COUNT <= STORE_PART_MAX, "store_db.h's STORE_PART_MAX");

const store_part_t store_queue_part = {"queue", stmt_sql, ST_COUNT};

/* An experiment's rung (store_asha_t) into the five parameters from i on,
 * NULLs when a is NULL. */
static int bind_asha(sqlite3_stmt *st, int i, const store_asha_t *a) {
    if (!a) {
        int b = 0;
        for (int k = 0; k < 5; k++) b |= sqlite3_bind_null(st, i + k);
        return b;
    }
    return sqlite3_bind_int(st, i, a->rung) | sqlite3_bind_int(st, i + 1, a->rungs) |
           sqlite3_bind_int(st, i + 2, a->eta) | sqlite3_bind_double(st, i + 3, a->full_budget) |
           bind_text(st, i + 4, a->full_config_hash);
}

int store_insert(store_t *s, const store_new_experiment_t *e, int64_t *id, char *err,
                 size_t errlen) {
    if (!e->spec_json || !e->config_hash || !e->scope.dataset[0] || !e->scope.budget_kind[0])
        return fail(err, errlen, "store: insert: spec_json, config_hash and scope are required");
    if (!e->source || (strcmp(e->source, "api") && strcmp(e->source, "cli") &&
                       strcmp(e->source, "agent") && strcmp(e->source, "mcp")))
        return fail(err, errlen, "store: insert: source must be api, cli, agent or mcp");
    char now[STORE_TIME_LEN];
    now_iso(now);
    sqlite3_stmt *st = s->st[STORE_PART][ST_INSERT];
    int b = bind_text(st, 1, e->name);
    b |= bind_text(st, 2, e->tags_json ? e->tags_json : "[]");
    b |= bind_text(st, 3, e->spec_json);
    b |= bind_text(st, 4, e->config_hash);
    b |= sqlite3_bind_int64(st, 5, e->seed);
    b |= e->parent > 0 ? sqlite3_bind_int64(st, 6, e->parent) : sqlite3_bind_null(st, 6);
    b |= bind_text(st, 7, e->source);
    b |= sqlite3_bind_int(st, 8, e->priority);
    b |= bind_text(st, 9, now);
    b |= bind_text(st, 10, e->scope.dataset);
    b |= bind_text(st, 11, e->scope.budget_kind);
    b |= sqlite3_bind_double(st, 12, e->scope.budget);
    b |= sqlite3_bind_int64(st, 13, e->scope.eval_tokens);
    b |= bind_text(st, 14, e->via);
    b |= bind_asha(st, 15, e->asha);
    if (b) {
        reset(st);
        return fail_db(s->db, err, errlen, "insert");
    }
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) {
        if (sqlite3_extended_errcode(s->db) == SQLITE_CONSTRAINT_FOREIGNKEY)
            fail(err, errlen, "parent: experiment %lld does not exist", (long long)e->parent);
        else
            fail_db(s->db, err, errlen, "insert");
        reset(st);
        return -1;
    }
    reset(st);
    *id = sqlite3_last_insert_rowid(s->db);
    return 0;
}

int store_find_duplicate(store_t *s, const char *config_hash, int64_t seed, int64_t eval_tokens,
                         int64_t *id, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[STORE_PART][ST_FIND_DUP];
    if (bind_text(st, 1, config_hash) || sqlite3_bind_int64(st, 2, seed) ||
        sqlite3_bind_int64(st, 3, eval_tokens)) {
        reset(st);
        return fail_db(s->db, err, errlen, "find duplicate");
    }
    int rc = sqlite3_step(st), found = 0;
    if (rc == SQLITE_ROW) {
        *id = sqlite3_column_int64(st, 0);
        found = 1;
    } else if (rc != SQLITE_DONE) {
        found = fail_db(s->db, err, errlen, "find duplicate");
    }
    reset(st);
    return found;
}

int store_claim_next(store_t *s, store_experiment_t *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    sqlite3_stmt *st = s->st[STORE_PART][ST_CLAIM];
    char now[STORE_TIME_LEN];
    now_iso(now);
    if (begin(s, err, errlen) < 0) return -1;
    if (bind_text(st, 1, now)) goto db_error;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        reset(st);
        if (commit(s, err, errlen) < 0) goto fail;
        return 0;
    }
    if (rc != SQLITE_ROW) goto db_error;
    out->id = sqlite3_column_int64(st, 0);
    out->name = dup_column(st, 1);
    out->spec_json = dup_column(st, 2);
    out->attempt = sqlite3_column_int(st, 3);
    column_scope(st, 4, &out->scope);
    if ((sqlite3_column_type(st, 1) != SQLITE_NULL && !out->name) || !out->spec_json) {
        fail(err, errlen, "store: claim: out of memory");
        goto fail;
    }
    if (sqlite3_step(st) != SQLITE_DONE) goto db_error;
    reset(st);
    if (commit(s, err, errlen) < 0) goto fail;
    return 1;
db_error:
    fail_db(s->db, err, errlen, "claim");
fail:
    reset(st);
    rollback(s);
    store_experiment_clear(out);
    return -1;
}

void store_experiment_clear(store_experiment_t *e) {
    free(e->name);
    free(e->spec_json);
    memset(e, 0, sizeof *e);
}

/* After an UPDATE ... WHERE id = ? AND status = ? changed nothing: say why. */
int store_explain_status(store_t *s, int64_t id, const char *want, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[STORE_PART][ST_STATUS_OF];
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        fail(err, errlen, "store: experiment %lld is not %s (it is %s)", (long long)id, want,
             (const char *)sqlite3_column_text(st, 0));
    else if (rc == SQLITE_DONE)
        fail(err, errlen, "store: experiment %lld not found", (long long)id);
    else
        fail_db(s->db, err, errlen, "status");
    reset(st);
    return -1;
}

int store_set_pid(store_t *s, int64_t id, int pid, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[STORE_PART][ST_SET_PID];
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int(st, 2, pid);
    if (run(s, ST_SET_PID, "set pid", err, errlen) < 0) return -1;
    if (sqlite3_changes(s->db) != 1) return store_explain_status(s, id, STORE_RUNNING, err, errlen);
    return 0;
}

int store_cancel_queued(store_t *s, int64_t id, char *err, size_t errlen) {
    char now[STORE_TIME_LEN];
    now_iso(now);
    sqlite3_stmt *st = s->st[STORE_PART][ST_CANCEL];
    sqlite3_bind_int64(st, 1, id);
    bind_text(st, 2, now);
    if (run(s, ST_CANCEL, "cancel", err, errlen) < 0) return -1;
    if (sqlite3_changes(s->db) == 1) return 1;

    st = s->st[STORE_PART][ST_STATUS_OF];
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st), out = 0;
    if (rc == SQLITE_DONE) {
        fail(err, errlen, "store: experiment %lld not found", (long long)id);
        out = NS_ERR_NOT_FOUND;
    } else if (rc != SQLITE_ROW)
        out = fail_db(s->db, err, errlen, "cancel");
    reset(st);
    return out;
}

/* Requeue (attempt < max_attempts) or give up on the running experiment id, or
 * on every running one when id is 0, in one transaction. */
static int requeue_running(store_t *s, int64_t id, int max_attempts, int *requeued, int *abandoned,
                           char *err, size_t errlen) {
    char now[STORE_TIME_LEN];
    now_iso(now);
    if (begin(s, err, errlen) < 0) return -1;
    static const int steps[] = {ST_REQUEUE_METRICS, ST_REQUEUE_TEST, ST_REQUEUE, ST_ABANDON};
    int changed[4] = {0};
    for (int i = 0; i < 4; i++) {
        sqlite3_stmt *st = s->st[STORE_PART][steps[i]];
        sqlite3_bind_int(st, 1, max_attempts);
        sqlite3_bind_int64(st, 2, id);
        if (steps[i] == ST_ABANDON) bind_text(st, 3, now);
        if (run(s, steps[i], "requeue", err, errlen) < 0) goto fail;
        changed[i] = sqlite3_changes(s->db);
    }
    if (id && changed[2] + changed[3] == 0) {
        store_explain_status(s, id, STORE_RUNNING, err, errlen);
        goto fail;
    }
    if (commit(s, err, errlen) < 0) goto fail;
    if (requeued) *requeued = changed[2];
    if (abandoned) *abandoned = changed[3];
    return 0;
fail:
    rollback(s);
    return -1;
}

int store_recover(store_t *s, int max_attempts, int *requeued, int *abandoned, char *err,
                  size_t errlen) {
    return requeue_running(s, 0, max_attempts, requeued, abandoned, err, errlen);
}

int store_interrupt(store_t *s, int64_t id, int max_attempts, char *err, size_t errlen) {
    if (id <= 0) return fail(err, errlen, "store: experiment %lld not found", (long long)id);
    return requeue_running(s, id, max_attempts, NULL, NULL, err, errlen);
}

int store_requeue_unstarted(store_t *s, int64_t id, const char *reason, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[STORE_PART][ST_UNSTARTED];
    sqlite3_bind_int64(st, 1, id);
    bind_text(st, 2, reason);
    if (run(s, ST_UNSTARTED, "requeue", err, errlen) < 0) return -1;
    if (sqlite3_changes(s->db) != 1) return store_explain_status(s, id, STORE_RUNNING, err, errlen);
    return 0;
}

int64_t store_queue_depth(store_t *s, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[STORE_PART][ST_QUEUE_DEPTH];
    int64_t n = -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    else
        fail_db(s->db, err, errlen, "queue depth");
    reset(st);
    return n;
}

/* ---------------------------------------------------------------- executors */

int store_set_executor(store_t *s, int64_t id, const char *executor, int64_t slurm_job_id,
                       char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[STORE_PART][ST_SET_EXECUTOR];
    sqlite3_bind_int64(st, 1, id);
    bind_text(st, 2, executor);
    if (slurm_job_id > 0)
        sqlite3_bind_int64(st, 3, slurm_job_id);
    else
        sqlite3_bind_null(st, 3);
    if (run(s, ST_SET_EXECUTOR, "set executor", err, errlen) < 0) return -1;
    if (sqlite3_changes(s->db) != 1) return store_explain_status(s, id, STORE_RUNNING, err, errlen);
    return 0;
}

static char *column_dup(sqlite3_stmt *st, int i) {
    const char *t = (const char *)sqlite3_column_text(st, i);
    return t ? strdup(t) : NULL;
}

int store_running_jobs(store_t *s, store_job_t **out, size_t *n, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[STORE_PART][ST_RUNNING];
    store_job_t *jobs = NULL;
    size_t count = 0, cap = 0;
    int rc;
    *out = NULL;
    *n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (count == cap) {
            cap = cap ? 2 * cap : 8;
            store_job_t *more = realloc(jobs, cap * sizeof *jobs);
            if (!more) {
                fail(err, errlen, "store: out of memory");
                goto fail;
            }
            jobs = more;
        }
        store_job_t *j = &jobs[count++];
        memset(j, 0, sizeof *j);
        j->e.id = sqlite3_column_int64(st, 0);
        j->e.name = column_dup(st, 1);
        j->e.spec_json = column_dup(st, 2);
        j->e.attempt = sqlite3_column_int(st, 3);
        const char *x = (const char *)sqlite3_column_text(st, 4);
        snprintf(j->executor, sizeof j->executor, "%s", x ? x : "");
        j->slurm_job_id = sqlite3_column_int64(st, 5);
        if (!j->e.spec_json) {
            fail(err, errlen, "store: out of memory");
            goto fail;
        }
    }
    if (rc != SQLITE_DONE) {
        fail_db(s->db, err, errlen, "running experiments");
        goto fail;
    }
    reset(st);
    *out = jobs;
    *n = count;
    return 0;
fail:
    reset(st);
    store_jobs_free(jobs, count);
    return -1;
}

void store_jobs_free(store_job_t *jobs, size_t n) {
    for (size_t i = 0; i < n; i++) store_experiment_clear(&jobs[i].e);
    free(jobs);
}

/* testutil.h - helpers shared by the tests: temp directories, files, running
 * the built binary with a hard timeout, servers (`nightshift serve`, `nightshift
 * agent`) as child processes on a loopback port, HTTP calls to them with
 * libcurl, and read-only SQL on a daemon's database. Every function aborts the
 * current test (cr_assert) on failure, so callers need no error paths. */
#ifndef NIGHTSHIFT_TESTUTIL_H
#define NIGHTSHIFT_TESTUTIL_H

#include <cJSON.h>
#include <sqlite3.h>
#include <stddef.h>
#include <sys/types.h>

/* A fresh directory under $TMPDIR (or /tmp); caller frees the string and
 * removes the tree with tu_rmrf. */
char *tu_tmpdir(void);
void tu_rmrf(const char *path);

/* malloc'd printf. */
char *tu_path(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

void tu_write(const char *path, const char *text);
/* Whole file, NUL-terminated, malloc'd (caller frees); NULL if it cannot be read. */
char *tu_read(const char *path);

/* The built nightshift binary ($NIGHTSHIFT_BIN) and the source tree ($NIGHTSHIFT_SRC). */
const char *tu_bin(void);
const char *tu_src(void);

typedef struct {
    int exit_code; /* -1 when killed by a signal */
    int signal;
    int timed_out;
    char *out, *err; /* captured stdout and stderr, malloc'd */
} tu_run_t;

/* Run argv (argv[0] is a path) with stdout/stderr captured; SIGKILL after
 * timeout_s. Release with tu_run_free. */
void tu_run(tu_run_t *r, char *const argv[], double timeout_s);
void tu_run_free(tu_run_t *r);

/* CLOCK_MONOTONIC seconds, and a sleep. */
double tu_now(void);
void tu_sleep_ms(int ms);

/* ---------------------------------------------------------------- servers */

/* A server process that prints one line "listening on http://127.0.0.1:PORT"
 * on stdout when it is ready. Its stderr goes to a file, quoted when a test
 * fails and searched for sanitizer reports. It dies with the test process
 * (PR_SET_PDEATHSIG), so a test killed by its timeout leaves nothing running. */
typedef struct {
    pid_t pid; /* 0 once reaped */
    int port;
    char url[64];  /* "http://127.0.0.1:PORT" */
    char name[32]; /* "daemon", "agent": for messages */
    char *errlog;  /* the stderr file's path, malloc'd (tu_server_release frees) */
} tu_server_t;

/* Start argv (argv[0] a path) with stderr to errlog (a copy is kept) and wait
 * at most timeout_s for its port line; anything else fails the test with the
 * stderr tail. s is filled in; release it with tu_server_release. */
void tu_server_start(tu_server_t *s, const char *name, char *const argv[], const char *errlog,
                     double timeout_s);

/* SIGTERM and wait at most timeout_s: anything but exit 0 (or a sanitizer
 * report in its stderr) fails the test; a server still running at the limit is
 * killed first. */
void tu_server_stop(tu_server_t *s, double timeout_s);

/* SIGKILL and reap (the status must say SIGKILL). */
void tu_server_kill(tu_server_t *s);

/* Kill the server if it still runs and free errlog; safe on a zeroed or
 * already released s. For teardowns. */
void tu_server_release(tu_server_t *s);

/* No sanitizer report in the server's stderr (a cr_expect). */
void tu_server_expect_clean_log(const tu_server_t *s);

/* Fail the test with the message and the tail of the server's stderr. */
void tu_server_fail(const tu_server_t *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

/* ------------------------------------------------------------------- HTTP */

/* The caller calls curl_global_init/curl_global_cleanup (suite setup). */
typedef struct {
    long status;
    char *body; /* NUL-terminated, malloc'd (tu_reply_free) */
    size_t len;
    char content_type[128];
    double seconds; /* wall time of the call */
} tu_reply_t;

/* One request to s->url + path; body may be NULL (no body) and auth is the
 * whole Authorization value or NULL. A transport failure fails the test
 * (with the server's stderr). Release with tu_reply_free. */
void tu_http(const tu_server_t *s, const char *method, const char *path, const char *body,
             size_t body_len, const char *auth, tu_reply_t *r);
void tu_reply_free(tu_reply_t *r);

/* A JSON request (body a string or NULL) whose reply must have want_status
 * and be JSON; returns the parsed reply, which the caller deletes. */
cJSON *tu_http_json(const tu_server_t *s, const char *method, const char *path, const char *body,
                    long want_status);
/* GET path, 200, JSON (caller deletes). */
cJSON *tu_get_json(const tu_server_t *s, const char *path);

/* o[key] as a string (NULL when absent or not a string; owned by o), or as
 * a number (absent or not a number fails the test). */
const char *tu_jstr(const cJSON *o, const char *key);
double tu_jnum(const cJSON *o, const char *key);

/* -------------------------------------------------------------------- SQL */

/* An SQLite database opened read-only with a busy timeout (its writer may be
 * running); the caller closes it with sqlite3_close. */
sqlite3 *tu_db_open(const char *path);

/* The first column of the first row of sql, with ?1 bound to arg when the
 * statement has parameters: tu_sql_int gives -1 for NULL or no row;
 * tu_sql_double requires a row. */
long long tu_sql_int(sqlite3 *db, const char *sql, long long arg);
double tu_sql_double(sqlite3 *db, const char *sql, long long arg);

#endif

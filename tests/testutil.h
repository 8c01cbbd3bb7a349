/* testutil.h - helpers shared by the tests: temp directories, files, running
 * the built binary with a hard timeout, a tiny prepared dataset, servers
 * (`nightshift serve`, `nightshift agent`) as child processes on a loopback
 * port, HTTP calls to them with libcurl, and read-only SQL on a daemon's
 * database. Every function aborts the current test (cr_assert) on failure, so
 * callers need no error paths. */
#ifndef NIGHTSHIFT_TESTUTIL_H
#define NIGHTSHIFT_TESTUTIL_H

/* The tests check the code's assert()s too (the Makefile never defines NDEBUG). */
#ifdef NDEBUG
#error "build the tests without NDEBUG: the code's assert()s are part of what they check"
#endif

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stddef.h>
#include <sys/types.h>

/* The engine's kernel paths, widest first: the values NIGHTSHIFT_ISA takes. */
extern const char *const tu_isas[3];

/* Select kernel path `name` as an engine command does, through
 * NIGHTSHIFT_ISA (gemm_select_env), on a team of `threads` (threads_set).
 * Returns 0, or -1 (logged) when this CPU cannot run that path. */
int tu_select_isa(const char *name, int threads);

/* Back to the widest path, NIGHTSHIFT_ISA unset, float32 products. */
void tu_select_isa_auto(void);

/* The avx512 path with bf16 products (gemm_set_precision) on a team of
 * `threads`: 1, or 0 with the reason printed ("[SKIP] suite::test: ..."
 * on stderr, which make test shows) where this CPU has no AVX512_BF16 or
 * NIGHTSHIFT_ISA in the test run's environment forces a path without bf16,
 * as a run there refuses train.precision bf16; the caller then returns (a
 * passing test: Criterion 2.4.1 exits non-zero when a test is skipped with
 * cr_skip_test). NIGHTSHIFT_ISA=avx2 make test thus stands in for a CPU
 * without bf16. */
int tu_select_bf16(int threads);

/* A fresh directory under $TMPDIR (or /tmp); caller frees the string and
 * removes the tree with tu_rmrf. */
char *tu_tmpdir(void);
void tu_rmrf(const char *path);

/* One fresh temporary directory per test, for suites whose tests all want
 * one: TestSuite(x, .init = tu_dir_init, .fini = tu_dir_fini), or both called
 * from the suite's own init and fini. tu_dir() is the directory (owned here,
 * valid until tu_dir_fini); tu_dir_path(name) is tu_dir()/name in one of
 * eight rotating static buffers (valid for the next seven calls). */
void tu_dir_init(void);
void tu_dir_fini(void);
const char *tu_dir(void);
const char *tu_dir_path(const char *name);

/* malloc'd printf. */
char *tu_path(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Create or truncate path and write text (tu_write) or len bytes of data. */
void tu_write(const char *path, const char *text);
void tu_write_n(const char *path, const void *data, size_t len);
/* Whole file, NUL-terminated, malloc'd (caller frees); NULL if it cannot be read. */
char *tu_read(const char *path);
/* The same for a file that must exist and may hold NULs: *len gets its size
 * (the NUL is not counted); a file that cannot be read fails the test. */
char *tu_read_all(const char *path, size_t *len);

/* The built nightshift binary ($NIGHTSHIFT_BIN), the source tree
 * ($NIGHTSHIFT_SRC) and the stand-in worker ($NIGHTSHIFT_BAD_WORKER,
 * tests/bad_worker.c). */
const char *tu_bin(void);
const char *tu_src(void);
const char *tu_bad_worker(void);

typedef struct {
    int exit_code; /* -1 when killed by a signal */
    int signal;
    int timed_out;
    char *out, *err; /* captured stdout and stderr, malloc'd */
} tu_run_t;

/* This test process's stderr into a file of its own until tu_stderr_end, for
 * code under test that reports an error it was made to meet on stderr (an
 * option parser, the daemon's log): make test's output then shows no line
 * that reads as a failure. tu_stderr_end restores stderr and returns what was
 * written meanwhile (malloc'd; "" when nothing). Not nested. */
void tu_stderr_begin(void);
char *tu_stderr_end(void);

/* Run argv (argv[0] is a path) with stdout/stderr captured; SIGKILL after
 * timeout_s. Release with tu_run_free. */
void tu_run(tu_run_t *r, char *const argv[], double timeout_s);
void tu_run_free(tu_run_t *r);

/* tu_run of `$NIGHTSHIFT_BIN ARG...` (the arguments NULL-terminated, at most
 * 30); a run that times out fails the test. Release r with tu_run_free. */
void tu_run_bin(tu_run_t *r, double timeout_s, const char *arg, ...);

/* tu_run_bin whose exit code must be want (a failure names the command and
 * quotes its stderr); for runs whose output does not matter. */
void tu_run_bin_exit(int want, double timeout_s, const char *arg, ...);
/* The same for a run that must exit 0 and print exactly out on stdout. */
void tu_run_bin_out(const char *out, double timeout_s, const char *arg, ...);

/* One read(2) of fd appended to buf, which holds *len bytes and keeps at most
 * cap - 1 (the rest is dropped), NUL-terminated. Returns 0 at EOF or on an
 * error (EIO once a pty's child is gone), 1 otherwise. */
int tu_read_some(int fd, char *buf, size_t *len, size_t cap);

/* CLOCK_MONOTONIC seconds, and a sleep. */
double tu_now(void);
void tu_sleep_ms(int ms);

/* Whether pid has exited (gone, or a zombie nobody has reaped yet). */
int tu_process_gone(pid_t pid);

/* Write a JSONL corpus of forty short, very regular documents to corpus (a
 * tiny model learns it in seconds) and prepare it with `nightshift prep` as
 * dataset name under dir (vocab 300, 10% validation). */
void tu_prep_tiny(const char *corpus, const char *dir, const char *name);

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

/* `nightshift serve` on state with one one-thread slot and no address-space
 * limit (a sanitizer build's worker could not start under one; a spec of
 * terabytes is still refused against the RAM), waiting at most timeout_s;
 * extra (NULL-terminated, may be NULL) replaces the loopback --listen. Its
 * stderr goes to a file of its own under tu_dir(). */
void tu_daemon_start(tu_server_t *d, const char *state, const char *const *extra, double timeout_s);

/* SIGTERM and wait at most timeout_s: anything but exit 0 (or a sanitizer
 * report in its stderr) fails the test; a server still running at the limit is
 * killed first. */
void tu_server_stop(tu_server_t *s, double timeout_s);

/* SIGTERM and wait at most timeout_s, killing a server still running then
 * (*timed_out says so); returns the wait status. For tests that judge the
 * exit themselves. */
int tu_server_term(tu_server_t *s, double timeout_s, int *timed_out);

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
    double seconds;     /* wall time of the call */
    char headers[2048]; /* the reply's header lines, as received (cut at 2047 bytes) */
} tu_reply_t;

/* One request to s->url + path; body may be NULL (no body) and auth is the
 * whole Authorization value or NULL. A transport failure fails the test
 * (with the server's stderr). Release with tu_reply_free. */
void tu_http(const tu_server_t *s, const char *method, const char *path, const char *body,
             size_t body_len, const char *auth, tu_reply_t *r);
/* The same with headers, a NULL-terminated list of whole header lines
 * ("Name: value"; "Name:" drops a header libcurl would send), after
 * "Content-Type: application/json" unless the list has a Content-Type. */
void tu_http_headers(const tu_server_t *s, const char *method, const char *path, const char *body,
                     size_t body_len, const char *const headers[], tu_reply_t *r);
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

/* Is s (len bytes) valid UTF-8? glibc's iconv decides, an oracle apart
 * from the daemon's own check. */
int tu_utf8_valid(const char *s, size_t len);

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

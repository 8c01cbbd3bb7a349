/* testutil.h - helpers shared by the tests: temp directories, files, and
 * running the built binary with a hard timeout. Every function aborts the
 * current test (cr_assert) on failure, so callers need no error paths. */
#ifndef NIGHTSHIFT_TESTUTIL_H
#define NIGHTSHIFT_TESTUTIL_H

#include <stddef.h>

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

#endif

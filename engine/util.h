/* util.h - small file and clock helpers shared by the engine's commands. */
#ifndef NIGHTSHIFT_UTIL_H
#define NIGHTSHIFT_UTIL_H

#include <stddef.h>

/* Monotonic seconds. */
double util_now(void);

/* printf into a caller's error buffer; does nothing when err is NULL. */
void util_errorf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Read a whole file of at most max_bytes. Returns a malloc'd, NUL-terminated
 * buffer (caller frees) with its length in *len, or NULL with err set (err may
 * be NULL when the caller only cares whether it worked). */
char *util_read_file(const char *path, size_t max_bytes, size_t *len, char *err, size_t errlen);

/* A token or secret kept in a file: util_read_file, then trailing newlines
 * and spaces dropped (editors add them). Same ownership as util_read_file. */
char *util_read_secret(const char *path, size_t max_bytes, size_t *len, char *err, size_t errlen);

/* Write data to path atomically: a temp file beside it, fsync, rename, fsync
 * of the directory. Returns 0 or -1 with err; never leaves the temp file. */
int util_write_file_atomic(const char *path, const void *data, size_t len, char *err,
                           size_t errlen);

/* mkdir -p. Returns 0 or -1 with err. */
int util_mkdirs(const char *path, char *err, size_t errlen);

/* Peak resident set size of this process, MiB. */
double util_peak_rss_mb(void);

#endif

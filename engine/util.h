/* util.h - small helpers shared by every program in the binary: error
 * codes, files, the clock, and the control-character rule. */
#ifndef NIGHTSHIFT_UTIL_H
#define NIGHTSHIFT_UTIL_H

#include <stddef.h>

/* The error codes a function returns beside the message it writes into its
 * caller's buffer. Callers decide (an HTTP status, an exit code, a retry) by
 * the code, never by the message's text. 0 and -1 keep their old meaning:
 * success, and a failure without a more specific kind. */
typedef enum {
    NS_OK = 0,
    NS_ERR_INVALID = -1,      /* bad input or any failure without its own code */
    NS_ERR_NOT_FOUND = -2,    /* the named thing does not exist */
    NS_ERR_NOMEM = -3,        /* an allocation failed */
    NS_ERR_IO = -4,           /* a file, socket or database operation failed */
    NS_ERR_CONFLICT = -5,     /* the request clashes with what exists */
    NS_ERR_DOES_NOT_FIT = -6, /* the work needs more than the machine has */
    NS_ERR_TOO_LARGE = -7     /* more bytes than a size limit allows */
} ns_err_t;

/* A short fixed description of code ("not found"); never NULL. */
const char *ns_strerror(int code);

/* Monotonic seconds. */
double util_now(void);

/* The median of v[0..n) (n >= 1; the mean of the middle two when n is even).
 * Sorts v in place. */
double util_median(double *v, int n);

/* CPU seconds this process has used, every thread, user and system. */
double util_cpu_seconds(void);

/* Grow *p, a malloc'd array of *cap elements of sz bytes (NULL and 0 at
 * first), to hold at least need elements: the capacity doubles from 16.
 * Returns 0, or -1 when out of memory (*p and *cap unchanged). */
int util_grow(void *p, size_t *cap, size_t need, size_t sz);

/* Zeroed memory for a large array the engine streams through every step
 * (activations, parameters, gradients), in transparent huge pages where the
 * kernel offers them (madvise mode): 2 MB pages, so the first step faults
 * 512 times less often and the steps after miss the TLB less. Sizes below
 * UTIL_HUGE_MIN are a plain calloc. Free with free(). NULL when out of
 * memory. */
#define UTIL_HUGE_MIN ((size_t)2 << 20)
void *util_calloc_huge(size_t bytes);

/* printf into a caller's error buffer (nothing when err is NULL); returns
 * NS_ERR_INVALID (-1), so a failure is one `return util_errorf(...)`. */
int util_errorf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Open path for reading only if it is a regular file: a FIFO, a device or a
 * socket in its place is refused before it is opened (stat), and one swapped
 * in after the stat is refused without blocking (a non-blocking open, then
 * fstat). Returns the descriptor (close-on-exec, blocking), or -1 with err
 * ("PATH: not a regular file"). Every file the programs read from a
 * directory someone else may write to goes through this. */
int util_open_regular(const char *path, char *err, size_t errlen);

/* Read a whole regular file (util_open_regular) of at most max_bytes.
 * Returns a malloc'd, NUL-terminated
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

/* What util_is_control counts besides C0 controls and DEL. */
#define UTIL_CTRL_KEEP_WS 1u /* \t \n \r are not control characters */
#define UTIL_CTRL_C1      2u /* U+0080..U+009F (UTF-8 c2 80..c2 9f) are */

/* The one rule for text from outside (specs, workers, replies) before it
 * reaches a log line or a terminal: is the character at p, a UTF-8 sequence
 * of len bytes (1 for a lone byte), a control character? */
int util_is_control(const unsigned char *p, size_t len, unsigned flags);

/* Copy len bytes of src into dst (at least len + 1 bytes; dst may be src),
 * NUL-terminated, with each control character (util_is_control with flags)
 * made '?': byte by byte, except that with UTIL_CTRL_C1 a C1 character's two
 * bytes become one '?'. Returns the bytes written before the NUL. */
size_t util_clean_text(char *dst, const char *src, size_t len, unsigned flags);

/* The length of the valid UTF-8 sequence at p (at most len bytes): 1 to 4,
 * or 0 when none starts there (a stray continuation byte, an overlong form, a
 * surrogate, a code point beyond U+10FFFF, a sequence cut short). */
size_t util_utf8_len(const unsigned char *p, size_t len);

/* Make the NUL-terminated s valid UTF-8 in place: every byte that starts no
 * valid sequence becomes '?', so text quoted from input (a field name, a
 * method) can go into JSON, which must be UTF-8. Returns how many bytes were
 * replaced. */
size_t util_utf8_scrub(char *s);

struct cJSON;

/* item as JSON text (malloc'd; the caller frees it), as cJSON_Print (with
 * formatted) or cJSON_PrintUnformatted writes it, except that every integral
 * number up to 2^53 in magnitude is written exactly. cJSON writes one beyond
 * 2^31 with 15 significant digits whenever that reads back within its
 * relative tolerance, so 8999999999999999 became 9e+15: a seed changed on
 * its way through a spec. The text is valid UTF-8: a byte of a string that
 * starts no valid sequence is written as '?' (util_utf8_scrub). item is left
 * as it was. NULL when out of memory. */
char *util_json_print(const struct cJSON *item, int formatted);

#endif

/* bytebuf.h - a growable byte buffer with a size cap: request bodies, replies
 * read from a socket, texts built piece by piece.
 *
 *     bytebuf_t b;
 *     bytebuf_init(&b, 1 << 20);          // at most 1 MiB of content
 *     bytebuf_append(&b, data, n);
 *     bytebuf_printf(&b, "id: %d\n", id);
 *     char *text = bytebuf_take(&b, &len); // the caller owns text now
 *
 * The content is len bytes at data, always followed by a NUL once anything
 * was allocated (data is NULL until then; bytebuf_str gives "" for it), so it
 * reads as a C string when it holds no NUL of its own. It never holds more
 * than max bytes: an append that would pass the cap fails with
 * NS_ERR_TOO_LARGE, one that cannot allocate with NS_ERR_NOMEM, and either
 * leaves the content as it was.
 *
 * The first failure is also kept in err and makes every later append fail
 * with it until bytebuf_reset, so a text built from many appends can be
 * checked once at the end (bytebuf_take then returns NULL).
 *
 * Ownership: the buffer owns data until bytebuf_take hands it to the caller
 * or bytebuf_free releases it. A zeroed bytebuf_t is a valid empty buffer
 * with a cap of 0 bytes; bytebuf_init sets the cap. Appends grow the memory
 * geometrically (amortised O(1) per byte) but never past max + 1 bytes. */
#ifndef NIGHTSHIFT_BYTEBUF_H
#define NIGHTSHIFT_BYTEBUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* A cap that is no cap: as much as memory allows. */
#define BYTEBUF_UNLIMITED (SIZE_MAX - 1)

/* Read the fields; change them only through the functions below. */
typedef struct {
    char *data; /* len bytes and a NUL; NULL until the first allocation */
    size_t len; /* bytes of content, the NUL not counted */
    size_t cap; /* bytes allocated at data, the NUL's byte included */
    size_t max; /* the most len may become */
    int err;    /* 0, or the first failure (a negative ns_err_t) since init or reset */
} bytebuf_t;

/* An empty buffer that may hold up to max bytes (BYTEBUF_UNLIMITED for no
 * cap; larger values count as that). Allocates nothing. */
void bytebuf_init(bytebuf_t *b, size_t max);

/* Append n bytes of data (data may be NULL when n is 0). Returns 0, or
 * NS_ERR_TOO_LARGE / NS_ERR_NOMEM / an earlier failure with b unchanged. */
int bytebuf_append(bytebuf_t *b, const void *data, size_t n);

/* Append the NUL-terminated s. Same returns as bytebuf_append. */
int bytebuf_puts(bytebuf_t *b, const char *s);

/* Append one byte. Same returns as bytebuf_append. */
int bytebuf_putc(bytebuf_t *b, char c);

/* Append printf-formatted text. Same returns as bytebuf_append, and
 * NS_ERR_INVALID when the format fails (b unchanged and err set then too). */
int bytebuf_printf(bytebuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int bytebuf_vprintf(bytebuf_t *b, const char *fmt, va_list ap);

/* Make room for n more bytes of content, exactly (no slack: for a caller
 * that knows the final size, or writes in place). Fails like an append of n
 * bytes (past the cap: NS_ERR_TOO_LARGE) but never sets err. After it, up to
 * n bytes may be written at data + len and counted with bytebuf_commit. */
int bytebuf_reserve(bytebuf_t *b, size_t n);

/* Count n bytes written in place after bytebuf_reserve as content and
 * terminate them. n is at most the room, cap - len - 1 (more is cut to it). */
void bytebuf_commit(bytebuf_t *b, size_t n);

/* Drop the first n bytes of content (all of it when n >= len), keeping the
 * memory. */
void bytebuf_drop(bytebuf_t *b, size_t n);

/* Empty the buffer and clear err, keeping the memory and the cap. */
void bytebuf_reset(bytebuf_t *b);

/* The content as a C string: data, or "" while nothing is allocated. Valid
 * until the next call that changes b. */
const char *bytebuf_str(const bytebuf_t *b);

/* Hand the content to the caller: a malloc'd, NUL-terminated string (""
 * when empty) the caller frees, with its length in *len (len may be NULL).
 * NULL when an append failed since the last reset (err says which) or out of
 * memory; the content is freed then. Either way b is left empty, with its
 * cap, ready for reuse. */
char *bytebuf_take(bytebuf_t *b, size_t *len);

/* Release the memory; b stays an empty buffer with its cap, ready for reuse. */
void bytebuf_free(bytebuf_t *b);

/* Newline-delimited lines assembled across reads (a worker's progress pipe,
 * a Slurm job's progress file). Whole lines, without their newline, go to
 * on_line; a line longer than the buffer's cap (or one that meets an
 * allocation failure) is counted in overlong and skipped up to its newline.
 * Zeroed, then bytebuf_init(&l->line, cap); release with bytebuf_free. */
typedef struct {
    bytebuf_t line;    /* the unfinished line */
    int discard;       /* inside an overlong line */
    uint64_t overlong; /* lines skipped for their length */
} bytebuf_lines_t;

typedef void bytebuf_line_fn(void *user, const char *line, size_t len);

/* Split n bytes into lines; an unfinished last line waits for the next call. */
void bytebuf_lines_feed(bytebuf_lines_t *l, const char *p, size_t n, bytebuf_line_fn *on_line,
                        void *user);

/* At the end of the input: a last line without a newline still counts. */
void bytebuf_lines_flush(bytebuf_lines_t *l, bytebuf_line_fn *on_line, void *user);

#endif

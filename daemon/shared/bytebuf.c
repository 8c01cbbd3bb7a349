/* bytebuf.c - a growable byte buffer with a size cap (see bytebuf.h). */
#include "daemon/shared/bytebuf.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h"

#define MIN_ALLOC 64 /* bytes of the first allocation by an append */

void bytebuf_init(bytebuf_t *b, size_t max) {
    memset(b, 0, sizeof *b);
    b->max = max < BYTEBUF_UNLIMITED ? max : BYTEBUF_UNLIMITED;
}

/* Can n more bytes of content be held? max <= SIZE_MAX - 1, so len + n + 1
 * cannot wrap once this holds. */
static int fits(const bytebuf_t *b, size_t n) {
    return b->len <= b->max && n <= b->max - b->len;
}

/* Make cap at least len + n + 1 (the caller checked fits): exactly that, or
 * with slack (double the old size, at least MIN_ALLOC), never more than
 * max + 1. Returns 0 or NS_ERR_NOMEM with b unchanged. */
static int grow(bytebuf_t *b, size_t n, int slack) {
    size_t need = b->len + n + 1;
    if (need <= b->cap) return 0;
    size_t cap = need;
    if (slack) {
        size_t more = b->cap > SIZE_MAX / 2 ? SIZE_MAX : 2 * b->cap;
        if (more < MIN_ALLOC) more = MIN_ALLOC;
        if (cap < more) cap = more;
        if (cap > b->max + 1) cap = b->max + 1;
    }
    char *p = realloc(b->data, cap);
    if (!p) return NS_ERR_NOMEM;
    if (!b->data) p[0] = '\0';
    b->data = p;
    b->cap = cap;
    return 0;
}

/* The invariants every function keeps: content, its NUL and nothing past
 * the allocation, and never more content than the cap. */
static void check(const bytebuf_t *b) {
    assert(b->len <= b->max);
    assert(b->data ? b->len < b->cap && b->data[b->len] == '\0' : b->len == 0 && b->cap == 0);
    (void)b;
}

/* Record the first failure; returns rc. */
static int fail(bytebuf_t *b, int rc) {
    if (!b->err) b->err = rc;
    return rc;
}

int bytebuf_append(bytebuf_t *b, const void *data, size_t n) {
    int rc;
    if (b->err) return b->err;
    if (!fits(b, n)) return fail(b, NS_ERR_TOO_LARGE);
    if ((rc = grow(b, n, 1)) < 0) return fail(b, rc);
    if (n) memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    check(b);
    return 0;
}

int bytebuf_puts(bytebuf_t *b, const char *s) {
    return bytebuf_append(b, s, strlen(s));
}

int bytebuf_putc(bytebuf_t *b, char c) {
    return bytebuf_append(b, &c, 1);
}

int bytebuf_vprintf(bytebuf_t *b, const char *fmt, va_list ap) {
    va_list again;
    int rc;
    if (b->err) return b->err;
    /* First into the room there is (none while nothing is allocated). */
    size_t room = b->data ? b->cap - b->len : 0;
    va_copy(again, ap);
    int n = vsnprintf(room ? b->data + b->len : NULL, room, fmt, ap);
    if (n < 0) {
        rc = NS_ERR_INVALID;
    } else if ((size_t)n < room) {
        b->len += (size_t)n; /* it fitted, NUL included */
        rc = 0;
    } else if (!fits(b, (size_t)n)) {
        rc = NS_ERR_TOO_LARGE;
    } else if ((rc = grow(b, (size_t)n, 1)) == 0) {
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, again);
        b->len += (size_t)n;
    }
    va_end(again);
    if (rc < 0) {
        if (b->data) b->data[b->len] = '\0'; /* a cut first try wrote past len */
        return fail(b, rc);
    }
    check(b);
    return 0;
}

int bytebuf_printf(bytebuf_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = bytebuf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

int bytebuf_reserve(bytebuf_t *b, size_t n) {
    if (b->err) return b->err;
    if (!fits(b, n)) return NS_ERR_TOO_LARGE;
    return grow(b, n, 0);
}

void bytebuf_commit(bytebuf_t *b, size_t n) {
    if (!b->data) return;
    if (n > b->cap - b->len - 1) n = b->cap - b->len - 1; /* never past the room */
    b->len += n;
    b->data[b->len] = '\0';
    check(b);
}

void bytebuf_drop(bytebuf_t *b, size_t n) {
    if (n >= b->len) {
        b->len = 0;
    } else {
        memmove(b->data, b->data + n, b->len - n);
        b->len -= n;
    }
    if (b->data) b->data[b->len] = '\0';
    check(b);
}

void bytebuf_reset(bytebuf_t *b) {
    b->len = 0;
    b->err = 0;
    if (b->data) b->data[0] = '\0';
}

const char *bytebuf_str(const bytebuf_t *b) {
    return b->data ? b->data : "";
}

char *bytebuf_take(bytebuf_t *b, size_t *len) {
    char *out = b->err ? NULL : b->data;
    size_t n = out ? b->len : 0;
    if (b->err) free(b->data);
    if (!b->err && !out && (out = malloc(1))) out[0] = '\0';
    bytebuf_init(b, b->max);
    if (len) *len = n;
    return out;
}

void bytebuf_free(bytebuf_t *b) {
    free(b->data);
    bytebuf_init(b, b->max);
}

void bytebuf_lines_feed(bytebuf_lines_t *l, const char *p, size_t n, bytebuf_line_fn *on_line,
                        void *user) {
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t seg = nl ? (size_t)(nl - p) : n;
        if (!l->discard && bytebuf_append(&l->line, p, seg) < 0) {
            l->overlong++;
            l->discard = 1;
        }
        if (!nl) return;
        if (!l->discard) on_line(user, l->line.data ? l->line.data : "", l->line.len);
        l->discard = 0;
        bytebuf_reset(&l->line);
        p += seg + 1;
        n -= seg + 1;
    }
}

void bytebuf_lines_flush(bytebuf_lines_t *l, bytebuf_line_fn *on_line, void *user) {
    if (!l->discard && l->line.len) on_line(user, l->line.data, l->line.len);
    l->discard = 0;
    bytebuf_reset(&l->line);
}

/* test_bytebuf.c - the capped byte buffer: the cap reached exactly and
 * passed by one byte (each kind of append, and reserve), sizes whose sum
 * wraps around SIZE_MAX, printf growth over many doublings, take and reset,
 * a zero cap, the sticky first failure, and lines split across reads. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/shared/bytebuf.h"
#include "engine/util.h"

/* b holds exactly the string s (its length, its bytes, its NUL). */
static void expect_content(const bytebuf_t *b, const char *s) {
    cr_expect_eq(b->len, strlen(s), "len %zu, expected %zu", b->len, strlen(s));
    cr_expect_str_eq(bytebuf_str(b), s);
    if (b->data) cr_expect_eq(b->data[b->len], '\0');
}

Test(bytebuf, cap_reached_exactly_then_one_byte_over) {
    bytebuf_t b;
    bytebuf_init(&b, 10);
    cr_expect_eq(bytebuf_append(&b, "abcdefghi", 9), 0);
    cr_expect_eq(bytebuf_putc(&b, 'j'), 0); /* 10 bytes: the cap, reached */
    expect_content(&b, "abcdefghij");
    cr_expect_leq(b.cap, 11, "memory past the cap: %zu bytes", b.cap);
    cr_expect_eq(bytebuf_putc(&b, 'k'), NS_ERR_TOO_LARGE);
    expect_content(&b, "abcdefghij");
    cr_expect_eq(b.err, NS_ERR_TOO_LARGE);
    bytebuf_free(&b);
    cr_expect_null(b.data);
    cr_expect_eq(b.max, 10, "free keeps the cap");

    /* One append that passes the cap by one byte: nothing of it is kept. */
    bytebuf_init(&b, 10);
    cr_expect_eq(bytebuf_puts(&b, "abc"), 0);
    cr_expect_eq(bytebuf_append(&b, "12345678", 8), NS_ERR_TOO_LARGE);
    expect_content(&b, "abc");
    bytebuf_reset(&b);
    cr_expect_eq(bytebuf_append(&b, "0123456789", 10), 0);
    expect_content(&b, "0123456789");
    bytebuf_free(&b);
}

Test(bytebuf, printf_at_the_cap_and_one_over) {
    bytebuf_t b;
    bytebuf_init(&b, 10);
    cr_expect_eq(bytebuf_puts(&b, "abc"), 0);
    /* 8 more bytes: the first try is cut inside the room there is and wrote
     * over the NUL; the content must read as before. */
    cr_expect_eq(bytebuf_printf(&b, "%s-%d", "x", 123456), NS_ERR_TOO_LARGE);
    expect_content(&b, "abc");
    bytebuf_reset(&b);
    cr_expect_eq(bytebuf_puts(&b, "abc"), 0);
    cr_expect_eq(bytebuf_printf(&b, "%s-%d", "x", 12345), 0); /* 7 more: 10 */
    expect_content(&b, "abcx-12345");
    bytebuf_free(&b);
}

Test(bytebuf, reserve_respects_the_cap_and_writes_in_place) {
    bytebuf_t b;
    bytebuf_init(&b, 8);
    cr_expect_eq(bytebuf_reserve(&b, 9), NS_ERR_TOO_LARGE);
    cr_expect_eq(b.err, 0, "a refused reserve is not a failed append");
    cr_expect_eq(bytebuf_reserve(&b, 5), 0);
    cr_expect_eq(b.cap, 6, "reserve allocates exactly: %zu", b.cap);
    memcpy(b.data + b.len, "hello", 5);
    bytebuf_commit(&b, 5);
    expect_content(&b, "hello");
    cr_expect_eq(bytebuf_reserve(&b, 3), 0);
    cr_expect_eq(bytebuf_reserve(&b, 4), NS_ERR_TOO_LARGE);
    memcpy(b.data + b.len, "xyz", 3);
    bytebuf_commit(&b, 100); /* more than reserved: cut to the room */
    cr_expect_eq(b.len, b.cap - 1);
    cr_expect_eq(b.data[b.len], '\0');
    bytebuf_drop(&b, 2);
    cr_expect_eq(b.len, 6);
    cr_expect_eq(memcmp(b.data, "lloxyz", 6), 0);
    bytebuf_drop(&b, 100);
    expect_content(&b, "");
    bytebuf_free(&b);
}

/* Sizes that wrap len + n (+ 1 for the NUL) past SIZE_MAX must be refused
 * before anything is allocated or copied. */
Test(bytebuf, sizes_near_size_max_do_not_wrap) {
    bytebuf_t b;
    bytebuf_init(&b, SIZE_MAX);
    cr_expect_eq(b.max, BYTEBUF_UNLIMITED);
    cr_expect_eq(bytebuf_puts(&b, "abc"), 0);
    const size_t sizes[] = {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 2, SIZE_MAX - 3};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        bytebuf_reset(&b);
        cr_expect_eq(bytebuf_puts(&b, "abc"), 0);
        size_t cap = b.cap;
        cr_expect_eq(bytebuf_reserve(&b, sizes[i]), NS_ERR_TOO_LARGE, "reserve SIZE_MAX - %zu",
                     SIZE_MAX - sizes[i]);
        /* data is not read for a refused size */
        cr_expect_eq(bytebuf_append(&b, "", sizes[i]), NS_ERR_TOO_LARGE, "append SIZE_MAX - %zu",
                     SIZE_MAX - sizes[i]);
        expect_content(&b, "abc");
        cr_expect_eq(b.cap, cap);
    }
    bytebuf_free(&b);

    /* The same at a cap near SIZE_MAX that is not the largest. */
    bytebuf_init(&b, SIZE_MAX - 10);
    cr_expect_eq(bytebuf_puts(&b, "abcdefghijklmnop"), 0);
    cr_expect_eq(bytebuf_append(&b, "", SIZE_MAX - 20), NS_ERR_TOO_LARGE);
    expect_content(&b, "abcdefghijklmnop");
    bytebuf_free(&b);
}

/* Many small printfs and one large one, against the same text built with
 * snprintf; the memory grows by doubling, not by every append. */
Test(bytebuf, printf_grows_across_many_doublings) {
    bytebuf_t b;
    bytebuf_init(&b, BYTEBUF_UNLIMITED);
    size_t n = 0, changes = 0, last_cap = 0;
    char *want = malloc(1 << 20);
    cr_assert_not_null(want);
    for (int i = 0; i < 50000; i++) {
        cr_assert_eq(bytebuf_printf(&b, "%d,", i), 0);
        n += (size_t)snprintf(want + n, (1 << 20) - n, "%d,", i);
        if (b.cap != last_cap) changes++, last_cap = b.cap;
    }
    cr_expect_eq(b.len, n);
    cr_expect_eq(memcmp(b.data, want, n), 0);
    cr_expect_eq(b.data[b.len], '\0');
    cr_expect_leq(changes, 20, "%zu reallocations for %zu bytes", changes, n);

    /* One printf of 300 kB on top: many doublings in one step. */
    memset(want, 'x', 300000);
    want[300000] = '\0';
    size_t before = b.len;
    cr_expect_eq(bytebuf_printf(&b, "[%s]", want), 0);
    cr_expect_eq(b.len, before + 300002);
    cr_expect_eq(b.data[before], '[');
    cr_expect_eq(b.data[b.len - 1], ']');
    cr_expect_eq(b.data[b.len], '\0');
    free(want);
    bytebuf_free(&b);
}

Test(bytebuf, take_hands_over_and_reset_keeps_memory) {
    bytebuf_t b;
    size_t len = 99;
    bytebuf_init(&b, 100);
    char *empty = bytebuf_take(&b, &len);
    cr_assert_not_null(empty, "an empty buffer gives \"\"");
    cr_expect_str_eq(empty, "");
    cr_expect_eq(len, 0);
    free(empty);

    cr_expect_eq(bytebuf_printf(&b, "%s %d", "seven", 7), 0);
    char *text = bytebuf_take(&b, &len);
    cr_assert_not_null(text);
    cr_expect_str_eq(text, "seven 7");
    cr_expect_eq(len, 7);
    free(text);
    cr_expect_null(b.data);
    cr_expect_eq(b.len, 0);
    cr_expect_eq(b.max, 100, "take keeps the cap");

    cr_expect_eq(bytebuf_puts(&b, "again"), 0);
    char *p = b.data;
    size_t cap = b.cap;
    bytebuf_reset(&b);
    expect_content(&b, "");
    cr_expect_eq(b.data, p, "reset keeps the memory");
    cr_expect_eq(b.cap, cap);
    cr_expect_eq(bytebuf_puts(&b, "more"), 0);
    expect_content(&b, "more");
    bytebuf_free(&b);
}

/* The first failure sticks: later appends fail with it and take gives NULL;
 * reset clears it. */
Test(bytebuf, a_failure_sticks_until_reset) {
    bytebuf_t b;
    bytebuf_init(&b, 4);
    cr_expect_eq(bytebuf_puts(&b, "abcdef"), NS_ERR_TOO_LARGE);
    cr_expect_eq(bytebuf_puts(&b, "ab"), NS_ERR_TOO_LARGE, "fits, but an append failed before");
    cr_expect_eq(bytebuf_printf(&b, "%d", 1), NS_ERR_TOO_LARGE);
    expect_content(&b, "");
    size_t len = 99;
    cr_expect_null(bytebuf_take(&b, &len));
    cr_expect_eq(len, 0);
    cr_expect_eq(b.err, 0, "take leaves a fresh buffer");
    cr_expect_eq(bytebuf_puts(&b, "ab"), 0);
    cr_expect_eq(bytebuf_puts(&b, "cde"), NS_ERR_TOO_LARGE);
    bytebuf_reset(&b);
    cr_expect_eq(bytebuf_puts(&b, "abcd"), 0);
    expect_content(&b, "abcd");
    bytebuf_free(&b);
}

/* A cap of 0 holds only the empty text; a zeroed bytebuf_t is such a buffer. */
Test(bytebuf, zero_cap) {
    bytebuf_t z = {0}, b;
    bytebuf_init(&b, 0);
    bytebuf_t *bufs[] = {&z, &b};
    for (int i = 0; i < 2; i++) {
        bytebuf_t *p = bufs[i];
        cr_expect_eq(bytebuf_append(p, NULL, 0), 0);
        cr_expect_eq(bytebuf_printf(p, "%s", ""), 0);
        cr_expect_eq(bytebuf_reserve(p, 0), 0);
        cr_expect_eq(bytebuf_reserve(p, 1), NS_ERR_TOO_LARGE);
        expect_content(p, "");
        cr_expect_eq(bytebuf_putc(p, 'x'), NS_ERR_TOO_LARGE);
        bytebuf_reset(p);
        cr_expect_eq(bytebuf_printf(p, "x"), NS_ERR_TOO_LARGE);
        bytebuf_reset(p);
        cr_expect_eq(bytebuf_append(p, "x", 1), NS_ERR_TOO_LARGE);
        expect_content(p, "");
        cr_expect_leq(p->cap, 1);
        bytebuf_reset(p);
        char *s = bytebuf_take(p, NULL);
        cr_assert_not_null(s);
        cr_expect_str_eq(s, "");
        free(s);
        bytebuf_free(p);
    }
}

/* Lines received by collect_line, joined with '|'. */
static void collect_line(void *user, const char *line, size_t len) {
    bytebuf_t *seen = user;
    bytebuf_printf(seen, "%s%.*s", seen->len ? "|" : "", (int)len, line);
}

Test(bytebuf, lines_across_reads_overlong_skipped_last_line_flushed) {
    bytebuf_lines_t l = {0};
    bytebuf_t seen;
    bytebuf_init(&l.line, 5);
    bytebuf_init(&seen, BYTEBUF_UNLIMITED);
    /* "ab\n" split over two reads; an empty line; "123456" is one byte past
     * the cap of 5 and arrives in two pieces; "12345" fits exactly; "xy" has
     * no newline until the flush */
    const char *reads[] = {"a", "b\n\n123", "456\n12345\nxy"};
    for (size_t i = 0; i < 3; i++)
        bytebuf_lines_feed(&l, reads[i], strlen(reads[i]), collect_line, &seen);
    expect_content(&seen, "ab||12345");
    cr_expect_eq(l.overlong, 1);
    bytebuf_lines_flush(&l, collect_line, &seen);
    expect_content(&seen, "ab||12345|xy");
    bytebuf_lines_flush(&l, collect_line, &seen); /* nothing left */
    expect_content(&seen, "ab||12345|xy");
    bytebuf_free(&l.line);
    bytebuf_free(&seen);
}

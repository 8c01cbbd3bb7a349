/* fmt.h - text and JSON for the client's terminal output: a fixed line
 * that appends with printf, text cleaned of control characters (a spec name
 * must not move the cursor), numbers and times for people, and JSON lookups
 * by dotted path. */
#ifndef NIGHTSHIFT_CLIENT_FMT_H
#define NIGHTSHIFT_CLIENT_FMT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>

#define NAME_WIDTH 32 /* characters of a name shown in tables and progress lines */

/* A fixed line that appends with printf and truncates silently. */
typedef struct {
    char s[1024];
    size_t n;
} line_t;

/* printf onto the end of l. */
void line_add(line_t *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Copy s into dst (NUL-terminated) with C0/C1 control characters and DEL
 * replaced by '?', keeping at most max_chars characters (UTF-8 sequences are
 * kept whole); "..." marks a cut. Returns the number of characters written. */
size_t fmt_clean(char *dst, size_t dstlen, const char *s, size_t max_chars);

/* s, cleaned as fmt_clean and cut at max_chars, onto the end of l. */
void line_add_clean(line_t *l, const char *s, size_t max_chars);

/* s on f with control characters replaced (fmt_clean). */
void fmt_put_clean(FILE *f, const char *s);

/* 1234567.8 -> "1,234,568" (rounded), written into buf (32 bytes is enough),
 * which is returned. */
const char *fmt_commas(double v, char *buf, size_t len);

/* Seconds as "44s", "2m44s" or "1h02m", written into buf, which is returned. */
const char *fmt_duration(double s, char *buf, size_t len);

/* "2026-11-29T19:37:00.123Z" -> seconds since the epoch, NAN if unparsable. */
double fmt_iso_seconds(const char *iso);

/* An API time shown in local time, "2026-11-29 20:37:00", written into buf;
 * returns buf, or the static "-" when iso is NULL. */
const char *fmt_local_time(const char *iso, char *buf, size_t len);

/* o["a"]["b"] for path "a.b"; NULL when any step is missing. Borrowed. */
const cJSON *jget(const cJSON *o, const char *path);

/* The number at path in o, or dflt when missing or not a number. */
double jnum(const cJSON *o, const char *path, double dflt);

/* The string at path, borrowed from o; NULL when missing or not a string. */
const char *jstr(const cJSON *o, const char *path);

/* A scalar (or any value) as compact JSON text, or a string's bare text, into
 * buf. Returns 0, or -1 when the value is missing or null. */
int jtext(const cJSON *v, char *buf, size_t len);

/* Print v as JSON indented by two spaces per level; arrays of scalars stay on
 * one line ("adam_betas": [0.8, 0.95]). Returns 0, or -1 when out of memory. */
int fmt_json(FILE *f, const cJSON *v, int indent);

/* Append "?key=value" or "&key=value" to the path in q, value percent-encoded. */
void line_add_query(line_t *q, const char *key, const char *value);

/* The scope of a scoped query (?dataset=D&budget=B&eval_tokens=N), each only
 * when given. */
void line_add_scope(line_t *q, const char *dataset, const char *budget, const char *eval);

/* s (chars characters wide) on stdout, padded with spaces to width. */
void fmt_padded(const char *s, size_t chars, size_t width);

/* "38.6M", "412K", "900". */
const char *fmt_short_count(double v, char *buf, size_t len);

#endif

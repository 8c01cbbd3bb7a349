/* fmt.c - text and JSON for the client's output (see fmt.h). */
#include "daemon/client/fmt.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "daemon/shared/jsonpath.h"
#include "engine/util.h"

void line_add(line_t *l, const char *fmt, ...) {
    if (l->n + 1 >= sizeof l->s) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(l->s + l->n, sizeof l->s - l->n, fmt, ap);
    va_end(ap);
    if (k > 0) l->n = l->n + (size_t)k < sizeof l->s ? l->n + (size_t)k : sizeof l->s - 1;
}

size_t fmt_clean(char *dst, size_t dstlen, const char *s, size_t max_chars) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = 0, chars = 0;
    if (!dstlen) return 0;
    while (*p && chars < max_chars) {
        size_t len = 1;
        if (*p >= 0xc0) /* a UTF-8 lead byte: take its continuation bytes with it */
            while ((p[len] & 0xc0) == 0x80 && len < 4) len++;
        if (n + len + 4 > dstlen) break;
        if (util_is_control(p, len, UTIL_CTRL_C1)) {
            dst[n++] = '?';
        } else {
            memcpy(dst + n, p, len);
            n += len;
        }
        p += len;
        chars++;
    }
    if (*p && n + 4 <= dstlen) {
        memcpy(dst + n, "...", 3);
        n += 3;
        chars += 3;
    }
    dst[n] = '\0';
    return chars;
}

void line_add_clean(line_t *l, const char *s, size_t max_chars) {
    char buf[512];
    fmt_clean(buf, sizeof buf, s, max_chars);
    line_add(l, "%s", buf);
}

void fmt_put_clean(FILE *f, const char *s) {
    char buf[1024];
    fmt_clean(buf, sizeof buf, s, sizeof buf);
    fputs(buf, f);
}

const char *fmt_commas(double v, char *buf, size_t len) {
    char digits[32];
    if (!isfinite(v) || fabs(v) >= 1e18) {
        snprintf(buf, len, "%g", v);
        return buf;
    }
    long long x = llround(v);
    snprintf(digits, sizeof digits, "%lld", x < 0 ? -x : x);
    size_t nd = strlen(digits), o = 0;
    if (x < 0 && o + 1 < len) buf[o++] = '-';
    for (size_t i = 0; i < nd && o + 1 < len; i++) {
        if (i && (nd - i) % 3 == 0 && o + 2 < len) buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

const char *fmt_duration(double s, char *buf, size_t len) {
    if (!isfinite(s) || s < 0) s = 0;
    long long t = llround(s);
    if (t < 60)
        snprintf(buf, len, "%llds", t);
    else if (t < 3600)
        snprintf(buf, len, "%lldm%02llds", t / 60, t % 60);
    else
        snprintf(buf, len, "%lldh%02lldm", t / 3600, t / 60 % 60);
    return buf;
}

double fmt_iso_seconds(const char *iso) {
    struct tm tm = {0};
    double sec = 0;
    if (!iso || sscanf(iso, "%4d-%2d-%2dT%2d:%2d:%lf", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                       &tm.tm_hour, &tm.tm_min, &sec) != 6)
        return NAN;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    tm.tm_sec = (int)sec;
    time_t t = timegm(&tm);
    return t == (time_t)-1 ? NAN : (double)t + (sec - (int)sec);
}

const char *fmt_local_time(const char *iso, char *buf, size_t len) {
    double t = fmt_iso_seconds(iso);
    struct tm lt;
    if (!iso) return "-";
    time_t tt = isfinite(t) ? (time_t)t : 0;
    if (isfinite(t) && localtime_r(&tt, &lt) && strftime(buf, len, "%Y-%m-%d %H:%M:%S", &lt))
        return buf;
    fmt_clean(buf, len, iso, len);
    return buf;
}

/* ------------------------------------------------------------ JSON helpers */

const cJSON *jget(const cJSON *o, const char *path) {
    return jsonpath_get(o, path);
}

double jnum(const cJSON *o, const char *path, double dflt) {
    return jsonpath_num(o, path, dflt);
}

const char *jstr(const cJSON *o, const char *path) {
    return jsonpath_str(o, path);
}

int jtext(const cJSON *v, char *buf, size_t len) {
    if (!v || cJSON_IsNull(v)) return -1;
    if (cJSON_IsString(v)) {
        fmt_clean(buf, len, v->valuestring, len);
        return 0;
    }
    char *t = util_json_print(v, 0);
    if (!t) return -1;
    fmt_clean(buf, len, t, len);
    cJSON_free(t);
    return 0;
}

int fmt_json(FILE *f, const cJSON *v, int indent) {
    int obj = cJSON_IsObject(v);
    if (!obj && !cJSON_IsArray(v)) {
        char *t = util_json_print(v, 0);
        if (!t) return -1;
        fputs(t, f);
        cJSON_free(t);
        return 0;
    }
    if (!v->child) {
        fputs(obj ? "{}" : "[]", f);
        return 0;
    }
    int flat = !obj;
    for (const cJSON *c = v->child; c; c = c->next)
        if (cJSON_IsObject(c) || cJSON_IsArray(c)) flat = 0;
    fputs(obj ? "{" : "[", f);
    for (const cJSON *c = v->child; c; c = c->next) {
        if (flat) {
            if (c != v->child) fputs(", ", f);
        } else {
            fprintf(f, "\n%*s", indent + 2, "");
        }
        if (obj) {
            cJSON *key = cJSON_CreateStringReference(c->string);
            char *t = key ? cJSON_PrintUnformatted(key) : NULL;
            cJSON_Delete(key);
            if (!t) return -1;
            fprintf(f, "%s: ", t);
            cJSON_free(t);
        }
        if (fmt_json(f, c, indent + 2) < 0) return -1;
        if (!flat && c->next) fputc(',', f);
    }
    if (!flat) fprintf(f, "\n%*s", indent, "");
    fputs(obj ? "}" : "]", f);
    return 0;
}

void line_add_query(line_t *q, const char *key, const char *value) {
    line_add(q, "%c%s=", strchr(q->s, '?') ? '&' : '?', key);
    for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr("-._~", *p))
            line_add(q, "%c", *p);
        else
            line_add(q, "%%%02X", *p);
    }
}

void line_add_scope(line_t *q, const char *dataset, const char *budget, const char *eval) {
    if (dataset) line_add_query(q, "dataset", dataset);
    if (budget) line_add_query(q, "budget", budget);
    if (eval) line_add_query(q, "eval_tokens", eval);
}

void fmt_padded(const char *s, size_t chars, size_t width) {
    fputs(s, stdout);
    for (size_t i = chars; i < width; i++) fputc(' ', stdout);
}

const char *fmt_short_count(double v, char *buf, size_t len) {
    if (v >= 1e9)
        snprintf(buf, len, "%.1fB", v / 1e9);
    else if (v >= 1e6)
        snprintf(buf, len, "%.1fM", v / 1e6);
    else if (v >= 1e4)
        snprintf(buf, len, "%.0fK", v / 1e3);
    else
        snprintf(buf, len, "%.0f", v);
    return buf;
}

/* util.c - file and clock helpers (see util.h). */
#include "engine/util.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *ns_strerror(int code) {
    switch ((ns_err_t)code) {
    case NS_OK:
        return "ok";
    case NS_ERR_INVALID:
        return "invalid";
    case NS_ERR_NOT_FOUND:
        return "not found";
    case NS_ERR_NOMEM:
        return "out of memory";
    case NS_ERR_IO:
        return "i/o error";
    case NS_ERR_CONFLICT:
        return "conflict";
    case NS_ERR_DOES_NOT_FIT:
        return "does not fit";
    case NS_ERR_TOO_LARGE:
        return "too large";
    }
    return "unknown error";
}

double util_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double util_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double util_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void *util_calloc_huge(size_t bytes) {
    if (bytes < UTIL_HUGE_MIN) return calloc(1, bytes ? bytes : 1);
    /* whole, aligned huge pages (malloc's own mmap would start 16 bytes
     * past a page and leave the ends in small pages) */
    const size_t size = (bytes + UTIL_HUGE_MIN - 1) / UTIL_HUGE_MIN * UTIL_HUGE_MIN;
    void *p = aligned_alloc(UTIL_HUGE_MIN, size);
    if (!p) return NULL;
    madvise(p, size, MADV_HUGEPAGE); /* a hint: where refused, small pages serve */
    memset(p, 0, size);              /* the pages are faulted in here, not in a step */
    return p;
}

int util_grow(void *p, size_t *cap, size_t need, size_t sz) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*(void **)p, c * sz);
    if (!q) return -1;
    *(void **)p = q;
    *cap = c;
    return 0;
}

int util_errorf(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return NS_ERR_INVALID;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return NS_ERR_INVALID;
}

int util_open_regular(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) < 0) {
        util_errorf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        util_errorf(err, errlen, "%s: %s", path, "not a regular file");
        return -1;
    }
    /* Non-blocking, in case a special file took its place since the stat: the
     * open returns at once and the fstat refuses it. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        util_errorf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        util_errorf(err, errlen, "%s: %s", path, "not a regular file");
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, 0); /* back to blocking reads, which a regular file never needs */
    return fd;
}

char *util_read_file(const char *path, size_t max_bytes, size_t *len, char *err, size_t errlen) {
    char *buf = NULL;
    int fd = util_open_regular(path, err, errlen);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        util_errorf(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) < 0) {
        util_errorf(err, errlen, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if ((size_t)st.st_size > max_bytes) {
        util_errorf(err, errlen, "%s: %s", path, "file too large");
        goto fail;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        util_errorf(err, errlen, "%s: %s", path, "out of memory");
        goto fail;
    }
    size_t n = fread(buf, 1, (size_t)st.st_size, f);
    if (n != (size_t)st.st_size || ferror(f)) {
        util_errorf(err, errlen, "%s: %s", path, "read error");
        goto fail;
    }
    buf[n] = '\0';
    if (len) *len = n;
    fclose(f);
    return buf;
fail:
    free(buf);
    fclose(f);
    return NULL;
}

char *util_read_secret(const char *path, size_t max_bytes, size_t *len, char *err, size_t errlen) {
    size_t n;
    char *text = util_read_file(path, max_bytes, &n, err, errlen);
    if (!text) return NULL;
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' '))
        text[--n] = '\0';
    *len = n;
    return text;
}

int util_write_file_atomic(const char *path, const void *data, size_t len, char *err,
                           size_t errlen) {
    char tmp[4096], dir[4096];
    int fd = -1;
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp) {
        util_errorf(err, errlen, "%s: %s", path, "path too long");
        return -1;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) goto fail;
    for (size_t off = 0; off < len;) {
        ssize_t w = write(fd, (const char *)data + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) goto fail;
        off += (size_t)w;
    }
    if (fsync(fd) < 0) goto fail;
    if (close(fd) < 0) {
        fd = -1;
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) < 0) goto fail;
    /* Make the rename itself durable. */
    snprintf(dir, sizeof dir, "%s", path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
fail:
    util_errorf(err, errlen, "%s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    unlink(tmp);
    return -1;
}

int util_mkdirs(const char *path, char *err, size_t errlen) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        util_errorf(err, errlen, "%s: %s", path, "path too long");
        return -1;
    }
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0755) < 0 && errno != EEXIST) {
                util_errorf(err, errlen, "%s: %s", buf, strerror(errno));
                return -1;
            }
            *p = c;
            if (c == '\0') break;
        }
    }
    return 0;
}

double util_peak_rss_mb(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) < 0) return 0.0;
    return ru.ru_maxrss / 1024.0; /* Linux reports KiB */
}

int util_is_control(const unsigned char *p, size_t len, unsigned flags) {
    if ((flags & UTIL_CTRL_KEEP_WS) && len == 1 && (*p == '\t' || *p == '\n' || *p == '\r'))
        return 0;
    if (*p < 0x20 || *p == 0x7f) return 1;
    return (flags & UTIL_CTRL_C1) && len == 2 && p[0] == 0xc2 && p[1] >= 0x80 && p[1] < 0xa0;
}

size_t util_clean_text(char *dst, const char *src, size_t len, unsigned flags) {
    const unsigned char *p = (const unsigned char *)src;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t n =
            (flags & UTIL_CTRL_C1) && i + 1 < len && p[i] == 0xc2 && (p[i + 1] & 0xc0) == 0x80 ? 2
                                                                                               : 1;
        if (util_is_control(p + i, n, flags)) {
            dst[o++] = '?';
        } else {
            memmove(dst + o, p + i, n);
            o += n;
        }
        i += n;
    }
    dst[o] = '\0';
    return o;
}

size_t util_utf8_len(const unsigned char *p, size_t len) {
    if (len == 0) return 0;
    if (p[0] < 0x80) return 1;
    size_t n = p[0] >= 0xc2 && p[0] <= 0xdf   ? 2
               : p[0] >= 0xe0 && p[0] <= 0xef ? 3
               : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4
                                              : 0;
    if (n == 0 || n > len) return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;
    /* the second byte's range rules out overlongs, surrogates and > U+10FFFF */
    if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] > 0x9f) ||
        (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] > 0x8f))
        return 0;
    return n;
}

size_t util_utf8_scrub(char *s) {
    unsigned char *p = (unsigned char *)s;
    size_t len = strlen(s), replaced = 0;
    for (size_t i = 0; i < len;) {
        size_t n = util_utf8_len(p + i, len - i);
        if (n == 0) {
            p[i] = '?';
            replaced++;
            n = 1;
        }
        i += n;
    }
    return replaced;
}

/* The integral numbers in item and below it that cJSON would not print
 * exactly (see util_json_print) become raw numbers, written out here; each
 * is listed in *nodes (*n of them) to be put back. Returns 0, or -1 when out
 * of memory. */
static int exact_integers(cJSON *item, cJSON ***nodes, size_t *n, size_t *cap) {
    for (cJSON *c = item->child; c; c = c->next)
        if (exact_integers(c, nodes, n, cap) < 0) return -1;
    if (!cJSON_IsNumber(item)) return 0;
    double d = item->valuedouble;
    if (d != floor(d) || fabs(d) > 9007199254740992.0 || d == (double)item->valueint) return 0;
    char buf[32];
    snprintf(buf, sizeof buf, "%.0f", d);
    if (util_grow(nodes, cap, *n + 1, sizeof **nodes) < 0 || !(item->valuestring = strdup(buf)))
        return -1;
    item->type = cJSON_Raw;
    (*nodes)[(*n)++] = item;
    return 0;
}

char *util_json_print(const cJSON *item, int formatted) {
    cJSON **nodes = NULL;
    size_t n = 0, cap = 0;
    char *text = NULL;
    /* The tree is changed for the print only and restored below. */
    if (exact_integers((cJSON *)item, &nodes, &n, &cap) == 0)
        text = formatted ? cJSON_Print(item) : cJSON_PrintUnformatted(item);
    for (size_t i = 0; i < n; i++) {
        free(nodes[i]->valuestring);
        nodes[i]->valuestring = NULL;
        nodes[i]->type = cJSON_Number;
    }
    free(nodes);
    if (text) util_utf8_scrub(text); /* cJSON copies a string's bytes as they are */
    return text;
}

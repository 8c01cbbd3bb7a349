/* log.c - see log.h. */
#include "daemon/shared/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "engine/util.h"

log_level log_threshold = LOG_INFO;

void log_write(log_level level, const char *fmt, ...) {
    static const char *const names[] = {"debug", "info ", "warn ", "error"};
    struct timeval tv;
    struct tm tm;
    char stamp[32], line[2048];
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* Names and reasons come from specs and workers: no control characters
     * may forge a line or reach a terminal that tails the log. */
    util_clean_text(line, line, strlen(line), 0);
    /* One fprintf per line keeps lines whole when several processes share stderr. */
    fprintf(stderr, "%s.%03dZ %s %s\n", stamp, (int)(tv.tv_usec / 1000), names[level], line);
}

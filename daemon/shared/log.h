/* log.h - the daemon's event log: one line per event on stderr,
 * "2026-11-29T19:37:00.123Z info  experiment 5 started (slot 0, pid 1234)".
 * Level-gated: lines below the configured level cost one comparison. */
#ifndef NIGHTSHIFT_LOG_H
#define NIGHTSHIFT_LOG_H

typedef enum { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR } log_level;

extern log_level log_threshold;

void log_write(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) (LOG_DEBUG >= log_threshold ? log_write(LOG_DEBUG, __VA_ARGS__) : (void)0)
#define log_info(...)  (LOG_INFO >= log_threshold ? log_write(LOG_INFO, __VA_ARGS__) : (void)0)
#define log_warn(...)  (LOG_WARN >= log_threshold ? log_write(LOG_WARN, __VA_ARGS__) : (void)0)
#define log_error(...) log_write(LOG_ERROR, __VA_ARGS__)

#endif

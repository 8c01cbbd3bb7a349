/* worker.c - one experiment's worker process, supervised on the libuv loop.
 *
 * Owns everything between uv_spawn and the exit callback: the exec shim's
 * argv and environment, the three pipes (stdout and stderr appended to the
 * log file, fd 3 split into JSON progress lines), the deadline and kill
 * timers, and the classification of the ending described in worker.h. Also
 * the shim itself, `nightshift exec-limited`, which applies a slot's limits
 * to its own process and then execs the real command.
 *
 * Lifetime: worker_start allocates the worker_t and the loop owns it. The
 * exit is reported once the process has been reaped AND every pipe has hit
 * EOF, so no output is lost; if a stray grandchild still holds a pipe
 * DRAIN_MS after the exit, the pipes are closed without it. When the exit is
 * reported whatever is left in the worker's process group is SIGKILLed, the
 * exit callback runs, the remaining handles are closed, and the last close
 * callback frees the worker.
 *
 * Log writes: plain write() on the O_APPEND log file, from the loop thread.
 * A write to a regular local file lands in the page cache without waiting for
 * the disk, each write is at most one pipe read (64 KiB), and staying
 * synchronous keeps the bytes in the order they were read with no queue of
 * thread-pool requests that could outlive the pipes. Logging is a debugging
 * aid: a failing write stops the logging, never the worker. */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/exec/worker.h"

#include "daemon/shared/bytebuf.h"
#include "engine/floor.h"
#include "engine/util.h"

extern char **environ;

#define READ_CHUNK       (64 * 1024) /* bytes per pipe read */
#define ERR_TAIL         4096        /* bytes of stderr kept for the failure reason */
#define REASON_STDERR    300         /* stderr characters quoted in a reason */
#define DRAIN_MS         1000        /* wait for EOF after the exit, in ms */
#define DEFAULT_GRACE_S  5.0
#define DEFAULT_MAX_LOG  ((size_t)64 << 20)
#define DEFAULT_MAX_LINE ((size_t)64 << 10)
#define OOM_COUNTER      "/proc/vmstat" /* the kernel's "oom_kill N" line */

enum { PIPE_STDOUT, PIPE_STDERR, PIPE_PROGRESS, N_PIPES };

struct worker {
    uv_loop_t *loop;
    executor_callbacks_t cb;

    uv_process_t proc;
    uv_pipe_t pipes[N_PIPES];  /* child's fds 1, 2, 3 */
    uv_timer_t deadline_timer; /* hard deadline, from spawn */
    uv_timer_t kill_timer;     /* SIGTERM -> SIGKILL after the grace */
    uv_timer_t drain_timer;    /* exit -> stop waiting for EOF */
    int open_handles;          /* initialised handles whose close callback has not run */
    int pipes_open;            /* pipes not yet closed */

    int pid;
    int exited, reported;
    int64_t exit_status;
    int term_signal;
    int stop_status; /* -1, or the status a deadline or worker_stop imposed */
    int sigterm_sent, sigkill_sent;
    uint64_t t_spawn, t_exit; /* uv_hrtime, ns */

    double deadline_s, grace_s;
    int memory_mb;
    char *oom_counter;                         /* the file with "oom_kill N", owned */
    long long oom_kills_spawn, oom_kills_exit; /* its N at spawn and exit; -1 unknown */

    int log_fd; /* -1 when not logging */
    size_t log_bytes, max_log_bytes;
    int log_capped; /* the cap was reached and noted in the log */

    char err_tail[ERR_TAIL]; /* the last err_len bytes of stderr */
    size_t err_len;

    bytebuf_lines_t lines;  /* progress lines, each at most max_line_bytes */
    uint64_t garbage_lines; /* lines that are not one JSON object */
    cJSON *result;          /* the last {"event":"result"} object, owned */

    char rbuf[N_PIPES][READ_CHUNK]; /* one read buffer per pipe */
};

/* ------------------------------------------------------------ handle life */

static void maybe_report(worker_t *w);

static void close_cb(uv_handle_t *h) {
    worker_t *w = h->data;
    assert(w->open_handles > 0);
    w->open_handles--;
    if (w->open_handles == 0 && w->reported) {
        free(w->oom_counter);
        bytebuf_free(&w->lines.line);
        cJSON_Delete(w->result);
        free(w);
    }
}

static void close_handle(worker_t *w, uv_handle_t *h) {
    if (!uv_is_closing(h)) uv_close(h, close_cb);
}

/* Signal the worker's process group. Before the shim's setpgid the group does
 * not exist yet; then the shim itself is signalled (it has not exec'd). */
static void signal_group(worker_t *w, int sig) {
    if (w->pid <= 0) return; /* never kill(0) or kill(-0): that is our own group */
    if (kill(-w->pid, sig) < 0 && errno == ESRCH && !w->exited) kill(w->pid, sig);
}

/* ---------------------------------------------------------------- logging */

static void log_write(worker_t *w, const char *p, size_t n) {
    while (n > 0 && w->log_fd >= 0) {
        ssize_t k = write(w->log_fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            close(w->log_fd); /* disk full or worse: stop logging, keep supervising */
            w->log_fd = -1;
            return;
        }
        p += k;
        n -= (size_t)k;
    }
}

/* Append to the log up to max_log_bytes; past the cap, note it once. */
static void log_append(worker_t *w, const char *p, size_t n) {
    if (w->log_fd < 0 || w->log_capped) return;
    size_t room = w->max_log_bytes - w->log_bytes, m = n < room ? n : room;
    log_write(w, p, m);
    w->log_bytes += m;
    assert(w->log_bytes <= w->max_log_bytes);
    if (m < n) {
        char note[160];
        int k = snprintf(note, sizeof note,
                         "\n[nightshift: log capped at %zu bytes; further output discarded]\n",
                         w->max_log_bytes);
        log_write(w, note, (size_t)k);
        w->log_capped = 1;
    }
}

static void tail_append(worker_t *w, const char *p, size_t n) {
    if (n >= ERR_TAIL) {
        memcpy(w->err_tail, p + n - ERR_TAIL, ERR_TAIL);
        w->err_len = ERR_TAIL;
        return;
    }
    if (w->err_len + n > ERR_TAIL) {
        size_t drop = w->err_len + n - ERR_TAIL;
        memmove(w->err_tail, w->err_tail + drop, w->err_len - drop);
        w->err_len -= drop;
    }
    memcpy(w->err_tail + w->err_len, p, n);
    w->err_len += n;
    assert(w->err_len <= ERR_TAIL);
}

/* ------------------------------------------------------- progress lines */

/* One complete line from fd 3 (without its newline). */
static void progress_line(void *user, const char *p, size_t n) {
    worker_t *w = user;
    if (executor_progress_line(p, n, &w->cb, &w->result) < 0) w->garbage_lines++;
}

/* ------------------------------------------------------------------ pipes */

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    worker_t *w = h->data;
    size_t i = (size_t)((uv_pipe_t *)h - w->pipes);
    buf->base = w->rbuf[i];
    buf->len = READ_CHUNK;
}

static void close_pipe(worker_t *w, int i) {
    uv_handle_t *h = (uv_handle_t *)&w->pipes[i];
    if (uv_is_closing(h)) return;
    if (i == PIPE_PROGRESS) bytebuf_lines_flush(&w->lines, progress_line, w);
    uv_close(h, close_cb);
    w->pipes_open--;
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
    worker_t *w = s->data;
    int i = (int)((uv_pipe_t *)s - w->pipes);
    if (nread < 0) { /* EOF, or a read error: either way this pipe is done */
        close_pipe(w, i);
        maybe_report(w);
        return;
    }
    size_t n = (size_t)nread;
    switch (i) {
    case PIPE_STDOUT:
        log_append(w, buf->base, n);
        break;
    case PIPE_STDERR:
        log_append(w, buf->base, n);
        tail_append(w, buf->base, n);
        break;
    default:
        bytebuf_lines_feed(&w->lines, buf->base, (size_t)n, progress_line, w);
        break;
    }
}

/* ---------------------------------------------------------- classification */

/* How many processes the kernel's OOM killer has killed (the "oom_kill N"
 * line of /proc/vmstat, Linux 4.13 and later; global and cgroup OOM kills
 * alike), or -1 when path cannot be read or has no such line. */
static long long oom_kills(const char *path) {
    FILE *f = path ? fopen(path, "re") : NULL;
    char line[128];
    long long n = -1;
    if (!f) return -1;
    while (n < 0 && fgets(line, sizeof line, f))
        if (sscanf(line, "oom_kill %lld", &n) != 1) n = -1;
    fclose(f);
    return n;
}

/* Length of the valid UTF-8 sequence at p (at most n bytes), or 0. */
static size_t utf8_len(const unsigned char *p, size_t n) {
    size_t len = p[0] < 0x80             ? 1
                 : (p[0] & 0xe0) == 0xc0 ? 2
                 : (p[0] & 0xf0) == 0xe0 ? 3
                 : (p[0] & 0xf8) == 0xf0 ? 4
                                         : 0;
    if (len == 0 || len > n || (len == 2 && p[0] < 0xc2)) return 0;
    for (size_t i = 1; i < len; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;
    return len;
}

/* The last line(s) of stderr, at most about REASON_STDERR characters, as one
 * printable UTF-8 line in out (lines joined by " | "). Empty when stderr was. */
static void stderr_excerpt(const worker_t *w, char *out, size_t outlen) {
    const char *t = w->err_tail;
    size_t n = w->err_len, start = 0, o = 0;
    while (n > 0 && isspace((unsigned char)t[n - 1])) n--;
    if (n > REASON_STDERR) {
        start = n - REASON_STDERR;
        const char *nl = memchr(t + start, '\n', n - start);
        if (nl && nl + 1 < t + n)
            start = (size_t)(nl + 1 - t); /* begin on a line */
        else if (outlen > 4)
            o += (size_t)snprintf(out, outlen, "...");
    }
    while (start < n && isspace((unsigned char)t[start])) start++;
    for (size_t i = start; i < n;) {
        const unsigned char *p = (const unsigned char *)t + i;
        const char *piece = NULL;
        size_t len = 1;
        char one[5];
        if (*p == '\n') {
            piece = " | ";
            while (i + len < n && isspace((unsigned char)t[i + len])) len++;
        } else if (util_is_control(p, 1, 0)) {
            piece = *p == '\t' || *p == '\r' ? " " : "?";
        } else if ((len = utf8_len(p, n - i)) == 0) {
            piece = "?";
            len = 1;
        } else {
            memcpy(one, p, len);
            one[len] = 0;
            piece = one;
        }
        size_t k = strlen(piece);
        if (o + k + 1 > outlen) break;
        memcpy(out + o, piece, k);
        o += k;
        i += len;
    }
    if (outlen) out[o < outlen ? o : outlen - 1] = 0;
}

/* The ending: one the daemon caused (a deadline or worker_stop) is said
 * here; any other the worker protocol classifies (executor_classify). */
static void classify(const worker_t *w, executor_exit_t *ex) {
    char sigbuf[24], tail[REASON_STDERR * 2];
    const char *sig =
        w->term_signal ? executor_signal_name(w->term_signal, sigbuf, sizeof sigbuf) : NULL;
    int code = (int)w->exit_status;

    stderr_excerpt(w, tail, sizeof tail);
    ex->reason[0] = 0;
    if (w->stop_status >= 0) {
        char how[96] = "";
        if (sig && w->term_signal == SIGKILL && w->sigkill_sent)
            snprintf(how, sizeof how, " (SIGKILL after the %g s grace)", w->grace_s);
        else if (sig)
            snprintf(how, sizeof how, " (%s)", sig);
        else
            snprintf(how, sizeof how, " (exited %d after SIGTERM)", code);
        ex->status = (executor_status)w->stop_status;
        if (ex->status == EXECUTOR_TIMEOUT)
            snprintf(ex->reason, sizeof ex->reason, "no exit within the deadline (%g s); killed%s",
                     w->deadline_s, how);
        else if (ex->status == EXECUTOR_CANCELLED)
            snprintf(ex->reason, sizeof ex->reason, "cancelled while running; killed%s", how);
        else /* EXECUTOR_INTERRUPTED */
            snprintf(ex->reason, sizeof ex->reason, "interrupted by daemon shutdown; killed%s",
                     how);
    } else {
        executor_facts_t f = {
            .exit_code = w->term_signal ? -1 : code,
            .term_signal = w->term_signal,
            .result = w->result,
            .oom_killed = w->oom_kills_spawn >= 0 && w->oom_kills_exit > w->oom_kills_spawn,
            .memory_mb = w->memory_mb,
            .tail = tail,
        };
        executor_classify(&f, ex);
    }
    ex->exit_code = w->term_signal ? -1 : code;
    ex->term_signal = w->term_signal;
    ex->result = w->result;
    ex->wall_seconds = (double)(w->t_exit - w->t_spawn) / 1e9;
    ex->garbage_lines = w->garbage_lines + w->lines.overlong;
}

/* Report the exit once the process is reaped and every pipe is closed. */
static void maybe_report(worker_t *w) {
    assert(w->pipes_open >= 0);
    if (!w->exited || w->pipes_open > 0 || w->reported) return;
    w->reported = 1;
    uv_timer_stop(&w->deadline_timer);
    uv_timer_stop(&w->kill_timer);
    uv_timer_stop(&w->drain_timer);
    /* Strays the worker left behind (forked children) die with it. The group
     * id cannot be reused while any member exists, so this hits no one else. */
    signal_group(w, SIGKILL);

    executor_exit_t ex;
    memset(&ex, 0, sizeof ex);
    classify(w, &ex);
    if (w->log_fd >= 0) {
        close(w->log_fd);
        w->log_fd = -1;
    }
    if (w->cb.on_exit) w->cb.on_exit(&ex, w->cb.user);

    close_handle(w, (uv_handle_t *)&w->proc);
    close_handle(w, (uv_handle_t *)&w->deadline_timer);
    close_handle(w, (uv_handle_t *)&w->kill_timer);
    close_handle(w, (uv_handle_t *)&w->drain_timer);
}

/* --------------------------------------------------------- process, timers */

/* A stray still holds a pipe: stop waiting. maybe_report kills the strays. */
static void drain_cb(uv_timer_t *t) {
    worker_t *w = t->data;
    for (int i = 0; i < N_PIPES; i++) close_pipe(w, i);
    maybe_report(w);
}

static void exit_cb(uv_process_t *p, int64_t exit_status, int term_signal) {
    worker_t *w = p->data;
    w->exited = 1;
    w->exit_status = exit_status;
    w->term_signal = term_signal;
    w->t_exit = uv_hrtime();
    if (term_signal == SIGKILL) w->oom_kills_exit = oom_kills(w->oom_counter);
    uv_timer_stop(&w->deadline_timer);
    uv_timer_stop(&w->kill_timer);
    if (w->pipes_open > 0) uv_timer_start(&w->drain_timer, drain_cb, DRAIN_MS, 0);
    maybe_report(w);
}

static void kill_cb(uv_timer_t *t) {
    worker_t *w = t->data;
    if (w->exited) return;
    w->sigkill_sent = 1;
    signal_group(w, SIGKILL);
}

/* Seconds to milliseconds, saturating (a NaN is 0): no double too large for
 * uint64_t is ever converted. 2^62 ms is longer than any deadline means. */
static uint64_t to_ms(double s) {
    if (!(s > 0)) return 0;
    if (s >= 4611686018427387.0) return (uint64_t)1 << 62;
    return (uint64_t)(s * 1000.0 + 0.5);
}

/* SIGTERM now, SIGKILL after the grace; idempotent. */
static void terminate(worker_t *w) {
    if (w->sigterm_sent || w->exited) return;
    w->sigterm_sent = 1;
    signal_group(w, SIGTERM);
    uv_timer_start(&w->kill_timer, kill_cb, to_ms(w->grace_s), 0);
}

static void deadline_cb(uv_timer_t *t) {
    worker_t *w = t->data;
    if (w->exited) return;
    if (w->stop_status < 0) w->stop_status = EXECUTOR_TIMEOUT;
    terminate(w);
}

void worker_stop(worker_t *w, executor_status why) {
    /* Once the process has exited its own exit code decides; the drain
     * timer bounds the wait for its pipes. */
    if (!w || w->reported || w->exited) return;
    if (why != EXECUTOR_TIMEOUT && why != EXECUTOR_INTERRUPTED) why = EXECUTOR_CANCELLED;
    if (w->stop_status < 0) w->stop_status = why;
    terminate(w);
}

int worker_pid(const worker_t *w) {
    return w->pid;
}

/* ------------------------------------------------------------------ start */

/* The parent's environment with the thread counts replaced when threads > 0.
 * The array is owned by the caller (free it); its strings are borrowed from
 * environ, omp and blas, which must outlive it. NULL when out of memory. */
static char **build_env(int threads, char *omp, char *blas, size_t len) {
    size_t n = 0;
    while (environ[n]) n++;
    char **env = calloc(n + 3, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (threads > 0 && (!strncmp(environ[i], "OMP_NUM_THREADS=", 16) ||
                            !strncmp(environ[i], "OPENBLAS_NUM_THREADS=", 21)))
            continue;
        if (executor_env_is_secret(environ[i])) continue;
        env[k++] = environ[i];
    }
    if (threads > 0) {
        snprintf(omp, len, "OMP_NUM_THREADS=%d", threads);
        snprintf(blas, len, "OPENBLAS_NUM_THREADS=%d", threads);
        env[k++] = omp;
        env[k++] = blas;
    }
    env[k] = NULL;
    return env;
}

/* `shim exec-limited [--cpus L] [--memory-mb N] --parent PID -- argv...`.
 * The array is owned by the caller (free it); its strings are borrowed from
 * o, mem and parent. NULL when out of memory. */
static char **build_argv(const worker_opts_t *o, char *mem, char *parent, size_t len) {
    size_t n = 0;
    while (o->argv[n]) n++;
    char **a = calloc(n + 10, sizeof *a);
    if (!a) return NULL;
    size_t k = 0;
    a[k++] = (char *)o->shim;
    a[k++] = "exec-limited";
    if (o->cpus && *o->cpus) {
        a[k++] = "--cpus";
        a[k++] = (char *)o->cpus;
    }
    if (o->memory_mb > 0) {
        snprintf(mem, len, "%d", o->memory_mb);
        a[k++] = "--memory-mb";
        a[k++] = mem;
    }
    snprintf(parent, len, "%d", (int)getpid());
    a[k++] = "--parent";
    a[k++] = parent;
    a[k++] = "--";
    for (size_t i = 0; i < n; i++) a[k++] = o->argv[i];
    a[k] = NULL;
    return a;
}

/* A new worker for o with its timers and pipes initialised (the loop owns
 * them from here: each is closed, and the last close frees w), or NULL when
 * out of memory. */
static worker_t *worker_new(uv_loop_t *loop, const worker_opts_t *o,
                            const executor_callbacks_t *cb) {
    worker_t *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->loop = loop;
    if (cb) w->cb = *cb;
    w->stop_status = -1;
    w->log_fd = -1;
    w->deadline_s = o->deadline_s;
    w->grace_s = o->kill_grace_s > 0 ? o->kill_grace_s : DEFAULT_GRACE_S;
    w->memory_mb = o->memory_mb;
    w->oom_kills_spawn = w->oom_kills_exit = -1;
    w->max_log_bytes = o->max_log_bytes ? o->max_log_bytes : DEFAULT_MAX_LOG;
    bytebuf_init(&w->lines.line, o->max_line_bytes ? o->max_line_bytes : DEFAULT_MAX_LINE);
    uv_timer_t *timers[] = {&w->deadline_timer, &w->kill_timer, &w->drain_timer};
    for (int i = 0; i < 3; i++) {
        uv_timer_init(loop, timers[i]);
        timers[i]->data = w;
        w->open_handles++;
    }
    for (int i = 0; i < N_PIPES; i++) {
        uv_pipe_init(loop, &w->pipes[i], 0);
        w->pipes[i].data = w;
        w->open_handles++;
        w->pipes_open++;
    }
    return w;
}

/* Spawn the shim with o's command, environment and limits, its stdout,
 * stderr and fd 3 on the worker's pipes. Returns 0, or a negative libuv
 * error with err set (*proc_init says whether the process handle needs
 * closing). */
static int spawn(worker_t *w, const worker_opts_t *o, int *proc_init, char *err, size_t errlen) {
    char omp[48], blas[48], mem[24], parent[24];
    char **env = build_env(o->threads, omp, blas, sizeof omp);
    char **args = build_argv(o, mem, parent, sizeof mem);
    int rc = UV_ENOMEM;
    w->oom_counter = strdup(o->oom_counter ? o->oom_counter : OOM_COUNTER);
    if (!env || !args || !w->oom_counter) {
        snprintf(err, errlen, "worker: out of memory");
        goto done;
    }
    uv_stdio_container_t stdio[4];
    stdio[0].flags = UV_IGNORE;
    for (int i = 0; i < N_PIPES; i++) {
        stdio[i + 1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE; /* the child's view */
        stdio[i + 1].data.stream = (uv_stream_t *)&w->pipes[i];
    }
    uv_process_options_t po;
    memset(&po, 0, sizeof po);
    po.file = o->shim;
    po.args = args;
    po.env = env;
    po.cwd = o->cwd;
    po.stdio_count = 4;
    po.stdio = stdio;
    po.exit_cb = exit_cb;
    w->proc.data = w;
    w->oom_kills_spawn = oom_kills(w->oom_counter);
    w->t_spawn = uv_hrtime();
    rc = uv_spawn(w->loop, &w->proc, &po);
    w->open_handles++; /* initialised by uv_spawn even when it fails */
    *proc_init = 1;
    if (rc < 0)
        snprintf(err, errlen, "spawn %s: %s", o->shim, uv_strerror(rc));
    else
        w->pid = w->proc.pid;
done:
    free(env);
    free(args);
    return rc;
}

int worker_start(uv_loop_t *loop, const worker_opts_t *o, const executor_callbacks_t *cb,
                 worker_t **out, char *err, size_t errlen) {
    int rc, proc_init = 0;
    *out = NULL;
    if (!o || !o->shim || !o->argv || !o->argv[0]) {
        snprintf(err, errlen, "worker: no shim or command given");
        return UV_EINVAL;
    }
    worker_t *w = worker_new(loop, o, cb);
    if (!w) {
        snprintf(err, errlen, "worker: out of memory");
        return UV_ENOMEM;
    }
    if (o->log_path) {
        w->log_fd = open(o->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (w->log_fd < 0) {
            rc = -errno;
            snprintf(err, errlen, "open %s: %s", o->log_path, strerror(errno));
            goto fail;
        }
    }
    if ((rc = spawn(w, o, &proc_init, err, errlen)) < 0) goto fail;
    for (int i = 0; i < N_PIPES; i++) {
        rc = uv_read_start((uv_stream_t *)&w->pipes[i], alloc_cb, read_cb);
        if (rc < 0) { /* cannot happen on a fresh pipe; still, no orphan */
            snprintf(err, errlen, "read worker pipe: %s", uv_strerror(rc));
            signal_group(w, SIGKILL);
            goto fail;
        }
    }
    if (o->deadline_s > 0) {
        uint64_t ms = to_ms(o->deadline_s);
        uv_timer_start(&w->deadline_timer, deadline_cb, ms ? ms : 1, 0);
    }
    *out = w;
    return 0;

fail:
    /* No callback will run: the handles close on the loop and the last close
     * callback frees w. A spawned child (only after a read_start failure)
     * was killed above; its exit is not reported. */
    if (w->log_fd >= 0) close(w->log_fd);
    w->log_fd = -1;
    w->reported = 1;
    for (int i = 0; i < N_PIPES; i++) close_handle(w, (uv_handle_t *)&w->pipes[i]);
    close_handle(w, (uv_handle_t *)&w->deadline_timer);
    close_handle(w, (uv_handle_t *)&w->kill_timer);
    close_handle(w, (uv_handle_t *)&w->drain_timer);
    if (proc_init) close_handle(w, (uv_handle_t *)&w->proc);
    return rc;
}

/* --------------------------------------------------------- local executor */

/* The local executor (executor.h) is this module as a table: a job is a
 * worker_t, and the callbacks are the worker's. */

typedef struct {
    executor_t x; /* first: the table the scheduler sees */
    uv_loop_t *loop;
    worker_floor_t floor; /* executor_local_set_floor's */
    int have_floor;
} local_executor_t;

static int local_start(executor_t *x, const executor_run_t *r, const executor_callbacks_t *cb,
                       executor_job_t **job, char *err, size_t errlen) {
    worker_opts_t wo = {.shim = r->shim,
                        .argv = r->argv,
                        .cwd = r->run_dir,
                        .log_path = r->log_path,
                        .cpus = r->cpus,
                        .threads = r->threads,
                        .memory_mb = r->memory_mb,
                        .deadline_s = r->deadline_s,
                        .kill_grace_s = r->kill_grace_s};
    worker_t *w;
    int rc = worker_start(((local_executor_t *)x)->loop, &wo, cb, &w, err, errlen);
    if (rc < 0) return rc;
    *job = (executor_job_t *)w;
    if (cb->on_started) cb->on_started(w->pid, 0, cb->user);
    return 0;
}

static void local_stop(executor_job_t *job, executor_status why) {
    worker_stop((worker_t *)job, why);
}

static void local_describe(const executor_job_t *job, cJSON *o) {
    cJSON_AddNumberToObject(o, "pid", worker_pid((const worker_t *)job));
}

static void local_free(executor_t *x) {
    free(x);
}

static double local_floor(const executor_t *x, int threads) {
    const local_executor_t *l = (const local_executor_t *)x;
    return l->have_floor ? worker_floor(&l->floor, threads) : 0;
}

void executor_local_set_floor(executor_t *x, const worker_floor_t *f) {
    local_executor_t *l = (local_executor_t *)x;
    l->floor = *f;
    l->have_floor = 1;
}

executor_t *executor_local_new(uv_loop_t *loop) {
    local_executor_t *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->x = (executor_t){.name = "local",
                        .start = local_start,
                        .stop = local_stop,
                        .describe = local_describe,
                        .free = local_free,
                        .floor = local_floor};
    l->loop = loop;
    return &l->x;
}

/* ------------------------------------------------------- the engine's floor */

/* VmPeak in bytes of `exe floor --threads threads`, run with a worker's
 * environment (engine/floor.h's floor_probe); -1 with err. */
static double measure_one(const char *exe, int threads, char *err, size_t errlen) {
    char omp[48], blas[48];
    char **env = build_env(0, omp, blas, sizeof omp); /* the probe sets the thread counts */
    if (!env) return util_errorf(err, errlen, "floor: out of memory"), -1;
    double peak = floor_probe(exe, threads, env, err, errlen);
    free(env);
    return peak;
}

int worker_floor_measure(const char *exe, int max_threads, worker_floor_t *f, char *err,
                         size_t errlen) {
    memset(f, 0, sizeof *f);
    f->max_threads = max_threads > 1 ? max_threads : 1;
    if ((f->at_1 = measure_one(exe, 1, err, errlen)) < 0) return -1;
    f->at_max = f->at_1;
    if (f->max_threads > 1 && (f->at_max = measure_one(exe, f->max_threads, err, errlen)) < 0)
        return -1;
    f->per_thread = f->max_threads > 1 ? (f->at_max - f->at_1) / (f->max_threads - 1) : 0;
    if (f->per_thread < 0) f->per_thread = 0;
    f->base = f->at_1 - f->per_thread;
    return 0;
}

double worker_floor(const worker_floor_t *f, int threads) {
    return f->base + f->per_thread * (threads > 1 ? threads : 1);
}

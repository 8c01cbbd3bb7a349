/* slurm.c - the Slurm executor (see slurm.h).
 *
 * Three parts: the pure functions (state map, time limit, job script, sbatch
 * line) that the tests call directly; asynchronous commands (uv_spawn with
 * stdout and stderr collected up to a cap and a kill timer); and the jobs,
 * driven by one timer that tails progress files every tail_s and runs one
 * squeue every poll_s.
 *
 * A job's life: start writes job.sh and runs sbatch (submitting); sbatch's id
 * is reported through on_started; squeue's answers move it through its Slurm
 * states; a final state (or a job squeue no longer lists, decided from the
 * exit_code file) is classified, the progress file drained, on_exit called and
 * the job freed. stop(CANCELLED) runs scancel and waits for squeue to say
 * CANCELLED; stop(INTERRUPTED) detaches (reported from a zero timer, never
 * inside stop). Lifetime: the executor owns its jobs and commands; free
 * closes every handle and the last close callback frees the executor. */
#include "daemon/exec/slurm.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/shared/bytebuf.h"
#include "daemon/shared/curl_uv.h"
#include "daemon/shared/log.h"
#include "engine/protocol.h"
#include "engine/util.h"

extern char **environ;

#define DEFAULT_TAIL_S      1.0
#define DEFAULT_CMD_TIMEOUT 60.0
#define MAX_STDOUT          (4u << 20)   /* bytes of a command's stdout kept (squeue) */
#define MAX_STDERR          2048         /* bytes of a command's stderr kept */
#define READ_CHUNK          (64 * 1024)  /* pipe read size */
#define TAIL_CHUNK          (256 * 1024) /* progress bytes read per job per tick */
#define MAX_LINE            (64 * 1024)  /* a longer progress line is garbage */
#define UNSEEN_LIMIT        2            /* polls that do not list a job before it counts as gone */
#define REASON_TAIL         300          /* log characters quoted in a failure reason */

/* ------------------------------------------------------------ pure parts */

static const struct {
    const char *state;
    slurm_phase phase;
    executor_status status; /* for SLURM_ENDED */
} state_table[] = {
    {"PENDING", SLURM_QUEUED, 0},
    {"CONFIGURING", SLURM_QUEUED, 0},
    {"REQUEUED", SLURM_QUEUED, 0},
    {"REQUEUE_FED", SLURM_QUEUED, 0},
    {"REQUEUE_HOLD", SLURM_QUEUED, 0},
    {"RESV_DEL_HOLD", SLURM_QUEUED, 0},
    {"RUNNING", SLURM_RUNNING, 0},
    {"COMPLETING", SLURM_RUNNING, 0},
    {"SUSPENDED", SLURM_RUNNING, 0},
    {"STOPPED", SLURM_RUNNING, 0},
    {"RESIZING", SLURM_RUNNING, 0},
    {"SIGNALING", SLURM_RUNNING, 0},
    {"STAGE_OUT", SLURM_RUNNING, 0},
    {"COMPLETED", SLURM_ENDED, EXECUTOR_SUCCEEDED},
    {"FAILED", SLURM_ENDED, EXECUTOR_FAILED},
    {"NODE_FAIL", SLURM_ENDED, EXECUTOR_FAILED},
    {"BOOT_FAIL", SLURM_ENDED, EXECUTOR_FAILED},
    {"SPECIAL_EXIT", SLURM_ENDED, EXECUTOR_FAILED},
    {"REVOKED", SLURM_ENDED, EXECUTOR_FAILED},
    {"TIMEOUT", SLURM_ENDED, EXECUTOR_TIMEOUT},
    {"DEADLINE", SLURM_ENDED, EXECUTOR_TIMEOUT},
    {"OUT_OF_MEMORY", SLURM_ENDED, EXECUTOR_OOM},
    {"CANCELLED", SLURM_ENDED, EXECUTOR_CANCELLED},
    {"PREEMPTED", SLURM_ENDED, EXECUTOR_INTERRUPTED},
};

slurm_phase slurm_state_map(const char *state, executor_status *status) {
    for (size_t i = 0; state && i < sizeof state_table / sizeof state_table[0]; i++)
        if (!strcmp(state, state_table[i].state)) {
            if (state_table[i].phase == SLURM_ENDED && status) *status = state_table[i].status;
            return state_table[i].phase;
        }
    return SLURM_UNKNOWN;
}

int slurm_time_minutes(double budget_s, double slack_s) {
    double s = (budget_s > 0 ? budget_s : 0) + (slack_s > 0 ? slack_s : 0);
    double m = ceil(s / 60.0 - 1e-9);
    if (!(m >= 1)) return 1;
    return m > 1e6 ? 1000000 : (int)m;
}

/* Append s to b single-quoted for sh. A failure stays in b->err. */
static void put_quoted(bytebuf_t *b, const char *s) {
    bytebuf_putc(b, '\'');
    for (const char *q = s; *q; q++) {
        if (*q == '\'')
            bytebuf_puts(b, "'\\''"); /* end quote, escaped quote, reopen */
        else
            bytebuf_putc(b, *q);
    }
    bytebuf_putc(b, '\'');
}

char *slurm_job_script(const executor_run_t *r) {
    bytebuf_t b;
    bytebuf_init(&b, BYTEBUF_UNLIMITED);
    bytebuf_printf(&b,
                   "#!/bin/sh\n# nightshift experiment %lld"
                   ": written by the daemon, run by Slurm. Progress lines (fd 3)\n"
                   "# go to progress.jsonl, which the daemon tails; the exit code to exit_code.\n"
                   "cd ",
                   (long long)r->id);
    put_quoted(&b, r->run_dir);
    bytebuf_printf(&b, " || exit %d\n", PROTO_EXIT_FAILED);
    if (r->memory_mb > 0 && r->shim) {
        /* The local slot's limit, so that running out of memory is the
         * engine's PROTO_EXIT_OOM here too, not only Slurm's OUT_OF_MEMORY. */
        put_quoted(&b, r->shim);
        bytebuf_printf(&b, " exec-limited --memory-mb %d --", r->memory_mb);
    }
    for (int i = 0; r->argv && r->argv[i]; i++) {
        if (b.len && b.data[b.len - 1] != '\n') bytebuf_putc(&b, ' ');
        put_quoted(&b, r->argv[i]);
    }
    bytebuf_puts(&b, " 3>>progress.jsonl\n"
                     "code=$?\n"
                     "echo \"$code\" > exit_code.tmp && mv -f exit_code.tmp exit_code\n"
                     "exit \"$code\"\n");
    return bytebuf_take(&b, NULL); /* NULL when out of memory */
}

int slurm_sbatch_argv(const slurm_opts_t *o, const executor_run_t *r, const char *script,
                      char **argv, int max, char *buf, size_t len) {
    int k = 0;
    size_t used = 0;
    const char *prefix = o->job_prefix && *o->job_prefix ? o->job_prefix : SLURM_DEFAULT_PREFIX;
#define ARG(s)                                                                                     \
    do {                                                                                           \
        if (k >= max - 1) return -1;                                                               \
        argv[k++] = (char *)(s);                                                                   \
    } while (0)
#define FMT(...)                                                                                   \
    do {                                                                                           \
        int m_ = snprintf(buf + used, len - used, __VA_ARGS__);                                    \
        if (m_ < 0 || (size_t)m_ >= len - used) return -1;                                         \
        ARG(buf + used);                                                                           \
        used += (size_t)m_ + 1;                                                                    \
    } while (0)
    ARG("sbatch");
    ARG("--parsable");
    FMT("--job-name=%s-%lld", prefix, (long long)r->id);
    FMT("--chdir=%s", r->run_dir);
    FMT("--output=%s", r->log_path);
    ARG("--open-mode=append");
    ARG("--nodes=1");
    ARG("--ntasks=1");
    FMT("--cpus-per-task=%d", r->threads > 0 ? r->threads : 1);
    if (r->memory_mb > 0) FMT("--mem=%dM", r->memory_mb);
    FMT("--time=%d", slurm_time_minutes(r->budget_s, r->slack_s));
    if (o->partition && *o->partition) FMT("--partition=%s", o->partition);
    if (o->account && *o->account) FMT("--account=%s", o->account);
    for (int i = 0; o->sbatch_args && o->sbatch_args[i]; i++) ARG(o->sbatch_args[i]);
    ARG(script);
    argv[k] = NULL;
    return k;
#undef FMT
#undef ARG
}

cJSON *slurm_rest_job(const slurm_opts_t *o, const executor_run_t *r, const char *script,
                      char *const *env) {
    char name[256];
    cJSON *root = cJSON_CreateObject(), *job = cJSON_AddObjectToObject(root, "job");
    cJSON *e = cJSON_AddObjectToObject(job, "environment");
    snprintf(name, sizeof name, "%s-%lld",
             o->job_prefix && *o->job_prefix ? o->job_prefix : SLURM_DEFAULT_PREFIX,
             (long long)r->id);
    cJSON_AddStringToObject(root, "script", script);
    cJSON_AddStringToObject(job, "name", name);
    cJSON_AddStringToObject(job, "current_working_directory", r->run_dir);
    cJSON_AddStringToObject(job, "standard_output", r->log_path);
    cJSON_AddStringToObject(job, "standard_error", r->log_path);
    cJSON_AddStringToObject(job, "open_mode", "append");
    cJSON_AddNumberToObject(job, "tasks", 1);
    cJSON_AddNumberToObject(job, "cpus_per_task", r->threads > 0 ? r->threads : 1);
    if (r->memory_mb > 0) cJSON_AddNumberToObject(job, "memory_per_node", r->memory_mb);
    cJSON_AddNumberToObject(job, "time_limit", slurm_time_minutes(r->budget_s, r->slack_s));
    if (o->partition && *o->partition) cJSON_AddStringToObject(job, "partition", o->partition);
    if (o->account && *o->account) cJSON_AddStringToObject(job, "account", o->account);
    /* sbatch's --export=ALL: the daemon's environment, less its secrets */
    for (int i = 0; env && env[i]; i++) {
        const char *eq = strchr(env[i], '=');
        char key[256];
        if (!eq || eq == env[i] || (size_t)(eq - env[i]) >= sizeof key) continue;
        memcpy(key, env[i], (size_t)(eq - env[i]));
        key[eq - env[i]] = '\0';
        if (!strcmp(key, "NIGHTSHIFT_TOKEN") || !strcmp(key, "SLURM_JWT")) continue;
        cJSON_AddStringToObject(e, key, eq + 1);
    }
    if (!cJSON_GetObjectItemCaseSensitive(e, "PATH"))
        cJSON_AddStringToObject(e, "PATH", "/usr/local/bin:/usr/bin:/bin");
    if (!job || !e || cJSON_GetArraySize(job) < 9) { /* an allocation failed */
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* ------------------------------------------------------------- executor */

typedef struct slurm slurm_t;
typedef struct cmd cmd_t;
typedef struct slurm_job slurm_job_t;
typedef struct rest_req rest_req_t;

typedef void (*cmd_done_fn)(slurm_t *sx, cmd_t *c, void *arg);

/* One Slurm command in flight. */
struct cmd {
    slurm_t *sx;
    cmd_t *next;
    const char *what; /* "sbatch", ... for messages */
    cmd_done_fn done; /* NULL once abandoned (the executor is closing) */
    void *arg;
    uv_process_t proc;
    uv_pipe_t out, err;
    uv_timer_t timer;
    int open_handles, pipes_open, exited, reported, timed_out;
    int64_t exit_status;
    int term_signal;
    char *stdout_buf; /* NUL-terminated, up to MAX_STDOUT */
    size_t stdout_len;
    char stderr_buf[MAX_STDERR + 1];
    size_t stderr_len;
    char rbuf[READ_CHUNK];
};

struct slurm_job {
    slurm_t *sx;
    slurm_job_t *next;
    executor_callbacks_t cb;
    int64_t id;     /* the experiment */
    int64_t job_id; /* Slurm's, 0 until known */
    char name[128]; /* PREFIX-<id> */
    char *run_dir, *progress_path, *exit_path, *log_path;
    int time_minutes;
    int memory_mb;     /* the run's limit (0 = none), for an out-of-memory reason */
    int submitting;    /* sbatch in flight */
    int by_name;       /* attached without an id: squeue's listing by name decides */
    int stop_req;      /* -1, EXECUTOR_CANCELLED or EXECUTOR_INTERRUPTED */
    int scancel_sent;  /* scancel in flight or done */
    int detach_queued; /* the zero timer reports it */
    int unseen;        /* polls in a row that did not list it */
    char state[32];    /* the last Slurm state seen; "" before the first */
    double t_start;    /* uv_now seconds at submission or attach */
    /* the progress file tail */
    int64_t offset;
    bytebuf_lines_t lines;  /* progress lines, each at most MAX_LINE bytes */
    uint64_t garbage_lines; /* lines that are not one JSON object */
    cJSON *result;          /* the last result line, owned */
};

struct slurm {
    executor_t x; /* first: the table the scheduler sees */
    uv_loop_t *loop;
    slurm_opts_t o;
    char *partition, *account, *prefix; /* owned copies behind o */
    char **sbatch_args;
    uv_timer_t tick, soon;
    int open_handles;
    int closing;
    int polling;        /* a squeue in flight */
    double last_poll_s; /* uv_now seconds of the last squeue start */
    slurm_job_t *jobs;
    cmd_t *cmds;
    /* slurmrestd (o.rest_url set): libcurl multi on the loop; NULL = commands */
    curl_uv_t *curl;
    CURLM *multi; /* curl's multi */
    int curl_inited;
    rest_req_t *reqs;
    char *rest_base;   /* "http://host:port", or "http://localhost" on a socket */
    char *rest_socket; /* the UNIX socket's path, or NULL */
    char *rest_user;   /* the jobs' user: listing filter, X-SLURM-USER-NAME with a token */
    char *rest_token;  /* X-SLURM-USER-TOKEN, or NULL */
};

static double now_s(const slurm_t *sx) {
    return (double)uv_now(sx->loop) / 1000.0;
}

static void maybe_free_executor(slurm_t *sx);
static void send_cancel(slurm_job_t *j);

/* --------------------------------------------------------------- commands */

static void cmd_unlink(cmd_t *c) {
    for (cmd_t **p = &c->sx->cmds; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            return;
        }
}

static void cmd_close_cb(uv_handle_t *h) {
    cmd_t *c = h->data;
    if (--c->open_handles > 0) return;
    slurm_t *sx = c->sx;
    free(c->stdout_buf);
    free(c);
    sx->open_handles--;
    maybe_free_executor(sx);
}

static void cmd_close(cmd_t *c) {
    uv_handle_t *hs[] = {(uv_handle_t *)&c->proc, (uv_handle_t *)&c->out, (uv_handle_t *)&c->err,
                         (uv_handle_t *)&c->timer};
    cmd_unlink(c);
    for (int i = 0; i < 4; i++)
        if (!uv_is_closing(hs[i])) uv_close(hs[i], cmd_close_cb);
}

/* Report once the process is reaped and both pipes are at EOF. */
static void cmd_maybe_done(cmd_t *c) {
    if (!c->exited || c->pipes_open > 0 || c->reported) return;
    c->reported = 1;
    uv_timer_stop(&c->timer);
    if (c->done) c->done(c->sx, c, c->arg);
    cmd_close(c);
}

static void cmd_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    cmd_t *c = h->data;
    (void)suggested;
    *buf = uv_buf_init(c->rbuf, sizeof c->rbuf);
}

static void cmd_read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
    cmd_t *c = s->data;
    if (n > 0) {
        if (s == (uv_stream_t *)&c->out) {
            size_t room = MAX_STDOUT - c->stdout_len, m = (size_t)n < room ? (size_t)n : room;
            if (m) {
                memcpy(c->stdout_buf + c->stdout_len, buf->base, m);
                c->stdout_len += m;
                c->stdout_buf[c->stdout_len] = '\0';
            }
        } else {
            size_t room = MAX_STDERR - c->stderr_len, m = (size_t)n < room ? (size_t)n : room;
            memcpy(c->stderr_buf + c->stderr_len, buf->base, m);
            c->stderr_len += m;
            c->stderr_buf[c->stderr_len] = '\0';
        }
        return;
    }
    if (n == 0) return;
    uv_read_stop(s); /* EOF or an error: this pipe is done */
    c->pipes_open--;
    cmd_maybe_done(c);
}

static void cmd_exit_cb(uv_process_t *p, int64_t exit_status, int term_signal) {
    cmd_t *c = p->data;
    c->exited = 1;
    c->exit_status = exit_status;
    c->term_signal = term_signal;
    cmd_maybe_done(c);
}

static void cmd_timeout_cb(uv_timer_t *t) {
    cmd_t *c = t->data;
    if (c->exited) return;
    c->timed_out = 1;
    uv_process_kill(&c->proc, SIGKILL);
}

/* The environment of a Slurm command: the daemon's, without its token (sbatch
 * exports the environment to the job). The array is the caller's to free;
 * the strings are environ's. */
static char **command_env(void) {
    size_t n = 0, k = 0;
    while (environ[n]) n++;
    char **env = calloc(n + 1, sizeof *env);
    if (!env) return NULL;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "NIGHTSHIFT_TOKEN=", 17) != 0) env[k++] = environ[i];
    env[k] = NULL;
    return env;
}

/* Run argv (argv[0] found on PATH); done runs once with the outcome. */
static int cmd_run(slurm_t *sx, char **argv, cmd_done_fn done, void *arg, char *err,
                   size_t errlen) {
    cmd_t *c = calloc(1, sizeof *c);
    char **env = command_env();
    if (!c || !env || !(c->stdout_buf = malloc(MAX_STDOUT + 1))) {
        free(env);
        if (c) free(c->stdout_buf);
        free(c);
        snprintf(err, errlen, "slurm: out of memory");
        return UV_ENOMEM;
    }
    c->sx = sx;
    c->what = argv[0];
    c->done = done;
    c->arg = arg;
    c->stdout_buf[0] = '\0';
    uv_pipe_init(sx->loop, &c->out, 0);
    uv_pipe_init(sx->loop, &c->err, 0);
    uv_timer_init(sx->loop, &c->timer);
    c->out.data = c->err.data = c->timer.data = c->proc.data = c;
    c->open_handles = 4;
    c->pipes_open = 2;
    sx->open_handles++;
    c->next = sx->cmds;
    sx->cmds = c;

    uv_stdio_container_t stdio[3];
    stdio[0].flags = UV_IGNORE;
    stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[1].data.stream = (uv_stream_t *)&c->out;
    stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[2].data.stream = (uv_stream_t *)&c->err;
    uv_process_options_t po;
    memset(&po, 0, sizeof po);
    po.file = argv[0];
    po.args = argv;
    po.env = env;
    po.stdio_count = 3;
    po.stdio = stdio;
    po.exit_cb = cmd_exit_cb;
    int rc = uv_spawn(sx->loop, &c->proc, &po);
    free(env);
    if (rc < 0) {
        snprintf(err, errlen, "%s: %s", argv[0], uv_strerror(rc));
        c->done = NULL;
        c->reported = 1;
        cmd_close(c);
        return rc;
    }
    uv_read_start((uv_stream_t *)&c->out, cmd_alloc_cb, cmd_read_cb);
    uv_read_start((uv_stream_t *)&c->err, cmd_alloc_cb, cmd_read_cb);
    uv_timer_start(&c->timer, cmd_timeout_cb, (uint64_t)(sx->o.command_timeout_s * 1000.0), 0);
    return 0;
}

/* A command's failure in words: its stderr's first line, or how it ended. */
static void cmd_failure(const cmd_t *c, char *out, size_t len) {
    char line[400];
    size_t n = strcspn(c->stderr_buf, "\n");
    if (n >= sizeof line) n = sizeof line - 1;
    memcpy(line, c->stderr_buf, n);
    line[n] = '\0';
    if (c->timed_out)
        snprintf(out, len, "%s: no answer within %g s", c->what, c->sx->o.command_timeout_s);
    else if (c->term_signal)
        snprintf(out, len, "%s: killed by signal %d", c->what, c->term_signal);
    else if (line[0])
        snprintf(out, len, "%s: %s", c->what, line);
    else
        snprintf(out, len, "%s: exit %lld", c->what, (long long)c->exit_status);
}

static int cmd_ok(const cmd_t *c) {
    return c->exited && !c->timed_out && !c->term_signal && c->exit_status == 0;
}

/* ------------------------------------------------------------------- jobs */

static void job_free(slurm_job_t *j) {
    free(j->run_dir);
    free(j->progress_path);
    free(j->exit_path);
    free(j->log_path);
    bytebuf_free(&j->lines.line);
    cJSON_Delete(j->result);
    free(j);
}

static void job_unlink(slurm_job_t *j) {
    for (slurm_job_t **p = &j->sx->jobs; *p; p = &(*p)->next)
        if (*p == j) {
            *p = j->next;
            return;
        }
}

/* One complete progress line. */
static void progress_line(void *user, const char *p, size_t n) {
    slurm_job_t *j = user;
    if (executor_progress_line(p, n, &j->cb, &j->result) < 0) j->garbage_lines++;
}

/* Read what the job appended to its progress file since the last read (at
 * most TAIL_CHUNK bytes, or everything when drain is set). The file is opened
 * anew each time: on NFS that is what makes new data visible. */
static void progress_read(slurm_job_t *j, int drain) {
    static char buf[TAIL_CHUNK];
    int fd = open(j->progress_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return; /* not started yet */
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size < j->offset) j->offset = 0; /* a new file */
    for (;;) {
        ssize_t k = pread(fd, buf, sizeof buf, j->offset);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        j->offset += k;
        bytebuf_lines_feed(&j->lines, buf, (size_t)k, progress_line, j);
        if (!drain) break;
    }
    close(fd);
    if (drain) bytebuf_lines_flush(&j->lines, progress_line, j);
}

/* The code the job script wrote to exit_code, or -1 when there is none. */
static int read_exit_code(const slurm_job_t *j) {
    char buf[32];
    int fd = open(j->exit_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t k = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (k <= 0) return -1;
    buf[k] = '\0';
    char *end;
    long v = strtol(buf, &end, 10);
    return end == buf || v < 0 || v > 255 ? -1 : (int)v;
}

/* The last REASON_TAIL characters of the job's log, one line, printable. */
static void log_tail(const slurm_job_t *j, char *out, size_t len) {
    char buf[REASON_TAIL + 1];
    out[0] = '\0';
    int fd = open(j->log_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st;
    off_t from = fstat(fd, &st) == 0 && st.st_size > REASON_TAIL ? st.st_size - REASON_TAIL : 0;
    ssize_t k = pread(fd, buf, REASON_TAIL, from);
    close(fd);
    if (k <= 0) return;
    while (k > 0 && isspace((unsigned char)buf[k - 1])) k--;
    size_t o = 0;
    for (ssize_t i = 0; i < k && o + 1 < len; i++)
        out[o++] = isprint((unsigned char)buf[i]) ? buf[i] : ' ';
    out[o] = '\0';
}

/* The status and reason of job j that ended in Slurm's final state (its
 * status already in ex). COMPLETED and the failed states go to the worker
 * protocol (executor_classify): its exit code still tells diverged and oom,
 * and COMPLETED counts only with a succeeded result line; a failed state
 * stays failed whatever the job wrote. The other states are Slurm's word. */
static void job_reason(const slurm_job_t *j, const char *state, int code, const char *tail,
                       executor_exit_t *ex) {
    long long id = (long long)j->job_id;
    switch (ex->status) {
    case EXECUTOR_SUCCEEDED:
    case EXECUTOR_FAILED: {
        executor_status slurm_says = ex->status;
        executor_facts_t f = {
            /* COMPLETED is a clean exit to Slurm, also before the file is visible */
            .exit_code = code < 0 && slurm_says == EXECUTOR_SUCCEEDED ? PROTO_EXIT_OK : code,
            .result = j->result,
            .memory_mb = j->memory_mb,
            .tail = tail,
        };
        executor_classify(&f, ex);
        if (slurm_says == EXECUTOR_FAILED && ex->status == EXECUTOR_SUCCEEDED)
            ex->status = EXECUTOR_FAILED;
        if (ex->status != EXECUTOR_SUCCEEDED) {
            char why[sizeof ex->reason];
            snprintf(why, sizeof why, "%s", ex->reason[0] ? ex->reason : "a succeeded result");
            snprintf(ex->reason, sizeof ex->reason, "slurm job %lld %s: %.900s", id, state, why);
        }
        break;
    }
    case EXECUTOR_TIMEOUT:
        snprintf(ex->reason, sizeof ex->reason,
                 "slurm job %lld %s: its time limit (%d min) passed; killed by Slurm", id, state,
                 j->time_minutes);
        break;
    case EXECUTOR_OOM:
        snprintf(ex->reason, sizeof ex->reason, "slurm job %lld %s%s%s", id, state,
                 tail[0] ? ": " : "", tail);
        break;
    case EXECUTOR_CANCELLED:
        snprintf(ex->reason, sizeof ex->reason, "slurm job %lld cancelled %s", id,
                 j->stop_req == EXECUTOR_CANCELLED ? "by the daemon while it ran"
                                                   : "in Slurm, not by the daemon");
        break;
    default:
        snprintf(ex->reason, sizeof ex->reason, "slurm job %lld %s; re-queued", id, state);
        break;
    }
}

/* End job j with its classified ending: drain its progress, call on_exit,
 * free it. state is Slurm's final state, or NULL for a job squeue no longer
 * lists (then the exit_code file decides). */
static void job_finish(slurm_job_t *j, const char *state) {
    slurm_t *sx = j->sx;
    executor_exit_t ex;
    char tail[REASON_TAIL + 1];
    memset(&ex, 0, sizeof ex);
    progress_read(j, 1);
    int code = read_exit_code(j);
    if (!state) state = code < 0 ? NULL : code == 0 ? "COMPLETED" : "FAILED";
    log_tail(j, tail, sizeof tail);
    if (!state) {
        ex.status = EXECUTOR_INTERRUPTED; /* gone without a trace: run it again */
        snprintf(ex.reason, sizeof ex.reason,
                 "slurm job %lld is no longer known to Slurm and left no exit code",
                 (long long)j->job_id);
    } else {
        slurm_state_map(state, &ex.status);
        job_reason(j, state, code, tail, &ex);
    }
    ex.exit_code = code;
    ex.result = ex.status == EXECUTOR_SUCCEEDED ? j->result : NULL;
    ex.wall_seconds = now_s(sx) - j->t_start;
    ex.garbage_lines = j->garbage_lines + j->lines.overlong;
    job_unlink(j);
    if (j->cb.on_exit) j->cb.on_exit(&ex, j->cb.user);
    job_free(j);
}

/* Leave the job running (daemon shutdown): reported from the zero timer. */
static void job_detach(slurm_job_t *j) {
    executor_exit_t ex;
    memset(&ex, 0, sizeof ex);
    ex.status = EXECUTOR_INTERRUPTED;
    ex.detached = 1;
    ex.exit_code = -1;
    ex.wall_seconds = now_s(j->sx) - j->t_start;
    if (j->job_id)
        snprintf(ex.reason, sizeof ex.reason, "slurm job %lld, %s", (long long)j->job_id,
                 j->state[0] ? j->state : "submitted");
    else
        snprintf(ex.reason, sizeof ex.reason, "slurm job %s, not listed yet", j->name);
    job_unlink(j);
    if (j->cb.on_exit) j->cb.on_exit(&ex, j->cb.user);
    job_free(j);
}

static void soon_cb(uv_timer_t *t) {
    slurm_t *sx = t->data;
    slurm_job_t *next;
    for (slurm_job_t *j = sx->jobs; j && !sx->closing; j = next) {
        next = j->next;
        if (j->detach_queued) job_detach(j);
    }
}

static void queue_detach(slurm_job_t *j) {
    j->detach_queued = 1;
    uv_timer_start(&j->sx->soon, soon_cb, 0, 0);
}

/* ------------------------------------------------------- slurmrestd client */

/* libcurl multi on the loop (curl_uv.h), as the hook drives it: finished
 * transfers are collected with curl_multi_info_read (rest_check_done). */

typedef void (*rest_done_fn)(slurm_t *sx, const cJSON *reply, const char *error, void *arg);

struct rest_req {
    slurm_t *sx;
    rest_req_t *next;
    CURL *easy;
    struct curl_slist *headers;
    char *body;
    bytebuf_t reply; /* capped at MAX_STDOUT; err NS_ERR_TOO_LARGE past it */
    rest_done_fn done;
    void *arg;
    char what[64]; /* "POST job/submit" */
    char curl_err[CURL_ERROR_SIZE];
};

static size_t rest_write_cb(char *data, size_t size, size_t nmemb, void *user) {
    rest_req_t *q = user;
    size_t n = size * nmemb;
    /* Past the cap or out of memory, curl aborts the transfer. */
    return bytebuf_append(&q->reply, data, n) == 0 ? n : 0;
}

static void rest_req_free(rest_req_t *q) {
    curl_slist_free_all(q->headers);
    free(q->body);
    bytebuf_free(&q->reply);
    free(q);
}

/* The error of a finished request, or "" when it succeeded (2xx, JSON, no
 * "errors"); *reply gets the parsed body (the caller deletes it). */
static void rest_outcome(rest_req_t *q, CURLcode rc, cJSON **reply, char *err, size_t errlen) {
    long status = 0;
    err[0] = '\0';
    *reply = NULL;
    curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK) {
        snprintf(err, errlen, "slurmrestd %s: %s", q->what,
                 q->reply.err == NS_ERR_TOO_LARGE ? "reply too large"
                 : q->curl_err[0]                 ? q->curl_err
                                                  : curl_easy_strerror(rc));
        return;
    }
    *reply = q->reply.data ? cJSON_Parse(q->reply.data) : NULL;
    const cJSON *errors = cJSON_GetObjectItemCaseSensitive(*reply, "errors");
    const cJSON *e0 = cJSON_GetArrayItem(errors, 0);
    if (e0) {
        const char *d = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e0, "description"));
        const char *e = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e0, "error"));
        snprintf(err, errlen, "slurmrestd %s: %s", q->what, d && *d ? d : e ? e : "error");
    } else if (status < 200 || status > 299) {
        snprintf(err, errlen, "slurmrestd %s: HTTP %ld", q->what, status);
    } else if (!cJSON_IsObject(*reply)) {
        snprintf(err, errlen, "slurmrestd %s: the reply is not a JSON object", q->what);
    }
}

/* curl_uv's progress callback. */
static void rest_check_done(void *arg) {
    slurm_t *sx = arg;
    CURLMsg *msg;
    int left;
    while (sx->multi && (msg = curl_multi_info_read(sx->multi, &left))) {
        if (msg->msg != CURLMSG_DONE) continue;
        rest_req_t *q = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&q);
        CURLcode rc = msg->data.result;
        char err[512];
        cJSON *reply;
        rest_outcome(q, rc, &reply, err, sizeof err);
        curl_multi_remove_handle(sx->multi, q->easy);
        curl_easy_cleanup(q->easy);
        for (rest_req_t **p = &sx->reqs; *p; p = &(*p)->next)
            if (*p == q) {
                *p = q->next;
                break;
            }
        if (q->done) q->done(sx, reply, err[0] ? err : NULL, q->arg);
        cJSON_Delete(reply);
        rest_req_free(q);
        if (sx->closing) return;
    }
}

/* Start METHOD BASE/slurm/v0.0.38/PATH with body (JSON text, borrowed; may be
 * NULL); done runs once with the parsed reply or the error. */
static int rest_start(slurm_t *sx, const char *method, const char *path, const char *body,
                      rest_done_fn done, void *arg, char *err, size_t errlen) {
    char url[2048], hdr[4400];
    rest_req_t *q = calloc(1, sizeof *q);
    if (!q || !(q->easy = curl_easy_init()) || (body && !(q->body = strdup(body)))) {
        if (q && q->easy) curl_easy_cleanup(q->easy);
        if (q) free(q->body);
        free(q);
        snprintf(err, errlen, "slurm: out of memory");
        return UV_ENOMEM;
    }
    q->sx = sx;
    bytebuf_init(&q->reply, MAX_STDOUT);
    q->done = done;
    q->arg = arg;
    snprintf(q->what, sizeof q->what, "%s %.50s", method, path);
    snprintf(url, sizeof url, "%s/slurm/v0.0.38/%s", sx->rest_base, path);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (h && sx->rest_user && sx->rest_token) { /* JWT: who the token is for */
        snprintf(hdr, sizeof hdr, "X-SLURM-USER-NAME: %s", sx->rest_user);
        h = curl_slist_append(h, hdr);
    }
    if (h && sx->rest_token) {
        snprintf(hdr, sizeof hdr, "X-SLURM-USER-TOKEN: %s", sx->rest_token);
        h = curl_slist_append(h, hdr);
    }
    q->headers = h;
    CURL *e = q->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    if (sx->rest_socket) curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, sx->rest_socket);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, q->headers);
    if (q->body) curl_easy_setopt(e, CURLOPT_POSTFIELDS, q->body);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, rest_write_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, q);
    curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)q);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, q->curl_err);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(sx->o.command_timeout_s * 1000.0));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    if (!h || curl_multi_add_handle(sx->multi, e) != CURLM_OK) {
        curl_easy_cleanup(e);
        rest_req_free(q);
        snprintf(err, errlen, "slurmrestd: cannot start a request");
        return UV_ENOMEM;
    }
    q->next = sx->reqs;
    sx->reqs = q;
    return 0;
}

/* ------------------------------------------------------------ transports */

/* What squeue or slurmrestd's job list says about one job. */
typedef struct {
    int64_t id;
    char state[32];
    char name[128];
} listing_t;

/* A state listing of the cluster's jobs (ours among them) arrived: update
 * every job, then end those that ended or are gone. */
static void apply_listing(slurm_t *sx, const listing_t *rows, size_t n) {
    for (slurm_job_t *j = sx->jobs; j; j = j->next) j->unseen++;
    for (size_t i = 0; i < n; i++) {
        for (slurm_job_t *j = sx->jobs; j; j = j->next) {
            if (j->submitting) continue;
            /* Attached by name: the newest job of that name wins. */
            if (j->by_name && !strcmp(rows[i].name, j->name) && rows[i].id > j->job_id)
                j->job_id = rows[i].id;
            if (j->job_id != rows[i].id) continue;
            j->unseen = 0;
            snprintf(j->state, sizeof j->state, "%s", rows[i].state);
        }
    }
    /* An ending may shut the daemon down (the executor closes): stop then. */
    slurm_job_t *next;
    for (slurm_job_t *j = sx->jobs; j && !sx->closing; j = next) {
        next = j->next;
        if (j->submitting || j->detach_queued) continue;
        if (j->by_name) {
            j->by_name = 0;
            if (j->job_id) {
                log_info("%s is slurm job %lld", j->name, (long long)j->job_id);
                if (j->cb.on_started) j->cb.on_started(0, j->job_id, j->cb.user);
                if (j->stop_req == EXECUTOR_CANCELLED) send_cancel(j); /* asked for meanwhile */
            } else {
                j->unseen = UNSEEN_LIMIT; /* never submitted: nothing to wait for */
            }
        }
        executor_status st;
        if (j->unseen == 0 && slurm_state_map(j->state, &st) == SLURM_ENDED)
            job_finish(j, j->state);
        else if (j->unseen >= UNSEEN_LIMIT)
            job_finish(j, NULL);
    }
}

/* sbatch or slurmrestd answered a submission: id > 0, or why it failed. */
static void job_submitted(slurm_job_t *j, int64_t id, const char *why) {
    j->submitting = 0;
    if (id <= 0) {
        executor_exit_t ex;
        memset(&ex, 0, sizeof ex);
        ex.status = j->stop_req == EXECUTOR_CANCELLED ? EXECUTOR_CANCELLED : EXECUTOR_FAILED;
        ex.exit_code = -1;
        snprintf(ex.reason, sizeof ex.reason, "not submitted: %s", why);
        job_unlink(j);
        if (j->cb.on_exit) j->cb.on_exit(&ex, j->cb.user);
        job_free(j);
        return;
    }
    j->job_id = id;
    j->unseen = 0;
    if (j->cb.on_started) j->cb.on_started(0, j->job_id, j->cb.user);
    if (j->stop_req == EXECUTOR_CANCELLED) send_cancel(j);
    if (j->stop_req == EXECUTOR_INTERRUPTED) queue_detach(j);
}

/* --- the commands */

static void scancel_done(slurm_t *sx, cmd_t *c, void *arg) {
    int64_t job_id = (int64_t)(intptr_t)arg;
    (void)sx;
    if (!cmd_ok(c)) {
        char why[512];
        cmd_failure(c, why, sizeof why);
        log_error("slurm job %lld: cancel failed: %s", (long long)job_id, why);
    }
}

static void sbatch_done(slurm_t *sx, cmd_t *c, void *arg) {
    char *end = NULL, why[512] = "";
    long long id = cmd_ok(c) ? strtoll(c->stdout_buf, &end, 10) : 0;
    (void)sx;
    if (id <= 0 || !end || (*end && *end != ';' && !isspace((unsigned char)*end))) {
        id = 0;
        cmd_failure(c, why, sizeof why);
    }
    job_submitted(arg, id, why);
}

/* One squeue line, "ID|STATE|NAME": 0 with the row, -1 if malformed. */
static int parse_squeue_line(const char *line, listing_t *row) {
    char *end;
    long long v = strtoll(line, &end, 10);
    if (end == line || *end != '|' || v <= 0) return -1;
    const char *state = end + 1, *bar = strchr(state, '|');
    if (!bar || (size_t)(bar - state) >= sizeof row->state) return -1;
    row->id = v;
    memcpy(row->state, state, (size_t)(bar - state));
    row->state[bar - state] = '\0';
    snprintf(row->name, sizeof row->name, "%s", bar + 1);
    return 0;
}

static void squeue_done(slurm_t *sx, cmd_t *c, void *arg) {
    (void)arg;
    sx->polling = 0;
    if (!cmd_ok(c)) {
        char why[512];
        cmd_failure(c, why, sizeof why);
        log_warn("slurm: %s (job states unchanged; asking again)", why);
        return;
    }
    size_t n = 0, cap = 0;
    listing_t *rows = NULL;
    for (char *line = c->stdout_buf, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        listing_t row;
        if (parse_squeue_line(line, &row) < 0) continue;
        if (n == cap) {
            listing_t *more = realloc(rows, (cap = cap ? 2 * cap : 64) * sizeof *rows);
            if (!more) {
                log_error("slurm: out of memory reading squeue");
                free(rows);
                return;
            }
            rows = more;
        }
        rows[n++] = row;
    }
    apply_listing(sx, rows, n);
    free(rows);
}

/* --- slurmrestd */

static void rest_cancel_done(slurm_t *sx, const cJSON *reply, const char *error, void *arg) {
    (void)sx, (void)reply;
    if (error) log_error("slurm job %lld: cancel failed: %s", (long long)(intptr_t)arg, error);
}

static void rest_submit_done(slurm_t *sx, const cJSON *reply, const char *error, void *arg) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(reply, "job_id");
    (void)sx;
    if (!error && (!cJSON_IsNumber(id) || id->valuedouble < 1))
        error = "slurmrestd job/submit: no job_id in the reply";
    job_submitted(arg, error ? 0 : (int64_t)id->valuedouble, error);
}

static void rest_jobs_done(slurm_t *sx, const cJSON *reply, const char *error, void *arg) {
    (void)arg;
    sx->polling = 0;
    if (error) {
        log_warn("slurm: %s (job states unchanged; asking again)", error);
        return;
    }
    const cJSON *jobs = cJSON_GetObjectItemCaseSensitive(reply, "jobs"), *o;
    size_t n = 0, cap = (size_t)cJSON_GetArraySize(jobs);
    listing_t *rows = cap ? calloc(cap, sizeof *rows) : NULL;
    if (cap && !rows) {
        log_error("slurm: out of memory reading the job list");
        return;
    }
    cJSON_ArrayForEach(o, jobs) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "job_id");
        const char *state = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "job_state"));
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "name"));
        const char *user = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "user_name"));
        if (!cJSON_IsNumber(id) || id->valuedouble < 1 || !state || !name) continue;
        if (sx->rest_user && user && strcmp(user, sx->rest_user) != 0) continue; /* as --me */
        rows[n].id = (int64_t)id->valuedouble;
        snprintf(rows[n].state, sizeof rows[n].state, "%s", state);
        snprintf(rows[n].name, sizeof rows[n].name, "%s", name);
        n++;
    }
    apply_listing(sx, rows, n);
    free(rows);
}

/* --- either */

static void send_cancel(slurm_job_t *j) {
    char id[32], err[256];
    if (j->scancel_sent || !j->job_id) return;
    j->scancel_sent = 1;
    snprintf(id, sizeof id, "%lld", (long long)j->job_id);
    int rc;
    if (j->sx->multi) {
        char path[48];
        snprintf(path, sizeof path, "job/%s", id);
        rc = rest_start(j->sx, "DELETE", path, NULL, rest_cancel_done, (void *)(intptr_t)j->job_id,
                        err, sizeof err);
    } else {
        char *argv[] = {"scancel", id, NULL};
        rc = cmd_run(j->sx, argv, scancel_done, (void *)(intptr_t)j->job_id, err, sizeof err);
    }
    if (rc < 0) log_error("slurm job %lld: %s", (long long)j->job_id, err);
    j->sx->last_poll_s = 0; /* ask for the states at the next tick */
}

static void poll_jobs(slurm_t *sx) {
    char err[256];
    int rc;
    sx->last_poll_s = now_s(sx);
    if (sx->multi) {
        rc = rest_start(sx, "GET", "jobs", NULL, rest_jobs_done, NULL, err, sizeof err);
    } else {
        char *argv[] = {"squeue", "--me", "--noheader", "--states=all", "--format=%i|%T|%j", NULL};
        rc = cmd_run(sx, argv, squeue_done, NULL, err, sizeof err);
    }
    if (rc < 0) {
        log_warn("slurm: %s", err);
        return;
    }
    sx->polling = 1;
}

static void tick_cb(uv_timer_t *t) {
    slurm_t *sx = t->data;
    int want_poll = 0;
    for (slurm_job_t *j = sx->jobs; j; j = j->next) {
        if (j->submitting || j->detach_queued) continue;
        if (j->job_id) progress_read(j, 0);
        want_poll = 1;
    }
    if (want_poll && !sx->polling && now_s(sx) - sx->last_poll_s >= sx->o.poll_s) poll_jobs(sx);
}

/* A job for run r in the list, with its paths; NULL when out of memory. */
static slurm_job_t *job_new(slurm_t *sx, const executor_run_t *r, const executor_callbacks_t *cb) {
    slurm_job_t *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->sx = sx;
    j->cb = *cb;
    bytebuf_init(&j->lines.line, MAX_LINE);
    j->id = r->id;
    j->stop_req = -1;
    j->t_start = now_s(sx);
    j->time_minutes = slurm_time_minutes(r->budget_s, r->slack_s);
    j->memory_mb = r->memory_mb;
    snprintf(j->name, sizeof j->name, "%s-%lld", sx->prefix, (long long)r->id);
    size_t n = strlen(r->run_dir) + 32;
    j->run_dir = strdup(r->run_dir);
    j->progress_path = malloc(n);
    j->exit_path = malloc(n);
    j->log_path = strdup(r->log_path);
    if (!j->run_dir || !j->progress_path || !j->exit_path || !j->log_path) {
        job_free(j);
        return NULL;
    }
    snprintf(j->progress_path, n, "%s/progress.jsonl", r->run_dir);
    snprintf(j->exit_path, n, "%s/exit_code", r->run_dir);
    j->next = sx->jobs;
    sx->jobs = j;
    return j;
}

static int slurm_start(executor_t *x, const executor_run_t *r, const executor_callbacks_t *cb,
                       executor_job_t **out, char *err, size_t errlen) {
    slurm_t *sx = (slurm_t *)x;
    char script_path[PATH_MAX + 16], buf[8192];
    char *argv[96];
    char *script = slurm_job_script(r);
    slurm_job_t *j = script ? job_new(sx, r, cb) : NULL;
    if (!j) {
        free(script);
        snprintf(err, errlen, "slurm: out of memory");
        return UV_ENOMEM;
    }
    /* A new attempt: what an earlier one left must not be read as this one's. */
    unlink(j->progress_path);
    unlink(j->exit_path);
    snprintf(script_path, sizeof script_path, "%s/job.sh", r->run_dir);
    int rc = util_write_file_atomic(script_path, script, strlen(script), err, errlen);
    if (rc < 0) goto fail;
    if (sx->multi) {
        char **env = command_env();
        cJSON *body = env ? slurm_rest_job(&sx->o, r, script, env) : NULL;
        char *text = body ? cJSON_PrintUnformatted(body) : NULL;
        cJSON_Delete(body);
        free(env);
        if (!text) {
            snprintf(err, errlen, "slurm: out of memory");
            rc = UV_ENOMEM;
            goto fail;
        }
        rc = rest_start(sx, "POST", "job/submit", text, rest_submit_done, j, err, errlen);
        free(text);
        if (rc < 0) goto fail;
    } else {
        if (slurm_sbatch_argv(&sx->o, r, script_path, argv, 96, buf, sizeof buf) < 0) {
            snprintf(err, errlen, "slurm: too many sbatch options");
            rc = UV_E2BIG;
            goto fail;
        }
        if ((rc = cmd_run(sx, argv, sbatch_done, j, err, errlen)) < 0) goto fail;
    }
    free(script);
    j->submitting = 1;
    *out = (executor_job_t *)j;
    return 0;
fail:
    free(script);
    job_unlink(j);
    job_free(j);
    return rc < 0 ? rc : -1;
}

static int slurm_attach(executor_t *x, const executor_run_t *r, int64_t slurm_job_id,
                        const executor_callbacks_t *cb, executor_job_t **out, char *err,
                        size_t errlen) {
    slurm_t *sx = (slurm_t *)x;
    slurm_job_t *j = job_new(sx, r, cb);
    if (!j) {
        snprintf(err, errlen, "slurm: out of memory");
        return UV_ENOMEM;
    }
    j->job_id = slurm_job_id > 0 ? slurm_job_id : 0;
    j->by_name = j->job_id == 0;
    sx->last_poll_s = 0; /* learn its state at the next tick */
    *out = (executor_job_t *)j;
    return 0;
}

static void slurm_stop(executor_job_t *job, executor_status why) {
    slurm_job_t *j = (slurm_job_t *)job;
    if (j->stop_req >= 0 || j->detach_queued) return;
    j->stop_req = why == EXECUTOR_INTERRUPTED ? EXECUTOR_INTERRUPTED : EXECUTOR_CANCELLED;
    if (j->submitting) return; /* sbatch_done acts on it */
    if (j->stop_req == EXECUTOR_INTERRUPTED)
        queue_detach(j);
    else if (j->job_id)
        send_cancel(j);
    /* by name without an id yet: the next squeue finds it, or finds nothing */
}

static void slurm_describe(const executor_job_t *job, cJSON *o) {
    const slurm_job_t *j = (const slurm_job_t *)job;
    if (j->job_id)
        cJSON_AddNumberToObject(o, "slurm_job_id", (double)j->job_id);
    else
        cJSON_AddNullToObject(o, "slurm_job_id");
    cJSON_AddStringToObject(o, "slurm_state",
                            j->state[0]     ? j->state
                            : j->submitting ? "SUBMITTING"
                                            : "UNKNOWN");
}

static void maybe_free_executor(slurm_t *sx) {
    if (!sx->closing || sx->open_handles > 0) return;
    for (slurm_job_t *j = sx->jobs, *next; j; j = next) {
        next = j->next;
        job_free(j);
    }
    free(sx->partition);
    free(sx->account);
    free(sx->prefix);
    if (sx->sbatch_args)
        for (int i = 0; sx->sbatch_args[i]; i++) free(sx->sbatch_args[i]);
    free(sx->sbatch_args);
    free(sx->rest_base);
    free(sx->rest_socket);
    free(sx->rest_user);
    free(sx->rest_token);
    if (sx->curl_inited) curl_global_cleanup();
    free(sx);
}

static void curl_closed(void *arg) {
    slurm_t *sx = arg;
    sx->open_handles--;
    maybe_free_executor(sx);
}

static void timer_close_cb(uv_handle_t *h) {
    slurm_t *sx = h->data;
    sx->open_handles--;
    maybe_free_executor(sx);
}

/* Commands still running are killed and forgotten (their outcome is not
 * needed any more); jobs left are freed without a callback. */
static void slurm_free(executor_t *x) {
    slurm_t *sx = (slurm_t *)x;
    sx->closing = 1;
    for (cmd_t *c = sx->cmds, *next; c; c = next) {
        next = c->next;
        c->done = NULL;
        if (!c->exited) uv_process_kill(&c->proc, SIGKILL);
        cmd_close(c);
    }
    if (sx->multi) {
        while (sx->reqs) {
            rest_req_t *q = sx->reqs;
            sx->reqs = q->next;
            curl_multi_remove_handle(sx->multi, q->easy);
            curl_easy_cleanup(q->easy);
            rest_req_free(q);
        }
        curl_uv_close(sx->curl, curl_closed, sx);
        sx->curl = NULL;
        sx->multi = NULL;
    }
    uv_close((uv_handle_t *)&sx->tick, timer_close_cb);
    uv_close((uv_handle_t *)&sx->soon, timer_close_cb);
}

/* slurmrestd: "unix:/path" or "http(s)://host:port[/]" into the base URL and
 * the socket path; the user (for the listing and, with a token, the header). */
static int rest_init(slurm_t *sx, const slurm_opts_t *o, char *err, size_t errlen) {
    const char *url = o->rest_url;
    if (!strncmp(url, "unix:", 5)) {
        if (url[5] != '/') {
            snprintf(err, errlen, "slurm-rest: want unix:/absolute/path or http://host:port");
            return -1;
        }
        sx->rest_socket = strdup(url + 5);
        sx->rest_base = strdup("http://localhost");
        if (!sx->rest_socket || !sx->rest_base) goto oom;
    } else if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8)) {
        size_t n = strlen(url);
        while (n > 0 && url[n - 1] == '/') n--;
        if (!(sx->rest_base = strndup(url, n))) goto oom;
    } else {
        snprintf(err, errlen, "slurm-rest: want unix:/absolute/path or http://host:port, not '%s'",
                 url);
        return -1;
    }
    const char *user = o->rest_user;
    struct passwd *pw = user ? NULL : getpwuid(geteuid());
    if (!user && pw) user = pw->pw_name;
    if (user && !(sx->rest_user = strdup(user))) goto oom;
    if (o->rest_token && *o->rest_token && !(sx->rest_token = strdup(o->rest_token))) goto oom;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(err, errlen, "slurm: curl_global_init failed");
        return -1;
    }
    sx->curl_inited = 1;
    if (!(sx->curl = curl_uv_new(sx->loop, rest_check_done, sx))) goto oom;
    sx->multi = curl_uv_multi(sx->curl);
    sx->open_handles++;
    return 0;
oom:
    snprintf(err, errlen, "slurm: out of memory");
    return -1;
}

executor_t *slurm_executor_new(uv_loop_t *loop, const slurm_opts_t *o, char *err, size_t errlen) {
    slurm_t *sx = calloc(1, sizeof *sx);
    if (!sx) goto oom;
    sx->loop = loop;
    sx->o = *o;
    sx->partition = o->partition ? strdup(o->partition) : NULL;
    sx->account = o->account ? strdup(o->account) : NULL;
    sx->prefix = strdup(o->job_prefix && *o->job_prefix ? o->job_prefix : SLURM_DEFAULT_PREFIX);
    size_t n = 0;
    while (o->sbatch_args && o->sbatch_args[n]) n++;
    sx->sbatch_args = calloc(n + 1, sizeof *sx->sbatch_args);
    int bad = !sx->prefix || !sx->sbatch_args || (o->partition && !sx->partition) ||
              (o->account && !sx->account);
    for (size_t i = 0; !bad && i < n; i++) bad = !(sx->sbatch_args[i] = strdup(o->sbatch_args[i]));
    if (bad) snprintf(err, errlen, "slurm: out of memory");
    if (!bad && o->rest_url && n > 0) {
        snprintf(err, errlen, "sbatch options need the commands, not slurmrestd");
        bad = 1;
    }
    if (!bad && o->rest_url && rest_init(sx, o, err, errlen) < 0) bad = 1;
    if (bad) {
        if (sx->curl) {
            sx->closing = 1;
            curl_uv_close(sx->curl, curl_closed, sx);
            sx->curl = NULL;
            sx->multi = NULL;
        } else {
            sx->closing = 1;
            maybe_free_executor(sx);
        }
        return NULL;
    }
    sx->o.partition = sx->partition;
    sx->o.account = sx->account;
    sx->o.job_prefix = sx->prefix;
    sx->o.sbatch_args = sx->sbatch_args;
    sx->o.rest_url = sx->o.rest_user = sx->o.rest_token = NULL; /* kept in sx->rest_* */
    if (!(sx->o.poll_s > 0)) sx->o.poll_s = SLURM_DEFAULT_POLL_S;
    if (!(sx->o.tail_s > 0)) sx->o.tail_s = DEFAULT_TAIL_S;
    if (!(sx->o.command_timeout_s > 0)) sx->o.command_timeout_s = DEFAULT_CMD_TIMEOUT;
    sx->x = (executor_t){.name = "slurm",
                         .start = slurm_start,
                         .attach = slurm_attach,
                         .stop = slurm_stop,
                         .describe = slurm_describe,
                         .free = slurm_free};
    uv_timer_init(loop, &sx->tick);
    uv_timer_init(loop, &sx->soon);
    sx->tick.data = sx->soon.data = sx;
    sx->open_handles += 2;
    uint64_t ms = (uint64_t)(sx->o.tail_s * 1000.0);
    uv_timer_start(&sx->tick, tick_cb, ms ? ms : 1, ms ? ms : 1);
    return &sx->x;
oom:
    snprintf(err, errlen, "slurm: out of memory");
    return NULL;
}

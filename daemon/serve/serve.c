/* serve.c - `nightshift serve`: the daemon. Options and config file, the
 * state-directory lock, the store, the scheduler, the HTTP API, signals and an
 * orderly shutdown, all on one libuv loop.
 *
 * Shutdown (SIGTERM or SIGINT): stop accepting connections, stop the workers
 * (SIGTERM, SIGKILL after the grace), record them as interrupted and queue them
 * again, flush, close every handle, exit 0. With --executor slurm the batch
 * jobs keep running instead, and the next daemon re-attaches to them. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/serve/api.h"
#include "daemon/serve/events.h"
#include "daemon/serve/mcp_http.h"
#include "daemon/serve/metrics.h"
#include "daemon/hook/hook.h"
#include "daemon/shared/http.h"
#include "daemon/shared/log.h"
#include "daemon/shared/opts.h"
#include "daemon/shared/origin.h"
#include "daemon/exec/sched.h"
#include "daemon/exec/slots.h"
#include "daemon/serve/serve.h"
#include "daemon/exec/slurm.h"
#include "daemon/exec/worker.h"
#include "daemon/store/store.h"
#include "engine/cost.h"
#include "engine/util.h"

#define MAX_TOKEN             256
#define MAX_SECRET            1024 /* bytes of the agent hook's HMAC key */
#define MAX_JWT               4096 /* bytes of a slurmrestd token */
#define FILES_CHECK_MS        1000 /* how often the store's files are checked */
#define SLURM_DEFAULT_THREADS 2    /* cpus-per-task when neither spec nor option says */

/* The options (the table below names each one once). */
typedef struct {
    char dir[PATH_MAX];
    char host[256];
    int port;
    int slots, threads_per_slot, memory_mb, max_attempts;
    double deadline_slack_s, kill_grace_s;
    int prune, prune_startup; /* SCHED_PRUNE_*; runs to compare against first */
    double prune_warmup;      /* progress before pruning */
    double token_run_limit_s; /* deadline of a token-budgeted run */
    int asha_eta, asha_rungs; /* --prune asha's ladder (sched.h) */
    char dataset[64];         /* pins the scoped queries' dataset; "" = the latest result's */
    char token[MAX_TOKEN + 1];
    /* More names the daemon answers to, and origins whose pages may call it
     * (origin.h); comma-separated, each option may be repeated. */
    char allowed_hosts[2048], allowed_origins[2048];
    char *worker_cmd[33]; /* test hook: a stand-in worker program and its arguments */
    char worker_cmd_buf[1024];
    char agent_url[1024]; /* "" = no agent hook */
    char agent_secret[MAX_SECRET + 1];
    int agent_rate; /* accepted agent proposals per minute; 0 = no limit */
    /* --executor slurm: where and how runs become batch jobs (slurm.h) */
    int slurm;
    char slurm_partition[128], slurm_account[128], slurm_job_prefix[64];
    char *sbatch_args[33];
    char sbatch_args_buf[1024];
    double slurm_poll_s;
    char slurm_rest[1024], slurm_user[64];
    char slurm_token[MAX_JWT + 1];
} serve_opts_t;

typedef struct {
    uv_loop_t loop;
    serve_opts_t o;
    store_t *store;
    sched_t *sched;
    http_server_t *http;
    core_t core; /* the daemon's rules (core.h), which the API and the hook adapt */
    api_t api;
    hook_t *hook;            /* NULL without --agent-url, and once closed */
    events_hub_t *events;    /* the SSE streams of GET /v1/events/stream */
    mcp_http_t *mcp;         /* /mcp, the MCP endpoint (mcp_http.h) */
    metrics_t *metrics;      /* GET /metrics and its in-memory counters (metrics.h) */
    origin_policy_t *origin; /* the Host and Origin rules of every request */
    executor_t *executor;    /* --executor slurm; NULL = the scheduler's local one */
    uv_signal_t sigint, sigterm;
    uv_timer_t files; /* store_check_files every FILES_CHECK_MS */
    int lock_fd, dir_lock_fd;
    int stopping;
} daemon_t;

/* ------------------------------------------------------------------ options */

/* A token or secret from a file (trailing newlines and spaces dropped) into
 * out, which holds max characters. */
static int read_secret_file(const char *path, const char *what, char *out, int max, char *err,
                            size_t errlen) {
    size_t len;
    char *text = util_read_secret(path, 4096, &len, err, errlen);
    if (!text) return -1;
    int rc = 0;
    if (len == 0 || len > (size_t)max) {
        snprintf(err, errlen, "%s: the %s must be 1 to %d characters", path, what, max);
        rc = -1;
    } else {
        snprintf(out, (size_t)max + 1, "%s", text);
    }
    free(text);
    return rc;
}

/* Split cmd at spaces into words (at most 32, NULL-terminated) kept in buf. */
static int split_words(const char *what, const char *cmd, char *buf, size_t len, char **words,
                       char *err, size_t errlen) {
    snprintf(buf, len, "%s", cmd);
    int n = 0;
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        if (n == 32) {
            snprintf(err, errlen, "--%s: too many words", what);
            return -1;
        }
        words[n++] = tok;
    }
    words[n] = NULL;
    return 0;
}

/* The setters of the rows whose values are not plain. */

static int set_listen(void *o, const char *val, char *err, size_t errlen) {
    serve_opts_t *so = o;
    return http_parse_listen(val, so->host, sizeof so->host, &so->port, err, errlen);
}

static int set_token_file(void *o, const char *val, char *err, size_t errlen) {
    return read_secret_file(val, "token", ((serve_opts_t *)o)->token, MAX_TOKEN, err, errlen);
}

static int set_agent_secret_file(void *o, const char *val, char *err, size_t errlen) {
    return read_secret_file(val, "agent secret", ((serve_opts_t *)o)->agent_secret, MAX_SECRET, err,
                            errlen);
}

static int set_slurm_token_file(void *o, const char *val, char *err, size_t errlen) {
    return read_secret_file(val, "slurmrestd token", ((serve_opts_t *)o)->slurm_token, MAX_JWT, err,
                            errlen);
}

static int set_worker_cmd(void *o, const char *val, char *err, size_t errlen) {
    serve_opts_t *so = o;
    return split_words("worker-cmd", val, so->worker_cmd_buf, sizeof so->worker_cmd_buf,
                       so->worker_cmd, err, errlen);
}

static int set_sbatch_args(void *o, const char *val, char *err, size_t errlen) {
    serve_opts_t *so = o;
    return split_words("sbatch-args", val, so->sbatch_args_buf, sizeof so->sbatch_args_buf,
                       so->sbatch_args, err, errlen);
}

static int set_job_prefix(void *o, const char *val, char *err, size_t errlen) {
    serve_opts_t *so = o;
    for (const char *p = val; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.') {
            snprintf(err, errlen, "slurm-job-prefix: letters, digits, '-', '_', '.' only");
            return -1;
        }
    if (!*val || strlen(val) >= sizeof so->slurm_job_prefix) {
        snprintf(err, errlen, "slurm-job-prefix: 1 to %zu characters",
                 sizeof so->slurm_job_prefix - 1);
        return -1;
    }
    snprintf(so->slurm_job_prefix, sizeof so->slurm_job_prefix, "%s", val);
    return 0;
}

/* --slots N, or auto: OPT_AUTO, worked out in serve_main (daemon/exec/slots.h). */
static int set_slots(void *o, const char *val, char *err, size_t errlen) {
    serve_opts_t *so = o;
    char *end;
    long v = strtol(val, &end, 10);
    if (!strcmp(val, "auto")) {
        so->slots = OPT_AUTO;
    } else if (*end || end == val || v < 1 || v > 1 << 20) {
        snprintf(err, errlen, "slots: expected auto or an integer from 1, got '%s'", val);
        return -1;
    } else {
        so->slots = (int)v;
    }
    return 0;
}

/* Append val to the comma-separated list in out (size len). */
static int add_to_list(const char *key, const char *val, char *out, size_t len, char *err,
                       size_t errlen) {
    size_t n = strlen(out);
    if (!*val || n + strlen(val) + 2 > len)
        return util_errorf(err, errlen, "%s: 1 to %zu characters in all", key, len - 2);
    snprintf(out + n, len - n, "%s%s", n ? "," : "", val);
    return 0;
}

static int set_allowed_host(void *o, const char *val, char *err, size_t errlen) {
    serve_opts_t *so = o;
    return add_to_list("allowed-host", val, so->allowed_hosts, sizeof so->allowed_hosts, err,
                       errlen);
}

static int set_allowed_origin(void *o, const char *val, char *err, size_t errlen) {
    serve_opts_t *so = o;
    return add_to_list("allowed-origin", val, so->allowed_origins, sizeof so->allowed_origins, err,
                       errlen);
}

static const char *const prune_names[] = {"off", "median", "asha", NULL}; /* SCHED_PRUNE_* */
static const char *const executor_names[] = {"local", "slurm", NULL};

#define FIELD(m) .offset = offsetof(serve_opts_t, m)
#define TEXT(m)  FIELD(m), .size = sizeof((serve_opts_t *)0)->m
#define BIG      (1 << 20)
#define SECONDS  1e9 /* longer than any deadline means */

/* Every option of serve, in the order of its help. */
static const opt_t serve_rows[] = {
    {"dir", OPT_STRING, TEXT(dir), .sdef = "state", .arg = "DIR",
     .help = "the state directory: nightshift.db, datasets/, runs/"},
    {"listen", OPT_CUSTOM, .set = set_listen, .sdef = "127.0.0.1:8080", .arg = "HOST:PORT",
     .help = "the HTTP API's address (port 0 picks a free port and prints it)"},
    {"slots", OPT_CUSTOM, .set = set_slots, .sdef = "1", .arg = "N|auto",
     .help = "experiments run at once (with --executor slurm: jobs in Slurm at once); auto: "
             "slots and their threads from the CPUs, the memory and the default spec's size "
             "(README: Slots)"},
    {"threads-per-slot", OPT_INT, FIELD(threads_per_slot), .lo = 1, .hi = BIG, .def = OPT_AUTO,
     .arg = "N",
     .help = "a run's threads when its spec does not say (default the slot's share of the CPUs; "
             "2 with --executor slurm)"},
    {"memory-mb", OPT_INT, FIELD(memory_mb), .lo = 0, .hi = BIG, .def = OPT_AUTO, .arg = "N",
     .help = "a run's memory limit when its spec does not say; 0 = none (default 75% of RAM "
             "shared among the slots; none with --executor slurm)"},
    {"max-attempts", OPT_INT, FIELD(max_attempts), .lo = 1, .hi = BIG, .def = 3, .arg = "N",
     .help = "attempts of a run the daemon's stop interrupted"},
    {"deadline-slack", OPT_NUM, FIELD(deadline_slack_s), .lo = 0, .hi = SECONDS,
     .flags = OPT_LO_OPEN, .def = SCHED_DEFAULT_DEADLINE_SLACK_S, .arg = "S",
     .help = "seconds for startup and evaluation: a run is killed at budget * 1.25 + S"},
    {"kill-grace", OPT_NUM, FIELD(kill_grace_s), .lo = 0, .hi = SECONDS, .flags = OPT_LO_OPEN,
     .def = SCHED_DEFAULT_KILL_GRACE_S, .arg = "S", .help = "seconds from SIGTERM to SIGKILL"},
    {"token", OPT_STRING, TEXT(token), .flags = OPT_SECRET, .env = "NIGHTSHIFT_TOKEN", .arg = "T",
     .help = "the API token: every POST needs it; off loopback every GET but /healthz too "
             "(also $NIGHTSHIFT_TOKEN)"},
    {"token-file", OPT_CUSTOM, .set = set_token_file, .arg = "F",
     .help = "the API token from a file"},
    {"allowed-host", OPT_CUSTOM, .set = set_allowed_host, .arg = "NAME",
     .help = "one more name the daemon answers to in Host, beside loopback names and addresses "
             "and the --listen address (a reverse proxy's); may be repeated or a list"},
    {"allowed-origin", OPT_CUSTOM, .set = set_allowed_origin, .arg = "URL",
     .help = "a web origin (https://HOST[:PORT]) whose pages may call the API, with CORS "
             "headers; may be repeated or a list"},
    {"agent-url", OPT_STRING, TEXT(agent_url), .arg = "URL",
     .help = "POST every finished experiment and an empty queue to the agent there"},
    {"agent-secret", OPT_STRING, TEXT(agent_secret), .flags = OPT_SECRET,
     .env = "NIGHTSHIFT_AGENT_SECRET", .arg = "S",
     .help = "the webhook signature's secret (HMAC-SHA256, Standard Webhooks; also "
             "$NIGHTSHIFT_AGENT_SECRET)"},
    {"agent-secret-file", OPT_CUSTOM, .set = set_agent_secret_file, .arg = "F",
     .help = "the webhook secret from a file"},
    {"agent-rate", OPT_INT, FIELD(agent_rate), .lo = 0, .hi = BIG, .def = HOOK_PROPOSALS_PER_MIN,
     .arg = "N", .help = "agent proposals accepted a minute; 0 = no limit"},
    {"prune", OPT_ENUM, FIELD(prune), .names = prune_names, .def = SCHED_PRUNE_OFF,
     .arg = "median|asha|off",
     .help = "median: stop runs whose loss lags the median of finished runs; asha: successive "
             "halving over budgets (README: Pruning)"},
    {"prune-startup", OPT_INT, FIELD(prune_startup), .lo = 1, .hi = BIG,
     .def = SCHED_DEFAULT_PRUNE_STARTUP, .arg = "N",
     .help = "finished runs of the scope before any run is pruned"},
    {"prune-warmup", OPT_NUM, FIELD(prune_warmup), .lo = 0, .hi = 1,
     .flags = OPT_LO_OPEN | OPT_HI_OPEN, .def = SCHED_DEFAULT_PRUNE_WARMUP, .arg = "F",
     .help = "the fraction of its budget before a run may be pruned"},
    {"asha-eta", OPT_INT, FIELD(asha_eta), .lo = 2, .hi = 100, .def = SCHED_DEFAULT_ASHA_ETA,
     .arg = "N", .help = "--prune asha: the top 1/N of a rung is promoted; rungs N times apart"},
    {"asha-rungs", OPT_INT, FIELD(asha_rungs), .lo = 1, .hi = SCHED_MAX_ASHA_RUNGS,
     .def = SCHED_DEFAULT_ASHA_RUNGS, .arg = "N",
     .help = "--prune asha: budgets B/eta^(N-1) .. B/eta, B for a spec of budget B"},
    {"token-run-limit", OPT_NUM, FIELD(token_run_limit_s), .lo = 0, .hi = SECONDS,
     .flags = OPT_LO_OPEN, .def = SCHED_DEFAULT_TOKEN_RUN_LIMIT_S, .arg = "S",
     .help = "seconds before a token-budgeted run is killed as a timeout"},
    {"dataset", OPT_STRING, TEXT(dataset), .arg = "NAME",
     .help = "the leaderboard's, best's and noise's dataset when a request names none "
             "(default: the latest result's)"},
    {"executor", OPT_ENUM, FIELD(slurm), .names = executor_names, .def = 0, .arg = "local|slurm",
     .help = "where runs execute"},
    {"slurm-partition", OPT_STRING, TEXT(slurm_partition), .arg = "P",
     .help = "the jobs' partition (default the cluster's)"},
    {"slurm-account", OPT_STRING, TEXT(slurm_account), .arg = "A",
     .help = "the jobs' account (default the user's)"},
    {"sbatch-args", OPT_CUSTOM, .set = set_sbatch_args, .arg = "'OPT ...'",
     .help = "more sbatch options for every job"},
    {"slurm-job-prefix", OPT_CUSTOM, .set = set_job_prefix, .sdef = SLURM_DEFAULT_PREFIX,
     .arg = "NAME", .help = "jobs are named NAME-<id>"},
    {"slurm-poll", OPT_NUM, FIELD(slurm_poll_s), .lo = 0, .hi = SECONDS, .flags = OPT_LO_OPEN,
     .def = SLURM_DEFAULT_POLL_S, .arg = "S", .help = "seconds between asking Slurm for states"},
    {"slurm-rest", OPT_STRING, TEXT(slurm_rest), .arg = "URL",
     .help = "talk to slurmrestd (http://HOST:PORT or unix:/PATH) instead of the commands"},
    {"slurm-user", OPT_STRING, TEXT(slurm_user), .arg = "U",
     .help = "the jobs' user with --slurm-rest (default this one)"},
    {"slurm-token-file", OPT_CUSTOM, .set = set_slurm_token_file, .arg = "F",
     .help = "slurmrestd's JWT (default $SLURM_JWT)"},
    {"worker-cmd", OPT_CUSTOM, .set = set_worker_cmd, .arg = "'CMD ...'",
     .help = "run this program instead of `nightshift train` (tests)"},
};

static const opt_table_t serve_options = {
    .program = "serve",
    .rows = serve_rows,
    .n = sizeof serve_rows / sizeof serve_rows[0],
    .about = "Runs the daemon: a queue of experiments in DIR/nightshift.db, workers in\n"
             "DIR/runs/<id>/ under a memory limit (a spec's resources.memory_mb, else\n"
             "--memory-mb), and the HTTP API. A non-loopback --listen needs a token.\n"
             "With --agent-url, every finished experiment and an empty queue are POSTed\n"
             "to the agent, signed with the secret; its reply may propose the next specs.\n"
             "--prune median stops a run whose training loss, at --prune-warmup of its\n"
             "budget or at two evenly spaced points after it, is worse than the median of\n"
             "finished runs of its scope at the same progress, once --prune-startup of\n"
             "them have finished; it is recorded as pruned (a spec with \"prune\": false\n"
             "never is). --prune asha queues each submission at the lowest rung's budget\n"
             "and promotes the top 1/--asha-eta of each rung to the next (README: Pruning).\n"
             "val_bpb is ranked within one scope (a dataset, budget and\n"
             "evaluation): the leaderboard, best and noise answer for the scope a request\n"
             "names, what it leaves out taken from the latest result.\n"
             "--executor slurm submits every run as a Slurm batch job (sbatch, squeue and\n"
             "scancel from PATH, or slurmrestd with --slurm-rest; DIR must be shared with\n"
             "the compute nodes); a restarted daemon re-attaches to the jobs still running.\n",
};

static int parse_args(int argc, char **argv, serve_opts_t *o, char *err, size_t errlen) {
    int rc = opts_parse(&serve_options, o, argc, argv, err, errlen);
    if (rc != 0) return rc;
    /* slurmrestd's token from the environment, when one is needed */
    const char *jwt = getenv("SLURM_JWT");
    if (o->slurm_rest[0] && !o->slurm_token[0] && jwt && *jwt) {
        if (strlen(jwt) > MAX_JWT) {
            snprintf(err, errlen, "SLURM_JWT: 1 to %d characters", MAX_JWT);
            return -1;
        }
        snprintf(o->slurm_token, sizeof o->slurm_token, "%s", jwt);
    }
    if (o->agent_url[0] && !o->agent_secret[0]) {
        snprintf(err, errlen,
                 "--agent-url needs --agent-secret-file (or $NIGHTSHIFT_AGENT_SECRET)");
        return -1;
    }
    /* Read: no process the daemon starts (a worker, a Slurm command, the
     * floor's measurement) gets them; every spawn also filters them
     * (executor_env_is_secret). */
    unsetenv("NIGHTSHIFT_TOKEN");
    unsetenv("NIGHTSHIFT_AGENT_SECRET");
    return 0;
}

/* ------------------------------------------------------------------ daemon */

/* An exclusive lock on the state directory itself for the daemon's
 * lifetime, and on DIR/nightshift.lock (which holds the pid, for people).
 * The file alone could be deleted under a running daemon, and a second one
 * then started on the same directory, re-queued the first one's runs and ran
 * them again in the same run directories; a directory with a database in it
 * cannot be deleted. Where directories cannot be locked (NFS, which emulates
 * flock with write locks) the file is the lock, as before, and a warning says
 * so. */
static int lock_dir(daemon_t *d, char *err, size_t errlen) {
    char path[PATH_MAX + 32];
    d->dir_lock_fd = open(d->o.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d->dir_lock_fd < 0)
        return util_errorf(err, errlen, "%.400s: %s", d->o.dir, strerror(errno));
    if (flock(d->dir_lock_fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        close(d->dir_lock_fd);
        d->dir_lock_fd = -1;
        if (e == EWOULDBLOCK)
            return util_errorf(
                err, errlen, "another nightshift daemon is using %.200s (the directory is locked)",
                d->o.dir);
        log_warn("%s: the directory cannot be locked (%s); nightshift.lock is the only lock",
                 d->o.dir, strerror(e));
    }
    snprintf(path, sizeof path, "%s/nightshift.lock", d->o.dir);
    d->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (d->lock_fd < 0) {
        snprintf(err, errlen, "%.400s: %s", path, strerror(errno));
        return -1;
    }
    if (flock(d->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        snprintf(err, errlen, "another nightshift daemon is using %.200s (%.240s is locked)",
                 d->o.dir, path);
        close(d->lock_fd);
        d->lock_fd = -1;
        return -1;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(d->lock_fd, 0) == 0 && write(d->lock_fd, pid, (size_t)n) != n) {
        /* the pid is informational only */
    }
    return 0;
}

static void close_signal_cb(uv_handle_t *h) {
    (void)h;
}

static void workers_stopped_cb(void *arg) {
    daemon_t *d = arg;
    log_info("all workers stopped");
    sched_free(d->sched);
    d->sched = NULL;
    if (d->executor) d->executor->free(d->executor);
    d->executor = NULL;
    uv_close((uv_handle_t *)&d->sigint, close_signal_cb);
    uv_close((uv_handle_t *)&d->sigterm, close_signal_cb);
    uv_close((uv_handle_t *)&d->files, close_signal_cb);
}

/* Stop (a signal, or a store that can no longer keep what it is told). */
static void shut_down(daemon_t *d, const char *why) {
    if (d->stopping) {
        log_warn("%s again: still waiting for workers to exit", why);
        return;
    }
    d->stopping = 1;
    log_info("%s: shutting down (%s)", why,
             d->o.slurm ? "slurm jobs keep running; the next daemon re-attaches to them"
                        : "running workers are interrupted and re-queued");
    events_hub_close(d->events);
    d->events = d->api.events = NULL;
    http_server_close(d->http, NULL, NULL);
    d->http = NULL;
    hook_close(d->hook, NULL, NULL);
    d->hook = NULL;
    sched_shutdown(d->sched, workers_stopped_cb, d);
}

static void signal_cb(uv_signal_t *h, int signum) {
    shut_down(h->data, signum == SIGINT ? "SIGINT" : "SIGTERM");
}

/* The store's files are where its connection has them (a deleted WAL is
 * saved and made anew; a deleted database stops the daemon). */
static void files_cb(uv_timer_t *t) {
    daemon_t *d = t->data;
    char err[512];
    if (d->stopping) return;
    int rc = store_check_files(d->store, err, sizeof err);
    if (rc > 0) log_warn("%s", err);
    if (rc < 0) {
        log_error("%s", err);
        shut_down(d, "the database is gone");
    }
}

static void queue_empty_cb(void *user) {
    daemon_t *d = user;
    log_info("queue is empty: waiting for submissions");
    hook_queue_empty(d->hook);
}

static void finished_cb(void *user, int64_t id, const char *status, double seconds) {
    daemon_t *d = user;
    metrics_observe_run(d->metrics, status, seconds);
    hook_experiment_finished(d->hook, id);
    mcp_http_wake(d->mcp);
}

/* The state directory (created, locked for the daemon's lifetime), the
 * store, and the runs a crash left behind requeued (a Slurm executor
 * re-attaches to its jobs later instead). */
/* A local daemon leaves the experiments a Slurm daemon started running as
 * their jobs (store_recover): say which, and how to follow them. */
static void say_slurm_jobs(daemon_t *d) {
    store_job_t *jobs;
    size_t n;
    char err[256];
    if (store_running_jobs(d->store, &jobs, &n, err, sizeof err) < 0) {
        log_warn("%s", err);
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (!strcmp(jobs[i].executor, "slurm"))
            log_warn("experiment %lld runs as slurm job %lld, left as it is: a daemon with "
                     "--executor slurm on this directory follows it again",
                     (long long)jobs[i].e.id, (long long)jobs[i].slurm_job_id);
    store_jobs_free(jobs, n);
}

static int open_state(daemon_t *d, char *err, size_t errlen) {
    char path[PATH_MAX + 32];
    int requeued = 0, abandoned = 0;
    snprintf(path, sizeof path, "%s/runs", d->o.dir);
    if (util_mkdirs(d->o.dir, err, errlen) < 0 || util_mkdirs(path, err, errlen) < 0 ||
        lock_dir(d, err, errlen) < 0)
        return -1;
    snprintf(path, sizeof path, "%s/nightshift.db", d->o.dir);
    if (store_open(path, &d->store, err, errlen) < 0) return -1;
    if (!d->o.slurm &&
        store_recover(d->store, d->o.max_attempts, &requeued, &abandoned, err, errlen) < 0)
        return -1;
    if (requeued || abandoned)
        log_warn("recovered from an unclean stop: %d interrupted experiment%s re-queued, %d given "
                 "up after %d attempts",
                 requeued, requeued == 1 ? "" : "s", abandoned, d->o.max_attempts);
    if (!d->o.slurm) say_slurm_jobs(d);
    return 0;
}

/* The engine's address-space floor, which a local worker's memory limit
 * must leave room for (worker.h): measured now, for the thread counts a run
 * may ask for. A --worker-cmd program is no engine: nothing to measure. */
static void measure_floor(daemon_t *d, const char *exe) {
    char err[256];
    if (d->o.worker_cmd[0]) return;
#if defined(__SANITIZE_ADDRESS__)
    /* A sanitizer's shadow memory is terabytes of address space: no limit
     * can hold this build's workers, and its floor would refuse everything. */
    (void)exe, (void)err;
    log_info("a sanitizer build: the engine's address-space floor is not counted");
    return;
#endif
    worker_floor_t f;
    if (worker_floor_measure(exe, sched_max_threads(d->sched), &f, err, sizeof err) < 0) {
        log_warn("%s; submissions are checked against their own memory only", err);
        return;
    }
    executor_local_set_floor(sched_executor(d->sched), &f); /* what admission asks of it */
    int threads = sched_default_threads(d->sched);
    double mib = 1024.0 * 1024.0, floor = worker_floor(&f, threads);
    log_info("the engine maps %.0f MiB of address space with 1 thread, %.0f MiB with %d, before "
             "a run allocates anything",
             ceil(f.at_1 / mib), ceil(f.at_max / mib), f.max_threads);
    if (d->o.memory_mb > 0 && d->o.memory_mb * mib < floor)
        log_warn("--memory-mb %d is below the %.0f MiB the engine maps with %d threads: every "
                 "submission that does not ask for fewer threads will be refused",
                 d->o.memory_mb, ceil(floor / mib), threads);
}

/* The executor (Slurm's, when asked for) and the scheduler over it. */
static int start_sched(daemon_t *d, char *err, size_t errlen) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return util_errorf(err, errlen, "cannot find the nightshift binary: %s", strerror(errno));
    exe[n] = '\0';
    const serve_opts_t *o = &d->o;
    if (o->slurm) {
        slurm_opts_t slo = {.partition = o->slurm_partition[0] ? o->slurm_partition : NULL,
                            .account = o->slurm_account[0] ? o->slurm_account : NULL,
                            .sbatch_args = o->sbatch_args[0] ? o->sbatch_args : NULL,
                            .job_prefix = o->slurm_job_prefix,
                            .poll_s = o->slurm_poll_s,
                            .rest_url = o->slurm_rest[0] ? o->slurm_rest : NULL,
                            .rest_user = o->slurm_user[0] ? o->slurm_user : NULL,
                            .rest_token = o->slurm_token[0] ? o->slurm_token : NULL,
                            /* progress as often as states, when that is more often */
                            .tail_s = o->slurm_poll_s < 1 ? o->slurm_poll_s : 0};
        if (!(d->executor = slurm_executor_new(&d->loop, &slo, err, errlen))) return -1;
    }
    sched_opts_t so = {.state_dir = o->dir,
                       .exe = exe,
                       .worker_cmd = o->worker_cmd[0] ? o->worker_cmd : NULL,
                       .slots = o->slots,
                       .threads_per_slot = o->threads_per_slot,
                       .memory_mb = o->memory_mb,
                       .deadline_slack_s = o->deadline_slack_s,
                       .kill_grace_s = o->kill_grace_s,
                       .max_attempts = o->max_attempts,
                       .prune = o->prune,
                       .prune_startup = o->prune_startup,
                       .prune_warmup = o->prune_warmup,
                       .token_run_limit_s = o->token_run_limit_s,
                       .asha_eta = o->asha_eta,
                       .asha_rungs = o->asha_rungs,
                       .executor = d->executor,
                       .on_finished = finished_cb,
                       .on_queue_empty = queue_empty_cb,
                       .user = d};
    if (!(d->sched = sched_new(&d->loop, d->store, &so, err, errlen))) return -1;
    if (!o->slurm) {
        measure_floor(d, exe);
        return 0;
    }
    int attached = 0, requeued = 0;
    if (sched_reattach(d->sched, &attached, &requeued, err, errlen) < 0) return -1;
    if (attached || requeued)
        log_warn("recovered from the previous daemon: %d slurm job%s re-attached, %d "
                 "experiment%s interrupted",
                 attached, attached == 1 ? "" : "s", requeued, requeued == 1 ? "" : "s");
    return 0;
}

/* Every request: /mcp to the MCP endpoint, the rest to the API (user is
 * the daemon's api_t, as api_authorize also takes it). */
static void handle_cb(const http_request_t *req, http_response_t *res, void *user) {
    daemon_t *d = (daemon_t *)((char *)user - offsetof(daemon_t, api));
    api_route_t route = api_route(req->path, NULL);
    uint64_t t0 = uv_hrtime();
    if (route == API_ROUTE_MCP && d->mcp)
        mcp_http_handle(d->mcp, req, res);
    else
        api_handle(req, res, user);
    metrics_observe_request(d->metrics, req->path, (double)(uv_hrtime() - t0) * 1e-9);
    /* a queued experiment cancelled ends the MCP waits on it */
    if (route == API_ROUTE_EXPERIMENT_CANCEL && res->status == 200) mcp_http_wake(d->mcp);
}

/* The gate before a request's body is read: /mcp's own, the API's for the
 * rest (user: as for handle_cb). */
static int authorize_cb(const http_request_t *req, http_response_t *res, void *user) {
    if (api_route(req->path, NULL) == API_ROUTE_MCP) return mcp_http_guard(user, req, res);
    return api_authorize(req, res, user);
}

/* Every response the server sends, counted by its route (user: as for
 * handle_cb). */
static void observe_cb(const char *path, int status, void *user) {
    metrics_count_request(((api_t *)user)->metrics, path, status);
}

/* Each delivery attempt of the agent hook, counted for GET /metrics. */
static void hook_attempted_cb(int ok, void *user) {
    metrics_count_hook_attempt(((daemon_t *)user)->metrics, ok);
}

/* The API, its event stream, the agent hook and the HTTP server; *port gets
 * the port bound. */
static int start_api(daemon_t *d, int *port, char *err, size_t errlen) {
    d->core = (core_t){
        .store = d->store, .sched = d->sched, .state_dir = d->o.dir, .memory_mb = d->o.memory_mb};
    d->api = (api_t){.loop = &d->loop,
                     .core = &d->core,
                     .store = d->store,
                     .sched = d->sched,
                     .state_dir = d->o.dir,
                     .token = d->o.token[0] ? d->o.token : NULL,
                     .origin = d->origin,
                     .guard_reads = !http_host_is_loopback(d->o.host),
                     .default_dataset = d->o.dataset[0] ? d->o.dataset : NULL,
                     .started_at = util_now()};
    if (!(d->metrics = d->api.metrics = metrics_new(d->store, d->sched)))
        return util_errorf(err, errlen, "out of memory");
    if (!(d->events = d->api.events = events_hub_new(&d->loop, d->store, d->sched)))
        return util_errorf(err, errlen, "out of memory");
    if (!(d->mcp = mcp_http_new(&d->loop, &d->api)))
        return util_errorf(err, errlen, "out of memory");
    if (d->o.agent_url[0]) {
        hook_opts_t ho = {.url = d->o.agent_url,
                          .secret = d->o.agent_secret,
                          .core = &d->core,
                          .attempted = hook_attempted_cb,
                          .user = d,
                          .proposals_per_min = d->o.agent_rate};
        if (!(d->hook = hook_new(&d->loop, &ho, err, errlen))) return -1;
    }
    http_limits_t lim;
    http_limits_default(&lim);
    if (http_server_start(&d->loop, d->o.host, d->o.port, &lim, handle_cb, &d->api, &d->http, port,
                          err, errlen) < 0)
        return -1;
    http_server_set_authorize(d->http, authorize_cb);
    http_server_set_observer(d->http, observe_cb);
    return 0;
}

/* Signals, the log line, and the one line on stdout: scripts and tests read
 * the bound port from it. */
static void announce(daemon_t *d, int port) {
    uv_signal_init(&d->loop, &d->sigint);
    uv_signal_init(&d->loop, &d->sigterm);
    d->sigint.data = d->sigterm.data = d;
    uv_signal_start(&d->sigint, signal_cb, SIGINT);
    uv_signal_start(&d->sigterm, signal_cb, SIGTERM);
    uv_timer_init(&d->loop, &d->files);
    d->files.data = d;
    uv_timer_start(&d->files, files_cb, FILES_CHECK_MS, FILES_CHECK_MS);
    char mem[48] = "no memory limit";
    if (d->o.memory_mb > 0) snprintf(mem, sizeof mem, "%d MiB per worker", d->o.memory_mb);
    log_info("nightshift daemon: state %s, %d %s slot%s, %s, %s", d->o.dir, d->o.slots,
             d->o.slurm ? "slurm" : "local", d->o.slots == 1 ? "" : "s", mem,
             d->o.token[0] ? "token required for POST" : "no token");
    printf("listening on http://%s%s%s:%d\n", strchr(d->o.host, ':') ? "[" : "", d->o.host,
           strchr(d->o.host, ':') ? "]" : "", port);
    fflush(stdout);
}

/* What a start that failed had opened, closed in the reverse order. */
static void close_started(daemon_t *d) {
    hook_close(d->hook, NULL, NULL);
    d->hook = NULL;
    events_hub_close(d->events);
    d->events = d->api.events = NULL;
    sched_free(d->sched);
    d->sched = NULL;
}

/* As many open files as the system lets this process have, up to 65,536:
 * each HTTP connection takes one, and a soft limit of 1,024 (a common
 * default) would cap connections far below what the server can serve
 * (http.h's max_connections is cut to fit the limit). */
static void raise_open_files(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) return;
    rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 65536 ? 65536 : rl.rlim_max;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0) log_warn("cannot raise the open-file limit");
    }
}

static int run_daemon(daemon_t *d) {
    char err[512];
    int rc = 1, port = 0;
    if (open_state(d, err, sizeof err) < 0) goto out;
    raise_open_files();
    uv_loop_init(&d->loop);
    if (start_sched(d, err, sizeof err) < 0 || start_api(d, &port, err, sizeof err) < 0) {
        close_started(d);
        goto out_loop;
    }
    announce(d, port);
    sched_kick(d->sched);
    uv_run(&d->loop, UV_RUN_DEFAULT);
    log_info("stopped");
    rc = 0;
out_loop:
    if (d->executor) d->executor->free(d->executor);
    d->executor = NULL;
    uv_run(&d->loop, UV_RUN_NOWAIT); /* let close callbacks run */
    if (uv_loop_close(&d->loop) != 0) log_warn("some handles were still open at exit");
out:
    if (rc) log_error("%s", err);
    mcp_http_free(d->mcp);
    api_close(&d->api);
    metrics_free(d->metrics);
    store_close(d->store);
    if (d->lock_fd >= 0) close(d->lock_fd);
    if (d->dir_lock_fd >= 0) close(d->dir_lock_fd);
    return rc;
}

int serve_main(int argc, char **argv) {
    daemon_t *d = calloc(1, sizeof *d);
    char err[512];
    if (!d) return 1;
    d->lock_fd = d->dir_lock_fd = -1;
    serve_opts_t *o = &d->o;
    int rc = parse_args(argc, argv, o, err, sizeof err);
    if (rc != 0) {
        if (rc < 0) fprintf(stderr, "serve: %s\n", err);
        opts_usage(&serve_options, rc == 1 ? stdout : stderr, rc == 1);
        free(d);
        return rc == 1 ? 0 : 2;
    }
    /* The defaults worked out now (OPT_AUTO). With Slurm the login node's
     * CPUs and memory say nothing about the jobs'. */
    if (o->slots == OPT_AUTO) {
        slots_plan_t plan;
        slots_auto(&plan);
        o->slots = o->slurm ? 1 : plan.slots;
        if (!o->slurm && o->threads_per_slot == OPT_AUTO) o->threads_per_slot = plan.threads;
        if (!o->slurm) fprintf(stderr, "serve: --slots auto: %s\n", plan.why);
    }
    if (o->slurm) {
        if (o->memory_mb == OPT_AUTO) o->memory_mb = 0; /* the partition's default */
        if (o->threads_per_slot == OPT_AUTO) o->threads_per_slot = SLURM_DEFAULT_THREADS;
    }
    if (o->memory_mb == OPT_AUTO) o->memory_mb = cost_default_worker_mb(o->slots);
    origin_opts_t oo = {.listen_host = o->host,
                        .allowed_hosts = o->allowed_hosts,
                        .allowed_origins = o->allowed_origins};
    if (origin_policy_new(&oo, &d->origin, err, sizeof err) < 0) {
        fprintf(stderr, "serve: %s\n", err);
        free(d);
        return 2;
    }
    if (!http_host_is_loopback(o->host) && !o->token[0]) {
        fprintf(stderr,
                "serve: refusing to listen on %s without a token (--token, "
                "--token-file or NIGHTSHIFT_TOKEN)\n",
                o->host);
        origin_policy_free(d->origin);
        free(d);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    rc = run_daemon(d);
    origin_policy_free(d->origin);
    free(d);
    return rc;
}

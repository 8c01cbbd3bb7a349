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
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/serve/api.h"
#include "daemon/serve/events.h"
#include "daemon/hook/hook.h"
#include "daemon/shared/http.h"
#include "daemon/shared/log.h"
#include "daemon/exec/sched.h"
#include "daemon/exec/slots.h"
#include "daemon/serve/serve.h"
#include "daemon/exec/slurm.h"
#include "daemon/store/store.h"
#include "engine/util.h"

#define MAX_TOKEN             256
#define MAX_SECRET            1024 /* bytes of the agent hook's HMAC key */
#define MAX_JWT               4096 /* bytes of a slurmrestd token */
#define SLURM_DEFAULT_THREADS 2    /* cpus-per-task when neither spec nor option says */

typedef struct {
    char dir[PATH_MAX];
    char host[256];
    int port;
    int slots, threads_per_slot, memory_mb, max_attempts;
    double deadline_slack_s, kill_grace_s;
    int prune, prune_startup; /* SCHED_PRUNE_*; runs to compare against first */
    double prune_warmup;      /* progress before pruning */
    double token_run_limit_s; /* deadline of a token-budgeted run */
    char dataset[64];         /* the default scope of leaderboard, best and noise */
    char token[MAX_TOKEN + 1];
    char *worker_cmd[33]; /* test hook: a stand-in worker program and its arguments */
    char worker_cmd_buf[1024];
    size_t max_body_bytes;
    char agent_url[1024]; /* "" = no agent hook */
    char agent_secret[MAX_SECRET + 1];
    /* --executor slurm: where and how runs become batch jobs (slurm.h) */
    int slurm;
    char slurm_partition[128], slurm_account[128], slurm_job_prefix[64];
    char *sbatch_args[33];
    char sbatch_args_buf[1024];
    double slurm_poll_s;
    char slurm_rest[1024], slurm_user[64];
    char slurm_token[MAX_JWT + 1];
    int agent_rate; /* accepted agent proposals per minute; 0 = no limit, -1 = default */
} serve_opts_t;

typedef struct {
    uv_loop_t loop;
    serve_opts_t o;
    store_t *store;
    sched_t *sched;
    http_server_t *http;
    api_t api;
    hook_t *hook;         /* NULL without --agent-url, and once closed */
    events_hub_t *events; /* the SSE streams of GET /v1/events/stream */
    executor_t *executor; /* --executor slurm; NULL = the scheduler's local one */
    uv_signal_t sigint, sigterm;
    int lock_fd;
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

static int set_worker_cmd(serve_opts_t *o, const char *cmd, char *err, size_t errlen) {
    return split_words("worker-cmd", cmd, o->worker_cmd_buf, sizeof o->worker_cmd_buf,
                       o->worker_cmd, err, errlen);
}

/* A short string option into out (size len): 1 to len-1 characters. */
static int set_string(const char *key, const char *val, char *out, size_t len, char *err,
                      size_t errlen) {
    if (!*val || strlen(val) >= len) {
        snprintf(err, errlen, "%s: 1 to %zu characters", key, len - 1);
        return -1;
    }
    snprintf(out, len, "%s", val);
    return 0;
}

/* One option by name, from the command line or the config file. */
static int set_option(serve_opts_t *o, const char *key, const char *val, char *err, size_t errlen) {
    if (!strcmp(key, "slots") && !strcmp(val, "auto")) {
        o->slots = 0; /* chosen in serve_main (daemon/exec/slots.h) */
        return 0;
    }
    char *end;
    long v = 0;
    double d = 0;
    int is_int = !strcmp(key, "slots") || !strcmp(key, "threads-per-slot") ||
                 !strcmp(key, "memory-mb") || !strcmp(key, "max-attempts") ||
                 !strcmp(key, "prune-startup") || !strcmp(key, "agent-rate");
    int is_num = !strcmp(key, "deadline-slack") || !strcmp(key, "kill-grace") ||
                 !strcmp(key, "prune-warmup") || !strcmp(key, "token-run-limit") ||
                 !strcmp(key, "slurm-poll");
    if (is_int) {
        v = strtol(val, &end, 10);
        if (*end || end == val || v < 0 || v > 1 << 20) {
            snprintf(err, errlen, "%s: expected a non-negative integer, got '%s'", key, val);
            return -1;
        }
    } else if (is_num) {
        d = strtod(val, &end);
        if (*end || end == val || !(d > 0)) {
            snprintf(err, errlen, "%s: expected a positive number, got '%s'", key, val);
            return -1;
        }
    }
    if (!strcmp(key, "dir")) {
        snprintf(o->dir, sizeof o->dir, "%s", val);
    } else if (!strcmp(key, "listen")) {
        return http_parse_listen(val, o->host, sizeof o->host, &o->port, err, errlen);
    } else if (!strcmp(key, "slots")) {
        if (v < 1) {
            snprintf(err, errlen, "slots: at least 1");
            return -1;
        }
        o->slots = (int)v;
    } else if (!strcmp(key, "threads-per-slot")) {
        o->threads_per_slot = (int)v;
    } else if (!strcmp(key, "memory-mb")) {
        o->memory_mb = (int)v;
    } else if (!strcmp(key, "max-attempts")) {
        o->max_attempts = (int)v;
    } else if (!strcmp(key, "deadline-slack")) {
        o->deadline_slack_s = d;
    } else if (!strcmp(key, "kill-grace")) {
        o->kill_grace_s = d;
    } else if (!strcmp(key, "prune")) {
        if (strcmp(val, "median") && strcmp(val, "off")) {
            snprintf(err, errlen, "prune: expected median or off, got '%s'", val);
            return -1;
        }
        o->prune = !strcmp(val, "median") ? SCHED_PRUNE_MEDIAN : SCHED_PRUNE_OFF;
    } else if (!strcmp(key, "prune-startup")) {
        if (v < 1) {
            snprintf(err, errlen, "prune-startup: at least 1");
            return -1;
        }
        o->prune_startup = (int)v;
    } else if (!strcmp(key, "prune-warmup")) {
        if (d >= 1) {
            snprintf(err, errlen, "prune-warmup: a fraction of the budget, below 1");
            return -1;
        }
        o->prune_warmup = d;
    } else if (!strcmp(key, "dataset")) {
        if (!*val || strlen(val) >= sizeof o->dataset) {
            snprintf(err, errlen, "dataset: 1 to %zu characters", sizeof o->dataset - 1);
            return -1;
        }
        snprintf(o->dataset, sizeof o->dataset, "%s", val);
    } else if (!strcmp(key, "token-run-limit")) {
        o->token_run_limit_s = d;
    } else if (!strcmp(key, "token")) {
        if (!*val || strlen(val) > MAX_TOKEN) {
            snprintf(err, errlen, "token: 1 to %d characters", MAX_TOKEN);
            return -1;
        }
        snprintf(o->token, sizeof o->token, "%s", val);
    } else if (!strcmp(key, "token-file")) {
        return read_secret_file(val, "token", o->token, MAX_TOKEN, err, errlen);
    } else if (!strcmp(key, "agent-url")) {
        if (!*val || strlen(val) >= sizeof o->agent_url) {
            snprintf(err, errlen, "agent-url: 1 to %zu characters", sizeof o->agent_url - 1);
            return -1;
        }
        snprintf(o->agent_url, sizeof o->agent_url, "%s", val);
    } else if (!strcmp(key, "agent-secret")) {
        if (!*val || strlen(val) > MAX_SECRET) {
            snprintf(err, errlen, "agent-secret: 1 to %d characters", MAX_SECRET);
            return -1;
        }
        snprintf(o->agent_secret, sizeof o->agent_secret, "%s", val);
    } else if (!strcmp(key, "agent-secret-file")) {
        return read_secret_file(val, "agent secret", o->agent_secret, MAX_SECRET, err, errlen);
    } else if (!strcmp(key, "agent-rate")) {
        o->agent_rate = (int)v;
    } else if (!strcmp(key, "worker-cmd")) {
        return set_worker_cmd(o, val, err, errlen);
    } else if (!strcmp(key, "executor")) {
        if (strcmp(val, "local") != 0 && strcmp(val, "slurm") != 0) {
            snprintf(err, errlen, "executor: local or slurm, not '%s'", val);
            return -1;
        }
        o->slurm = !strcmp(val, "slurm");
    } else if (!strcmp(key, "slurm-partition")) {
        return set_string(key, val, o->slurm_partition, sizeof o->slurm_partition, err, errlen);
    } else if (!strcmp(key, "slurm-account")) {
        return set_string(key, val, o->slurm_account, sizeof o->slurm_account, err, errlen);
    } else if (!strcmp(key, "slurm-job-prefix")) {
        for (const char *p = val; *p; p++)
            if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.') {
                snprintf(err, errlen, "slurm-job-prefix: letters, digits, '-', '_', '.' only");
                return -1;
            }
        return set_string(key, val, o->slurm_job_prefix, sizeof o->slurm_job_prefix, err, errlen);
    } else if (!strcmp(key, "sbatch-args")) {
        return split_words("sbatch-args", val, o->sbatch_args_buf, sizeof o->sbatch_args_buf,
                           o->sbatch_args, err, errlen);
    } else if (!strcmp(key, "slurm-poll")) {
        o->slurm_poll_s = d;
    } else if (!strcmp(key, "slurm-rest")) {
        return set_string(key, val, o->slurm_rest, sizeof o->slurm_rest, err, errlen);
    } else if (!strcmp(key, "slurm-user")) {
        return set_string(key, val, o->slurm_user, sizeof o->slurm_user, err, errlen);
    } else if (!strcmp(key, "slurm-token-file")) {
        return read_secret_file(val, "slurmrestd token", o->slurm_token, MAX_JWT, err, errlen);
    } else {
        snprintf(err, errlen, "unknown option '%s'", key);
        return -1;
    }
    return 0;
}

/* The config file: a JSON object with the long options as keys, '-' or '_'. */
static int load_config(const char *path, serve_opts_t *o, char *err, size_t errlen) {
    size_t len;
    char e2[256];
    char *text = util_read_file(path, 1 << 20, &len, e2, sizeof e2);
    if (!text) {
        snprintf(err, errlen, "--config %s", e2);
        return -1;
    }
    cJSON *root = http_json_parse(text, len, e2, sizeof e2);
    free(text);
    if (!cJSON_IsObject(root)) {
        snprintf(err, errlen, "%s: %s", path, root ? "not a JSON object" : e2);
        cJSON_Delete(root);
        return -1;
    }
    int rc = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        char key[64], val[1024];
        snprintf(key, sizeof key, "%s", item->string);
        for (char *p = key; *p; p++)
            if (*p == '_') *p = '-';
        if (cJSON_IsString(item))
            snprintf(val, sizeof val, "%s", item->valuestring);
        else if (cJSON_IsNumber(item))
            snprintf(val, sizeof val, "%.17g", item->valuedouble);
        else {
            snprintf(err, errlen, "%s: %s: expected a string or a number", path, item->string);
            rc = -1;
            break;
        }
        if (set_option(o, key, val, e2, sizeof e2) < 0) {
            snprintf(err, errlen, "%s: %s", path, e2);
            rc = -1;
            break;
        }
    }
    cJSON_Delete(root);
    return rc;
}

static void serve_usage(FILE *out) {
    fprintf(out,
            "usage: nightshift serve [--dir DIR] [--listen HOST:PORT] [--slots N|auto]\n"
            "                        [--threads-per-slot N] [--memory-mb N]\n"
            "                        [--token T | --token-file F] [--config FILE]\n"
            "                        [--max-attempts N] [--deadline-slack S] [--kill-grace S]\n"
            "                        [--agent-url URL --agent-secret-file F] [--agent-rate N]\n"
            "                        [--prune median|off] [--prune-startup N] [--prune-warmup F]\n"
            "                        [--token-run-limit S] [--dataset NAME]\n"
            "                        [--executor local|slurm] [--slurm-partition P]\n"
            "                        [--slurm-account A] [--sbatch-args 'OPT ...']\n"
            "                        [--slurm-job-prefix NAME] [--slurm-poll S]\n"
            "                        [--slurm-rest URL [--slurm-user U] [--slurm-token-file F]]\n"
            "Runs the daemon: a queue of experiments in DIR/nightshift.db, workers in\n"
            "DIR/runs/<id>/ under a memory limit (a spec's resources.memory_mb, else\n"
            "--memory-mb; default 75%% of RAM shared among the slots; 0 = none), and\n"
            "the HTTP API (default 127.0.0.1:8080; port 0 picks a free\n"
            "port and prints it). --slots auto picks the slots and their threads from the\n"
            "CPUs, the memory and the default spec's size (README: Slots). The token\n"
            "(--token-file F or $NIGHTSHIFT_TOKEN) guards\n"
            "every POST; a non-loopback --listen needs one, and there it guards every GET\n"
            "but /healthz too. --config is a JSON object with these options as keys;\n"
            "command-line options override it. With --agent-url, every finished experiment\n"
            "and an empty queue are POSTed to the agent, signed with the secret\n"
            "(--agent-secret-file F or $NIGHTSHIFT_AGENT_SECRET; HMAC-SHA256, Standard\n"
            "Webhooks headers); its reply may propose the next specs, at most N a minute\n"
            "(--agent-rate, default 30; 0 = no limit). --token T and --agent-secret S still\n"
            "work but show the secret to every user of the machine (ps).\n"
            "--prune median stops a run whose training loss, at --prune-warmup of its\n"
            "budget (default 0.3) or at two evenly spaced points after it, is worse than\n"
            "the median of finished runs on the same dataset and budget at the same\n"
            "progress, once --prune-startup of them (default 5) have finished; it is\n"
            "recorded as pruned (a spec with \"prune\": false never is). A token-budgeted\n"
            "run is killed as a timeout after --token-run-limit seconds (default 3600).\n"
            "val_bpb is ranked within one dataset and budget: the leaderboard, best and\n"
            "noise default to --dataset (default \"default\") and the budget most of its\n"
            "runs used.\n"
            "--executor slurm submits every run as a Slurm batch job (sbatch, squeue and\n"
            "scancel from PATH; DIR must be shared with the compute nodes): --slots jobs at\n"
            "once, named NAME-<id> (default nightshift), states polled every S seconds\n"
            "(default 10), 2 CPUs and no memory limit unless given; a restarted daemon\n"
            "re-attaches to the jobs still running. With --slurm-rest (http://HOST:PORT or\n"
            "unix:/PATH) it talks to slurmrestd (openapi/v0.0.38) instead of the commands,\n"
            "as user U (default: this one) with the JWT in F (default $SLURM_JWT).\n");
}

static int parse_args(int argc, char **argv, serve_opts_t *o, char *err, size_t errlen) {
    static const struct option opts[] = {{"dir", required_argument, 0, 0},
                                         {"listen", required_argument, 0, 0},
                                         {"slots", required_argument, 0, 0},
                                         {"threads-per-slot", required_argument, 0, 0},
                                         {"memory-mb", required_argument, 0, 0},
                                         {"max-attempts", required_argument, 0, 0},
                                         {"deadline-slack", required_argument, 0, 0},
                                         {"kill-grace", required_argument, 0, 0},
                                         {"token", required_argument, 0, 0},
                                         {"token-file", required_argument, 0, 0},
                                         {"worker-cmd", required_argument, 0, 0},
                                         {"agent-url", required_argument, 0, 0},
                                         {"agent-secret", required_argument, 0, 0},
                                         {"agent-secret-file", required_argument, 0, 0},
                                         {"prune", required_argument, 0, 0},
                                         {"prune-startup", required_argument, 0, 0},
                                         {"prune-warmup", required_argument, 0, 0},
                                         {"token-run-limit", required_argument, 0, 0},
                                         {"dataset", required_argument, 0, 0},
                                         {"executor", required_argument, 0, 0},
                                         {"slurm-partition", required_argument, 0, 0},
                                         {"slurm-account", required_argument, 0, 0},
                                         {"slurm-job-prefix", required_argument, 0, 0},
                                         {"sbatch-args", required_argument, 0, 0},
                                         {"slurm-poll", required_argument, 0, 0},
                                         {"slurm-rest", required_argument, 0, 0},
                                         {"slurm-user", required_argument, 0, 0},
                                         {"slurm-token-file", required_argument, 0, 0},
                                         {"agent-rate", required_argument, 0, 0},
                                         {"config", required_argument, 0, 'c'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    /* First pass: the config file, so that options given on the line win. */
    int ch, idx;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", opts, &idx)) != -1)
        if (ch == 'c' && load_config(optarg, o, err, errlen) < 0) return -1;
    optind = 1;
    opterr = 1;
    while ((ch = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        if (ch == 'h') return 1;
        if (ch == '?') return 2;
        if (ch == 0 && set_option(o, opts[idx].name, optarg, err, errlen) < 0) return -1;
        if (ch == 0 &&
            (!strcmp(opts[idx].name, "token") || !strcmp(opts[idx].name, "agent-secret")))
            log_warn("--%s puts the secret on the command line, where every user sees it (ps); "
                     "use --%s-file or $%s",
                     opts[idx].name, opts[idx].name,
                     strcmp(opts[idx].name, "token") ? "NIGHTSHIFT_AGENT_SECRET"
                                                     : "NIGHTSHIFT_TOKEN");
    }
    if (optind != argc) return 2;
    const char *env = getenv("NIGHTSHIFT_TOKEN");
    if (!o->token[0] && env && *env && set_option(o, "token", env, err, errlen) < 0) return -1;
    env = getenv("NIGHTSHIFT_AGENT_SECRET");
    if (!o->agent_secret[0] && env && *env && set_option(o, "agent-secret", env, err, errlen) < 0)
        return -1;
    const char *jwt = getenv("SLURM_JWT");
    if (o->slurm_rest[0] && !o->slurm_token[0] && jwt && *jwt &&
        set_string("SLURM_JWT", jwt, o->slurm_token, sizeof o->slurm_token, err, errlen) < 0)
        return -1;
    if (o->agent_url[0] && !o->agent_secret[0]) {
        snprintf(err, errlen,
                 "--agent-url needs --agent-secret-file (or $NIGHTSHIFT_AGENT_SECRET)");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ daemon */

/* An exclusive lock on DIR/nightshift.lock for the daemon's lifetime. */
static int lock_dir(daemon_t *d, char *err, size_t errlen) {
    char path[PATH_MAX + 32];
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
}

static void signal_cb(uv_signal_t *h, int signum) {
    daemon_t *d = h->data;
    if (d->stopping) {
        log_warn("%s again: still waiting for workers to exit",
                 signum == SIGINT ? "SIGINT" : "SIGTERM");
        return;
    }
    d->stopping = 1;
    log_info("%s: shutting down (%s)", signum == SIGINT ? "SIGINT" : "SIGTERM",
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

static void queue_empty_cb(void *user) {
    daemon_t *d = user;
    log_info("queue is empty: waiting for submissions");
    hook_queue_empty(d->hook);
}

static void finished_cb(void *user, int64_t id, const char *status) {
    daemon_t *d = user;
    (void)status;
    hook_experiment_finished(d->hook, id);
}

static int run_daemon(daemon_t *d) {
    char err[512], path[PATH_MAX + 32];
    int rc = 1;
    if (util_mkdirs(d->o.dir, err, sizeof err) < 0) goto out;
    snprintf(path, sizeof path, "%s/runs", d->o.dir);
    if (util_mkdirs(path, err, sizeof err) < 0 || lock_dir(d, err, sizeof err) < 0) goto out;
    snprintf(path, sizeof path, "%s/nightshift.db", d->o.dir);
    if (store_open(path, &d->store, err, sizeof err) < 0) goto out;
    int requeued = 0, abandoned = 0;
    /* Slurm jobs outlive the daemon: the scheduler re-attaches to them below. */
    if (!d->o.slurm &&
        store_recover(d->store, d->o.max_attempts, &requeued, &abandoned, err, sizeof err) < 0)
        goto out;
    if (requeued || abandoned)
        log_warn("recovered from an unclean stop: %d interrupted experiment%s re-queued, %d given "
                 "up after %d attempts",
                 requeued, requeued == 1 ? "" : "s", abandoned, d->o.max_attempts);

    uv_loop_init(&d->loop);
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        snprintf(err, sizeof err, "cannot find the nightshift binary: %s", strerror(errno));
        goto out_loop;
    }
    exe[n] = '\0';
    if (d->o.slurm) {
        slurm_opts_t slo = {.partition = d->o.slurm_partition[0] ? d->o.slurm_partition : NULL,
                            .account = d->o.slurm_account[0] ? d->o.slurm_account : NULL,
                            .sbatch_args = d->o.sbatch_args[0] ? d->o.sbatch_args : NULL,
                            .job_prefix = d->o.slurm_job_prefix,
                            .poll_s = d->o.slurm_poll_s,
                            .rest_url = d->o.slurm_rest[0] ? d->o.slurm_rest : NULL,
                            .rest_user = d->o.slurm_user[0] ? d->o.slurm_user : NULL,
                            .rest_token = d->o.slurm_token[0] ? d->o.slurm_token : NULL,
                            /* progress as often as states, when that is more often */
                            .tail_s = d->o.slurm_poll_s < 1 ? d->o.slurm_poll_s : 0};
        if (!(d->executor = slurm_executor_new(&d->loop, &slo, err, sizeof err))) goto out_loop;
    }
    sched_opts_t so = {.state_dir = d->o.dir,
                       .exe = exe,
                       .worker_cmd = d->o.worker_cmd[0] ? d->o.worker_cmd : NULL,
                       .slots = d->o.slots,
                       .threads_per_slot = d->o.threads_per_slot,
                       .memory_mb = d->o.memory_mb,
                       .deadline_slack_s = d->o.deadline_slack_s,
                       .kill_grace_s = d->o.kill_grace_s,
                       .max_attempts = d->o.max_attempts,
                       .prune = d->o.prune,
                       .prune_startup = d->o.prune_startup,
                       .prune_warmup = d->o.prune_warmup,
                       .token_run_limit_s = d->o.token_run_limit_s,
                       .executor = d->executor,
                       .on_finished = finished_cb,
                       .on_queue_empty = queue_empty_cb,
                       .user = d};
    d->sched = sched_new(&d->loop, d->store, &so, err, sizeof err);
    if (!d->sched) goto out_loop;
    if (d->o.slurm) {
        int attached = 0;
        if (sched_reattach(d->sched, &attached, &requeued, err, sizeof err) < 0) goto out_sched;
        if (attached || requeued)
            log_warn("recovered from the previous daemon: %d slurm job%s re-attached, %d "
                     "experiment%s interrupted",
                     attached, attached == 1 ? "" : "s", requeued, requeued == 1 ? "" : "s");
    }
    d->api = (api_t){.store = d->store,
                     .sched = d->sched,
                     .state_dir = d->o.dir,
                     .token = d->o.token[0] ? d->o.token : NULL,
                     .guard_reads = !http_host_is_loopback(d->o.host),
                     .default_dataset = d->o.dataset[0] ? d->o.dataset : NULL,
                     .started_at = util_now(),
                     .memory_mb = d->o.memory_mb};
    if (!(d->events = d->api.events = events_hub_new(&d->loop, d->store, d->sched))) {
        snprintf(err, sizeof err, "out of memory");
        goto out_sched;
    }
    if (d->o.agent_url[0]) {
        hook_opts_t ho = {.url = d->o.agent_url,
                          .secret = d->o.agent_secret,
                          .api = &d->api,
                          .proposals_per_min = d->o.agent_rate == 0  ? -1
                                               : d->o.agent_rate > 0 ? d->o.agent_rate
                                                                     : 0};
        if (!(d->hook = hook_new(&d->loop, &ho, err, sizeof err))) goto out_sched;
    }
    http_limits_t lim;
    http_limits_default(&lim);
    int port = 0;
    if (http_server_start(&d->loop, d->o.host, d->o.port, &lim, api_handle, &d->api, &d->http,
                          &port, err, sizeof err) < 0)
        goto out_hook;
    http_server_set_authorize(d->http, api_authorize);
    uv_signal_init(&d->loop, &d->sigint);
    uv_signal_init(&d->loop, &d->sigterm);
    d->sigint.data = d->sigterm.data = d;
    uv_signal_start(&d->sigint, signal_cb, SIGINT);
    uv_signal_start(&d->sigterm, signal_cb, SIGTERM);

    char mem[48] = "no memory limit";
    if (d->o.memory_mb > 0) snprintf(mem, sizeof mem, "%d MiB per worker", d->o.memory_mb);
    log_info("nightshift daemon: state %s, %d %s slot%s, %s, %s", d->o.dir, d->o.slots,
             d->o.slurm ? "slurm" : "local", d->o.slots == 1 ? "" : "s", mem,
             d->o.token[0] ? "token required for POST" : "no token");
    /* The one line on stdout: scripts and tests read the bound port from it. */
    printf("listening on http://%s%s%s:%d\n", strchr(d->o.host, ':') ? "[" : "", d->o.host,
           strchr(d->o.host, ':') ? "]" : "", port);
    fflush(stdout);

    sched_kick(d->sched);
    uv_run(&d->loop, UV_RUN_DEFAULT);
    log_info("stopped");
    rc = 0;
    goto out_loop;

out_hook:
    hook_close(d->hook, NULL, NULL);
    d->hook = NULL;
out_sched:
    events_hub_close(d->events);
    d->events = d->api.events = NULL;
    sched_free(d->sched);
    d->sched = NULL;
out_loop:
    if (d->executor) d->executor->free(d->executor);
    d->executor = NULL;
    uv_run(&d->loop, UV_RUN_NOWAIT); /* let close callbacks run */
    if (uv_loop_close(&d->loop) != 0) log_warn("some handles were still open at exit");
out:
    if (rc) log_error("%s", err);
    api_close(&d->api);
    store_close(d->store);
    if (d->lock_fd >= 0) close(d->lock_fd);
    return rc;
}

int serve_main(int argc, char **argv) {
    daemon_t *d = calloc(1, sizeof *d);
    char err[512];
    if (!d) return 1;
    d->lock_fd = -1;
    serve_opts_t *o = &d->o;
    snprintf(o->dir, sizeof o->dir, "state");
    snprintf(o->host, sizeof o->host, "127.0.0.1");
    o->port = 8080;
    o->slots = 1;
    o->memory_mb = -1; /* the default below, once the slot count is known */
    o->max_attempts = 3;
    o->agent_rate = -1;
    int rc = parse_args(argc, argv, o, err, sizeof err);
    if (rc != 0) {
        if (rc < 0) fprintf(stderr, "serve: %s\n", err);
        serve_usage(rc == 1 ? stdout : stderr);
        free(d);
        return rc == 1 ? 0 : 2;
    }
    if (o->slots == 0) { /* --slots auto */
        slots_plan_t plan;
        slots_auto(&plan);
        o->slots = o->slurm ? 1 : plan.slots;
        if (!o->slurm && o->threads_per_slot == 0) o->threads_per_slot = plan.threads;
        if (!o->slurm) fprintf(stderr, "serve: --slots auto: %s\n", plan.why);
    }
    if (o->slurm) { /* the login node's CPUs and memory say nothing about the jobs' */
        if (o->memory_mb < 0) o->memory_mb = 0; /* the partition's default */
        if (o->threads_per_slot == 0) o->threads_per_slot = SLURM_DEFAULT_THREADS;
    }
    if (o->memory_mb < 0) {
        /* Three quarters of the machine, shared among the slots, so that one
         * runaway worker cannot push the others (or the daemon) into swap. */
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        double mb = pages > 0 && page > 0 ? (double)pages * page / (1 << 20) : 0;
        o->memory_mb = (int)(0.75 * mb / o->slots);
    }
    if (!http_host_is_loopback(o->host) && !o->token[0]) {
        fprintf(stderr,
                "serve: refusing to listen on %s without a token (--token, "
                "--token-file or NIGHTSHIFT_TOKEN)\n",
                o->host);
        free(d);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    rc = run_daemon(d);
    free(d);
    return rc;
}

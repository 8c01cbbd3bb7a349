/* agent.c - `nightshift agent`: options, the webhook server, signature
 * checks (webhook.c), replay of repeated deliveries, and state persistence around the
 * strategy (strategy.c), all on one libuv loop.
 *
 * One delivery: verify (401 on failure) -> a webhook-id answered before gets
 * the same reply -> parse the event (400 if it is not one) -> strategy_decide
 * -> save the state -> 200 with one spec, an array, or []. */
#include "experiments/agent/agent.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/client/client.h"
#include "daemon/shared/http.h"
#include "daemon/shared/log.h"
#include "daemon/shared/origin.h"
#include "daemon/shared/opts.h"
#include "engine/spec.h"
#include "experiments/agent/space.h"
#include "experiments/agent/strategy.h"
#include "engine/util.h"
#include "daemon/shared/webhook.h"

#define MAX_SECRET   4096
#define REPLAY_MAX   4096 /* deliveries remembered at once (their ids and replies) */
#define MAX_EVENT_ID 128  /* longest webhook-id accepted */
/* How long a delivery is remembered: its timestamp may be up to the
 * tolerance before its arrival, and a replay of it is accepted until the
 * tolerance after that timestamp. */
#define REPLAY_KEEP_S (2.0 * WEBHOOK_TOLERANCE_S)
#define DEFAULT_PORT  8090
#define DEFAULT_BASE  "experiments/specs/baseline.json"
#define DEFAULT_SPACE "experiments/search/space.json"
#define PACE_RUNS     16 /* ends of runs that set the pace --until counts with */
/* Before three runs have ended, --until counts runs at a pace estimated from
 * the baseline's time budget: a run takes its budget plus RUN_OVERHEAD of it
 * and RUN_START_S (start, data, evaluation), on --slots slots at once. */
#define RUN_OVERHEAD 0.1
#define RUN_START_S  15.0

/* The options (the table below names each one once). */
typedef struct {
    char host[256];
    int port;
    char *secret; /* malloc'd */
    size_t secret_len;
    char baseline[PATH_MAX];
    char space[PATH_MAX]; /* "" = DEFAULT_SPACE, found by find_space */
    int strategy;         /* a strategy_kind */
    double confirm_frac, local_frac;
    int startup, confirm_seeds, final_runs, slots;
    char state[PATH_MAX]; /* "" = no persistence */
    int64_t seed;
    int max_proposals;  /* 0 = no limit */
    double noise_floor; /* 0 = none: adopt past two measured standard errors */
    int noise_seeds, max_seeds, queue_target;
    bool has_until;
    int until_min; /* --until: minutes after local midnight */
} agent_opts_t;

typedef struct {
    char id[MAX_EVENT_ID];
    char *reply; /* malloc'd body sent the first time */
    double at;   /* util_now() when it was answered */
} delivery_t;

typedef struct {
    uv_loop_t loop;
    agent_opts_t o;
    space_t *space;
    strategy_t *strategy;
    http_server_t *http;
    origin_policy_t *origin; /* no web page may read the status or post a hook */
    uv_signal_t sigint, sigterm;
    /* Every delivery answered in the last REPLAY_KEEP_S (at most
     * REPLAY_MAX, oldest first): a delivery sent again within the
     * signature's tolerance is answered from here, never decided twice. */
    delivery_t seen[REPLAY_MAX];
    int n_seen;
    int stopping;
    /* What GET reports about the agent's activity (status_activity). */
    char last_event[32];     /* the type of the last hook event decided on; "" = none yet */
    double last_event_at;    /* util_now() then */
    char last_decision[256]; /* the strategy's last log line */
    int last_proposed;       /* specs in the last reply */
    /* --until: the night's end, and when the last runs ended (util_now()). */
    time_t until;               /* 0 = none */
    double budget_s;            /* the baseline's time budget; 0 = a token or FLOPs budget */
    double ends[PACE_RUNS];     /* oldest first */
    int n_ends, last_runs_left; /* last_runs_left: -1 = unknown */
} agent_t;

/* ---------------------------------------------------------------- server */

static void strategy_log_cb(void *user, const char *line) {
    agent_t *a = user;
    if (a) snprintf(a->last_decision, sizeof a->last_decision, "%s", line);
    log_info("%s", line);
}

static const char *replay(agent_t *a, const char *id) {
    for (int i = 0; i < a->n_seen; i++)
        if (!strcmp(a->seen[i].id, id)) return a->seen[i].reply;
    return NULL;
}

/* Forget the first n deliveries (the oldest). */
static void forget(agent_t *a, int n) {
    for (int i = 0; i < n; i++) free(a->seen[i].reply);
    memmove(a->seen, a->seen + n, (size_t)(a->n_seen - n) * sizeof *a->seen);
    a->n_seen -= n;
}

static void remember(agent_t *a, const char *id, const char *reply) {
    double now = util_now();
    int old = 0;
    while (old < a->n_seen && now - a->seen[old].at > REPLAY_KEEP_S) old++;
    if (old == 0 && a->n_seen == REPLAY_MAX) {
        log_warn("over %d deliveries within %.0f s: the oldest is forgotten, and a replay of it "
                 "would be decided again",
                 REPLAY_MAX, REPLAY_KEEP_S);
        old = 1;
    }
    forget(a, old);
    char *copy = strdup(reply);
    if (!copy) return;
    delivery_t *d = &a->seen[a->n_seen++];
    snprintf(d->id, sizeof d->id, "%s", id);
    d->reply = copy;
    d->at = now;
}

static void respond(http_response_t *res, char *body) {
    res->status = 200;
    res->content_type = "application/json";
    res->body = body;
    res->body_len = strlen(body);
}

/* The agent's activity for GET: the last event and decision, and what it is
 * waiting for. The agent only acts when the daemon calls: when a run ends
 * (experiment.finished) or the queue runs dry (queue.empty). */
static void status_activity(const agent_t *a, cJSON *o) {
    if (a->last_event[0]) {
        cJSON *ev = cJSON_AddObjectToObject(o, "last_event");
        cJSON_AddStringToObject(ev, "type", a->last_event);
        cJSON_AddNumberToObject(ev, "seconds_ago", util_now() - a->last_event_at);
        cJSON_AddNumberToObject(ev, "proposed", a->last_proposed);
    } else {
        cJSON_AddNullToObject(o, "last_event");
    }
    if (a->last_decision[0])
        cJSON_AddStringToObject(o, "last_decision", a->last_decision);
    else
        cJSON_AddNullToObject(o, "last_decision");
    const char *waiting;
    if (!a->last_event[0])
        waiting = "the daemon's first event (it calls when a run ends or the queue is empty)";
    else if (strategy_n_pending(a->strategy) > 0)
        waiting = "the re-run of a near tie, to confirm it before adopting it";
    else if (a->last_proposed > 0)
        waiting = "the result of what it proposed (the daemon calls when a run ends)";
    else
        waiting = "the next run to finish or the queue to empty (nothing to propose now)";
    cJSON_AddStringToObject(o, "waiting_for", waiting);
}

/* GET: who we are and where the search stands. */
static void status_reply(agent_t *a, http_response_t *res) {
    int64_t id;
    double v;
    cJSON *o = cJSON_CreateObject(), *best;
    char *text = NULL;
    if (!o) goto oom;
    cJSON_AddStringToObject(o, "agent", "nightshift reference agent");
    cJSON_AddStringToObject(o, "strategy", strategy_kind_name((strategy_kind)a->o.strategy));
    cJSON_AddNumberToObject(o, "proposals", strategy_n_proposals(a->strategy));
    cJSON_AddNumberToObject(o, "pending_reruns", strategy_n_pending(a->strategy));
    int df = 0;
    double sd = strategy_noise(a->strategy, &df);
    cJSON *noise = cJSON_AddObjectToObject(o, "noise");
    if (noise && isnan(sd))
        cJSON_AddNullToObject(noise, "sd");
    else if (noise)
        cJSON_AddNumberToObject(noise, "sd", sd);
    if (noise) cJSON_AddNumberToObject(noise, "df", df);
    if (strategy_best(a->strategy, &id, &v, NULL) && (best = cJSON_AddObjectToObject(o, "best"))) {
        cJSON_AddNumberToObject(best, "id", (double)id);
        cJSON_AddNumberToObject(best, "val_bpb", v);
    } else {
        cJSON_AddNullToObject(o, "best");
    }
    int seeds = 0;
    cJSON *lowest;
    if (strategy_lowest(a->strategy, &id, &v, &seeds) &&
        (lowest = cJSON_AddObjectToObject(o, "lowest"))) {
        cJSON_AddNumberToObject(lowest, "id", (double)id);
        cJSON_AddNumberToObject(lowest, "mean_val_bpb", v);
        cJSON_AddNumberToObject(lowest, "seeds", seeds);
    } else {
        cJSON_AddNullToObject(o, "lowest");
    }
    if (a->until) {
        char when[32];
        struct tm t;
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S%z", localtime_r(&a->until, &t));
        cJSON_AddStringToObject(o, "until", when);
        if (a->last_runs_left >= 0)
            cJSON_AddNumberToObject(o, "runs_left", a->last_runs_left);
        else
            cJSON_AddNullToObject(o, "runs_left");
    }
    strategy_plan_t plan;
    strategy_current_plan(a->strategy, &plan);
    cJSON_AddItemToObject(o, "plan", strategy_plan_json(&plan));
    status_activity(a, o);
    text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text) goto oom;
    respond(res, text);
    return;
oom:
    http_error(res, 503, "out_of_memory", "out of memory");
}

/* Runs that can end within seconds_left at the pace the time budget
 * suggests (RUN_OVERHEAD, RUN_START_S) on --slots slots, less those running
 * and queued; -1 under a token budget (no pace to suggest). */
static int estimated_runs(const agent_t *a, double seconds_left, int running, int queued) {
    if (!(a->budget_s > 0)) return -1;
    if (!(seconds_left > 0)) return 0;
    double per_run = a->budget_s * (1 + RUN_OVERHEAD) + RUN_START_S;
    double fit = floor(seconds_left / per_run) * a->o.slots - running - queued;
    return fit <= 0 ? 0 : fit >= INT_MAX / 2 ? INT_MAX / 2 : (int)fit;
}

/* --until: how many runs can still end before the night does, at the pace
 * of the last PACE_RUNS that ended (before three have, at the pace the
 * budget suggests), told to the strategy before it decides on ev: the plan
 * sizes the night to it, its last proposals confirm the lowest mean, and it
 * proposes nothing that cannot end in time. */
static void tell_runs_left(agent_t *a, const cJSON *ev) {
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ev, "type"));
    if (type && !strcmp(type, "experiment.finished")) {
        if (a->n_ends == PACE_RUNS) memmove(a->ends, a->ends + 1, --a->n_ends * sizeof *a->ends);
        a->ends[a->n_ends++] = util_now();
    }
    const cJSON *running = cJSON_GetObjectItemCaseSensitive(ev, "running");
    const cJSON *queued = cJSON_GetObjectItemCaseSensitive(ev, "queue_depth");
    double left = difftime(a->until, time(NULL));
    int n_running =
        cJSON_IsNumber(running) && running->valuedouble > 0 ? (int)running->valuedouble : 0;
    int n_queued = cJSON_IsNumber(queued) && queued->valuedouble > 0 ? (int)queued->valuedouble : 0;
    int runs = strategy_runs_before(left, a->ends, a->n_ends, n_running, n_queued);
    if (runs < 0) runs = estimated_runs(a, left, n_running, n_queued);
    if (runs < 0 && left <= 0) runs = 0;
    if (runs != a->last_runs_left && runs >= 0)
        log_info("--until: %d more runs can end in time (%.0f minutes left)", runs, left / 60);
    a->last_runs_left = runs;
    strategy_set_runs_left(a->strategy, runs);
}

static void hook_handler(const http_request_t *req, http_response_t *res, void *user) {
    agent_t *a = user;
    char err[512];
    if (origin_check(a->origin, req, res)) return;
    if (!strcmp(req->method, "GET")) {
        status_reply(a, res);
        return;
    }
    if (strcmp(req->method, "POST")) {
        http_error(res, 405, "method_not_allowed", "POST a hook event (GET for the status)");
        return;
    }
    if (webhook_verify(a->o.secret, a->o.secret_len, req->webhook_id, req->webhook_timestamp,
                       req->webhook_signature, req->body, req->body_len, (int64_t)time(NULL), err,
                       sizeof err) < 0) {
        log_warn("refusing a delivery from %s: %s", req->peer, err);
        http_error(res, 401, "unauthorized", "%s", err);
        return;
    }
    if (strlen(req->webhook_id) >= MAX_EVENT_ID) { /* it could not be remembered */
        http_error(res, 400, "invalid_webhook_id", "webhook-id: at most %d bytes",
                   MAX_EVENT_ID - 1);
        return;
    }
    const char *again = replay(a, req->webhook_id);
    if (again) {
        char *copy = strdup(again);
        if (!copy) {
            http_error(res, 503, "out_of_memory", "out of memory");
            return;
        }
        log_info("delivery %s again: answering as the first time", req->webhook_id);
        respond(res, copy);
        return;
    }
    cJSON *ev = http_json_parse(req->body, req->body_len, err, sizeof err), *reply = NULL;
    if (!cJSON_IsObject(ev)) {
        if (ev) snprintf(err, sizeof err, "not a JSON object");
        cJSON_Delete(ev);
        http_error(res, 400, "invalid_json", "the body is %s", err);
        return;
    }
    if (a->until) tell_runs_left(a, ev);
    if (strategy_decide(a->strategy, ev, &reply, err, sizeof err) < 0) {
        cJSON_Delete(ev);
        http_error(res, 400, "invalid_event", "%s", err);
        return;
    }
    snprintf(a->last_event, sizeof a->last_event, "%s",
             cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ev, "type")));
    a->last_event_at = util_now();
    a->last_proposed = cJSON_GetArraySize(reply);
    cJSON_Delete(ev);
    /* One proposal goes out as an object, several (or none) as an array. */
    char *text = util_json_print(cJSON_GetArraySize(reply) == 1 ? reply->child : reply, 0);
    cJSON_Delete(reply);
    if (!text) {
        http_error(res, 503, "out_of_memory", "out of memory");
        return;
    }
    if (a->o.state[0] && strategy_save(a->strategy, a->o.state, err, sizeof err) < 0)
        log_error("saving the state: %s", err);
    remember(a, req->webhook_id, text);
    respond(res, text);
}

/* --------------------------------------------------------------- options */

static int set_secret(void *opts, const char *text, size_t len, const char *what, char *err,
                      size_t errlen) {
    agent_opts_t *o = opts;
    if (len == 0 || len > MAX_SECRET) {
        snprintf(err, errlen, "%s: the secret must be 1 to %d bytes", what, MAX_SECRET);
        return -1;
    }
    free(o->secret);
    if (!(o->secret = malloc(len + 1))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(o->secret, text, len);
    o->secret[len] = '\0';
    o->secret_len = len;
    return 0;
}

/* The setters of the rows whose values are not plain. */

static int set_listen(void *o, const char *val, char *err, size_t errlen) {
    agent_opts_t *ao = o;
    return http_parse_listen(val, ao->host, sizeof ao->host, &ao->port, err, errlen);
}

/* --until HH:MM (or H:MM), a local time on the 24-hour clock. */
static int set_until(void *o, const char *val, char *err, size_t errlen) {
    agent_opts_t *ao = o;
    int h, m, end = 0;
    size_t len = strlen(val);
    if (len < 4 || len > 5 || val[len - 3] != ':' || sscanf(val, "%2d:%2d%n", &h, &m, &end) != 2 ||
        (size_t)end != len || h < 0 || h > 23 || m < 0 || m > 59) {
        snprintf(err, errlen,
                 "--until: expected a local time HH:MM (00:00 to 23:59), got \"%.32s\"", val);
        return -1;
    }
    ao->has_until = true;
    ao->until_min = h * 60 + m;
    return 0;
}

/* The next local time of day `minutes` after midnight, after now. */
static time_t next_local_time(int minutes, time_t now) {
    struct tm t;
    localtime_r(&now, &t);
    t.tm_hour = minutes / 60;
    t.tm_min = minutes % 60;
    t.tm_sec = 0;
    t.tm_isdst = -1;
    time_t at = mktime(&t);
    if (at <= now) {
        t.tm_mday++; /* mktime normalises the day, across months and DST */
        t.tm_hour = minutes / 60;
        t.tm_min = minutes % 60;
        t.tm_isdst = -1;
        at = mktime(&t);
    }
    return at;
}

static int set_secret_arg(void *o, const char *val, char *err, size_t errlen) {
    return set_secret(o, val, strlen(val), "--secret", err, errlen);
}

static int set_secret_file(void *o, const char *path, char *err, size_t errlen) {
    size_t len;
    char e2[256];
    char *text = util_read_secret(path, MAX_SECRET + 2, &len, e2, sizeof e2);
    if (!text) {
        snprintf(err, errlen, "--secret-file %s", e2);
        return -1;
    }
    int rc = set_secret(o, text, len, path, err, errlen);
    free(text);
    return rc;
}

#define FIELD(m) .offset = offsetof(agent_opts_t, m)
#define TEXT(m)  FIELD(m), .size = sizeof((agent_opts_t *)0)->m
#define STR_(x)  #x
#define STR(x)   STR_(x)

static const char *const strategy_names[] = {
    [STRATEGY_CLIMB] = "climb", [STRATEGY_TPE] = "tpe", [STRATEGY_RANDOM] = "random", NULL};

/* Every option of the agent, in the order of its help. */
static const opt_t agent_rows[] = {
    {"listen", OPT_CUSTOM, .set = set_listen, .sdef = "127.0.0.1:" STR(DEFAULT_PORT),
     .arg = "HOST:PORT",
     .help = "where the daemon's hook POSTs (port 0 picks a free port and prints it)"},
    {"secret", OPT_CUSTOM, .set = set_secret_arg, .flags = OPT_SECRET,
     .env = "NIGHTSHIFT_AGENT_SECRET", .arg = "S",
     .help = "the webhook signature's secret, shared with the daemon (also "
             "$NIGHTSHIFT_AGENT_SECRET); one of the three is required"},
    {"secret-file", OPT_CUSTOM, .set = set_secret_file, .arg = "F",
     .help = "the secret from a file"},
    {"baseline", OPT_STRING, TEXT(baseline), .sdef = DEFAULT_BASE, .arg = "FILE",
     .help = "the spec the night starts from"},
    {"space", OPT_STRING, TEXT(space), .arg = "FILE",
     .help = "the search space (default " DEFAULT_SPACE " under the working directory, else "
             "under the source tree the binary was built in)"},
    {"strategy", OPT_ENUM, FIELD(strategy), .names = strategy_names, .def = STRATEGY_CLIMB,
     .arg = "S",
     .help = "climb (mutate the best), random (uniform draws) or tpe (a model of everything "
             "seen, with local moves of the lowest mean)"},
    {"confirm-frac", OPT_NUM, FIELD(confirm_frac), .lo = 0, .hi = 1,
     .def = STRATEGY_CONFIRM_FRAC_AUTO, .arg = "F",
     .help = "random, tpe: mid-night confirmation seeds at most this fraction of the proposals "
             "(default the plan's: 0.25, none for tpe below 32 runs)"},
    {"startup", OPT_INT, FIELD(startup), .lo = 0, .hi = 1 << 20, .def = STRATEGY_STARTUP_AUTO,
     .arg = "N",
     .help = "tpe: random draws until N configurations have results (default the plan's: 5/8 "
             "of the night in [5, 10], 5 when its length is unknown)"},
    {"confirm-seeds", OPT_INT, FIELD(confirm_seeds), .lo = 0, .hi = 63,
     .def = STRATEGY_CONFIRM_AUTO, .arg = "K",
     .help = "random, tpe: further seeds the night's answer gets among its last proposals "
             "(default the plan's: 1 below 32 runs (tpe none), 2 below 64, 3 from there)"},
    {"final-runs", OPT_INT, FIELD(final_runs), .lo = 0, .hi = 1 << 20, .def = STRATEGY_FINAL_AUTO,
     .arg = "N",
     .help = "random, tpe: the night's last N proposals re-measure the best few configurations "
             "(default the plan's: tpe min(16, a sixth of the night) from 64 runs, else none)"},
    {"local-frac", OPT_NUM, FIELD(local_frac), .lo = 0, .hi = 1, .def = STRATEGY_DEFAULT_LOCAL,
     .arg = "F",
     .help = "tpe: this fraction of the proposals moves one or two axes of the lowest mean "
             "seen instead of asking the model"},
    {"state", OPT_STRING, TEXT(state), .arg = "FILE",
     .help = "save the agent's state here after every decision, and resume from it"},
    {"seed", OPT_INT64, FIELD(seed), .lo = 0, .hi = 9007199254740991.0,
     .def = STRATEGY_DEFAULT_SEED, .arg = "N", .help = "seeds the mutations"},
    {"max-proposals", OPT_INT, FIELD(max_proposals), .lo = 0, .hi = INT_MAX, .def = 0, .arg = "N",
     .help = "stop proposing after N (the night's length in runs: random and tpe spend its "
             "last proposals confirming the lowest mean); 0 = no limit"},
    {"until", OPT_CUSTOM, .set = set_until, .arg = "HH:MM",
     .help = "the night's end, a local time: the plan is sized to the runs that can end "
             "before it (at the pace of the last runs; before three have ended, at the "
             "baseline's time budget on --slots slots), random and tpe spend the last ones "
             "confirming the lowest mean, and nothing that cannot end in time is proposed"},
    {"slots", OPT_INT, FIELD(slots), .lo = 1, .hi = 1024, .def = 1, .arg = "N",
     .help = "runs the daemon trains at once, for --until's count before the pace is measured"},
    {"noise-floor", OPT_NUM, FIELD(noise_floor), .lo = 0, .hi = 1e6, .def = 0, .arg = "BPB",
     .help = "adopt a variant that gains more than BPB; 0 = none: more than two standard "
             "errors of the difference"},
    {"noise-seeds", OPT_INT, FIELD(noise_seeds), .lo = 0, .hi = 64,
     .def = STRATEGY_NOISE_SEEDS_AUTO, .arg = "K",
     .help = "seeds of the baseline, to measure the noise; 0 = do not run the baseline first "
             "(default the plan's: none when earlier nights of the scope measured the noise; "
             "else climb 2 below 24 runs, 3 from there; random and tpe 1 below 64 runs, 2 "
             "below 128, 3 from there, their confirmation seeds measuring the rest; 3 and 1 "
             "when the night's length is unknown)"},
    {"max-seeds", OPT_INT, FIELD(max_seeds), .lo = 1, .hi = 64, .def = STRATEGY_DEFAULT_MAX_SEEDS,
     .arg = "K", .help = "seeds a promising variant gets before it is discarded"},
    {"queue", OPT_INT, FIELD(queue_target), .lo = 1, .hi = 1024, .def = STRATEGY_QUEUE_AUTO,
     .arg = "N", .help = "proposals kept queued (default one per experiment seen running at once)"},
};

static const opt_table_t agent_options = {
    .program = "agent",
    .rows = agent_rows,
    .n = sizeof agent_rows / sizeof agent_rows[0],
    .about = "       nightshift agent status [--url URL]   (what a running agent is doing)\n"
             "The reference search agent: point the daemon's hook at POST /hook on this\n"
             "address. Every delivery must carry a valid webhook signature made with the\n"
             "shared secret. It sizes its plan to the night's length (--max-proposals, or\n"
             "--until at the runs' pace): the baseline's noise seeds (none when earlier\n"
             "nights of the scope measured the noise), tpe's startup draws, and the\n"
             "confirmation seeds of the answer; the plan is in its log and its status. It\n"
             "runs the baseline first to measure the seed-to-seed noise, then proposes\n"
             "points of the search\n"
             "space (--space) by --strategy: climb mutates the best configuration one or\n"
             "two axes at a time; random draws uniformly; tpe models val_bpb over every\n"
             "result it has seen.\n"
             "Whatever the strategy, it adopts a variant as the night's best only when its\n"
             "mean val_bpb beats the best mean by more than two standard errors,\n"
             "2 * s * sqrt(1/n_best + 1/n_variant) with s the pooled standard deviation of\n"
             "configurations run with several seeds. climb re-runs every variant that is\n"
             "better but not by that much, up to --max-seeds; random and tpe give a further\n"
             "seed only to the lowest mean seen, past one standard error, within\n"
             "--confirm-frac of the proposals.\n",
};

/* Returns 0, 1 for --help, 2 for a usage error, -1 with err. */
static int parse_args(int argc, char **argv, agent_opts_t *o, char *err, size_t errlen) {
    int rc = opts_parse(&agent_options, o, argc, argv, err, errlen);
    if (rc != 0) return rc;
    const char *env = getenv("NIGHTSHIFT_AGENT_SECRET");
    if (!o->secret && env && *env &&
        set_secret(o, env, strlen(env), "NIGHTSHIFT_AGENT_SECRET", err, errlen) < 0)
        return -1;
    if (!o->secret) {
        snprintf(err, errlen,
                 "a secret is required (--secret, --secret-file or "
                 "NIGHTSHIFT_AGENT_SECRET)");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ run */

static void close_signal_cb(uv_handle_t *h) {
    (void)h;
}

static void signal_cb(uv_signal_t *h, int signum) {
    agent_t *a = h->data;
    if (a->stopping) return;
    a->stopping = 1;
    log_info("%s: stopping the agent", signum == SIGINT ? "SIGINT" : "SIGTERM");
    http_server_close(a->http, NULL, NULL);
    a->http = NULL;
    uv_close((uv_handle_t *)&a->sigint, close_signal_cb);
    uv_close((uv_handle_t *)&a->sigterm, close_signal_cb);
}

/* The default space: DEFAULT_SPACE under the working directory (as the
 * default --baseline is), else under the source tree the binary was built in
 * (the binary is <tree>/build/nightshift). Writes the path into out. */
static void find_space(char *out, size_t n) {
    char exe[PATH_MAX];
    snprintf(out, n, "%s", DEFAULT_SPACE);
    if (access(out, R_OK) == 0) return;
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return;
    exe[len] = '\0';
    for (int up = 0; up < 2; up++) {
        char *slash = strrchr(exe, '/');
        if (!slash) return;
        *slash = '\0';
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", exe, DEFAULT_SPACE) < (int)sizeof path &&
            access(path, R_OK) == 0) {
            snprintf(out, n, "%s", path);
            return;
        }
    }
}

static int run_agent(agent_t *a) {
    char err[512];
    spec_t base;
    int rc = 1, loop_ready = 0;
    if (!a->o.space[0]) find_space(a->o.space, sizeof a->o.space);
    if (!(a->space = space_load(a->o.space, err, sizeof err))) goto out;
    if (spec_load(a->o.baseline, &base, err, sizeof err) < 0) goto out;
    strategy_opts_t so;
    strategy_opts_default(&so);
    so.kind = (strategy_kind)a->o.strategy;
    so.space = a->space;
    so.confirm_frac = a->o.confirm_frac;
    so.n_startup = a->o.startup;
    so.confirm_seeds = a->o.confirm_seeds;
    so.final_runs = a->o.final_runs;
    so.local_frac = a->o.local_frac;
    so.noise_floor = a->o.noise_floor;
    so.noise_seeds = a->o.noise_seeds;
    a->budget_s = base.token_budget > 0 || base.flops_budget > 0 ? 0 : base.time_budget_s;
    so.max_seeds = a->o.max_seeds;
    so.queue_target = a->o.queue_target;
    so.seed = (uint64_t)a->o.seed;
    so.max_proposals = a->o.max_proposals;
    so.log = strategy_log_cb;
    so.log_user = a;
    a->strategy = strategy_new(&base, &so, err, sizeof err);
    spec_free(&base);
    if (!a->strategy) goto out;
    a->last_runs_left = -1;
    if (a->o.has_until) {
        char when[64];
        struct tm t;
        a->until = next_local_time(a->o.until_min, time(NULL));
        strftime(when, sizeof when, "%Y-%m-%d %H:%M %Z", localtime_r(&a->until, &t));
        log_info("the night ends at %s (--until)", when);
    }
    if (a->o.state[0]) {
        int loaded = strategy_load(a->strategy, a->o.state, err, sizeof err);
        if (loaded < 0) goto out;
        int64_t id;
        double v;
        if (loaded == 1)
            log_info("no state in %s yet: starting from the baseline", a->o.state);
        else if (strategy_best(a->strategy, &id, &v, NULL))
            log_info("resumed from %s: best #%lld (val_bpb %.4f), %d proposals so far", a->o.state,
                     (long long)id, v, strategy_n_proposals(a->strategy));
        else
            log_info("resumed from %s: nothing adopted yet, %d proposals so far", a->o.state,
                     strategy_n_proposals(a->strategy));
    }

    if (a->until) { /* the night's length before any run has ended: the budget's pace */
        int runs = estimated_runs(a, difftime(a->until, time(NULL)), 0, 0);
        a->last_runs_left = runs;
        if (runs >= 0) {
            log_info("--until: about %d runs can end in time (%g s budget, %d slot%s), until "
                     "the runs' own pace is measured",
                     runs, a->budget_s, a->o.slots, a->o.slots == 1 ? "" : "s");
            strategy_set_runs_left(a->strategy, runs);
        }
    }
    {
        strategy_plan_t plan;
        char text[320];
        strategy_current_plan(a->strategy, &plan);
        strategy_plan_text(so.kind, &plan, text, sizeof text);
        log_info("plan: %s", text);
    }

    uv_loop_init(&a->loop);
    loop_ready = 1;
    http_limits_t lim;
    http_limits_default(&lim);
    lim.max_body_bytes = 16 << 20; /* a payload carries many full specs */
    int port = 0;
    origin_opts_t oo = {.listen_host = a->o.host};
    if (origin_policy_new(&oo, &a->origin, err, sizeof err) < 0 ||
        http_server_start(&a->loop, a->o.host, a->o.port, &lim, hook_handler, a, &a->http, &port,
                          err, sizeof err) < 0)
        goto out;
    uv_signal_init(&a->loop, &a->sigint);
    uv_signal_init(&a->loop, &a->sigterm);
    a->sigint.data = a->sigterm.data = a;
    uv_signal_start(&a->sigint, signal_cb, SIGINT);
    uv_signal_start(&a->sigterm, signal_cb, SIGTERM);
    char rule[64] = "2 standard errors";
    if (a->o.noise_floor > 0) snprintf(rule, sizeof rule, "noise floor %g", a->o.noise_floor);
    log_info("nightshift agent: strategy %s over %d ax%s of %s, baseline %s, "
             "adopting past %s, state %s",
             strategy_kind_name(so.kind), a->space->n_axes, a->space->n_axes == 1 ? "is" : "es",
             a->o.space, a->o.baseline, rule, a->o.state[0] ? a->o.state : "not kept");
    /* The one line on stdout: scripts and tests read the bound port from it. */
    printf("listening on http://%s%s%s:%d\n", strchr(a->o.host, ':') ? "[" : "", a->o.host,
           strchr(a->o.host, ':') ? "]" : "", port);
    fflush(stdout);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    log_info("stopped");
    rc = 0;
out:
    if (rc) log_error("agent: %s", err);
    if (loop_ready) {
        uv_run(&a->loop, UV_RUN_NOWAIT); /* let close callbacks run */
        if (uv_loop_close(&a->loop) != 0) log_warn("some handles were still open at exit");
    }
    return rc;
}

int agent_main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "status")) return agent_status_main(argc - 1, argv + 1);
    agent_t *a = calloc(1, sizeof *a);
    char err[512];
    if (!a) return 1;
    agent_opts_t *o = &a->o;
    int rc = parse_args(argc, argv, o, err, sizeof err);
    if (rc != 0) {
        if (rc < 0) fprintf(stderr, "agent: %s\n", err);
        opts_usage(&agent_options, rc == 1 ? stdout : stderr, rc == 1);
        free(o->secret);
        free(a);
        return rc == 1 ? 0 : 2;
    }
    signal(SIGPIPE, SIG_IGN);
    rc = run_agent(a);
    strategy_free(a->strategy);
    space_free(a->space);
    origin_policy_free(a->origin);
    forget(a, a->n_seen);
    free(o->secret);
    free(a);
    return rc;
}

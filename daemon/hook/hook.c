/* hook.c - the outbound agent hook (see hook.h): events built from the store,
 * signed, POSTed with libcurl multi on the daemon's libuv loop, retried with
 * backoff, every attempt recorded; the agent's reply queued as proposals.
 *
 * libcurl runs in its multi-socket mode on the loop (curl_uv.h); finished
 * transfers are collected with curl_multi_info_read after each socket action.
 * Nothing here blocks the loop: name resolution is curl's threaded resolver,
 * and every wait is a libuv handle.
 *
 * The outbox: every event is a row of the events table (events.h) before it
 * is sent: experiment.finished rows are written by the store's trigger with
 * the final status, queue.empty and experiment.rejected rows here. The hook
 * loads the rows it is told about (an experiment's, or the one it wrote) and,
 * at start, every pending row, so events left undelivered by the last run are
 * redelivered with their webhook-id. It builds a body once and stores it,
 * counts attempts in the row and marks it delivered or failed. At shutdown
 * pending rows stay pending.
 *
 * Events wait in a FIFO for one of MAX_IN_FLIGHT transfers; a failed attempt
 * that may be retried waits on its own uv_timer (full jitter: a uniform delay
 * in [0, min(60 s, base * 2^(attempt-1))]) and then joins the FIFO again.
 *
 * Ownership: the hook owns its events. An event owns its payload, its easy
 * handle and header list while a transfer runs, its reply buffer and its
 * retry timer; it is freed only in that timer's close callback. hook_close
 * closes everything
 * and frees the hook when the last of its handles has closed. */
#include "daemon/hook/hook.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/shared/bytebuf.h"
#include "daemon/shared/curl_uv.h"
#include "daemon/shared/http.h"
#include "daemon/shared/log.h"
#include "daemon/exec/sched.h"
#include "engine/spec.h"
#include "daemon/store/store.h"
#include "engine/util.h"
#include "daemon/shared/webhook.h"

#define MAX_IN_FLIGHT    4         /* concurrent transfers; more events wait in the FIFO */
#define MAX_REPLY_BYTES  (1 << 20) /* a bigger 2xx reply is malformed */
#define MAX_PROPOSALS    64        /* specs accepted from one reply */
#define REJECTED_PER_MIN 16        /* experiment.rejected events sent per minute, at most */
#define BACKOFF_CAP_S    60.0
#define ECHO_MAX         4096 /* bytes of a malformed reply echoed back in experiment.rejected */
#define ERROR_SNIPPET    200  /* bytes of a failed reply's body kept in the error */
#define EVENT_ID_LEN     37   /* "evt_" + 32 hex + NUL */
#define EVENT_TYPE_LEN   48
#define OUTBOX_LOAD      1000 /* pending rows loaded at once */

#define EV_FINISHED STORE_EVENT_FINISHED
#define EV_EMPTY    STORE_EVENT_EMPTY
#define EV_REJECTED STORE_EVENT_REJECTED

typedef enum { EV_WAITING, EV_SENDING, EV_BACKOFF } event_state;

typedef struct event event_t;
struct event {
    hook_t *h;
    int64_t row; /* its id in the events table */
    char id[EVENT_ID_LEN];
    char type[EVENT_TYPE_LEN]; /* EV_* */
    char *body;                /* the JSON payload, the same bytes on every attempt */
    size_t body_len;
    int attempt; /* attempts started so far (also by earlier runs of the daemon) */
    event_state state;
    uint64_t sent_ns; /* uv_hrtime at the start of the current attempt */
    /* the current transfer (EV_SENDING only) */
    CURL *easy;
    struct curl_slist *headers;
    char curl_err[CURL_ERROR_SIZE];
    bytebuf_t reply;      /* capped at MAX_REPLY_BYTES; err NS_ERR_TOO_LARGE past it */
    uv_timer_t retry;     /* backoff; its close callback frees the event */
    event_t *next_wait;   /* FIFO of events waiting for a transfer */
    event_t *prev, *next; /* every live event */
};

struct hook {
    uv_loop_t *loop;
    core_t *core;
    void (*attempted)(int ok, void *user); /* hook_opts_t's */
    void *attempted_user;
    char *url, *secret, *noproxy;
    int max_attempts;
    double timeout_s, idle_resend_s, backoff_base_s;
    CURLM *multi;
    int curl_inited;
    curl_uv_t *curl;       /* the multi on the loop; multi is its handle */
    uv_timer_t idle_timer; /* queue.empty re-sends while idle */
    cJSON *defaults;       /* the spec with every default, sent in each payload */
    event_t *events;       /* every live event */
    event_t *wait_head, *wait_tail;
    int in_flight;
    int empty_pending;                      /* live queue.empty events */
    uint64_t rejected_at[REJECTED_PER_MIN]; /* uv_now (ms) of the last sends, a ring */
    int rejected_next, rejected_count;
    double proposals_per_min;    /* the bucket's size and refill rate; <= 0: no limit */
    double proposal_tokens;      /* proposals that may be accepted now */
    uint64_t proposal_refill_ms; /* uv_now at the last refill */
    int closing;
    int open_handles; /* initialised handles whose close callback has not run */
    void (*done)(void *arg);
    void *done_arg;
};

static void start_transfers(hook_t *h);

/* ------------------------------------------------------------------ helpers */

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A uniform double in [0, 1) from the CSPRNG (only jitter: quality is moot). */
static double random_unit(void) {
    uint32_t r = 0;
    if (RAND_bytes((unsigned char *)&r, sizeof r) != 1) r = (uint32_t)rand();
    return r / 4294967296.0;
}

/* Copy at most max bytes of text into a new string, cut back to a UTF-8
 * character boundary, with control characters other than \t \n \r made '?'.
 * The caller frees it; NULL when out of memory. */
static char *printable_prefix(const char *text, size_t len, size_t max) {
    size_t n = len < max ? len : max;
    if (n < len)
        while (n > 0 && ((unsigned char)text[n] & 0xC0) == 0x80) n--;
    char *out = malloc(n + 1);
    if (!out) return NULL;
    util_clean_text(out, text, n, UTIL_CTRL_KEEP_WS);
    return out;
}

/* ------------------------------------------------------------------ payload */

/* A new object with the named members moved out of src (absent ones are
 * null). The caller owns it; NULL when out of memory. */
static cJSON *pick(cJSON *src, const char *const *keys) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; o && keys[i]; i++) {
        cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(src, keys[i]);
        if (!v) v = cJSON_CreateNull();
        if (!v || !cJSON_AddItemToObject(o, keys[i], v)) {
            cJSON_Delete(v);
            cJSON_Delete(o);
            o = NULL;
        }
    }
    return o;
}

/* The best configuration of the scope the daemon last finished a run in,
 * as {id, name, val_bpb (its first run's), mean_val_bpb, val_bpb_sd, n_seeds,
 * seeds, spec, result}, or null; and that scope's measured noise into *noise
 * (store_noise's object, or null). Either may be NULL when out of memory. */
static cJSON *best_json(hook_t *h, cJSON **noise) {
    static const char *const keys[] = {"id",    "name", "mean_val_bpb", "val_bpb_sd", "n_seeds",
                                       "seeds", "spec", "result",       NULL};
    char err[256];
    store_scope_t sc;
    *noise = NULL;
    int have = store_last_scope(h->core->store, &sc, err, sizeof err);
    cJSON *best = have > 0 ? store_best_in(h->core->store, &sc, err, sizeof err) : NULL;
    if (have > 0 && best) *noise = store_noise(h->core->store, &sc, err, sizeof err);
    if (have < 0 || (have > 0 && (!best || !*noise))) log_error("hook: best: %s", err);
    if (!*noise) *noise = cJSON_CreateNull();
    if (!cJSON_IsObject(best)) {
        cJSON_Delete(best);
        return cJSON_CreateNull();
    }
    cJSON *o = pick(best, keys);
    cJSON_Delete(best);
    if (!o) return NULL;
    const cJSON *bpb =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "result"), "val_bpb");
    cJSON *v = cJSON_IsNumber(bpb) ? cJSON_CreateNumber(bpb->valuedouble) : cJSON_CreateNull();
    if (!v || !cJSON_AddItemToObject(o, "val_bpb", v)) {
        cJSON_Delete(v);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The experiment of an experiment.finished event, {id, name, status, reason,
 * spec, result, asha}; NULL (logged) when it cannot be read. */
static cJSON *experiment_json(hook_t *h, int64_t id) {
    static const char *const keys[] = {"id",   "name",   "status", "reason",
                                       "spec", "result", "asha",   NULL};
    char err[256];
    cJSON *e = NULL;
    if (store_get(h->core->store, id, 0, &e, err, sizeof err) < 0) {
        log_error("hook: experiment %lld: %s", (long long)id, err);
        return NULL;
    }
    cJSON *o = pick(e, keys);
    cJSON_Delete(e);
    return o;
}

/* The whole payload of one event (hook.h). experiment and rejected are taken
 * (either may be NULL for a JSON null). Returns the malloc'd text (caller
 * frees), or NULL when out of memory. */
static char *build_payload(hook_t *h, const char *id, const char *type, cJSON *experiment,
                           cJSON *rejected) {
    char created[STORE_TIME_LEN], err[256];
    char *text = NULL;
    store_format_time((int64_t)now_ms(), created, sizeof created);
    cJSON *o = cJSON_CreateObject();
    if (!o) goto done;
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddStringToObject(o, "created", created);
    cJSON_AddItemToObject(o, "experiment", experiment ? experiment : cJSON_CreateNull());
    experiment = NULL;
    cJSON_AddItemToObject(o, "rejected", rejected ? rejected : cJSON_CreateNull());
    rejected = NULL;
    cJSON *noise = NULL;
    cJSON_AddItemToObject(o, "best", best_json(h, &noise));
    cJSON_AddItemToObject(o, "noise", noise);
    cJSON *recent = store_recent(h->core->store, HOOK_RECENT, err, sizeof err);
    if (!recent) log_error("hook: recent: %s", err);
    cJSON_AddItemToObject(o, "recent", recent ? recent : cJSON_CreateArray());
    int64_t depth = store_queue_depth(h->core->store, err, sizeof err);
    if (depth < 0) log_error("hook: queue depth: %s", err);
    cJSON_AddNumberToObject(o, "queue_depth", depth < 0 ? 0 : (double)depth);
    cJSON_AddNumberToObject(o, "running", h->core->sched ? sched_running(h->core->sched) : 0);
    cJSON_AddItemToObject(o, "defaults", cJSON_Duplicate(h->defaults, 1));
    text = util_json_print(o, 0);
done:
    cJSON_Delete(experiment);
    cJSON_Delete(rejected);
    cJSON_Delete(o);
    return text;
}

/* ------------------------------------------------------------------- events */

/* One of the hook's handles has closed; after the last one (only possible
 * once hook_close ran: the hook's own timers stay open until then) the hook
 * is freed and done is called. */
static void hook_release(hook_t *h) {
    if (--h->open_handles > 0 || !h->closing) return;
    void (*done)(void *) = h->done;
    void *arg = h->done_arg;
    cJSON_Delete(h->defaults);
    free(h->url);
    free(h->secret);
    free(h->noproxy);
    if (h->curl_inited) curl_global_cleanup();
    free(h);
    if (done) done(arg);
}

static void timer_closed_cb(uv_handle_t *handle) {
    hook_release(handle->data);
}

static void curl_closed(void *arg) {
    hook_release(arg);
}

static void event_closed_cb(uv_handle_t *handle) {
    event_t *ev = handle->data;
    hook_t *h = ev->h;
    free(ev->body);
    bytebuf_free(&ev->reply);
    free(ev);
    hook_release(h);
}

/* Unlink ev and close its timer; the close callback frees it. */
static void event_finish(event_t *ev) {
    hook_t *h = ev->h;
    if (ev->prev)
        ev->prev->next = ev->next;
    else
        h->events = ev->next;
    if (ev->next) ev->next->prev = ev->prev;
    if (!strcmp(ev->type, EV_EMPTY)) h->empty_pending--;
    uv_close((uv_handle_t *)&ev->retry, event_closed_cb);
}

static void wait_push(hook_t *h, event_t *ev) {
    ev->state = EV_WAITING;
    ev->next_wait = NULL;
    if (h->wait_tail)
        h->wait_tail->next_wait = ev;
    else
        h->wait_head = ev;
    h->wait_tail = ev;
}

/* An event from an outbox row ({id, type, webhook_id, experiment_id,
 * payload, body, attempts}: store_events_pending), queued for delivery. A row
 * without a body gets one, stored for every later attempt. */
static void event_load(hook_t *h, const cJSON *row) {
    char err[256];
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(row, "type"));
    const char *wid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(row, "webhook_id"));
    const char *body = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(row, "body"));
    int64_t rowid = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(row, "id"));
    int64_t exp_id =
        (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(row, "experiment_id"));
    event_t *ev = calloc(1, sizeof *ev);
    if (!ev || !type || !wid) {
        log_error("hook: event %lld: out of memory; it stays in the outbox", (long long)rowid);
        free(ev);
        return;
    }
    ev->h = h;
    ev->row = rowid;
    bytebuf_init(&ev->reply, MAX_REPLY_BYTES);
    snprintf(ev->id, sizeof ev->id, "%s", wid);
    snprintf(ev->type, sizeof ev->type, "%s", type);
    ev->attempt = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(row, "attempts"));
    if (body) {
        ev->body = strdup(body);
    } else {
        cJSON *experiment = NULL, *rejected = NULL;
        if (!strcmp(type, EV_FINISHED) && exp_id > 0) experiment = experiment_json(h, exp_id);
        if (!strcmp(type, EV_REJECTED))
            rejected =
                cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(
                                    cJSON_GetObjectItemCaseSensitive(row, "payload"), "rejected"),
                                1);
        ev->body = build_payload(h, ev->id, type, experiment, rejected);
        if (ev->body && store_event_set_body(h->core->store, rowid, ev->body, err, sizeof err) < 0)
            log_error("hook: %s: %s", ev->id, err);
    }
    if (!ev->body) {
        log_error("hook: %s: out of memory; it stays in the outbox", type);
        free(ev);
        return;
    }
    ev->body_len = strlen(ev->body);
    uv_timer_init(h->loop, &ev->retry);
    ev->retry.data = ev;
    h->open_handles++;
    ev->next = h->events;
    if (h->events) h->events->prev = ev;
    h->events = ev;
    if (!strcmp(type, EV_EMPTY)) h->empty_pending++;
    log_debug("hook: %s %s queued (%zu bytes)", type, ev->id, ev->body_len);
    wait_push(h, ev);
}

/* Is outbox row id being delivered already? */
static int row_live(const hook_t *h, int64_t id) {
    for (const event_t *ev = h->events; ev; ev = ev->next)
        if (ev->row == id) return 1;
    return 0;
}

/* Load pending outbox rows with id > after (and about experiment_id, when
 * > 0; at most limit) that are not live yet, and start sending them. Returns
 * how many rows matched; *last (may be NULL) gets the last one's id. */
static int outbox_load(hook_t *h, int64_t after, int64_t experiment_id, int limit, int64_t *last) {
    char err[256];
    int n = 0;
    if (h->closing) return 0;
    cJSON *rows =
        store_events_pending(h->core->store, after, experiment_id, limit, err, sizeof err);
    if (!rows) log_error("hook: outbox: %s", err);
    for (const cJSON *r = rows ? rows->child : NULL; r; r = r->next, n++) {
        int64_t id = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "id"));
        if (last) *last = id;
        if (!row_live(h, id)) event_load(h, r);
    }
    cJSON_Delete(rows);
    start_transfers(h);
    return n;
}

/* Write an event of type with payload (taken; NULL = {}) to the outbox, then
 * send it. */
static void outbox_add(hook_t *h, const char *type, cJSON *payload) {
    char err[256];
    char *text = payload ? util_json_print(payload, 0) : NULL;
    int64_t id = 0;
    cJSON_Delete(payload);
    if (payload && !text)
        log_error("hook: %s: out of memory; event dropped", type);
    else if (store_event_add(h->core->store, type, 0, text, &id, err, sizeof err) < 0)
        log_error("hook: %s: %s; event dropped", type, err);
    cJSON_free(text);
    if (id > 0) outbox_load(h, id - 1, 0, 1, NULL);
}

/* At most REJECTED_PER_MIN experiment.rejected events per minute: an agent
 * that keeps proposing garbage must not turn the hook into a busy loop. */
static int rejected_allowed(hook_t *h) {
    uint64_t now = uv_now(h->loop);
    if (h->rejected_count == REJECTED_PER_MIN && now - h->rejected_at[h->rejected_next] < 60 * 1000)
        return 0;
    h->rejected_at[h->rejected_next] = now;
    h->rejected_next = (h->rejected_next + 1) % REJECTED_PER_MIN;
    if (h->rejected_count < REJECTED_PER_MIN) h->rejected_count++;
    return 1;
}

/* May one more proposal be queued now (token bucket)? Refills first. */
static int proposal_allowed(hook_t *h) {
    if (h->proposals_per_min <= 0) return 1;
    uint64_t now = uv_now(h->loop);
    h->proposal_tokens += (double)(now - h->proposal_refill_ms) / 60000.0 * h->proposals_per_min;
    if (h->proposal_tokens > h->proposals_per_min) h->proposal_tokens = h->proposals_per_min;
    h->proposal_refill_ms = now;
    return h->proposal_tokens >= 1;
}

/* The rejection code (hook.h) of a core_submit failure rc. */
static const char *submit_code(int rc) {
    switch (rc) {
    case NS_ERR_NOT_FOUND:
        return "unknown_parent";
    case NS_ERR_DOES_NOT_FIT:
        return "does_not_fit";
    case NS_ERR_IO:
    case NS_ERR_NOMEM:
        return "internal";
    default:
        return "invalid_spec";
    }
}

/* Answer a bad proposal with experiment.rejected: code (hook.h) for the
 * agent to decide on, error for people. proposal is taken. */
static void send_rejected(hook_t *h, cJSON *proposal, const char *code, const char *error) {
    if (!rejected_allowed(h)) {
        log_warn("hook: more than %d rejected proposals in a minute: not telling the agent "
                 "about this one (%s)",
                 REJECTED_PER_MIN, error);
        cJSON_Delete(proposal);
        return;
    }
    cJSON *r = cJSON_CreateObject();
    if (!r || !proposal || !cJSON_AddItemToObject(r, "proposal", proposal)) {
        cJSON_Delete(proposal);
        cJSON_Delete(r);
        log_error("hook: out of memory; experiment.rejected dropped");
        return;
    }
    cJSON_AddStringToObject(r, "code", code);
    cJSON_AddStringToObject(r, "error", error);
    cJSON *payload = cJSON_CreateObject();
    if (!payload || !cJSON_AddItemToObject(payload, "rejected", r)) {
        cJSON_Delete(r);
        cJSON_Delete(payload);
        log_error("hook: out of memory; experiment.rejected dropped");
        return;
    }
    outbox_add(h, EV_REJECTED, payload);
}

/* -------------------------------------------------------------- the reply */

int hook_parse_reply(const char *text, size_t len, cJSON **proposals, char *err, size_t errlen) {
    char why[256];
    size_t i = 0;
    *proposals = NULL;
    while (i < len && text[i] && strchr(" \t\r\n", text[i])) i++;
    if (i == len) return 0; /* nothing proposed */
    cJSON *root = http_json_parse(text, len, why, sizeof why);
    if (!root) {
        snprintf(err, errlen, "reply is not a spec or an array of specs: %s", why);
        return -1;
    }
    if (cJSON_IsNull(root) || ((cJSON_IsObject(root) || cJSON_IsArray(root)) && !root->child)) {
        cJSON_Delete(root);
        return 0; /* null, {} or []: nothing proposed */
    }
    if (!cJSON_IsObject(root) && !cJSON_IsArray(root)) {
        cJSON_Delete(root);
        snprintf(err, errlen, "reply is not a spec or an array of specs");
        return -1;
    }
    *proposals = root;
    return 1;
}

/* Queue each proposal of a 2xx reply (hook.h); answer bad ones. */
static void handle_reply(hook_t *h, event_t *ev) {
    const char *text = bytebuf_str(&ev->reply);
    size_t len = ev->reply.len;
    cJSON *root = NULL;
    char err[512];

    if (ev->reply.err == NS_ERR_TOO_LARGE) {
        snprintf(err, sizeof err, "reply is larger than %d bytes", MAX_REPLY_BYTES);
        goto malformed;
    }
    int rc = hook_parse_reply(text, len, &root, err, sizeof err);
    if (rc == 0) return;
    if (rc < 0) goto malformed;
    int n = cJSON_IsArray(root) ? cJSON_GetArraySize(root) : 1;
    if (n > MAX_PROPOSALS) {
        snprintf(err, sizeof err, "reply has %d specs; at most %d are accepted at once", n,
                 MAX_PROPOSALS);
        log_warn("hook: %s: %s", ev->id, err);
        send_rejected(h, root, "too_many_proposals", err);
        return;
    }
    int queued = 0;
    for (int k = 0; k < n; k++) {
        const cJSON *spec = cJSON_IsArray(root) ? cJSON_GetArrayItem(root, k) : root;
        int64_t id = 0;
        int dup = 0;
        if (!proposal_allowed(h)) {
            snprintf(err, sizeof err,
                     "rate limited: at most %g proposals per minute are queued; not queued, "
                     "propose it again later",
                     h->proposals_per_min);
            log_warn("hook: %s: proposal %d/%d rejected: %s", ev->id, k + 1, n, err);
            send_rejected(h, cJSON_Duplicate(spec, 1), "rate_limited", err);
        } else if ((rc = core_submit(h->core, spec, "agent", 0, &id, &dup, err, sizeof err)) < 0) {
            log_warn("hook: %s: proposal %d/%d rejected: %s", ev->id, k + 1, n, err);
            send_rejected(h, cJSON_Duplicate(spec, 1), submit_code(rc), err);
        } else if (dup) {
            log_info("hook: %s: proposal %d/%d is a duplicate of experiment %lld", ev->id, k + 1, n,
                     (long long)id);
        } else {
            log_info("hook: %s: proposal %d/%d queued as experiment %lld", ev->id, k + 1, n,
                     (long long)id);
            queued++;
            h->proposal_tokens -= 1;
        }
    }
    cJSON_Delete(root);
    if (queued && h->core->sched) sched_kick(h->core->sched);
    return;

malformed:
    cJSON_Delete(root);
    log_warn("hook: %s: malformed reply (%zu bytes): %s", ev->id, len, err);
    char *echo = printable_prefix(text, len, ECHO_MAX);
    send_rejected(h, echo ? cJSON_CreateString(echo) : NULL, "malformed_reply", err);
    free(echo);
}

/* --------------------------------------------------------------- delivery */

static void record_attempt(hook_t *h, event_t *ev, int status, const char *error) {
    char err[256];
    if (h->attempted) h->attempted(status >= 200 && status <= 299, h->attempted_user);
    store_hook_delivery_t d = {.event_id = ev->id,
                               .event_type = ev->type,
                               .attempt = ev->attempt,
                               .http_status = status,
                               .latency_ms = (int64_t)((uv_hrtime() - ev->sent_ns) / 1000000),
                               .error = error};
    if (store_add_hook_delivery(h->core->store, &d, err, sizeof err) < 0)
        log_error("hook: %s attempt %d not recorded: %s", ev->id, ev->attempt, err);
}

static size_t write_cb(char *data, size_t size, size_t nmemb, void *user) {
    event_t *ev = user;
    size_t n = size * nmemb;
    /* Past the cap or out of memory, curl aborts the transfer with
     * CURLE_WRITE_ERROR; reply.err says which. */
    return bytebuf_append(&ev->reply, data, n) == 0 ? n : 0;
}

/* The headers of one attempt: the signature covers this attempt's timestamp. */
static struct curl_slist *signed_headers(hook_t *h, event_t *ev) {
    char ts[32], line[160], sig[WEBHOOK_SIG_LEN + 1];
    snprintf(ts, sizeof ts, "%lld", (long long)time(NULL));
    if (webhook_sign(h->secret, strlen(h->secret), ev->id, ts, ev->body, ev->body_len, sig) < 0)
        return NULL;

    struct curl_slist *list = NULL, *t;
    const char *fixed[] = {"Content-Type: application/json", "Expect:", NULL};
    for (int i = 0; fixed[i]; i++) {
        if (!(t = curl_slist_append(list, fixed[i]))) goto fail;
        list = t;
    }
    snprintf(line, sizeof line, "webhook-id: %s", ev->id);
    if (!(t = curl_slist_append(list, line))) goto fail;
    list = t;
    snprintf(line, sizeof line, "webhook-timestamp: %s", ts);
    if (!(t = curl_slist_append(list, line))) goto fail;
    list = t;
    snprintf(line, sizeof line, "webhook-signature: %s", sig);
    if (!(t = curl_slist_append(list, line))) goto fail;
    return t;
fail:
    curl_slist_free_all(list);
    return NULL;
}

/* Start the next attempt of ev. Returns 0, or -1 (nothing started). */
static int send_attempt(hook_t *h, event_t *ev) {
    char err[256];
    ev->attempt++;
    if (store_event_attempted(h->core->store, ev->row, err, sizeof err) < 0)
        log_error("hook: %s: %s", ev->id, err);
    ev->sent_ns = uv_hrtime();
    bytebuf_reset(&ev->reply);
    ev->curl_err[0] = '\0';
    long timeout_ms = (long)(h->timeout_s * 1000);
    ev->headers = signed_headers(h, ev);
    ev->easy = curl_easy_init();
    if (!ev->headers || !ev->easy) goto fail;
    CURL *e = ev->easy;
    CURLcode c = CURLE_OK;
    c |= curl_easy_setopt(e, CURLOPT_URL, h->url);
    c |= curl_easy_setopt(e, CURLOPT_POSTFIELDS, ev->body);
    c |= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)ev->body_len);
    c |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, ev->headers);
    c |= curl_easy_setopt(e, CURLOPT_USERAGENT, "nightshift-hook/1");
    c |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
    c |= curl_easy_setopt(e, CURLOPT_WRITEDATA, ev);
    c |= curl_easy_setopt(e, CURLOPT_PRIVATE, ev);
    c |= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, ev->curl_err);
    c |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    c |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 10000 ? timeout_ms : 10000L);
    c |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    c |= curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    c |= curl_easy_setopt(e, CURLOPT_NOPROXY, h->noproxy);
#if LIBCURL_VERSION_NUM >= 0x075500 /* 7.85.0 */
    c |= curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    c |= curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    c |= curl_easy_setopt(e, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
    c |= curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    if (c != CURLE_OK || curl_multi_add_handle(h->multi, e) != CURLM_OK) goto fail;
    ev->state = EV_SENDING;
    h->in_flight++;
    return 0;
fail:
    curl_easy_cleanup(ev->easy);
    ev->easy = NULL;
    curl_slist_free_all(ev->headers);
    ev->headers = NULL;
    return -1;
}

static void retry_cb(uv_timer_t *t) {
    event_t *ev = t->data;
    wait_push(ev->h, ev);
    start_transfers(ev->h);
}

/* After a failed attempt: wait and try again, or give up. */
static void retry_or_give_up(hook_t *h, event_t *ev, int retryable, const char *error) {
    if (retryable && ev->attempt < h->max_attempts && !h->closing) {
        double bound = h->backoff_base_s;
        for (int i = 1; i < ev->attempt && bound < BACKOFF_CAP_S; i++) bound *= 2;
        if (bound > BACKOFF_CAP_S) bound = BACKOFF_CAP_S;
        double delay = bound * random_unit();
        log_warn("hook: %s %s attempt %d failed: %s; retrying in %.1f s", ev->type, ev->id,
                 ev->attempt, error, delay);
        ev->state = EV_BACKOFF;
        uv_timer_start(&ev->retry, retry_cb, (uint64_t)(delay * 1000), 0);
        return;
    }
    log_error("hook: %s %s not delivered: %s (attempt %d%s)", ev->type, ev->id, error, ev->attempt,
              retryable ? ", the last allowed" : ", not retried");
    char err[256];
    if (!h->closing && store_event_mark(h->core->store, ev->row, "failed", err, sizeof err) < 0)
        log_error("hook: %s: %s", ev->id, err);
    event_finish(ev);
}

/* A transfer of ev ended with curl's result code res. */
static void transfer_done(hook_t *h, event_t *ev, CURLcode res) {
    long status = 0;
    char error[CURL_ERROR_SIZE + ERROR_SNIPPET + 64];
    curl_easy_getinfo(ev->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_multi_remove_handle(h->multi, ev->easy);
    curl_easy_cleanup(ev->easy);
    ev->easy = NULL;
    curl_slist_free_all(ev->headers);
    ev->headers = NULL;
    h->in_flight--;

    int answered =
        res == CURLE_OK || (res == CURLE_WRITE_ERROR && ev->reply.err == NS_ERR_TOO_LARGE);
    if (answered && status >= 200 && status < 300) {
        record_attempt(h, ev, (int)status, NULL);
        log_info("hook: %s %s delivered (attempt %d, HTTP %ld, %zu-byte reply, %llu ms)", ev->type,
                 ev->id, ev->attempt, status, ev->reply.len,
                 (unsigned long long)((uv_hrtime() - ev->sent_ns) / 1000000));
        char err[256];
        if (store_event_mark(h->core->store, ev->row, "delivered", err, sizeof err) < 0)
            log_error("hook: %s: %s", ev->id, err);
        handle_reply(h, ev);
        event_finish(ev);
        return;
    }
    int retryable = 1;
    if (!answered) {
        snprintf(error, sizeof error, "%s",
                 ev->curl_err[0] ? ev->curl_err : curl_easy_strerror(res));
        status = 0;
    } else {
        char *snippet = printable_prefix(bytebuf_str(&ev->reply), ev->reply.len, ERROR_SNIPPET);
        snprintf(error, sizeof error, "HTTP %ld%s%s", status, snippet && *snippet ? ": " : "",
                 snippet ? snippet : "");
        free(snippet);
        retryable = status >= 500;
    }
    record_attempt(h, ev, (int)status, error);
    retry_or_give_up(h, ev, retryable, error);
}

static void start_transfers(hook_t *h) {
    while (!h->closing && h->in_flight < MAX_IN_FLIGHT && h->wait_head) {
        event_t *ev = h->wait_head;
        h->wait_head = ev->next_wait;
        if (!h->wait_head) h->wait_tail = NULL;
        ev->next_wait = NULL;
        if (send_attempt(h, ev) < 0) {
            const char *error = "could not start the transfer (out of memory?)";
            ev->sent_ns = uv_hrtime();
            record_attempt(h, ev, 0, error);
            retry_or_give_up(h, ev, 1, error);
        }
    }
}

/* ------------------------------------------------------- curl on the loop */

/* curl_uv's progress callback. */
static void check_multi_info(void *arg) {
    hook_t *h = arg;
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(h->multi, &left))) {
        if (msg->msg != CURLMSG_DONE) continue;
        CURLcode res = msg->data.result; /* msg dies with the easy handle */
        char *priv = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
        transfer_done(h, (event_t *)priv, res);
    }
    start_transfers(h);
}

/* ------------------------------------------------------------------ public */

/* Is the daemon idle: nothing queued and a slot free? */
static int idle(hook_t *h) {
    char err[256];
    int64_t depth = store_queue_depth(h->core->store, err, sizeof err);
    if (depth < 0) log_error("hook: queue depth: %s", err);
    sched_t *s = h->core->sched;
    return depth == 0 && (!s || sched_running(s) < sched_slots(s));
}

/* Is an experiment.finished event still being delivered? */
static int finished_pending(const hook_t *h) {
    for (const event_t *ev = h->events; ev; ev = ev->next)
        if (!strcmp(ev->type, EV_FINISHED)) return 1;
    return 0;
}

static void idle_cb(uv_timer_t *t) {
    hook_t *h = t->data;
    if (!idle(h)) {
        uv_timer_stop(t);
        return;
    }
    /* the last one, or a finished run's event, is still being delivered */
    if (h->empty_pending || finished_pending(h)) return;
    log_info("hook: still idle: asking the agent again");
    outbox_add(h, EV_EMPTY, NULL);
}

/* The agent's URL: http or https, parsed by curl itself. */
static int check_url(const char *url, char *err, size_t errlen) {
    CURLU *u = curl_url();
    char *scheme = NULL;
    int rc = -1;
    if (!u) {
        snprintf(err, errlen, "hook: out of memory");
        return -1;
    }
    CURLUcode uc = curl_url_set(u, CURLUPART_URL, url, 0);
    if (uc != CURLUE_OK)
        snprintf(err, errlen, "hook: agent URL '%s': %s", url, curl_url_strerror(uc));
    else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
             (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0))
        snprintf(err, errlen, "hook: agent URL '%s': only http and https are supported", url);
    else
        rc = 0;
    curl_free(scheme);
    curl_url_cleanup(u);
    return rc;
}

/* The spec with every default, for the payloads. NULL when out of memory. */
static cJSON *spec_defaults_json(void) {
    spec_t s;
    spec_defaults(&s);
    char *text = spec_canonical_json(&s);
    spec_free(&s);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    return j;
}

hook_t *hook_new(uv_loop_t *loop, const hook_opts_t *o, char *err, size_t errlen) {
    hook_t *h = NULL;
    if (!o->url || !*o->url) {
        snprintf(err, errlen, "hook: no agent URL");
        return NULL;
    }
    if (!o->secret || !*o->secret) {
        snprintf(err, errlen, "hook: a secret is required to sign the events");
        return NULL;
    }
    if (!o->core || !o->core->store) {
        snprintf(err, errlen, "hook: no core to submit proposals through");
        return NULL;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(err, errlen, "hook: libcurl initialisation failed");
        return NULL;
    }
    if (check_url(o->url, err, errlen) < 0) goto fail_global;
    if (!(h = calloc(1, sizeof *h))) goto oom;
    h->curl_inited = 1;
    h->loop = loop;
    h->core = o->core;
    h->attempted = o->attempted;
    h->attempted_user = o->user;
    h->max_attempts = o->max_attempts > 0 ? o->max_attempts : 8;
    h->timeout_s = o->timeout_s > 0 ? o->timeout_s : 30;
    h->idle_resend_s = o->idle_resend_s > 0 ? o->idle_resend_s : 60;
    h->backoff_base_s = o->backoff_base_s > 0 ? o->backoff_base_s : 1;
    h->proposals_per_min = o->proposals_per_min < 0 ? HOOK_PROPOSALS_PER_MIN : o->proposals_per_min;
    h->proposal_tokens = h->proposals_per_min;
    h->proposal_refill_ms = uv_now(loop);
    /* Loopback never goes through a proxy; the user's no_proxy list still applies. */
    const char *np = getenv("no_proxy");
    if (!np || !*np) np = getenv("NO_PROXY");
    size_t np_len = strlen("localhost,127.0.0.1,::1,") + (np ? strlen(np) : 0) + 1;
    if (!(h->noproxy = malloc(np_len))) goto oom;
    snprintf(h->noproxy, np_len, "localhost,127.0.0.1,::1%s%s", np && *np ? "," : "",
             np && *np ? np : "");
    h->url = strdup(o->url);
    h->secret = strdup(o->secret);
    h->defaults = spec_defaults_json();
    if (!h->url || !h->secret || !h->defaults) goto oom;
    if (!(h->curl = curl_uv_new(loop, check_multi_info, h))) goto oom;
    h->multi = curl_uv_multi(h->curl);
    uv_timer_init(loop, &h->idle_timer);
    h->idle_timer.data = h;
    h->open_handles = 2; /* the idle timer and the curl_uv */
    log_info("hook: events go to %s (at most %d attempts, %.0f s timeout)", h->url, h->max_attempts,
             h->timeout_s);
    /* What the last run left undelivered goes first. */
    int pending = 0, got;
    int64_t after = 0;
    while ((got = outbox_load(h, after, 0, OUTBOX_LOAD, &after)) > 0) {
        pending += got;
        if (got < OUTBOX_LOAD) break;
    }
    if (pending)
        log_info("hook: %d event%s left undelivered by the last run: sending %s again", pending,
                 pending == 1 ? "" : "s", pending == 1 ? "it" : "them");
    return h;

oom:
    snprintf(err, errlen, "hook: out of memory");
    if (h) {
        cJSON_Delete(h->defaults);
        free(h->url);
        free(h->secret);
        free(h->noproxy);
        free(h);
    }
fail_global:
    curl_global_cleanup();
    return NULL;
}

void hook_experiment_finished(hook_t *h, int64_t id) {
    char err[256];
    if (!h || h->closing) return;
    /* The store's trigger wrote the event with the final status; an
     * experiment announced without one gets it now. */
    if (store_event_ensure_finished(h->core->store, id, err, sizeof err) < 0)
        log_error("hook: experiment.finished for %lld: %s", (long long)id, err);
    outbox_load(h, 0, id, OUTBOX_LOAD, NULL);
}

void hook_queue_empty(hook_t *h) {
    if (!h || h->closing) return;
    /* A run that just finished on a dry queue is already announced, with the
     * queue depth, by its experiment.finished event, which the agent answers
     * with the next variant: a queue.empty now would ask twice. The idle
     * timer below still asks again if that answer queues nothing. */
    if (!h->empty_pending && !finished_pending(h)) outbox_add(h, EV_EMPTY, NULL);
    uint64_t every = (uint64_t)(h->idle_resend_s * 1000);
    uv_timer_start(&h->idle_timer, idle_cb, every, every);
}

void hook_close(hook_t *h, void (*done)(void *arg), void *arg) {
    if (!h) {
        if (done) done(arg);
        return;
    }
    if (h->closing) return;
    h->closing = 1;
    h->done = done;
    h->done_arg = arg;
    uv_timer_stop(&h->idle_timer);
    int pending = 0;
    while (h->events) {
        event_t *ev = h->events;
        if (ev->state == EV_SENDING) {
            record_attempt(h, ev, 0, "daemon shutting down");
            curl_multi_remove_handle(h->multi, ev->easy);
            curl_easy_cleanup(ev->easy);
            ev->easy = NULL;
            curl_slist_free_all(ev->headers);
            ev->headers = NULL;
            h->in_flight--;
        }
        pending++;
        event_finish(ev);
    }
    h->wait_head = h->wait_tail = NULL;
    if (pending)
        log_warn("hook: shutting down: %d undelivered event%s stay%s in the outbox and will be "
                 "sent at the next start",
                 pending, pending == 1 ? "" : "s", pending == 1 ? "s" : "");
    curl_uv_close(h->curl, curl_closed, h);
    h->curl = NULL;
    h->multi = NULL;
    uv_close((uv_handle_t *)&h->idle_timer, timer_closed_cb);
}

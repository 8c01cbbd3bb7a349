/* api.c - the HTTP API's routes (see api.h). Handlers run on the loop thread:
 * each does a few short SQLite transactions, nothing slower (a report is
 * built on the thread pool, report_lane.h; an export streams, export.h). */
#include "daemon/serve/api.h"

#include "daemon/core/core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/cost.h"
#include "engine/data.h"
#include "daemon/serve/events.h"
#include "daemon/serve/export.h"
#include "daemon/serve/metrics.h"
#include "daemon/serve/report_lane.h"
#include "daemon/serve/scope.h"
#include "daemon/shared/log.h"
#include "daemon/shared/origin.h"
#include "engine/spec.h"
#include "engine/util.h"
#include "daemon/serve/web.h"
#include "daemon/shared/bytebuf.h"
#include "daemon/shared/version.h"

#define MAX_METRICS_SHOWN 5000       /* metrics rows in GET /v1/experiments/{id} */
#define LOG_TAIL_DEFAULT  (64 << 10) /* bytes of train.log returned by default */
#define LOG_TAIL_MAX      (1 << 20)
#define MAX_BATCH         256 /* specs in one POST */
#define MAX_REPEATS       64  /* ?repeats=k: seeds seed .. seed + k - 1 of each spec */

/* ---------------------------------------------------------------- replies */

/* res = status + obj (consumed). */
static void reply_json(http_response_t *res, int status, cJSON *obj) {
    res->status = status;
    res->content_type = "application/json";
    res->body = util_json_print(obj, 0);
    res->body_len = res->body ? strlen(res->body) : 0;
    cJSON_Delete(obj);
    if (!res->body) http_error(res, 500, "internal", "out of memory");
}

static void reply_store_error(http_response_t *res, const char *err) {
    log_error("api: store: %s", err);
    http_error(res, 500, "store_error", "%s", err);
}

/* The scope of a scoped query (scope.h); -1 = res set. */
static int query_scope(api_t *a, const http_request_t *req, http_response_t *res, store_scope_t *sc,
                       const char **from) {
    return scope_from_query(a->store, a->state_dir, a->default_dataset, req->query, sc, from, res);
}

/* o (consumed) with the scope described, as a 200 reply; a 500 when the
 * description fails. */
static void reply_scoped(api_t *a, http_response_t *res, cJSON *o, const store_scope_t *sc,
                         const char *from) {
    char err[256];
    if (scope_describe(a->store, o, sc, from, err, sizeof err) < 0) {
        cJSON_Delete(o);
        reply_store_error(res, err);
        return;
    }
    reply_json(res, 200, o);
}

/* POST /v1/cost: one spec's size, FLOPs and memory, and whether the daemon
 * would queue it, without queueing it. An invalid spec is a 400 like a
 * submission's; one that cannot fit is a 200 with "fits": false and the
 * refusal a submission would get ({"code":"does_not_fit","message"}). */
static void post_cost(api_t *a, const http_request_t *req, http_response_t *res) {
    char err[512];
    spec_t s;
    cJSON *body = http_json_parse(req->body, req->body_len, err, sizeof err);
    if (!body) {
        http_error(res, 400, "invalid_json", "the body is not valid JSON: %s", err);
        return;
    }
    int rc = core_check_spec(a->core, body, &s, NULL, err, sizeof err);
    /* a spec that does not fit is valid: parsed again for its numbers */
    if (rc == NS_ERR_DOES_NOT_FIT && spec_from_json(body, &s, err + 256, 256) < 0)
        rc = NS_ERR_NOMEM;
    cJSON_Delete(body);
    if (rc == NS_ERR_IO || rc == NS_ERR_NOMEM) {
        http_error(res, 500, rc == NS_ERR_IO ? "store_error" : "internal", "%s", err);
        return;
    }
    if (rc < 0 && rc != NS_ERR_DOES_NOT_FIT) {
        http_error(res, 400, "invalid_spec", "%s", err);
        return;
    }
    data_info_t info = {0};
    char derr[256];
    int have_info = data_info(a->state_dir, s.dataset, &info, derr, sizeof derr) == 0;
    spec_model_t m = s.model;
    if (m.vocab_size <= 0) m.vocab_size = info.vocab_size > 0 ? info.vocab_size : 256;
    cost_t c;
    cost_mem_t mem;
    cost_compute(&m, s.train.batch_size, &c);
    cost_memory(&m, s.train.batch_size,
                have_info ? info.train_tokens + info.val_tokens + info.test_tokens : 0,
                s.train.precision, &mem);
    const char *source;
    double limit = cost_worker_limit(s.resources.memory_mb, a->core->memory_mb, &source);
    cJSON *o = cJSON_CreateObject(), *p = cJSON_AddObjectToObject(o, "params");
    cJSON_AddBoolToObject(o, "fits", rc == 0);
    if (rc == 0) {
        cJSON_AddNullToObject(o, "refusal");
    } else {
        cJSON *r = cJSON_AddObjectToObject(o, "refusal");
        cJSON_AddStringToObject(r, "code", "does_not_fit");
        cJSON_AddStringToObject(r, "message", err);
    }
    cJSON_AddNumberToObject(p, "total", (double)c.total);
    cJSON_AddNumberToObject(p, "wte", (double)c.wte);
    cJSON_AddNumberToObject(p, "blocks", (double)c.blocks);
    cJSON_AddNumberToObject(p, "lm_head", (double)c.lm_head);
    cJSON_AddNumberToObject(o, "flops_per_token", c.flops_per_token);
    cJSON *mo = cJSON_AddObjectToObject(o, "memory_bytes");
    cJSON_AddNumberToObject(mo, "weights", mem.weights);
    cJSON_AddNumberToObject(mo, "grads", mem.grads);
    cJSON_AddNumberToObject(mo, "optimizer", mem.optimizer);
    cJSON_AddNumberToObject(mo, "activations", mem.activations);
    cJSON_AddNumberToObject(mo, "bf16", mem.bf16);
    cJSON_AddNumberToObject(mo, "data", mem.data);
    cJSON_AddNumberToObject(mo, "total", mem.total);
    cJSON_AddNumberToObject(o, "limit_bytes", limit);
    cJSON_AddStringToObject(o, "limit_from", source);
    cJSON_AddNumberToObject(o, "vocab_size", m.vocab_size);
    spec_free(&s);
    reply_json(res, 200, o);
}

/* GET /v1/datasets: every prepared dataset with its vocabulary and sizes in
 * tokens ({"datasets":[...]}); a directory whose manifest cannot be read is
 * listed with its error. */
static void get_datasets(api_t *a, http_response_t *res) {
    char dir[PATH_MAX], err[256];
    snprintf(dir, sizeof dir, "%s/datasets", a->state_dir);
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "datasets");
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        data_info_t info;
        if (e->d_name[0] == '.' || core_dataset_exists(a->core, e->d_name) <= 0) continue;
        cJSON *one = cJSON_CreateObject();
        cJSON_AddStringToObject(one, "name", e->d_name);
        if (data_info(a->state_dir, e->d_name, &info, err, sizeof err) == 0) {
            cJSON_AddNumberToObject(one, "vocab_size", info.vocab_size);
            cJSON_AddNumberToObject(one, "train_tokens", info.train_tokens);
            cJSON_AddNumberToObject(one, "val_tokens", info.val_tokens);
            cJSON_AddNumberToObject(one, "test_tokens", info.test_tokens);
        } else {
            cJSON_AddStringToObject(one, "error", err);
        }
        cJSON_AddItemToArray(arr, one);
    }
    if (d) closedir(d);
    reply_json(res, 200, o);
}

int api_authorized(const api_t *a, const http_request_t *req) {
    if (!a->token) return 1;
    const char *h = req->authorization;
    size_t n = strlen(a->token);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0 || strlen(h + 7) != n) return 0;
    return CRYPTO_memcmp(h + 7, a->token, n) == 0; /* constant time */
}

/* {"id","status","duplicate"}; a duplicate reports the existing experiment's
 * status (it may be running or have succeeded already). */
static cJSON *submission_item(api_t *a, int64_t id, int duplicate) {
    cJSON *o = cJSON_CreateObject(), *existing = NULL;
    char err[256];
    if (duplicate) store_get(a->store, id, 0, &existing, err, sizeof err);
    const char *status = cJSON_GetStringValue(cJSON_GetObjectItem(existing, "status"));
    cJSON_AddNumberToObject(o, "id", (double)id);
    cJSON_AddStringToObject(o, "status", status ? status : "queued");
    cJSON_AddBoolToObject(o, "duplicate", duplicate);
    cJSON_Delete(existing);
    return o;
}

static int query_int(const http_request_t *req, http_response_t *res, const char *key, long long lo,
                     long long hi, long long def, long long *out);

/* A copy of spec (a validated object) whose seed is its seed (default 42 when
 * absent) plus k: the k-th of its repeats. NULL when out of memory. */
static cJSON *with_seed_offset(const cJSON *spec, int k) {
    spec_t s;
    char err[SPEC_ERR_LEN];
    if (spec_from_json(spec, &s, err, sizeof err) < 0) return NULL;
    double seed = (double)s.seed + k;
    spec_free(&s);
    cJSON *copy = cJSON_Duplicate(spec, 1);
    if (!copy) return NULL;
    cJSON_DeleteItemFromObjectCaseSensitive(copy, "seed");
    if (!cJSON_AddNumberToObject(copy, "seed", seed)) {
        cJSON_Delete(copy);
        return NULL;
    }
    return copy;
}

/* Every spec of a submission (body, an array of n when is_array) checked,
 * with the seeds its repeats take: 0, or -1 with res the error. */
static int check_all(api_t *a, const cJSON *body, int is_array, int n, long long repeats,
                     http_response_t *res) {
    char err[512];
    for (int i = 0; i < n; i++) {
        spec_t s;
        int rc = core_check_spec(a->core, is_array ? cJSON_GetArrayItem(body, i) : body, &s, NULL,
                                 err, sizeof err);
        if (rc == 0) { /* s is valid: its repeats' seeds must be too */
            if ((double)s.seed + (double)(repeats - 1) > 9007199254740991.0) {
                snprintf(err, sizeof err, "seed: %llu + %lld repeats passes 2^53 - 1",
                         (unsigned long long)s.seed, repeats - 1);
                rc = -1;
            }
            spec_free(&s);
        }
        if (rc == NS_ERR_IO || rc == NS_ERR_NOMEM) { /* the daemon failed, not the spec */
            log_error("api: validating a submission: %s", err);
            http_error(res, 500, rc == NS_ERR_IO ? "store_error" : "internal", "%s", err);
            return -1;
        }
        if (rc == NS_ERR_DOES_NOT_FIT) {
            if (is_array)
                http_error(res, 422, "does_not_fit", "[%d]: %s", i, err);
            else
                http_error(res, 422, "does_not_fit", "%s", err);
            return -1;
        }
        if (rc < 0) {
            if (is_array)
                http_error(res, 400, "invalid_spec", "[%d].%s", i, err);
            else
                http_error(res, 400, "invalid_spec", "%s", err);
            return -1;
        }
    }
    return 0;
}

static void post_experiments(api_t *a, const http_request_t *req, http_response_t *res) {
    char flag[16] = "", source[16] = "api", err[512];
    int force = http_query_get(req->query, "force", flag, sizeof flag) == 1 &&
                (!flag[0] || !strcmp(flag, "1") || !strcmp(flag, "true"));
    long long repeats;
    if (query_int(req, res, "repeats", 1, MAX_REPEATS, 1, &repeats) < 0) return;
    if (req->source && !strcmp(req->source, "cli")) snprintf(source, sizeof source, "cli");
    /* An MCP client is an agent: it proposes, and a person's runs go first. */
    if (req->source && !strcmp(req->source, "mcp")) snprintf(source, sizeof source, "mcp");
    cJSON *body = http_json_parse(req->body, req->body_len, err, sizeof err);
    if (!body) {
        http_error(res, 400, "invalid_json", "the body is not valid JSON: %s", err);
        return;
    }
    int is_array = cJSON_IsArray(body), n = is_array ? cJSON_GetArraySize(body) : 1;
    if (is_array && n * repeats > MAX_BATCH) {
        http_error(res, 400, "invalid_spec",
                   "expected at most %d runs, got %d specs x %lld repeats", MAX_BATCH, n, repeats);
        cJSON_Delete(body);
        return;
    }
    if (is_array && (n == 0 || n > MAX_BATCH)) {
        http_error(res, 400, "invalid_spec", "expected 1 to %d specs, got %d", MAX_BATCH, n);
        cJSON_Delete(body);
        return;
    }
    /* Validate every spec before queueing any: one invalid spec queues nothing. */
    if (check_all(a, body, is_array, n, repeats, res) < 0) {
        cJSON_Delete(body);
        return;
    }
    cJSON *items = cJSON_CreateArray();
    int created = 0;
    for (int i = 0; i < n * repeats; i++) {
        int64_t id = 0;
        int dup = 0;
        cJSON *one = is_array ? cJSON_GetArrayItem(body, i / (int)repeats) : body;
        if (repeats > 1 && !(one = with_seed_offset(one, i % (int)repeats))) {
            if (created) sched_kick(a->sched);
            cJSON_Delete(items);
            cJSON_Delete(body);
            http_error(res, 500, "internal", "out of memory");
            return;
        }
        int rc = core_submit(a->core, one, source, force, &id, &dup, err, sizeof err);
        if (repeats > 1) cJSON_Delete(one);
        if (rc < 0) {
            /* validated above: only the store can fail here; what was
             * queued before the failure still runs */
            if (created) sched_kick(a->sched);
            cJSON_Delete(items);
            cJSON_Delete(body);
            http_error(res, 500, "store_error", "%s", err);
            return;
        }
        created += !dup;
        cJSON_AddItemToArray(items, submission_item(a, id, dup));
    }
    cJSON_Delete(body);
    if (created) sched_kick(a->sched);
    if (is_array || repeats > 1) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "experiments", items);
        reply_json(res, created ? 201 : 200, o);
    } else {
        cJSON *one = cJSON_DetachItemFromArray(items, 0);
        cJSON_Delete(items);
        reply_json(res, created ? 201 : 200, one);
    }
}

/* ----------------------------------------------------------------- queries */

/* An integer query parameter in [lo, hi]; def when absent. -1 = invalid (res set). */
static int query_int(const http_request_t *req, http_response_t *res, const char *key, long long lo,
                     long long hi, long long def, long long *out) {
    char buf[32], *end;
    int got = http_query_get(req->query, key, buf, sizeof buf);
    if (got == 0) {
        *out = def;
        return 0;
    }
    errno = 0;
    long long v = got == 1 ? strtoll(buf, &end, 10) : 0;
    if (got < 0 || errno || end == buf || *end || v < lo || v > hi) {
        http_error(res, 400, "invalid_query", "%s: expected an integer in [%lld, %lld]", key, lo,
                   hi);
        return -1;
    }
    *out = v;
    return 0;
}

static void get_experiments(api_t *a, const http_request_t *req, http_response_t *res) {
    char status[32] = "", order[16] = "", dataset[64] = "", err[256];
    long long limit, after;
    if (query_int(req, res, "limit", 1, 1000, 100, &limit) < 0 ||
        query_int(req, res, "after", 0, INT64_MAX, 0, &after) < 0)
        return;
    int got_status = http_query_get(req->query, "status", status, sizeof status);
    int got_order = http_query_get(req->query, "order", order, sizeof order);
    int has_status = got_status == 1 && status[0], has_order = got_order == 1 && order[0];
    static const char *const statuses[] = {STORE_QUEUED,      STORE_RUNNING,  STORE_SUCCEEDED,
                                           STORE_FAILED,      STORE_CRASHED,  STORE_TIMEOUT,
                                           STORE_OOM,         STORE_DIVERGED, STORE_CANCELLED,
                                           STORE_INTERRUPTED, STORE_PRUNED};
    int status_ok = !has_status;
    for (size_t i = 0; i < sizeof statuses / sizeof *statuses; i++)
        status_ok |= !strcmp(status, statuses[i]);
    if (got_status < 0 || !status_ok) {
        http_error(res, 400, "invalid_query",
                   "status: expected one of queued, running, "
                   "succeeded, failed, crashed, timeout, oom, "
                   "diverged, cancelled, interrupted, pruned");
        return;
    }
    if (http_query_get(req->query, "dataset", dataset, sizeof dataset) < 0) {
        http_error(res, 400, "invalid_query", "dataset: at most %zu characters",
                   sizeof dataset - 1);
        return;
    }
    static const char *const orders[] = {"id", "-id", "val_bpb", "created", "queue"};
    int order_ok = !has_order;
    for (size_t i = 0; i < sizeof orders / sizeof *orders; i++)
        order_ok |= !strcmp(order, orders[i]);
    if (got_order < 0 || !order_ok) {
        http_error(res, 400, "invalid_query", "order: expected id, -id, val_bpb, created or queue");
        return;
    }
    /* Ranked by val_bpb, the list is one scope's, like the leaderboard's:
     * val_bpb compares within no wider one. */
    store_scope_t sc;
    const char *from = NULL;
    int ranked = has_order && !strcmp(order, "val_bpb");
    if (ranked && query_scope(a, req, res, &sc, &from) < 0) return;
    cJSON *list = store_list(a->store, has_status ? status : NULL, dataset, ranked ? &sc : NULL,
                             has_order ? order : NULL, (int)limit, (int64_t)after, err, sizeof err);
    if (!list) {
        reply_store_error(res, err);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    int n = cJSON_GetArraySize(list);
    cJSON_AddItemToObject(o, "experiments", list);
    if (n == limit)
        cJSON_AddNumberToObject(
            o, "next_after",
            cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(list, n - 1), "id")));
    else
        cJSON_AddNullToObject(o, "next_after");
    if (ranked)
        reply_scoped(a, res, o, &sc, from);
    else
        reply_json(res, 200, o);
}

/* GET /v1/experiments/{id}?metrics=N: N metrics rows at most (default and
 * most MAX_METRICS_SHOWN; 0 for none, as a wait asks: metrics_total still
 * counts them). */
static void get_experiment(api_t *a, const http_request_t *req, int64_t id, http_response_t *res) {
    char err[256];
    cJSON *o = NULL;
    long long max;
    if (query_int(req, res, "metrics", 0, MAX_METRICS_SHOWN, MAX_METRICS_SHOWN, &max) < 0) return;
    int rc = store_get(a->store, id, (int)max, &o, err, sizeof err);
    if (rc < 0) {
        if (rc == NS_ERR_NOT_FOUND)
            http_error(res, 404, "not_found", "no experiment %lld", (long long)id);
        else
            reply_store_error(res, err);
        return;
    }
    cJSON *p = a->sched ? sched_progress(a->sched, id) : NULL;
    if (p)
        cJSON_AddItemToObject(o, "progress", p);
    else
        cJSON_AddNullToObject(o, "progress");
    reply_json(res, 200, o);
}

/* The tail of runs/<id>/train.log. A bounded read of a local file: at most
 * LOG_TAIL_MAX bytes, so it stays well under a millisecond on the loop. */
static void get_log(api_t *a, const http_request_t *req, int64_t id, http_response_t *res) {
    long long tail;
    char path[PATH_MAX];
    if (query_int(req, res, "tail", 1, LOG_TAIL_MAX, LOG_TAIL_DEFAULT, &tail) < 0) return;
    snprintf(path, sizeof path, "%s/runs/%lld/train.log", a->state_dir, (long long)id);
    /* Only a regular file: a FIFO or a link planted in the run directory must
     * not block the loop or lead elsewhere. */
    struct stat st;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0) close(fd);
        http_error(res, 404, "not_found", "experiment %lld has no log", (long long)id);
        return;
    }
    off_t from = st.st_size > tail ? st.st_size - tail : 0;
    size_t want = (size_t)(st.st_size - from);
    char *buf = malloc(want + 1);
    ssize_t got = buf ? pread(fd, buf, want, from) : -1;
    close(fd);
    if (!buf || got < 0) {
        free(buf);
        http_error(res, 500, "internal", "cannot read the log");
        return;
    }
    res->status = 200;
    res->content_type = "text/plain; charset=utf-8";
    res->body = buf;
    res->body_len = (size_t)got;
}

/* Is experiment id running, though not in one of this daemon's slots (a
 * Slurm job a local daemon leaves to a Slurm daemon)? */
static int running_elsewhere(api_t *a, int64_t id) {
    char err[256];
    cJSON *e = NULL;
    if (store_get(a->store, id, 0, &e, err, sizeof err) < 0) return 0;
    const char *st = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "status"));
    int running = st && !strcmp(st, STORE_RUNNING);
    cJSON_Delete(e);
    return running;
}

static void post_cancel(api_t *a, int64_t id, http_response_t *res) {
    char err[256];
    int rc = store_cancel_queued(a->store, id, err, sizeof err);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", (double)id);
    if (rc == 1) {
        log_info("experiment %lld cancelled while queued", (long long)id);
        cJSON_AddStringToObject(o, "status", "cancelled");
        reply_json(res, 200, o);
        return;
    }
    if (rc == 0 && sched_cancel(a->sched, id)) {
        log_info("experiment %lld: cancelling its worker", (long long)id);
        cJSON_AddStringToObject(o, "status", "cancelling");
        reply_json(res, 200, o);
        return;
    }
    cJSON_Delete(o);
    if (rc == NS_ERR_NOT_FOUND)
        http_error(res, 404, "not_found", "no experiment %lld", (long long)id);
    else if (rc < 0)
        reply_store_error(res, err);
    else if (running_elsewhere(a, id))
        http_error(res, 409, "not_cancellable",
                   "experiment %lld runs as a Slurm job this daemon does not follow (it runs "
                   "the local executor): cancel it from a daemon with --executor slurm",
                   (long long)id);
    else
        http_error(res, 409, "not_cancellable", "experiment %lld has already finished",
                   (long long)id);
}

/* res = text (taken) as content_type; NULL text is out of memory. */
static void reply_text(http_response_t *res, char *text, const char *content_type) {
    if (!text) {
        http_error(res, 500, "internal", "out of memory");
        return;
    }
    res->status = 200;
    res->content_type = content_type;
    res->body = text;
    res->body_len = strlen(text);
}

/* The leaderboard's replies are cached per query string: under many readers
 * (a dashboard per tab, agents polling) the loop then spends a copy, not a
 * query, on each, and the cache is dropped whenever a run finishes. Rows that
 * another program writes into the database directly show at the next finish. */
static int leaderboard_cached(api_t *a, const http_request_t *req, http_response_t *res) {
    const char *q = req->query ? req->query : "";
    uint64_t now = store_finishes(a->store);
    for (size_t i = 0; i < sizeof a->leaderboard_cache / sizeof a->leaderboard_cache[0]; i++) {
        const struct api_cached_reply *c = &a->leaderboard_cache[i];
        if (!c->query || c->finishes != now || strcmp(c->query, q)) continue;
        if (!(res->body = malloc(c->len + 1))) return 0;
        memcpy(res->body, c->body, c->len + 1);
        res->body_len = c->len;
        res->status = 200;
        res->content_type = c->content_type;
        return 1;
    }
    return 0;
}

static void leaderboard_remember(api_t *a, const http_request_t *req, const http_response_t *res) {
    if (res->status != 200 || !res->body) return;
    struct api_cached_reply *c =
        &a->leaderboard_cache[a->leaderboard_cache_next++ %
                              (sizeof a->leaderboard_cache / sizeof a->leaderboard_cache[0])];
    char *query = strdup(req->query ? req->query : ""), *body = malloc(res->body_len + 1);
    if (!query || !body) {
        free(query);
        free(body);
        return;
    }
    memcpy(body, res->body, res->body_len);
    body[res->body_len] = '\0';
    free(c->query);
    free(c->body);
    *c = (struct api_cached_reply){.query = query,
                                   .body = body,
                                   .len = res->body_len,
                                   .content_type = res->content_type,
                                   .finishes = store_finishes(a->store)};
}

void api_close(api_t *a) {
    for (size_t i = 0; i < sizeof a->leaderboard_cache / sizeof a->leaderboard_cache[0]; i++) {
        free(a->leaderboard_cache[i].query);
        free(a->leaderboard_cache[i].body);
        a->leaderboard_cache[i] = (struct api_cached_reply){0};
    }
}

/* The leaderboard's reply; *cacheable says whether it holds until the next
 * finish (a scope taken from the latest experiment, or the defaults, moves
 * with submissions). */
static void get_leaderboard_uncached(api_t *a, const http_request_t *req, http_response_t *res,
                                     int *cacheable) {
    long long limit;
    char err[256], format[16] = "";
    store_scope_t sc;
    const char *from;
    if (query_int(req, res, "limit", 1, 1000, 20, &limit) < 0) return;
    int got_format = http_query_get(req->query, "format", format, sizeof format);
    if (got_format < 0 || (got_format == 1 && strcmp(format, "json") && strcmp(format, "csv"))) {
        http_error(res, 400, "invalid_query", "format: expected json or csv");
        return;
    }
    if (query_scope(a, req, res, &sc, &from) < 0) return;
    *cacheable = !strcmp(from, "query") || !strcmp(from, "latest_result");
    cJSON *rows = store_leaderboard(a->store, &sc, (int)limit, err, sizeof err);
    if (!rows) {
        reply_store_error(res, err);
        return;
    }
    if (!strcmp(format, "csv")) {
        /* the header line even when the scope has no rows yet */
        cJSON *columns = store_leaderboard_columns(a->store);
        reply_text(res, columns ? export_table(rows, columns, ',') : NULL,
                   "text/csv; charset=utf-8");
        cJSON_Delete(columns);
        cJSON_Delete(rows);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "leaderboard", rows);
    reply_scoped(a, res, o, &sc, from);
}

static void get_leaderboard(api_t *a, const http_request_t *req, http_response_t *res) {
    int cacheable = 0;
    if (leaderboard_cached(a, req, res)) return;
    get_leaderboard_uncached(a, req, res, &cacheable);
    if (cacheable) leaderboard_remember(a, req, res);
}

static void get_best(api_t *a, const http_request_t *req, http_response_t *res) {
    char err[256];
    store_scope_t sc;
    const char *from;
    if (query_scope(a, req, res, &sc, &from) < 0) return;
    cJSON *best = store_best_in(a->store, &sc, err, sizeof err);
    if (!best) {
        reply_store_error(res, err);
        return;
    }
    /* The headline number next to the id, as in the leaderboard: the mean
     * over the configuration's seeds. */
    const cJSON *bpb = cJSON_GetObjectItem(best, "mean_val_bpb");
    if (cJSON_IsObject(best) && cJSON_IsNumber(bpb))
        cJSON_AddNumberToObject(best, "val_bpb", bpb->valuedouble);
    /* And the sealed test figure of the configuration the ranking chose
     * (store_best_in itself leaves it out: the agent hook reads that). */
    if (cJSON_IsObject(best)) {
        const char *hash = cJSON_GetStringValue(cJSON_GetObjectItem(best, "config_hash"));
        cJSON *test = store_test_of(a->store, &sc, hash, err, sizeof err);
        if (!test) {
            cJSON_Delete(best);
            reply_store_error(res, err);
            return;
        }
        cJSON_AddItemToObject(best, "test", test);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "best", best);
    reply_scoped(a, res, o, &sc, from);
}

/* GET /v1/report?dataset=&budget=&baseline=ID&format=json|md (report.h,
 * report_doc.h) and GET /report (the same as a page beside the dashboard):
 * built off the loop (report_lane.h), or here when there is no loop. */
static void get_report(api_t *a, const http_request_t *req, http_response_t *res, int page) {
    char format[16] = "";
    long long baseline;
    report_ask_t ask = {.state_dir = a->state_dir,
                        .pinned_dataset = a->default_dataset,
                        .query = req->query,
                        .fmt = page ? REPORT_HTML : REPORT_JSON};
    int got = page ? 0 : http_query_get(req->query, "format", format, sizeof format);
    if (got < 0 || (got == 1 && strcmp(format, "json") && strcmp(format, "md"))) {
        http_error(res, 400, "invalid_query", "format: expected json or md");
        return;
    }
    if (!strcmp(format, "md")) ask.fmt = REPORT_MARKDOWN;
    if (query_int(req, res, "baseline", 0, INT64_MAX, 0, &baseline) < 0) return;
    ask.baseline = baseline;
    if (a->loop)
        report_lane_answer(&a->reports, a->loop, a->store, &ask, req, res);
    else
        report_answer(a->store, &ask, res);
}

static void get_noise(api_t *a, const http_request_t *req, http_response_t *res) {
    char err[256];
    store_scope_t sc;
    const char *from;
    if (query_scope(a, req, res, &sc, &from) < 0) return;
    cJSON *o = store_noise(a->store, &sc, err, sizeof err);
    if (!o) {
        reply_store_error(res, err);
        return;
    }
    /* store_noise named the scope already: the rest of its description */
    cJSON_DeleteItemFromObject(o, "dataset");
    cJSON_DeleteItemFromObject(o, "budget_kind");
    cJSON_DeleteItemFromObject(o, "budget");
    cJSON_DeleteItemFromObject(o, "eval_tokens");
    reply_scoped(a, res, o, &sc, from);
}

static void get_status(api_t *a, const http_request_t *req, http_response_t *res) {
    char err[256];
    store_scope_t sc;
    const char *from;
    int64_t depth = store_queue_depth(a->store, err, sizeof err);
    if (depth < 0) {
        reply_store_error(res, err);
        return;
    }
    /* The noise of the scope asked for; a scope that names nothing (say a
     * mistyped serve --dataset) leaves it null rather than fail the status
     * every watch and dashboard polls. */
    http_response_t scratch = {0};
    cJSON *noise = NULL;
    if (query_scope(a, req, &scratch, &sc, &from) == 0) {
        if (!(noise = store_noise(a->store, &sc, err, sizeof err))) {
            reply_store_error(res, err);
            return;
        }
        cJSON_AddStringToObject(noise, "scope_from", from);
    } else if (scratch.status != 404) {
        *res = scratch; /* a malformed query, a store failure */
        return;
    }
    free(scratch.body);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "version", NIGHTSHIFT_VERSION);
    cJSON_AddNumberToObject(o, "uptime_s", util_now() - a->started_at);
    cJSON_AddNumberToObject(o, "queue_depth", (double)depth);
    cJSON_AddNumberToObject(o, "running", sched_running(a->sched));
    /* Where runs and datasets live, for tools on this machine (`sample ID --url`). */
    char dir[PATH_MAX];
    cJSON_AddStringToObject(o, "state_dir", realpath(a->state_dir, dir) ? dir : a->state_dir);
    cJSON_AddItemToObject(o, "slots", sched_status(a->sched));
    cJSON_AddItemToObject(o, "noise", noise ? noise : cJSON_CreateNull());
    reply_json(res, 200, o);
}

/* GET /v1/events?after=N&limit=: {"events": [...], "last_id": the newest id}. */
static void get_events(api_t *a, const http_request_t *req, http_response_t *res) {
    long long after, limit;
    char err[256];
    if (query_int(req, res, "after", 0, INT64_MAX, 0, &after) < 0 ||
        query_int(req, res, "limit", 1, 1000, 100, &limit) < 0)
        return;
    int64_t last = store_events_last_id(a->store, err, sizeof err);
    cJSON *list = last < 0 ? NULL : store_events(a->store, after, (int)limit, err, sizeof err);
    if (!list) {
        reply_store_error(res, err);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "events", list);
    cJSON_AddNumberToObject(o, "last_id", (double)last);
    reply_json(res, 200, o);
}

/* GET /v1/export?format=csv|tsv|jsonl|results-tsv: every experiment,
 * streamed page by page off the loop (export.h). */
static void get_export(api_t *a, const http_request_t *req, http_response_t *res) {
    char format[16] = "";
    export_format_t fmt;
    if (http_query_get(req->query, "format", format, sizeof format) != 1 ||
        export_format_parse(format, &fmt) < 0) {
        http_error(res, 400, "invalid_query", "format: expected csv, tsv, jsonl or results-tsv");
        return;
    }
    if (!a->loop) {
        http_error(res, 503, "unavailable", "exports are not available here");
        return;
    }
    export_stream(a->loop, a->store, &a->exports, fmt, req, res);
}

/* The dashboard's compiled-in files. */
static void get_asset(const http_request_t *req, http_response_t *res) {
    const char *ctype = NULL;
    const web_asset_t *w = web_find(req->path, &ctype);
    char *copy = w ? malloc(w->len + 1) : NULL;
    if (!w) {
        http_error(res, 404, "not_found", "no route for GET %s", req->path);
        return;
    }
    if (!copy) {
        http_error(res, 500, "internal", "out of memory");
        return;
    }
    memcpy(copy, w->data, w->len + 1);
    res->status = 200;
    res->content_type = ctype;
    res->body = copy;
    res->body_len = w->len;
}

/* The body of GET path?query as the API answers req's client (its token
 * too), or "null" when the answer is not a 200. Taken by the caller. */
static char *answer(api_t *a, const http_request_t *req, const char *path, const char *query) {
    http_request_t r = {.method = "GET",
                        .path = path,
                        .query = query,
                        .body = "",
                        .authorization = req->authorization,
                        .peer = req->peer};
    http_response_t res = {0};
    api_handle(&r, &res, a);
    if (res.status == 200 && res.body) return res.body;
    free(res.body);
    return strdup("null");
}

/* The dashboard's page with what its first paint shows inline: the answers
 * the page would fetch first (status, the first page of experiments, the
 * default scope's leaderboard and noise, the queue) as one JSON object in
 * <script id="snapshot" type="application/json">, so a screenshot, a slow
 * link or a reader of the HTML sees the state at once; the page fetches and
 * listens for changes after. JSON escapes '<' as \u003c, so no text from
 * the daemon can end the script element. */
static void get_page(api_t *a, const http_request_t *req, http_response_t *res) {
    static const char *const parts[][3] = {
        {"status", "/v1/status", ""},
        {"experiments", "/v1/experiments", "order=id&limit=1000"},
        {"leaderboard", "/v1/leaderboard", "limit=200"},
        {"noise", "/v1/noise", ""},
        {"queue", "/v1/experiments", "status=queued&order=queue&limit=200"},
    };
    static const char marker[] = "<script src=\"/ui/uPlot.iife.min.js\">";
    get_asset(req, res);
    const char *at = res->status == 200 ? strstr(res->body, marker) : NULL;
    if (!at) return;
    bytebuf_t t;
    bytebuf_init(&t, BYTEBUF_UNLIMITED);
    bytebuf_append(&t, res->body, (size_t)(at - res->body));
    bytebuf_puts(&t, "<script id=\"snapshot\" type=\"application/json\">{");
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        char *body = answer(a, req, parts[i][1], parts[i][2]);
        bytebuf_printf(&t, "%s\"%s\":", i ? "," : "", parts[i][0]);
        for (const char *p = body ? body : "null"; *p; p++) {
            if (*p == '<')
                bytebuf_puts(&t, "\\u003c");
            else
                bytebuf_putc(&t, *p);
        }
        free(body);
    }
    bytebuf_puts(&t, "}</script>\n");
    bytebuf_puts(&t, at);
    size_t len = 0;
    char *page = bytebuf_take(&t, &len);
    if (!page) return; /* out of memory: the page without its snapshot */
    free(res->body);
    res->body = page;
    res->body_len = len;
}

/* ----------------------------------------------------------------- routing */

int api_guard(const api_t *a, const http_request_t *req, http_response_t *res) {
    int rc = origin_check(a->origin, req, res);
    if (rc) return rc;
    const char *m = req->method;
    int reads = !strcmp(m, "GET") || !strcmp(m, "HEAD"), preflight = !strcmp(m, "OPTIONS");
    int guarded = (!reads && !preflight) ||
                  (a->guard_reads && !preflight && strcmp(req->path, "/healthz") != 0);
    if (guarded && !api_authorized(a, req)) {
        http_error(res, 401, "unauthorized",
                   "this call needs the daemon's token (Authorization: Bearer TOKEN)");
        return 401;
    }
    return 0;
}

int api_authorize(const http_request_t *req, http_response_t *res, void *user) {
    return api_guard(user, req, res);
}

void api_handle(const http_request_t *req, http_response_t *res, void *user) {
    api_t *a = user;
    const char *m = req->method;
    int get = !strcmp(m, "GET"), post = !strcmp(m, "POST");
    int64_t id = 0;
    if (api_guard(a, req, res) || origin_cors(a->origin, req, res)) return;
    api_route_t route = api_route(req->path, &id);
    int costly =
        route == API_ROUTE_REPORT || route == API_ROUTE_REPORT_PAGE || route == API_ROUTE_EXPORT;
    if (get && costly && origin_costly_check(req, res)) return;
        /* The key: the route for a GET, ON_POST(route) for a POST, -1 for others. */
#define ON_POST(r) ((int)API_N_ROUTES + (int)(r))
    int key = get ? (int)route : -1;
    if (!strcmp(m, "HEAD") && route == API_ROUTE_METRICS) key = (int)route; /* its headers */
    if (post) key = ON_POST(route);
    switch (key) {
    case API_ROUTE_HEALTHZ: {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "ok", 1);
        reply_json(res, 200, o);
        break;
    }
    case API_ROUTE_STATUS:
        get_status(a, req, res);
        break;
    case ON_POST(API_ROUTE_EXPERIMENTS):
        post_experiments(a, req, res);
        break;
    case API_ROUTE_EXPERIMENTS:
        get_experiments(a, req, res);
        break;
    case ON_POST(API_ROUTE_COST):
        post_cost(a, req, res);
        break;
    case API_ROUTE_DATASETS:
        get_datasets(a, res);
        break;
    case API_ROUTE_LEADERBOARD:
        get_leaderboard(a, req, res);
        break;
    case API_ROUTE_BEST:
        get_best(a, req, res);
        break;
    case API_ROUTE_NOISE:
        get_noise(a, req, res);
        break;
    case API_ROUTE_REPORT:
        get_report(a, req, res, 0);
        break;
    case API_ROUTE_EXPERIMENT:
        get_experiment(a, req, id, res);
        break;
    case API_ROUTE_EXPERIMENT_LOG:
        get_log(a, req, id, res);
        break;
    case ON_POST(API_ROUTE_EXPERIMENT_CANCEL):
        post_cancel(a, id, res);
        break;
    case API_ROUTE_EVENTS:
        get_events(a, req, res);
        break;
    case API_ROUTE_EVENTS_STREAM:
        events_hub_stream(a->events, req, res);
        break;
    case API_ROUTE_EXPORT:
        get_export(a, req, res);
        break;
    case API_ROUTE_REPORT_PAGE:
        get_report(a, req, res, 1);
        break;
    case API_ROUTE_PAGE:
        get_page(a, req, res);
        break;
    case API_ROUTE_UI:
        get_asset(req, res);
        break;
    case API_ROUTE_METRICS:
        if (a->metrics) {
            metrics_reply(a->metrics, res);
            break;
        }
        /* fall through */
    default:
        http_error(res, 404, "not_found", "no route for %s %s", m, req->path);
    }
#undef ON_POST
}

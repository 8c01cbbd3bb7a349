/* mcp.c - the Model Context Protocol server (see mcp.h): JSON-RPC framing,
 * the lifecycle, the tools, resources and prompt, each tool a few calls of
 * the HTTP API through the backend.
 *
 * Tool failures (the daemon refused a spec, an experiment does not exist) are
 * tool results with isError and the API's {"error":{"code","message"}} as
 * structuredContent; a message that is no valid request is a JSON-RPC error. */
#include "daemon/shared/mcp.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/shared/bytebuf.h"
#include "daemon/shared/http.h"
#include "engine/spec.h"
#include "engine/util.h"

#define MAX_WAIT_IDS 64
#define MAX_LOG_TAIL 65536

struct mcp_wait {
    struct mcp_wait *next;
    cJSON *id;       /* the request's id */
    cJSON *progress; /* its progressToken, or NULL */
    long long ids[MAX_WAIT_IDS];
    int n;
    double deadline, last_progress;
    int cancelled;
};

struct mcp_server {
    mcp_wait_t *waits;
    int initialized;
};

const char mcp_night_prompt[] =
    "You run a night of experiments on nightshift, a daemon that trains small GPT variants, one "
    "spec at a time, each for a fixed budget, and scores each by val_bpb: bits per byte of a "
    "fixed validation text, lower is better.\n"
    "Compare like with like: val_bpb ranks only within one scope (a dataset, a budget and an "
    "evaluation); the leaderboard, best and noise tools answer for one scope.\n"
    "Seeds differ: repeat a promising spec (repeats) and read the noise tool. Adopt a variant "
    "only when it beats the best by more than the measured noise; otherwise keep the best.\n"
    "Propose by varying the best spec in one or two fields at a time (parent: the id you "
    "varied), check a larger model with the cost tool first, submit, wait for the results, "
    "read them, and decide the next step. A refused spec comes back with its code and reason "
    "(does_not_fit: make it smaller); fix it rather than resubmitting it.\n";

/* ------------------------------------------------------------ JSON helpers */

/* o (consumed) as JSON text, valid UTF-8 whatever o quotes (a method or an
 * id as the client sent it). */
static char *print(cJSON *o) {
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (t) util_utf8_scrub(t);
    return t;
}

static cJSON *message(const cJSON *id) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "jsonrpc", "2.0");
    cJSON_AddItemToObject(o, "id", id ? cJSON_Duplicate(id, 1) : cJSON_CreateNull());
    return o;
}

static char *rpc_error(const cJSON *id, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static char *rpc_error(const cJSON *id, int code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *o = message(id), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddNumberToObject(e, "code", code);
    cJSON_AddStringToObject(e, "message", msg);
    return print(o);
}

static char *rpc_result(const cJSON *id, cJSON *result) {
    cJSON *o = message(id);
    cJSON_AddItemToObject(o, "result", result);
    return print(o);
}

/* The API's error envelope for a failed call, or one made up. */
static cJSON *api_error(const char *code, const char *msg) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "code", code);
    cJSON_AddStringToObject(e, "message", msg);
    return o;
}

/* One API call; *reply gets the JSON reply (an object: a 2xx's body, an
 * array wrapped as {"items":[...]}, or the error envelope). Returns 1 for a
 * 2xx, 0 for an error (envelope in *reply). */
static int api_call(const mcp_backend_t *b, const char *method, const char *path, const cJSON *body,
                    cJSON **reply) {
    char *text = body ? cJSON_PrintUnformatted(body) : NULL, *out = NULL;
    int status = b->call(b->user, method, path, text, &out);
    free(text);
    if (status < 0) {
        *reply = api_error("unreachable", out ? out : "the daemon cannot be reached");
        free(out);
        return 0;
    }
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    free(out);
    if (j && cJSON_IsArray(j)) {
        cJSON *w = cJSON_CreateObject();
        cJSON_AddItemToObject(w, "items", j);
        j = w;
    }
    if (status >= 200 && status < 300 && cJSON_IsObject(j)) {
        *reply = j;
        return 1;
    }
    if (cJSON_IsObject(cJSON_GetObjectItem(j, "error"))) {
        *reply = j;
        return 0;
    }
    cJSON_Delete(j);
    char msg[400];
    snprintf(msg, sizeof msg, "HTTP %d from %s %.300s", status, method, path);
    *reply = api_error("api_error", msg);
    return 0;
}

/* A tool's result: structured content and its text, isError when failed. */
static cJSON *tool_result(cJSON *structured, int failed) {
    cJSON *r = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(r, "content");
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "type", "text");
    char *text = cJSON_PrintUnformatted(structured);
    const char *code =
        cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(structured, "error"), "code"));
    const char *msg = cJSON_GetStringValue(
        cJSON_GetObjectItem(cJSON_GetObjectItem(structured, "error"), "message"));
    if (failed && code && msg) {
        size_t n = strlen(code) + strlen(msg) + 3;
        free(text);
        text = malloc(n);
        if (text) snprintf(text, n, "%s: %s", code, msg);
    }
    cJSON_AddStringToObject(t, "text", text ? text : "");
    free(text);
    cJSON_AddItemToArray(content, t);
    cJSON_AddItemToObject(r, "structuredContent", structured);
    cJSON_AddBoolToObject(r, "isError", failed);
    return r;
}

/* Append "key=value" (URL-safe values only: names, numbers) to a query. */
static void query_add(bytebuf_t *q, const char *key, const char *val) {
    bytebuf_printf(q, "%c%s=", q->len ? '&' : '?', key);
    for (const char *p = val; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr("-_.~:", c))
            bytebuf_printf(q, "%c", c);
        else
            bytebuf_printf(q, "%%%02X", c);
    }
}

/* The string or integer argument key of args into q. */
static void query_arg(bytebuf_t *q, const cJSON *args, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(args, key);
    char num[32];
    if (cJSON_IsString(v)) {
        query_add(q, key, v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        snprintf(num, sizeof num, "%.17g", v->valuedouble); /* the API refuses a non-integer */
        query_add(q, key, num);
    }
}

/* v as a positive integer a double holds exactly (at most 2^53 - 1), or 0:
 * the one check before any JSON number becomes a long long, since converting a
 * double beyond its range is undefined. */
static long long positive_integer(const cJSON *v) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 1 && v->valuedouble <= 9007199254740991.0) ||
        v->valuedouble != floor(v->valuedouble))
        return 0;
    return (long long)v->valuedouble;
}

/* An experiment id argument (a positive integer), or 0. */
static long long arg_id(const cJSON *args, const char *key) {
    return positive_integer(cJSON_GetObjectItem(args, key));
}

/* ------------------------------------------------------------------ tools */

typedef struct {
    const mcp_backend_t *b;
    const cJSON *args;
    cJSON *out; /* the structured result */
    int failed;
} call_t;

/* The reply of one API call as the tool's whole result. */
static void call_api(call_t *c, const char *method, const char *path, const cJSON *body) {
    c->failed = !api_call(c->b, method, path, body, &c->out);
}

static int bad_args(call_t *c, const char *msg) {
    c->out = api_error("invalid_arguments", msg);
    c->failed = 1;
    return 0;
}

static int tool_submit(call_t *c) {
    const cJSON *spec = cJSON_GetObjectItem(c->args, "spec");
    const cJSON *specs = cJSON_GetObjectItem(c->args, "specs");
    if (!!spec == !!specs) return bad_args(c, "give spec (one) or specs (several), not both");
    if ((spec && !cJSON_IsObject(spec)) || (specs && !cJSON_IsArray(specs)))
        return bad_args(c, "spec is an object, specs an array of them");
    bytebuf_t q;
    bytebuf_init(&q, 256);
    query_arg(&q, c->args, "repeats");
    if (cJSON_IsTrue(cJSON_GetObjectItem(c->args, "force"))) query_add(&q, "force", "1");
    char path[320];
    snprintf(path, sizeof path, "/v1/experiments%s", q.len ? q.data : "");
    bytebuf_free(&q);
    call_api(c, "POST", path, spec ? spec : specs);
    if (!c->failed && !cJSON_GetObjectItem(c->out, "experiments")) {
        cJSON *w = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(w, "experiments");
        cJSON_AddItemToArray(arr, c->out);
        c->out = w;
    }
    return 0;
}

static int tool_cost(call_t *c) {
    const cJSON *spec = cJSON_GetObjectItem(c->args, "spec");
    if (!cJSON_IsObject(spec)) return bad_args(c, "spec: expected an object");
    call_api(c, "POST", "/v1/cost", spec);
    return 0;
}

static int tool_status(call_t *c) {
    call_api(c, "GET", "/v1/status", NULL);
    return 0;
}

static int tool_datasets(call_t *c) {
    call_api(c, "GET", "/v1/datasets", NULL);
    return 0;
}

/* GET base with the scope arguments (dataset, budget, eval_tokens, limit). */
static int scoped(call_t *c, const char *base) {
    bytebuf_t q;
    char path[512];
    bytebuf_init(&q, 400);
    static const char *const keys[] = {"dataset", "budget", "eval_tokens", "limit"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) query_arg(&q, c->args, keys[i]);
    snprintf(path, sizeof path, "%s%s", base, q.len ? q.data : "");
    bytebuf_free(&q);
    call_api(c, "GET", path, NULL);
    return 0;
}

static int tool_leaderboard(call_t *c) {
    return scoped(c, "/v1/leaderboard");
}
static int tool_best(call_t *c) {
    return scoped(c, "/v1/best");
}
static int tool_noise(call_t *c) {
    return scoped(c, "/v1/noise");
}

/* One page of experiments: limit rows (MCP_LIST_DEFAULT unless asked), from
 * the cursor a previous page returned (the API's next_after, as a string:
 * a cursor is opaque to the client). */
static int tool_list(call_t *c) {
    bytebuf_t q;
    char path[512], num[32];
    const cJSON *cursor = cJSON_GetObjectItem(c->args, "cursor");
    long long after = 0;
    if (cursor &&
        (!cJSON_IsString(cursor) || sscanf(cursor->valuestring, "%lld", &after) != 1 || after < 0))
        return bad_args(c, "cursor: expected the next_cursor of a previous page");
    bytebuf_init(&q, 400);
    static const char *const keys[] = {"status", "dataset", "order", "after"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) query_arg(&q, c->args, keys[i]);
    if (after) {
        snprintf(num, sizeof num, "%lld", after);
        query_add(&q, "after", num);
    }
    if (cJSON_GetObjectItem(c->args, "limit")) {
        query_arg(&q, c->args, "limit");
    } else {
        snprintf(num, sizeof num, "%d", MCP_LIST_DEFAULT);
        query_add(&q, "limit", num);
    }
    snprintf(path, sizeof path, "/v1/experiments%s", q.len ? q.data : "");
    bytebuf_free(&q);
    call_api(c, "GET", path, NULL);
    if (c->failed) return 0;
    const cJSON *next = cJSON_GetObjectItem(c->out, "next_after");
    if (cJSON_IsNumber(next)) {
        snprintf(num, sizeof num, "%.0f", next->valuedouble);
        cJSON_AddStringToObject(c->out, "next_cursor", num);
    } else {
        cJSON_AddNullToObject(c->out, "next_cursor");
    }
    return 0;
}

/* Keep n of the rows of arr, evenly spaced, the first and the last among
 * them (n >= 2); metrics_points says how many are left. */
static void downsample(cJSON *arr, int n) {
    int total = cJSON_GetArraySize(arr);
    if (total <= n) return;
    cJSON *kept = cJSON_CreateArray();
    for (int k = 0; k < n; k++) {
        int i = (int)((double)k * (total - 1) / (n - 1) + 0.5);
        cJSON_AddItemToArray(kept, cJSON_Duplicate(cJSON_GetArrayItem(arr, i), 1));
    }
    while (cJSON_GetArraySize(arr)) cJSON_DeleteItemFromArray(arr, 0);
    for (cJSON *it = kept->child; it; it = kept->child)
        cJSON_AddItemToArray(arr, cJSON_DetachItemViaPointer(kept, it));
    cJSON_Delete(kept);
}

static int tool_get(call_t *c) {
    long long id = arg_id(c->args, "id");
    char path[96], *log = NULL;
    if (!id) return bad_args(c, "id: expected an experiment id (a positive integer)");
    const cJSON *mp = cJSON_GetObjectItem(c->args, "metric_points");
    double points = cJSON_IsNumber(mp) ? floor(mp->valuedouble) : MCP_METRIC_POINTS;
    if (points < 0) points = 0;
    if (points > MCP_METRIC_POINTS_MAX) points = MCP_METRIC_POINTS_MAX;
    /* every row (up to the API's bound) when downsampling, none when 0 */
    snprintf(path, sizeof path, "/v1/experiments/%lld%s", id, points ? "" : "?metrics=0");
    call_api(c, "GET", path, NULL);
    if (!c->failed) {
        cJSON *rows = cJSON_GetObjectItem(c->out, "metrics");
        if (cJSON_IsArray(rows) && points >= 2) downsample(rows, (int)points);
        if (cJSON_IsArray(rows) && points == 1)
            while (cJSON_GetArraySize(rows) > 1) cJSON_DeleteItemFromArray(rows, 0);
        cJSON_AddNumberToObject(c->out, "metrics_shown", cJSON_GetArraySize(rows));
    }
    const cJSON *t = cJSON_GetObjectItem(c->args, "log_tail_bytes");
    double tail = cJSON_IsNumber(t) ? t->valuedouble : 2000;
    if (c->failed || !(tail >= 1)) return 0;
    if (tail > MAX_LOG_TAIL) tail = MAX_LOG_TAIL;
    snprintf(path, sizeof path, "/v1/experiments/%lld/log?tail=%.0f", id, floor(tail));
    int status = c->b->call(c->b->user, "GET", path, NULL, &log);
    cJSON *w = cJSON_CreateObject();
    cJSON_AddItemToObject(w, "experiment", c->out);
    if (status >= 200 && status < 300 && log)
        cJSON_AddStringToObject(w, "log_tail", log);
    else
        cJSON_AddNullToObject(w, "log_tail");
    free(log);
    c->out = w;
    return 0;
}

static int tool_cancel(call_t *c) {
    long long id = arg_id(c->args, "id");
    char path[96];
    if (!id) return bad_args(c, "id: expected an experiment id (a positive integer)");
    snprintf(path, sizeof path, "/v1/experiments/%lld/cancel", id);
    call_api(c, "POST", path, NULL);
    return 0;
}

/* Every leaf of a spec as "path" -> value into flat. */
static void flatten(const cJSON *o, const char *prefix, cJSON *flat) {
    for (const cJSON *it = o ? o->child : NULL; it; it = it->next) {
        char path[256];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", it->string);
        if (cJSON_IsObject(it))
            flatten(it, path, flat);
        else
            cJSON_AddItemToObject(flat, path, cJSON_Duplicate(it, 1));
    }
}

/* {"a","b","differences":[{"field","a","b"}],"val_bpb_delta"} of two experiments. */
static int tool_diff(call_t *c) {
    long long ids[2] = {arg_id(c->args, "a"), arg_id(c->args, "b")};
    cJSON *got[2] = {NULL, NULL}, *flat[2];
    if (!ids[0] || !ids[1]) return bad_args(c, "a, b: expected two experiment ids");
    for (int i = 0; i < 2; i++) {
        char path[64];
        snprintf(path, sizeof path, "/v1/experiments/%lld", ids[i]);
        if (!api_call(c->b, "GET", path, NULL, &got[i])) {
            c->out = got[i]; /* the error envelope */
            c->failed = 1;
            if (i == 1) {
                cJSON_Delete(got[0]);
                cJSON_Delete(flat[0]);
            }
            return 0;
        }
        flat[i] = cJSON_CreateObject();
        flatten(cJSON_GetObjectItem(got[i], "spec"), "", flat[i]);
    }
    cJSON *o = cJSON_CreateObject(), *d = cJSON_AddArrayToObject(o, "differences");
    for (int side = 0; side < 2; side++)
        for (cJSON *it = flat[side]->child; it; it = it->next) {
            cJSON *other = cJSON_GetObjectItemCaseSensitive(flat[!side], it->string);
            if (side == 1 && other) continue; /* compared from side 0 */
            if (other && cJSON_Compare(it, other, 1)) continue;
            cJSON *row = cJSON_CreateObject();
            cJSON_AddStringToObject(row, "field", it->string);
            cJSON_AddItemToObject(row, "a", cJSON_Duplicate(side ? other : it, 1));
            cJSON_AddItemToObject(row, "b", cJSON_Duplicate(side ? it : other, 1));
            if (!cJSON_GetObjectItem(row, "a")) cJSON_AddNullToObject(row, "a");
            if (!cJSON_GetObjectItem(row, "b")) cJSON_AddNullToObject(row, "b");
            cJSON_AddItemToArray(d, row);
        }
    double v[2];
    for (int i = 0; i < 2; i++) {
        const cJSON *r = cJSON_GetObjectItem(cJSON_GetObjectItem(got[i], "result"), "val_bpb");
        v[i] = cJSON_IsNumber(r) ? r->valuedouble : NAN;
        cJSON *side = cJSON_AddObjectToObject(o, i ? "b" : "a");
        cJSON_AddNumberToObject(side, "id", (double)ids[i]);
        cJSON_AddItemToObject(side, "status",
                              cJSON_Duplicate(cJSON_GetObjectItem(got[i], "status"), 1));
        if (isnan(v[i]))
            cJSON_AddNullToObject(side, "val_bpb");
        else
            cJSON_AddNumberToObject(side, "val_bpb", v[i]);
        cJSON_Delete(flat[i]);
        cJSON_Delete(got[i]);
    }
    if (isnan(v[0]) || isnan(v[1]))
        cJSON_AddNullToObject(o, "val_bpb_delta");
    else
        cJSON_AddNumberToObject(o, "val_bpb_delta", v[1] - v[0]);
    c->out = o;
    return 0;
}

/* The wait tool is started by mcp_handle (it needs the request's id). */
static int tool_wait(call_t *c) {
    (void)c;
    return 1;
}

/* The tool table (names, descriptions, schemas) over the handlers above. */
#include "daemon/shared/mcp_tools.h"

/* ------------------------------------------------------------------- wait */

static int is_final(const char *status) {
    return status && strcmp(status, "queued") && strcmp(status, "running");
}

/* Ask for every id: the experiments' rows into *rows ({"id","status",
 * "val_bpb","reason"}), *done how many ended, *fraction the work done in
 * experiments (a running one by its progress). Returns 0, or -1 with *rows
 * the error envelope. */
static int poll_wait(const mcp_wait_t *w, const mcp_backend_t *b, cJSON **rows, int *done,
                     double *fraction) {
    cJSON *arr = cJSON_CreateArray();
    *done = 0;
    *fraction = 0;
    for (int i = 0; i < w->n; i++) {
        char path[64];
        cJSON *e;
        snprintf(path, sizeof path, "/v1/experiments/%lld?metrics=0", w->ids[i]);
        if (!api_call(b, "GET", path, NULL, &e)) {
            cJSON_Delete(arr);
            *rows = e;
            return -1;
        }
        const char *status = cJSON_GetStringValue(cJSON_GetObjectItem(e, "status"));
        cJSON *row = cJSON_CreateObject(), *res = cJSON_GetObjectItem(e, "result");
        cJSON_AddNumberToObject(row, "id", (double)w->ids[i]);
        cJSON_AddStringToObject(row, "status", status ? status : "unknown");
        cJSON *v = cJSON_GetObjectItem(res, "val_bpb"), *reason = cJSON_GetObjectItem(e, "reason");
        cJSON_AddItemToObject(row, "val_bpb",
                              cJSON_IsNumber(v) ? cJSON_Duplicate(v, 1) : cJSON_CreateNull());
        cJSON_AddItemToObject(row, "reason",
                              cJSON_IsString(reason) ? cJSON_Duplicate(reason, 1)
                                                     : cJSON_CreateNull());
        cJSON_AddItemToArray(arr, row);
        if (is_final(status)) {
            (*done)++;
            *fraction += 1;
        } else {
            const cJSON *p = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "progress"), "percent");
            if (cJSON_IsNumber(p) && p->valuedouble > 0 && p->valuedouble < 100)
                *fraction += p->valuedouble / 100;
        }
        cJSON_Delete(e);
    }
    *rows = arr;
    return 0;
}

static void wait_unlink(mcp_server_t *s, mcp_wait_t *w) {
    for (mcp_wait_t **p = &s->waits; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    cJSON_Delete(w->id);
    cJSON_Delete(w->progress);
    free(w);
}

int mcp_wait_wants_progress(const mcp_wait_t *w) {
    return w->progress != NULL;
}

double mcp_wait_deadline(const mcp_wait_t *w) {
    return w->deadline;
}

void mcp_wait_drop(mcp_server_t *s, mcp_wait_t *w) {
    wait_unlink(s, w);
}

static char *progress_note(mcp_wait_t *w, double fraction, int done) {
    if (!w->progress || fraction <= w->last_progress) return NULL;
    w->last_progress = fraction;
    char msg[96];
    snprintf(msg, sizeof msg, "%d of %d experiments finished", done, w->n);
    cJSON *o = cJSON_CreateObject(), *p = cJSON_AddObjectToObject(o, "params");
    cJSON_AddStringToObject(o, "jsonrpc", "2.0");
    cJSON_AddStringToObject(o, "method", "notifications/progress");
    cJSON_AddItemToObject(p, "progressToken", cJSON_Duplicate(w->progress, 1));
    cJSON_AddNumberToObject(p, "progress", fraction);
    cJSON_AddNumberToObject(p, "total", w->n);
    cJSON_AddStringToObject(p, "message", msg);
    return print(o);
}

int mcp_wait_step(mcp_server_t *s, mcp_wait_t *w, const mcp_backend_t *b, char **msg) {
    cJSON *rows;
    int done;
    double fraction;
    *msg = NULL;
    if (w->cancelled) {
        wait_unlink(s, w);
        return 1;
    }
    int failed = poll_wait(w, b, &rows, &done, &fraction) < 0;
    int timed_out = !failed && done < w->n && util_now() >= w->deadline;
    if (!failed && done < w->n && !timed_out) {
        cJSON_Delete(rows);
        *msg = progress_note(w, fraction, done);
        return 0;
    }
    cJSON *out = rows;
    if (!failed) {
        out = cJSON_CreateObject();
        cJSON *pending = cJSON_CreateArray();
        for (const cJSON *r = rows->child; r; r = r->next)
            if (!is_final(cJSON_GetStringValue(cJSON_GetObjectItem(r, "status"))))
                cJSON_AddItemToArray(pending, cJSON_Duplicate(cJSON_GetObjectItem(r, "id"), 1));
        cJSON_AddItemToObject(out, "experiments", rows);
        cJSON_AddBoolToObject(out, "timed_out", timed_out);
        cJSON_AddItemToObject(out, "pending", pending);
        if (timed_out) {
            char note[160];
            snprintf(note, sizeof note,
                     "%d of %d still queued or running: call wait again with the ids in pending "
                     "to continue",
                     w->n - done, w->n);
            cJSON_AddStringToObject(out, "message", note);
        }
    }
    *msg = rpc_result(w->id, tool_result(out, failed));
    wait_unlink(s, w);
    return 1;
}

/* Start the wait of request id (args as the wait tool takes them). Returns
 * the wait, or NULL with *reply the tool's error result. */
static mcp_wait_t *wait_start(mcp_server_t *s, const cJSON *id, const cJSON *args,
                              const cJSON *meta, char **reply) {
    const cJSON *ids = cJSON_GetObjectItem(args, "ids"),
                *t = cJSON_GetObjectItem(args, "timeout_s");
    int n = cJSON_GetArraySize(ids);
    const char *bad = NULL;
    if (!cJSON_IsArray(ids) || n < 1 || n > MAX_WAIT_IDS)
        bad = "ids: expected 1 to 64 experiment ids";
    else if (t && (!cJSON_IsNumber(t) || t->valuedouble < 0 || t->valuedouble > MCP_WAIT_MAX_S))
        bad = "timeout_s: expected a number of seconds from 0 to 3600";
    mcp_wait_t *w = bad ? NULL : calloc(1, sizeof *w);
    for (int i = 0; w && i < n; i++) {
        const cJSON *v = cJSON_GetArrayItem(ids, i);
        long long eid = positive_integer(v);
        if (!eid) {
            bad = "ids: expected positive integers";
            break;
        }
        w->ids[w->n++] = eid;
    }
    if (bad || !w) {
        free(w);
        *reply = rpc_result(
            id, tool_result(api_error("invalid_arguments", bad ? bad : "out of memory"), 1));
        return NULL;
    }
    w->id = cJSON_Duplicate(id, 1);
    const cJSON *tok = cJSON_GetObjectItem(meta, "progressToken");
    if (cJSON_IsString(tok) || cJSON_IsNumber(tok)) w->progress = cJSON_Duplicate(tok, 1);
    /* One call never outlasts a client's default request timeout (60 s in
     * both official SDKs): a longer wait is several calls. */
    double secs = t ? t->valuedouble : MCP_WAIT_CALL_S;
    w->deadline = util_now() + (secs < MCP_WAIT_CALL_S ? secs : MCP_WAIT_CALL_S);
    w->last_progress = -1;
    w->next = s->waits;
    s->waits = w;
    return w;
}

/* ------------------------------------------------------------- the methods */

static cJSON *schema_of(const char *text) {
    cJSON *j = cJSON_Parse(text);
    return j ? j : cJSON_CreateObject();
}

/* The spec's schema without its $schema key, for nesting in a tool's. */
static cJSON *spec_schema_nested(void) {
    cJSON *j = spec_json_schema();
    cJSON_DeleteItemFromObject(j, "$schema");
    return j;
}

static cJSON *tools_list(void) {
    cJSON *r = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(r, "tools");
    for (size_t i = 0; i < N_TOOLS; i++) {
        const mcp_tool_t *t = &mcp_tools[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", t->name);
        cJSON_AddStringToObject(o, "title", t->title);
        cJSON_AddStringToObject(o, "description", t->description);
        cJSON *in = schema_of(t->input);
        /* The spec table's schema once in the list, under submit's $defs
         * (its spec and specs' items refer to it); cost's spec says where. */
        if (t->spec_args == SPEC_DEFINED)
            cJSON_AddItemToObject(cJSON_AddObjectToObject(in, "$defs"), "spec",
                                  spec_schema_nested());
        cJSON_AddItemToObject(o, "inputSchema", in);
        cJSON_AddItemToObject(o, "outputSchema", schema_of(t->output));
        cJSON *ann = cJSON_AddObjectToObject(o, "annotations");
        cJSON_AddBoolToObject(ann, "readOnlyHint", t->read_only);
        cJSON_AddBoolToObject(ann, "openWorldHint", 0);
        cJSON_AddItemToArray(arr, o);
    }
    return r;
}

static const char *const versions[] = {MCP_PROTOCOL_VERSION, "2025-06-18", "2025-03-26",
                                       "2024-11-05"};

int mcp_version_supported(const char *v) {
    for (size_t i = 0; v && i < sizeof versions / sizeof *versions; i++)
        if (!strcmp(v, versions[i])) return 1;
    return 0;
}

static cJSON *initialize(mcp_server_t *s, const cJSON *params) {
    const char *asked = cJSON_GetStringValue(cJSON_GetObjectItem(params, "protocolVersion"));
    const char *v = MCP_PROTOCOL_VERSION;
    for (size_t i = 0; asked && i < sizeof versions / sizeof *versions; i++)
        if (!strcmp(asked, versions[i])) v = versions[i];
    s->initialized = 1;
    cJSON *r = cJSON_CreateObject(), *caps = cJSON_AddObjectToObject(r, "capabilities");
    cJSON_AddStringToObject(r, "protocolVersion", v);
    cJSON_AddBoolToObject(cJSON_AddObjectToObject(caps, "tools"), "listChanged", 0);
    cJSON *res = cJSON_AddObjectToObject(caps, "resources");
    cJSON_AddBoolToObject(res, "subscribe", 0);
    cJSON_AddBoolToObject(res, "listChanged", 0);
    cJSON_AddBoolToObject(cJSON_AddObjectToObject(caps, "prompts"), "listChanged", 0);
    cJSON *info = cJSON_AddObjectToObject(r, "serverInfo");
    cJSON_AddStringToObject(info, "name", "nightshift");
    cJSON_AddStringToObject(info, "title", "nightshift: overnight GPT experiments");
    cJSON_AddStringToObject(info, "version", "1.0.0");
    cJSON_AddStringToObject(r, "instructions", mcp_night_prompt);
    return r;
}

char *mcp_spec_schema_text(void) {
    return print(spec_json_schema());
}

static cJSON *resource(const char *uri, const char *name, const char *mime, const char *desc) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "uri", uri);
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "mimeType", mime);
    cJSON_AddStringToObject(o, "description", desc);
    return o;
}

static cJSON *resources_list(int templates) {
    cJSON *r = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(r, templates ? "resourceTemplates" : "resources");
    if (templates) {
        cJSON *t = resource("", "experiment", "application/json",
                            "one experiment: its spec, status, result and metrics");
        cJSON_DeleteItemFromObject(t, "uri");
        cJSON_AddStringToObject(t, "uriTemplate", "nightshift://experiments/{id}");
        cJSON_AddItemToArray(arr, t);
        return r;
    }
    cJSON_AddItemToArray(arr, resource("nightshift://schema/spec", "spec-schema",
                                       "application/schema+json",
                                       "the experiment spec's JSON Schema (every field, its "
                                       "default, bounds and meaning)"));
    cJSON_AddItemToArray(arr, resource("nightshift://noise", "noise", "application/json",
                                       "the measured seed-to-seed noise of val_bpb in the "
                                       "latest scope"));
    return r;
}

/* resources/read: the contents of uri, or NULL with *err a JSON-RPC error. */
static cJSON *resource_read(const mcp_backend_t *b, const cJSON *id, const char *uri, char **err) {
    char *text = NULL, path[96];
    const char *mime = "application/json";
    cJSON *got = NULL;
    long long n = 0;
    int pos = 0;
    if (!strcmp(uri, "nightshift://schema/spec")) {
        text = mcp_spec_schema_text();
        mime = "application/schema+json";
    } else if (!strcmp(uri, "nightshift://noise")) {
        api_call(b, "GET", "/v1/noise", NULL, &got);
    } else if (sscanf(uri, "nightshift://experiments/%lld%n", &n, &pos) == 1 && n > 0 &&
               !uri[pos]) {
        snprintf(path, sizeof path, "/v1/experiments/%lld", n);
        if (!api_call(b, "GET", path, NULL, &got)) {
            cJSON_Delete(got);
            *err = rpc_error(id, -32002, "resource not found: %.200s", uri);
            return NULL;
        }
    } else {
        *err = rpc_error(id, -32002, "resource not found: %.200s", uri);
        return NULL;
    }
    if (got) text = print(got);
    cJSON *r = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(r, "contents");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "uri", uri);
    cJSON_AddStringToObject(c, "mimeType", mime);
    cJSON_AddStringToObject(c, "text", text ? text : "");
    free(text);
    cJSON_AddItemToArray(arr, c);
    return r;
}

static cJSON *prompts_list(void) {
    cJSON *r = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(r, "prompts");
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "name", "research_night");
    cJSON_AddStringToObject(p, "title", "A research night");
    cJSON_AddStringToObject(p, "description",
                            "sets you up to run a night of experiments: val_bpb, the noise "
                            "rule, like with like, how to propose");
    cJSON_AddItemToArray(arr, p);
    return r;
}

static cJSON *prompt_get(void) {
    cJSON *r = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(r, "messages");
    cJSON_AddStringToObject(r, "description", "a night of experiments on nightshift");
    cJSON *m = cJSON_CreateObject(), *c = cJSON_AddObjectToObject(m, "content");
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(c, "type", "text");
    cJSON_AddStringToObject(c, "text", mcp_night_prompt);
    cJSON_AddItemToArray(arr, m);
    return r;
}

/* tools/call: the reply, or a started wait (*wait). */
static char *tools_call(mcp_server_t *s, const mcp_backend_t *b, const cJSON *id,
                        const cJSON *params, mcp_wait_t **wait) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(params, "name"));
    const cJSON *args = cJSON_GetObjectItem(params, "arguments");
    if (!name) return rpc_error(id, MCP_INVALID_PARAMS, "tools/call: params.name is missing");
    if (args && !cJSON_IsObject(args))
        return rpc_error(id, MCP_INVALID_PARAMS, "tools/call: arguments must be an object");
    for (size_t i = 0; i < N_TOOLS; i++) {
        if (strcmp(name, mcp_tools[i].name)) continue;
        call_t c = {.b = b, .args = args};
        if (mcp_tools[i].run(&c)) {
            char *reply = NULL;
            *wait = wait_start(s, id, args, cJSON_GetObjectItem(params, "_meta"), &reply);
            return reply;
        }
        if (!c.out) c.out = api_error("internal", "out of memory");
        return rpc_result(id, tool_result(c.out, c.failed));
    }
    return rpc_error(id, MCP_INVALID_PARAMS, "unknown tool: %.100s", name);
}

static void cancel(mcp_server_t *s, const cJSON *params) {
    const cJSON *rid = cJSON_GetObjectItem(params, "requestId");
    for (mcp_wait_t *w = s->waits; w && rid; w = w->next)
        if (cJSON_Compare(w->id, rid, 1)) w->cancelled = 1;
}

/* A request: its result or error (NULL with *wait set for a started wait). */
static char *request(mcp_server_t *s, const mcp_backend_t *b, const char *method, const cJSON *id,
                     const cJSON *params, mcp_wait_t **wait) {
    char *err = NULL;
    if (!strcmp(method, "initialize")) return rpc_result(id, initialize(s, params));
    if (!strcmp(method, "ping")) return rpc_result(id, cJSON_CreateObject());
    if (!strcmp(method, "tools/list")) return rpc_result(id, tools_list());
    if (!strcmp(method, "tools/call")) return tools_call(s, b, id, params, wait);
    if (!strcmp(method, "resources/list")) return rpc_result(id, resources_list(0));
    if (!strcmp(method, "resources/templates/list")) return rpc_result(id, resources_list(1));
    if (!strcmp(method, "prompts/list")) return rpc_result(id, prompts_list());
    if (!strcmp(method, "resources/read")) {
        const char *uri = cJSON_GetStringValue(cJSON_GetObjectItem(params, "uri"));
        if (!uri) return rpc_error(id, MCP_INVALID_PARAMS, "resources/read: params.uri is missing");
        cJSON *r = resource_read(b, id, uri, &err);
        return r ? rpc_result(id, r) : err;
    }
    if (!strcmp(method, "prompts/get")) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(params, "name"));
        if (!name || strcmp(name, "research_night"))
            return rpc_error(id, MCP_INVALID_PARAMS, "unknown prompt: %.100s",
                             name ? name : "(none)");
        return rpc_result(id, prompt_get());
    }
    return rpc_error(id, MCP_METHOD_NOT_FOUND, "method not found: %.100s", method);
}

mcp_out_t mcp_handle(mcp_server_t *s, const mcp_backend_t *b, const char *msg, size_t len,
                     char **reply, mcp_wait_t **wait) {
    char err[256];
    *reply = NULL;
    *wait = NULL;
    if (len > MCP_MAX_MESSAGE) {
        *reply =
            rpc_error(NULL, MCP_INVALID_REQUEST, "the message is over %d bytes", MCP_MAX_MESSAGE);
        return MCP_OUT_INVALID;
    }
    cJSON *j = http_json_parse(msg, len, err, sizeof err);
    if (!j) {
        *reply = rpc_error(NULL, MCP_PARSE_ERROR, "parse error: %s", err);
        return MCP_OUT_INVALID;
    }
    const cJSON *id = cJSON_GetObjectItem(j, "id"), *params = cJSON_GetObjectItem(j, "params");
    const char *method = cJSON_GetStringValue(cJSON_GetObjectItem(j, "method"));
    const char *bad = NULL;
    if (cJSON_IsArray(j))
        bad = "batches are not part of MCP " MCP_PROTOCOL_VERSION ": send one message at a time";
    else if (!cJSON_IsObject(j))
        bad = "a message is a JSON object";
    else if (!cJSON_IsString(cJSON_GetObjectItem(j, "jsonrpc")) ||
             strcmp(cJSON_GetObjectItem(j, "jsonrpc")->valuestring, "2.0"))
        bad = "jsonrpc must be \"2.0\"";
    else if (id && !cJSON_IsString(id) && !cJSON_IsNumber(id))
        bad = "id must be a string or a number";
    else if (!method && !cJSON_GetObjectItem(j, "result") && !cJSON_GetObjectItem(j, "error"))
        bad = "method must be a string";
    else if (params && !cJSON_IsObject(params))
        bad = "params must be an object";
    mcp_out_t out = MCP_OUT_NONE;
    if (bad) {
        *reply = rpc_error(cJSON_IsString(id) || cJSON_IsNumber(id) ? id : NULL,
                           MCP_INVALID_REQUEST, "invalid request: %s", bad);
        out = MCP_OUT_INVALID;
    } else if (!method) {
        /* a response from the client: this server sends no requests */
    } else if (!id) { /* a notification */
        if (!strcmp(method, "notifications/cancelled")) cancel(s, params);
    } else {
        *reply = request(s, b, method, id, params, wait);
        out = *wait ? MCP_OUT_PENDING : MCP_OUT_REPLY;
    }
    cJSON_Delete(j);
    return out;
}

mcp_server_t *mcp_server_new(void) {
    return calloc(1, sizeof(mcp_server_t));
}

void mcp_server_free(mcp_server_t *s) {
    if (!s) return;
    while (s->waits) wait_unlink(s, s->waits);
    free(s);
}

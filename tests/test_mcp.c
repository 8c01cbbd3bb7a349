/* test_mcp.c - the MCP server: its JSON-RPC layer in process over a scripted
 * backend (malformed, invalid and oversized messages, unknown methods,
 * batches, notifications, version negotiation, tool errors as results, the
 * wait's progress and cancellation, the spec's schema against the spec's own
 * defaults), and the real daemon's /mcp (a tiny spec submitted and waited
 * for over an event stream, a refused one, the token off loopback, a
 * foreign Origin and Host, GET and protocol-version refusals) and
 * `nightshift mcp` on stdio. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/shared/bytebuf.h"
#include "daemon/shared/mcp.h"
#include "engine/util.h"
#include "engine/spec.h"
#include "tests/testutil.h"

#define START_TIMEOUT_S 20
#define STOP_TIMEOUT_S  20

static char *state;

static void setup(void) {
    unsetenv("NIGHTSHIFT_TOKEN");
    cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
    tu_dir_init();
    state = tu_path("%s/state", tu_dir());
}

static void teardown(void) {
    free(state);
    tu_dir_fini();
    curl_global_cleanup();
}

TestSuite(mcp, .init = setup, .fini = teardown, .timeout = 120);

/* ------------------------------------------------- a scripted backend */

/* Answers each call with the next canned (status, body); records the calls. */
typedef struct {
    int status[8];
    const char *body[8];
    int n, next;
    char calls[2048];
} script_t;

static int script_call(void *user, const char *method, const char *path, const char *body,
                       char **out) {
    script_t *s = user;
    size_t len = strlen(s->calls);
    snprintf(s->calls + len, sizeof s->calls - len, "%s %s %s\n", method, path, body ? body : "");
    int i = s->next < s->n ? s->next++ : s->n - 1;
    *out = strdup(s->body[i]);
    return s->status[i];
}

/* Handle text; the reply parsed (NULL when none), *kind what came back. */
static cJSON *handle(mcp_server_t *srv, script_t *sc, const char *text, size_t len,
                     mcp_out_t *kind) {
    mcp_backend_t b = {.call = script_call, .user = sc};
    char *reply = NULL;
    mcp_wait_t *w = NULL;
    *kind = mcp_handle(srv, &b, text, len, &reply, &w);
    cJSON *j = reply ? cJSON_Parse(reply) : NULL;
    cr_assert(!reply || j, "the reply is JSON: %s", reply);
    free(reply);
    return j;
}

static double err_code(const cJSON *j) {
    const cJSON *c = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "code");
    cr_assert(cJSON_IsNumber(c), "an error with a code");
    return c->valuedouble;
}

/* ------------------------------------------------------ JSON-RPC layer */

Test(mcp, malformed_and_invalid_messages_are_jsonrpc_errors) {
    mcp_server_t *srv = mcp_server_new();
    script_t sc = {.n = 1, .status = {200}, .body = {"{}"}};
    static const struct {
        const char *text;
        int code;
    } cases[] = {
        {"{bad", -32700},
        {"", -32700},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"} x", -32700},
        {"42", -32600},
        {"{\"id\":1,\"method\":\"ping\"}", -32600},
        {"{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", -32600},
        {"{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}", -32600},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":7}", -32600},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":[1]}", -32600},
        {"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", -32600},
        {"[]", -32600},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mcp_out_t kind;
        cJSON *j = handle(srv, &sc, cases[i].text, strlen(cases[i].text), &kind);
        cr_expect_eq(kind, MCP_OUT_INVALID, "%s: an invalid message", cases[i].text);
        cr_expect_eq(err_code(j), cases[i].code, "%s: code %g", cases[i].text, err_code(j));
        cr_expect(cJSON_IsArray(j) == 0, "%s: one error, never a batch reply", cases[i].text);
        cJSON_Delete(j);
    }
    cr_expect_str_empty(sc.calls, "no message reached the daemon");
    mcp_server_free(srv);
}

Test(mcp, unknown_methods_keep_the_id_and_notifications_get_nothing) {
    mcp_server_t *srv = mcp_server_new();
    script_t sc = {.n = 1, .status = {200}, .body = {"{}"}};
    mcp_out_t kind;
    const char *t = "{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"method\":\"tools/frobnicate\"}";
    cJSON *j = handle(srv, &sc, t, strlen(t), &kind);
    cr_expect_eq(kind, MCP_OUT_REPLY);
    cr_expect_eq(err_code(j), -32601);
    cr_expect_str_eq(cJSON_GetObjectItem(j, "id")->valuestring, "abc");
    cJSON_Delete(j);
    t = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}";
    j = handle(srv, &sc, t, strlen(t), &kind);
    cr_expect(cJSON_IsObject(cJSON_GetObjectItem(j, "result")), "ping answers {}");
    cr_expect_eq(cJSON_GetObjectItem(j, "id")->valuedouble, 7);
    cJSON_Delete(j);
    static const char *const quiet[] = {
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/whatever\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}",
    };
    for (size_t i = 0; i < 3; i++) {
        j = handle(srv, &sc, quiet[i], strlen(quiet[i]), &kind);
        cr_expect_eq(kind, MCP_OUT_NONE, "%s: nothing to answer", quiet[i]);
        cr_expect_null(j);
    }
    mcp_server_free(srv);
}

/* A method or an id that is not valid UTF-8 is quoted with '?' for each
 * stray byte: before, the bytes went into the reply as they were, and the
 * reply was not JSON (which must be UTF-8). */
Test(mcp, errors_quote_input_as_valid_utf8) {
    mcp_server_t *srv = mcp_server_new();
    script_t sc = {.n = 1, .status = {200}, .body = {"{}"}};
    mcp_backend_t b = {.call = script_call, .user = &sc};
    static const char *const texts[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":\"\xc3(\",\"method\":\"tools/\xe2\x82\"}",
    };
    for (size_t i = 0; i < 2; i++) {
        char *reply = NULL;
        mcp_wait_t *w = NULL;
        mcp_handle(srv, &b, texts[i], strlen(texts[i]), &reply, &w);
        cr_assert(reply, "%s: a reply", texts[i]);
        cr_expect(tu_utf8_valid(reply, strlen(reply)), "not UTF-8: %s", reply);
        cr_expect(strstr(reply, i ? "method not found: tools/??" : "method not found: ??"), "%s",
                  reply);
        free(reply);
    }
    mcp_server_free(srv);
}

Test(mcp, oversized_messages_are_refused_unread) {
    mcp_server_t *srv = mcp_server_new();
    script_t sc = {.n = 1, .status = {200}, .body = {"{}"}};
    size_t n = MCP_MAX_MESSAGE + 1;
    char *big = malloc(n + 1);
    memset(big, ' ', n);
    memcpy(big, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}", 40);
    big[n] = '\0';
    mcp_out_t kind;
    cJSON *j = handle(srv, &sc, big, n, &kind);
    cr_expect_eq(kind, MCP_OUT_INVALID);
    cr_expect_eq(err_code(j), -32600);
    cJSON_Delete(j);
    j = handle(srv, &sc, big, n - 1, &kind); /* at the limit: whitespace is fine */
    cr_expect_eq(kind, MCP_OUT_REPLY, "a message of exactly the limit is read");
    cJSON_Delete(j);
    free(big);
    mcp_server_free(srv);
}

Test(mcp, initialize_negotiates_the_revision) {
    mcp_server_t *srv = mcp_server_new();
    script_t sc = {.n = 1, .status = {200}, .body = {"{}"}};
    static const char *const asked[][2] = {{"2025-06-18", "2025-06-18"},
                                           {"2025-11-25", "2025-11-25"},
                                           {"1999-01-01", MCP_PROTOCOL_VERSION}};
    for (int i = 0; i < 3; i++) {
        char *t = tu_path("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
                          "{\"protocolVersion\":\"%s\",\"capabilities\":{},\"clientInfo\":"
                          "{\"name\":\"t\",\"version\":\"1\"}}}",
                          asked[i][0]);
        mcp_out_t kind;
        cJSON *j = handle(srv, &sc, t, strlen(t), &kind);
        cJSON *r = cJSON_GetObjectItem(j, "result");
        cr_expect_str_eq(cJSON_GetObjectItem(r, "protocolVersion")->valuestring, asked[i][1]);
        cr_expect(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "capabilities"), "tools"));
        cJSON_Delete(j);
        free(t);
    }
    mcp_server_free(srv);
}

/* Every leaf of the default spec's canonical JSON (the parser's own idea of
 * the fields) has a property at its path in the submit tool's schema. */
static void expect_in_schema(const cJSON *spec, const cJSON *schema, const char *path) {
    for (const cJSON *it = spec->child; it; it = it->next) {
        const cJSON *p = cJSON_GetObjectItem(cJSON_GetObjectItem(schema, "properties"), it->string);
        cr_expect(p, "%s%s: in the schema", path, it->string);
        if (p && cJSON_IsObject(it)) {
            char *sub = tu_path("%s%s.", path, it->string);
            expect_in_schema(it, p, sub);
            free(sub);
        } else if (p && !cJSON_IsArray(it)) {
            cr_expect(cJSON_GetObjectItem(p, "description"), "%s%s: described", path, it->string);
        }
    }
}

Test(mcp, tools_list_schemas_come_from_the_spec_table) {
    mcp_server_t *srv = mcp_server_new();
    script_t sc = {.n = 1, .status = {200}, .body = {"{}"}};
    mcp_out_t kind;
    const char *t = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}";
    cJSON *j = handle(srv, &sc, t, strlen(t), &kind);
    const cJSON *tools = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "result"), "tools"),
                *submit = NULL;
    cr_assert(cJSON_GetArraySize(tools) >= 12);
    for (const cJSON *tool = tools->child; tool; tool = tool->next) {
        const char *name = cJSON_GetObjectItem(tool, "name")->valuestring;
        cr_expect(cJSON_IsObject(cJSON_GetObjectItem(tool, "inputSchema")), "%s: input", name);
        cr_expect(cJSON_IsObject(cJSON_GetObjectItem(tool, "outputSchema")), "%s: output", name);
        if (!strcmp(name, "submit")) submit = tool;
        /* every argument says what it is */
        const cJSON *props =
            cJSON_GetObjectItem(cJSON_GetObjectItem(tool, "inputSchema"), "properties");
        for (const cJSON *a = props ? props->child : NULL; a; a = a->next)
            cr_expect(cJSON_IsString(cJSON_GetObjectItem(a, "description")), "%s: %s undescribed",
                      name, a->string);
        /* a real output schema: properties, not an empty object */
        cr_expect(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(tool, "outputSchema"),
                                                         "properties")) >= 2,
                  "%s: an empty outputSchema", name);
    }
    /* the spec's schema once in the whole list */
    char *text = cJSON_PrintUnformatted(tools);
    int n = 0;
    for (const char *p = text; (p = strstr(p, "\"window_pattern\"")); p++) n++;
    cr_expect_eq(n, 1, "the spec schema appears %d times in tools/list", n);
    cr_log_info("tools/list: %zu bytes", strlen(text));
    cr_expect_lt(strlen(text), 24000, "tools/list is %zu bytes", strlen(text));
    free(text);
    cr_assert(submit);
    spec_t s;
    spec_defaults(&s);
    char *canon = spec_canonical_json(&s);
    cJSON *spec = cJSON_Parse(canon);
    const cJSON *in = cJSON_GetObjectItem(submit, "inputSchema");
    const cJSON *schema = cJSON_GetObjectItem(cJSON_GetObjectItem(in, "$defs"), "spec");
    const cJSON *ref = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(in, "properties"), "spec"), "$ref");
    cr_expect_str_eq(cJSON_GetStringValue(ref), "#/$defs/spec");
    expect_in_schema(spec, schema, "");
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(schema, "additionalProperties")),
              "unknown fields are refused, as the parser refuses them");
    cJSON_Delete(spec);
    free(canon);
    spec_free(&s);
    cJSON_Delete(j);
    mcp_server_free(srv);
}

Test(mcp, a_refusal_is_a_tool_result_with_its_code) {
    mcp_server_t *srv = mcp_server_new();
    script_t sc = {.n = 1,
                   .status = {422},
                   .body = {"{\"error\":{\"code\":\"does_not_fit\",\"message\":\"needs 9 GB\"}}"}};
    mcp_out_t kind;
    const char *t = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":"
                    "\"submit\",\"arguments\":{\"spec\":{\"seed\":1},\"repeats\":3}}}";
    cJSON *j = handle(srv, &sc, t, strlen(t), &kind);
    cJSON *r = cJSON_GetObjectItem(j, "result");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(r, "isError")));
    cr_expect_str_eq(
        cJSON_GetObjectItem(
            cJSON_GetObjectItem(cJSON_GetObjectItem(r, "structuredContent"), "error"), "code")
            ->valuestring,
        "does_not_fit");
    cr_expect_str_eq(sc.calls, "POST /v1/experiments?repeats=3 {\"seed\":1}\n");
    cJSON_Delete(j);
    /* bad arguments are the tool's error too; an unknown tool is a protocol error */
    t = "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"cancel\","
        "\"arguments\":{\"id\":-4}}}";
    j = handle(srv, &sc, t, strlen(t), &kind);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "result"), "isError")));
    cJSON_Delete(j);
    t = "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"nope\"}}";
    j = handle(srv, &sc, t, strlen(t), &kind);
    cr_expect_eq(err_code(j), -32602);
    cJSON_Delete(j);
    mcp_server_free(srv);
}

/* Found by fuzz_mcp: a wait id or a log tail beyond a long long's range was
 * converted from its double (undefined); now an id out of range is the tool's
 * error and a tail is capped before it becomes a number in a path. */
Test(mcp, numbers_beyond_a_long_long_are_refused_or_capped) {
    mcp_server_t *srv = mcp_server_new();
    script_t sc = {.n = 1, .status = {200}, .body = {"{\"id\":3,\"status\":\"succeeded\"}"}};
    mcp_out_t kind;
    const char *t = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
                    "\"wait\",\"arguments\":{\"ids\":[7.7e71,2],\"timeout_s\":0}}}";
    cJSON *j = handle(srv, &sc, t, strlen(t), &kind);
    cr_expect_eq(kind, MCP_OUT_REPLY);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "result"), "isError")));
    cr_expect_str_eq(sc.calls, "");
    cJSON_Delete(j);
    t = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":"
        "\"get_experiment\",\"arguments\":{\"id\":3,\"log_tail_bytes\":1e300}}}";
    j = handle(srv, &sc, t, strlen(t), &kind);
    cr_expect_str_eq(sc.calls, "GET /v1/experiments/3 \nGET /v1/experiments/3/log?tail=65536 \n");
    cJSON_Delete(j);
    mcp_server_free(srv);
}

/* Found by fuzz_mcp: diff freed the failed call's error envelope before
 * answering with it, and leaked the first spec when the second call failed. */
Test(mcp, diff_answers_either_side_failing_with_its_error) {
    static const char *const found =
        "{\"status\":\"succeeded\",\"spec\":{\"seed\":1},\"result\":{\"val_bpb\":2}}";
    static const char *const missing =
        "{\"error\":{\"code\":\"not_found\",\"message\":\"experiment 9 not found\"}}";
    for (int side = 0; side < 2; side++) {
        mcp_server_t *srv = mcp_server_new();
        script_t sc = {
            .n = 2, .status = {side ? 200 : 404, 404}, .body = {side ? found : missing, missing}};
        mcp_out_t kind;
        const char *t = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{"
                        "\"name\":\"diff\",\"arguments\":{\"a\":1,\"b\":9}}}";
        cJSON *j = handle(srv, &sc, t, strlen(t), &kind);
        cJSON *r = cJSON_GetObjectItem(j, "result");
        cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(r, "isError")), "side %d", side);
        cJSON *e = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "structuredContent"), "error");
        cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(e, "code")), "not_found");
        cJSON_Delete(j);
        mcp_server_free(srv);
    }
}

static mcp_wait_t *start_wait(mcp_server_t *srv, script_t *sc, const char *id) {
    mcp_backend_t b = {.call = script_call, .user = sc};
    char *reply = NULL,
         *t = tu_path("{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"tools/call\",\"params\":{"
                      "\"name\":\"wait\",\"_meta\":{\"progressToken\":\"p\"},\"arguments\":"
                      "{\"ids\":[5],\"timeout_s\":60}}}",
                      id);
    mcp_wait_t *w = NULL;
    cr_assert_eq(mcp_handle(srv, &b, t, strlen(t), &reply, &w), MCP_OUT_PENDING);
    cr_assert_null(reply);
    free(t);
    return w;
}

/* However long a wait is asked for, one call ends within MCP_WAIT_CALL_S
 * (before a client's default 60 s timeout), listing what still runs and
 * saying that calling again continues. */
Test(mcp, a_wait_never_outlasts_a_default_client_timeout) {
    mcp_server_t *srv = mcp_server_new();
    script_t sc = {.n = 1, .status = {200}, .body = {"{\"status\":\"running\"}"}};
    mcp_backend_t b = {.call = script_call, .user = &sc};
    mcp_wait_t *w = start_wait(srv, &sc, "3");
    double left = mcp_wait_deadline(w) - util_now();
    cr_expect(left > MCP_WAIT_CALL_S - 2 && left <= MCP_WAIT_CALL_S && MCP_WAIT_CALL_S < 55,
              "a 60 s wait ends in %g s", left);
    mcp_wait_drop(srv, w);
    const char *t = "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{"
                    "\"name\":\"wait\",\"arguments\":{\"ids\":[5],\"timeout_s\":0}}}";
    char *reply = NULL, *msg = NULL;
    cr_assert_eq(mcp_handle(srv, &b, t, strlen(t), &reply, &w), MCP_OUT_PENDING);
    cr_assert_eq(mcp_wait_step(srv, w, &b, &msg), 1);
    cJSON *j = cJSON_Parse(msg);
    cJSON *out = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "result"), "structuredContent");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(out, "timed_out")));
    cr_expect_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(out, "pending"), 0)->valuedouble, 5);
    cr_expect(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(out, "message")), "call wait again"),
              "%s", msg);
    cJSON_Delete(j);
    free(msg);
    mcp_server_free(srv);
}

/* get_experiment returns metric_points rows (50 by default) spread from the
 * first step to the last; list_experiments a page of 20 and a cursor. */
Test(mcp, outputs_are_bounded_by_default) {
    mcp_server_t *srv = mcp_server_new();
    bytebuf_t big;
    bytebuf_init(&big, 1 << 16);
    bytebuf_printf(&big, "{\"id\":1,\"metrics_total\":1000,\"metrics\":[");
    for (int i = 1; i <= 1000; i++) bytebuf_printf(&big, "%s{\"step\":%d}", i > 1 ? "," : "", i);
    bytebuf_printf(&big, "]}");
    script_t sc = {.n = 2, .status = {200, 404}, .body = {big.data, "{}"}};
    mcp_out_t kind;
    const char *t = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{"
                    "\"name\":\"get_experiment\",\"arguments\":{\"id\":1}}}";
    cJSON *j = handle(srv, &sc, t, strlen(t), &kind);
    cJSON *rows = cJSON_GetObjectItem(
        cJSON_GetObjectItem(
            cJSON_GetObjectItem(cJSON_GetObjectItem(j, "result"), "structuredContent"),
            "experiment"),
        "metrics");
    cr_expect_eq(cJSON_GetArraySize(rows), MCP_METRIC_POINTS);
    cr_expect_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(rows, 0), "step")->valuedouble, 1);
    cr_expect_eq(
        cJSON_GetObjectItem(cJSON_GetArrayItem(rows, MCP_METRIC_POINTS - 1), "step")->valuedouble,
        1000);
    cJSON_Delete(j);
    bytebuf_free(&big);

    script_t page = {.n = 1,
                     .status = {200},
                     .body = {"{\"experiments\":[{\"id\":9},{\"id\":8}],\"next_after\":8}"}};
    t = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{"
        "\"name\":\"list_experiments\",\"arguments\":{\"cursor\":\"10\"}}}";
    j = handle(srv, &page, t, strlen(t), &kind);
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(
                         cJSON_GetObjectItem(cJSON_GetObjectItem(j, "result"), "structuredContent"),
                         "next_cursor")),
                     "8");
    cr_expect(strstr(page.calls, "limit=20") && strstr(page.calls, "after=10"), "%s", page.calls);
    cJSON_Delete(j);
    mcp_server_free(srv);
}

Test(mcp, wait_sends_progress_then_the_result_or_nothing_when_cancelled) {
    mcp_server_t *srv = mcp_server_new();
    script_t sc = {.n = 3,
                   .status = {200, 200, 200},
                   .body = {"{\"status\":\"running\",\"progress\":{\"percent\":50}}",
                            "{\"status\":\"running\",\"progress\":{\"percent\":50}}",
                            "{\"status\":\"succeeded\",\"result\":{\"val_bpb\":1.25}}"}};
    mcp_backend_t b = {.call = script_call, .user = &sc};
    mcp_wait_t *w = start_wait(srv, &sc, "9");
    char *msg;
    cr_assert_eq(mcp_wait_step(srv, w, &b, &msg), 0);
    cJSON *j = cJSON_Parse(msg);
    cJSON *p = cJSON_GetObjectItem(j, "params");
    cr_expect_str_eq(cJSON_GetObjectItem(j, "method")->valuestring, "notifications/progress");
    cr_expect_eq(cJSON_GetObjectItem(p, "progress")->valuedouble, 0.5);
    cr_expect_str_eq(cJSON_GetObjectItem(p, "progressToken")->valuestring, "p");
    cJSON_Delete(j);
    free(msg);
    cr_assert_eq(mcp_wait_step(srv, w, &b, &msg), 0);
    cr_expect_null(msg, "no notification when nothing moved (progress must increase)");
    cr_assert_eq(mcp_wait_step(srv, w, &b, &msg), 1);
    j = cJSON_Parse(msg);
    cJSON *row =
        cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "result"),
                                                                   "structuredContent"),
                                               "experiments"),
                           0);
    cr_expect_eq(cJSON_GetObjectItem(j, "id")->valuedouble, 9);
    cr_expect_eq(cJSON_GetObjectItem(row, "val_bpb")->valuedouble, 1.25);
    cJSON_Delete(j);
    free(msg);

    w = start_wait(srv, &sc, "\"w2\"");
    const char *c = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":"
                    "{\"requestId\":\"w2\"}}";
    mcp_out_t kind;
    cr_expect_null(handle(srv, &sc, c, strlen(c), &kind));
    cr_expect_eq(mcp_wait_step(srv, w, &b, &msg), 1);
    cr_expect_null(msg, "a cancelled request gets no response");
    mcp_server_free(srv);
}

Test(mcp, the_readme_says_the_prompt_in_the_same_words) {
    char *path = tu_path("%s/daemon/README.md", tu_src()), *readme = tu_read(path);
    cr_assert(readme);
    /* the README quotes it wrapped: "\n> " is a space there */
    for (char *p; (p = strstr(readme, "\n> "));) {
        *p = ' ';
        memmove(p + 1, p + 3, strlen(p + 3) + 1);
    }
    free(path);
    char *prompt = strdup(mcp_night_prompt);
    for (char *line = strtok(prompt, "\n"); line; line = strtok(NULL, "\n"))
        cr_expect(strstr(readme, line), "daemon/README.md has the prompt's line: %s", line);
    free(prompt);
    free(readme);
}

/* ---------------------------------------------------------- the daemon */

static void daemon_start(tu_server_t *d, const char *const *extra) {
    tu_daemon_start(d, state, extra, START_TIMEOUT_S);
}

#define TINY_SPEC                                                                                  \
    "{\"dataset\":\"tiny\",\"token_budget\":2000,\"model\":{\"depth\":1,\"n_embd\":32,"            \
    "\"n_head\":2,\"seq_len\":32},\"train\":{\"batch_size\":4,\"total_batch_tokens\":128}}"

static void post_mcp(const tu_server_t *d, const char *body, const char *const *headers,
                     tu_reply_t *r) {
    const char *h[8] = {"Content-Type: application/json",
                        "Accept: application/json, text/event-stream"};
    int k = 2;
    for (int i = 0; headers && headers[i]; i++) h[k++] = headers[i];
    h[k] = NULL;
    tu_http_headers(d, "POST", "/mcp", body, strlen(body), h, r);
}

static cJSON *tool_call(const tu_server_t *d, const char *name, const char *args) {
    char *body = tu_path("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
                         "{\"name\":\"%s\",\"arguments\":%s}}",
                         name, args);
    tu_reply_t r;
    post_mcp(d, body, NULL, &r);
    cr_assert_eq(r.status, 200, "%s: %ld %s", name, r.status, r.body);
    cJSON *j = cJSON_Parse(r.body);
    cr_assert(j, "%s: JSON: %s", name, r.body);
    tu_reply_free(&r);
    free(body);
    cJSON *res = cJSON_DetachItemFromObject(j, "result");
    cJSON_Delete(j);
    cr_assert(res, "%s: a result", name);
    return res;
}

Test(mcp, daemon_submits_waits_and_refuses_over_http, .timeout = 120) {
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "tiny");
    tu_server_t d;
    daemon_start(&d, NULL);
    cJSON *r = tool_call(&d, "submit", "{\"spec\":" TINY_SPEC "}");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(r, "isError")));
    double id =
        cJSON_GetObjectItem(
            cJSON_GetArrayItem(
                cJSON_GetObjectItem(cJSON_GetObjectItem(r, "structuredContent"), "experiments"), 0),
            "id")
            ->valuedouble;
    cJSON_Delete(r);

    /* the wait answers as an event stream: progress, then the result */
    char *body = tu_path("{\"jsonrpc\":\"2.0\",\"id\":\"w\",\"method\":\"tools/call\",\"params\":"
                         "{\"name\":\"wait\",\"_meta\":{\"progressToken\":1},\"arguments\":"
                         "{\"ids\":[%.0f],\"timeout_s\":90}}}",
                         id);
    tu_reply_t rep;
    post_mcp(&d, body, NULL, &rep);
    free(body);
    cr_expect_eq(rep.status, 200);
    cr_expect(strstr(rep.content_type, "text/event-stream"), "%s", rep.content_type);
    const char *last = strstr(rep.body, "\"id\":\"w\"");
    cr_assert(last, "the wait's response is in the stream: %s", rep.body);
    cr_expect(strstr(rep.body, "notifications/progress") < last, "progress comes first");
    cr_expect(strstr(last, "\\\"status\\\":\\\"succeeded\\\""), "succeeded: %s", rep.body);
    tu_reply_free(&rep);

    r = tool_call(&d, "submit",
                  "{\"spec\":{\"dataset\":\"tiny\",\"model\":{\"depth\":64,\"n_embd\":16384,"
                  "\"n_head\":128}}}");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(r, "isError")));
    cJSON *code = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(r, "structuredContent"), "error"), "code");
    cr_expect_str_eq(cJSON_GetStringValue(code), "does_not_fit");
    cJSON_Delete(r);
    tu_server_stop(&d, STOP_TIMEOUT_S);
    tu_server_release(&d);

    char *dbpath = tu_path("%s/nightshift.db", state);
    sqlite3 *db = tu_db_open(dbpath);
    free(dbpath);
    cr_expect_eq(tu_sql_int(db,
                            "SELECT count(*) FROM experiments WHERE via = 'mcp' AND "
                            "source = 'mcp' AND id = ?1",
                            (long long)id),
                 1, "filed as source mcp");
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM experiments", 0), 1,
                 "the refusal queued nothing");
    sqlite3_close(db);
}

Test(mcp, the_gate_guards_mcp_as_it_guards_the_api) {
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "tiny");
    const char *extra[] = {"--listen", "0.0.0.0:0", "--token", "t0ken", NULL};
    tu_server_t d;
    daemon_start(&d, extra);
    const char *ping = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}";
    const char *call = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{"
                       "\"name\":\"status\",\"arguments\":{}}}";
    tu_reply_t r;
    post_mcp(&d, call, NULL, &r);
    cr_expect_eq(r.status, 401, "a tool call without the token off loopback: %ld", r.status);
    cr_expect(strcasestr(r.headers, "WWW-Authenticate: Bearer"), "%s", r.headers);
    cJSON *e = cJSON_Parse(r.body);
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "error"), "code")) &&
                  cJSON_IsString(cJSON_GetObjectItem(e, "jsonrpc")),
              "a JSON-RPC error: %s", r.body);
    cJSON_Delete(e);
    tu_reply_free(&r);
    const char *auth[] = {"Authorization: Bearer t0ken", NULL};
    post_mcp(&d, call, auth, &r);
    cr_expect_eq(r.status, 200, "with it: %ld %s", r.status, r.body);
    tu_reply_free(&r);
    const char *foreign[] = {"Authorization: Bearer t0ken", "Origin: http://evil.example", NULL};
    post_mcp(&d, ping, foreign, &r);
    cr_expect_eq(r.status, 403, "a foreign Origin: %ld", r.status);
    tu_reply_free(&r);
    const char *rebound[] = {"Authorization: Bearer t0ken", "Host: evil.example", NULL};
    post_mcp(&d, ping, rebound, &r);
    cr_expect_eq(r.status, 421, "a foreign Host (DNS rebinding): %ld", r.status);
    tu_reply_free(&r);
    const char *version[] = {"Authorization: Bearer t0ken", "MCP-Protocol-Version: 1999-01-01",
                             NULL};
    post_mcp(&d, ping, version, &r);
    cr_expect_eq(r.status, 400, "a revision the server does not speak: %ld", r.status);
    tu_reply_free(&r);
    const char *get[] = {"Authorization: Bearer t0ken", NULL};
    tu_http_headers(&d, "GET", "/mcp", NULL, 0, get, &r);
    cr_expect_eq(r.status, 405, "GET: no stream (stateless): %ld", r.status);
    tu_reply_free(&r);
    post_mcp(&d, "[]", auth, &r);
    cr_expect_eq(r.status, 400, "a batch: %ld", r.status);
    cr_expect(strstr(r.body, "-32600"), "%s", r.body);
    tu_reply_free(&r);
    tu_server_stop(&d, STOP_TIMEOUT_S);
    tu_server_release(&d);
}

/* On loopback, where reads are open, a client without the token reads
 * (status) and is refused a write as a tool error; a wrong token is a 401. */
Test(mcp, reads_need_no_token_on_loopback) {
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "tiny");
    const char *extra[] = {"--listen", "127.0.0.1:0", "--token", "t0ken", NULL};
    tu_server_t d;
    daemon_start(&d, extra);
    cJSON *r = tool_call(&d, "status", "{}");
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(r, "isError")), "status without the token");
    cJSON_Delete(r);
    r = tool_call(&d, "submit", "{\"spec\":" TINY_SPEC "}");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(r, "isError")), "submit without the token");
    cJSON_Delete(r);
    const char *wrong[] = {"Authorization: Bearer nope", NULL};
    tu_reply_t rep;
    post_mcp(&d, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}", wrong, &rep);
    cr_expect_eq(rep.status, 401, "a wrong token: %ld", rep.status);
    cr_expect(strcasestr(rep.headers, "WWW-Authenticate: Bearer"), "%s", rep.headers);
    tu_reply_free(&rep);
    tu_server_stop(&d, STOP_TIMEOUT_S);
    tu_server_release(&d);
}

/* `nightshift mcp` given no token, started in another directory, finds the
 * token file in the state directory its loopback daemon names, but only a
 * file nobody else may read. */
Test(mcp, stdio_finds_the_token_beside_the_daemons_state) {
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "tiny");
    const char *extra[] = {"--listen", "127.0.0.1:0", "--token", "t0ken", NULL};
    tu_server_t d;
    daemon_start(&d, extra);
    char *token = tu_path("%s/token", state), *input = tu_path("%s/in.txt", tu_dir());
    tu_write(token, "t0ken\n");
    tu_write(input, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
                    "\"submit\",\"arguments\":{\"spec\":" TINY_SPEC "}}}\n");
    char *cmd =
        tu_path("cd / && env -u NIGHTSHIFT_TOKEN -u NIGHTSHIFT_DIR '%s' mcp --url '%s' < '%s'",
                tu_bin(), d.url, input);
    char *const argv[] = {"/bin/sh", "-c", cmd, NULL};
    for (int mode = 0; mode < 2; mode++) {
        cr_assert_eq(chmod(token, mode ? 0644 : 0600), 0);
        tu_run_t r;
        tu_run(&r, argv, 60);
        cr_expect_eq(r.exit_code, 0, "%s", r.err);
        int refused = strstr(r.out, "\"isError\":true") != NULL;
        cr_expect_eq(refused, mode, "mode %s: %s", mode ? "0644" : "0600", r.out);
        tu_run_free(&r);
    }
    free(cmd);
    free(input);
    free(token);
    tu_server_stop(&d, STOP_TIMEOUT_S);
    tu_server_release(&d);
}

Test(mcp, stdio_answers_each_line_and_refuses_an_oversized_one) {
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "tiny");
    tu_server_t d;
    daemon_start(&d, NULL);
    char *input = tu_path("%s/in.txt", tu_dir());
    FILE *f = fopen(input, "w");
    fputs("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n", f);
    fputs("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":"
          "\"datasets\",\"arguments\":{}}}\n",
          f);
    for (int i = 0; i < MCP_MAX_MESSAGE + 10; i++) fputc('x', f);
    fputs("\n{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"nope\"}\n", f);
    fclose(f);
    char *cmd = tu_path("exec '%s' mcp --url '%s' < '%s'", tu_bin(), d.url, input);
    char *const argv[] = {"/bin/sh", "-c", cmd, NULL};
    tu_run_t r;
    tu_run(&r, argv, 60);
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    char *lines[8] = {0};
    int n = 0;
    for (char *l = strtok(r.out, "\n"); l && n < 8; l = strtok(NULL, "\n")) lines[n++] = l;
    cr_assert_eq(n, 4, "four replies: %s", r.out);
    cr_expect(strstr(lines[0], "\"id\":1,\"result\":{}"), "%s", lines[0]);
    cr_expect(strstr(lines[1], "\"name\":\"tiny\""), "%s", lines[1]);
    cr_expect(strstr(lines[2], "-32600"), "the oversized line: %s", lines[2]);
    cr_expect(strstr(lines[3], "-32601"), "the next line is read again: %s", lines[3]);
    tu_run_free(&r);
    free(cmd);
    free(input);
    tu_server_stop(&d, STOP_TIMEOUT_S);
    tu_server_release(&d);
}

/* ------------------------------------------ waits woken by events (issue 36) */

/* The CPU seconds process pid has used (user + system, /proc). */
static double cpu_seconds(int pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the name may hold spaces */
    unsigned long long ut = 0, st = 0;
    cr_assert(
        p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* A wait's stream opened on a new connection (not read); returns the fd. */
static int open_wait_stream(const tu_server_t *d, const char *ids) {
    char *body = tu_path("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
                         "{\"name\":\"wait\",\"arguments\":{\"ids\":[%s],\"timeout_s\":300}}}",
                         ids);
    char *req = tu_path("POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                        "application/json\r\nAccept: application/json, text/event-stream\r\n"
                        "Content-Length: %zu\r\n\r\n%s",
                        strlen(body), body);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    cr_assert_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    free(body);
    free(req);
    return fd;
}

/* Sixty waits on 64 experiments that neither end nor move cost the daemon
 * (almost) no CPU: before, each read all 64 every second (3,840 reads a
 * second, a fifth of a core in the probe). A wait on a queued experiment
 * that is cancelled ends at once: the cancellation wakes it. */
Test(mcp, waits_are_woken_by_events_not_polling, .timeout = 120) {
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "tiny");
    char *cmd = tu_path("%s from-spec", tu_bad_worker());
    const char *extra[] = {"--worker-cmd", cmd, "--listen", "127.0.0.1:0", NULL};
    tu_server_t d;
    daemon_start(&d, extra);
    enum { N_IDS = 64, N_WAITS = 60 };
    char *batch = strdup("["), ids[N_IDS * 8] = "";
    for (int i = 0; i < N_IDS; i++) {
        char *next = tu_path("%s%s{\"name\":\"hang\",\"dataset\":\"tiny\",\"seed\":%d,"
                             "\"time_budget_s\":120,\"model\":{\"depth\":1,\"n_embd\":32,"
                             "\"n_head\":2,\"seq_len\":32},\"train\":{\"batch_size\":4,"
                             "\"total_batch_tokens\":128}}",
                             batch, i ? "," : "", i + 1);
        free(batch);
        batch = next;
    }
    char *closed = tu_path("%s]", batch);
    cJSON *sub = tu_http_json(&d, "POST", "/v1/experiments", closed, 201);
    free(batch), free(closed);
    const cJSON *items = cJSON_GetObjectItem(sub, "experiments");
    cr_assert_eq(cJSON_GetArraySize(items), N_IDS);
    for (int i = 0; i < N_IDS; i++) {
        size_t k = strlen(ids);
        snprintf(ids + k, sizeof ids - k, "%s%.0f", i ? "," : "",
                 tu_jnum(cJSON_GetArrayItem(items, i), "id"));
    }
    double last_id = tu_jnum(cJSON_GetArrayItem(items, N_IDS - 1), "id");
    cJSON_Delete(sub);
    int fds[N_WAITS];
    for (int i = 0; i < N_WAITS; i++) fds[i] = open_wait_stream(&d, ids);
    /* Every wait's first step reads its 64 experiments (a second of CPU in
     * a sanitizer build): wait until a half second passes with (almost)
     * none used, at most 15 s, which polling waits never allow. */
    for (double t = tu_now(), c = cpu_seconds(d.pid); tu_now() - t < 15;) {
        tu_sleep_ms(500);
        double now = cpu_seconds(d.pid);
        if (now - c < 0.03) break;
        c = now;
    }
    double c0 = cpu_seconds(d.pid), t0 = tu_now();
    tu_sleep_ms(3000);
    double used = cpu_seconds(d.pid) - c0, took = tu_now() - t0;
    fprintf(stderr, "waits: %d waits on %d ids: the daemon used %.3f s of CPU in %.1f s\n", N_WAITS,
            N_IDS, used, took);
    cr_expect_lt(used, 0.1 * took, "%d idle waits used %.3f s of CPU in %.1f s", N_WAITS, used,
                 took);
    for (int i = 0; i < N_WAITS; i++) close(fds[i]);

    /* one wait on a queued experiment, which is cancelled */
    char one[32], path[64];
    snprintf(one, sizeof one, "%.0f", last_id);
    int fd = open_wait_stream(&d, one);
    tu_sleep_ms(300);
    snprintf(path, sizeof path, "/v1/experiments/%.0f/cancel", last_id);
    cJSON_Delete(tu_http_json(&d, "POST", path, "", 200));
    double t1 = tu_now();
    char buf[16384] = "";
    size_t got = 0;
    while (tu_now() - t1 < 10 && !strstr(buf, "\"id\":1,\"result\"")) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) > 0 && !tu_read_some(fd, buf, &got, sizeof buf)) break;
    }
    cr_expect(strstr(buf, "cancelled"), "the wait did not end with the cancellation: %s", buf);
    cr_expect_lt(tu_now() - t1, 5, "the wait ended %.1f s after the cancellation", tu_now() - t1);
    close(fd);
    tu_server_stop(&d, STOP_TIMEOUT_S);
    tu_server_release(&d);
    free(cmd);
}

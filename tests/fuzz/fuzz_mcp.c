/* fuzz_mcp.c - the MCP server's message handling (daemon/shared/mcp.h): an
 * input is one message, handed to mcp_handle over a backend that answers
 * every API call with a canned reply chosen by the input's last byte (a
 * success, a refusal, a broken body, an unreachable daemon). Properties:
 * whatever comes in, what goes out is one JSON object (never an array),
 * "jsonrpc":"2.0", with exactly one of result and error; an error's code is
 * a number; a reply's id is the request's (a string one as valid UTF-8); a notification gets
 * nothing; a started wait steps to its end within the deadline it was given (here every experiment
 * is final at once, or the backend fails). */
#include <cjson/cJSON.h>

#include "daemon/shared/mcp.h"
#include "engine/util.h"
#include "tests/fuzz/fuzz.h"

static const char *const canned[][2] = {
    {"200", "{\"status\":\"succeeded\",\"result\":{\"val_bpb\":1.5},\"spec\":{\"a\":1}}"},
    {"201", "{\"id\":3,\"status\":\"queued\",\"duplicate\":false}"},
    {"422", "{\"error\":{\"code\":\"does_not_fit\",\"message\":\"needs 9 GB\"}}"},
    {"200", "[1,2,3]"},
    {"500", "not json"},
    {"-1", "connection refused"},
};

static int pick;

static int fuzz_call(void *user, const char *method, const char *path, const char *body,
                     char **out) {
    (void)user, (void)method, (void)path, (void)body;
    *out = strdup(canned[pick][1]);
    return atoi(canned[pick][0]);
}

static void check_reply(const char *text, const cJSON *req_id) {
    cJSON *j = cJSON_Parse(text);
    FUZZ_CHECK(cJSON_IsObject(j), "the reply is one object: %s", text);
    const cJSON *v = cJSON_GetObjectItem(j, "jsonrpc");
    FUZZ_CHECK(cJSON_IsString(v) && !strcmp(v->valuestring, "2.0"), "jsonrpc 2.0: %s", text);
    int has_result = cJSON_HasObjectItem(j, "result"), has_error = cJSON_HasObjectItem(j, "error");
    FUZZ_CHECK(has_result + has_error == 1, "one of result and error: %s", text);
    if (has_error)
        FUZZ_CHECK(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "code")),
                   "an error code: %s", text);
    if (cJSON_IsString(req_id)) { /* quoted as valid UTF-8: bytes of no sequence are '?' */
        char *want = strdup(req_id->valuestring);
        util_utf8_scrub(want);
        const cJSON *got = cJSON_GetObjectItem(j, "id");
        FUZZ_CHECK(cJSON_IsString(got) && !strcmp(got->valuestring, want), "the request's id: %s",
                   text);
        free(want);
    } else if (req_id)
        FUZZ_CHECK(cJSON_Compare(cJSON_GetObjectItem(j, "id"), req_id, 1), "the request's id: %s",
                   text);
    cJSON_Delete(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    pick = data[size - 1] % (sizeof canned / sizeof *canned);
    mcp_server_t *s = mcp_server_new();
    mcp_backend_t b = {.call = fuzz_call};
    char *reply = NULL;
    mcp_wait_t *w = NULL;
    mcp_out_t out = mcp_handle(s, &b, (const char *)data, size, &reply, &w);
    /* the request's id, when the input is an object with a usable one */
    cJSON *in = cJSON_ParseWithLength((const char *)data, size);
    const cJSON *id = cJSON_IsObject(in) ? cJSON_GetObjectItem(in, "id") : NULL;
    if (id && !cJSON_IsString(id) && !cJSON_IsNumber(id)) id = NULL;
    if (out == MCP_OUT_NONE) FUZZ_CHECK(!reply && !w, "nothing out for a notification");
    if (out == MCP_OUT_REPLY) {
        FUZZ_CHECK(reply != NULL, "a reply");
        check_reply(reply, id);
    }
    if (out == MCP_OUT_INVALID) check_reply(reply, NULL);
    if (out == MCP_OUT_PENDING) {
        char *msg = NULL;
        int done = 0;
        for (int i = 0; i < 3 && !done; i++) {
            free(msg);
            done = mcp_wait_step(s, w, &b, &msg);
        }
        /* canned statuses are final or fail; an array body is no experiment,
         * so the wait may still be pending: drop it then */
        if (done && msg) check_reply(msg, id);
        if (!done) mcp_wait_drop(s, w);
        free(msg);
    }
    cJSON_Delete(in);
    free(reply);
    mcp_server_free(s);
    return 0;
}

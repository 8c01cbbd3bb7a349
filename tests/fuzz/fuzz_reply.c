/* fuzz_reply.c - the agent-reply parser (daemon/hook/hook.c): a 2xx reply's body
 * into proposals, each validated as the hook does through the spec parser. */
#include <cjson/cJSON.h>

#include "tests/fuzz/fuzz.h"
#include "daemon/hook/hook.h"
#include "engine/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    cJSON *root = NULL;
    int rc = hook_parse_reply((const char *)data, size, &root, err, sizeof err);
    FUZZ_CHECK(rc == 1 ? root != NULL : root == NULL, "proposals and the result disagree");
    FUZZ_CHECK(rc != 1 || cJSON_IsObject(root) || (cJSON_IsArray(root) && root->child),
               "a reply with proposals is neither an object nor a non-empty array");
    const cJSON *item = cJSON_IsArray(root) ? root->child : root;
    for (; item; item = cJSON_IsArray(root) ? item->next : NULL) {
        char *text = cJSON_PrintUnformatted(item);
        spec_t s;
        if (text && spec_parse(text, strlen(text), &s, err, sizeof err) == 0) spec_free(&s);
        free(text);
    }
    cJSON_Delete(root);
    return 0;
}

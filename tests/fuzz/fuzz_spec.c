/* fuzz_spec.c - the spec parser and validator (engine/spec.c), as a file or
 * a request body reaches them. Properties: an accepted spec's canonical JSON
 * is accepted again and is a fixed point; a body the strict JSON parser takes
 * goes through the validator the way the API sends it (printed again). */
#include <cjson/cJSON.h>

#include "tests/fuzz/fuzz.h"
#include "daemon/shared/http.h"
#include "engine/spec.h"

static void check_canonical(const spec_t *s) {
    char err[512];
    char *canon = spec_canonical_json(s);
    FUZZ_CHECK(canon, "no canonical JSON for an accepted spec");
    spec_t again;
    FUZZ_CHECK(spec_parse(canon, strlen(canon), &again, err, sizeof err) == 0,
               "canonical JSON rejected: %s: %s", err, canon);
    char *canon2 = spec_canonical_json(&again);
    FUZZ_CHECK(canon2 && !strcmp(canon, canon2), "canonical JSON is not a fixed point:\n%s\n%s",
               canon, canon2 ? canon2 : "(null)");
    free(canon2);
    spec_free(&again);
    free(canon);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    spec_t s;
    if (spec_parse((const char *)data, size, &s, err, sizeof err) == 0) {
        check_canonical(&s);
        spec_free(&s);
    }
    cJSON *j = http_json_parse((const char *)data, size, err, sizeof err);
    if (j) {
        char *text = cJSON_PrintUnformatted(j);
        if (text && spec_parse(text, strlen(text), &s, err, sizeof err) == 0) {
            check_canonical(&s);
            spec_free(&s);
        }
        free(text);
        cJSON_Delete(j);
    }
    return 0;
}

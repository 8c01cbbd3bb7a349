/* jsonpath.c - dotted-path lookups in a cJSON tree (see jsonpath.h). */
#include "daemon/shared/jsonpath.h"

#include <string.h>

const cJSON *jsonpath_get(const cJSON *o, const char *path) {
    char key[64];
    while (o && *path) {
        size_t n = strcspn(path, ".");
        if (n >= sizeof key) return NULL;
        memcpy(key, path, n);
        key[n] = '\0';
        o = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
        path += n + (path[n] == '.');
    }
    return o;
}

double jsonpath_num(const cJSON *o, const char *path, double dflt) {
    const cJSON *v = jsonpath_get(o, path);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

const char *jsonpath_str(const cJSON *o, const char *path) {
    return cJSON_GetStringValue(jsonpath_get(o, path));
}

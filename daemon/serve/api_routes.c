/* api_routes.c - a request path's route (api_routes.h). */
#include "daemon/serve/api_routes.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* "/v1/experiments/<id>[/rest]": the id and the rest ("" when none); 0 if not. */
static int parse_experiment_path(const char *path, int64_t *id, const char **rest) {
    const char *p = path + strlen("/v1/experiments/");
    char *end;
    if (strncmp(path, "/v1/experiments/", 16) != 0 || *p < '1' || *p > '9') return 0;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (errno || (*end && *end != '/')) return 0;
    *id = v;
    *rest = end;
    return 1;
}

static const char *const route_templates[] = {
#define API_ROUTE_TEMPLATE(name, tmpl) tmpl,
    API_ROUTES(API_ROUTE_TEMPLATE)
#undef API_ROUTE_TEMPLATE
};

const char *api_route_template(api_route_t r) {
    return r >= 0 && r < API_N_ROUTES ? route_templates[r] : route_templates[API_ROUTE_OTHER];
}

api_route_t api_route(const char *path, int64_t *id) {
    int64_t scratch;
    const char *rest = "";
    if (!id) id = &scratch;
    if (!path) return API_ROUTE_OTHER;
    if (parse_experiment_path(path, id, &rest)) {
        if (!*rest) return API_ROUTE_EXPERIMENT;
        if (!strcmp(rest, "/log")) return API_ROUTE_EXPERIMENT_LOG;
        if (!strcmp(rest, "/cancel")) return API_ROUTE_EXPERIMENT_CANCEL;
        return API_ROUTE_OTHER;
    }
    if (!strncmp(path, "/ui/", 4)) return API_ROUTE_UI;
    for (int r = 0; r < API_N_ROUTES; r++)
        if (!strchr(route_templates[r], '{') && !strcmp(path, route_templates[r]))
            return (api_route_t)r;
    return API_ROUTE_OTHER;
}

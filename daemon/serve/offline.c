/* offline.c - GET answers from a stopped daemon's database (see offline.h). */
#include "daemon/serve/offline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/serve/api.h"
#include "daemon/shared/http.h"
#include "daemon/store/store.h"
#include "engine/util.h"

int offline_get(const char *state_dir, const char *path, long *status, char **body, size_t *len,
                char *err, size_t errlen) {
    char db[4096], store_err[512];
    store_t *store = NULL;
    *body = NULL;
    *len = 0;
    snprintf(db, sizeof db, "%s/nightshift.db", state_dir);
    if (access(db, R_OK) != 0) {
        snprintf(err, errlen, "no database %s", db);
        return -1;
    }
    if (store_open_readonly(db, &store, store_err, sizeof store_err) < 0) {
        snprintf(err, errlen, "%s", store_err);
        return -1;
    }
    char *p = strdup(path);
    if (!p) {
        store_close(store);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    char *q = strchr(p, '?');
    if (q) *q++ = '\0';
    core_t core = {.store = store, .state_dir = state_dir};
    api_t a = {.store = store, .core = &core, .state_dir = state_dir, .started_at = util_now()};
    http_request_t req = {
        .method = "GET", .path = p, .query = q ? q : "", .body = "", .peer = "127.0.0.1:0"};
    http_response_t res = {0};
    api_handle(&req, &res, &a);
    api_close(&a);
    store_close(store);
    free(p);
    *status = res.status;
    *body = res.body ? res.body : strdup("");
    *len = res.body ? res.body_len : 0;
    if (!*body) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

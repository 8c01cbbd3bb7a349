/* web.c - look up the dashboard's compiled-in files (see web.h). */
#include "daemon/serve/web.h"

#include <string.h>

const web_asset_t *web_find(const char *path, const char **content_type) {
    const char *name = NULL;
    if (!strcmp(path, "/"))
        name = "index.html";
    else if (!strncmp(path, "/ui/", 4) && path[4] && !strchr(path + 4, '/'))
        name = path + 4;
    if (!name) return NULL;
    for (size_t i = 0; i < web_n_assets; i++) {
        if (strcmp(web_assets[i].name, name) != 0) continue;
        const char *dot = strrchr(name, '.');
        *content_type = !dot                    ? "application/octet-stream"
                        : !strcmp(dot, ".html") ? "text/html; charset=utf-8"
                        : !strcmp(dot, ".js")   ? "text/javascript; charset=utf-8"
                        : !strcmp(dot, ".css")  ? "text/css; charset=utf-8"
                                                : "application/octet-stream";
        return &web_assets[i];
    }
    return NULL;
}

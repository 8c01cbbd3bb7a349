/* web.h - the dashboard's files, compiled in: daemon/serve/web/ and uPlot's built
 * files (fetched at build time by scripts/fetch-uplot.sh), generated into the
 * build as web_assets.c by scripts/embed-web.sh (static data). */
#ifndef NIGHTSHIFT_WEB_H
#define NIGHTSHIFT_WEB_H

#include <stddef.h>

typedef struct {
    const char *name; /* the file's base name, e.g. "app.js" */
    const char *data; /* len bytes (plus a NUL) */
    size_t len;
} web_asset_t;

extern const web_asset_t web_assets[];
extern const size_t web_n_assets;

/* The asset served at path ("/" is index.html, "/ui/NAME" the others), or
 * NULL; *content_type gets its media type. */
const web_asset_t *web_find(const char *path, const char **content_type);

#endif

/* sample.c - `nightshift sample ID --url URL`: sample from a daemon's checkpoint. */
#include "daemon/client/client.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/client/cmd.h"
#include "daemon/client/conn.h"
#include "daemon/client/fmt.h"
#include "engine/cli.h"

static const cmd_help_t sample_help = {"sample", "ID --url URL [sample options]",
                                       "`nightshift sample ID --url URL`: asks the daemon for its "
                                       "state directory, then\nsamples from experiment ID's "
                                       "checkpoint there (see `nightshift sample --help`).\n"};

int client_sample_main(int argc, char **argv) {
    const char *url = NULL;
    int at = -1;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r = cmd_opt_value(argc, argv, &i, "--url", &v);
        if (r < 0) return cmd_usage_error(&sample_help, "--url needs a value");
        if (r > 0) {
            url = v;
            at = i;
        }
    }
    if (!url) return sample_main(argc, argv);

    conn_opts_t o = {.url = url};
    conn_t c = {0};
    cJSON *st = NULL;
    char **args = calloc((size_t)argc + 2, sizeof *args);
    char *dir = NULL;
    int rc = CLIENT_EXIT_API, n = 0;
    if (!args) goto fail;
    if ((rc = conn_open(&c, &o, &sample_help)) != 0 ||
        (rc = conn_json(&c, "GET", "/v1/status", NULL, 0, &st)) != 0)
        goto fail;
    if (!jstr(st, "state_dir") || !(dir = strdup(jstr(st, "state_dir")))) {
        conn_unexpected("no state_dir in /v1/status");
        rc = CLIENT_EXIT_API;
        goto fail;
    }
    /* argv without --url (one or two entries ending at index at), plus --dir. */
    int url_first = strchr(argv[at], '=') ? at : at - 1;
    for (int i = 0; i < argc; i++)
        if (i < url_first || i > at) args[n++] = argv[i];
    args[n++] = "--dir";
    args[n++] = dir;
    conn_close(&c);
    rc = sample_main(n, args);
fail:
    cJSON_Delete(st);
    conn_close(&c);
    free(dir);
    free(args);
    return rc;
}

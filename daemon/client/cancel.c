/* cancel.c - `nightshift cancel`: a queued or running experiment. */
#include "daemon/client/client.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "daemon/client/cmd.h"
#include "daemon/client/conn.h"
#include "daemon/client/fmt.h"

static const cmd_help_t cancel_help = {
    "cancel", "ID",
    "Cancel experiment ID: a queued one at once (`5 cancelled`); a running one by\n"
    "stopping its worker (`5 cancelling`; it shows as cancelled once stopped).\n"
    "An experiment that has already finished is not cancellable (exit 1).\n"};

int cancel_main(int argc, char **argv) {
    const cmd_help_t *h = &cancel_help;
    conn_opts_t o = {0};
    conn_t c = {0};
    const char *id_arg = NULL;
    int rc;
    cJSON *reply = NULL;
    line_t path = {0};

    cmd_args_t args = {.v = &id_arg, .max = 1, .too_many = "one ID at a time"};
    if (!cmd_parse_args(argc, argv, h, &o, NULL, &args, &rc)) return rc;
    long long id = cmd_positive(id_arg);
    if (!id_arg) return cmd_usage_error(h, "no experiment ID given");
    if (id < 0) return cmd_usage_error(h, "expected an experiment id, got '%s'", id_arg);

    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    line_add(&path, "/v1/experiments/%lld/cancel", id);
    if ((rc = conn_json(&c, "POST", path.s, NULL, 0, &reply)) != 0) goto fail;
    const char *status = jstr(reply, "status");
    if (!status) {
        conn_unexpected("no status");
        rc = CLIENT_EXIT_API;
        goto fail;
    }
    printf("%lld ", id);
    fmt_put_clean(stdout, status);
    puts(!strcmp(status, "cancelling") ? " (the worker is being stopped)" : "");
fail:
    cJSON_Delete(reply);
    conn_close(&c);
    return rc;
}

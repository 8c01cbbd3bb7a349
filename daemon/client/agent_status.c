/* agent_status.c - `nightshift agent status`: what a running agent is doing. */
#include "daemon/client/client.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "daemon/client/cmd.h"
#include "daemon/client/conn.h"
#include "daemon/client/fmt.h"

static const cmd_help_t agent_status_help = {
    "agent status", "",
    "What the running reference agent is doing: its best so far, the last event\n"
    "the daemon sent it and the decision it took, and what it is waiting for.\n"
    "The agent acts only when the daemon calls it: when a run ends or the queue\n"
    "runs dry; between those it is silent. --url is the agent's address\n"
    "(default http://127.0.0.1:$NIGHTSHIFT_AGENT_PORT, else port 8090).\n"};

int agent_status_main(int argc, char **argv) {
    const cmd_help_t *h = &agent_status_help;
    conn_opts_t o = {0};
    conn_t c = {0};
    int rc;
    cJSON *st = NULL;
    char url[128], a[32];
    for (int i = 1; i < argc; i++) {
        if ((rc = cmd_common_option(argc, argv, &i, &o)) < 0)
            return cmd_usage_error(h, "%s needs a value", argv[i]);
        if (rc) continue;
        return cmd_usage_error(h, "unexpected argument '%s'", argv[i]);
    }
    if (o.help) {
        cmd_usage(stdout, h);
        return 0;
    }
    if (!o.url) {
        const char *port = getenv("NIGHTSHIFT_AGENT_PORT");
        snprintf(url, sizeof url, "http://127.0.0.1:%s",
                 port && cmd_positive(port) > 0 ? port : "8090");
        o.url = url;
    }
    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    c.agent = 1;
    if ((rc = conn_json(&c, "GET", "/", NULL, 0, &st)) != 0) goto fail;
    printf("agent at %s: %" PRId64 " proposals so far, %" PRId64 " near ties awaiting a re-run\n",
           c.base, (int64_t)jnum(st, "proposals", 0), (int64_t)jnum(st, "pending_reruns", 0));
    const cJSON *best = jget(st, "best"), *ev = jget(st, "last_event");
    if (cJSON_IsObject(best))
        printf("  best:          exp %" PRId64 ", val_bpb %.4f\n", (int64_t)jnum(best, "id", 0),
               jnum(best, "val_bpb", 0));
    else
        printf("  best:          none yet\n");
    /* the lowest mean, when the noise has not yet let it be the best */
    const cJSON *low = jget(st, "lowest");
    if (cJSON_IsObject(low) && (!cJSON_IsObject(best) || jnum(low, "id", 0) != jnum(best, "id", 0)))
        printf("  lowest mean:   exp %" PRId64 ", val_bpb %.4f over %" PRId64
               " seed%s (not adopted: its gain over the best has not passed the noise)\n",
               (int64_t)jnum(low, "id", 0), jnum(low, "mean_val_bpb", 0),
               (int64_t)jnum(low, "seeds", 0), jnum(low, "seeds", 0) == 1 ? "" : "s");
    const cJSON *plan = jget(st, "plan");
    if (cJSON_IsObject(plan)) {
        /* the night sized to its length: what it spends on noise, startup, confirmation */
        const cJSON *runs = jget(plan, "runs");
        if (cJSON_IsNumber(runs))
            printf("  plan:          a night of %" PRId64 " runs: ", (int64_t)runs->valuedouble);
        else
            printf("  plan:          a night of unknown length: ");
        printf("%" PRId64 " baseline noise seed(s)%s, %" PRId64 " startup result(s), %" PRId64
               " confirmation seed(s) for the answer\n",
               (int64_t)jnum(plan, "noise_seeds", 0),
               cJSON_IsTrue(jget(plan, "noise_known")) ? " (earlier nights measured the noise)"
                                                       : "",
               (int64_t)jnum(plan, "startup", 0), (int64_t)jnum(plan, "confirm_seeds", 0));
    }
    if (jstr(st, "until")) {
        /* --until: the night's end, and the runs the agent still counts on */
        fputs("  night ends:    ", stdout);
        fmt_put_clean(stdout, jstr(st, "until"));
        const cJSON *left = jget(st, "runs_left");
        if (cJSON_IsNumber(left))
            printf(", %" PRId64 " more run(s) can end before then\n", (int64_t)left->valuedouble);
        else
            printf(", runs left not known yet (counted from the pace of the first ends)\n");
    }
    if (cJSON_IsObject(ev)) {
        fputs("  last event:    ", stdout);
        fmt_put_clean(stdout, jstr(ev, "type") ? jstr(ev, "type") : "?");
        printf(", %s ago, %" PRId64 " spec(s) proposed in reply\n",
               fmt_duration(jnum(ev, "seconds_ago", 0), a, sizeof a),
               (int64_t)jnum(ev, "proposed", 0));
    } else {
        printf("  last event:    none since it started\n");
    }
    if (jstr(st, "last_decision")) {
        fputs("  last decision: ", stdout);
        fmt_put_clean(stdout, jstr(st, "last_decision"));
        fputc('\n', stdout);
    }
    if (jstr(st, "waiting_for")) {
        fputs("  waiting for:   ", stdout);
        fmt_put_clean(stdout, jstr(st, "waiting_for"));
        fputc('\n', stdout);
    }
fail:
    cJSON_Delete(st);
    conn_close(&c);
    return rc;
}

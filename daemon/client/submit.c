/* submit.c - `nightshift submit`: queue a spec or an array of specs. */
#include "daemon/client/client.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/client/cmd.h"
#include "daemon/client/conn.h"
#include "daemon/client/fmt.h"

#define MAX_SPEC_BYTES ((size_t)1 << 20) /* the submit file; the daemon's body limit */

static const cmd_help_t submit_help = {
    "submit", "FILE|- [--force] [--repeats K]",
    "Queue the spec in FILE (or on stdin with -): one spec object, or an array\n"
    "of specs (at most 1 MiB). Prints one line per experiment, e.g. `5 queued`\n"
    "or `5 duplicate (already queued)`. The daemon validates the specs; an\n"
    "invalid one is reported with its field path and nothing is queued.\n\n"
    "  --force           queue even when an identical spec and seed exists\n"
    "  --repeats K       queue K runs of each spec, seeds seed .. seed + K - 1\n"
    "                    (the leaderboard shows them as one row: mean, sd, seeds)\n"};

static int print_submitted(const cJSON *item) {
    const cJSON *id = jget(item, "id"), *dup = jget(item, "duplicate");
    const char *status = jstr(item, "status");
    if (!cJSON_IsNumber(id)) {
        conn_unexpected("a submitted experiment without an id");
        return CLIENT_EXIT_API;
    }
    printf("%" PRId64, (int64_t)id->valuedouble);
    if (cJSON_IsTrue(dup)) {
        fputs(" duplicate (already ", stdout);
        fmt_put_clean(stdout, status ? status : "known");
        fputs(")\n", stdout);
    } else {
        fputc(' ', stdout);
        fmt_put_clean(stdout, status ? status : "queued");
        fputc('\n', stdout);
    }
    return 0;
}

int submit_main(int argc, char **argv) {
    const cmd_help_t *h = &submit_help;
    conn_opts_t o = {0};
    conn_t c = {0};
    const char *file = NULL, *repeats = NULL;
    int force = 0, rc;
    char *text = NULL, err[512];
    size_t len = 0;
    cJSON *spec = NULL, *reply = NULL;

    const cmd_opt_t opts[] = {{"--repeats", .value = &repeats}, {"--force", .flag = &force}, {0}};
    cmd_args_t args = {.v = &file,
                       .max = 1,
                       .too_many = "one FILE at a time (an array of specs submits several)",
                       .dash = 1};
    if (!cmd_parse_args(argc, argv, h, &o, opts, &args, &rc)) return rc;
    if (!file) return cmd_usage_error(h, "no FILE given (- reads stdin)");
    if (repeats && cmd_positive(repeats) < 0)
        return cmd_usage_error(h, "--repeats: expected a positive integer, got '%s'", repeats);
    line_t path = {"/v1/experiments", 15};
    if (force) line_add_query(&path, "force", "1");
    if (repeats) line_add_query(&path, "repeats", repeats);

    /* Read and check the JSON shape here, so a typo never costs a round trip;
     * the spec itself is validated by the daemon (one validator). */
    rc = CLIENT_EXIT_API;
    if (cmd_read_input(file, MAX_SPEC_BYTES, &text, &len, err, sizeof err) < 0) {
        fprintf(stderr, "nightshift submit: %s\n", err);
        goto fail;
    }
    const char *shown = strcmp(file, "-") ? file : "stdin";
    spec = cJSON_ParseWithLength(text, len);
    if (!spec) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= text && at <= text + len ? (size_t)(at - text) : 0;
        size_t line = 1, col = 1;
        for (size_t i = 0; i < off; i++) {
            if (text[i] == '\n')
                line++, col = 1;
            else if ((text[i] & 0xc0) != 0x80)
                col++;
        }
        fprintf(stderr, "nightshift submit: %s:%zu:%zu: not valid JSON\n", shown, line, col);
        goto fail;
    }
    int ok = cJSON_IsObject(spec) || (cJSON_IsArray(spec) && spec->child);
    for (const cJSON *s = cJSON_IsArray(spec) ? spec->child : NULL; s; s = s->next)
        ok &= cJSON_IsObject(s);
    if (!ok) {
        fprintf(stderr, "nightshift submit: %s: expected a spec object or an array of specs\n",
                shown);
        goto fail;
    }
    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    rc = conn_json(&c, "POST", path.s, text, len, &reply);
    if (rc) goto fail;
    if (cJSON_IsArray(spec) || cJSON_IsArray(jget(reply, "experiments"))) {
        const cJSON *items = jget(reply, "experiments");
        if (!cJSON_IsArray(items)) {
            conn_unexpected("no experiments array");
            rc = CLIENT_EXIT_API;
            goto fail;
        }
        for (const cJSON *it = items->child; it; it = it->next)
            if ((rc = print_submitted(it)) != 0) goto fail;
    } else if ((rc = print_submitted(reply)) != 0) {
        goto fail;
    }
    rc = 0;
fail:
    cJSON_Delete(reply);
    cJSON_Delete(spec);
    free(text);
    conn_close(&c);
    return rc;
}

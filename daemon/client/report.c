/* report.c - `nightshift report`: what the night did and learned in one
 * scope, as Markdown on stdout. The daemon writes the Markdown
 * (GET /v1/report?format=md, daemon/serve/report_doc.c), from the same
 * report it serves as a page at /report, so the terminal and the browser
 * say the same thing. */

#include <stdio.h>

#include "daemon/client/client.h"
#include "daemon/client/cmd.h"
#include "daemon/client/conn.h"
#include "daemon/client/fmt.h"

static const cmd_help_t report_help = {
    "report", "[--dataset D] [--budget B] [--eval-tokens N] [--baseline ID] [--json]",
    "The morning report of one dataset and budget, as Markdown: the hours and runs,\n"
    "the best configuration against the baseline in units of the measured noise,\n"
    "its val_bpb and its sealed test_bpb beside the baseline's, the best val_bpb so\n"
    "far against time, what each spec field did when it alone moved between two\n"
    "configurations (mean change of val_bpb, standard error, pairs), and what\n"
    "failed and why. The daemon serves the same report as a page at /report.\n\n"
    "  --dataset D       the dataset\n"
    "  --budget B        time:SECONDS, tokens:N or flops:N\n"
    "  --eval-tokens N   the validation tokens scored (0: the whole split)\n"
    "                    (what these leave out comes from the latest result, as for\n"
    "                    `nightshift best`)\n"
    "  --baseline ID     compare with the configuration of experiment ID (default:\n"
    "                    that of the scope's first succeeded run)\n"
    "  --json            the report's numbers as the daemon's JSON\n" CMD_OFFLINE_HELP};

int report_main(int argc, char **argv) {
    const cmd_help_t *h = &report_help;
    conn_opts_t o = {0};
    conn_t c = {.offline_ok = 1};
    conn_reply_t r = {0};
    int json = 0, rc;
    const char *dataset = NULL, *budget = NULL, *eval = NULL, *baseline = NULL;
    line_t path = {"/v1/report", 10};
    const cmd_opt_t opts[] = {{"--dataset", .value = &dataset},  {"--budget", .value = &budget},
                              {"--eval-tokens", .value = &eval}, {"--baseline", .value = &baseline},
                              {"--json", .flag = &json},         {0}};
    if (!cmd_parse_args(argc, argv, h, &o, opts, NULL, &rc)) return rc;
    if (baseline && cmd_positive(baseline) < 0)
        return cmd_usage_error(h, "--baseline: expected an experiment id, got '%s'", baseline);
    line_add_scope(&path, dataset, budget, eval);
    if (baseline) line_add_query(&path, "baseline", baseline);
    line_add_query(&path, "format", json ? "json" : "md");
    if ((rc = conn_open(&c, &o, h)) != 0) goto done;
    if ((rc = conn_request(&c, "GET", path.s, NULL, 0, &r)) != 0) goto done;
    if (fwrite(r.body.data, 1, r.body.len, stdout) != r.body.len || fflush(stdout) != 0)
        rc = CLIENT_EXIT_API;
done:
    conn_reply_free(&r);
    conn_close(&c);
    return rc;
}

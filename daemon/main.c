/* main.c - the `nightshift` command: dispatches to an engine or daemon subcommand. */
#include <stdio.h>
#include <string.h>

#include "experiments/agent/agent.h"
#include "engine/cli.h"
#include "engine/gemm.h"
#include "daemon/client/client.h"
#include "daemon/client/conn.h"
#include "daemon/serve/offline.h"
#include "daemon/serve/serve.h"
#include "daemon/exec/exec.h"
#include "daemon/exec/worker.h"
#include "daemon/store/store.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command_t;

static const command_t commands[] = {
    {"bench", bench_main, "time full training steps of a spec on a random batch"},
    {"calibrate", calibrate_main, "measure the machine's sgemm peak (the MFU denominator)"},
    {"cost", cost_main, "parameter counts, FLOPs and memory of a spec, and whether it fits"},
    {"exec-limited", exec_limited_main, "internal: run a worker under its slot's limits"},
    {"floor", floor_main, "internal: the address space the engine maps before a run"},
    {"grad", grad_main, "loss and every gradient of one batch (checks against other engines)"},
    {"schema", store_schema_main, "print the schema after every migration (schema/current.sql)"},
    {"serve", serve_main, "run the daemon: queue, workers, results store and HTTP API"},
    {"prep", prep_main, "train a BPE tokenizer and write a dataset from text, JSONL or dirs"},
    {"sample", client_sample_main, "generate text from an experiment's (or any saved) checkpoint"},
    {"train", train_main, "train one spec for its time budget and print the summary"},
    {"submit", submit_main, "queue a spec (or an array of specs) with the daemon"},
    {"ls", ls_main, "list the daemon's experiments"},
    {"show", show_main, "one experiment: status, spec, result, metrics or its log"},
    {"best", best_main, "the best config so far, as a spec ready to resubmit"},
    {"leaderboard", leaderboard_main, "configurations by mean val_bpb over seeds, with sd"},
    {"cancel", cancel_main, "cancel a queued or running experiment"},
    {"watch", watch_main, "live progress of the daemon's slots"},
    {"export", export_main, "every experiment as CSV, TSV, JSON lines or results.tsv"},
    {"diff", diff_main, "two experiments: spec differences and results side by side"},
    {"report", report_main, "the morning report: what a night did and learned, as Markdown"},
    {"mcp", mcp_main, "an MCP server on stdio for LLM clients, driving the daemon at --url"},
    {"agent", agent_main, "the reference search agent behind the webhook"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: nightshift <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-13s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n`nightshift <command> --help` describes a command.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    conn_set_offline(offline_get); /* the reading commands, when no daemon runs */
    /* Commands that run the engine's OpenMP team (engine/cli.h, threads_passive_wait). */
    static const char *const engine_commands[] = {"bench", "calibrate", "floor",
                                                  "grad",  "sample",    "train"};
    for (size_t i = 0; i < sizeof engine_commands / sizeof engine_commands[0]; i++) {
        if (strcmp(argv[1], engine_commands[i])) continue;
        threads_passive_wait(argv);
        char err[256];
        if (gemm_select_env(err, sizeof err) < 0) {
            fprintf(stderr, "nightshift %s: %s\n", argv[1], err);
            return 2;
        }
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "nightshift: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}

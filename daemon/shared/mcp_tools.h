/* mcp_tools.h - the MCP server's tools as a table: name, what an LLM reads
 * (title, description, the input and output JSON Schemas), and the handler.
 * Included once, by mcp.c, where the handlers are. The spec table's schema
 * (engine/spec.c) is added once to tools/list, under submit's $defs, which
 * its "spec" and its "specs" items refer to; cost's "spec" names it, so a
 * spec field appears here without an edit and the list stays small.
 *
 * The output schemas say the keys a client relies on, loosely (no
 * additionalProperties: false): the SDKs check structuredContent against
 * them, and the API may add a key without breaking a client. */
#ifndef NIGHTSHIFT_MCP_TOOLS_H
#define NIGHTSHIFT_MCP_TOOLS_H

enum { SPEC_NONE, SPEC_DEFINED, SPEC_REFERRED };

typedef struct {
    const char *name, *title, *description;
    const char *input, *output; /* JSON Schema texts */
    int spec_args, read_only;
    int (*run)(call_t *c); /* 0 = done (c->out), 1 = a wait to start */
} mcp_tool_t;

#define SCOPE_ARGS                                                                                 \
    "\"dataset\":{\"type\":\"string\",\"description\":\"the dataset (default: the latest "         \
    "result's)\"},\"budget\":{\"type\":\"string\",\"description\":\"time:SECONDS, "                \
    "tokens:N or flops:N (default: the latest result's)\"},\"eval_tokens\":{\"type\":\"integer\"," \
    "\"minimum\":0,\"description\":\"the evaluation's token count (default: the latest "           \
    "result's)\"}"
#define OBJ(props) "{\"type\":\"object\",\"properties\":{" props "}}"
#define ID_ARG(key, what)                                                                          \
    "\"" key "\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"" what "\"}"
#define ERROR_OUT   "\"error\":{\"type\":\"object\",\"description\":\"code and message on failure\"}"
#define T(type)     "{\"type\":" type "}"
#define NUM_OR_NULL T("[\"number\",\"null\"]")
#define INT_OR_NULL T("[\"integer\",\"null\"]")
#define STR_OR_NULL T("[\"string\",\"null\"]")
/* The keys of a scope as the API answers it. */
#define SCOPE_OUT                                                                                  \
    "\"dataset\":" STR_OR_NULL ",\"budget_kind\":" STR_OR_NULL ",\"budget\":" NUM_OR_NULL          \
    ",\"eval_tokens\":" INT_OR_NULL ",\"scope_from\":" STR_OR_NULL                                 \
    ",\"scopes\":{\"type\":\"array\",\"description\":\"every scope with results: its runs and "    \
    "best\",\"items\":{\"type\":\"object\"}}"
#define SPEC_REF "{\"$ref\":\"#/$defs/spec\"}"

static const mcp_tool_t mcp_tools[] = {
    {"submit", "Submit experiments",
     "Queue one experiment spec (spec) or several (specs), each run `repeats` times with seeds "
     "seed, seed+1, ... Every spec is validated first: one invalid spec queues nothing. A spec "
     "the daemon refuses comes back as an error result with its code: invalid_spec (the field "
     "and why), does_not_fit (the memory it needs and the limit: make the model or batch "
     "smaller). A spec identical to a queued, running or finished one (same configuration and "
     "seed) is not queued again (duplicate: true, its id returned) unless force is true. Check "
     "a large model with cost first; then wait for the ids.",
     "{\"type\":\"object\",\"properties\":{\"spec\":{\"$ref\":\"#/$defs/spec\",\"description\":"
     "\"one experiment spec (fields left out take their defaults)\"},\"specs\":{\"type\":"
     "\"array\",\"minItems\":1,\"maxItems\":1000,\"items\":" SPEC_REF ",\"description\":"
     "\"several specs, queued together or not at all\"},\"repeats\":{\"type\":\"integer\","
     "\"minimum\":1,\"maximum\":100,\"default\":1,\"description\":\"runs of each spec, with "
     "consecutive seeds\"},\"force\":{\"type\":\"boolean\",\"default\":false,\"description\":"
     "\"queue even a duplicate\"}}}",
     OBJ("\"experiments\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":"
         "{\"id\":{\"type\":\"integer\"},\"status\":{\"type\":\"string\"},\"duplicate\":"
         "{\"type\":\"boolean\"}}}}," ERROR_OUT),
     SPEC_DEFINED, 0, tool_submit},
    {"cost", "Estimate a spec",
     "Parameters, training FLOPs per token and the memory one run of this spec needs, and "
     "whether the daemon would queue it (fits; refusal: the does_not_fit code and numbers a "
     "submission would get). Nothing is queued.",
     "{\"type\":\"object\",\"properties\":{\"spec\":{\"type\":\"object\",\"description\":"
     "\"a spec as submit takes it (its schema: submit's $defs.spec, also the resource "
     "nightshift://schema/spec)\"}},\"required\":[\"spec\"]}",
     OBJ("\"fits\":{\"type\":\"boolean\"},\"refusal\":{\"type\":[\"object\",\"null\"]},"
         "\"params\":{\"type\":\"object\"},\"flops_per_token\":{\"type\":\"number\"},"
         "\"memory_bytes\":{\"type\":\"object\"},\"limit_bytes\":{\"type\":\"number\"}"),
     SPEC_REFERRED, 1, tool_cost},
    {"status", "Daemon status",
     "The daemon's state: slots, the queue, what runs now with its live progress, the counts "
     "by status, the noise of the latest scope.",
     "{\"type\":\"object\",\"properties\":{}}",
     OBJ("\"version\":{\"type\":\"string\"},\"uptime_s\":{\"type\":\"number\"},\"queue_depth\":"
         "{\"type\":\"integer\",\"description\":\"experiments queued\"},\"running\":{\"type\":"
         "\"integer\"},\"slots\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
         "\"properties\":{\"slot\":{\"type\":\"integer\"},\"cpus\":{\"type\":\"string\"},"
         "\"threads\":{\"type\":\"integer\"},\"experiment\":{\"type\":[\"object\",\"null\"],"
         "\"description\":\"what runs in the slot: id, name\"},\"progress\":{\"type\":"
         "[\"object\",\"null\"]}}}},\"noise\":{\"type\":[\"object\",\"null\"],\"description\":"
         "\"the latest scope's seed noise, as the noise tool answers\"}," ERROR_OUT),
     SPEC_NONE, 1, tool_status},
    {"list_experiments", "List experiments",
     "Experiments, newest first by default, filtered by status and dataset; order val_bpb ranks "
     "one scope's. One page of limit rows (20 unless asked); pass next_cursor as cursor for "
     "the next page (null: no more).",
     OBJ("\"status\":{\"type\":\"string\",\"description\":\"only experiments in this "
         "status\",\"enum\":[\"queued\",\"running\",\"succeeded\","
         "\"failed\",\"crashed\",\"timeout\",\"oom\",\"diverged\",\"cancelled\",\"interrupted\","
         "\"pruned\"]},\"dataset\":{\"type\":\"string\",\"description\":\"only experiments on this "
         "dataset\"},\"order\":{\"type\":\"string\",\"description\":\"-id newest first (the "
         "default), id oldest first, val_bpb best first within one scope (with dataset), created, "
         "queue (the order they will run)\",\"enum\":[\"id\",\"-id\",\"val_bpb\",\"created\","
         "\"queue\"]},\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000,"
         "\"default\":20,\"description\":\"rows in this page\"},\"cursor\":{\"type\":\"string\","
         "\"description\":\"the next_cursor of the previous page\"}"),
     OBJ("\"experiments\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":"
         "{\"id\":{\"type\":\"integer\"},\"name\":" STR_OR_NULL ",\"status\":{\"type\":"
         "\"string\"},\"val_bpb\":" NUM_OR_NULL "}}},\"next_cursor\":{\"type\":[\"string\","
         "\"null\"],\"description\":\"pass as cursor for the next page; null: this is the "
         "last\"}," ERROR_OUT),
     SPEC_NONE, 1, tool_list},
    {"get_experiment", "One experiment",
     "One experiment: its spec, status and reason, result (val_bpb, params, tokens/s, ...), "
     "metrics by step (metric_points of them, evenly spaced from the first step to the last; "
     "metrics_total counts them all), who proposed it (source, via), and the tail of its log.",
     "{\"type\":\"object\",\"properties\":{" ID_ARG(
         "id", "the experiment's id") ",\"metric_points\":{\"type\":\"integer\",\"minimum\":0,"
                                      "\"maximum\":5000,\"default\":50,\"description\":\"metrics "
                                      "rows to return, evenly spaced over the run (0: none)\"},"
                                      "\"log_tail_bytes\":{\"type\":\"integer\",\"minimum\":0,"
                                      "\"maximum\":65536,\"default\":2000,\"description\":\"bytes "
                                      "of the end of the run's log (0: none)\"}},\"required\":"
                                      "[\"id\"]}",
     OBJ("\"experiment\":{\"type\":\"object\"},\"log_tail\":{\"type\":[\"string\",\"null\"]}"
         "," ERROR_OUT),
     SPEC_NONE, 1, tool_get},
    {"cancel", "Cancel an experiment",
     "Cancel a queued experiment (at once) or a running one (its worker is stopped). A "
     "finished one cannot be cancelled (error not_cancellable).",
     "{\"type\":\"object\",\"properties\":{" ID_ARG(
         "id", "the experiment's id") "},\"required\":[\"id\"]}",
     OBJ("\"id\":{\"type\":\"integer\"},\"status\":{\"type\":\"string\"}," ERROR_OUT), SPEC_NONE, 0,
     tool_cancel},
    {"leaderboard", "Leaderboard of a scope",
     "One row per configuration of one scope (dataset, budget, evaluation), best mean val_bpb "
     "first, with its seeds' mean and sd. val_bpb compares only within a scope.",
     OBJ(SCOPE_ARGS ",\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000,"
                    "\"default\":20,\"description\":\"rows (configurations)\"}"),
     OBJ("\"leaderboard\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":"
         "{\"id\":{\"type\":\"integer\"},\"name\":" STR_OR_NULL ",\"val_bpb\":{\"type\":"
         "\"number\",\"description\":\"the mean over the configuration's seeds\"},"
         "\"val_bpb_sd\":" NUM_OR_NULL ",\"n_seeds\":{\"type\":\"integer\"}}}}," SCOPE_OUT
         "," ERROR_OUT),
     SPEC_NONE, 1, tool_leaderboard},
    {"best", "Best of a scope",
     "The best succeeded experiment of a scope with its spec, ready to vary and resubmit.",
     OBJ(SCOPE_ARGS),
     OBJ("\"best\":{\"type\":[\"object\",\"null\"],\"description\":\"the experiment: id, "
         "spec, result\"}," SCOPE_OUT "," ERROR_OUT),
     SPEC_NONE, 1, tool_best},
    {"noise", "Seed noise of a scope",
     "The pooled seed-to-seed standard deviation of val_bpb in a scope, from configurations "
     "run with several seeds. Adopt a variant only when it beats the best by more than this.",
     OBJ(SCOPE_ARGS),
     OBJ("\"sd\":{\"type\":[\"number\",\"null\"],\"description\":\"the pooled seed-to-seed "
         "standard deviation of val_bpb (null: no configuration has two seeds)\"},"
         "\"configurations\":{\"type\":\"integer\"},\"runs\":{\"type\":\"integer\"},\"df\":"
         "{\"type\":\"integer\",\"description\":\"degrees of freedom\"}," SCOPE_OUT "," ERROR_OUT),
     SPEC_NONE, 1, tool_noise},
    {"diff", "Compare two experiments",
     "The spec fields in which experiment b differs from a, and their val_bpb and its change "
     "(b - a; negative is better).",
     "{\"type\":\"object\",\"properties\":{" ID_ARG("a", "the first experiment") "," ID_ARG(
         "b", "the second experiment") "},\"required\":[\"a\",\"b\"]}",
     OBJ("\"differences\":{\"type\":\"array\"},\"a\":{\"type\":\"object\"},\"b\":{\"type\":"
         "\"object\"},\"val_bpb_delta\":{\"type\":[\"number\",\"null\"]}," ERROR_OUT),
     SPEC_NONE, 1, tool_diff},
    {"wait", "Wait for experiments",
     "Wait until every listed experiment has finished (any final status), with progress "
     "notifications while they train; returns each one's status, val_bpb and reason. One call "
     "lasts at most 45 s (within any client's request timeout): when the time runs out first, "
     "timed_out is true and pending lists what still runs; call wait again with those ids to "
     "continue.",
     "{\"type\":\"object\",\"properties\":{\"ids\":{\"type\":\"array\",\"minItems\":1,"
     "\"maxItems\":64,\"items\":{\"type\":\"integer\",\"minimum\":1},\"description\":"
     "\"the experiments to wait for\"},\"timeout_s\":{\"type\":\"number\",\"minimum\":0,"
     "\"maximum\":3600,\"default\":45,\"description\":\"seconds this call waits at most; "
     "more than 45 counts as 45\"}},\"required\":[\"ids\"]}",
     OBJ("\"experiments\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":"
         "{\"id\":{\"type\":\"integer\"},\"status\":{\"type\":\"string\"},\"val_bpb\":{\"type\":"
         "[\"number\",\"null\"]},\"reason\":{\"type\":[\"string\",\"null\"]}}}},\"timed_out\":"
         "{\"type\":\"boolean\"},\"pending\":{\"type\":\"array\",\"items\":{\"type\":"
         "\"integer\"},\"description\":\"ids still queued or running: wait for them again\"},"
         "\"message\":{\"type\":\"string\"}," ERROR_OUT),
     SPEC_NONE, 1, tool_wait},
    {"datasets", "Datasets", "The prepared datasets: name, vocabulary size, tokens per split.",
     "{\"type\":\"object\",\"properties\":{}}",
     OBJ("\"datasets\":{\"type\":\"array\",\"items\":{\"type\":\"object\"}}," ERROR_OUT), SPEC_NONE,
     1, tool_datasets},
};

#define N_TOOLS (sizeof mcp_tools / sizeof mcp_tools[0])

#endif

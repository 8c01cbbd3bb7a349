/* mcp_tools.h - the MCP server's tools as a table: name, what an LLM reads
 * (title, description, the input and output JSON Schemas), and the handler.
 * Included once, by mcp.c, where the handlers are. A tool that takes specs
 * (spec_args) gets the spec table's schema (engine/spec.c) in place of its
 * "spec" property and of its "specs" items, so a spec field appears here
 * without an edit. */
#ifndef NIGHTSHIFT_MCP_TOOLS_H
#define NIGHTSHIFT_MCP_TOOLS_H

typedef struct {
    const char *name, *title, *description;
    const char *input, *output; /* JSON Schema texts */
    int spec_args, read_only;
    int (*run)(call_t *c); /* 0 = done (c->out), 1 = a wait to start */
} mcp_tool_t;

#define SCOPE_ARGS                                                                                 \
    "\"dataset\":{\"type\":\"string\",\"description\":\"the dataset (default: the latest "         \
    "result's)\"},\"budget\":{\"type\":\"string\",\"description\":\"time:SECONDS or "              \
    "tokens:N (default: the latest result's)\"},\"eval_tokens\":{\"type\":\"integer\","            \
    "\"minimum\":0,\"description\":\"the evaluation's token count (default: the latest "           \
    "result's)\"}"
#define OBJ(props) "{\"type\":\"object\",\"properties\":{" props "}}"
#define ID_ARG(key, what)                                                                          \
    "\"" key "\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"" what "\"}"
#define ERROR_OUT "\"error\":{\"type\":\"object\",\"description\":\"code and message on failure\"}"

static const mcp_tool_t mcp_tools[] = {
    {"submit", "Submit experiments",
     "Queue one experiment spec (spec) or several (specs), each run `repeats` times with seeds "
     "seed, seed+1, ... Every spec is validated first: one invalid spec queues nothing. A spec "
     "the daemon refuses comes back as an error result with its code: invalid_spec (the field "
     "and why), does_not_fit (the memory it needs and the limit: make the model or batch "
     "smaller). A spec identical to a queued, running or finished one (same configuration and "
     "seed) is not queued again (duplicate: true, its id returned) unless force is true. Check "
     "a large model with cost first; then wait for the ids.",
     "{\"type\":\"object\",\"properties\":{\"spec\":{},\"specs\":{\"type\":\"array\","
     "\"minItems\":1,\"maxItems\":1000,\"items\":{}},\"repeats\":{\"type\":\"integer\","
     "\"minimum\":1,\"maximum\":100,\"default\":1,\"description\":\"runs of each spec, with "
     "consecutive seeds\"},\"force\":{\"type\":\"boolean\",\"default\":false,\"description\":"
     "\"queue even a duplicate\"}}}",
     OBJ("\"experiments\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":"
         "{\"id\":{\"type\":\"integer\"},\"status\":{\"type\":\"string\"},\"duplicate\":"
         "{\"type\":\"boolean\"}}}}," ERROR_OUT),
     1, 0, tool_submit},
    {"cost", "Estimate a spec",
     "Parameters, training FLOPs per token and the memory one run of this spec needs, and "
     "whether the daemon would queue it (fits; refusal: the does_not_fit code and numbers a "
     "submission would get). Nothing is queued.",
     "{\"type\":\"object\",\"properties\":{\"spec\":{}},\"required\":[\"spec\"]}",
     OBJ("\"fits\":{\"type\":\"boolean\"},\"refusal\":{\"type\":[\"object\",\"null\"]},"
         "\"params\":{\"type\":\"object\"},\"flops_per_token\":{\"type\":\"number\"},"
         "\"memory_bytes\":{\"type\":\"object\"},\"limit_bytes\":{\"type\":\"number\"}"),
     1, 1, tool_cost},
    {"status", "Daemon status",
     "The daemon's state: slots, the queue, what runs now with its live progress, the counts "
     "by status, the noise of the latest scope.",
     "{\"type\":\"object\",\"properties\":{}}", "{\"type\":\"object\"}", 0, 1, tool_status},
    {"list_experiments", "List experiments",
     "Experiments, newest first by default, filtered by status and dataset; order val_bpb ranks "
     "one scope's. Page with after (the last id seen).",
     OBJ("\"status\":{\"type\":\"string\",\"enum\":[\"queued\",\"running\",\"succeeded\","
         "\"failed\",\"crashed\",\"timeout\",\"oom\",\"diverged\",\"cancelled\",\"interrupted\","
         "\"pruned\"]},\"dataset\":{\"type\":\"string\"},\"order\":{\"type\":\"string\","
         "\"enum\":[\"id\",\"-id\",\"val_bpb\",\"created\",\"queue\"]},\"limit\":{\"type\":"
         "\"integer\",\"minimum\":1,\"maximum\":1000,\"default\":100},\"after\":{\"type\":"
         "\"integer\",\"minimum\":0}"),
     "{\"type\":\"object\"}", 0, 1, tool_list},
    {"get_experiment", "One experiment",
     "One experiment: its spec, status and reason, result (val_bpb, params, tokens/s, ...), "
     "metrics by step, who proposed it (source, via), and the tail of its log.",
     "{\"type\":\"object\",\"properties\":{" ID_ARG(
         "id", "the experiment's id") ",\"log_tail_bytes\":{\"type\":\"integer\",\"minimum\":0,"
                                      "\"maximum\":65536,"
                                      "\"default\":2000}},\"required\":[\"id\"]}",
     OBJ("\"experiment\":{\"type\":\"object\"},\"log_tail\":{\"type\":[\"string\",\"null\"]}"
         "," ERROR_OUT),
     0, 1, tool_get},
    {"cancel", "Cancel an experiment",
     "Cancel a queued experiment (at once) or a running one (its worker is stopped). A "
     "finished one cannot be cancelled (error not_cancellable).",
     "{\"type\":\"object\",\"properties\":{" ID_ARG(
         "id", "the experiment's id") "},\"required\":[\"id\"]}",
     OBJ("\"id\":{\"type\":\"integer\"},\"status\":{\"type\":\"string\"}," ERROR_OUT), 0, 0,
     tool_cancel},
    {"leaderboard", "Leaderboard of a scope",
     "One row per configuration of one scope (dataset, budget, evaluation), best mean val_bpb "
     "first, with its seeds' mean and sd. val_bpb compares only within a scope.",
     OBJ(SCOPE_ARGS ",\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000}"),
     "{\"type\":\"object\"}", 0, 1, tool_leaderboard},
    {"best", "Best of a scope",
     "The best succeeded experiment of a scope with its spec, ready to vary and resubmit.",
     OBJ(SCOPE_ARGS), "{\"type\":\"object\"}", 0, 1, tool_best},
    {"noise", "Seed noise of a scope",
     "The pooled seed-to-seed standard deviation of val_bpb in a scope, from configurations "
     "run with several seeds. Adopt a variant only when it beats the best by more than this.",
     OBJ(SCOPE_ARGS), "{\"type\":\"object\"}", 0, 1, tool_noise},
    {"diff", "Compare two experiments",
     "The spec fields in which experiment b differs from a, and their val_bpb and its change "
     "(b - a; negative is better).",
     "{\"type\":\"object\",\"properties\":{" ID_ARG("a", "the first experiment") "," ID_ARG(
         "b", "the second experiment") "},\"required\":[\"a\",\"b\"]}",
     OBJ("\"differences\":{\"type\":\"array\"},\"a\":{\"type\":\"object\"},\"b\":{\"type\":"
         "\"object\"},\"val_bpb_delta\":{\"type\":[\"number\",\"null\"]}," ERROR_OUT),
     0, 1, tool_diff},
    {"wait", "Wait for experiments",
     "Wait until every listed experiment has finished (any final status), at most timeout_s "
     "seconds, with progress notifications while they train; returns each one's status, "
     "val_bpb and reason, and timed_out when the time ran out first (wait again).",
     "{\"type\":\"object\",\"properties\":{\"ids\":{\"type\":\"array\",\"minItems\":1,"
     "\"maxItems\":64,\"items\":{\"type\":\"integer\",\"minimum\":1}},\"timeout_s\":{\"type\":"
     "\"number\",\"minimum\":0,\"maximum\":3600,\"default\":600}},\"required\":[\"ids\"]}",
     OBJ("\"experiments\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":"
         "{\"id\":{\"type\":\"integer\"},\"status\":{\"type\":\"string\"},\"val_bpb\":{\"type\":"
         "[\"number\",\"null\"]},\"reason\":{\"type\":[\"string\",\"null\"]}}}},\"timed_out\":"
         "{\"type\":\"boolean\"}," ERROR_OUT),
     0, 1, tool_wait},
    {"datasets", "Datasets", "The prepared datasets: name, vocabulary size, tokens per split.",
     "{\"type\":\"object\",\"properties\":{}}",
     OBJ("\"datasets\":{\"type\":\"array\",\"items\":{\"type\":\"object\"}}"), 0, 1, tool_datasets},
};

#define N_TOOLS (sizeof mcp_tools / sizeof mcp_tools[0])

#endif

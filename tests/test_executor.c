/* test_executor.c - what the executors share (daemon/exec/executor.c): the
 * worker protocol's verdict on an ending, as a table of exit codes, signals,
 * result lines and OOM kills, and the reading of progress lines. The local
 * worker and the Slurm executor are tested end to end in test_worker.c and
 * test_slurm.c. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <signal.h>
#include <string.h>

#include "daemon/exec/executor.h"
#include "engine/protocol.h"

TestSuite(executor, .timeout = 10);

Test(executor, the_protocol_classifies_every_ending) {
    static const struct {
        int code, sig;
        const char *result; /* the result line, or NULL */
        int oom_killed, memory_mb;
        const char *tail;
        executor_status status;
        const char *reason;
    } cases[] = {
        {PROTO_EXIT_OK, 0, "{\"event\":\"result\",\"status\":\"succeeded\"}", 0, 0, "",
         EXECUTOR_SUCCEEDED, ""},
        {PROTO_EXIT_OK, 0, NULL, 0, 0, "noise", EXECUTOR_FAILED, "exit 0 without a result line"},
        {PROTO_EXIT_OK, 0, "{\"event\":\"result\",\"status\":\"failed\"}", 0, 0, "",
         EXECUTOR_FAILED, "exit 0 but the result status is failed"},
        {PROTO_EXIT_OK, 0, "{\"event\":\"result\"}", 0, 0, "", EXECUTOR_FAILED,
         "exit 0 but the result status is missing"},
        {PROTO_EXIT_FAILED, 0, NULL, 0, 0, "train: no dataset", EXECUTOR_FAILED,
         "exit 1: train: no dataset"},
        {PROTO_EXIT_FAILED, 0, "{\"event\":\"result\",\"status\":\"failed\",\"reason\":\"r\"}", 0,
         0, "", EXECUTOR_FAILED, "exit 1: r"},
        {127, 0, NULL, 0, 0, "", EXECUTOR_FAILED, "exit 127 (no error output)"},
        {PROTO_EXIT_DIVERGED, 0,
         "{\"event\":\"result\",\"status\":\"diverged\",\"reason\":\"diverged: loss nan\"}", 0, 0,
         "tail", EXECUTOR_DIVERGED, "diverged: loss nan"},
        {PROTO_EXIT_DIVERGED, 0, NULL, 0, 0, "tail", EXECUTOR_DIVERGED, "tail"},
        {PROTO_EXIT_DIVERGED, 0, NULL, 0, 0, "", EXECUTOR_DIVERGED, "exit 3 (loss diverged)"},
        {PROTO_EXIT_OOM, 0, NULL, 0, 256, "malloc failed", EXECUTOR_OOM,
         "out of memory (limit 256 MiB): malloc failed"},
        {PROTO_EXIT_OOM, 0, NULL, 0, 0, "", EXECUTOR_OOM, "out of memory (no memory limit set)"},
        /* killed: what the worker said, or the kernel's count, never the tail */
        {-1, SIGABRT, "{\"event\":\"result\",\"status\":\"oom\",\"reason\":\"at step 3\"}", 0, 64,
         "", EXECUTOR_OOM, "out of memory (limit 64 MiB); killed by SIGABRT: at step 3"},
        {-1, SIGKILL, NULL, 1, 64, "out of memory", EXECUTOR_OOM,
         "out of memory (limit 64 MiB); killed by SIGKILL from the kernel's OOM killer"},
        {-1, SIGSEGV, NULL, 1, 0, "out of memory", EXECUTOR_CRASHED,
         "killed by SIGSEGV: out of memory"},
        {-1, SIGKILL, NULL, 0, 0, "", EXECUTOR_CRASHED, "killed by SIGKILL"},
        {-1, 77, NULL, 0, 0, "", EXECUTOR_CRASHED, "killed by signal 77"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *result = cases[i].result ? cJSON_Parse(cases[i].result) : NULL;
        executor_facts_t f = {.exit_code = cases[i].code,
                              .term_signal = cases[i].sig,
                              .result = result,
                              .oom_killed = cases[i].oom_killed,
                              .memory_mb = cases[i].memory_mb,
                              .tail = cases[i].tail};
        executor_exit_t ex;
        memset(&ex, 0, sizeof ex);
        snprintf(ex.reason, sizeof ex.reason, "stale");
        executor_classify(&f, &ex);
        cr_expect_eq(ex.status, cases[i].status, "case %zu: %s, want %s", i,
                     executor_status_name(ex.status), executor_status_name(cases[i].status));
        cr_expect_str_eq(ex.reason, cases[i].reason, "case %zu", i);
        cJSON_Delete(result);
    }
}

static int lines_seen;

static void count_line(const cJSON *line, void *user) {
    (void)line;
    (void)user;
    lines_seen++;
}

Test(executor, a_progress_line_is_one_json_object_and_the_last_result_is_kept) {
    executor_callbacks_t cb = {.on_progress = count_line};
    cJSON *result = NULL;
    static const char *const good[] = {"{\"event\":\"step\",\"step\":1}",
                                       "{\"event\":\"result\",\"status\":\"failed\"}  \r",
                                       "{\"event\":\"result\",\"status\":\"succeeded\"}", "   "};
    static const char *const bad[] = {"not json", "[1,2]", "{\"event\":\"step\"} trailing",
                                      "{\"event\":"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        cr_expect_eq(executor_progress_line(good[i], strlen(good[i]), &cb, &result), 0, "%s",
                     good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_eq(executor_progress_line(bad[i], strlen(bad[i]), &cb, &result), -1, "%s",
                     bad[i]);
    cr_expect_eq(lines_seen, 3, "the blank line is neither progress nor garbage");
    cr_assert_not_null(result);
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(result, PROTO_KEY_STATUS)),
                     PROTO_SUCCEEDED);
    cJSON_Delete(result);
}

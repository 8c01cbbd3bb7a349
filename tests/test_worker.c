/* test_worker.c - the worker supervisor on a real libuv loop, driving the
 * misbehaving stand-in (tests/bad_worker.c, $NIGHTSHIFT_BAD_WORKER) through
 * the exec shim of the built binary ($NIGHTSHIFT_BIN exec-limited): every
 * ending's status and reason, the log and its cap, progress lines and
 * garbage, deadlines and kills, memory and CPU limits, the environment, and
 * that every handle is closed (uv_loop_close succeeds) after each run. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "tests/testutil.h"
#include "daemon/exec/exec.h"
#include "daemon/exec/worker.h"

static char *log_path; /* tu_dir()/train.log */
static const char *shim, *bad;

static void setup(void) {
    shim = tu_bin();
    bad = tu_bad_worker();
    tu_dir_init();
    log_path = tu_path("%s/train.log", tu_dir());
}

static void teardown(void) {
    free(log_path);
    tu_dir_fini();
}

TestSuite(worker, .init = setup, .fini = teardown, .timeout = 30);

/* ------------------------------------------------------------ harness */

/* What one run saw. events and result are owned; release with run_free. */
typedef struct {
    worker_t *w; /* the run's worker, once started */
    int exits;
    executor_exit_t ex; /* ex.result is cleared: see result */
    cJSON *result;      /* copy of the exit's result line, or NULL */
    cJSON *events;      /* copies of every progress line, in order */
    int pid;
    uint64_t t_start, t_exit; /* uv_hrtime */
    int stop_on_start;        /* worker_stop(stop_why) when {"event":"start"} arrives */
    executor_status stop_why;
    /* When set, the loop runs only once wait_ready(pid) is true (polled,
     * at most 20 s); ready_s is how long after the start that was. */
    int (*wait_ready)(int pid);
    double ready_s;
} run_t;

static void on_progress(const cJSON *line, void *user) {
    run_t *r = user;
    worker_t *w = r->w;
    cr_assert_eq(r->exits, 0, "progress after the exit");
    cJSON_AddItemToArray(r->events, cJSON_Duplicate(line, 1));
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(line, "event");
    if (r->stop_on_start && cJSON_IsString(ev) && !strcmp(ev->valuestring, "start")) {
        r->stop_on_start = 0;
        worker_stop(w, r->stop_why);
        /* A second request must not change the reason. */
        worker_stop(w,
                    r->stop_why == EXECUTOR_CANCELLED ? EXECUTOR_INTERRUPTED : EXECUTOR_CANCELLED);
    }
}

static void on_exit_cb(const executor_exit_t *ex, void *user) {
    run_t *r = user;
    worker_t *w = r->w;
    r->exits++;
    r->t_exit = uv_hrtime();
    r->ex = *ex;
    r->ex.result = NULL;
    r->result = ex->result ? cJSON_Duplicate(ex->result, 1) : NULL;
    cr_expect_eq(worker_pid(w), r->pid);
    worker_stop(w, EXECUTOR_CANCELLED); /* too late: must be a no-op */
}

/* Run bad-worker MODE under o (shim, argv and log filled in here; a zero
 * grace becomes 0.5 s) on a fresh loop until the worker is gone. */
static void run_mode(run_t *r, const char *mode, worker_opts_t *o) {
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    char *argv[] = {(char *)bad, (char *)mode, NULL};
    o->shim = shim;
    if (!o->argv) o->argv = argv;
    if (!o->log_path) o->log_path = log_path;
    if (o->kill_grace_s == 0) o->kill_grace_s = 0.5;
    r->events = cJSON_CreateArray();
    executor_callbacks_t cb = {.on_progress = on_progress, .on_exit = on_exit_cb, .user = r};
    char err[256] = "";
    r->t_start = uv_hrtime();
    int rc = worker_start(&loop, o, &cb, &r->w, err, sizeof err);
    cr_assert_eq(rc, 0, "worker_start: %s", err);
    r->pid = worker_pid(r->w);
    cr_assert_gt(r->pid, 0);
    for (double t0 = tu_now(); r->wait_ready && !r->wait_ready(r->pid); usleep(2000))
        cr_assert(tu_now() - t0 < 20, "the worker was not ready within 20 s");
    if (r->wait_ready) r->ready_s = (double)(uv_hrtime() - r->t_start) / 1e9;
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(r->exits, 1, "on_exit ran %d times", r->exits);
    cr_assert_eq(uv_loop_close(&loop), 0, "the worker left handles open");
}

static void run_free(run_t *r) {
    cJSON_Delete(r->events);
    cJSON_Delete(r->result);
}

static double elapsed(const run_t *r) {
    return (double)(r->t_exit - r->t_start) / 1e9;
}

/* Whether the log (binary-safe) contains s. */
static int log_has(const char *s) {
    size_t n;
    char *buf = tu_read_all(log_path, &n);
    int found = memmem(buf, n, s, strlen(s)) != NULL;
    free(buf);
    return found;
}

/* The first progress line with this event, or NULL. */
static const cJSON *find_event(const run_t *r, const char *event) {
    const cJSON *e;
    cJSON_ArrayForEach(e, r->events) {
        const cJSON *ev = cJSON_GetObjectItemCaseSensitive(e, "event");
        if (cJSON_IsString(ev) && !strcmp(ev->valuestring, event)) return e;
    }
    return NULL;
}

static void expect_status(const run_t *r, executor_status want) {
    cr_expect_eq(r->ex.status, want, "status %s, want %s (reason: %s)",
                 executor_status_name(r->ex.status), executor_status_name(want), r->ex.reason);
}

/* Whether pid is gone (dead or a zombie) within seconds. */
static int wait_gone(int pid, double seconds) {
    for (int i = 0; i < (int)(seconds * 100); i++) {
        if (tu_process_gone(pid)) return 1;
        usleep(10000);
    }
    return tu_process_gone(pid);
}

/* --------------------------------------------------------------- endings */

Test(worker, status_names) {
    static const char *want[] = {"succeeded", "failed",   "crashed",   "timeout",
                                 "oom",       "diverged", "cancelled", "interrupted"};
    for (int s = EXECUTOR_SUCCEEDED; s <= EXECUTOR_INTERRUPTED; s++)
        cr_expect_str_eq(executor_status_name((executor_status)s), want[s]);
}

Test(worker, ok) {
    run_t r = {0};
    worker_opts_t o = {0};
    run_mode(&r, "ok", &o);
    expect_status(&r, EXECUTOR_SUCCEEDED);
    cr_expect_str_eq(r.ex.reason, "");
    cr_expect_eq(r.ex.exit_code, 0);
    cr_expect_eq(r.ex.term_signal, 0);
    cr_expect_eq(r.ex.garbage_lines, 0);
    cr_expect(r.ex.wall_seconds > 0 && r.ex.wall_seconds < 10);
    cr_assert_not_null(r.result);
    cr_expect_float_eq(cJSON_GetObjectItem(r.result, "val_bpb")->valuedouble, 1.2345, 1e-9);
    cr_expect_eq(cJSON_GetArraySize(r.events), 4, "start, two steps and the result");
    const cJSON *step = cJSON_GetArrayItem(r.events, 2);
    cr_expect_eq(cJSON_GetObjectItem(step, "step")->valueint, 2);
    cr_expect(log_has("val_bpb:          1.234500\n"), "stdout in the log");
    cr_expect(log_has("step 1 loss 4.5\n"), "stderr in the log");
    run_free(&r);
}

Test(worker, log_is_appended) {
    tu_write(log_path, "an earlier attempt\n");
    run_t r = {0};
    worker_opts_t o = {0};
    run_mode(&r, "ok", &o);
    expect_status(&r, EXECUTOR_SUCCEEDED);
    size_t n;
    char *buf = tu_read_all(log_path, &n);
    cr_expect(!strncmp(buf, "an earlier attempt\n", 19), "the log was truncated: %.40s", buf);
    cr_expect(memmem(buf, n, "---\n", 4) != NULL);
    free(buf);
    run_free(&r);
}

Test(worker, fail_names_the_stderr_tail) {
    run_t r = {0};
    worker_opts_t o = {0};
    run_mode(&r, "fail", &o);
    expect_status(&r, EXECUTOR_FAILED);
    cr_expect_eq(r.ex.exit_code, 1);
    cr_expect_str_eq(r.ex.reason, "exit 1: bad-worker: reading the dataset | "
                                  "bad-worker: something broke: the disk is on fire");
    run_free(&r);
}

Test(worker, fail_reason_is_trimmed_to_the_last_lines) {
    run_t r = {0};
    worker_opts_t o = {0};
    run_mode(&r, "fail-long", &o);
    expect_status(&r, EXECUTOR_FAILED);
    const char *want_end = " | bad-worker: fatal: the last words";
    size_t n = strlen(r.ex.reason), k = strlen(want_end);
    cr_assert_gt(n, k);
    cr_expect_str_eq(r.ex.reason + n - k, want_end, "reason: %s", r.ex.reason);
    cr_expect(!strncmp(r.ex.reason, "exit 1: bad-worker: noise line ", 31),
              "the excerpt starts on a line: %s", r.ex.reason);
    cr_expect_lt(n, 340, "reason of %zu bytes", n);
    cr_expect_null(strstr(r.ex.reason, "noise line 00"));
    run_free(&r);
}

Test(worker, diverged) {
    run_t r = {0};
    worker_opts_t o = {0};
    run_mode(&r, "diverge", &o);
    expect_status(&r, EXECUTOR_DIVERGED);
    cr_expect_eq(r.ex.exit_code, 3);
    cr_expect_str_eq(r.ex.reason, "diverged: loss nan at step 2");
    cr_assert_not_null(r.result);
    cr_expect_str_eq(cJSON_GetObjectItem(r.result, "status")->valuestring, "diverged");
    run_free(&r);
}

Test(worker, crash_names_the_signal) {
    run_t r = {0};
    worker_opts_t o = {0};
    run_mode(&r, "crash", &o);
    expect_status(&r, EXECUTOR_CRASHED);
    cr_expect_str_eq(r.ex.reason, "killed by SIGSEGV");
    cr_expect_eq(r.ex.exit_code, -1);
    cr_expect_eq(r.ex.term_signal, SIGSEGV);
    cr_expect_not_null(find_event(&r, "start"), "progress before the crash is kept");
    run_free(&r);
}

Test(worker, abort_quotes_stderr) {
    run_t r = {0};
    worker_opts_t o = {0};
    run_mode(&r, "abort", &o);
    expect_status(&r, EXECUTOR_CRASHED);
    cr_expect_str_eq(r.ex.reason, "killed by SIGABRT: bad-worker: an assertion failed");
    cr_expect_eq(r.ex.term_signal, SIGABRT);
    run_free(&r);
}

Test(worker, exit0_without_result_fails) {
    run_t r = {0};
    worker_opts_t o = {0};
    run_mode(&r, "exit0-noresult", &o);
    expect_status(&r, EXECUTOR_FAILED);
    cr_expect_str_eq(r.ex.reason, "exit 0 without a result line");
    cr_expect_eq(r.ex.exit_code, 0);
    cr_expect_eq(cJSON_GetArraySize(r.events), 1);
    run_free(&r);
}

Test(worker, last_line_without_newline_counts) {
    run_t r = {0};
    worker_opts_t o = {0};
    run_mode(&r, "no-newline", &o);
    expect_status(&r, EXECUTOR_SUCCEEDED);
    cr_assert_not_null(r.result);
    cr_expect_float_eq(cJSON_GetObjectItem(r.result, "val_bpb")->valuedouble, 1.75, 1e-9);
    run_free(&r);
}

Test(worker, exec_failure_is_exit_127) {
    run_t r = {0};
    worker_opts_t o = {0};
    char *argv[] = {"/nonexistent/nightshift-worker", NULL};
    o.argv = argv;
    run_mode(&r, NULL, &o);
    expect_status(&r, EXECUTOR_FAILED);
    cr_expect_eq(r.ex.exit_code, 127);
    cr_expect_str_eq(r.ex.reason, "exit 127: exec-limited: cannot run "
                                  "'/nonexistent/nightshift-worker': No such file or directory");
    run_free(&r);
}

Test(worker, unusable_cpu_fails_with_reason) {
    run_t r = {0};
    worker_opts_t o = {.cpus = "1023"};
    run_mode(&r, "ok", &o);
    expect_status(&r, EXECUTOR_FAILED);
    cr_expect_eq(r.ex.exit_code, 1);
    cr_expect_str_eq(r.ex.reason,
                     "exit 1: exec-limited: sched_setaffinity(1023): Invalid argument");
    run_free(&r);
}

Test(worker, spawn_failure_returns_an_error) {
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    char *argv[] = {(char *)bad, "ok", NULL};
    worker_opts_t o = {.shim = "/nonexistent/nightshift", .argv = argv, .log_path = log_path};
    executor_callbacks_t cb = {.on_progress = on_progress, .on_exit = on_exit_cb};
    worker_t *w = (worker_t *)1;
    char err[256] = "";
    int rc = worker_start(&loop, &o, &cb, &w, err, sizeof err);
    cr_expect_eq(rc, UV_ENOENT, "rc %d (%s)", rc, err);
    cr_expect_null(w);
    cr_expect_str_eq(err, "spawn /nonexistent/nightshift: no such file or directory");
    uv_run(&loop, UV_RUN_DEFAULT); /* the handles close; no callback runs */
    cr_expect_eq(uv_loop_close(&loop), 0);
}

Test(worker, unwritable_log_returns_an_error) {
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    char *argv[] = {(char *)bad, "ok", NULL};
    const char *path = tu_dir_path("missing/train.log");
    worker_opts_t o = {.shim = shim, .argv = argv, .log_path = path};
    executor_callbacks_t cb = {.on_progress = on_progress, .on_exit = on_exit_cb};
    worker_t *w = NULL;
    char err[700] = "";
    cr_expect_eq(worker_start(&loop, &o, &cb, &w, err, sizeof err), -ENOENT);
    cr_expect(strstr(err, "missing/train.log: No such file or directory") != NULL, "%s", err);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_expect_eq(uv_loop_close(&loop), 0);
}

/* ------------------------------------------------------- deadlines, stops */

Test(worker, deadline_sends_sigterm) {
    run_t r = {0};
    worker_opts_t o = {.deadline_s = 0.5, .kill_grace_s = 2};
    run_mode(&r, "hang", &o);
    expect_status(&r, EXECUTOR_TIMEOUT);
    cr_expect_str_eq(r.ex.reason, "no exit within the deadline (0.5 s); killed (SIGTERM)");
    cr_expect_eq(r.ex.term_signal, SIGTERM);
    cr_expect(elapsed(&r) >= 0.45 && elapsed(&r) < 2.0, "reported after %.2f s", elapsed(&r));
    run_free(&r);
}

/* Is SIGTERM ignored by process pid (its SigIgn mask in /proc)? */
static int ignores_sigterm(int pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    unsigned long long mask = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "SigIgn: %llx", &mask) == 1) break;
    if (f) fclose(f);
    return (mask >> (SIGTERM - 1)) & 1;
}

/* The deadline sends SIGTERM, which the worker ignores, and SIGKILL after
 * the grace. The worker must be ignoring SIGTERM before the deadline sends
 * it; rather than leave a slow start (a loaded machine, a sanitizer build)
 * time for that and hope, the loop is not run until the worker's SigIgn
 * shows it: the deadline is counted from the spawn, so it may then be due
 * at once, and the grace still follows it. */
Test(worker, deadline_then_sigkill_after_grace) {
    run_t r = {.wait_ready = ignores_sigterm};
    worker_opts_t o = {.deadline_s = 0.9, .kill_grace_s = 0.5};
    run_mode(&r, "hang-ignore-term", &o);
    expect_status(&r, EXECUTOR_TIMEOUT);
    cr_expect_str_eq(r.ex.reason,
                     "no exit within the deadline (0.9 s); killed (SIGKILL after the 0.5 s grace)");
    cr_expect_eq(r.ex.term_signal, SIGKILL);
    double from = r.ready_s > 0.9 ? r.ready_s : 0.9;
    cr_expect(elapsed(&r) >= 1.35, "reported after %.2f s", elapsed(&r));
    cr_expect(elapsed(&r) - from < 10, "reported %.2f s after the deadline could fire",
              elapsed(&r) - from);
    run_free(&r);
}

Test(worker, stop_cancels) {
    run_t r = {.stop_on_start = 1, .stop_why = EXECUTOR_CANCELLED};
    worker_opts_t o = {.deadline_s = 20};
    run_mode(&r, "hang", &o);
    expect_status(&r, EXECUTOR_CANCELLED);
    cr_expect_str_eq(r.ex.reason, "cancelled while running; killed (SIGTERM)");
    cr_expect_lt(elapsed(&r), 3.0);
    run_free(&r);
}

Test(worker, stop_interrupts_with_sigkill_after_grace) {
    run_t r = {.stop_on_start = 1, .stop_why = EXECUTOR_INTERRUPTED};
    worker_opts_t o = {.deadline_s = 20, .kill_grace_s = 0.4};
    run_mode(&r, "hang-ignore-term", &o);
    expect_status(&r, EXECUTOR_INTERRUPTED);
    cr_expect_str_eq(r.ex.reason,
                     "interrupted by daemon shutdown; killed (SIGKILL after the 0.4 s grace)");
    cr_expect_eq(r.ex.term_signal, SIGKILL);
    cr_expect(elapsed(&r) >= 0.4 && elapsed(&r) < 3.0, "reported after %.2f s", elapsed(&r));
    run_free(&r);
}

/* ------------------------------------------------------- output abuse */

Test(worker, flood_is_capped_and_drained) {
    run_t r = {0};
    worker_opts_t o = {.max_log_bytes = 1 << 20};
    run_mode(&r, "flood", &o);
    expect_status(&r, EXECUTOR_SUCCEEDED);
    cr_assert_not_null(r.result, "the result after 100 MB of stdout was seen");
    struct stat st;
    cr_assert_eq(stat(log_path, &st), 0);
    cr_expect(st.st_size >= (1 << 20) && st.st_size < (1 << 20) + 200, "log of %lld bytes",
              (long long)st.st_size);
    cr_expect(log_has("[nightshift: log capped at 1048576 bytes; further output discarded]"));
    run_free(&r);
}

Test(worker, garbage_lines_are_counted_and_skipped) {
    run_t r = {0};
    worker_opts_t o = {.max_line_bytes = 1024};
    run_mode(&r, "garbage", &o);
    expect_status(&r, EXECUTOR_SUCCEEDED);
    cr_expect_eq(r.ex.garbage_lines, 6);
    cr_assert_eq(cJSON_GetArraySize(r.events), 3, "step 1, step 3 (split), the result");
    cr_expect_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(r.events, 0), "step")->valueint, 1);
    cr_expect_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(r.events, 1), "step")->valueint, 3);
    cr_expect_float_eq(cJSON_GetObjectItem(r.result, "val_bpb")->valuedouble, 2.5, 1e-9);
    run_free(&r);
}

Test(worker, grandchild_holding_the_pipes_is_killed) {
    run_t r = {0};
    worker_opts_t o = {0};
    run_mode(&r, "grandchild", &o);
    expect_status(&r, EXECUTOR_SUCCEEDED);
    cr_expect_lt(elapsed(&r), 1.9, "waited %.2f s for the grandchild", elapsed(&r));
    const cJSON *g = find_event(&r, "grandchild");
    cr_assert_not_null(g);
    cr_expect_not_null(find_event(&r, "late-progress"),
                       "the exit was reported before the grandchild's pipes were drained");
    int gpid = cJSON_GetObjectItem(g, "pid")->valueint;
    /* It would wake up and write 2 s after the start: gone well before. */
    cr_expect(wait_gone(gpid, 0.5), "grandchild %d still running", gpid);
    usleep(1500000); /* past the grandchild's own wake-up */
    cr_expect(!log_has("late output"), "the grandchild outlived the worker");
    run_free(&r);
}

Test(worker, two_workers_on_one_loop) {
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    char *argv_a[] = {(char *)bad, "flood", NULL}, *argv_b[] = {(char *)bad, "crash", NULL};
    const char *log_b = tu_dir_path("b.log");
    worker_opts_t oa = {
        .shim = shim, .argv = argv_a, .log_path = log_path, .max_log_bytes = 1 << 16};
    worker_opts_t ob = {.shim = shim, .argv = argv_b, .log_path = log_b};
    run_t ra = {.events = cJSON_CreateArray()}, rb = {.events = cJSON_CreateArray()};
    executor_callbacks_t ca = {.on_progress = on_progress, .on_exit = on_exit_cb, .user = &ra};
    executor_callbacks_t cb = {.on_progress = on_progress, .on_exit = on_exit_cb, .user = &rb};
    char err[256];
    cr_assert_eq(worker_start(&loop, &oa, &ca, &ra.w, err, sizeof err), 0, "%s", err);
    cr_assert_eq(worker_start(&loop, &ob, &cb, &rb.w, err, sizeof err), 0, "%s", err);
    ra.pid = worker_pid(ra.w);
    rb.pid = worker_pid(rb.w);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_expect_eq(ra.exits, 1);
    cr_expect_eq(rb.exits, 1);
    expect_status(&ra, EXECUTOR_SUCCEEDED);
    expect_status(&rb, EXECUTOR_CRASHED);
    cr_expect_eq(uv_loop_close(&loop), 0);
    run_free(&ra);
    run_free(&rb);
}

/* ------------------------------------------------------------- limits */

Test(worker, memory_limit_exit4_is_oom) {
    run_t r = {0};
    worker_opts_t o = {.memory_mb = 128};
    run_mode(&r, "oom", &o);
    expect_status(&r, EXECUTOR_OOM);
    cr_expect_eq(r.ex.exit_code, 4);
    cr_expect_str_eq(r.ex.reason, "out of memory (limit 128 MiB): bad-worker: out of memory");
    run_free(&r);
}

Test(worker, memory_limit_signal_is_oom) {
    run_t r = {0};
    worker_opts_t o = {.memory_mb = 128};
    run_mode(&r, "oom-signal", &o);
    expect_status(&r, EXECUTOR_OOM);
    cr_expect_eq(r.ex.term_signal, SIGABRT);
    cr_expect_str_eq(r.ex.reason, "out of memory (limit 128 MiB); killed by SIGABRT");
    run_free(&r);
}

/* Out of memory is decided from exit codes, signals, fd 3 and the kernel's
 * OOM-kill count: what stderr says never makes a run oom, nor keeps it from
 * being one. */
Test(worker, stderr_text_does_not_decide_oom) {
    static const struct {
        const char *mode;
        executor_status status;
        int exit_code, sig;
        const char *reason;
    } cases[] = {
        {"oom-text-exit1", EXECUTOR_FAILED, 1, 0, "exit 1: bad-worker: out of memory"},
        {"oom-text-abort", EXECUTOR_CRASHED, -1, SIGABRT,
         "killed by SIGABRT: bad-worker: out of memory"},
        {"oom-text-sigkill", EXECUTOR_CRASHED, -1, SIGKILL,
         "killed by SIGKILL: bad-worker: out of memory"},
        {"exit4-silent", EXECUTOR_OOM, 4, 0, "out of memory (no memory limit set)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_t r = {0};
        worker_opts_t o = {0};
        run_mode(&r, cases[i].mode, &o);
        expect_status(&r, cases[i].status);
        cr_expect_eq(r.ex.exit_code, cases[i].exit_code, "%s", cases[i].mode);
        cr_expect_eq(r.ex.term_signal, cases[i].sig, "%s", cases[i].mode);
        cr_expect_str_eq(r.ex.reason, cases[i].reason);
        run_free(&r);
    }
}

/* A SIGKILL the daemon did not send is the kernel's OOM killer when its
 * count (a stand-in for /proc/vmstat that the worker bumps) rose meanwhile,
 * and a crash when it did not. */
Test(worker, sigkill_while_the_oom_kill_count_rises_is_oom) {
    const char *counter = tu_dir_path("vmstat");
    tu_write(counter, "nr_free_pages 1000\noom_kill 7\npgfault 9\n");
    char *argv[] = {(char *)bad, "oom-killed", (char *)counter, NULL};
    run_t r = {0};
    worker_opts_t o = {.argv = argv, .memory_mb = 512, .oom_counter = counter};
    run_mode(&r, NULL, &o);
    expect_status(&r, EXECUTOR_OOM);
    cr_expect_eq(r.ex.term_signal, SIGKILL);
    cr_expect_str_eq(
        r.ex.reason,
        "out of memory (limit 512 MiB); killed by SIGKILL from the kernel's OOM killer");
    char *text = tu_read(counter);
    cr_expect_str_eq(text, "nr_free_pages 1000\noom_kill 8\npgfault 9\n");
    free(text);
    run_free(&r);

    /* The count of another file rose: this one's did not. */
    const char *other = tu_dir_path("vmstat-other");
    tu_write(other, "oom_kill 7\n");
    argv[2] = (char *)other;
    r = (run_t){0};
    o = (worker_opts_t){.argv = argv, .oom_counter = counter};
    run_mode(&r, NULL, &o);
    expect_status(&r, EXECUTOR_CRASHED);
    cr_expect_str_eq(r.ex.reason, "killed by SIGKILL");
    run_free(&r);
}

/* The CPUs this process may use, ascending; returns how many (at most max). */
static int allowed_cpus(int *cpus, int max) {
    cpu_set_t set;
    cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < max; c++)
        if (CPU_ISSET(c, &set)) cpus[n++] = c;
    return n;
}

/* Run the affinity mode pinned to list and compare with want[0..n). */
static void expect_affinity(const char *list, const int *want, int n) {
    run_t r = {0};
    worker_opts_t o = {.cpus = list};
    run_mode(&r, "affinity", &o);
    expect_status(&r, EXECUTOR_SUCCEEDED);
    const cJSON *a = find_event(&r, "affinity");
    cr_assert_not_null(a);
    const cJSON *got = cJSON_GetObjectItem(a, "cpus");
    cr_assert_eq(cJSON_GetArraySize(got), n, "--cpus %s", list);
    for (int i = 0; i < n; i++) cr_expect_eq(cJSON_GetArrayItem(got, i)->valueint, want[i]);
    run_free(&r);
}

Test(worker, cpu_affinity_is_applied) {
    int cpus[2];
    int n = allowed_cpus(cpus, 2);
    char list[64];
    snprintf(list, sizeof list, "%d", cpus[0]);
    expect_affinity(list, cpus, 1);
    if (n == 2) {
        snprintf(list, sizeof list, "%d,%d", cpus[0], cpus[1]);
        expect_affinity(list, cpus, 2);
        if (cpus[1] == cpus[0] + 1) {
            snprintf(list, sizeof list, "%d-%d", cpus[0], cpus[1]);
            expect_affinity(list, cpus, 2);
        }
    }
}

static const char *env_of(const run_t *r, const char *name) {
    const cJSON *e = find_event(r, "env");
    cr_assert_not_null(e);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, name);
    cr_assert(cJSON_IsString(v), "%s missing", name);
    return v->valuestring;
}

Test(worker, threads_set_and_openblas_env_passes_through) {
    setenv("OPENBLAS_CORETYPE", "Haswell", 1);
    setenv("OPENBLAS_L2_SIZE", "1048576", 1);
    setenv("OMP_NUM_THREADS", "7", 1);
    run_t r = {0};
    worker_opts_t o = {.threads = 3};
    run_mode(&r, "env", &o);
    expect_status(&r, EXECUTOR_SUCCEEDED);
    cr_expect_str_eq(env_of(&r, "OMP_NUM_THREADS"), "3");
    cr_expect_str_eq(env_of(&r, "OPENBLAS_NUM_THREADS"), "3");
    cr_expect_str_eq(env_of(&r, "OPENBLAS_CORETYPE"), "Haswell");
    cr_expect_str_eq(env_of(&r, "OPENBLAS_L2_SIZE"), "1048576");
    const cJSON *e = find_event(&r, "env");
    cr_expect_eq(cJSON_GetObjectItem(e, "pgid")->valueint, r.pid, "the worker leads its group");
    cr_expect_eq(cJSON_GetObjectItem(e, "pid")->valueint, r.pid, "the shim exec'd in place");
    run_free(&r);
}

Test(worker, zero_threads_leaves_the_environment) {
    setenv("OMP_NUM_THREADS", "7", 1);
    unsetenv("OPENBLAS_NUM_THREADS");
    unsetenv("OPENBLAS_CORETYPE");
    run_t r = {0};
    worker_opts_t o = {0};
    run_mode(&r, "env", &o);
    cr_expect_str_eq(env_of(&r, "OMP_NUM_THREADS"), "7");
    cr_expect_str_eq(env_of(&r, "OPENBLAS_NUM_THREADS"), "");
    cr_expect_str_eq(env_of(&r, "OPENBLAS_CORETYPE"), "");
    run_free(&r);
}

/* ------------------------------------------------------------ the shim */

static int exec_main(const char *const *args) {
    char *argv[16];
    int argc = 0;
    while (args[argc]) {
        argv[argc] = (char *)args[argc];
        argc++;
    }
    argv[argc] = NULL;
    return exec_limited_main(argc, argv);
}

Test(worker, exec_shim_rejects_bad_arguments) {
    /* Each returns 2 before changing anything about this process. */
    cr_redirect_stderr(); /* the usage messages */
    static const char *const bad_args[][8] = {
        {"exec-limited", NULL},
        {"exec-limited", "--", NULL},
        {"exec-limited", "--cpus", NULL},
        {"exec-limited", "--cpus", "", "--", "true", NULL},
        {"exec-limited", "--cpus", "3-1", "--", "true", NULL},
        {"exec-limited", "--cpus", "0,", "--", "true", NULL},
        {"exec-limited", "--cpus", "1-", "--", "true", NULL},
        {"exec-limited", "--cpus", "0,,1", "--", "true", NULL},
        {"exec-limited", "--cpus", "x", "--", "true", NULL},
        {"exec-limited", "--cpus", "99999", "--", "true", NULL},
        {"exec-limited", "--memory-mb", "0", "--", "true", NULL},
        {"exec-limited", "--memory-mb", "12x", "--", "true", NULL},
        {"exec-limited", "--memory-mb", "-5", "--", "true", NULL},
        {"exec-limited", "--parent", "0", "--", "true", NULL},
        {"exec-limited", "--bogus", "--", "true", NULL},
    };
    for (size_t i = 0; i < sizeof bad_args / sizeof bad_args[0]; i++)
        cr_expect_eq(exec_main(bad_args[i]), 2, "case %zu (%s %s)", i, bad_args[i][1],
                     bad_args[i][2] ? bad_args[i][2] : "");
}

/* The shim's parent dies: the worker dies with it (PR_SET_PDEATHSIG). */
Test(worker, worker_dies_with_its_parent) {
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t mid = fork();
    cr_assert_geq(mid, 0);
    if (mid == 0) {
        pid_t g = fork();
        if (g == 0) {
            int null = open("/dev/null", O_RDWR);
            dup2(null, 1);
            dup2(null, 3); /* not whatever the test runner keeps on fd 3 */
            execl(shim, shim, "exec-limited", "--", bad, "hang", (char *)NULL);
            _exit(127);
        }
        if (write(fds[1], &g, sizeof g) != sizeof g) _exit(1);
        usleep(300000); /* the shim has exec'd bad-worker by now */
        _exit(0);
    }
    close(fds[1]);
    pid_t g = 0;
    cr_assert_eq(read(fds[0], &g, sizeof g), (ssize_t)sizeof g);
    close(fds[0]);
    int st;
    cr_assert_eq(waitpid(mid, &st, 0), mid);
    int gone = wait_gone(g, 5.0);
    if (!gone) kill(g, SIGKILL);
    cr_expect(gone, "worker %d outlived its parent", (int)g);
}

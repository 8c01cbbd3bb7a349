/* test_newuser.c - the first night of a new user, through the real CLI
 * against a real daemon: one's own single text file prepared as a dataset,
 * a spec too large for a worker refused at submission with its numbers, the
 * memory estimate against the peak RSS a run measures, watch living through
 * a daemon restart on a pseudo-terminal, `sample ID` from another directory,
 * and `agent status`. Every wait is bounded. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/cost.h"
#include "engine/data.h"
#include "engine/spec.h"
#include "tests/testutil.h"

static char *state; /* tu_dir()/state */

static void setup(void) {
    tu_dir_init();
    state = tu_path("%s/state", tu_dir());
    cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
}

static void teardown(void) {
    free(state);
    tu_dir_fini();
    curl_global_cleanup();
}

TestSuite(newuser, .init = setup, .fini = teardown, .timeout = 120);

/* `nightshift serve --dir state --listen 127.0.0.1:PORT --memory-mb MB`;
 * port 0 picks one. */
static void daemon_start(tu_server_t *d, int port, const char *memory_mb) {
    char listen[32], *errlog = tu_path("%s/daemon.err", tu_dir());
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    char *argv[] = {(char *)tu_bin(), "serve",       "--dir",           state, "--listen",
                    listen,           "--memory-mb", (char *)memory_mb, NULL};
    tu_server_start(d, "daemon", argv, errlog, 30);
    free(errlog);
}

/* SIGTERM: it must exit 0 with a clean log; then d is released. */
static void daemon_stop(tu_server_t *d) {
    tu_server_stop(d, 30);
    tu_server_release(d);
}

/* A text of `lines` lines of pseudo-random words (enough distinct pairs for
 * a few hundred BPE merges); returns its length. */
static size_t write_book(const char *path, int lines) {
    static const char *const words[] = {"the",   "night", "shift", "model", "learns", "a",
                                        "small", "text",  "every", "hour",  "while",  "we",
                                        "sleep", "and",   "dream", "of",    "better", "loss"};
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s: %s", path, strerror(errno));
    unsigned x = 12345;
    for (int l = 0; l < lines; l++) {
        int n = 5 + l % 9;
        for (int w = 0; w < n; w++) {
            x = x * 1103515245u + 12345u;
            fprintf(f, "%s%s", w ? " " : "", words[(x >> 16) % 18]);
        }
        fputs(".\n", f);
    }
    long len = ftell(f);
    cr_assert(fclose(f) == 0);
    return (size_t)len;
}

static cJSON *read_json(const char *path) {
    char *text = tu_read(path);
    cr_assert(text, "%s cannot be read", path);
    cJSON *j = cJSON_Parse(text);
    free(text);
    cr_assert(j, "%s is not JSON", path);
    return j;
}

/* ------------------------------------------------------- one's own text */

Test(newuser, prep_splits_a_single_text_file) {
    char *book = tu_path("%s/book.txt", tu_dir());
    size_t len = write_book(book, 3000);
    /* No --dir, no --name: ./state and the file's name. */
    cr_assert_eq(chdir(tu_dir()), 0);
    tu_run_t r;
    tu_run_bin(&r, 60, "prep", "--vocab", "300", "--quiet", "book.txt", NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert(strstr(r.out, "dataset 'book' in state/datasets/book"), "%s", r.out);
    tu_run_free(&r);

    char *mpath = tu_path("%s/datasets/book/manifest.json", state);
    cJSON *m = read_json(mpath);
    const cJSON *vs = cJSON_GetObjectItem(m, "val_split");
    cr_assert_str_eq(tu_jstr(vs, "method"), "byte_fraction");
    cr_assert_float_eq(tu_jnum(vs, "fraction"), 0.1, 1e-12);
    size_t cut = (size_t)tu_jnum(vs, "cut_byte");
    char *text = tu_read(book);
    cr_assert_eq(text[cut - 1], '\n', "the cut at byte %zu is not after a line break", cut);
    /* The line break nearest 90% of the bytes: within one line of it. */
    cr_assert_lt(fabs((double)cut - 0.9 * (double)len), 200.0, "cut %zu of %zu", cut, len);
    cr_assert_eq(tu_jnum(vs, "val_text_bytes"), (double)(len - cut));
    cr_assert_eq(tu_jnum(m, "train_docs"), 1);
    cr_assert_eq(tu_jnum(m, "val_docs"), 1);
    cr_assert_gt(tu_jnum(m, "val_tokens"), 100);
    cJSON_Delete(m);

    /* Another fraction moves the cut; a text without a line break cannot be split. */
    tu_run_bin_exit(0, 60, "prep", "--vocab", "300", "--quiet", "--name", "b2", "--val-fraction",
                    "0.5", book, NULL);
    char *m2path = tu_path("%s/datasets/b2/manifest.json", state);
    m = read_json(m2path);
    cut = (size_t)tu_jnum(cJSON_GetObjectItem(m, "val_split"), "cut_byte");
    cr_assert_lt(fabs((double)cut - 0.5 * (double)len), 200.0, "cut %zu of %zu", cut, len);
    cJSON_Delete(m);
    tu_write(tu_dir_path("oneline.txt"), "a single line without any break at its end");
    tu_run_bin(&r, 60, "prep", "--vocab", "260", "oneline.txt", NULL);
    cr_assert_eq(r.exit_code, 1);
    cr_assert(strstr(r.err, "without a line break to split it at; give --val"), "%s", r.err);
    tu_run_free(&r);

    /* --help explains the defaults. */
    tu_run_bin(&r, 60, "prep", "--help", NULL);
    cr_assert_eq(r.exit_code, 0);
    cr_assert(strstr(r.out, "Default 4092"), "%s", r.out);
    cr_assert(strstr(r.out, "default state"), "%s", r.out);
    tu_run_free(&r);
    free(text);
    free(mpath);
    free(m2path);
    free(book);
}

/* ------------------------------------------------------- what fits */

#define HUGE_SPEC "{\"model\":{\"depth\":48,\"n_embd\":4096,\"n_head\":32,\"n_kv_head\":32}}"

Test(newuser, a_spec_too_large_is_refused_with_its_numbers) {
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "default");
    tu_server_t d;
    daemon_start(&d, 0, "2000");
    char *spec = tu_path("%s/huge.json", tu_dir());
    tu_write(spec, HUGE_SPEC);

    /* The numbers the daemon must give: cost's estimate for this dataset. */
    spec_t s;
    char err[SPEC_ERR_LEN];
    cr_assert_eq(spec_parse(HUGE_SPEC, strlen(HUGE_SPEC), &s, err, sizeof err), 0, "%s", err);
    data_info_t info;
    cr_assert_eq(data_info(state, "default", &info, err, sizeof err), 0, "%s", err);
    s.model.vocab_size = info.vocab_size;
    cost_mem_t mem;
    cost_memory(&s.model, s.train.batch_size, info.train_tokens + info.val_tokens,
                s.train.precision, &mem);
    spec_free(&s);
    char want[200];
    tu_run_t r;
    tu_run_bin(&r, 30, "submit", spec, "--url", d.url, NULL);
    cr_assert_eq(r.exit_code, 1, "%s", r.err);
    /* ... plus the address space the engine maps and the margin, which the
     * daemon measured and names (none in a sanitizer build) */
    double floor_mib = 0, margin_mib = 0;
    const char *fl = strstr(r.err, "`nightshift cost` (the "), *mg = strstr(r.err, "a margin of ");
    if (fl) sscanf(fl, "`nightshift cost` (the %lf MiB", &floor_mib);
    if (mg) sscanf(mg, "a margin of %lf MiB", &margin_mib);
    snprintf(want, sizeof want,
             "nightshift: does_not_fit: needs ~%.0f GB, a worker may use 2.1 GB (the daemon's "
             "limit per worker): %.1f billion parameters",
             (mem.total + (floor_mib + margin_mib) * 1048576.0) / 1e9, mem.weights / 4e9);
    cr_assert_eq(strncmp(r.err, want, strlen(want)), 0, "got:  %s\nwant: %s", r.err, want);
    cr_assert_str_eq(r.out, "");
    tu_run_free(&r);

    /* The API: 422 with its code; nothing was queued. */
    tu_reply_t rep;
    tu_http(&d, "POST", "/v1/experiments", HUGE_SPEC, strlen(HUGE_SPEC), NULL, &rep);
    cr_assert_eq(rep.status, 422, "%s", rep.body);
    cr_assert(strstr(rep.body, "\"code\":\"does_not_fit\""), "%s", rep.body);
    tu_reply_free(&rep);
    cJSON *st = tu_get_json(&d, "/v1/status");
    cr_assert_eq(tu_jnum(st, "queue_depth"), 0);
    cJSON_Delete(st);

    /* cost says the same from the dataset, without a vocab_size in the spec,
     * in the same words and units, and fails: it will not fit. */
    tu_run_bin(&r, 30, "cost", spec, "--dir", state, "--memory-mb", "2000", NULL);
    cr_assert_eq(r.exit_code, 1, "%s", r.err);
    cr_assert(strstr(r.out, "(from dataset 'default' in "), "%s", r.out);
    cr_assert(strstr(r.out, "memory needed (estimate):"), "%s", r.out);
    cr_assert(strstr(r.out, " GB\n"), "the estimate in GB, as submit says it: %s", r.out);
    /* (the run's own estimate: cost knows no daemon's floor or margin) */
    snprintf(want, sizeof want,
             "cost: does_not_fit: needs ~%.0f GB, a worker may use 2.1 GB (the daemon's limit "
             "per worker): %.1f billion parameters",
             mem.total / 1e9, mem.weights / 4e9);
    cr_assert_eq(strncmp(r.err, want, strlen(want)), 0, "got:  %s\nwant: %s", r.err, want);
    tu_run_free(&r);
    /* by default the limit serve gives one slot; with none, this machine's RAM */
    tu_run_bin(&r, 30, "cost", spec, "--dir", state, NULL);
    cr_assert_eq(r.exit_code, 1, "%s", r.err);
    cr_assert(strstr(r.err, "(the daemon's limit per worker)"), "%s", r.err);
    tu_run_free(&r);
    tu_run_bin(&r, 30, "cost", spec, "--dir", state, "--memory-mb", "0", NULL);
    cr_assert_eq(r.exit_code, 1, "%s", r.err);
    cr_assert(strstr(r.err, "(this machine's RAM)"), "%s", r.err);
    tu_run_free(&r);
    daemon_stop(&d);
    free(spec);
}

/* `cost`'s "memory needed (estimate):" (MB, decimal) in MiB, from its output. */
static double cost_estimate_mib(const char *spec) {
    tu_run_t r;
    tu_run_bin(&r, 30, "cost", spec, "--dir", state, NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    const char *p = strstr(r.out, "memory needed (estimate):");
    cr_assert(p, "%s", r.out);
    char unit[8] = "";
    double mb = 0;
    cr_assert_eq(sscanf(p + strlen("memory needed (estimate):"), "%lf %7s", &mb, unit), 2, "%s",
                 r.out);
    cr_assert_str_eq(unit, "MB", "%s", r.out);
    tu_run_free(&r);
    return mb * 1e6 / (1024.0 * 1024.0);
}

/* The estimate is of peak RSS: within 15% + 8 MiB of what a run measures
 * (the process overhead is a constant measured on one machine), the second
 * model also with bf16 products where the CPU has them (their rounded
 * operands, kept inputs and the weights' cache: 48 MB more on make bench's
 * M). Under the sanitizers RSS holds their shadow memory and means nothing
 * here. */
Test(newuser, memory_estimate_matches_measured_peak_rss) {
#if defined(__SANITIZE_ADDRESS__)
    cr_skip_test("peak RSS under AddressSanitizer includes its shadow memory");
#endif
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "default");
    static const char *const models[] = {
        "\"depth\":2,\"n_embd\":64,\"n_head\":2,\"n_kv_head\":2,\"seq_len\":64",
        "\"depth\":4,\"n_embd\":256,\"n_head\":4,\"n_kv_head\":2,\"seq_len\":128,"
        "\"mlp\":\"swiglu\",\"ve_layers\":\"all\"",
    };
    static const int batch[] = {8, 16, 16}, seq[] = {64, 128, 128};
    const int runs = tu_select_bf16(1) ? 3 : 2; /* the third: model 1 in bf16 */
    tu_select_isa_auto();
    for (int i = 0; i < runs; i++) {
        char *spec = tu_path("%s/m%d.json", tu_dir(), i);
        char *json =
            tu_path("{\"dataset\":\"default\",\"time_budget_s\":1,\"model\":{%s},"
                    "\"train\":{\"batch_size\":%d,\"total_batch_tokens\":%d,"
                    "\"precision\":\"%s\"},\"resources\":{\"threads\":1}}",
                    models[i < 2 ? i : 1], batch[i], batch[i] * seq[i], i < 2 ? "fp32" : "bf16");
        tu_write(spec, json);
        double est = cost_estimate_mib(spec);
        tu_run_t r;
        tu_run_bin(&r, 60, "train", "--dir", state, "--peak-gflops", "10", spec, NULL);
        cr_assert_eq(r.exit_code, 0, "%s", r.err);
        const char *p = strstr(r.out, "peak_rss_mb:");
        cr_assert(p, "%s", r.out);
        double rss = atof(p + strlen("peak_rss_mb:"));
        tu_run_free(&r);
        cr_assert_gt(rss, 0);
        cr_assert_leq(fabs(est - rss), 0.15 * rss + 8,
                      "model %d: estimate %.0f MiB, peak RSS %.1f MiB", i, est, rss);
        cr_log_info("model %d: estimate %.0f MiB, measured peak RSS %.1f MiB", i, est, rss);
        free(json);
        free(spec);
    }
}

/* ------------------------------------------------------- watch */

/* Read fd into buf until `what` appears at or after offset from, for at most
 * timeout_s; returns where it starts, or -1. */
static long wait_for(int fd, char *buf, size_t *len, size_t cap, size_t from, const char *what,
                     double timeout_s) {
    double deadline = tu_now() + timeout_s;
    for (;;) {
        const char *hit = *len > from ? strstr(buf + from, what) : NULL;
        if (hit) return hit - buf;
        if (tu_now() > deadline) return -1;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) > 0 && !tu_read_some(fd, buf, len, cap)) return -1;
    }
}

Test(newuser, watch_lives_through_a_daemon_restart) {
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "default");
    tu_server_t d;
    daemon_start(&d, 0, "0");
    int port = d.port;
    char url[64];
    snprintf(url, sizeof url, "%s", d.url);

    int fd = -1;
    struct winsize ws = {.ws_row = 24, .ws_col = 80};
    pid_t pid = forkpty(&fd, NULL, NULL, &ws);
    cr_assert_geq(pid, 0, "forkpty: %s", strerror(errno));
    if (pid == 0) {
        execl(tu_bin(), tu_bin(), "watch", "--interval", "0.2", "--url", url, (char *)NULL);
        _exit(127);
    }
    static char out[1 << 18];
    size_t len = 0;
    out[0] = '\0';
    long at = wait_for(fd, out, &len, sizeof out, 0, "queue: 0 queued", 20);
    cr_assert_geq(at, 0, "no first snapshot: %s", out);

    daemon_stop(&d);
    at = wait_for(fd, out, &len, sizeof out, (size_t)at, "reconnecting to http://127.0.0.1:", 20);
    cr_assert_geq(at, 0, "no reconnecting line: %s", out);
    cr_assert(waitpid(pid, NULL, WNOHANG) == 0, "watch exited when the daemon went away");

    daemon_start(&d, port, "0");
    at = wait_for(fd, out, &len, sizeof out, (size_t)at, "queue: 0 queued", 20);
    cr_assert_geq(at, 0, "watch did not come back: %s", out + (len > 2000 ? len - 2000 : 0));

    /* No line is longer than the 80-column terminal. */
    size_t col = 0;
    for (size_t i = 0; i < len; i++) {
        if (out[i] == '\n' || out[i] == '\r')
            col = 0;
        else if ((out[i] & 0xc0) != 0x80)
            col++;
        cr_assert_leq(col, 80 + 8, "a line wider than the terminal"); /* + escape bytes */
    }

    kill(pid, SIGINT);
    int status = 0, done = 0;
    for (double t = tu_now() + 10; !done && tu_now() < t;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 50) > 0) tu_read_some(fd, out, &len, sizeof out);
        done = waitpid(pid, &status, WNOHANG) == pid;
    }
    if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    close(fd);
    cr_assert(done && WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    daemon_stop(&d);
}

/* ------------------------------------------------------- a result */

Test(newuser, sample_id_from_another_directory) {
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "default");
    tu_server_t d;
    daemon_start(&d, 0, "0");
    char *spec = tu_path("%s/small.json", tu_dir());
    tu_write(spec, "{\"name\":\"first\",\"time_budget_s\":1,\"model\":{\"depth\":2,\"n_embd\":64,"
                   "\"n_head\":2,\"n_kv_head\":2,\"seq_len\":64},"
                   "\"train\":{\"batch_size\":4,\"total_batch_tokens\":256},"
                   "\"resources\":{\"threads\":1,\"peak_gflops\":10}}");
    tu_run_t r;
    tu_run_bin_out("1 queued\n", 30, "submit", spec, "--url", d.url, NULL);
    const char *status = NULL;
    cJSON *e = NULL;
    for (double t = tu_now() + 90; tu_now() < t; tu_sleep_ms(200)) {
        cJSON_Delete(e);
        e = tu_get_json(&d, "/v1/experiments/1");
        status = tu_jstr(e, "status");
        if (status && strcmp(status, "queued") && strcmp(status, "running")) break;
    }
    cr_assert(status && !strcmp(status, "succeeded"), "experiment 1: %s",
              status ? status : "no status");
    cJSON_Delete(e);

    /* From another directory: the daemon's URL, or its state directory. */
    cr_assert_eq(chdir("/"), 0);
    tu_run_bin(&r, 60, "sample", "1", "--url", d.url, "--tokens", "8", "--prompt", "the cat", NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert_eq(strncmp(r.out, "the cat", 7), 0, "%s", r.out);
    tu_run_free(&r);
    tu_run_bin_exit(0, 60, "sample", "1", "--dir", state, "--tokens", "8", NULL);
    tu_run_bin(&r, 60, "sample", "1", "--tokens", "8", NULL);
    cr_assert_eq(r.exit_code, 1);
    cr_assert(strstr(r.err, "no checkpoint for experiment 1 in state/runs"), "%s", r.err);
    cr_assert(strstr(r.err, "give --dir with the daemon's state directory, or --url"), "%s", r.err);
    tu_run_free(&r);

    /* show and ls say what the run used and how it did. */
    tu_run_bin(&r, 30, "show", "1", "--url", d.url, NULL);
    cr_assert(strstr(r.out, "vocab_size 304 (the dataset's)"), "%s", r.out);
    tu_run_free(&r);
    tu_run_bin(&r, 30, "ls", "--url", d.url, NULL);
    cr_assert(strstr(r.out, "VERDICT  DATASET  PARAMS  PARENT"), "%s", r.out);
    cr_assert(strstr(r.out, "best     default"), "%s", r.out);
    tu_run_free(&r);
    daemon_stop(&d);
    free(spec);
}

/* ------------------------------------------------------- the agent */

Test(newuser, agent_status_says_what_it_waits_for) {
    char *base = tu_path("%s/base.json", tu_dir());
    tu_write(base, "{\"name\":\"baseline\",\"time_budget_s\":1}");
    tu_server_t a;
    char *errlog = tu_path("%s/agent.err", tu_dir());
    char *argv[] = {(char *)tu_bin(), "agent",      "--listen", "127.0.0.1:0", "--secret",
                    "s3cret",         "--baseline", base,       NULL};
    tu_server_start(&a, "agent", argv, errlog, 30);
    tu_run_t r;
    tu_run_bin(&r, 30, "agent", "status", "--url", a.url, NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert(strstr(r.out, "0 proposals so far"), "%s", r.out);
    cr_assert(strstr(r.out, "best:          none yet"), "%s", r.out);
    cr_assert(strstr(r.out, "last event:    none since it started"), "%s", r.out);
    cr_assert(strstr(r.out, "waiting for:   the daemon's first event"), "%s", r.out);
    tu_run_free(&r);
    tu_server_stop(&a, 30);
    tu_server_release(&a);
    free(errlog);
    free(base);
}

/* ------------------------------------------------------- one default scope */

/* `nightshift serve --dir state --listen 127.0.0.1:0 EXTRA...` with no
 * default dataset pinned. */
static void daemon_start_with(tu_server_t *d, const char *const *extra) {
    char *errlog = tu_path("%s/daemon.err", tu_dir());
    char *argv[24] = {(char *)tu_bin(), "serve",       "--dir",       state,
                      "--listen",       "127.0.0.1:0", "--memory-mb", "0"};
    int n = 8;
    for (int i = 0; extra && extra[i] && n < 23; i++) argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    tu_server_start(d, "daemon", argv, errlog, 30);
    free(errlog);
}

/* A small run on dataset ds (seed and depth vary the configuration). */
static char *small_spec(const char *ds, int seed, int depth) {
    return tu_path("{\"name\":\"small %d\",\"dataset\":\"%s\",\"seed\":%d,\"token_budget\":2048,"
                   "\"model\":{\"depth\":%d,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
                   "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128},"
                   "\"resources\":{\"threads\":1,\"peak_gflops\":10}}",
                   depth, ds, seed, depth);
}

/* Poll experiment id until it has ended; it must have succeeded. */
static void wait_succeeded(const tu_server_t *d, long id) {
    char path[64];
    snprintf(path, sizeof path, "/v1/experiments/%ld", id);
    for (double t = tu_now() + 90;; tu_sleep_ms(100)) {
        cJSON *e = tu_get_json(d, path);
        const char *st = tu_jstr(e, "status");
        int done = st && strcmp(st, "queued") && strcmp(st, "running");
        if (done) cr_assert_str_eq(st, "succeeded", "experiment %ld: %s", id, tu_jstr(e, "reason"));
        cJSON_Delete(e);
        if (done) return;
        cr_assert_lt(tu_now(), t, "experiment %ld did not finish", id);
    }
}

/* The number of lines of text. */
static int lines_of(const char *text) {
    int n = 0;
    for (const char *p = text; *p; p++) n += *p == '\n';
    return n;
}

/* A new user's daemon has run only on their own dataset `book`: best, the
 * leaderboard, its CSV and `nightshift best` answer with book's results and
 * say so; an empty scope's CSV is its header line alone; a dataset or a
 * budget that names nothing is an error that names what exists. */
Test(newuser, with_runs_only_on_book_every_answer_is_books_and_says_so) {
    char *book = tu_path("%s/book.txt", tu_dir());
    write_book(book, 3000);
    tu_run_bin_exit(0, 60, "prep", "--dir", state, "--vocab", "300", "--quiet", book, NULL);
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "empty"); /* prepared, never run */
    tu_server_t d;
    daemon_start_with(&d, NULL);

    /* before any run: exports are their header line alone */
    tu_reply_t rep;
    tu_http(&d, "GET", "/v1/export?format=csv", NULL, 0, NULL, &rep);
    cr_assert_eq(rep.status, 200, "%s", rep.body);
    cr_expect(!strncmp(rep.body, "id,name,status,", 15) && lines_of(rep.body) == 1, "%s", rep.body);
    tu_reply_free(&rep);
    tu_http(&d, "GET", "/v1/export?format=tsv", NULL, 0, NULL, &rep);
    cr_expect(!strncmp(rep.body, "id\tname\tstatus\t", 15) && lines_of(rep.body) == 1, "%s",
              rep.body);
    tu_reply_free(&rep);

    long ids[2];
    for (int i = 0; i < 2; i++) {
        char *s = small_spec("book", 1 + i, 1 + i);
        cJSON *o = tu_http_json(&d, "POST", "/v1/experiments", s, 201);
        ids[i] = (long)tu_jnum(o, "id");
        cJSON_Delete(o);
        free(s);
    }
    for (int i = 0; i < 2; i++) wait_succeeded(&d, ids[i]);

    cJSON *b = tu_get_json(&d, "/v1/best");
    cr_expect_str_eq(tu_jstr(b, "dataset"), "book");
    cr_expect_str_eq(tu_jstr(b, "budget_kind"), "tokens");
    cr_expect_str_eq(tu_jstr(b, "scope_from"), "latest_result");
    const cJSON *best = cJSON_GetObjectItem(b, "best");
    cr_assert(cJSON_IsObject(best), "no best: the new user's question answers nothing");
    cr_expect_str_eq(tu_jstr(cJSON_GetObjectItem(best, "spec"), "dataset"), "book");
    const cJSON *scopes = cJSON_GetObjectItem(b, "scopes");
    cr_assert_eq(cJSON_GetArraySize(scopes), 1);
    cr_expect_str_eq(tu_jstr(cJSON_GetArrayItem(scopes, 0), "dataset"), "book");
    cr_expect_eq(tu_jnum(cJSON_GetArrayItem(scopes, 0), "runs"), 2);
    cJSON_Delete(b);
    cJSON *lb = tu_get_json(&d, "/v1/leaderboard");
    cr_expect_str_eq(tu_jstr(lb, "dataset"), "book");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(lb, "leaderboard")), 2);
    cJSON_Delete(lb);

    tu_http(&d, "GET", "/v1/leaderboard?format=csv", NULL, 0, NULL, &rep);
    cr_assert_eq(rep.status, 200, "%s", rep.body);
    cr_expect_eq(lines_of(rep.body), 3, "a header and two rows: %s", rep.body);
    cr_expect(strstr(rep.body, ",book,tokens,2048,"), "%s", rep.body);
    char *header = strndup(rep.body, strcspn(rep.body, "\n") + 1);
    tu_reply_free(&rep);
    /* an empty scope (a prepared dataset nothing ran on): the header alone */
    tu_http(&d, "GET", "/v1/leaderboard?format=csv&dataset=empty", NULL, 0, NULL, &rep);
    cr_assert_eq(rep.status, 200, "%s", rep.body);
    cr_expect_str_eq(rep.body, header, "an empty scope's CSV is exactly its header line");
    tu_reply_free(&rep);
    free(header);

    /* the CLI */
    tu_run_t r;
    tu_run_bin(&r, 30, "best", "--url", d.url, NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(!strncmp(r.err, "scope: dataset book, budget tokens:2048, eval_tokens 0", 54), "%s",
              r.err);
    cr_expect(strstr(r.out, "\"dataset\": \"book\""), "%s", r.out);
    tu_run_free(&r);
    tu_run_bin(&r, 30, "leaderboard", "--url", d.url, NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(!strncmp(r.out, "dataset book, budget tokens:2048", 32), "%s", r.out);
    cr_expect_eq(lines_of(r.out), 4, "scope, header, two rows: %s", r.out);
    tu_run_free(&r);
    tu_run_bin(&r, 30, "best", "--url", d.url, "--dataset", "empty", NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "nothing has succeeded yet in dataset empty") &&
                  strstr(r.err, "the scopes with results:\n  --dataset book --budget "
                                "tokens:2048 --eval-tokens 0: 2 runs, best "),
              "%s", r.err);
    tu_run_free(&r);

    /* what does not exist is named as such, with what does */
    tu_run_bin(&r, 30, "leaderboard", "--url", d.url, "--dataset", "nosuch", NULL);
    cr_expect_eq(r.exit_code, 1, "%s", r.out);
    cr_expect(strstr(r.err, "unknown_dataset: no dataset 'nosuch'; the datasets are: book, "
                            "empty; the scopes with results: book (budget tokens:2048"),
              "%s", r.err);
    cr_expect(!strstr(r.out, "nothing has succeeded yet"), "%s", r.out);
    tu_run_free(&r);
    tu_run_bin(&r, 30, "leaderboard", "--url", d.url, "--dataset", "Book", NULL);
    cr_expect_eq(r.exit_code, 1);
    cr_expect(strstr(r.err, "(did you mean 'book'?)"), "%s", r.err);
    tu_run_free(&r);
    /* the status every watch polls keeps answering, without a noise */
    cJSON *st = tu_get_json(&d, "/v1/status?dataset=nosuch");
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(st, "noise")));
    cJSON_Delete(st);
    tu_run_bin(&r, 30, "best", "--url", d.url, "--budget", "tokens:12345", NULL);
    cr_expect_eq(r.exit_code, 1);
    cr_expect(strstr(r.err, "unknown_scope: no experiment ran in any dataset with budget "
                            "tokens:12345; the scopes with results: book"),
              "%s", r.err);
    tu_run_free(&r);
    daemon_stop(&d);
    free(book);
}

/* A fake agent on loopback that answers the daemon's first event with specs
 * (a JSON array, argv) and every later one with nothing. */
static const char *const fake_agent_py =
    "import http.server, json, signal, sys\n"
    "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
    "reply = [sys.argv[1].encode()]\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_POST(self):\n"
    "        self.rfile.read(int(self.headers.get('Content-Length', 0)))\n"
    "        body = reply.pop() if reply else b''\n"
    "        self.send_response(200)\n"
    "        self.send_header('Content-Type', 'application/json')\n"
    "        self.send_header('Content-Length', str(len(body)))\n"
    "        self.end_headers()\n"
    "        self.wfile.write(body)\n"
    "    def log_message(self, *a):\n"
    "        pass\n"
    "s = http.server.HTTPServer(('127.0.0.1', 0), H)\n"
    "print('listening on http://127.0.0.1:%d' % s.server_address[1], flush=True)\n"
    "s.serve_forever()\n";

/* started of experiment id, as text (compared as ISO-8601 strings). */
static char *started_of(const tu_server_t *d, long id) {
    char path[64];
    snprintf(path, sizeof path, "/v1/experiments/%ld", id);
    cJSON *e = tu_get_json(d, path);
    const char *s = tu_jstr(e, "started");
    char *out = strdup(s ? s : "");
    cJSON_Delete(e);
    return out;
}

/* The agent queued three baseline seeds; a person's run starts as soon as
 * the running one ends, before the other two; a person who says so (a
 * negative priority) goes after them. */
Test(newuser, a_persons_submission_starts_before_the_agents_queued_proposals) {
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "default");
    char *proposals =
        tu_path("[%s,%s,%s]", "{\"name\":\"slow-ok\",\"seed\":1,\"time_budget_s\":1.5}",
                "{\"name\":\"slow-ok\",\"seed\":2,\"time_budget_s\":1.5}",
                "{\"name\":\"slow-ok\",\"seed\":3,\"time_budget_s\":1.5}");
    tu_server_t a, d;
    char *agent_err = tu_path("%s/agent.err", tu_dir());
    char *aargv[] = {"/usr/bin/python3", "-c", (char *)fake_agent_py, proposals, NULL};
    tu_server_start(&a, "agent", aargv, agent_err, 30);
    char *hook = tu_path("%s/hook", a.url), *cmd = tu_path("%s from-spec", tu_bad_worker());
    const char *extra[] = {
        "--slots", "1", "--worker-cmd", cmd, "--agent-url", hook, "--agent-secret", "s3cret", NULL};
    daemon_start_with(&d, extra);

    /* the agent's three are queued (its first running) */
    cJSON *l = NULL;
    for (double t = tu_now() + 20;; tu_sleep_ms(50)) {
        cJSON_Delete(l);
        l = tu_get_json(&d, "/v1/experiments?order=id");
        if (cJSON_GetArraySize(cJSON_GetObjectItem(l, "experiments")) == 3) break;
        cr_assert_lt(tu_now(), t, "the agent's proposals were not queued");
    }
    cr_expect_str_eq(
        tu_jstr(cJSON_GetArrayItem(cJSON_GetObjectItem(l, "experiments"), 0), "source"), "agent");
    cJSON_Delete(l);
    char *mine = tu_path("%s/mine.json", tu_dir()), *later = tu_path("%s/later.json", tu_dir());
    tu_write(mine, "{\"name\":\"ok\",\"seed\":9,\"time_budget_s\":1}");
    tu_write(later, "{\"name\":\"ok\",\"seed\":10,\"time_budget_s\":1,\"priority\":-1}");
    tu_run_bin_out("4 queued\n", 30, "submit", mine, "--url", d.url, NULL);
    tu_run_bin_out("5 queued\n", 30, "submit", later, "--url", d.url, NULL);
    wait_succeeded(&d, 5);
    char *st[6];
    for (long id = 1; id <= 5; id++) st[id] = started_of(&d, id);
    cr_expect_lt(strcmp(st[1], st[4]), 0, "the agent's first was running already");
    cr_expect_lt(strcmp(st[4], st[2]), 0, "mine (%s) after the agent's second (%s)", st[4], st[2]);
    cr_expect_lt(strcmp(st[4], st[3]), 0, "mine (%s) after the agent's third (%s)", st[4], st[3]);
    cr_expect_gt(strcmp(st[5], st[3]), 0, "priority -1 (%s) before the agent's third (%s)", st[5],
                 st[3]);
    for (long id = 1; id <= 5; id++) free(st[id]);
    daemon_stop(&d);
    tu_server_stop(&a, 10);
    tu_server_release(&a);
    free(mine), free(later), free(hook), free(cmd), free(agent_err), free(proposals);
}

/* prep says when the vocabulary is too large for the text, and a size that
 * suits it; prepared with that size, the text gets no warning. */
Test(newuser, prep_warns_when_the_vocabulary_is_large_for_the_text) {
    /* the READMEs in one file: about 90 KB of English */
    const char *parts[] = {"README.md", "engine/README.md", "daemon/README.md",
                           "experiments/README.md"};
    size_t len = 0;
    char *text = calloc(1, 1);
    for (int i = 0; i < 4; i++) {
        char *path = tu_path("%s/%s", tu_src(), parts[i]), *part = tu_read(path);
        cr_assert(part, "cannot read %s", path);
        text = realloc(text, len + strlen(part) + 2);
        memcpy(text + len, part, strlen(part) + 1);
        len += strlen(part);
        free(part);
        free(path);
    }
    char *readme = tu_path("%s/readmes.txt", tu_dir());
    tu_write(readme, text);
    free(text);
    tu_run_t r;
    tu_run_bin(&r, 60, "prep", "--dir", state, "--name", "big", "--vocab", "2000", readme, NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    const char *w = strstr(r.err, "prep: warning: --vocab 2000 is large for this text (");
    cr_assert(w, "no warning: %s", r.err);
    long suggest = 0;
    const char *at = strstr(w, ". --vocab ");
    cr_assert(at &&
                  sscanf(at, ". --vocab %ld keeps the merges seen 20 times or more", &suggest) == 1,
              "%s", w);
    cr_expect(suggest > 256 && suggest < 2000 && (suggest + 4) % 64 == 0, "--vocab %ld", suggest);
    tu_run_free(&r);
    char v[32];
    snprintf(v, sizeof v, "%ld", suggest);
    tu_run_bin(&r, 60, "prep", "--dir", state, "--name", "fits", "--vocab", v, readme, NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(!strstr(r.err, "warning"), "the suggested size warns too: %s", r.err);
    tu_run_free(&r);
    free(readme);
}

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
    cost_memory(&s.model, s.train.batch_size, info.train_tokens + info.val_tokens, &mem);
    spec_free(&s);
    char want[200];
    snprintf(want, sizeof want,
             "nightshift: does_not_fit: needs ~%.0f GB, a worker may use 2.1 GB (the daemon's "
             "limit per worker): %.1f billion parameters",
             mem.total / 1e9, mem.weights / 4e9);

    tu_run_t r;
    tu_run_bin(&r, 30, "submit", spec, "--url", d.url, NULL);
    cr_assert_eq(r.exit_code, 1, "%s", r.err);
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

    /* cost says the same from the dataset, without a vocab_size in the spec. */
    tu_run_bin(&r, 30, "cost", spec, "--dir", state, NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert(strstr(r.out, "(from dataset 'default' in "), "%s", r.out);
    cr_assert(strstr(r.out, "memory needed (estimate):"), "%s", r.out);
    tu_run_free(&r);
    daemon_stop(&d);
    free(spec);
}

/* `cost`'s "memory needed (estimate):" in MiB, from its output. */
static double cost_estimate_mib(const char *spec) {
    tu_run_t r;
    tu_run_bin(&r, 30, "cost", spec, "--dir", state, NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    const char *p = strstr(r.out, "memory needed (estimate):");
    cr_assert(p, "%s", r.out);
    p += strlen("memory needed (estimate):");
    char digits[32];
    size_t n = 0;
    for (; *p && *p != '\n' && n < sizeof digits - 1; p++)
        if (*p >= '0' && *p <= '9') digits[n++] = *p;
    digits[n] = '\0';
    tu_run_free(&r);
    return atof(digits);
}

/* The estimate is of peak RSS: within 15% + 8 MiB of what a run measures
 * (the process overhead is a constant measured on one machine). Under the
 * sanitizers RSS holds their shadow memory and means nothing here. */
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
    static const int batch[] = {8, 16}, seq[] = {64, 128};
    for (int i = 0; i < 2; i++) {
        char *spec = tu_path("%s/m%d.json", tu_dir(), i);
        char *json = tu_path("{\"dataset\":\"default\",\"time_budget_s\":1,\"model\":{%s},"
                             "\"train\":{\"batch_size\":%d,\"total_batch_tokens\":%d},"
                             "\"resources\":{\"threads\":1}}",
                             models[i], batch[i], batch[i] * seq[i]);
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

/* prep says when the vocabulary is too large for the text, and a size that
 * suits it; prepared with that size, the text gets no warning. */
Test(newuser, prep_warns_when_the_vocabulary_is_large_for_the_text) {
    char *readme = tu_path("%s/README.md", tu_src());
    tu_run_t r;
    tu_run_bin(&r, 60, "prep", "--dir", state, "--name", "big", "--vocab", "2000", "--quiet",
               readme, NULL);
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

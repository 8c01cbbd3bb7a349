/* testutil.c - see testutil.h. */
#include "tests/testutil.h"

#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <iconv.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/gemm.h"
#include "engine/threads.h"

const char *const tu_isas[3] = {"avx512", "avx2", "generic"};

int tu_select_isa(const char *name, int threads) {
    char err[256];
    setenv("NIGHTSHIFT_ISA", name, 1);
    threads_set(threads);
    if (gemm_select_env(err, sizeof err) == 0) return 0;
    cr_log_info("%s", err);
    return -1;
}

void tu_select_isa_auto(void) {
    char err[256];
    unsetenv("NIGHTSHIFT_ISA");
    cr_assert_eq(gemm_select(GEMM_AUTO), 0);
    cr_assert_eq(gemm_set_precision(GEMM_FP32, err, sizeof err), 0);
}

/* "suite::test" of the running test. */
static const char *tu_test_name(void) {
    static char name[160];
    snprintf(name, sizeof name, "%s::%s", criterion_current_test->category,
             criterion_current_test->name);
    return name;
}

int tu_select_bf16(int threads) {
    char why[256];
    const char *forced = getenv("NIGHTSHIFT_ISA");
    if (forced && *forced && strcmp(forced, "auto") && strcmp(forced, "avx512")) {
        fprintf(stderr, "[SKIP] %s: NIGHTSHIFT_ISA=%s forces a path without bf16 products\n",
                tu_test_name(), forced);
        return 0;
    }
    if (tu_select_isa("avx512", threads) != 0 || !gemm_bf16_available(why, sizeof why)) {
        if (gemm_current() != GEMM_AVX512) snprintf(why, sizeof why, "this CPU lacks AVX-512F");
        fprintf(stderr, "[SKIP] %s: %s\n", tu_test_name(), why);
        return 0;
    }
    cr_assert_eq(gemm_set_precision(GEMM_BF16, why, sizeof why), 0, "%s", why);
    return 1;
}

char *tu_tmpdir(void) {
    const char *base = getenv("TMPDIR");
    char *dir = tu_path("%s/nightshift-test.XXXXXX", base && *base ? base : "/tmp");
    cr_assert(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
    return dir;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

void tu_rmrf(const char *path) {
    if (path) nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static char *test_dir; /* tu_dir(): one per test process */

void tu_dir_init(void) {
    test_dir = tu_tmpdir();
}

void tu_dir_fini(void) {
    tu_rmrf(test_dir);
    free(test_dir);
    test_dir = NULL;
}

const char *tu_dir(void) {
    cr_assert(test_dir, "no test directory (the suite's init must call tu_dir_init)");
    return test_dir;
}

const char *tu_dir_path(const char *name) {
    static char paths[8][1024];
    static int k;
    k = (k + 1) % 8;
    int n = snprintf(paths[k], sizeof paths[k], "%s/%s", tu_dir(), name);
    cr_assert(n > 0 && (size_t)n < sizeof paths[k], "path too long: %s/%s", tu_dir(), name);
    return paths[k];
}

char *tu_path(const char *fmt, ...) {
    va_list ap;
    char *s = NULL;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    cr_assert(n >= 0, "out of memory");
    return s;
}

void tu_write_n(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    cr_assert(f, "%s: %s", path, strerror(errno));
    int ok = len == 0 || fwrite(data, 1, len, f) == len;
    cr_assert(fclose(f) == 0 && ok, "%s: write failed", path);
}

void tu_write(const char *path, const char *text) {
    tu_write_n(path, text, strlen(text));
}

/* The whole file (malloc'd, NUL-terminated) and its size; NULL if it cannot
 * be opened or read. */
static char *read_whole(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    int failed = ferror(f);
    fclose(f);
    cr_assert(buf, "out of memory");
    if (failed) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static int stderr_saved = -1;
static char stderr_path[64];

void tu_stderr_begin(void) {
    cr_assert_eq(stderr_saved, -1, "tu_stderr_begin twice");
    fflush(stderr);
    snprintf(stderr_path, sizeof stderr_path, "/tmp/nightshift-stderr.XXXXXX");
    int fd = mkstemp(stderr_path);
    cr_assert(fd >= 0, "mkstemp: %s", strerror(errno));
    stderr_saved = dup(STDERR_FILENO);
    cr_assert(stderr_saved >= 0 && dup2(fd, STDERR_FILENO) >= 0, "dup: %s", strerror(errno));
    close(fd);
}

char *tu_stderr_end(void) {
    cr_assert_neq(stderr_saved, -1, "tu_stderr_end without tu_stderr_begin");
    fflush(stderr);
    dup2(stderr_saved, STDERR_FILENO);
    close(stderr_saved);
    stderr_saved = -1;
    size_t len;
    char *text = read_whole(stderr_path, &len);
    unlink(stderr_path);
    return text ? text : calloc(1, 1);
}

char *tu_read(const char *path) {
    size_t len;
    return read_whole(path, &len);
}

char *tu_read_all(const char *path, size_t *len) {
    size_t n = 0;
    char *buf = read_whole(path, &n);
    cr_assert(buf, "cannot read %s: %s", path, strerror(errno));
    *len = n;
    return buf;
}

const char *tu_bin(void) {
    const char *b = getenv("NIGHTSHIFT_BIN");
    cr_assert(b && *b, "NIGHTSHIFT_BIN is not set (run the tests through make test)");
    return b;
}

const char *tu_src(void) {
    const char *s = getenv("NIGHTSHIFT_SRC");
    cr_assert(s && *s, "NIGHTSHIFT_SRC is not set (run the tests through make test)");
    return s;
}

const char *tu_bad_worker(void) {
    const char *b = getenv("NIGHTSHIFT_BAD_WORKER");
    cr_assert(b && *b, "NIGHTSHIFT_BAD_WORKER is not set (run the tests through make test)");
    return b;
}

double tu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void tu_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int tu_process_gone(pid_t pid) {
    if (kill(pid, 0) < 0) return errno == ESRCH;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The state follows the command name, which may hold spaces and ')'. */
    const char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

/* Append what fd has to *buf; returns 0 at EOF. */
static int drain(int fd, char **buf, size_t *len) {
    char chunk[8192];
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n <= 0) return n < 0 && errno == EINTR;
    *buf = realloc(*buf, *len + (size_t)n + 1);
    cr_assert(*buf, "out of memory");
    memcpy(*buf + *len, chunk, (size_t)n);
    *len += (size_t)n;
    (*buf)[*len] = '\0';
    return 1;
}

int tu_read_some(int fd, char *buf, size_t *len, size_t cap) {
    char chunk[4096];
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n <= 0) return n < 0 && errno == EINTR;
    size_t keep = (size_t)n < cap - 1 - *len ? (size_t)n : cap - 1 - *len;
    memcpy(buf + *len, chunk, keep);
    *len += keep;
    buf[*len] = '\0';
    return 1;
}

void tu_run(tu_run_t *r, char *const argv[], double timeout_s) {
    int out[2], err[2];
    memset(r, 0, sizeof *r);
    cr_assert(pipe(out) == 0 && pipe(err) == 0, "pipe: %s", strerror(errno));
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(err[1], 2);
        close(out[0]), close(out[1]), close(err[0]), close(err[1]);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, 0);
        execv(argv[0], argv);
        _exit(127);
    }
    close(out[1]), close(err[1]);
    size_t out_len = 0, err_len = 0;
    r->out = calloc(1, 1);
    r->err = calloc(1, 1);
    struct pollfd p[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    int open_fds = 2;
    double deadline = tu_now() + timeout_s;
    while (open_fds > 0) {
        int left_ms = (int)((deadline - tu_now()) * 1000);
        if (left_ms <= 0) {
            r->timed_out = 1;
            kill(pid, SIGKILL);
            break;
        }
        if (poll(p, 2, left_ms) < 0 && errno != EINTR) break;
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            if (!drain(p[i].fd, i ? &r->err : &r->out, i ? &err_len : &out_len)) {
                close(p[i].fd);
                p[i].fd = -1;
                open_fds--;
            }
        }
    }
    for (int i = 0; i < 2; i++)
        if (p[i].fd >= 0) close(p[i].fd);
    /* The pipes may close before the child exits: keep to the deadline. */
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (tu_now() > deadline) {
            r->timed_out = 1;
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        usleep(10000);
    }
    r->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

void tu_run_free(tu_run_t *r) {
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

/* argv[0..n] for `$NIGHTSHIFT_BIN arg ...` (the list NULL-terminated, at
 * most 30 arguments); argv has room for 32. */
static void bin_argv(char *argv[32], const char *arg, va_list ap) {
    int n = 0;
    argv[n++] = (char *)tu_bin();
    const char *a = arg;
    for (; a && n < 31; a = va_arg(ap, const char *)) argv[n++] = (char *)a;
    cr_assert(!a, "more than 30 arguments for nightshift %s", arg);
    argv[n] = NULL;
}

void tu_run_bin(tu_run_t *r, double timeout_s, const char *arg, ...) {
    char *argv[32];
    va_list ap;
    va_start(ap, arg);
    bin_argv(argv, arg, ap);
    va_end(ap);
    tu_run(r, argv, timeout_s);
    cr_assert_not(r->timed_out, "nightshift %s timed out after %g s", arg, timeout_s);
}

/* `$NIGHTSHIFT_BIN arg ...` (ap) must exit want and, unless out is NULL,
 * print exactly out on stdout; a failure names the command. */
static void run_bin_expect(int want, const char *out, double timeout_s, const char *arg,
                           va_list ap) {
    char *argv[32], cmd[1024] = "nightshift";
    bin_argv(argv, arg, ap);
    for (int i = 1; argv[i]; i++) {
        size_t n = strlen(cmd);
        snprintf(cmd + n, sizeof cmd - n, " %s", argv[i]);
    }
    tu_run_t r;
    tu_run(&r, argv, timeout_s);
    cr_assert_not(r.timed_out, "%s timed out after %g s", cmd, timeout_s);
    cr_assert_eq(r.exit_code, want, "%s: exit %d, expected %d; stderr: %s", cmd, r.exit_code, want,
                 r.err);
    if (out) cr_assert_str_eq(r.out, out, "%s: stdout\n%s\nexpected\n%s", cmd, r.out, out);
    tu_run_free(&r);
}

void tu_run_bin_exit(int want, double timeout_s, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    run_bin_expect(want, NULL, timeout_s, arg, ap);
    va_end(ap);
}

void tu_run_bin_out(const char *out, double timeout_s, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    run_bin_expect(0, out, timeout_s, arg, ap);
    va_end(ap);
}

void tu_prep_tiny(const char *corpus, const char *dir, const char *name) {
    static const char *const subjects[] = {"the cat", "a dog", "the bird", "my friend"};
    static const char *const verbs[] = {"sat on", "ran to", "looked at", "walked past"};
    static const char *const objects[] = {"the mat", "the park", "a tree", "the house"};
    FILE *f = fopen(corpus, "w");
    cr_assert(f, "%s: %s", corpus, strerror(errno));
    for (int d = 0; d < 40; d++) {
        fputs("{\"text\":\"", f);
        for (int s = 0; s < 30; s++)
            fprintf(f, "%s %s %s. ", subjects[(d + s) % 4], verbs[(d * 3 + s) % 4],
                    objects[(d + 2 * s) % 4]);
        fputs("\"}\n", f);
    }
    cr_assert(fclose(f) == 0, "%s: write failed", corpus);
    tu_run_t r;
    tu_run_bin(&r, 30, "prep", "--dir", dir, "--name", name, "--vocab", "300", "--val-fraction",
               "0.1", "--quiet", corpus, NULL);
    cr_assert_eq(r.exit_code, 0, "prep failed: %s", r.err);
    tu_run_free(&r);
}

/* ---------------------------------------------------------------- servers */

/* The last ~3000 bytes of the server's stderr (malloc'd, caller frees). */
static char *log_tail(const tu_server_t *s) {
    char *text = s->errlog ? tu_read(s->errlog) : NULL;
    if (!text) return strdup("(no stderr file)");
    size_t n = strlen(text);
    if (n > 3000) memmove(text, text + n - 3000, 3001);
    return text;
}

void tu_server_fail(const tu_server_t *s, const char *fmt, ...) {
    va_list ap;
    char *msg = NULL;
    va_start(ap, fmt);
    if (vasprintf(&msg, fmt, ap) < 0) msg = NULL;
    va_end(ap);
    char *tail = log_tail(s);
    cr_assert_fail("%s\n--- %s stderr (tail) ---\n%s", msg ? msg : fmt, s->name, tail);
    abort(); /* not reached */
}

void tu_daemon_start(tu_server_t *d, const char *state, const char *const *extra,
                     double timeout_s) {
    static int n;
    char *argv[24];
    int k = 0;
    argv[k++] = (char *)tu_bin();
    argv[k++] = "serve";
    argv[k++] = "--dir";
    argv[k++] = (char *)state;
    argv[k++] = "--slots";
    argv[k++] = "1";
    argv[k++] = "--threads-per-slot";
    argv[k++] = "1";
    argv[k++] = "--memory-mb";
    argv[k++] = "0";
    for (int i = 0; extra && extra[i]; i++) argv[k++] = (char *)extra[i];
    if (!extra) {
        argv[k++] = "--listen";
        argv[k++] = "127.0.0.1:0";
    }
    argv[k] = NULL;
    char *errlog = tu_path("%s/daemon-%d.err", tu_dir(), n++);
    tu_server_start(d, "daemon", argv, errlog, timeout_s);
    free(errlog);
}

void tu_server_start(tu_server_t *s, const char *name, char *const argv[], const char *errlog,
                     double timeout_s) {
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->errlog = strdup(errlog);
    cr_assert(s->errlog, "out of memory");

    int out[2];
    cr_assert(pipe2(out, O_CLOEXEC) == 0, "pipe: %s", strerror(errno));
    int errfd = open(errlog, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    cr_assert(errfd >= 0, "%s: %s", errlog, strerror(errno));
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, 0);
        dup2(out[1], 1);
        dup2(errfd, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    close(out[1]);
    close(errfd);
    s->pid = pid;

    /* One line: "listening on http://127.0.0.1:PORT". */
    char line[256];
    size_t len = 0;
    double deadline = tu_now() + timeout_s;
    while (len < sizeof line - 1 && !memchr(line, '\n', len)) {
        int left_ms = (int)((deadline - tu_now()) * 1000);
        struct pollfd p = {out[0], POLLIN, 0};
        if (left_ms <= 0 || (poll(&p, 1, left_ms) < 0 && errno != EINTR)) break;
        if (!(p.revents & (POLLIN | POLLHUP))) continue;
        ssize_t k = read(out[0], line + len, sizeof line - 1 - len);
        if (k <= 0) break;
        len += (size_t)k;
    }
    close(out[0]);
    line[len] = '\0';
    const char *colon = strrchr(line, ':');
    /* A daemon listening on every address (0.0.0.0) is reached on loopback. */
    if ((strncmp(line, "listening on http://127.0.0.1:", 30) != 0 &&
         strncmp(line, "listening on http://0.0.0.0:", 28) != 0) ||
        !colon)
        tu_server_fail(s, "the %s did not print its port (stdout: '%s')", name, line);
    s->port = atoi(colon + 1);
    cr_assert(s->port > 0 && s->port < 65536, "bad port line '%s'", line);
    snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", s->port);
}

void tu_server_expect_clean_log(const tu_server_t *s) {
    char *text = tu_read(s->errlog);
    cr_assert(text, "%s: cannot read the %s's stderr", s->errlog, s->name);
    int dirty = strstr(text, "Sanitizer") || strstr(text, "runtime error:");
    cr_expect(!dirty, "sanitizer report in the %s's stderr:\n%s", s->name, text);
    free(text);
}

int tu_server_term(tu_server_t *s, double timeout_s, int *timed_out) {
    cr_assert(s->pid > 0, "the %s is not running", s->name);
    kill(s->pid, SIGTERM);
    int status = 0;
    double deadline = tu_now() + timeout_s;
    pid_t got;
    while ((got = waitpid(s->pid, &status, WNOHANG)) == 0 && tu_now() < deadline) tu_sleep_ms(20);
    *timed_out = got == 0;
    if (got == 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, &status, 0);
    }
    s->pid = 0;
    return status;
}

void tu_server_stop(tu_server_t *s, double timeout_s) {
    int timed_out;
    int status = tu_server_term(s, timeout_s, &timed_out);
    if (timed_out)
        tu_server_fail(s, "the %s did not exit within %g s of SIGTERM", s->name, timeout_s);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        tu_server_fail(s, "the %s did not shut down cleanly (status 0x%x)", s->name, status);
    tu_server_expect_clean_log(s);
}

void tu_server_kill(tu_server_t *s) {
    cr_assert(s->pid > 0, "the %s is not running", s->name);
    kill(s->pid, SIGKILL);
    int status = 0;
    cr_assert_eq(waitpid(s->pid, &status, 0), s->pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    s->pid = 0;
}

void tu_server_release(tu_server_t *s) {
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
    free(s->errlog);
    s->errlog = NULL;
}

/* ------------------------------------------------------------------- HTTP */

static size_t reply_write_cb(char *p, size_t size, size_t nmemb, void *arg) {
    tu_reply_t *r = arg;
    size_t n = size * nmemb;
    char *b = realloc(r->body, r->len + n + 1);
    if (!b) return 0;
    memcpy(b + r->len, p, n);
    r->body = b;
    r->len += n;
    r->body[r->len] = '\0';
    return n;
}

static size_t reply_header_cb(char *p, size_t size, size_t nmemb, void *arg) {
    tu_reply_t *r = arg;
    size_t n = size * nmemb, have = strlen(r->headers), room = sizeof r->headers - 1 - have;
    memcpy(r->headers + have, p, n < room ? n : room);
    r->headers[have + (n < room ? n : room)] = '\0';
    return n;
}

void tu_http(const tu_server_t *s, const char *method, const char *path, const char *body,
             size_t body_len, const char *auth, tu_reply_t *r) {
    char hdr[512];
    const char *headers[] = {hdr, NULL};
    if (auth) snprintf(hdr, sizeof hdr, "Authorization: %s", auth);
    tu_http_headers(s, method, path, body, body_len, auth ? headers : headers + 1, r);
}

void tu_http_headers(const tu_server_t *s, const char *method, const char *path, const char *body,
                     size_t body_len, const char *const headers[], tu_reply_t *r) {
    memset(r, 0, sizeof *r);
    r->body = calloc(1, 1);
    cr_assert(r->body, "out of memory");
    CURL *c = curl_easy_init();
    cr_assert(c, "curl_easy_init failed");
    char url[512], err[CURL_ERROR_SIZE] = "";
    snprintf(url, sizeof url, "%s%s", s->url, path);
    int own_type = 0;
    for (int i = 0; headers[i]; i++) own_type |= !strncasecmp(headers[i], "Content-Type:", 13);
    struct curl_slist *h =
        own_type ? NULL : curl_slist_append(NULL, "Content-Type: application/json");
    for (int i = 0; headers[i]; i++) h = curl_slist_append(h, headers[i]);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (!strcmp(method, "HEAD")) curl_easy_setopt(c, CURLOPT_NOBODY, 1L); /* no body to wait for */
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    /* 30 s: a /mcp wait streams until its tiny run ends, which under a
     * sanitizer on a loaded machine took 10 s (a slot of one thread) */
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, reply_write_cb);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, reply_header_cb);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    }
    double t0 = tu_now();
    CURLcode rc = curl_easy_perform(c);
    r->seconds = tu_now() - t0;
    const char *ct = NULL;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
    snprintf(r->content_type, sizeof r->content_type, "%s", ct ? ct : "");
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    if (rc != CURLE_OK)
        tu_server_fail(s, "%s %s: %s (%s)", method, path, curl_easy_strerror(rc), err);
}

void tu_reply_free(tu_reply_t *r) {
    free(r->body);
    r->body = NULL;
}

cJSON *tu_http_json(const tu_server_t *s, const char *method, const char *path, const char *body,
                    long want_status) {
    tu_reply_t r;
    tu_http(s, method, path, body, body ? strlen(body) : 0, NULL, &r);
    if (r.status != want_status)
        tu_server_fail(s, "%s %s: HTTP %ld, expected %ld: %s", method, path, r.status, want_status,
                       r.body);
    cJSON *o = cJSON_Parse(r.body);
    if (!o) tu_server_fail(s, "%s %s: the reply is not JSON: %s", method, path, r.body);
    tu_reply_free(&r);
    return o;
}

cJSON *tu_get_json(const tu_server_t *s, const char *path) {
    return tu_http_json(s, "GET", path, NULL, 200);
}

const char *tu_jstr(const cJSON *o, const char *key) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
}

double tu_jnum(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(v), "no number '%s' in the reply", key);
    return v->valuedouble;
}

/* -------------------------------------------------------------------- SQL */

sqlite3 *tu_db_open(const char *path) {
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL);
    cr_assert_eq(rc, SQLITE_OK, "%s: %s", path, db ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_busy_timeout(db, 5000);
    return db;
}

/* Prepare sql, bind ?1 when it has parameters, and step once; returns the
 * statement (caller finalizes) and whether there is a row. */
static sqlite3_stmt *sql_first_row(sqlite3 *db, const char *sql, long long arg, int *has_row) {
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    if (sqlite3_bind_parameter_count(st) > 0) sqlite3_bind_int64(st, 1, arg);
    int rc = sqlite3_step(st);
    cr_assert(rc == SQLITE_ROW || rc == SQLITE_DONE, "%s: %s", sql, sqlite3_errmsg(db));
    *has_row = rc == SQLITE_ROW;
    return st;
}

long long tu_sql_int(sqlite3 *db, const char *sql, long long arg) {
    int row;
    sqlite3_stmt *st = sql_first_row(db, sql, arg, &row);
    long long v =
        row && sqlite3_column_type(st, 0) != SQLITE_NULL ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return v;
}

double tu_sql_double(sqlite3 *db, const char *sql, long long arg) {
    int row;
    sqlite3_stmt *st = sql_first_row(db, sql, arg, &row);
    double v = row ? sqlite3_column_double(st, 0) : 0;
    sqlite3_finalize(st);
    cr_assert(row, "%s: no row for %lld", sql, arg);
    return v;
}

int tu_utf8_valid(const char *s, size_t len) {
    iconv_t cd = iconv_open("UTF-8", "UTF-8");
    cr_assert(cd != (iconv_t)-1, "iconv_open: %s", strerror(errno));
    char *in = (char *)s, out[4096];
    size_t left = len;
    int ok = 1;
    while (left > 0 && ok) {
        char *o = out;
        size_t room = sizeof out;
        if (iconv(cd, &in, &left, &o, &room) == (size_t)-1 && errno != E2BIG) ok = 0;
    }
    iconv_close(cd);
    return ok;
}

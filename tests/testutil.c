/* testutil.c - see testutil.h. */
#include "testutil.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

char *tu_path(const char *fmt, ...) {
    va_list ap;
    char *s = NULL;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    cr_assert(n >= 0, "out of memory");
    return s;
}

void tu_write(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s: %s", path, strerror(errno));
    cr_assert(fputs(text, f) >= 0 && fclose(f) == 0, "%s: write failed", path);
}

char *tu_read(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    cr_assert(buf, "out of memory");
    buf[n] = '\0';
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

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
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
    double deadline = now() + timeout_s;
    while (open_fds > 0) {
        int left_ms = (int)((deadline - now()) * 1000);
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
        if (now() > deadline) {
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

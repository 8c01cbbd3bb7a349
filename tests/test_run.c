/* test_run.c - `make run` stops cleanly on a signal sent to make alone (not
 * to its process group, as a terminal's Ctrl-C would): scripts/run.sh, make's
 * job, sees make take the signal and stops the agent, the daemon and the run
 * in training, so nothing of the night outlives make. A tiny dataset and a
 * token-budget baseline of a few seconds; every wait is bounded. The same
 * night as a service: make start, status and stop. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/testutil.h"

TestSuite(run, .init = tu_dir_init, .fini = tu_dir_fini, .timeout = 120);

/* A loopback port nothing listens on now. */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* How many processes have text in their command line; sig (0: none) is sent
 * to each of them. */
static int processes_naming(const char *text, int sig) {
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;
    cr_assert(d);
    while ((e = readdir(d))) {
        char path[300], buf[4096];
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        ssize_t got = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (got <= 0) continue;
        for (ssize_t i = 0; i < got; i++)
            if (!buf[i]) buf[i] = ' ';
        buf[got] = '\0';
        if (!strstr(buf, text)) continue;
        n++;
        if (sig) kill((pid_t)atol(e->d_name), sig);
    }
    closedir(d);
    return n;
}

static void signal_make_alone(int sig) {
    char *want = tu_path("%s/build/nightshift", tu_src());
    if (strcmp(tu_bin(), want))
        cr_skip_test("make run builds %s; this build is %s", want, tu_bin());
    free(want);
    char *state = tu_path("%s/state", tu_dir()), *out = tu_path("%s/make.out", tu_dir());
    char *spec = tu_path("%s/quick.json", tu_dir());
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "default");
    tu_write(spec, "{\"name\":\"quick\",\"seed\":1,\"token_budget\":4096,"
                   "\"model\":{\"depth\":1,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
                   "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128},"
                   "\"resources\":{\"threads\":1}}");
    char port[16], agent_port[16], state_arg[4200];
    snprintf(port, sizeof port, "%d", free_port());
    snprintf(agent_port, sizeof agent_port, "%d", free_port());
    snprintf(state_arg, sizeof state_arg, "STATE=%s", state);
    pid_t make = fork();
    cr_assert(make >= 0);
    if (make == 0) { /* make in a process group of its own, SIGINT as a terminal's */
        setsid();
        signal(SIGINT, SIG_DFL);
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0 || chdir(tu_src()) < 0) _exit(127);
        unsetenv("MAKEFLAGS");
        unsetenv("MFLAGS");
        unsetenv("MAKELEVEL");
        setenv("NIGHTSHIFT_PORT", port, 1);
        setenv("NIGHTSHIFT_AGENT_PORT", agent_port, 1);
        setenv("NIGHTSHIFT_SLOTS", "1", 1);
        setenv("NIGHTSHIFT_BASELINE", spec, 1);
        execlp("make", "make", "--no-print-directory", "run", state_arg, (char *)NULL);
        _exit(127);
    }
    /* running: the script says so, and a run has started training */
    char *log = tu_path("%s/daemon.log", state);
    for (double t = tu_now() + 60;; tu_sleep_ms(100)) {
        char *text = tu_read(out), *dlog = tu_read(log);
        int up = text && strstr(text, "nightshift is running") && dlog &&
                 strstr(dlog, " started (attempt");
        free(text);
        free(dlog);
        if (up) break;
        if (tu_now() > t || waitpid(make, NULL, WNOHANG) == make) {
            kill(-make, SIGKILL);
            waitpid(make, NULL, 0);
            cr_assert_fail("make run did not start: %s", tu_read(out));
        }
    }
    cr_assert_gt(processes_naming(state, 0), 1, "the daemon and the agent run with %s", state);
    double sent = tu_now();
    cr_assert_eq(kill(make, sig), 0);
    int status = 0, gone = 0;
    for (double t = sent + 30; tu_now() < t; tu_sleep_ms(100))
        if (waitpid(make, &status, WNOHANG) == make) {
            gone = 1;
            break;
        }
    if (!gone) {
        kill(-make, SIGKILL);
        waitpid(make, &status, 0);
    }
    char *text = tu_read(out), *dlog = tu_read(log);
    cr_expect(gone, "make still ran 30 s after %s: %s", strsignal(sig), text);
    cr_expect_lt(tu_now() - sent, 15, "stopping took %.1f s", tu_now() - sent);
    cr_expect(text && strstr(text, "run: stopping"), "%s", text);
    cr_expect(dlog && strstr(dlog, "info  stopped\n"), "the daemon did not stop cleanly: %s", dlog);
    for (double t = tu_now() + 5; processes_naming(state, 0) > 0 && tu_now() < t;) tu_sleep_ms(100);
    int left = processes_naming(state, 0);
    cr_expect_eq(left, 0, "something of the night outlived make");
    if (left) { /* leave nothing running for the next test */
        processes_naming(state, SIGTERM);
        for (double t = tu_now() + 10; processes_naming(state, 0) > 0 && tu_now() < t;)
            tu_sleep_ms(100);
        processes_naming(state, SIGKILL);
    }
    free(text);
    free(dlog);
    free(log);
    free(state);
    free(out);
    free(spec);
}

Test(run, sigint_to_make_alone_stops_the_night) {
    signal_make_alone(SIGINT);
}

Test(run, sigterm_to_make_alone_stops_the_night) {
    signal_make_alone(SIGTERM);
}

/* `make ARGS...` in the source tree with its output captured (make's own
 * variables from the test run's make removed); the exit code. */
static int run_make(tu_run_t *r, const char *target, const char *state_arg) {
    char *const argv[] = {
        "/usr/bin/make",   "-C", (char *)tu_src(), "--no-print-directory", (char *)target,
        (char *)state_arg, NULL};
    tu_run(r, argv, 90);
    cr_assert(!r->timed_out, "make %s ran past 90 s:\n%s\n%s", target, r->out, r->err);
    return r->exit_code;
}

/* How many processes are in session sid. */
static int session_size(pid_t sid) {
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;
    cr_assert(d);
    while ((e = readdir(d))) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        pid_t pid = (pid_t)atol(e->d_name);
        if (getsid(pid) == sid) n++;
    }
    closedir(d);
    return n;
}

/* make start from a shell in a session of its own that then exits, as a
 * logged-out terminal's: the night runs on (status says so, the daemon
 * answers), a second start is refused, a stale pid file is removed, and make
 * stop leaves nothing of the night running. */
Test(run, make_start_outlives_its_shell_and_make_stop_ends_it) {
    char *want = tu_path("%s/build/nightshift", tu_src());
    if (strcmp(tu_bin(), want))
        cr_skip_test("make start builds %s; this build is %s", want, tu_bin());
    free(want);
    char *state = tu_path("%s/state", tu_dir()), *out = tu_path("%s/start.out", tu_dir());
    char *spec = tu_path("%s/quick.json", tu_dir()), *pidfile = tu_path("%s/nightshift.pid", state);
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "default");
    tu_write(spec, "{\"name\":\"quick\",\"seed\":1,\"token_budget\":65536,"
                   "\"model\":{\"depth\":1,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
                   "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128},"
                   "\"resources\":{\"threads\":1}}");
    char port[16], agent_port[16], state_arg[4200], url[64];
    snprintf(port, sizeof port, "%d", free_port());
    snprintf(agent_port, sizeof agent_port, "%d", free_port());
    snprintf(state_arg, sizeof state_arg, "STATE=%s", state);
    snprintf(url, sizeof url, "http://127.0.0.1:%s", port);
    unsetenv("MAKEFLAGS");
    unsetenv("MFLAGS");
    unsetenv("MAKELEVEL");
    setenv("NIGHTSHIFT_PORT", port, 1);
    setenv("NIGHTSHIFT_AGENT_PORT", agent_port, 1);
    setenv("NIGHTSHIFT_SLOTS", "1", 1);
    setenv("NIGHTSHIFT_BASELINE", spec, 1);

    /* a pid file left by a night that was killed: a process that has exited */
    pid_t dead = fork();
    cr_assert(dead >= 0);
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    char text[32];
    snprintf(text, sizeof text, "%d\n", (int)dead);
    tu_write(pidfile, text);
    tu_run_t r;
    cr_expect_neq(run_make(&r, "status", state_arg), 0, "status of a stale pid file: %s", r.out);
    cr_expect(strstr(r.out, "not running"), "%s", r.out);
    tu_run_free(&r);

    pid_t shell = fork();
    cr_assert(shell >= 0);
    if (shell == 0) { /* a login shell's session: it starts the night and exits */
        setsid();
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0 || chdir(tu_src()) < 0) _exit(127);
        char cmd[8400];
        snprintf(cmd, sizeof cmd, "make --no-print-directory start '%s'; echo \"start exited $?\"",
                 state_arg);
        execl("/bin/bash", "bash", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int status = 0, gone = 0;
    for (double t = tu_now() + 90; tu_now() < t; tu_sleep_ms(100))
        if (waitpid(shell, &status, WNOHANG) == shell) {
            gone = 1;
            break;
        }
    if (!gone) {
        kill(-shell, SIGKILL);
        waitpid(shell, NULL, 0);
    }
    char *said = tu_read(out);
    cr_assert(gone, "the shell running make start did not exit: %s", said);
    cr_assert(said && strstr(said, "start exited 0"), "%s", said);
    cr_expect(strstr(said, "removing a stale pid file"), "%s", said);
    char *pid_text = tu_read(pidfile);
    cr_assert(pid_text, "no pid file after make start: %s", said);
    pid_t night = (pid_t)atol(pid_text);
    cr_assert_gt(night, 1);
    cr_expect_neq(night, dead);
    tu_sleep_ms(1000); /* the shell's session is gone; the night must not be */
    cr_expect_eq(kill(night, 0), 0, "the night ended with its shell: %s", said);
    cr_expect_eq(getsid(night), night, "the night is not in a session of its own");
    cr_expect_neq(getsid(night), getsid(0));
    cr_expect_gt(session_size(night), 2, "the night runs the agent and the daemon too");

    cr_expect_eq(run_make(&r, "status", state_arg), 0, "status: %s %s", r.out, r.err);
    cr_expect(strstr(r.out, "is running"), "%s", r.out);
    tu_run_free(&r);
    tu_run_bin_exit(0, 30, "watch", "--once", "--url", url, NULL);
    cr_expect_neq(run_make(&r, "start", state_arg), 0, "a second start: %s", r.out);
    cr_expect(strstr(r.err, "already running"), "%s %s", r.out, r.err);
    tu_run_free(&r);

    double sent = tu_now();
    cr_expect_eq(run_make(&r, "stop", state_arg), 0, "stop: %s %s", r.out, r.err);
    cr_expect(strstr(r.out, "stopped"), "%s", r.out);
    tu_run_free(&r);
    cr_expect_lt(tu_now() - sent, 30, "stopping took %.1f s", tu_now() - sent);
    cr_expect_eq(session_size(night), 0, "something of the night outlived make stop");
    cr_expect_eq(processes_naming(state, 0), 0, "something of the night outlived make stop");
    cr_expect(access(pidfile, F_OK) != 0, "the pid file outlived make stop");
    char *log = tu_path("%s/daemon.log", state), *dlog = tu_read(log);
    cr_expect(dlog && strstr(dlog, "info  stopped\n"), "the daemon did not stop cleanly: %s", dlog);
    cr_expect_neq(run_make(&r, "status", state_arg), 0, "status after stop: %s", r.out);
    tu_run_free(&r);
    if (session_size(night) > 0) { /* leave nothing running for the next test */
        kill(-night, SIGKILL);
        processes_naming(state, SIGKILL);
    }
    free(dlog);
    free(log);
    free(pid_text);
    free(said);
    free(pidfile);
    free(spec);
    free(out);
    free(state);
}

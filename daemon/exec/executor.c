/* executor.c - what every executor shares (see executor.h): the statuses'
 * names, the reading of one progress line, and the worker protocol's
 * classification of an ending (engine/protocol.h). */
#include "daemon/exec/executor.h"

#include <assert.h>
#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "daemon/store/store.h"
#include "engine/protocol.h"

double executor_floor(const executor_t *x, int threads) {
    return x && x->floor ? x->floor(x, threads) : 0;
}

const char *executor_status_name(executor_status s) {
    switch (s) {
    case EXECUTOR_SUCCEEDED:
        return STORE_SUCCEEDED;
    case EXECUTOR_FAILED:
        return STORE_FAILED;
    case EXECUTOR_CRASHED:
        return STORE_CRASHED;
    case EXECUTOR_TIMEOUT:
        return STORE_TIMEOUT;
    case EXECUTOR_OOM:
        return STORE_OOM;
    case EXECUTOR_DIVERGED:
        return STORE_DIVERGED;
    case EXECUTOR_CANCELLED:
        return STORE_CANCELLED;
    case EXECUTOR_INTERRUPTED:
        return STORE_INTERRUPTED;
    }
    return "unknown";
}

static const struct {
    int sig;
    const char *name;
} signal_names[] = {
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},       {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},     {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},     {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"},     {SIGTERM, "SIGTERM"}, {SIGSTKFLT, "SIGSTKFLT"},
    {SIGCHLD, "SIGCHLD"}, {SIGCONT, "SIGCONT"},     {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"},
    {SIGTTIN, "SIGTTIN"}, {SIGTTOU, "SIGTTOU"},     {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"},
    {SIGXFSZ, "SIGXFSZ"}, {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"},
    {SIGIO, "SIGIO"},     {SIGPWR, "SIGPWR"},       {SIGSYS, "SIGSYS"},
};

const char *executor_signal_name(int sig, char *buf, size_t len) {
    for (size_t i = 0; i < sizeof signal_names / sizeof signal_names[0]; i++)
        if (signal_names[i].sig == sig) return signal_names[i].name;
    snprintf(buf, len, "signal %d", sig);
    return buf;
}

int executor_progress_line(const char *p, size_t n, const executor_callbacks_t *cb,
                           cJSON **result) {
    while (n > 0 && isspace((unsigned char)p[n - 1])) n--;
    if (n == 0) return 0; /* blank lines are not garbage */
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(p, n, &end, 0);
    int ok = o && cJSON_IsObject(o) && end;
    for (const char *q = end; ok && q < p + n; q++) /* the object must be the whole line */
        if (!isspace((unsigned char)*q)) ok = 0;
    if (!ok) {
        cJSON_Delete(o);
        return -1;
    }
    if (cb->on_progress) cb->on_progress(o, cb->user);
    const char *ev = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, PROTO_KEY_EVENT));
    if (ev && !strcmp(ev, PROTO_EV_RESULT)) {
        cJSON_Delete(*result);
        *result = o;
    } else {
        cJSON_Delete(o);
    }
    return 0;
}

/* The result line's member key as a string, or NULL. */
static const char *result_str(const executor_facts_t *f, const char *key) {
    return f->result ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f->result, key))
                     : NULL;
}

/* Killed by a signal the daemon did not send: out of memory is what the
 * worker said on its progress stream before it died, or a SIGKILL while the
 * kernel's OOM-kill count rose; anything else is a crash. */
static void classify_signal(const executor_facts_t *f, const char *limit, executor_exit_t *ex) {
    char sigbuf[24];
    const char *sig = executor_signal_name(f->term_signal, sigbuf, sizeof sigbuf);
    const char *rs = result_str(f, PROTO_KEY_STATUS), *rr = result_str(f, PROTO_KEY_REASON);
    if (rs && !strcmp(rs, PROTO_OOM)) {
        ex->status = EXECUTOR_OOM;
        snprintf(ex->reason, sizeof ex->reason, "out of memory (%s); killed by %s%s%s", limit, sig,
                 rr ? ": " : "", rr ? rr : "");
    } else if (f->oom_killed && f->term_signal == SIGKILL) {
        ex->status = EXECUTOR_OOM;
        snprintf(ex->reason, sizeof ex->reason,
                 "out of memory (%s); killed by SIGKILL from the kernel's OOM killer", limit);
    } else {
        ex->status = EXECUTOR_CRASHED;
        snprintf(ex->reason, sizeof ex->reason, "killed by %s%s%s", sig, f->tail[0] ? ": " : "",
                 f->tail);
    }
}

/* Exited with code: the protocol's exit codes decide. */
static void classify_exit(const executor_facts_t *f, const char *limit, executor_exit_t *ex) {
    const char *rs = result_str(f, PROTO_KEY_STATUS), *rr = result_str(f, PROTO_KEY_REASON);
    const char *why = f->tail[0] ? f->tail : rr;
    switch (f->exit_code) {
    case PROTO_EXIT_OK:
        if (rs && !strcmp(rs, PROTO_SUCCEEDED)) {
            ex->status = EXECUTOR_SUCCEEDED;
            return;
        }
        ex->status = EXECUTOR_FAILED;
        if (f->result)
            snprintf(ex->reason, sizeof ex->reason, "exit %d but the result status is %s",
                     f->exit_code, rs ? rs : "missing");
        else
            snprintf(ex->reason, sizeof ex->reason, "exit %d without a result line", f->exit_code);
        return;
    case PROTO_EXIT_DIVERGED:
        ex->status = EXECUTOR_DIVERGED;
        if (rr || f->tail[0])
            snprintf(ex->reason, sizeof ex->reason, "%s", rr ? rr : f->tail);
        else
            snprintf(ex->reason, sizeof ex->reason, "exit %d (loss diverged)", f->exit_code);
        return;
    case PROTO_EXIT_OOM:
        ex->status = EXECUTOR_OOM;
        snprintf(ex->reason, sizeof ex->reason, "out of memory (%s)%s%s", limit, why ? ": " : "",
                 why ? why : "");
        return;
    default:
        ex->status = EXECUTOR_FAILED;
        if (why)
            snprintf(ex->reason, sizeof ex->reason, "exit %d: %s", f->exit_code, why);
        else
            snprintf(ex->reason, sizeof ex->reason, "exit %d (no error output)", f->exit_code);
    }
}

void executor_classify(const executor_facts_t *f, executor_exit_t *ex) {
    char limit[64];
    assert(f->tail && (!f->term_signal || f->exit_code == -1)); /* killed: no exit code */
    if (f->memory_mb > 0)
        snprintf(limit, sizeof limit, "limit %d MiB", f->memory_mb);
    else
        snprintf(limit, sizeof limit, "no memory limit set");
    ex->reason[0] = '\0';
    if (f->term_signal)
        classify_signal(f, limit, ex);
    else
        classify_exit(f, limit, ex);
}

int executor_env_is_secret(const char *entry) {
    static const char *const secrets[] = {"NIGHTSHIFT_TOKEN", "NIGHTSHIFT_AGENT_SECRET",
                                          "SLURM_JWT"};
    for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++) {
        size_t n = strlen(secrets[i]);
        if (!strncmp(entry, secrets[i], n) && (entry[n] == '=' || entry[n] == '\0')) return 1;
    }
    return 0;
}

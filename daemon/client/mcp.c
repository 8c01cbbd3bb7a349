/* mcp.c - `nightshift mcp`: the MCP server over stdio, for an MCP client
 * that starts it (one JSON-RPC message a line on stdin and stdout, logs on
 * stderr). It is a client of a running daemon's HTTP API, like the other
 * commands (conn.c): the server core (daemon/shared/mcp.h) asks the daemon
 * for everything, and its submissions are filed as source mcp. A pending wait is stepped every
 * MCP_WAIT_POLL_MS while stdin is read, so a ping or a cancellation is answered during it. */
#include "daemon/client/client.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/client/cmd.h"
#include "daemon/client/conn.h"
#include "daemon/shared/mcp.h"
#include "engine/util.h"

#define MAX_WAITS 16

static const cmd_help_t mcp_help = {
    "mcp", "",
    "Speak the Model Context Protocol on stdin and stdout (one JSON-RPC message a\n"
    "line) for an MCP client that starts this command, and drive the daemon at\n"
    "--url through its HTTP API: submit specs, estimate them, wait for results,\n"
    "read leaderboards, noise and differences. Experiments submitted here are\n"
    "filed as source mcp. Without --token or --token-file, the token is found in\n"
    "the state directory of a daemon on loopback, wherever this starts. The daemon\n"
    "also serves MCP itself, over HTTP at /mcp (daemon/README.md: MCP).\n"};

static int conn_call(void *user, const char *method, const char *path, const char *body,
                     char **out) {
    conn_t *c = user;
    conn_reply_t r;
    int rc = conn_request(c, method, path, body, body ? strlen(body) : 0, &r);
    if (rc != 0 && !c->http_status) {
        *out = strdup(c->said[0] ? c->said : "the daemon cannot be reached");
        return -1;
    }
    *out = r.body.data ? strndup(r.body.data, r.body.len) : strdup("");
    long status = r.status;
    conn_reply_free(&r);
    return *out ? (int)status : -1;
}

static void put(const char *msg) {
    fputs(msg, stdout);
    fputc('\n', stdout);
    fflush(stdout);
}

typedef struct {
    mcp_server_t *server;
    mcp_backend_t b;
    mcp_wait_t *waits[MAX_WAITS];
    int n_waits;
    double next_step;
} stdio_t;

static void one_message(stdio_t *io, const char *line, size_t len) {
    char *reply = NULL;
    mcp_wait_t *w = NULL;
    mcp_out_t out = mcp_handle(io->server, &io->b, line, len, &reply, &w);
    if (out == MCP_OUT_PENDING) {
        if (io->n_waits == MAX_WAITS) { /* stepped once now; the oldest keep their turn */
            char *msg = NULL;
            while (!mcp_wait_step(io->server, w, &io->b, &msg)) free(msg), usleep(200000);
            if (msg) put(msg);
            free(msg);
        } else {
            io->waits[io->n_waits++] = w;
        }
    }
    if (reply) put(reply);
    free(reply);
}

static void step_waits(stdio_t *io) {
    if (util_now() < io->next_step) return;
    io->next_step = util_now() + MCP_WAIT_POLL_MS / 1000.0;
    for (int i = 0; i < io->n_waits;) {
        char *msg = NULL;
        int done = mcp_wait_step(io->server, io->waits[i], &io->b, &msg);
        if (msg) put(msg);
        free(msg);
        if (done)
            io->waits[i] = io->waits[--io->n_waits];
        else
            i++;
    }
}

/* Read stdin line by line until it ends; a line over MCP_MAX_MESSAGE is
 * answered with an error and skipped. */
static int serve_stdio(stdio_t *io) {
    size_t cap = MCP_MAX_MESSAGE + 2, len = 0;
    char *buf = malloc(cap);
    int skipping = 0;
    if (!buf) return CLIENT_EXIT_API;
    for (;;) {
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        int r = poll(&p, 1, io->n_waits ? 200 : -1);
        if (r < 0 && errno != EINTR) break;
        if (io->n_waits) step_waits(io);
        if (r <= 0) continue;
        ssize_t got = read(STDIN_FILENO, buf + len, cap - 1 - len);
        if (got <= 0) break;
        len += (size_t)got;
        char *nl;
        while ((nl = memchr(buf, '\n', len))) {
            size_t n = (size_t)(nl - buf);
            if (!skipping && n > 0) one_message(io, buf, n);
            skipping = 0;
            memmove(buf, nl + 1, len - n - 1);
            len -= n + 1;
        }
        if (len == cap - 1) { /* no newline within the limit */
            if (!skipping) one_message(io, buf, MCP_MAX_MESSAGE + 1);
            skipping = 1;
            len = 0;
        }
    }
    free(buf);
    return 0;
}

int mcp_main(int argc, char **argv) {
    conn_opts_t o = {0};
    conn_t c = {.source = "mcp", .find_token = 1};
    int rc;
    if (!cmd_parse_args(argc, argv, &mcp_help, &o, NULL, NULL, &rc)) return rc;
    if ((rc = conn_open(&c, &o, &mcp_help)) != 0) return rc;
    c.quiet = 1;
    c.keep_errors = 1;
    stdio_t io = {.server = mcp_server_new(), .b = {.call = conn_call, .user = &c}};
    rc = io.server ? serve_stdio(&io) : CLIENT_EXIT_API;
    mcp_server_free(io.server);
    conn_close(&c);
    return rc;
}

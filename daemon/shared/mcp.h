/* mcp.h - the Model Context Protocol server, free of any transport.
 *
 * One JSON-RPC 2.0 message in, at most one message out (plus progress
 * notifications while a wait is pending). The server knows the daemon only
 * through a backend: one call per HTTP API request (method, path with query,
 * body). `nightshift mcp` (daemon/client/mcp.c) implements it over HTTP to a
 * running daemon and speaks MCP over stdio; the daemon (daemon/serve/mcp_http.c)
 * implements it by calling its own API in process and serves the Streamable
 * HTTP transport at /mcp. No call here blocks or sleeps: the wait tool is a
 * pending call that its transport advances with mcp_wait_step on a timer.
 *
 * Protocol revision MCP_PROTOCOL_VERSION (what @modelcontextprotocol/sdk
 * 1.32.2 speaks as its latest); an initialize asking for an older revision
 * this server also speaks gets that one. JSON-RPC batches (arrays) were
 * removed from MCP in 2025-06-18: an array is answered with one Invalid
 * Request error. */
#ifndef NIGHTSHIFT_MCP_H
#define NIGHTSHIFT_MCP_H

#include <stddef.h>

struct cJSON;

#define MCP_PROTOCOL_VERSION  "2025-11-25"
#define MCP_MAX_MESSAGE       (1 << 20) /* bytes of one message accepted */
#define MCP_WAIT_POLL_MS      1000      /* how often a transport steps a pending wait */
#define MCP_WAIT_MAX_S        3600      /* the longest timeout_s a wait call may give */
#define MCP_WAIT_CALL_S       45        /* the longest one wait call lasts (clients: 60 s) */
#define MCP_LIST_DEFAULT      20        /* list_experiments' page without a limit */
#define MCP_METRIC_POINTS     50        /* get_experiment's metrics rows by default */
#define MCP_METRIC_POINTS_MAX 5000      /* and at most (the API's bound) */

/* JSON-RPC error codes */
#define MCP_PARSE_ERROR      (-32700)
#define MCP_INVALID_REQUEST  (-32600)
#define MCP_METHOD_NOT_FOUND (-32601)
#define MCP_INVALID_PARAMS   (-32602)
#define MCP_INTERNAL_ERROR   (-32603)

/* One HTTP API request: method "GET" or "POST", path with its query, body
 * (JSON text, POST only, may be NULL). Returns the HTTP status with *out the
 * reply body (malloc'd, NUL-terminated, the caller frees), or a negative
 * number when the daemon could not be asked, *out then a message. */
typedef struct {
    int (*call)(void *user, const char *method, const char *path, const char *body, char **out);
    void *user;
} mcp_backend_t;

typedef struct mcp_server mcp_server_t;
typedef struct mcp_wait mcp_wait_t;

/* What mcp_handle produced. */
typedef enum {
    MCP_OUT_NONE,    /* a notification or a response: nothing to send */
    MCP_OUT_REPLY,   /* *reply is the response */
    MCP_OUT_INVALID, /* *reply is the error for a message that is no valid request */
    MCP_OUT_PENDING, /* *wait was started: step it every MCP_WAIT_POLL_MS */
} mcp_out_t;

/* A server (its pending waits and its initialize state); NULL when out of
 * memory. Freed with mcp_server_free, which also frees every pending wait. */
mcp_server_t *mcp_server_new(void);
void mcp_server_free(mcp_server_t *s);

/* Handle one message of len bytes. *reply (malloc'd, the caller frees) or
 * *wait (owned by s, ended by mcp_wait_step or mcp_wait_drop) per the result. */
mcp_out_t mcp_handle(mcp_server_t *s, const mcp_backend_t *b, const char *msg, size_t len,
                     char **reply, mcp_wait_t **wait);

/* Advance w: asks the backend once. Returns 0 while pending, with *msg a
 * progress notification to send (or NULL when nothing moved); 1 when it
 * ended, with *msg its response (NULL when the client cancelled it), and w
 * freed. */
int mcp_wait_step(mcp_server_t *s, mcp_wait_t *w, const mcp_backend_t *b, char **msg);

/* Forget w (its transport is gone). */
void mcp_wait_drop(mcp_server_t *s, mcp_wait_t *w);

/* What a transport that learns of experiments ending (the daemon's own)
 * needs to step w only when something can have changed: whether its client
 * asked for progress notifications (a progressToken: step it every
 * MCP_WAIT_POLL_MS while it waits), and when it times out (util_now()
 * seconds; step it then). */
int mcp_wait_wants_progress(const mcp_wait_t *w);
double mcp_wait_deadline(const mcp_wait_t *w);

/* Whether this server speaks protocol revision v ("2025-11-25"). */
int mcp_version_supported(const char *v);

/* The spec's JSON Schema as the schema resource serves it (malloc'd text). */
char *mcp_spec_schema_text(void);

/* The research-night prompt's text (static; the README's MCP section says it
 * in the same words). */
extern const char mcp_night_prompt[];

#endif

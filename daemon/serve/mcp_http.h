/* mcp_http.h - the daemon's MCP endpoint: the Streamable HTTP transport at
 * /mcp over the transport-free server of daemon/shared/mcp.h, whose backend
 * calls the daemon's own API in process (never over a socket, so nothing
 * waits on the loop it runs on).
 *
 *   POST /mcp    one JSON-RPC message: a request gets its response as JSON
 *                (200); a notification or a response gets 202; a message
 *                that is no valid request gets 400 with a JSON-RPC error. A
 *                wait tool call gets a Server-Sent Events response: progress
 *                notifications while its experiments train, then its result.
 *   GET, DELETE  405: the server is stateless (no Mcp-Session-Id is issued,
 *                so there is no session to end and no stream of server
 *                requests to open).
 *
 * An MCP-Protocol-Version header naming a revision the server does not speak
 * is refused with 400. The gate in front of the API (api_guard: Host,
 * Origin, Content-Type, the token) guards /mcp alike, and the calls a tool
 * makes carry the request's own credentials through it again. */
#ifndef NIGHTSHIFT_MCP_HTTP_H
#define NIGHTSHIFT_MCP_HTTP_H

#include <uv.h>

#include "daemon/serve/api.h"
#include "daemon/shared/http.h"

typedef struct mcp_http mcp_http_t;

/* The endpoint over api (borrowed; outlives it). NULL when out of memory. */
mcp_http_t *mcp_http_new(uv_loop_t *loop, api_t *api);

/* Free m; its waits' streams must have closed (http_server_close first). */
void mcp_http_free(mcp_http_t *m);

/* An experiment ended or was cancelled: step every wait now (on the loop's next turn); its
 * waits are stepped otherwise only at their deadlines and, for a client
 * that asked for progress, every MCP_WAIT_POLL_MS. m may be NULL. */
void mcp_http_wake(mcp_http_t *m);

/* /mcp's gate (the server's authorize callback for /mcp, and the
 * handler's first step): Origin and Host as everywhere, then the token,
 * except that a client offering none gets in where reads are open (a
 * loopback listener; its writes are refused as tool errors). A refusal is a
 * JSON-RPC error, 401 with WWW-Authenticate. Returns 0 or the status. */
int mcp_http_guard(const api_t *api, const http_request_t *req, http_response_t *res);

/* The handler of /mcp. */
void mcp_http_handle(mcp_http_t *m, const http_request_t *req, http_response_t *res);

#endif

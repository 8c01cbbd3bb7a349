/* curl_uv.h - libcurl multi on a libuv loop, for the daemon's HTTP clients
 * (the hook, hook.c; slurmrestd, slurm.c).
 *
 * The libcurl multi_socket way: curl says which sockets to watch (one
 * uv_poll each) and when to wake it (one uv_timer); the loop calls
 * curl_multi_socket_action, then the owner's progress callback, which
 * collects finished transfers with curl_multi_info_read. Nothing blocks.
 *
 * Ownership: the owner adds and removes its easy handles on curl_uv_multi.
 * curl_uv_close cleans the multi up (remove the easy handles first) and
 * closes the handles; closed(arg) runs once the last one has closed, and
 * the curl_uv_t is freed then. */
#ifndef NIGHTSHIFT_CURL_UV_H
#define NIGHTSHIFT_CURL_UV_H

#include <curl/curl.h>
#include <uv.h>

typedef struct curl_uv curl_uv_t;

/* After every curl_multi_socket_action: collect what finished. */
typedef void (*curl_uv_progress_fn)(void *arg);

/* A multi on loop with its timer. NULL when out of memory. */
curl_uv_t *curl_uv_new(uv_loop_t *loop, curl_uv_progress_fn progress, void *arg);

CURLM *curl_uv_multi(const curl_uv_t *c);

/* Clean the multi up and close every handle; closed(arg) (may be NULL) runs
 * from the loop when the last has closed. No progress call after this. */
void curl_uv_close(curl_uv_t *c, void (*closed)(void *arg), void *arg);

#endif

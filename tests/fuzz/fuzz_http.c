/* fuzz_http.c - the HTTP request layer and the API router: raw bytes (one or
 * more pipelined requests) through the server's parser, limits, token check
 * and api_handle, as a connection would feed them (http_feed_raw), with a
 * real store in a scratch directory. The scheduler is stopped before the
 * first input, so a spec that is queued never starts a process. Properties:
 * whatever comes in, something goes out, and it starts as an HTTP/1.1
 * response. */
#include <sys/stat.h>
#include <uv.h>

#include "daemon/serve/api.h"
#include "tests/fuzz/fuzz.h"
#include "daemon/shared/http.h"
#include "daemon/shared/log.h"
#include "daemon/exec/sched.h"
#include "daemon/store/store.h"
#include "engine/util.h"

#define TOKEN "fuzz-token" /* the seeds' Authorization: Bearer fuzz-token */

static api_t api;
static core_t core;
static uv_loop_t loop;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char path[256], err[512];
    store_t *store = NULL;
    log_threshold = LOG_ERROR;
    const char *dir = fuzz_dir();
    /* The dataset "fuzz" exists (the API checks only that its manifest does). */
    snprintf(path, sizeof path, "%s/datasets/fuzz", dir);
    if (util_mkdirs(path, err, sizeof err) < 0) goto fail;
    snprintf(path, sizeof path, "%s/datasets/fuzz/manifest.json", dir);
    fuzz_write(path, "{}", 2);
    snprintf(path, sizeof path, "%s/runs", dir);
    if (util_mkdirs(path, err, sizeof err) < 0) goto fail;
    snprintf(path, sizeof path, "%s/nightshift.db", dir);
    if (store_open(path, &store, err, sizeof err) < 0) goto fail;
    uv_loop_init(&loop);
    sched_opts_t so = {.state_dir = dir, .exe = "/proc/self/exe", .slots = 2};
    sched_t *sched = sched_new(&loop, store, &so, err, sizeof err);
    if (!sched) goto fail;
    sched_shutdown(sched, NULL, NULL); /* nothing runs: sched_kick does nothing */
    core = (core_t){.store = store, .sched = sched, .state_dir = dir};
    api = (api_t){.store = store,
                  .core = &core,
                  .sched = sched,
                  .state_dir = dir,
                  .token = TOKEN,
                  .started_at = util_now()};
    return 0;
fail:
    fprintf(stderr, "fuzz_http: %s\n", err);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *out = NULL;
    size_t n = 0;
    /* The first byte chooses whether reads are guarded (a daemon off loopback). */
    api.guard_reads = size > 0 && (data[0] & 1);
    http_feed_raw((const char *)data, size, api_handle, api_authorize, &api, &out, &n);
    FUZZ_CHECK(n == 0 || (n >= 12 && !memcmp(out, "HTTP/1.1 ", 9)), "not a response: %.*s",
               (int)(n < 200 ? n : 200), out);
    free(out);
    return 0;
}

/* offline.h - the API's answer to a GET from a state directory's database,
 * opened read-only, for when no daemon runs: the client's best, leaderboard,
 * ls, show and report ask here when nothing answers at their URL (main.c
 * hands offline_get to the client through conn_set_offline), so the answer
 * is built by the daemon's own handlers (api.c) from the same store queries,
 * and says the same. Nothing is written: no queue, no scheduler (a running
 * experiment's progress is null), no exports. */
#ifndef NIGHTSHIFT_OFFLINE_H
#define NIGHTSHIFT_OFFLINE_H

#include <stddef.h>

/* The API's answer to GET path (with its query, "/v1/best?dataset=d") from
 * state_dir/nightshift.db: 0 with *status and *body (malloc'd, owned by the
 * caller, NUL-terminated, *len bytes), or -1 with err when there is no
 * database there or it cannot be opened read-only. */
int offline_get(const char *state_dir, const char *path, long *status, char **body, size_t *len,
                char *err, size_t errlen);

#endif

/* admit.c - a submission's admission (core.h): the spec parser's rules, then
 * what only the daemon knows, then the queue. */
#include "daemon/core/core.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/cost.h"
#include "engine/data.h"
#include "engine/util.h"
#include "daemon/exec/executor.h"
#include "daemon/shared/log.h"

int core_dataset_exists(const core_t *c, const char *name) {
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/datasets/%s/manifest.json", c->state_dir, name);
    if (stat(path, &st) < 0) return 0;
    return S_ISREG(st.st_mode) ? 1 : -1;
}

/* Whether s can run at all: its estimated memory (cost_memory, from the
 * dataset's vocabulary and size in info) against what one worker may use (the
 * spec's resources.memory_mb capped by the daemon's limit, as sched.c applies
 * it; with no limit, the machine's RAM). A local worker's limit is on
 * address space, so under one the run also needs the engine's floor for its
 * threads (what OpenBLAS and OpenMP map per thread, measured at start,
 * asked of the executor: executor_floor) and a margin (engine/cost.h's
 * cost_admit, which `nightshift cost` shares); a Slurm job's --mem is on
 * resident memory (no floor). Returns 0, or -1 with the numbers in err. */
static int check_fits(const core_t *c, const spec_t *s, const data_info_t *info, char *err,
                      size_t errlen) {
    spec_model_t m = s->model;
    if (m.vocab_size <= 0) m.vocab_size = info->vocab_size;
    cost_mem_t mem;
    cost_memory(&m, s->train.batch_size, info->train_tokens + info->val_tokens + info->test_tokens,
                s->train.precision, &mem);
    const char *source;
    double limit = cost_worker_limit(s->resources.memory_mb, c->memory_mb, &source);
    int limited = s->resources.memory_mb > 0 || c->memory_mb > 0;
    int threads = s->resources.threads > 0 ? s->resources.threads
                  : c->sched               ? sched_default_threads(c->sched)
                                           : 1;
    double floor = limited && c->sched ? executor_floor(sched_executor(c->sched), threads) : 0;
    return cost_admit(&mem, &m, s->train.batch_size, limit, source, floor, threads, err, errlen);
}

int core_check_spec(const core_t *c, const cJSON *spec_json, spec_t *s, store_scope_t *sc,
                    char *err, size_t errlen) {
    int rc = spec_from_json(spec_json, s, err, errlen);
    if (rc < 0) return -1;
    rc = -1;
    int exists = core_dataset_exists(c, s->dataset);
    if (exists <= 0) {
        if (exists < 0)
            snprintf(err, errlen, "dataset: the manifest of '%s' is not a regular file",
                     s->dataset);
        else
            snprintf(err, errlen,
                     "dataset: no dataset named '%s' (prepare it with nightshift prep)",
                     s->dataset);
        goto fail;
    }
    int max_threads = c->sched ? sched_max_threads(c->sched) : 0;
    if (max_threads > 0 && s->resources.threads > max_threads) {
        snprintf(err, errlen,
                 "resources.threads: %d is more than a slot's %d (its CPUs, or --threads-per-slot)",
                 s->resources.threads, max_threads);
        goto fail;
    }
    if (s->parent > 0) {
        char serr[256];
        cJSON *p = NULL;
        int got = store_get(c->store, s->parent, 0, &p, serr, sizeof serr);
        cJSON_Delete(p);
        if (got < 0) {
            rc = got == NS_ERR_NOT_FOUND ? NS_ERR_NOT_FOUND : NS_ERR_IO;
            if (rc == NS_ERR_NOT_FOUND)
                snprintf(err, errlen, "parent: experiment %lld does not exist",
                         (long long)s->parent);
            else
                snprintf(err, errlen, "store: %s", serr);
            goto fail;
        }
    }
    data_info_t info;
    char derr[256];
    int have_info = data_info(c->state_dir, s->dataset, &info, derr, sizeof derr) == 0;
    if (have_info && check_fits(c, s, &info, err, errlen) < 0) {
        rc = NS_ERR_DOES_NOT_FIT;
        goto fail;
    }
    if (sc) spec_scope_on(s, have_info ? info.val_tokens : -1, sc);
    return 0;
fail:
    spec_free(s);
    return rc;
}

int core_submit(core_t *c, const cJSON *spec_json, const char *source, int force, int64_t *id,
                int *duplicate, char *err, size_t errlen) {
    spec_t s;
    store_scope_t sc;
    store_asha_t asha;
    char hash[SPEC_HASH_HEX], full_hash[SPEC_HASH_HEX], serr[256];
    char *canon = NULL, *tags = NULL;
    int rc = core_check_spec(c, spec_json, &s, &sc, err, errlen);
    int mcp = !strcmp(source, "mcp"); /* an agent that came over MCP */
    if (rc < 0) return rc;
    /* Under --prune asha the run is queued at the lowest rung's budget (sched.h). */
    int on_ladder = c->sched ? sched_asha_file(c->sched, &s, &asha, full_hash, err, errlen) : 0;
    if (on_ladder < 0) {
        spec_free(&s);
        return NS_ERR_NOMEM;
    }
    if (on_ladder) { /* its scope's budget is rung 0's; the evaluation as filed */
        store_scope_t r0;
        spec_scope(&s, &r0);
        sc.budget = r0.budget;
    }
    rc = NS_ERR_NOMEM;
    canon = spec_canonical_json(&s);
    cJSON *tag_arr = cJSON_CreateArray();
    for (int i = 0; i < s.n_tags; i++) cJSON_AddItemToArray(tag_arr, cJSON_CreateString(s.tags[i]));
    tags = cJSON_PrintUnformatted(tag_arr);
    cJSON_Delete(tag_arr);
    if (!canon || !tags || spec_config_hash(&s, hash) < 0) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    *duplicate = 0;
    if (!force) {
        int found = store_find_duplicate(c->store, hash, (int64_t)s.seed, sc.eval_tokens, id, serr,
                                         sizeof serr);
        if (found < 0) {
            snprintf(err, errlen, "store: %s", serr);
            rc = NS_ERR_IO;
            goto done;
        }
        if (found) {
            *duplicate = 1;
            rc = 0;
            goto done;
        }
    }
    store_new_experiment_t e = {.name = s.name,
                                .tags_json = tags,
                                .spec_json = canon,
                                .config_hash = hash,
                                .seed = (int64_t)s.seed,
                                .parent = s.parent,
                                .source = mcp ? "mcp" : source,
                                .via = mcp                        ? "mcp"
                                       : !strcmp(source, "agent") ? "webhook"
                                                                  : NULL,
                                .priority = s.priority,
                                .scope = sc,
                                .asha = on_ladder ? &asha : NULL};
    if (store_insert(c->store, &e, id, serr, sizeof serr) < 0) {
        snprintf(err, errlen, "%s", serr);
        rc = NS_ERR_IO;
        goto done;
    }
    log_info("experiment %lld queued (%s%s%s, from %s)", (long long)*id, s.name ? "\"" : "",
             s.name ? s.name : "unnamed", s.name ? "\"" : "", source);
    rc = 0;
done:
    spec_free(&s);
    free(canon);
    free(tags);
    return rc;
}

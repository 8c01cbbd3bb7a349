/* test_bridge.c - the Optuna bridge (experiments/bridges/optuna_bridge.py)
 * as a user runs it: /usr/bin/python3, against a daemon on loopback.
 *
 * Without Optuna (CI need not have python3-optuna): the space file drives
 * the bridge's specs (an axis appended to a copy of experiments/search/space.json
 * is read, written into the base spec with its "also" paths and the derived
 * micro-batch, a conditional axis left out of the point define-by-run and
 * the base's value kept where it is inactive), and a bad space file is
 * refused with the axis named.
 * Also without Optuna: a wrong token, a refused base spec and a daemon that
 * is not there are said before anything is asked.
 * With Optuna (tests that need it skip with a message otherwise): an axis
 * added to the space file is proposed on every trial that reaches the daemon
 * (whose worker is the bad-worker stand-in: no training); a spec the daemon
 * refuses is told FAIL with its code and the loop goes on; and the pruner's
 * cancel path cancels a running experiment of the real engine (its status
 * via the API becomes cancelled before its budget is trained). */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testutil.h"

#define PY       "/usr/bin/python3"
#define BRIDGE_S 60.0 /* hard limit of one bridge run */
#define TOKEN    "bridge-test-token"
#define ADDED    "{\"path\": \"model.mlp_ratio\", \"type\": \"int\", \"values\": [3]}"

static void setup(void) {
    tu_dir_init();
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void teardown(void) {
    curl_global_cleanup();
    tu_dir_fini();
}

TestSuite(bridge, .init = setup, .fini = teardown, .timeout = 90);

static char *bridge_path(void) {
    return tu_path("%s/experiments/bridges/optuna_bridge.py", tu_src());
}

/* The number of axes of the repository's space file. */
static int repo_axes(void) {
    char *src = tu_path("%s/experiments/search/space.json", tu_src());
    char *text = tu_read(src);
    cJSON *doc = cJSON_Parse(text);
    cr_assert_not_null(doc, "%s is not JSON", src);
    int n = cJSON_GetArraySize(cJSON_GetObjectItem(doc, "axes"));
    cJSON_Delete(doc);
    free(text);
    free(src);
    return n;
}

/* The repository's space file with one more axis appended, at path. */
static void write_space_plus(const char *path, const char *axis) {
    char *src = tu_path("%s/experiments/search/space.json", tu_src());
    char *text = tu_read(src);
    cJSON *doc = cJSON_Parse(text);
    cr_assert_not_null(doc, "%s is not JSON", src);
    cJSON *ax = cJSON_Parse(axis);
    cr_assert_not_null(ax);
    cJSON_AddItemToArray(cJSON_GetObjectItem(doc, "axes"), ax);
    char *out = cJSON_Print(doc);
    tu_write(path, out);
    free(out);
    cJSON_Delete(doc);
    free(text);
    free(src);
}

static int have_optuna(void) {
    char *const argv[] = {PY, "-c", "import optuna", NULL};
    tu_run_t r;
    tu_run(&r, argv, 30);
    int ok = !r.timed_out && r.exit_code == 0;
    tu_run_free(&r);
    return ok;
}

#define NEED_OPTUNA()                                                                              \
    do {                                                                                           \
        if (!have_optuna())                                                                        \
            cr_skip_test("python3-optuna is not installed (scripts/setup.sh --bench): the "        \
                         "bridge's Optuna loop is not tested");                                    \
    } while (0)

/* Run the bridge with args (NULL-terminated, at most 40); r captures it. */
static void run_bridge(tu_run_t *r, const char *const *args) {
    char *script = bridge_path();
    char *argv[48] = {PY, script};
    int n = 2;
    for (int i = 0; args[i] && n < 46; i++) argv[n++] = (char *)args[i];
    argv[n] = NULL;
    tu_run(r, argv, BRIDGE_S);
    cr_assert(!r->timed_out, "the bridge ran past %.0f s:\n%s", BRIDGE_S, r->err);
    free(script);
}

/* ---------------------------------------------------- the space, no Optuna */

Test(bridge, the_space_file_drives_the_specs_without_optuna) {
    char *space = tu_path("%s/space.json", tu_dir());
    write_space_plus(space, ADDED);
    /* --check-space lists every axis of the file, the added one with them */
    const char *check[] = {"--check-space", "--space", space, NULL};
    tu_run_t r;
    run_bridge(&r, check);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cJSON *axes = cJSON_Parse(r.out);
    cr_assert(cJSON_IsArray(axes), "%s", r.out);
    int n = repo_axes();
    cr_expect_eq(cJSON_GetArraySize(axes), n + 1);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(axes, n), "path")->valuestring,
                     "model.mlp_ratio");
    cJSON_Delete(axes);
    tu_run_free(&r);

    /* A point written into the baseline the way the agent writes one: the
     * axes and their also paths, then the derived micro-batch (1,024 tokens
     * a step of 256-token rows: 4 rows, so 4 of the base's 16); ve_layers
     * none leaves ve_gate_channels (written 64) inactive: the base's 32. */
    char *code = tu_path("import json, sys; sys.path.insert(0, '%s/experiments/bridges');"
                         "import nightshift_optuna as ns;"
                         "base = json.load(open('%s/experiments/specs/baseline.json'));"
                         "sp = ns.load_space('%s', base=base);"
                         "pt = {'model.n_head': 4, 'train.total_batch_tokens': 1024,"
                         "      'model.mlp_ratio': 3, 'train.matrix_lr': 0.05,"
                         "      'model.ve_layers': 'none', 'model.ve_gate_channels': 64};"
                         "print(json.dumps(sp.apply(pt)))",
                         tu_src(), tu_src(), space);
    char *const argv[] = {PY, "-c", code, NULL};
    tu_run(&r, argv, 30);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cJSON *spec = cJSON_Parse(r.out);
    cr_assert_not_null(spec, "%s", r.out);
    cJSON *model = cJSON_GetObjectItem(spec, "model"), *train = cJSON_GetObjectItem(spec, "train");
    cr_expect_eq(tu_jnum(model, "mlp_ratio"), 3, "the added axis is written");
    cr_expect_eq(tu_jnum(model, "n_head"), 4);
    cr_expect_eq(tu_jnum(model, "n_kv_head"), 4, "also: n_head to n_kv_head");
    cr_expect_eq(tu_jnum(train, "total_batch_tokens"), 1024, "tokens per step as the point says");
    cr_expect_eq(tu_jnum(train, "batch_size"), 4, "the derived micro-batch: 1024 / 256 rows");
    cr_expect_str_eq(tu_jstr(model, "ve_layers"), "none");
    cr_expect_eq(tu_jnum(model, "ve_gate_channels"), 32, "an inactive axis keeps the base's");
    cr_expect_float_eq(tu_jnum(train, "matrix_lr"), 0.05, 1e-12);
    cr_expect_eq(tu_jnum(model, "depth"), 4, "an axis the point leaves out keeps the base's");
    cJSON_Delete(spec);
    tu_run_free(&r);
    free(code);

    /* Define-by-run: a stand-in trial that takes each axis's first value
     * (ve_layers none, warmdown_ratio 0) is asked for no axis whose
     * condition is then false; with the second values it is asked for them. */
    char *cond = tu_path("%s/cond.json", tu_dir());
    tu_write(cond,
             "{\"axes\": ["
             "{\"path\": \"model.ve_layers\", \"type\": \"choice\", \"values\": [\"none\", "
             "\"alternate\"]},"
             "{\"path\": \"model.ve_gate_channels\", \"type\": \"int\", \"values\": [8, 16],"
             " \"when\": {\"path\": \"model.ve_layers\", \"not\": [\"none\"]}},"
             "{\"path\": \"train.value_embedding_lr\", \"type\": \"float\", \"low\": 0.1,"
             " \"high\": 1, \"when\": {\"path\": \"model.ve_layers\", \"in\": [\"alternate\"]}},"
             "{\"path\": \"train.warmdown_ratio\", \"type\": \"float\", \"values\": [0, 0.5]},"
             "{\"path\": \"train.final_lr_frac\", \"type\": \"float\", \"values\": [0, 0.1],"
             " \"when\": {\"path\": \"train.warmdown_ratio\", \"above\": 0}}]}");
    code = tu_path("import json, sys; sys.path.insert(0, '%s/experiments/bridges');"
                   "import nightshift_optuna as ns;"
                   "sp = ns.load_space('%s');\n"
                   "class T:\n"
                   "  def __init__(s, k): s.k, s.asked = k, []\n"
                   "  def suggest_categorical(s, p, v): s.asked.append(p); return v[min(s.k, "
                   "len(v) - 1)]\n"
                   "  def suggest_int(s, p, lo, hi, log=False): s.asked.append(p); return lo\n"
                   "  def suggest_float(s, p, lo, hi, log=False): s.asked.append(p); return lo\n"
                   "for k in (0, 1):\n"
                   "  t = T(k); pt = ns.suggest_point(t, sp)\n"
                   "  assert sorted(pt) == sorted(t.asked)\n"
                   "  print(json.dumps(sorted(pt)))\n",
                   tu_src(), cond);
    free(cond);
    char *const argv2[] = {PY, "-c", code, NULL};
    tu_run(&r, argv2, 30);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    char *second = strchr(r.out, '\n');
    cr_assert_not_null(second, "%s", r.out);
    *second++ = '\0';
    cr_expect(!strstr(r.out, "ve_gate_channels") && !strstr(r.out, "value_embedding_lr") &&
                  !strstr(r.out, "final_lr_frac"),
              "inactive axes were sampled: %s", r.out);
    cr_expect(strstr(r.out, "model.ve_layers") && strstr(r.out, "train.warmdown_ratio"), "%s",
              r.out);
    cr_expect(strstr(second, "ve_gate_channels") && strstr(second, "value_embedding_lr") &&
                  strstr(second, "final_lr_frac"),
              "active axes were not sampled: %s", second);
    tu_run_free(&r);
    free(code);

    /* A bad space file: exit 2, the axis and the problem named. */
    static const struct {
        const char *axis, *want;
    } bad[] = {
        {"{\"path\": \"model.nope\", \"type\": \"int\", \"values\": [1]}",
         ".path: model.nope is not a field of a spec"},
        {"{\"path\": \"model.mlp_ratio\", \"type\": \"float\", \"low\": 0.3, \"high\": 0.1}",
         ": low 0.3 is not below high 0.1"},
        {"{\"path\": \"dataset\", \"type\": \"choice\", \"values\": [\"x\"]}", "it is not an axis"},
        {"{\"path\": \"model.mlp_ratio\", \"type\": \"float\", \"low\": 0, \"high\": 1, "
         "\"log\": true}",
         "a log range needs low > 0"},
        {"{\"path\": \"model.mlp_ratio\", \"type\": \"float\", \"values\": [0.1], \"step\": 1}",
         "unknown key \"step\""},
        {"{\"path\": \"model.mlp_ratio\", \"type\": \"int\", \"values\": [2, 4],"
         " \"when\": {\"path\": \"model.nope\", \"in\": [1]}}",
         ".when.path: model.nope is not an earlier axis"},
        {"{\"path\": \"model.mlp_ratio\", \"type\": \"int\", \"values\": [2, 4],"
         " \"when\": {\"path\": \"model.mlp\", \"in\": [\"relu3\"]}}",
         ".when.in[0]: not a value of model.mlp"},
        {"{\"path\": \"train.batch_size\", \"type\": \"int\", \"values\": [4, 8]}",
         "train.batch_size is derived from total_batch_tokens, never an axis"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_space_plus(space, bad[i].axis);
        run_bridge(&r, check);
        cr_expect_eq(r.exit_code, 2, "%s: exit %d", bad[i].axis, r.exit_code);
        cr_expect(strstr(r.err, bad[i].want), "%s: want \"%s\" in:\n%s", bad[i].axis, bad[i].want,
                  r.err);
        tu_run_free(&r);
    }
    /* a condition on a later axis */
    tu_write(space,
             "{\"axes\": ["
             "{\"path\": \"model.ve_gate_channels\", \"type\": \"int\", \"values\": [8],"
             " \"when\": {\"path\": \"model.ve_layers\", \"not\": [\"none\"]}},"
             "{\"path\": \"model.ve_layers\", \"type\": \"choice\", \"values\": [\"none\"]}]}");
    run_bridge(&r, check);
    cr_expect_eq(r.exit_code, 2);
    cr_expect(strstr(r.err, "axes[0].when.path: model.ve_layers is not an earlier axis"), "%s",
              r.err);
    tu_run_free(&r);
    tu_write(space, "{\"axes\": [");
    run_bridge(&r, check);
    cr_expect_eq(r.exit_code, 2);
    cr_expect(strstr(r.err, "not JSON"), "%s", r.err);
    tu_run_free(&r);
    free(space);
}

/* ------------------------------------------------------- with a daemon */

/* A daemon on dir with the tiny dataset; worker NULL = the real engine. */
static void start_daemon(tu_server_t *d, const char *worker) {
    char *corpus = tu_path("%s/corpus.jsonl", tu_dir());
    tu_prep_tiny(corpus, tu_dir(), "tiny");
    free(corpus);
    char *argv[24] = {(char *)tu_bin(), "serve",       "--dir",       (char *)tu_dir(),
                      "--listen",       "127.0.0.1:0", "--token",     TOKEN,
                      "--slots",        "1",           "--memory-mb", "0"};
    int n = 12;
    if (worker) {
        argv[n++] = "--worker-cmd";
        argv[n++] = (char *)worker;
    } else {
        argv[n++] = "--threads-per-slot";
        argv[n++] = "1";
    }
    argv[n] = NULL;
    tu_server_start(d, "daemon", argv, tu_dir_path("daemon.err"), 30);
}

/* A small base spec on the tiny dataset; steps of 128 tokens. */
static char *write_base(long long tokens) {
    char *path = tu_path("%s/base.json", tu_dir());
    char *text =
        tu_path("{\"name\": \"base\", \"dataset\": \"tiny\", \"seed\": 1, \"token_budget\": %lld,"
                " \"eval_tokens\": 256, \"model\": {\"depth\": 1, \"n_embd\": 32, \"n_head\": 2,"
                " \"n_kv_head\": 2, \"seq_len\": 32, \"max_pos\": 32, \"window_pattern\": \"L\","
                " \"ve_layers\": \"none\", \"ve_gate_channels\": 8},"
                " \"train\": {\"batch_size\": 4, \"total_batch_tokens\": 128}}",
                tokens);
    tu_write(path, text);
    free(text);
    return path;
}

Test(bridge, an_axis_added_to_the_space_is_proposed_and_refusals_go_on) {
    NEED_OPTUNA();
    tu_server_t d = {0};
    char *worker = tu_path("%s ok", tu_bad_worker());
    start_daemon(&d, worker);
    char *base = write_base(1280);
    char *space = tu_path("%s/space.json", tu_dir());
    /* A space of small axes and the added one (the repository's axes would
     * do as well: the worker is a stand-in that trains nothing). */
    tu_write(space, "{\"axes\": ["
                    "{\"path\": \"model.depth\", \"type\": \"int\", \"low\": 1, \"high\": 2},"
                    "{\"path\": \"train.matrix_lr\", \"type\": \"float\", \"low\": 0.01,"
                    " \"high\": 0.1, \"log\": true}," ADDED "]}");
    char *logf = tu_path("%s/trials.jsonl", tu_dir());
    const char *args[] = {"--url", d.url,      "--token",   TOKEN,    "--space", space,    "--base",
                          base,    "--trials", "3",         "--seed", "7",       "--poll", "0.1",
                          "--log", logf,       "--sampler", "tpe",    NULL};
    tu_run_t r;
    run_bridge(&r, args);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    tu_run_free(&r);
    cJSON *list = tu_get_json(&d, "/v1/experiments?limit=100");
    cJSON *exps = cJSON_GetObjectItem(list, "experiments"), *e;
    int n = 0;
    cJSON_ArrayForEach(e, exps) {
        char path[64];
        snprintf(path, sizeof path, "/v1/experiments/%lld", (long long)tu_jnum(e, "id"));
        cJSON *full = tu_get_json(&d, path);
        cJSON *model = cJSON_GetObjectItem(cJSON_GetObjectItem(full, "spec"), "model");
        cr_expect_eq(tu_jnum(model, "mlp_ratio"), 3, "experiment %s: the added axis", path);
        cr_expect_str_eq(tu_jstr(full, "status"), "succeeded");
        cJSON_Delete(full);
        n++;
    }
    cr_expect_geq(n, 1, "every trial was a duplicate?");

    /* A space of one point: the trials after the first are duplicates of its
     * run (in flight or finished), told its val_bpb, and nothing is lost
     * with two trials on one experiment. */
    char *one = tu_path("%s/one.jsonl", tu_dir());
    tu_write(space, "{\"axes\": [" ADDED "]}");
    const char *args1[] = {"--url",  d.url, "--token",  TOKEN, "--space",    space,
                           "--base", base,  "--trials", "3",   "--parallel", "2",
                           "--poll", "0.1", "--log",    one,   NULL};
    run_bridge(&r, args1);
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    tu_run_free(&r);
    char *lines = tu_read(one);
    int dups = 0, oks = 0;
    for (const char *p = lines; (p = strstr(p, "\"outcome\": ")); p++) {
        dups += !strncmp(p, "\"outcome\": \"duplicate\"", strlen("\"outcome\": \"duplicate\""));
        oks += !strncmp(p, "\"outcome\": \"succeeded\"", strlen("\"outcome\": \"succeeded\""));
    }
    cr_expect_eq(oks, 1, "%s", lines);
    cr_expect_eq(dups, 2, "%s", lines);
    free(lines);
    free(one);

    /* Every point refused (ve_gate_channels above n_embd): each refusal is
     * recorded with the daemon's code and asked again, not counted as one of
     * --trials, until --max-refusals in a row; nothing reached the daemon. */
    tu_write(space, "{\"axes\": ["
                    "{\"path\": \"model.n_embd\", \"type\": \"int\", \"values\": [32]},"
                    "{\"path\": \"model.ve_gate_channels\", \"type\": \"int\", \"values\": [64]},"
                    "{\"path\": \"model.ve_layers\", \"type\": \"choice\", \"values\": [\"all\"]}"
                    "]}");
    int before = cJSON_GetArraySize(exps);
    const char *args2[] = {"--url",  d.url, "--token",  TOKEN, "--space",        space,
                           "--base", base,  "--trials", "2",   "--max-refusals", "4",
                           "--poll", "0.1", NULL};
    run_bridge(&r, args2);
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "trial 1: refused (invalid_spec: model.ve_gate_channels"), "%s", r.err);
    cr_expect(strstr(r.err, "trial 3: refused (invalid_spec: model.ve_gate_channels"),
              "a refusal is asked again: %s", r.err);
    cr_expect(strstr(r.err, "stopped: the daemon refused 4 specs in a row"), "%s", r.err);
    tu_run_free(&r);
    cJSON_Delete(list);
    list = tu_get_json(&d, "/v1/experiments?limit=100");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(list, "experiments")), before + 1,
                 "only the one-point space's run is new: a refusal creates no experiment");

    cJSON_Delete(list);
    tu_server_stop(&d, 20);
    tu_server_release(&d);
    free(logf);
    free(space);
    free(base);
    free(worker);
}

/* A FLOPs budget is the token budget it buys, asked of POST /v1/cost, for
 * the pruner's tenths of the budget (tests/bridge/budget_check.py). */
Test(bridge, a_flops_budget_reports_progress_in_the_tokens_it_buys) {
    char *script = tu_path("%s/tests/bridge/budget_check.py", tu_src());
    char *argv[] = {PY, script, NULL};
    tu_run_t r;
    tu_run(&r, argv, BRIDGE_S);
    cr_assert(!r.timed_out, "budget_check.py ran past %.0f s", BRIDGE_S);
    cr_expect_eq(r.exit_code, 0, "%s%s", r.out, r.err);
    tu_run_free(&r);
    free(script);
}

/* Run tests/bridge/user_study.py with args (NULL-terminated); r captures it. */
static void run_user_study(tu_run_t *r, const char *const *args) {
    char *script = tu_path("%s/tests/bridge/user_study.py", tu_src());
    char *argv[16] = {PY, script};
    int n = 2;
    for (int i = 0; args[i] && n < 15; i++) argv[n++] = (char *)args[i];
    argv[n] = NULL;
    tu_run(r, argv, BRIDGE_S);
    cr_assert(!r->timed_out, "the user's script ran past %.0f s:\n%s", BRIDGE_S, r->err);
    free(script);
}

/* The library from a user's own script (tests/bridge/user_study.py): their
 * study in a SQLite storage, their TPE sampler with the library's
 * constraints_func, run twice (3 runs, then 2 more, load_if_exists). Read
 * back with Optuna's own API: every trial that ran names its experiment,
 * whose spec on the daemon holds the trial's parameter and whose val_bpb is
 * the trial's value; every refused one (ve_gate_channels 64 above n_embd
 * 32) carries the daemon's code, the constraint [1.0] and no experiment, and
 * is not counted as a run; the best is the study's (both invocations). */
Test(bridge, the_library_in_a_users_sqlite_study) {
    NEED_OPTUNA();
    tu_server_t d = {0};
    char *worker = tu_path("%s ok", tu_bad_worker());
    start_daemon(&d, worker);
    char *base = write_base(1280);
    char *space = tu_path("%s/space.json", tu_dir());
    tu_write(space,
             "{\"axes\": ["
             "{\"path\": \"model.ve_layers\", \"type\": \"choice\", \"values\": [\"all\"]},"
             "{\"path\": \"model.ve_gate_channels\", \"type\": \"int\", \"values\": [8, 64]},"
             "{\"path\": \"train.matrix_lr\", \"type\": \"float\", \"low\": 0.01,"
             " \"high\": 0.1, \"log\": true}]}");
    char *storage = tu_path("sqlite:///%s/study.db", tu_dir());
    tu_run_t r;
    const char *first[] = {"run", d.url, TOKEN, space, base, storage, "3", NULL};
    run_user_study(&r, first);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    tu_run_free(&r);
    const char *again[] = {"run", d.url, TOKEN, space, base, storage, "2", NULL};
    run_user_study(&r, again);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    /* every run scores the stand-in's 1.2345: the study's best is its first
     * trial, from the first invocation, not one of this invocation's */
    cJSON *said = cJSON_Parse(r.out);
    cr_expect(said && tu_jnum(said, "number") == 0 && tu_jnum(said, "experiment_id") == 1,
              "the best said at the end is the study's: %s", r.out);
    cJSON_Delete(said);
    tu_run_free(&r);
    const char *read[] = {"read", storage, NULL};
    run_user_study(&r, read);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cJSON *doc = cJSON_Parse(r.out);
    cr_assert_not_null(doc, "%s", r.out);
    cJSON *t;
    int ran = 0, refused = 0;
    double best = 1e300;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(doc, "trials")) {
        cJSON *attrs = cJSON_GetObjectItem(t, "user_attrs");
        cJSON *params = cJSON_GetObjectItem(t, "params");
        int gate = (int)tu_jnum(params, "model.ve_gate_channels");
        cJSON *refusal = cJSON_GetObjectItem(attrs, "refused");
        if (refusal) {
            refused++;
            cr_expect_eq(gate, 64, "trial %d: a refusal of a spec the daemon takes",
                         (int)tu_jnum(t, "number"));
            cr_expect(strstr(refusal->valuestring, "invalid_spec: model.ve_gate_channels"), "%s",
                      refusal->valuestring);
            cr_expect_null(cJSON_GetObjectItem(attrs, "experiment_id"));
            cr_expect_str_eq(tu_jstr(t, "state"), "PRUNED", "a refusal is not a value");
            cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(attrs, "constraint"), 0);
            cr_expect(cJSON_IsNumber(c0) && c0->valuedouble == 1.0, "the constraint [1.0]");
            continue;
        }
        ran++;
        cr_expect_str_eq(tu_jstr(t, "state"), "COMPLETE");
        cr_expect_eq(gate, 8);
        char path[64];
        snprintf(path, sizeof path, "/v1/experiments/%lld",
                 (long long)tu_jnum(attrs, "experiment_id"));
        cJSON *e = tu_get_json(&d, path);
        cJSON *spec = cJSON_GetObjectItem(e, "spec");
        /* the spec keeps 4 significant digits of the trial's float */
        double lr = tu_jnum(params, "train.matrix_lr");
        cr_expect_float_eq(tu_jnum(cJSON_GetObjectItem(spec, "train"), "matrix_lr"), lr, 5e-4 * lr,
                           "%s: the trial's parameter", path);
        double v = tu_jnum(cJSON_GetObjectItem(e, "result"), "val_bpb");
        cr_expect_float_eq(tu_jnum(t, "value"), v, 1e-12, "%s: the trial's value", path);
        cr_expect_str_eq(tu_jstr(attrs, "status"), "succeeded");
        char link[64];
        snprintf(link, sizeof link, "/#/e/%lld", (long long)tu_jnum(attrs, "experiment_id"));
        cr_expect(strstr(tu_jstr(attrs, "url"), link) != NULL, "the run's page: %s",
                  tu_jstr(attrs, "url"));
        if (v < best) best = v;
        cJSON_Delete(e);
    }
    cr_expect_eq(ran, 5, "3 runs, then 2 more in the same study");
    cr_expect_geq(refused, 1, "TPE never proposed the refused value? (seeded: it does)");
    cJSON *list = tu_get_json(&d, "/v1/experiments?limit=100");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(list, "experiments")), ran,
                 "one experiment a trial that ran, none for a refusal");
    cJSON_Delete(list);
    cJSON *lb = cJSON_GetObjectItem(doc, "library_best");
    cr_expect_float_eq(tu_jnum(lb, "value"), best, 1e-12, "the study's best, both invocations");
    cr_expect_float_eq(tu_jnum(cJSON_GetObjectItem(doc, "best"), "value"), best, 1e-12,
                       "Optuna's own best_trial agrees");
    cJSON_Delete(doc);
    tu_run_free(&r);
    tu_server_stop(&d, 20);
    tu_server_release(&d);
    free(storage);
    free(space);
    free(base);
    free(worker);
}

Test(bridge, the_pruner_cancels_a_running_experiment) {
    NEED_OPTUNA();
    tu_server_t d = {0};
    start_daemon(&d, NULL);
    /* 4000 steps of 128 tokens: far longer than the test waits. */
    char *base = write_base(128 * 4000);
    char *space = tu_path("%s/space.json", tu_dir());
    tu_write(space, "{\"axes\": [{\"path\": \"train.matrix_lr\", \"type\": \"float\", \"low\":"
                    " 0.02, \"high\": 0.04, \"log\": true}]}");
    char *logf = tu_path("%s/trials.jsonl", tu_dir());
    /* Every loss is above 0: the threshold pruner prunes at the first report
     * (a tenth of the budget), and the bridge cancels the run. */
    const char *args[] = {"--url",     d.url,           "--token", TOKEN,      "--space",
                          space,       "--base",        base,      "--trials", "1",
                          "--poll",    "0.2",           "--log",   logf,       "--pruner",
                          "threshold", "--prune-above", "0",       NULL};
    double t0 = tu_now();
    tu_run_t r;
    run_bridge(&r, args);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "pruned by Optuna's threshold pruner at 10% of the budget"), "%s",
              r.err);
    cr_expect(strstr(r.err, "cancel: HTTP 200"), "%s", r.err);
    tu_run_free(&r);
    cJSON *e = tu_get_json(&d, "/v1/experiments/1");
    cr_expect_str_eq(tu_jstr(e, "status"), "cancelled", "took %.1f s", tu_now() - t0);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(e, "result")), "a cancelled run has no result");
    cJSON *metrics = cJSON_GetObjectItem(e, "metrics");
    cJSON *last = cJSON_GetArrayItem(metrics, cJSON_GetArraySize(metrics) - 1);
    cr_expect(last && tu_jnum(last, "step") < 4000, "it stopped before its budget");
    cJSON_Delete(e);
    char *text = tu_read(logf);
    cr_expect(strstr(text, "\"outcome\": \"pruned\""), "%s", text);
    free(text);
    tu_server_stop(&d, 20);
    tu_server_release(&d);
    free(logf);
    free(space);
    free(base);
}

/* What goes wrong before the first trial is said, and needs no Optuna: a
 * wrong token, a base spec the daemon refuses, no daemon at the address. */
Test(bridge, errors_before_the_first_trial_are_said) {
    tu_server_t d = {0};
    char *worker = tu_path("%s ok", tu_bad_worker());
    start_daemon(&d, worker);
    char *base = write_base(1280);
    tu_run_t r;
    const char *wrong[] = {"--url", d.url, "--token", "wrong", "--base", base, NULL};
    run_bridge(&r, wrong);
    cr_expect_eq(r.exit_code, 1, "%s", r.err);
    cr_expect(strstr(r.err, "the daemon refused the token"), "%s", r.err);
    tu_run_free(&r);

    char *bad = tu_path("%s/bad.json", tu_dir());
    tu_write(bad, "{\"dataset\": \"tiny\", \"token_budget\": 1280, \"model\": {\"n_head\": 7}}");
    const char *refused[] = {"--url", d.url, "--token", TOKEN, "--base", bad, NULL};
    run_bridge(&r, refused);
    cr_expect_eq(r.exit_code, 2, "%s", r.err);
    cr_expect(strstr(r.err, "the daemon refuses the base spec: invalid_spec: model.n_head"), "%s",
              r.err);
    tu_run_free(&r);

    char url[64];
    snprintf(url, sizeof url, "%s", d.url);
    tu_server_stop(&d, 20);
    tu_server_release(&d);
    const char *gone[] = {"--url", url, "--base", base, NULL};
    run_bridge(&r, gone);
    cr_expect_eq(r.exit_code, 1, "%s", r.err);
    cr_expect(strstr(r.err, "no nightshift daemon at"), "%s", r.err);
    tu_run_free(&r);
    free(bad);
    free(base);
    free(worker);
}

/* test_train.c - `nightshift train` end to end on a tiny prepared corpus:
 * the summary block, the JSON progress lines, the time budget, that learning
 * happens, reproducibility, the failure exits (diverged, bad input, out of
 * memory), sampling from the saved checkpoint, and the MFU's sgemm peak
 * measured under load. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/calibrate.h"
#include "engine/gemm.h"
#include "tests/testutil.h"

static char *dir; /* tu_dir()/state, with datasets/tiny */

static void setup(void) {
    tu_dir_init();
    dir = tu_path("%s/state", tu_dir());
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), dir, "tiny");
}

static void teardown(void) {
    free(dir);
    tu_dir_fini();
}

TestSuite(train, .init = setup, .fini = teardown, .timeout = 60);

/* A tiny model; budget is the budget's JSON member(s), the extras are
 * spliced into the model and train objects. */
static char *write_spec_budget(const char *name, const char *budget, const char *model_extra,
                               const char *train_extra) {
    char *path = tu_path("%s/%s.json", dir, name);
    char *json = tu_path("{\"name\":\"%s\",\"dataset\":\"tiny\",%s,"
                         "\"model\":{\"depth\":2,\"n_embd\":32,\"n_head\":2,\"seq_len\":32%s},"
                         "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128%s},"
                         "\"resources\":{\"threads\":1,\"peak_gflops\":10}}",
                         name, budget, model_extra, train_extra);
    tu_write(path, json);
    free(json);
    return path;
}

static char *write_spec(const char *name, double budget, const char *model_extra,
                        const char *train_extra) {
    char *member = tu_path("\"time_budget_s\":%g", budget);
    char *path = write_spec_budget(name, member, model_extra, train_extra);
    free(member);
    return path;
}

/* Run train; progress lines go to DIR/<name>.jsonl. */
static void train(tu_run_t *r, const char *spec, const char *progress) {
    char *argv[] = {(char *)tu_bin(), "train",          "--dir",      dir,
                    "--progress",     (char *)progress, (char *)spec, NULL};
    tu_run(r, argv, 45);
}

/* The summary value of key ("key: value" after the "---" line), or NAN. */
static double summary(const char *out, const char *key) {
    const char *block = strstr(out, "---\n");
    if (!block) return NAN;
    char pat[64];
    snprintf(pat, sizeof pat, "\n%s:", key);
    const char *at = strstr(block, pat);
    return at ? strtod(at + strlen(pat), NULL) : NAN;
}

/* Parse the JSON lines of a progress file into an array (caller deletes). */
static cJSON *read_progress(const char *path) {
    char *text = tu_read(path);
    cr_assert(text, "no progress file %s", path);
    cJSON *lines = cJSON_CreateArray();
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        cr_assert(cJSON_IsObject(o), "progress line is not a JSON object: %s", line);
        cJSON_AddItemToArray(lines, o);
    }
    free(text);
    return lines;
}

static const char *event_of(const cJSON *o) {
    return cJSON_GetStringValue(cJSON_GetObjectItem(o, "event"));
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(o, key);
    cr_assert(cJSON_IsNumber(v), "missing number %s", key);
    return v->valuedouble;
}

Test(train, three_second_budget_end_to_end) {
    const double budget = 3.0;
    char *spec = write_spec("budget", budget, "", "");
    char *progress = tu_path("%s/budget.jsonl", dir);
    tu_run_t r;
    train(&r, spec, progress);
    cr_assert_eq(r.exit_code, 0, "train failed (%d): %s", r.exit_code, r.err);

    static const char *const keys[] = {"val_bpb",        "training_seconds",
                                       "total_seconds",  "peak_rss_mb",
                                       "mfu_percent",    "total_tokens_M",
                                       "num_steps",      "num_params_M",
                                       "depth",          "tokens_per_second",
                                       "params_wte",     "params_value_embeds",
                                       "params_lm_head", "params_transformer_matrices",
                                       "params_scalars", "params_total"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        cr_expect(!isnan(summary(r.out, keys[i])), "summary lacks %s:\n%s", keys[i], r.out);
    cr_expect_eq(summary(r.out, "depth"), 2);
    cr_expect_eq(summary(r.out, "time_budget_s"), budget);
    cr_expect_eq(summary(r.out, "token_budget"), 0);
    cr_expect_gt(summary(r.out, "epochs"), 0);

    cJSON *lines = read_progress(progress);
    int n = cJSON_GetArraySize(lines);
    cr_assert(n >= 4, "too few progress lines: %d", n);
    cr_expect_str_eq(event_of(cJSON_GetArrayItem(lines, 0)), "start");
    const cJSON *result = cJSON_GetArrayItem(lines, n - 1);
    cr_assert_str_eq(event_of(result), "result");
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(result, "status")), "succeeded");
    cr_expect_float_eq(num(result, "val_bpb"), summary(r.out, "val_bpb"), 1e-6);
    cr_expect_eq(num(result, "time_budget_s"), budget);
    cr_expect_eq(num(result, "token_budget"), 0);
    cr_expect_float_eq(num(result, "epochs"), summary(r.out, "epochs"), 1e-4);

    /* one step line per optimiser step; the budget is met within one step */
    int steps = 0;
    double max_dt = 0, first_losses = 0, last_losses = 0;
    double losses[4096];
    const cJSON *line;
    cJSON_ArrayForEach(line, lines) {
        if (strcmp(event_of(line), "step")) continue;
        cr_assert(steps < 4096);
        losses[steps++] = num(line, "loss");
        max_dt = fmax(max_dt, num(line, "dt_ms") / 1000.0);
    }
    cr_expect_eq(steps, (int)summary(r.out, "num_steps"));
    cr_assert(steps >= 10, "only %d steps in %g s", steps, budget);
    double trained = summary(r.out, "training_seconds");
    cr_expect(trained >= budget - 0.05 && trained <= budget + max_dt + 0.1,
              "training_seconds %g for a %g s budget (longest step %g s)", trained, budget, max_dt);

    /* the loss went down: the last five steps beat the first five */
    for (int i = 0; i < 5; i++) {
        first_losses += losses[i] / 5;
        last_losses += losses[steps - 1 - i] / 5;
    }
    cr_expect(last_losses < first_losses - 0.5, "loss %g -> %g: did not learn", first_losses,
              last_losses);
    cr_expect(summary(r.out, "val_bpb") < 8.0, "val_bpb %g", summary(r.out, "val_bpb"));

    cJSON_Delete(lines);
    tu_run_free(&r);
    free(progress);
    free(spec);
}

/* The step lines of a progress file: loss, progress and epoch per step. */
typedef struct {
    int n;
    double loss[256], progress[256], epoch[256];
} steps_t;

static void read_steps(const cJSON *lines, steps_t *st) {
    const cJSON *line;
    st->n = 0;
    cJSON_ArrayForEach(line, lines) {
        if (strcmp(event_of(line), "step")) continue;
        cr_assert(st->n < 256, "more steps than the budget allows");
        st->loss[st->n] = num(line, "loss");
        st->progress[st->n] = num(line, "progress");
        st->epoch[st->n] = num(line, "epoch");
        st->n++;
    }
}

/* A token budget: the run stops after the step that reaches it (5000 tokens
 * at 128 a step: 40 steps), progress is the fraction of it, and the summary
 * records it. No clock enters the arithmetic, so two runs with one seed give
 * bit-identical losses and val_bpb, with the default warmdown and weight
 * decay (which follow progress) on, with either sampler. */
Test(train, token_budget_is_bit_identical) {
    static const char *const samplers[] = {"", ",\"sampler\":\"sequential\""};
    for (int k = 0; k < 2; k++) {
        char *spec = write_spec_budget("tokens", "\"token_budget\":5000", "", samplers[k]);
        steps_t runs[2];
        double bpb[2];
        for (int run = 0; run < 2; run++) {
            char *progress = tu_path("%s/tokens%d.jsonl", dir, run);
            tu_run_t r;
            train(&r, spec, progress);
            cr_assert_eq(r.exit_code, 0, "train failed (%d): %s", r.exit_code, r.err);
            cr_expect_eq(summary(r.out, "num_steps"), 40, "%s", r.out);
            cr_expect_eq(summary(r.out, "token_budget"), 5000);
            cr_expect_eq(summary(r.out, "time_budget_s"), 0);
            cJSON *lines = read_progress(progress);
            read_steps(lines, &runs[run]);
            const cJSON *result = cJSON_GetArrayItem(lines, cJSON_GetArraySize(lines) - 1);
            cr_assert_str_eq(event_of(result), "result");
            bpb[run] = num(result, "val_bpb");
            cr_expect_eq(num(result, "token_budget"), 5000);
            cr_expect_eq(num(result, "time_budget_s"), 0);
            cr_expect_eq(num(result, "total_tokens"), 40 * 128);
            cr_expect_float_eq(num(result, "epochs"), runs[run].epoch[runs[run].n - 1], 1e-12);
            cJSON_Delete(lines);
            tu_run_free(&r);
            free(progress);
        }
        cr_assert_eq(runs[0].n, 40);
        cr_assert_eq(runs[1].n, 40);
        for (int i = 0; i < 40; i++) {
            cr_assert(runs[0].loss[i] == runs[1].loss[i], "sampler %d step %d: loss %.17g vs %.17g",
                      k, i + 1, runs[0].loss[i], runs[1].loss[i]);
            cr_expect_float_eq(runs[0].progress[i], fmin((i + 1) * 128 / 5000.0, 1.0), 1e-12);
            cr_expect_float_eq(runs[0].epoch[i], (i + 1) / 40.0 * runs[0].epoch[39], 1e-12);
        }
        cr_expect(bpb[0] == bpb[1], "sampler %d: val_bpb %.17g vs %.17g", k, bpb[0], bpb[1]);
        free(spec);
    }
}

/* Bit-for-bit: with a schedule that does not depend on wall time (no
 * warmdown, no weight decay) two runs give identical step losses. */
Test(train, same_seed_same_losses) {
    char *spec = write_spec("repro", 1.5, "", ",\"warmdown_ratio\":0,\"weight_decay\":0");
    double runs[2][4096];
    int counts[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        char *progress = tu_path("%s/repro%d.jsonl", dir, k);
        tu_run_t r;
        train(&r, spec, progress);
        cr_assert_eq(r.exit_code, 0, "train failed: %s", r.err);
        cJSON *lines = read_progress(progress);
        const cJSON *line;
        cJSON_ArrayForEach(line, lines) {
            if (!strcmp(event_of(line), "step") && counts[k] < 4096)
                runs[k][counts[k]++] = num(line, "loss");
        }
        cJSON_Delete(lines);
        tu_run_free(&r);
        free(progress);
    }
    int common = counts[0] < counts[1] ? counts[0] : counts[1];
    cr_assert(common >= 5, "too few steps to compare: %d", common);
    for (int i = 0; i < common; i++)
        cr_assert(runs[0][i] == runs[1][i], "step %d: loss %.17g vs %.17g", i + 1, runs[0][i],
                  runs[1][i]);
    free(spec);
}

Test(train, exploding_loss_is_diverged) {
    /* Without the softcap the logits are unbounded; a huge head LR blows them up. */
    char *spec = write_spec("explode", 5, ",\"softcap\":0", ",\"unembedding_lr\":1e6");
    char *progress = tu_path("%s/explode.jsonl", dir);
    tu_run_t r;
    train(&r, spec, progress);
    cr_expect_eq(r.exit_code, 3, "exit %d, stderr: %s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "diverged"), "stderr: %s", r.err);
    cJSON *lines = read_progress(progress);
    const cJSON *last = cJSON_GetArrayItem(lines, cJSON_GetArraySize(lines) - 1);
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(last, "status")), "diverged");
    cJSON_Delete(lines);
    tu_run_free(&r);
    free(progress);
    free(spec);
}

/* Train on DIR/<name>.json holding json: it must exit 1 with want in its stderr. */
static void expect_train_error(const char *name, const char *json, const char *want) {
    char *spec = tu_path("%s/%s.json", dir, name);
    tu_write(spec, json);
    char *progress = tu_path("%s/%s.jsonl", dir, name);
    tu_run_t r;
    train(&r, spec, progress);
    cr_expect_eq(r.exit_code, 1);
    cr_expect(strstr(r.err, want), "stderr lacks \"%s\": %s", want, r.err);
    tu_run_free(&r);
    free(progress);
    free(spec);
}

Test(train, missing_dataset_fails_clearly) {
    /* stderr names the dataset */
    expect_train_error("nodata", "{\"dataset\":\"absent\",\"time_budget_s\":1}", "absent");
}

Test(train, invalid_spec_names_the_field) {
    expect_train_error("bad", "{\"model\":{\"n_embd\":128,\"n_head\":7}}",
                       "model.n_head: 7 does not divide n_embd 128");
}

/* --save writes a checkpoint that `sample` reads back: the prompt comes out
 * first, the same seed gives the same text, and greedy decoding is stable. */
Test(train, saved_checkpoint_samples_text) {
    char *spec = write_spec("save", 1.0, "", "");
    char *ckpt = tu_path("%s/model.safetensors", dir);
    tu_run_t r;
    char *argv[] = {(char *)tu_bin(), "train", "--dir", dir, "--save", ckpt, spec, NULL};
    tu_run(&r, argv, 45);
    cr_assert_eq(r.exit_code, 0, "train --save failed: %s", r.err);
    tu_run_free(&r);

    char *outs[2];
    for (int k = 0; k < 2; k++) {
        char *sargv[] = {(char *)tu_bin(),
                         "sample",
                         "--dir",
                         dir,
                         "--checkpoint",
                         ckpt,
                         "--prompt",
                         "the cat",
                         "--tokens",
                         "20",
                         "--seed",
                         "7",
                         NULL};
        tu_run(&r, sargv, 30);
        cr_assert_eq(r.exit_code, 0, "sample failed: %s", r.err);
        cr_expect(!strncmp(r.out, "the cat", 7), "output does not start with the prompt: %s",
                  r.out);
        cr_expect(strlen(r.out) > 8, "nothing generated: %s", r.out);
        outs[k] = strdup(r.out);
        tu_run_free(&r);
    }
    cr_expect_str_eq(outs[0], outs[1], "same seed, different text");

    char *bad[] = {(char *)tu_bin(), "sample", "--dir", dir, "--checkpoint", spec, NULL};
    tu_run(&r, bad, 30);
    cr_expect_eq(r.exit_code, 1, "sampling from a non-checkpoint: exit %d", r.exit_code);
    cr_expect(strstr(r.err, "sample:"), "no error message: %s", r.err);
    tu_run_free(&r);
    for (int k = 0; k < 2; k++) free(outs[k]);
    free(ckpt);
    free(spec);
}

/* A checkpoint --save cannot write (a full disk, a missing directory) does
 * not undo the run: val_bpb is known, so the run succeeds (exit 0) and its
 * result says the checkpoint was not saved. */
Test(train, a_checkpoint_that_cannot_be_written_keeps_the_result) {
    char *spec = write_spec_budget("nosave", "\"token_budget\":256", "", "");
    char *ckpt = tu_path("%s/no-such-directory/model.safetensors", dir);
    char *progress = tu_path("%s/nosave.jsonl", dir);
    tu_run_t r;
    char *argv[] = {(char *)tu_bin(), "train",  "--dir", dir,  "--progress",
                    progress,         "--save", ckpt,    spec, NULL};
    tu_run(&r, argv, 45);
    cr_assert_eq(r.exit_code, 0, "exit %d: %s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "the checkpoint was not saved (the result stands)"), "%s", r.err);
    cr_expect(summary(r.out, "val_bpb") > 0, "%s", r.out);
    cJSON *lines = read_progress(progress);
    const cJSON *result = cJSON_GetArrayItem(lines, cJSON_GetArraySize(lines) - 1);
    cr_assert_str_eq(event_of(result), "result");
    cr_expect_str_eq(tu_jstr(result, "status"), "succeeded");
    const char *why = tu_jstr(result, "reason");
    cr_expect(why && strstr(why, "checkpoint not saved: ") && strstr(why, "No such file"), "%s",
              why ? why : "(no reason)");
    cJSON_Delete(lines);
    tu_run_free(&r);
    free(progress);
    free(ckpt);
    free(spec);
}

/* eval_tokens caps the validation tokens scored at the split's first ones,
 * whatever the context length; 0 (and a cap past the split) scores them all. */
Test(train, eval_tokens_caps_the_tokens_scored) {
    double bpb[4], scored[4];
    const char *evals[] = {"100", "100", "0", "1000000"};
    for (int k = 0; k < 4; k++) {
        /* run 1 has another context length (24 tokens, not 32) */
        char *spec = tu_path("%s/eval%d.json", dir, k);
        char *json = tu_path("{\"dataset\":\"tiny\",\"token_budget\":256,\"eval_tokens\":%s,"
                             "\"model\":{\"depth\":2,\"n_embd\":32,\"n_head\":2,\"seq_len\":%d},"
                             "\"train\":{\"batch_size\":4,\"total_batch_tokens\":%d},"
                             "\"resources\":{\"threads\":1,\"peak_gflops\":10}}",
                             evals[k], k == 1 ? 24 : 32, k == 1 ? 96 : 128);
        tu_write(spec, json);
        char *progress = tu_path("%s/eval%d.jsonl", dir, k);
        tu_run_t r;
        train(&r, spec, progress);
        cr_assert_eq(r.exit_code, 0, "eval_tokens %s: %s", evals[k], r.err);
        cJSON *lines = read_progress(progress);
        const cJSON *result = cJSON_GetArrayItem(lines, cJSON_GetArraySize(lines) - 1);
        bpb[k] = num(result, "val_bpb");
        scored[k] = num(result, "eval_tokens");
        cJSON_Delete(lines);
        tu_run_free(&r);
        free(progress);
        free(json);
        free(spec);
    }
    /* the first 100 targets (special tokens are not scored), either context */
    cr_expect(scored[0] > 50 && scored[0] <= 100, "%g", scored[0]);
    cr_expect_eq(scored[1], scored[0], "the same tokens at seq_len 24 and 32");
    cr_expect_gt(scored[2], 150, "the whole split: %g", scored[2]);
    cr_expect_eq(scored[3], scored[2], "a cap past the split scores all of it");
    cr_expect(bpb[3] == bpb[2], "%.17g vs %.17g", bpb[3], bpb[2]);
    cr_expect(bpb[0] != bpb[2], "the first 100 tokens score as the whole split: %.17g", bpb[0]);
}

/* A training file that cannot be mapped for want of address space (a
 * slot's memory limit is RLIMIT_AS) is the run's out-of-memory, exit 4, not
 * a failed run: the manifest claims 2^32 tokens and train.bin is a sparse
 * file of that size, mapped under a 2 GiB limit. */
Test(train, unmappable_dataset_is_out_of_memory) {
#if defined(__SANITIZE_ADDRESS__)
    cr_skip_test("a sanitizer build cannot run under an address-space limit");
#endif
    char *manifest = tu_path("%s/datasets/tiny/manifest.json", dir);
    char *text = tu_read(manifest);
    cJSON *m = cJSON_Parse(text);
    cr_assert(cJSON_IsObject(m));
    const double tokens = 4294967296.0;
    cJSON_ReplaceItemInObject(m, "train_tokens", cJSON_CreateNumber(tokens));
    char *out = cJSON_Print(m);
    tu_write(manifest, out);
    char *bin_path = tu_path("%s/datasets/tiny/train.bin", dir);
    cr_assert_eq(truncate(bin_path, (off_t)(2 * tokens)), 0, "%s", strerror(errno));
    char *spec = write_spec("enomem", 1.0, "", "");
    tu_run_t r;
    char *argv[] = {
        "/usr/bin/prlimit", "--as=2147483648", (char *)tu_bin(), "train", "--dir", dir, spec, NULL};
    tu_run(&r, argv, 30);
    cr_expect_eq(r.exit_code, 4, "exit %d, stderr: %s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "train.bin: mmap"), "%s", r.err);
    tu_run_free(&r);
    free(spec), free(bin_path), free(out), free(text), free(manifest);
    cJSON_Delete(m);
}

/* DIR/peak.json: a tiny model on one thread with no peak of its own, so a
 * run takes its MFU peak from the calibration or measures one. */
static char *write_peak_spec(int token_budget) {
    char *path = tu_path("%s/peak.json", dir);
    char *json = tu_path("{\"name\":\"peak\",\"dataset\":\"tiny\",\"token_budget\":%d,"
                         "\"model\":{\"depth\":1,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
                         "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128},"
                         "\"resources\":{\"threads\":1}}",
                         token_budget);
    tu_write(path, json);
    free(json);
    return path;
}

/* Children that keep every CPU of this process busy until killed. */
static int spin_children(pid_t *pids, int max) {
    cpu_set_t set;
    cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
    int n = CPU_COUNT(&set) < max ? CPU_COUNT(&set) : max;
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        cr_assert(pids[i] >= 0);
        if (pids[i] == 0)
            for (volatile unsigned long x = 0;; x++) {
            }
    }
    return n;
}

static void stop_children(pid_t *pids, int n) {
    for (int i = 0; i < n; i++) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
    }
}

/* The sgemm peak of MFU measured while other processes keep the CPUs busy
 * reads low, and every MFU divided by it high: calibrate refuses to store
 * it (unless told to, and then marked), and a run that measures its own
 * under load uses it for itself only and says so in its summary. */
Test(train, peak_measured_under_load_is_not_accepted_silently) {
    pid_t pids[64];
    int n = spin_children(pids, 64);
    char *cal = tu_path("%s/calibration.json", dir);
    tu_run_t r;
    tu_run_bin(&r, 60, "calibrate", "--dir", dir, "--threads", "1", "--seconds", "0.5",
               "--attempts", "2", NULL);
    cr_expect_eq(r.exit_code, 1, "exit %d: %s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "not stored") && strstr(r.err, "NOT QUIET"), "%s", r.err);
    cr_expect(strstr(r.out, "quiet: no"), "%s", r.out);
    cr_expect_eq(access(cal, F_OK), -1, "a busy peak was stored");
    tu_run_free(&r);

    /* a run with no stored peak measures one: under load, for itself only */
    char *path = write_peak_spec(256);
    char *argv[] = {(char *)tu_bin(), "train", "--dir", dir, path, NULL};
    tu_run(&r, argv, 60);
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "peak_source:        measured under load, this run only"), "%s", r.out);
    cr_expect(summary(r.out, "peak_others_cpu") > 0.1, "%s", r.out);
    cr_expect(strstr(r.err, "busy while the sgemm peak was measured"), "%s", r.err);
    cr_expect_eq(access(cal, F_OK), -1, "the run stored a busy peak");
    tu_run_free(&r);

    /* --accept-load stores it, marked; runs then name it as such */
    tu_run_bin(&r, 60, "calibrate", "--dir", dir, "--threads", "1", "--seconds", "0.5",
               "--attempts", "1", "--accept-load", NULL);
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    tu_run_free(&r);
    char *text = tu_read(cal);
    cJSON *c = cJSON_Parse(text);
    const cJSON *peaks = cJSON_GetObjectItem(c, "peaks");
    cr_assert(cJSON_IsObject(peaks) && peaks->child, "%s", text);
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(peaks->child, "quiet")), "%s", text);
    cr_expect(cJSON_GetObjectItem(peaks->child, "others_cpu")->valuedouble > 0.1, "%s", text);
    stop_children(pids, n);
    tu_run(&r, argv, 60);
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "peak_source:        calibration, accepted under load"), "%s", r.out);
    cr_expect(strstr(r.out, "peak_measured_at:"), "%s", r.out);
    tu_run_free(&r);
    cJSON_Delete(c);
    free(text), free(path), free(cal);
}

/* Instruction sets by width, as the test reads them. */
static int width_rank(const char *isa) {
    return !strcmp(isa, "avx512") ? 3 : !strcmp(isa, "avx2") ? 2 : !strcmp(isa, "generic") ? 1 : 0;
}

/* MFU's peak is of the instruction set the engine's kernels run: where they
 * are wider than OpenBLAS's (an OpenBLAS older than the CPU, as Debian 12's
 * on AMD's Zen 5), calibrate times the engine's kernel too, and its faster
 * sgemm is stored under a key of its own; a run reads the entry of its own
 * path, and one forced onto a path no wider than OpenBLAS's reads OpenBLAS's
 * peak. On a CPU whose OpenBLAS kernels are as wide as the engine's, only
 * the plain entry exists. */
Test(train, peak_is_of_the_instruction_set_the_kernels_run) {
    const char *blas = calibrate_blas_isa(), *core = calibrate_blas_core();
    const char *path = gemm_isa_name(gemm_current());
    cr_assert(width_rank(blas) && width_rank(path), "%s %s", blas, path);
    const int wider = width_rank(path) > width_rank(blas);
    char plain[96], own[96];
    snprintf(plain, sizeof plain, "1 threads, %s", core);
    snprintf(own, sizeof own, "1 threads, %s, %s kernels", core, path);

    char *cal = tu_path("%s/calibration.json", dir);
    tu_run_t r;
    tu_run_bin(&r, 60, "calibrate", "--dir", dir, "--threads", "1", "--seconds", "0.3",
               "--attempts", "1", "--accept-load", NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    tu_run_free(&r);
    char *text = tu_read(cal);
    cJSON *c = cJSON_Parse(text);
    const cJSON *peaks = cJSON_GetObjectItem(c, "peaks");
    const cJSON *e = cJSON_GetObjectItem(peaks, wider ? own : plain);
    cr_assert(cJSON_IsObject(e), "no entry \"%s\": %s", wider ? own : plain, text);
    cr_expect_eq(cJSON_GetArraySize(peaks), 1, "%s", text);
    /* the engine's kernel is timed where it is wider, and the faster wins
     * (which one does is the machine's business: under a sanitizer or load
     * OpenBLAS's may) */
    const double blas_g = tu_jnum(e, "openblas_gflops"), peak = tu_jnum(e, "gflops");
    const double engine_g =
        cJSON_HasObjectItem(e, "engine_gflops") ? tu_jnum(e, "engine_gflops") : 0.0;
    const int engine_won = cJSON_IsTrue(cJSON_GetObjectItem(e, "engine_sgemm"));
    cr_expect_gt(blas_g, 0, "%s", text);
    cr_expect_eq(engine_g > 0, wider, "%s", text);
    cr_expect_eq(engine_won, engine_g > blas_g, "%s", text);
    cr_expect_eq(peak, engine_won ? engine_g : blas_g, "%s", text);
    cr_expect_str_eq(cJSON_GetObjectItem(e, "isa")->valuestring, engine_won ? path : blas, "%s",
                     text);
    cJSON_Delete(c);
    free(text);

    /* a run reads its own path's entry: distinct peaks in the two */
    char body[512];
    snprintf(body, sizeof body,
             "{\"peaks\":{\"%s\":{\"gflops\":111,\"isa\":\"%s\",\"quiet\":true},"
             "\"%s\":{\"gflops\":222,\"isa\":\"%s\",\"engine_sgemm\":true,\"quiet\":true}}}",
             plain, blas, own, path);
    tu_write(cal, body);
    char *spec = write_peak_spec(128);
    char *argv[] = {(char *)tu_bin(), "train", "--dir", dir, spec, NULL};
    tu_run(&r, argv, 60);
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    cr_expect_eq(summary(r.out, "peak_gflops"), wider ? 222 : 111, "%s", r.out);
    tu_run_free(&r);
    /* forced onto the generic path (never wider than OpenBLAS's): the plain one */
    setenv("NIGHTSHIFT_ISA", "generic", 1);
    tu_run(&r, argv, 60);
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    cr_expect_eq(summary(r.out, "peak_gflops"), 111, "%s", r.out);
    tu_run_free(&r);
    free(spec), free(cal);
}

/* The summary's text value of key, or "" (a static buffer). */
static const char *summary_text(const char *out, const char *key) {
    static char val[64];
    char pat[64];
    snprintf(pat, sizeof pat, "\n%s:", key);
    const char *at = strstr(out, pat);
    val[0] = 0;
    if (at) sscanf(at + strlen(pat), " %63s", val);
    return val;
}

/* train.precision: bf16 runs where the products can (the summary, the start
 * event and the result name it, MFU against the bf16 peak the calibration
 * stored beside the float32 one); a path without bf16 refuses it, naming
 * why; auto takes what runs. */
Test(train, precision_is_recorded_and_bf16_refused_where_it_cannot_run) {
    char *spec = write_spec_budget("bf16", "\"token_budget\":2560", "", ",\"precision\":\"bf16\"");
    char *progress = tu_path("%s/bf16.jsonl", dir);
    char *argv[] = {(char *)tu_bin(), "train", "--dir", dir, "--progress", progress, spec, NULL};
    tu_run_t r;

    /* forced onto avx2, as on a CPU without bf16 */
    setenv("NIGHTSHIFT_ISA", "avx2", 1);
    tu_run(&r, argv, 45);
    unsetenv("NIGHTSHIFT_ISA");
    cr_expect_eq(r.exit_code, 1, "%s", r.err);
    cr_expect(strstr(r.err, "train.precision: bf16:") && strstr(r.err, "NIGHTSHIFT_ISA=avx2"), "%s",
              r.err);
    tu_run_free(&r);

    char why[256];
    if (gemm_select(GEMM_AVX512) != 0 || !gemm_bf16_available(why, sizeof why)) {
        fprintf(stderr,
                "[SKIP] train::precision_is_recorded_and_bf16_refused_where_it_cannot_run: "
                "the bf16 run: %s\n",
                why);
        /* here bf16 is refused without NIGHTSHIFT_ISA too, and auto is fp32 */
        tu_run(&r, argv, 45);
        cr_expect_eq(r.exit_code, 1, "%s", r.err);
        cr_expect(strstr(r.err, "train.precision: bf16:"), "%s", r.err);
        tu_run_free(&r);
    } else {
        tu_run(&r, argv, 45);
        cr_assert_eq(r.exit_code, 0, "train failed (%d): %s", r.exit_code, r.err);
        cr_expect_str_eq(summary_text(r.out, "precision"), "bf16", "%s", r.out);
        cJSON *lines = read_progress(progress);
        const cJSON *start = cJSON_GetArrayItem(lines, 0);
        const cJSON *result = cJSON_GetArrayItem(lines, cJSON_GetArraySize(lines) - 1);
        cr_assert_str_eq(event_of(result), "result");
        cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(start, "precision")), "bf16");
        cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(result, "precision")), "bf16");
        cr_expect(isfinite(num(result, "val_bpb")));
        cJSON_Delete(lines);
        tu_run_free(&r);
    }
    free(spec);
    spec = write_spec_budget("auto", "\"token_budget\":1280", "", ",\"precision\":\"auto\"");
    argv[6] = spec;
    setenv("NIGHTSHIFT_ISA", "avx2", 1);
    tu_run(&r, argv, 45);
    unsetenv("NIGHTSHIFT_ISA");
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    cr_expect_str_eq(summary_text(r.out, "precision"), "fp32", "auto on avx2: %s", r.out);
    tu_run_free(&r);
    free(spec);
    free(progress);
}

/* test_grad_cli.c - `nightshift grad`, run as a separate process: loss and
 * gradient file for a tiny model, agreement with the in-process engine, and
 * the error paths (bad token file, ids out of range, missing checkpoint). */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "gpt.h"
#include "spec.h"

#define V 32
#define T 8

/* Tiny: GQA, value embeddings on layer 1, sliding window on layer 0. The
 * dropout only shows if grad wrongly runs the training-mode forward. */
static const char SPEC_JSON[] =
    "{\"model\":{\"vocab_size\":32,\"depth\":2,\"n_embd\":16,\"n_head\":2,\"n_kv_head\":1,"
    "\"seq_len\":8,\"window_pattern\":\"SL\",\"ve_gate_channels\":8,\"embed_dropout\":0.5},"
    "\"train\":{\"batch_size\":1,\"total_batch_tokens\":8}}";

static char tmpdir[256];
static char spec_path[512], ckpt_path[512], tok_path[512], out_path[512];

static void teardown(void) {
    DIR *d = opendir(tmpdir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(tmpdir);
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    if (n) cr_assert_eq(fwrite(data, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* Two rows of T+1 ids; the second row's last target is ignored. */
static int32_t TOKENS[2][T + 1] = {
    {1, 5, 9, 2, 31, 0, 7, 7, 3},
    {4, 4, 30, 12, 6, 18, 25, 11, -1},
};

/* Builds a model from SPEC_JSON with autoresearch init. Free with gpt_free;
 * *s is filled and must be released with spec_free. */
static gpt_t *make_model(spec_t *s, uint64_t seed) {
    char err[256] = "";
    cr_assert_eq(spec_parse(SPEC_JSON, strlen(SPEC_JSON), s, err, sizeof err), 0, "%s", err);
    gpt_t *m = gpt_new(&s->model, err, sizeof err);
    cr_assert_not_null(m, "%s", err);
    gpt_init_weights(m, seed);
    /* Zero-initialised projections and gates make many gradients vanish;
     * perturb every weight so that each tensor's gradient is exercised. */
    for (size_t i = 0; i < m->n_params; i++)
        m->params[i] += 0.01f * (float)((int)((i * 7919) % 13) - 6);
    return m;
}

static void setup(void) {
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/nightshift-grad-XXXXXX", base && *base ? base : "/tmp");
    cr_assert_not_null(mkdtemp(tmpdir));
    snprintf(spec_path, sizeof spec_path, "%s/spec.json", tmpdir);
    snprintf(ckpt_path, sizeof ckpt_path, "%s/w.safetensors", tmpdir);
    snprintf(tok_path, sizeof tok_path, "%s/batch.bin", tmpdir);
    snprintf(out_path, sizeof out_path, "%s/grads.safetensors", tmpdir);
    write_bytes(spec_path, SPEC_JSON, strlen(SPEC_JSON));
    write_bytes(tok_path, TOKENS, sizeof TOKENS);
    spec_t s;
    gpt_t *m = make_model(&s, 7);
    char err[512] = "";
    cr_assert_eq(ckpt_write(m, m->params, NULL, ckpt_path, err, sizeof err), 0, "%s", err);
    gpt_free(m);
    spec_free(&s);
}

TestSuite(grad_cli, .init = setup, .fini = teardown, .timeout = 60);

typedef struct {
    int code; /* exit status, -1 if killed by a signal */
    char out[4096], err[4096];
} result_t;

static void slurp(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    size_t k = fread(buf, 1, n - 1, f);
    buf[k] = '\0';
    fclose(f);
    unlink(path);
}

/* Runs `$NIGHTSHIFT_BIN grad <args...>` with a hard timeout. */
static void run_grad(result_t *r, const char *const *args) {
    const char *bin = getenv("NIGHTSHIFT_BIN");
    cr_assert_not_null(bin, "NIGHTSHIFT_BIN is not set (run through make test)");
    char *argv[16];
    int n = 0;
    argv[n++] = (char *)bin;
    argv[n++] = "grad";
    for (; *args && n < 15; args++) argv[n++] = (char *)*args;
    argv[n] = NULL;
    char outp[600], errp[600];
    snprintf(outp, sizeof outp, "%s/stdout", tmpdir);
    snprintf(errp, sizeof errp, "%s/stderr", tmpdir);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int o = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0) _exit(127);
        dup2(o, 1);
        dup2(e, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (waitpid(pid, &status, WNOHANG) == pid) break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec > 30) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            cr_assert_fail("nightshift grad timed out");
        }
        usleep(5000);
    }
    r->code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    slurp(outp, r->out, sizeof r->out);
    slurp(errp, r->err, sizeof r->err);
}

#define GRAD(r, ...) run_grad(r, (const char *const[]){__VA_ARGS__, NULL})

Test(grad_cli, loss_and_gradients) {
    result_t r;
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path, "--out",
         out_path);
    cr_assert_eq(r.code, 0, "exit %d, stderr: %s", r.code, r.err);
    float loss = NAN;
    cr_assert_eq(sscanf(r.out, "loss: %f", &loss), 1, "stdout: %s", r.out);
    cr_assert(isfinite(loss) && fabsf(loss - logf(V)) < 1.0f, "loss %g vs ln V %g", loss, logf(V));

    /* The same forward/backward in this process must agree. */
    spec_t s;
    gpt_t *m = make_model(&s, 7);
    int in[2 * T], tg[2 * T];
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < T; t++) {
            in[b * T + t] = TOKENS[b][t];
            tg[b * T + t] = TOKENS[b][t + 1];
        }
    gpt_zero_grad(m);
    float want = gpt_forward(m, in, tg, 2, T, GPT_EVAL);
    gpt_backward(m, 1.0f);
    cr_assert(fabsf(loss - want) <= 1e-6f * fabsf(want), "cli %.9g in-process %.9g", loss, want);

    ckpt_file_t f;
    char err[512] = "";
    cr_assert_eq(ckpt_read(out_path, &f, err, sizeof err), 0, "%s", err);
    cr_assert_eq(f.n, m->n_tensors);
    cr_assert_not_null(f.metadata);
    cJSON *meta = cJSON_Parse(f.metadata);
    cr_assert_str_eq(cJSON_GetObjectItem(meta, "batch_rows")->valuestring, "2");
    cJSON_Delete(meta);
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor_t *t = &m->tensors[i];
        const ckpt_tensor_t *c = ckpt_file_find(&f, t->name);
        cr_assert_not_null(c, "grads file lacks %s", t->name);
        cr_assert_eq(c->numel, t->numel, "%s", t->name);
        double diff = 0, norm = 0;
        for (size_t k = 0; k < t->numel; k++) {
            double g = m->grads[t->offset + k];
            diff = fmax(diff, fabs(c->data[k] - g));
            norm = fmax(norm, fabs(g));
        }
        cr_assert(diff <= 1e-5 * norm + 1e-9, "%s: max diff %g (max |g| %g)", t->name, diff, norm);
        cr_assert(norm > 0, "%s: gradient is all zero", t->name);
    }
    ckpt_file_close(&f);
    gpt_free(m);
    spec_free(&s);

    /* Without --out nothing is written. */
    unlink(out_path);
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_assert_eq(access(out_path, F_OK), -1);
}

/* Value of `key: X` on its own line of out; fails the test when absent. */
static double output_value(const char *out, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\n%s: ", key);
    const char *p = strstr(out, pat);
    cr_assert_not_null(p, "no %s in stdout: %s", key, out);
    char *end = NULL;
    double v = strtod(p + strlen(pat), &end);
    cr_assert(end != p + strlen(pat) && *end == '\n', "bad %s value in: %s", key, out);
    return v;
}

Test(grad_cli, repeat_prints_timings) {
    result_t r;
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path);
    cr_assert_eq(r.code, 0, "%s", r.err);
    float once = NAN;
    cr_assert_eq(sscanf(r.out, "loss: %f", &once), 1, "%s", r.out);
    cr_assert_null(strstr(r.out, "_ms_"), "timings without --repeat: %s", r.out);

    /* Repeating the pass on the same batch changes neither the loss nor the
     * gradients (each pass starts from zero), and adds the three timings in
     * order after the loss line. */
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path, "--repeat", "5",
         "--out", out_path);
    cr_assert_eq(r.code, 0, "%s", r.err);
    float loss = NAN;
    cr_assert_eq(sscanf(r.out, "loss: %f", &loss), 1, "%s", r.out);
    cr_assert_eq(loss, once, "repeat loss %.9g vs single %.9g", loss, once);
    double med = output_value(r.out, "fwd_bwd_ms_median");
    double min = output_value(r.out, "fwd_bwd_ms_min");
    double fwd = output_value(r.out, "forward_ms_median");
    cr_assert(min > 0 && min <= med && med < 10000, "min %g median %g", min, med);
    cr_assert(fwd > 0 && fwd <= med, "forward %g vs pass %g", fwd, med);
    const char *a = strstr(r.out, "fwd_bwd_ms_median"), *b = strstr(r.out, "fwd_bwd_ms_min"),
               *c = strstr(r.out, "forward_ms_median");
    cr_assert(a < b && b < c, "timings out of order: %s", r.out);

    ckpt_file_t f;
    char err[512] = "";
    cr_assert_eq(ckpt_read(out_path, &f, err, sizeof err), 0, "%s", err);
    spec_t s;
    gpt_t *m = make_model(&s, 7);
    int in[2 * T], tg[2 * T];
    for (int bi = 0; bi < 2; bi++)
        for (int t = 0; t < T; t++) {
            in[bi * T + t] = TOKENS[bi][t];
            tg[bi * T + t] = TOKENS[bi][t + 1];
        }
    gpt_zero_grad(m);
    gpt_forward(m, in, tg, 2, T, GPT_EVAL);
    gpt_backward(m, 1.0f);
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor_t *t = &m->tensors[i];
        const ckpt_tensor_t *ct = ckpt_file_find(&f, t->name);
        cr_assert_not_null(ct, "%s", t->name);
        for (size_t k = 0; k < t->numel; k++) {
            float g = m->grads[t->offset + k];
            cr_assert(fabsf(ct->data[k] - g) <= 1e-5f * fabsf(g) + 1e-9f, "%s[%zu]: %g vs %g",
                      t->name, k, ct->data[k], g);
        }
    }
    ckpt_file_close(&f);
    gpt_free(m);
    spec_free(&s);

    /* --repeat 1 times the single pass (no warm-up) and prints the keys too. */
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path, "--repeat=1");
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_assert_eq(output_value(r.out, "fwd_bwd_ms_min"), output_value(r.out, "fwd_bwd_ms_median"));

    const char *bad[] = {"0", "-3", "2x", "", "1000001"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path, "--repeat",
             bad[i]);
        cr_assert_eq(r.code, 2, "--repeat '%s': exit %d", bad[i], r.code);
        cr_assert_not_null(strstr(r.err, "grad: --repeat"), "%s", r.err);
    }
    GRAD(&r, "--help");
    cr_assert_not_null(strstr(r.out, "--repeat N"), "%s", r.out);
}

Test(grad_cli, rejects_bad_token_file_size) {
    result_t r;
    unsigned char junk[4 * (T + 1) + 2] = {0};
    write_bytes(tok_path, junk, sizeof junk);
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path);
    cr_assert_eq(r.code, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "grad: "), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "not a positive multiple of 36"), "%s", r.err);
    cr_assert_eq(r.out[0], '\0', "%s", r.out);
    write_bytes(tok_path, junk, 0);
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path);
    cr_assert_eq(r.code, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "not a positive multiple"), "%s", r.err);
}

Test(grad_cli, rejects_token_ids_out_of_range) {
    result_t r;
    int32_t rows[2][T + 1];
    memcpy(rows, TOKENS, sizeof rows);
    rows[1][3] = V; /* one past the vocabulary */
    write_bytes(tok_path, rows, sizeof rows);
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path);
    cr_assert_eq(r.code, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "token id 32 at row 1, position 3 is out of range [0, 32)"),
                       "%s", r.err);
    /* -1 is only allowed where it is purely a target (the last position). */
    memcpy(rows, TOKENS, sizeof rows);
    rows[0][2] = -1;
    write_bytes(tok_path, rows, sizeof rows);
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path);
    cr_assert_eq(r.code, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "token id -1 at row 0, position 2"), "%s", r.err);
}

Test(grad_cli, rejects_missing_or_mismatched_checkpoint) {
    result_t r;
    char missing[600];
    snprintf(missing, sizeof missing, "%s/nope.safetensors", tmpdir);
    GRAD(&r, "--spec", spec_path, "--checkpoint", missing, "--tokens", tok_path);
    cr_assert_eq(r.code, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "grad: ckpt: cannot open"), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "nope.safetensors"), "%s", r.err);

    /* Weights of a wider model. */
    const char *wide = "{\"model\":{\"vocab_size\":32,\"depth\":2,\"n_embd\":32,\"n_head\":2,"
                       "\"n_kv_head\":1,\"seq_len\":8,\"window_pattern\":\"SL\","
                       "\"ve_gate_channels\":8},"
                       "\"train\":{\"batch_size\":1,\"total_batch_tokens\":8}}";
    spec_t s;
    char err[512] = "";
    cr_assert_eq(spec_parse(wide, strlen(wide), &s, err, sizeof err), 0, "%s", err);
    gpt_t *m = gpt_new(&s.model, err, sizeof err);
    cr_assert_not_null(m, "%s", err);
    cr_assert_eq(ckpt_write(m, m->params, NULL, ckpt_path, err, sizeof err), 0, "%s", err);
    gpt_free(m);
    spec_free(&s);
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path);
    cr_assert_eq(r.code, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "has shape [32,32], model expects [32,16]"), "%s", r.err);
}

Test(grad_cli, usage_and_spec_errors) {
    result_t r;
    GRAD(&r, "--help");
    cr_assert_eq(r.code, 0);
    cr_assert_not_null(strstr(r.out, "usage: nightshift grad"), "%s", r.out);
    GRAD(&r, "--spec", spec_path, "--tokens", tok_path);
    cr_assert_eq(r.code, 2, "%s", r.err);
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path, "--bogus");
    cr_assert_eq(r.code, 2, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "--bogus"), "%s", r.err);
    GRAD(&r, "--spec", spec_path, "--checkpoint");
    cr_assert_eq(r.code, 2, "%s", r.err);

    const char *novocab = "{\"model\":{\"depth\":2}}";
    write_bytes(spec_path, novocab, strlen(novocab));
    GRAD(&r, "--spec", spec_path, "--checkpoint", ckpt_path, "--tokens", tok_path);
    cr_assert_eq(r.code, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "grad: model.vocab_size is required"), "%s", r.err);
}

/* grad.c - `nightshift grad`: the loss and every gradient of one batch.
 *
 *     nightshift grad --spec SPEC.json --checkpoint W.safetensors
 *                     --tokens BATCH.bin [--out GRADS.safetensors] [--repeat N]
 *
 * Loads the weights, runs one forward (evaluation mode: no dropout) and one
 * backward over the batch, prints `loss: <float>` and optionally writes the
 * gradients as a safetensors file with the weights' names and shapes. This is
 * how another engine (PyTorch, a GPU port) is checked against this one.
 *
 * With --repeat N the pass is also a benchmark (tests/bench): zero_grad +
 * forward + backward run N times on the same batch, after one untimed warm-up
 * when N > 1, and the wall-clock times in milliseconds follow the loss line:
 *     fwd_bwd_ms_median: X   (zero_grad + forward + backward)
 *     fwd_bwd_ms_min: X
 *     forward_ms_median: X   (the forward alone)
 * Every pass starts from zeroed gradients, so --out writes one batch's
 * gradients whatever N is.
 *
 * BATCH.bin holds B rows of seq_len+1 little-endian int32 token ids: a row's
 * first seq_len ids are the inputs, its last seq_len the targets (-1 = no
 * target at that position). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/threads.h"
#include "engine/ckpt.h"
#include "engine/gemm.h"
#include "engine/cli.h"
#include "engine/gpt.h"
#include "engine/spec.h"
#include "engine/util.h"

#define GRAD_MAX_REPEAT 100000

static void usage(FILE *out) {
    fprintf(out, "usage: nightshift grad --spec SPEC.json --checkpoint W.safetensors\n"
                 "                       --tokens BATCH.bin [--out GRADS.safetensors]\n"
                 "                       [--repeat N]\n"
                 "\n"
                 "Runs one forward and backward pass of the spec's model with the given weights\n"
                 "over BATCH.bin (B rows of seq_len+1 little-endian int32 ids: inputs are a row's\n"
                 "first seq_len ids, targets its last seq_len, -1 = ignored) and prints the mean\n"
                 "loss as `loss: <value>`. With --out, writes d(loss)/d(param) for every tensor\n"
                 "as safetensors. The spec must give model.vocab_size.\n"
                 "\n"
                 "--repeat N (default 1) times the pass: zero_grad + forward + backward run N\n"
                 "times on the same batch (after one untimed warm-up when N > 1), and\n"
                 "`fwd_bwd_ms_median: X`, `fwd_bwd_ms_min: X` and `forward_ms_median: X`\n"
                 "(milliseconds of wall clock; the forward timed on its own too) follow the loss\n"
                 "line. BLAS threads come from the spec's resources.threads (0 = every CPU).\n");
}

/* Reads BATCH.bin into a malloc'd array of row-major (B, T+1) ids (caller
 * frees *ids) and sets *rows = B. Returns 0 or -1 with err. */
static int read_tokens(const char *path, int T, int32_t **ids, int *rows, char *err,
                       size_t errlen) {
    FILE *f = fopen(path, "rb");
    unsigned char *raw = NULL;
    int32_t *out = NULL;
    if (!f) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s is not a regular file", path);
        goto fail;
    }
    size_t row_bytes = 4 * ((size_t)T + 1);
    size_t size = (size_t)st.st_size;
    if (size == 0 || size % row_bytes != 0 || size / row_bytes > INT32_MAX / ((size_t)T + 1)) {
        snprintf(err, errlen,
                 "%s: size %zu bytes is not a positive multiple of %zu (rows of seq_len+1 = %d "
                 "int32 ids)",
                 path, size, row_bytes, T + 1);
        goto fail;
    }
    raw = malloc(size);
    out = malloc(size);
    if (!raw || !out) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    if (fread(raw, 1, size, f) != size) {
        snprintf(err, errlen, "%s: short read", path);
        goto fail;
    }
    for (size_t i = 0; i < size / 4; i++) {
        uint32_t u = (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 |
                     (uint32_t)raw[4 * i + 2] << 16 | (uint32_t)raw[4 * i + 3] << 24;
        memcpy(&out[i], &u, 4);
    }
    free(raw);
    fclose(f);
    *ids = out;
    *rows = (int)(size / row_bytes);
    return 0;
fail:
    free(raw);
    free(out);
    if (f) fclose(f);
    return -1;
}

/* Splits the (B, T+1) rows into inputs and targets (each (B, T), malloc'd into
 * *in and *tg, caller frees) and checks every id's range. */
static int split_rows(const int32_t *ids, int B, int T, int V, const char *path, int **in, int **tg,
                      char *err, size_t errlen) {
    size_t n = (size_t)B * T;
    *in = malloc(n * sizeof **in);
    *tg = malloc(n * sizeof **tg);
    if (!*in || !*tg) {
        snprintf(err, errlen, "out of memory for %d x %d tokens", B, T);
        goto fail;
    }
    for (int b = 0; b < B; b++) {
        const int32_t *row = ids + (size_t)b * (T + 1);
        for (int j = 0; j <= T; j++) {
            int32_t id = row[j];
            int is_input = j<T, is_target = j> 0;
            /* Position 0 is only an input; position T only a target. */
            int ok = id >= 0 ? id < V : (id == -1 && !is_input);
            if (!ok) {
                snprintf(err, errlen,
                         "%s: token id %d at row %d, position %d is out of range [0, %d)%s", path,
                         (int)id, b, j, V, is_input ? "" : " (targets may also be -1)");
                goto fail;
            }
            if (is_input) (*in)[(size_t)b * T + j] = id;
            if (is_target) (*tg)[(size_t)b * T + j - 1] = id;
        }
    }
    return 0;
fail:
    free(*in);
    free(*tg);
    *in = *tg = NULL;
    return -1;
}

/* Value of option `name` at argv[*i] ("--name V" or "--name=V"), advancing *i;
 * NULL if argv[*i] is not that option. Sets *missing when the value is absent. */
static const char *opt_value(int argc, char **argv, int *i, const char *name, int *missing) {
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0) return NULL;
    if (argv[*i][n] == '=') return argv[*i] + n + 1;
    if (argv[*i][n] != '\0') return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

/* Parses a whole decimal repeat count in [1, GRAD_MAX_REPEAT]; 0 or -1. */
static int parse_repeat(const char *text, int *out) {
    char *end = NULL;
    errno = 0;
    long n = strtol(text, &end, 10);
    if (errno || end == text || *end != '\0' || n < 1 || n > GRAD_MAX_REPEAT) return -1;
    *out = (int)n;
    return 0;
}

/* One zero_grad + forward + backward over (B, T), the loss into *loss.
 * Stores the forward's and the whole pass's wall-clock seconds in *fwd_s and
 * *pass_s when they are not NULL. Returns 0, or NS_ERR_NOMEM when the forward
 * could not allocate (no backward then). */
static int grad_pass(gpt_t *m, const int *in, const int *tg, int B, int T, double *fwd_s,
                     double *pass_s, float *loss) {
    double t0 = util_now();
    gpt_zero_grad(m);
    double t1 = util_now();
    int rc = gpt_forward(m, in, tg, B, T, GPT_EVAL, loss);
    double t2 = util_now();
    if (rc < 0) return rc;
    gpt_backward(m, 1.0f);
    double t3 = util_now();
    if (fwd_s) *fwd_s = t2 - t1;
    if (pass_s) *pass_s = t3 - t0;
    return 0;
}

typedef struct {
    const char *spec_path, *ckpt_path, *tokens_path, *out_path;
    int repeat, timed; /* timed: --repeat was given, so print the times */
} grad_args_t;

/* Returns 0, 1 for --help (printed), or 2 after a usage error (printed). */
static int grad_parse(int argc, char **argv, grad_args_t *a) {
    *a = (grad_args_t){.repeat = 1};
    for (int i = 1; i < argc; i++) {
        int missing = 0;
        const char *v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 1;
        } else if ((v = opt_value(argc, argv, &i, "--spec", &missing))) {
            a->spec_path = v;
        } else if ((v = opt_value(argc, argv, &i, "--checkpoint", &missing))) {
            a->ckpt_path = v;
        } else if ((v = opt_value(argc, argv, &i, "--tokens", &missing))) {
            a->tokens_path = v;
        } else if ((v = opt_value(argc, argv, &i, "--out", &missing))) {
            a->out_path = v;
        } else if ((v = opt_value(argc, argv, &i, "--repeat", &missing))) {
            if (parse_repeat(v, &a->repeat) != 0) {
                fprintf(stderr, "grad: --repeat %s: expected a whole number from 1 to %d\n", v,
                        GRAD_MAX_REPEAT);
                usage(stderr);
                return 2;
            }
            a->timed = 1;
        } else {
            fprintf(stderr, "grad: %s %s\n", missing ? "missing value for" : "unknown argument",
                    argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!a->spec_path || !a->ckpt_path || !a->tokens_path) {
        fprintf(stderr, "grad: --spec, --checkpoint and --tokens are required\n");
        usage(stderr);
        return 2;
    }
    return 0;
}

/* The passes (a warm-up first when repeated: BLAS starts its threads, the
 * allocator settles), the loss and, when timed, the times on stdout.
 * Returns 0, or -1 after saying why on stderr. */
static int grad_passes(gpt_t *m, const int *in, const int *tg, int B, int T, const grad_args_t *a,
                       float *loss) {
    double *fwd_s = NULL, *pass_s = NULL; /* seconds per timed pass, `repeat` each */
    int rc = -1;
    if (a->timed) {
        fwd_s = malloc((size_t)a->repeat * sizeof *fwd_s);
        pass_s = malloc((size_t)a->repeat * sizeof *pass_s);
        if (!fwd_s || !pass_s) {
            fprintf(stderr, "grad: out of memory for %d timings\n", a->repeat);
            goto done;
        }
    }
    *loss = 0.0f;
    int pass_rc = a->repeat > 1 ? grad_pass(m, in, tg, B, T, NULL, NULL, loss) : 0;
    for (int r = 0; r < a->repeat && pass_rc == 0 && !isnan(*loss); r++)
        pass_rc =
            grad_pass(m, in, tg, B, T, fwd_s ? &fwd_s[r] : NULL, pass_s ? &pass_s[r] : NULL, loss);
    if (pass_rc < 0) {
        fprintf(stderr, "grad: out of memory in the forward pass\n");
        goto done;
    }
    if (isnan(*loss)) {
        fprintf(stderr, "grad: forward pass gave NaN (non-finite weights)\n");
        goto done;
    }
    printf("loss: %.9g\n", *loss);
    if (a->timed) {
        double pass_min = pass_s[0];
        for (int r = 1; r < a->repeat; r++) pass_min = fmin(pass_min, pass_s[r]);
        printf("fwd_bwd_ms_median: %.3f\n", 1e3 * util_median(pass_s, a->repeat));
        printf("fwd_bwd_ms_min: %.3f\n", 1e3 * pass_min);
        printf("forward_ms_median: %.3f\n", 1e3 * util_median(fwd_s, a->repeat));
    }
    fflush(stdout);
    rc = 0;
done:
    free(fwd_s);
    free(pass_s);
    return rc;
}

int grad_main(int argc, char **argv) {
    grad_args_t a;
    int rc = grad_parse(argc, argv, &a);
    if (rc) return rc == 1 ? 0 : 2;
    char err[512];
    spec_t spec;
    gpt_t *m = NULL;
    int32_t *ids = NULL;
    int *in = NULL, *tg = NULL;
    int spec_loaded = 0, B = 0;
    float loss;
    rc = 1;
    int spec_rc = spec_load(a.spec_path, &spec, err, sizeof err);
    if (spec_rc != 0) {
        /* spec_load names the file itself when it cannot read it. */
        if (spec_rc != NS_ERR_INVALID)
            fprintf(stderr, "grad: %s\n", err);
        else
            fprintf(stderr, "grad: %s: %s\n", a.spec_path, err);
        goto done;
    }
    spec_loaded = 1;
    const spec_model_t *cfg = &spec.model;
    if (cfg->vocab_size <= 0) {
        fprintf(stderr, "grad: model.vocab_size is required (no dataset to take it from)\n");
        goto done;
    }
    const int T = cfg->seq_len, V = cfg->vocab_size;
    threads_set(spec.resources.threads); /* as `train` does: 0 = every CPU */
    if (gemm_set_precision_named(spec_precision_name(spec.train.precision), err, sizeof err) < 0) {
        fprintf(stderr, "grad: %s\n", err);
        goto done;
    }
    if (read_tokens(a.tokens_path, T, &ids, &B, err, sizeof err) != 0 ||
        split_rows(ids, B, T, V, a.tokens_path, &in, &tg, err, sizeof err) != 0 ||
        !(m = gpt_new(cfg, err, sizeof err)) || ckpt_load(m, a.ckpt_path, err, sizeof err) != 0) {
        fprintf(stderr, "grad: %s\n", err);
        goto done;
    }
    if (grad_passes(m, in, tg, B, T, &a, &loss) < 0) goto done;
    if (a.out_path) {
        char meta[256];
        snprintf(meta, sizeof meta,
                 "{\"format\":\"nightshift-grads\",\"loss\":\"%.9g\",\"batch_rows\":\"%d\","
                 "\"seq_len\":\"%d\"}",
                 loss, B, T);
        if (ckpt_write(m, m->grads, meta, a.out_path, err, sizeof err) != 0) {
            fprintf(stderr, "grad: %s\n", err);
            goto done;
        }
    }
    rc = 0;
done:
    gpt_free(m);
    free(ids);
    free(in);
    free(tg);
    if (spec_loaded) spec_free(&spec);
    return rc;
}

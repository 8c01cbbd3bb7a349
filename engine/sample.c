/* sample.c - `nightshift sample`: generate text from a saved checkpoint, so a
 * person can look at what a model learned.
 *
 * The checkpoint's metadata holds the run's canonical spec ("nightshift_spec",
 * written by `train --save`), which names the model and the dataset; the
 * dataset's tokenizer (DIR/datasets/NAME/tokenizer.json) turns the prompt into
 * ids and the ids back into text. Generation recomputes the forward over the
 * last seq_len tokens for every new token: simple, and fast enough for the
 * few hundred tokens a person reads. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/ckpt.h"
#include "engine/cli.h"
#include "engine/gpt.h"
#include "engine/rng.h"
#include "engine/spec.h"
#include "engine/tok.h"
#include "engine/util.h"

typedef struct {
    const char *dir, *checkpoint, *prompt;
    int tokens, top_k;
    double temperature;
    uint64_t seed;
} sample_opts_t;

/* Draw the next id from logits (V) with temperature and top-k (0 = all);
 * temperature 0 is greedy. scratch: V floats. */
static int draw(const float *logits, int V, double temperature, int top_k, rng_t *r,
                float *scratch) {
    int best = 0;
    for (int j = 1; j < V; j++)
        if (logits[j] > logits[best]) best = j;
    if (temperature <= 0) return best;
    /* the k-th largest logit is the cut-off (ties may let a few more through) */
    float cut = -INFINITY;
    if (top_k > 0 && top_k < V) {
        memcpy(scratch, logits, (size_t)V * sizeof(float));
        for (int k = 0; k < top_k; k++) {
            int m = 0;
            for (int j = 1; j < V; j++)
                if (scratch[j] > scratch[m]) m = j;
            cut = scratch[m];
            scratch[m] = -INFINITY;
        }
    }
    double sum = 0.0;
    for (int j = 0; j < V; j++) {
        scratch[j] = logits[j] >= cut ? (float)exp((logits[j] - logits[best]) / temperature) : 0.0f;
        sum += scratch[j];
    }
    double u = rng_uniform(r) * sum, acc = 0.0;
    for (int j = 0; j < V; j++) {
        acc += scratch[j];
        if (u < acc) return j;
    }
    return best;
}

/* Up to o->tokens tokens drawn after ids (which holds at least one) into
 * ids, each from the model's logits over the last T tokens; the document's
 * end (bos) stops it. Returns 0, or -1 with err. */
static int generate(gpt_t *m, tok_ids_t *ids, int32_t bos, int V, int T, const sample_opts_t *o,
                    char *err, size_t errlen) {
    int *window = malloc((size_t)T * sizeof(int)), rc = -1;
    float *scratch = malloc((size_t)V * sizeof(float));
    rng_t r;
    rng_seed(&r, o->seed);
    if (!window || !scratch) goto oom;
    for (int n = 0; n < o->tokens; n++) {
        size_t len = ids->n < (size_t)T ? ids->n : (size_t)T;
        for (size_t i = 0; i < len; i++) window[i] = ids->ids[ids->n - len + i];
        if (gpt_forward(m, window, NULL, 1, (int)len, GPT_EVAL, NULL) < 0) goto oom;
        int next = draw(gpt_logits(m, 0, (int)len - 1), V, o->temperature, o->top_k, &r, scratch);
        if (next == bos) break; /* the model ended the document */
        if (tok_ids_push(ids, next) < 0) goto oom;
    }
    rc = 0;
    goto done;
oom:
    snprintf(err, errlen, "out of memory");
done:
    free(window);
    free(scratch);
    return rc;
}

static int sample_run(const sample_opts_t *o) {
    char err[512], path[PATH_MAX + 256];
    ckpt_file_t f = {0};
    spec_t spec;
    int have_spec = 0, rc = 1;
    tok_t *tok = NULL;
    gpt_t *m = NULL;
    tok_ids_t ids = {0};
    cJSON *meta = NULL;

    if (ckpt_read(o->checkpoint, &f, err, sizeof err) < 0) goto fail;
    meta = f.metadata ? cJSON_Parse(f.metadata) : NULL;
    const char *spec_json = cJSON_GetStringValue(cJSON_GetObjectItem(meta, "nightshift_spec"));
    if (!spec_json) {
        snprintf(err, sizeof err,
                 "%.300s: no nightshift_spec in its metadata (save it with train --save)",
                 o->checkpoint);
        goto fail;
    }
    if (spec_parse(spec_json, strlen(spec_json), &spec, err, sizeof err) < 0) goto fail;
    have_spec = 1;
    snprintf(path, sizeof path, "%s/datasets/%s/tokenizer.json", o->dir, spec.dataset);
    if (!(tok = tok_load(path, err, sizeof err))) goto fail;
    spec.model.vocab_size = tok_vocab_size(tok);
    if (!(m = gpt_new(&spec.model, err, sizeof err))) goto fail;
    if (ckpt_load(m, o->checkpoint, err, sizeof err) < 0) goto fail;

    int V = spec.model.vocab_size, T = spec.model.seq_len;
    int32_t bos = tok_bos_id(tok);
    if (tok_ids_push(&ids, bos) < 0 ||
        tok_encode(tok, o->prompt, strlen(o->prompt), &ids, err, sizeof err) < 0)
        goto fail;
    size_t prompt_end = ids.n;
    if (generate(m, &ids, bos, V, T, o, err, sizeof err) < 0) goto fail;
    char *text = NULL;
    size_t text_len = 0;
    if (tok_decode(tok, ids.ids + 1, ids.n - 1, &text, &text_len, err, sizeof err) < 0) goto fail;
    fwrite(text, 1, text_len, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    fprintf(stderr, "sample: %zu prompt + %zu generated tokens\n", prompt_end - 1,
            ids.n - prompt_end);
    free(text);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "sample: %s\n", err);
    tok_ids_free(&ids);
    gpt_free(m);
    tok_free(tok);
    if (have_spec) spec_free(&spec);
    cJSON_Delete(meta);
    ckpt_file_close(&f);
    return rc;
}

static void sample_usage(FILE *out) {
    fprintf(out, "usage: nightshift sample ID [--dir DIR | --url URL] [--prompt TEXT]\n"
                 "       nightshift sample --checkpoint CKPT.safetensors [--dir DIR] [...]\n"
                 "                         [--tokens N] [--temperature T] [--top-k K] [--seed S]\n"
                 "Generates text from experiment ID's checkpoint (the daemon keeps one per run:\n"
                 "DIR/runs/ID/model.safetensors), or from any checkpoint saved by `train --save`.\n"
                 "The tokenizer comes from the run's dataset under DIR: the state directory\n"
                 "(default: the one holding the checkpoint when its path is .../runs/ID/...,\n"
                 "else state); --url asks a running daemon where its state directory is.\n"
                 "Defaults: 200 tokens, temperature 0.8, top-k 40 (0 = all); temperature 0 is\n"
                 "greedy.\n");
}

/* The state directory of a checkpoint at DIR/runs/ID/FILE: DIR into buf
 * ("." when the path is just runs/ID/FILE). Returns 0, or -1 when the path
 * does not have that shape. */
static int dir_of_checkpoint(const char *ckpt, char *buf, size_t len) {
    const char *slash[3] = {NULL, NULL, NULL}; /* the last three '/' */
    for (const char *p = ckpt; *p; p++)
        if (*p == '/') slash[0] = slash[1], slash[1] = slash[2], slash[2] = p;
    if (!slash[1] || !slash[2]) return -1;
    const char *runs = slash[0] ? slash[0] + 1 : ckpt;
    if (strncmp(runs, "runs/", 5) != 0 || runs + 4 != slash[1]) return -1;
    if (!slash[0])
        snprintf(buf, len, ".");
    else
        snprintf(buf, len, "%.*s", (int)(slash[0] - ckpt), ckpt);
    return buf[0] ? 0 : -1;
}

int sample_main(int argc, char **argv) {
    sample_opts_t o = {
        .dir = "state", .prompt = "", .tokens = 200, .top_k = 40, .temperature = 0.8, .seed = 1};
    static const struct option opts[] = {{"dir", required_argument, 0, 'd'},
                                         {"checkpoint", required_argument, 0, 'c'},
                                         {"prompt", required_argument, 0, 'p'},
                                         {"tokens", required_argument, 0, 'n'},
                                         {"temperature", required_argument, 0, 't'},
                                         {"top-k", required_argument, 0, 'k'},
                                         {"seed", required_argument, 0, 's'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int ch, dir_given = 0;
    char *end = NULL, ckpt_buf[PATH_MAX + 64], dir_buf[PATH_MAX];
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        long v = 0;
        errno = 0;
        switch (ch) {
        case 'd':
            o.dir = optarg;
            dir_given = 1;
            break;
        case 'c':
            o.checkpoint = optarg;
            break;
        case 'p':
            o.prompt = optarg;
            break;
        case 'n':
            v = strtol(optarg, &end, 10);
            o.tokens = v < INT_MIN || v > INT_MAX ? (errno = ERANGE, 0) : (int)v;
            break;
        case 't':
            o.temperature = strtod(optarg, &end);
            break;
        case 'k':
            v = strtol(optarg, &end, 10);
            o.top_k = v < INT_MIN || v > INT_MAX ? (errno = ERANGE, 0) : (int)v;
            break;
        case 's':
            o.seed = strtoull(optarg, &end, 10);
            break;
        case 'h':
            sample_usage(stdout);
            return 0;
        default:
            sample_usage(stderr);
            return 2;
        }
        if (end && *end) {
            fprintf(stderr, "sample: not a number: %s\n", optarg);
            return 2;
        }
        if (errno == ERANGE) {
            fprintf(stderr, "sample: out of range: %s\n", optarg);
            return 2;
        }
        end = NULL;
    }
    /* One positional argument: an experiment id, whose checkpoint the daemon keeps. */
    if (optind + 1 == argc && !o.checkpoint) {
        const char *id = argv[optind++];
        errno = 0;
        long long v = strtoll(id, &end, 10);
        if (!*id || *end || v <= 0 || errno == ERANGE) {
            fprintf(stderr, "sample: expected an experiment id, got '%s'\n", id);
            return 2;
        }
        snprintf(ckpt_buf, sizeof ckpt_buf, "%s/runs/%lld/model.safetensors", o.dir, v);
        o.checkpoint = ckpt_buf;
        if (access(ckpt_buf, R_OK) != 0) {
            fprintf(stderr,
                    "sample: no checkpoint for experiment %lld in %s/runs (%s); give --dir with "
                    "the daemon's state directory, or --url with its address\n",
                    v, o.dir, strerror(errno));
            return 1;
        }
    } else if (o.checkpoint && !dir_given &&
               dir_of_checkpoint(o.checkpoint, dir_buf, sizeof dir_buf) == 0) {
        o.dir = dir_buf;
    }
    if (optind != argc || !o.checkpoint || o.tokens < 0 || o.tokens > 100000 || o.top_k < 0 ||
        !(o.temperature >= 0)) {
        sample_usage(stderr);
        return 2;
    }
    return sample_run(&o);
}

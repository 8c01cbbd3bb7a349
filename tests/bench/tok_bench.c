/* tok_bench.c - how fast the BPE tokenizer trains and encodes.
 *
 *   make bench-tok                    (build/tok-bench REPEATS)
 *
 * About 1 MB of synthetic prose (the text of tok::trains_and_encodes_prose:
 * words of one to four syllables, tens of thousands of distinct chunks, the
 * common ones short) is trained to vocab 1024 and then encoded, REPEATS times
 * (default 5). Prints the median and the slowest of each, and fails (exit 1)
 * when a median is over its limit: training 3 s, encoding 2 s, on a quiet
 * 2-core machine. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/rng.h"
#include "engine/tok.h"

#define TRAIN_LIMIT_S  3.0
#define ENCODE_LIMIT_S 2.0

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The prose (malloc'd, *n bytes). */
static char *prose(size_t *n) {
    rng_t r;
    rng_seed(&r, 1);
    const char *syll[] = {"ka", "to", "re", "mi",  "su",  "na", "lo", "ve", "di", "po",
                          "an", "el", "or", "ith", "str", "qu", "ng", "ph", "ae", "ou"};
    size_t cap = 1 << 20, len = 0;
    char *text = malloc(cap + 64);
    if (!text) return NULL;
    while (len < cap) {
        int ns = 1 + (int)rng_below(&r, 4);
        for (int s = 0; s < ns; s++) {
            uint64_t k = rng_below(&r, 20);
            len += (size_t)sprintf(text + len, "%s", syll[k * k / 20]);
        }
        len += (size_t)sprintf(text + len, "%s",
                               rng_below(&r, 12) == 0   ? ". "
                               : rng_below(&r, 20) == 0 ? ",\n"
                                                        : " ");
    }
    *n = len;
    return text;
}

int main(int argc, char **argv) {
    int repeats = argc > 1 ? atoi(argv[1]) : 5;
    if (repeats < 1 || repeats > 1000) {
        fprintf(stderr, "usage: tok-bench [REPEATS (1..1000)]\n");
        return 2;
    }
    size_t n;
    char *text = prose(&n);
    double *train_s = malloc(repeats * sizeof *train_s), *enc_s = malloc(repeats * sizeof *enc_s);
    if (!text || !train_s || !enc_s) {
        fprintf(stderr, "tok-bench: out of memory\n");
        return 1;
    }
    size_t tokens = 0;
    for (int i = 0; i < repeats; i++) {
        char err[256] = "";
        const char *docs[1] = {text};
        double t0 = now_s();
        tok_t *t = tok_train(docs, &n, 1, 1024, NULL, err, sizeof err);
        train_s[i] = now_s() - t0;
        tok_ids_t ids = {0};
        t0 = now_s();
        if (!t || tok_encode(t, text, n, &ids, err, sizeof err) < 0) {
            fprintf(stderr, "tok-bench: %s\n", err);
            return 1;
        }
        enc_s[i] = now_s() - t0;
        tokens = ids.n;
        tok_ids_free(&ids);
        tok_free(t);
    }
    qsort(train_s, repeats, sizeof *train_s, cmp);
    qsort(enc_s, repeats, sizeof *enc_s, cmp);
    double train_med = train_s[repeats / 2], enc_med = enc_s[repeats / 2];
    printf("tok-bench: %zu bytes -> %zu tokens (vocab 1024), %d repeats\n", n, tokens, repeats);
    printf("  train   median %.3f s  slowest %.3f s  (limit %.1f s)\n", train_med,
           train_s[repeats - 1], TRAIN_LIMIT_S);
    printf("  encode  median %.3f s  slowest %.3f s  (limit %.1f s)\n", enc_med, enc_s[repeats - 1],
           ENCODE_LIMIT_S);
    int over = train_med > TRAIN_LIMIT_S || enc_med > ENCODE_LIMIT_S;
    if (over) printf("tok-bench: a median is over its limit\n");
    free(text);
    free(train_s);
    free(enc_s);
    return over;
}

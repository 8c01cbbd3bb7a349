/* calibrate.c - the calibrated sgemm peak (see calibrate.h). */
#include "engine/calibrate.h"

#include <cjson/cJSON.h>
#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/cli.h"
#include "engine/threads.h"
#include "engine/util.h"

double calibrate_measure_peak_gflops(int max_n, double seconds) {
    size_t n = (size_t)max_n;
    float *a = malloc(n * n * sizeof(float)), *b = malloc(n * n * sizeof(float));
    float *c = malloc(n * n * sizeof(float));
    double best = 0.0;
    if (!a || !b || !c) goto done;
    for (size_t i = 0; i < n * n; i++) {
        a[i] = (float)((i * 7) % 13) * 0.01f;
        b[i] = (float)((i * 5) % 11) * 0.01f;
    }
    double deadline = util_now() + seconds;
    /* Sizes from half to full: the peak is a property of large products. */
    for (int size = max_n / 2; util_now() < deadline; size = size >= max_n ? max_n / 2 : size * 2) {
        double t0 = util_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, size, size, size, 1.0f, a, size, b,
                    size, 0.0f, c, size);
        double dt = util_now() - t0;
        double gflops = 2.0 * size * (double)size * size / dt / 1e9;
        if (gflops > best) best = gflops;
    }
done:
    free(a);
    free(b);
    free(c);
    return best;
}

static char *cache_path(const char *dir) {
    char *p = NULL;
    if (asprintf(&p, "%s/calibration.json", dir) < 0) return NULL;
    return p;
}

int calibrate_cached_peak(const char *dir, int threads, double *gflops) {
    char *path = cache_path(dir), key[16];
    size_t len = 0;
    char *text = path ? util_read_file(path, 1 << 20, &len, NULL, 0) : NULL;
    int rc = -1;
    cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
    snprintf(key, sizeof key, "%d", threads);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(root, "peak_gflops_by_threads"), key);
    if (cJSON_IsNumber(v) && v->valuedouble > 0) {
        *gflops = v->valuedouble;
        rc = 0;
    }
    cJSON_Delete(root);
    free(text);
    free(path);
    return rc;
}

int calibrate_store_peak(const char *dir, int threads, double gflops, char *err, size_t errlen) {
    char *path = cache_path(dir), key[16];
    size_t len = 0;
    char *text = path ? util_read_file(path, 1 << 20, &len, NULL, 0) : NULL;
    cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        root = cJSON_CreateObject();
    }
    cJSON *table = cJSON_GetObjectItemCaseSensitive(root, "peak_gflops_by_threads");
    if (!cJSON_IsObject(table)) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, "peak_gflops_by_threads");
        table = cJSON_AddObjectToObject(root, "peak_gflops_by_threads");
    }
    snprintf(key, sizeof key, "%d", threads);
    cJSON_DeleteItemFromObjectCaseSensitive(table, key);
    cJSON_AddNumberToObject(table, key, gflops);
    char *out = cJSON_Print(root);
    int rc = out && path ? util_write_file_atomic(path, out, strlen(out), err, errlen) : -1;
    if (!out || !path) snprintf(err, errlen, "calibrate: out of memory");
    free(out);
    cJSON_Delete(root);
    free(text);
    free(path);
    return rc;
}

static void calibrate_usage(FILE *out) {
    fprintf(out, "usage: nightshift calibrate [--dir DIR] [--threads N] [--seconds S]\n"
                 "Measures the sgemm peak (GFLOP/s) with N BLAS threads (default: all CPUs)\n"
                 "and caches it in DIR/calibration.json (default DIR: state), where training\n"
                 "runs read it as the MFU denominator.\n");
}

int calibrate_main(int argc, char **argv) {
    const char *dir = "state";
    int threads = 0;
    double seconds = 3.0;
    static const struct option opts[] = {{"dir", required_argument, 0, 'd'},
                                         {"threads", required_argument, 0, 't'},
                                         {"seconds", required_argument, 0, 's'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'd':
            dir = optarg;
            break;
        case 't':
            threads = atoi(optarg);
            break;
        case 's':
            seconds = atof(optarg);
            break;
        case 'h':
            calibrate_usage(stdout);
            return 0;
        default:
            calibrate_usage(stderr);
            return 2;
        }
    }
    if (optind != argc || seconds <= 0 || threads < 0) {
        calibrate_usage(stderr);
        return 2;
    }
    char err[256];
    if (util_mkdirs(dir, err, sizeof err) < 0) {
        fprintf(stderr, "calibrate: %s\n", err);
        return 1;
    }
    threads = threads_set(threads);
    fprintf(stderr, "calibrate: timing sgemm with %d thread%s for %.0f s\n", threads,
            threads == 1 ? "" : "s", seconds);
    double peak = calibrate_measure_peak_gflops(2048, seconds);
    if (calibrate_store_peak(dir, threads, peak, err, sizeof err) < 0) {
        fprintf(stderr, "calibrate: %s\n", err);
        return 1;
    }
    printf("threads: %d\npeak_gflops: %.2f\n", threads, peak);
    return 0;
}

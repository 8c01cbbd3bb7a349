/* calibrate.c - the calibrated sgemm peak (see calibrate.h). */
#include "engine/calibrate.h"

#include <cblas.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "engine/cli.h"
#include "engine/gemm.h"
#include "engine/gemm_bf16.h"
#include "engine/threads.h"
#include "engine/util.h"

char *openblas_get_corename(void);

/* ------------------------------------------------------- what is running */

const char *calibrate_blas_core(void) {
    const char *c = openblas_get_corename();
    return c && *c ? c : "unknown";
}

const char *calibrate_blas_isa(void) {
    static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    static const char *const avx2[] = {"Haswell", "Zen", "Excavator"};
    const char *c = calibrate_blas_core();
    for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
        if (!strcasecmp(c, avx512[i])) return "avx512";
    for (size_t i = 0; i < sizeof avx2 / sizeof *avx2; i++)
        if (!strcasecmp(c, avx2[i])) return "avx2";
    return "generic";
}

/* Instruction sets by width. */
static int isa_rank(const char *isa) {
    return !strcmp(isa, "avx512") ? 2 : !strcmp(isa, "avx2") ? 1 : 0;
}

const char *calibrate_wider_path(void) {
    const char *path = gemm_isa_name(gemm_current());
    return isa_rank(path) > isa_rank(calibrate_blas_isa()) ? path : "";
}

void calibrate_cpu_model(char *buf, size_t len) {
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) && strncmp(line, "Model", 5)) continue;
        const char *v = strchr(line, ':');
        if (!v) continue;
        v += 1 + strspn(v + 1, " \t");
        snprintf(buf, len, "%.*s", (int)strcspn(v, "\n"), v);
        break;
    }
    fclose(f);
}

/* ------------------------------------------------- how busy the CPUs are */

/* Busy jiffies (everything but idle and iowait; steal counts as busy: another
 * guest had the core) summed over the CPUs this process may run on, from
 * /proc/stat. -1 when unreadable. */
static long long busy_jiffies(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return -1;
    char line[512];
    long long busy = 0;
    int seen = 0;
    while (fgets(line, sizeof line, f)) {
        int cpu;
        unsigned long long v[8] = {0};
        if (sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &v[0], &v[1], &v[2],
                   &v[3], &v[4], &v[5], &v[6], &v[7]) < 5)
            continue;
        if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &set)) continue;
        /* user nice system idle iowait irq softirq steal */
        busy += (long long)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
        seen++;
    }
    fclose(f);
    return seen ? busy : -1;
}

static int affinity_cpus(void) {
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    return n > 0 ? n : 1;
}

/* ------------------------------------------------------------ measuring */

/* Best sgemm GFLOP/s over square sizes from max_n/2 to max_n for about
 * `seconds` on the team of threads_set: OpenBLAS's cblas_sgemm splitting
 * each product over it, or with `engine` the engine's kernel (a linear
 * layer's forward, y = x W^T, the same 2 n^3 FLOPs). */
static double time_sgemm(int max_n, double seconds, bool engine) {
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
    for (int size = max_n / 2; util_now() < deadline; size = size >= max_n ? max_n / 2 : size * 2) {
        double t0 = util_now();
        if (engine)
            gemm_linear_forward(c, a, size, b, size, size, size);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, size, size, size, 1.0f, a, size,
                        b, size, 0.0f, c, size);
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

void calibrate_measure(int threads, int max_n, double seconds, calibrate_peak_t *p) {
    memset(p, 0, sizeof *p);
    double load[1] = {0};
    if (getloadavg(load, 1) == 1) p->load1 = load[0];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(p->measured_at, sizeof p->measured_at, "%Y-%m-%dT%H:%M:%SZ", &tm);
    calibrate_cpu_model(p->cpu, sizeof p->cpu);

    const long hz = sysconf(_SC_CLK_TCK);
    const long long busy0 = busy_jiffies();
    const double self0 = util_cpu_seconds(), t0 = util_now();
    snprintf(p->isa, sizeof p->isa, "%s", calibrate_blas_isa());
    snprintf(p->path, sizeof p->path, "%s", calibrate_wider_path());
    p->gflops = p->blas_gflops = time_sgemm(max_n, seconds, false);
    if (*p->path) {
        p->engine_gflops = time_sgemm(max_n, seconds, true);
        if (p->engine_gflops > p->gflops) {
            p->gflops = p->engine_gflops;
            p->engine_sgemm = true;
            snprintf(p->isa, sizeof p->isa, "%s", p->path);
        }
    }
    char why[200];
    if (gemm_bf16_available(why, sizeof why)) {
        const gemm_precision was = gemm_current_precision();
        gemm_set_precision(GEMM_BF16, why, sizeof why);
        p->bf16_gflops = time_sgemm(max_n, seconds, true);
        snprintf(p->bf16_kernel, sizeof p->bf16_kernel, "%s", calibrate_bf16_kernel());
        gemm_set_precision(was, why, sizeof why);
    }
    const long long busy1 = busy_jiffies();
    const double wall = util_now() - t0, self = util_cpu_seconds() - self0;
    /* The CPUs' busy time that was not ours, over what they could give. */
    if (busy0 >= 0 && busy1 >= busy0 && hz > 0 && wall > 0) {
        double others = (double)(busy1 - busy0) / hz - self;
        p->others_cpu = others > 0 ? others / (wall * affinity_cpus()) : 0.0;
        if (p->others_cpu > 1.0) p->others_cpu = 1.0;
    }
    p->quiet = p->others_cpu <= CALIBRATE_QUIET_OTHERS;
    p->threads = threads;
    snprintf(p->blas_core, sizeof p->blas_core, "%s", calibrate_blas_core());
}

bool calibrate_measure_quiet(int threads, int max_n, double seconds, int attempts, double pause,
                             calibrate_peak_t *p) {
    calibrate_peak_t m;
    memset(p, 0, sizeof *p);
    for (int i = 0; i < attempts; i++) {
        if (i > 0) usleep((useconds_t)(pause * 1e6)); /* let a passing burst of work end */
        calibrate_measure(threads, max_n, seconds, &m);
        if (m.quiet) {
            *p = m;
            return true;
        }
        if (m.gflops > p->gflops) *p = m;
    }
    return false;
}

const char *calibrate_bf16_kernel(void) {
    return gemm_bf16_uses_amx() ? "amx-bf16" : "avx512-bf16";
}

void calibrate_describe(const calibrate_peak_t *p, char *buf, size_t len) {
    char sgemm[96];
    if (p->engine_sgemm)
        snprintf(sgemm, sizeof sgemm, "the engine's %s sgemm, OpenBLAS's %s kernels narrower",
                 p->isa, p->blas_core);
    else
        snprintf(sgemm, sizeof sgemm, "%s/%s sgemm", p->blas_core, p->isa);
    char bf16[64] = "";
    if (p->bf16_gflops > 0)
        snprintf(bf16, sizeof bf16, ", bf16 %.1f GFLOP/s (%s)", p->bf16_gflops, p->bf16_kernel);
    snprintf(buf, len, "%.1f GFLOP/s (%d thread%s, %s%s, %s, %s, others used %.0f%% of the CPUs%s)",
             p->gflops, p->threads, p->threads == 1 ? "" : "s", sgemm, bf16, p->cpu, p->measured_at,
             100.0 * p->others_cpu, p->quiet ? "" : ": NOT QUIET");
}

/* --------------------------------------------------------------- the file */

static char *cache_path(const char *dir) {
    char *p = NULL;
    if (asprintf(&p, "%s/calibration.json", dir) < 0) return NULL;
    return p;
}

/* The entry's key: its thread count, OpenBLAS kernel set and, where the
 * engine's kernels are wider, their path. */
static void entry_key(char *key, size_t len, int threads, const char *core, const char *path) {
    snprintf(key, len, "%d threads, %s%s%s%s", threads, core, *path ? ", " : "", path,
             *path ? " kernels" : "");
}

static const char *json_str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double json_num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

int calibrate_cached_peak(const char *dir, int threads, bool need_bf16, calibrate_peak_t *p) {
    char *path = cache_path(dir), key[96];
    size_t len = 0;
    char *text = path ? util_read_file(path, 1 << 20, &len, NULL, 0) : NULL;
    int rc = -1;
    cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
    entry_key(key, sizeof key, threads, calibrate_blas_core(), calibrate_wider_path());
    const cJSON *e =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "peaks"), key);
    if (cJSON_IsObject(e) && json_num(e, "gflops") > 0 &&
        (!need_bf16 || json_num(e, "bf16_gflops") > 0)) {
        memset(p, 0, sizeof *p);
        p->gflops = json_num(e, "gflops");
        p->threads = threads;
        snprintf(p->blas_core, sizeof p->blas_core, "%s", json_str(e, "blas_core"));
        snprintf(p->isa, sizeof p->isa, "%s", json_str(e, "isa"));
        snprintf(p->path, sizeof p->path, "%s", calibrate_wider_path());
        p->engine_sgemm = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "engine_sgemm"));
        p->blas_gflops = json_num(e, "openblas_gflops");
        p->engine_gflops = json_num(e, "engine_gflops");
        p->bf16_gflops = json_num(e, "bf16_gflops");
        snprintf(p->bf16_kernel, sizeof p->bf16_kernel, "%s", json_str(e, "bf16_kernel"));
        snprintf(p->cpu, sizeof p->cpu, "%s", json_str(e, "cpu"));
        snprintf(p->measured_at, sizeof p->measured_at, "%s", json_str(e, "measured_at"));
        p->others_cpu = json_num(e, "others_cpu");
        p->load1 = json_num(e, "load1");
        p->quiet = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "quiet"));
        rc = 0;
    }
    cJSON_Delete(root);
    free(text);
    free(path);
    return rc;
}

int calibrate_store_peak(const char *dir, const calibrate_peak_t *p, char *err, size_t errlen) {
    char *path = cache_path(dir), key[96];
    size_t len = 0;
    char *text = path ? util_read_file(path, 1 << 20, &len, NULL, 0) : NULL;
    cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        root = cJSON_CreateObject();
    }
    /* the format before entries carried their circumstances */
    cJSON_DeleteItemFromObjectCaseSensitive(root, "peak_gflops_by_threads");
    cJSON *table = cJSON_GetObjectItemCaseSensitive(root, "peaks");
    if (!cJSON_IsObject(table)) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, "peaks");
        table = cJSON_AddObjectToObject(root, "peaks");
    }
    entry_key(key, sizeof key, p->threads, p->blas_core, p->path);
    cJSON_DeleteItemFromObjectCaseSensitive(table, key);
    cJSON *e = cJSON_AddObjectToObject(table, key);
    cJSON_AddNumberToObject(e, "gflops", p->gflops);
    cJSON_AddNumberToObject(e, "threads", p->threads);
    cJSON_AddStringToObject(e, "blas_core", p->blas_core);
    cJSON_AddStringToObject(e, "isa", p->isa);
    cJSON_AddBoolToObject(e, "engine_sgemm", p->engine_sgemm);
    cJSON_AddNumberToObject(e, "openblas_gflops", p->blas_gflops);
    if (*p->path) cJSON_AddNumberToObject(e, "engine_gflops", p->engine_gflops);
    if (p->bf16_gflops > 0) {
        cJSON_AddNumberToObject(e, "bf16_gflops", p->bf16_gflops);
        cJSON_AddStringToObject(e, "bf16_kernel", p->bf16_kernel);
    }
    cJSON_AddStringToObject(e, "cpu", p->cpu);
    cJSON_AddStringToObject(e, "measured_at", p->measured_at);
    cJSON_AddNumberToObject(e, "others_cpu", p->others_cpu);
    cJSON_AddNumberToObject(e, "load1", p->load1);
    cJSON_AddBoolToObject(e, "quiet", p->quiet);
    char *out = cJSON_Print(root);
    int rc = out && path ? util_write_file_atomic(path, out, strlen(out), err, errlen) : -1;
    if (!out || !path) snprintf(err, errlen, "calibrate: out of memory");
    free(out);
    cJSON_Delete(root);
    free(text);
    free(path);
    return rc;
}

/* -------------------------------------------------------------- command */

static void calibrate_usage(FILE *out) {
    fprintf(out,
            "usage: nightshift calibrate [--dir DIR] [--threads N] [--seconds S] [--attempts K]\n"
            "                            [--accept-load]\n"
            "Measures the sgemm peak (GFLOP/s) with N threads (default: all CPUs) and stores\n"
            "it in DIR/calibration.json (default DIR: state), where training runs read it as\n"
            "the MFU denominator, with the time, the CPU, OpenBLAS's kernels and how busy the\n"
            "CPUs were. A measurement during which other processes used more than %.0f%% of\n"
            "the CPUs is repeated (K attempts, default 3); if none was quiet the peak is not\n"
            "stored (exit 1) unless --accept-load, which stores it marked as not quiet.\n",
            100.0 * CALIBRATE_QUIET_OTHERS);
}

int calibrate_main(int argc, char **argv) {
    const char *dir = "state";
    int threads = 0, attempts = 3, accept_load = 0;
    double seconds = 3.0;
    static const struct option opts[] = {{"dir", required_argument, 0, 'd'},
                                         {"threads", required_argument, 0, 't'},
                                         {"seconds", required_argument, 0, 's'},
                                         {"attempts", required_argument, 0, 'a'},
                                         {"accept-load", no_argument, 0, 'l'},
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
        case 'a':
            attempts = atoi(optarg);
            break;
        case 'l':
            accept_load = 1;
            break;
        case 'h':
            calibrate_usage(stdout);
            return 0;
        default:
            calibrate_usage(stderr);
            return 2;
        }
    }
    if (optind != argc || seconds <= 0 || threads < 0 || attempts < 1) {
        calibrate_usage(stderr);
        return 2;
    }
    char err[256], desc[256];
    if (util_mkdirs(dir, err, sizeof err) < 0) {
        fprintf(stderr, "calibrate: %s\n", err);
        return 1;
    }
    threads = threads_set(threads);
    fprintf(stderr, "calibrate: timing sgemm with %d thread%s for %.0f s\n", threads,
            threads == 1 ? "" : "s", seconds);
    calibrate_peak_t p;
    bool quiet = calibrate_measure_quiet(threads, 2048, seconds, attempts, 2.0, &p);
    calibrate_describe(&p, desc, sizeof desc);
    printf("threads: %d\npeak_gflops: %.2f\nopenblas_gflops: %.2f\nengine_gflops: %.2f\n"
           "bf16_gflops: %.2f\nbf16_kernel: %s\n"
           "blas_core: %s\nisa: %s\nsgemm: %s\ncpu: %s\nmeasured_at: %s\nothers_cpu: %.3f\n"
           "load1: %.2f\nquiet: %s\n",
           threads, p.gflops, p.blas_gflops, p.engine_gflops, p.bf16_gflops,
           *p.bf16_kernel ? p.bf16_kernel : "none", p.blas_core, p.isa,
           p.engine_sgemm ? "nightshift" : "openblas", p.cpu, p.measured_at, p.others_cpu, p.load1,
           quiet ? "yes" : "no");
    if (!quiet && !accept_load) {
        fprintf(stderr,
                "calibrate: not stored: other processes used %.0f%% of this process's CPUs "
                "during the best of %d attempt%s (at most %.0f%% counts as quiet), so the peak "
                "reads low and every MFU divided by it high: %s. Run it again when the machine "
                "is quiet, or pass --accept-load to store it anyway.\n",
                100.0 * p.others_cpu, attempts, attempts == 1 ? "" : "s",
                100.0 * CALIBRATE_QUIET_OTHERS, desc);
        return 1;
    }
    if (calibrate_store_peak(dir, &p, err, sizeof err) < 0) {
        fprintf(stderr, "calibrate: %s\n", err);
        return 1;
    }
    fprintf(stderr, "calibrate: stored %s\n", desc);
    return 0;
}

/* calibrate.h - the machine's measured sgemm peak, the MFU denominator.
 *
 * MFU needs a denominator: `nightshift calibrate` times cblas_sgemm on large
 * square matrices with a given thread count and keeps the best GFLOP/s in
 * DIR/calibration.json, one entry per thread count and OpenBLAS kernel set
 * (OPENBLAS_CORETYPE changes it), with what makes the number trustworthy:
 * when it was measured, on which CPU, with which instruction set, and how
 * busy the machine was. A peak measured while other processes used the same
 * CPUs reads low (a third of the idle peak on a busy machine) and makes
 * every MFU after it read high, so a measurement is taken as the peak only
 * when the others used at most CALIBRATE_QUIET_OTHERS of the CPUs it ran on;
 * otherwise it is measured again, and a busy result is refused (calibrate)
 * or used for one run only, marked as such (train).
 *
 * The peak is of the instruction set the engine's kernels run. An OpenBLAS
 * older than the CPU runs narrower kernels than the engine (0.3.21 runs its
 * Haswell, AVX2, kernels on AMD's Zen 5, which does twice the AVX2 FLOPs a
 * cycle with AVX-512), and MFU against that peak would read up to twice too
 * high. There the engine's own kernel is timed on the same products too and
 * the faster sgemm is the peak, stored apart from OpenBLAS's (a run forced
 * onto a narrower path reads OpenBLAS's).
 *
 * Where the engine's bf16 products run (gemm_bf16_available: AVX512_BF16,
 * AMX-BF16 where present), their peak is measured beside the float32 one:
 * the engine's bf16 product on the same square sizes, stored in the same
 * entry as bf16_gflops with the kernel that ran (amx-bf16 or avx512-bf16).
 * A run with train.precision bf16 divides by it. */
#ifndef NIGHTSHIFT_CALIBRATE_H
#define NIGHTSHIFT_CALIBRATE_H

#include <stdbool.h>
#include <stddef.h>

/* The largest share of this process's CPUs other processes may use during a
 * measurement that counts as quiet. */
#define CALIBRATE_QUIET_OTHERS 0.10

typedef struct {
    double gflops;        /* best sgemm GFLOP/s: the larger of the two below */
    double blas_gflops;   /* OpenBLAS's */
    double engine_gflops; /* the engine's kernel's where path is set, else 0 */
    int threads;          /* threads it ran on */
    char blas_core[32];   /* OpenBLAS's kernel set, e.g. "SkylakeX", "Haswell" */
    char isa[16];         /* its instruction set: "avx512", "avx2" or "generic" */
    char path[16];        /* the engine's kernel path it was measured for, where that is
                           * wider than OpenBLAS's kernels; else "" */
    bool engine_sgemm;    /* the engine's kernel was the faster sgemm (isa is path's) */
    double bf16_gflops;   /* the engine's bf16 product's best GFLOP/s; 0 = not measured */
    char bf16_kernel[16]; /* the kernel it ran: "amx-bf16" or "avx512-bf16"; "" = none */
    char cpu[96];         /* the CPU's model name */
    char measured_at[32]; /* UTC, ISO 8601 */
    double others_cpu;    /* share of this process's CPUs others used meanwhile (0..1) */
    double load1;         /* the 1-minute load average when it started */
    bool quiet;           /* others_cpu <= CALIBRATE_QUIET_OTHERS */
} calibrate_peak_t;

/* The CPU's model name from /proc/cpuinfo ("unknown" where there is none). */
void calibrate_cpu_model(char *buf, size_t len);

/* Measure the peak on `threads` threads for about `seconds`: the best sgemm
 * GFLOP/s over square sizes up to max_n, with the rest of *p filled in. */
void calibrate_measure(int threads, int max_n, double seconds, calibrate_peak_t *p);

/* Up to `attempts` measurements, `pause` seconds apart, until one is quiet;
 * *p is the first quiet one, else the fastest. Returns whether it is quiet. */
bool calibrate_measure_quiet(int threads, int max_n, double seconds, int attempts, double pause,
                             calibrate_peak_t *p);

/* The stored peak for `threads` and the OpenBLAS kernels in use: 0 and *p
 * filled, or -1 when there is none (or, with `need_bf16`, when the entry has
 * no bf16 peak: it was stored before bf16 products were measured). */
int calibrate_cached_peak(const char *dir, int threads, bool need_bf16, calibrate_peak_t *p);

/* The kernel name calibrate_measure records for the bf16 products in use. */
const char *calibrate_bf16_kernel(void);

/* Store p in dir's calibration.json (atomic rewrite), replacing the entry of
 * its thread count and kernels. Returns 0 or -1 with err. */
int calibrate_store_peak(const char *dir, const calibrate_peak_t *p, char *err, size_t errlen);

/* OpenBLAS's kernel set in use ("SkylakeX", "Haswell", ...) and the
 * instruction set its sgemm runs ("avx512", "avx2" or "generic"). */
const char *calibrate_blas_core(void);
const char *calibrate_blas_isa(void);

/* The engine's kernel path when it is wider than OpenBLAS's kernels (the
 * peak is then measured with the engine's kernel too), else "". */
const char *calibrate_wider_path(void);

/* One line for people: "251.3 GFLOP/s (2 threads, SkylakeX/avx512 sgemm,
 * Intel Xeon ..., 2026-12-02T13:50:07Z, others used 3% of the CPUs)". */
void calibrate_describe(const calibrate_peak_t *p, char *buf, size_t len);

#endif

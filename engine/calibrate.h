/* calibrate.h - the machine's measured sgemm peak, the MFU denominator.
 *
 * MFU needs a denominator: `nightshift calibrate` times cblas_sgemm on large
 * square matrices with a given thread count and caches the best GFLOP/s in
 * DIR/calibration.json, keyed by thread count. A run reads the cache, or
 * measures (briefly) when the cache has no entry for its thread count. */
#ifndef NIGHTSHIFT_CALIBRATE_H
#define NIGHTSHIFT_CALIBRATE_H

#include <stddef.h>

/* Best sgemm GFLOP/s over square sizes up to max_n, spending about `seconds`. */
double calibrate_measure_peak_gflops(int max_n, double seconds);

/* Cached peak for `threads` under dir: 0 and *gflops set, or -1 when absent. */
int calibrate_cached_peak(const char *dir, int threads, double *gflops);

/* Store a measured peak in dir's cache (atomic rewrite). Returns 0 or -1 with err. */
int calibrate_store_peak(const char *dir, int threads, double gflops, char *err, size_t errlen);

#endif

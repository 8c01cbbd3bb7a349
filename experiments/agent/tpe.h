/* tpe.h - a model of val_bpb over a search space: the Tree-structured Parzen
 * Estimator's density ratio (Bergstra et al., 2011), as Optuna's default
 * sampler and Hyperopt use it.
 *
 * Why TPE and not a Gaussian process or a forest: a night has tens of
 * results, half its axes are categorical (mlp, ve_layers, window_pattern) or
 * lists, and some only matter when another has a value (ve_gate_channels when
 * ve_layers is not "none"). TPE models each axis with a one-dimensional
 * density, counts for a list and Gaussian kernels for a range, so it needs no
 * kernel over categories, no hyperparameter fit and no matrix solve (a few
 * microseconds per proposal, in plain C), and an axis that does not matter
 * simply has the same density among good and bad results. It is also what a
 * researcher's Optuna runs, so the search benchmark compares like with like.
 *
 * The model: the observations (every configuration with a result, y its mean
 * val_bpb; a diverged one y = +inf) are split at the gamma quantile into good
 * (the lowest ceil(gamma n)) and bad. Per axis, l is the density of the good
 * and g of the bad: a listed axis smoothed counts (c_k + 1) / (n + K); a
 * range, on its (log) unit scale, a mixture of a uniform prior (weight one
 * observation) and a Gaussian kernel at each point, truncated to [0, 1], the
 * bandwidth Scott's rule (1.06 sd n^-1/5) kept in [0.05, 0.5]. Candidates
 * are drawn from l, axis by axis, and ranked by sum over axes of
 * log l(x) - log g(x): the expected improvement of TPE grows with l/g.
 * Observations with an axis not in the space (-1 or NAN: a value not listed,
 * or an axis inactive there, space.h) leave that axis out of its densities,
 * and a candidate's score leaves out the axes inactive at it: a conditional
 * axis is modelled only over the results where it was active (Optuna's
 * define-by-run TPE does the same). */
#ifndef NIGHTSHIFT_TPE_H
#define NIGHTSHIFT_TPE_H

#include "engine/rng.h"
#include "experiments/agent/space.h"

#define TPE_DEFAULT_GAMMA      0.25 /* Hyperopt's; Optuna's is 0.1 n, at least 1 */
#define TPE_DEFAULT_CANDIDATES 24   /* Optuna's n_ei_candidates */

/* The agent's gamma for n observations: the good side is the best quarter
 * up to 8 results (32 observations), then grows by one for every ten more
 * (15 of 96, 25 of 200): a long night's model keeps to its best results
 * instead of a quarter of them. On the surrogate of the Brown landscape
 * (experiments/search/bench/2026-12-06-surrogate-final.md; 50 nights of 96
 * runs, night seeds 201-250, paired) gamma 0.15 instead of 0.25 took the
 * answer's true mean 0.011 +- 0.005 lower, 0.10 only 0.006 +- 0.005 (with
 * the final re-measuring); at 16 runs 0.15 was 0.005 worse. */
double tpe_gamma(int n_obs);

typedef struct {
    space_point_t x;
    double y; /* mean val_bpb; INFINITY for a diverged run */
} tpe_obs_t;

/* Draw n_candidates points from l and write the best of them by l/g into
 * out[0..n) in decreasing order of score (score[i] its log ratio, when score
 * is not NULL), at most n_out. n_obs must be at least 2. Returns n. */
int tpe_suggest(const space_t *sp, const tpe_obs_t *obs, int n_obs, double gamma, int n_candidates,
                rng_t *rng, space_point_t *out, double *score, int n_out);

/* The log density ratio log l(x) - log g(x) of a point under the model of
 * obs (for the tests). */
double tpe_score(const space_t *sp, const tpe_obs_t *obs, int n_obs, double gamma,
                 const space_point_t *x);

#endif

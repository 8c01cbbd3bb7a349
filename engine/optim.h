/* optim.h - the optimisers (AdamW, Muon with NorMuon) and the LR schedules.
 *
 * The update rules are autoresearch's (adamw_step_fused, muon_step_fused in its
 * train.py), in float32 throughout. Two layers:
 *
 *   kernels    optim_adamw_step / optim_muon_step update one tensor in place;
 *              the caller owns every buffer.
 *   optimizer  optim_new groups a gpt_t's tensors as autoresearch's
 *              setup_optimizer does (the optim_groups table in optim.c: each
 *              kind of tensor's optimizer, learning rate and scaling) and owns
 *              the state (Adam moments, Muon buffers, scratch); optim_step
 *              applies one update from m->grads.
 *
 * A training step, with progress = training seconds / budget:
 *     optim_step(o, m, optim_lr_multiplier(progress, ...),
 *                optim_muon_momentum(step, ...), optim_weight_decay(progress, wd));
 *
 * Everything is deterministic: the same inputs give bit-identical results for a
 * given thread count. */
#ifndef NIGHTSHIFT_OPTIM_H
#define NIGHTSHIFT_OPTIM_H

#include <stddef.h>

#include "engine/gpt.h"
#include "engine/spec.h"

/* ---- kernels ---- */

/* One AdamW step over n floats, in place:
 *     p *= 1 - lr*wd
 *     m = lerp(m, g, 1-beta1);  v = lerp(v, g^2, 1-beta2)
 *     p -= lr / (1 - beta1^step) * m / (sqrt(v / (1 - beta2^step)) + eps)
 * step is 1-based (the first update is step 1). */
void optim_adamw_step(float *p, const float *g, float *m, float *v, size_t n, int step, float lr,
                      float beta1, float beta2, float eps, float wd);

/* Floats of scratch optim_muon_step needs for a (rows, cols) matrix. */
size_t optim_muon_work_floats(int rows, int cols);

/* One Muon step for one (rows, cols) row-major matrix p, in place:
 * Nesterov momentum, Frobenius normalisation, ns_steps polar-express
 * iterations (0..5) on the smaller Gram side, NorMuon per-row (rows >= cols)
 * or per-column (rows < cols) variance normalisation, then the update with
 * cautious weight decay: p -= lr*u + lr*wd*p*(u*p >= 0).
 *   g             (rows, cols) gradient; read only
 *   momentum_buf  (rows, cols)
 *   second_buf    rows floats if rows >= cols, else cols floats
 *   lr            already scaled by max(1, rows/cols)^0.5
 *   work          optim_muon_work_floats(rows, cols) floats of scratch
 * Returns 0, or -1 if ns_steps is outside 0..5 (nothing is changed then). */
int optim_muon_step(float *p, const float *g, float *momentum_buf, float *second_buf, int rows,
                    int cols, float momentum, float lr, float wd, float beta2, int ns_steps,
                    float *work);

/* ---- schedules (autoresearch's get_lr_multiplier, get_muon_momentum,
 * get_weight_decay) ---- */

/* LR multiplier at progress in [0, 1] (clamped): a linear warmup over the
 * first warmup_ratio, 1, then a linear warmdown over the last warmdown_ratio
 * to final_lr_frac. warmdown_ratio 0 means no warmdown (1 up to and including
 * progress 1). */
double optim_lr_multiplier(double progress, double warmup_ratio, double warmdown_ratio,
                           double final_lr_frac);

/* Muon momentum at optimiser step `step` (0-based): linear from start to end
 * over ramp_steps steps, then end. ramp_steps <= 0 gives end. */
double optim_muon_momentum(int step, double start, double end, int ramp_steps);

/* Muon weight decay at progress (clamped to [0, 1]): wd * (1 - progress). */
double optim_weight_decay(double progress, double wd);

/* ---- the grouped optimizer over a model ---- */

typedef enum { OPTIM_ADAMW, OPTIM_MUON } optim_kind;

/* How one of the model's tensors is updated. lr is the base learning rate,
 * multiplied by lr_mult at every step; for Muon it already includes the
 * max(1, rows/cols)^0.5 factor. AdamW: beta1, beta2, eps and wd (0 in every
 * group) are its hyper-parameters. Muon: beta2 is NorMuon's, the others are
 * 0; momentum and weight decay come from optim_step's arguments and ns_steps
 * from the spec. */
typedef struct {
    optim_kind kind;
    double lr;
    double beta1, beta2, eps, wd;
    int step; /* AdamW updates applied so far */
    int skip; /* optimiser steps still to leave out before its first update */
} optim_param_t;

typedef struct optim optim_t;

/* Build the optimizer for m (its tensor table must stay the same) with tr's
 * learning rates and betas. Groups, with scale = (n_embd/768)^-0.5:
 *   lm_head               AdamW  unembedding_lr * scale
 *   wte                   AdamW  embedding_lr * scale, or unembedding_lr * scale
 *                                when tied (no lm_head tensor)
 *   value embeddings      AdamW  value_embedding_lr * scale
 *   wpe                   AdamW  embedding_lr * scale
 *   resid_lambdas         AdamW  scalar_lr * 0.01
 *   x0_lambdas            AdamW  scalar_lr, betas (x0_beta1, adam_beta2)
 *   2-D block matrices    Muon   matrix_lr * max(1, rows/cols)^0.5
 * AdamW: betas (adam_beta1, adam_beta2) unless noted, eps 1e-10, no weight decay.
 * resid_lambdas and x0_lambdas sit out the first optimiser step (skip 1):
 * at initialisation every block is an identity (zero output projections)
 * and RMSNorm is scale-invariant, so their true gradient is zero and the
 * computed one rounding noise (~1e-11), which AdamW's first step (a unit
 * step in the direction of m/sqrt(v)) would turn into an update of up to
 * the full learning rate in a direction set by rounding. Their moments and
 * step count start at the second step, with the first real gradient.
 * (The table is optim_groups in optim.c.) tr->ns_steps must be in 1..5, as
 * spec_validate requires. Muon scratch is sized for the OpenMP team of the
 * calling thread (set the thread count first); optim_step never uses more
 * threads than that. Returns NULL with a reason in err on bad hyper-parameters or allocation
 * failure. The caller frees the result with optim_free. */
optim_t *optim_new(const gpt_t *m, const spec_train_t *tr, char *err, size_t errlen);

/* One update of m->params from m->grads (grads are read, not cleared). Every
 * group's lr is multiplied by lr_mult; Muon tensors use muon_momentum and
 * muon_wd. The team updates tensors in parallel, one tensor per thread, so
 * call it from outside any parallel region. */
void optim_step(optim_t *o, gpt_t *m, double lr_mult, double muon_momentum, double muon_wd);

void optim_free(optim_t *o);

/* FLOPs (2 per multiply-add) of Muon's Newton-Schulz iterations on one
 * (rows, cols) matrix as this engine runs them (the symmetric products'
 * upper blocks only), and of all of them in one step of o on m. Not in the
 * model's training FLOPs (engine/cost.h), which MFU counts: at a small batch
 * they are a large share of what the machine does. */
double optim_muon_flops(int rows, int cols, int ns_steps);
double optim_flops_per_step(const optim_t *o, const gpt_t *m);

/* Bytes of optimizer state and scratch held by o. */
size_t optim_state_bytes(const optim_t *o);

/* How tensor i (an index into m->tensors) is updated; NULL if i is out of
 * range. The pointer is owned by o and valid until optim_free. */
const optim_param_t *optim_param(const optim_t *o, int i);

#endif

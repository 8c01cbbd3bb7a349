/* gpt.h - the autoresearch GPT on the CPU: parameters, forward, backward.
 *
 * Parameters and gradients are each one float32 allocation, split into named
 * tensors by a table (gpt_tensor_t) whose names and shapes are autoresearch's
 * PyTorch module names, so checkpoints interoperate. Activations for the last
 * forward pass live in a third allocation sized for (B, T) and grown on demand.
 *
 * Layout of one training micro-step:
 *     gpt_forward(m, in, tg, B, T, GPT_TRAIN, &loss)  -> mean loss, activations kept
 *     gpt_backward(m, scale)                   -> grads += scale * dloss/dparam
 * Gradients accumulate until gpt_zero_grad, which is how gradient accumulation
 * works: call backward with scale = 1/accum_steps for each micro-batch.
 *
 * Ownership: gpt_new returns a model the caller frees with gpt_free. The model
 * copies the config. Pointers into params/grads stay valid for its lifetime. */
#ifndef NIGHTSHIFT_GPT_H
#define NIGHTSHIFT_GPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/spec.h"
#include "engine/util.h"

/* What a tensor is, for optimiser grouping and cost accounting. */
typedef enum {
    GPT_WTE,       /* token table (V, D) */
    GPT_WPE,       /* learned positions (max_pos, D) */
    GPT_ATTN_Q,    /* (n_head*hd, D) */
    GPT_ATTN_K,    /* (n_kv_head*hd, D) */
    GPT_ATTN_V,    /* (n_kv_head*hd, D) */
    GPT_ATTN_PROJ, /* (D, D) */
    GPT_VE_GATE,   /* (n_kv_head, C) */
    GPT_MLP_FC,    /* (hidden or 2*hidden, D); gated kinds: gate rows first */
    GPT_MLP_PROJ,  /* (D, hidden) */
    GPT_VE,        /* value embedding (V, n_kv_head*hd) */
    GPT_LM_HEAD,   /* (V, D); absent when tied */
    GPT_RESID,     /* resid_lambdas (L) */
    GPT_X0,        /* x0_lambdas (L) */
} gpt_tensor_kind;

typedef struct {
    char name[64]; /* e.g. "transformer.h.3.attn.c_q.weight" */
    gpt_tensor_kind kind;
    int layer;      /* block index, or -1 */
    int ndim;       /* 1 or 2 */
    int rows, cols; /* shape (rows, cols); 1-D tensors have cols = 1 */
    size_t offset;  /* in floats, into params and grads */
    size_t numel;
} gpt_tensor_t;

/* Per-block parameter pointers (into params or grads). NULL when absent. */
typedef struct {
    float *c_q, *c_k, *c_v, *c_proj, *ve_gate, *fc, *mlp_proj, *ve;
} gpt_block_ptrs_t;

typedef struct {
    float *wte, *wpe, *lm_head, *resid_lambdas, *x0_lambdas;
    gpt_block_ptrs_t h[SPEC_MAX_DEPTH];
} gpt_ptrs_t;

typedef struct gpt_acts gpt_acts_t; /* private: activation storage */

typedef struct {
    spec_model_t cfg;
    int n_tensors;
    gpt_tensor_t *tensors;      /* n_tensors entries, in checkpoint order */
    size_t n_params;            /* floats in params (= in grads) */
    float *params;              /* one allocation */
    float *grads;               /* one allocation, same layout */
    gpt_ptrs_t p, g;            /* split views of params and grads */
    float *rope_cos, *rope_sin; /* (max T, hd/2) tables, built lazily */
    int rope_len;
    gpt_acts_t *acts;
    uint64_t dropout_seed; /* advanced by every training forward */
} gpt_t;

/* GPT_TRAIN: embedding dropout on, everything the backward needs kept.
 * GPT_EVAL: no dropout, the same activations kept (gpt_logits works).
 * GPT_SCORE: forward only, for evaluation: no dropout, one layer's
 * activations reused by every layer, the logits taken a few rows at a time
 * straight into the loss (gpt_logits and gpt_backward do not apply after
 * it); targets are required and gpt_token_losses has the result. */
typedef enum { GPT_EVAL = 0, GPT_TRAIN = 1, GPT_SCORE = 2 } gpt_mode;

/* Build the tensor table and allocate zeroed params and grads. cfg must have
 * passed spec_validate and have vocab_size > 0. Returns NULL with a reason in
 * err on allocation failure, its only failure. */
gpt_t *gpt_new(const spec_model_t *cfg, char *err, size_t errlen);
void gpt_free(gpt_t *m);

/* Autoresearch initialisation, reproducible from seed: token table
 * normal(0, 1), lm_head normal(0, 0.001), q/k/v/fc and value embeddings
 * uniform(-s, s) with s = sqrt(3/n_embd), output projections and gates zero,
 * resid_lambdas 1, x0_lambdas 0.1; a learned position table normal(0, 0.02)
 * as GPT-2's (autoresearch has none). */
void gpt_init_weights(gpt_t *m, uint64_t seed);

/* Look a tensor up by name; NULL if the model has none. */
const gpt_tensor_t *gpt_find_tensor(const gpt_t *m, const char *name);

/* Allocate the activations for batches of up to B rows of T tokens now, so
 * that an out-of-memory shows at startup rather than mid-run. Returns 0, or
 * NS_ERR_NOMEM with err. */
int gpt_reserve(gpt_t *m, int B, int T, char *err, size_t errlen);

/* Forward over inputs (B, T) token ids. With targets (B, T), ids < 0 ignored,
 * sets *loss (when loss is not NULL) to the mean cross-entropy over
 * non-ignored targets and keeps what backward needs; without targets *loss is
 * 0. In GPT_TRAIN mode embedding dropout is applied. Returns 0, or
 * NS_ERR_NOMEM when the activations for (B, T) cannot be allocated (none are
 * needed after a gpt_reserve of the same B and T). */
int gpt_forward(gpt_t *m, const int *inputs, const int *targets, int B, int T, gpt_mode mode,
                float *loss);

/* Accumulate scale * d(mean loss)/d(param) into m->grads, for the last
 * forward pass (which must have had targets). */
void gpt_backward(gpt_t *m, float scale);

void gpt_zero_grad(gpt_t *m);

/* After a forward with targets: per-position loss in nats (B*T floats, 0
 * where the target was ignored). Valid until the next forward. */
const float *gpt_token_losses(const gpt_t *m);

/* After any forward: softcapped logits of position (b, t), V floats. Valid
 * until the next forward. */
const float *gpt_logits(const gpt_t *m, int b, int t);

#endif

/* cost.h - analytic parameter, FLOP and MAC counts of a model spec, computed
 * from the spec alone (no model is built, nothing is allocated).
 *
 * The parameter counts equal what gpt_new allocates, tensor by tensor. The
 * FLOP estimate follows autoresearch's estimate_flops; the MAC terms are the
 * leading matrix-multiply costs of one forward pass, for sizing experiments. */
#ifndef NIGHTSHIFT_COST_H
#define NIGHTSHIFT_COST_H

#include <stddef.h>
#include <stdint.h>

#include "engine/spec.h"

typedef struct {
    /* Parameter counts (floats; 4 bytes each in fp32). */
    int64_t wte;          /* token table V*D */
    int64_t wpe;          /* learned position table max_pos*D; 0 with rope */
    int64_t value_embeds; /* V*(n_kv_head*hd) per value-embedding layer */
    int64_t blocks;       /* every per-layer matrix, ve_gate included */
    int64_t lm_head;      /* V*D; 0 when tied to the token table */
    int64_t scalars;      /* resid_lambdas + x0_lambdas = 2*depth */
    int64_t total;
    /* Training FLOPs per token (forward + backward), see cost.c. */
    double flops_per_token;
    /* Leading multiply-accumulate counts of one forward over B rows of
     * T = seq_len tokens. */
    double mac_proj_ffn; /* q, k, v, output projection, MLP */
    double mac_attn;     /* QK^T and AV over the full T x T square */
    double mac_lm_head;  /* final projection to V logits */
} cost_t;

/* Fill out for model m (validated, vocab_size > 0) and batch rows B. */
void cost_compute(const spec_model_t *m, int B, cost_t *out);

/* The memory one training worker needs, in bytes, by what holds it: the
 * engine's allocations in closed form (gpt.c's parameter, gradient and
 * activation tables, optim.c's state and Muon scratch), the mapped dataset
 * (every page is read once at open), and a fixed process overhead (code,
 * libraries, OpenBLAS's per-thread buffers) measured on the reference
 * machine. An estimate of peak RSS, checked against measured runs in
 * tests/test_cost.c. */
typedef struct {
    double weights;     /* fp32 parameters */
    double grads;       /* one gradient per parameter */
    double optimizer;   /* AdamW moments, Muon momentum + second moments + scratch */
    double activations; /* forward activations and backward scratch for B x seq_len */
    double bf16;        /* bf16 products' rounded operands, kept inputs and scratch; 0 in fp32 */
    double data;        /* the dataset's token files, 2 bytes per token */
    double overhead;    /* COST_OVERHEAD_BYTES */
    double total;
} cost_mem_t;

#define COST_OVERHEAD_BYTES (16.0 * 1024 * 1024)

/* Fill out for model m (validated, vocab_size > 0), B rows per micro-batch,
 * data_tokens tokens in the dataset (0 when unknown) and the run's
 * train.precision (bf16 counts its products' memory; auto counts it where
 * this CPU has bf16 products). */
void cost_memory(const spec_model_t *m, int B, double data_tokens, spec_precision_kind precision,
                 cost_mem_t *out);

/* serve's default memory limit per worker, in MiB: three quarters of this
 * machine's RAM shared among slots, so that one runaway worker cannot push
 * the others (or the daemon) into swap; 0 when the RAM is not known. */
int cost_default_worker_mb(int slots);

/* What one worker may use, in bytes, for a spec asking for spec_mb MiB
 * (resources.memory_mb; 0 = nothing) under a daemon limit of daemon_mb MiB
 * per worker (0 = none): the lower of the two, else this machine's RAM (0
 * when that is not known). *source says which, for messages. */
double cost_worker_limit(int spec_mb, int daemon_mb, const char **source);

/* The memory limit of one worker in MiB, 0 = none: a spec's
 * resources.memory_mb (spec_mb) may ask for less than the daemon's limit
 * (daemon_mb), never more. The one rule: the scheduler applies it to every
 * run, cost_worker_limit reports it. */
int cost_worker_limit_mb(int spec_mb, int daemon_mb);

/* bytes as "41 GB" or "350 MB" (decimal units, as every memory verdict
 * prints them) into buf; returns buf. */
const char *cost_human_bytes(double bytes, char *buf, size_t len);

/* The verdict on mem (of model m at batch_size rows) against limit bytes
 * from source: 0 when it fits (or limit <= 0), else -1 with the numbers in
 * msg: "needs ~180 GB, a worker may use 19 GB (this machine's RAM): 11.2
 * billion parameters; weights, gradients and optimizer state 134 GB,
 * activations for batch_size 16 x seq_len 256 45 GB; see `nightshift cost`".
 * The daemon refuses such a spec (does_not_fit) and `cost` says the same. */
int cost_fits(const cost_mem_t *mem, const spec_model_t *m, int batch_size, double limit,
              const char *source, char *msg, size_t len);

/* The margin a run under an address-space limit gets on top of its
 * estimate and the engine's floor, bytes. The estimate is of resident memory;
 * what a run maps beside it does not grow with the model so much as with its
 * arrays and threads (each large array aligned for huge pages, malloc's
 * arenas), and varies by machine: on a 2-core Intel Xeon a run trained from
 * 8 MiB below its least accepted limit (tests/bench/mem_edge.py, the specs
 * of experiments/specs), and elsewhere a spec accepted at its minimum,
 * 558 MiB, ended oom at once where 580 trained (22 MiB short). */
#define COST_AS_MARGIN (64.0 * 1024 * 1024)

/* The verdict on a run under a worker's limit, in the words of both the
 * daemon's admission (does_not_fit) and `nightshift cost`: mem (the run's
 * own memory, cost_memory) against limit bytes from source. When floor > 0
 * the limit is on address space: the engine's floor for threads threads
 * (floor_probe) and COST_AS_MARGIN are counted too (in MiB, the unit of
 * resources.memory_mb), and mem->total is raised by them. 0 when it fits
 * (or limit <= 0), else -1 with the numbers in msg. */
int cost_admit(cost_mem_t *mem, const spec_model_t *m, int batch_size, double limit,
               const char *source, double floor, int threads, char *msg, size_t len);

#endif

/* gpt.c - the autoresearch GPT: tensor table, initialisation, forward and
 * backward (see gpt.h for the contract, ops.h for the kernels).
 *
 * One block, pre-norm, with x0 the normalised embedding:
 *     x   = resid_lambda[l] * x + x0_lambda[l] * x0
 *     xn  = norm(x)
 *     q,k,v = xn Wq^T, xn Wk^T, xn Wv^T;  v += 2 sigmoid(xn[:, :C] Wg^T) * ve[idx]
 *     q,k = norm(rope(q)), norm(rope(k))          (rope only with pos = rope)
 *     x   = x + attention(q, k, v) Wo^T
 *     x   = x + act(norm(x) Wfc^T) Wp^T
 * then logits = softcap(norm(x) Wlm^T) and the mean cross-entropy. */
#include "engine/gpt.h"

#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/attn.h"
#include "engine/fastmath.h"
#include "engine/gemm.h"
#include "engine/ops.h"
#include "engine/prof.h"
#include "engine/rng.h"
#include "engine/util.h"

/* ------------------------------------------------------------ tensor table */

static int fc_rows(const spec_model_t *c) {
    return (c->mlp == MLP_SWIGLU || c->mlp == MLP_GEGLU) ? 2 * c->mlp_hidden : c->mlp_hidden;
}

static void add_tensor(gpt_t *m, gpt_tensor_kind kind, int layer, int ndim, int rows, int cols,
                       const char *fmt, ...) __attribute__((format(printf, 7, 8)));

static void add_tensor(gpt_t *m, gpt_tensor_kind kind, int layer, int ndim, int rows, int cols,
                       const char *fmt, ...) {
    gpt_tensor_t *t = &m->tensors[m->n_tensors++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->kind = kind;
    t->layer = layer;
    t->ndim = ndim;
    t->rows = rows;
    t->cols = cols;
    t->numel = (size_t)rows * cols;
    t->offset = m->n_params;
    m->n_params += t->numel;
}

/* Fill m->tensors in checkpoint order and count m->n_params. */
static void build_table(gpt_t *m) {
    const spec_model_t *c = &m->cfg;
    int V = c->vocab_size, D = c->n_embd, hd = c->head_dim, kv = c->n_kv_head * hd;
    m->n_tensors = 0;
    m->n_params = 0;
    add_tensor(m, GPT_WTE, -1, 2, V, D, "transformer.wte.weight");
    if (c->pos == POS_LEARNED)
        add_tensor(m, GPT_WPE, -1, 2, c->max_pos, D, "transformer.wpe.weight");
    for (int l = 0; l < c->depth; l++) {
        /* c_q, c_k, c_v stay consecutive: the forward and backward treat them
         * as one (n_head + 2 n_kv_head) * hd by D matrix. */
        add_tensor(m, GPT_ATTN_Q, l, 2, c->n_head * hd, D, "transformer.h.%d.attn.c_q.weight", l);
        add_tensor(m, GPT_ATTN_K, l, 2, kv, D, "transformer.h.%d.attn.c_k.weight", l);
        add_tensor(m, GPT_ATTN_V, l, 2, kv, D, "transformer.h.%d.attn.c_v.weight", l);
        add_tensor(m, GPT_ATTN_PROJ, l, 2, D, D, "transformer.h.%d.attn.c_proj.weight", l);
        if (c->has_ve[l])
            add_tensor(m, GPT_VE_GATE, l, 2, c->n_kv_head, c->ve_gate_channels,
                       "transformer.h.%d.attn.ve_gate.weight", l);
        add_tensor(m, GPT_MLP_FC, l, 2, fc_rows(c), D, "transformer.h.%d.mlp.c_fc.weight", l);
        add_tensor(m, GPT_MLP_PROJ, l, 2, D, c->mlp_hidden, "transformer.h.%d.mlp.c_proj.weight",
                   l);
    }
    for (int l = 0; l < c->depth; l++)
        if (c->has_ve[l]) add_tensor(m, GPT_VE, l, 2, V, kv, "value_embeds.%d.weight", l);
    if (!c->tie_embeddings) add_tensor(m, GPT_LM_HEAD, -1, 2, V, D, "lm_head.weight");
    add_tensor(m, GPT_RESID, -1, 1, c->depth, 1, "resid_lambdas");
    add_tensor(m, GPT_X0, -1, 1, c->depth, 1, "x0_lambdas");
}

/* Point the named views of one flat buffer (params or grads) at its tensors. */
static void split_views(const gpt_t *m, float *base, gpt_ptrs_t *p) {
    memset(p, 0, sizeof *p);
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor_t *t = &m->tensors[i];
        float *x = base + t->offset;
        gpt_block_ptrs_t *h = t->layer >= 0 ? &p->h[t->layer] : NULL;
        switch (t->kind) {
        case GPT_WTE:
            p->wte = x;
            break;
        case GPT_WPE:
            p->wpe = x;
            break;
        case GPT_LM_HEAD:
            p->lm_head = x;
            break;
        case GPT_RESID:
            p->resid_lambdas = x;
            break;
        case GPT_X0:
            p->x0_lambdas = x;
            break;
        case GPT_ATTN_Q:
            h->c_q = x;
            break;
        case GPT_ATTN_K:
            h->c_k = x;
            break;
        case GPT_ATTN_V:
            h->c_v = x;
            break;
        case GPT_ATTN_PROJ:
            h->c_proj = x;
            break;
        case GPT_VE_GATE:
            h->ve_gate = x;
            break;
        case GPT_MLP_FC:
            h->fc = x;
            break;
        case GPT_MLP_PROJ:
            h->mlp_proj = x;
            break;
        case GPT_VE:
            h->ve = x;
            break;
        }
    }
    /* Tied: the head reads the token table. */
    if (!p->lm_head) p->lm_head = p->wte;
}

gpt_t *gpt_new(const spec_model_t *cfg, char *err, size_t errlen) {
    gpt_t *m = calloc(1, sizeof *m);
    if (!m) goto oom;
    m->cfg = *cfg;
    /* wte, wpe, lm_head, resid, x0 + at most 8 per layer */
    m->tensors = calloc(5 + 8 * (size_t)cfg->depth, sizeof *m->tensors);
    if (!m->tensors) goto oom;
    build_table(m);
    m->params = util_calloc_huge(m->n_params * sizeof(float));
    m->grads = util_calloc_huge(m->n_params * sizeof(float));
    if (!m->params || !m->grads) goto oom;
    split_views(m, m->params, &m->p);
    split_views(m, m->grads, &m->g);
    return m;
oom:
    snprintf(err, errlen, "gpt: out of memory allocating the model");
    gpt_free(m);
    return NULL;
}

/* What one block keeps from its forward for the backward. */
typedef struct {
    float *xn1, *rstd1; /* norm(x_in) (N, D) and its 1/rms (N) */
    float *q, *k, *rstd_q,
        *rstd_k;        /* normalised (roped) q (N, H*hd), k (N, Hkv*hd); 1/rms per head */
    float *v, *gate;    /* v after the value embedding (N, Hkv*hd); 2 sigmoid (N, Hkv) */
    float *lse, *y;     /* attention log-sum-exp per row and head (B, H, T); output (N, H*hd) */
    float *xn2, *rstd2; /* norm(x_mid) */
    float *h, *a;       /* c_fc output (N, fc_rows); activation (N, hidden) */
} layer_acts_t;

struct gpt_acts {
    int B, T;        /* the shape these pointers are laid out for */
    int threads;     /* attention scratch is sized for this many threads */
    size_t capacity; /* floats in buf */
    float *buf;
    int *ids;     /* (N) inputs of the last forward */
    int *targets; /* (N) or NULL */
    int has_targets;
    int dropout_on; /* the last forward applied drop_mask */
    double loss_count;
    /* forward */
    float *emb, *drop_mask, *x0, *rstd0;
    float *res[SPEC_MAX_DEPTH + 1]; /* residual stream entering layer l; res[L] = output */
    layer_acts_t l[SPEC_MAX_DEPTH];
    float *xf, *rstdf, *logits, *lse, *losses;
    /* backward scratch */
    float *dres, *dx0, *dxn, *dq, *dk, *dv, *dy, *dh, *da, *dgate, *dlogits, *attn_work;
    float *qkv; /* (N, qd + 2 kvd): the fused q, k, v projection, or its gradient */
};

void gpt_free(gpt_t *m) {
    if (!m) return;
    if (m->acts) {
        free(m->acts->buf);
        free(m->acts->ids);
        free(m->acts->targets);
        free(m->acts);
    }
    free(m->rope_cos);
    free(m->rope_sin);
    free(m->tensors);
    free(m->params);
    free(m->grads);
    free(m);
}

const gpt_tensor_t *gpt_find_tensor(const gpt_t *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
    return NULL;
}

/* ------------------------------------------------------------------- init */

void gpt_init_weights(gpt_t *m, uint64_t seed) {
    rng_t r;
    rng_seed(&r, seed);
    float s = sqrtf(3.0f) / sqrtf((float)m->cfg.n_embd);
    m->dropout_seed = seed ^ 0x5bd1e995u;
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor_t *t = &m->tensors[i];
        float *x = m->params + t->offset;
        for (size_t j = 0; j < t->numel; j++) {
            switch (t->kind) {
            case GPT_WTE:
                x[j] = rng_normal(&r);
                break;
            /* GPT-2 initialises its position table with std 0.02 (autoresearch has none). */
            case GPT_WPE:
                x[j] = 0.02f * rng_normal(&r);
                break;
            case GPT_LM_HEAD:
                x[j] = 0.001f * rng_normal(&r);
                break;
            case GPT_ATTN_Q:
            case GPT_ATTN_K:
            case GPT_ATTN_V:
            case GPT_MLP_FC:
            case GPT_VE:
                x[j] = s * (2.0f * rng_uniform(&r) - 1.0f);
                break;
            case GPT_ATTN_PROJ:
            case GPT_MLP_PROJ:
            case GPT_VE_GATE:
                x[j] = 0.0f;
                break;
            case GPT_RESID:
                x[j] = 1.0f;
                break;
            case GPT_X0:
                x[j] = 0.1f;
                break;
            }
        }
    }
}

void gpt_zero_grad(gpt_t *m) {
    memset(m->grads, 0, m->n_params * sizeof(float));
}

/* -------------------------------------------------------------- activations */

/* RoPE tables for positions [0, T): angle(t, j) = t * 10000^(-2j/hd), float32
 * as PyTorch computes it. */
static int ensure_rope(gpt_t *m, int T) {
    if (m->rope_len >= T) return 0;
    int half = m->cfg.head_dim / 2;
    float *c = realloc(m->rope_cos, (size_t)T * half * sizeof(float));
    if (!c) return -1;
    m->rope_cos = c;
    float *s = realloc(m->rope_sin, (size_t)T * half * sizeof(float));
    if (!s) return -1;
    m->rope_sin = s;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < half; j++) {
            float inv_freq = 1.0f / powf(10000.0f, (float)(2 * j) / (float)m->cfg.head_dim);
            float f = (float)t * inv_freq;
            m->rope_cos[(size_t)t * half + j] = cosf(f);
            m->rope_sin[(size_t)t * half + j] = sinf(f);
        }
    m->rope_len = T;
    return 0;
}

/* Lay out (or, with buf NULL, just count) the activation arrays for (B, T). */
static size_t layout_acts(gpt_acts_t *a, const spec_model_t *c, int B, int T, float *buf) {
    size_t N = (size_t)B * T, D = c->n_embd, hd = c->head_dim, V = c->vocab_size;
    size_t qd = (size_t)c->n_head * hd, kvd = (size_t)c->n_kv_head * hd;
    size_t fc = fc_rows(c), hidden = c->mlp_hidden;
    size_t used = 0;
#define TAKE(ptr, n)                                                                               \
    do {                                                                                           \
        (ptr) = buf ? buf + used : NULL;                                                           \
        used += (n);                                                                               \
    } while (0)
    TAKE(a->emb, N * D);
    TAKE(a->drop_mask, c->embed_dropout > 0 ? N * D : 0);
    TAKE(a->x0, N * D);
    TAKE(a->rstd0, N);
    for (int l = 0; l <= c->depth; l++) TAKE(a->res[l], N * D);
    for (int l = 0; l < c->depth; l++) {
        TAKE(a->l[l].xn1, N * D);
        TAKE(a->l[l].rstd1, N);
        TAKE(a->l[l].q, N * qd);
        TAKE(a->l[l].k, N * kvd);
        TAKE(a->l[l].v, N * kvd);
        TAKE(a->l[l].rstd_q, N * c->n_head);
        TAKE(a->l[l].rstd_k, N * c->n_kv_head);
        TAKE(a->l[l].gate, c->has_ve[l] ? N * c->n_kv_head : 0);
        TAKE(a->l[l].lse, (size_t)B * c->n_head * T);
        TAKE(a->l[l].y, N * qd);
        TAKE(a->l[l].xn2, N * D);
        TAKE(a->l[l].rstd2, N);
        TAKE(a->l[l].h, N * fc);
        TAKE(a->l[l].a, N * hidden);
    }
    TAKE(a->xf, N * D);
    TAKE(a->rstdf, N);
    TAKE(a->logits, N * V);
    TAKE(a->lse, N);
    TAKE(a->losses, N);
    TAKE(a->dres, N * D);
    TAKE(a->dx0, N * D);
    TAKE(a->dxn, N * D);
    TAKE(a->dq, N * qd);
    TAKE(a->dk, N * kvd);
    TAKE(a->dv, N * kvd);
    TAKE(a->dy, N * qd);
    TAKE(a->qkv, N * (qd + 2 * kvd));
    /* Without a gate (fc == hidden) the activation's backward runs in place:
     * dh is da's array. */
    TAKE(a->dh, fc == hidden ? 0 : N * fc);
    TAKE(a->da, N * hidden);
    if (fc == hidden) a->dh = a->da;
    TAKE(a->dgate, N * c->n_kv_head);
    TAKE(a->dlogits, N * V);
    TAKE(a->attn_work, attn_work_floats(c->head_dim, T, a->threads));
#undef TAKE
    return used;
}

static gpt_acts_t *ensure_acts(gpt_t *m, int B, int T) {
    gpt_acts_t *a = m->acts;
    if (!a) {
        a = m->acts = calloc(1, sizeof *a);
        if (!a) return NULL;
    }
    int threads = omp_get_max_threads();
    if (a->B == B && a->T == T && a->threads >= threads) return a;
    a->threads = threads;
    size_t need = layout_acts(a, &m->cfg, B, T, NULL), N = (size_t)B * T;
    a->B = a->T = 0;          /* invalid until laid out: a failed allocation leaves no buffer */
    if (need > a->capacity) { /* scratch: nothing in it outlives a layout */
        free(a->buf);
        a->capacity = 0;
        if (!(a->buf = util_calloc_huge(need * sizeof(float)))) return NULL;
        a->capacity = need;
    }
    int *ids = realloc(a->ids, N * sizeof(int));
    if (!ids) return NULL;
    a->ids = ids;
    int *tg = realloc(a->targets, N * sizeof(int));
    if (!tg) return NULL;
    a->targets = tg;
    layout_acts(a, &m->cfg, B, T, a->buf);
    a->B = B;
    a->T = T;
    return a;
}

int gpt_reserve(gpt_t *m, int B, int T, char *err, size_t errlen) {
    if (ensure_acts(m, B, T) && (m->cfg.pos != POS_ROPE || ensure_rope(m, T) == 0)) return 0;
    snprintf(err, errlen, "out of memory allocating activations for %d x %d tokens", B, T);
    return NS_ERR_NOMEM;
}

/* ------------------------------------------------------------------ forward */

/* Rows of qkv that qkv_block's join asks for ahead of writing them: rows
 * w floats apart are a pattern the hardware prefetchers follow late, so
 * without it each row's first write waits on L3 (copying out gained nothing
 * from it). */
#define QKV_AHEAD 8

/* Between columns [off, off + width) of the fused projection's rows qkv
 * (N, w) and x (N, width): copy out (join = 0) or in (join = 1). */
static void qkv_block(float *qkv, int w, int off, float *x, int width, int N, int join) {
#pragma omp parallel for schedule(static) if ((size_t)N * width >= 16384)
    for (int i = 0; i < N; i++) {
        float *row = qkv + (size_t)i * w + off, *xi = x + (size_t)i * width;
        if (join && i + QKV_AHEAD < N)
            for (int d = 0; d < width; d += 16)
                __builtin_prefetch(row + (size_t)QKV_AHEAD * w + d, 1);
        if (join)
            memcpy(row, xi, (size_t)width * sizeof *row);
        else
            memcpy(xi, row, (size_t)width * sizeof *row);
    }
}

/* Threads the attention may use: the team's size, within what its scratch
 * was laid out for. */
static int attn_threads(const gpt_acts_t *a) {
    int n = omp_get_max_threads();
    return n < a->threads ? n : a->threads;
}

/* v (N, Hkv*hd) += gate * ve[ids]; gate (N, Hkv) = 2 sigmoid(xn[:, :C] Wg^T). */
static void value_embed_forward(float *v, float *gate, const float *xn, const float *Wg,
                                const float *ve, const int *ids, int N, int D, int C, int Hkv,
                                int hd) {
    gemm_linear_forward(gate, xn, D, Wg, N, C, Hkv);
#pragma omp parallel for schedule(static) if ((size_t)N * Hkv * hd >= 16384)
    for (int i = 0; i < N; i++) {
        const float *e = ve + (size_t)ids[i] * Hkv * hd;
        float *vi = v + (size_t)i * Hkv * hd;
        for (int g = 0; g < Hkv; g++) {
            float s = 2.0f / (1.0f + expf(-gate[(size_t)i * Hkv + g]));
            gate[(size_t)i * Hkv + g] = s;
            for (int j = 0; j < hd; j++) vi[g * hd + j] += s * e[g * hd + j];
        }
    }
}

/* Token embedding (+ learned positions), dropout when training, the norm:
 * a->x0, and the first residual slot. */
static void embed_forward(gpt_t *m, gpt_acts_t *a, const int *inputs, int N, int T, gpt_mode mode) {
    const spec_model_t *c = &m->cfg;
    int D = c->n_embd;
    ops_embedding_forward(a->emb, m->p.wte, inputs, N, D);
    if (c->pos == POS_LEARNED)
        for (int i = 0; i < N; i++)
            for (int j = 0; j < D; j++)
                a->emb[(size_t)i * D + j] += m->p.wpe[(size_t)(i % T) * D + j];
    a->dropout_on = mode == GPT_TRAIN && c->embed_dropout > 0;
    if (a->dropout_on) {
        /* Inverted dropout: kept values are scaled by 1/(1-p); the mask is
         * drawn from a stream advanced once per training forward. */
        rng_t r;
        rng_seed(&r, m->dropout_seed++);
        float keep = 1.0f - (float)c->embed_dropout, inv = 1.0f / keep;
        for (size_t i = 0; i < (size_t)N * D; i++) {
            a->drop_mask[i] = rng_uniform(&r) < keep ? inv : 0.0f;
            a->emb[i] *= a->drop_mask[i];
        }
    }
    ops_rmsnorm_forward(a->x0, a->rstd0, a->emb, N, D);
    memcpy(a->res[0], a->x0, (size_t)N * D * sizeof(float));
}

/* The residual slot entering layer l (l = depth: the output). Scoring keeps
 * nothing for a backward: the stream alternates between two slots. */
static float *res_slot(gpt_acts_t *a, int l, int score) {
    return score && l > 0 ? a->res[1 + ((l - 1) & 1)] : a->res[l];
}

/* Block l: attention and MLP, in place on the residual slot l + 1; its MLP
 * output is left in a->dxn for the next block's mix (or the final norm).
 * Scoring (GPT_SCORE) runs every block in layer 0's activations. */
static void block_forward(gpt_t *m, gpt_acts_t *a, int l, const int *inputs, int B, int T,
                          int score) {
    const spec_model_t *c = &m->cfg;
    int N = B * T, D = c->n_embd, H = c->n_head, Hkv = c->n_kv_head, hd = c->head_dim;
    int qd = H * hd, kvd = Hkv * hd, qkvd = qd + 2 * kvd; /* the fused projection's columns */
    const gpt_block_ptrs_t *w = &m->p.h[l];
    layer_acts_t *s = &a->l[score ? 0 : l];
    float rl = m->p.resid_lambdas[l], xl = m->p.x0_lambdas[l];
    float *x = res_slot(a, l + 1, score); /* the block works in place on the next slot */

    /* attention. The previous block's MLP output (in a->dxn) joins the
     * stream in the same pass as the mix and the norm. */
    ops_mix_rmsnorm_forward(x, s->xn1, s->rstd1, res_slot(a, l, score), l > 0 ? a->dxn : NULL,
                            a->x0, rl, xl, N, D);
    /* c_q, c_k, c_v are consecutive in params (build_table): one product,
     * whose q and k columns RoPE and the q/k norm read in place */
    gemm_linear_forward(a->qkv, s->xn1, D, w->c_q, N, D, qkvd);
    if (c->pos == POS_ROPE) {
        ops_rope_rmsnorm_forward(s->q, a->qkv, qkvd, s->rstd_q, m->rope_cos, m->rope_sin, N, T, H,
                                 hd);
        ops_rope_rmsnorm_forward(s->k, a->qkv + qd, qkvd, s->rstd_k, m->rope_cos, m->rope_sin, N, T,
                                 Hkv, hd);
    } else {
        qkv_block(a->qkv, qkvd, 0, s->q, qd, N, 0);
        qkv_block(a->qkv, qkvd, qd, s->k, kvd, N, 0);
        ops_rmsnorm_forward(s->q, s->rstd_q, s->q, N * H, hd);
        ops_rmsnorm_forward(s->k, s->rstd_k, s->k, N * Hkv, hd);
    }
    qkv_block(a->qkv, qkvd, qd + kvd, s->v, kvd, N, 0);
    if (c->has_ve[l])
        value_embed_forward(s->v, s->gate, s->xn1, w->ve_gate, w->ve, inputs, N, D,
                            c->ve_gate_channels, Hkv, hd);
    double t_att = prof_begin();
    attn_forward(s->y, s->lse, s->q, s->k, s->v, B, T, H, Hkv, hd, c->window[l], a->attn_work,
                 attn_threads(a));
    prof_end(PROF_ATTENTION, t_att);
    /* x += y Wo^T, through a->dxn (the previous MLP output has been added) */
    gemm_linear_forward(a->dxn, s->y, H * hd, w->c_proj, N, H * hd, D);

    /* mlp (the residual add and its norm in one pass) */
    ops_add_rmsnorm_forward(x, s->xn2, s->rstd2, a->dxn, N, D);
    gemm_linear_forward(s->h, s->xn2, D, w->fc, N, D, fc_rows(c));
    ops_mlp_act_forward(s->a, s->h, N, c->mlp_hidden, c->mlp);
    gemm_linear_forward(a->dxn, s->a, c->mlp_hidden, w->mlp_proj, N, c->mlp_hidden, D);
    /* its add into x is left to the next block's mix, or the final norm */
}

/* Rows of logits per chunk of the scoring head: 24 x V floats (384 KB at a
 * vocabulary of 4096) stay in L2 from the product to the loss. */
#define SCORE_ROWS 24

/* The head of a GPT_SCORE forward: losses (N) and lse (N) from xf through
 * lm_head, softcap and cross-entropy, SCORE_ROWS rows at a time, each
 * thread's chunk of logits in the first rows of the logits array. Returns
 * the summed loss (over rows in order, in double) and sets *count; -1 when
 * the kernel does not take the vocabulary (the caller takes the plain path). */
static double score_head(gpt_t *m, gpt_acts_t *a, const int *targets, int N, int *count) {
    const spec_model_t *c = &m->cfg;
    const int D = c->n_embd, V = c->vocab_size;
    /* rows per chunk: every thread's chunk fits in the logits array */
    const int nt = omp_get_max_threads(), per = N / nt < SCORE_ROWS ? N / nt : SCORE_ROWS;
    gemm_rows_fn *rows;
    const float *Wp = per > 0 ? gemm_pack_forward(m->p.lm_head, D, V, &rows) : NULL;
    if (!Wp) return -1.0;
    double t0 = prof_begin();
#pragma omp parallel num_threads(nt)
    {
        float *buf = a->logits + (size_t)omp_get_thread_num() * per * V;
        int counted = 0;
#pragma omp for schedule(static)
        for (int i0 = 0; i0 < N; i0 += per) {
            const int i1 = N - i0 < per ? N : i0 + per;
            rows(0, i1 - i0, V, D, a->xf + (size_t)i0 * D, D, 1, Wp, 0, buf, V, 0);
            ops_softcap_ce_rows(buf, a->lse, a->losses, targets, i0, i1, V, (float)c->softcap,
                                &counted);
        }
    }
    prof_end(PROF_MATMUL, t0);
    double total = 0.0;
    *count = 0;
    for (int i = 0; i < N; i++)
        if (targets[i] >= 0) {
            total += a->losses[i];
            (*count)++;
        }
    return total;
}

int gpt_forward(gpt_t *m, const int *inputs, const int *targets, int B, int T, gpt_mode mode,
                float *loss) {
    const spec_model_t *c = &m->cfg;
    int N = B * T, D = c->n_embd, V = c->vocab_size, L = c->depth;
    gpt_acts_t *a = ensure_acts(m, B, T);
    if (!a || (c->pos == POS_ROPE && ensure_rope(m, T) < 0)) return NS_ERR_NOMEM;
    const int score = mode == GPT_SCORE;
    if (score && !targets) return NS_ERR_INVALID;
    memcpy(a->ids, inputs, (size_t)N * sizeof(int));
    a->has_targets = targets != NULL && !score; /* nothing for a backward after scoring */
    gemm_keep_inputs(a->has_targets && mode == GPT_TRAIN); /* for the backward's products */
    if (targets) memcpy(a->targets, targets, (size_t)N * sizeof(int));

    embed_forward(m, a, inputs, N, T, mode);
    for (int l = 0; l < L; l++) block_forward(m, a, l, inputs, B, T, score);

    /* depth >= 1 (spec_validate): a->dxn holds the last block's MLP output */
    ops_add_rmsnorm_forward(res_slot(a, L, score), a->xf, a->rstdf, a->dxn, N, D);
    int count = 0;
    double total = score ? score_head(m, a, targets, N, &count) : -1.0;
    if (total < 0) {
        gemm_linear_forward(a->logits, a->xf, D, m->p.lm_head, N, D, V);
        total = ops_softcap_ce_forward(a->logits, a->lse, a->losses, targets, N, V,
                                       (float)c->softcap, &count);
    }
    a->loss_count = count;
    if (loss) *loss = targets && count > 0 ? (float)(total / count) : 0.0f;
    return 0;
}

const float *gpt_token_losses(const gpt_t *m) {
    return m->acts ? m->acts->losses : NULL;
}

const float *gpt_logits(const gpt_t *m, int b, int t) {
    const gpt_acts_t *a = m->acts;
    return a->logits + ((size_t)b * a->T + t) * m->cfg.vocab_size;
}

/* ----------------------------------------------------------------- backward */

/* Given dv (N, Hkv*hd) flowing into v = v_raw + gate * ve[ids]: accumulate the
 * value-embedding and gate-weight gradients, and add the gate's pull on
 * xn[:, :C] into dxn. dgate is (N, Hkv) scratch. */
static void value_embed_backward(float *dxn, float *dWg, float *dve, float *dgate, const float *dv,
                                 const float *gate, const float *xn, const float *Wg,
                                 const float *ve, const int *ids, int N, int D, int C, int Hkv,
                                 int hd) {
    int kvd = Hkv * hd;
    /* dve rows are scattered by ids (repeats sum): threads own column slices. */
    int slices = kvd >= 64 ? kvd / 16 : 1;
    /* One team for both loops (the gate's rows, then the slices). */
#pragma omp parallel if ((size_t)N * kvd >= 16384)
    {
#pragma omp for schedule(static) nowait
        for (int i = 0; i < N; i++) {
            const float *e = ve + (size_t)ids[i] * kvd;
            const float *dvi = dv + (size_t)i * kvd;
            for (int g = 0; g < Hkv; g++) {
                float s = gate[(size_t)i * Hkv + g]; /* 2 sigmoid(z) */
                double dot = dot_f64(dvi + g * hd, e + g * hd, hd);
                /* d(2 sigmoid(z))/dz = 2 sig (1 - sig) = s (1 - s/2) */
                dgate[(size_t)i * Hkv + g] = (float)dot * s * (1.0f - 0.5f * s);
            }
        }
#pragma omp for schedule(static)
        for (int sl = 0; sl < slices; sl++) {
            int j0 = (int)((long)kvd * sl / slices), j1 = (int)((long)kvd * (sl + 1) / slices);
            for (int i = 0; i < N; i++) {
                float *de = dve + (size_t)ids[i] * kvd;
                const float *dvi = dv + (size_t)i * kvd;
                const float *gi = gate + (size_t)i * Hkv;
                for (int j = j0; j < j1; j++) de[j] += gi[j / hd] * dvi[j];
            }
        }
    }
    gemm_linear_backward(dxn, D, 1.0f, dWg, dgate, xn, Wg, N, C, Hkv);
}

void gpt_backward(gpt_t *m, float scale) {
    const spec_model_t *c = &m->cfg;
    gpt_acts_t *a = m->acts;
    int B = a->B, T = a->T, N = B * T, D = c->n_embd, H = c->n_head, Hkv = c->n_kv_head;
    int hd = c->head_dim, V = c->vocab_size, L = c->depth, hidden = c->mlp_hidden;
    int qd = H * hd, kvd = Hkv * hd, qkvd = qd + 2 * kvd;
    size_t ND = (size_t)N * D;
    if (!a->has_targets || a->loss_count == 0) return;

    /* head: d(mean loss) / d(logits), then through lm_head and the final norm */
    ops_softcap_ce_backward(a->dlogits, a->logits, a->lse, a->targets, N, V, (float)c->softcap,
                            scale / (float)a->loss_count);
    gemm_linear_backward(a->dxn, D, 0.0f, m->g.lm_head, a->dlogits, a->xf, m->p.lm_head, N, D, V);
    ops_rmsnorm_backward(a->dres, a->dxn, a->xf, a->rstdf, N, D);
    memset(a->dx0, 0, ND * sizeof(float));

    /* a->dres holds d/d(res[l+1]); after the layer it holds d/d(res[l]) */
    for (int l = L - 1; l >= 0; l--) {
        const gpt_block_ptrs_t *w = &m->p.h[l];
        gpt_block_ptrs_t *gw = &m->g.h[l];
        layer_acts_t *s = &a->l[l];

        /* mlp: x_out = x_mid + act(xn2 Wfc^T) Wp^T; dres is d/dx_out = d/dx_mid (direct) */
        gemm_linear_backward(a->da, hidden, 0.0f, gw->mlp_proj, a->dres, s->a, w->mlp_proj, N,
                             hidden, D);
        ops_mlp_act_backward(a->dh, a->da, s->h, N, hidden, c->mlp);
        gemm_linear_backward(a->dxn, D, 0.0f, gw->fc, a->dh, s->xn2, w->fc, N, D, fc_rows(c));
        ops_rmsnorm_backward_acc(a->dres, a->dxn, s->xn2, s->rstd2, N, D);

        /* attention: x_mid = x_in + y Wo^T */
        gemm_linear_backward(a->dy, H * hd, 0.0f, gw->c_proj, a->dres, s->y, w->c_proj, N, H * hd,
                             D);
        double t_att = prof_begin();
        attn_backward(a->dq, a->dk, a->dv, a->dy, s->y, s->lse, s->q, s->k, s->v, B, T, H, Hkv, hd,
                      c->window[l], a->attn_work, attn_threads(a));
        prof_end(PROF_ATTENTION, t_att);
        /* q/k norms (the forward kept their outputs in s->q, s->k), then
         * rope, into the q and k columns of the fused rows */
        if (c->pos == POS_ROPE) {
            ops_rmsnorm_rope_backward(a->qkv, qkvd, a->dq, s->q, s->rstd_q, m->rope_cos,
                                      m->rope_sin, N, T, H, hd);
            ops_rmsnorm_rope_backward(a->qkv + qd, qkvd, a->dk, s->k, s->rstd_k, m->rope_cos,
                                      m->rope_sin, N, T, Hkv, hd);
        } else {
            /* d/dq lands in dy, d/dk in dq (free once read) */
            ops_rmsnorm_backward(a->dy, a->dq, s->q, s->rstd_q, N * H, hd);
            ops_rmsnorm_backward(a->dq, a->dk, s->k, s->rstd_k, N * Hkv, hd);
            qkv_block(a->qkv, qkvd, 0, a->dy, qd, N, 1);
            qkv_block(a->qkv, qkvd, qd, a->dq, kvd, N, 1);
        }
        qkv_block(a->qkv, qkvd, qd + kvd, a->dv, kvd, N, 1);
        gemm_linear_backward(a->dxn, D, 0.0f, gw->c_q, a->qkv, s->xn1, w->c_q, N, D, qkvd);
        if (c->has_ve[l])
            value_embed_backward(a->dxn, gw->ve_gate, gw->ve, a->dgate, a->dv, s->gate, s->xn1,
                                 w->ve_gate, w->ve, a->ids, N, D, c->ve_gate_channels, Hkv, hd);
        /* the attention norm, then the mix x_in = rl * res[l] + xl * x0, in one pass */
        float rl = m->p.resid_lambdas[l], xl = m->p.x0_lambdas[l];
        double drl, dxl;
        ops_rmsnorm_mix_backward(a->dres, a->dx0, a->dxn, s->xn1, s->rstd1, a->res[l], a->x0, rl,
                                 xl, N, D, &drl, &dxl);
        m->g.resid_lambdas[l] += (float)drl;
        m->g.x0_lambdas[l] += (float)dxl;
    }

    /* res[0] is x0 itself: both paths meet, then the embedding norm */
    ops_add(a->dx0, a->dres, ND);
    ops_rmsnorm_backward(a->dres, a->dx0, a->x0, a->rstd0, N, D);
    if (a->dropout_on)
        for (size_t i = 0; i < ND; i++) a->dres[i] *= a->drop_mask[i];
    ops_embedding_backward(m->g.wte, a->dres, a->ids, N, D);
    if (c->pos == POS_LEARNED)
        for (int i = 0; i < N; i++)
            for (int j = 0; j < D; j++)
                m->g.wpe[(size_t)(i % T) * D + j] += a->dres[(size_t)i * D + j];
    gemm_keep_inputs(0);
}

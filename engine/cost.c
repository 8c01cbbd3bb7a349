/* cost.c - analytic parameter / FLOP / MAC counts of a spec, and the
 * `nightshift cost SPEC.json [--batch B]` command that prints them.
 *
 * Nothing here builds a model: the counts are closed-form in the spec's model
 * section and must agree with gpt_new's tensor table (the tests check that). */
#include "engine/cost.h"

#include <math.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/attn.h"
#include "engine/cli.h"
#include "engine/data.h"
#include "engine/floor.h"
#include "engine/gemm_bf16.h"
#include "engine/optim.h"
#include "engine/spec.h"
#include "engine/threads.h"

void cost_compute(const spec_model_t *m, int B, cost_t *out) {
    const int64_t V = m->vocab_size, D = m->n_embd, L = m->depth;
    const int64_t q_rows = (int64_t)m->n_head * m->head_dim;
    const int64_t kv_rows = (int64_t)m->n_kv_head * m->head_dim;
    const int64_t hidden = m->mlp_hidden;
    const int gated = m->mlp == MLP_SWIGLU || m->mlp == MLP_GEGLU;
    const int64_t fc_rows = gated ? 2 * hidden : hidden;

    memset(out, 0, sizeof *out);
    out->wte = V * D;
    out->wpe = m->pos == POS_LEARNED ? (int64_t)m->max_pos * D : 0;
    /* c_q, c_k, c_v, attention c_proj, c_fc, MLP c_proj: same in every block. */
    const int64_t per_block = q_rows * D + 2 * kv_rows * D + D * D + fc_rows * D + D * hidden;
    double attn_flops = 0;
    for (int i = 0; i < L; i++) {
        out->blocks += per_block;
        if (m->has_ve[i]) {
            out->blocks += (int64_t)m->n_kv_head * m->ve_gate_channels; /* ve_gate */
            out->value_embeds += V * kv_rows;
        }
        int w = m->window[i] < m->seq_len ? m->window[i] : m->seq_len;
        attn_flops += 12.0 * (double)q_rows * w; /* 12 * n_head * head_dim * window */
    }
    out->lm_head = m->tie_embeddings ? 0 : V * D;
    out->scalars = 2 * L;
    out->total =
        out->wte + out->wpe + out->value_embeds + out->blocks + out->lm_head + out->scalars;

    /* autoresearch: 6 FLOPs per parameter per token (2 forward, 4 backward),
     * excluding parameters that are looked up rather than multiplied: the
     * token table, value embeddings and the per-layer scalars. A learned
     * position table is a lookup too, so it is excluded as well. A tied
     * lm_head still does its V x D matrix multiply with the token table's
     * weights, so its 6*V*D is counted either way: tying must not make a
     * model look cheaper to run. */
    double matmul_params = (double)(out->total - out->wte - out->value_embeds - out->scalars -
                                    out->wpe - out->lm_head) +
                           (double)(V * D);
    out->flops_per_token = 6.0 * matmul_params + attn_flops;

    const double rows = (double)B * m->seq_len; /* B*T token positions */
    out->mac_proj_ffn = rows * (double)L * (double)per_block;
    out->mac_attn = 2.0 * rows * m->seq_len * (double)D * (double)L;
    out->mac_lm_head = rows * (double)D * (double)V;
}

/* Muon's per-matrix state (momentum + NorMuon second moment, optim.c) and the
 * scratch of its polar-express step for a rows x cols matrix, in floats. */
static double muon_state(double rows, double cols) {
    return rows * cols + (rows > cols ? rows : cols);
}
static double muon_work(double rows, double cols) {
    return (double)optim_muon_work_floats((int)rows, (int)cols);
}

/* The floats of bf16 products (gemm_bf16_memory_floats) for gpt.c's linear
 * layers: per block the fused q, k, v, the output projection, the MLP's two
 * and the value-embedding gate where the block has one, then lm_head. */
static double bf16_floats(const spec_model_t *m, double N, double qkv, double qd, double fc) {
    int(*lin)[2] = malloc(((size_t)5 * m->depth + 1) * sizeof *lin);
    if (!lin) return 0;
    int n = 0;
    for (int l = 0; l < m->depth; l++) {
        lin[n][0] = m->n_embd, lin[n++][1] = (int)qkv;
        lin[n][0] = (int)qd, lin[n++][1] = m->n_embd;
        lin[n][0] = m->n_embd, lin[n++][1] = (int)fc;
        lin[n][0] = m->mlp_hidden, lin[n++][1] = m->n_embd;
        if (m->has_ve[l]) lin[n][0] = m->ve_gate_channels, lin[n++][1] = m->n_kv_head;
    }
    lin[n][0] = m->n_embd, lin[n++][1] = m->vocab_size;
    const double f = (double)gemm_bf16_memory_floats((int)N, (const int(*)[2])lin, n);
    free(lin);
    return f;
}

void cost_memory(const spec_model_t *m, int B, double data_tokens, spec_precision_kind precision,
                 cost_mem_t *out) {
    cost_t c;
    cost_compute(m, B, &c);
    const double V = m->vocab_size, D = m->n_embd, T = m->seq_len, N = (double)B * T;
    const double H = m->n_head, Hkv = m->n_kv_head;
    const double qd = H * m->head_dim, kvd = Hkv * m->head_dim, hidden = m->mlp_hidden;
    const int gated = m->mlp == MLP_SWIGLU || m->mlp == MLP_GEGLU;
    const double fc = gated ? 2 * hidden : hidden;

    memset(out, 0, sizeof *out);
    out->weights = 4.0 * (double)c.total;
    out->grads = 4.0 * (double)c.total;

    /* AdamW: two moments for everything that is not a block matrix. Muon:
     * per block matrix, and scratch sized for the largest one. */
    double adam = (double)(c.total - c.blocks), muon = 0, work = 0;
    const double shapes[4][2] = {{qd, D}, {kvd, D}, {D, qd}, {fc, D}};
    for (int i = 0; i < 4; i++) {
        double w = muon_work(shapes[i][0], shapes[i][1]);
        if (w > work) work = w;
    }
    double mlp_proj = muon_work(D, hidden);
    if (mlp_proj > work) work = mlp_proj;
    for (int l = 0; l < m->depth; l++) {
        muon += muon_state(qd, D) + 2 * muon_state(kvd, D) + muon_state(D, qd) + muon_state(fc, D) +
                muon_state(D, hidden);
        if (m->has_ve[l]) muon += muon_state(Hkv, m->ve_gate_channels);
    }
    out->optimizer = 4.0 * (2 * adam + muon + work);

    /* gpt.c's layout_acts, array by array, plus the token id arrays. */
    double acts = N * D * (3 + (m->embed_dropout > 0)) + N; /* emb, drop, x0, res[0]; rstd0 */
    for (int l = 0; l < m->depth; l++) {
        acts += N * D                                      /* res[l + 1] */
                + 2 * (N * D + N)                          /* xn1, xn2 and their rstd */
                + 2 * N * qd + 2 * N * kvd + N * (H + Hkv) /* q, y; k, v; rstd_q, rstd_k */
                + (m->has_ve[l] ? N * Hkv : 0)             /* gate */
                + N * H                                    /* attention log-sum-exp */
                + N * fc + N * hidden;                     /* MLP */
    }
    acts += N * D + 3 * N + N * V; /* xf, rstdf, lse, losses, logits */
    acts += 3 * N * D + 2 * N * qd + 2 * N * kvd + (gated ? N * fc : 0) + N * hidden + N * Hkv +
            N * V; /* backward scratch (dh is da without a gate) */
    /* the attention's per-thread scratch, for as many threads as CPUs */
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    acts += (double)attn_work_floats(m->head_dim, m->seq_len, cpus > 0 ? (int)cpus : 1);
    out->activations = 4.0 * acts + 4.0 * 4 * N; /* + ids/targets in gpt.c and train.c */

    const int bf16 =
        precision == PRECISION_BF16 || (precision == PRECISION_AUTO && gemm_bf16_cpu());
    out->bf16 = bf16 ? 4.0 * bf16_floats(m, N, qd + 2 * kvd, qd, fc) : 0;

    out->data = 2.0 * data_tokens;
    out->overhead = COST_OVERHEAD_BYTES;
    out->total = out->weights + out->grads + out->optimizer + out->activations + out->bf16 +
                 out->data + out->overhead;
}

int cost_default_worker_mb(int slots) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double mb = pages > 0 && page > 0 ? (double)pages * page / (1 << 20) : 0;
    return slots > 0 ? (int)(0.75 * mb / slots) : 0;
}

int cost_worker_limit_mb(int spec_mb, int daemon_mb) {
    if (spec_mb <= 0) return daemon_mb;
    return daemon_mb > 0 && daemon_mb < spec_mb ? daemon_mb : spec_mb;
}

double cost_worker_limit(int spec_mb, int daemon_mb, const char **source) {
    int limit_mb = cost_worker_limit_mb(spec_mb, daemon_mb);
    *source = spec_mb > 0 && limit_mb == spec_mb ? "resources.memory_mb"
              : limit_mb > 0                     ? "the daemon's limit per worker"
                                                 : "this machine's RAM";
    if (limit_mb > 0) return (double)limit_mb * 1024 * 1024;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (double)pages * page : 0;
}

const char *cost_human_bytes(double bytes, char *buf, size_t len) {
    if (bytes >= 1e12)
        snprintf(buf, len, "%.*f TB", bytes >= 1e13 ? 0 : 1, bytes / 1e12);
    else if (bytes >= 1e9)
        snprintf(buf, len, "%.*f GB", bytes >= 1e10 ? 0 : 1, bytes / 1e9);
    else
        snprintf(buf, len, "%.0f MB", bytes / 1e6);
    return buf;
}

int cost_fits(const cost_mem_t *mem, const spec_model_t *m, int batch_size, double limit,
              const char *source, char *msg, size_t len) {
    char need[32], may[32], state_b[32], acts_b[32];
    if (limit <= 0 || mem->total <= limit) return 0;
    double params = mem->weights / 4;
    snprintf(msg, len,
             "needs ~%s, a worker may use %s (%s): %.*f %s parameters; weights, gradients and "
             "optimizer state %s, activations for batch_size %d x seq_len %d %s; see "
             "`nightshift cost`",
             cost_human_bytes(mem->total, need, sizeof need),
             cost_human_bytes(limit, may, sizeof may), source, params >= 1e9 ? 1 : 0,
             params >= 1e9 ? params / 1e9 : params / 1e6, params >= 1e9 ? "billion" : "million",
             cost_human_bytes(mem->weights + mem->grads + mem->optimizer, state_b, sizeof state_b),
             batch_size, m->seq_len, cost_human_bytes(mem->activations, acts_b, sizeof acts_b));
    return -1;
}

int cost_admit(cost_mem_t *mem, const spec_model_t *m, int batch_size, double limit,
               const char *source, double floor, int threads, char *msg, size_t len) {
    const double mib = 1024.0 * 1024.0;
    double margin = floor > 0 ? COST_AS_MARGIN : 0;
    if (floor > 0 && floor >= limit) {
        snprintf(msg, len,
                 "%s %.0f MiB is below the %.0f MiB of address space the engine maps with %d "
                 "thread%s before a run allocates anything (OpenBLAS's and OpenMP's buffers per "
                 "thread, measured at start: `nightshift floor --threads %d`); this run needs "
                 "about %.0f MiB",
                 source, limit / mib, ceil(floor / mib), threads, threads == 1 ? "" : "s", threads,
                 ceil((mem->total + floor + margin) / mib));
        mem->total += floor + margin;
        return -1;
    }
    mem->total += floor + margin;
    if (cost_fits(mem, m, batch_size, limit, source, msg, len) == 0) return 0;
    size_t n = strlen(msg);
    if (floor > 0 && n < len)
        snprintf(msg + n, len - n,
                 " (the %.0f MiB of address space the engine maps with %d thread%s and a margin "
                 "of %.0f MiB counted)",
                 ceil(floor / mib), threads, threads == 1 ? "" : "s", ceil(margin / mib));
    return -1;
}

/* ---------------------------------------------------------------- command */

/* v with thousands separators ("38,597,376") into buf; returns buf. */
static char *commas(double v, char *buf, size_t buflen) {
    char digits[64];
    snprintf(digits, sizeof digits, "%.0f", v < 0 ? -v : v);
    size_t n = strlen(digits), o = 0;
    if (v < 0 && o + 1 < buflen) buf[o++] = '-';
    for (size_t i = 0; i < n && o + 1 < buflen; i++) {
        if (i && (n - i) % 3 == 0 && o + 1 < buflen) buf[o++] = ',';
        if (o + 1 < buflen) buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

static void print_params(const char *label, int64_t n, const char *note) {
    char a[64], b[64];
    printf("%-28s %20s  (%s bytes)%s\n", label, commas((double)n, a, sizeof a),
           commas(4.0 * (double)n, b, sizeof b), note);
}

static void print_count(const char *label, double v) {
    char a[64];
    printf("%-28s %20s  (%.3e)\n", label, commas(v, a, sizeof a), v);
}

/* Memory in the unit of every memory verdict (cost_human_bytes), to a tenth
 * of a MB below a GB. */
static void print_bytes(const char *label, double bytes) {
    char a[64];
    if (bytes < 1e9)
        snprintf(a, sizeof a, "%.1f MB", bytes / 1e6);
    else
        cost_human_bytes(bytes, a, sizeof a);
    printf("%-28s %20s\n", label, a);
}

static void usage(FILE *out) {
    fprintf(out, "usage: nightshift cost SPEC.json [--dir DIR] [--batch B] [--memory-mb MB]\n"
                 "\n"
                 "Prints the parameter counts (and fp32 bytes) of the spec's model, its\n"
                 "training FLOPs per token, the leading MAC counts of one forward pass over\n"
                 "B rows of seq_len tokens (B defaults to train.batch_size), and the memory a\n"
                 "worker training it needs (an estimate of its peak RSS), then whether that\n"
                 "fits in what a worker may use: the daemon refuses a spec that does not\n"
                 "(does_not_fit), with the same numbers. Exit 1 when it does not fit.\n"
                 "\n"
                 "  --dir DIR        the state directory holding the spec's dataset (default\n"
                 "                   state): model.vocab_size comes from the dataset unless\n"
                 "                   the spec gives it, and its token files count towards memory\n"
                 "  --batch B        rows per forward pass for the MAC counts and the memory\n"
                 "  --memory-mb MB   a worker's limit, as serve --memory-mb (default: serve's\n"
                 "                   with one slot, 75%% of RAM; 0 = none); a spec's\n"
                 "                   resources.memory_mb may ask for less\n");
}

/* Returns 0, 1 for --help (printed), or 2 after a usage error (printed). */
static int cost_parse(int argc, char **argv, const char **spec_path, const char **dir, long *batch,
                      long *memory_mb) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(argv[i], "--dir") || !strncmp(argv[i], "--dir=", 6)) {
            *dir = argv[i][5] == '=' ? argv[i] + 6 : (i + 1 < argc ? argv[++i] : NULL);
            if (!*dir || !**dir) {
                fprintf(stderr, "cost: --dir needs a directory\n");
                goto usage;
            }
        } else if (!strcmp(argv[i], "--batch") || !strncmp(argv[i], "--batch=", 8)) {
            const char *v = argv[i][7] == '=' ? argv[i] + 8 : (i + 1 < argc ? argv[++i] : NULL);
            char *end = NULL;
            errno = 0;
            *batch = v ? strtol(v, &end, 10) : 0;
            if (!v || !*v || *end || errno || *batch <= 0 || *batch > INT_MAX) {
                fprintf(stderr, "cost: --batch needs a positive integer\n");
                goto usage;
            }
        } else if (!strcmp(argv[i], "--memory-mb") || !strncmp(argv[i], "--memory-mb=", 12)) {
            const char *v = argv[i][11] == '=' ? argv[i] + 12 : (i + 1 < argc ? argv[++i] : NULL);
            char *end = NULL;
            errno = 0;
            *memory_mb = v ? strtol(v, &end, 10) : -1;
            if (!v || !*v || *end || errno || *memory_mb < 0 || *memory_mb > INT_MAX) {
                fprintf(stderr, "cost: --memory-mb needs a number of MiB (0 = no limit)\n");
                goto usage;
            }
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "cost: unknown option %s\n", argv[i]);
            goto usage;
        } else if (!*spec_path) {
            *spec_path = argv[i];
        } else {
            fprintf(stderr, "cost: more than one spec given\n");
            goto usage;
        }
    }
    if (*spec_path) return 0;
usage:
    usage(stderr);
    return 2;
}

/* The counts and the memory estimate of model m at B rows. */
static void cost_print(const spec_model_t *m, int B, const cost_t *c, const cost_mem_t *mem) {
    char a[64];
    print_params("token parameters:", c->wte, "");
    print_params("position parameters:", c->wpe, m->pos == POS_LEARNED ? "" : "  rope, no table");
    print_params("value-embedding parameters:", c->value_embeds, "");
    print_params("block parameters:", c->blocks, "");
    print_params("lm_head parameters:", c->lm_head,
                 m->tie_embeddings ? "  tied to token table" : "");
    print_params("scalar parameters:", c->scalars, "");
    print_params("total parameters:", c->total, "");
    print_count("flops_per_token:", c->flops_per_token);
    printf("%-28s %20s\n", "forward batch rows (B):", commas(B, a, sizeof a));
    printf("%-28s %20s\n", "forward seq_len (T):", commas(m->seq_len, a, sizeof a));
    print_count("projection+FFN MACs:", c->mac_proj_ffn);
    print_count("attention-pair MACs:", c->mac_attn);
    print_count("lm_head MACs:", c->mac_lm_head);
    print_count("forward MACs (sum):", c->mac_proj_ffn + c->mac_attn + c->mac_lm_head);
    print_bytes("memory, weights:", mem->weights);
    print_bytes("memory, gradients:", mem->grads);
    print_bytes("memory, optimizer:", mem->optimizer);
    print_bytes("memory, activations:", mem->activations);
    if (mem->bf16 > 0) print_bytes("memory, bf16 operands:", mem->bf16);
    print_bytes("memory, dataset:", mem->data);
    print_bytes("memory, process:", mem->overhead);
    print_bytes("memory needed (estimate):", mem->total);
}

int cost_main(int argc, char **argv) {
    const char *spec_path = NULL, *dir = NULL;
    long batch = 0, memory_mb = cost_default_worker_mb(1);
    int rc = cost_parse(argc, argv, &spec_path, &dir, &batch, &memory_mb);
    if (rc) return rc == 1 ? 0 : 2;
    spec_t spec;
    char err[SPEC_ERR_LEN];
    int spec_rc = spec_load(spec_path, &spec, err, sizeof err);
    if (spec_rc != 0) {
        /* spec_load names the file itself when it cannot read it. */
        if (spec_rc != NS_ERR_INVALID)
            fprintf(stderr, "cost: %s\n", err);
        else
            fprintf(stderr, "cost: %s: %s\n", spec_path, err);
        return 1;
    }
    spec_model_t *m = &spec.model;
    /* The dataset: the vocabulary when the spec leaves it out, and the token
     * files' size. Without --dir a missing dataset only matters when the spec
     * has no vocab_size. */
    data_info_t info;
    char derr[512];
    const char *state = dir ? dir : "state";
    int have_data = data_info(state, spec.dataset, &info, derr, sizeof derr) == 0;
    if (!have_data && (dir || m->vocab_size <= 0)) {
        fprintf(stderr, "cost: dataset: %s\n", derr);
        if (m->vocab_size <= 0)
            fprintf(stderr,
                    "cost: model.vocab_size comes from the dataset '%s': give --dir with "
                    "the state directory that holds it, or set model.vocab_size\n",
                    spec.dataset);
        spec_free(&spec);
        return 1;
    }
    if (have_data && m->vocab_size > 0 && m->vocab_size != info.vocab_size) {
        fprintf(stderr, "cost: model.vocab_size: %d differs from dataset %s's vocab %d\n",
                m->vocab_size, spec.dataset, info.vocab_size);
        spec_free(&spec);
        return 1;
    }
    if (m->vocab_size <= 0) {
        m->vocab_size = info.vocab_size;
        printf("%-28s %20d  (from dataset '%s' in %s)\n", "vocab_size:", m->vocab_size,
               spec.dataset, state);
    }
    int B = batch ? (int)batch : spec.train.batch_size;
    cost_t c;
    cost_compute(m, B, &c);
    cost_mem_t mem;
    cost_memory(m, B, have_data ? info.train_tokens + info.val_tokens + info.test_tokens : 0,
                spec.train.precision, &mem);
    cost_print(m, B, &c, &mem);
    if (spec.flops_budget > 0) {
        /* what train does with it: the token budget flops_budget /
         * flops_per_token, reached by the first step whose tokens reach it */
        double tokens = spec.flops_budget / c.flops_per_token,
               step = (double)spec.train.total_batch_tokens, steps = ceil(tokens / step);
        print_count("flops_budget:", spec.flops_budget);
        print_count("tokens it buys:", tokens);
        printf("%-28s %20.0f  (%.0f tokens trained)\n", "optimiser steps:", steps, steps * step);
    }

    /* The daemon's verdict at submission (does_not_fit), in its words and by
     * its code (cost_admit). A worker's limit is on address space, so under
     * one the run also needs the engine's floor, measured as the daemon
     * measures it at start (floor_probe: `nightshift floor` in a process of
     * its own, a worker's thread counts), and the margin. */
    const char *source;
    char verdict[512], may[32];
    double limit = cost_worker_limit(spec.resources.memory_mb, (int)memory_mb, &source);
#if defined(__SANITIZE_ADDRESS__)
    /* as serve does: a sanitizer's shadow memory is terabytes of address
     * space, and such a floor would refuse everything */
    const int count_floor = 0;
#else
    const int count_floor = 1;
#endif
    int threads = threads_set(spec.resources.threads);
    double floor = 0;
    if (limit > 0 && count_floor) {
        char ferr[256];
        floor = floor_probe("/proc/self/exe", threads, NULL, ferr, sizeof ferr);
        if (floor < 0) {
            fprintf(stderr, "cost: %s; the engine's floor is not counted\n", ferr);
            floor = 0;
        }
    }
    int fits = cost_admit(&mem, m, B, limit, source, floor, threads, verdict, sizeof verdict) == 0;
    if (floor > 0) { /* in MiB, as the verdict and resources.memory_mb have them */
        const double mib = 1024.0 * 1024.0;
        char label[64], v[64];
        snprintf(label, sizeof label, "engine floor, %d thread%s:", threads,
                 threads == 1 ? "" : "s");
        snprintf(v, sizeof v, "%.0f MiB", ceil(floor / mib));
        printf("%-28s %20s  (`nightshift floor --threads %d`)\n", label, v, threads);
        snprintf(v, sizeof v, "%.0f MiB", ceil(COST_AS_MARGIN / mib));
        printf("%-28s %20s\n", "address-space margin:", v);
        snprintf(v, sizeof v, "%.0f MiB", ceil(mem.total / mib));
        printf("%-28s %20s  (the least resources.memory_mb for it)\n",
               "memory needed, with them:", v);
    }
    if (fits && limit > 0)
        printf("%-28s %20s  (%s)\n", "a worker may use:", cost_human_bytes(limit, may, sizeof may),
               source);
    else if (!fits)
        fprintf(stderr, "cost: does_not_fit: %s\n", verdict);
    spec_free(&spec);
    return fits ? 0 : 1;
}

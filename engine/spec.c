/* spec.c - the experiment spec: JSON in, a validated spec_t out, and back to
 * one canonical JSON string.
 *
 * Parsing runs in two stages. spec_parse reads the document with cJSON and
 * checks what is needed to store each field: the JSON type, that integers are
 * whole and fit their C type, string lengths, known names. spec_validate then
 * checks every range and cross-field rule and derives the per-layer arrays; it
 * works on a spec_t alone, so a spec changed by hand is checked the same way.
 * Every message is "path: reason" with the path as the user wrote it
 * ("model.ve_layers[1]", "train.adam_betas[0]"); the root is called "spec".
 *
 * One table, spec_fields below, names every field once: the key lists
 * (unknown fields, "did you mean"), the defaults, the parser, the range
 * checks and the canonical writer all read it. A plain field (an int, a
 * double, a bool or an enum) needs nothing but its line there.
 *
 * spec_canonical_json prints every field (defaults filled, derived arrays
 * left out), keys sorted at every level, no whitespace, numbers formatted here
 * rather than by cJSON so that equal values always print equal. */
#include "engine/spec.h"
#include "engine/util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Integers in JSON are doubles to cJSON: above 2^53 they are no longer exact. */
#define JSON_MAX_SAFE_INT 9007199254740991.0

#define MAX_VOCAB   (1 << 24)
#define MAX_WIDTH   (1 << 16) /* n_embd, heads, gate channels, batch rows */
#define MAX_SEQ     (1 << 20) /* seq_len, max_pos */
#define MAX_HIDDEN  (1 << 20) /* mlp_hidden */
#define MAX_THREADS 1024

/* Upper bounds of the fields that have no natural one: a spec must not be
 * able to ask for centuries of training or an overflowing deadline. */
#define MAX_LR          1e6 /* every learning rate and weight_decay (beyond: only NaN) */
#define MAX_SOFTCAP     1e6
#define MAX_PEAK_GFLOPS 1e9 /* an exaflop machine */

static const char *const mlp_names[] = {"relu2", "gelu", "swiglu", "geglu"};
static const char *const pos_names[] = {"rope", "learned"};
static const char *const sampler_names[] = {"random", "sequential"};
static const char *const precision_names[] = {"fp32", "bf16", "auto"};
static const char *const ve_names[] = {"alternate", "all", "none", "first_half", "last_half"};
enum { VE_ALTERNATE, VE_ALL, VE_NONE, VE_FIRST_HALF, VE_LAST_HALF, VE_LIST };

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------- the table -- */

typedef enum {
    F_INT,     /* int in [lo, hi] */
    F_NUM,     /* double, checked by its rule */
    F_BOOL,    /* bool */
    F_ENUM,    /* an enum stored as int: the index of its name in names[] */
    F_SECTION, /* "model", "train", "resources": an object of fields */
    F_SPECIAL, /* parsed by its .parse, checked and printed by hand (see spec_fields) */
} field_type;

/* How a double is checked, and the message when it is not in range. */
typedef enum {
    NUM_IN,       /* lo <= v <= hi: "must be in [lo, hi]" */
    NUM_IN_OPEN,  /* lo <= v < hi: "must be in [lo, hi)" */
    NUM_ABOVE,    /* v > lo, finite: "must be > lo"; then "must be at most hi" */
    NUM_AT_LEAST, /* v >= lo, finite: "must be >= lo"; then "must be at most hi" */
    NUM_BY_HAND,  /* checked by hand (time_budget_s: validate_budget) */
} num_rule;

/* How the canonical writer prints a field. Every field added after the
 * canonical form was first used must be CANON_UNLESS_DEFAULT: at its default
 * it is left out, so the canonical JSON, spec_hash and spec_config_hash of
 * every spec written before it do not change, and stored experiments still
 * match new submissions (tests/test_spec.c fails for a field that is not). */
typedef enum {
    CANON_ALWAYS,         /* printed with its value */
    CANON_UNLESS_DEFAULT, /* printed when its value is not the default */
} canon_rule;

/* Reads a special field's member it, present in the document, into s. */
typedef int parse_fn(const cJSON *it, spec_t *s, char *err, size_t errlen);
static parse_fn parse_name, parse_tags, parse_seed, parse_parent, parse_dataset, parse_token_budget,
    parse_window_pattern, parse_ve_layers, parse_adam_betas;

typedef struct {
    field_type type;
    const char *path;         /* "model.depth": section, '.', key; the key alone at the root */
    size_t offset;            /* of the value in spec_t; 0 for F_SECTION and F_SPECIAL */
    double def;               /* the default (F_BOOL 0 or 1, F_ENUM the index) */
    double lo, hi;            /* the range (F_INT, F_NUM) */
    num_rule rule;            /* F_NUM */
    canon_rule canon;         /* F_INT, F_NUM, F_BOOL, F_ENUM */
    const char *follows;      /* when absent, take this field's value (same section, same type) */
    const char *const *names; /* F_ENUM */
    size_t n_names;
    parse_fn *parse;    /* F_SPECIAL */
    const char *schema; /* F_SPECIAL: its JSON Schema (spec_json_schema) */
    const char *desc;   /* one line for people and for the JSON Schema */
} spec_field_t;

/* One line of the table per field; the spec_t member names the path. A
 * trailing designated initializer adds .follows or .canon. */
#define AT(member) .path = #member, .offset = offsetof(spec_t, member)
#define INT_FIELD(member, def_, lo_, hi_, ...)                                                     \
    { .type = F_INT, AT(member), .def = (def_), .lo = (lo_), .hi = (hi_), __VA_ARGS__ }
#define NUM_FIELD(member, def_, rule_, lo_, hi_, ...)                                              \
    {                                                                                              \
        .type = F_NUM, AT(member), .def = (def_), .rule = (rule_), .lo = (lo_), .hi = (hi_),       \
        __VA_ARGS__                                                                                \
    }
#define BOOL_FIELD(member, def_, ...)                                                              \
    { .type = F_BOOL, AT(member), .def = (def_), __VA_ARGS__ }
#define ENUM_FIELD(member, def_, names_, ...)                                                      \
    {                                                                                              \
        .type = F_ENUM, AT(member), .def = (def_), .names = (names_), .n_names = N_OF(names_),     \
        __VA_ARGS__                                                                                \
    }
#define SECTION(name, ...)                                                                         \
    { .type = F_SECTION, .path = (name), __VA_ARGS__ }
#define SPECIAL(path_, parse_, schema_, ...)                                                       \
    { .type = F_SPECIAL, .path = (path_), .parse = (parse_), .schema = (schema_), __VA_ARGS__ }

/* Every field of a spec. A section's fields are parsed and range-checked in
 * this order (it decides which error a document with several gets), the
 * sections themselves after the root's other fields; "did you mean" breaks
 * ties by it too. A plain field is one line here and its member in spec.h;
 * add it with .canon = CANON_UNLESS_DEFAULT.
 *
 * Special fields have a parser of their own (.parse); their checks are in
 * spec_validate and their canonical form in spec_canonical_json:
 *   name, tags, dataset  strings (UTF-8, lengths, a plain dataset name);
 *   seed, parent         a uint64 up to 2^53 - 1; an id or null;
 *   token_budget         an int64; exactly one of it, flops_budget (a table
 *                        field) and time_budget_s is nonzero, and either
 *                        given without time_budget_s makes that 0
 *                        (time_budget_s and flops_budget are table fields
 *                        whose ranges validate_budget checks beside that
 *                        rule);
 *   model.window_pattern S/L letters, uppercased; expands to window[];
 *   model.ve_layers      a name or a list of layers; expands to has_ve[], and
 *                        a list that selects what a name does prints as it;
 *   train.adam_betas     two doubles stored as adam_beta1, adam_beta2.
 * Defaults that follow another field (model.n_kv_head, model.max_pos) name it
 * in .follows, their .def being its default; cross-field rules are in
 * validate_model and validate_train. */
static const spec_field_t spec_fields[] = {
    SPECIAL("name", parse_name, "{\"type\":[\"string\",\"null\"],\"maxLength\":200}",
            .desc = "a label for people; not part of the configuration"),
    SPECIAL("tags", parse_tags,
            "{\"type\":\"array\",\"maxItems\":32,\"items\":{\"type\":\"string\","
            "\"maxLength\":64}}",
            .desc = "labels for people; not part of the configuration"),
    SPECIAL("seed", parse_seed,
            "{\"type\":\"integer\",\"minimum\":0,\"maximum\":9007199254740991,"
            "\"default\":42}",
            .desc = "the random seed (init and batches); repeats of a spec differ only in it"),
    INT_FIELD(priority, 0, INT_MIN, INT_MAX,
              .desc = "higher runs first; a person's submissions go before an agent's at equal "
                      "priority"),
    SPECIAL("parent", parse_parent, "{\"type\":[\"integer\",\"null\"],\"minimum\":1}",
            .desc = "the id of the experiment this one varies (must exist), or null"),
    SPECIAL("dataset", parse_dataset,
            "{\"type\":\"string\",\"maxLength\":63,\"default\":\"default\"}",
            .desc = "a prepared dataset's name (the datasets tool lists them)"),
    NUM_FIELD(time_budget_s, 300, NUM_BY_HAND, 0, SPEC_MAX_TIME_BUDGET_S,
              .desc = "training wall-clock seconds; exactly one of it, token_budget and "
                      "flops_budget is nonzero (0 when either of those is given)"),
    SECTION("model", .desc = "the GPT's shape"),
    SECTION("train", .desc = "the optimisation"),
    SECTION("resources", .desc = "what one run may use"),
    SPECIAL("token_budget", parse_token_budget,
            "{\"type\":\"integer\",\"minimum\":0,\"maximum\":1000000000000}",
            .desc = "training tokens instead of seconds: bit-identical for a seed and thread "
                    "count, comparable across machines"),
    NUM_FIELD(flops_budget, 0, NUM_BY_HAND, 0, SPEC_MAX_FLOPS_BUDGET, .canon = CANON_UNLESS_DEFAULT,
              .desc = "model FLOPs instead of seconds (flops_per_token x tokens, as MFU counts "
                      "them): comparable across machines and fair between model sizes"),
    BOOL_FIELD(prune, true, .desc = "may the daemon stop this run early when it lags (--prune)"),
    INT_FIELD(eval_tokens, SPEC_DEFAULT_EVAL_TOKENS, 0, INT_MAX, .canon = CANON_UNLESS_DEFAULT,
              .desc = "validation tokens scored (0 = the whole split); part of the scope"),

    INT_FIELD(model.vocab_size, 0, 0, MAX_VOCAB,
              .desc = "0 = the dataset's; must match it when given"),
    INT_FIELD(model.depth, 4, 1, SPEC_MAX_DEPTH, .desc = "transformer layers"),
    INT_FIELD(model.n_embd, 128, 1, MAX_WIDTH, .desc = "model width; n_head must divide it"),
    INT_FIELD(model.n_head, 2, 1, MAX_WIDTH, .desc = "attention heads"),
    INT_FIELD(model.n_kv_head, 2, 1, MAX_WIDTH, .follows = "model.n_head",
              .desc = "key/value heads (GQA); must divide n_head; default n_head"),
    NUM_FIELD(model.mlp_ratio, 4, NUM_ABOVE, 0, INFINITY, .desc = "MLP hidden width / n_embd"),
    ENUM_FIELD(model.mlp, MLP_RELU2, mlp_names,
               .desc = "MLP activation; the gated ones double the first projection's width"),
    INT_FIELD(model.seq_len, 256, 1, MAX_SEQ, .desc = "context length in tokens"),
    ENUM_FIELD(model.pos, POS_ROPE, pos_names,
               .desc = "positions: rotary, or a learned table (seq_len <= max_pos)"),
    INT_FIELD(model.max_pos, 256, 1, MAX_SEQ, .follows = "model.seq_len",
              .desc = "rows of the learned position table; default seq_len"),
    BOOL_FIELD(model.tie_embeddings, false, .desc = "lm_head shares the token table"),
    NUM_FIELD(model.embed_dropout, 0, NUM_IN_OPEN, 0, 1,
              .desc = "dropout on the embeddings, training only"),
    NUM_FIELD(model.softcap, 15, NUM_AT_LEAST, 0, MAX_SOFTCAP, .desc = "logit soft cap (0 = none)"),
    SPECIAL("model.window_pattern", parse_window_pattern,
            "{\"type\":\"string\",\"pattern\":\"^[SsLl]{1,64}$\",\"default\":\"SSSL\"}",
            .desc = "attention windows per layer, repeated: S = half the context, L = full; the "
                    "last layer is always full"),
    SPECIAL("model.ve_layers", parse_ve_layers,
            "{\"oneOf\":[{\"type\":\"string\",\"enum\":[\"alternate\",\"all\","
            "\"none\",\"first_half\",\"last_half\"]},{\"type\":\"array\",\"items\":"
            "{\"type\":\"integer\",\"minimum\":0}}],\"default\":\"alternate\"}",
            .desc = "layers with value embeddings: a name or a list of layer indices"),
    INT_FIELD(model.ve_gate_channels, 32, 1, MAX_WIDTH,
              .desc = "channels the value-embedding gate reads; at most n_embd"),

    INT_FIELD(train.batch_size, 16, 1, MAX_WIDTH, .desc = "sequences per micro-batch"),
    INT_FIELD(train.total_batch_tokens, 4096, 1, INT_MAX,
              .desc = "tokens per optimizer step: a multiple of batch_size * seq_len "
                      "(gradient accumulation)"),
    NUM_FIELD(train.matrix_lr, 0.04, NUM_AT_LEAST, 0, MAX_LR,
              .desc = "Muon learning rate of the block matrices"),
    NUM_FIELD(train.embedding_lr, 0.6, NUM_AT_LEAST, 0, MAX_LR,
              .desc = "AdamW learning rate of the token table"),
    NUM_FIELD(train.value_embedding_lr, 0.6, NUM_AT_LEAST, 0, MAX_LR,
              .desc = "AdamW learning rate of the value embeddings"),
    NUM_FIELD(train.unembedding_lr, 0.004, NUM_AT_LEAST, 0, MAX_LR,
              .desc = "AdamW learning rate of lm_head"),
    NUM_FIELD(train.scalar_lr, 0.5, NUM_AT_LEAST, 0, MAX_LR,
              .desc = "AdamW learning rate of the per-layer scalars"),
    NUM_FIELD(train.weight_decay, 0.2, NUM_AT_LEAST, 0, MAX_LR,
              .desc = "Muon's cautious weight decay, scaled by 1 - progress"),
    NUM_FIELD(train.x0_beta1, 0.96, NUM_IN_OPEN, 0, 1, .desc = "Adam beta1 of the x0 lambdas"),
    NUM_FIELD(train.warmup_ratio, 0, NUM_IN, 0, 1,
              .desc = "fraction of the budget with a rising learning rate"),
    NUM_FIELD(train.warmdown_ratio, 0.5, NUM_IN, 0, 1,
              .desc = "fraction of the budget at the end with a falling learning rate"),
    NUM_FIELD(train.final_lr_frac, 0, NUM_IN, 0, 1,
              .desc = "the learning rate at the end, as a fraction of the peak"),
    NUM_FIELD(train.muon_momentum_start, 0.85, NUM_IN_OPEN, 0, 1,
              .desc = "Muon momentum at step 0"),
    NUM_FIELD(train.muon_momentum_end, 0.95, NUM_IN_OPEN, 0, 1,
              .desc = "Muon momentum after muon_momentum_steps"),
    NUM_FIELD(train.muon_beta2, 0.95, NUM_IN_OPEN, 0, 1, .desc = "NorMuon's second-moment beta"),
    SPECIAL("train.adam_betas", parse_adam_betas,
            "{\"type\":\"array\",\"minItems\":2,\"maxItems\":2,\"items\":"
            "{\"type\":\"number\",\"minimum\":0,\"exclusiveMaximum\":1},"
            "\"default\":[0.8,0.95]}",
            .desc = "AdamW's (beta1, beta2)"),
    INT_FIELD(train.muon_momentum_steps, 300, 0, INT_MAX,
              .desc = "steps over which Muon's momentum ramps"),
    INT_FIELD(train.ns_steps, 5, 1, 5, .desc = "polar-express orthogonalisation steps"),
    ENUM_FIELD(train.sampler, SAMPLER_RANDOM, sampler_names,
               .desc = "how batches are drawn from the training stream"),
    ENUM_FIELD(train.precision, PRECISION_FP32, precision_names, .canon = CANON_UNLESS_DEFAULT,
               .desc = "the linear layers' products: fp32, bf16 (bf16 operands, fp32 "
                       "accumulation and master weights; needs AVX512_BF16) or auto (bf16 "
                       "where the CPU has it)"),

    INT_FIELD(resources.threads, 0, 0, MAX_THREADS,
              .desc = "threads of the run (0 = the slot's); at most a slot's"),
    INT_FIELD(resources.memory_mb, 0, 0, INT_MAX,
              .desc = "memory limit in MiB (0 = the daemon's); a run that cannot fit is refused "
                      "with does_not_fit"),
    NUM_FIELD(resources.peak_gflops, 0, NUM_AT_LEAST, 0, MAX_PEAK_GFLOPS,
              .desc = "the machine's peak for mfu (0 = calibrated)"),
};

/* F_ENUM values are read and written as int. */
_Static_assert(sizeof(spec_mlp_kind) == sizeof(int) && sizeof(spec_pos_kind) == sizeof(int) &&
                   sizeof(spec_sampler_kind) == sizeof(int),
               "spec enums are int-sized");
_Static_assert(sizeof(spec_precision_kind) == sizeof(int), "spec enums are int-sized");

/* The key of f: its path after the section. */
static const char *field_key(const spec_field_t *f) {
    const char *dot = strchr(f->path, '.');
    return dot ? dot + 1 : f->path;
}

/* Is f a field of section ("" for the root)? */
static bool field_in(const spec_field_t *f, const char *section) {
    size_t n = strlen(section);
    return n ? !strncmp(f->path, section, n) && f->path[n] == '.' : !strchr(f->path, '.');
}

/* Has f a value that the table's generic code handles? */
static bool field_plain(const spec_field_t *f) {
    return f->type == F_INT || f->type == F_NUM || f->type == F_BOOL || f->type == F_ENUM;
}

static const spec_field_t *field_find(const char *path) {
    for (size_t i = 0; i < N_OF(spec_fields); i++)
        if (!strcmp(spec_fields[i].path, path)) return &spec_fields[i];
    return NULL;
}

#define FIELD_PTR(s, f, type) ((type *)((char *)(s) + (f)->offset))

/* f's value in s as a double (every plain value fits one exactly). */
static double field_get(const spec_t *s, const spec_field_t *f) {
    switch (f->type) {
    case F_INT:
    case F_ENUM:
        return *FIELD_PTR(s, f, const int);
    case F_NUM:
        return *FIELD_PTR(s, f, const double);
    default:
        return *FIELD_PTR(s, f, const bool); /* F_BOOL */
    }
}

static void field_set(spec_t *s, const spec_field_t *f, double v) {
    switch (f->type) {
    case F_INT:
    case F_ENUM:
        *FIELD_PTR(s, f, int) = (int)v;
        break;
    case F_NUM:
        *FIELD_PTR(s, f, double) = v;
        break;
    default:
        *FIELD_PTR(s, f, bool) = v != 0; /* F_BOOL */
    }
}

/* Write "path: reason" into err. Always returns -1 so callers can return it. */
static int fail(char *err, size_t errlen, const char *path, const char *fmt, ...) {
    if (!err || !errlen) return -1;
    int n = snprintf(err, errlen, "%s: ", path);
    if (n < 0 || (size_t)n >= errlen) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
    util_utf8_scrub(err); /* the path and values quote the spec as it was sent */
    return -1;
}

const char *spec_mlp_name(spec_mlp_kind k) {
    return (unsigned)k < N_OF(mlp_names) ? mlp_names[k] : "?";
}

const char *spec_pos_name(spec_pos_kind k) {
    return (unsigned)k < N_OF(pos_names) ? pos_names[k] : "?";
}

const char *spec_sampler_name(spec_sampler_kind k) {
    return (unsigned)k < N_OF(sampler_names) ? sampler_names[k] : "?";
}

const char *spec_precision_name(spec_precision_kind k) {
    return (unsigned)k < N_OF(precision_names) ? precision_names[k] : "?";
}

/* Fields of section (NULL: of every section) that follow another one take
 * its value, unless obj (NULL: nothing) gives them one. */
static void apply_follows(const cJSON *obj, const char *section, spec_t *s) {
    for (const spec_field_t *f = spec_fields; f < spec_fields + N_OF(spec_fields); f++) {
        const spec_field_t *from;
        if (f->follows && (!section || field_in(f, section)) &&
            !(obj && cJSON_GetObjectItemCaseSensitive(obj, field_key(f))) &&
            (from = field_find(f->follows)))
            field_set(s, f, field_get(s, from));
    }
}

void spec_defaults(spec_t *s) {
    memset(s, 0, sizeof *s);
    for (size_t i = 0; i < N_OF(spec_fields); i++)
        if (field_plain(&spec_fields[i])) field_set(s, &spec_fields[i], spec_fields[i].def);
    s->seed = 42;
    strcpy(s->dataset, "default");
    spec_model_t *m = &s->model;
    strcpy(m->window_pattern, "SSSL");
    strcpy(m->ve_layers, "alternate");
    s->train.adam_beta1 = 0.8;
    s->train.adam_beta2 = 0.95;
    apply_follows(NULL, NULL, s);
    m->head_dim = m->n_embd / m->n_head;
    m->mlp_hidden = (int)(m->mlp_ratio * m->n_embd);
}

void spec_free(spec_t *s) {
    if (!s) return;
    free(s->name);
    s->name = NULL;
    for (int i = 0; i < s->n_tags && i < SPEC_MAX_TAGS; i++) {
        free(s->tags[i]);
        s->tags[i] = NULL;
    }
    s->n_tags = 0;
}

int spec_copy(spec_t *dst, const spec_t *src) {
    *dst = *src;
    dst->name = NULL;
    dst->n_tags = 0;
    for (int i = 0; i < SPEC_MAX_TAGS; i++) dst->tags[i] = NULL;
    if (src->name && !(dst->name = strdup(src->name))) goto fail;
    for (int i = 0; i < src->n_tags && i < SPEC_MAX_TAGS; i++) {
        if (!(dst->tags[i] = strdup(src->tags[i]))) goto fail;
        dst->n_tags = i + 1;
    }
    return 0;
fail:
    spec_free(dst);
    return -1;
}

/* ---------------------------------------------------------------- UTF-8 -- */

/* Code points in a NUL-terminated string, or -1 if it is not valid UTF-8
 * (overlong forms, surrogates and values above U+10FFFF are invalid). */
static long utf8_length(const char *str) {
    const unsigned char *p = (const unsigned char *)str;
    long n = 0;
    while (*p) {
        unsigned c = *p, need, cp;
        if (c < 0x80) {
            p++;
            n++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            need = 1, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF)
            need = 2, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4)
            need = 3, cp = c & 0x07;
        else
            return -1;
        p++;
        for (unsigned i = 0; i < need; i++, p++) {
            if ((*p & 0xC0) != 0x80) return -1;
            cp = (cp << 6) | (*p & 0x3F);
        }
        if ((need == 2 && cp < 0x800) || (need == 3 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return -1;
        n++;
    }
    return n;
}

/* -------------------------------------------------------------- parsing -- */

/* Edit distance between a and b (insertions, deletions, substitutions),
 * capped: anything above 3 is 4. For "did you mean". */
static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 40 || lb > 40) return 4;
    int d[41][41];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            d[i][j] = best;
        }
    return d[la][lb] > 3 ? 4 : d[la][lb];
}

/* The field of section ("" for the root) named key, or NULL. */
static const spec_field_t *field_named(const char *section, const char *key) {
    for (const spec_field_t *f = spec_fields; f < spec_fields + N_OF(spec_fields); f++)
        if (field_in(f, section) && !strcmp(field_key(f), key)) return f;
    return NULL;
}

/* Append "path: unknown field", with the closest known name when it is close
 * enough to be a typo, to err (after "; " when err holds one already). */
static void add_unknown(const char *section, const char *key, char *err, size_t errlen) {
    char prefix[32];
    const char *best = NULL;
    int best_d = 4;
    snprintf(prefix, sizeof prefix, "%s%s", section, *section ? "." : "");
    for (const spec_field_t *f = spec_fields; f < spec_fields + N_OF(spec_fields); f++) {
        if (!field_in(f, section)) continue;
        int d = edit_distance(key, field_key(f));
        if (d < best_d) best = field_key(f), best_d = d;
    }
    size_t n = strlen(err);
    if (n + 1 >= errlen) return;
    if (best && best_d <= (strlen(best) > 4 ? 2 : 1))
        snprintf(err + n, errlen - n, "%s%s%s: unknown field (did you mean %s%s?)", n ? "; " : "",
                 prefix, key, prefix, best);
    else
        snprintf(err + n, errlen - n, "%s%s%s: unknown field", n ? "; " : "", prefix, key);
    util_utf8_scrub(err); /* the key quotes the spec as it was sent */
}

/* Every unknown key of obj, a field of section, and of the sections under
 * the root, all in one message: -1 with err when there is any. */
static int check_unknown(const cJSON *obj, const char *section, char *err, size_t errlen) {
    char none[1] = "";
    if (!err || !errlen) err = none, errlen = 1;
    if (!*section) err[0] = '\0';
    for (const cJSON *it = obj->child; it; it = it->next) {
        const char *key = it->string ? it->string : "";
        const spec_field_t *f = field_named(section, key);
        if (!f)
            add_unknown(section, key, err, errlen);
        else if (!*section && f->type == F_SECTION && cJSON_IsObject(it))
            check_unknown(it, f->path, err, errlen);
    }
    return *section || !err[0] ? 0 : -1;
}

/* Every key of obj must be a field of section ("" for the root), at most once. */
static int check_keys(const cJSON *obj, const char *section, char *err, size_t errlen) {
    char path[320], prefix[32];
    snprintf(prefix, sizeof prefix, "%s%s", section, *section ? "." : "");
    for (const cJSON *it = obj->child; it; it = it->next) {
        const char *key = it->string ? it->string : "";
        snprintf(path, sizeof path, "%s%s", prefix, key);
        if (!field_named(section, key)) {
            if (err && errlen) err[0] = '\0';
            add_unknown(section, key, err, errlen);
            return -1;
        }
        for (const cJSON *later = it->next; later; later = later->next)
            if (later->string && !strcmp(later->string, key))
                return fail(err, errlen, path, "duplicate field");
    }
    return 0;
}

/* A JSON number that is a whole value in [lo, hi]. The range here is only
 * what the C type holds; spec_validate checks the meaningful range. */
static int get_integer(const cJSON *it, const char *path, double lo, double hi, double *out,
                       char *err, size_t errlen) {
    if (!cJSON_IsNumber(it)) return fail(err, errlen, path, "expected an integer");
    double d = it->valuedouble;
    if (!isfinite(d) || d != floor(d)) return fail(err, errlen, path, "expected an integer");
    if (d < lo || d > hi) return fail(err, errlen, path, "%.17g is out of range", d);
    *out = d;
    return 0;
}

static int get_int(const cJSON *it, const char *path, int *out, char *err, size_t errlen) {
    double d = 0;
    if (get_integer(it, path, INT_MIN, INT_MAX, &d, err, errlen)) return -1;
    *out = (int)d;
    return 0;
}

static int get_number(const cJSON *it, const char *path, double *out, char *err, size_t errlen) {
    if (!cJSON_IsNumber(it)) return fail(err, errlen, path, "expected a number");
    if (!isfinite(it->valuedouble)) return fail(err, errlen, path, "number out of range");
    *out = it->valuedouble == 0 ? 0.0 : it->valuedouble; /* no -0 */
    return 0;
}

static int get_bool(const cJSON *it, const char *path, bool *out, char *err, size_t errlen) {
    if (!cJSON_IsBool(it)) return fail(err, errlen, path, "expected a boolean");
    *out = cJSON_IsTrue(it);
    return 0;
}

static int get_string(const cJSON *it, const char *path, const char **out, char *err,
                      size_t errlen) {
    if (!cJSON_IsString(it) || !it->valuestring)
        return fail(err, errlen, path, "expected a string");
    *out = it->valuestring;
    return 0;
}

/* A string that must be one of names[]; *out is its index. */
static int get_enum(const cJSON *it, const char *path, const char *const *names, size_t n,
                    const char *expected, int *out, char *err, size_t errlen) {
    const char *str = NULL;
    if (get_string(it, path, &str, err, errlen)) return -1;
    for (size_t k = 0; k < n; k++) {
        if (!strcmp(str, names[k])) {
            *out = (int)k;
            return 0;
        }
    }
    return fail(err, errlen, path, "unknown value \"%.64s\" (expected %s)", str, expected);
}

#define FIELD(obj, key) cJSON_GetObjectItemCaseSensitive(obj, key)

/* "a, b or c" from names[] into buf. */
static void names_list(const char *const *names, size_t n, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < n && used < len; k++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s",
                                 k == 0       ? ""
                                 : k + 1 == n ? " or "
                                              : ", ",
                                 names[k]);
}

/* Read the fields of section that obj has into s, in table order (which
 * decides the error of a document with several), sections aside. */
static int parse_fields(const cJSON *obj, const char *section, spec_t *s, char *err,
                        size_t errlen) {
    for (const spec_field_t *f = spec_fields; f < spec_fields + N_OF(spec_fields); f++) {
        const cJSON *it;
        if (!field_in(f, section) || f->type == F_SECTION || !(it = FIELD(obj, field_key(f))))
            continue;
        int rc = 0, k = 0;
        char expected[128];
        switch (f->type) {
        case F_SPECIAL:
            rc = f->parse(it, s, err, errlen);
            break;
        case F_INT:
            rc = get_int(it, f->path, FIELD_PTR(s, f, int), err, errlen);
            break;
        case F_NUM:
            rc = get_number(it, f->path, FIELD_PTR(s, f, double), err, errlen);
            break;
        case F_BOOL:
            rc = get_bool(it, f->path, FIELD_PTR(s, f, bool), err, errlen);
            break;
        default: /* F_ENUM */
            names_list(f->names, f->n_names, expected, sizeof expected);
            rc = get_enum(it, f->path, f->names, f->n_names, expected, &k, err, errlen);
            if (rc == 0) field_set(s, f, k);
        }
        if (rc) return -1;
    }
    return 0;
}

/* A section's object: its keys, then its plain fields. */
static int parse_section(const cJSON *obj, const char *section, spec_t *s, char *err,
                         size_t errlen) {
    if (!cJSON_IsObject(obj)) return fail(err, errlen, section, "expected an object");
    if (check_keys(obj, section, err, errlen) || parse_fields(obj, section, s, err, errlen))
        return -1;
    apply_follows(obj, section, s);
    return 0;
}

static int parse_ve_list(const cJSON *arr, spec_model_t *m, char *err, size_t errlen) {
    char path[64];
    int n = cJSON_GetArraySize(arr);
    if (n > SPEC_MAX_DEPTH)
        return fail(err, errlen, "model.ve_layers", "more than %d layers listed", SPEC_MAX_DEPTH);
    size_t len = 0;
    m->ve_layers[len++] = '[';
    int i = 0;
    for (const cJSON *it = arr->child; it; it = it->next, i++) {
        snprintf(path, sizeof path, "model.ve_layers[%d]", i);
        double d = 0;
        if (get_integer(it, path, -JSON_MAX_SAFE_INT, JSON_MAX_SAFE_INT, &d, err, errlen))
            return -1;
        /* Indices that cannot be a layer of any model are refused here, so the
         * list always fits its buffer; the rest is checked against depth in
         * spec_validate, with the same message. */
        if (d < 0 || d >= SPEC_MAX_DEPTH)
            return fail(err, errlen, path, "layer %.17g out of range for depth %d", d, m->depth);
        len += (size_t)snprintf(m->ve_layers + len, sizeof m->ve_layers - len, "%s%d", i ? "," : "",
                                (int)d);
    }
    snprintf(m->ve_layers + len, sizeof m->ve_layers - len, "]");
    return 0;
}

/* The special fields' parsers (spec_fields lists them): each reads the
 * member it is given, present in the document, into s. */

static int parse_name(const cJSON *it, spec_t *s, char *err, size_t errlen) {
    const char *name = NULL;
    if (cJSON_IsNull(it)) return 0;
    if (get_string(it, "name", &name, err, errlen)) return -1;
    if (strlen(name) > 4 * SPEC_MAX_NAME)
        return fail(err, errlen, "name", "longer than %d characters", SPEC_MAX_NAME);
    if (!(s->name = strdup(name))) return fail(err, errlen, "spec", "out of memory");
    return 0;
}

static int parse_tags(const cJSON *it, spec_t *s, char *err, size_t errlen) {
    char path[32];
    if (!cJSON_IsArray(it)) return fail(err, errlen, "tags", "expected an array of strings");
    if (cJSON_GetArraySize(it) > SPEC_MAX_TAGS)
        return fail(err, errlen, "tags", "more than %d tags", SPEC_MAX_TAGS);
    int i = 0;
    for (const cJSON *tag = it->child; tag; tag = tag->next, i++) {
        const char *str = NULL;
        snprintf(path, sizeof path, "tags[%d]", i);
        if (get_string(tag, path, &str, err, errlen)) return -1;
        if (strlen(str) > 4 * SPEC_MAX_TAG_LEN)
            return fail(err, errlen, path, "longer than %d characters", SPEC_MAX_TAG_LEN);
        if (!(s->tags[i] = strdup(str))) return fail(err, errlen, "spec", "out of memory");
        s->n_tags = i + 1;
    }
    return 0;
}

static int parse_seed(const cJSON *it, spec_t *s, char *err, size_t errlen) {
    double d = 0;
    if (get_integer(it, "seed", -HUGE_VAL, HUGE_VAL, &d, err, errlen)) return -1;
    if (d > JSON_MAX_SAFE_INT) /* read as the nearest double: its digits are not the input's */
        return fail(err, errlen, "seed", "must be in [0, %.17g], got a larger number",
                    JSON_MAX_SAFE_INT);
    if (d < 0)
        return fail(err, errlen, "seed", "must be in [0, %.17g], got %.17g", JSON_MAX_SAFE_INT, d);
    s->seed = (uint64_t)d;
    return 0;
}

static int parse_parent(const cJSON *it, spec_t *s, char *err, size_t errlen) {
    double d = 0;
    if (cJSON_IsNull(it)) return 0;
    if (!cJSON_IsNumber(it)) return fail(err, errlen, "parent", "expected an integer id or null");
    if (get_integer(it, "parent", -HUGE_VAL, HUGE_VAL, &d, err, errlen)) return -1;
    if (d < 1 || d > JSON_MAX_SAFE_INT)
        return fail(err, errlen, "parent", "must be a positive id or null, got %.17g", d);
    s->parent = (int64_t)d;
    return 0;
}

static int parse_dataset(const cJSON *it, spec_t *s, char *err, size_t errlen) {
    const char *str = NULL;
    if (get_string(it, "dataset", &str, err, errlen)) return -1;
    if (strlen(str) >= sizeof s->dataset)
        return fail(err, errlen, "dataset", "longer than %zu characters", sizeof s->dataset - 1);
    strcpy(s->dataset, str);
    return 0;
}

static int parse_token_budget(const cJSON *it, spec_t *s, char *err, size_t errlen) {
    double d = 0;
    if (get_integer(it, "token_budget", -HUGE_VAL, HUGE_VAL, &d, err, errlen)) return -1;
    if (d < 0 || d > SPEC_MAX_TOKEN_BUDGET)
        return fail(err, errlen, "token_budget", "must be in [0, %.0f], got %.15g",
                    SPEC_MAX_TOKEN_BUDGET, d);
    s->token_budget = (int64_t)d;
    return 0;
}

static int parse_window_pattern(const cJSON *it, spec_t *s, char *err, size_t errlen) {
    const char *p = NULL;
    if (get_string(it, "model.window_pattern", &p, err, errlen)) return -1;
    size_t n = strlen(p);
    if (n == 0) return fail(err, errlen, "model.window_pattern", "must not be empty");
    if (n > SPEC_MAX_DEPTH)
        return fail(err, errlen, "model.window_pattern", "longer than %d characters",
                    SPEC_MAX_DEPTH);
    for (size_t i = 0; i <= n; i++)
        s->model.window_pattern[i] = (p[i] >= 'a' && p[i] <= 'z') ? (char)(p[i] - 32) : p[i];
    return 0;
}

static int parse_ve_layers(const cJSON *it, spec_t *s, char *err, size_t errlen) {
    int k = 0;
    if (cJSON_IsArray(it)) return parse_ve_list(it, &s->model, err, errlen);
    if (!cJSON_IsString(it))
        return fail(err, errlen, "model.ve_layers",
                    "expected a string or an array of layer indices");
    if (get_enum(it, "model.ve_layers", ve_names, N_OF(ve_names),
                 "alternate, all, none, first_half, last_half or a list of layers", &k, err,
                 errlen))
        return -1;
    strcpy(s->model.ve_layers, ve_names[k]);
    return 0;
}

static int parse_adam_betas(const cJSON *it, spec_t *s, char *err, size_t errlen) {
    if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2)
        return fail(err, errlen, "train.adam_betas", "expected an array of two numbers");
    if (get_number(it->child, "train.adam_betas[0]", &s->train.adam_beta1, err, errlen) ||
        get_number(it->child->next, "train.adam_betas[1]", &s->train.adam_beta2, err, errlen))
        return -1;
    return 0;
}

/* Fill s (already defaulted) from the root object. Strings s takes are owned
 * by s even on failure; the caller frees them. */
static int parse_root(const cJSON *root, spec_t *s, char *err, size_t errlen) {
    if (!cJSON_IsObject(root)) return fail(err, errlen, "spec", "expected a JSON object");
    if (check_unknown(root, "", err, errlen) || check_keys(root, "", err, errlen) ||
        parse_fields(root, "", s, err, errlen))
        return -1;
    /* A token or FLOPs budget replaces the default time budget; one given explicitly
     * as well is left for spec_validate to refuse. */
    if ((s->token_budget > 0 || s->flops_budget > 0) && !FIELD(root, "time_budget_s"))
        s->time_budget_s = 0;
    for (const spec_field_t *f = spec_fields; f < spec_fields + N_OF(spec_fields); f++) {
        const cJSON *it;
        if (f->type == F_SECTION && (it = FIELD(root, f->path)) &&
            parse_section(it, f->path, s, err, errlen))
            return -1;
    }
    return 0;
}

/* Deepest {} / [] nesting outside strings, so a hostile document is refused
 * before cJSON recurses into it. */
static int nesting_depth(const char *json, size_t len) {
    int depth = 0, max = 0;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char c = json[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            if (++depth > max) max = depth;
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return max;
}

/* "line L, column C" (1-based) of position pos in json. */
static void describe_position(const char *json, size_t pos, char *buf, size_t n) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos; i++) {
        if (json[i] == '\n')
            line++, col = 1;
        else
            col++;
    }
    snprintf(buf, n, "line %zu, column %zu", line, col);
}

int spec_parse(const char *json, size_t len, spec_t *s, char *err, size_t errlen) {
    cJSON *root = NULL;
    spec_t tmp;
    char where[64];
    spec_defaults(&tmp);
    spec_defaults(s);

    if (!json) {
        fail(err, errlen, "spec", "no input");
        goto fail;
    }
    if (len > SPEC_MAX_TEXT) {
        fail(err, errlen, "spec", "larger than %d bytes", SPEC_MAX_TEXT);
        goto fail;
    }
    if (nesting_depth(json, len) > SPEC_MAX_NESTING) {
        fail(err, errlen, "spec", "nested deeper than %d levels", SPEC_MAX_NESTING);
        goto fail;
    }
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(json, len, &end, false);
    if (!root) {
        size_t pos = end && end >= json && end <= json + len ? (size_t)(end - json) : 0;
        describe_position(json, pos, where, sizeof where);
        fail(err, errlen, "spec", "invalid JSON at %s", where);
        goto fail;
    }
    while (end < json + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
    if (end != json + len) {
        describe_position(json, (size_t)(end - json), where, sizeof where);
        fail(err, errlen, "spec", "unexpected text after the JSON value at %s", where);
        goto fail;
    }
    if (parse_root(root, &tmp, err, errlen)) goto fail;
    if (spec_validate(&tmp, err, errlen)) goto fail;
    cJSON_Delete(root);
    *s = tmp;
    return 0;
fail:
    cJSON_Delete(root);
    spec_free(&tmp);
    return -1;
}

int spec_load(const char *path, spec_t *s, char *err, size_t errlen) {
    char *buf = NULL;
    FILE *f = NULL;
    int code = NS_ERR_IO;
    spec_defaults(s);
    if (!(f = fopen(path, "rb"))) {
        fail(err, errlen, path, "%s", strerror(errno));
        goto fail;
    }
    /* One byte more than the limit tells "too large" from "exactly at it". */
    if (!(buf = malloc(SPEC_MAX_TEXT + 1))) {
        fail(err, errlen, path, "out of memory");
        code = NS_ERR_NOMEM;
        goto fail;
    }
    size_t n = fread(buf, 1, SPEC_MAX_TEXT + 1, f);
    if (ferror(f)) {
        fail(err, errlen, path, "read error");
        goto fail;
    }
    if (n > SPEC_MAX_TEXT) {
        fail(err, errlen, path, "larger than %d bytes", SPEC_MAX_TEXT);
        goto fail;
    }
    fclose(f);
    f = NULL;
    int rc = spec_parse(buf, n, s, err, errlen);
    free(buf);
    return rc;
fail:
    if (f) fclose(f);
    free(buf);
    return code;
}

/* ----------------------------------------------------------- validation -- */

/* v under rule with bounds lo, hi (num_rule says which message). */
static int check_number(num_rule rule, double lo, double hi, double v, const char *path, char *err,
                        size_t errlen) {
    switch (rule) {
    case NUM_IN:
        if (!(v >= lo && v <= hi))
            return fail(err, errlen, path, "must be in [%g, %g], got %g", lo, hi, v);
        return 0;
    case NUM_IN_OPEN:
        if (!(v >= lo && v < hi))
            return fail(err, errlen, path, "must be in [%g, %g), got %g", lo, hi, v);
        return 0;
    case NUM_ABOVE:
        if (!(v > lo) || !isfinite(v))
            return fail(err, errlen, path, "must be > %g, got %g", lo, v);
        break;
    case NUM_AT_LEAST:
        if (!(v >= lo) || !isfinite(v))
            return fail(err, errlen, path, "must be >= %g, got %g", lo, v);
        break;
    case NUM_BY_HAND:
        return 0;
    }
    if (v > hi) return fail(err, errlen, path, "must be at most %g, got %g", hi, v);
    return 0;
}

/* The range of every plain field of section, in table order. */
static int check_fields(const spec_t *s, const char *section, char *err, size_t errlen) {
    for (const spec_field_t *f = spec_fields; f < spec_fields + N_OF(spec_fields); f++) {
        if (!field_in(f, section) || !field_plain(f)) continue;
        double v = field_get(s, f);
        if (f->type == F_INT && (v < f->lo || v > f->hi))
            return fail(err, errlen, f->path, "must be in [%d, %d], got %d", (int)f->lo, (int)f->hi,
                        (int)v);
        if (f->type == F_NUM && check_number(f->rule, f->lo, f->hi, v, f->path, err, errlen))
            return -1;
        if (f->type == F_ENUM && (v < 0 || v >= (double)f->n_names))
            return fail(err, errlen, f->path, "unknown kind %d", (int)v);
    }
    return 0;
}

/* Does layer i of L carry a value embedding under the named pattern kind? */
static bool ve_named_has(int kind, int i, int L) {
    switch (kind) {
    case VE_ALTERNATE:
        return i % 2 == (L - 1) % 2;
    case VE_ALL:
        return true;
    case VE_NONE:
        return false;
    case VE_FIRST_HALF:
        return i < L / 2;
    default:
        return i >= L / 2; /* VE_LAST_HALF */
    }
}

/* Expand m->ve_layers into has_ve[0..depth). */
static int derive_ve(spec_model_t *m, char *err, size_t errlen) {
    const char *v = m->ve_layers;
    int kind = VE_LIST, L = m->depth;
    char path[64];
    for (int k = 0; k < (int)N_OF(ve_names); k++)
        if (!strcmp(v, ve_names[k])) kind = k;
    memset(m->has_ve, 0, sizeof m->has_ve);
    if (kind != VE_LIST) {
        for (int i = 0; i < L; i++) m->has_ve[i] = ve_named_has(kind, i, L);
        return 0;
    }
    /* "[a,b,...]" as spec_parse writes it. */
    if (v[0] != '[') goto bad;
    const char *p = v + 1;
    if (*p == ']') {
        if (p[1]) goto bad;
        return 0;
    }
    for (int i = 0;; i++) {
        char *endp;
        errno = 0;
        long layer = strtol(p, &endp, 10);
        if (endp == p || errno) goto bad;
        snprintf(path, sizeof path, "model.ve_layers[%d]", i);
        if (layer < 0 || layer >= L)
            return fail(err, errlen, path, "layer %ld out of range for depth %d", layer, L);
        if (m->has_ve[layer]) return fail(err, errlen, path, "layer %ld listed twice", layer);
        m->has_ve[layer] = true;
        p = endp;
        if (*p == ',') {
            p++;
            continue;
        }
        if (p[0] == ']' && p[1] == '\0') return 0;
        goto bad;
    }
bad:
    memset(m->has_ve, 0, sizeof m->has_ve);
    return fail(err, errlen, "model.ve_layers",
                "\"%.64s\" is not alternate, all, none, first_half, last_half or a list", v);
}

/* Fill window[0..depth) from the pattern: S = seq_len/2, L = seq_len, and the
 * last layer always sees the full context. */
static void derive_windows(spec_model_t *m) {
    size_t n = strlen(m->window_pattern);
    memset(m->window, 0, sizeof m->window);
    for (int i = 0; i < m->depth; i++)
        m->window[i] = m->window_pattern[i % n] == 'S' ? m->seq_len / 2 : m->seq_len;
    m->window[m->depth - 1] = m->seq_len;
}

static int validate_model(spec_t *s, char *err, size_t errlen) {
    spec_model_t *m = &s->model;
    if (check_fields(s, "model", err, errlen)) return -1;

    size_t n = strnlen(m->window_pattern, sizeof m->window_pattern);
    if (n == 0) return fail(err, errlen, "model.window_pattern", "must not be empty");
    if (n > SPEC_MAX_DEPTH)
        return fail(err, errlen, "model.window_pattern", "longer than %d characters",
                    SPEC_MAX_DEPTH);
    for (size_t i = 0; i < n; i++) {
        char c = m->window_pattern[i];
        if (c == 's' || c == 'l') m->window_pattern[i] = c = (char)(c - 32);
        if (c != 'S' && c != 'L')
            return fail(err, errlen, "model.window_pattern",
                        "\"%.64s\" has a character other than S or L", m->window_pattern);
    }

    /* Cross-field rules. */
    if (m->n_embd % m->n_head)
        return fail(err, errlen, "model.n_head", "%d does not divide n_embd %d", m->n_head,
                    m->n_embd);
    if (m->n_head % m->n_kv_head)
        return fail(err, errlen, "model.n_kv_head", "%d does not divide n_head %d", m->n_kv_head,
                    m->n_head);
    m->head_dim = m->n_embd / m->n_head;
    if (m->pos == POS_ROPE && m->head_dim % 2)
        return fail(err, errlen, "model.head_dim", "RoPE needs an even head_dim, got %d",
                    m->head_dim);

    /* The hidden width must come out whole; a relative slack of 1e-9 lets a
     * ratio like 2.6666666666666665 with n_embd 384 count as 1024. */
    double hidden = m->mlp_ratio * m->n_embd, whole = nearbyint(hidden);
    if (whole < 1)
        return fail(err, errlen, "model.mlp_ratio", "%g * n_embd %d = %g is below 1", m->mlp_ratio,
                    m->n_embd, hidden);
    if (fabs(hidden - whole) > 1e-9 * whole)
        return fail(err, errlen, "model.mlp_ratio", "%g * n_embd %d = %.10g is not a whole number",
                    m->mlp_ratio, m->n_embd, hidden);
    if (whole > MAX_HIDDEN)
        return fail(err, errlen, "model.mlp_ratio", "hidden width %.17g exceeds %d", whole,
                    MAX_HIDDEN);
    m->mlp_hidden = (int)whole;

    if (m->ve_gate_channels > m->n_embd)
        return fail(err, errlen, "model.ve_gate_channels", "%d exceeds n_embd %d",
                    m->ve_gate_channels, m->n_embd);
    if (m->pos == POS_LEARNED && m->seq_len > m->max_pos)
        return fail(err, errlen, "model.seq_len", "%d exceeds max_pos %d", m->seq_len, m->max_pos);
    if (strnlen(m->ve_layers, sizeof m->ve_layers) == sizeof m->ve_layers)
        return fail(err, errlen, "model.ve_layers", "not terminated");
    if (derive_ve(m, err, errlen)) return -1;
    derive_windows(m);
    return 0;
}

static int validate_train(const spec_t *s, char *err, size_t errlen) {
    const spec_train_t *t = &s->train;
    if (check_fields(s, "train", err, errlen) ||
        check_number(NUM_IN_OPEN, 0, 1, t->adam_beta1, "train.adam_betas[0]", err, errlen) ||
        check_number(NUM_IN_OPEN, 0, 1, t->adam_beta2, "train.adam_betas[1]", err, errlen))
        return -1;
    long long row = (long long)t->batch_size * s->model.seq_len;
    if (t->total_batch_tokens % row)
        return fail(err, errlen, "train.total_batch_tokens",
                    "%d is not a multiple of batch_size*seq_len %lld", t->total_batch_tokens, row);
    if (t->warmup_ratio + t->warmdown_ratio > 1)
        return fail(err, errlen, "train.warmdown_ratio",
                    "warmup_ratio + warmdown_ratio = %g exceeds 1",
                    t->warmup_ratio + t->warmdown_ratio);
    return 0;
}

/* Letters, digits, '_', '.', '-'; not starting with '.' (data_name_ok agrees). */
static int check_dataset(const char *d, char *err, size_t errlen) {
    size_t n = strnlen(d, 64);
    if (n == 0) return fail(err, errlen, "dataset", "must not be empty");
    if (n >= 64) return fail(err, errlen, "dataset", "longer than 63 characters");
    for (size_t i = 0; i < n; i++) {
        char c = d[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-';
        if (!ok)
            return fail(err, errlen, "dataset",
                        "\"%.63s\" is not a plain name (letters, digits, _ . - only)", d);
    }
    /* Names starting with '.' are prep's temporary directories. */
    if (d[0] == '.') return fail(err, errlen, "dataset", "\"%s\" must not start with '.'", d);
    return 0;
}

/* Exactly one of time_budget_s, token_budget and flops_budget is nonzero. */
static int validate_budget(const spec_t *s, char *err, size_t errlen) {
    if (!(s->flops_budget >= 0 && s->flops_budget <= SPEC_MAX_FLOPS_BUDGET))
        return fail(err, errlen, "flops_budget", "must be in [0, %g], got %g",
                    SPEC_MAX_FLOPS_BUDGET, s->flops_budget);
    if (s->flops_budget > 0 && (s->time_budget_s > 0 || s->token_budget > 0))
        return fail(err, errlen, "flops_budget",
                    "%g and %s are both set; a run has one budget (leave the other out or set "
                    "it to 0)",
                    s->flops_budget, s->token_budget > 0 ? "token_budget" : "time_budget_s");
    if (!(s->time_budget_s >= 0 && s->time_budget_s <= SPEC_MAX_TIME_BUDGET_S))
        return fail(err, errlen, "time_budget_s", "must be in [0, %.0f] (a week), got %g",
                    SPEC_MAX_TIME_BUDGET_S, s->time_budget_s);
    if (s->token_budget < 0 || (double)s->token_budget > SPEC_MAX_TOKEN_BUDGET)
        return fail(err, errlen, "token_budget", "must be in [0, %.0f], got %lld",
                    SPEC_MAX_TOKEN_BUDGET, (long long)s->token_budget);
    if (s->time_budget_s > 0 && s->token_budget > 0)
        return fail(err, errlen, "time_budget_s",
                    "%g and token_budget %lld are both set; a run has one budget "
                    "(leave time_budget_s out or set it to 0)",
                    s->time_budget_s, (long long)s->token_budget);
    if (s->time_budget_s == 0 && s->token_budget == 0 && s->flops_budget == 0)
        return fail(err, errlen, "time_budget_s",
                    "0, token_budget 0 and flops_budget 0: one of them must be > 0");
    return 0;
}

int spec_validate(spec_t *s, char *err, size_t errlen) {
    char path[32];
    if (s->name) {
        long n = utf8_length(s->name);
        if (n < 0) return fail(err, errlen, "name", "not valid UTF-8");
        if (n > SPEC_MAX_NAME)
            return fail(err, errlen, "name", "longer than %d characters", SPEC_MAX_NAME);
    }
    if (s->n_tags < 0 || s->n_tags > SPEC_MAX_TAGS)
        return fail(err, errlen, "tags", "more than %d tags", SPEC_MAX_TAGS);
    for (int i = 0; i < s->n_tags; i++) {
        snprintf(path, sizeof path, "tags[%d]", i);
        if (!s->tags[i]) return fail(err, errlen, path, "expected a string");
        long n = utf8_length(s->tags[i]);
        if (n < 0) return fail(err, errlen, path, "not valid UTF-8");
        if (n == 0) return fail(err, errlen, path, "must not be empty");
        if (n > SPEC_MAX_TAG_LEN)
            return fail(err, errlen, path, "longer than %d characters", SPEC_MAX_TAG_LEN);
    }
    if ((double)s->seed > JSON_MAX_SAFE_INT)
        return fail(err, errlen, "seed", "must be in [0, %.17g], got %llu", JSON_MAX_SAFE_INT,
                    (unsigned long long)s->seed);
    if (s->parent < 0 || (double)s->parent > JSON_MAX_SAFE_INT)
        return fail(err, errlen, "parent", "must be a positive id or null, got %lld",
                    (long long)s->parent);
    if (check_dataset(s->dataset, err, errlen) || check_fields(s, "", err, errlen) ||
        validate_budget(s, err, errlen) || validate_model(s, err, errlen) ||
        validate_train(s, err, errlen) || check_fields(s, "resources", err, errlen))
        return -1;
    return 0;
}

/* ------------------------------------------------------------ canonical -- */

/* The shortest of %.15g..%.17g that reads back as exactly v: one string per
 * value, whatever the spelling in the input. */
static void format_double(double v, char *buf, size_t n) {
    if (v == 0) v = 0; /* -0 prints as 0 */
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    for (char *p = buf; *p; p++)
        if (*p == ',') *p = '.'; /* a locale's decimal comma is not JSON */
}

static bool add_double(cJSON *obj, const char *key, double v) {
    char buf[40];
    format_double(v, buf, sizeof buf);
    return cJSON_AddRawToObject(obj, key, buf) != NULL;
}

static bool add_int(cJSON *obj, const char *key, long long v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    return cJSON_AddRawToObject(obj, key, buf) != NULL;
}

static int compare_keys(const void *a, const void *b) {
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    return strcmp(x->string, y->string);
}

/* Sort the members of every object under node by key (byte order). Returns
 * false on allocation failure, leaving node intact but possibly unsorted. */
static bool sort_keys(cJSON *node) {
    for (cJSON *c = node->child; c; c = c->next)
        if (!sort_keys(c)) return false;
    if (!cJSON_IsObject(node)) return true;
    int n = cJSON_GetArraySize(node);
    if (n < 2) return true;
    cJSON **items = malloc((size_t)n * sizeof *items);
    if (!items) return false;
    int i = 0;
    while (node->child) items[i++] = cJSON_DetachItemViaPointer(node, node->child);
    qsort(items, (size_t)n, sizeof *items, compare_keys);
    for (i = 0; i < n; i++) cJSON_AddItemToArray(node, items[i]);
    free(items);
    return true;
}

/* ve_layers as JSON: the name, or the list as sorted integers. A list that
 * selects the same layers as a name is printed as that name ([] as "none",
 * [1,3] at depth 4 as "alternate"), so equal models have equal canonical
 * specs (and the daemon's dedup sees them as one). */
static cJSON *ve_layers_json(const spec_model_t *m) {
    const char *v = m->ve_layers;
    if (v[0] != '[') return cJSON_CreateString(v);
    for (int k = 0; k < VE_LIST; k++) {
        bool same = true;
        for (int i = 0; i < m->depth && same; i++)
            same = ve_named_has(k, i, m->depth) == m->has_ve[i];
        if (same) return cJSON_CreateString(ve_names[k]);
    }
    bool seen[SPEC_MAX_DEPTH] = {false};
    const char *p = v + 1;
    while (*p && *p != ']') {
        char *endp;
        long layer = strtol(p, &endp, 10);
        if (endp == p) break;
        if (layer >= 0 && layer < SPEC_MAX_DEPTH) seen[layer] = true;
        p = *endp == ',' ? endp + 1 : endp;
    }
    cJSON *arr = cJSON_CreateArray();
    if (!arr) return NULL;
    for (int i = 0; i < SPEC_MAX_DEPTH; i++) {
        if (!seen[i]) continue;
        char buf[16];
        snprintf(buf, sizeof buf, "%d", i);
        cJSON *num = cJSON_CreateRaw(buf);
        if (!num || !cJSON_AddItemToArray(arr, num)) {
            cJSON_Delete(num);
            cJSON_Delete(arr);
            return NULL;
        }
    }
    return arr;
}

/* The plain fields of section into obj, and each section's object with its
 * own. Returns false on allocation failure. */
static bool print_fields(cJSON *obj, const char *section, const spec_t *s) {
    for (const spec_field_t *f = spec_fields; f < spec_fields + N_OF(spec_fields); f++) {
        if (!field_in(f, section)) continue;
        const char *key = field_key(f);
        if (f->type == F_SECTION) {
            cJSON *sub = cJSON_AddObjectToObject(obj, key);
            if (!sub || !print_fields(sub, key, s)) return false;
            continue;
        }
        if (!field_plain(f)) continue;
        double v = field_get(s, f);
        if (f->canon == CANON_UNLESS_DEFAULT && v == f->def) continue;
        bool ok = true;
        switch (f->type) {
        case F_INT:
            ok = add_int(obj, key, *FIELD_PTR(s, f, const int));
            break;
        case F_NUM:
            ok = add_double(obj, key, v);
            break;
        case F_BOOL:
            ok = cJSON_AddBoolToObject(obj, key, v != 0) != NULL;
            break;
        default: /* F_ENUM */
            ok = cJSON_AddStringToObject(
                     obj, key, v >= 0 && v < (double)f->n_names ? f->names[(int)v] : "?") != NULL;
        }
        if (!ok) return false;
    }
    return true;
}

/* s's canonical form as a tree (the caller deletes it), or NULL when out
 * of memory. */
static cJSON *canonical_tree(const spec_t *s) {
    cJSON *root = cJSON_CreateObject(), *tags = NULL, *betas = NULL, *ve = NULL, *num = NULL;
    bool ok = root != NULL && print_fields(root, "", s);
    if (!ok) goto fail;

    /* The special fields (spec_fields says why they are). */
    ok &= (s->name ? cJSON_AddStringToObject(root, "name", s->name)
                   : cJSON_AddNullToObject(root, "name")) != NULL;
    ok &= (tags = cJSON_AddArrayToObject(root, "tags")) != NULL;
    for (int i = 0; ok && i < s->n_tags; i++) {
        cJSON *t = cJSON_CreateString(s->tags[i]);
        ok &= t && cJSON_AddItemToArray(tags, t);
        if (!ok) cJSON_Delete(t);
    }
    ok &= add_int(root, "seed", (long long)s->seed);
    ok &= (s->parent ? add_int(root, "parent", (long long)s->parent)
                     : cJSON_AddNullToObject(root, "parent") != NULL);
    ok &= cJSON_AddStringToObject(root, "dataset", s->dataset) != NULL;
    ok &= add_int(root, "token_budget", (long long)s->token_budget);
    if (!ok) goto fail;

    const spec_model_t *m = &s->model;
    cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    ok &= cJSON_AddStringToObject(model, "window_pattern", m->window_pattern) != NULL;
    ok &= (ve = ve_layers_json(m)) != NULL;
    if (!ok) goto fail;
    if (!cJSON_AddItemToObject(model, "ve_layers", ve)) {
        cJSON_Delete(ve);
        goto fail;
    }

    const spec_train_t *t = &s->train;
    cJSON *train = cJSON_GetObjectItemCaseSensitive(root, "train");
    if (!(betas = cJSON_AddArrayToObject(train, "adam_betas"))) goto fail;
    for (int i = 0; i < 2; i++) {
        char buf[40];
        format_double(i ? t->adam_beta2 : t->adam_beta1, buf, sizeof buf);
        if (!(num = cJSON_CreateRaw(buf)) || !cJSON_AddItemToArray(betas, num)) {
            cJSON_Delete(num);
            goto fail;
        }
    }
    if (!sort_keys(root)) goto fail;
    return root;
fail:
    cJSON_Delete(root);
    return NULL;
}

char *spec_canonical_json(const spec_t *s) {
    cJSON *root = canonical_tree(s);
    char *out = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return out;
}

/* ------------------------------------------------------------- identity -- */

int spec_from_json(const cJSON *j, spec_t *s, char *err, size_t errlen) {
    if (!cJSON_IsObject(j)) {
        spec_defaults(s);
        return fail(err, errlen, "spec", "expected a JSON object");
    }
    char *text = util_json_print(j, 0);
    if (!text) {
        spec_defaults(s);
        fail(err, errlen, "spec", "out of memory");
        return NS_ERR_NOMEM;
    }
    int rc = spec_parse(text, strlen(text), s, err, errlen);
    free(text);
    return rc;
}

/* The hex SHA-256 of text (which is freed) into out. */
static int hash_text(char *text, char out[SPEC_HASH_HEX]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (!text) return NS_ERR_NOMEM;
    int ok = EVP_Digest(text, strlen(text), md, &n, EVP_sha256(), NULL);
    free(text);
    if (!ok || n != 32) return -1;
    for (unsigned int i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
    return 0;
}

int spec_hash(const spec_t *s, char out[SPEC_HASH_HEX]) {
    return hash_text(spec_canonical_json(s), out);
}

/* The fields of the canonical form that label an experiment, and the seed:
 * none of them is part of its configuration. */
static const char *const not_config[] = {"name", "tags", "priority", "parent", "prune", "seed"};

/* m->window_pattern as the shortest pattern that repeats to the layers'
 * windows (derive_windows: the last layer always sees everything). */
static void normal_windows(spec_model_t *m) {
    char e[SPEC_MAX_DEPTH];
    int L = m->depth, p = 1;
    for (int i = 0; i < L; i++) e[i] = m->window[i] < m->seq_len ? 'S' : 'L';
    for (;; p++) { /* p = L always repeats */
        int i = p;
        while (i < L && e[i] == e[i % p]) i++;
        if (i >= L) break;
    }
    memcpy(m->window_pattern, e, (size_t)p);
    m->window_pattern[p] = '\0';
}

/* c, a shallow copy of a validated spec, with every spelling that trains the
 * same model the same way written one way (spec.h lists them; gpt.c and
 * optim.c are why they are the same). */
static void normalise_config(spec_t *c) {
    spec_t d;
    spec_defaults(&d);
    spec_model_t *m = &c->model;
    normal_windows(m);
    /* ve_layers as its layers: ve_layers_json names the first pattern of them */
    size_t len = (size_t)snprintf(m->ve_layers, sizeof m->ve_layers, "[");
    bool any_ve = false;
    for (int i = 0; i < m->depth; i++) {
        if (!m->has_ve[i]) continue;
        len += (size_t)snprintf(m->ve_layers + len, sizeof m->ve_layers - len, "%s%d",
                                any_ve ? "," : "", i);
        any_ve = true;
    }
    snprintf(m->ve_layers + len, sizeof m->ve_layers - len, "]");
    if (m->pos == POS_ROPE) m->max_pos = m->seq_len;
    if (!any_ve) {
        m->ve_gate_channels = d.model.ve_gate_channels;
        c->train.value_embedding_lr = d.train.value_embedding_lr;
    }
    if (m->tie_embeddings && m->pos == POS_ROPE) c->train.embedding_lr = d.train.embedding_lr;
    c->eval_tokens = d.eval_tokens; /* how a run is scored is its scope's */
}

char *spec_config_json(const spec_t *s) {
    spec_t c = *s; /* shallow: only printed */
    normalise_config(&c);
    cJSON *root = canonical_tree(&c);
    if (!root) return NULL;
    for (size_t i = 0; i < N_OF(not_config); i++)
        cJSON_DeleteItemFromObjectCaseSensitive(root, not_config[i]);
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

int spec_config_hash(const spec_t *s, char out[SPEC_HASH_HEX]) {
    return hash_text(spec_config_json(s), out);
}

bool spec_is_label(const char *field) {
    for (size_t i = 0; i < N_OF(not_config); i++)
        if (!strcmp(field, not_config[i])) return true;
    return false;
}

/* --------------------------------------------------------------- scope -- */

void spec_scope(const spec_t *s, spec_scope_t *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->dataset, sizeof out->dataset, "%s", s->dataset);
    if (s->token_budget > 0) {
        snprintf(out->budget_kind, sizeof out->budget_kind, "%s", SPEC_BUDGET_TOKENS);
        out->budget = (double)s->token_budget;
    } else if (s->flops_budget > 0) {
        snprintf(out->budget_kind, sizeof out->budget_kind, "%s", SPEC_BUDGET_FLOPS);
        out->budget = s->flops_budget;
    } else {
        snprintf(out->budget_kind, sizeof out->budget_kind, "%s", SPEC_BUDGET_TIME);
        out->budget = s->time_budget_s;
    }
    out->eval_tokens = s->eval_tokens;
}

void spec_scope_on(const spec_t *s, double val_tokens, spec_scope_t *out) {
    spec_scope(s, out);
    /* A split of n tokens has n - 1 targets: a cap at or above that scores them all. */
    if (val_tokens >= 0 && (double)s->eval_tokens >= val_tokens - 1) out->eval_tokens = 0;
}

void spec_default_scope(const char *dataset, spec_scope_t *out) {
    spec_t d;
    spec_defaults(&d);
    spec_scope(&d, out);
    if (dataset && *dataset) snprintf(out->dataset, sizeof out->dataset, "%s", dataset);
}

const char *spec_budget_field(const spec_t *s) {
    return s->token_budget > 0   ? "token_budget"
           : s->flops_budget > 0 ? "flops_budget"
                                 : "time_budget_s";
}

void spec_set_budget(spec_t *s, double budget) {
    if (s->token_budget > 0) {
        double t = round(budget);
        s->token_budget = t < 1 ? 1 : (int64_t)t;
    } else if (s->flops_budget > 0) {
        s->flops_budget = budget;
    } else {
        s->time_budget_s = budget;
    }
}

int spec_scope_set_budget(spec_scope_t *sc, const char *text) {
    const char *num = text;
    bool tokens = !strncmp(text, SPEC_BUDGET_TOKENS ":", 7);
    bool flops = !strncmp(text, SPEC_BUDGET_FLOPS ":", 6);
    char *end;
    if (!strncmp(text, SPEC_BUDGET_TIME ":", 5)) num = text + 5;
    if (tokens) num = text + 7;
    if (flops) num = text + 6;
    errno = 0;
    double v = strtod(num, &end);
    if (end != num && !tokens && !flops && *end == 's') end++;
    if (errno || end == num || *end || !(v > 0) || v > (flops ? SPEC_MAX_FLOPS_BUDGET : 1e15))
        return -1;
    snprintf(sc->budget_kind, sizeof sc->budget_kind, "%s",
             tokens  ? SPEC_BUDGET_TOKENS
             : flops ? SPEC_BUDGET_FLOPS
                     : SPEC_BUDGET_TIME);
    sc->budget = v;
    return 0;
}

/* ---------------------------------------------------------- JSON Schema -- */

/* One plain field's schema from its table line. */
static cJSON *field_schema(const spec_field_t *f) {
    cJSON *o = f->type == F_SPECIAL ? cJSON_Parse(f->schema) : cJSON_CreateObject();
    if (!o) return NULL;
    switch (f->type) {
    case F_INT:
        cJSON_AddStringToObject(o, "type", "integer");
        cJSON_AddNumberToObject(o, "minimum", f->lo);
        cJSON_AddNumberToObject(o, "maximum", f->hi);
        break;
    case F_NUM:
        cJSON_AddStringToObject(o, "type", "number");
        cJSON_AddNumberToObject(o, f->rule == NUM_ABOVE ? "exclusiveMinimum" : "minimum", f->lo);
        if (isfinite(f->hi))
            cJSON_AddNumberToObject(o, f->rule == NUM_IN_OPEN ? "exclusiveMaximum" : "maximum",
                                    f->hi);
        break;
    case F_BOOL:
        cJSON_AddStringToObject(o, "type", "boolean");
        break;
    case F_ENUM: {
        cJSON_AddStringToObject(o, "type", "string");
        cJSON *e = cJSON_AddArrayToObject(o, "enum");
        for (size_t i = 0; i < f->n_names; i++)
            cJSON_AddItemToArray(e, cJSON_CreateString(f->names[i]));
        break;
    }
    default:
        break;
    }
    if (f->follows) {
        /* its default is another field's value, which JSON Schema cannot say */
    } else if (f->type == F_INT || f->type == F_NUM) {
        cJSON_AddNumberToObject(o, "default", f->def);
    } else if (f->type == F_BOOL) {
        cJSON_AddBoolToObject(o, "default", f->def != 0);
    } else if (f->type == F_ENUM) {
        cJSON_AddStringToObject(o, "default", f->names[(int)f->def]);
    }
    if (f->desc) cJSON_AddStringToObject(o, "description", f->desc);
    return o;
}

static cJSON *object_schema(const char *desc) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "object");
    if (desc) cJSON_AddStringToObject(o, "description", desc);
    cJSON_AddItemToObject(o, "properties", cJSON_CreateObject());
    cJSON_AddBoolToObject(o, "additionalProperties", 0);
    return o;
}

cJSON *spec_json_schema(void) {
    cJSON *root = object_schema("one experiment: a GPT variant trained for a budget and "
                                "scored by val_bpb (bits per byte, lower is better)");
    if (!root) return NULL;
    cJSON_AddStringToObject(root, "$schema", "https://json-schema.org/draft/2020-12/schema");
    cJSON *props = cJSON_GetObjectItem(root, "properties");
    for (const spec_field_t *f = spec_fields; f < spec_fields + N_OF(spec_fields); f++) {
        const char *dot = strchr(f->path, '.');
        cJSON *into = props, *item;
        if (dot) { /* a section's field: the section is earlier in the table */
            char sec[32];
            snprintf(sec, sizeof sec, "%.*s", (int)(dot - f->path), f->path);
            into = cJSON_GetObjectItem(cJSON_GetObjectItem(props, sec), "properties");
        }
        item = f->type == F_SECTION ? object_schema(f->desc) : field_schema(f);
        if (!item || !into) {
            cJSON_Delete(item);
            cJSON_Delete(root);
            return NULL;
        }
        cJSON_AddItemToObject(into, field_key(f), item);
    }
    return root;
}

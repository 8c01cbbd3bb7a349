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
 * spec_canonical_json prints every field (defaults filled, derived arrays
 * left out), keys sorted at every level, no whitespace, numbers formatted here
 * rather than by cJSON so that equal values always print equal. */
#include "spec.h"

#include <cJSON.h>
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

static const char *const mlp_names[] = {"relu2", "gelu", "swiglu", "geglu"};
static const char *const pos_names[] = {"rope", "learned"};
static const char *const sampler_names[] = {"random", "sequential"};
static const char *const ve_names[] = {"alternate", "all", "none", "first_half", "last_half"};
enum { VE_ALTERNATE, VE_ALL, VE_NONE, VE_FIRST_HALF, VE_LAST_HALF, VE_LIST };

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* Write "path: reason" into err. Always returns -1 so callers can return it. */
static int fail(char *err, size_t errlen, const char *path, const char *fmt, ...) {
    if (!err || !errlen) return -1;
    int n = snprintf(err, errlen, "%s: ", path);
    if (n < 0 || (size_t)n >= errlen) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
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

void spec_defaults(spec_t *s) {
    memset(s, 0, sizeof *s);
    s->seed = 42;
    s->priority = 0;
    s->parent = 0;
    strcpy(s->dataset, "default");
    s->time_budget_s = 300;
    s->token_budget = 0;
    s->prune = true;

    spec_model_t *m = &s->model;
    m->vocab_size = 0;
    m->depth = 4;
    m->n_embd = 128;
    m->n_head = 2;
    m->n_kv_head = 2;
    m->mlp_ratio = 4;
    m->mlp = MLP_RELU2;
    m->seq_len = 256;
    m->pos = POS_ROPE;
    m->max_pos = 256;
    m->tie_embeddings = false;
    m->embed_dropout = 0;
    m->softcap = 15;
    strcpy(m->window_pattern, "SSSL");
    strcpy(m->ve_layers, "alternate");
    m->ve_gate_channels = 32;
    m->head_dim = m->n_embd / m->n_head;
    m->mlp_hidden = (int)(m->mlp_ratio * m->n_embd);

    spec_train_t *t = &s->train;
    t->batch_size = 16;
    t->total_batch_tokens = 4096;
    t->matrix_lr = 0.04;
    t->embedding_lr = 0.6;
    t->value_embedding_lr = 0.6;
    t->unembedding_lr = 0.004;
    t->scalar_lr = 0.5;
    t->weight_decay = 0.2;
    t->adam_beta1 = 0.8;
    t->adam_beta2 = 0.95;
    t->x0_beta1 = 0.96;
    t->warmup_ratio = 0;
    t->warmdown_ratio = 0.5;
    t->final_lr_frac = 0;
    t->muon_momentum_start = 0.85;
    t->muon_momentum_end = 0.95;
    t->muon_momentum_steps = 300;
    t->ns_steps = 5;
    t->muon_beta2 = 0.95;
    t->sampler = SAMPLER_RANDOM;

    s->resources.threads = 0;
    s->resources.memory_mb = 0;
    s->resources.peak_gflops = 0;
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

/* Every key of obj must be one of names[], at most once. */
static int check_keys(const cJSON *obj, const char *prefix, const char *const *names, size_t n,
                      char *err, size_t errlen) {
    char path[320];
    for (const cJSON *it = obj->child; it; it = it->next) {
        const char *key = it->string ? it->string : "";
        snprintf(path, sizeof path, "%s%s", prefix, key);
        size_t k = 0;
        while (k < n && strcmp(names[k], key)) k++;
        if (k == n) {
            /* The closest known name, when it is close enough to be a typo. */
            size_t best = n;
            int best_d = 4;
            for (size_t j = 0; j < n; j++) {
                int d = edit_distance(key, names[j]);
                if (d < best_d) best = j, best_d = d;
            }
            if (best < n && best_d <= (strlen(names[best]) > 4 ? 2 : 1))
                return fail(err, errlen, path, "unknown field (did you mean %s%s?)", prefix,
                            names[best]);
            return fail(err, errlen, path, "unknown field");
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

static const char *const model_keys[] = {"vocab_size",
                                         "depth",
                                         "n_embd",
                                         "n_head",
                                         "n_kv_head",
                                         "mlp_ratio",
                                         "mlp",
                                         "seq_len",
                                         "pos",
                                         "max_pos",
                                         "tie_embeddings",
                                         "embed_dropout",
                                         "softcap",
                                         "window_pattern",
                                         "ve_layers",
                                         "ve_gate_channels"};

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

static int parse_model(const cJSON *obj, spec_model_t *m, char *err, size_t errlen) {
    const cJSON *it;
    int k = 0;
    if (!cJSON_IsObject(obj)) return fail(err, errlen, "model", "expected an object");
    if (check_keys(obj, "model.", model_keys, N_OF(model_keys), err, errlen)) return -1;

    if ((it = FIELD(obj, "vocab_size")) &&
        get_int(it, "model.vocab_size", &m->vocab_size, err, errlen))
        return -1;
    if ((it = FIELD(obj, "depth")) && get_int(it, "model.depth", &m->depth, err, errlen)) return -1;
    if ((it = FIELD(obj, "n_embd")) && get_int(it, "model.n_embd", &m->n_embd, err, errlen))
        return -1;
    if ((it = FIELD(obj, "n_head")) && get_int(it, "model.n_head", &m->n_head, err, errlen))
        return -1;
    m->n_kv_head = m->n_head; /* the default follows n_head */
    if ((it = FIELD(obj, "n_kv_head")) &&
        get_int(it, "model.n_kv_head", &m->n_kv_head, err, errlen))
        return -1;
    if ((it = FIELD(obj, "mlp_ratio")) &&
        get_number(it, "model.mlp_ratio", &m->mlp_ratio, err, errlen))
        return -1;
    if ((it = FIELD(obj, "mlp"))) {
        if (get_enum(it, "model.mlp", mlp_names, N_OF(mlp_names), "relu2, gelu, swiglu or geglu",
                     &k, err, errlen))
            return -1;
        m->mlp = (spec_mlp_kind)k;
    }
    if ((it = FIELD(obj, "seq_len")) && get_int(it, "model.seq_len", &m->seq_len, err, errlen))
        return -1;
    if ((it = FIELD(obj, "pos"))) {
        if (get_enum(it, "model.pos", pos_names, N_OF(pos_names), "rope or learned", &k, err,
                     errlen))
            return -1;
        m->pos = (spec_pos_kind)k;
    }
    m->max_pos = m->seq_len; /* the default follows seq_len */
    if ((it = FIELD(obj, "max_pos")) && get_int(it, "model.max_pos", &m->max_pos, err, errlen))
        return -1;
    if ((it = FIELD(obj, "tie_embeddings")) &&
        get_bool(it, "model.tie_embeddings", &m->tie_embeddings, err, errlen))
        return -1;
    if ((it = FIELD(obj, "embed_dropout")) &&
        get_number(it, "model.embed_dropout", &m->embed_dropout, err, errlen))
        return -1;
    if ((it = FIELD(obj, "softcap")) && get_number(it, "model.softcap", &m->softcap, err, errlen))
        return -1;
    if ((it = FIELD(obj, "window_pattern"))) {
        const char *p = NULL;
        if (get_string(it, "model.window_pattern", &p, err, errlen)) return -1;
        size_t n = strlen(p);
        if (n == 0) return fail(err, errlen, "model.window_pattern", "must not be empty");
        if (n > SPEC_MAX_DEPTH)
            return fail(err, errlen, "model.window_pattern", "longer than %d characters",
                        SPEC_MAX_DEPTH);
        for (size_t i = 0; i <= n; i++)
            m->window_pattern[i] = (p[i] >= 'a' && p[i] <= 'z') ? (char)(p[i] - 32) : p[i];
    }
    if ((it = FIELD(obj, "ve_layers"))) {
        if (cJSON_IsArray(it)) {
            if (parse_ve_list(it, m, err, errlen)) return -1;
        } else if (cJSON_IsString(it)) {
            if (get_enum(it, "model.ve_layers", ve_names, N_OF(ve_names),
                         "alternate, all, none, first_half, last_half or a list of layers", &k, err,
                         errlen))
                return -1;
            strcpy(m->ve_layers, ve_names[k]);
        } else {
            return fail(err, errlen, "model.ve_layers",
                        "expected a string or an array of layer indices");
        }
    }
    if ((it = FIELD(obj, "ve_gate_channels")) &&
        get_int(it, "model.ve_gate_channels", &m->ve_gate_channels, err, errlen))
        return -1;
    return 0;
}

static const char *const train_keys[] = {"batch_size",
                                         "total_batch_tokens",
                                         "matrix_lr",
                                         "embedding_lr",
                                         "value_embedding_lr",
                                         "unembedding_lr",
                                         "scalar_lr",
                                         "weight_decay",
                                         "adam_betas",
                                         "x0_beta1",
                                         "warmup_ratio",
                                         "warmdown_ratio",
                                         "final_lr_frac",
                                         "muon_momentum_start",
                                         "muon_momentum_end",
                                         "muon_momentum_steps",
                                         "ns_steps",
                                         "muon_beta2",
                                         "sampler"};

static int parse_train(const cJSON *obj, spec_train_t *t, char *err, size_t errlen) {
    const cJSON *it;
    if (!cJSON_IsObject(obj)) return fail(err, errlen, "train", "expected an object");
    if (check_keys(obj, "train.", train_keys, N_OF(train_keys), err, errlen)) return -1;

    /* The double-valued fields other than adam_betas. */
    static const struct {
        const char *key;
        size_t offset;
    } nums[] = {
        {"matrix_lr", offsetof(spec_train_t, matrix_lr)},
        {"embedding_lr", offsetof(spec_train_t, embedding_lr)},
        {"value_embedding_lr", offsetof(spec_train_t, value_embedding_lr)},
        {"unembedding_lr", offsetof(spec_train_t, unembedding_lr)},
        {"scalar_lr", offsetof(spec_train_t, scalar_lr)},
        {"weight_decay", offsetof(spec_train_t, weight_decay)},
        {"x0_beta1", offsetof(spec_train_t, x0_beta1)},
        {"warmup_ratio", offsetof(spec_train_t, warmup_ratio)},
        {"warmdown_ratio", offsetof(spec_train_t, warmdown_ratio)},
        {"final_lr_frac", offsetof(spec_train_t, final_lr_frac)},
        {"muon_momentum_start", offsetof(spec_train_t, muon_momentum_start)},
        {"muon_momentum_end", offsetof(spec_train_t, muon_momentum_end)},
        {"muon_beta2", offsetof(spec_train_t, muon_beta2)},
    };
    char path[64];

    if ((it = FIELD(obj, "batch_size")) &&
        get_int(it, "train.batch_size", &t->batch_size, err, errlen))
        return -1;
    if ((it = FIELD(obj, "total_batch_tokens")) &&
        get_int(it, "train.total_batch_tokens", &t->total_batch_tokens, err, errlen))
        return -1;
    for (size_t i = 0; i < N_OF(nums); i++) {
        snprintf(path, sizeof path, "train.%s", nums[i].key);
        if ((it = FIELD(obj, nums[i].key)) &&
            get_number(it, path, (double *)((char *)t + nums[i].offset), err, errlen))
            return -1;
    }
    if ((it = FIELD(obj, "adam_betas"))) {
        if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2)
            return fail(err, errlen, "train.adam_betas", "expected an array of two numbers");
        if (get_number(it->child, "train.adam_betas[0]", &t->adam_beta1, err, errlen) ||
            get_number(it->child->next, "train.adam_betas[1]", &t->adam_beta2, err, errlen))
            return -1;
    }
    if ((it = FIELD(obj, "muon_momentum_steps")) &&
        get_int(it, "train.muon_momentum_steps", &t->muon_momentum_steps, err, errlen))
        return -1;
    if ((it = FIELD(obj, "ns_steps")) && get_int(it, "train.ns_steps", &t->ns_steps, err, errlen))
        return -1;
    if ((it = FIELD(obj, "sampler"))) {
        int k = 0;
        if (get_enum(it, "train.sampler", sampler_names, N_OF(sampler_names),
                     "random or sequential", &k, err, errlen))
            return -1;
        t->sampler = (spec_sampler_kind)k;
    }
    return 0;
}

static const char *const resources_keys[] = {"threads", "memory_mb", "peak_gflops"};

static int parse_resources(const cJSON *obj, spec_resources_t *r, char *err, size_t errlen) {
    const cJSON *it;
    if (!cJSON_IsObject(obj)) return fail(err, errlen, "resources", "expected an object");
    if (check_keys(obj, "resources.", resources_keys, N_OF(resources_keys), err, errlen)) return -1;
    if ((it = FIELD(obj, "threads")) && get_int(it, "resources.threads", &r->threads, err, errlen))
        return -1;
    if ((it = FIELD(obj, "memory_mb")) &&
        get_int(it, "resources.memory_mb", &r->memory_mb, err, errlen))
        return -1;
    if ((it = FIELD(obj, "peak_gflops")) &&
        get_number(it, "resources.peak_gflops", &r->peak_gflops, err, errlen))
        return -1;
    return 0;
}

static const char *const top_keys[] = {"name",   "tags",      "seed",          "priority",
                                       "parent", "dataset",   "time_budget_s", "model",
                                       "train",  "resources", "prune",         "token_budget"};

/* Fill s (already defaulted) from the root object. Strings s takes are owned
 * by s even on failure; the caller frees them. */
static int parse_root(const cJSON *root, spec_t *s, char *err, size_t errlen) {
    const cJSON *it;
    double d = 0;
    char path[32];
    if (!cJSON_IsObject(root)) return fail(err, errlen, "spec", "expected a JSON object");
    if (check_keys(root, "", top_keys, N_OF(top_keys), err, errlen)) return -1;

    if ((it = FIELD(root, "name")) && !cJSON_IsNull(it)) {
        const char *name = NULL;
        if (get_string(it, "name", &name, err, errlen)) return -1;
        if (strlen(name) > 4 * SPEC_MAX_NAME)
            return fail(err, errlen, "name", "longer than %d characters", SPEC_MAX_NAME);
        if (!(s->name = strdup(name))) return fail(err, errlen, "spec", "out of memory");
    }
    if ((it = FIELD(root, "tags"))) {
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
    }
    if ((it = FIELD(root, "seed"))) {
        if (get_integer(it, "seed", -HUGE_VAL, HUGE_VAL, &d, err, errlen)) return -1;
        if (d < 0 || d > JSON_MAX_SAFE_INT)
            return fail(err, errlen, "seed", "must be in [0, %.17g], got %.17g", JSON_MAX_SAFE_INT,
                        d);
        s->seed = (uint64_t)d;
    }
    if ((it = FIELD(root, "priority")) && get_int(it, "priority", &s->priority, err, errlen))
        return -1;
    if ((it = FIELD(root, "parent")) && !cJSON_IsNull(it)) {
        if (!cJSON_IsNumber(it))
            return fail(err, errlen, "parent", "expected an integer id or null");
        if (get_integer(it, "parent", -HUGE_VAL, HUGE_VAL, &d, err, errlen)) return -1;
        if (d < 1 || d > JSON_MAX_SAFE_INT)
            return fail(err, errlen, "parent", "must be a positive id or null, got %.17g", d);
        s->parent = (int64_t)d;
    }
    if ((it = FIELD(root, "dataset"))) {
        const char *str = NULL;
        if (get_string(it, "dataset", &str, err, errlen)) return -1;
        if (strlen(str) >= sizeof s->dataset)
            return fail(err, errlen, "dataset", "longer than %zu characters",
                        sizeof s->dataset - 1);
        strcpy(s->dataset, str);
    }
    if ((it = FIELD(root, "time_budget_s")) &&
        get_number(it, "time_budget_s", &s->time_budget_s, err, errlen))
        return -1;
    if ((it = FIELD(root, "token_budget"))) {
        if (get_integer(it, "token_budget", -HUGE_VAL, HUGE_VAL, &d, err, errlen)) return -1;
        if (d < 0 || d > SPEC_MAX_TOKEN_BUDGET)
            return fail(err, errlen, "token_budget", "must be in [0, %.0f], got %.15g",
                        SPEC_MAX_TOKEN_BUDGET, d);
        s->token_budget = (int64_t)d;
        /* A token budget replaces the default time budget; one given
         * explicitly as well is left for spec_validate to refuse. */
        if (s->token_budget > 0 && !FIELD(root, "time_budget_s")) s->time_budget_s = 0;
    }
    if ((it = FIELD(root, "prune")) && get_bool(it, "prune", &s->prune, err, errlen)) return -1;
    if ((it = FIELD(root, "model")) && parse_model(it, &s->model, err, errlen)) return -1;
    if ((it = FIELD(root, "train")) && parse_train(it, &s->train, err, errlen)) return -1;
    if ((it = FIELD(root, "resources")) && parse_resources(it, &s->resources, err, errlen))
        return -1;
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

static int check_int(int v, int lo, int hi, const char *path, char *err, size_t errlen) {
    if (v < lo || v > hi) return fail(err, errlen, path, "must be in [%d, %d], got %d", lo, hi, v);
    return 0;
}

/* Upper bounds of the fields that have no natural one: a spec must not be
 * able to ask for centuries of training or an overflowing deadline. */
#define MAX_LR          1e6 /* every learning rate and weight_decay (beyond: only NaN) */
#define MAX_SOFTCAP     1e6
#define MAX_PEAK_GFLOPS 1e9 /* an exaflop machine */

/* v <= hi, for a value already known to be a finite number in range below. */
static int check_max(double v, double hi, const char *path, char *err, size_t errlen) {
    if (v > hi) return fail(err, errlen, path, "must be at most %g, got %g", hi, v);
    return 0;
}

static int check_positive(double v, const char *path, char *err, size_t errlen) {
    if (!(v > 0) || !isfinite(v)) return fail(err, errlen, path, "must be > 0, got %g", v);
    return 0;
}

static int check_nonneg(double v, const char *path, char *err, size_t errlen) {
    if (!(v >= 0) || !isfinite(v)) return fail(err, errlen, path, "must be >= 0, got %g", v);
    return 0;
}

/* v in [0, 1) when open, [0, 1] otherwise. */
static int check_unit(double v, bool open, const char *path, char *err, size_t errlen) {
    if (!(v >= 0) || (open ? !(v < 1) : !(v <= 1)))
        return fail(err, errlen, path, "must be in [0, 1%c, got %g", open ? ')' : ']', v);
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

static int validate_model(spec_model_t *m, char *err, size_t errlen) {
    if (check_int(m->vocab_size, 0, MAX_VOCAB, "model.vocab_size", err, errlen) ||
        check_int(m->depth, 1, SPEC_MAX_DEPTH, "model.depth", err, errlen) ||
        check_int(m->n_embd, 1, MAX_WIDTH, "model.n_embd", err, errlen) ||
        check_int(m->n_head, 1, MAX_WIDTH, "model.n_head", err, errlen) ||
        check_int(m->n_kv_head, 1, MAX_WIDTH, "model.n_kv_head", err, errlen) ||
        check_positive(m->mlp_ratio, "model.mlp_ratio", err, errlen))
        return -1;
    if ((unsigned)m->mlp >= N_OF(mlp_names))
        return fail(err, errlen, "model.mlp", "unknown kind %d", (int)m->mlp);
    if (check_int(m->seq_len, 1, MAX_SEQ, "model.seq_len", err, errlen)) return -1;
    if ((unsigned)m->pos >= N_OF(pos_names))
        return fail(err, errlen, "model.pos", "unknown kind %d", (int)m->pos);
    if (check_int(m->max_pos, 1, MAX_SEQ, "model.max_pos", err, errlen) ||
        check_unit(m->embed_dropout, true, "model.embed_dropout", err, errlen) ||
        check_nonneg(m->softcap, "model.softcap", err, errlen) ||
        check_max(m->softcap, MAX_SOFTCAP, "model.softcap", err, errlen))
        return -1;

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
    if (check_int(m->ve_gate_channels, 1, MAX_WIDTH, "model.ve_gate_channels", err, errlen))
        return -1;

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

static int validate_train(spec_train_t *t, const spec_model_t *m, char *err, size_t errlen) {
    if (check_int(t->batch_size, 1, MAX_WIDTH, "train.batch_size", err, errlen) ||
        check_int(t->total_batch_tokens, 1, INT_MAX, "train.total_batch_tokens", err, errlen))
        return -1;
    long long row = (long long)t->batch_size * m->seq_len;
    if (t->total_batch_tokens % row)
        return fail(err, errlen, "train.total_batch_tokens",
                    "%d is not a multiple of batch_size*seq_len %lld", t->total_batch_tokens, row);
    if (check_nonneg(t->matrix_lr, "train.matrix_lr", err, errlen) ||
        check_nonneg(t->embedding_lr, "train.embedding_lr", err, errlen) ||
        check_nonneg(t->value_embedding_lr, "train.value_embedding_lr", err, errlen) ||
        check_nonneg(t->unembedding_lr, "train.unembedding_lr", err, errlen) ||
        check_nonneg(t->scalar_lr, "train.scalar_lr", err, errlen) ||
        check_nonneg(t->weight_decay, "train.weight_decay", err, errlen) ||
        check_unit(t->adam_beta1, true, "train.adam_betas[0]", err, errlen) ||
        check_unit(t->adam_beta2, true, "train.adam_betas[1]", err, errlen) ||
        check_unit(t->x0_beta1, true, "train.x0_beta1", err, errlen) ||
        check_unit(t->warmup_ratio, false, "train.warmup_ratio", err, errlen) ||
        check_unit(t->warmdown_ratio, false, "train.warmdown_ratio", err, errlen) ||
        check_unit(t->final_lr_frac, false, "train.final_lr_frac", err, errlen) ||
        check_max(t->matrix_lr, MAX_LR, "train.matrix_lr", err, errlen) ||
        check_max(t->embedding_lr, MAX_LR, "train.embedding_lr", err, errlen) ||
        check_max(t->value_embedding_lr, MAX_LR, "train.value_embedding_lr", err, errlen) ||
        check_max(t->unembedding_lr, MAX_LR, "train.unembedding_lr", err, errlen) ||
        check_max(t->scalar_lr, MAX_LR, "train.scalar_lr", err, errlen) ||
        check_max(t->weight_decay, MAX_LR, "train.weight_decay", err, errlen))
        return -1;
    if (t->warmup_ratio + t->warmdown_ratio > 1)
        return fail(err, errlen, "train.warmdown_ratio",
                    "warmup_ratio + warmdown_ratio = %g exceeds 1",
                    t->warmup_ratio + t->warmdown_ratio);
    if (check_unit(t->muon_momentum_start, true, "train.muon_momentum_start", err, errlen) ||
        check_unit(t->muon_momentum_end, true, "train.muon_momentum_end", err, errlen) ||
        check_int(t->muon_momentum_steps, 0, INT_MAX, "train.muon_momentum_steps", err, errlen) ||
        check_int(t->ns_steps, 1, 5, "train.ns_steps", err, errlen) ||
        check_unit(t->muon_beta2, true, "train.muon_beta2", err, errlen))
        return -1;
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

/* Exactly one of time_budget_s and token_budget is nonzero. */
static int validate_budget(const spec_t *s, char *err, size_t errlen) {
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
    if (s->time_budget_s == 0 && s->token_budget == 0)
        return fail(err, errlen, "time_budget_s", "0 and token_budget 0: one of them must be > 0");
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
    if (check_dataset(s->dataset, err, errlen) || validate_budget(s, err, errlen) ||
        validate_model(&s->model, err, errlen) || validate_train(&s->train, &s->model, err, errlen))
        return -1;
    const spec_resources_t *r = &s->resources;
    if (check_int(r->threads, 0, MAX_THREADS, "resources.threads", err, errlen) ||
        check_int(r->memory_mb, 0, INT_MAX, "resources.memory_mb", err, errlen) ||
        check_nonneg(r->peak_gflops, "resources.peak_gflops", err, errlen) ||
        check_max(r->peak_gflops, MAX_PEAK_GFLOPS, "resources.peak_gflops", err, errlen))
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

char *spec_canonical_json(const spec_t *s) {
    char *out = NULL;
    cJSON *root = cJSON_CreateObject(), *model = NULL, *train = NULL, *res = NULL;
    cJSON *tags = NULL, *betas = NULL, *ve = NULL, *num = NULL;
    bool ok = root != NULL;
    if (!ok) goto fail;

    ok &= (s->name ? cJSON_AddStringToObject(root, "name", s->name)
                   : cJSON_AddNullToObject(root, "name")) != NULL;
    ok &= (tags = cJSON_AddArrayToObject(root, "tags")) != NULL;
    for (int i = 0; ok && i < s->n_tags; i++) {
        cJSON *t = cJSON_CreateString(s->tags[i]);
        ok &= t && cJSON_AddItemToArray(tags, t);
        if (!ok) cJSON_Delete(t);
    }
    ok &= add_int(root, "seed", (long long)s->seed);
    ok &= add_int(root, "priority", s->priority);
    ok &= (s->parent ? add_int(root, "parent", (long long)s->parent)
                     : cJSON_AddNullToObject(root, "parent") != NULL);
    ok &= cJSON_AddStringToObject(root, "dataset", s->dataset) != NULL;
    ok &= add_double(root, "time_budget_s", s->time_budget_s);
    ok &= add_int(root, "token_budget", (long long)s->token_budget);
    ok &= cJSON_AddBoolToObject(root, "prune", s->prune) != NULL;
    if (!ok) goto fail;

    const spec_model_t *m = &s->model;
    ok &= (model = cJSON_AddObjectToObject(root, "model")) != NULL;
    if (!ok) goto fail;
    ok &= add_int(model, "vocab_size", m->vocab_size);
    ok &= add_int(model, "depth", m->depth);
    ok &= add_int(model, "n_embd", m->n_embd);
    ok &= add_int(model, "n_head", m->n_head);
    ok &= add_int(model, "n_kv_head", m->n_kv_head);
    ok &= add_double(model, "mlp_ratio", m->mlp_ratio);
    ok &= cJSON_AddStringToObject(model, "mlp", spec_mlp_name(m->mlp)) != NULL;
    ok &= add_int(model, "seq_len", m->seq_len);
    ok &= cJSON_AddStringToObject(model, "pos", spec_pos_name(m->pos)) != NULL;
    ok &= add_int(model, "max_pos", m->max_pos);
    ok &= cJSON_AddBoolToObject(model, "tie_embeddings", m->tie_embeddings) != NULL;
    ok &= add_double(model, "embed_dropout", m->embed_dropout);
    ok &= add_double(model, "softcap", m->softcap);
    ok &= cJSON_AddStringToObject(model, "window_pattern", m->window_pattern) != NULL;
    ok &= (ve = ve_layers_json(m)) != NULL;
    if (!ok) goto fail;
    if (!cJSON_AddItemToObject(model, "ve_layers", ve)) {
        cJSON_Delete(ve);
        goto fail;
    }
    ok &= add_int(model, "ve_gate_channels", m->ve_gate_channels);
    if (!ok) goto fail;

    const spec_train_t *t = &s->train;
    ok &= (train = cJSON_AddObjectToObject(root, "train")) != NULL;
    if (!ok) goto fail;
    ok &= add_int(train, "batch_size", t->batch_size);
    ok &= add_int(train, "total_batch_tokens", t->total_batch_tokens);
    ok &= add_double(train, "matrix_lr", t->matrix_lr);
    ok &= add_double(train, "embedding_lr", t->embedding_lr);
    ok &= add_double(train, "value_embedding_lr", t->value_embedding_lr);
    ok &= add_double(train, "unembedding_lr", t->unembedding_lr);
    ok &= add_double(train, "scalar_lr", t->scalar_lr);
    ok &= add_double(train, "weight_decay", t->weight_decay);
    ok &= (betas = cJSON_AddArrayToObject(train, "adam_betas")) != NULL;
    if (!ok) goto fail;
    for (int i = 0; i < 2; i++) {
        char buf[40];
        format_double(i ? t->adam_beta2 : t->adam_beta1, buf, sizeof buf);
        if (!(num = cJSON_CreateRaw(buf)) || !cJSON_AddItemToArray(betas, num)) {
            cJSON_Delete(num);
            goto fail;
        }
    }
    ok &= add_double(train, "x0_beta1", t->x0_beta1);
    ok &= add_double(train, "warmup_ratio", t->warmup_ratio);
    ok &= add_double(train, "warmdown_ratio", t->warmdown_ratio);
    ok &= add_double(train, "final_lr_frac", t->final_lr_frac);
    ok &= add_double(train, "muon_momentum_start", t->muon_momentum_start);
    ok &= add_double(train, "muon_momentum_end", t->muon_momentum_end);
    ok &= add_int(train, "muon_momentum_steps", t->muon_momentum_steps);
    ok &= add_int(train, "ns_steps", t->ns_steps);
    ok &= add_double(train, "muon_beta2", t->muon_beta2);
    ok &= cJSON_AddStringToObject(train, "sampler", spec_sampler_name(t->sampler)) != NULL;

    ok &= (res = cJSON_AddObjectToObject(root, "resources")) != NULL;
    if (!ok) goto fail;
    ok &= add_int(res, "threads", s->resources.threads);
    ok &= add_int(res, "memory_mb", s->resources.memory_mb);
    ok &= add_double(res, "peak_gflops", s->resources.peak_gflops);
    if (!ok || !sort_keys(root)) goto fail;

    out = cJSON_PrintUnformatted(root);
fail:
    cJSON_Delete(root);
    return out;
}

/* ------------------------------------------------------------- identity -- */

int spec_from_json(const cJSON *j, spec_t *s, char *err, size_t errlen) {
    if (!cJSON_IsObject(j)) {
        spec_defaults(s);
        return fail(err, errlen, "spec", "expected a JSON object");
    }
    char *text = cJSON_PrintUnformatted(j);
    if (!text) {
        spec_defaults(s);
        fail(err, errlen, "spec", "out of memory");
        return NS_ERR_NOMEM;
    }
    int rc = spec_parse(text, strlen(text), s, err, errlen);
    free(text);
    return rc;
}

int spec_hash(const spec_t *s, char out[SPEC_HASH_HEX]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    char *canon = spec_canonical_json(s);
    if (!canon) return NS_ERR_NOMEM;
    int ok = EVP_Digest(canon, strlen(canon), md, &n, EVP_sha256(), NULL);
    free(canon);
    if (!ok || n != 32) return -1;
    for (unsigned int i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
    return 0;
}

int spec_identity(const spec_t *s, char out[SPEC_HASH_HEX]) {
    /* A shallow copy: spec_hash only prints it. */
    spec_t bare = *s;
    bare.name = NULL;
    bare.n_tags = 0;
    bare.priority = 0;
    bare.parent = 0;
    bare.prune = true; /* whether a run may be pruned does not change what it is */
    return spec_hash(&bare, out);
}

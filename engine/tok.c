/* tok.c - byte-level BPE: the regex splitter, training by incremental pair
 * counts, tokenizer.json, and encoding by merge rank.
 *
 * Training counts every distinct chunk once (a hash map from bytes to count),
 * then works on the distinct chunks ("words") weighted by their counts. Each
 * pair of adjacent ids has a total count and the list of words that contain it;
 * a max-heap of (count, pair) with lazy invalidation picks the next merge, and
 * a merge rewrites only the words on that pair's list, adjusting the counts of
 * the neighbouring pairs. Nothing rescans the whole corpus per merge.
 *
 * Encoding splits the text the same way, and inside each chunk repeatedly
 * merges the adjacent pair of lowest rank (leftmost first) using a min-heap
 * over (rank, position), so a long chunk costs n log n, not n^2. Short chunks'
 * results are cached. */
#define PCRE2_CODE_UNIT_WIDTH 8

#include "engine/tok.h"
#include "engine/util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOK_MAX_TOKEN_BYTES (1 << 16)         /* longer tokens come only from malformed files */
#define TOK_MAX_TOTAL_BYTES ((size_t)1 << 30) /* all token bytes together */

static const char *const special_names[TOK_N_SPECIAL] = {"<|bos|>", "<|eos|>", "<|pad|>",
                                                         "<|reserved|>"};

void tok_ids_free(tok_ids_t *v) {
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

int tok_ids_push(tok_ids_t *v, int32_t id) {
    if (util_grow(&v->ids, &v->cap, v->n + 1, sizeof *v->ids)) return -1;
    v->ids[v->n++] = id;
    return 0;
}

/* ---- hashing --------------------------------------------------------------- */

static uint64_t hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
    h ^= h >> 32;
    h *= 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static uint64_t pair_key(int32_t a, int32_t b) {
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

/* ---- bmap: byte strings -> (val, aux), keys copied into an arena ---------- */

typedef struct {
    uint64_t hash;
    size_t off; /* into bmap_t.bytes */
    uint32_t len;
    uint32_t aux;
    uint64_t val;
} bent_t;

typedef struct {
    uint8_t *bytes;
    size_t nbytes, capbytes;
    bent_t *ents;
    size_t n, cap;
    int32_t *slots; /* index into ents, -1 empty; nslots is a power of two */
    size_t nslots;
} bmap_t;

static void bmap_free(bmap_t *m) {
    free(m->bytes);
    free(m->ents);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static int bmap_rehash(bmap_t *m, size_t nslots) {
    int32_t *s = malloc(nslots * sizeof *s);
    if (!s) return -1;
    for (size_t i = 0; i < nslots; i++) s[i] = -1;
    for (size_t e = 0; e < m->n; e++) {
        size_t i = m->ents[e].hash & (nslots - 1);
        while (s[i] >= 0) i = (i + 1) & (nslots - 1);
        s[i] = (int32_t)e;
    }
    free(m->slots);
    m->slots = s;
    m->nslots = nslots;
    return 0;
}

/* Find s, or add it with val 0 and aux 0 when add is true. Returns the entry
 * index, -1 when absent (add false), or -2 on allocation failure. */
static long bmap_find(bmap_t *m, const uint8_t *s, size_t len, bool add) {
    if (len > UINT32_MAX) return -2;
    if (!m->nslots && bmap_rehash(m, 1024)) return -2;
    uint64_t h = hash_bytes(s, len);
    size_t i = h & (m->nslots - 1);
    for (;;) {
        int32_t e = m->slots[i];
        if (e < 0) break;
        const bent_t *b = &m->ents[e];
        if (b->hash == h && b->len == len && !memcmp(m->bytes + b->off, s, len)) return e;
        i = (i + 1) & (m->nslots - 1);
    }
    if (!add) return -1;
    if (m->n >= INT32_MAX - 1) return -2;
    if (util_grow(&m->ents, &m->cap, m->n + 1, sizeof *m->ents)) return -2;
    if (util_grow(&m->bytes, &m->capbytes, m->nbytes + len + 1, 1)) return -2;
    memcpy(m->bytes + m->nbytes, s, len);
    m->ents[m->n] = (bent_t){.hash = h, .off = m->nbytes, .len = (uint32_t)len};
    m->nbytes += len;
    m->slots[i] = (int32_t)m->n;
    long idx = (long)m->n++;
    if (m->n * 2 > m->nslots && bmap_rehash(m, m->nslots * 2)) return -2;
    return idx;
}

/* ---- pmap: pair key -> int32 ---------------------------------------------- */

typedef struct {
    uint64_t *keys;
    int32_t *vals; /* -1 = empty slot */
    size_t n, nslots;
} pmap_t;

static void pmap_free(pmap_t *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static int pmap_rehash(pmap_t *m, size_t nslots) {
    uint64_t *k = malloc(nslots * sizeof *k);
    int32_t *v = malloc(nslots * sizeof *v);
    if (!k || !v) {
        free(k);
        free(v);
        return -1;
    }
    for (size_t i = 0; i < nslots; i++) v[i] = -1;
    for (size_t j = 0; j < m->nslots; j++) {
        if (m->vals[j] < 0) continue;
        size_t i = hash_u64(m->keys[j]) & (nslots - 1);
        while (v[i] >= 0) i = (i + 1) & (nslots - 1);
        k[i] = m->keys[j];
        v[i] = m->vals[j];
    }
    free(m->keys);
    free(m->vals);
    m->keys = k;
    m->vals = v;
    m->nslots = nslots;
    return 0;
}

static inline int32_t pmap_get(const pmap_t *m, uint64_t key) {
    if (!m->nslots) return -1;
    size_t i = hash_u64(key) & (m->nslots - 1);
    while (m->vals[i] >= 0) {
        if (m->keys[i] == key) return m->vals[i];
        i = (i + 1) & (m->nslots - 1);
    }
    return -1;
}

/* Insert key -> val (key must be absent). Returns 0 or -1 on allocation failure. */
static int pmap_put(pmap_t *m, uint64_t key, int32_t val) {
    if ((m->n + 1) * 2 > m->nslots && pmap_rehash(m, m->nslots ? m->nslots * 2 : 1024)) return -1;
    size_t i = hash_u64(key) & (m->nslots - 1);
    while (m->vals[i] >= 0) i = (i + 1) & (m->nslots - 1);
    m->keys[i] = key;
    m->vals[i] = val;
    m->n++;
    return 0;
}

/* ---- the splitter ------------------------------------------------------------ */

typedef struct {
    pcre2_code *re;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
} splitter_t;

static void splitter_close(splitter_t *s) {
    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mctx);
    pcre2_jit_stack_free(s->jstack);
    pcre2_code_free(s->re);
    memset(s, 0, sizeof *s);
}

static int splitter_init(splitter_t *s, const char *pattern, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    int ec;
    PCRE2_SIZE eoff;
    s->re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eoff, NULL);
    if (!s->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        util_errorf(err, errlen, "split pattern: %s at offset %zu", (char *)msg, (size_t)eoff);
        goto fail;
    }
    /* JIT when this build of PCRE2 has it; the interpreter otherwise. A large
     * JIT stack keeps very long runs of letters or spaces matchable. */
    if (pcre2_jit_compile(s->re, PCRE2_JIT_COMPLETE) == 0) {
        s->mctx = pcre2_match_context_create(NULL);
        s->jstack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
        if (!s->mctx || !s->jstack) {
            util_errorf(err, errlen, "out of memory");
            goto fail;
        }
        pcre2_jit_stack_assign(s->mctx, NULL, s->jstack);
    }
    s->md = pcre2_match_data_create_from_pattern(s->re, NULL);
    if (!s->md) {
        util_errorf(err, errlen, "out of memory");
        goto fail;
    }
    return 0;
fail:
    splitter_close(s);
    return -1;
}

typedef int (*chunk_fn)(void *ctx, const uint8_t *s, size_t n);

/* Call fn for every chunk of text[0..len): each regex match, and each run of
 * bytes between matches (invalid UTF-8, which no pattern item matches). */
static int split_each(splitter_t *s, const uint8_t *text, size_t len, chunk_fn fn, void *ctx,
                      char *err, size_t errlen) {
    size_t pos = 0, from = 0; /* pos: start of the next chunk; from: where to search */
    while (pos < len) {
        int rc = pcre2_match(s->re, text, len, from, 0, s->md, s->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) {
            if (fn(ctx, text + pos, len - pos)) goto oom;
            break;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            util_errorf(err, errlen, "split: %s at byte %zu", (char *)msg, from);
            return -1;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) {
            /* An empty match (impossible with TOK_PATTERN, possible with a
             * hand-edited pattern): skip it, its byte joins the gap. */
            from = ms + 1;
            if (from > len) {
                if (fn(ctx, text + pos, len - pos)) goto oom;
                break;
            }
            continue;
        }
        if (ms > pos && fn(ctx, text + pos, ms - pos)) goto oom;
        if (fn(ctx, text + ms, me - ms)) goto oom;
        pos = from = me;
    }
    return 0;
oom:
    util_errorf(err, errlen, "out of memory");
    return -1;
}

/* ---- the tokenizer ------------------------------------------------------------ */

#define CACHE_MAX_CHUNK   64
#define CACHE_MAX_ENTRIES (1 << 18)

struct tok {
    char *pattern;
    int n_merges;
    int32_t (*merges)[2]; /* n_merges pairs, in rank order */
    pmap_t ranks;         /* pair key -> rank */
    uint8_t *tbytes;      /* bytes of every ordinary token, concatenated */
    size_t *toff;         /* n_regular + 1 offsets into tbytes */
    splitter_t split;
    /* encode scratch, grown on demand */
    int32_t *sc_tok, *sc_next, *sc_prev;
    uint64_t *sc_heap;
    size_t sc_cap;
    /* encode cache: chunk bytes -> (offset into cache_ids, count) */
    bmap_t cache;
    int32_t *cache_ids;
    size_t cache_n, cache_cap;
};

int tok_vocab_size(const tok_t *t) {
    return TOK_N_BYTES + t->n_merges + TOK_N_SPECIAL;
}
int tok_n_regular(const tok_t *t) {
    return TOK_N_BYTES + t->n_merges;
}
int tok_n_merges(const tok_t *t) {
    return t->n_merges;
}
int tok_special_id(const tok_t *t, tok_special which) {
    return tok_n_regular(t) + (int)which;
}
int tok_bos_id(const tok_t *t) {
    return tok_special_id(t, TOK_BOS);
}
int tok_is_special(const tok_t *t, int id) {
    return id >= tok_n_regular(t) && id < tok_vocab_size(t);
}
void tok_merge(const tok_t *t, int rank, int32_t *a, int32_t *b) {
    *a = t->merges[rank][0];
    *b = t->merges[rank][1];
}

const uint8_t *tok_token_bytes(const tok_t *t, int id, size_t *len) {
    if (id < 0 || id >= tok_vocab_size(t)) return NULL;
    if (id >= tok_n_regular(t)) {
        const char *name = special_names[id - tok_n_regular(t)];
        *len = strlen(name);
        return (const uint8_t *)name;
    }
    *len = t->toff[id + 1] - t->toff[id];
    return t->tbytes + t->toff[id];
}

void tok_free(tok_t *t) {
    if (!t) return;
    free(t->pattern);
    free(t->merges);
    pmap_free(&t->ranks);
    free(t->tbytes);
    free(t->toff);
    splitter_close(&t->split);
    free(t->sc_tok);
    free(t->sc_next);
    free(t->sc_prev);
    free(t->sc_heap);
    bmap_free(&t->cache);
    free(t->cache_ids);
    free(t);
}

/* Build a tokenizer from a pattern and merges (copied). Each merge may only
 * use ids below 256 + its rank. Returns NULL with err. */
static tok_t *tok_build(const char *pattern, const int32_t (*merges)[2], int n_merges, char *err,
                        size_t errlen) {
    tok_t *t = calloc(1, sizeof *t);
    if (!t) goto oom;
    t->pattern = strdup(pattern);
    t->merges = malloc((size_t)(n_merges ? n_merges : 1) * sizeof *t->merges);
    t->toff = malloc((size_t)(TOK_N_BYTES + n_merges + 1) * sizeof *t->toff);
    if (!t->pattern || !t->merges || !t->toff) goto oom;
    t->n_merges = n_merges;
    size_t total = TOK_N_BYTES;
    for (int r = 0; r < n_merges; r++) {
        int32_t a = merges[r][0], b = merges[r][1];
        if (a < 0 || b < 0 || a >= TOK_N_BYTES + r || b >= TOK_N_BYTES + r) {
            util_errorf(err, errlen, "merge %d: [%d,%d] uses an id that does not exist before it",
                        r, (int)a, (int)b);
            goto fail;
        }
        uint64_t k = pair_key(a, b);
        if (pmap_get(&t->ranks, k) >= 0) {
            util_errorf(err, errlen, "merge %d: [%d,%d] appears twice", r, (int)a, (int)b);
            goto fail;
        }
        if (pmap_put(&t->ranks, k, r)) goto oom;
        t->merges[r][0] = a;
        t->merges[r][1] = b;
    }
    /* Token bytes: bytes are themselves, merge r is bytes(a) + bytes(b). */
    for (int i = 0; i <= TOK_N_BYTES; i++) t->toff[i] = (size_t)i;
    for (int r = 0; r < n_merges; r++) {
        int32_t a = merges[r][0], b = merges[r][1];
        size_t len = (t->toff[a + 1] - t->toff[a]) + (t->toff[b + 1] - t->toff[b]);
        /* A merge chain can double a token's length at every step: a
         * hand-made file could ask for exabytes, or wrap the sum. */
        if (len > TOK_MAX_TOKEN_BYTES || total > TOK_MAX_TOTAL_BYTES - len) {
            util_errorf(err, errlen, "merge %d: tokens longer than %d bytes", r,
                        TOK_MAX_TOKEN_BYTES);
            goto fail;
        }
        total += len;
        t->toff[TOK_N_BYTES + r + 1] = total;
    }
    t->tbytes = malloc(total);
    if (!t->tbytes) goto oom;
    for (int i = 0; i < TOK_N_BYTES; i++) t->tbytes[i] = (uint8_t)i;
    for (int r = 0; r < n_merges; r++) {
        int32_t a = merges[r][0], b = merges[r][1];
        size_t la = t->toff[a + 1] - t->toff[a], lb = t->toff[b + 1] - t->toff[b];
        uint8_t *dst = t->tbytes + t->toff[TOK_N_BYTES + r];
        memcpy(dst, t->tbytes + t->toff[a], la);
        memcpy(dst + la, t->tbytes + t->toff[b], lb);
    }
    if (splitter_init(&t->split, pattern, err, errlen)) goto fail;
    return t;
oom:
    util_errorf(err, errlen, "out of memory");
fail:
    tok_free(t);
    return NULL;
}

/* ---- encoding ---------------------------------------------------------------- */

static inline int32_t rank_of(const tok_t *t, int32_t a, int32_t b) {
    return pmap_get(&t->ranks, pair_key(a, b));
}

/* Min-heap of (rank << 32 | position): lowest rank first, leftmost among equals. */
static void heap_push_u64(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop_u64(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = v;
    return top;
}

/* Apply merges to one chunk, appending its ids to out. */
static int encode_chunk(tok_t *t, const uint8_t *s, size_t n, tok_ids_t *out) {
    if (n == 1 || t->n_merges == 0) {
        for (size_t i = 0; i < n; i++)
            if (tok_ids_push(out, s[i])) return -1;
        return 0;
    }
    if (n > INT32_MAX / 2) return -1;
    if (n > t->sc_cap) {
        size_t c = n > 2 * t->sc_cap ? n : 2 * t->sc_cap;
        int32_t *tk = realloc(t->sc_tok, c * sizeof *tk);
        if (tk) t->sc_tok = tk;
        int32_t *nx = realloc(t->sc_next, c * sizeof *nx);
        if (nx) t->sc_next = nx;
        int32_t *pv = realloc(t->sc_prev, c * sizeof *pv);
        if (pv) t->sc_prev = pv;
        uint64_t *hp = realloc(t->sc_heap, 2 * c * sizeof *hp);
        if (hp) t->sc_heap = hp;
        if (!tk || !nx || !pv || !hp) return -1;
        t->sc_cap = c;
    }
    int32_t *tk = t->sc_tok, *nx = t->sc_next, *pv = t->sc_prev;
    uint64_t *heap = t->sc_heap;
    size_t nh = 0;
    int32_t ni = (int32_t)n;
    for (int32_t i = 0; i < ni; i++) {
        tk[i] = s[i];
        nx[i] = i + 1;
        pv[i] = i - 1;
    }
    /* The heap holds n - 1 initial entries, and each merge pops one and
     * pushes at most two; merges are fewer than n, so 2n slots suffice. */
    for (int32_t i = 0; i + 1 < ni; i++) {
        int32_t r = rank_of(t, tk[i], tk[i + 1]);
        if (r >= 0) heap_push_u64(heap, &nh, ((uint64_t)r << 32) | (uint32_t)i);
    }
    while (nh) {
        uint64_t e = heap_pop_u64(heap, &nh);
        int32_t r = (int32_t)(e >> 32), i = (int32_t)(e & 0xffffffffu);
        if (tk[i] < 0) continue;
        int32_t j = nx[i];
        if (j >= ni || rank_of(t, tk[i], tk[j]) != r) continue;
        tk[i] = TOK_N_BYTES + r;
        tk[j] = -1;
        nx[i] = nx[j];
        if (nx[i] < ni) pv[nx[i]] = i;
        if (pv[i] >= 0) {
            int32_t r2 = rank_of(t, tk[pv[i]], tk[i]);
            if (r2 >= 0) heap_push_u64(heap, &nh, ((uint64_t)r2 << 32) | (uint32_t)pv[i]);
        }
        if (nx[i] < ni) {
            int32_t r2 = rank_of(t, tk[i], tk[nx[i]]);
            if (r2 >= 0) heap_push_u64(heap, &nh, ((uint64_t)r2 << 32) | (uint32_t)i);
        }
    }
    for (int32_t i = 0; i < ni; i = nx[i])
        if (tok_ids_push(out, tk[i])) return -1;
    return 0;
}

typedef struct {
    tok_t *t;
    tok_ids_t *out;
} enc_ctx_t;

static int encode_cb(void *ctx, const uint8_t *s, size_t n) {
    enc_ctx_t *c = ctx;
    tok_t *t = c->t;
    if (n > CACHE_MAX_CHUNK) return encode_chunk(t, s, n, c->out);
    long e = bmap_find(&t->cache, s, n, false);
    if (e == -2) return -1;
    if (e >= 0) {
        const bent_t *b = &t->cache.ents[e];
        if (util_grow(&c->out->ids, &c->out->cap, c->out->n + b->aux, sizeof *c->out->ids))
            return -1;
        memcpy(c->out->ids + c->out->n, t->cache_ids + b->val, b->aux * sizeof(int32_t));
        c->out->n += b->aux;
        return 0;
    }
    size_t start = c->out->n;
    if (encode_chunk(t, s, n, c->out)) return -1;
    if (t->cache.n >= CACHE_MAX_ENTRIES) return 0;
    size_t cnt = c->out->n - start;
    if (util_grow(&t->cache_ids, &t->cache_cap, t->cache_n + cnt, sizeof *t->cache_ids)) return -1;
    e = bmap_find(&t->cache, s, n, true);
    if (e < 0) return -1;
    memcpy(t->cache_ids + t->cache_n, c->out->ids + start, cnt * sizeof(int32_t));
    t->cache.ents[e].val = t->cache_n;
    t->cache.ents[e].aux = (uint32_t)cnt;
    t->cache_n += cnt;
    return 0;
}

int tok_encode(tok_t *t, const void *text, size_t len, tok_ids_t *out, char *err, size_t errlen) {
    enc_ctx_t c = {t, out};
    return split_each(&t->split, text, len, encode_cb, &c, err, errlen);
}

int tok_decode(const tok_t *t, const int32_t *ids, size_t n, char **out, size_t *outlen, char *err,
               size_t errlen) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l;
        if (!tok_token_bytes(t, ids[i], &l)) {
            util_errorf(err, errlen,
                        "decode: id %d at position %zu is outside the vocabulary of %d",
                        (int)ids[i], i, tok_vocab_size(t));
            return -1;
        }
        total += l;
    }
    char *buf = malloc(total + 1);
    if (!buf) {
        util_errorf(err, errlen, "out of memory");
        return -1;
    }
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l;
        const uint8_t *b = tok_token_bytes(t, ids[i], &l);
        memcpy(buf + pos, b, l);
        pos += l;
    }
    buf[pos] = 0;
    *out = buf;
    *outlen = pos;
    return 0;
}

/* ---- training ------------------------------------------------------------------ */

struct tok_trainer {
    splitter_t split;
    bmap_t chunks; /* chunk bytes -> count (val) */
    uint64_t bytes;
    bool finished;
    int64_t *counts; /* after finish: each merge's pair count when it was merged */
    int n_counts;
};

tok_trainer_t *tok_trainer_new(char *err, size_t errlen) {
    tok_trainer_t *tr = calloc(1, sizeof *tr);
    if (!tr) {
        util_errorf(err, errlen, "out of memory");
        return NULL;
    }
    if (splitter_init(&tr->split, TOK_PATTERN, err, errlen)) {
        free(tr);
        return NULL;
    }
    return tr;
}

void tok_trainer_free(tok_trainer_t *tr) {
    if (!tr) return;
    splitter_close(&tr->split);
    bmap_free(&tr->chunks);
    free(tr->counts);
    free(tr);
}

static int count_cb(void *ctx, const uint8_t *s, size_t n) {
    tok_trainer_t *tr = ctx;
    long e = bmap_find(&tr->chunks, s, n, true);
    if (e < 0) return -1;
    tr->chunks.ents[e].val++;
    return 0;
}

int tok_trainer_add(tok_trainer_t *tr, const void *text, size_t len, char *err, size_t errlen) {
    if (tr->finished) {
        util_errorf(err, errlen, "tokenizer trainer already finished");
        return -1;
    }
    if (split_each(&tr->split, text, len, count_cb, tr, err, errlen)) return -1;
    tr->bytes += len;
    return 0;
}

uint64_t tok_trainer_bytes(const tok_trainer_t *tr) {
    return tr->bytes;
}

size_t tok_trainer_unique_chunks(const tok_trainer_t *tr) {
    return tr->chunks.n;
}

/* A pair of adjacent ids during training. */
typedef struct {
    int32_t a, b;
    int64_t count;   /* occurrences, weighted by chunk counts */
    uint32_t *words; /* words that contain (or once contained) the pair; may repeat */
    uint32_t nw, capw;
    uint32_t stamp; /* merge number + 1 when last marked as touched */
} tpair_t;

/* A max-heap entry; stale when count differs from the pair's current count. */
typedef struct {
    int64_t count;
    uint32_t pair;
} hent_t;

typedef struct {
    /* words: distinct chunks as id sequences in one arena */
    int32_t *ids;
    size_t *woff;
    uint32_t *wlen;
    uint64_t *wcnt;
    uint32_t *wstamp;
    size_t nwords;
    /* pairs */
    tpair_t *pairs;
    size_t npairs, cappairs;
    pmap_t pidx;
    /* heap */
    hent_t *heap;
    size_t nheap, capheap;
    /* pairs whose count rose during the current merge */
    uint32_t *touched;
    size_t ntouched, captouched;
    uint32_t stamp;
} trainer_state_t;

static bool hent_before(const trainer_state_t *st, hent_t x, hent_t y) {
    if (x.count != y.count) return x.count > y.count;
    const tpair_t *p = &st->pairs[x.pair], *q = &st->pairs[y.pair];
    if (p->a != q->a) return p->a < q->a;
    return p->b < q->b;
}

static int hpush(trainer_state_t *st, hent_t v) {
    if (util_grow(&st->heap, &st->capheap, st->nheap + 1, sizeof *st->heap)) return -1;
    size_t i = st->nheap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hent_before(st, v, st->heap[p])) break;
        st->heap[i] = st->heap[p];
        i = p;
    }
    st->heap[i] = v;
    return 0;
}

static hent_t hpop(trainer_state_t *st) {
    hent_t top = st->heap[0], v = st->heap[--st->nheap];
    size_t i = 0, n = st->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && hent_before(st, st->heap[c + 1], st->heap[c])) c++;
        if (!hent_before(st, st->heap[c], v)) break;
        st->heap[i] = st->heap[c];
        i = c;
    }
    if (n) st->heap[i] = v;
    return top;
}

/* Add delta to pair (a, b) seen in word w; create the pair if new. A rise
 * records w on the pair's list and marks the pair touched. */
static int pair_add(trainer_state_t *st, int32_t a, int32_t b, int64_t delta, uint32_t w) {
    uint64_t k = pair_key(a, b);
    int32_t pi = pmap_get(&st->pidx, k);
    if (pi < 0) {
        if (st->npairs >= INT32_MAX) return -1;
        if (util_grow(&st->pairs, &st->cappairs, st->npairs + 1, sizeof *st->pairs)) return -1;
        pi = (int32_t)st->npairs;
        st->pairs[pi] = (tpair_t){.a = a, .b = b};
        if (pmap_put(&st->pidx, k, pi)) return -1;
        st->npairs++;
    }
    tpair_t *p = &st->pairs[pi];
    p->count += delta;
    if (delta > 0) {
        if (!p->nw || p->words[p->nw - 1] != w) {
            if (p->nw == p->capw) {
                uint32_t c = p->capw ? p->capw * 2 : 4;
                uint32_t *nwds = realloc(p->words, c * sizeof *nwds);
                if (!nwds) return -1;
                p->words = nwds;
                p->capw = c;
            }
            p->words[p->nw++] = w;
        }
        if (p->stamp != st->stamp) {
            p->stamp = st->stamp;
            if (util_grow(&st->touched, &st->captouched, st->ntouched + 1, sizeof *st->touched))
                return -1;
            st->touched[st->ntouched++] = (uint32_t)pi;
        }
    }
    return 0;
}

/* Replace every non-overlapping (a, b), left to right, by c in word w and
 * update the neighbouring pair counts. Only pairs at merge sites change:
 * at a site i (old ids t[i] = a, t[i+1] = b) the pairs (t[i-1], a) and
 * (b, t[i+2]) disappear and (u[j-1], c) and (c, t[i+2]) appear, except that
 * two adjacent sites share the pair between them, which becomes (c, c) once. */
static int merge_word(trainer_state_t *st, uint32_t w, int32_t a, int32_t b, int32_t c) {
    int32_t *t = st->ids + st->woff[w];
    size_t n = st->wlen[w];
    int64_t cnt = (int64_t)st->wcnt[w];
    size_t i = 0, j = 0;
    size_t last_end = SIZE_MAX; /* old index of the b of the previous site */
    while (i < n) {
        if (i + 1 < n && t[i] == a && t[i + 1] == b) {
            if (pair_add(st, a, b, -cnt, w)) return -1;
            if (i > 0 && last_end != i - 1 && pair_add(st, t[i - 1], a, -cnt, w)) return -1;
            if (j > 0 && pair_add(st, t[j - 1], c, cnt, w)) return -1;
            if (i + 2 < n) {
                if (pair_add(st, b, t[i + 2], -cnt, w)) return -1;
                bool next_site = t[i + 2] == a && i + 3 < n && t[i + 3] == b;
                if (!next_site && pair_add(st, c, t[i + 2], cnt, w)) return -1;
            }
            t[j++] = c;
            last_end = i + 1;
            i += 2;
        } else {
            t[j++] = t[i++];
        }
    }
    st->wlen[w] = (uint32_t)j;
    return 0;
}

static void state_free(trainer_state_t *st) {
    free(st->woff);
    free(st->wlen);
    free(st->wcnt);
    free(st->wstamp);
    free(st->ids);
    for (size_t i = 0; i < st->npairs; i++) free(st->pairs[i].words);
    free(st->pairs);
    pmap_free(&st->pidx);
    free(st->heap);
    free(st->touched);
}

/* The words of st: each distinct chunk of tr as its bytes, weighted by its
 * count. Frees tr's chunk text. Returns 0, or -1 when out of memory. */
static int state_load_words(trainer_state_t *st, tok_trainer_t *tr) {
    st->nwords = tr->chunks.n;
    size_t nw = st->nwords ? st->nwords : 1;
    st->woff = malloc(nw * sizeof *st->woff);
    st->wlen = malloc(nw * sizeof *st->wlen);
    st->wcnt = malloc(nw * sizeof *st->wcnt);
    st->wstamp = calloc(nw, sizeof *st->wstamp);
    st->ids = malloc((tr->chunks.nbytes ? tr->chunks.nbytes : 1) * sizeof *st->ids);
    if (!st->woff || !st->wlen || !st->wcnt || !st->wstamp || !st->ids) return -1;
    for (size_t w = 0, off = 0; w < st->nwords; w++) {
        const bent_t *e = &tr->chunks.ents[w];
        st->woff[w] = off;
        st->wlen[w] = e->len;
        st->wcnt[w] = e->val;
        for (uint32_t k = 0; k < e->len; k++) st->ids[off + k] = tr->chunks.bytes[e->off + k];
        off += e->len;
    }
    /* The chunk text is no longer needed: free it before the pair tables grow. */
    bmap_free(&tr->chunks);
    return 0;
}

/* Every adjacent pair of every word, counted, and the heap over them.
 * Returns 0, or -1 when out of memory. */
static int state_count_pairs(trainer_state_t *st) {
    st->stamp = 1;
    for (size_t w = 0; w < st->nwords; w++) {
        const int32_t *ids = st->ids + st->woff[w];
        for (uint32_t k = 0; k + 1 < st->wlen[w]; k++)
            if (pair_add(st, ids[k], ids[k + 1], (int64_t)st->wcnt[w], (uint32_t)w)) return -1;
    }
    for (size_t p = 0; p < st->npairs; p++)
        if (hpush(st, (hent_t){st->pairs[p].count, (uint32_t)p})) return -1;
    return 0;
}

/* The most frequent pair (ties: smallest ids) into *pi, UINT32_MAX when no
 * pair is left. Stale heap entries are dropped or pushed again at their
 * current count. Returns 0, or -1 when out of memory. */
static int pop_best_pair(trainer_state_t *st, uint32_t *pi) {
    *pi = UINT32_MAX;
    while (st->nheap) {
        hent_t e = hpop(st);
        int64_t cur = st->pairs[e.pair].count;
        if (cur == e.count && cur > 0) {
            *pi = e.pair;
            return 0;
        }
        if (cur > 0 && hpush(st, (hent_t){cur, e.pair})) return -1;
    }
    return 0;
}

/* Merge pair pi into the new id c in every word that holds it (merge number
 * r, 0-based), then push the pairs whose count rose. Returns 0, or -1 when
 * out of memory. */
static int apply_merge(trainer_state_t *st, uint32_t pi, int32_t c, int r) {
    int32_t a = st->pairs[pi].a, b = st->pairs[pi].b;
    /* Detach the word list: pair_add may move the pairs array. */
    uint32_t *wl = st->pairs[pi].words, nwl = st->pairs[pi].nw;
    st->pairs[pi].words = NULL;
    st->pairs[pi].nw = st->pairs[pi].capw = 0;
    st->stamp = (uint32_t)r + 2;
    st->ntouched = 0;
    for (uint32_t k = 0; k < nwl; k++) {
        uint32_t w = wl[k];
        if (st->wstamp[w] == st->stamp) continue;
        st->wstamp[w] = st->stamp;
        if (merge_word(st, w, a, b, c)) {
            free(wl);
            return -1;
        }
    }
    free(wl);
    for (size_t k = 0; k < st->ntouched; k++) {
        uint32_t p = st->touched[k];
        if (st->pairs[p].count > 0 && hpush(st, (hent_t){st->pairs[p].count, p})) return -1;
    }
    return 0;
}

tok_t *tok_trainer_finish(tok_trainer_t *tr, int n_vocab, FILE *log, char *err, size_t errlen) {
    trainer_state_t st = {0};
    int32_t(*merges)[2] = NULL;
    tok_t *t = NULL;
    double t0 = util_now();
    if (tr->finished) {
        util_errorf(err, errlen, "tokenizer trainer already finished");
        return NULL;
    }
    tr->finished = true;
    if (n_vocab < TOK_N_BYTES || n_vocab > TOK_MAX_VOCAB) {
        util_errorf(err, errlen, "vocab size %d is outside [%d, %d]", n_vocab, TOK_N_BYTES,
                    TOK_MAX_VOCAB);
        return NULL;
    }
    int want = n_vocab - TOK_N_BYTES;
    merges = malloc((size_t)(want ? want : 1) * sizeof *merges);
    tr->counts = malloc((size_t)(want ? want : 1) * sizeof *tr->counts);
    if (!merges || !tr->counts) goto oom;
    if (state_load_words(&st, tr) < 0 || state_count_pairs(&st) < 0) goto oom;
    if (log)
        fprintf(log, "tok: %zu distinct chunks, %zu pairs; %d merges to learn\n", st.nwords,
                st.npairs, want);

    /* BPE: merge the most frequent pair into a new id, want times. */
    int every = want >= 10 ? want / 10 : 1;
    for (int r = 0; r < want; r++) {
        uint32_t pi;
        if (pop_best_pair(&st, &pi) < 0) goto oom;
        if (pi == UINT32_MAX) {
            util_errorf(
                err, errlen,
                "the text allows only %d merges (vocab %d), fewer than the %d that vocab %d "
                "needs",
                r, TOK_N_BYTES + r, want, n_vocab);
            goto fail;
        }
        int32_t a = st.pairs[pi].a, b = st.pairs[pi].b, c = TOK_N_BYTES + r;
        int64_t best = st.pairs[pi].count;
        merges[r][0] = a;
        merges[r][1] = b;
        tr->counts[r] = best;
        tr->n_counts = r + 1;
        if (apply_merge(&st, pi, c, r) < 0) goto oom;
        if (log && ((r + 1) % every == 0 || r + 1 == want))
            fprintf(log, "tok: merge %d/%d: [%d,%d] -> %d (count %lld), %.2f s\n", r + 1, want,
                    (int)a, (int)b, (int)c, (long long)best, util_now() - t0);
    }
    t = tok_build(TOK_PATTERN, (const int32_t(*)[2])merges, want, err, errlen);
    if (!t) goto fail;
    free(merges);
    state_free(&st);
    return t;
oom:
    util_errorf(err, errlen, "out of memory");
fail:
    free(merges);
    state_free(&st);
    return NULL;
}

int64_t tok_trainer_merge_count(const tok_trainer_t *tr, int rank) {
    return rank >= 0 && rank < tr->n_counts ? tr->counts[rank] : 0;
}

tok_t *tok_train(const char *const *docs, const size_t *lens, size_t n_docs, int n_vocab, FILE *log,
                 char *err, size_t errlen) {
    tok_trainer_t *tr = tok_trainer_new(err, errlen);
    if (!tr) return NULL;
    tok_t *t = NULL;
    for (size_t i = 0; i < n_docs; i++)
        if (tok_trainer_add(tr, docs[i], lens[i], err, errlen)) goto done;
    t = tok_trainer_finish(tr, n_vocab, log, err, errlen);
done:
    tok_trainer_free(tr);
    return t;
}

/* ---- tokenizer.json ------------------------------------------------------------ */

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

int tok_save(const tok_t *t, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "w");
    if (!f) {
        util_errorf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f, "{\n  \"version\": 1,\n  \"type\": \"byte-level-bpe\",\n  \"pattern\": ");
    json_string(f, t->pattern);
    fprintf(f, ",\n  \"n_bytes\": %d,\n  \"merges\": [", TOK_N_BYTES);
    for (int r = 0; r < t->n_merges; r++)
        fprintf(f, "%s\n    [%d, %d]", r ? "," : "", (int)t->merges[r][0], (int)t->merges[r][1]);
    fprintf(f, "%s],\n  \"specials\": [", t->n_merges ? "\n  " : "");
    for (int i = 0; i < TOK_N_SPECIAL; i++) {
        fprintf(f, "%s\n    {\"name\": ", i ? "," : "");
        json_string(f, special_names[i]);
        fprintf(f, ", \"id\": %d}", tok_n_regular(t) + i);
    }
    fprintf(f, "\n  ]\n}\n");
    if (ferror(f) | fclose(f)) {
        util_errorf(err, errlen, "%s: write failed: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

static bool json_int(const cJSON *v, int *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= -2147483648.0 && d <= 2147483647.0) || d != (double)(int)d) return false;
    *out = (int)d;
    return true;
}

tok_t *tok_load(const char *path, char *err, size_t errlen) {
    size_t len;
    char *text = util_read_file(path, (size_t)1 << 30, &len, err, errlen);
    if (!text) return NULL;
    cJSON *root = cJSON_ParseWithLength(text, len);
    int32_t(*merges)[2] = NULL;
    tok_t *t = NULL;
    char why[200];
    if (!root || !cJSON_IsObject(root)) {
        util_errorf(err, errlen, "%s: not a JSON object", path);
        goto done;
    }
    int version, nbytes;
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(root, "pattern");
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(root, "merges");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(root, "specials");
    if (!json_int(cJSON_GetObjectItemCaseSensitive(root, "version"), &version) || version != 1) {
        util_errorf(err, errlen, "%s: \"version\" must be 1", path);
        goto done;
    }
    if (!json_int(cJSON_GetObjectItemCaseSensitive(root, "n_bytes"), &nbytes) ||
        nbytes != TOK_N_BYTES) {
        util_errorf(err, errlen, "%s: \"n_bytes\" must be %d", path, TOK_N_BYTES);
        goto done;
    }
    if (!cJSON_IsString(pat) || !cJSON_IsArray(ms) || !cJSON_IsArray(sp)) {
        util_errorf(err, errlen,
                    "%s: needs \"pattern\" (string), \"merges\" and \"specials\" (arrays)", path);
        goto done;
    }
    int nm = cJSON_GetArraySize(ms);
    if (nm > TOK_MAX_VOCAB - TOK_N_BYTES) {
        util_errorf(err, errlen, "%s: %d merges is too many", path, nm);
        goto done;
    }
    merges = malloc((size_t)(nm ? nm : 1) * sizeof *merges);
    if (!merges) {
        util_errorf(err, errlen, "out of memory");
        goto done;
    }
    int r = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, ms) {
        int a, b;
        if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != 2 || !json_int(m->child, &a) ||
            !json_int(m->child->next, &b)) {
            util_errorf(err, errlen, "%s: merge %d is not a pair of ids [a, b]", path, r);
            goto done;
        }
        merges[r][0] = a;
        merges[r][1] = b;
        r++;
    }
    if (cJSON_GetArraySize(sp) != TOK_N_SPECIAL) {
        util_errorf(err, errlen, "%s: expected %d specials", path, TOK_N_SPECIAL);
        goto done;
    }
    int k = 0;
    cJSON_ArrayForEach(m, sp) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(m, "name");
        int id;
        if (!cJSON_IsString(name) || strcmp(name->valuestring, special_names[k]) ||
            !json_int(cJSON_GetObjectItemCaseSensitive(m, "id"), &id) ||
            id != TOK_N_BYTES + nm + k) {
            util_errorf(err, errlen, "%s: special %d must be {\"name\": \"%s\", \"id\": %d}", path,
                        k, special_names[k], TOK_N_BYTES + nm + k);
            goto done;
        }
        k++;
    }
    t = tok_build(pat->valuestring, (const int32_t(*)[2])merges, nm, why, sizeof why);
    if (!t) util_errorf(err, errlen, "%s: %s", path, why);
done:
    cJSON_Delete(root);
    free(merges);
    free(text);
    return t;
}

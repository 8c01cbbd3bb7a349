/* test_tok.c - the BPE tokenizer: round trips over any bytes, the byte-only
 * vocabulary, determinism, agreement with a naive reference (recount every
 * pair per merge; merge by lowest rank per chunk), the golden fixture,
 * save/load, and a larger text (its speed is `make bench-tok`).
 *
 * The golden fixture tests/fixtures/tok/golden_expected.txt was produced by
 * this code from golden.txt; after a deliberate change to the tokenizer,
 * regenerate it with
 *     NIGHTSHIFT_REGEN_GOLDEN=1 build/nightshift-tests --filter 'tok/golden'
 * (from the repository root) and review the diff. */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <criterion/criterion.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/rng.h"
#include "tests/testutil.h"
#include "engine/tok.h"

/* ---- helpers ---------------------------------------------------------------- */

/* tests/fixtures/tok/name under $NIGHTSHIFT_SRC, or under the current
 * directory when it is not set (see the regeneration note above); the caller
 * frees. */
static char *fixture_path(const char *name) {
    const char *src = getenv("NIGHTSHIFT_SRC");
    return tu_path("%s/tests/fixtures/tok/%s", src ? src : ".", name);
}

static char *read_fixture(const char *name, size_t *len) {
    char *p = fixture_path(name);
    char *buf = tu_read_all(p, len);
    free(p);
    return buf;
}

static tok_t *train1(const void *text, size_t len, int vocab) {
    char err[256] = "";
    const char *docs[1] = {text};
    tok_t *t = tok_train(docs, &len, 1, vocab, NULL, err, sizeof err);
    cr_assert_not_null(t, "tok_train: %s", err);
    return t;
}

static void assert_roundtrip(tok_t *t, const void *text, size_t len) {
    char err[256] = "";
    tok_ids_t ids = {0};
    cr_assert_eq(tok_encode(t, text, len, &ids, err, sizeof err), 0, "encode: %s", err);
    for (size_t i = 0; i < ids.n; i++)
        cr_assert(ids.ids[i] >= 0 && ids.ids[i] < tok_n_regular(t), "id %d is not ordinary",
                  ids.ids[i]);
    char *out;
    size_t outlen;
    cr_assert_eq(tok_decode(t, ids.ids, ids.n, &out, &outlen, err, sizeof err), 0, "decode: %s",
                 err);
    cr_assert_eq(outlen, len, "decoded %zu bytes, expected %zu", outlen, len);
    cr_assert(!memcmp(out, text, len), "decoded bytes differ");
    free(out);
    tok_ids_free(&ids);
}

/* A mixed sample: ASCII, Korean, emoji, invalid UTF-8 (0xff, a truncated
 * sequence, lone continuation bytes, an overlong encoding) and NUL bytes. */
static const char mixed[] =
    "Hello, world! It's 2024; we'll see 12345 things.\n\n"
    "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4 \xed\x85\x8d\xec\x8a\xa4\xed\x8a\xb8 "
    "\xf0\x9f\x98\x80\xf0\x9f\x9a\x80 emoji \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd\n"
    "bad: \xff\xfe x \xe2\x82 y \x80\x80\xbf z \xc0\xaf end\n"
    "nul:\0inside\0\0 and tail \xf0\x9f\x98";

/* ---- round trips --------------------------------------------------------------- */

Test(tok, roundtrip_ascii) {
    const char *text = "The quick brown fox jumps over the lazy dog. The dog sleeps!\n"
                       "  indented   spaces\t\ttabs\r\nwindows line; numbers 3.14159 and 1000000.";
    tok_t *t = train1(text, strlen(text), 300);
    cr_assert_eq(tok_n_merges(t), 44);
    assert_roundtrip(t, text, strlen(text));
    const char *other = "A sentence the tokenizer never saw: zebras quickly jumped.";
    assert_roundtrip(t, other, strlen(other));
    assert_roundtrip(t, "", 0);
    assert_roundtrip(t, " ", 1);
    tok_free(t);
}

Test(tok, roundtrip_utf8_and_invalid) {
    size_t len = sizeof mixed - 1;
    tok_t *t = train1(mixed, len, 330);
    assert_roundtrip(t, mixed, len);
    /* Each piece alone, including ones that start or end mid-sequence. */
    for (size_t cut = 0; cut < len; cut += 7) assert_roundtrip(t, mixed + cut, len - cut);
    const char *pieces[] = {"\xff", "\x80", "\xe2\x82", "\0", "\xed\x95\x9c", "\xf0\x9f\x98\x80"};
    size_t plen[] = {1, 1, 2, 1, 3, 4};
    for (size_t i = 0; i < sizeof plen / sizeof plen[0]; i++)
        assert_roundtrip(t, pieces[i], plen[i]);
    tok_free(t);
}

Test(tok, roundtrip_random_bytes) {
    /* Random bytes (mostly invalid UTF-8) and long runs stress the splitter's
     * gaps and the encoder's heap. */
    rng_t r;
    rng_seed(&r, 7);
    size_t n = 200000;
    unsigned char *buf = malloc(n);
    for (size_t i = 0; i < n; i++) {
        uint64_t k = rng_below(&r, 10);
        buf[i] = k < 4   ? (unsigned char)rng_below(&r, 256)
                 : k < 8 ? (unsigned char)"etaoin shrdlu"[rng_below(&r, 13)]
                         : (unsigned char)"\xc3\xa9\xe2\x82\xac\n 0123"[rng_below(&r, 11)];
    }
    tok_t *t = train1(buf, n, 600);
    assert_roundtrip(t, buf, n);
    size_t run = 100000;
    char *long_run = malloc(run);
    memset(long_run, 'a', run);
    assert_roundtrip(t, long_run, run);
    memset(long_run, ' ', run);
    assert_roundtrip(t, long_run, run);
    for (size_t i = 0; i < run; i++) long_run[i] = (char)(i % 3 ? 0xe2 : 0x82);
    assert_roundtrip(t, long_run, run);
    free(long_run);
    free(buf);
    tok_free(t);
}

Test(tok, bytes_only_vocab) {
    size_t len = sizeof mixed - 1;
    tok_t *t = train1(mixed, len, 256);
    cr_assert_eq(tok_n_merges(t), 0);
    cr_assert_eq(tok_vocab_size(t), 260);
    cr_assert_eq(tok_bos_id(t), 256);
    cr_assert_eq(tok_special_id(t, TOK_RESERVED), 259);
    char err[256];
    tok_ids_t ids = {0};
    cr_assert_eq(tok_encode(t, mixed, len, &ids, err, sizeof err), 0);
    cr_assert_eq(ids.n, len);
    for (size_t i = 0; i < len; i++) cr_assert_eq(ids.ids[i], (unsigned char)mixed[i]);
    tok_ids_free(&ids);
    tok_free(t);
}

Test(tok, specials_and_token_bytes) {
    const char *text = "aaab aaab aaab <|bos|>";
    tok_t *t = train1(text, strlen(text), 258);
    int bos = tok_bos_id(t);
    cr_assert_eq(bos, 258);
    cr_assert(tok_is_special(t, bos) && tok_is_special(t, 261) && !tok_is_special(t, 257));
    size_t l;
    const uint8_t *b = tok_token_bytes(t, bos, &l);
    cr_assert(l == 7 && !memcmp(b, "<|bos|>", 7));
    cr_assert_null(tok_token_bytes(t, 262, &l));
    cr_assert_null(tok_token_bytes(t, -1, &l));
    /* Text that spells a special token is encoded as ordinary bytes. */
    char err[256];
    tok_ids_t ids = {0};
    cr_assert_eq(tok_encode(t, "<|bos|>", 7, &ids, err, sizeof err), 0);
    for (size_t i = 0; i < ids.n; i++) cr_assert_lt(ids.ids[i], 258);
    /* Specials decode to their names; ids outside the vocabulary fail. */
    int32_t seq[] = {bos, 'h', 'i', tok_special_id(t, TOK_EOS)};
    char *out;
    size_t outlen;
    cr_assert_eq(tok_decode(t, seq, 4, &out, &outlen, err, sizeof err), 0);
    cr_assert_str_eq(out, "<|bos|>hi<|eos|>");
    free(out);
    int32_t badseq[] = {'a', 262};
    cr_assert_eq(tok_decode(t, badseq, 2, &out, &outlen, err, sizeof err), -1);
    cr_assert(strstr(err, "262"), "%s", err);
    tok_ids_free(&ids);
    tok_free(t);
}

Test(tok, digits_split_in_threes_and_contractions) {
    /* The split keeps at most three digits together and splits "'ll" off its
     * word, so no merge may ever join across those boundaries. */
    const char *text = "1234567 1234567 1234567 you'll we'll they'll it's it's 9876543210";
    tok_t *t = train1(text, strlen(text), 280);
    for (int id = 256; id < tok_n_regular(t); id++) {
        size_t l;
        const uint8_t *b = tok_token_bytes(t, id, &l);
        int digits = 0;
        for (size_t i = 0; i < l; i++) digits += b[i] >= '0' && b[i] <= '9';
        cr_assert_leq(digits, 3, "token %d joins %d digits", id, digits);
        cr_assert(!(l > 1 && b[0] == '\'' && memchr(b, 'u', l)), "token %d crosses \"'\"", id);
        cr_assert(!memmem(b, l, "u'", 2), "token %d crosses \"'\"", id);
    }
    tok_free(t);
}

Test(tok, too_few_pairs_and_bad_vocab) {
    char err[256] = "";
    const char *docs[1] = {"abab"};
    size_t len = 4;
    /* "abab" gives merges (a,b) then (ab,ab); a third is impossible. */
    tok_t *t = tok_train(docs, &len, 1, 259, NULL, err, sizeof err);
    cr_assert_null(t);
    cr_assert(strstr(err, "only 2 merges"), "%s", err);
    t = tok_train(docs, &len, 1, 255, NULL, err, sizeof err);
    cr_assert_null(t);
    cr_assert(strstr(err, "255"), "%s", err);
    t = tok_train(docs, &len, 1, 258, NULL, err, sizeof err);
    cr_assert_not_null(t, "%s", err);
    tok_free(t);
}

/* ---- the naive reference -------------------------------------------------------------- */

typedef struct {
    int32_t *ids;
    size_t n;
} seq_t;

/* Split like tok.c (regex matches plus the gaps between them), independently. */
static size_t naive_split(const char *text, size_t len, seq_t **out) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)TOK_PATTERN, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
    cr_assert_not_null(re);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    seq_t *seqs = NULL;
    size_t n = 0, pos = 0;
    while (pos < len) {
        int rc = pcre2_match(re, (PCRE2_SPTR)text, len, pos, 0, md, NULL);
        size_t ms = len, me = len;
        if (rc >= 0) {
            ms = pcre2_get_ovector_pointer(md)[0];
            me = pcre2_get_ovector_pointer(md)[1];
        }
        size_t bounds[2][2] = {{pos, ms}, {ms, me}};
        for (int k = 0; k < 2; k++) {
            if (bounds[k][1] <= bounds[k][0]) continue;
            seqs = realloc(seqs, (n + 1) * sizeof *seqs);
            seqs[n].n = bounds[k][1] - bounds[k][0];
            seqs[n].ids = malloc(seqs[n].n * sizeof(int32_t));
            for (size_t i = 0; i < seqs[n].n; i++)
                seqs[n].ids[i] = (unsigned char)text[bounds[k][0] + i];
            n++;
        }
        pos = me;
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    *out = seqs;
    return n;
}

static void merge_seq(seq_t *s, int32_t a, int32_t b, int32_t c) {
    size_t j = 0;
    for (size_t i = 0; i < s->n;) {
        if (i + 1 < s->n && s->ids[i] == a && s->ids[i + 1] == b) {
            s->ids[j++] = c;
            i += 2;
        } else {
            s->ids[j++] = s->ids[i++];
        }
    }
    s->n = j;
}

/* Recount every pair of every chunk occurrence for each merge. Returns the
 * number of merges learned into merges[][2]. */
static int naive_train(const char *text, size_t len, int n_merges, int32_t (*merges)[2]) {
    seq_t *seqs;
    size_t ns = naive_split(text, len, &seqs);
    int V = 256 + n_merges;
    long *counts = malloc((size_t)V * V * sizeof *counts);
    int r = 0;
    for (; r < n_merges; r++) {
        memset(counts, 0, (size_t)V * V * sizeof *counts);
        for (size_t s = 0; s < ns; s++)
            for (size_t i = 0; i + 1 < seqs[s].n; i++)
                counts[(size_t)seqs[s].ids[i] * V + seqs[s].ids[i + 1]]++;
        long best = 0;
        size_t bi = 0;
        for (size_t i = 0; i < (size_t)V * V; i++)
            if (counts[i] > best) best = counts[i], bi = i; /* first = smallest (a, b) */
        if (!best) break;
        merges[r][0] = (int32_t)(bi / V);
        merges[r][1] = (int32_t)(bi % V);
        for (size_t s = 0; s < ns; s++) merge_seq(&seqs[s], merges[r][0], merges[r][1], 256 + r);
    }
    for (size_t s = 0; s < ns; s++) free(seqs[s].ids);
    free(seqs);
    free(counts);
    return r;
}

/* Encode by repeatedly merging the lowest-rank pair present, all occurrences. */
static void naive_encode(const char *text, size_t len, int32_t (*merges)[2], int nm,
                         tok_ids_t *out) {
    seq_t *seqs;
    size_t ns = naive_split(text, len, &seqs);
    for (size_t s = 0; s < ns; s++) {
        for (;;) {
            int best = nm;
            for (size_t i = 0; i + 1 < seqs[s].n; i++)
                for (int r = 0; r < best; r++)
                    if (merges[r][0] == seqs[s].ids[i] && merges[r][1] == seqs[s].ids[i + 1]) {
                        best = r;
                        break;
                    }
            if (best == nm) break;
            merge_seq(&seqs[s], merges[best][0], merges[best][1], 256 + best);
        }
        for (size_t i = 0; i < seqs[s].n; i++) {
            out->ids = realloc(out->ids, (out->n + 1) * sizeof(int32_t));
            out->ids[out->n++] = seqs[s].ids[i];
        }
        free(seqs[s].ids);
    }
    free(seqs);
}

static void check_against_naive(const char *text, size_t len, int n_merges) {
    int32_t(*ref)[2] = malloc((size_t)n_merges * sizeof *ref);
    int got = naive_train(text, len, n_merges, ref);
    cr_assert_eq(got, n_merges, "the reference ran out of pairs at %d", got);
    tok_t *t = train1(text, len, 256 + n_merges);
    for (int r = 0; r < n_merges; r++) {
        int32_t a, b;
        tok_merge(t, r, &a, &b);
        cr_assert(a == ref[r][0] && b == ref[r][1], "merge %d: [%d,%d], reference [%d,%d]", r, a, b,
                  ref[r][0], ref[r][1]);
    }
    char err[256];
    tok_ids_t ids = {0}, want = {0};
    cr_assert_eq(tok_encode(t, text, len, &ids, err, sizeof err), 0);
    naive_encode(text, len, ref, n_merges, &want);
    cr_assert_eq(ids.n, want.n, "encode: %zu ids, reference %zu", ids.n, want.n);
    for (size_t i = 0; i < ids.n; i++)
        cr_assert_eq(ids.ids[i], want.ids[i], "encode: id %zu differs", i);
    tok_ids_free(&ids);
    tok_ids_free(&want);
    tok_free(t);
    free(ref);
}

Test(tok, matches_naive_reference_golden) {
    size_t len;
    char *text = read_fixture("golden.txt", &len);
    check_against_naive(text, len, 200);
    free(text);
}

Test(tok, matches_naive_reference_repetitive) {
    /* Runs of one letter and of alternating pairs exercise overlapping and
     * adjacent merge sites ("aaaa", "abab"), and the mixed sample adds
     * multi-byte and invalid sequences. */
    const char *text = "aaaaaaa aaaa aaa aa a abababab abab aba ba bababa aabbaabb "
                       "zzz zzzz zz xyxyxy xyx yxy 111111111 00000 ......... !!!!";
    check_against_naive(text, strlen(text), 40);
    check_against_naive(mixed, sizeof mixed - 1, 60);
}

/* ---- golden ------------------------------------------------------------------------- */

#define GOLDEN_VOCAB 320
#define GOLDEN_SHOW  24
static const char golden_sentence[] =
    "The tokenizer turns text into numbers, and that's a good sign.";

static void escape_bytes(FILE *f, const uint8_t *b, size_t l) {
    for (size_t i = 0; i < l; i++) {
        if (b[i] >= 0x21 && b[i] < 0x7f && b[i] != '\\')
            fputc(b[i], f);
        else
            fprintf(f, "\\x%02x", b[i]);
    }
}

/* The expected-file text for tokenizer t. Caller frees. */
static char *golden_text(tok_t *t) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fprintf(f, "# Generated by tests/test_tok.c (tok/golden) from golden.txt at vocab %d.\n",
            GOLDEN_VOCAB);
    fprintf(f, "# Regenerate: NIGHTSHIFT_REGEN_GOLDEN=1 build/nightshift-tests --filter "
               "'tok/golden'\n");
    fprintf(f, "# Bytes outside printable ASCII (and space, backslash) are written \\xNN.\n");
    fprintf(f, "merges %d\n", tok_n_merges(t));
    for (int r = 0; r < GOLDEN_SHOW; r++) {
        int32_t a, b;
        size_t l;
        tok_merge(t, r, &a, &b);
        fprintf(f, "merge %d: %d %d -> %d ", r, a, b, 256 + r);
        const uint8_t *bytes = tok_token_bytes(t, 256 + r, &l);
        escape_bytes(f, bytes, l);
        fputc('\n', f);
    }
    char err[256];
    tok_ids_t ids = {0};
    cr_assert_eq(tok_encode(t, golden_sentence, strlen(golden_sentence), &ids, err, sizeof err), 0);
    fprintf(f, "sentence %s\nids", golden_sentence);
    for (size_t i = 0; i < ids.n; i++) fprintf(f, " %d", ids.ids[i]);
    fprintf(f, "\npieces");
    for (size_t i = 0; i < ids.n; i++) {
        size_t l;
        const uint8_t *b = tok_token_bytes(t, ids.ids[i], &l);
        fputc(' ', f);
        escape_bytes(f, b, l);
    }
    fputc('\n', f);
    tok_ids_free(&ids);
    fclose(f);
    return buf;
}

Test(tok, golden) {
    size_t len;
    char *text = read_fixture("golden.txt", &len);
    tok_t *t = train1(text, len, GOLDEN_VOCAB);
    char *got = golden_text(t);
    char *path = fixture_path("golden_expected.txt");
    if (getenv("NIGHTSHIFT_REGEN_GOLDEN")) tu_write(path, got);
    size_t elen;
    char *want = tu_read_all(path, &elen);
    cr_assert_str_eq(got, want, "golden mismatch; got:\n%s", got);
    free(want);
    free(path);
    free(got);
    tok_free(t);
    free(text);
}

/* ---- persistence --------------------------------------------------------------- */

Test(tok, deterministic_and_save_load) {
    size_t len;
    char *text = read_fixture("golden.txt", &len);
    char *dir = tu_tmpdir();
    char *p1 = tu_path("%s/a.json", dir), *p2 = tu_path("%s/b.json", dir);
    char err[256] = "";
    tok_t *t1 = train1(text, len, 400), *t2 = train1(text, len, 400);
    cr_assert_eq(tok_save(t1, p1, err, sizeof err), 0, "%s", err);
    cr_assert_eq(tok_save(t2, p2, err, sizeof err), 0, "%s", err);
    size_t l1, l2;
    char *s1 = tu_read_all(p1, &l1), *s2 = tu_read_all(p2, &l2);
    cr_assert(l1 == l2 && !memcmp(s1, s2, l1), "two trainings gave different tokenizer.json");
    cr_assert(strstr(s1, "\"<|reserved|>\", \"id\": 403"), "%s", s1);

    tok_t *t3 = tok_load(p1, err, sizeof err);
    cr_assert_not_null(t3, "%s", err);
    cr_assert_eq(tok_vocab_size(t3), 404);
    for (int r = 0; r < tok_n_merges(t1); r++) {
        int32_t a1, b1, a3, b3;
        tok_merge(t1, r, &a1, &b1);
        tok_merge(t3, r, &a3, &b3);
        cr_assert(a1 == a3 && b1 == b3);
    }
    tok_ids_t i1 = {0}, i3 = {0};
    cr_assert_eq(tok_encode(t1, text, len, &i1, err, sizeof err), 0);
    cr_assert_eq(tok_encode(t3, text, len, &i3, err, sizeof err), 0);
    cr_assert(i1.n == i3.n && !memcmp(i1.ids, i3.ids, i1.n * sizeof(int32_t)));
    /* Saving the loaded tokenizer reproduces the file byte for byte. */
    cr_assert_eq(tok_save(t3, p2, err, sizeof err), 0);
    free(s2);
    s2 = tu_read_all(p2, &l2);
    cr_assert(l1 == l2 && !memcmp(s1, s2, l1));

    tok_ids_free(&i1);
    tok_ids_free(&i3);
    tok_free(t1);
    tok_free(t2);
    tok_free(t3);
    free(s1);
    free(s2);
    free(p1);
    free(p2);
    free(text);
    tu_rmrf(dir);
    free(dir);
}

Test(tok, load_rejects_bad_files) {
    char *dir = tu_tmpdir();
    char *p = tu_path("%s/t.json", dir);
    /* 64 merges that each double a token: 2^64 bytes, a wrapped size_t */
    char doubling[64 * 16] = "[[0, 0]";
    for (int r = 1; r < 64; r++)
        snprintf(doubling + strlen(doubling), sizeof doubling - strlen(doubling), ", [%d, %d]",
                 255 + r, 255 + r);
    strcat(doubling, "]");
    struct {
        const char *merges;
        int first_special;
        const char *expect;
    } cases[] = {
        {"[[104, 105]]", 257, NULL},
        {"[[104, 256]]", 257, "does not exist before it"},
        {"[[104, 105], [104, 105]]", 258, "twice"},
        {"[[104]]", 257, "not a pair"},
        {"[[104, 105]]", 256, "special 0"},
        {"[[-1, 105]]", 257, "does not exist"},
        {doubling, 256 + 64, "tokens longer than"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int s = cases[i].first_special;
        char *json = tu_path(
            "{\"version\": 1, \"pattern\": \"\\\\s+|\\\\S+\", \"n_bytes\": 256, "
            "\"merges\": %s, \"specials\": "
            "[{\"name\": \"<|bos|>\", \"id\": %d}, {\"name\": \"<|eos|>\", \"id\": %d}, "
            "{\"name\": \"<|pad|>\", \"id\": %d}, {\"name\": \"<|reserved|>\", \"id\": %d}]}\n",
            cases[i].merges, s, s + 1, s + 2, s + 3);
        tu_write(p, json);
        free(json);
        char err[256] = "";
        tok_t *t = tok_load(p, err, sizeof err);
        if (!cases[i].expect) {
            cr_assert_not_null(t, "case %zu: %s", i, err);
            assert_roundtrip(t, "hi hi", 5);
            tok_free(t);
        } else {
            cr_assert_null(t, "case %zu loaded", i);
            cr_assert(strstr(err, cases[i].expect), "case %zu: %s", i, err);
        }
    }
    char err[256] = "";
    tu_write(p, "{\"version\": 2}");
    cr_assert_null(tok_load(p, err, sizeof err));
    cr_assert(strstr(err, "version"), "%s", err);
    tu_write(p, "not json");
    cr_assert_null(tok_load(p, err, sizeof err));
    cr_assert_null(tok_load("/nonexistent/tokenizer.json", err, sizeof err));
    free(p);
    tu_rmrf(dir);
    free(dir);
}

/* ---- a larger text ------------------------------------------------------------------ */

/* Training and encoding a text with many distinct chunks; how fast is for
 * `make bench-tok` (tests/bench/tok_bench.c, the same text). */
Test(tok, trains_and_encodes_prose, .timeout = 60) {
    /* About 1 MB of synthetic prose: words of one to four syllables, so
     * there are tens of thousands of distinct chunks, the common ones short. */
    rng_t r;
    rng_seed(&r, 1);
    const char *syll[] = {"ka", "to", "re", "mi",  "su",  "na", "lo", "ve", "di", "po",
                          "an", "el", "or", "ith", "str", "qu", "ng", "ph", "ae", "ou"};
    size_t cap = 1 << 20, n = 0;
    char *text = malloc(cap + 64);
    while (n < cap) {
        int ns = 1 + (int)rng_below(&r, 4);
        for (int s = 0; s < ns; s++) {
            uint64_t k = rng_below(&r, 20);
            n += (size_t)sprintf(text + n, "%s", syll[k * k / 20]);
        }
        n += (size_t)sprintf(text + n, "%s",
                             rng_below(&r, 12) == 0   ? ". "
                             : rng_below(&r, 20) == 0 ? ",\n"
                                                      : " ");
    }
    tok_t *t = train1(text, n, 1024);
    cr_expect_eq(tok_vocab_size(t), 1024 + TOK_N_SPECIAL);
    char err[256];
    tok_ids_t ids = {0};
    cr_assert_eq(tok_encode(t, text, n, &ids, err, sizeof err), 0, "%s", err);
    cr_assert_lt(ids.n, n / 2, "%zu tokens for %zu bytes: merges barely help", ids.n, n);
    tok_ids_free(&ids);
    tok_free(t);
    free(text);
}

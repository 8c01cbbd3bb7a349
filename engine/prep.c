/* prep.c - `nightshift prep`: text in, dataset directory out (data.h).
 *
 * prep reads every input into memory as a list of documents (a plain file is
 * one document, a .jsonl file one per line, a directory everything under it in
 * sorted order), pins the validation split and the sealed test split before
 * it, trains the tokenizer on the training documents, encodes the splits and
 * writes the files into
 * STATE/datasets/.NAME.tmp.<pid>, which is renamed to NAME only when complete.
 * Any failure removes the temporary directory. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/cli.h"
#include "engine/data.h"
#include "engine/tok.h"
#include "engine/util.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the dataset files are little-endian and are written as they are"
#endif

#define MAX_DEPTH 64 /* directory nesting, which also stops symlink loops */

/* Progress lines for long loops: at most one every PROGRESS_S seconds. */
#define PROGRESS_S 2.0
typedef struct {
    FILE *log; /* NULL = quiet */
    double last;
} progress_t;

static bool progress_due(progress_t *p) {
    if (!p->log) return false;
    double t = util_now();
    if (t - p->last < PROGRESS_S) return false;
    p->last = t;
    return true;
}

/* ---- reading the inputs ------------------------------------------------------- */

typedef struct {
    char *path; /* as given, or given + "/" + the path below a given directory */
    uint64_t bytes;
    char sha256[65];
    int split; /* SRC_TRAIN (an INPUT), SRC_VAL (--val) or SRC_TEST (--test) */
} source_t;

enum { SRC_TRAIN, SRC_VAL, SRC_TEST };

typedef struct {
    char *text; /* every document, concatenated */
    size_t len, cap;
    size_t *off, *dlen; /* per document */
    size_t n, capd;
    source_t *src;
    size_t nsrc, capsrc;
} corpus_t;

static void corpus_free(corpus_t *c) {
    free(c->text);
    free(c->off);
    free(c->dlen);
    for (size_t i = 0; i < c->nsrc; i++) free(c->src[i].path);
    free(c->src);
    memset(c, 0, sizeof *c);
}

static int add_doc(corpus_t *c, const char *s, size_t n) {
    if (util_grow(&c->text, &c->cap, c->len + n, 1)) return -1;
    if (c->n + 1 > c->capd) {
        size_t cap = c->capd;
        if (util_grow(&c->off, &cap, c->n + 1, sizeof *c->off)) return -1;
        cap = c->capd;
        if (util_grow(&c->dlen, &cap, c->n + 1, sizeof *c->dlen)) return -1;
        c->capd = cap;
    }
    memcpy(c->text + c->len, s, n);
    c->off[c->n] = c->len;
    c->dlen[c->n] = n;
    c->len += n;
    c->n++;
    return 0;
}

static bool has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

/* One JSON object per line with a string field "text"; blank lines are skipped. */
static int add_jsonl(corpus_t *c, const char *path, const char *buf, size_t len, char *err,
                     size_t errlen) {
    size_t pos = 0, line = 0;
    while (pos < len) {
        const char *s = buf + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + (nl ? 1 : 0);
        line++;
        size_t k = 0;
        while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r')) k++;
        if (k == n) continue;
        cJSON *obj = cJSON_ParseWithLength(s, n);
        if (!obj || !cJSON_IsObject(obj)) {
            cJSON_Delete(obj);
            util_errorf(err, errlen, "%s:%zu: not a JSON object", path, line);
            return -1;
        }
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(obj, "text");
        if (!cJSON_IsString(text)) {
            cJSON_Delete(obj);
            util_errorf(err, errlen, "%s:%zu: no \"text\" string field", path, line);
            return -1;
        }
        size_t tl = strlen(text->valuestring);
        int rc = tl ? add_doc(c, text->valuestring, tl) : 0;
        cJSON_Delete(obj);
        if (rc) {
            util_errorf(err, errlen, "out of memory");
            return -1;
        }
    }
    return 0;
}

/* Read one file: record it as a source (of split, SRC_*) and add its documents. */
static int add_file(corpus_t *c, const char *path, int split, char *err, size_t errlen) {
    size_t len;
    char *buf = util_read_file(path, DATA_MAX_FILE_BYTES, &len, err, errlen);
    if (!buf) return -1;
    if (util_grow(&c->src, &c->capsrc, c->nsrc + 1, sizeof *c->src)) goto oom;
    source_t *s = &c->src[c->nsrc];
    memset(s, 0, sizeof *s);
    s->path = strdup(path);
    if (!s->path) goto oom;
    c->nsrc++;
    s->bytes = len;
    s->split = split;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!EVP_Digest(buf, len, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32) {
        util_errorf(err, errlen, "%s: SHA-256 failed", path);
        goto fail;
    }
    for (unsigned i = 0; i < mdlen; i++) snprintf(s->sha256 + 2 * i, 3, "%02x", md[i]);
    if (has_suffix(path, ".jsonl")) {
        if (add_jsonl(c, path, buf, len, err, errlen)) goto fail;
    } else if (len && add_doc(c, buf, len)) {
        goto oom;
    }
    free(buf);
    return 0;
oom:
    util_errorf(err, errlen, "out of memory");
fail:
    free(buf);
    return -1;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A file, or a directory walked recursively in byte order of the names,
 * skipping hidden entries and anything that is neither file nor directory. */
static int add_path(corpus_t *c, const char *path, int split, int depth, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st)) {
        util_errorf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (S_ISREG(st.st_mode)) return add_file(c, path, split, err, errlen);
    if (!S_ISDIR(st.st_mode)) {
        if (depth == 0) {
            util_errorf(err, errlen, "%s: not a file or directory", path);
            return -1;
        }
        return 0;
    }
    if (depth >= MAX_DEPTH) {
        util_errorf(err, errlen, "%s: directories nested more than %d deep", path, MAX_DEPTH);
        return -1;
    }
    DIR *d = opendir(path);
    if (!d) {
        util_errorf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = -1;
    struct dirent *e;
    errno = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (util_grow(&names, &cap, n + 1, sizeof *names) || !(names[n] = strdup(e->d_name))) {
            util_errorf(err, errlen, "out of memory");
            goto done;
        }
        n++;
    }
    if (errno) {
        util_errorf(err, errlen, "%s: %s", path, strerror(errno));
        goto done;
    }
    if (n) qsort(names, n, sizeof *names, cmp_str);
    size_t pl = strlen(path);
    bool slash = pl && path[pl - 1] == '/';
    for (size_t i = 0; i < n; i++) {
        char *child;
        if (asprintf(&child, "%s%s%s", path, slash ? "" : "/", names[i]) < 0) {
            util_errorf(err, errlen, "out of memory");
            goto done;
        }
        int r = add_path(c, child, split, depth + 1, err, errlen);
        free(child);
        if (r) goto done;
    }
    rc = 0;
done:
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    closedir(d);
    return rc;
}

/* ---- writing -------------------------------------------------------------------- */

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    return remove(path);
}

/* Remove a directory tree we created (symlinks are removed, not followed). */
static void rm_tree(const char *path) {
    nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static int mkdir_p(const char *path, char *err, size_t errlen) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        util_errorf(err, errlen, "%s: path too long", path);
        return -1;
    }
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p) continue;
        char saved = *p;
        *p = 0;
        if (mkdir(buf, 0777) && errno != EEXIST) {
            util_errorf(err, errlen, "%s: %s", buf, strerror(errno));
            return -1;
        }
        *p = saved;
        if (!saved) break;
    }
    struct stat st;
    if (stat(path, &st) || !S_ISDIR(st.st_mode)) {
        util_errorf(err, errlen, "%s: not a directory", path);
        return -1;
    }
    return 0;
}

/* Flush, fsync and close f. Returns 0, or -1 with err naming path. */
static int close_file(FILE *f, const char *path, char *err, size_t errlen) {
    int bad = fflush(f) || ferror(f) || fsync(fileno(f));
    int e = errno;
    if (fclose(f) || bad) {
        util_errorf(err, errlen, "%s: write failed: %s", path, strerror(bad ? e : errno));
        return -1;
    }
    return 0;
}

/* Split totals, filled while encoding. */
typedef struct {
    size_t tokens, docs;
    uint64_t bytes; /* UTF-8 bytes of the non-special tokens */
} split_stats_t;

/* Encode documents [lo, hi) of c, each as BOS + ids, into a uint16 file. */
static int write_split(tok_t *tok, const corpus_t *c, size_t lo, size_t hi, const char *path,
                       const int32_t *token_bytes, split_stats_t *stats, FILE *log, char *err,
                       size_t errlen) {
    progress_t pr = {log, util_now()};
    FILE *f = fopen(path, "wb");
    tok_ids_t ids = {0};
    uint16_t *buf = NULL;
    size_t bufcap = 0;
    if (!f) {
        util_errorf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    memset(stats, 0, sizeof *stats);
    int bos = tok_bos_id(tok);
    for (size_t d = lo; d < hi; d++) {
        ids.n = 0;
        if (tok_encode(tok, c->text + c->off[d], c->dlen[d], &ids, err, errlen)) goto fail;
        if (util_grow(&buf, &bufcap, ids.n + 1, sizeof *buf)) {
            util_errorf(err, errlen, "out of memory");
            goto fail;
        }
        buf[0] = (uint16_t)bos;
        for (size_t i = 0; i < ids.n; i++) {
            buf[i + 1] = (uint16_t)ids.ids[i];
            stats->bytes += (uint64_t)token_bytes[ids.ids[i]];
        }
        if (fwrite(buf, sizeof *buf, ids.n + 1, f) != ids.n + 1) {
            util_errorf(err, errlen, "%s: write failed: %s", path, strerror(errno));
            goto fail;
        }
        stats->tokens += ids.n + 1;
        stats->docs++;
        if (progress_due(&pr))
            fprintf(log, "prep: encoding %s: %zu/%zu documents, %zu tokens\n", path, stats->docs,
                    hi - lo, stats->tokens);
    }
    free(buf);
    tok_ids_free(&ids);
    return close_file(f, path, err, errlen);
fail:
    free(buf);
    tok_ids_free(&ids);
    fclose(f);
    return -1;
}

static int write_token_bytes(const int32_t *tb, int n, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        util_errorf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (fwrite(tb, sizeof *tb, (size_t)n, f) != (size_t)n) {
        fclose(f);
        util_errorf(err, errlen, "%s: write failed: %s", path, strerror(errno));
        return -1;
    }
    return close_file(f, path, err, errlen);
}

static int write_text(const char *text, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "w");
    if (!f) {
        util_errorf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    fputs(text, f);
    fputc('\n', f);
    return close_file(f, path, err, errlen);
}

/* ---- prep ------------------------------------------------------------------------- */

#define PREP_DEFAULT_DIR          "state"
#define PREP_DEFAULT_VOCAB        4092
#define PREP_DEFAULT_VAL_FRACTION 0.1
/* A merge whose pair the training text holds fewer times than this makes a
 * token the model sees that rarely (and a 10% validation split about a tenth
 * as often): prep warns when the vocabulary needs such merges. */
#define PREP_MIN_MERGE_COUNT 20

typedef struct {
    const char *dir, *name;
    char name_buf[64]; /* the default name, when --name is not given */
    long vocab;
    double val_fraction, test_fraction;
    bool has_fraction, has_test_fraction, force, quiet;
    const char **inputs, **vals, **tests;
    size_t n_inputs, n_vals, n_tests;
} prep_args_t;

static void prep_usage(FILE *out) {
    fprintf(out,
            "usage: nightshift prep [--dir DIR] [--name NAME] [--vocab N]\n"
            "                       [--val-fraction F | --val PATH ...]\n"
            "                       [--test-fraction F | --test PATH ...] [--force] [--quiet]\n"
            "                       INPUT...\n"
            "\n"
            "Trains a byte-level BPE tokenizer on the training documents and writes the\n"
            "dataset DIR/datasets/NAME (tokenizer.json, token_bytes.bin, train.bin, val.bin,\n"
            "test.bin, manifest.json). A spec trains on it with \"dataset\": \"NAME\".\n"
            "\n"
            "  INPUT            a text file (one document), a .jsonl file (one document per\n"
            "                   line, from its \"text\" field), or a directory of them (read\n"
            "                   recursively in sorted order, hidden entries skipped)\n"
            "  --dir DIR        the state directory (default %s, the daemon's default --dir;\n"
            "                   created if missing)\n"
            "  --name NAME      dataset name: [A-Za-z0-9_.-], not starting with '.' (default:\n"
            "                   the first INPUT's file name without its extension)\n"
            "  --vocab N        byte tokens (256) plus merges; 256 = bytes only. Four special\n"
            "                   tokens follow, so N + 4 <= %d. Default %d: with the specials\n"
            "                   the vocabulary is 4096, a round size for the embedding and\n"
            "                   lm_head matrices, and large enough to shorten English text\n"
            "                   to about 3.5 bytes per token. A text too small for it (its\n"
            "                   last merges seen fewer than %d times) gets a warning with a\n"
            "                   size that suits it\n"
            "  --val-fraction F the validation split (default %g): the last fraction F of\n"
            "                   the documents, in input order; when the input is a single\n"
            "                   document (one text file), the last fraction F of its bytes,\n"
            "                   cut at the line break nearest that point\n"
            "  --val PATH       validation documents from PATH instead (repeatable); the\n"
            "                   INPUTs are then all training documents\n"
            "  --test-fraction F  the sealed test split: text taken from the end of the\n"
            "                   training documents, just before the validation split, about\n"
            "                   F of all the input's bytes: whole documents (the number whose\n"
            "                   bytes come nearest), or, when one training document is left,\n"
            "                   its last bytes cut at a line break. Default: as many bytes as\n"
            "                   the validation split, at most half of the training text;\n"
            "                   0 = no test split. Training, ranking, pruning and the agent\n"
            "                   never read it: each run is measured on it once, and the\n"
            "                   daemon shows the figure only beside the night's answer\n"
            "  --test PATH      test documents from PATH instead (repeatable)\n"
            "  --force          replace an existing dataset of that name\n"
            "  --quiet          no progress and no warnings on stderr, errors only\n",
            PREP_DEFAULT_DIR, DATA_MAX_TOKENS, PREP_DEFAULT_VOCAB, PREP_MIN_MERGE_COUNT,
            PREP_DEFAULT_VAL_FRACTION);
}

/* When tr's last merges were rare in the training text (seen fewer than
 * PREP_MIN_MERGE_COUNT times), say so on stderr with a vocabulary that keeps
 * only the merges seen that often, rounded down so that with the special
 * tokens it is a multiple of 64 ids (at least the 256 bytes alone). */
static void warn_rare_merges(const tok_trainer_t *tr, const tok_t *tok, long vocab,
                             size_t train_tokens) {
    int n = tok_n_merges(tok), keep = 0;
    int64_t last = n ? tok_trainer_merge_count(tr, n - 1) : PREP_MIN_MERGE_COUNT;
    if (last >= PREP_MIN_MERGE_COUNT) return;
    while (keep < n && tok_trainer_merge_count(tr, keep) >= PREP_MIN_MERGE_COUNT) keep++;
    long ids = (TOK_N_BYTES + keep + TOK_N_SPECIAL) / 64 * 64;
    long suggest = ids - TOK_N_SPECIAL < TOK_N_BYTES ? TOK_N_BYTES : ids - TOK_N_SPECIAL;
    fprintf(stderr,
            "prep: warning: --vocab %ld is large for this text (%zu training tokens): its last "
            "merges were seen only %lld time%s, and merges from number %d on fewer than %d; such "
            "tokens are barely trained and barely scored. --vocab %ld keeps the merges seen %d "
            "times or more%s.\n",
            vocab, train_tokens, (long long)last, last == 1 ? "" : "s", keep + 1,
            PREP_MIN_MERGE_COUNT, suggest, PREP_MIN_MERGE_COUNT,
            suggest == TOK_N_BYTES ? " (bytes only)" : "");
}

/* The default dataset name from an input path: its last component without
 * the extension, characters a name may not hold replaced by '_', into buf
 * (size > 63). */
static void default_name(const char *input, char *buf, size_t len) {
    size_t n = strlen(input);
    while (n > 1 && input[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && input[b - 1] != '/') b--;
    size_t e = n;
    for (size_t i = n; i > b + 1; i--)
        if (input[i - 1] == '.') {
            e = i - 1;
            break;
        }
    size_t o = 0;
    for (size_t i = b; i < e && o + 1 < len && o < 63; i++) {
        char c = input[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-';
        buf[o++] = ok ? c : '_';
    }
    buf[o] = 0;
    if (!o || buf[0] == '.') snprintf(buf, len, "text");
}

/* Returns 0, 1 after --help, or 2 on a usage error (printed). */
/* The option key ("--vocab") with its value into a. Returns 0, or 2 after
 * saying why on stderr. */
static int set_value(prep_args_t *a, const char *key, const char *val) {
    char *end;
    if (!strcmp(key, "--dir")) {
        a->dir = val;
    } else if (!strcmp(key, "--name")) {
        a->name = val;
    } else if (!strcmp(key, "--vocab")) {
        errno = 0;
        a->vocab = strtol(val, &end, 10);
        if (errno || end == val || *end) {
            fprintf(stderr, "prep: --vocab %s is not an integer\n", val);
            return 2;
        }
    } else if (!strcmp(key, "--val-fraction")) {
        a->val_fraction = strtod(val, &end);
        if (end == val || *end || !(a->val_fraction > 0 && a->val_fraction < 1)) {
            fprintf(stderr, "prep: --val-fraction %s is not a number in (0, 1)\n", val);
            return 2;
        }
        a->has_fraction = true;
    } else if (!strcmp(key, "--test-fraction")) {
        a->test_fraction = strtod(val, &end);
        if (end == val || *end || !(a->test_fraction >= 0 && a->test_fraction < 1)) {
            fprintf(stderr, "prep: --test-fraction %s is not a number in [0, 1)\n", val);
            return 2;
        }
        a->has_test_fraction = true;
    } else if (!strcmp(key, "--test")) {
        a->tests[a->n_tests++] = val;
    } else {
        a->vals[a->n_vals++] = val;
    }
    return 0;
}

static int prep_parse(int argc, char **argv, prep_args_t *a) {
    memset(a, 0, sizeof *a);
    a->vocab = PREP_DEFAULT_VOCAB;
    a->dir = PREP_DEFAULT_DIR;
    a->val_fraction = PREP_DEFAULT_VAL_FRACTION;
    a->inputs = calloc((size_t)argc, sizeof *a->inputs);
    a->vals = calloc((size_t)argc, sizeof *a->vals);
    a->tests = calloc((size_t)argc, sizeof *a->tests);
    if (!a->inputs || !a->vals || !a->tests) {
        fprintf(stderr, "prep: out of memory\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            prep_usage(stdout);
            return 1;
        }
        if (!strcmp(arg, "--force")) {
            a->force = true;
            continue;
        }
        if (!strcmp(arg, "--quiet")) {
            a->quiet = true;
            continue;
        }
        if (!strcmp(arg, "--")) {
            while (++i < argc) a->inputs[a->n_inputs++] = argv[i];
            break;
        }
        if (strncmp(arg, "--", 2)) {
            a->inputs[a->n_inputs++] = arg;
            continue;
        }
        /* Options with a value: "--opt VALUE" or "--opt=VALUE". */
        const char *eq = strchr(arg, '='), *val;
        size_t kl = eq ? (size_t)(eq - arg) : strlen(arg);
        char key[32];
        if (kl >= sizeof key) goto unknown;
        memcpy(key, arg, kl);
        key[kl] = 0;
        if (strcmp(key, "--dir") && strcmp(key, "--name") && strcmp(key, "--vocab") &&
            strcmp(key, "--val-fraction") && strcmp(key, "--val") &&
            strcmp(key, "--test-fraction") && strcmp(key, "--test"))
            goto unknown;
        if (eq) {
            val = eq + 1;
        } else if (i + 1 < argc) {
            val = argv[++i];
        } else {
            fprintf(stderr, "prep: %s needs a value\n", key);
            return 2;
        }
        if (set_value(a, key, val)) return 2;
        continue;
    unknown:
        fprintf(stderr, "prep: unknown option %s\n", arg);
        prep_usage(stderr);
        return 2;
    }
    if (!a->n_inputs) {
        fprintf(stderr, "prep: no INPUT given\n");
        prep_usage(stderr);
        return 2;
    }
    if (!a->name) {
        default_name(a->inputs[0], a->name_buf, sizeof a->name_buf);
        a->name = a->name_buf;
    }
    if (a->has_fraction && a->n_vals) {
        fprintf(stderr, "prep: --val-fraction and --val exclude each other\n");
        return 2;
    }
    if (a->has_test_fraction && a->n_tests) {
        fprintf(stderr, "prep: --test-fraction and --test exclude each other\n");
        return 2;
    }
    return 0;
}

/* Where the documents of each split are: train is documents [0, train_end);
 * val and test are ranges after it ([lo, hi), empty when lo == hi). A split
 * cut out of one document by bytes records where in that document's original
 * text it starts (val_cut, test_cut; 0 = not cut by bytes); a test split cut
 * by bytes ends at test_end. */
typedef struct {
    size_t train_end, val_lo, val_hi, test_lo, test_hi;
    size_t val_cut, test_cut, test_end;
    size_t test_target;  /* the test split's size asked for, in bytes of text */
    const char *no_test; /* why there is no test split, or NULL */
} splits_t;

static uint64_t docs_bytes(const corpus_t *c, size_t lo, size_t hi) {
    uint64_t n = 0;
    for (size_t d = lo; d < hi; d++) n += c->dlen[d];
    return n;
}

/* The cut in document d nearest byte `want` of it that falls just after a
 * line break with at least one byte on each side, or 0 when there is none. */
static size_t line_cut(const corpus_t *c, size_t d, double want) {
    const char *t = c->text + c->off[d];
    size_t len = c->dlen[d];
    if (len < 2) return 0;
    size_t target = want < 1 ? 1 : want > (double)(len - 1) ? len - 1 : (size_t)want;
    size_t best = 0, best_dist = SIZE_MAX;
    /* A cut at k means [0, k) and [k, len); k follows a '\n'. */
    for (size_t k = target; k > 0; k--)
        if (t[k - 1] == '\n') {
            best = k, best_dist = target - k;
            break;
        }
    for (size_t k = target + 1; k < len && k - target < best_dist; k++)
        if (t[k - 1] == '\n') {
            best = k;
            break;
        }
    return best < len ? best : 0;
}

/* Split document d at byte `at` of it (0 < at < its length): d keeps the
 * text before, a new document d + 1 gets the rest, and the documents after d
 * move up by one. */
static int split_doc(corpus_t *c, size_t d, size_t at, char *err, size_t errlen) {
    if (c->n + 1 > c->capd) {
        size_t cap = c->capd;
        if (util_grow(&c->off, &cap, c->n + 1, sizeof *c->off)) goto oom;
        cap = c->capd;
        if (util_grow(&c->dlen, &cap, c->n + 1, sizeof *c->dlen)) goto oom;
        c->capd = cap;
    }
    memmove(c->off + d + 2, c->off + d + 1, (c->n - d - 1) * sizeof *c->off);
    memmove(c->dlen + d + 2, c->dlen + d + 1, (c->n - d - 1) * sizeof *c->dlen);
    c->off[d + 1] = c->off[d] + at;
    c->dlen[d + 1] = c->dlen[d] - at;
    c->dlen[d] = at;
    c->n++;
    return 0;
oom:
    util_errorf(err, errlen, "out of memory");
    return -1;
}

/* Pin the validation split: the --val documents (which follow the n_in
 * INPUT documents), else the last fraction of the INPUT documents, else,
 * for a single INPUT document, the last fraction of its bytes. The --test
 * documents, if any, are the last of c and stay there. desc describes it. */
static int pin_val(corpus_t *c, const prep_args_t *a, size_t n_in, size_t n_val_docs, splits_t *sp,
                   char *desc, size_t desclen, char *err, size_t errlen) {
    if (a->n_vals) {
        sp->train_end = n_in;
        sp->val_lo = n_in, sp->val_hi = n_in + n_val_docs;
        snprintf(desc, desclen, "the %zu documents of the --val paths", n_val_docs);
        return 0;
    }
    if (n_in == 1) {
        size_t len = c->dlen[0];
        size_t cut = line_cut(c, 0, (1.0 - a->val_fraction) * (double)len);
        if (!cut) {
            util_errorf(err, errlen,
                        "the input is one document of %zu bytes without a line break to split "
                        "it at; give --val with validation text, or more text",
                        len);
            return -1;
        }
        if (split_doc(c, 0, cut, err, errlen)) return -1;
        sp->train_end = 1, sp->val_lo = 1, sp->val_hi = 2, sp->val_cut = cut;
        snprintf(desc, desclen,
                 "the last %zu of %zu bytes of the one document (fraction %g, cut after a line "
                 "break at byte %zu)",
                 len - cut, len, a->val_fraction, cut);
        return 0;
    }
    double want = round(a->val_fraction * (double)n_in);
    size_t nv = want < 1 ? 1 : want > (double)(n_in - 1) ? n_in - 1 : (size_t)want;
    sp->train_end = n_in - nv;
    sp->val_lo = n_in - nv, sp->val_hi = n_in;
    snprintf(desc, desclen, "the last %zu of %zu documents in input order (fraction %g)", nv, n_in,
             a->val_fraction);
    return 0;
}

/* Pin the sealed test split: the --test documents (the last n_test_docs of
 * c), else nothing with --test-fraction 0, else text taken from the end of
 * the training documents (splits_t, the usage text). A default split that
 * cannot be cut (one training document without a line break) is left out
 * with the reason in sp->no_test; an asked-for one is an error. */
static int pin_test(corpus_t *c, const prep_args_t *a, size_t n_test_docs, splits_t *sp, char *desc,
                    size_t desclen, char *err, size_t errlen) {
    if (a->n_tests) {
        sp->test_lo = c->n - n_test_docs, sp->test_hi = c->n;
        snprintf(desc, desclen, "the %zu documents of the --test paths", n_test_docs);
        return 0;
    }
    if (a->has_test_fraction && a->test_fraction == 0) {
        sp->no_test = "--test-fraction 0";
        snprintf(desc, desclen, "none (--test-fraction 0)");
        return 0;
    }
    double train = (double)docs_bytes(c, 0, sp->train_end), target;
    if (a->has_test_fraction) {
        target = a->test_fraction * (double)c->len;
        if (target >= train) {
            util_errorf(err, errlen,
                        "--test-fraction %g asks for %.0f bytes of the %.0f left for training",
                        a->test_fraction, target, train);
            return -1;
        }
    } else { /* as large as the validation split, but never most of the training text */
        target = fmin((double)docs_bytes(c, sp->val_lo, sp->val_hi), 0.5 * train);
    }
    sp->test_target = (size_t)target;
    if (sp->train_end >= 2) {
        /* Whole documents: the number k of the last ones whose bytes come
         * nearest the target, leaving at least one to train on. */
        size_t k = 1, best_k = 1;
        double sum = 0, best = INFINITY;
        for (; k < sp->train_end; k++) {
            sum += (double)c->dlen[sp->train_end - k];
            if (fabs(sum - target) < best) best = fabs(sum - target), best_k = k;
            if (sum >= target) break;
        }
        sp->test_hi = sp->train_end;
        sp->test_lo = sp->train_end = sp->train_end - best_k;
        snprintf(desc, desclen,
                 "the last %zu training documents before the validation split (%llu bytes; "
                 "asked for %zu)",
                 best_k, (unsigned long long)docs_bytes(c, sp->test_lo, sp->test_hi),
                 sp->test_target);
        return 0;
    }
    size_t len = c->dlen[0], cut = line_cut(c, 0, (double)len - target);
    if (!cut) {
        if (a->has_test_fraction) {
            util_errorf(err, errlen,
                        "--test-fraction: the one training document (%zu bytes) has no line "
                        "break to cut a test split at; give --test with test text",
                        len);
            return -1;
        }
        sp->no_test = "the one training document has no line break to cut it at";
        snprintf(desc, desclen, "none (%s)", sp->no_test);
        return 0;
    }
    if (split_doc(c, 0, cut, err, errlen)) return -1;
    sp->val_lo++, sp->val_hi++; /* the documents after 0 moved up */
    sp->test_lo = 1, sp->test_hi = 2, sp->train_end = 1;
    sp->test_cut = cut, sp->test_end = cut + c->dlen[1];
    snprintf(desc, desclen,
             "bytes %zu to %zu of the one training document (cut after a line break; asked for "
             "%zu bytes)",
             cut, sp->test_end, sp->test_target);
    return 0;
}

/* o["paths"]: the n paths given for a split. */
static void add_paths(cJSON *o, const char *const *paths, size_t n) {
    cJSON *arr = cJSON_AddArrayToObject(o, "paths");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateString(paths[i]));
}

/* The manifest's "val_split": how the validation split was pinned. */
static void add_val_split(cJSON *m, const prep_args_t *a, const corpus_t *c, const splits_t *sp,
                          const char *desc) {
    cJSON *vs = cJSON_AddObjectToObject(m, "val_split");
    if (a->n_vals) {
        cJSON_AddStringToObject(vs, "method", "files");
        add_paths(vs, a->vals, a->n_vals);
    } else if (sp->val_cut) {
        cJSON_AddStringToObject(vs, "method", "byte_fraction");
        cJSON_AddNumberToObject(vs, "fraction", a->val_fraction);
        cJSON_AddNumberToObject(vs, "cut_byte", (double)sp->val_cut);
        cJSON_AddNumberToObject(vs, "train_text_bytes", (double)c->dlen[0]);
        cJSON_AddNumberToObject(vs, "val_text_bytes",
                                (double)docs_bytes(c, sp->val_lo, sp->val_hi));
    } else {
        cJSON_AddStringToObject(vs, "method", "fraction");
        cJSON_AddNumberToObject(vs, "fraction", a->val_fraction);
    }
    cJSON_AddStringToObject(vs, "description", desc);
}

/* The manifest's "test_split": the cut, so a reader can tell exactly which
 * text is sealed. */
static void add_test_split(cJSON *m, const prep_args_t *a, const corpus_t *c, const splits_t *sp,
                           const char *desc) {
    cJSON *ts = cJSON_AddObjectToObject(m, "test_split");
    if (a->n_tests) {
        cJSON_AddStringToObject(ts, "method", "files");
        add_paths(ts, a->tests, a->n_tests);
    } else if (sp->no_test) {
        cJSON_AddStringToObject(ts, "method", "none");
        cJSON_AddStringToObject(ts, "reason", sp->no_test);
    } else if (sp->test_cut) {
        cJSON_AddStringToObject(ts, "method", "bytes");
        cJSON_AddNumberToObject(ts, "cut_byte", (double)sp->test_cut);
        cJSON_AddNumberToObject(ts, "end_byte", (double)sp->test_end);
    } else {
        cJSON_AddStringToObject(ts, "method", "documents");
        cJSON_AddNumberToObject(ts, "first_document", (double)sp->test_lo);
        cJSON_AddNumberToObject(ts, "documents", (double)(sp->test_hi - sp->test_lo));
    }
    if (!a->n_tests && !sp->no_test) {
        if (a->has_test_fraction) cJSON_AddNumberToObject(ts, "fraction", a->test_fraction);
        cJSON_AddNumberToObject(ts, "target_bytes", (double)sp->test_target);
        cJSON_AddNumberToObject(ts, "text_bytes", (double)docs_bytes(c, sp->test_lo, sp->test_hi));
    }
    cJSON_AddStringToObject(ts, "description", desc);
}

static cJSON *manifest_json(const prep_args_t *a, const tok_t *tok, const corpus_t *c,
                            const splits_t *sp, const split_stats_t *tr, const split_stats_t *va,
                            const split_stats_t *te, const char *val_desc, const char *test_desc,
                            double tok_s, double total_s) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "name", a->name);
    cJSON_AddNumberToObject(m, "format", 1);
    cJSON_AddNumberToObject(m, "vocab_size", tok_vocab_size(tok));
    cJSON_AddNumberToObject(m, "n_merges", tok_n_merges(tok));
    cJSON_AddNumberToObject(m, "n_special", TOK_N_SPECIAL);
    cJSON_AddNumberToObject(m, "bos_id", tok_bos_id(tok));
    cJSON_AddStringToObject(m, "dtype", "uint16");
    cJSON_AddNumberToObject(m, "train_tokens", (double)tr->tokens);
    cJSON_AddNumberToObject(m, "val_tokens", (double)va->tokens);
    cJSON_AddNumberToObject(m, "test_tokens", (double)te->tokens);
    cJSON_AddNumberToObject(m, "train_docs", (double)tr->docs);
    cJSON_AddNumberToObject(m, "val_docs", (double)va->docs);
    cJSON_AddNumberToObject(m, "test_docs", (double)te->docs);
    cJSON_AddNumberToObject(m, "train_bytes", (double)tr->bytes);
    cJSON_AddNumberToObject(m, "val_bytes", (double)va->bytes);
    cJSON_AddNumberToObject(m, "test_bytes", (double)te->bytes);
    add_val_split(m, a, c, sp, val_desc);
    add_test_split(m, a, c, sp, test_desc);
    cJSON *srcs = cJSON_AddArrayToObject(m, "sources");
    static const char *const split_names[] = {"train", "val", "test"};
    for (size_t i = 0; i < c->nsrc; i++) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "path", c->src[i].path);
        cJSON_AddNumberToObject(s, "bytes", (double)c->src[i].bytes);
        cJSON_AddStringToObject(s, "sha256", c->src[i].sha256);
        if (a->n_vals || a->n_tests)
            cJSON_AddStringToObject(s, "split", split_names[c->src[i].split]);
        cJSON_AddItemToArray(srcs, s);
    }
    cJSON_AddNumberToObject(m, "tokenizer_seconds", round(tok_s * 1000) / 1000);
    cJSON_AddNumberToObject(m, "prep_seconds", round(total_s * 1000) / 1000);
    char created[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON_AddStringToObject(m, "created", created);
    return m;
}

/* Move the finished tmp directory to final. With replace, an existing
 * dataset is swapped out (RENAME_EXCHANGE, or rename-away where the file
 * system lacks it) and then removed. */
static int install(const char *tmp, const char *final, bool replace, char *err, size_t errlen) {
    char old[4500];
    if (!renameat2(AT_FDCWD, tmp, AT_FDCWD, final, replace ? RENAME_EXCHANGE : RENAME_NOREPLACE)) {
        if (replace) rm_tree(tmp); /* tmp now holds the old dataset */
        return 0;
    }
    if (errno == EEXIST) goto exists;
    if (replace && errno == ENOENT) { /* nothing to replace */
        if (rename(tmp, final)) goto fail;
        return 0;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) goto fail;
    /* A file system without renameat2's flags. */
    struct stat st;
    if (lstat(final, &st) == 0) {
        if (!replace) goto exists;
        snprintf(old, sizeof old, "%s.old", tmp);
        if (rename(final, old)) goto fail;
        if (rename(tmp, final)) {
            int e = errno;
            rename(old, final);
            errno = e;
            goto fail;
        }
        rm_tree(old);
        return 0;
    }
    if (rename(tmp, final)) goto fail;
    return 0;
exists:
    util_errorf(err, errlen, "%s already exists (use --force to replace it)", final);
    return -1;
fail:
    util_errorf(err, errlen, "rename %s -> %s: %s", tmp, final, strerror(errno));
    return -1;
}

/* One run of prep: its arguments and what each stage leaves for the next.
 * Released by prep_close. */
typedef struct {
    prep_args_t a;
    corpus_t c;
    size_t n_in, n_val_docs, n_test_docs; /* documents of the INPUTs, --val, --test */
    splits_t sp;                          /* where each split's documents are */
    char val_desc[256], test_desc[256];   /* how the splits were chosen, for the manifest */
    tok_trainer_t *tr;
    tok_t *tok;
    double tok_s;
    int32_t *tb; /* bytes of every token */
    split_stats_t st_train, st_val, st_test;
    char dsdir[4096], tmp[4400], final[4400];
    bool made_tmp; /* tmp exists and is removed on failure */
    double t0;
} prep_t;

#define PREP_LOG(p, ...)                                                                           \
    do {                                                                                           \
        if (!(p)->a.quiet) fprintf(stderr, __VA_ARGS__);                                           \
    } while (0)

/* The arguments' checks that need no file, and the dataset's paths. */
static int prep_check(prep_t *p, char *err, size_t errlen) {
    const prep_args_t *a = &p->a;
    if (!data_name_ok(a->name))
        return util_errorf(err, errlen,
                           "--name '%s': a dataset name is 1-255 of [A-Za-z0-9_.-] and does not "
                           "start with '.'",
                           a->name);
    if (a->vocab < TOK_N_BYTES)
        return util_errorf(err, errlen, "--vocab %ld is below %d, the byte tokens alone", a->vocab,
                           TOK_N_BYTES);
    if (a->vocab + TOK_N_SPECIAL > DATA_MAX_TOKENS)
        return util_errorf(err, errlen,
                           "--vocab %ld plus %d special tokens exceeds %d, the most the uint16 "
                           "token files hold",
                           a->vocab, TOK_N_SPECIAL, DATA_MAX_TOKENS);
    if (snprintf(p->dsdir, sizeof p->dsdir, "%s/datasets", a->dir) >= (int)sizeof p->dsdir)
        return util_errorf(err, errlen, "--dir is too long");
    snprintf(p->final, sizeof p->final, "%s/%s", p->dsdir, a->name);
    snprintf(p->tmp, sizeof p->tmp, "%s/.%s.tmp.%ld", p->dsdir, a->name, (long)getpid());
    if (!a->force && access(p->final, F_OK) == 0)
        return util_errorf(err, errlen,
                           "dataset '%s' already exists in %s (use --force to replace it)", a->name,
                           p->dsdir);
    return 0;
}

/* Read the training inputs, then the --val paths, then the --test paths;
 * each must hold text. */
static int prep_read(prep_t *p, char *err, size_t errlen) {
    const prep_args_t *a = &p->a;
    for (size_t i = 0; i < a->n_inputs + a->n_vals + a->n_tests; i++) {
        int split = i < a->n_inputs ? SRC_TRAIN : i < a->n_inputs + a->n_vals ? SRC_VAL : SRC_TEST;
        const char *path = split == SRC_TRAIN ? a->inputs[i]
                           : split == SRC_VAL ? a->vals[i - a->n_inputs]
                                              : a->tests[i - a->n_inputs - a->n_vals];
        size_t before = p->c.n;
        if (add_path(&p->c, path, split, 0, err, errlen)) return -1;
        if (p->c.n == before)
            return util_errorf(err, errlen, "%s: no text (empty, or nothing but hidden files)",
                               path);
        *(split == SRC_TRAIN ? &p->n_in
          : split == SRC_VAL ? &p->n_val_docs
                             : &p->n_test_docs) += p->c.n - before;
    }
    PREP_LOG(p, "prep: read %zu documents, %.2f MB, from %zu files in %.2f s\n", p->c.n,
             (double)p->c.len / 1e6, p->c.nsrc, util_now() - p->t0);
    return 0;
}

/* Pin the validation split, then the sealed test split before it. */
static int prep_split(prep_t *p, char *err, size_t errlen) {
    if (pin_val(&p->c, &p->a, p->n_in, p->n_val_docs, &p->sp, p->val_desc, sizeof p->val_desc, err,
                errlen) ||
        pin_test(&p->c, &p->a, p->n_test_docs, &p->sp, p->test_desc, sizeof p->test_desc, err,
                 errlen))
        return -1;
    if (p->sp.no_test) PREP_LOG(p, "prep: no test split: %s\n", p->sp.no_test);
    return 0;
}

/* Train the tokenizer on the training documents only, and tabulate the
 * bytes of every token. */
static int prep_tokenizer(prep_t *p, char *err, size_t errlen) {
    double tt = util_now();
    if (!(p->tr = tok_trainer_new(err, errlen))) return -1;
    progress_t pr = {p->a.quiet ? NULL : stderr, tt};
    for (size_t d = 0; d < p->sp.train_end; d++) {
        if (tok_trainer_add(p->tr, p->c.text + p->c.off[d], p->c.dlen[d], err, errlen)) return -1;
        if (progress_due(&pr))
            fprintf(stderr, "prep: tokenizer: counted chunks of %zu/%zu documents, %.1f s\n", d + 1,
                    p->sp.train_end, util_now() - tt);
    }
    PREP_LOG(p, "prep: tokenizer: %zu distinct chunks in %zu training documents, %.2f s\n",
             tok_trainer_unique_chunks(p->tr), p->sp.train_end, util_now() - tt);
    p->tok = tok_trainer_finish(p->tr, (int)p->a.vocab, p->a.quiet ? NULL : stderr, err, errlen);
    if (!p->tok) return -1;
    p->tok_s = util_now() - tt;
    PREP_LOG(p, "prep: tokenizer: vocab %d (%d merges + 256 bytes + %d specials) in %.2f s\n",
             tok_vocab_size(p->tok), tok_n_merges(p->tok), TOK_N_SPECIAL, p->tok_s);
    if (!(p->tb = calloc((size_t)tok_vocab_size(p->tok), sizeof *p->tb)))
        return util_errorf(err, errlen, "out of memory");
    for (int id = 0; id < tok_n_regular(p->tok); id++) {
        size_t l;
        tok_token_bytes(p->tok, id, &l);
        p->tb[id] = (int32_t)l;
    }
    return 0;
}

/* Write the dataset into the temporary directory: the token files, the
 * token bytes, the tokenizer and the manifest. */
static int prep_write(prep_t *p, char *err, size_t errlen) {
    char path[4500];
    const splits_t *sp = &p->sp;
    if (mkdir_p(p->dsdir, err, errlen)) return -1;
    if (mkdir(p->tmp, 0777)) return util_errorf(err, errlen, "%s: %s", p->tmp, strerror(errno));
    p->made_tmp = true;
    double te = util_now();
    FILE *log = p->a.quiet ? NULL : stderr;
    snprintf(path, sizeof path, "%s/train.bin", p->tmp);
    if (write_split(p->tok, &p->c, 0, sp->train_end, path, p->tb, &p->st_train, log, err, errlen))
        return -1;
    snprintf(path, sizeof path, "%s/val.bin", p->tmp);
    if (write_split(p->tok, &p->c, sp->val_lo, sp->val_hi, path, p->tb, &p->st_val, log, err,
                    errlen))
        return -1;
    snprintf(path, sizeof path, "%s/test.bin", p->tmp);
    if (sp->test_hi > sp->test_lo && write_split(p->tok, &p->c, sp->test_lo, sp->test_hi, path,
                                                 p->tb, &p->st_test, log, err, errlen))
        return -1;
    const split_stats_t *tr = &p->st_train, *va = &p->st_val, *ts = &p->st_test;
    if (!p->a.quiet) warn_rare_merges(p->tr, p->tok, p->a.vocab, tr->tokens);
    PREP_LOG(p, "prep: encoded %zu + %zu + %zu tokens (%.2f bytes per token) in %.2f s\n",
             tr->tokens, va->tokens, ts->tokens,
             (double)(tr->bytes + va->bytes + ts->bytes) /
                 (double)(tr->tokens + va->tokens + ts->tokens - tr->docs - va->docs - ts->docs),
             util_now() - te);
    snprintf(path, sizeof path, "%s/token_bytes.bin", p->tmp);
    if (write_token_bytes(p->tb, tok_vocab_size(p->tok), path, err, errlen)) return -1;
    snprintf(path, sizeof path, "%s/tokenizer.json", p->tmp);
    if (tok_save(p->tok, path, err, errlen)) return -1;
    cJSON *manifest = manifest_json(&p->a, p->tok, &p->c, sp, tr, va, ts, p->val_desc, p->test_desc,
                                    p->tok_s, util_now() - p->t0);
    char *mtext = manifest ? cJSON_Print(manifest) : NULL;
    cJSON_Delete(manifest);
    if (!mtext) return util_errorf(err, errlen, "out of memory");
    snprintf(path, sizeof path, "%s/manifest.json", p->tmp);
    int rc = write_text(mtext, path, err, errlen);
    free(mtext);
    return rc;
}

/* One split in the summary: "1234 tokens (9 docs)" or, for a split cut out
 * of the one INPUT document, "1234 tokens (bytes A to B)". */
static void print_split(const char *name, const split_stats_t *st, size_t from, size_t to) {
    if (to > from)
        printf("%s %zu tokens (bytes %zu to %zu)", name, st->tokens, from, to);
    else
        printf("%s %zu tokens (%zu docs)", name, st->tokens, st->docs);
}

/* What the dataset holds, on stdout. */
static void prep_report(const prep_t *p) {
    const splits_t *sp = &p->sp;
    /* Byte positions in the one INPUT document when it was cut. */
    size_t train_to = sp->test_cut ? sp->test_cut : sp->val_cut;
    printf("prep: dataset '%s' in %s: vocab %d, ", p->a.name, p->final, tok_vocab_size(p->tok));
    print_split("train", &p->st_train, 0, train_to);
    print_split(", val", &p->st_val, sp->val_cut,
                sp->val_cut ? sp->val_cut + p->c.dlen[sp->val_lo] : 0);
    if (sp->test_hi > sp->test_lo)
        print_split(", sealed test", &p->st_test, sp->test_cut, sp->test_end);
    else
        printf(", no test split");
    printf(", %.1f s\n", util_now() - p->t0);
    printf("prep: a spec trains on it with \"dataset\": \"%s\"\n", p->a.name);
}

static void prep_close(prep_t *p) {
    if (p->made_tmp) rm_tree(p->tmp);
    free(p->tb);
    tok_free(p->tok);
    tok_trainer_free(p->tr);
    corpus_free(&p->c);
    free(p->a.inputs);
    free(p->a.vals);
    free(p->a.tests);
}

int prep_main(int argc, char **argv) {
    prep_t p = {0};
    char err[1024] = "";
    int rc = prep_parse(argc, argv, &p.a);
    if (rc) {
        prep_close(&p);
        return rc == 1 ? 0 : 2;
    }
    p.t0 = util_now();
    rc = prep_check(&p, err, sizeof err) || prep_read(&p, err, sizeof err) ||
         prep_split(&p, err, sizeof err) || prep_tokenizer(&p, err, sizeof err) ||
         prep_write(&p, err, sizeof err) || install(p.tmp, p.final, p.a.force, err, sizeof err);
    if (rc) {
        fprintf(stderr, "prep: %s\n", err);
    } else {
        p.made_tmp = false; /* installed */
        prep_report(&p);
    }
    prep_close(&p);
    return rc ? 1 : 0;
}

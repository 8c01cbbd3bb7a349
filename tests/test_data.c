/* test_data.c - `nightshift prep` and data_open: the files a dataset holds and
 * what they must agree on (BOS per document, token bytes = document bytes,
 * the pinned split), JSONL and directory inputs, and every refused input,
 * which must leave neither a dataset nor a temporary directory behind.
 *
 * prep_main runs in-process (Criterion gives each test its own process); one
 * test also runs the built binary named by NIGHTSHIFT_BIN. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/cli.h"
#include "engine/data.h"
#include "tests/testutil.h"
#include "engine/tok.h"

/* ---- helpers -------------------------------------------------------------------- */

/* dir/rel with len bytes of data, creating rel's parent directories. */
static void write_file(const char *dir, const char *rel, const void *data, size_t len) {
    char *p = tu_path("%s/%s", dir, rel);
    for (char *s = p + strlen(dir) + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        mkdir(p, 0777);
        *s = '/';
    }
    tu_write_n(p, data, len);
    free(p);
}

static void write_str(const char *dir, const char *rel, const char *s) {
    write_file(dir, rel, s, strlen(s));
}

/* Run prep_main with the given arguments (NULL-terminated), stdout discarded
 * and stderr captured into *err_out (caller frees). Returns its exit code. */
static int run_prep(const char *work, char **err_out, ...) {
    const char *argv[64] = {"prep"};
    int argc = 1;
    va_list ap;
    va_start(ap, err_out);
    const char *a;
    while ((a = va_arg(ap, const char *))) argv[argc++] = a;
    va_end(ap);
    char *errpath = tu_path("%s/stderr.txt", work);
    fflush(stdout);
    fflush(stderr);
    int saved_out = dup(1), saved_err = dup(2);
    int fe = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fn = open("/dev/null", O_WRONLY);
    cr_assert(fe >= 0 && fn >= 0 && saved_out >= 0 && saved_err >= 0);
    dup2(fn, 1);
    dup2(fe, 2);
    int rc = prep_main(argc, (char **)argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(saved_out);
    close(saved_err);
    close(fe);
    close(fn);
    size_t len;
    char *text = tu_read_all(errpath, &len);
    unlink(errpath);
    free(errpath);
    if (err_out)
        *err_out = text;
    else
        free(text);
    return rc;
}

/* The number of entries in dir (an absent directory has none); the first
 * one's name goes to first when it is not NULL. */
static int count_entries(const char *dir, char *first, size_t firstlen) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (!n && first) snprintf(first, firstlen, "%s", e->d_name);
        n++;
    }
    closedir(d);
    return n;
}

static cJSON *load_json(const char *path) {
    size_t len;
    char *text = tu_read_all(path, &len);
    cJSON *j = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(j, "%s is not JSON", path);
    return j;
}

static double jnum(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(v), "manifest field %s missing", key);
    return v->valuedouble;
}

static const char *jstr(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsString(v), "manifest field %s missing", key);
    return v->valuestring;
}

/* Ten small documents, in.d/a.txt ... in.d/sub/j.txt (sorted order), plus
 * hidden entries that must be skipped. Returns the total bytes of the first
 * n_train documents in *train_bytes and of the rest in *val_bytes. */
static const char *const docs10[10][2] = {
    {"a.txt", "hello\n"},
    {"b.txt", "The quick brown fox jumps over the lazy dog.\n"},
    {"c.txt", "It's 2024, and we'll test 123456 numbers; don't worry.\n"},
    {"d.txt", "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4 text with \xf0\x9f\x98\x80 emoji\n"},
    {"e.txt", "Invalid \xff\xfe bytes and a NUL\0 inside, still one document.\n"},
    {"f.txt", "Paragraph one.\n\nParagraph two, with   spaces\tand tabs.\r\n"},
    {"g.txt", "the the the the the the the the the the the the the the\n"},
    {"sub/h.txt", "Nested directories are read after the files before them sort.\n"},
    {"sub/i.txt", "Validation document one: the fox was quick.\n"},
    {"sub/j.txt", "Validation document two: the dog was lazy.\n"},
};

static size_t doc_len(int i) {
    /* e.txt holds a NUL, so lengths come from the literal, not strlen. */
    if (i == 4)
        return sizeof "Invalid \xff\xfe bytes and a NUL\0 inside, still one document.\n" - 1;
    return strlen(docs10[i][1]);
}

static char *make_corpus(const char *work) {
    char *in = tu_path("%s/in.d", work);
    for (int i = 0; i < 10; i++) {
        char *rel = tu_path("in.d/%s", docs10[i][0]);
        write_file(work, rel, docs10[i][1], doc_len(i));
        free(rel);
    }
    write_str(work, "in.d/.hidden.txt", "must not be read\n");
    write_str(work, "in.d/sub/.git/config", "must not be read\n");
    return in;
}

/* Split a token stream at BOS tokens and decode each document. */
static void check_docs(const uint16_t *t, size_t n, int bos, tok_t *tok, int first_doc,
                       int n_docs) {
    size_t i = 0;
    for (int d = 0; d < n_docs; d++) {
        cr_assert(i < n && t[i] == bos, "document %d does not start with BOS", first_doc + d);
        size_t j = ++i;
        while (j < n && t[j] != bos) j++;
        int32_t *ids = malloc((j - i + 1) * sizeof *ids);
        for (size_t k = i; k < j; k++) ids[k - i] = t[k];
        char *out, err[256];
        size_t outlen;
        cr_assert_eq(tok_decode(tok, ids, j - i, &out, &outlen, err, sizeof err), 0);
        int di = first_doc + d;
        cr_assert(outlen == doc_len(di) && !memcmp(out, docs10[di][1], outlen),
                  "document %d decodes to something else", di);
        free(out);
        free(ids);
        i = j;
    }
    cr_assert_eq(i, n, "tokens after the last document");
}

/* ---- tests ------------------------------------------------------------------------ */

Test(data, name_ok) {
    cr_assert(data_name_ok("default"));
    cr_assert(data_name_ok("brown-4096_v1.2"));
    cr_assert(!data_name_ok(""));
    cr_assert(!data_name_ok(".hidden"));
    cr_assert(!data_name_ok(".."));
    cr_assert(!data_name_ok("a/b"));
    cr_assert(!data_name_ok("a b"));
    cr_assert(!data_name_ok("caf\xc3\xa9"));
}

Test(data, prep_end_to_end) {
    char *work = tu_tmpdir();
    char *in = make_corpus(work);
    char *state = tu_path("%s/state", work);
    char *err;
    int rc = run_prep(work, &err, "--quiet", "--dir", state, "--name", "ds", "--vocab", "300",
                      "--val-fraction", "0.2", in, NULL);
    cr_assert_eq(rc, 0, "prep failed: %s", err);
    cr_assert_str_empty(err, "--quiet still printed: %s", err);
    free(err);

    char *dsdir = tu_path("%s/datasets", state), only[256] = "";
    cr_assert_eq(count_entries(dsdir, only, sizeof only), 1);
    cr_assert_str_eq(only, "ds", "left behind: %s", only);

    data_set_t ds;
    char msg[512];
    cr_assert_eq(data_open(state, "ds", &ds, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(ds.vocab_size, 304);
    cr_assert_eq(ds.n_special, 4);
    cr_assert_eq(ds.bos_id, 300);
    /* val: the last 2 of 10 documents (87 bytes); the sealed test split
     * before it: the last training documents nearest that size, h.txt (63
     * bytes; h and g would be 120). */
    cr_assert_eq(ds.train_docs, 7);
    cr_assert_eq(ds.val_docs, 2);
    cr_assert_eq(ds.test_docs, 1);
    cr_assert_str_empty(ds.no_test);

    /* One BOS per document; token bytes add up to the document bytes. */
    uint64_t want_train = 0, want_val = 0, want_test = 0;
    for (int i = 0; i < 10; i++)
        *(i < 7 ? &want_train : i < 8 ? &want_test : &want_val) += doc_len(i);
    const uint16_t *streams[3] = {ds.train, ds.val, ds.test};
    size_t lens[3] = {ds.n_train, ds.n_val, ds.n_test}, docs[3] = {7, 2, 1};
    uint64_t want[3] = {want_train, want_val, want_test};
    uint64_t have[3] = {ds.train_bytes, ds.val_bytes, ds.test_bytes};
    for (int s = 0; s < 3; s++) {
        size_t bos = 0;
        uint64_t bytes = 0;
        for (size_t i = 0; i < lens[s]; i++) {
            if (streams[s][i] == ds.bos_id) bos++;
            cr_assert_lt(streams[s][i], ds.vocab_size);
            bytes += (uint64_t)ds.token_bytes[streams[s][i]];
        }
        cr_assert_eq(bos, docs[s]);
        cr_assert_eq(bytes, want[s], "split %d: token bytes %lu, documents %lu", s,
                     (unsigned long)bytes, (unsigned long)want[s]);
        cr_assert_eq(have[s], want[s]);
    }
    for (int id = 300; id < 304; id++) cr_assert_eq(ds.token_bytes[id], 0);
    for (int id = 0; id < 256; id++) cr_assert_eq(ds.token_bytes[id], 1);

    /* Decoding each split gives back its documents, in order. */
    char *tpath = tu_path("%s/tokenizer.json", ds.dir);
    tok_t *tok = tok_load(tpath, msg, sizeof msg);
    cr_assert_not_null(tok, "%s", msg);
    cr_assert_eq(tok_vocab_size(tok), 304);
    check_docs(ds.train, ds.n_train, ds.bos_id, tok, 0, 7);
    check_docs(ds.test, ds.n_test, ds.bos_id, tok, 7, 1);
    check_docs(ds.val, ds.n_val, ds.bos_id, tok, 8, 2);

    /* The manifest. */
    char *mpath = tu_path("%s/manifest.json", ds.dir);
    cJSON *m = load_json(mpath);
    cr_assert_str_eq(jstr(m, "name"), "ds");
    cr_assert_str_eq(jstr(m, "dtype"), "uint16");
    cr_assert_eq(jnum(m, "vocab_size"), 304);
    cr_assert_eq(jnum(m, "n_special"), 4);
    cr_assert_eq(jnum(m, "bos_id"), 300);
    cr_assert_eq(jnum(m, "train_tokens"), (double)ds.n_train);
    cr_assert_eq(jnum(m, "val_tokens"), (double)ds.n_val);
    cr_assert_eq(jnum(m, "test_tokens"), (double)ds.n_test);
    cr_assert_eq(jnum(m, "train_docs"), 7);
    cr_assert_eq(jnum(m, "val_docs"), 2);
    cr_assert_eq(jnum(m, "test_docs"), 1);
    cr_assert_eq(jnum(m, "train_bytes"), (double)want_train);
    cr_assert_eq(jnum(m, "val_bytes"), (double)want_val);
    cr_assert_eq(jnum(m, "test_bytes"), (double)want_test);
    /* The manifest records the cut: which documents are sealed. */
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(m, "test_split");
    cr_assert_str_eq(jstr(ts, "method"), "documents");
    cr_assert_eq(jnum(ts, "first_document"), 7);
    cr_assert_eq(jnum(ts, "documents"), 1);
    cr_assert_eq(jnum(ts, "target_bytes"), (double)want_val);
    cr_assert_eq(jnum(ts, "text_bytes"), (double)want_test);
    cr_assert_geq(jnum(m, "tokenizer_seconds"), 0);
    cr_assert_eq(strlen(jstr(m, "created")), 20);
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(m, "val_split");
    cr_assert_str_eq(jstr(vs, "method"), "fraction");
    cr_assert_eq(jnum(vs, "fraction"), 0.2);
    const cJSON *srcs = cJSON_GetObjectItemCaseSensitive(m, "sources");
    cr_assert_eq(cJSON_GetArraySize(srcs), 10, "hidden files must be skipped");
    const cJSON *s0 = cJSON_GetArrayItem(srcs, 0), *s9 = cJSON_GetArrayItem(srcs, 9);
    char *p0 = tu_path("%s/a.txt", in), *p9 = tu_path("%s/sub/j.txt", in);
    cr_assert_str_eq(jstr(s0, "path"), p0);
    cr_assert_str_eq(jstr(s9, "path"), p9);
    cr_assert_eq(jnum(s0, "bytes"), 6);
    /* SHA-256 of "hello\n". */
    cr_assert_str_eq(jstr(s0, "sha256"),
                     "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03");
    cJSON_Delete(m);

    free(p0);
    free(p9);
    free(mpath);
    free(tpath);
    tok_free(tok);
    data_close(&ds);
    free(dsdir);
    free(state);
    free(in);
    tu_rmrf(work);
    free(work);
}

Test(data, val_split_pinned) {
    /* The same inputs give the same split and the same bytes, every time. */
    char *work = tu_tmpdir();
    char *in = make_corpus(work);
    char *state = tu_path("%s/state", work);
    const char *names[2] = {"one", "two"};
    for (int k = 0; k < 2; k++) {
        char *err;
        int rc = run_prep(work, &err, "--quiet", "--dir", state, "--name", names[k], "--vocab",
                          "280", in, NULL);
        cr_assert_eq(rc, 0, "%s", err);
        free(err);
    }
    const char *files[] = {"train.bin", "val.bin", "test.bin", "tokenizer.json", "token_bytes.bin"};
    for (int f = 0; f < 5; f++) {
        char *p1 = tu_path("%s/datasets/one/%s", state, files[f]);
        char *p2 = tu_path("%s/datasets/two/%s", state, files[f]);
        size_t l1, l2;
        char *b1 = tu_read_all(p1, &l1), *b2 = tu_read_all(p2, &l2);
        cr_assert(l1 == l2 && !memcmp(b1, b2, l1), "%s differs between two runs", files[f]);
        free(b1);
        free(b2);
        free(p1);
        free(p2);
    }
    /* Default fraction 0.1 of 10 documents: exactly the last one; the test
     * split the one before (44 bytes against val's 43). */
    data_set_t ds;
    char msg[512];
    cr_assert_eq(data_open(state, "one", &ds, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(ds.val_docs, 1);
    cr_assert_eq(ds.test_docs, 1);
    cr_assert_eq(ds.train_docs, 8);
    cr_assert_eq(ds.val_bytes, doc_len(9));
    cr_assert_eq(ds.test_bytes, doc_len(8));
    data_close(&ds);
    free(state);
    free(in);
    tu_rmrf(work);
    free(work);
}

Test(data, val_files_and_jsonl) {
    char *work = tu_tmpdir();
    /* A JSONL file (blank line skipped, escapes decoded) and a plain file for
     * training; a JSONL file for validation. */
    write_str(work, "train.jsonl",
              "{\"text\": \"first document\\nwith two lines\", \"id\": 1}\n"
              "\n"
              "{\"id\": 2, \"text\": \"second: caf\\u00e9 \\ud83d\\ude00\"}\r\n"
              "{\"text\": \"\"}\n"
              "{\"text\": \"third, no newline at the end\"}");
    write_str(work, "extra.txt", "a plain file is one document\n");
    write_str(work, "val.jsonl", "{\"text\": \"held out one\"}\n{\"text\": \"held out two\"}\n");
    char *tj = tu_path("%s/train.jsonl", work), *ex = tu_path("%s/extra.txt", work);
    char *vj = tu_path("%s/val.jsonl", work), *state = tu_path("%s/state", work);
    char *err;
    int rc = run_prep(work, &err, "--quiet", "--dir", state, "--name", "j", "--vocab", "260",
                      "--test-fraction", "0", "--val", vj, tj, ex, NULL);
    cr_assert_eq(rc, 0, "%s", err);
    free(err);
    data_set_t ds;
    char msg[512];
    cr_assert_eq(data_open(state, "j", &ds, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(ds.train_docs, 4, "the empty text is no document");
    cr_assert_eq(ds.val_docs, 2);
    cr_assert_eq(ds.n_test, 0);
    cr_assert(strstr(ds.no_test, "has no test split (--test-fraction 0)"), "%s", ds.no_test);
    const char *train_text[] = {"first document\nwith two lines",
                                "second: caf\xc3\xa9 \xf0\x9f\x98\x80",
                                "third, no newline at the end", "a plain file is one document\n"};
    uint64_t tb = 0;
    for (int i = 0; i < 4; i++) tb += strlen(train_text[i]);
    cr_assert_eq(ds.train_bytes, tb);
    cr_assert_eq(ds.val_bytes, strlen("held out one") + strlen("held out two"));
    /* The last training document, decoded. */
    char *tpath = tu_path("%s/tokenizer.json", ds.dir);
    tok_t *tok = tok_load(tpath, msg, sizeof msg);
    cr_assert_not_null(tok, "%s", msg);
    size_t last = ds.n_train - 1;
    while (ds.train[last] != ds.bos_id) last--;
    int32_t ids[256];
    size_t n = ds.n_train - last - 1;
    for (size_t i = 0; i < n; i++) ids[i] = ds.train[last + 1 + i];
    char *out;
    size_t outlen;
    cr_assert_eq(tok_decode(tok, ids, n, &out, &outlen, msg, sizeof msg), 0);
    cr_assert_str_eq(out, train_text[3]);
    free(out);

    char *mpath = tu_path("%s/manifest.json", ds.dir);
    cJSON *m = load_json(mpath);
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(m, "val_split");
    cr_assert_str_eq(jstr(vs, "method"), "files");
    const cJSON *srcs = cJSON_GetObjectItemCaseSensitive(m, "sources");
    cr_assert_eq(cJSON_GetArraySize(srcs), 3);
    cr_assert_str_eq(jstr(cJSON_GetArrayItem(srcs, 2), "split"), "val");
    cr_assert_str_eq(jstr(cJSON_GetArrayItem(srcs, 0), "split"), "train");
    cJSON_Delete(m);

    free(mpath);
    tok_free(tok);
    free(tpath);
    data_close(&ds);
    free(tj);
    free(ex);
    free(vj);
    free(state);
    tu_rmrf(work);
    free(work);
}

/* The decoded text of a split's only document. Caller frees. */
static char *decode_one(const data_set_t *ds, const uint16_t *t, size_t n) {
    char msg[512], *out, *tpath = tu_path("%s/tokenizer.json", ds->dir);
    tok_t *tok = tok_load(tpath, msg, sizeof msg);
    cr_assert_not_null(tok, "%s", msg);
    cr_assert(n > 0 && t[0] == ds->bos_id);
    int32_t *ids = malloc(n * sizeof *ids);
    for (size_t i = 1; i < n; i++) ids[i - 1] = t[i];
    size_t outlen;
    cr_assert_eq(tok_decode(tok, ids, n - 1, &out, &outlen, msg, sizeof msg), 0, "%s", msg);
    free(ids);
    tok_free(tok);
    free(tpath);
    return out;
}

/* The sealed test split from --test files, and cut by bytes out of one text
 * file: just before the validation text, as many bytes as it, at a line
 * break, the cut in the manifest; what cannot be cut is no split by
 * default and an error when asked for. */
Test(data, test_split_files_and_bytes) {
    char *work = tu_tmpdir(), *state = tu_path("%s/state", work), *err, msg[512];
    /* A book of 200 numbered lines, one document. */
    char book[200 * 40] = "";
    size_t len = 0;
    for (int i = 0; i < 200; i++)
        len +=
            (size_t)snprintf(book + len, sizeof book - len, "line %03d of the little book.\n", i);
    write_str(work, "book.txt", book);
    write_str(work, "t.jsonl", "{\"text\": \"sealed one\"}\n{\"text\": \"sealed two\"}\n");
    char *bk = tu_path("%s/book.txt", work), *tj = tu_path("%s/t.jsonl", work);

    /* By bytes: val is the last tenth, the test split the tenth before it. */
    cr_assert_eq(
        run_prep(work, &err, "--quiet", "--dir", state, "--name", "b", "--vocab", "260", bk, NULL),
        0, "%s", err);
    free(err);
    data_set_t ds;
    cr_assert_eq(data_open(state, "b", &ds, msg, sizeof msg), 0, "%s", msg);
    char *mpath = tu_path("%s/manifest.json", ds.dir);
    cJSON *m = load_json(mpath);
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(m, "test_split");
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(m, "val_split");
    cr_assert_str_eq(jstr(ts, "method"), "bytes");
    size_t cut = (size_t)jnum(ts, "cut_byte"), end = (size_t)jnum(ts, "end_byte");
    size_t vcut = (size_t)jnum(vs, "cut_byte");
    cr_assert_eq(end, vcut, "the test text ends where the validation text starts");
    cr_assert_eq(book[cut - 1], '\n');
    cr_assert_lt(fabs((double)(end - cut) - (double)(len - vcut)), 40.0, "test %zu, val %zu bytes",
                 end - cut, len - vcut);
    cr_assert_eq(jnum(vs, "train_text_bytes"), (double)cut);
    char *test_text = decode_one(&ds, ds.test, ds.n_test);
    cr_assert(strlen(test_text) == end - cut && !memcmp(test_text, book + cut, end - cut),
              "test.bin holds other text: %s", test_text);
    cr_assert_eq(ds.test_bytes, end - cut);
    cr_assert_eq(ds.train_bytes, cut);
    free(test_text);
    cJSON_Delete(m);
    data_close(&ds);

    /* --test files: those documents, the training text untouched. */
    cr_assert_eq(run_prep(work, &err, "--quiet", "--dir", state, "--name", "f", "--vocab", "260",
                          "--test", tj, bk, NULL),
                 0, "%s", err);
    free(err);
    cr_assert_eq(data_open(state, "f", &ds, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(ds.test_docs, 2);
    cr_assert_eq(ds.test_bytes, strlen("sealed one") + strlen("sealed two"));
    cr_assert_eq(ds.train_bytes + ds.val_bytes, len);
    free(mpath);
    mpath = tu_path("%s/manifest.json", ds.dir);
    m = load_json(mpath);
    cr_assert_str_eq(jstr(cJSON_GetObjectItemCaseSensitive(m, "test_split"), "method"), "files");
    cr_assert_str_eq(jstr(cJSON_GetArrayItem(cJSON_GetObjectItem(m, "sources"), 1), "split"),
                     "test");
    cJSON_Delete(m);
    data_close(&ds);

    /* More than the training text: refused, and nothing is left behind. */
    cr_assert_eq(run_prep(work, &err, "--quiet", "--dir", state, "--name", "x", "--vocab", "260",
                          "--test-fraction", "0.95", bk, NULL),
                 1);
    cr_assert(strstr(err, "--test-fraction 0.95 asks for"), "%s", err);
    free(err);
    cr_assert_eq(run_prep(work, &err, "--quiet", "--dir", state, "--name", "x", "--vocab", "260",
                          "--test-fraction", "0.1", "--test", tj, bk, NULL),
                 2);
    free(err);

    /* One training line that cannot be cut: no test split by default (said
     * on stderr, in the manifest and by data_open), an error when asked. */
    write_str(work, "one.txt", "a single training line without a break");
    write_str(work, "v.txt", "validation text\n");
    char *one = tu_path("%s/one.txt", work), *v = tu_path("%s/v.txt", work);
    cr_assert_eq(run_prep(work, &err, "--dir", state, "--name", "o", "--vocab", "256", "--val", v,
                          one, NULL),
                 0, "%s", err);
    cr_assert(strstr(err, "no test split: the one training document has no line break"), "%s", err);
    free(err);
    cr_assert_eq(data_open(state, "o", &ds, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(ds.n_test, 0);
    cr_assert(strstr(ds.no_test, "has no test split (the one training document"), "%s", ds.no_test);
    data_close(&ds);
    cr_assert_eq(run_prep(work, &err, "--quiet", "--dir", state, "--name", "o2", "--vocab", "256",
                          "--test-fraction", "0.1", "--val", v, one, NULL),
                 1);
    cr_assert(strstr(err, "no line break to cut a test split at"), "%s", err);
    free(err);
    char *o2 = tu_path("%s/datasets/o2", state);
    cr_assert_neq(access(o2, F_OK), 0, "a refused prep left %s", o2);

    free(o2);
    free(one);
    free(v);
    free(mpath);
    free(bk);
    free(tj);
    free(state);
    tu_rmrf(work);
    free(work);
}

/* A dataset prepared before test splits existed (no test fields, no
 * test.bin) still opens, and says it has none. */
Test(data, dataset_without_test_split_still_opens) {
    char *work = tu_tmpdir(), *in = make_corpus(work), *state = tu_path("%s/state", work), *err;
    char msg[512];
    cr_assert_eq(run_prep(work, &err, "--quiet", "--dir", state, "--name", "old", "--vocab", "260",
                          in, NULL),
                 0, "%s", err);
    free(err);
    char *mpath = tu_path("%s/datasets/old/manifest.json", state);
    char *bin = tu_path("%s/datasets/old/test.bin", state);
    cJSON *m = load_json(mpath);
    cJSON_DeleteItemFromObject(m, "test_tokens");
    cJSON_DeleteItemFromObject(m, "test_docs");
    cJSON_DeleteItemFromObject(m, "test_bytes");
    cJSON_DeleteItemFromObject(m, "test_split");
    char *text = cJSON_Print(m);
    tu_write(mpath, text);
    cr_assert_eq(unlink(bin), 0);
    data_set_t ds;
    cr_assert_eq(data_open(state, "old", &ds, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(ds.n_test, 0);
    cr_assert_null(ds.test);
    cr_assert(strstr(ds.no_test, "dataset old was prepared without a test split"), "%s",
              ds.no_test);
    data_close(&ds);
    data_info_t info;
    cr_assert_eq(data_info(state, "old", &info, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(info.test_tokens, 0);
    free(text);
    cJSON_Delete(m);
    free(mpath);
    free(bin);
    free(in);
    free(state);
    tu_rmrf(work);
    free(work);
}

Test(data, refused_inputs_leave_nothing) {
    char *work = tu_tmpdir();
    char *in = make_corpus(work);
    write_str(work, "empty.txt", "");
    write_str(work, "only-hidden/.x.txt", "hidden\n");
    write_str(work, "one/doc.txt", "a single document\n");
    write_str(work, "bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"ok\"}\n{\"text\": broken}\n");
    write_str(work, "nofield.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"no text here\"}\n");
    write_str(work, "notstring.jsonl", "{\"text\": 42}\n");
    write_str(work, "tiny.txt", "abab abab");
    char *emptydir = tu_path("%s/emptydir", work);
    mkdir(emptydir, 0777);
    char *state = tu_path("%s/state", work), *dsdir = tu_path("%s/datasets", state);
    char *p_empty = tu_path("%s/empty.txt", work), *p_hidden = tu_path("%s/only-hidden", work);
    char *p_one = tu_path("%s/one", work), *p_bad = tu_path("%s/bad.jsonl", work);
    char *p_nofield = tu_path("%s/nofield.jsonl", work),
         *p_missing = tu_path("%s/missing.txt", work);
    char *p_notstr = tu_path("%s/notstring.jsonl", work), *p_tiny = tu_path("%s/tiny.txt", work);
    struct {
        const char *vocab, *name, *input, *input2;
        int rc;
        const char *expect;
    } cases[] = {
        {"300", "x", p_empty, NULL, 1, "empty.txt: no text"},
        {"300", "x", emptydir, NULL, 1, "emptydir: no text"},
        {"300", "x", p_hidden, NULL, 1, "only-hidden: no text"},
        {"300", "x", in, p_empty, 1, "empty.txt: no text"},
        {"100", "x", in, NULL, 1, "--vocab 100 is below 256"},
        {"70000", "x", in, NULL, 1,
         "prep: --vocab 70000 plus 4 special tokens exceeds 65536, the most the uint16 token "
         "files hold"},
        {"65533", "x", in, NULL, 1, "65533 plus 4 special tokens exceeds 65536"},
        {"300", "x", p_missing, NULL, 1, "missing.txt: No such file or directory"},
        {"300", "x", p_bad, NULL, 1, "bad.jsonl:3: not a JSON object"},
        {"300", "x", p_nofield, NULL, 1, "nofield.jsonl:2: no \"text\" string field"},
        {"300", "x", p_notstr, NULL, 1, "notstring.jsonl:1: no \"text\" string field"},
        {"300", "x", p_one, NULL, 1, "without a line break to split it at"},
        {"300", "../x", in, NULL, 1, "--name '../x'"},
        {"300", ".x", in, NULL, 1, "--name '.x'"},
        {"3000", "x", in, NULL, 1, "the text allows only"},
        {"abc", "x", in, NULL, 2, "--vocab abc is not an integer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *err;
        int rc = cases[i].input2
                     ? run_prep(work, &err, "--dir", state, "--name", cases[i].name, "--vocab",
                                cases[i].vocab, cases[i].input, cases[i].input2, NULL)
                     : run_prep(work, &err, "--dir", state, "--name", cases[i].name, "--vocab",
                                cases[i].vocab, cases[i].input, NULL);
        cr_assert_eq(rc, cases[i].rc, "case %zu: exit %d: %s", i, rc, err);
        cr_assert(strstr(err, cases[i].expect), "case %zu: expected \"%s\" in:\n%s", i,
                  cases[i].expect, err);
        char left[256] = "";
        cr_assert_eq(count_entries(dsdir, left, sizeof left), 0, "case %zu left %s behind", i,
                     left);
        free(err);
    }
    /* Permission bits do not stop root, so this case needs another user. */
    if (geteuid() != 0) {
        char *p_locked = tu_path("%s/in.d/b.txt", work);
        chmod(p_locked, 0);
        char *err;
        int rc = run_prep(work, &err, "--dir", state, "--name", "x", "--vocab", "300", in, NULL);
        cr_assert_eq(rc, 1);
        cr_assert(strstr(err, "b.txt: Permission denied"), "%s", err);
        cr_assert_eq(count_entries(dsdir, NULL, 0), 0);
        chmod(p_locked, 0644);
        free(err);
        free(p_locked);
    }
    /* Usage errors. */
    char *err;
    cr_assert_eq(run_prep(work, &err, "--dir", state, "--name", "x", "--vocab", "300", NULL), 2);
    cr_assert(strstr(err, "no INPUT"), "%s", err);
    free(err);
    cr_assert_eq(run_prep(work, &err, "--dir", state, "--name", "x", "--vocab", "300",
                          "--val-fraction", "1.5", in, NULL),
                 2);
    cr_assert(strstr(err, "--val-fraction 1.5"), "%s", err);
    free(err);
    cr_assert_eq(run_prep(work, &err, "--dir", state, "--name", "x", "--vocab", "300",
                          "--val-fraction", "0.5", "--val", p_one, in, NULL),
                 2);
    free(err);
    cr_assert_eq(run_prep(work, &err, "--bogus", NULL), 2);
    cr_assert(strstr(err, "unknown option --bogus"), "%s", err);
    free(err);
    cr_assert_eq(count_entries(dsdir, NULL, 0), 0);

    free(p_empty);
    free(p_hidden);
    free(p_one);
    free(p_bad);
    free(p_nofield);
    free(p_missing);
    free(p_notstr);
    free(p_tiny);
    free(emptydir);
    free(state);
    free(dsdir);
    free(in);
    tu_rmrf(work);
    free(work);
}

Test(data, existing_dataset_and_force) {
    char *work = tu_tmpdir();
    char *in = make_corpus(work);
    char *state = tu_path("%s/state", work), *dsdir = tu_path("%s/datasets", state);
    char *err;
    cr_assert_eq(
        run_prep(work, &err, "--quiet", "--dir", state, "--name", "d", "--vocab", "270", in, NULL),
        0, "%s", err);
    free(err);
    /* A second prep without --force is refused and leaves the first intact. */
    cr_assert_eq(
        run_prep(work, &err, "--quiet", "--dir", state, "--name", "d", "--vocab", "290", in, NULL),
        1);
    cr_assert(strstr(err, "already exists"), "%s", err);
    free(err);
    data_set_t ds;
    char msg[512];
    cr_assert_eq(data_open(state, "d", &ds, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(ds.vocab_size, 274);
    data_close(&ds);
    /* A failing --force run leaves the old one in place too. */
    cr_assert_eq(run_prep(work, &err, "--quiet", "--force", "--dir", state, "--name", "d",
                          "--vocab", "70000", in, NULL),
                 1);
    free(err);
    cr_assert_eq(data_open(state, "d", &ds, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(ds.vocab_size, 274);
    data_close(&ds);
    /* With --force it is replaced, and nothing else remains. */
    cr_assert_eq(run_prep(work, &err, "--quiet", "--force", "--dir", state, "--name", "d",
                          "--vocab", "290", in, NULL),
                 0, "%s", err);
    free(err);
    cr_assert_eq(data_open(state, "d", &ds, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(ds.vocab_size, 294);
    data_close(&ds);
    char only[256] = "";
    cr_assert_eq(count_entries(dsdir, only, sizeof only), 1, "left: %s", only);
    free(state);
    free(dsdir);
    free(in);
    tu_rmrf(work);
    free(work);
}

Test(data, open_rejects_damaged_datasets) {
    char *work = tu_tmpdir();
    char *in = make_corpus(work);
    char *state = tu_path("%s/state", work);
    char *err;
    cr_assert_eq(
        run_prep(work, &err, "--quiet", "--dir", state, "--name", "d", "--vocab", "260", in, NULL),
        0, "%s", err);
    free(err);
    data_set_t ds;
    char msg[512];
    cr_assert_eq(data_open(state, "nope", &ds, msg, sizeof msg), -1);
    cr_assert(strstr(msg, "manifest.json"), "%s", msg);
    cr_assert_eq(data_open(state, "../d", &ds, msg, sizeof msg), -1);
    cr_assert(strstr(msg, "not a valid name"), "%s", msg);

    /* An id past the vocabulary. */
    char *vpath = tu_path("%s/datasets/d/val.bin", state);
    size_t vlen;
    char *orig = tu_read_all(vpath, &vlen);
    uint16_t bad = 264;
    FILE *f = fopen(vpath, "r+b");
    fseek(f, 2, SEEK_SET);
    fwrite(&bad, 2, 1, f);
    fclose(f);
    cr_assert_eq(data_open(state, "d", &ds, msg, sizeof msg), -1);
    cr_assert(strstr(msg, "val.bin: token 1 is 264"), "%s", msg);
    /* A truncated file. */
    write_file(state, "datasets/d/val.bin", orig, vlen - 2);
    cr_assert_eq(data_open(state, "d", &ds, msg, sizeof msg), -1);
    cr_assert(strstr(msg, "val.bin"), "%s", msg);
    /* A missing BOS. */
    write_file(state, "datasets/d/val.bin", orig, vlen);
    uint16_t a = 'a';
    memcpy(orig, &a, 2);
    write_file(state, "datasets/d/val.bin", orig, vlen);
    cr_assert_eq(data_open(state, "d", &ds, msg, sizeof msg), -1);
    cr_assert(strstr(msg, "BOS"), "%s", msg);
    /* token_bytes.bin of the wrong size. */
    write_file(state, "datasets/d/token_bytes.bin", "abcd", 4);
    cr_assert_eq(data_open(state, "d", &ds, msg, sizeof msg), -1);
    cr_assert(strstr(msg, "token_bytes.bin"), "%s", msg);
    free(orig);
    free(vpath);
    free(state);
    free(in);
    tu_rmrf(work);
    free(work);
}

Test(data, binary_prep_command, .timeout = 60) {
    const char *bin = getenv("NIGHTSHIFT_BIN");
    if (!bin || access(bin, X_OK)) cr_skip_test("NIGHTSHIFT_BIN is not set to the built binary");
    char *work = tu_tmpdir();
    char *in = make_corpus(work);
    char *state = tu_path("%s/state", work);
    tu_run_t r;
    tu_run_bin(&r, 60, "prep", "--help", NULL);
    cr_assert_eq(r.exit_code, 0, "exit %d", r.exit_code);
    tu_run_free(&r);
    tu_run_bin(&r, 60, "prep", "--dir", state, "--name", "b", "--vocab", "70000", in, NULL);
    cr_assert_eq(r.exit_code, 1, "exit %d", r.exit_code);
    cr_assert_str_eq(r.err, "prep: --vocab 70000 plus 4 special tokens exceeds 65536, the most "
                            "the uint16 token files hold\n");
    tu_run_free(&r);
    tu_run_bin(&r, 60, "prep", "--dir", state, "--name", "b", "--vocab", "280", in, NULL);
    cr_assert_eq(r.exit_code, 0, "exit %d", r.exit_code);
    cr_assert(strstr(r.err, "tok: merge 24/24"), "no progress on stderr:\n%s", r.err);
    tu_run_free(&r);
    data_set_t ds;
    char msg[512];
    cr_assert_eq(data_open(state, "b", &ds, msg, sizeof msg), 0, "%s", msg);
    data_close(&ds);
    free(state);
    free(in);
    tu_rmrf(work);
    free(work);
}

/* ---- the training-row sampler ------------------------------------------------------ */

/* A dataset whose training stream is two different texts, one after the other:
 * ten documents of lowercase letters, then ten of uppercase and digits (plus
 * two validation documents). Returns the state directory (caller frees); the
 * dataset is "halves", pure bytes. */
static char *make_halves(const char *work) {
    char text[1601], *in = tu_path("%s/halves", work);
    for (int d = 0; d < 22; d++) {
        const char *alphabet = d < 10 ? "abcdefghijklm " : "NOPQRSTUVWXYZ0123456789";
        size_t k = strlen(alphabet);
        for (size_t i = 0; i < sizeof text - 1; i++) text[i] = alphabet[(i * 7 + (size_t)d) % k];
        text[sizeof text - 1] = 0;
        char *rel = tu_path("halves/%02d.txt", d);
        write_str(work, rel, text);
        free(rel);
    }
    char *state = tu_path("%s/state", work), *err;
    int rc = run_prep(work, &err, "--quiet", "--dir", state, "--name", "halves", "--vocab", "256",
                      "--val-fraction", "0.09", "--test-fraction", "0", in, NULL);
    cr_assert_eq(rc, 0, "prep failed: %s", err);
    free(err);
    free(in);
    return state;
}

/* The half a row at off comes from: 0 or 1 by the first token that only one
 * half uses (seen[] marks them: bit 0 first half, bit 1 second half). */
static int row_half(const data_set_t *ds, const unsigned char *seen, size_t off, size_t T) {
    for (size_t t = 0; t <= T; t++) {
        unsigned char s = seen[ds->train[off + t]];
        if (s == 1 || s == 2) return s - 1;
    }
    cr_assert_fail("row at %zu holds no token of either half", off);
    return -1;
}

Test(data, random_rows_cover_both_halves) {
    char *work = tu_tmpdir(), *state = make_halves(work), msg[512];
    data_set_t ds;
    cr_assert_eq(data_open(state, "halves", &ds, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(ds.train_docs, 20);

    /* The texts differ: no token except BOS occurs in both halves. */
    size_t boundary = 0, bos = 0;
    while (boundary < ds.n_train && !(ds.train[boundary] == ds.bos_id && ++bos == 11)) boundary++;
    cr_assert_lt(boundary, ds.n_train);
    unsigned char seen[DATA_MAX_TOKENS] = {0};
    for (size_t i = 0; i < ds.n_train; i++)
        if (ds.train[i] != ds.bos_id) seen[ds.train[i]] |= i < boundary ? 1 : 2;
    for (int id = 0; id < ds.vocab_size; id++) cr_assert_neq(seen[id], 3, "token %d in both", id);
    double first_share = (double)boundary / (double)ds.n_train; /* about 1/2 */

    /* A short run: 16 steps of 16 rows of 33 tokens, about a fifth of the
     * stream. Every seed's rows come from both halves in proportion. */
    const size_t T = 32, rows = 256;
    for (uint64_t seed = 1; seed <= 5; seed++) {
        data_sampler_t s, again;
        data_sampler_init(&s, DATA_SAMPLE_RANDOM, ds.n_train, T, seed);
        data_sampler_init(&again, DATA_SAMPLE_RANDOM, ds.n_train, T, seed);
        size_t in_first = 0;
        for (size_t r = 0; r < rows; r++) {
            size_t off = data_sampler_next(&s);
            cr_assert_leq(off + T, ds.n_train - 1, "row at %zu runs past the stream", off);
            cr_assert_eq(data_sampler_next(&again), off, "seed %lu: not reproducible",
                         (unsigned long)seed);
            in_first += row_half(&ds, seen, off, T) == 0;
        }
        double share = (double)in_first / rows;
        cr_expect(fabs(share - first_share) < 0.1,
                  "seed %lu: %.2f of the rows from the first half, which is %.2f of the stream",
                  (unsigned long)seed, share, first_share);
    }

    /* The sequential walk still walks: consecutive rows T apart from a seeded
     * start, wrapping to 0, staying in one region for a short run. */
    data_sampler_t s;
    data_sampler_init(&s, DATA_SAMPLE_SEQUENTIAL, ds.n_train, T, 1);
    size_t prev = data_sampler_next(&s), wraps = 0;
    for (size_t r = 1; r < 2 * ds.n_train / T; r++) {
        size_t off = data_sampler_next(&s);
        cr_assert_leq(off + T, ds.n_train - 1);
        if (off == 0 && prev + 2 * T + 1 > ds.n_train)
            wraps++;
        else
            cr_assert_eq(off, prev + T, "row %zu at %zu after %zu", r, off, prev);
        prev = off;
    }
    cr_expect(wraps >= 1 && wraps <= 2, "%zu wraps over two passes", wraps);
    data_close(&ds);
    free(state);
    tu_rmrf(work);
    free(work);
}

/* ckpt.c - safetensors checkpoints: write a gpt_t's tensors atomically, read
 * and check a file, load one into a model.
 *
 * Layout written: u64 LE header length N, N bytes of JSON (padded with spaces
 * so the data starts on an 8-byte boundary), then every tensor's float32 data
 * back to back in the model's table order. Reading trusts nothing: the header
 * length, the JSON, every dtype, shape and offset are checked, and the tensors
 * must tile the data section exactly (no gaps, no overlap, no trailing bytes).
 *
 * Ownership: ckpt_read fills a caller-owned ckpt_file_t whose tensor array,
 * metadata string and data buffer are released by ckpt_file_close. */
#include "engine/ckpt.h"
#include "engine/util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tensor data is written and read as the host's floats: the file format is
 * little-endian, so only little-endian hosts are supported. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "ckpt.c assumes a little-endian host");
_Static_assert(sizeof(float) == 4, "ckpt.c assumes 32-bit floats");

#define CKPT_MAX_HEADER (100u * 1024u * 1024u) /* bytes of JSON we accept */
#define CKPT_MAX_DIMS   4

/* ---------------------------------------------------------------- writing */

/* Builds the header JSON: "__metadata__" first (if any), then one entry per
 * tensor in table order with offsets relative to the data section. Returns a
 * malloc'd string (caller frees), padded with spaces so 8 + its length is a
 * multiple of 8, and its length in *len; NULL with err on failure. */
static char *build_header(const gpt_t *m, const char *metadata_json, size_t *len, char *err,
                          size_t errlen) {
    char *text = NULL, *padded = NULL;
    cJSON *root = cJSON_CreateObject();
    if (!root) goto oom;
    if (metadata_json) {
        cJSON *meta = cJSON_Parse(metadata_json);
        if (!meta || !cJSON_IsObject(meta)) {
            cJSON_Delete(meta);
            util_errorf(err, errlen, "ckpt: metadata is not a JSON object");
            goto fail;
        }
        for (cJSON *it = meta->child; it; it = it->next) {
            if (!cJSON_IsString(it)) {
                util_errorf(err, errlen, "ckpt: metadata value \"%s\" is not a string", it->string);
                cJSON_Delete(meta);
                goto fail;
            }
        }
        cJSON_AddItemToObject(root, "__metadata__", meta);
    }
    size_t off = 0; /* bytes into the data section */
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor_t *t = &m->tensors[i];
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        if (!e || !cJSON_AddStringToObject(e, "dtype", "F32")) goto oom;
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        if (!shape || !offs) goto oom;
        cJSON_AddItemToArray(shape, cJSON_CreateNumber(t->rows));
        if (t->ndim == 2) cJSON_AddItemToArray(shape, cJSON_CreateNumber(t->cols));
        size_t end = off + t->numel * sizeof(float);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)end));
        if (cJSON_GetArraySize(shape) != t->ndim || cJSON_GetArraySize(offs) != 2) goto oom;
        off = end;
    }
    text = cJSON_PrintUnformatted(root);
    if (!text) goto oom;
    size_t n = strlen(text);
    size_t npad = (8 - (8 + n) % 8) % 8;
    padded = malloc(n + npad + 1);
    if (!padded) goto oom;
    memcpy(padded, text, n);
    memset(padded + n, ' ', npad);
    padded[n + npad] = '\0';
    *len = n + npad;
    free(text);
    cJSON_Delete(root);
    return padded;
oom:
    util_errorf(err, errlen, "ckpt: out of memory building the header");
fail:
    free(text);
    cJSON_Delete(root);
    return NULL;
}

/* Directory part of path for the fsync after rename; "." when there is none.
 * Writes into buf (size buflen). */
static void dir_of(const char *path, char *buf, size_t buflen) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(buf, buflen, ".");
    } else if (slash == path) {
        snprintf(buf, buflen, "/");
    } else {
        snprintf(buf, buflen, "%.*s", (int)(slash - path), path);
    }
}

int ckpt_write(const gpt_t *m, const float *base, const char *metadata_json, const char *path,
               char *err, size_t errlen) {
    char tmp[4096], dir[4096];
    char *header = NULL;
    FILE *f = NULL;
    int fd = -1, tmp_made = 0;
    size_t hlen = 0;

    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        util_errorf(err, errlen, "ckpt: path too long: %s", path);
        goto fail;
    }
    header = build_header(m, metadata_json, &hlen, err, errlen);
    if (!header) goto fail;

    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        util_errorf(err, errlen, "ckpt: cannot create %s: %s", tmp, strerror(errno));
        goto fail;
    }
    tmp_made = 1;
    f = fdopen(fd, "wb");
    if (!f) {
        util_errorf(err, errlen, "ckpt: %s: %s", tmp, strerror(errno));
        goto fail;
    }
    fd = -1; /* now owned by f */

    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    if (fwrite(len8, 1, 8, f) != 8 || fwrite(header, 1, hlen, f) != hlen) goto write_fail;
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor_t *t = &m->tensors[i];
        if (fwrite(base + t->offset, sizeof(float), t->numel, f) != t->numel) goto write_fail;
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) goto write_fail;
    int rc = fclose(f);
    f = NULL;
    if (rc != 0) goto write_fail;
    if (rename(tmp, path) != 0) {
        util_errorf(err, errlen, "ckpt: cannot rename %s to %s: %s", tmp, path, strerror(errno));
        goto fail;
    }
    tmp_made = 0;

    /* Make the rename itself durable. */
    dir_of(path, dir, sizeof dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0) {
        util_errorf(err, errlen, "ckpt: cannot sync directory %s: %s", dir, strerror(errno));
        if (dfd >= 0) close(dfd);
        goto fail;
    }
    close(dfd);
    free(header);
    return 0;

write_fail:
    util_errorf(err, errlen, "ckpt: cannot write %s: %s", tmp, strerror(errno ? errno : EIO));
fail:
    if (f) fclose(f);
    if (fd >= 0) close(fd);
    if (tmp_made) unlink(tmp);
    free(header);
    return -1;
}

/* ---------------------------------------------------------------- reading */

/* A non-negative integer JSON number no larger than 2^53 (exact in a double). */
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || d != floor(d)) return -1;
    *out = (uint64_t)d;
    return 0;
}

/* Shape as "[a,b]" for messages, into buf. */
static void fmt_shape(char *buf, size_t buflen, int ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, buflen, "[");
    for (int i = 0; i < ndim && n < buflen; i++)
        n += (size_t)snprintf(buf + n, buflen - n, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (n < buflen) snprintf(buf + n, buflen - n, "]");
}

/* Parse one tensor entry into t (name, shape, numel) and its byte range. */
static int parse_entry(const char *path, const cJSON *e, ckpt_tensor_t *t, uint64_t *begin,
                       uint64_t *end, char *err, size_t errlen) {
    const char *name = e->string;
    if (strlen(name) >= sizeof t->name)
        return util_errorf(err, errlen, "ckpt: %s: tensor name too long: %.60s...", path, name);
    snprintf(t->name, sizeof t->name, "%s", name);
    if (!cJSON_IsObject(e))
        return util_errorf(err, errlen, "ckpt: %s: entry %s is not an object", path, name);
    for (const cJSON *k = e->child; k; k = k->next) {
        if (strcmp(k->string, "dtype") && strcmp(k->string, "shape") &&
            strcmp(k->string, "data_offsets"))
            return util_errorf(err, errlen, "ckpt: %s: tensor %s has unknown field \"%s\"", path,
                               name, k->string);
    }
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dtype))
        return util_errorf(err, errlen, "ckpt: %s: tensor %s has no dtype string", path, name);
    if (strcmp(dtype->valuestring, "F32") != 0)
        return util_errorf(err, errlen,
                           "ckpt: %s: tensor %s has dtype %.16s, only F32 is supported", path, name,
                           dtype->valuestring);
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > CKPT_MAX_DIMS)
        return util_errorf(err, errlen,
                           "ckpt: %s: tensor %s: shape must be an array of at most %d dims", path,
                           name, CKPT_MAX_DIMS);
    t->ndim = cJSON_GetArraySize(shape);
    uint64_t numel = 1;
    int d = 0;
    for (const cJSON *v = shape->child; v; v = v->next, d++) {
        uint64_t dim;
        if (json_uint(v, &dim) != 0)
            return util_errorf(err, errlen,
                               "ckpt: %s: tensor %s: shape entries must be non-negative integers",
                               path, name);
        /* The data section bounds numel far below this; it only stops overflow. */
        if (dim && numel > (UINT64_C(1) << 60) / dim)
            return util_errorf(err, errlen, "ckpt: %s: tensor %s: shape too large", path, name);
        t->shape[d] = (int64_t)dim;
        numel *= dim;
    }
    t->numel = (size_t)numel;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        json_uint(cJSON_GetArrayItem(offs, 0), begin) != 0 ||
        json_uint(cJSON_GetArrayItem(offs, 1), end) != 0)
        return util_errorf(
            err, errlen,
            "ckpt: %s: tensor %s: data_offsets must be two non-negative integers [begin,end]", path,
            name);
    if (*end < *begin || *end - *begin != numel * sizeof(float)) {
        char sh[96];
        fmt_shape(sh, sizeof sh, t->ndim, t->shape);
        util_errorf(err, errlen,
                    "ckpt: %s: tensor %s: data_offsets [%llu,%llu] do not hold %s F32 (%llu bytes)",
                    path, name, (unsigned long long)*begin, (unsigned long long)*end, sh,
                    (unsigned long long)(numel * sizeof(float)));
        return -1;
    }
    return 0;
}

typedef struct {
    uint64_t begin, end;
    int idx;
} span_t;

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int span_cmp(const void *a, const void *b) {
    const span_t *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Reads exactly n bytes or fails (short file, I/O error). */
static int read_exact(FILE *f, void *buf, size_t n) {
    return fread(buf, 1, n, f) == n ? 0 : -1;
}

/* The 8-byte length and the JSON header of path (open as fp): *header is
 * malloc'd (NUL-terminated, *hlen bytes), *fsize the file's size. */
static int read_header(FILE *fp, const char *path, uint64_t *fsize, char **header, uint64_t *hlen,
                       char *err, size_t errlen) {
    struct stat st;
    unsigned char len8[8];
    if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode))
        return util_errorf(err, errlen, "ckpt: %s is not a regular file", path);
    *fsize = (uint64_t)st.st_size;
    if (*fsize < 8 || read_exact(fp, len8, 8) != 0)
        return util_errorf(err, errlen,
                           "ckpt: %s: file too short for a safetensors header (%llu bytes)", path,
                           (unsigned long long)*fsize);
    *hlen = 0;
    for (int i = 0; i < 8; i++) *hlen |= (uint64_t)len8[i] << (8 * i);
    if (*hlen == 0 || *hlen > CKPT_MAX_HEADER || *hlen > *fsize - 8)
        return util_errorf(
            err, errlen, "ckpt: %s: header length %llu is invalid (file is %llu bytes, limit %u)",
            path, (unsigned long long)*hlen, (unsigned long long)*fsize, CKPT_MAX_HEADER);
    if (!(*header = malloc(*hlen + 1)))
        return util_errorf(err, errlen, "ckpt: %s: out of memory", path);
    if (read_exact(fp, *header, *hlen) != 0)
        return util_errorf(err, errlen, "ckpt: %s: cannot read the header", path);
    (*header)[*hlen] = '\0';
    return 0;
}

/* The header as a JSON object, which may be followed by padding spaces and
 * nothing else; NULL with err. The caller deletes it. */
static cJSON *parse_header(const char *path, const char *header, uint64_t hlen, char *err,
                           size_t errlen) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(header, hlen, &end, 0);
    for (const char *p = end; root && end && p < header + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            root = NULL;
        }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        util_errorf(err, errlen, "ckpt: %s: header is not a valid JSON object", path);
        return NULL;
    }
    return root;
}

/* The __metadata__ entry e into f->metadata: an object of strings, once. */
static int read_metadata(const char *path, const cJSON *e, ckpt_file_t *f, char *err,
                         size_t errlen) {
    if (f->metadata) return util_errorf(err, errlen, "ckpt: %s: duplicate __metadata__", path);
    if (!cJSON_IsObject(e))
        return util_errorf(err, errlen, "ckpt: %s: __metadata__ is not an object", path);
    for (const cJSON *v = e->child; v; v = v->next)
        if (!cJSON_IsString(v))
            return util_errorf(err, errlen, "ckpt: %s: __metadata__ value \"%s\" is not a string",
                               path, v->string);
    if (!(f->metadata = cJSON_PrintUnformatted(e)))
        return util_errorf(err, errlen, "ckpt: %s: out of memory", path);
    return 0;
}

/* Every entry of root into f->tensors and spans (the metadata aside), and
 * the names unique (JSON objects may repeat keys; cJSON keeps both). */
static int read_entries(const char *path, const cJSON *root, ckpt_file_t *f, span_t *spans,
                        const char **names, char *err, size_t errlen) {
    for (const cJSON *e = root->child; e; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) {
            if (read_metadata(path, e, f, err, errlen)) return -1;
            continue;
        }
        ckpt_tensor_t *t = &f->tensors[f->n];
        if (parse_entry(path, e, t, &spans[f->n].begin, &spans[f->n].end, err, errlen)) return -1;
        spans[f->n].idx = f->n;
        f->n++;
    }
    for (int i = 0; i < f->n; i++) names[i] = f->tensors[i].name;
    qsort(names, (size_t)f->n, sizeof *names, name_cmp);
    for (int i = 1; i < f->n; i++)
        if (!strcmp(names[i - 1], names[i]))
            return util_errorf(err, errlen, "ckpt: %s: duplicate tensor %s", path, names[i]);
    return 0;
}

/* The tensors must tile [0, dlen) exactly (spans sorted here). Every size is
 * a multiple of 4 and the first begins at 0, so every float is aligned. */
static int check_tiling(const char *path, const ckpt_file_t *f, span_t *spans, uint64_t dlen,
                        char *err, size_t errlen) {
    uint64_t pos = 0;
    qsort(spans, (size_t)f->n, sizeof *spans, span_cmp);
    for (int i = 0; i < f->n; i++) {
        const char *name = f->tensors[spans[i].idx].name;
        if (spans[i].end > dlen)
            return util_errorf(err, errlen,
                               "ckpt: %s: tensor %s: data_offsets end %llu is past the data "
                               "section (%llu bytes)",
                               path, name, (unsigned long long)spans[i].end,
                               (unsigned long long)dlen);
        if (spans[i].begin < pos)
            return util_errorf(err, errlen, "ckpt: %s: tensor %s overlaps %s", path, name,
                               f->tensors[spans[i - 1].idx].name);
        if (spans[i].begin > pos)
            return util_errorf(err, errlen, "ckpt: %s: unused bytes [%llu,%llu) before tensor %s",
                               path, (unsigned long long)pos, (unsigned long long)spans[i].begin,
                               name);
        pos = spans[i].end;
    }
    if (pos != dlen)
        return util_errorf(err, errlen, "ckpt: %s: %llu trailing bytes after the last tensor", path,
                           (unsigned long long)(dlen - pos));
    return 0;
}

/* The data section (dlen bytes) into f->buf, each tensor pointing into it. */
static int read_data(FILE *fp, const char *path, ckpt_file_t *f, const span_t *spans, uint64_t dlen,
                     char *err, size_t errlen) {
    f->buflen = (size_t)dlen;
    if (!(f->buf = malloc(dlen ? (size_t)dlen : 1)))
        return util_errorf(err, errlen, "ckpt: %s: out of memory for %llu bytes of data", path,
                           (unsigned long long)dlen);
    if (read_exact(fp, f->buf, (size_t)dlen) != 0)
        return util_errorf(err, errlen, "ckpt: %s: cannot read the data section", path);
    for (int i = 0; i < f->n; i++)
        f->tensors[spans[i].idx].data = (const float *)((const char *)f->buf + spans[i].begin);
    return 0;
}

int ckpt_read(const char *path, ckpt_file_t *f, char *err, size_t errlen) {
    char *header = NULL;
    cJSON *root = NULL;
    span_t *spans = NULL;
    const char **names = NULL;
    uint64_t fsize = 0, hlen = 0;
    int rc = -1;
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        util_errorf(err, errlen, "ckpt: cannot open %s: %s", path, strerror(errno));
        goto done;
    }
    if (read_header(fp, path, &fsize, &header, &hlen, err, errlen) ||
        !(root = parse_header(path, header, hlen, err, errlen)))
        goto done;
    int n_entries = cJSON_GetArraySize(root);
    f->tensors = calloc((size_t)n_entries + 1, sizeof *f->tensors);
    spans = calloc((size_t)n_entries + 1, sizeof *spans);
    names = calloc((size_t)n_entries + 1, sizeof *names);
    if (!f->tensors || !spans || !names) {
        util_errorf(err, errlen, "ckpt: %s: out of memory", path);
        goto done;
    }
    uint64_t dlen = fsize - 8 - hlen;
    rc = read_entries(path, root, f, spans, names, err, errlen) ||
                 check_tiling(path, f, spans, dlen, err, errlen) ||
                 read_data(fp, path, f, spans, dlen, err, errlen)
             ? -1
             : 0;
done:
    if (fp) fclose(fp);
    free(header);
    free(spans);
    free(names);
    cJSON_Delete(root);
    if (rc) ckpt_file_close(f);
    return rc;
}

/* Returns a pointer into f (valid until ckpt_file_close), or NULL. */
const ckpt_tensor_t *ckpt_file_find(const ckpt_file_t *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

void ckpt_file_close(ckpt_file_t *f) {
    if (!f) return;
    free(f->tensors);
    free(f->metadata); /* cJSON_PrintUnformatted allocates with malloc */
    free(f->buf);
    memset(f, 0, sizeof *f);
}

/* ---------------------------------------------------------------- loading */

static int model_has(const gpt_t *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return 1;
    return 0;
}

int ckpt_load(gpt_t *m, const char *path, char *err, size_t errlen) {
    ckpt_file_t f;
    if (ckpt_read(path, &f, err, errlen) != 0) return -1;

    /* Check everything before copying anything, so m is unchanged on failure. */
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor_t *t = &m->tensors[i];
        const ckpt_tensor_t *c = ckpt_file_find(&f, t->name);
        if (!c) {
            util_errorf(err, errlen, "ckpt: missing tensor %s", t->name);
            goto fail;
        }
        int64_t want[2] = {t->rows, t->cols};
        if (c->ndim != t->ndim || c->shape[0] != want[0] ||
            (t->ndim == 2 && c->shape[1] != want[1])) {
            char got_s[96], want_s[96];
            fmt_shape(got_s, sizeof got_s, c->ndim, c->shape);
            fmt_shape(want_s, sizeof want_s, t->ndim, want);
            util_errorf(err, errlen, "ckpt: tensor %s has shape %s, model expects %s", t->name,
                        got_s, want_s);
            goto fail;
        }
    }
    for (int i = 0; i < f.n; i++) {
        if (!model_has(m, f.tensors[i].name)) {
            util_errorf(err, errlen, "ckpt: unexpected tensor %s", f.tensors[i].name);
            goto fail;
        }
    }
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor_t *t = &m->tensors[i];
        const ckpt_tensor_t *c = ckpt_file_find(&f, t->name);
        memcpy(m->params + t->offset, c->data, t->numel * sizeof(float));
    }
    ckpt_file_close(&f);
    return 0;
fail:
    ckpt_file_close(&f);
    return -1;
}
